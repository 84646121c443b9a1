//! The reduce family (`reduceSum`, `reduceMean`, `reduceMax`, ...) over
//! any set of axes: one invocation per output element walks the reduced
//! elements. One generated WGSL source per (reduction, type). argMin,
//! argMax and cumulativeSum walk one axis per invocation
//! (`shaders/argminmax.wgsl`, `shaders/cumsum.wgsl`).

use super::elementwise::INT64;
use super::{convert, is_float, is_word, word, Gpu, NodeIo, Step};
use crate::error::{Error, Result};
use crate::graph::ops::reduce::{ReduceKind, ReduceOp};
use crate::types::{DataType, OperandDescriptor};

/// Row-major element strides of `shape`.
fn strides(shape: &[usize]) -> Vec<u64> {
    let mut s = vec![1u64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1] as u64;
    }
    s
}

/// The reduction's loop and result: `(init, step on acc and v, result)`,
/// or None where the kind does not take `dt`.
fn body(kind: ReduceKind, dt: DataType) -> Option<(String, String, String)> {
    use ReduceKind::*;
    let t = convert::compute_type(dt);
    let float = t == "f32";
    let zero = format!("{t}(0)");
    let plain = |init: &str, step: &str, result: &str| {
        Some((init.to_string(), step.to_string(), result.to_string()))
    };
    if t == "vec2<u32>" {
        // Word pairs: the comparisons and the wrapping sums and products
        // of shaders/int64.wgsl (the spec allows 64-bit integers for the
        // sums and products).
        let signed = dt == DataType::Int64;
        let abs = if signed { "abs64(v)" } else { "v" };
        let zero = "vec2<u32>(0u, 0u)";
        match kind {
            Sum => return plain(zero, "add64(acc, v)", "acc"),
            L1 => return plain(zero, &format!("add64(acc, {abs})"), "acc"),
            SumSquare => return plain(zero, "add64(acc, mul64(v, v))", "acc"),
            Product => return plain("vec2<u32>(1u, 0u)", "mul64(acc, v)", "acc"),
            _ => {}
        }
        let (lt, lowest, highest) = if signed {
            ("lt_s64", "0u, 0x80000000u", "0xffffffffu, 0x7fffffffu")
        } else {
            ("lt_u64", "0u, 0u", "0xffffffffu, 0xffffffffu")
        };
        return match kind {
            Max => plain(
                &format!("vec2<u32>({lowest})"),
                &format!("select(acc, v, {lt}(acc, v))"),
                "acc",
            ),
            Min => plain(
                &format!("vec2<u32>({highest})"),
                &format!("select(acc, v, {lt}(v, acc))"),
                "acc",
            ),
            _ => None,
        };
    }
    let (lowest, highest) = match t {
        "f32" => ("-inf()", "inf()"),
        "i32" => ("i32(-2147483647 - 1)", "2147483647"),
        _ => ("0u", "4294967295u"),
    };
    match kind {
        Sum => plain(&zero, "acc + v", "acc"),
        L1 => plain(&zero, "acc + abs(v)", "acc"),
        SumSquare => plain(&zero, "acc + v * v", "acc"),
        Product => plain(&format!("{t}(1)"), "acc * v", "acc"),
        Mean if float => plain("0.0", "acc + v", "acc / f32(p[3])"),
        L2 if float => plain("0.0", "acc + v * v", "sqrt(acc)"),
        LogSum if float => plain("0.0", "acc + v", "log_r(acc)"),
        // NaN propagates through the flag `nan`.
        Max if float => plain(lowest, "max(acc, v)", "select(acc, nanv(), nan)"),
        Min if float => plain(highest, "min(acc, v)", "select(acc, nanv(), nan)"),
        Max => plain(lowest, "max(acc, v)", "acc"),
        Min => plain(highest, "min(acc, v)", "acc"),
        LogSumExp if float => plain(
            "0.0",
            "acc + exp_r(v - m)",
            "select(select(m, m + log_r(acc), abs(m) <= 3.4028235e38), nanv(), nan)",
        ),
        _ => None,
    }
}

const ARG_MIN_MAX: &str = include_str!("shaders/argminmax.wgsl");
const CUMULATIVE_SUM: &str = include_str!("shaders/cumsum.wgsl");

/// The family's answer to [`super::supports`].
pub(super) fn supports(op: &str, operand: &str, dt: DataType) -> bool {
    match op {
        "reduceSum" | "reduceL1" | "reduceSumSquare" | "reduceProduct" => {
            is_word(dt) || matches!(dt, DataType::Int64 | DataType::Uint64)
        }
        // int64/uint64 compare as word pairs.
        "reduceMax" | "reduceMin" => true,
        "reduceMean" | "reduceL2" | "reduceLogSum" | "reduceLogSumExp" => is_float(dt),
        // Comparisons and sums of word pairs are written out, so every
        // element type is handled; argMin/argMax write int32 or int64.
        "argMin" | "argMax" => match operand {
            "output" => matches!(dt, DataType::Int32 | DataType::Int64),
            _ => true,
        },
        "cumulativeSum" => true,
        _ => false,
    }
}

/// The sizes before, along and after `axis` of `shape`.
fn split_at_axis(shape: &[usize], axis: usize) -> Result<(u64, u64, u64)> {
    if axis >= shape.len() {
        return Err(Error::operation(format!(
            "the axis {axis} is out of range for rank {}",
            shape.len()
        )));
    }
    let prod = |d: &[usize]| d.iter().map(|&v| v as u64).product::<u64>();
    Ok((
        prod(&shape[..axis]),
        shape[axis] as u64,
        prod(&shape[axis + 1..]),
    ))
}

/// WGSL `better(v, best)` for argMin (`max == false`) or argMax on
/// elements of `dt`.
fn better(dt: DataType, max: bool) -> String {
    let op = if max { ">" } else { "<" };
    match convert::compute_type(dt) {
        // Never true with a NaN on either side, whatever the compiler
        // assumes about NaN in comparisons.
        "f32" => format!(
            "fn better(v: f32, b: f32) -> bool {{
    return !is_nan(v) && !is_nan(b) && v {op} b;
}}"
        ),
        // Pairs compare through shaders/int64.wgsl, strictly as the rest.
        "vec2<u32>" => {
            let lt = if dt == DataType::Int64 {
                "lt_s64"
            } else {
                "lt_u64"
            };
            let (l, r) = if max { ("b", "v") } else { ("v", "b") };
            format!(
                "fn better(v: vec2<u32>, b: vec2<u32>) -> bool {{
    return {lt}({l}, {r});
}}"
            )
        }
        t => format!(
            "fn better(v: {t}, b: {t}) -> bool {{
    return v {op} b;
}}"
        ),
    }
}

/// WGSL `zero()`, `add(acc, v)` and `value(acc)` of a running sum of
/// elements of `dt`, with `ACC` the accumulator type.
fn accumulate(dt: DataType) -> String {
    match convert::compute_type(dt) {
        // The CPU backend sums in f64 and rounds each output once; a
        // compensated pair (sum, rounding error) keeps the running sum as
        // accurate. A non-finite sum drops the pair, whose error term would
        // be NaN. Shader compilers may simplify float expressions
        // algebraically (Mesa does: `(a + b) - a` becomes `b`), which
        // erases the error terms; each rounded result therefore passes
        // through `exact()`, an exclusive or with a zero they cannot see.
        "f32" => "fn zero() -> vec2<f32> {
    return vec2<f32>(0.0, 0.0);
}

fn finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

fn exact(v: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(v) ^ p[5]);
}

fn add(a: vec2<f32>, v: f32) -> vec2<f32> {
    let s = exact(a.x + v);
    if (!finite(s)) {
        return vec2<f32>(s, 0.0);
    }
    let bv = exact(s - a.x);
    let err = exact(exact(a.x - exact(s - bv)) + exact(v - bv));
    let lo = exact(a.y + err);
    let hi = exact(s + lo);
    return vec2<f32>(hi, exact(lo - exact(hi - s)));
}

fn value(a: vec2<f32>) -> f32 {
    return a.x;
}"
        .to_string(),
        // Wrapping 64-bit addition on (low, high) word pairs.
        "vec2<u32>" => "fn zero() -> vec2<u32> {
    return vec2<u32>(0u, 0u);
}

fn add(a: vec2<u32>, v: vec2<u32>) -> vec2<u32> {
    return add64(a, v);
}

fn value(a: vec2<u32>) -> vec2<u32> {
    return a;
}"
        .to_string(),
        // WGSL integer addition wraps, as the CPU backend's does.
        t => format!(
            "fn zero() -> {t} {{
    return {t}(0);
}}

fn add(a: {t}, v: {t}) -> {t} {{
    return a + v;
}}

fn value(a: {t}) -> {t} {{
    return a;
}}"
        ),
    }
}

/// argMin/argMax and cumulativeSum.
pub(super) fn other(gpu: &mut Gpu, op: &ReduceOp, io: &NodeIo) -> Result<Vec<Step>> {
    let (input, in_desc, out, out_desc) = io.first(op.name())?;
    let dt = in_desc.data_type;
    let elem = convert::compute_type(dt);
    // Word pairs compare and add through shaders/int64.wgsl.
    let helpers = if convert::words(dt) == 2 { INT64 } else { "" };
    match *op {
        ReduceOp::ArgMinMax { max, axis, .. } => {
            let lines = split_at_axis(&in_desc.shape, axis)?;
            let (outer, n, inner) = lines;
            if n == 0 && outer * inner > 0 {
                return Err(Error::operation(format!(
                    "{}: the axis is empty",
                    op.name()
                )));
            }
            let (out_type, store) = match out_desc.data_type {
                DataType::Int32 => ("i32", "i32(k)"),
                DataType::Int64 => ("vec2<u32>", "vec2<u32>(k, 0u)"),
                other => {
                    return Err(Error::not_supported(format!(
                        "{} cannot produce {} on the GPU backend",
                        op.name(),
                        other.name()
                    )))
                }
            };
            let source = ARG_MIN_MAX
                .replace("$ELEM", elem)
                .replace("$OUT", out_type)
                .replace(
                    "$BETTER",
                    &format!(
                        "{}\n\nfn store(k: u32) -> {out_type} {{\n    return {store};\n}}",
                        better(dt, max)
                    ),
                )
                + helpers;
            along_lines(gpu, source, lines, &[], input, out)
        }
        ReduceOp::CumulativeSum {
            axis,
            exclusive,
            reversed,
        } => {
            let lines = split_at_axis(&in_desc.shape, axis)?;
            let source = CUMULATIVE_SUM
                .replace("$ELEM", elem)
                .replace("$ACCUMULATE", &accumulate(dt))
                + helpers;
            let flags = [u32::from(reversed), u32::from(exclusive), 0];
            along_lines(gpu, source, lines, &flags, input, out)
        }
        ReduceOp::Reduce { .. } => Err(Error::operation("reductions are built by reduce::reduce")),
    }
}

/// The step of a kernel with one invocation per line of an input seen as
/// `(outer, n, inner)` lines along an axis (argminmax.wgsl, cumsum.wgsl):
/// parameters p[0] lines, p[1] n, p[2] inner, then `extra`. No step where
/// there is nothing to walk.
fn along_lines(
    gpu: &mut Gpu,
    source: String,
    (outer, n, inner): (u64, u64, u64),
    extra: &[u32],
    input: &wgpu::Buffer,
    out: &wgpu::Buffer,
) -> Result<Vec<Step>> {
    let count = outer * inner;
    if count == 0 || n == 0 {
        return Ok(vec![]);
    }
    word(outer * n * inner)?;
    let mut p = vec![word(count)?, word(n)?, word(inner)?];
    p.extend_from_slice(extra);
    let params = gpu.params(&p)?;
    let grid = gpu.grid_1d(count)?;
    gpu.step(source, "main", &[&params, input, out], grid)
        .map(|s| vec![s])
}

pub(super) fn reduce(
    gpu: &mut Gpu,
    kind: ReduceKind,
    axes: &[usize],
    input: &wgpu::Buffer,
    in_desc: &OperandDescriptor,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let dt = in_desc.data_type;
    let refuse = || {
        Error::not_supported(format!(
            "{} on {} is not supported on the GPU backend yet",
            kind.name(),
            dt.name()
        ))
    };
    let t = convert::compute_type(dt);
    let (init, step, result) = body(kind, dt).ok_or_else(refuse)?;
    let n = out_desc.element_count() as u64;
    if n == 0 {
        return Ok(None);
    }
    word(in_desc.element_count() as u64)?;
    let shape = &in_desc.shape;
    let st = strides(shape);
    let kept: Vec<usize> = (0..shape.len()).filter(|d| !axes.contains(d)).collect();
    let count: u64 = axes.iter().map(|&d| shape[d] as u64).product();
    let mut p = vec![word(n)?, kept.len() as u32, axes.len() as u32, word(count)?];
    for &d in &kept {
        p.push(word(shape[d] as u64)?);
    }
    for &d in &kept {
        p.push(word(st[d])?);
    }
    for &d in axes {
        p.push(word(shape[d] as u64)?);
    }
    for &d in axes {
        p.push(word(st[d])?);
    }
    let float = t == "f32";
    let nan_check = if float {
        "        nan = nan || is_nan_f(v);\n"
    } else {
        ""
    };
    // logSumExp first finds the maximum m.
    let max_pass = if kind == ReduceKind::LogSumExp {
        format!(
            "    for (var j = 0u; j < p[3]; j++) {{
        let v = elem(base, j);
{nan_check}        m = max(m, v);
    }}
"
        )
    } else {
        String::new()
    };
    let mut source = format!(
        "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{t}>;
@group(0) @binding(2) var<storage, read_write> out: array<{t}>;

// Non-finite values read through the parameters, so that no constant
// folding sees them.
fn inf() -> f32 {{
    return bitcast<f32>(p[0] * 0u + 0x7f800000u);
}}

fn nanv() -> f32 {{
    return bitcast<f32>(p[0] * 0u + 0x7fc00000u);
}}

// The j-th reduced element of the output element whose first input
// element is at base.
fn elem(base: u32, j: u32) -> {t} {{
    let rr = p[2];
    let o = 4u + 2u * p[1];
    var r = j;
    var idx = base;
    for (var d = rr; d > 0u; d--) {{
        let k = d - 1u;
        let dim = p[o + k];
        idx += (r % dim) * p[o + rr + k];
        r = r / dim;
    }}
    return x[idx];
}}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {{
        return;
    }}
    let rk = p[1];
    var rem = i;
    var base = 0u;
    for (var d = rk; d > 0u; d--) {{
        let k = d - 1u;
        let dim = p[4u + k];
        base += (rem % dim) * p[4u + rk + k];
        rem = rem / dim;
    }}
    var nan = false;
    var m = -inf();
{max_pass}    var acc: {t} = {init};
    for (var j = 0u; j < p[3]; j++) {{
        let v = elem(base, j);
{nan_check}        acc = {step};
    }}
    out[i] = {result};
}}
"
    );
    if convert::words(dt) == 2 {
        source += INT64;
    }
    if t == "f32" {
        source += super::elementwise::FLOAT;
    }
    let params = gpu.params(&p)?;
    let grid = gpu.grid_1d(n)?;
    gpu.step(source, "main", &[&params, input, out], grid)
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::super::elementwise::tests::{pairs, same_as_cpu, wide, EDGES, WIDE_TYPES};
    use super::super::testing::*;
    use super::*;
    use crate::graph::args::Val;
    use crate::tensor::Buf;

    /// Shapes and axes of the kernels that walk lines along one axis: the
    /// axis first, middle and last, long lines and many short ones, lines
    /// and line counts that are not multiples of 256, size-1 dimensions.
    const LINES: [(&[usize], usize); 8] = [
        (&[3, 5, 7], 0),
        (&[3, 5, 7], 1),
        (&[3, 5, 7], 2),
        (&[2, 600], 1),
        (&[600, 2], 0),
        (&[2, 1, 263], 1),
        (&[1, 1, 1], 2),
        (&[9], 0),
    ];

    /// `name` on one input holding `x`, compared exactly with the CPU.
    fn same(
        be: &mut super::super::GpuBackend,
        name: &str,
        dt: DataType,
        shape: &[usize],
        extra: &[Val],
        x: Buf,
    ) {
        same_as_cpu(be, op_graph(name, dt, &[shape], extra).unwrap(), vec![x]);
    }

    #[test]
    fn arg_min_max_every_type_and_axis() {
        let Some(mut be) = backend() else { return };
        for name in ["argMin", "argMax"] {
            for dt in DataType::ALL {
                for (shape, axis) in LINES {
                    for (keep, out) in [(false, "int32"), (true, "int64")] {
                        let opts = dict(&[
                            ("keepDimensions", Val::Bool(keep)),
                            ("outputDataType", s(out)),
                        ]);
                        check_vs_cpu(&mut be, name, &[dt], &[shape], &[n(axis as f64), opts], 0.0);
                    }
                }
            }
        }
    }

    /// The sums and products of 64-bit integers (allowed by the spec for
    /// reduceL1/Product/Sum/SumSquare), wrapping as on the CPU.
    #[test]
    fn sums_of_word_pairs() {
        let Some(mut be) = backend() else { return };
        for dt in [DataType::Int64, DataType::Uint64] {
            for name in ["reduceSum", "reduceL1", "reduceSumSquare", "reduceProduct"] {
                for axes in [&[1.0][..], &[0.0, 1.0]] {
                    let opts = dict(&[("axes", list(axes))]);
                    same(
                        &mut be,
                        name,
                        dt,
                        &[3, 4],
                        std::slice::from_ref(&opts),
                        pairs(dt, EDGES[..12].to_vec()),
                    );
                    same(
                        &mut be,
                        name,
                        dt,
                        &[37, 263],
                        &[opts],
                        pairs(dt, wide(37 * 263, 3)),
                    );
                }
            }
        }
    }

    #[test]
    fn arg_min_max_nan_and_wide_values() {
        let Some(mut be) = backend() else { return };
        let nan = f32::NAN;
        // A NaN first stays the best; a later NaN never wins.
        let f = Buf::F32(vec![
            nan,
            1.0,
            -1.0,
            2.0,
            5.0,
            nan,
            -3.0,
            0.0,
            f32::INFINITY,
            -0.0,
            0.0,
            -f32::INFINITY,
        ]);
        // Word pairs: high words decide (signed for int64), then low.
        let x = vec![
            i64::MIN,
            -1,
            0,
            1 << 33,
            (1 << 32) - 1,
            i64::MAX,
            (1 << 32) + 5,
            -(1 << 32),
            1 << 32,
            (1 << 32) + 4,
            7,
            i64::MAX - 1,
        ];
        let (i, u) = (DataType::Int64, DataType::Uint64);
        let e = EDGES.len();
        let cases: [(DataType, &[usize], f64, Buf); 12] = [
            (DataType::Float32, &[3, 4], 1.0, f.clone()),
            (DataType::Float32, &[3, 4], 0.0, f),
            (i, &[12], 0.0, pairs(i, x.clone())),
            (i, &[3, 4], 1.0, pairs(i, x.clone())),
            (u, &[12], 0.0, pairs(u, x.clone())),
            (u, &[4, 3], 0.0, pairs(u, x.clone())),
            (i, &[e], 0.0, pairs(i, EDGES.to_vec())),
            (u, &[e], 0.0, pairs(u, EDGES.to_vec())),
            (i, &[37, 263], 0.0, pairs(i, wide(37 * 263, 1))),
            (u, &[37, 263], 1.0, pairs(u, wide(37 * 263, 2))),
            (
                DataType::Int32,
                &[12],
                0.0,
                Buf::I32(x.iter().map(|&v| v as i32).collect()),
            ),
            (
                DataType::Uint32,
                &[12],
                0.0,
                Buf::U32(x.iter().map(|&v| v as u32).collect()),
            ),
        ];
        for name in ["argMin", "argMax"] {
            for (dt, shape, axis, data) in &cases {
                same(&mut be, name, *dt, shape, &[n(*axis)], data.clone());
            }
        }
    }

    #[test]
    fn cumulative_sum_every_option() {
        let Some(mut be) = backend() else { return };
        // The spec's types for cumulativeSum (8-bit integers left, #912).
        let types = [
            DataType::Float32,
            DataType::Float16,
            DataType::Int32,
            DataType::Uint32,
            DataType::Int64,
            DataType::Uint64,
        ];
        for dt in types {
            for (shape, axis) in LINES {
                for exclusive in [false, true] {
                    for reversed in [false, true] {
                        let opts = dict(&[
                            ("exclusive", Val::Bool(exclusive)),
                            ("reversed", Val::Bool(reversed)),
                        ]);
                        check_vs_cpu(
                            &mut be,
                            "cumulativeSum",
                            &[dt],
                            &[shape],
                            &[n(axis as f64), opts],
                            1e-6,
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn cumulative_sum_wraps_and_stays_accurate() {
        let Some(mut be) = backend() else { return };
        let cases = [
            // Wrapping integer sums, carries between the words of a pair.
            Buf::I32(vec![i32::MAX, 1, i32::MIN, -1, 5, i32::MAX]),
            Buf::U64(vec![u64::MAX, 1, 0xffff_ffff, 1, u64::MAX - 3, 7, 1 << 40]),
            Buf::I64(vec![i64::MIN, -1, -(1 << 32), 3, i64::MAX, 0xffff_ffff]),
            Buf::I64(wide(300, 5)),
            pairs(DataType::Uint64, wide(300, 6)),
            // Cancellation: the CPU sums in f64; each output must be its
            // rounded value exactly.
            Buf::F32(vec![
                1e8,
                1.0,
                -1e8,
                1.0,
                0.25,
                3e-8,
                f32::INFINITY,
                1.0,
                -f32::INFINITY,
                2.0,
            ]),
            Buf::F32(random(4000, 3).iter().map(|v| v * 1000.0).collect()),
        ];
        for x in cases {
            let dt = match x {
                Buf::I32(_) => DataType::Int32,
                Buf::I64(_) => DataType::Int64,
                Buf::U64(_) => DataType::Uint64,
                _ => DataType::Float32,
            };
            same(&mut be, "cumulativeSum", dt, &[x.len()], &[n(0.0)], x);
        }
    }

    #[test]
    fn max_and_min_of_word_pairs() {
        let Some(mut be) = backend() else { return };
        let axes_cases: [(&[usize], &[f64], bool); 8] = [
            (&[3, 5, 7], &[], false),
            (&[3, 5, 7], &[1.0], false),
            (&[3, 5, 7], &[0.0, 2.0], true),
            (&[3, 5, 7], &[2.0], false),
            (&[1, 300], &[1.0], true),
            (&[263], &[0.0], false),
            (&[4, 1, 3], &[1.0], false),
            (&[2, 1], &[0.0, 1.0], false),
        ];
        for name in ["reduceMax", "reduceMin"] {
            for dt in WIDE_TYPES {
                for (k, (shape, axes, keep)) in axes_cases.iter().enumerate() {
                    let opts = [dict(&[
                        ("axes", list(axes)),
                        ("keepDimensions", Val::Bool(*keep)),
                    ])];
                    check_vs_cpu(&mut be, name, &[dt], &[shape], &opts, 0.0);
                    let x = pairs(dt, wide(shape.iter().product(), k as u64));
                    same(&mut be, name, dt, shape, &opts, x);
                }
                // No axes: the identity on every element, edges included.
                let e = EDGES.len();
                let opts = dict(&[("axes", list(&[]))]);
                same(&mut be, name, dt, &[e], &[opts], pairs(dt, EDGES.to_vec()));
                // The edges in every position along the reduced axis.
                let mut x = Vec::new();
                for r in 0..e {
                    x.extend(EDGES[r..].iter().chain(&EDGES[..r]));
                }
                for axis in [0.0, 1.0] {
                    let opts = dict(&[("axes", list(&[axis]))]);
                    same(&mut be, name, dt, &[e, e], &[opts], pairs(dt, x.clone()));
                }
                // A lone extreme: the type's lowest or highest value alone.
                let lone = if dt == DataType::Int64 {
                    vec![i64::MIN, i64::MAX, 0]
                } else {
                    vec![0, -1, 1]
                };
                for v in lone {
                    same(&mut be, name, dt, &[1, 3], &[], pairs(dt, vec![v, v, v]));
                }
            }
        }
    }
}

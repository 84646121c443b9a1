//! The reduce family (`reduceSum`, `reduceMean`, `reduceMax`, ...) over
//! any set of axes: one invocation per output element walks the reduced
//! elements. One generated WGSL source per (reduction, type). argMin,
//! argMax and cumulativeSum walk one axis per invocation
//! (`shaders/argminmax.wgsl`, `shaders/cumsum.wgsl`).

use super::{convert, is_float, is_word, wgsl_type, word, Gpu, NodeIo, Step};
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
/// or None where the kind does not take `t`.
fn body(kind: ReduceKind, t: &str) -> Option<(String, String, String)> {
    use ReduceKind::*;
    let float = t == "f32";
    let zero = format!("{t}(0)");
    let (lowest, highest) = match t {
        "f32" => ("-inf()", "inf()"),
        "i32" => ("i32(-2147483647 - 1)", "2147483647"),
        _ => ("0u", "4294967295u"),
    };
    let plain = |init: &str, step: &str, result: &str| {
        Some((init.to_string(), step.to_string(), result.to_string()))
    };
    match kind {
        Sum => plain(&zero, "acc + v", "acc"),
        L1 => plain(&zero, "acc + abs(v)", "acc"),
        SumSquare => plain(&zero, "acc + v * v", "acc"),
        Product => plain(&format!("{t}(1)"), "acc * v", "acc"),
        Mean if float => plain("0.0", "acc + v", "acc / f32(p[3])"),
        L2 if float => plain("0.0", "acc + v * v", "sqrt(acc)"),
        LogSum if float => plain("0.0", "acc + v", "log(acc)"),
        // NaN propagates through the flag `nan`.
        Max if float => plain(lowest, "max(acc, v)", "select(acc, nanv(), nan)"),
        Min if float => plain(highest, "min(acc, v)", "select(acc, nanv(), nan)"),
        Max => plain(lowest, "max(acc, v)", "acc"),
        Min => plain(highest, "min(acc, v)", "acc"),
        LogSumExp if float => plain(
            "0.0",
            "acc + exp(v - m)",
            "select(select(m, m + log(acc), abs(m) <= 3.4028235e38), nanv(), nan)",
        ),
        _ => None,
    }
}

const ARG_MIN_MAX: &str = include_str!("shaders/argminmax.wgsl");
const CUMULATIVE_SUM: &str = include_str!("shaders/cumsum.wgsl");

/// The family's answer to [`super::supports`].
pub(super) fn supports(op: &str, operand: &str, dt: DataType) -> bool {
    match op {
        "reduceSum" | "reduceL1" | "reduceSumSquare" | "reduceProduct" | "reduceMax"
        | "reduceMin" => is_word(dt),
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
        "vec2<u32>" => {
            // The high words decide (signed for int64), then the low ones.
            let high = if dt == DataType::Int64 {
                format!("bitcast<i32>(v.y) {op} bitcast<i32>(b.y)")
            } else {
                format!("v.y {op} b.y")
            };
            format!(
                "fn better(v: vec2<u32>, b: vec2<u32>) -> bool {{
    if (v.y != b.y) {{
        return {high};
    }}
    return v.x {op} b.x;
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
    let lo = a.x + v.x;
    return vec2<u32>(lo, a.y + v.y + select(0u, 1u, lo < a.x));
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
    let (Some(&input), Some(&in_desc), Some(&out), Some(&out_desc)) = (
        io.ins.first(),
        io.in_descs.first(),
        io.outs.first(),
        io.out_descs.first(),
    ) else {
        return Err(Error::operation(format!(
            "{}: missing an input or output",
            op.name()
        )));
    };
    let dt = in_desc.data_type;
    let elem = convert::compute_type(dt);
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
                );
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
                .replace("$ACCUMULATE", &accumulate(dt));
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
    let t = wgsl_type(dt).ok_or_else(refuse)?;
    let (init, step, result) = body(kind, t).ok_or_else(refuse)?;
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
        "        nan = nan || (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;\n"
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
    let source = format!(
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
    let params = gpu.params(&p)?;
    let grid = gpu.grid_1d(n)?;
    gpu.step(source, "main", &[&params, input, out], grid)
        .map(Some)
}

#[cfg(test)]
mod tests {
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

    /// Runs `name` on the GPU and the CPU kernel with the given input
    /// data and compares exactly.
    fn same_as_cpu(name: &str, dt: DataType, shape: &[usize], extra: &[Val], x: Buf) {
        let Some(mut be) = backend() else { return };
        let g = op_graph(name, dt, &[shape], extra).unwrap();
        let node = g.nodes[0].clone();
        let want = crate::backend::cpu::run_op(
            &node.op,
            &[&x],
            &[&g.operands[node.inputs[0]]],
            &[g.operands[node.outputs[0]].clone()],
            None,
        )
        .unwrap();
        let got = run(&mut be, g, vec![x]).unwrap();
        let what = format!("{name} {} {shape:?} {extra:?}", dt.name());
        match (&got[0], &want[0]) {
            // Exact, NaN matching NaN.
            (Buf::F32(g), Buf::F32(w)) => assert_close(g, w, 0.0, &what),
            (g, w) => assert_eq!(g, w, "{what}"),
        }
    }

    const EVERY_TYPE: [DataType; 10] = [
        DataType::Float32,
        DataType::Float16,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Int8,
        DataType::Uint8,
        DataType::Int4,
        DataType::Uint4,
    ];

    #[test]
    fn arg_min_max_every_type_and_axis() {
        let Some(mut be) = backend() else { return };
        for name in ["argMin", "argMax"] {
            for dt in EVERY_TYPE {
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

    #[test]
    fn arg_min_max_nan_and_wide_values() {
        let nan = f32::NAN;
        for name in ["argMin", "argMax"] {
            // A NaN first stays the best; a later NaN never wins.
            let x = vec![
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
            ];
            same_as_cpu(
                name,
                DataType::Float32,
                &[3, 4],
                &[n(1.0)],
                Buf::F32(x.clone()),
            );
            same_as_cpu(name, DataType::Float32, &[3, 4], &[n(0.0)], Buf::F32(x));
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
            same_as_cpu(name, DataType::Int64, &[12], &[n(0.0)], Buf::I64(x.clone()));
            same_as_cpu(
                name,
                DataType::Int64,
                &[3, 4],
                &[n(1.0)],
                Buf::I64(x.clone()),
            );
            let u: Vec<u64> = x.iter().map(|&v| v as u64).collect();
            same_as_cpu(
                name,
                DataType::Uint64,
                &[12],
                &[n(0.0)],
                Buf::U64(u.clone()),
            );
            same_as_cpu(name, DataType::Uint64, &[4, 3], &[n(0.0)], Buf::U64(u));
            let i: Vec<i32> = x.iter().map(|&v| v as i32).collect();
            same_as_cpu(name, DataType::Int32, &[12], &[n(0.0)], Buf::I32(i.clone()));
            let u: Vec<u32> = i.iter().map(|&v| v as u32).collect();
            same_as_cpu(name, DataType::Uint32, &[12], &[n(0.0)], Buf::U32(u));
        }
    }

    #[test]
    fn cumulative_sum_every_option() {
        let Some(mut be) = backend() else { return };
        let types = [
            DataType::Float32,
            DataType::Float16,
            DataType::Int32,
            DataType::Uint32,
            DataType::Int64,
            DataType::Uint64,
            DataType::Int8,
            DataType::Uint8,
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
        // Wrapping integer sums, carries between the words of a pair.
        let x = vec![i32::MAX, 1, i32::MIN, -1, 5, i32::MAX];
        same_as_cpu(
            "cumulativeSum",
            DataType::Int32,
            &[6],
            &[n(0.0)],
            Buf::I32(x),
        );
        let x = vec![u64::MAX, 1, 0xffff_ffff, 1, u64::MAX - 3, 7, 1 << 40];
        same_as_cpu(
            "cumulativeSum",
            DataType::Uint64,
            &[7],
            &[n(0.0)],
            Buf::U64(x),
        );
        let x = vec![i64::MIN, -1, -(1 << 32), 3, i64::MAX, 0xffff_ffff];
        same_as_cpu(
            "cumulativeSum",
            DataType::Int64,
            &[6],
            &[n(0.0)],
            Buf::I64(x),
        );
        // Cancellation: the CPU sums in f64; each output must be its
        // rounded value exactly.
        let x = vec![
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
        ];
        same_as_cpu(
            "cumulativeSum",
            DataType::Float32,
            &[10],
            &[n(0.0)],
            Buf::F32(x),
        );
        let x: Vec<f32> = random(4000, 3).iter().map(|v| v * 1000.0).collect();
        same_as_cpu(
            "cumulativeSum",
            DataType::Float32,
            &[4000],
            &[n(0.0)],
            Buf::F32(x),
        );
    }
}

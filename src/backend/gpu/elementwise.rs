//! Element-wise operators: binary (with broadcasting), unary and clamp.
//!
//! One WGSL template per arity; the host substitutes the element type and
//! the operator's expression, so each (operator, type) pair compiles to its
//! own small pipeline, cached by source.

use super::{broadcast_strides, convert, is_float, is_word, wgsl_type, word, Gpu, Step};
use crate::error::{Error, Result};
use crate::graph::ops::activation::ActivationOp;
use crate::graph::ops::elementwise::{BinaryKind, UnaryKind};
use crate::types::{DataType, OperandDescriptor};

const BINARY: &str = include_str!("shaders/binary.wgsl");
const UNARY: &str = concat!(
    include_str!("shaders/unary.wgsl"),
    "\n",
    include_str!("shaders/float.wgsl")
);
/// 64-bit integer arithmetic on word pairs, shared with the other families
/// that compute on int64/uint64.
pub(super) const INT64: &str = include_str!("shaders/int64.wgsl");
/// NaN-aware and more exact float helpers (exp, log, max, min).
pub(super) const FLOAT: &str = include_str!("shaders/float.wgsl");

/// The family's answer to [`super::supports`]: every operand of these
/// operators has the output's type, computed in one word.
pub(super) fn supports(op: &str, _operand: &str, dt: DataType) -> bool {
    match op {
        // int64/uint64 compute on word pairs (shaders/int64.wgsl).
        "add" | "sub" | "mul" | "div" | "max" | "min" | "pow" | "clamp" | "identity" => true,
        // The word-pair kernels of `unary64` take int64 (and uint64 where
        // the operator is defined on it).
        "abs" | "neg" | "relu" => is_word(dt) || dt == DataType::Int64,
        "sign" => is_float(dt) || wgsl_type(dt) == Some("i32") || dt == DataType::Int64,
        "exp" | "log" | "sqrt" | "sigmoid" | "tanh" | "ceil" | "cos" | "floor" | "reciprocal"
        | "roundEven" | "sin" | "tan" | "erf" | "elu" | "gelu" | "hardSigmoid" | "hardSwish"
        | "leakyRelu" | "linear" | "softplus" | "softsign" => is_float(dt),
        _ => false,
    }
}

fn element_type(op: &str, dt: DataType) -> Result<&'static str> {
    wgsl_type(dt).ok_or_else(|| {
        Error::not_supported(format!(
            "{op} on {} is not supported on the GPU backend yet",
            dt.name()
        ))
    })
}

/// Shape and per-input strides of a broadcast, with size-1 output
/// dimensions dropped and neighbouring dimensions merged wherever both
/// inputs walk them contiguously (so equal shapes become one flat loop).
pub(super) fn coalesce(out: &[usize], sa: &[u64], sb: &[u64]) -> Vec<(u64, u64, u64)> {
    let mut dims: Vec<(u64, u64, u64)> = Vec::new();
    for d in 0..out.len() {
        let size = out[d] as u64;
        if size == 1 {
            continue;
        }
        match dims.last_mut() {
            // Wrapping: a stride may be a negative one as a wrapped u64.
            Some(last)
                if last.1 == sa[d].wrapping_mul(size) && last.2 == sb[d].wrapping_mul(size) =>
            {
                *last = (last.0 * size, sa[d], sb[d]);
            }
            _ => dims.push((size, sa[d], sb[d])),
        }
    }
    if dims.is_empty() {
        dims.push((1, 0, 0));
    }
    dims
}

/// The int64 (`signed`) or uint64 expression of `kind` on the word pairs
/// `x` and `y` (shaders/int64.wgsl): add, sub and mul wrap alike for both.
fn binary64(kind: BinaryKind, signed: bool) -> String {
    let sign = if signed { "s" } else { "u" };
    match kind {
        BinaryKind::Add => "add64(x, y)".into(),
        BinaryKind::Sub => "sub64(x, y)".into(),
        BinaryKind::Mul => "mul64(x, y)".into(),
        BinaryKind::Div => format!("div_{sign}64(x, y)"),
        BinaryKind::Max => format!("max_{sign}64(x, y)"),
        BinaryKind::Min => format!("min_{sign}64(x, y)"),
        BinaryKind::Pow => format!("pow_{sign}64(x, y)"),
    }
}

/// `add`, `sub`, ... with numpy broadcasting of `a` and `b` to the output.
pub(super) fn binary(
    gpu: &mut Gpu,
    kind: BinaryKind,
    ins: &[&wgpu::Buffer],
    in_descs: &[&OperandDescriptor],
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let dt = out_desc.data_type;
    let t = convert::compute_type(dt);
    let n = out_desc.element_count() as u64;
    if n == 0 {
        return Ok(None);
    }
    let sa = broadcast_strides(&in_descs[0].shape, &out_desc.shape);
    let sb = broadcast_strides(&in_descs[1].shape, &out_desc.shape);
    let dims = coalesce(&out_desc.shape, &sa, &sb);
    let mut p = vec![word(n)?, dims.len() as u32];
    for &(size, _, _) in &dims {
        p.push(word(size)?);
    }
    for &(_, s, _) in &dims {
        p.push(word(s)?);
    }
    for &(_, _, s) in &dims {
        p.push(word(s)?);
    }
    let pairs = convert::words(dt) == 2;
    let expr = match kind {
        _ if pairs => binary64(kind, dt == DataType::Int64),
        BinaryKind::Add => "x + y".into(),
        BinaryKind::Sub => "x - y".into(),
        BinaryKind::Mul => "x * y".into(),
        BinaryKind::Div if t == "f32" => "x / y".into(),
        // WGSL's integer x / 0 is x; the CPU backend (and this one) give 0.
        BinaryKind::Div => "select(x / y, x - x, y == y - y)".into(),
        BinaryKind::Max if t == "f32" => "max_nan(x, y)".into(),
        BinaryKind::Min if t == "f32" => "min_nan(x, y)".into(),
        BinaryKind::Max => "max(x, y)".into(),
        BinaryKind::Min => "min(x, y)".into(),
        BinaryKind::Pow => format!("pow_{t}(x, y)"),
    };
    let mut source = BINARY.replace("{{T}}", t).replace("{{EXPR}}", &expr);
    source += FLOAT;
    if pairs {
        source += INT64;
    }
    let params = gpu.params(&p)?;
    let grid = gpu.grid_1d(n)?;
    gpu.step(source, "main", &[&params, ins[0], ins[1], out], grid)
        .map(Some)
}

/// Runs the unary template with `expr` over `input`; `bounds` are the
/// words the template reads through `lo()` and `hi()`.
fn run_unary(
    gpu: &mut Gpu,
    t: &str,
    expr: &str,
    bounds: [u32; 2],
    input: &wgpu::Buffer,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let n = out_desc.element_count() as u64;
    if n == 0 {
        return Ok(None);
    }
    let source = UNARY.replace("{{T}}", t).replace("{{EXPR}}", expr);
    let params = gpu.params(&[word(n)?, bounds[0], bounds[1]])?;
    let grid = gpu.grid_1d(n)?;
    gpu.step(source, "main", &[&params, input, out], grid)
        .map(Some)
}

/// A unary operator on int64/uint64 word pairs: `expr` on `v`, with the
/// bounds `lo` and `hi` (clamp) as pairs.
fn unary64(
    gpu: &mut Gpu,
    expr: &str,
    bounds: [u64; 2],
    input: &wgpu::Buffer,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let n = out_desc.element_count() as u64;
    if n == 0 {
        return Ok(None);
    }
    let source = format!(
        "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<vec2<u32>>;
@group(0) @binding(2) var<storage, read_write> out: array<vec2<u32>>;
{INT64}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {{
        return;
    }}
    let v = x[i];
    let lo = vec2<u32>(p[1], p[2]);
    let hi = vec2<u32>(p[3], p[4]);
    out[i] = {expr};
}}
"
    );
    let [l, h] = bounds;
    let params = gpu.params(&[
        word(n)?,
        l as u32,
        (l >> 32) as u32,
        h as u32,
        (h >> 32) as u32,
    ])?;
    let grid = gpu.grid_1d(n)?;
    gpu.step(source, "main", &[&params, input, out], grid)
        .map(Some)
}

/// `abs`, `neg`, `exp`, ... on one input.
pub(super) fn unary(
    gpu: &mut Gpu,
    kind: UnaryKind,
    input: &wgpu::Buffer,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    if matches!(out_desc.data_type, DataType::Int64 | DataType::Uint64) {
        let zero = "vec2<u32>(0u, 0u)";
        let expr = match kind {
            UnaryKind::Identity => "v".to_string(),
            UnaryKind::Neg => "neg64(v)".to_string(),
            UnaryKind::Abs => "select(v, neg64(v), negative(v))".to_string(),
            UnaryKind::Relu => format!("select(v, {zero}, negative(v))"),
            UnaryKind::Sign => format!(
                "select(select(vec2<u32>(1u, 0u), {zero}, v.x == 0u && v.y == 0u), \
                 vec2<u32>(0xffffffffu, 0xffffffffu), negative(v))"
            ),
            _ => {
                return Err(Error::not_supported(format!(
                    "{} on {} is not supported on the GPU backend",
                    kind.name(),
                    out_desc.data_type.name()
                )))
            }
        };
        return unary64(gpu, &expr, [0, 0], input, out, out_desc);
    }
    let t = element_type(kind.name(), out_desc.data_type)?;
    let float = t == "f32";
    let expr = match kind {
        UnaryKind::Abs => "abs(v)",
        UnaryKind::Neg if t == "u32" => "0u - v",
        UnaryKind::Neg => "-v",
        // NaN stays NaN (drivers' max(NaN, 0) is 0), as on the CPU backend.
        UnaryKind::Relu if float => "select(max(v, 0.0), v, is_nan_f(v))",
        UnaryKind::Relu => "max(v, {{T}}(0))",
        UnaryKind::Exp if float => "exp_r(v)",
        UnaryKind::Log if float => "log_r(v)",
        UnaryKind::Sqrt if float => "sqrt(v)",
        UnaryKind::Sigmoid if float => "1.0 / (1.0 + exp_r(-v))",
        // Some drivers compute tanh as a ratio of exponentials, which gives
        // NaN once they overflow; tanh(±10) already rounds to ±1 in f32.
        UnaryKind::Tanh if float => "select(tanh(clamp(v, -10.0, 10.0)), v, is_nan_f(v))",
        UnaryKind::Ceil if float => "ceil(v)",
        UnaryKind::Cos if float => "cos(v)",
        UnaryKind::Floor if float => "floor(v)",
        UnaryKind::Identity => "v",
        UnaryKind::Erf if float => "select(erf_as(v), v, is_nan_f(v))",
        UnaryKind::Reciprocal if float => "1.0 / v",
        // WGSL's round() rounds halfway cases to even.
        UnaryKind::RoundEven if float => "round(v)",
        UnaryKind::Sin if float => "sin(v)",
        // sign(NaN) is 0, as the CPU backend's (x > 0 ? 1 : x < 0 ? -1 : 0).
        UnaryKind::Sign if float => "select(sign(v), 0.0, is_nan_f(v))",
        UnaryKind::Sign if t == "i32" => "sign(v)",
        UnaryKind::Tan if float => "tan_reduced(v)",
        _ => {
            return Err(Error::not_supported(format!(
                "{} on {} is not supported on the GPU backend",
                kind.name(),
                out_desc.data_type.name()
            )))
        }
    };
    // `{{T}}` inside the expression is substituted with the rest.
    let expr = expr.replace("{{T}}", t);
    run_unary(gpu, t, &expr, [0, 0], input, out, out_desc)
}

/// `clamp` with bounds converted to the input's type (integers saturate).
pub(super) fn clamp(
    gpu: &mut Gpu,
    min: f64,
    max: f64,
    input: &wgpu::Buffer,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    match out_desc.data_type {
        // `as` saturates at the type's range, as the CPU's conversion.
        DataType::Int64 => {
            let expr = "select(select(v, lo, lt_s64(v, lo)), hi, lt_s64(hi, select(v, lo, lt_s64(v, lo))))";
            let b = [min as i64 as u64, max as i64 as u64];
            return unary64(gpu, expr, b, input, out, out_desc);
        }
        DataType::Uint64 => {
            let expr = "select(select(v, lo, lt_u64(v, lo)), hi, lt_u64(hi, select(v, lo, lt_u64(v, lo))))";
            return unary64(gpu, expr, [min as u64, max as u64], input, out, out_desc);
        }
        _ => {}
    }
    let t = element_type("clamp", out_desc.data_type)?;
    // Integer bounds saturate to the operand type's own range first (as
    // the CPU backend's), so a bound beyond int8 cannot leave int8.
    let range = match out_desc.data_type {
        DataType::Int8 => (-128.0, 127.0),
        DataType::Uint8 => (0.0, 255.0),
        DataType::Int4 => (-8.0, 7.0),
        DataType::Uint4 => (0.0, 15.0),
        _ => (f64::NEG_INFINITY, f64::INFINITY),
    };
    let sat = |v: f64| {
        if v.is_nan() {
            v
        } else {
            v.clamp(range.0, range.1)
        }
    };
    let (min, max) = (sat(min), sat(max));
    let bounds = match t {
        "f32" => [(min as f32).to_bits(), (max as f32).to_bits()],
        "i32" => [(min as i32) as u32, (max as i32) as u32],
        _ => [min as u32, max as u32],
    };
    run_unary(
        gpu,
        t,
        if t == "f32" {
            // NaN stays NaN, as on the CPU backend.
            "select(min(max(v, lo()), hi()), v, is_nan_f(v))"
        } else {
            "min(max(v, lo()), hi())"
        },
        bounds,
        input,
        out,
        out_desc,
    )
}

/// The one-input float32 activations (elu, gelu, hardSigmoid, hardSwish,
/// leakyRelu, linear, softplus, softsign); alpha and beta travel as the
/// template's bounds.
pub(super) fn activation(
    gpu: &mut Gpu,
    op: &ActivationOp,
    input: &wgpu::Buffer,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    if !is_float(out_desc.data_type) {
        return Err(Error::not_supported(format!(
            "{} on {} is not supported on the GPU backend yet",
            op.name(),
            out_desc.data_type.name()
        )));
    }
    let (expr, a, b) = match *op {
        ActivationOp::Elu { alpha } => ("select(lo() * expm1_f(v), v, v > 0.0)", alpha, 0.0),
        ActivationOp::Gelu => (
            "0.5 * v * (1.0 + erf_as(v * 0.70710678118654752))",
            0.0,
            0.0,
        ),
        ActivationOp::HardSigmoid { alpha, beta } => {
            ("clamp_nan(fma(lo(), v, hi()), 0.0, 1.0)", alpha, beta)
        }
        ActivationOp::HardSwish => ("v * clamp_nan(v + 3.0, 0.0, 6.0) / 6.0", 0.0, 0.0),
        ActivationOp::LeakyRelu { alpha } => ("select(lo() * v, v, v >= 0.0)", alpha, 0.0),
        ActivationOp::Linear { alpha, beta } => ("fma(lo(), v, hi())", alpha, beta),
        ActivationOp::Softplus => (
            "select(max(v, 0.0) + log1p_f(exp(-abs(v))), v, is_nan_f(v))",
            0.0,
            0.0,
        ),
        ActivationOp::Softsign => (
            "select(v / (1.0 + abs(v)), sign(v), abs(v) > 3.4e38)",
            0.0,
            0.0,
        ),
        ActivationOp::Prelu | ActivationOp::Where => {
            return Err(Error::operation(format!(
                "{} is not a one-input activation",
                op.name()
            )))
        }
    };
    let bounds = [(a as f32).to_bits(), (b as f32).to_bits()];
    run_unary(gpu, "f32", expr, bounds, input, out, out_desc)
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::testing::*;
    use super::super::GpuBackend;
    use super::*;
    use crate::backend::Backend;
    use crate::graph::Graph;
    use crate::tensor::Buf;
    use std::sync::Arc;

    /// Runs `g` on `data` (in the graph's input order) on the GPU and on
    /// the CPU backend, and compares exactly (NaN matching NaN).
    pub(in crate::backend::gpu) fn same_as_cpu(be: &mut GpuBackend, g: Graph, data: Vec<Buf>) {
        let names: Vec<&str> = g.nodes.iter().map(|n| n.op.name()).collect();
        let what = format!("{names:?} on {:?}", g.operands);
        let g = Arc::new(g);
        let mut cpu = crate::backend::cpu::CpuBackend::new();
        cpu.compile(1, g.clone()).unwrap();
        let want = cpu.compute(1, &g, data.clone()).unwrap();
        let got = run(be, (*g).clone(), data).unwrap_or_else(|e| panic!("{what}: {e}"));
        match (&got[0], &want[0]) {
            (Buf::F32(g), Buf::F32(w)) => assert_close(g, w, 0.0, &what),
            (g, w) => assert_eq!(g, w, "{what}"),
        }
    }

    /// int64 values at the edges of the type and of its two words: equal
    /// low words with different high ones and the reverse, low words with
    /// their top bit set, exponents around 64, products that overflow.
    pub(in crate::backend::gpu) const EDGES: [i64; 34] = [
        0,
        1,
        -1,
        2,
        -2,
        3,
        -3,
        7,
        63,
        64,
        65,
        i64::MIN,
        i64::MIN + 1,
        i64::MAX,
        i64::MAX - 1,
        1 << 31,
        (1 << 32) - 1,
        1 << 32,
        (1 << 32) + 1,
        -(1 << 32),
        0x5_0000_0007,
        0x9_0000_0007,
        0x5_0000_0003,
        0x5_8000_0000,
        -0x5_0000_0007,
        0x7fff_ffff_0000_0000,
        -0x7fff_ffff_0000_0000,
        1_000_000_007,
        -1_000_000_007,
        3_037_000_499,
        3_037_000_500,
        0x1234_5678_9abc_def0,
        -0x1234_5678_9abc_def0,
        0x0000_0001_ffff_ffff,
    ];

    /// `n` pseudo-random int64 values of every magnitude (splitmix64): a
    /// quarter over the full range, the rest shifted down by random
    /// amounts with random signs (so that high words of 0 and -1 and small
    /// values come up too).
    pub(in crate::backend::gpu) fn wide(n: usize, seed: u64) -> Vec<i64> {
        let mut s = seed;
        (0..n)
            .map(|k| {
                s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = (s ^ (s >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^= z >> 31;
                let v = if k % 4 == 0 { z } else { z >> (z % 64) };
                // The shifted values take the sign of a bit they lost.
                if k % 4 != 0 && z & 1 == 1 {
                    (v as i64).wrapping_neg()
                } else {
                    v as i64
                }
            })
            .collect()
    }

    /// `v` as data of `dt` (int64, or uint64 with the same bits).
    pub(in crate::backend::gpu) fn pairs(dt: DataType, v: Vec<i64>) -> Buf {
        match dt {
            DataType::Uint64 => Buf::U64(v.into_iter().map(|x| x as u64).collect()),
            _ => Buf::I64(v),
        }
    }

    pub(in crate::backend::gpu) const WIDE_TYPES: [DataType; 2] =
        [DataType::Int64, DataType::Uint64];

    /// Broadcast pairs of shapes: equal, scalars, size-1 dimensions, and
    /// sizes that are not multiples of the 256-wide workgroup.
    pub(in crate::backend::gpu) const BROADCASTS: [[&[usize]; 2]; 8] = [
        [&[1, 1, 7], &[5, 1]],
        [&[300], &[300]],
        [&[6, 1, 4], &[3, 1]],
        [&[2, 2], &[]],
        [&[3, 1, 1, 263], &[2, 263]],
        [&[1], &[1]],
        [&[1, 5], &[1, 1]],
        [&[4, 1, 5], &[1, 3, 1]],
    ];

    /// Each of `names` on two operands of each of `types` (int64, uint64)
    /// against the CPU kernel: every edge value against every other, then
    /// each broadcast with small values (`check_vs_cpu`) and with values of
    /// every magnitude.
    pub(in crate::backend::gpu) fn word_pairs_vs_cpu(
        be: &mut GpuBackend,
        names: &[&str],
        types: &[DataType],
    ) {
        let e = EDGES.len();
        let size = |s: &[usize]| s.iter().product::<usize>();
        for name in names {
            for &dt in types {
                let data = vec![pairs(dt, EDGES.to_vec()), pairs(dt, EDGES.to_vec())];
                let g = op_graph(name, dt, &[&[e, 1], &[1, e]], &[]).unwrap();
                same_as_cpu(be, g, data);
                for (k, [sa, sb]) in BROADCASTS.iter().enumerate() {
                    check_vs_cpu(be, name, &[dt, dt], &[sa, sb], &[], 0.0);
                    let data = vec![
                        pairs(dt, wide(size(sa), 2 * k as u64 + 1)),
                        pairs(dt, wide(size(sb), 2 * k as u64 + 2)),
                    ];
                    same_as_cpu(be, op_graph(name, dt, &[sa, sb], &[]).unwrap(), data);
                }
            }
        }
    }

    #[test]
    fn binary_on_word_pairs() {
        let Some(mut be) = backend() else { return };
        let names = ["add", "sub", "mul", "div", "max", "min", "pow"];
        word_pairs_vs_cpu(&mut be, &names, &WIDE_TYPES);
    }

    #[test]
    fn int64_division_and_powers() {
        let Some(mut be) = backend() else { return };
        let i = DataType::Int64;
        // Truncation toward zero, division by zero, MIN / -1 wrapping.
        let a = vec![7, -7, 7, -7, 5, i64::MIN, i64::MIN, i64::MAX, 0, -1];
        let b = vec![2, 2, -2, -2, 0, -1, 1, i64::MIN, 0, i64::MIN];
        let g = op_graph("div", i, &[&[10], &[10]], &[]).unwrap();
        let out = run(&mut be, g, vec![Buf::I64(a), Buf::I64(b)]).unwrap();
        assert_eq!(
            out[0],
            Buf::I64(vec![3, -3, -3, 3, 0, i64::MIN, i64::MIN, 0, 0, 0])
        );
        // Negative exponents: exact for bases 1 and -1, 0 otherwise;
        // overflow wraps.
        let a = vec![1, -1, -1, 2, -2, 0, 3, -3, 2, 1 << 32];
        let b = vec![-5, -3, -4, -1, -1, -1, 40, 41, 64, 2];
        let g = op_graph("pow", i, &[&[10], &[10]], &[]).unwrap();
        let out = run(&mut be, g, vec![Buf::I64(a), Buf::I64(b)]).unwrap();
        let want = vec![
            1,
            -1,
            1,
            0,
            0,
            0,
            3i64.wrapping_pow(40),
            (-3i64).wrapping_pow(41),
            0,
            0,
        ];
        assert_eq!(out[0], Buf::I64(want));
    }
}

//! Element-wise operators: binary (with broadcasting), unary and clamp.
//!
//! One WGSL template per arity; the host substitutes the element type and
//! the operator's expression, so each (operator, type) pair compiles to its
//! own small pipeline, cached by source.

use super::{broadcast_strides, is_float, is_word, wgsl_type, word, Gpu, Step};
use crate::error::{Error, Result};
use crate::graph::op::{BinaryKind, UnaryKind};
use crate::graph::ops::activation::ActivationOp;
use crate::types::{DataType, OperandDescriptor};

const BINARY: &str = include_str!("shaders/binary.wgsl");
const UNARY: &str = include_str!("shaders/unary.wgsl");

/// The family's answer to [`super::supports`]: every operand of these
/// operators has the output's type, computed in one word.
pub(super) fn supports(op: &str, _operand: &str, dt: DataType) -> bool {
    match op {
        "add" | "sub" | "mul" | "div" | "max" | "min" | "pow" | "abs" | "neg" | "relu"
        | "clamp" | "identity" => is_word(dt),
        "sign" => is_float(dt) || wgsl_type(dt) == Some("i32"),
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
            Some(last) if last.1 == sa[d] * size && last.2 == sb[d] * size => {
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

/// `add`, `sub`, ... with numpy broadcasting of `a` and `b` to the output.
pub(super) fn binary(
    gpu: &mut Gpu,
    kind: BinaryKind,
    ins: &[&wgpu::Buffer],
    in_descs: &[&OperandDescriptor],
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let t = element_type(kind.name(), out_desc.data_type)?;
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
    let expr = match kind {
        BinaryKind::Add => "x + y",
        BinaryKind::Sub => "x - y",
        BinaryKind::Mul => "x * y",
        BinaryKind::Div if t == "f32" => "x / y",
        // WGSL's integer x / 0 is x; the CPU backend (and this one) give 0.
        BinaryKind::Div => "select(x / y, x - x, y == y - y)",
        BinaryKind::Max => "max(x, y)",
        BinaryKind::Min => "min(x, y)",
        BinaryKind::Pow => match t {
            "f32" => "pow_f32(x, y)",
            "i32" => "pow_i32(x, y)",
            _ => "pow_u32(x, y)",
        },
    };
    let source = BINARY.replace("{{T}}", t).replace("{{EXPR}}", expr);
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

/// `abs`, `neg`, `exp`, ... on one input.
pub(super) fn unary(
    gpu: &mut Gpu,
    kind: UnaryKind,
    input: &wgpu::Buffer,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let t = element_type(kind.name(), out_desc.data_type)?;
    let float = t == "f32";
    let expr = match kind {
        UnaryKind::Abs => "abs(v)",
        UnaryKind::Neg if t == "u32" => "0u - v",
        UnaryKind::Neg => "-v",
        UnaryKind::Relu => "max(v, {{T}}(0))",
        UnaryKind::Exp if float => "exp(v)",
        UnaryKind::Log if float => "log(v)",
        UnaryKind::Sqrt if float => "sqrt(v)",
        UnaryKind::Sigmoid if float => "1.0 / (1.0 + exp(-v))",
        // Some drivers compute tanh as a ratio of exponentials, which gives
        // NaN once they overflow; tanh(±10) already rounds to ±1 in f32.
        UnaryKind::Tanh if float => "tanh(clamp(v, -10.0, 10.0))",
        UnaryKind::Ceil if float => "ceil(v)",
        UnaryKind::Cos if float => "cos(v)",
        UnaryKind::Floor if float => "floor(v)",
        UnaryKind::Identity => "v",
        UnaryKind::Erf if float => {
            "select(erf_as(v), v, (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u)"
        }
        UnaryKind::Reciprocal if float => "1.0 / v",
        // WGSL's round() rounds halfway cases to even.
        UnaryKind::RoundEven if float => "round(v)",
        UnaryKind::Sin if float => "sin(v)",
        UnaryKind::Sign if float || t == "i32" => "sign(v)",
        UnaryKind::Tan if float => "tan(v)",
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
    let t = element_type("clamp", out_desc.data_type)?;
    let bounds = match t {
        "f32" => [(min as f32).to_bits(), (max as f32).to_bits()],
        "i32" => [(min as i32) as u32, (max as i32) as u32],
        _ => [min as u32, max as u32],
    };
    run_unary(
        gpu,
        t,
        "min(max(v, lo()), hi())",
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
            "select(max(v, 0.0) + log1p_f(exp(-abs(v))), v, (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u)",
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

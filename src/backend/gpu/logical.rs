//! Operators over up to three broadcast inputs of possibly different
//! types: comparisons and logical operators (uint8 outputs, computed as
//! u32 0/1), `where` and `prelu`. One generated WGSL source per (operator,
//! types).

use super::{broadcast_strides, is_float, is_word, wgsl_type, word, Gpu, Step};
use crate::error::{Error, Result};
use crate::graph::ops::activation::ActivationOp;
use crate::graph::ops::logical::LogicalOp;
use crate::types::{DataType, OperandDescriptor};

/// The family's answer to [`super::supports`].
pub(super) fn supports(op: &str, _operand: &str, dt: DataType) -> bool {
    match op {
        "equal" | "notEqual" | "greater" | "greaterOrEqual" | "lesser" | "lesserOrEqual"
        | "where" => is_word(dt),
        "logicalNot" | "logicalAnd" | "logicalOr" | "logicalXor" => dt == DataType::Uint8,
        "isNaN" | "isInfinite" => is_float(dt) || dt == DataType::Uint8,
        "prelu" => is_float(dt) || wgsl_type(dt) == Some("i32"),
        _ => false,
    }
}

/// A step computing `expr` (on `a`, `b`, `c`: the inputs' elements, uint8
/// ones as u32) for every output element, inputs broadcast to the output.
fn run(
    gpu: &mut Gpu,
    expr: &str,
    ins: &[&wgpu::Buffer],
    in_descs: &[&OperandDescriptor],
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let name = |dt: DataType| {
        wgsl_type(dt).ok_or_else(|| {
            Error::not_supported(format!(
                "{} tensors are not supported by this operator on the GPU backend yet",
                dt.name()
            ))
        })
    };
    let n = out_desc.element_count() as u64;
    if n == 0 {
        return Ok(None);
    }
    // Size-1 output dimensions are dropped; the rest keep their strides.
    let strides: Vec<Vec<u64>> = in_descs
        .iter()
        .map(|d| broadcast_strides(&d.shape, &out_desc.shape))
        .collect();
    let dims: Vec<usize> = (0..out_desc.rank())
        .filter(|&d| out_desc.shape[d] != 1)
        .collect();
    let mut p = vec![word(n)?, dims.len() as u32];
    for &d in &dims {
        p.push(word(out_desc.shape[d] as u64)?);
    }
    for s in &strides {
        for &d in &dims {
            p.push(word(s[d])?);
        }
    }
    let letters = ["a", "b", "c"];
    let mut src = String::from("@group(0) @binding(0) var<storage, read> p: array<u32>;\n");
    let mut loads = String::new();
    for (k, d) in in_descs.iter().enumerate() {
        let t = name(d.data_type)?;
        let l = letters[k];
        src += &format!(
            "@group(0) @binding({}) var<storage, read> in{k}: array<{t}>;\n",
            k + 1
        );
        let at = format!("p[2u + rank * {}u + k]", k + 1);
        loads += &format!("        i{k} += c * {at};\n");
        let value = format!("in{k}[i{k}]");
        let _ = l;
        src += &format!("fn ld{k}(i{k}: u32) -> {t} {{ return {value}; }}\n");
    }
    let ot = name(out_desc.data_type)?;
    src += &format!(
        "@group(0) @binding({}) var<storage, read_write> out: array<{ot}>;\n",
        in_descs.len() + 1
    );
    let args: Vec<String> = (0..in_descs.len())
        .map(|k| {
            format!(
                "{}: {}",
                letters[k],
                name(in_descs[k].data_type).unwrap_or("u32")
            )
        })
        .collect();
    src += &format!("fn op({}) -> {ot} {{ return {expr}; }}\n", args.join(", "));
    let decls: String = (0..in_descs.len())
        .map(|k| format!("    var i{k} = 0u;\n"))
        .collect();
    let call: Vec<String> = (0..in_descs.len())
        .map(|k| format!("ld{k}(i{k})"))
        .collect();
    src += &format!(
        "fn value(e: u32) -> {ot} {{
    let rank = p[1];
    var rem = e;
{decls}    for (var d = rank; d > 0u; d--) {{
        let k = d - 1u;
        let dim = p[2u + k];
        let c = rem % dim;
        rem = rem / dim;
{loads}    }}
    return op({});
}}
",
        call.join(", ")
    );
    let (body, invocations) = (
        "    if (i >= p[0]) {
        return;
    }
    out[i] = value(i);",
        n,
    );
    src += &format!(
        "@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let i = gid.y * nwg.x * 256u + gid.x;
{body}
}}
"
    );
    let params = gpu.params(&p)?;
    let grid = gpu.grid_1d(invocations)?;
    let mut bufs: Vec<&wgpu::Buffer> = vec![&params];
    bufs.extend(ins.iter().copied());
    bufs.push(out);
    gpu.step(src, "main", &bufs, grid).map(Some)
}

/// Comparisons, logical operators, isNaN and isInfinite.
pub(super) fn logical(
    gpu: &mut Gpu,
    op: LogicalOp,
    ins: &[&wgpu::Buffer],
    in_descs: &[&OperandDescriptor],
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let expr = match op {
        LogicalOp::Equal => "u32(a == b)",
        LogicalOp::NotEqual => "u32(a != b)",
        LogicalOp::Greater => "u32(a > b)",
        LogicalOp::GreaterOrEqual => "u32(a >= b)",
        LogicalOp::Lesser => "u32(a < b)",
        LogicalOp::LesserOrEqual => "u32(a <= b)",
        LogicalOp::LogicalNot => "u32(a == 0u)",
        LogicalOp::LogicalAnd => "u32(a != 0u && b != 0u)",
        LogicalOp::LogicalOr => "u32(a != 0u || b != 0u)",
        LogicalOp::LogicalXor => "u32((a != 0u) != (b != 0u))",
        LogicalOp::IsNaN => "u32((bitcast<u32>(a) & 0x7fffffffu) > 0x7f800000u)",
        LogicalOp::IsInfinite => "u32((bitcast<u32>(a) & 0x7fffffffu) == 0x7f800000u)",
    };
    run(gpu, expr, ins, in_descs, out, out_desc)
}

/// `where` (condition, trueValue, falseValue) and `prelu` (input, slope).
pub(super) fn activation(
    gpu: &mut Gpu,
    op: &ActivationOp,
    ins: &[&wgpu::Buffer],
    in_descs: &[&OperandDescriptor],
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let expr = match op {
        ActivationOp::Where => "select(c, b, a != 0u)",
        ActivationOp::Prelu if wgsl_type(out_desc.data_type) == Some("i32") => {
            "select(a * b, a, a >= 0)"
        }
        ActivationOp::Prelu => "select(a * b, a, a >= 0.0)",
        _ => {
            return Err(Error::operation(format!(
                "{} is not a broadcast activation",
                op.name()
            )))
        }
    };
    run(gpu, expr, ins, in_descs, out, out_desc)
}

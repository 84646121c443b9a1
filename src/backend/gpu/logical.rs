//! Operators over up to three broadcast inputs of possibly different
//! types: comparisons and logical operators (uint8 outputs, computed as
//! u32 0/1), `where` and `prelu`. One generated WGSL source per (operator,
//! types).

use super::elementwise::INT64;
use super::{broadcast_strides, convert, is_float, wgsl_type, word, Gpu, Step};
use crate::error::{Error, Result};
use crate::graph::ops::activation::ActivationOp;
use crate::graph::ops::logical::LogicalOp;
use crate::types::{DataType, OperandDescriptor};

/// The family's answer to [`super::supports`].
pub(super) fn supports(op: &str, _operand: &str, dt: DataType) -> bool {
    match op {
        // int64/uint64 compare and select as word pairs.
        "equal" | "notEqual" | "greater" | "greaterOrEqual" | "lesser" | "lesserOrEqual"
        | "where" => true,
        "logicalNot" | "logicalAnd" | "logicalOr" | "logicalXor" => dt == DataType::Uint8,
        "isNaN" | "isInfinite" => is_float(dt) || dt == DataType::Uint8,
        "prelu" => is_float(dt) || wgsl_type(dt) == Some("i32") || dt == DataType::Int64,
        _ => false,
    }
}

/// A step computing `expr` (on `a`, `b`, `c`: the inputs' elements in
/// their compute types, uint8 ones as u32, int64/uint64 ones as word
/// pairs) for every output element, inputs broadcast to the output.
fn run(
    gpu: &mut Gpu,
    expr: &str,
    ins: &[&wgpu::Buffer],
    in_descs: &[&OperandDescriptor],
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
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
    let mut src = String::from(
        "@group(0) @binding(0) var<storage, read> p: array<u32>;
fn nan(v: f32) -> bool { return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u; }
",
    );
    let mut loads = String::new();
    let mut args = Vec::new();
    for (k, d) in in_descs.iter().enumerate() {
        let t = convert::compute_type(d.data_type);
        src += &format!(
            "@group(0) @binding({}) var<storage, read> in{k}: array<{t}>;\n",
            k + 1
        );
        loads += &format!("        i{k} += c * p[2u + rank * {}u + k];\n", k + 1);
        src += &format!("fn ld{k}(i{k}: u32) -> {t} {{ return in{k}[i{k}]; }}\n");
        args.push(format!("{}: {t}", letters[k]));
    }
    let ot = convert::compute_type(out_desc.data_type);
    src += &format!(
        "@group(0) @binding({}) var<storage, read_write> out: array<{ot}>;\n",
        in_descs.len() + 1
    );
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

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {{
        return;
    }}
    out[i] = value(i);
}}
",
        call.join(", ")
    );
    if in_descs
        .iter()
        .chain([&out_desc])
        .any(|d| convert::words(d.data_type) == 2)
    {
        src += INT64;
    }
    let params = gpu.params(&p)?;
    let grid = gpu.grid_1d(n)?;
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
    // Word pairs compare through shaders/int64.wgsl.
    if let Some(dt @ (DataType::Int64 | DataType::Uint64)) = in_descs.first().map(|d| d.data_type) {
        let lt = if dt == DataType::Int64 {
            "lt_s64"
        } else {
            "lt_u64"
        };
        // `lt` stands for the comparison of the type.
        let expr = match op {
            LogicalOp::Equal => "u32(all(a == b))",
            LogicalOp::NotEqual => "u32(any(a != b))",
            LogicalOp::Greater => "u32(lt(b, a))",
            LogicalOp::GreaterOrEqual => "u32(!lt(a, b))",
            LogicalOp::Lesser => "u32(lt(a, b))",
            LogicalOp::LesserOrEqual => "u32(!lt(b, a))",
            _ => {
                return Err(Error::not_supported(format!(
                    "{} on {} is not supported on the GPU backend",
                    op.name(),
                    dt.name()
                )))
            }
        }
        .replace("lt(", &format!("{lt}("));
        return run(gpu, &expr, ins, in_descs, out, out_desc);
    }
    // Floats compare with NaN tested by its bits first: WGSL lets a
    // compiler assume floats are never NaN, and lavapipe's does, so `a == b`
    // alone can be true and `a != b` false for NaN operands. IEEE 754 wants
    // every ordered comparison with a NaN false and notEqual true.
    if in_descs.first().is_some_and(|d| is_float(d.data_type)) {
        let ordered = "!nan(a) && !nan(b)";
        let expr = match op {
            LogicalOp::Equal => format!("u32({ordered} && a == b)"),
            LogicalOp::NotEqual => format!("u32(!({ordered}) || a != b)"),
            LogicalOp::Greater => format!("u32({ordered} && a > b)"),
            LogicalOp::GreaterOrEqual => format!("u32({ordered} && a >= b)"),
            LogicalOp::Lesser => format!("u32({ordered} && a < b)"),
            LogicalOp::LesserOrEqual => format!("u32({ordered} && a <= b)"),
            _ => String::new(),
        };
        if !expr.is_empty() {
            return run(gpu, &expr, ins, in_descs, out, out_desc);
        }
    }
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
        // Whatever the values' compute type, word pairs included.
        ActivationOp::Where => "select(c, b, a != 0u)",
        ActivationOp::Prelu if out_desc.data_type == DataType::Int64 => {
            "select(mul64(a, b), a, !negative(a))"
        }
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

#[cfg(test)]
mod tests {
    use super::super::elementwise::tests::{
        pairs, same_as_cpu, wide, word_pairs_vs_cpu, WIDE_TYPES,
    };
    use super::super::testing::*;
    use crate::graph::GraphBuilder;
    use crate::types::DataType;

    fn size(s: &[usize]) -> usize {
        s.iter().product()
    }

    #[test]
    fn comparisons_of_word_pairs() {
        let Some(mut be) = backend() else { return };
        // The family's operators that take int64: the comparisons.
        let names: Vec<&str> = crate::graph::ops::logical::DEFS
            .iter()
            .filter(|d| d.operands[0].types.contains(&DataType::Int64))
            .map(|d| d.name)
            .collect();
        assert_eq!(names.len(), 6, "{names:?}");
        word_pairs_vs_cpu(&mut be, &names, &WIDE_TYPES);
    }

    #[test]
    fn where_selects_word_pairs() {
        let Some(mut be) = backend() else { return };
        let u8t = DataType::Uint8;
        let shapes: [[&[usize]; 3]; 4] = [
            [&[2, 1, 5], &[3, 1], &[5]],
            [&[300], &[300], &[300]],
            [&[1], &[4, 263], &[1, 1]],
            [&[6, 1], &[], &[1, 7]],
        ];
        for dt in WIDE_TYPES {
            for (k, s) in shapes.iter().enumerate() {
                check_vs_cpu(&mut be, "where", &[u8t, dt, dt], s, &[], 0.0);
                let data = vec![
                    random_buf(u8t, size(s[0]), k as u64),
                    pairs(dt, wide(size(s[1]), 2 * k as u64 + 1)),
                    pairs(dt, wide(size(s[2]), 2 * k as u64 + 2)),
                ];
                // Inputs of three types, in the graph's input order.
                let mut b = GraphBuilder::new();
                let mut args = Vec::new();
                for (name, (t, shape)) in ["c", "t", "f"].iter().zip([u8t, dt, dt].iter().zip(s)) {
                    let id = b.input(name, desc(*t, shape)).unwrap();
                    args.push(operand(&b, id));
                }
                let y = b.call("where", &args).unwrap()[0];
                same_as_cpu(&mut be, b.build(vec![("y".into(), y)]).unwrap(), data);
            }
        }
    }

    #[test]
    fn prelu_on_int64() {
        let Some(mut be) = backend() else { return };
        word_pairs_vs_cpu(&mut be, &["prelu"], &[DataType::Int64]);
    }
}

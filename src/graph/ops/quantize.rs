//! quantizeLinear and dequantizeLinear.
//!
//! `scale` and `zeroPoint` are blockwise broadcast to the input: each of
//! their dimensions divides the input's, and every element covers a block
//! of input elements. The spec asks for equal ranks; the WPT vectors also
//! pass lower-rank scales (a scalar, or `[2]` for a `[3, 4]` input), so a
//! lower rank is accepted and aligned to the input's trailing dimensions
//! (leading dimensions count as 1), which agrees with the spec wherever the
//! spec accepts.

use super::{arg, check, lim, OpDef, FLOATS, MAX_RANK};
use crate::error::Result;
use crate::f16::f16_to_f32;
use crate::graph::args::{Ctx, Val};
use crate::graph::{GraphBuilder, OperandId};
use crate::types::{DataType, OperandDescriptor};

/// The resolved operators of this family. Inputs: input, scale, zeroPoint.
/// `block` is the size of the input block each scale element covers, per
/// input dimension (scale is aligned to the input's trailing dimensions).
#[derive(Debug, Clone, PartialEq)]
pub enum QuantizeOp {
    Quantize { block: Vec<usize> },
    Dequantize { block: Vec<usize> },
}

impl QuantizeOp {
    pub fn name(&self) -> &'static str {
        match self {
            QuantizeOp::Quantize { .. } => "quantizeLinear",
            QuantizeOp::Dequantize { .. } => "dequantizeLinear",
        }
    }
}

use DataType::*;
/// The quantized types (the spec's table, plus the 4-bit types the WPT
/// vectors use).
const QUANTIZED: &[DataType] = &[Uint8, Int8, Uint32, Int32, Uint4, Int4];

/// Blockwise broadcasting of `from` to `to` (trailing alignment), giving
/// the block size per dimension of `to`.
fn blockwise(from: &[usize], to: &[usize]) -> Option<Vec<usize>> {
    if from.len() > to.len() {
        return None;
    }
    let off = to.len() - from.len();
    to.iter()
        .enumerate()
        .map(|(i, &t)| {
            let f = if i < off { 1 } else { from[i - off] };
            (f != 0 && t % f == 0).then(|| t / f)
        })
        .collect()
}

/// The first value of a float32/float16 constant that is not > 0 (NaN
/// included), if any.
fn first_non_positive(dt: DataType, bytes: &[u8]) -> Option<f32> {
    let bad = |v: f32| (v.is_nan() || v <= 0.0).then_some(v);
    match dt {
        Float32 => bytes
            .chunks_exact(4)
            .find_map(|c| bad(f32::from_le_bytes([c[0], c[1], c[2], c[3]]))),
        Float16 => bytes
            .chunks_exact(2)
            .find_map(|c| bad(f16_to_f32(u16::from_le_bytes([c[0], c[1]])))),
        _ => None,
    }
}

/// The shared steps of both operators.
fn build(b: &mut GraphBuilder, args: &[Val], quantize: bool) -> Result<Vec<OperandId>> {
    let name = if quantize {
        "quantizeLinear"
    } else {
        "dequantizeLinear"
    };
    let mut ctx = Ctx::new(name);
    let _ = ctx.options(arg(args, 3))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let s = b.operand(&ctx, arg(args, 1), "scale")?;
    let z = b.operand(&ctx, arg(args, 2), "zeroPoint")?;
    let (dx, ds, dz) = (b.desc(x).clone(), b.desc(s).clone(), b.desc(z).clone());
    check(&ctx, "input", &dx)?;
    check(&ctx, "scale", &ds)?;
    check(&ctx, "zeroPoint", &dz)?;
    // "Same as" constraints of the table.
    if quantize && ds.data_type != dx.data_type {
        return Err(ctx.err(format!(
            "scale has data type {}, not the input's {}",
            ds.data_type.name(),
            dx.data_type.name()
        )));
    }
    if !quantize && dz.data_type != dx.data_type {
        return Err(ctx.err(format!(
            "zeroPoint has data type {}, not the input's {}",
            dz.data_type.name(),
            dx.data_type.name()
        )));
    }
    // The scale must be positive and non-zero (#906). Its values are known
    // here only when it is a constant; a scale fed at dispatch is used as
    // given (the spec leaves no way to refuse it at build).
    if let Some(bytes) = b.constant_bytes(s) {
        if let Some(v) = first_non_positive(ds.data_type, bytes) {
            return Err(ctx.err(format!(
                "scale must be positive and non-zero, but holds {v}"
            )));
        }
    }
    if ds.rank() > dx.rank() || dz.rank() > dx.rank() {
        return Err(ctx.err(format!(
            "scale (rank {}) and zeroPoint (rank {}) may not have a higher rank than the input ({})",
            ds.rank(),
            dz.rank(),
            dx.rank()
        )));
    }
    if ds.shape != dz.shape {
        return Err(ctx.err(format!(
            "scale {:?} and zeroPoint {:?} must have the same shape",
            ds.shape, dz.shape
        )));
    }
    let block = blockwise(&ds.shape, &dx.shape).ok_or_else(|| {
        ctx.err(format!(
            "scale {:?} is not blockwise broadcastable to the input {:?}",
            ds.shape, dx.shape
        ))
    })?;
    let out_type = if quantize { dz.data_type } else { ds.data_type };
    let out = OperandDescriptor::new(out_type, dx.shape.clone()).map_err(|e| ctx.err(e.message))?;
    let op = if quantize {
        QuantizeOp::Quantize { block }
    } else {
        QuantizeOp::Dequantize { block }
    };
    Ok(b.push(op, vec![x, s, z], vec![out], ctx.label))
}

fn build_quantize_linear(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    build(b, args, true)
}

fn build_dequantize_linear(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    build(b, args, false)
}

pub const QUANTIZE_LINEAR: OpDef = OpDef {
    name: "quantizeLinear",
    build: build_quantize_linear,
    operands: &[
        lim("input", FLOATS, 0, MAX_RANK),
        lim("scale", FLOATS, 0, MAX_RANK),
        lim("zeroPoint", QUANTIZED, 0, MAX_RANK),
        lim("output", QUANTIZED, 0, MAX_RANK),
    ],
};

pub const DEQUANTIZE_LINEAR: OpDef = OpDef {
    name: "dequantizeLinear",
    build: build_dequantize_linear,
    operands: &[
        lim("input", QUANTIZED, 0, MAX_RANK),
        lim("scale", FLOATS, 0, MAX_RANK),
        lim("zeroPoint", QUANTIZED, 0, MAX_RANK),
        lim("output", FLOATS, 0, MAX_RANK),
    ],
};

/// This family's builder methods.
pub const DEFS: &[OpDef] = &[DEQUANTIZE_LINEAR, QUANTIZE_LINEAR];

#[cfg(test)]
mod tests {
    use super::super::testing::{err, input};
    use super::*;

    #[test]
    fn block_sizes() {
        assert_eq!(blockwise(&[2, 2], &[6, 4]), Some(vec![3, 2]));
        assert_eq!(blockwise(&[2], &[3, 4]), Some(vec![3, 2]));
        assert_eq!(blockwise(&[], &[5]), Some(vec![5]));
        assert_eq!(blockwise(&[4, 5], &[9, 3]), None);
        assert_eq!(blockwise(&[1, 2, 3], &[2, 3]), None);
    }

    #[test]
    fn validation() {
        let mut b = GraphBuilder::new();
        let x = input(&mut b, "x", Float32, &[6, 4]);
        let s = input(&mut b, "s", Float32, &[2, 2]);
        let sh = input(&mut b, "sh", Float16, &[2, 2]);
        let z = input(&mut b, "z", Uint8, &[2, 2]);
        let z4 = input(&mut b, "z4", Int4, &[2, 2]);
        let z3 = input(&mut b, "z3", Uint8, &[4, 2]);
        let s3 = input(&mut b, "s3", Float32, &[4, 2]);
        let zi64 = input(&mut b, "zi64", Int64, &[2, 2]);
        let q = b
            .call("quantizeLinear", &[x.clone(), s.clone(), z.clone()])
            .unwrap();
        assert_eq!(b.desc(q[0]).data_type, Uint8);
        assert_eq!(b.desc(q[0]).shape, vec![6, 4]);
        let q4 = b
            .call("quantizeLinear", &[x.clone(), s.clone(), z4.clone()])
            .unwrap();
        assert_eq!(b.desc(q4[0]).data_type, Int4);
        assert!(
            err(b.call("quantizeLinear", &[x.clone(), sh.clone(), z.clone()])).contains("scale")
        );
        assert!(
            err(b.call("quantizeLinear", &[x.clone(), s.clone(), z3.clone()]))
                .contains("same shape")
        );
        assert!(err(b.call("quantizeLinear", &[x.clone(), s3, z3])).contains("blockwise"));
        assert!(err(b.call("quantizeLinear", &[x.clone(), s.clone(), zi64])).contains("zeroPoint"));
        // dequantizeLinear: output takes the scale's type.
        let qv = Val::Operand {
            builder: b.id,
            id: q[0],
        };
        let d = b
            .call("dequantizeLinear", &[qv.clone(), sh.clone(), z.clone()])
            .unwrap();
        assert_eq!(b.desc(d[0]).data_type, Float16);
        assert!(err(b.call("dequantizeLinear", &[qv, s.clone(), z4])).contains("zeroPoint"));
        assert!(err(b.call("dequantizeLinear", &[x, s, z])).contains("input"));
        let bigs = input(&mut b, "bigs", Float32, &[1, 2, 2]);
        let bigz = input(&mut b, "bigz", Uint8, &[1, 2, 2]);
        let q1 = input(&mut b, "q1", Uint8, &[4]);
        assert!(err(b.call("dequantizeLinear", &[q1, bigs, bigz])).contains("rank"));
    }

    /// A constant scale must be positive and non-zero (#906); a scale fed
    /// at dispatch is not known at build.
    #[test]
    fn constant_scale_is_positive() {
        let mut b = GraphBuilder::new();
        let x = input(&mut b, "x", Float32, &[2]);
        let z = input(&mut b, "z", Uint8, &[2]);
        let scale = |b: &mut GraphBuilder, v: [f32; 2]| {
            let bytes: Vec<u8> = v.iter().flat_map(|f| f.to_le_bytes()).collect();
            let d = OperandDescriptor::new(Float32, vec![2]).unwrap();
            let id = b.constant(d, std::sync::Arc::new(bytes)).unwrap();
            Val::Operand { builder: b.id, id }
        };
        for bad in [[1.0, 0.0], [-1.0, 1.0], [f32::NAN, 1.0], [1.0, -0.0]] {
            let s = scale(&mut b, bad);
            assert!(err(b.call("quantizeLinear", &[x.clone(), s, z.clone()])).contains("positive"));
        }
        let s = scale(&mut b, [0.5, 2.0]);
        b.call("quantizeLinear", &[x.clone(), s, z.clone()])
            .unwrap();
        let fed = input(&mut b, "s", Float32, &[2]);
        b.call("quantizeLinear", &[x, fed, z]).unwrap();
    }
}

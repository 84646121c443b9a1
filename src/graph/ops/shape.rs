//! Tensor manipulation: reshape, transpose, concat, slice, and cast.

use super::{arg, check, lim, OpDef, ALL_TYPES, MAX_RANK, MAX_SEQUENCE};
use crate::error::Result;
use crate::graph::args::{Ctx, Val};
use crate::graph::{GraphBuilder, OperandId};
use crate::types::{DataType, OperandDescriptor};

/// `reshape`'s resolved parameters: none; the output descriptor holds the
/// new shape. Input: input.
#[derive(Debug, Clone, PartialEq)]
pub struct ReshapeParams;

/// Resolved `transpose` parameters. Input: input.
#[derive(Debug, Clone, PartialEq)]
pub struct TransposeParams {
    pub permutation: Vec<usize>,
}

/// Resolved `concat` parameters. Inputs: every concatenated operand.
#[derive(Debug, Clone, PartialEq)]
pub struct ConcatParams {
    pub axis: usize,
}

/// Resolved `slice` parameters. Input: input.
#[derive(Debug, Clone, PartialEq)]
pub struct SliceParams {
    pub starts: Vec<usize>,
    pub sizes: Vec<usize>,
    pub strides: Vec<usize>,
}

/// Resolved `cast` parameters: the type converted to. Input: input.
#[derive(Debug, Clone, PartialEq)]
pub struct CastParams {
    pub to: DataType,
}

/// The `newShape` argument of reshape and expand: at most MAX_RANK sizes.
pub(super) fn new_shape(ctx: &Ctx, v: &Val) -> Result<Vec<usize>> {
    let shape: Vec<usize> = ctx
        .u32_list(v, "newShape")?
        .into_iter()
        .map(|v| v as usize)
        .collect();
    if shape.len() > MAX_RANK {
        return Err(ctx.err(format!(
            "newShape has rank {}, more than {MAX_RANK}",
            shape.len()
        )));
    }
    Ok(shape)
}

/// `reshape(input, newShape)`: same element count.
fn build_reshape(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("reshape");
    ctx.options(arg(args, 2))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let d = b.desc(x).clone();
    check(&ctx, "input", &d)?;
    let shape = new_shape(&ctx, arg(args, 1))?;
    let out = OperandDescriptor::new(d.data_type, shape).map_err(|e| ctx.err(e.message))?;
    if out.element_count() != d.element_count() {
        return Err(ctx.err(format!(
            "newShape {:?} has {} elements but the input {:?} has {}",
            out.shape,
            out.element_count(),
            d.shape,
            d.element_count()
        )));
    }
    Ok(b.push(ReshapeParams, vec![x], vec![out], ctx.label))
}

pub const RESHAPE: OpDef = OpDef {
    name: "reshape",
    build: build_reshape,
    operands: &[
        lim("input", ALL_TYPES, 0, MAX_RANK),
        lim("output", ALL_TYPES, 0, MAX_RANK),
    ],
};

/// `transpose(input, {permutation})`: default reverses the dimensions.
fn build_transpose(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("transpose");
    let opts = ctx.options(arg(args, 1))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let d = b.desc(x).clone();
    check(&ctx, "input", &d)?;
    let rank = d.rank();
    let permutation: Vec<usize> =
        match ctx.opt_u32_list(opts.member("permutation"), "permutation")? {
            None => (0..rank).rev().collect(),
            Some(p) => p.into_iter().map(|v| v as usize).collect(),
        };
    let mut seen = vec![false; rank];
    if permutation.len() != rank
        || permutation
            .iter()
            .any(|&p| p >= rank || std::mem::replace(&mut seen[p], true))
    {
        return Err(ctx.err(format!(
            "permutation {permutation:?} is not a permutation of rank {rank}"
        )));
    }
    let shape = permutation.iter().map(|&p| d.shape[p]).collect();
    let out = OperandDescriptor::new(d.data_type, shape).map_err(|e| ctx.err(e.message))?;
    Ok(b.push(
        TransposeParams { permutation },
        vec![x],
        vec![out],
        ctx.label,
    ))
}

pub const TRANSPOSE: OpDef = OpDef {
    name: "transpose",
    build: build_transpose,
    operands: &[
        lim("input", ALL_TYPES, 0, MAX_RANK),
        lim("output", ALL_TYPES, 0, MAX_RANK),
    ],
};

/// `concat(inputs, axis)`: same type and rank; equal sizes but on `axis`.
fn build_concat(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("concat");
    ctx.options(arg(args, 2))?;
    let inputs = b.operand_list(&ctx, arg(args, 0), "inputs")?;
    let axis = ctx.u32(arg(args, 1), "axis")? as usize;
    let first = match inputs.first() {
        Some(&f) => b.desc(f).clone(),
        None => return Err(ctx.err("inputs must not be empty")),
    };
    if inputs.len() > MAX_SEQUENCE {
        return Err(ctx.err(format!(
            "inputs has {} operands, more than {MAX_SEQUENCE}",
            inputs.len()
        )));
    }
    if axis >= first.rank() {
        return Err(ctx.err(format!(
            "axis {axis} is out of range for rank {}",
            first.rank()
        )));
    }
    let mut shape = first.shape.clone();
    shape[axis] = 0;
    for (i, &id) in inputs.iter().enumerate() {
        let d = b.desc(id);
        check(&ctx, "inputs", d)?;
        if d.data_type != first.data_type || d.rank() != first.rank() {
            return Err(ctx.err(format!(
                "inputs[{i}] must have the data type and rank of inputs[0]"
            )));
        }
        for (dim, (&s, &f)) in d.shape.iter().zip(&first.shape).enumerate() {
            if dim != axis && s != f {
                return Err(ctx.err(format!(
                    "inputs[{i}] has shape {:?}, which differs from {:?} outside the axis",
                    d.shape, first.shape
                )));
            }
        }
        shape[axis] = shape[axis]
            .checked_add(d.shape[axis])
            .ok_or_else(|| ctx.err("the concatenated size overflows"))?;
    }
    let out = OperandDescriptor::new(first.data_type, shape).map_err(|e| ctx.err(e.message))?;
    Ok(b.push(ConcatParams { axis }, inputs, vec![out], ctx.label))
}

pub const CONCAT: OpDef = OpDef {
    name: "concat",
    build: build_concat,
    operands: &[
        lim("inputs", ALL_TYPES, 1, MAX_RANK),
        lim("output", ALL_TYPES, 1, MAX_RANK),
    ],
};

/// `slice(input, starts, sizes, {strides})`.
fn build_slice(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("slice");
    let opts = ctx.options(arg(args, 3))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let d = b.desc(x).clone();
    check(&ctx, "input", &d)?;
    let rank = d.rank();
    let starts = ctx.u32_list(arg(args, 1), "starts")?;
    let sizes = ctx.u32_list(arg(args, 2), "sizes")?;
    let strides = ctx
        .opt_u32_list(opts.member("strides"), "strides")?
        .unwrap_or_else(|| vec![1; rank]);
    if starts.len() != rank || sizes.len() != rank || strides.len() != rank {
        return Err(ctx.err(format!(
            "starts, sizes and strides must each have {rank} values"
        )));
    }
    let mut shape = Vec::with_capacity(rank);
    for i in 0..rank {
        let (s, z, st) = (starts[i] as usize, sizes[i] as usize, strides[i] as usize);
        if z == 0 || st == 0 {
            return Err(ctx.err(format!(
                "sizes[{i}] and strides[{i}] must be greater than 0"
            )));
        }
        if s >= d.shape[i] || s + z > d.shape[i] {
            return Err(ctx.err(format!(
                "starts[{i}] + sizes[{i}] ({s} + {z}) exceeds the dimension {}",
                d.shape[i]
            )));
        }
        shape.push(z.div_ceil(st));
    }
    let out = OperandDescriptor::new(d.data_type, shape).map_err(|e| ctx.err(e.message))?;
    let op = SliceParams {
        starts: starts.into_iter().map(|v| v as usize).collect(),
        sizes: sizes.into_iter().map(|v| v as usize).collect(),
        strides: strides.into_iter().map(|v| v as usize).collect(),
    };
    Ok(b.push(op, vec![x], vec![out], ctx.label))
}

pub const SLICE: OpDef = OpDef {
    name: "slice",
    build: build_slice,
    operands: &[
        lim("input", ALL_TYPES, 1, MAX_RANK),
        lim("output", ALL_TYPES, 1, MAX_RANK),
    ],
};

/// `cast(input, type)`.
fn build_cast(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("cast");
    ctx.options(arg(args, 2))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let d = b.desc(x).clone();
    check(&ctx, "input", &d)?;
    let to = ctx.data_type(arg(args, 1), "type")?;
    let out = OperandDescriptor::new(to, d.shape.clone()).map_err(|e| ctx.err(e.message))?;
    check(&ctx, "output", &out)?;
    Ok(b.push(CastParams { to }, vec![x], vec![out], ctx.label))
}

pub const CAST: OpDef = OpDef {
    name: "cast",
    build: build_cast,
    operands: &[
        lim("input", ALL_TYPES, 0, MAX_RANK),
        lim("output", ALL_TYPES, 0, MAX_RANK),
    ],
};

/// This family's builder methods.
pub const DEFS: &[OpDef] = &[RESHAPE, TRANSPOSE, CONCAT, SLICE, CAST];

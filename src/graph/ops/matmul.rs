//! `matmul()` and `gemm()`.

use super::{arg, broadcast_shapes, broadcasts_to, check, lim, OpDef, FLOATS, MAX_RANK};
use crate::error::Result;
use crate::graph::args::{Ctx, Val};
use crate::graph::{GraphBuilder, OperandId};
use crate::types::OperandDescriptor;

/// `matmul`'s resolved parameters: none beyond its operands' shapes.
/// Inputs: a, b (batched, broadcast).
#[derive(Debug, Clone, PartialEq)]
pub struct MatmulParams;

/// Resolved `gemm` parameters. Inputs: a, b, and c when `has_c`.
#[derive(Debug, Clone, PartialEq)]
pub struct GemmParams {
    pub alpha: f64,
    pub beta: f64,
    pub a_transpose: bool,
    pub b_transpose: bool,
    pub has_c: bool,
    /// Output rows and columns, and the shared dimension.
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

/// `matmul(a, b)`: both of rank >= 2; the leading (batch) dimensions
/// broadcast; the output is [...batch, M, N].
fn build_matmul(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("matmul");
    ctx.options(arg(args, 2))?;
    let a = b.operand(&ctx, arg(args, 0), "a")?;
    let c = b.operand(&ctx, arg(args, 1), "b")?;
    let (da, db) = (b.desc(a), b.desc(c));
    check(&ctx, "a", da)?;
    check(&ctx, "b", db)?;
    if da.data_type != db.data_type {
        return Err(ctx.err("a and b must have the same data type"));
    }
    let (ra, rb) = (da.rank(), db.rank());
    let (m, k) = (da.shape[ra - 2], da.shape[ra - 1]);
    let (k2, n) = (db.shape[rb - 2], db.shape[rb - 1]);
    if k != k2 {
        return Err(ctx.err(format!(
            "the inner dimensions differ: a is {:?}, b is {:?}",
            da.shape, db.shape
        )));
    }
    let mut shape =
        broadcast_shapes(&da.shape[..ra - 2], &db.shape[..rb - 2]).ok_or_else(|| {
            ctx.err(format!(
                "the batch dimensions of {:?} and {:?} do not broadcast",
                da.shape, db.shape
            ))
        })?;
    shape.extend([m, n]);
    let out = OperandDescriptor::new(da.data_type, shape).map_err(|e| ctx.err(e.message))?;
    Ok(b.push(MatmulParams, vec![a, c], vec![out], ctx.label))
}

pub const MATMUL: OpDef = OpDef {
    name: "matmul",
    build: build_matmul,
    operands: &[
        lim("a", FLOATS, 2, MAX_RANK),
        lim("b", FLOATS, 2, MAX_RANK),
        lim("output", FLOATS, 2, MAX_RANK),
    ],
};

/// `gemm(a, b, {c, alpha, beta, aTranspose, bTranspose})`:
/// alpha * A' * B' + beta * C.
fn build_gemm(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("gemm");
    let opts = ctx.options(arg(args, 2))?;
    let a = b.operand(&ctx, arg(args, 0), "a")?;
    let bb = b.operand(&ctx, arg(args, 1), "b")?;
    let c = b.opt_operand(&ctx, opts.member("c"), "c")?;
    let alpha = ctx.finite_or(opts.member("alpha"), "alpha", 1.0)?;
    let beta = ctx.finite_or(opts.member("beta"), "beta", 1.0)?;
    let a_transpose = ctx.bool_or(opts.member("aTranspose"), "aTranspose", false)?;
    let b_transpose = ctx.bool_or(opts.member("bTranspose"), "bTranspose", false)?;
    let (da, db) = (b.desc(a), b.desc(bb));
    check(&ctx, "a", da)?;
    check(&ctx, "b", db)?;
    if da.data_type != db.data_type {
        return Err(ctx.err("a and b must have the same data type"));
    }
    let (m, k) = if a_transpose {
        (da.shape[1], da.shape[0])
    } else {
        (da.shape[0], da.shape[1])
    };
    let (k2, n) = if b_transpose {
        (db.shape[1], db.shape[0])
    } else {
        (db.shape[0], db.shape[1])
    };
    if k != k2 {
        return Err(ctx.err(format!("the inner dimensions differ ({k} vs {k2})")));
    }
    let mut inputs = vec![a, bb];
    if let Some(c) = c {
        let dc = b.desc(c);
        check(&ctx, "c", dc)?;
        if dc.data_type != da.data_type {
            return Err(ctx.err("c must have the data type of a"));
        }
        if !broadcasts_to(&dc.shape, &[m, n]) {
            return Err(ctx.err(format!(
                "c of shape {:?} does not broadcast to [{m}, {n}]",
                dc.shape
            )));
        }
        inputs.push(c);
    }
    let out = OperandDescriptor::new(da.data_type, vec![m, n]).map_err(|e| ctx.err(e.message))?;
    let params = GemmParams {
        alpha,
        beta,
        a_transpose,
        b_transpose,
        has_c: c.is_some(),
        m,
        n,
        k,
    };
    Ok(b.push(params, inputs, vec![out], ctx.label))
}

pub const GEMM: OpDef = OpDef {
    name: "gemm",
    build: build_gemm,
    operands: &[
        lim("a", FLOATS, 2, 2),
        lim("b", FLOATS, 2, 2),
        lim("c", FLOATS, 0, 2),
        lim("output", FLOATS, 2, 2),
    ],
};

/// This family's builder methods.
pub const DEFS: &[OpDef] = &[MATMUL, GEMM];

//! The operator registry: one enum, one variant per operator family, with
//! the parameters already resolved by validation. Backends match on it
//! exhaustively, so adding a variant makes every backend decide.
//!
//! Each family's resolved parameters live in its own file under
//! [`ops`](crate::graph::ops), beside the validation that produces them.
//! This file only imports them: a family hands its parameters to
//! `GraphBuilder::push`, and the `From` conversions below wrap them in
//! their variant, so the imports run one way (the registry over the
//! families).

use crate::graph::ops::activation::ActivationOp;
use crate::graph::ops::conv::{Conv2dParams, ConvTranspose2dParams, Pool2dParams, PoolKind};
use crate::graph::ops::elementwise::{BinaryKind, ClampParams, SoftmaxParams, UnaryKind};
use crate::graph::ops::gather::GatherOp;
use crate::graph::ops::logical::LogicalOp;
use crate::graph::ops::matmul::{GemmParams, MatmulParams};
use crate::graph::ops::movement::MovementOp;
use crate::graph::ops::norm::NormOp;
use crate::graph::ops::quantize::QuantizeOp;
use crate::graph::ops::recurrent::RecurrentOp;
use crate::graph::ops::reduce::ReduceOp;
use crate::graph::ops::shape::{
    CastParams, ConcatParams, ReshapeParams, SliceParams, TransposeParams,
};

/// An operator with its resolved parameters. The node's inputs are the
/// operands in the order given on each variant's parameter type.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Inputs: a, b. The output shape is the broadcast of both.
    Binary(BinaryKind),
    /// Input: input.
    Unary(UnaryKind),
    Clamp(ClampParams),
    /// Inputs: a, b (batched, broadcast).
    Matmul,
    Gemm(GemmParams),
    Conv2d(Conv2dParams),
    Pool2d(Pool2dParams),
    Softmax(SoftmaxParams),
    /// Input: input; the output descriptor holds the new shape.
    Reshape,
    Transpose(TransposeParams),
    Concat(ConcatParams),
    Slice(SliceParams),
    Cast(CastParams),
    /// Comparisons and logical operators (uint8 output).
    Logical(LogicalOp),
    /// Parameterised activations and `where`/`prelu`.
    Activation(ActivationOp),
    /// Reductions, argMin/argMax, cumulativeSum.
    Reduce(ReduceOp),
    /// gather*, scatter*.
    Gather(GatherOp),
    /// expand, pad, reverse, split, tile, triangular, resample2d.
    Movement(MovementOp),
    /// quantizeLinear, dequantizeLinear.
    Quantize(QuantizeOp),
    ConvTranspose2d(ConvTranspose2dParams),
    /// batch/instance/layer normalization.
    Norm(NormOp),
    /// gru, gruCell, lstm, lstmCell.
    Recurrent(RecurrentOp),
}

/// `From<family type> for Op` (what a family hands to `push`) and
/// `TryFrom<Op>` back (what the families' tests read from a built graph).
macro_rules! wraps {
    ($($variant:ident($ty:ty)),* $(,)?) => {$(
        impl From<$ty> for Op {
            fn from(p: $ty) -> Op {
                Op::$variant(p)
            }
        }
        impl TryFrom<Op> for $ty {
            type Error = Op;
            fn try_from(op: Op) -> Result<$ty, Op> {
                match op {
                    Op::$variant(p) => Ok(p),
                    other => Err(other),
                }
            }
        }
    )*};
}

wraps!(
    Binary(BinaryKind),
    Unary(UnaryKind),
    Clamp(ClampParams),
    Gemm(GemmParams),
    Conv2d(Conv2dParams),
    Pool2d(Pool2dParams),
    Softmax(SoftmaxParams),
    Transpose(TransposeParams),
    Concat(ConcatParams),
    Slice(SliceParams),
    Cast(CastParams),
    Logical(LogicalOp),
    Activation(ActivationOp),
    Reduce(ReduceOp),
    Gather(GatherOp),
    Movement(MovementOp),
    Quantize(QuantizeOp),
    ConvTranspose2d(ConvTranspose2dParams),
    Norm(NormOp),
    Recurrent(RecurrentOp),
);

// The two operators without parameters are unit variants; their families
// hand over a unit type.
impl From<MatmulParams> for Op {
    fn from(_: MatmulParams) -> Op {
        Op::Matmul
    }
}

impl From<ReshapeParams> for Op {
    fn from(_: ReshapeParams) -> Op {
        Op::Reshape
    }
}

impl Op {
    /// The builder method that created this operator.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Binary(k) => k.name(),
            Op::Unary(k) => k.name(),
            Op::Clamp(_) => "clamp",
            Op::Matmul => "matmul",
            Op::Gemm(_) => "gemm",
            Op::Conv2d(_) => "conv2d",
            Op::Pool2d(p) => match p.kind {
                PoolKind::Average => "averagePool2d",
                PoolKind::Max => "maxPool2d",
                PoolKind::L2 => "l2Pool2d",
            },
            Op::Softmax(_) => "softmax",
            Op::Reshape => "reshape",
            Op::Transpose(_) => "transpose",
            Op::Concat(_) => "concat",
            Op::Slice(_) => "slice",
            Op::Cast(_) => "cast",
            Op::Logical(o) => o.name(),
            Op::Activation(o) => o.name(),
            Op::Reduce(o) => o.name(),
            Op::Gather(o) => o.name(),
            Op::Movement(o) => o.name(),
            Op::Quantize(o) => o.name(),
            Op::ConvTranspose2d(_) => "convTranspose2d",
            Op::Norm(o) => o.name(),
            Op::Recurrent(o) => o.name(),
        }
    }
}

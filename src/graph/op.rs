//! The operator registry: one enum, one variant per operator family, with
//! the parameters already resolved by validation. Backends match on it
//! exhaustively, so adding a variant makes every backend decide.

use crate::types::DataType;

/// Element-wise binary operators (with broadcasting).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryKind {
    Add,
    Sub,
    Mul,
    Div,
    Max,
    Min,
    Pow,
}

impl BinaryKind {
    pub fn name(self) -> &'static str {
        match self {
            BinaryKind::Add => "add",
            BinaryKind::Sub => "sub",
            BinaryKind::Mul => "mul",
            BinaryKind::Div => "div",
            BinaryKind::Max => "max",
            BinaryKind::Min => "min",
            BinaryKind::Pow => "pow",
        }
    }
}

/// Element-wise unary operators whose output type equals the input type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryKind {
    Abs,
    Neg,
    Exp,
    Log,
    Sqrt,
    Relu,
    Sigmoid,
    Tanh,
    Ceil,
    Cos,
    Erf,
    Floor,
    Identity,
    Reciprocal,
    RoundEven,
    Sin,
    Sign,
    Tan,
}

impl UnaryKind {
    pub fn name(self) -> &'static str {
        match self {
            UnaryKind::Abs => "abs",
            UnaryKind::Neg => "neg",
            UnaryKind::Exp => "exp",
            UnaryKind::Log => "log",
            UnaryKind::Sqrt => "sqrt",
            UnaryKind::Relu => "relu",
            UnaryKind::Sigmoid => "sigmoid",
            UnaryKind::Tanh => "tanh",
            UnaryKind::Ceil => "ceil",
            UnaryKind::Cos => "cos",
            UnaryKind::Erf => "erf",
            UnaryKind::Floor => "floor",
            UnaryKind::Identity => "identity",
            UnaryKind::Reciprocal => "reciprocal",
            UnaryKind::RoundEven => "roundEven",
            UnaryKind::Sin => "sin",
            UnaryKind::Sign => "sign",
            UnaryKind::Tan => "tan",
        }
    }
}

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

/// Filter layouts of conv2d (`MLConv2dFilterOperandLayout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterLayout {
    Oihw,
    Hwio,
    Ohwi,
    Ihwo,
}

/// Resolved conv2d (`L` = [`FilterLayout`]) and convTranspose2d (`L` =
/// `TransposeFilterLayout`) parameters. Inputs: input, filter, and bias
/// when `has_bias`. Sizes are in the canonical NCHW / OIHW sense whatever
/// the layouts; for convTranspose2d `out_h`/`out_w` already include
/// outputPadding or come from outputSizes.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvParams<L> {
    pub nhwc: bool,
    pub filter_layout: L,
    /// [beginning height, ending height, beginning width, ending width].
    pub padding: [usize; 4],
    pub strides: [usize; 2],
    pub dilations: [usize; 2],
    pub groups: usize,
    pub has_bias: bool,
    pub batch: usize,
    pub in_channels: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_channels: usize,
    pub kernel_h: usize,
    pub kernel_w: usize,
    pub out_h: usize,
    pub out_w: usize,
}

impl<L> ConvParams<L> {
    /// The filter taps over its group's input channels: the multiply-adds
    /// behind each output element (of a conv2d; a convTranspose2d's at
    /// most).
    pub fn taps(&self) -> usize {
        (self.in_channels / self.groups.max(1))
            .saturating_mul(self.kernel_h)
            .saturating_mul(self.kernel_w)
    }
}

/// Resolved conv2d parameters.
pub type Conv2dParams = ConvParams<FilterLayout>;

/// The pooling reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolKind {
    Average,
    Max,
    L2,
}

/// Resolved pool2d parameters. Input: input.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool2dParams {
    pub kind: PoolKind,
    pub nhwc: bool,
    pub window: [usize; 2],
    pub padding: [usize; 4],
    pub strides: [usize; 2],
    pub dilations: [usize; 2],
    pub batch: usize,
    pub channels: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_h: usize,
    pub out_w: usize,
}

/// An operator with its resolved parameters. The node's inputs are the
/// operands in the order given on each variant.
#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    /// Inputs: a, b. The output shape is the broadcast of both.
    Binary(BinaryKind),
    /// Input: input.
    Unary(UnaryKind),
    /// Input: input. Bounds as f64 (compared in the input's type).
    Clamp {
        min: f64,
        max: f64,
    },
    /// Inputs: a, b (batched, broadcast).
    Matmul,
    Gemm(GemmParams),
    Conv2d(Conv2dParams),
    Pool2d(Pool2dParams),
    /// Input: input.
    Softmax {
        axis: usize,
    },
    /// Input: input; the output descriptor holds the new shape.
    Reshape,
    /// Input: input.
    Transpose {
        permutation: Vec<usize>,
    },
    /// Inputs: every concatenated operand.
    Concat {
        axis: usize,
    },
    /// Input: input.
    Slice {
        starts: Vec<usize>,
        sizes: Vec<usize>,
        strides: Vec<usize>,
    },
    /// Input: input; converts to `to`.
    Cast {
        to: DataType,
    },
    /// Comparisons and logical operators (uint8 output): see
    /// `ops::logical`.
    Logical(crate::graph::ops::logical::LogicalOp),
    /// Parameterised activations and `where`/`prelu`: see `ops::activation`.
    Activation(crate::graph::ops::activation::ActivationOp),
    /// Reductions, argMin/argMax, cumulativeSum: see `ops::reduce`.
    Reduce(crate::graph::ops::reduce::ReduceOp),
    /// gather*, scatter*: see `ops::gather`.
    Gather(crate::graph::ops::gather::GatherOp),
    /// expand, pad, reverse, split, tile, triangular, resample2d: see
    /// `ops::movement`.
    Movement(crate::graph::ops::movement::MovementOp),
    /// quantizeLinear, dequantizeLinear: see `ops::quantize`.
    Quantize(crate::graph::ops::quantize::QuantizeOp),
    /// convTranspose2d: see `ops::conv`.
    ConvTranspose2d(crate::graph::ops::conv::ConvTranspose2dParams),
    /// batch/instance/layer normalization: see `ops::norm`.
    Norm(crate::graph::ops::norm::NormOp),
    /// gru, gruCell, lstm, lstmCell: see `ops::recurrent`.
    Recurrent(crate::graph::ops::recurrent::RecurrentOp),
}

impl Op {
    /// The builder method that created this operator.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Binary(k) => k.name(),
            Op::Unary(k) => k.name(),
            Op::Clamp { .. } => "clamp",
            Op::Matmul => "matmul",
            Op::Gemm(_) => "gemm",
            Op::Conv2d(_) => "conv2d",
            Op::Pool2d(p) => match p.kind {
                PoolKind::Average => "averagePool2d",
                PoolKind::Max => "maxPool2d",
                PoolKind::L2 => "l2Pool2d",
            },
            Op::Softmax { .. } => "softmax",
            Op::Reshape => "reshape",
            Op::Transpose { .. } => "transpose",
            Op::Concat { .. } => "concat",
            Op::Slice { .. } => "slice",
            Op::Cast { .. } => "cast",
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

//! Element-wise binary and unary operators, clamp and softmax.
//!
//! Spec: "Element-wise binary operations", "Element-wise unary operations",
//! `clamp()` and `softmax()` of webmachinelearning/webnn `index.bs`.

use super::{
    arg, broadcast_shapes, check, lim, OpDef, ALL_TYPES, FLOATS, MAX_RANK, NUMERIC, SIGNED,
};
use crate::error::Result;
use crate::graph::args::{Ctx, Val};
use crate::graph::{GraphBuilder, OperandId};
use crate::types::OperandDescriptor;

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

/// Resolved `clamp` parameters: the bounds as f64 (compared in the
/// input's type). Input: input.
#[derive(Debug, Clone, PartialEq)]
pub struct ClampParams {
    pub min: f64,
    pub max: f64,
}

/// Resolved `softmax` parameters. Input: input.
#[derive(Debug, Clone, PartialEq)]
pub struct SoftmaxParams {
    pub axis: usize,
}

const BINARY_OPERANDS: &[super::OperandLimit] = &[
    lim("a", NUMERIC, 0, MAX_RANK),
    lim("b", NUMERIC, 0, MAX_RANK),
    lim("output", NUMERIC, 0, MAX_RANK),
];

/// `add(a, b, options)` and its siblings: same data types, bidirectional
/// broadcasting.
fn binary(b: &mut GraphBuilder, args: &[Val], kind: BinaryKind) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new(kind.name());
    ctx.options(arg(args, 2))?;
    let a = b.operand(&ctx, arg(args, 0), "a")?;
    let c = b.operand(&ctx, arg(args, 1), "b")?;
    let (da, db) = (b.desc(a), b.desc(c));
    check(&ctx, "a", da)?;
    check(&ctx, "b", db)?;
    if da.data_type != db.data_type {
        return Err(ctx.err(format!(
            "a and b must have the same data type ({} vs {})",
            da.data_type.name(),
            db.data_type.name()
        )));
    }
    let shape = broadcast_shapes(&da.shape, &db.shape).ok_or_else(|| {
        ctx.err(format!(
            "the shapes {:?} and {:?} do not broadcast",
            da.shape, db.shape
        ))
    })?;
    let out = OperandDescriptor::new(da.data_type, shape).map_err(|e| ctx.err(e.message))?;
    Ok(b.push(kind, vec![a, c], vec![out], ctx.label))
}

macro_rules! binary_ops {
    ($($konst:ident, $name:literal, $kind:ident, $f:ident;)*) => {$(
        fn $f(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
            binary(b, args, BinaryKind::$kind)
        }
        pub const $konst: OpDef = OpDef { name: $name, build: $f, operands: BINARY_OPERANDS };
    )*};
}

binary_ops! {
    ADD, "add", Add, build_add;
    SUB, "sub", Sub, build_sub;
    MUL, "mul", Mul, build_mul;
    DIV, "div", Div, build_div;
    MAX, "max", Max, build_max;
    MIN, "min", Min, build_min;
    POW, "pow", Pow, build_pow;
}

/// `abs(input, options)` and its siblings: the output has the input's type
/// and shape.
fn unary(b: &mut GraphBuilder, args: &[Val], kind: UnaryKind) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new(kind.name());
    ctx.options(arg(args, 1))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let d = b.desc(x).clone();
    check(&ctx, "input", &d)?;
    Ok(b.push(kind, vec![x], vec![d], ctx.label))
}

macro_rules! unary_ops {
    ($($konst:ident, $name:literal, $kind:ident, $f:ident, $types:expr;)*) => {$(
        fn $f(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
            unary(b, args, UnaryKind::$kind)
        }
        pub const $konst: OpDef = OpDef {
            name: $name,
            build: $f,
            operands: &[lim("input", $types, 0, MAX_RANK), lim("output", $types, 0, MAX_RANK)],
        };
    )*};
}

unary_ops! {
    ABS, "abs", Abs, build_abs, SIGNED;
    NEG, "neg", Neg, build_neg, SIGNED;
    EXP, "exp", Exp, build_exp, FLOATS;
    LOG, "log", Log, build_log, FLOATS;
    SQRT, "sqrt", Sqrt, build_sqrt, FLOATS;
    RELU, "relu", Relu, build_relu, SIGNED;
    SIGMOID, "sigmoid", Sigmoid, build_sigmoid, FLOATS;
    TANH, "tanh", Tanh, build_tanh, FLOATS;
    CEIL, "ceil", Ceil, build_ceil, FLOATS;
    COS, "cos", Cos, build_cos, FLOATS;
    ERF, "erf", Erf, build_erf, FLOATS;
    FLOOR, "floor", Floor, build_floor, FLOATS;
    IDENTITY, "identity", Identity, build_identity, ALL_TYPES;
    RECIPROCAL, "reciprocal", Reciprocal, build_reciprocal, FLOATS;
    ROUND_EVEN, "roundEven", RoundEven, build_round_even, FLOATS;
    SIN, "sin", Sin, build_sin, FLOATS;
    SIGN, "sign", Sign, build_sign, SIGNED;
    TAN, "tan", Tan, build_tan, FLOATS;
}

/// `clamp(input, {minValue, maxValue})`.
fn build_clamp(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("clamp");
    let opts = ctx.options(arg(args, 1))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let d = b.desc(x).clone();
    check(&ctx, "input", &d)?;
    let min = match opts.member("minValue") {
        Val::Undefined => f64::NEG_INFINITY,
        v => ctx.ml_number(v, "minValue")?.as_f64(),
    };
    let max = match opts.member("maxValue") {
        Val::Undefined => f64::INFINITY,
        v => ctx.ml_number(v, "maxValue")?.as_f64(),
    };
    if min > max {
        return Err(ctx.err(format!(
            "minValue ({min}) must not be greater than maxValue ({max})"
        )));
    }
    Ok(b.push(ClampParams { min, max }, vec![x], vec![d], ctx.label))
}

pub const CLAMP: OpDef = OpDef {
    name: "clamp",
    build: build_clamp,
    operands: &[
        lim("input", NUMERIC, 0, MAX_RANK),
        lim("output", NUMERIC, 0, MAX_RANK),
    ],
};

/// `softmax(input, axis, options)`.
fn build_softmax(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("softmax");
    // The earlier one-argument form `softmax(input, options)` normalised
    // along the last axis; callers of that form (and test data written for
    // it) still exist, so an omitted axis means the last one.
    let axis_given = matches!(
        arg(args, 1),
        Val::Number(_) | Val::BigInt(_) | Val::String(_)
    );
    ctx.options(arg(args, if axis_given { 2 } else { 1 }))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let d = b.desc(x).clone();
    check(&ctx, "input", &d)?;
    let axis = if axis_given {
        ctx.u32(arg(args, 1), "axis")? as usize
    } else {
        d.rank().saturating_sub(1)
    };
    if axis >= d.rank() {
        return Err(ctx.err(format!("axis {axis} is out of range for rank {}", d.rank())));
    }
    Ok(b.push(SoftmaxParams { axis }, vec![x], vec![d], ctx.label))
}

pub const SOFTMAX: OpDef = OpDef {
    name: "softmax",
    build: build_softmax,
    operands: &[
        lim("input", FLOATS, 1, MAX_RANK),
        lim("output", FLOATS, 1, MAX_RANK),
    ],
};

/// This family's builder methods.
pub const DEFS: &[OpDef] = &[
    ADD, SUB, MUL, DIV, MAX, MIN, POW, ABS, NEG, EXP, LOG, SQRT, RELU, SIGMOID, TANH, CLAMP,
    SOFTMAX, CEIL, COS, ERF, FLOOR, IDENTITY, RECIPROCAL, ROUND_EVEN, SIN, SIGN, TAN,
];

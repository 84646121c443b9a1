//! Comparison and logical operators: equal, notEqual, greater, greaterOrEqual,
//! lesser, lesserOrEqual, logicalNot, logicalAnd, logicalOr, logicalXor, isNaN,
//! isInfinite (uint8 outputs).
//!
//! Spec: "Element-wise logical operations" of webmachinelearning/webnn
//! `index.bs`. `isNaN` and `isInfinite` (added to that section later) take
//! one float `input`.

use super::{arg, broadcast_shapes, check, lim, OpDef, OperandLimit, ALL_TYPES, FLOATS, MAX_RANK};
use crate::error::Result;
use crate::graph::args::{Ctx, Val};
use crate::graph::{GraphBuilder, OperandId};
use crate::types::{DataType, OperandDescriptor};

/// The resolved operators of this family. Inputs: a and b for the binary
/// ones (broadcast to the output), a (or input) for the unary ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogicalOp {
    Equal,
    NotEqual,
    Greater,
    GreaterOrEqual,
    Lesser,
    LesserOrEqual,
    LogicalNot,
    LogicalAnd,
    LogicalOr,
    LogicalXor,
    IsNaN,
    IsInfinite,
}

impl LogicalOp {
    pub const fn name(self) -> &'static str {
        match self {
            LogicalOp::Equal => "equal",
            LogicalOp::NotEqual => "notEqual",
            LogicalOp::Greater => "greater",
            LogicalOp::GreaterOrEqual => "greaterOrEqual",
            LogicalOp::Lesser => "lesser",
            LogicalOp::LesserOrEqual => "lesserOrEqual",
            LogicalOp::LogicalNot => "logicalNot",
            LogicalOp::LogicalAnd => "logicalAnd",
            LogicalOp::LogicalOr => "logicalOr",
            LogicalOp::LogicalXor => "logicalXor",
            LogicalOp::IsNaN => "isNaN",
            LogicalOp::IsInfinite => "isInfinite",
        }
    }

    /// Whether the operator takes two operands (a, b).
    pub fn is_binary(self) -> bool {
        !matches!(
            self,
            LogicalOp::LogicalNot | LogicalOp::IsNaN | LogicalOp::IsInfinite
        )
    }
}

const U8: &[DataType] = &[DataType::Uint8];

/// Comparisons: "specified as part of operation steps", and the steps
/// only require a and b to share a type, so any type.
const COMPARE_OPERANDS: &[OperandLimit] = &[
    lim("a", ALL_TYPES, 0, MAX_RANK),
    lim("b", ALL_TYPES, 0, MAX_RANK),
    lim("output", U8, 0, MAX_RANK),
];

/// logicalAnd/Or/Xor: the steps require uint8.
const LOGICAL_OPERANDS: &[OperandLimit] = &[
    lim("a", U8, 0, MAX_RANK),
    lim("b", U8, 0, MAX_RANK),
    lim("output", U8, 0, MAX_RANK),
];

/// logicalNot: `MLLogicalNotSupportLimits` (a, output).
const NOT_OPERANDS: &[OperandLimit] = &[lim("a", U8, 0, MAX_RANK), lim("output", U8, 0, MAX_RANK)];

/// isNaN/isInfinite: one float `input`.
const FLOAT_TEST_OPERANDS: &[OperandLimit] = &[
    lim("input", FLOATS, 0, MAX_RANK),
    lim("output", U8, 0, MAX_RANK),
];

/// "Create an element-wise logical operation" (plus isNaN/isInfinite,
/// which follow the same steps with one float operand).
fn logical(b: &mut GraphBuilder, args: &[Val], op: LogicalOp) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new(op.name());
    let binary = op.is_binary();
    ctx.options(arg(args, if binary { 2 } else { 1 }))?;
    let first = match op {
        LogicalOp::IsNaN | LogicalOp::IsInfinite => "input",
        _ => "a",
    };
    let a = b.operand(&ctx, arg(args, 0), first)?;
    let da = b.desc(a).clone();
    check(&ctx, first, &da)?;
    let (inputs, shape) = if binary {
        let c = b.operand(&ctx, arg(args, 1), "b")?;
        let db = b.desc(c);
        if da.data_type != db.data_type {
            return Err(ctx.err(format!(
                "a and b must have the same data type ({} vs {})",
                da.data_type.name(),
                db.data_type.name()
            )));
        }
        check(&ctx, "b", db)?;
        let shape = broadcast_shapes(&da.shape, &db.shape).ok_or_else(|| {
            ctx.err(format!(
                "the shapes {:?} and {:?} do not broadcast",
                da.shape, db.shape
            ))
        })?;
        (vec![a, c], shape)
    } else {
        (vec![a], da.shape.clone())
    };
    let out = OperandDescriptor::new(DataType::Uint8, shape).map_err(|e| ctx.err(e.message))?;
    Ok(b.push(op, inputs, vec![out], ctx.label))
}

macro_rules! logical_ops {
    ($($konst:ident, $kind:ident, $f:ident, $operands:expr;)*) => {$(
        fn $f(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
            logical(b, args, LogicalOp::$kind)
        }
        pub const $konst: OpDef = OpDef {
            name: LogicalOp::$kind.name(),
            build: $f,
            operands: $operands,
        };
    )*};
}

logical_ops! {
    EQUAL, Equal, build_equal, COMPARE_OPERANDS;
    NOT_EQUAL, NotEqual, build_not_equal, COMPARE_OPERANDS;
    GREATER, Greater, build_greater, COMPARE_OPERANDS;
    GREATER_OR_EQUAL, GreaterOrEqual, build_greater_or_equal, COMPARE_OPERANDS;
    LESSER, Lesser, build_lesser, COMPARE_OPERANDS;
    LESSER_OR_EQUAL, LesserOrEqual, build_lesser_or_equal, COMPARE_OPERANDS;
    LOGICAL_NOT, LogicalNot, build_logical_not, NOT_OPERANDS;
    LOGICAL_AND, LogicalAnd, build_logical_and, LOGICAL_OPERANDS;
    LOGICAL_OR, LogicalOr, build_logical_or, LOGICAL_OPERANDS;
    LOGICAL_XOR, LogicalXor, build_logical_xor, LOGICAL_OPERANDS;
    IS_NAN, IsNaN, build_is_nan, FLOAT_TEST_OPERANDS;
    IS_INFINITE, IsInfinite, build_is_infinite, FLOAT_TEST_OPERANDS;
}

/// This family's builder methods.
pub const DEFS: &[OpDef] = &[
    EQUAL,
    NOT_EQUAL,
    GREATER,
    GREATER_OR_EQUAL,
    LESSER,
    LESSER_OR_EQUAL,
    LOGICAL_NOT,
    LOGICAL_AND,
    LOGICAL_OR,
    LOGICAL_XOR,
    IS_NAN,
    IS_INFINITE,
];

#[cfg(test)]
mod tests {
    use super::super::testing::input;
    use super::*;
    use crate::graph::args::Val;

    #[test]
    fn output_is_uint8_broadcast() {
        let mut b = GraphBuilder::new();
        let x = input(&mut b, "x", DataType::Float32, &[2, 1, 3]);
        let y = input(&mut b, "y", DataType::Float32, &[4, 1]);
        let out = b.call("lesserOrEqual", &[x.clone(), y]).unwrap();
        let d = b.desc(out[0]);
        assert_eq!(d.data_type, DataType::Uint8);
        assert_eq!(d.shape, vec![2, 4, 3]);
        let out = b.call("isNaN", &[x]).unwrap();
        assert_eq!(b.desc(out[0]).shape, vec![2, 1, 3]);
    }

    #[test]
    fn validation_errors() {
        let mut b = GraphBuilder::new();
        let f = input(&mut b, "f", DataType::Float32, &[2, 3]);
        let h = input(&mut b, "h", DataType::Float16, &[2, 3]);
        let u = input(&mut b, "u", DataType::Uint8, &[2, 3]);
        let u2 = input(&mut b, "u2", DataType::Uint8, &[4]);
        let i = input(&mut b, "i", DataType::Int32, &[3]);
        // Mismatched types.
        let e = b.call("equal", &[f.clone(), h.clone()]).unwrap_err();
        assert!(e.message.contains("same data type"), "{}", e.message);
        // Shapes that do not broadcast.
        assert!(b.call("greater", &[u.clone(), u2.clone()]).is_err());
        // Logical operators need uint8.
        assert!(b.call("logicalAnd", &[f.clone(), f.clone()]).is_err());
        assert!(b.call("logicalNot", std::slice::from_ref(&i)).is_err());
        assert!(b.call("logicalXor", &[u.clone(), u.clone()]).is_ok());
        // isNaN / isInfinite need floats.
        assert!(b.call("isNaN", std::slice::from_ref(&i)).is_err());
        assert!(b.call("isInfinite", std::slice::from_ref(&u)).is_err());
        assert!(b.call("isInfinite", &[h]).is_ok());
        // Comparisons take integers too.
        assert!(b.call("lesser", &[i.clone(), i]).is_ok());
        // A missing operand and a bad options value are TypeErrors.
        assert!(b.call("equal", std::slice::from_ref(&f)).is_err());
        assert!(b.call("equal", &[f.clone(), f, Val::Number(1.0)]).is_err());
    }
}

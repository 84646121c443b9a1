//! Comparison and logical operators: equal, notEqual, greater, greaterOrEqual,
//! lesser, lesserOrEqual, logicalNot, logicalAnd, logicalOr, logicalXor, isNaN,
//! isInfinite (uint8 outputs).

use super::OpDef;

/// The resolved operators of this family (filled in as they are written).
#[derive(Debug, Clone, PartialEq)]
pub enum LogicalOp {}

impl LogicalOp {
    pub fn name(&self) -> &'static str {
        match *self {}
    }
}

/// This family's builder methods.
pub const DEFS: &[OpDef] = &[];

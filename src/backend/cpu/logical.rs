//! CPU kernels: Comparison and logical operators: equal, notEqual, greater, greaterOrEqual, lesser, lesserOrEqual, logicalNot, logicalAnd, logicalOr, logicalXor, isNaN, isInfinite (uint8 outputs).

use crate::error::Result;
use crate::graph::ops::logical::LogicalOp;
use crate::tensor::Buf;
use crate::types::OperandDescriptor;

/// Runs one operator of this family; returns one buffer per output.
pub fn run(
    op: &LogicalOp,
    _inputs: &[&Buf],
    _in_descs: &[&OperandDescriptor],
    _out_descs: &[OperandDescriptor],
) -> Result<Vec<Buf>> {
    match *op {}
}

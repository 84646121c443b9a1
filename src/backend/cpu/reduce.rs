//! CPU kernels: Reductions (reduceL1 ... reduceSumSquare), argMin/argMax, cumulativeSum.

use crate::error::Result;
use crate::graph::ops::reduce::ReduceOp;
use crate::tensor::Buf;
use crate::types::OperandDescriptor;

/// Runs one operator of this family; returns one buffer per output.
pub fn run(
    op: &ReduceOp,
    _inputs: &[&Buf],
    _in_descs: &[&OperandDescriptor],
    _out_descs: &[OperandDescriptor],
) -> Result<Vec<Buf>> {
    match *op {}
}

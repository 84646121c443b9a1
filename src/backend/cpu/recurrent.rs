//! CPU kernels: gru, gruCell, lstm, lstmCell.

use crate::error::Result;
use crate::graph::ops::recurrent::RecurrentOp;
use crate::tensor::Buf;
use crate::types::OperandDescriptor;

/// Runs one operator of this family; returns one buffer per output.
pub fn run(
    op: &RecurrentOp,
    _inputs: &[&Buf],
    _in_descs: &[&OperandDescriptor],
    _out_descs: &[OperandDescriptor],
) -> Result<Vec<Buf>> {
    match *op {}
}

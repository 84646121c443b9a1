//! CPU kernels: expand, pad, reverse, split, tile, triangular, resample2d.

use crate::error::Result;
use crate::graph::ops::movement::MovementOp;
use crate::tensor::Buf;
use crate::types::OperandDescriptor;

/// Runs one operator of this family; returns one buffer per output.
pub fn run(
    op: &MovementOp,
    _inputs: &[&Buf],
    _in_descs: &[&OperandDescriptor],
    _out_descs: &[OperandDescriptor],
) -> Result<Vec<Buf>> {
    match *op {}
}

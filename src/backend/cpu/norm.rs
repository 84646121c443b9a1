//! CPU kernels: batchNormalization, instanceNormalization, layerNormalization.

use crate::error::Result;
use crate::graph::ops::norm::NormOp;
use crate::tensor::Buf;
use crate::types::OperandDescriptor;

/// Runs one operator of this family; returns one buffer per output.
pub fn run(
    op: &NormOp,
    _inputs: &[&Buf],
    _in_descs: &[&OperandDescriptor],
    _out_descs: &[OperandDescriptor],
) -> Result<Vec<Buf>> {
    match *op {}
}

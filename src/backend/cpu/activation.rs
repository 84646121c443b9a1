//! CPU kernels: Activations with parameters (elu, gelu, hardSigmoid, hardSwish, leakyRelu, linear, softplus, softsign), prelu and where.

use crate::error::Result;
use crate::graph::ops::activation::ActivationOp;
use crate::tensor::Buf;
use crate::types::OperandDescriptor;

/// Runs one operator of this family; returns one buffer per output.
pub fn run(
    op: &ActivationOp,
    _inputs: &[&Buf],
    _in_descs: &[&OperandDescriptor],
    _out_descs: &[OperandDescriptor],
) -> Result<Vec<Buf>> {
    match *op {}
}

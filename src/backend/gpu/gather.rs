//! gather, gatherElements, gatherND, scatterElements, scatterND.

use super::{Gpu, NodeIo, Step};
use crate::error::{Error, Result};
use crate::graph::ops::gather::GatherOp;
use crate::types::DataType;

/// The family's answer to [`super::supports`].
pub(super) fn supports(op: &str, operand: &str, dt: DataType) -> bool {
    let _ = (op, operand, dt);
    false
}

/// The steps of one operator of the family.
pub(super) fn build(gpu: &mut Gpu, op: &GatherOp, io: &NodeIo) -> Result<Vec<Step>> {
    let _ = (gpu, io);
    Err(Error::not_supported(format!(
        "{} is not supported on the GPU backend yet",
        op.name()
    )))
}

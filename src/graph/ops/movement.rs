//! expand, pad, reverse, split, tile, triangular, resample2d.

use super::OpDef;

/// The resolved operators of this family (filled in as they are written).
#[derive(Debug, Clone, PartialEq)]
pub enum MovementOp {}

impl MovementOp {
    pub fn name(&self) -> &'static str {
        match *self {}
    }
}

/// This family's builder methods.
pub const DEFS: &[OpDef] = &[];

//! Activations with parameters (elu, gelu, hardSigmoid, hardSwish, leakyRelu,
//! linear, softplus, softsign), prelu and where.

use super::OpDef;

/// The resolved operators of this family (filled in as they are written).
#[derive(Debug, Clone, PartialEq)]
pub enum ActivationOp {}

impl ActivationOp {
    pub fn name(&self) -> &'static str {
        match *self {}
    }
}

/// This family's builder methods.
pub const DEFS: &[OpDef] = &[];

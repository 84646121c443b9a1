//! `MLOperand`: the JS handle of an operand of a graph builder. Below the
//! conversions, which read an operand argument into a `Val`, and the
//! builder, which makes operands.

use napi_derive::napi;

use crate::graph::OperandId;
use crate::types::OperandDescriptor;

/// `MLOperand`: an id in its builder, with its descriptor cached so that
/// `dataType` and `shape` need no lookup.
#[napi(js_name = "MLOperand")]
pub struct MLOperand {
    pub(crate) builder: u64,
    pub(crate) id: OperandId,
    pub(super) desc: OperandDescriptor,
    /// What made it and that operator's label (see `GraphBuilder::origin`),
    /// shown by `util.inspect`.
    pub(crate) origin: (String, String),
}

#[napi]
impl MLOperand {
    #[napi(getter)]
    pub fn data_type(&self) -> &'static str {
        self.desc.data_type.name()
    }

    #[napi(getter)]
    pub fn shape(&self) -> Vec<u32> {
        self.desc.shape.iter().map(|&d| d as u32).collect()
    }
}

//! What `util.inspect` shows of tensors, operands and graphs (index.js
//! defines `util.inspect.custom` from these; they are not public API).

use napi_derive::napi;

use super::operand::MLOperand;
use super::tensor::{MLGraph, MLTensor};

/// A name and a descriptor, as index.js prints them.
#[napi(object)]
pub struct NamedOperand {
    pub name: String,
    pub data_type: String,
    pub shape: Vec<u32>,
}

/// A graph's inputs and outputs and whether it can still be dispatched.
#[napi(object)]
pub struct GraphSummary {
    pub state: String,
    pub inputs: Vec<NamedOperand>,
    pub outputs: Vec<NamedOperand>,
}

#[napi]
impl MLTensor {
    /// "destroyed", "lost" (its context is) or "live". Whether the timeline
    /// has errored it is known only on the worker thread.
    #[napi(js_name = "_state")]
    pub fn state(&self) -> &'static str {
        if self.is_destroyed() {
            "destroyed"
        } else if self.info.ctx.is_lost() {
            "lost"
        } else {
            "live"
        }
    }
}

#[napi]
impl MLOperand {
    /// `[what made it, that operator's label]`.
    #[napi(js_name = "_origin")]
    pub fn origin(&self) -> Vec<String> {
        vec![self.origin.0.clone(), self.origin.1.clone()]
    }
}

#[napi]
impl MLGraph {
    #[napi(js_name = "_summary")]
    pub fn summary(&self) -> GraphSummary {
        let named = |list: &[(String, usize)]| {
            list.iter()
                .map(|(name, id)| {
                    let d = &self.graph.operands[*id];
                    NamedOperand {
                        name: name.clone(),
                        data_type: d.data_type.name().to_string(),
                        shape: d.shape.iter().map(|&n| n as u32).collect(),
                    }
                })
                .collect()
        };
        let state = if self.destroyed.get() {
            "destroyed"
        } else if self.ctx.is_lost() {
            "lost"
        } else {
            "live"
        };
        GraphSummary {
            state: state.to_string(),
            inputs: named(&self.graph.inputs),
            outputs: named(&self.graph.outputs),
        }
    }
}

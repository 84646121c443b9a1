//! Helpers of the family files' validation tests.

use crate::error::Result;
use crate::graph::args::Val;
use crate::graph::{GraphBuilder, OperandId};
use crate::types::{DataType, OperandDescriptor};

/// A new input `name` of `b`, as an argument value.
pub(crate) fn input(b: &mut GraphBuilder, name: &str, dt: DataType, shape: &[usize]) -> Val {
    let id = b
        .input(name, OperandDescriptor::new(dt, shape.to_vec()).unwrap())
        .unwrap();
    Val::Operand { builder: b.id, id }
}

/// The message of a builder call that must fail.
pub(crate) fn err(r: Result<Vec<OperandId>>) -> String {
    match r {
        Err(e) => e.message,
        Ok(_) => panic!("expected an error"),
    }
}

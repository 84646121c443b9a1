//! Element-wise CPU kernels (stub, being written).
use crate::error::{Error, Result};
use crate::graph::op::{BinaryKind, UnaryKind};
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

pub fn binary(_k: BinaryKind, _a: &Buf, _da: &OperandDescriptor, _b: &Buf, _db: &OperandDescriptor, _out: &OperandDescriptor) -> Result<Buf> { Err(Error::not_supported("binary")) }
pub fn unary(_k: UnaryKind, _x: &Buf, _out: &OperandDescriptor) -> Result<Buf> { Err(Error::not_supported("unary")) }
pub fn clamp(_x: &Buf, _min: f64, _max: f64, _out: &OperandDescriptor) -> Result<Buf> { Err(Error::not_supported("clamp")) }
pub fn softmax(_x: &Buf, _axis: usize, _out: &OperandDescriptor) -> Result<Buf> { Err(Error::not_supported("softmax")) }
pub fn cast(_x: &Buf, _to: DataType, _out: &OperandDescriptor) -> Result<Buf> { Err(Error::not_supported("cast")) }

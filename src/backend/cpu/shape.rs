//! Data movement CPU kernels (stub, being written).
use crate::error::{Error, Result};
use crate::tensor::Buf;
use crate::types::OperandDescriptor;

pub fn transpose(_x: &Buf, _d: &OperandDescriptor, _perm: &[usize], _out: &OperandDescriptor) -> Result<Buf> { Err(Error::not_supported("transpose")) }
pub fn concat(_xs: &[&Buf], _ds: &[&OperandDescriptor], _axis: usize, _out: &OperandDescriptor) -> Result<Buf> { Err(Error::not_supported("concat")) }
pub fn slice(_x: &Buf, _d: &OperandDescriptor, _starts: &[usize], _strides: &[usize], _out: &OperandDescriptor) -> Result<Buf> { Err(Error::not_supported("slice")) }

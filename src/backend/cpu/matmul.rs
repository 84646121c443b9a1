//! Matrix multiplication CPU kernels (stub, being written).
use crate::error::{Error, Result};
use crate::graph::op::GemmParams;
use crate::tensor::Buf;
use crate::types::OperandDescriptor;

pub fn matmul(_a: &Buf, _da: &OperandDescriptor, _b: &Buf, _db: &OperandDescriptor, _out: &OperandDescriptor) -> Result<Buf> { Err(Error::not_supported("matmul")) }
pub fn gemm(_p: &GemmParams, _inputs: &[&Buf], _descs: &[&OperandDescriptor], _out: &OperandDescriptor) -> Result<Buf> { Err(Error::not_supported("gemm")) }

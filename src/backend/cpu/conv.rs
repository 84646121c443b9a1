//! Convolution and pooling CPU kernels (stub, being written).
use crate::error::{Error, Result};
use crate::graph::op::{Conv2dParams, Pool2dParams};
use crate::tensor::Buf;
use crate::types::OperandDescriptor;

pub fn conv2d(_p: &Conv2dParams, _inputs: &[&Buf], _out: &OperandDescriptor) -> Result<Buf> { Err(Error::not_supported("conv2d")) }
pub fn pool2d(_p: &Pool2dParams, _x: &Buf, _out: &OperandDescriptor) -> Result<Buf> { Err(Error::not_supported("pool2d")) }

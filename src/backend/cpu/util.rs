//! Helpers shared by the CPU kernels.

use std::borrow::Cow;

use crate::error::{Error, Result};
use crate::f16::f32_to_f16;
use crate::tensor::Buf;
use crate::types::DataType;

/// The elements of a float buffer as f32 (float16 widened; float32
/// borrowed). Errors for integer buffers.
pub fn floats(b: &Buf) -> Result<Cow<'_, [f32]>> {
    match b {
        Buf::F32(v) => Ok(Cow::Borrowed(v)),
        Buf::F16(_) => Ok(Cow::Owned(b.to_f32_vec())),
        _ => Err(Error::operation("a float kernel got an integer tensor")),
    }
}

/// Stores f32 results as `dt` (float32 as is; float16 rounded once).
pub fn from_floats(dt: DataType, v: Vec<f32>) -> Result<Buf> {
    match dt {
        DataType::Float32 => Ok(Buf::F32(v)),
        DataType::Float16 => Ok(Buf::F16(v.iter().map(|&x| f32_to_f16(x)).collect())),
        _ => Err(Error::operation(
            "a float kernel produced a non-float output",
        )),
    }
}

/// Row-major strides of a shape.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// Strides for reading a tensor of `shape` broadcast to `out` (0 on
/// broadcast dimensions), aligned to the right.
pub fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    let s = strides(shape);
    let off = out.len() - shape.len();
    (0..out.len())
        .map(|i| {
            if i < off || shape[i - off] == 1 {
                0
            } else {
                s[i - off]
            }
        })
        .collect()
}

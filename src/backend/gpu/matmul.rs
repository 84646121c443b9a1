//! `matmul`: batched float32 matrix products with broadcast batch
//! dimensions, on the tiled kernel of `shaders/matmul.wgsl`.

use super::{broadcast_strides, word, Gpu, Step};
use crate::error::Result;
use crate::types::OperandDescriptor;

const MATMUL: &str = include_str!("shaders/matmul.wgsl");

/// Output rows and columns covered by one workgroup of the kernel.
const TILE: u64 = 64;

/// `a` is [...batch, M, K], `b` is [...batch, K, N], the output is
/// [...broadcast batch, M, N].
pub(super) fn matmul(
    gpu: &mut Gpu,
    ins: &[&wgpu::Buffer],
    in_descs: &[&OperandDescriptor],
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let (da, db) = (in_descs[0], in_descs[1]);
    let (ra, rb, ro) = (da.rank(), db.rank(), out_desc.rank());
    let (m, k, n) = (
        da.shape[ra - 2] as u64,
        da.shape[ra - 1] as u64,
        db.shape[rb - 1] as u64,
    );
    let batch_shape = &out_desc.shape[..ro - 2];
    let batches: u64 = batch_shape.iter().map(|&d| d as u64).product();
    if m * n * batches == 0 {
        return Ok(None);
    }
    // Matrix offsets of every output batch in a and b, computed here once
    // so the kernel needs no index arithmetic over broadcast dimensions.
    let sa = broadcast_strides(&da.shape[..ra - 2], batch_shape);
    let sb = broadcast_strides(&db.shape[..rb - 2], batch_shape);
    // Offsets and indices stay below the element counts, which must fit
    // in 32 bits.
    word(da.element_count() as u64)?;
    word(db.element_count() as u64)?;
    word(out_desc.element_count() as u64)?;
    let mut p = Vec::with_capacity(4 + 2 * batches as usize);
    p.extend([word(m)?, word(n)?, word(k)?, word(batches)?]);
    for z in 0..batches {
        let (mut rem, mut oa, mut ob) = (z, 0u64, 0u64);
        for d in (0..batch_shape.len()).rev() {
            let size = batch_shape[d] as u64;
            let c = rem % size;
            rem /= size;
            oa += c * sa[d];
            ob += c * sb[d];
        }
        p.push(word(oa * m * k)?);
        p.push(word(ob * k * n)?);
    }
    let params = gpu.params(&p)?;
    let groups = [
        word(n.div_ceil(TILE))?,
        word(m.div_ceil(TILE))?,
        word(batches)?,
    ];
    gpu.step(
        MATMUL.to_string(),
        "main",
        &[&params, ins[0], ins[1], out],
        groups,
    )
    .map(Some)
}

//! `matmul` (batched float32 matrix products with broadcast batch
//! dimensions) and `gemm` (transposes, alpha, beta, broadcast c), on the
//! tiled kernel of `shaders/matmul.wgsl`.

use super::{broadcast_strides, is_float, word, Gpu, Step};
use crate::error::Result;
use crate::graph::ops::matmul::GemmParams;
use crate::types::{DataType, OperandDescriptor};

/// The family's answer to [`super::supports`]: float kernels (float16
/// computed in f32).
pub(super) fn supports(op: &str, _operand: &str, dt: DataType) -> bool {
    matches!(op, "matmul" | "gemm") && is_float(dt)
}

const MATMUL: &str = include_str!("shaders/matmul.wgsl");

/// The kernel with its loads and store substituted.
fn source(load_a: &str, load_b: &str, store: &str, extra: &str) -> String {
    MATMUL
        .replace("{{LOAD_A}}", load_a)
        .replace("{{LOAD_B}}", load_b)
        .replace("{{STORE}}", store)
        .replace("{{EXTRA}}", extra)
}

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
        source("a[a0 + r * k + c]", "b[b0 + r * n + c]", "v", ""),
        "main",
        &[&params, ins[0], ins[1], out],
        groups,
    )
    .map(Some)
}

/// `gemm`: alpha * A' x B' + beta * C for 2-D float32 a and b (each
/// possibly transposed) and an optional c broadcast to [M, N].
pub(super) fn gemm(
    gpu: &mut Gpu,
    g: &GemmParams,
    ins: &[&wgpu::Buffer],
    in_descs: &[&OperandDescriptor],
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let (m, n, k) = (g.m as u64, g.n as u64, g.k as u64);
    if m * n == 0 {
        return Ok(None);
    }
    word(m * k)?;
    word(k * n)?;
    word(out_desc.element_count() as u64)?;
    // Strides of c over the output's rows and columns (0 where broadcast).
    let (cr, cc) = if g.has_c {
        let s = broadcast_strides(&in_descs[2].shape, &out_desc.shape);
        (word(s[0])?, word(s[1])?)
    } else {
        (0, 0)
    };
    let p = [
        word(m)?,
        word(n)?,
        word(k)?,
        1,
        0,
        0,
        (g.alpha as f32).to_bits(),
        (g.beta as f32).to_bits(),
        cr,
        cc,
    ];
    let load_a = if g.a_transpose {
        "a[a0 + c * m + r]"
    } else {
        "a[a0 + r * k + c]"
    };
    let load_b = if g.b_transpose {
        "b[b0 + c * k + r]"
    } else {
        "b[b0 + r * n + c]"
    };
    let alpha = "bitcast<f32>(p[6])";
    let params = gpu.params(&p)?;
    let groups = [word(n.div_ceil(TILE))?, word(m.div_ceil(TILE))?, 1];
    if g.has_c {
        let extra = "@group(0) @binding(4) var<storage, read> cm: array<f32>;\n";
        let store = format!("{alpha} * v + bitcast<f32>(p[7]) * cm[r * p[8] + c * p[9]]");
        gpu.step(
            source(load_a, load_b, &store, extra),
            "main",
            &[&params, ins[0], ins[1], out, ins[2]],
            groups,
        )
        .map(Some)
    } else {
        gpu.step(
            source(load_a, load_b, &format!("{alpha} * v"), ""),
            "main",
            &[&params, ins[0], ins[1], out],
            groups,
        )
        .map(Some)
    }
}

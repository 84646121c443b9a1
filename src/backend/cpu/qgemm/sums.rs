//! A second product folded into a quantized one: the per-block sums of
//! A times a constant [N, K / QK] matrix, added to the outputs.
//!
//! A graph with llama.cpp's numerics multiplies Q4_1's per-block minimum
//! this way, as llama.cpp's dot product does (the minimum times the sum of
//! the block's rounded activations, that sum kept in float16): beside the
//! product over the codes it writes
//! `gemm(cast(cast(reduceSum(reshape(x, [rows, nb, 32])), f16), f32), M,
//! {bTranspose: true})` and adds the two. Run as written, that is three
//! nodes and a float32 GEMM over M per product; folded, the sums are taken
//! from A as the product reads it and M is read once, in float16 where its
//! values are float16 (a GGUF file's minimums), transposed so that one
//! block's factors of every output lie together.
//!
//! Each output's sum is the chain the GEMM computes for it (from zero, one
//! multiply-add per block in block order, fused where the GEMM's kernel
//! fuses), added to the product's output as the graph's `add` did: the
//! bits of the graph as written. A block's sum of A is exact when A is
//! int8 codes times a float16 scale per block (the rounded activations);
//! for other values it is summed in order, which `reduceSum` may not do.

use super::{ScaleView, Scales};
use crate::error::{Error, Result};
use crate::f16::{f16_to_f32, f32_to_f16};

use super::QK;

/// `m` ([n, nb], row-major) held to add `sum over b of s[i, b] * m[j, b]`
/// to output `(i, j)`, `s[i, b]` the sum of block b of row i of A
/// (rounded to float16 when `round16`).
#[derive(Debug)]
pub struct BlockSums {
    n: usize,
    nb: usize,
    /// `m` transposed: [nb, n].
    mt: Scales,
    round16: bool,
}

impl BlockSums {
    /// Holds `m` ([n, nb]), or fails when it has another length or the
    /// memory cannot be had.
    pub fn new(m: &[f32], n: usize, nb: usize, round16: bool) -> Result<BlockSums> {
        if n.checked_mul(nb) != Some(m.len()) {
            return Err(Error::operation(
                "block sums: the matrix does not match its shape",
            ));
        }
        let mut mt = super::try_alloc(m.len(), 0f32, "a block-sum product's matrix")?;
        for (j, row) in m.chunks_exact(nb.max(1)).enumerate() {
            for (b, &v) in row.iter().enumerate() {
                mt[b * n + j] = v;
            }
        }
        Ok(BlockSums {
            n,
            nb,
            mt: Scales::new(mt),
            round16,
        })
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.mt.bytes()
    }

    /// Adds the block-sum product of `rows` rows of `a` ([rows, nb * QK])
    /// to `c` ([rows, n]).
    pub fn add_to(&self, rows: usize, a: &[f32], c: &mut [f32]) -> Result<()> {
        let (n, nb) = (self.n, self.nb);
        if a.len() != rows * nb * QK || c.len() != rows * n {
            return Err(Error::operation(
                "block sums: the operands do not match the shapes",
            ));
        }
        let fused = super::super::sgemm::fuses_multiply_add();
        // The float16 vector form needs F16C beside the FMA the fused
        // kernels have; asked once, not per block.
        #[cfg(target_arch = "x86_64")]
        let f16c = fused && std::arch::is_x86_feature_detected!("f16c");
        #[cfg(not(target_arch = "x86_64"))]
        let f16c = false;
        let mut acc = super::try_alloc(n, 0f32, "a block-sum product's row")?;
        let mt = self.mt.view();
        for (ar, cr) in a.chunks_exact(nb * QK).zip(c.chunks_exact_mut(n)) {
            acc.fill(0.0);
            for (b, blk) in ar.chunks_exact(QK).enumerate() {
                let mut s: f32 = blk.iter().sum();
                if self.round16 {
                    s = f16_to_f32(f32_to_f16(s));
                }
                axpy(fused, f16c, s, mt, b * n, &mut acc);
            }
            for (o, &x) in cr.iter_mut().zip(&acc) {
                *o += x;
            }
        }
        Ok(())
    }
}

/// `acc[j] = s * mt[at + j] + acc[j]` for every j: fused as the GEMM's
/// kernel fuses it (see `sgemm::fuses_multiply_add`); `f16c`: the CPU
/// has AVX2, FMA and F16C (x86-64 only).
fn axpy(fused: bool, f16c: bool, s: f32, mt: ScaleView, at: usize, acc: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if f16c {
        if let ScaleView::F16(h) = mt {
            let n = acc.len();
            // SAFETY: `f16c` is true only where the GEMM's kernel is the
            // AVX2 or AVX-512 one (AVX2 and FMA) and F16C was detected;
            // `at + n` is within `h` (the caller's block of n).
            unsafe { x86::axpy_f16(s, &h[at..at + n], acc) };
            return;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = f16c;
    let m = |j: usize| mt.get(at + j);
    match fused || cfg!(target_arch = "aarch64") {
        true => acc
            .iter_mut()
            .enumerate()
            .for_each(|(j, y)| *y = s.mul_add(m(j), *y)),
        false => acc.iter_mut().enumerate().for_each(|(j, y)| *y += s * m(j)),
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use crate::f16::f16_to_f32;
    use std::arch::x86_64::*;

    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `m.len() == acc.len()`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn axpy_f16(s: f32, m: &[u16], acc: &mut [f32]) {
        let sv = _mm256_set1_ps(s);
        let mut ms = m.chunks_exact(8);
        let mut ys = acc.chunks_exact_mut(8);
        for (mc, yc) in (&mut ms).zip(&mut ys) {
            // SAFETY: 8 halves and 8 floats in bounds; unaligned forms.
            unsafe {
                let mv = _mm256_cvtph_ps(_mm_loadu_si128(mc.as_ptr().cast()));
                let y = _mm256_loadu_ps(yc.as_ptr());
                _mm256_storeu_ps(yc.as_mut_ptr(), _mm256_fmadd_ps(sv, mv, y));
            }
        }
        for (&h, y) in ms.remainder().iter().zip(ys.into_remainder()) {
            *y = s.mul_add(f16_to_f32(h), *y);
        }
    }
}

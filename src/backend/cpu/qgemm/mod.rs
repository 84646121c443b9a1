//! Matrix products with quantized weights kept quantized.
//!
//! A constant weight matrix that a graph dequantizes before a product
//! (`dequantizeLinear` of a constant `int4`/`uint4`/`int8`/`uint8` tensor,
//! perhaps with a per-block offset added; `cpu/fuse.rs` recognises the
//! pattern) is held here as codes of 4 or 8 bits with a scale and an
//! offset per block of [`QK`] weights along the reduction axis:
//!
//! ```text
//! w[n][k] = code[n][k] * d[n][k / QK] + m[n][k / QK]
//! ```
//!
//! which is `(q - zeroPoint) * scale + offset` with the zero point folded
//! into the offset (`m = offset - zeroPoint * scale`, rounded once). The
//! product then never holds the weights in float32:
//!
//! - a few rows of activations (decoding: M = 1 to [`SMALL_M`]) take the
//!   dot products straight from the codes, one block at a time, as
//!   `d * sum(a * code) + m * sum(a)` (the sums of `a` per block computed
//!   once per row, for every output column). Where the activations are
//!   int8 codes times a scale per block, exactly (a graph that rounds
//!   them as llama.cpp does makes them so; [`exact_int8`] checks every
//!   value), `sum(a * code)` is taken as `da * sum(qa * code)` in integers
//!   with byte multiplies (AVX2's `maddubs`, VNNI's `vpdpbusd`; four
//!   weight rows per pass): the same value, exact inner sums, a third of
//!   the instructions per block and a quarter of the activation bytes;
//!   other activations take the float forms;
//! - more rows (a prompt) whose activations are such int8 blocks, against
//!   4-bit weights without offsets, take exact integer block sums in
//!   tiles ([`tiles`]: each block's `sum(qa * code)` in 32-bit integers,
//!   then `d * da` times it added in float32), where the CPU has a form
//!   for them (AVX-512 with VNNI and VBMI): on an Intel Xeon a prompt's
//!   128 x 576 by 576 x 3072 product took 1.05 ms against 2.6 for the
//!   float path;
//! - other prompts run the float32 GEMM with the weights
//!   dequantized straight into its packed B panels as it asks for them
//!   (`sgemm_gen`): A is packed once per block of the product, and the
//!   dequantization is 1/M of the work.
//!
//! Numerics: against the unfused graph (dequantize, then a float32
//! product), the weights differ by the one rounding of the folded offset
//! (none when the zero point is 0 or no offset is added) and the sums are
//! taken in another order (the integer form's block sums are exact, then
//! scaled by `d * da` rounded once); all within the rounding a float32
//! product of length K already has.

mod kernels;
mod measure;
mod panels;
mod sums;
#[cfg(test)]
mod tests;
mod tiles;

use std::sync::Arc;

use rayon::prelude::*;

use crate::backend::cpu::quantize::round_even_f32;
use crate::backend::cpu::sgemm::{sgemm_gen, Fuse};
use crate::backend::cpu::simd;
use crate::error::{Error, Result};

pub use kernels::isa_name;
pub use measure::{measure_gemv, GemvRate};
pub use sums::BlockSums;

/// Weights per block: one scale and one offset each.
pub const QK: usize = 32;

/// From this many rows of activations the product dequantizes tiles and
/// runs the float32 GEMM instead of taking dot products from the codes.
pub const SMALL_M: usize = 8;

/// The bytes of a [`QMatrix`]'s codes: its own, or a constant's bytes
/// held as they are (the weights then take memory once, not twice).
#[derive(Debug)]
pub enum CodeBytes {
    Owned(Vec<u8>),
    Shared(Arc<Vec<u8>>),
}

impl CodeBytes {
    fn as_slice(&self) -> &[u8] {
        match self {
            CodeBytes::Owned(v) => v,
            CodeBytes::Shared(v) => v,
        }
    }
}

/// The codes of a [`QMatrix`], row-major [N, K], in the layout of
/// WebNN's tensors, so that a constant's bytes serve as they are.
#[derive(Debug)]
pub enum Codes {
    /// 4-bit codes 0..=15, two per byte: byte `j` of a row holds element
    /// `2j` in its low half and `2j + 1` in its high half (`uint4`). The
    /// kernels take a block's low halves against one half of the
    /// activations and its high halves against the other, so the small
    /// product reads each activation row with its even and odd elements
    /// parted per block ([`deinterleave`]).
    Nibbles(CodeBytes),
    /// 8-bit signed codes, one per weight (`int8`).
    Bytes(CodeBytes),
}

impl Codes {
    fn nibbles(&self) -> Option<&[u8]> {
        match self {
            Codes::Nibbles(c) => Some(c.as_slice()),
            Codes::Bytes(_) => None,
        }
    }

    fn bytes(&self) -> Option<&[i8]> {
        match self {
            Codes::Nibbles(_) => None,
            Codes::Bytes(c) => Some(bytemuck::cast_slice(c.as_slice())),
        }
    }
}

/// The scales of a [`QMatrix`]: float16 when every one is a float16
/// value (a GGUF file's and a graph's that casts float16 scales), which
/// halves the bytes a product reads besides the codes; else float32.
#[derive(Debug)]
enum Scales {
    F16(Vec<u16>),
    /// Float16 scales read where a constant's bytes hold exactly them,
    /// block by block and row by row, not copied: a GGUF model's scales
    /// are such a constant (8 MB of SmolLM2's). The bytes are a whole
    /// number of aligned float16 values ([`Scales::shared`] checks), and
    /// an `Arc`'s bytes never change.
    Shared(Arc<Vec<u8>>),
    F32(Vec<f32>),
}

impl Scales {
    /// `d` as float16 where every value is one, else as it is; fails when
    /// the float16 copy's memory cannot be had.
    fn new(d: Vec<f32>) -> Result<Scales> {
        let half = |x: f32| crate::f16::f32_to_f16(x);
        let exact = d
            .iter()
            .all(|&x| crate::f16::f16_to_f32(half(x)).to_bits() == x.to_bits());
        if !exact {
            return Ok(Scales::F32(d));
        }
        let mut h = try_alloc(d.len(), 0u16, "float16 scales")?;
        for (o, &x) in h.iter_mut().zip(&d) {
            *o = half(x);
        }
        Ok(Scales::F16(h))
    }

    /// These float16 scales read from `bytes` instead, when the bytes are
    /// exactly them (bit for bit, and aligned for float16 reads); `None`
    /// otherwise.
    fn shared(&self, bytes: Arc<Vec<u8>>) -> Option<Scales> {
        let Scales::F16(own) = self else {
            return None;
        };
        let theirs: &[u16] = bytemuck::try_cast_slice(&bytes[..]).ok()?;
        (theirs == &own[..]).then_some(Scales::Shared(bytes))
    }

    /// The scales as they are read.
    fn view(&self) -> ScaleView<'_> {
        match self {
            Scales::F16(v) => ScaleView::F16(v),
            // Cannot fail: `shared` made this of bytes that cast.
            Scales::Shared(b) => ScaleView::F16(bytemuck::cast_slice(&b[..])),
            Scales::F32(v) => ScaleView::F32(v),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.view().len()
    }

    fn bytes(&self) -> usize {
        match self.view() {
            ScaleView::F16(v) => v.len() * 2,
            ScaleView::F32(v) => v.len() * 4,
        }
    }
}

/// [`Scales`] resolved for reading, once per product rather than per
/// block.
#[derive(Clone, Copy)]
enum ScaleView<'a> {
    F16(&'a [u16]),
    F32(&'a [f32]),
}

impl<'a> ScaleView<'a> {
    fn len(self) -> usize {
        match self {
            ScaleView::F16(v) => v.len(),
            ScaleView::F32(v) => v.len(),
        }
    }

    /// Scales `at` alone.
    fn range(self, at: std::ops::Range<usize>) -> ScaleView<'a> {
        match self {
            ScaleView::F16(v) => ScaleView::F16(&v[at]),
            ScaleView::F32(v) => ScaleView::F32(&v[at]),
        }
    }

    fn get(self, i: usize) -> f32 {
        match self {
            ScaleView::F16(v) => crate::f16::f16_to_f32(v[i]),
            ScaleView::F32(v) => v[i],
        }
    }

    /// Scales `first`, `first + stride`, ... (as many as `out` holds), as
    /// float32: float16 ones widened 32 at a time on the CPU's vectors
    /// (one at a time, the software conversion's branches cost a panel
    /// of a prompt's product more than its gathers).
    fn strided(self, first: usize, stride: usize, out: &mut [f32]) {
        match self {
            ScaleView::F32(v) => {
                for (j, o) in out.iter_mut().enumerate() {
                    *o = v[first + j * stride];
                }
            }
            ScaleView::F16(v) => {
                let mut h = [0u16; 32];
                for (c, o) in out.chunks_mut(32).enumerate() {
                    for (j, x) in h[..o.len()].iter_mut().enumerate() {
                        *x = v[first + (c * 32 + j) * stride];
                    }
                    crate::f16::widen(&h[..o.len()], o);
                }
            }
        }
    }

    /// Asks for the second-level cache lines of scales `at` (clipped to
    /// the scales) ahead of their use: a hint only.
    fn prefetch(self, at: std::ops::Range<usize>) {
        match self {
            ScaleView::F16(v) => simd::prefetch(v, at, simd::CacheLevel::L2),
            ScaleView::F32(v) => simd::prefetch(v, at, simd::CacheLevel::L2),
        }
    }

    /// Scales `at` as float32: borrowed, or widened into `room`.
    fn row<'b>(self, at: std::ops::Range<usize>, room: &'b mut [f32]) -> &'b [f32]
    where
        'a: 'b,
    {
        match self {
            ScaleView::F32(v) => &v[at],
            ScaleView::F16(v) => {
                let out = &mut room[..at.len()];
                crate::f16::widen(&v[at], out);
                out
            }
        }
    }
}

/// A constant [N, K] weight matrix in quantized blocks (see the module
/// comment); the product reads it as B transposed (`x · wᵀ`).
#[derive(Debug)]
pub struct QMatrix {
    n: usize,
    k: usize,
    codes: Codes,
    /// Per block, row by row (`n * k / QK` each); `m` is empty when every
    /// offset is zero.
    d: Scales,
    m: Vec<f32>,
    /// Whether any offset is non-zero: without offsets (a zero point of 0
    /// and nothing added, as in Q4_0/Q8_0 and in a graph that adds Q4_1's
    /// minimum as a product of its own) the products skip the offsets'
    /// term, which is then 0 for every output, and `m` is not kept.
    offsets: bool,
}

/// The bytes a vector of `len` elements of `T` takes, or an error that
/// says so when it cannot be had.
fn try_alloc<T: Clone>(len: usize, fill: T, what: &str) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| {
        Error::operation(format!(
            "cannot allocate {} bytes for {what}",
            len.saturating_mul(std::mem::size_of::<T>())
        ))
    })?;
    v.resize(len, fill);
    Ok(v)
}

impl QMatrix {
    /// Packs `n` rows of `k` weights. `code(i)` is the integer code of
    /// weight `i` (row-major), `wide` whether codes span 8 bits (else
    /// 0..=15); `d` and `m` the scale and offset of each block. Errors
    /// when `k` is not a whole number of blocks, a slice is short, a code
    /// is out of its range, or the memory cannot be had.
    pub fn pack(
        n: usize,
        k: usize,
        wide: bool,
        code: impl Fn(usize) -> i32 + Sync,
        d: Vec<f32>,
        m: Vec<f32>,
    ) -> Result<QMatrix> {
        check_blocks(n, k, &d, &m)?;
        let bad = || Error::operation("quantized weights: a code is out of range");
        let codes = if wide {
            let mut c = try_alloc(n * k, 0u8, "quantized weights")?;
            c.par_chunks_mut(k).enumerate().try_for_each(|(r, row)| {
                for (j, o) in row.iter_mut().enumerate() {
                    *o = i8::try_from(code(r * k + j)).map_err(|_| bad())? as u8;
                }
                Ok::<_, Error>(())
            })?;
            Codes::Bytes(CodeBytes::Owned(c))
        } else {
            let mut c = try_alloc(n * k / 2, 0u8, "quantized weights")?;
            c.par_chunks_mut(k / 2)
                .enumerate()
                .try_for_each(|(r, row)| {
                    let nib = |i: usize| match code(r * k + i) {
                        v @ 0..=15 => Ok(v as u8),
                        _ => Err(bad()),
                    };
                    for (j, o) in row.iter_mut().enumerate() {
                        *o = nib(2 * j)? | nib(2 * j + 1)? << 4;
                    }
                    Ok::<_, Error>(())
                })?;
            Codes::Nibbles(CodeBytes::Owned(c))
        };
        QMatrix::new(n, k, codes, d, m)
    }

    /// The matrix over a constant's bytes as they are: `uint4` codes
    /// (`wide` false; any nibble is a code) or `int8` ones (`wide`),
    /// row-major [n, k], held, not copied. Errors as [`QMatrix::pack`]
    /// when the blocks do not match or the bytes are too few.
    pub fn share(
        n: usize,
        k: usize,
        wide: bool,
        bytes: Arc<Vec<u8>>,
        d: Vec<f32>,
        m: Vec<f32>,
    ) -> Result<QMatrix> {
        check_blocks(n, k, &d, &m)?;
        let need = if wide { n * k } else { n * k / 2 };
        if bytes.len() < need {
            return Err(Error::operation(
                "quantized weights: the codes do not match the shape",
            ));
        }
        let codes = CodeBytes::Shared(bytes);
        let codes = match wide {
            true => Codes::Bytes(codes),
            false => Codes::Nibbles(codes),
        };
        QMatrix::new(n, k, codes, d, m)
    }

    fn new(n: usize, k: usize, codes: Codes, d: Vec<f32>, mut m: Vec<f32>) -> Result<QMatrix> {
        let offsets = m.iter().any(|&x| x != 0.0);
        if !offsets {
            m = Vec::new();
        }
        Ok(QMatrix {
            n,
            k,
            codes,
            d: Scales::new(d)?,
            m,
            offsets,
        })
    }

    /// Whether this matrix is the one [`QMatrix::pack`] would make of these
    /// scales and offsets: the scales bit for bit; the offsets bit for bit
    /// where it keeps them, and all zero (of either sign, as `new` sees
    /// them) where it keeps none. An empty sum of offsets is -0.0, so a
    /// weight without offsets comes here with -0.0 in every block, and the
    /// products skip the term for both.
    #[cfg(test)]
    pub fn has_blocks(&self, d: &[f32], m: &[f32]) -> bool {
        let blocks = self.d.len();
        let scales = self.d.view();
        let offsets = match self.offsets {
            true => m
                .iter()
                .enumerate()
                .all(|(i, x)| self.m[i].to_bits() == x.to_bits()),
            false => m.iter().all(|&x| x == 0.0),
        };
        m.len() == blocks
            && d.len() == blocks
            && offsets
            && d.iter()
                .enumerate()
                .all(|(i, x)| scales.get(i).to_bits() == x.to_bits())
    }

    /// Output columns (weight rows).
    pub fn n(&self) -> usize {
        self.n
    }

    /// The reduction length.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Bytes held (codes, scales and offsets), the codes counted whether
    /// they are the matrix's own or a constant's.
    pub fn bytes(&self) -> usize {
        let codes = match &self.codes {
            Codes::Nibbles(_) => self.n * self.k / 2,
            Codes::Bytes(_) => self.n * self.k,
        };
        codes + self.d.bytes() + self.m.len() * 4
    }

    /// Reads its scales from `bytes`, a float16 constant's, when those
    /// hold exactly its scales block by block and row by row (as a GGUF
    /// model's do); keeps its own copy otherwise. Returns whether it does.
    pub fn read_scales_from(&mut self, bytes: Arc<Vec<u8>>) -> bool {
        match self.d.shared(bytes) {
            Some(d) => {
                self.d = d;
                true
            }
            None => false,
        }
    }

    /// Whether the scales are a constant's bytes, read where they are.
    #[cfg(test)]
    pub fn shares_scales(&self) -> bool {
        matches!(self.d, Scales::Shared(_))
    }

    /// Whether the codes are a constant's bytes, held as they are.
    pub fn shares_codes(&self) -> bool {
        matches!(
            self.codes,
            Codes::Nibbles(CodeBytes::Shared(_)) | Codes::Bytes(CodeBytes::Shared(_))
        )
    }

    /// Block `b`'s offset (0 where none is kept).
    #[inline]
    fn offset(&self, b: usize) -> f32 {
        match self.offsets {
            true => self.m[b],
            false => 0.0,
        }
    }

    /// Weight rows `rows` in float32 into `out` (`rows.len() * k`).
    /// Weights `p0..p0 + out.len()` of row `r`, dequantized: `code * d +
    /// m`, a multiply then an add, as the graph's dequantizeLinear and add
    /// compute them.
    fn dequantize_span(&self, r: usize, p0: usize, out: &mut [f32]) {
        let nb = self.k / QK;
        let scales = self.d.view();
        if p0.is_multiple_of(QK) && out.len() == QK {
            // A whole block: the codes in pairs.
            let b = r * nb + p0 / QK;
            let (d, m) = (scales.get(b), self.offset(b));
            let at = r * self.k + p0;
            if let Some(c) = self.codes.nibbles() {
                for (pair, &byte) in out.chunks_exact_mut(2).zip(&c[at / 2..at / 2 + QK / 2]) {
                    pair[0] = (byte & 15) as f32 * d + m;
                    pair[1] = (byte >> 4) as f32 * d + m;
                }
                return;
            }
        }
        let mut p = p0;
        let mut o = 0;
        while o < out.len() {
            let b = p / QK;
            let len = (QK - p % QK).min(out.len() - o);
            let (d, m) = (scales.get(r * nb + b), self.offset(r * nb + b));
            let at = r * self.k + p;
            let dst = &mut out[o..o + len];
            if let Some(c) = self.codes.nibbles() {
                for (i, x) in dst.iter_mut().enumerate() {
                    let byte = c[(at + i) / 2];
                    let code = match (at + i) % 2 {
                        0 => byte & 15,
                        _ => byte >> 4,
                    };
                    *x = code as f32 * d + m;
                }
            } else if let Some(c) = self.codes.bytes() {
                for (x, &q) in dst.iter_mut().zip(&c[at..at + len]) {
                    *x = q as f32 * d + m;
                }
            }
            p += len;
            o += len;
        }
    }
}

/// The scales and offsets of `n` rows of `k` weights: one per block.
fn check_blocks(n: usize, k: usize, d: &[f32], m: &[f32]) -> Result<()> {
    let blocks = n
        .checked_mul(k / QK)
        .ok_or_else(|| Error::operation("quantized weights: too many blocks"))?;
    if !k.is_multiple_of(QK) || k == 0 || d.len() != blocks || m.len() != blocks {
        return Err(Error::operation(
            "quantized weights: the blocks do not match the shape",
        ));
    }
    Ok(())
}

/// Each block of `QK` activations with its even elements first and its
/// odd ones after, as the 4-bit float kernels read them against `uint4`
/// bytes (see [`Codes::Nibbles`]; the integer ones put the codes back in
/// element order instead).
fn deinterleave(a: &[f32], out: &mut [f32]) {
    for (o, x) in out.chunks_exact_mut(QK).zip(a.chunks_exact(QK)) {
        for j in 0..QK / 2 {
            o[j] = x[2 * j];
            o[j + QK / 2] = x[2 * j + 1];
        }
    }
}

/// `c = a · wᵀ` for `a` [rows, K] row-major and `w` [N, K]: `c` is
/// [rows, N], overwritten. Runs on the current rayon pool.
pub fn product(rows: usize, a: &[f32], w: &QMatrix, c: &mut [f32]) -> Result<()> {
    product_with(rows, a, w, None, c)
}

/// [`product`] with a block-sum product folded in (`sums`, of the same
/// `n` and `k`): its terms added to each output after the output's own.
pub fn product_with(
    rows: usize,
    a: &[f32],
    w: &QMatrix,
    sums: Option<&BlockSums>,
    c: &mut [f32],
) -> Result<()> {
    let (n, k) = (w.n, w.k);
    if a.len() != rows * k || c.len() != rows * n || sums.is_some_and(|s| s.n() != n) {
        return Err(Error::operation(
            "quantized product: the operands do not match the shapes",
        ));
    }
    if rows == 0 || n == 0 {
        return Ok(());
    }
    if rows < SMALL_M {
        small(rows, a, w, sums, c)
    } else {
        if !integer_tiles(rows, a, w, c)? {
            tiled(rows, a, w, c)?;
        }
        match sums {
            Some(s) => s.add_to(rows, a, c),
            None => Ok(()),
        }
    }
}

/// A few rows of `a`: dot products from the codes, tasks of weight rows.
fn small(
    rows: usize,
    a: &[f32],
    w: &QMatrix,
    block_sums: Option<&BlockSums>,
    c: &mut [f32],
) -> Result<()> {
    let (n, k) = (w.n, w.k);
    let nb = k / QK;
    // The folded product's sums of each block of each row, taken from `a`
    // as it is (before the float kernels' reordering below).
    let folded = match block_sums {
        Some(bs) => Some((bs, bs.block_sums(rows, a)?)),
        None => None,
    };
    // The sum of each block of each row of a, for the offsets (none to
    // take where the matrix has none).
    let mut sums = Vec::new();
    if w.offsets {
        sums = try_alloc(rows * nb, 0f32, "block sums")?;
        for (s, blk) in sums.iter_mut().zip(a.chunks_exact(QK)) {
            *s = blk.iter().sum();
        }
    }
    let kernel = kernels::best();
    // Activations that are int8 codes times a scale per block (as a graph
    // that rounds them as llama.cpp does makes them) take the integer
    // products: the same value, the sums exact.
    let int8 = match kernel.integer() {
        // Compiled for the CPU's vectors: built for x86-64's baseline
        // the check ran four lanes wide.
        true => simd::with_simd(
            #[inline(always)]
            || exact_int8(a),
        )?,
        false => None,
    };
    // The 4-bit float kernels read each block's even and odd activations
    // apart.
    let parted;
    let a = match (&w.codes, &int8) {
        (Codes::Nibbles(_), None) => {
            let mut p = try_alloc(a.len(), 0f32, "activations")?;
            deinterleave(a, &mut p);
            parted = p;
            &parted[..]
        }
        _ => a,
    };
    // About 64k weights per task: enough to pay for the fork, small
    // enough that two threads share a 576-row matrix. Whole panels of the
    // folded product (`sums::PANEL` columns), so that a task's columns
    // start a panel.
    let per_task = (65536 / k).clamp(16, 1024) / sums::PANEL * sums::PANEL;
    let tasks = n.div_ceil(per_task);
    let scales = w.d.view();
    // Task t's weight rows (its columns of c).
    let span = |t: usize| t * per_task..((t + 1) * per_task).min(n);
    // One task: weight rows r0..r1 into `out` ([rows, r1 - r0]), its
    // float16 scales widened into this thread's `room`.
    let task = |t: usize, out: &mut [f32], room: &mut Vec<f32>| -> Result<()> {
        let std::ops::Range { start: r0, end: r1 } = span(t);
        let width = r1 - r0;
        // The task's scales, widened here once when they are float16
        // (nb values against each row's k codes).
        // The scales are a stream of their own beside the codes, read
        // a task at a time: too short a run for the hardware's
        // prefetchers, so each task asks for the next one's (the task
        // this thread most likely runs next).
        scales.prefetch(r1 * nb..(r1 + per_task) * nb);
        if let Some((bs, _)) = &folded {
            bs.prefetch(r1..(r1 + per_task).min(n));
        }
        let room = scratch(room, (r1 - r0) * nb)?;
        let task_d = scales.row(r0 * nb..r1 * nb, room);
        let mut r = r0;
        // Integer activations: the task's whole groups of four weight
        // rows (the kernels' ROWS) in one call per activation row,
        // the same sums as one row at a time.
        if let Some((qa, da)) = &int8 {
            let whole = width / kernels::ROWS * kernels::ROWS;
            if whole > 0 {
                let d = &task_d[..whole * nb];
                for i in 0..rows {
                    let (qa, da) = (&qa[i * k..(i + 1) * k], &da[i * nb..(i + 1) * nb]);
                    let dst = &mut out[i * width..i * width + whole];
                    match (w.codes.nibbles(), w.codes.bytes()) {
                        (Some(cd), _) => {
                            kernel.q4i4(&cd[r0 * k / 2..(r0 + whole) * k / 2], d, qa, da, dst)
                        }
                        (_, Some(cd)) => kernel.q8i4(&cd[r0 * k..(r0 + whole) * k], d, qa, da, dst),
                        _ => {}
                    }
                }
                r += whole;
            }
        }
        // The rows left (or every row, for float activations).
        for r in r..r1 {
            let d = &task_d[(r - r0) * nb..(r - r0 + 1) * nb];
            for i in 0..rows {
                let ai = &a[i * k..(i + 1) * k];
                let dot = match (&int8, w.codes.nibbles(), w.codes.bytes()) {
                    (Some((qa, da)), Some(cd), _) => kernel.q4i(
                        &cd[r * k / 2..(r + 1) * k / 2],
                        d,
                        &qa[i * k..(i + 1) * k],
                        &da[i * nb..(i + 1) * nb],
                    ),
                    (Some((qa, da)), _, Some(cd)) => kernel.q8i(
                        &cd[r * k..(r + 1) * k],
                        d,
                        &qa[i * k..(i + 1) * k],
                        &da[i * nb..(i + 1) * nb],
                    ),
                    (None, Some(cd), _) => kernel.q4(&cd[r * k / 2..(r + 1) * k / 2], d, ai),
                    (None, _, Some(cd)) => kernel.q8(&cd[r * k..(r + 1) * k], d, ai),
                    _ => 0.0,
                };
                out[i * width + (r - r0)] = dot;
            }
        }
        // The offsets' term of every output (none to add where the
        // matrix keeps no offsets).
        if w.offsets {
            for (i, row) in out.chunks_exact_mut(width).enumerate() {
                let si = &sums[i * nb..(i + 1) * nb];
                for (o, r) in row.iter_mut().zip(r0..r1) {
                    *o += dot8(&w.m[r * nb..(r + 1) * nb], si);
                }
            }
        }
        // The folded product's terms, while the task's outputs are in
        // this core's cache.
        if let Some((bs, s)) = &folded {
            for (i, row) in out.chunks_exact_mut(width).enumerate() {
                bs.add_cols(&s[i * nb..(i + 1) * nb], r0..r1, row);
            }
        }
        Ok(())
    };
    if rows == 1 {
        // One row: each task writes its columns of c where they are.
        c.par_chunks_mut(per_task)
            .enumerate()
            .try_for_each(|(t, dst)| ROOM.with_borrow_mut(|room| task(t, dst, room)))?;
        return Ok(());
    }
    let parts: Vec<Vec<f32>> = (0..tasks)
        .into_par_iter()
        .map(|t| {
            let mut out = try_alloc(rows * span(t).len(), 0f32, "a task's products")?;
            ROOM.with_borrow_mut(|room| task(t, &mut out, room))?;
            Ok(out)
        })
        .collect::<Result<_>>()?;
    for (t, part) in parts.iter().enumerate() {
        let cols = span(t);
        let width = cols.len();
        for i in 0..rows {
            c[i * n + cols.start..i * n + cols.end]
                .copy_from_slice(&part[i * width..(i + 1) * width]);
        }
    }
    Ok(())
}

thread_local! {
    /// Each thread's room for a task's scales widened from float16,
    /// reused across tasks and products (a decoding step runs a few
    /// thousand tasks; each allocating its own was 5-9% of the step). A
    /// task calls nothing that could run another task on this thread
    /// while it holds the borrow.
    static ROOM: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// `room`'s first `len` elements (old contents), grown fallibly.
fn scratch(room: &mut Vec<f32>, len: usize) -> Result<&mut [f32]> {
    if room.len() < len {
        room.try_reserve_exact(len - room.len()).map_err(|_| {
            Error::operation(format!(
                "cannot allocate {} bytes for a task's scales",
                len * 4
            ))
        })?;
        room.resize(len, 0.0);
    }
    Ok(&mut room[..len])
}

/// `a` as int8 codes and a scale per block of [`QK`], when every value
/// is exactly its code times its block's scale (`scale = max|x| / 127`,
/// codes rounded): then a product over the codes is the product over `a`,
/// in exact integer sums. `None` as soon as a block is not (ordinary
/// float activations), and the float kernels serve. A graph that rounds
/// its activations per block as llama.cpp does (`quantizeLinear` then
/// `dequantizeLinear`, its scale in float16) gives such values: the
/// largest of a block is 127 times the scale, so dividing by max/127
/// recovers the codes exactly.
#[inline(always)]
fn exact_int8(a: &[f32]) -> Result<Option<(Vec<i8>, Vec<f32>)>> {
    let mut qa = try_alloc(a.len(), 0i8, "int8 activations")?;
    let mut da = try_alloc(a.len() / QK, 0f32, "int8 activations' scales")?;
    // 16 lanes at a time where the CPU has AVX-512 (the loop below, even
    // compiled for its vectors, took 1.6 ns a value: a quarter of a
    // prompt's product).
    let exact = match tiles::exact_int8(a, &mut qa, &mut da) {
        Some(exact) => exact,
        None => exact_int8_portable(a, &mut qa, &mut da),
    };
    Ok(exact.then_some((qa, da)))
}

/// [`exact_int8`]'s definition, in a loop: whether every block of `a`
/// is exact, its codes and scales written to `qa` and `da` (zeros for a
/// block of zeros) as far as the first that is not.
fn exact_int8_portable(a: &[f32], qa: &mut [i8], da: &mut [f32]) -> bool {
    for ((blk, q), d) in a
        .chunks_exact(QK)
        .zip(qa.chunks_exact_mut(QK))
        .zip(da.iter_mut())
    {
        let amax = blk.iter().fold(0f32, |m, x| m.max(x.abs()));
        if amax == 0.0 {
            // Codes and scale 0, if every value is a zero (NaN is not,
            // and `max` passed over it).
            if blk.iter().any(|&x| x != 0.0) {
                return false;
            }
            q.fill(0);
            *d = 0.0;
            continue;
        }
        if !amax.is_finite() {
            return false;
        }
        let scale = amax / 127.0;
        let inv = 127.0 / amax;
        // The nearest integer (`round_even_f32`), the block checked as a
        // whole: a loop without a library call or an early exit runs on
        // vectors. Which way a tie goes does not matter: a value that is
        // a code times the scale is no tie.
        let mut exact = true;
        for (o, &x) in q.iter_mut().zip(blk) {
            let c = round_even_f32(x * inv);
            exact &= c.abs() <= 127.0 && c * scale == x;
            *o = c as i8;
        }
        if !exact {
            return false;
        }
        *d = scale;
    }
    true
}

/// `sum(x[i] * y[i])` in eight interleaved partial sums, which the
/// compiler keeps in one vector register: a single running sum would wait
/// on each addition's latency (an output of a decoding step has one such
/// sum of K / 32 terms, and a step has a few hundred thousand outputs).
fn dot8(x: &[f32], y: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (xc, yc) = (x.chunks_exact(8), y.chunks_exact(8));
    let tail: f32 = xc
        .remainder()
        .iter()
        .zip(yc.remainder())
        .map(|(a, b)| a * b)
        .sum();
    for (a, b) in xc.zip(yc) {
        for l in 0..8 {
            acc[l] += a[l] * b[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Many rows of `a` in exact integer block sums ([`tiles`]), where the
/// CPU has a form for them, the weights are 4-bit codes without offsets
/// and every activation is an int8 code times its block's scale (a graph
/// with llama.cpp's rounding). Returns whether it ran; else the float
/// path serves.
fn integer_tiles(rows: usize, a: &[f32], w: &QMatrix, c: &mut [f32]) -> Result<bool> {
    if tiles::Form::best().is_none() || w.offsets || w.codes.nibbles().is_none() {
        return Ok(false);
    }
    // Wherever a tile form runs, the int8 check has its AVX-512 form, so
    // the loop needs no wrapper compiled for the CPU's vectors here.
    let Some((qa, da)) = exact_int8(a)? else {
        return Ok(false);
    };
    let a = tiles::IntRows {
        rows,
        qa: &qa,
        da: &da,
    };
    tiles::product(&a, w, c)
}

/// Many rows of `a`: tiles of weight rows dequantized and multiplied by
/// the float32 GEMM kernel, a tile per task.
fn tiled(rows: usize, a: &[f32], w: &QMatrix, c: &mut [f32]) -> Result<()> {
    let (n, k) = (w.n, w.k);
    // The weights are dequantized straight into the GEMM's packed B
    // panels as it asks for them (column j of B is weight row j), so A is
    // packed once per block of the product rather than once per tile of
    // weights, and no float32 tile is packed again: the same values
    // (`code * d + m`) in the same panels as packing the dequantized
    // matrix would give, so the same sums.
    let gen = |p0: usize, kc: usize, j0: usize, cols: usize, nr: usize, dst: &mut [f32]| {
        // A block's run of each of the panel's rows, then written across.
        let mut tmp = vec![0f32; nr * QK];
        for (q, panel) in dst.chunks_exact_mut(kc * nr).enumerate() {
            let jb = j0 + q * nr;
            let live = nr.min((j0 + cols).min(n).saturating_sub(jb));
            let mut p = 0;
            while p < kc {
                let len = (QK - (p0 + p) % QK).min(kc - p);
                // A whole block of a whole panel: gathered across its rows
                // where the CPU can (the same values).
                if len == QK
                    && live == nr
                    && panels::block_panel(w, jb, (p0 + p) / QK, nr, &mut panel[p * nr..])
                {
                    p += len;
                    continue;
                }
                for (jj, t) in tmp.chunks_exact_mut(QK).enumerate() {
                    match jj < live {
                        true => w.dequantize_span(jb + jj, p0 + p, &mut t[..len]),
                        false => t[..len].fill(0.0),
                    }
                }
                for (i, prow) in panel[p * nr..(p + len) * nr]
                    .chunks_exact_mut(nr)
                    .enumerate()
                {
                    for (jj, v) in prow.iter_mut().enumerate() {
                        *v = tmp[jj * QK + i];
                    }
                }
                p += len;
            }
        }
    };
    sgemm_gen(rows, n, k, a, false, &gen, c, true, &Fuse::default())
}

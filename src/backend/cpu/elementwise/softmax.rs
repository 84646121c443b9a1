//! Softmax: along the last axis one row at a time, along an inner axis by
//! strips of columns, and the fused form a language model's attention
//! uses (mask added and float16 rounding in the same pass).

use std::borrow::Cow;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

use super::super::util::{from_floats, try_filled};
use super::{exp_f32, fmax, owned_floats, units_per_task, with_simd, PAR_MIN};

/// Sum of `v` in f32 over 8 independent lanes (vectorisable, and more
/// accurate than one running sum).
#[inline(always)]
pub(super) fn sum_lanes(v: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let mut chunks = v.chunks_exact(8);
    for c in &mut chunks {
        for j in 0..8 {
            lanes[j] += c[j];
        }
    }
    let mut s = 0.0f32;
    for &x in chunks.remainder() {
        s += x;
    }
    for l in lanes {
        s += l;
    }
    s
}

/// Maximum of `v` (-inf when empty); vectorisable. NaNs may be skipped:
/// callers get NaN from them elsewhere.
#[inline(always)]
fn max_lanes(v: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut chunks = v.chunks_exact(8);
    for c in &mut chunks {
        for j in 0..8 {
            lanes[j] = if c[j] > lanes[j] { c[j] } else { lanes[j] };
        }
    }
    let mut m = f32::NEG_INFINITY;
    for &x in chunks.remainder().iter().chain(&lanes) {
        m = fmax(m, x);
    }
    m
}

/// Softmax of one contiguous row, in place.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub(super) fn softmax_row(row: &mut [f32]) {
    // Subtracting the maximum keeps exp() from overflowing; the result is
    // mathematically unchanged.
    let mut m = max_lanes(row);
    if m == f32::NEG_INFINITY {
        // All -inf: no finite shift exists; compute without it, which
        // yields NaN (0/0) like the formula does. A +inf maximum stays:
        // x - inf then gives NaN at the infinity and so NaN everywhere
        // through the sum, as the formula does.
        m = 0.0;
    }
    for i in 0..row.len() {
        row[i] = exp_f32(row[i] - m);
    }
    let inv = 1.0 / sum_lanes(row);
    for i in 0..row.len() {
        row[i] *= inv;
    }
}

/// Columns of one softmax strip: the `inner` positions after the axis
/// are taken [`STRIP`] at a time, so that each pass over the `n` rows of a
/// group reads contiguous runs and the strip's statistics stay in L1.
const STRIP: usize = 512;

/// The maximum (0 where all are -inf: no finite shift exists, and the
/// formula then gives NaN, 0/0, as it does unshifted) and the reciprocal
/// of the sum of shifted exponentials of columns `j0..j0 + m.len()` of one
/// group (`b`: `n` rows of `inner`), into `m` and `inv`. Each column is
/// reduced in row order, with NaNs propagated (`fmax`), exactly as a walk
/// down the column one element at a time would: the lanes are columns.
#[inline(always)]
fn softmax_column_stats(
    b: &[f32],
    n: usize,
    inner: usize,
    j0: usize,
    m: &mut [f32],
    inv: &mut [f32],
) {
    let w = m.len();
    m.fill(f32::NEG_INFINITY);
    for i in 0..n {
        let row = &b[i * inner + j0..i * inner + j0 + w];
        for (m, &x) in m.iter_mut().zip(row) {
            *m = fmax(*m, x);
        }
    }
    for m in m.iter_mut() {
        if *m == f32::NEG_INFINITY {
            *m = 0.0;
        }
    }
    inv.fill(0.0);
    for i in 0..n {
        let row = &b[i * inner + j0..i * inner + j0 + w];
        for ((s, &m), &x) in inv.iter_mut().zip(&*m).zip(row) {
            *s += exp_f32(x - m);
        }
    }
    for s in inv.iter_mut() {
        *s = 1.0 / *s;
    }
}

/// Softmax along an axis that has `inner > 1` elements after it, in
/// place: `v` is groups of `n` rows of `inner`. First each column's
/// maximum and sum (by strips of columns, across the pool), then every
/// row at once: `exp(x - max) * (1 / sum)`, the exponential evaluated
/// again rather than kept, which gives the same value and keeps the
/// passes to whole rows. The bits are those of walking each column alone.
fn softmax_columns(v: &mut [f32], n: usize, inner: usize) -> Result<()> {
    let block = n * inner;
    if block == 0 || v.is_empty() {
        return Ok(());
    }
    let cols = v.len() / n;
    let mut m = try_filled(cols, 0.0f32, "softmax statistics")?;
    let mut inv = try_filled(cols, 0.0f32, "softmax statistics")?;
    let par = v.len() >= PAR_MIN && rayon::current_num_threads() > 1;
    // One strip of one group's columns.
    let strip = |g: usize, s: usize, ms: &mut [f32], is: &mut [f32]| {
        let b = &v[g * block..(g + 1) * block];
        with_simd(
            #[inline(always)]
            || softmax_column_stats(b, n, inner, s * STRIP, ms, is),
        )
    };
    if par {
        // Strips of every group across the pool: a group's columns alone
        // may be all there is (a softmax over axis 0).
        m.par_chunks_mut(inner)
            .zip(inv.par_chunks_mut(inner))
            .enumerate()
            .for_each(|(g, (mg, ig))| {
                mg.par_chunks_mut(STRIP)
                    .zip(ig.par_chunks_mut(STRIP))
                    .enumerate()
                    .for_each(|(s, (ms, is))| strip(g, s, ms, is))
            });
    } else {
        for (g, (mg, ig)) in m.chunks_mut(inner).zip(inv.chunks_mut(inner)).enumerate() {
            for (s, (ms, is)) in mg.chunks_mut(STRIP).zip(ig.chunks_mut(STRIP)).enumerate() {
                strip(g, s, ms, is);
            }
        }
    }
    let (m, inv) = (&m[..], &inv[..]);
    // Whole rows per task.
    let per = units_per_task(v.len(), v.len() / inner) * inner;
    let scale = |(t, c): (usize, &mut [f32])| {
        with_simd(
            #[inline(always)]
            || {
                let r0 = t * per / inner;
                for (r, row) in c.chunks_exact_mut(inner).enumerate() {
                    let at = (r0 + r) / n * inner;
                    let (ms, is) = (&m[at..at + inner], &inv[at..at + inner]);
                    for ((x, &m), &s) in row.iter_mut().zip(ms).zip(is) {
                        *x = exp_f32(*x - m) * s;
                    }
                }
            },
        )
    };
    if per < v.len() {
        v.par_chunks_mut(per).enumerate().for_each(scale);
    } else {
        scale((0, v));
    }
    Ok(())
}

/// `softmax` along `axis` (float types).
pub fn softmax(x: &Buf, axis: usize, out: &OperandDescriptor) -> Result<Buf> {
    softmax_owned(Cow::Borrowed(x), axis, out)
}

/// `softmax`, computed in the input's own buffer when it is handed over.
pub fn softmax_owned(x: Cow<'_, Buf>, axis: usize, out: &OperandDescriptor) -> Result<Buf> {
    let shape = &out.shape;
    if axis >= shape.len() || x.len() != out.element_count() {
        return Err(Error::operation("softmax: bad axis or size"));
    }
    let mut v = owned_floats(x)?;
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    if inner > 1 {
        softmax_columns(&mut v, n, inner)?;
        return from_floats(out.data_type, v);
    }
    let block = n * inner;
    if let Some(groups) = v.len().checked_div(block) {
        // Groups of whole blocks per task.
        let per = units_per_task(v.len(), groups) * block;
        let run = |c: &mut [f32]| {
            with_simd(
                #[inline(always)]
                || {
                    for row in c.chunks_exact_mut(n) {
                        softmax_row(row);
                    }
                },
            )
        };
        if per < v.len() {
            v.par_chunks_mut(per).for_each(run);
        } else {
            run(&mut v);
        }
    }
    from_floats(out.data_type, v)
}

/// A softmax over the last axis of `x` (rows of `out`'s last size),
/// `mask` added first (element `i` of x meets element `i % len` of it,
/// whole rows) and the results rounded to float16 where `round16` asks:
/// the add, the softmax and the two casts it stands for (see
/// `fuse::fused_softmaxes`), their bits, in one pass that keeps each row
/// in the first-level cache. Computed in x's buffer when it is handed
/// over.
pub fn softmax_fused(
    x: Cow<'_, Buf>,
    mask: Option<&Buf>,
    round16: bool,
    out: &OperandDescriptor,
) -> Result<Buf> {
    let bad = || Error::operation("softmax: the fused operands do not match");
    let n = out.shape.last().copied().unwrap_or(0);
    if x.len() != out.element_count() || n == 0 || out.data_type != DataType::Float32 {
        return Err(bad());
    }
    let mask = match mask {
        Some(Buf::F32(m))
            if !m.is_empty() && m.len().is_multiple_of(n) && x.len().is_multiple_of(m.len()) =>
        {
            Some(m.as_slice())
        }
        Some(_) => return Err(bad()),
        None => None,
    };
    let mut v = owned_floats(x)?;
    // Whole rows per task.
    let per = units_per_task(v.len(), v.len() / n) * n;
    let run = |(t, c): (usize, &mut [f32])| {
        with_simd(
            #[inline(always)]
            || {
                for (r, row) in c.chunks_exact_mut(n).enumerate() {
                    if let Some(m) = mask {
                        let at = (t * per + r * n) % m.len();
                        for (x, &m) in row.iter_mut().zip(&m[at..at + n]) {
                            *x += m;
                        }
                    }
                    softmax_row(row);
                    if round16 {
                        crate::f16::round_in_place(row);
                    }
                }
            },
        );
    };
    if per < v.len() {
        v.par_chunks_mut(per).enumerate().for_each(run);
    } else {
        run((0, &mut v));
    }
    Ok(Buf::F32(v))
}

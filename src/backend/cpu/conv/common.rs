//! Helpers that several convolution and pooling paths share (a leaf: it
//! imports none of them): the layout permutations, the filter in OIHW
//! order, the padded extent the taps reach and the phase-split padded copy
//! of a plane, pooling's window reductions, and the 8x8 register transpose
//! of the 8-channel kernels (x86-64).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use crate::backend::cpu::shape::{transpose_vec, transpose_vec_into};
use crate::backend::cpu::util::{floats, try_vec};
use crate::error::{Error, Result};
use crate::graph::ops::conv::{Conv2dParams, FilterLayout, Pool2dParams, PoolKind};
use crate::tensor::Buf;

/// Multiply-adds per (batch, group) unit below which units run in parallel
/// with serial sgemms, rather than one after another with parallel sgemms.
pub(super) const UNIT_PAR_WORK: usize = 1 << 22;

/// NHWC -> NCHW.
pub(super) const TO_NCHW: [usize; 4] = [0, 3, 1, 2];
/// NCHW -> NHWC.
pub(super) const TO_NHWC: [usize; 4] = [0, 2, 3, 1];

/// The input `x` of convolution `p` as NCHW float32: from nhwc, and from
/// float16 (widened exactly). The plain blocked convolution, which reads
/// a first layer's few input channels where they lie in that form, takes
/// an nhwc or float16 graph's input so.
pub(in crate::backend::cpu) fn plain_input(x: &Buf, p: &Conv2dParams) -> Result<Buf> {
    let (n, c, h, w) = (p.batch, p.in_channels, p.in_h, p.in_w);
    let v = floats(x)?;
    let fits = n
        .checked_mul(c)
        .and_then(|v| v.checked_mul(h))
        .and_then(|v| v.checked_mul(w))
        == Some(v.len());
    if !fits {
        return Err(Error::operation(
            "conv2d: the input does not match its parameters",
        ));
    }
    Ok(Buf::F32(match p.nhwc {
        // Into recycled memory: this copy is made on every dispatch.
        true => {
            let out = Buf::try_f32_for_overwrite(v.len())?;
            transpose_vec_into(out, &v, &[n, h, w, c], &TO_NCHW)?
        }
        false => v.into_owned(),
    }))
}

/// The filter in OIHW order, whatever its layout (borrowed when it is).
pub(super) fn filter_oihw<'a>(
    f: &'a [f32],
    p: &Conv2dParams,
) -> Result<std::borrow::Cow<'a, [f32]>> {
    let (o, i, h, w) = (
        p.out_channels,
        p.in_channels / p.groups,
        p.kernel_h,
        p.kernel_w,
    );
    Ok(std::borrow::Cow::Owned(match p.filter_layout {
        FilterLayout::Oihw => return Ok(std::borrow::Cow::Borrowed(f)),
        FilterLayout::Hwio => transpose_vec(f, &[h, w, i, o], &[3, 2, 0, 1])?,
        FilterLayout::Ohwi => transpose_vec(f, &[o, h, w, i], &[0, 3, 1, 2])?,
        FilterLayout::Ihwo => transpose_vec(f, &[i, h, w, o], &[3, 0, 1, 2])?,
    }))
}

/// The padded rows and columns the taps of a convolution reach (the
/// extent of the padded input that is read; needs out_h, out_w >= 1).
pub(super) fn reach(p: &Conv2dParams) -> (usize, usize) {
    let (oh, ow) = (p.out_h, p.out_w);
    (
        (oh - 1) * p.strides[0] + (p.kernel_h - 1) * p.dilations[0] + 1,
        (ow - 1) * p.strides[1] + (p.kernel_w - 1) * p.dilations[1] + 1,
    )
}

/// Writes one input plane `x` ([h, w]) with its padding into `dst`, split
/// by column phase for stride `sw`: `dst[(q * hu + r) * wq + t]` is padded
/// row `r`, padded column `q + t * sw` (`wq = ceil(wu / sw)`), for the `hu`
/// rows and `wu` columns the taps reach. Only the cells the input covers
/// are written: `dst` must hold zeros in the others (the geometry fixes
/// which cells those are, so a buffer zeroed once serves every plane).
#[inline(always)]
pub(super) fn pad_split(
    x: &[f32],
    (h, w): (usize, usize),
    (pt, pl): (usize, usize),
    (hu, wu, sw): (usize, usize, usize),
    scratch: &mut [f32],
) {
    let wq = wu.div_ceil(sw);
    for r in 0..hu {
        let Some(iy) = r.checked_sub(pt).filter(|&iy| iy < h) else {
            continue;
        };
        let src = &x[iy * w..(iy + 1) * w];
        if sw == 1 {
            let (lo, hi) = (pl.min(wu), (pl + w).min(wu));
            if lo < hi {
                scratch[r * wq + lo..r * wq + hi].copy_from_slice(&src[..hi - lo]);
            }
        } else {
            // Phase q holds padded columns q, q + sw, ...; of those, the
            // ones in [pl, hi) come from the input, a strided run of it.
            let hi = (pl + w).min(wu);
            for q in 0..sw {
                let t0 = pl.saturating_sub(q).div_ceil(sw);
                let t1 = hi.saturating_sub(q).div_ceil(sw).max(t0);
                if t0 == t1 {
                    continue;
                }
                let base = (q * hu + r) * wq;
                let row = &mut scratch[base + t0..base + t1];
                let src = &src[q + t0 * sw - pl..];
                if sw == 2 {
                    // A constant stride: the loop becomes vector shuffles.
                    let full = (src.len() / 2).min(row.len());
                    for (d, pair) in row[..full].iter_mut().zip(src.chunks_exact(2)) {
                        *d = pair[0];
                    }
                    for (t, d) in row.iter_mut().enumerate().skip(full) {
                        *d = src[2 * t];
                    }
                } else {
                    for (d, s) in row.iter_mut().zip(src.iter().step_by(sw)) {
                        *d = *s;
                    }
                }
            }
        }
    }
}

/// Where a max pool's reduction starts (and what a window wholly in the
/// padding gives).
pub(super) const MAX_IDENTITY: f32 = f32::NEG_INFINITY;

/// One element into a max pool's reduction, in f32 (exact: no rounding,
/// and a NaN's bits are kept). NaN propagates: once acc is NaN, nothing
/// replaces it.
#[inline(always)]
pub(super) fn max_step(acc: f32, v: f32) -> f32 {
    if (v > acc || v.is_nan()) && !acc.is_nan() {
        v
    } else {
        acc
    }
}

/// One element into an average (`squares` false) or l2 (`squares`
/// true) pool's sum. Sums accumulate in f64, as the reductions do: in f32
/// a window of millions of taps would stall (an 8192x8192 window of 3s
/// summed to 2^25 and averaged to 1) and round at every tap.
#[inline(always)]
pub(super) fn sum_step(squares: bool, acc: f64, v: f32) -> f64 {
    let v = v as f64;
    acc + if squares { v * v } else { v }
}

/// A sum's result, rounded to f32 once. Padding is not part of any
/// reduction: the average divides by the number of input elements in the
/// window. A window wholly in the padding (possible with ceil rounding or
/// large padding) reduces nothing: 0 for average and l2.
pub(super) fn sum_finish(squares: bool, acc: f64, count: usize) -> f32 {
    match (squares, count) {
        (true, _) => acc.sqrt() as f32,
        (false, 0) => 0.0,
        (false, _) => (acc / count as f64) as f32,
    }
}

/// Reduces a window's taps (in the window's order) as pooling `kind`
/// does: the one definition every pooling path gives the bits of.
#[inline(always)]
pub(super) fn pool_reduce(kind: PoolKind, taps: impl Iterator<Item = f32>) -> f32 {
    match kind {
        PoolKind::Max => taps.fold(MAX_IDENTITY, max_step),
        PoolKind::Average | PoolKind::L2 => {
            let squares = kind == PoolKind::L2;
            let (mut acc, mut count) = (0.0f64, 0usize);
            for v in taps {
                acc = sum_step(squares, acc, v);
                count += 1;
            }
            sum_finish(squares, acc, count)
        }
    }
}

/// The window taps `first..end` of output position `o` along one axis
/// that fall inside the input (`size` elements after `pad` of padding):
/// tap `t` reads `o * stride + t * dilation - pad`.
pub(super) fn window_taps(
    o: usize,
    k: usize,
    stride: usize,
    dilation: usize,
    pad: usize,
    size: usize,
) -> (usize, usize) {
    let base = o * stride;
    let end = (pad + size)
        .checked_sub(base)
        .map_or(0, |room| room.div_ceil(dilation).min(k));
    let first = pad.saturating_sub(base).div_ceil(dilation).min(end);
    (first, end)
}

/// The taps of a pool's windows inside its input ([`window_taps`] of
/// every output row and column), found once per call rather than per
/// output (two divisions each), and the range of columns whose windows
/// lie wholly inside a row.
pub(super) struct Taps {
    pub rows: Vec<(usize, usize)>,
    pub cols: Vec<(usize, usize)>,
    pub inside: (usize, usize),
}

impl Taps {
    pub fn new(p: &Pool2dParams) -> Result<Taps> {
        let [kh, kw] = p.window;
        let (s, d, pad) = (p.strides, p.dilations, p.padding);
        let mut rows = try_vec(p.out_h, "the pool2d rows' taps")?;
        rows.extend((0..p.out_h).map(|o| window_taps(o, kh, s[0], d[0], pad[0], p.in_h)));
        let mut cols = try_vec(p.out_w, "the pool2d columns' taps")?;
        cols.extend((0..p.out_w).map(|o| window_taps(o, kw, s[1], d[1], pad[2], p.in_w)));
        // Whole windows are the ones between the edges' partial ones.
        let whole = |c: &(usize, usize)| *c == (0, kw);
        let first = cols.iter().position(whole).unwrap_or(cols.len());
        let end = first + cols[first..].iter().take_while(|c| whole(c)).count();
        Ok(Taps {
            rows,
            cols,
            inside: (first, end),
        })
    }
}

/// A window's reduction, `N` lanes side by side (channels, or output
/// positions), with the results of [`pool_reduce`]: a type per kind, so
/// that nothing is decided per tap, and accumulators that stay in
/// registers across a window's taps.
pub(super) trait Reduce<const N: usize>: Sync {
    /// Whether this is [`Max`] (a kernel of its own may take its windows).
    const MAX: bool = false;
    type Acc: Copy;
    fn init(&self) -> Self::Acc;
    fn step(&self, acc: &mut Self::Acc, px: &[f32; N]);
    fn finish(&self, acc: Self::Acc, count: usize, out: &mut [f32]);
}

/// Average (`SQUARES` false: the sum, divided by the taps inside) or
/// l2 (the square root of the sum of squares).
pub(super) struct Sum<const SQUARES: bool>;

impl<const N: usize, const SQUARES: bool> Reduce<N> for Sum<SQUARES> {
    type Acc = [f64; N];
    #[inline(always)]
    fn init(&self) -> [f64; N] {
        [0.0; N]
    }
    #[inline(always)]
    fn step(&self, acc: &mut [f64; N], px: &[f32; N]) {
        for (a, &v) in acc.iter_mut().zip(px) {
            *a = sum_step(SQUARES, *a, v);
        }
    }
    #[inline(always)]
    fn finish(&self, acc: [f64; N], count: usize, out: &mut [f32]) {
        for (o, a) in out.iter_mut().zip(acc) {
            *o = sum_finish(SQUARES, a, count);
        }
    }
}

/// Max in two independent parts, each one instruction or two per tap
/// rather than [`max_step`]'s chain of four: `max` is the larger value,
/// the earlier of equal ones (x86's `maxps` exactly), which is
/// `max_step`'s result when no NaN was seen; `nan` holds the first NaN
/// once one is seen (before that, whatever was last), which is
/// `max_step`'s result when one was.
pub(super) struct Max;

impl<const N: usize> Reduce<N> for Max {
    const MAX: bool = true;
    type Acc = ([f32; N], [f32; N]);
    #[inline(always)]
    fn init(&self) -> Self::Acc {
        ([MAX_IDENTITY; N], [0.0; N])
    }
    #[inline(always)]
    fn step(&self, (max, nan): &mut Self::Acc, px: &[f32; N]) {
        for ((m, n), &v) in max.iter_mut().zip(nan.iter_mut()).zip(px) {
            *m = if v > *m { v } else { *m };
            *n = if n.is_nan() { *n } else { v };
        }
    }
    #[inline(always)]
    fn finish(&self, (max, nan): Self::Acc, _: usize, out: &mut [f32]) {
        // Whole arrays, then one copy: zipped with `out` (a slice), wide
        // blocks were finished one lane at a time through the stack.
        let mut r = max;
        for (r, n) in r.iter_mut().zip(nan) {
            *r = if n.is_nan() { n } else { *r };
        }
        out.copy_from_slice(&r);
    }
}

/// Whether pooling `p` reduces each whole plane to one value: one window
/// over the plane, no padding, no dilation.
pub(super) fn is_global_pool(p: &Pool2dParams) -> bool {
    p.out_h == 1
        && p.out_w == 1
        && p.window == [p.in_h, p.in_w]
        && p.padding == [0; 4]
        && p.dilations == [1, 1]
        && p.in_h * p.in_w > 0
}

/// Transposes 8 vectors of 8 lanes (row i lane j -> row j lane i).
///
/// # Safety
/// The CPU must have AVX (inlined into code compiled for AVX2, whose
/// caller checked [`available`](super::depthwise8::available)).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(super) unsafe fn transpose(r: [__m256; 8]) -> [__m256; 8] {
    // SAFETY: register shuffles only, no memory; AVX is the caller's
    // contract.
    unsafe {
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xee>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xee>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xee>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xee>(t5, t7);
        [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ]
    }
}

//! Depthwise conv2d on eight channels at once (x86-64 with AVX2 and FMA).
//!
//! In NCHW a depthwise convolution's vectors run along a row of one
//! channel, which is short in the late layers of a network (7 or 14 wide):
//! most of the work is then loop remainders and per-plane set-up. Here the
//! planes of eight channels are first interleaved (with their padding) so
//! that one 8-lane vector holds one pixel of all eight channels; every tap
//! of every output pixel is then one load and one fused multiply-add, at
//! any plane size, stride or dilation. The interleaving in and out uses 8x8
//! register transposes. Each output sums its taps in the order of the NCHW
//! kernel (`w0 * x0`, then fused multiply-adds in (ky, kx) order) and adds
//! the bias and clamps as it does, so the two agree bit for bit.

#![cfg(target_arch = "x86_64")]

use std::arch::x86_64::*;
use std::cell::RefCell;

use rayon::prelude::*;

use crate::graph::ops::conv::Conv2dParams;

use super::common::transpose;

/// Lanes of a block: channels computed together.
const L: usize = 8;

/// `MASKS[8 - n..][..8]` enables the first n lanes of a masked load.
static MASKS: [i32; 16] = [-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0];

/// A thread's working memory: the interleaved input and output blocks and
/// the block's taps (8 lanes of filter weights, offset in the input).
struct Bufs {
    inb: Vec<f32>,
    outb: Vec<f32>,
    taps: Vec<(__m256, usize)>,
}

thread_local! {
    /// Each thread's interleaved input and output blocks, reused across
    /// calls (their padding cells are rewritten per call).
    static BUFS: RefCell<Bufs> = const {
        RefCell::new(Bufs { inb: Vec::new(), outb: Vec::new(), taps: Vec::new() })
    };
}

/// Whether this CPU runs [`depthwise8`].
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
}

/// Depthwise conv2d of NCHW `x` with OIHW filter `f` ([c, 1, kh, kw]) into
/// `res` (NCHW), bias and bounds applied as the NCHW kernel applies them
/// (`-0` and infinite bounds stand for absent ones).
///
/// # Safety
/// The CPU must have AVX2 and FMA ([`available`]).
pub(super) unsafe fn depthwise8(
    x: &[f32],
    f: &[f32],
    bias: Option<&[f32]>,
    (lo, hi): (f32, f32),
    p: &Conv2dParams,
    res: &mut [f32],
) {
    let c = p.in_channels;
    let (in_plane, plane) = (p.in_h * p.in_w, p.out_h * p.out_w);
    if c == 0 || plane == 0 {
        return;
    }
    let blocks = c.div_ceil(L);
    let run = |(u, dst): (usize, &mut [f32])| {
        let (b, c0) = (u / blocks, (u % blocks) * L);
        let lanes = L.min(c - c0);
        let khw = p.kernel_h * p.kernel_w;
        let xs = &x[(b * c + c0) * in_plane..(b * c + c0 + lanes) * in_plane];
        let ws = &f[c0 * khw..(c0 + lanes) * khw];
        let bs = bias.map(|v| &v[c0..c0 + lanes]);
        BUFS.with(|cell| {
            let mut bufs = cell.borrow_mut();
            // SAFETY: `block` needs only AVX2 and FMA, which the caller
            // vouched for; every memory access in it is bounds-checked
            // or checked against its buffers' sizes there.
            unsafe { block(xs, ws, bs, (lo, hi), p, lanes, &mut bufs, dst) }
        });
    };
    // One block of up to 8 channels per task, per batch.
    let units: Vec<(usize, &mut [f32])> = res
        .chunks_mut(c * plane)
        .enumerate()
        .flat_map(|(b, batch)| {
            batch
                .chunks_mut(L * plane)
                .enumerate()
                .map(move |(k, d)| (b * blocks + k, d))
        })
        .collect();
    if units.len() > 1 {
        units.into_par_iter().for_each(run);
    } else {
        units.into_iter().for_each(run);
    }
}

/// One block: `lanes` (<= 8) channels of `x` ([lanes, h, w]) and their
/// filters `ws` ([lanes, kh * kw]) into `dst` ([lanes, oh * ow]).
///
/// # Safety
/// The CPU must have AVX2 and FMA. (Slices are indexed with bounds
/// checks, and the unchecked tap loads are checked against the
/// interleaved input's length first.)
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn block(
    x: &[f32],
    ws: &[f32],
    bias: Option<&[f32]>,
    (lo, hi): (f32, f32),
    p: &Conv2dParams,
    lanes: usize,
    bufs: &mut Bufs,
    dst: &mut [f32],
) {
    let Bufs { inb, outb, taps } = bufs;
    let (h, w, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    let (kh, kw) = (p.kernel_h, p.kernel_w);
    let (sh, sw) = (p.strides[0], p.strides[1]);
    let (dh, dw) = (p.dilations[0], p.dilations[1]);
    let (pt, pl) = (p.padding[0], p.padding[2]);
    // Padded rows and columns the taps reach.
    let (hu, wu) = super::common::reach(p);
    let plane = oh * ow;
    inb.resize(hu * wu * L, 0.0);
    outb.resize(plane * L, 0.0);
    let (inb, outb) = (&mut inb[..hu * wu * L], &mut outb[..plane * L]);
    let zero = _mm256_setzero_ps();
    // The input, interleaved: padding cells zero, the rest from x (lanes
    // beyond `lanes` zero).
    for r in 0..hu {
        let row = &mut inb[r * wu * L..(r + 1) * wu * L];
        let Some(iy) = r.checked_sub(pt).filter(|&iy| iy < h) else {
            row.fill(0.0);
            continue;
        };
        // Columns [pl, hi) of this padded row come from input row iy.
        let hi_col = (pl + w).min(wu);
        row[..pl.min(wu) * L].fill(0.0);
        row[hi_col * L..].fill(0.0);
        let n = hi_col.saturating_sub(pl);
        let mut px = 0;
        while px < n {
            // 8 pixels of each channel's row (fewer at the row's end: a
            // masked load reads only those, the rest of the vector is 0).
            let k_n = L.min(n - px);
            let mask = _mm256_loadu_si256(MASKS[L - k_n..].as_ptr().cast());
            let mut v = [zero; L];
            for (lane, vl) in v.iter_mut().enumerate().take(lanes) {
                let s = &x[lane * h * w + iy * w + px..][..k_n];
                // SAFETY: AVX is enabled here (AVX2); the mask's first
                // k_n lanes are set and the rest clear, so the load reads
                // exactly the k_n floats of `s` (bounds-checked slice) and
                // masked-off lanes never fault.
                *vl = unsafe { _mm256_maskload_ps(s.as_ptr(), mask) };
            }
            let t = transpose(v);
            for (k, tv) in t.iter().enumerate().take(k_n) {
                // SAFETY: the store writes the L floats of a
                // bounds-checked subslice of `row` (cell pl + px + k <
                // hi_col <= wu); unaligned stores take any address.
                unsafe { _mm256_storeu_ps(row[(pl + px + k) * L..][..L].as_mut_ptr(), *tv) };
            }
            px += k_n;
        }
    }
    // Taps: filter vectors and offsets in the interleaved input.
    let khw = kh * kw;
    taps.clear();
    for t in 0..khw {
        let mut wv = [0.0f32; L];
        for (lane, v) in wv.iter_mut().enumerate().take(lanes) {
            *v = ws[lane * khw + t];
        }
        let (ky, kx) = (t / kw, t % kw);
        taps.push((_mm256_loadu_ps(wv.as_ptr()), (ky * dh * wu + kx * dw) * L));
    }
    let mut bv = [-0.0f32; L];
    if let Some(b) = bias {
        bv[..lanes].copy_from_slice(&b[..lanes]);
    }
    let (bv, lov, hiv) = (
        _mm256_loadu_ps(bv.as_ptr()),
        _mm256_set1_ps(lo),
        _mm256_set1_ps(hi),
    );
    let Some(((w0, o0), rest)) = taps.split_first() else {
        return;
    };
    // The farthest tap of the last output pixel ends exactly at the end of
    // the interleaved input (row hu - 1, column wu - 1), so every read
    // below is inside it.
    let last =
        ((oh - 1) * sh * wu + (ow - 1) * sw) * L + taps.iter().map(|t| t.1).max().unwrap_or(0);
    assert!(
        last + L <= inb.len(),
        "depthwise: taps reach past the input"
    );
    let src = inb.as_ptr();
    // SAFETY: every call below passes the base of an output pixel (oy <
    // oh, ox < ow) and a tap's offset, so base + off <= last and the 8
    // floats read end at last + 8 <= inb.len() (asserted above); `inb` is
    // not written while `src` is used; unaligned loads take any address.
    let at = |base: usize, off: usize| unsafe { _mm256_loadu_ps(src.add(base + off)) };
    // As `clamp(v + b, lo, hi)`: max/min return their second operand for
    // NaN and for equal zeros.
    let fin = |acc: __m256| _mm256_min_ps(hiv, _mm256_max_ps(lov, _mm256_add_ps(acc, bv)));
    // Eight output pixels at a time: each pixel's sum is a chain of
    // dependent multiply-adds, and eight chains keep both FMA pipes busy.
    const P: usize = 8;
    for oy in 0..oh {
        let mut ox = 0;
        while ox + P <= ow {
            let base = (oy * sh * wu + ox * sw) * L;
            let step = sw * L;
            let mut acc: [__m256; P] =
                std::array::from_fn(|k| _mm256_mul_ps(*w0, at(base + k * step, *o0)));
            for (wv, off) in rest {
                for (k, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(*wv, at(base + k * step, *off), *a);
                }
            }
            for (k, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(outb[(oy * ow + ox + k) * L..][..L].as_mut_ptr(), fin(*a));
            }
            ox += P;
        }
        for ox in ox..ow {
            let base = (oy * sh * wu + ox * sw) * L;
            let mut acc = _mm256_mul_ps(*w0, at(base, *o0));
            for (wv, off) in rest {
                acc = _mm256_fmadd_ps(*wv, at(base, *off), acc);
            }
            _mm256_storeu_ps(outb[(oy * ow + ox) * L..][..L].as_mut_ptr(), fin(acc));
        }
    }
    // Back to planes: 8 output pixels of the 8 channels at a time.
    let mut j = 0;
    while j + L <= plane {
        let mut v = [zero; L];
        for (k, vk) in v.iter_mut().enumerate() {
            *vk = _mm256_loadu_ps(outb[(j + k) * L..][..L].as_ptr());
        }
        let t = transpose(v);
        for (lane, tv) in t.iter().enumerate().take(lanes) {
            _mm256_storeu_ps(dst[lane * plane + j..][..L].as_mut_ptr(), *tv);
        }
        j += L;
    }
    for q in j..plane {
        for lane in 0..lanes {
            dst[lane * plane + q] = outb[q * L + lane];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::testing::random;
    use crate::graph::ops::conv::FilterLayout;

    /// The 8-channel kernel gives the NCHW kernel's values for channel
    /// counts that are not multiples of 8, planes narrower than 8, strides,
    /// dilations, uneven padding, several filter sizes, batches, with and
    /// without bias and bounds (NaN inputs included).
    #[test]
    fn matches_the_plane_kernel() {
        if !available() {
            return;
        }
        let cases = [
            // c, h, w, kh, kw, stride, dilation, padding [t, b, l, r], batch
            (13, 7, 7, 3, 3, 1, 1, [1, 1, 1, 1], 1),
            (8, 14, 14, 3, 3, 2, 1, [0, 1, 0, 1], 2),
            (17, 5, 9, 3, 3, 1, 2, [2, 2, 2, 2], 1),
            (3, 1, 1, 3, 3, 1, 1, [1, 1, 1, 1], 1),
            (9, 12, 11, 5, 5, 2, 1, [2, 2, 2, 2], 1),
            (24, 6, 20, 1, 3, 1, 1, [0, 0, 1, 1], 1),
            (5, 9, 3, 3, 1, 3, 1, [1, 0, 0, 0], 3),
            (1, 30, 29, 3, 3, 1, 1, [0, 0, 0, 0], 1),
        ];
        for (i, &(c, h, w, kh, kw, s, d, pad, n)) in cases.iter().enumerate() {
            let oh = (h + pad[0] + pad[1] - ((kh - 1) * d + 1)) / s + 1;
            let ow = (w + pad[2] + pad[3] - ((kw - 1) * d + 1)) / s + 1;
            let p = Conv2dParams {
                nhwc: false,
                filter_layout: FilterLayout::Oihw,
                padding: pad,
                strides: [s, s],
                dilations: [d, d],
                groups: c,
                has_bias: true,
                batch: n,
                in_channels: c,
                in_h: h,
                in_w: w,
                out_channels: c,
                kernel_h: kh,
                kernel_w: kw,
                out_h: oh,
                out_w: ow,
            };
            let mut x = random(n * c * h * w, i as u64 + 1);
            x[0] = f32::NAN;
            let f = random(c * kh * kw, i as u64 + 50);
            let b = random(c, i as u64 + 90);
            for (bias, act) in [
                (None, None),
                (Some(&b[..]), Some((-0.25f32, 0.5f32))),
                (Some(&b[..]), None),
            ] {
                let mut want = vec![7.0f32; n * c * oh * ow];
                super::super::depthwise::depthwise_nchw(&x, &f, bias, act, &p, &mut want);
                let mut got = vec![7.0f32; want.len()];
                let bounds = act.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
                // SAFETY: the test returned at its start unless
                // `available()` found AVX2 and FMA.
                unsafe { depthwise8(&x, &f, bias, bounds, &p, &mut got) };
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(g, w)| g == w || (g.is_nan() && w.is_nan()));
                assert!(same, "case {i} bias {} act {act:?}", bias.is_some());
            }
        }
    }
}

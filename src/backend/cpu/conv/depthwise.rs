//! The NCHW depthwise path of conv2d (one input and one output channel
//! per group): plane by plane, each input plane copied once with its
//! padding and split by column phase so that every tap reads a contiguous
//! run of the output width. (The 8-channel kernel for narrow planes is
//! `depthwise8.rs`; the planner picks between them.)

use rayon::prelude::*;

use crate::backend::cpu::sgemm::clamp;
use crate::graph::ops::conv::Conv2dParams;

use super::common::{pad_split, reach};

/// `a * b + c`, fused when `FMA` (only instantiated where the CPU has it).
#[inline(always)]
fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// The output rows of one depthwise plane from its padded, phase-split
/// input `s` (see [`depthwise_plane`]): `s[(q * hu + r) * wq + t]` is
/// padded row `r`, padded column `q + t * sw`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn depthwise_rows<const FMA: bool>(
    s: &[f32],
    (hu, wq): (usize, usize),
    wts: &[f32],
    p: &Conv2dParams,
    bias: Option<f32>,
    act: Option<(f32, f32)>,
    grid: &mut Vec<f32>,
    dst: &mut [f32],
) {
    let (kh, kw, oh, ow) = (p.kernel_h, p.kernel_w, p.out_h, p.out_w);
    let (sh, sw) = (p.strides[0], p.strides[1]);
    let (dh, dw) = (p.dilations[0], p.dilations[1]);
    // Bias and bounds are applied in the loops that store the sums, with
    // identities standing in for absent ones so that the loops have no
    // branches: -0 (x + -0 is x, -0 included) and infinite bounds (the
    // comparisons of `clamp` then pass every value, NaN included).
    let b = bias.unwrap_or(-0.0);
    let (lo, hi) = act.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
    let fin = |v: f32| clamp(v + b, lo, hi);
    if sh == 1 && sw == 1 && ow < 32 && oh > 1 {
        // Narrow rows are mostly a vector loop's scalar remainder. With
        // unit strides, tap (ky, kx) of output (oy, x) sits at a fixed
        // offset from oy * wq + x in the padded plane, so the whole plane
        // is one long loop over a grid as wide as the padded rows (its
        // extra columns are computed and dropped). Each element sums its
        // taps in the same order as the row loop below, so the bits agree.
        let n = (oh - 1) * wq + ow;
        grid.clear();
        grid.resize(n, 0.0);
        let at = |ky: usize, kx: usize| {
            let off = ky * dh * wq + kx * dw;
            &s[off..off + n]
        };
        let mut first = kh == 3 && kw == 3;
        if first {
            for (g, &x) in grid.iter_mut().zip(at(0, 0)) {
                *g = wts[0] * x;
            }
        }
        for ky in 0..kh {
            for kx in 0..kw {
                if std::mem::take(&mut first) {
                    continue;
                }
                let wv = wts[ky * kw + kx];
                for (g, &x) in grid.iter_mut().zip(at(ky, kx)) {
                    *g = madd::<FMA>(wv, x, *g);
                }
            }
        }
        for (oy, d) in dst.chunks_exact_mut(ow).enumerate() {
            for (y, &g) in d.iter_mut().zip(&grid[oy * wq..oy * wq + ow]) {
                *y = fin(g);
            }
        }
        return;
    }
    let tap = |r: usize, kx: usize| {
        let (q, off) = ((kx * dw) % sw, (kx * dw) / sw);
        let start = (q * hu + r) * wq + off;
        &s[start..start + ow]
    };
    for (oy, d) in dst.chunks_exact_mut(ow).enumerate() {
        let r0 = oy * sh;
        if kh == 3 && kw == 3 {
            let w: [f32; 9] = std::array::from_fn(|i| wts[i]);
            let (a0, a1, a2) = (tap(r0, 0), tap(r0, 1), tap(r0, 2));
            let (b0, b1, b2) = (tap(r0 + dh, 0), tap(r0 + dh, 1), tap(r0 + dh, 2));
            let (c0, c1, c2) = (
                tap(r0 + 2 * dh, 0),
                tap(r0 + 2 * dh, 1),
                tap(r0 + 2 * dh, 2),
            );
            for i in 0..ow {
                let mut v = w[0] * a0[i];
                v = madd::<FMA>(w[1], a1[i], v);
                v = madd::<FMA>(w[2], a2[i], v);
                v = madd::<FMA>(w[3], b0[i], v);
                v = madd::<FMA>(w[4], b1[i], v);
                v = madd::<FMA>(w[5], b2[i], v);
                v = madd::<FMA>(w[6], c0[i], v);
                v = madd::<FMA>(w[7], c1[i], v);
                v = madd::<FMA>(w[8], c2[i], v);
                d[i] = fin(v);
            }
        } else {
            d.fill(0.0);
            for ky in 0..kh {
                for kx in 0..kw {
                    let wv = wts[ky * kw + kx];
                    let src = tap(r0 + ky * dh, kx);
                    for (y, &x) in d.iter_mut().zip(src) {
                        *y = madd::<FMA>(wv, x, *y);
                    }
                }
            }
            d.iter_mut().for_each(|y| *y = fin(*y));
        }
    }
}

/// One plane of a depthwise convolution, directly: the input plane `x`
/// ([h, w]) is copied once into `scratch` with its padding and split by
/// column phase (stride), so that every tap reads a contiguous run of the
/// output width, which vectorises.
#[inline(always)]
fn depthwise_plane<const FMA: bool>(
    x: &[f32],
    wts: &[f32],
    p: &Conv2dParams,
    bias: Option<f32>,
    act: Option<(f32, f32)>,
    (scratch, grid): (&mut Vec<f32>, &mut Vec<f32>),
    dst: &mut [f32],
) {
    let (h, w) = (p.in_h, p.in_w);
    let sw = p.strides[1];
    let (pt, pl) = (p.padding[0], p.padding[2]);
    // Padded rows and columns the taps reach.
    let (hu, wu) = reach(p);
    let wq = wu.div_ceil(sw);
    // Only the padding needs zeros, and every plane of one convolution
    // writes the same cells (the geometry fixes them) and leaves the
    // padding alone: zero the scratch once, when it is first sized.
    if scratch.len() != sw * hu * wq {
        scratch.clear();
        scratch.resize(sw * hu * wq, 0.0);
    }
    pad_split(x, (h, w), (pt, pl), (hu, wu, sw), scratch);
    depthwise_rows::<FMA>(scratch, (hu, wq), wts, p, bias, act, grid, dst);
}

/// [`depthwise_plane`] compiled for AVX2 and FMA (the copies into the
/// scratch plane vectorise too).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn depthwise_plane_fma(
    x: &[f32],
    wts: &[f32],
    p: &Conv2dParams,
    bias: Option<f32>,
    act: Option<(f32, f32)>,
    bufs: (&mut Vec<f32>, &mut Vec<f32>),
    dst: &mut [f32],
) {
    depthwise_plane::<true>(x, wts, p, bias, act, bufs, dst)
}

/// [`depthwise_plane`] with the best code this CPU runs.
fn depthwise_plane_best(
    x: &[f32],
    wts: &[f32],
    p: &Conv2dParams,
    bias: Option<f32>,
    act: Option<(f32, f32)>,
    bufs: (&mut Vec<f32>, &mut Vec<f32>),
    dst: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: AVX2 and FMA, all `depthwise_plane_fma` needs (its
        // slices are bounds-checked), were detected on the line above.
        unsafe { depthwise_plane_fma(x, wts, p, bias, act, bufs, dst) };
        return;
    }
    #[cfg(target_arch = "aarch64")]
    depthwise_plane::<true>(x, wts, p, bias, act, bufs, dst);
    #[cfg(not(target_arch = "aarch64"))]
    depthwise_plane::<false>(x, wts, p, bias, act, bufs, dst);
}

/// [`depthwise`](fn@super::depthwise) plane by plane in NCHW (CPUs
/// without AVX2 and FMA, and the reference for the 8-channel kernel's
/// tests).
pub(super) fn depthwise_nchw(
    x: &[f32],
    f: &[f32],
    bias: Option<&[f32]>,
    act: Option<(f32, f32)>,
    p: &Conv2dParams,
    res: &mut [f32],
) {
    let (c, khw) = (p.in_channels, p.kernel_h * p.kernel_w);
    let (in_plane, plane) = (p.in_h * p.in_w, p.out_h * p.out_w);
    // Planes per task: about 64k multiply-adds each.
    let per = ((1usize << 16) / (plane * khw + in_plane).max(1)).max(1);
    let run = |(t, dst): (usize, &mut [f32])| {
        let (mut scratch, mut grid) = (Vec::new(), Vec::new());
        for (i, d) in dst.chunks_exact_mut(plane).enumerate() {
            let idx = t * per + i;
            let ch = idx % c;
            depthwise_plane_best(
                &x[idx * in_plane..(idx + 1) * in_plane],
                &f[ch * khw..(ch + 1) * khw],
                p,
                bias.map(|b| b[ch]),
                act,
                (&mut scratch, &mut grid),
                d,
            );
        }
    };
    if res.len() > per * plane {
        res.par_chunks_mut(per * plane).enumerate().for_each(run);
    } else {
        res.chunks_mut(per * plane).enumerate().for_each(run);
    }
}

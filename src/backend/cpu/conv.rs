//! Convolution and pooling CPU kernels.
//!
//! Both canonicalise to NCHW input (and OIHW filter) in f32, compute there,
//! and convert the result back to the requested layout and type. conv2d
//! runs each (batch, group) as a product on `sgemm/`, whose B panels are
//! made straight from the padded input (no im2col matrix); depthwise
//! convolutions have a direct kernel.

use std::collections::HashMap;
use std::sync::Arc;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::op::{Conv2dParams, FilterLayout, Pool2dParams, PoolKind, UnaryKind};
use crate::graph::ops::conv::{ConvTranspose2dParams, TransposeFilterLayout};
use crate::graph::{Graph, Op, Source};
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

use super::matmul::sgemm;
use super::sgemm::{
    clamp, copy_panel_row, copy_row, sgemm_gen, sgemm_gen_packed_a, sgemm_packed_a,
    sgemm_rows_packed_a, Fuse, PackedA, RowsB,
};
use super::shape::transpose_vec;
use super::util::{floats, from_floats};

/// Multiply-adds per (batch, group) unit below which units run in parallel
/// with serial sgemms, rather than one after another with parallel sgemms.
const UNIT_PAR_WORK: usize = 1 << 22;

/// NHWC -> NCHW.
const TO_NCHW: [usize; 4] = [0, 3, 1, 2];
/// NCHW -> NHWC.
const TO_NHWC: [usize; 4] = [0, 2, 3, 1];

/// Input coordinate of output position `o` and kernel tap `k`, or `None`
/// in the padding.
#[inline(always)]
fn src_index(
    o: usize,
    k: usize,
    stride: usize,
    dilation: usize,
    pad: usize,
    size: usize,
) -> Option<usize> {
    (o * stride + k * dilation)
        .checked_sub(pad)
        .filter(|&i| i < size)
}

/// The filter in OIHW order, whatever its layout (borrowed when it is).
pub(super) fn filter_oihw<'a>(f: &'a [f32], p: &Conv2dParams) -> std::borrow::Cow<'a, [f32]> {
    let (o, i, h, w) = (
        p.out_channels,
        p.in_channels / p.groups,
        p.kernel_h,
        p.kernel_w,
    );
    std::borrow::Cow::Owned(match p.filter_layout {
        FilterLayout::Oihw => return std::borrow::Cow::Borrowed(f),
        FilterLayout::Hwio => transpose_vec(f, &[h, w, i, o], &[3, 2, 0, 1]),
        FilterLayout::Ohwi => transpose_vec(f, &[o, h, w, i], &[0, 3, 1, 2]),
        FilterLayout::Ihwo => transpose_vec(f, &[i, h, w, o], &[3, 0, 1, 2]),
    })
}

/// The epilogue of every conv2d path: adds the bias (when there is one)
/// and applies the fused activation bounds (when there are some).
#[inline(always)]
fn finish(dst: &mut [f32], bias: Option<f32>, act: Option<(f32, f32)>) {
    match (bias, act) {
        (None, None) => {}
        (Some(b), None) => dst.iter_mut().for_each(|y| *y += b),
        (None, Some((lo, hi))) => dst.iter_mut().for_each(|y| *y = clamp(*y, lo, hi)),
        (Some(b), Some((lo, hi))) => dst.iter_mut().for_each(|y| *y = clamp(*y + b, lo, hi)),
    }
}

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
fn pad_split(
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

/// Depthwise conv2d (one input and one output channel per group) on NCHW
/// `x` with OIHW filter `f`: planes in parallel.
fn depthwise(
    x: &[f32],
    f: &[f32],
    bias: Option<&[f32]>,
    act: Option<(f32, f32)>,
    p: &Conv2dParams,
    res: &mut [f32],
) {
    // Narrow planes (the late layers of a network) on 8 channels at once;
    // wide ones plane by plane, which keeps a plane in cache (measured
    // per layer with WEBNN_CPU_PROFILE: the 8-channel kernel is 1.2-2.3x
    // faster below 32 columns, slower on 56 and 112).
    #[cfg(target_arch = "x86_64")]
    if p.out_w < 32 && super::depthwise::available() {
        let bounds = act.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
        // SAFETY: `available()` on the line above found AVX2 and FMA,
        // the whole of `depthwise8`'s contract.
        unsafe { super::depthwise::depthwise8(x, f, bias, bounds, p, res) };
        return;
    }
    depthwise_nchw(x, f, bias, act, p, res)
}

/// [`depthwise`] plane by plane in NCHW (CPUs without AVX2 and FMA, and
/// the reference for the 8-channel kernel's tests).
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

/// One (batch, group) unit of a convolution, as a product whose B panels
/// are made straight from the input, never as an im2col matrix: the input
/// channels are copied once with their padding and split by column phase
/// ([`pad_split`]), after which the patch row of tap (c, ky, kx) for output
/// row `oy` is a contiguous run of phase `(kx * dw) % sw` of channel c,
/// `ow` long, at row `oy * sh + ky * dh`, column `(kx * dw) / sw` on. A
/// panel of `nr` output columns is a few such runs (one per output row it
/// touches). The product writes the output directly, with bias and bounds
/// fused.
#[allow(clippy::too_many_arguments)]
fn conv_gen(
    xs: &[f32],
    wg: &[f32],
    cg: usize,
    og: usize,
    p: &Conv2dParams,
    fuse: &Fuse,
    dst: &mut [f32],
    parallel: bool,
    packed: Option<&PackedA>,
) -> Result<()> {
    let (h, w, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    let (kh, kw) = (p.kernel_h, p.kernel_w);
    let (sh, sw) = (p.strides[0], p.strides[1]);
    let (dh, dw) = (p.dilations[0], p.dilations[1]);
    let (pt, pl) = (p.padding[0], p.padding[2]);
    let (hu, wu) = reach(p);
    let wq = wu.div_ceil(sw);
    let chan = sw * hu * wq;
    // Only the cells the input covers are written: the rest is padding.
    let mut xp_buf = Buf::f32_for_overwrite(cg * chan);
    xp_buf.fill(0.0);
    for (c, d) in xp_buf.chunks_exact_mut(chan).enumerate() {
        pad_split(
            &xs[c * h * w..(c + 1) * h * w],
            (h, w),
            (pt, pl),
            (hu, wu, sw),
            d,
        );
    }
    let n = oh * ow;
    let khw = kh * kw;
    // Offset of tap (ky, kx) in a channel's phase-split block.
    let taps: Vec<usize> = (0..khw)
        .map(|t| {
            let (ky, kx) = (t / kw, t % kw);
            ((kx * dw) % sw) * hu * wq + ky * dh * wq + (kx * dw) / sw
        })
        .collect();
    let xp: &[f32] = &xp_buf;
    let gen = move |p0: usize, kc: usize, j0: usize, cols: usize, nr: usize, dst: &mut [f32]| {
        for (q, panel) in dst.chunks_exact_mut(kc * nr).enumerate() {
            // The runs of this panel's columns: (first column in the panel,
            // offset of its output row and column in a phase plane, length).
            let j = j0 + q * nr;
            let end = (j + nr).min(j0 + cols).min(n);
            let mut runs = [(0usize, 0usize, 0usize); 33];
            let mut count = 0;
            let mut at = j;
            while at < end && count < runs.len() {
                let (oy, ox) = (at / ow, at % ow);
                let len = (end - at).min(ow - ox);
                runs[count] = (at - j, oy * sh * wq + ox, len);
                count += 1;
                at += len;
            }
            let runs = &runs[..count];
            let whole = matches!(runs, [(0, _, len)] if *len == nr);
            let (mut cbase, mut t) = ((p0 / khw) * chan, p0 % khw);
            for row in panel.chunks_exact_mut(nr) {
                let base = cbase + taps[t];
                if whole {
                    let s = base + runs[0].1;
                    copy_panel_row(row, &xp[s..s + nr]);
                } else {
                    // Short runs: element loops, not a memmove call each.
                    for &(d, off, len) in runs {
                        let s = base + off;
                        copy_row(&mut row[d..d + len], &xp[s..s + len]);
                    }
                    if let Some(&(d, _, len)) = runs.last() {
                        row[d + len..].fill(0.0);
                    } else {
                        row.fill(0.0);
                    }
                }
                t += 1;
                if t == khw {
                    t = 0;
                    cbase += chan;
                }
            }
        }
    };
    match packed {
        Some(pa) => sgemm_gen_packed_a(pa, n, &gen, dst, parallel, fuse)?,
        None => sgemm_gen(og, n, cg * khw, wg, false, &gen, dst, parallel, fuse)?,
    }
    Buf::F32(xp_buf).recycle();
    Ok(())
}

/// One (batch, group) unit of a conv2d with unit strides and a packed
/// filter, as a product whose B is read in place ([`RowsB`]): no patch
/// matrix and no packing. The input is padded once (`wp` =
/// padded width, the columns the taps reach) and the product runs over
/// the padded width: column `oy * wp + ox` of B's row (c, ky, kx) is
/// padded element (oy + ky*dh, ox + kx*dw) of plane c, a plain shift. Of
/// each output row the first `ow` columns are the output; the other
/// `wp - ow` mix neighbouring rows and are dropped when the rows are
/// copied out (skipped where `wp == ow`).
#[allow(clippy::too_many_arguments)]
fn conv_rows(
    xs: &[f32],
    cg: usize,
    og: usize,
    p: &Conv2dParams,
    fuse: &Fuse,
    dst: &mut [f32],
    parallel: bool,
    pa: &PackedA,
) -> Result<()> {
    let (h, w, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    let (kh, kw) = (p.kernel_h, p.kernel_w);
    let (dh, dw) = (p.dilations[0], p.dilations[1]);
    let (pt, pl) = (p.padding[0], p.padding[2]);
    let (hu, wp) = reach(p);
    let chan = hu * wp;
    // The last tap row runs (kw - 1) * dw past the last plane. Padding
    // and copy-out are a pass over the input and the output each: split
    // by plane across the pool like the product (serial, they held the
    // second thread back for a tenth of a 3x3 conv).
    let mut xp = Buf::f32_for_overwrite(cg * chan + (kw - 1) * dw);
    let pad = |(c, d): (usize, &mut [f32])| {
        d.fill(0.0);
        if c < cg {
            pad_split(
                &xs[c * h * w..(c + 1) * h * w],
                (h, w),
                (pt, pl),
                (hu, wp, 1),
                d,
            );
        }
    };
    if parallel {
        xp.par_chunks_mut(chan).enumerate().for_each(pad);
    } else {
        xp.chunks_mut(chan).enumerate().for_each(pad);
    }
    let offs: Vec<usize> = (0..cg * kh * kw)
        .map(|k| {
            let (c, t) = (k / (kh * kw), k % (kh * kw));
            c * chan + (t / kw) * dh * wp + (t % kw) * dw
        })
        .collect();
    let nq = oh * wp;
    let b = RowsB::new(&xp, &offs, nq)?;
    if wp == ow {
        sgemm_rows_packed_a(pa, b, dst, parallel, fuse)?;
    } else {
        let mut wide = Buf::f32_for_overwrite(og * nq);
        sgemm_rows_packed_a(pa, b, &mut wide, parallel, fuse)?;
        let copy_out = |(d, s): (&mut [f32], &[f32])| {
            for (d, s) in d.chunks_exact_mut(ow).zip(s.chunks_exact(wp)) {
                d.copy_from_slice(&s[..ow]);
            }
        };
        if parallel {
            dst.par_chunks_exact_mut(oh * ow)
                .zip(wide.par_chunks_exact(nq))
                .for_each(copy_out);
        } else {
            dst.chunks_exact_mut(oh * ow)
                .zip(wide.chunks_exact(nq))
                .for_each(copy_out);
        }
        Buf::F32(wide).recycle();
    }
    Buf::F32(xp).recycle();
    Ok(())
}

/// `conv2d` with nchw/nhwc input, any filter layout, padding, strides,
/// dilations, groups (depthwise included) and an optional bias
/// (`inputs[2]`).
///
/// A further input after those (never made by validation; attached by
/// `compile()` when it fuses a following clamp or relu) is a float32
/// `[min, max]`: each output is then clamped as the clamp operator would,
/// after the bias.
pub fn conv2d(p: &Conv2dParams, inputs: &[&Buf], out: &OperandDescriptor) -> Result<Buf> {
    conv2d_packed(p, inputs, out, None)
}

/// The float32 filter of a conv2d that runs as products (not depthwise),
/// packed once per group as the products' left-hand side; `None` for a
/// depthwise conv2d or a filter that is not float32.
pub(super) fn pack_filter(p: &Conv2dParams, filter: &Buf) -> Result<Option<Vec<PackedA>>> {
    let g = p.groups;
    if g == 0 || !p.in_channels.is_multiple_of(g) || !p.out_channels.is_multiple_of(g) {
        return Ok(None);
    }
    let (cg, og) = (p.in_channels / g, p.out_channels / g);
    let kk = cg * p.kernel_h * p.kernel_w;
    let Buf::F32(f) = filter else { return Ok(None) };
    if (cg == 1 && og == 1) || f.len() != p.out_channels * kk || og * kk == 0 {
        return Ok(None);
    }
    let f = filter_oihw(f, p);
    (0..g)
        .map(|gi| PackedA::new(&f[gi * og * kk..(gi + 1) * og * kk], og, kk))
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// [`conv2d`], with the filter packed in advance by [`pack_filter`] when
/// `packed` is given (the filter operand is then only checked, not read).
pub(super) fn conv2d_packed(
    p: &Conv2dParams,
    inputs: &[&Buf],
    out: &OperandDescriptor,
    packed: Option<&[PackedA]>,
) -> Result<Buf> {
    let g = p.groups;
    if g == 0
        || !p.in_channels.is_multiple_of(g)
        || !p.out_channels.is_multiple_of(g)
        || p.strides.contains(&0)
        || p.dilations.contains(&0)
    {
        return Err(Error::operation("conv2d: invalid groups or strides"));
    }
    let (n, c, h, w) = (p.batch, p.in_channels, p.in_h, p.in_w);
    let (oc, oh, ow) = (p.out_channels, p.out_h, p.out_w);
    let (cg, og) = (c / g, oc / g);
    let kk = cg * p.kernel_h * p.kernel_w;
    let x = floats(
        inputs
            .first()
            .ok_or_else(|| Error::operation("conv2d: no input"))?,
    )?;
    let f = floats(
        inputs
            .get(1)
            .ok_or_else(|| Error::operation("conv2d: no filter"))?,
    )?;
    let bias = if p.has_bias {
        let b = floats(
            inputs
                .get(2)
                .ok_or_else(|| Error::operation("conv2d: no bias"))?,
        )?;
        Some(b)
    } else {
        None
    };
    let act = match inputs.get(2 + usize::from(p.has_bias)) {
        None => None,
        Some(b) => match &*floats(b)? {
            &[lo, hi] => Some((lo, hi)),
            _ => return Err(Error::operation("conv2d: bad activation bounds")),
        },
    };
    let ok = x.len() == n * c * h * w
        && f.len() == oc * kk
        && bias.as_ref().is_none_or(|b| b.len() == oc)
        && out.element_count() == n * oc * oh * ow;
    // Every read must land inside the padded input.
    let reach = |o: usize, k: usize, s: usize, d: usize| {
        (o.saturating_sub(1)) * s + (k.saturating_sub(1)) * d
    };
    let fits = oh == 0
        || ow == 0
        || (p.kernel_h > 0
            && p.kernel_w > 0
            && reach(oh, p.kernel_h, p.strides[0], p.dilations[0])
                < h + p.padding[0] + p.padding[1]
            && reach(ow, p.kernel_w, p.strides[1], p.dilations[1])
                < w + p.padding[2] + p.padding[3]);
    if !ok || !fits {
        return Err(Error::operation(
            "conv2d: the operands do not match the parameters",
        ));
    }
    let x = if p.nhwc {
        std::borrow::Cow::Owned(transpose_vec(&x, &[n, h, w, c], &TO_NCHW))
    } else {
        x
    };
    let f = filter_oihw(&f, p);
    let bias = bias.as_deref();
    let plane = oh * ow;
    let unit = og * plane;
    // Every path below writes every element.
    let mut res = Buf::f32_for_overwrite(n * oc * plane);
    if unit > 0 && cg == 1 && og == 1 {
        depthwise(&x, &f, bias, act, p, &mut res);
    } else if unit > 0 {
        // A 1x1 kernel with unit strides and no padding reads the input
        // as is.
        let direct =
            p.kernel_h == 1 && p.kernel_w == 1 && p.strides == [1, 1] && p.padding == [0; 4];
        let units = n * g;
        let run = |(t, dst): (usize, &mut [f32]), parallel: bool| -> Result<()> {
            let (b, gi) = (t / g, t % g);
            let xs = &x[(b * c + gi * cg) * h * w..(b * c + (gi + 1) * cg) * h * w];
            let wg = &f[gi * og * kk..(gi + 1) * og * kk];
            let bg = bias.map(|bv| &bv[gi * og..(gi + 1) * og]);
            let pa = packed
                .and_then(|v| v.get(gi))
                .filter(|a| a.m() == og && a.k() == kk);
            // Bias and activation are applied to each tile of the product
            // as it is finished (row o of the product is output channel o).
            let fuse = Fuse {
                row_bias: bg,
                col_bias: None,
                bounds: act,
            };
            // Unit strides with a kernel wider than 1x1: B read in place.
            // (A 1x1 kernel reads planes as they are, but there packing
            // wins: each of its K rows is a separate page-strided stream.)
            if let (Some(pa), [1, 1], false) = (pa, p.strides, direct) {
                return conv_rows(xs, cg, og, p, &fuse, dst, parallel, pa);
            }
            if !direct {
                return conv_gen(xs, wg, cg, og, p, &fuse, dst, parallel, pa);
            }
            match pa {
                Some(pa) => sgemm_packed_a(pa, plane, xs, dst, parallel, &fuse),
                None => {
                    sgemm(og, plane, kk, wg, xs, dst, parallel);
                    for (o, d) in dst.chunks_exact_mut(plane).enumerate() {
                        finish(d, bg.map(|bv| bv[o]), act);
                    }
                    Ok(())
                }
            }
        };
        if units > 1 && og * plane * kk < UNIT_PAR_WORK {
            res.par_chunks_mut(unit)
                .enumerate()
                .try_for_each(|u| run(u, false))?;
        } else {
            res.chunks_mut(unit)
                .enumerate()
                .try_for_each(|u| run(u, true))?;
        }
    }
    let res = if p.nhwc {
        transpose_vec(&res, &[n, oc, oh, ow], &TO_NHWC)
    } else {
        res
    };
    from_floats(out.data_type, res)
}

/// Fuses each float32 conv2d whose only reader is a clamp or relu (and
/// that is no graph output) with that activation: the conv2d node gets
/// the activation's output and a trailing constant input `[min, max]`
/// (see [`conv2d`]), and the activation node goes. Returns the rewritten
/// graph (`None`: nothing to fuse); new constants go into `constants`.
/// Results are bitwise those of the unfused graph: the conv computes the
/// same values and clamps them as the clamp and relu kernels do (relu is
/// clamp to [0, +inf], NaN and -0 included).
pub(super) fn fuse_activations(
    graph: &Graph,
    constants: &mut HashMap<usize, Buf>,
) -> Option<Graph> {
    let (readers, reader) = super::readers(graph);
    // conv node -> (activation node, bounds).
    let mut fuse: Vec<(usize, usize, f32, f32)> = Vec::new();
    for (ni, node) in graph.nodes.iter().enumerate() {
        let Op::Conv2d(p) = &node.op else { continue };
        let [o] = node.outputs[..] else { continue };
        if readers[o] != 1
            || graph.operands[o].data_type != DataType::Float32
            || node.inputs.len() != 2 + usize::from(p.has_bias)
        {
            continue;
        }
        let a = reader[o];
        let act = &graph.nodes[a];
        let (lo, hi) = match act.op {
            Op::Clamp { min, max } => (min as f32, max as f32),
            Op::Unary(UnaryKind::Relu) => (0.0, f32::INFINITY),
            _ => continue,
        };
        if act.inputs[..] != [o] || act.outputs.len() != 1 {
            continue;
        }
        fuse.push((ni, a, lo, hi));
    }
    if fuse.is_empty() {
        return None;
    }
    let mut g = graph.clone();
    let mut merges = Vec::with_capacity(fuse.len());
    for &(ni, a, lo, hi) in &fuse {
        let id = g.operands.len();
        let bounds = [lo, hi];
        g.operands.push(OperandDescriptor {
            data_type: DataType::Float32,
            shape: vec![2],
        });
        g.sources.push(Source::Constant(Arc::new(
            bounds.iter().flat_map(|v| v.to_le_bytes()).collect(),
        )));
        constants.insert(id, Buf::F32(bounds.to_vec()));
        merges.push((ni, a, id));
    }
    Some(super::absorb(&g, &merges))
}

/// Reduces one output position's window over one input plane.
fn pool_window(x: &[f32], p: &Pool2dParams, y: usize, xo: usize) -> f32 {
    let (mut acc, mut count) = (pool_identity(p.kind), 0usize);
    for ky in 0..p.window[0] {
        let Some(iy) = src_index(y, ky, p.strides[0], p.dilations[0], p.padding[0], p.in_h) else {
            continue;
        };
        for kx in 0..p.window[1] {
            let Some(ix) = src_index(xo, kx, p.strides[1], p.dilations[1], p.padding[2], p.in_w)
            else {
                continue;
            };
            acc = pool_step(p.kind, acc, x[iy * p.in_w + ix]);
            count += 1;
        }
    }
    pool_finish(p.kind, acc, count)
}

/// Where a window's reduction starts.
pub(super) fn pool_identity(kind: PoolKind) -> f32 {
    match kind {
        PoolKind::Max => f32::NEG_INFINITY,
        _ => 0.0,
    }
}

/// One element into a window's reduction.
#[inline(always)]
pub(super) fn pool_step(kind: PoolKind, acc: f32, v: f32) -> f32 {
    match kind {
        // NaN propagates: once acc is NaN, nothing replaces it.
        PoolKind::Max => {
            if (v > acc || v.is_nan()) && !acc.is_nan() {
                v
            } else {
                acc
            }
        }
        PoolKind::Average => acc + v,
        PoolKind::L2 => acc + v * v,
    }
}

/// A window's result from its reduction over `count` input elements.
pub(super) fn pool_finish(kind: PoolKind, acc: f32, count: usize) -> f32 {
    // Padding is not part of any reduction: the average divides by the
    // number of input elements in the window. A window wholly in the
    // padding (possible with ceil rounding or large padding) reduces
    // nothing: 0 for average and l2, -inf (the identity of max) for max.
    match kind {
        PoolKind::Max => acc,
        PoolKind::Average if count > 0 => acc / count as f32,
        PoolKind::Average => 0.0,
        PoolKind::L2 => acc.sqrt(),
    }
}

/// maxPool2d of an integer tensor, in its own type (the spec allows any
/// data type for maxPool2d). A window wholly in the padding reduces
/// nothing and gives the type's minimum, as the float kernel gives -inf.
fn max_pool_ints<T: Copy + PartialOrd + Send + Sync>(
    x: &[T],
    p: &Pool2dParams,
    min: T,
) -> Result<Vec<T>> {
    let (n, c, h, w) = (p.batch, p.channels, p.in_h, p.in_w);
    let (oh, ow) = (p.out_h, p.out_w);
    if x.len() != n * c * h * w || p.strides.contains(&0) {
        return Err(Error::operation(
            "maxPool2d: the operands do not match the parameters",
        ));
    }
    // Element (b, ch, y, x) of either layout.
    let at = |b: usize, ch: usize, y: usize, xx: usize| {
        if p.nhwc {
            ((b * h + y) * w + xx) * c + ch
        } else {
            ((b * c + ch) * h + y) * w + xx
        }
    };
    let mut out = vec![min; n * c * oh * ow];
    out.par_iter_mut().enumerate().for_each(|(i, dst)| {
        // `i` walks the output in its own layout.
        let (b, ch, oy, ox) = if p.nhwc {
            (i / (oh * ow * c), i % c, (i / (ow * c)) % oh, (i / c) % ow)
        } else {
            (
                i / (c * oh * ow),
                (i / (oh * ow)) % c,
                (i / ow) % oh,
                i % ow,
            )
        };
        let mut acc = min;
        for ky in 0..p.window[0] {
            let Some(iy) = src_index(oy, ky, p.strides[0], p.dilations[0], p.padding[0], h) else {
                continue;
            };
            for kx in 0..p.window[1] {
                let Some(ix) = src_index(ox, kx, p.strides[1], p.dilations[1], p.padding[2], w)
                else {
                    continue;
                };
                let v = x[at(b, ch, iy, ix)];
                if v > acc {
                    acc = v;
                }
            }
        }
        *dst = acc;
    });
    Ok(out)
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

pub fn pool2d(p: &Pool2dParams, x: &Buf, out: &OperandDescriptor) -> Result<Buf> {
    let (n, c, h, w) = (p.batch, p.channels, p.in_h, p.in_w);
    let (oh, ow) = (p.out_h, p.out_w);
    if p.kind == PoolKind::Max {
        let ints = match x {
            Buf::I32(v) => Some(Buf::I32(max_pool_ints(v, p, i32::MIN)?)),
            Buf::U32(v) => Some(Buf::U32(max_pool_ints(v, p, u32::MIN)?)),
            Buf::I64(v) => Some(Buf::I64(max_pool_ints(v, p, i64::MIN)?)),
            Buf::U64(v) => Some(Buf::U64(max_pool_ints(v, p, u64::MIN)?)),
            // int4/uint4 are held unpacked in these too; their minimums
            // are in range of the wider type, and a window is never empty
            // unless wholly in the padding.
            Buf::I8(v) => Some(Buf::I8(max_pool_ints(v, p, int_min8(out.data_type))?)),
            Buf::U8(v) => Some(Buf::U8(max_pool_ints(v, p, 0)?)),
            Buf::F32(_) | Buf::F16(_) => None,
        };
        if let Some(b) = ints {
            return Ok(b);
        }
    }
    let xv = floats(x)?;
    if xv.len() != n * c * h * w || out.element_count() != n * c * oh * ow || p.strides.contains(&0)
    {
        return Err(Error::operation(
            "pool2d: the operands do not match the parameters",
        ));
    }
    let xv = if p.nhwc {
        std::borrow::Cow::Owned(transpose_vec(&xv, &[n, h, w, c], &TO_NCHW))
    } else {
        xv
    };
    let (in_plane, plane) = (h * w, oh * ow);
    let mut res = vec![0.0f32; n * c * plane];
    // Global pooling (one window over each whole plane, as at the end of
    // most image classifiers): each plane reduced front to back (the
    // window's own order, so the same bits), many planes per task rather
    // than a task and two index computations per element.
    if is_global_pool(p) {
        let per = (1usize << 14).div_ceil(in_plane).max(1);
        let run = |(i, dst): (usize, &mut [f32])| {
            let src = &xv[i * per * in_plane..];
            for (d, x) in dst.iter_mut().zip(src.chunks_exact(in_plane)) {
                let acc = x
                    .iter()
                    .fold(pool_identity(p.kind), |a, &v| pool_step(p.kind, a, v));
                *d = pool_finish(p.kind, acc, in_plane);
            }
        };
        res.par_chunks_mut(per).enumerate().for_each(run);
    } else if plane > 0 {
        let run = |(i, dst): (usize, &mut [f32])| {
            let src = &xv[i * in_plane..(i + 1) * in_plane];
            for (t, d) in dst.iter_mut().enumerate() {
                *d = pool_window(src, p, t / ow, t % ow);
            }
        };
        if res.len() * p.window[0] * p.window[1] >= 1 << 16 {
            res.par_chunks_mut(plane).enumerate().for_each(run);
        } else {
            res.chunks_mut(plane).enumerate().for_each(run);
        }
    }
    let res = if p.nhwc {
        transpose_vec(&res, &[n, c, oh, ow], &TO_NHWC)
    } else {
        res
    };
    from_floats(out.data_type, res)
}

/// The smallest value of int8 or int4 (both held as i8).
fn int_min8(dt: DataType) -> i8 {
    if dt == DataType::Int4 {
        -8
    } else {
        i8::MIN
    }
}

/// The convTranspose2d filter as [groups][og * kh * kw][cg] (each group's
/// block transposed for the sgemm), whatever its layout.
fn transpose_filter_groups(f: &[f32], p: &ConvTranspose2dParams) -> Vec<f32> {
    let g = p.groups;
    let (c, og, kh, kw) = (p.in_channels, p.out_channels / g, p.kernel_h, p.kernel_w);
    // Canonical IOHW: [c, og, kh, kw].
    let iohw = match p.filter_layout {
        TransposeFilterLayout::Iohw => f.to_vec(),
        TransposeFilterLayout::Hwoi => transpose_vec(f, &[kh, kw, og, c], &[3, 2, 0, 1]),
        TransposeFilterLayout::Ohwi => transpose_vec(f, &[og, kh, kw, c], &[3, 0, 1, 2]),
    };
    // [g, cg, og*kh*kw] -> [g, og*kh*kw, cg].
    transpose_vec(&iohw, &[g, c / g, og * kh * kw], &[0, 2, 1])
}

/// `convTranspose2d` with nchw/nhwc input, iohw/hwoi/ohwi filters,
/// padding, strides, dilations, groups and an optional bias (`inputs[2]`).
///
/// Each input element scatters `value * filter` into the output window
/// that starts at `(iy * stride - padBegin, ix * stride - padBegin)`;
/// taps outside the output (cut off by padding, or beyond outputSizes)
/// are dropped and output positions no tap reaches (outputPadding) hold
/// the bias only. Per (batch, group): one sgemm gives every tap's
/// contribution ([og * kh * kw, h * w]), then col2im adds them up.
pub fn conv_transpose2d(
    p: &ConvTranspose2dParams,
    inputs: &[&Buf],
    _in_descs: &[&OperandDescriptor],
    out_descs: &[OperandDescriptor],
) -> Result<Vec<Buf>> {
    let bad = || Error::operation("convTranspose2d: the operands do not match the parameters");
    let out = out_descs.first().ok_or_else(bad)?;
    let g = p.groups;
    if g == 0
        || !p.in_channels.is_multiple_of(g)
        || !p.out_channels.is_multiple_of(g)
        || p.strides.contains(&0)
    {
        return Err(bad());
    }
    let (n, c, h, w) = (p.batch, p.in_channels, p.in_h, p.in_w);
    let (oc, oh, ow) = (p.out_channels, p.out_h, p.out_w);
    let (cg, og) = (c / g, oc / g);
    let (kh, kw) = (p.kernel_h, p.kernel_w);
    let x = floats(inputs.first().ok_or_else(bad)?)?;
    let f = floats(inputs.get(1).ok_or_else(bad)?)?;
    let bias = if p.has_bias {
        Some(floats(inputs.get(2).ok_or_else(bad)?)?)
    } else {
        None
    };
    if x.len() != n * c * h * w
        || f.len() != c * og * kh * kw
        || bias.as_ref().is_some_and(|b| b.len() != oc)
        || out.element_count() != n * oc * oh * ow
    {
        return Err(bad());
    }
    let x = if p.nhwc {
        std::borrow::Cow::Owned(transpose_vec(&x, &[n, h, w, c], &TO_NCHW))
    } else {
        x
    };
    let wt = transpose_filter_groups(&f, p);
    let taps = og * kh * kw;
    let (in_plane, plane) = (h * w, oh * ow);
    let mut res = vec![0.0f32; n * oc * plane];
    let unit = og * plane;
    let run = |(t, dst): (usize, &mut [f32]), parallel: bool| {
        let (b, gi) = (t / g, t % g);
        let xs = &x[(b * c + gi * cg) * in_plane..(b * c + (gi + 1) * cg) * in_plane];
        let wg = &wt[gi * taps * cg..(gi + 1) * taps * cg];
        let mut col = vec![0.0f32; taps * in_plane];
        sgemm(taps, in_plane, cg, wg, xs, &mut col, parallel);
        // col2im: row (o, ky, kx) holds that tap's value for every input
        // position.
        for (r, row) in col.chunks(in_plane.max(1)).enumerate().take(taps) {
            let (o, ky, kx) = (r / (kh * kw), (r / kw) % kh, r % kw);
            let dplane = &mut dst[o * plane..(o + 1) * plane];
            for iy in 0..h {
                let Some(oy) = (iy * p.strides[0] + ky * p.dilations[0])
                    .checked_sub(p.padding[0])
                    .filter(|&v| v < oh)
                else {
                    continue;
                };
                let drow = &mut dplane[oy * ow..(oy + 1) * ow];
                for ix in 0..w {
                    if let Some(ox) = (ix * p.strides[1] + kx * p.dilations[1])
                        .checked_sub(p.padding[2])
                        .filter(|&v| v < ow)
                    {
                        drow[ox] += row[iy * w + ix];
                    }
                }
            }
        }
    };
    if unit > 0 {
        if n * g > 1 && taps * in_plane * cg < UNIT_PAR_WORK {
            res.par_chunks_mut(unit)
                .enumerate()
                .for_each(|u| run(u, false));
        } else {
            res.chunks_mut(unit).enumerate().for_each(|u| run(u, true));
        }
        if let Some(bias) = &bias {
            for (i, ch) in res.chunks_mut(plane).enumerate() {
                let v = bias[i % oc];
                ch.iter_mut().for_each(|y| *y += v);
            }
        }
    }
    let res = if p.nhwc {
        transpose_vec(&res, &[n, oc, oh, ow], &TO_NHWC)
    } else {
        res
    };
    Ok(vec![from_floats(out.data_type, res)?])
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::types::DataType;

    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Direct 7-loop convolution on NCHW input and OIHW filter.
    fn naive_conv(p: &Conv2dParams, x: &[f32], f: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
        let (cg, og) = (p.in_channels / p.groups, p.out_channels / p.groups);
        let mut out = vec![0.0f32; p.batch * p.out_channels * p.out_h * p.out_w];
        for b in 0..p.batch {
            for o in 0..p.out_channels {
                let g = o / og;
                for y in 0..p.out_h {
                    for xo in 0..p.out_w {
                        let mut s = bias.map_or(0.0, |b| b[o] as f64);
                        for c in 0..cg {
                            for ky in 0..p.kernel_h {
                                for kx in 0..p.kernel_w {
                                    let iy = (y * p.strides[0] + ky * p.dilations[0]) as isize
                                        - p.padding[0] as isize;
                                    let ix = (xo * p.strides[1] + kx * p.dilations[1]) as isize
                                        - p.padding[2] as isize;
                                    if iy < 0
                                        || ix < 0
                                        || iy >= p.in_h as isize
                                        || ix >= p.in_w as isize
                                    {
                                        continue;
                                    }
                                    let xi = ((b * p.in_channels + g * cg + c) * p.in_h
                                        + iy as usize)
                                        * p.in_w
                                        + ix as usize;
                                    let fi = ((o * cg + c) * p.kernel_h + ky) * p.kernel_w + kx;
                                    s += x[xi] as f64 * f[fi] as f64;
                                }
                            }
                        }
                        out[((b * p.out_channels + o) * p.out_h + y) * p.out_w + xo] = s as f32;
                    }
                }
            }
        }
        out
    }

    /// Parameters with the output size computed as validation does.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn params(
        (batch, c, h, w): (usize, usize, usize, usize),
        (o, kh, kw): (usize, usize, usize),
        padding: [usize; 4],
        strides: [usize; 2],
        dilations: [usize; 2],
        groups: usize,
    ) -> Conv2dParams {
        let out = |i: usize, k: usize, p0: usize, p1: usize, s: usize, d: usize| {
            (i + p0 + p1 - (k - 1) * d - 1) / s + 1
        };
        Conv2dParams {
            nhwc: false,
            filter_layout: FilterLayout::Oihw,
            padding,
            strides,
            dilations,
            groups,
            has_bias: false,
            batch,
            in_channels: c,
            in_h: h,
            in_w: w,
            out_channels: o,
            kernel_h: kh,
            kernel_w: kw,
            out_h: out(h, kh, padding[0], padding[1], strides[0], dilations[0]),
            out_w: out(w, kw, padding[2], padding[3], strides[1], dilations[1]),
        }
    }

    fn desc(dt: DataType, shape: &[usize]) -> OperandDescriptor {
        OperandDescriptor {
            data_type: dt,
            shape: shape.to_vec(),
        }
    }

    fn close(x: &[f32], y: &[f32], tol: f32) {
        assert_eq!(x.len(), y.len());
        for (i, (a, b)) in x.iter().zip(y).enumerate() {
            assert!(
                a == b || (a - b).abs() <= tol * (1.0 + b.abs()),
                "element {i}: {a} vs {b}"
            );
        }
    }

    /// The bit patterns of a float buffer, for bitwise comparisons.
    fn bits(v: &Buf) -> Vec<u32> {
        v.to_f32_vec().iter().map(|x| x.to_bits()).collect()
    }

    #[test]
    fn conv2d_matches_naive_in_every_layout() {
        let cases = [
            params((2, 4, 7, 6), (6, 3, 2), [1, 0, 2, 1], [2, 1], [1, 2], 2),
            params((1, 3, 5, 5), (2, 3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1),
            params((2, 4, 6, 5), (4, 3, 3), [1, 1, 1, 1], [1, 2], [1, 1], 4),
            params((1, 3, 4, 4), (6, 2, 2), [0, 0, 0, 0], [2, 2], [1, 1], 3),
            params((3, 5, 4, 3), (7, 1, 1), [0, 0, 0, 0], [1, 1], [1, 1], 1),
            params((1, 2, 9, 9), (3, 3, 3), [2, 1, 0, 3], [3, 2], [2, 3], 1),
            params((1, 1, 1, 1), (1, 1, 1), [0, 0, 0, 0], [1, 1], [1, 1], 1),
            // Enough work per unit for the parallel sgemm path.
            params((1, 32, 40, 40), (64, 3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1),
            // Many depthwise units (the per-unit parallel path).
            params(
                (2, 32, 10, 10),
                (32, 3, 3),
                [1, 1, 1, 1],
                [1, 1],
                [1, 1],
                32,
            ),
            // Depthwise: strides, dilations, odd and asymmetric padding,
            // other kernel sizes, many small planes (parallel chunks).
            params((1, 5, 9, 11), (5, 3, 3), [1, 1, 1, 1], [2, 2], [1, 1], 5),
            params((2, 3, 8, 7), (3, 3, 3), [0, 1, 2, 0], [1, 2], [2, 1], 3),
            params((1, 4, 13, 10), (4, 5, 5), [2, 2, 2, 2], [2, 2], [1, 1], 4),
            params((1, 3, 7, 9), (3, 2, 4), [1, 0, 3, 1], [3, 1], [1, 2], 3),
            params((1, 3, 6, 6), (3, 1, 1), [0; 4], [1, 1], [1, 1], 3),
            params(
                (1, 200, 5, 4),
                (200, 3, 3),
                [1, 1, 1, 1],
                [1, 1],
                [1, 1],
                200,
            ),
            // Unit stride with padding and dilation (the padded-grid path),
            // wide enough for several panels and KC blocks.
            params((1, 40, 9, 37), (5, 3, 3), [2, 0, 1, 3], [1, 1], [2, 3], 1),
            params((2, 6, 5, 5), (4, 1, 1), [1, 0, 0, 2], [1, 1], [1, 1], 2),
            // 1x1 with a stride (im2col).
            params((1, 3, 7, 8), (4, 1, 1), [0; 4], [2, 3], [1, 1], 1),
        ];
        for base in cases {
            let (n, c, h, w) = (base.batch, base.in_channels, base.in_h, base.in_w);
            let (o, i, kh, kw) = (
                base.out_channels,
                base.in_channels / base.groups,
                base.kernel_h,
                base.kernel_w,
            );
            let x = data(n * c * h * w, 1);
            let f = data(o * i * kh * kw, 2);
            let bias = data(o, 3);
            for has_bias in [false, true] {
                let expect = naive_conv(&base, &x, &f, has_bias.then_some(&bias[..]));
                for nhwc in [false, true] {
                    for layout in [
                        FilterLayout::Oihw,
                        FilterLayout::Hwio,
                        FilterLayout::Ohwi,
                        FilterLayout::Ihwo,
                    ] {
                        let p = Conv2dParams {
                            nhwc,
                            filter_layout: layout,
                            has_bias,
                            ..base.clone()
                        };
                        let xin = if nhwc {
                            transpose_vec(&x, &[n, c, h, w], &TO_NHWC)
                        } else {
                            x.clone()
                        };
                        let fin = match layout {
                            FilterLayout::Oihw => f.clone(),
                            FilterLayout::Hwio => transpose_vec(&f, &[o, i, kh, kw], &[2, 3, 1, 0]),
                            FilterLayout::Ohwi => transpose_vec(&f, &[o, i, kh, kw], &[0, 2, 3, 1]),
                            FilterLayout::Ihwo => transpose_vec(&f, &[o, i, kh, kw], &[1, 2, 3, 0]),
                        };
                        let (xb, fb, bb) = (Buf::F32(xin), Buf::F32(fin), Buf::F32(bias.clone()));
                        let mut ins = vec![&xb, &fb];
                        if has_bias {
                            ins.push(&bb);
                        }
                        let oshape = if nhwc {
                            [n, p.out_h, p.out_w, o]
                        } else {
                            [n, o, p.out_h, p.out_w]
                        };
                        let Buf::F32(r) =
                            conv2d(&p, &ins, &desc(DataType::Float32, &oshape)).unwrap()
                        else {
                            panic!()
                        };
                        // The filter packed in advance (as compile does for
                        // a constant one) gives the same bits.
                        if let Some(packed) = pack_filter(&p, &fb).unwrap() {
                            let d = desc(DataType::Float32, &oshape);
                            let got = conv2d_packed(&p, &ins, &d, Some(&packed)).unwrap();
                            assert_eq!(got, Buf::F32(r.clone()));
                        }
                        let r = if nhwc {
                            transpose_vec(&r, &[n, p.out_h, p.out_w, o], &TO_NCHW)
                        } else {
                            r
                        };
                        close(&r, &expect, 1e-5);
                    }
                }
            }
        }
    }

    /// A trailing `[min, max]` input (a fused clamp or relu) gives the
    /// bits of the clamp operator applied to the unfused result.
    #[test]
    fn fused_activation_is_bitwise_the_clamp() {
        let cases = [
            params((1, 8, 9, 9), (8, 3, 3), [1, 1, 1, 1], [2, 2], [1, 1], 8),
            params((1, 6, 10, 11), (7, 3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1),
            params((1, 6, 10, 11), (7, 1, 1), [0; 4], [1, 1], [1, 1], 1),
            params((1, 3, 11, 11), (4, 3, 3), [1, 1, 1, 1], [2, 2], [1, 1], 1),
        ];
        for base in cases {
            let (n, c, h, w) = (base.batch, base.in_channels, base.in_h, base.in_w);
            let o = base.out_channels;
            let p = Conv2dParams {
                has_bias: true,
                ..base.clone()
            };
            let mut xv = data(n * c * h * w, 21);
            xv[3] = f32::NAN;
            let x = Buf::F32(xv);
            let f = Buf::F32(data(o * (c / p.groups) * p.kernel_h * p.kernel_w, 22));
            let b = Buf::F32(data(o, 23));
            let d = desc(DataType::Float32, &[n, o, p.out_h, p.out_w]);
            let plain = conv2d(&p, &[&x, &f, &b], &d).unwrap();
            for (lo, hi) in [(0.0f64, 6.0f64), (-0.25, 0.5), (0.0, f64::INFINITY)] {
                let want = super::super::elementwise::clamp(&plain, lo, hi, &d).unwrap();
                let bounds = Buf::F32(vec![lo as f32, hi as f32]);
                let got = conv2d(&p, &[&x, &f, &b, &bounds], &d).unwrap();
                assert_eq!(bits(&got), bits(&want), "{lo} {hi}");
            }
            // Bad bounds are an error.
            let bad = Buf::F32(vec![0.0]);
            assert!(conv2d(&p, &[&x, &f, &b, &bad], &d).is_err());
        }
    }

    /// Unit-stride convolutions with a packed filter read B in place
    /// (`conv_rows`, over the padded width): the bits of the packed-panel
    /// path, for paddings on every side, dilations, non-square kernels,
    /// groups, batches, NHWC, with bias and bounds (NaN included).
    #[test]
    fn rows_in_place_match_packed_panels() {
        let cases = [
            params((1, 8, 9, 9), (8, 3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1),
            params((2, 6, 10, 11), (7, 3, 3), [0, 2, 1, 0], [1, 1], [1, 1], 1),
            params((1, 5, 12, 13), (9, 5, 3), [2, 2, 1, 1], [1, 1], [2, 3], 1),
            params((1, 4, 7, 40), (6, 1, 3), [0, 0, 1, 1], [1, 1], [1, 1], 2),
            params((1, 3, 6, 6), (20, 1, 1), [1, 0, 0, 2], [1, 1], [1, 1], 1),
            params((1, 33, 9, 18), (13, 3, 1), [1, 1, 0, 0], [1, 1], [1, 1], 1),
            params((1, 70, 8, 8), (16, 3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1),
        ];
        for (i, base) in cases.into_iter().enumerate() {
            for nhwc in [false, true] {
                let p = Conv2dParams {
                    has_bias: true,
                    nhwc,
                    ..base.clone()
                };
                let (n, c, h, w) = (p.batch, p.in_channels, p.in_h, p.in_w);
                let o = p.out_channels;
                let mut xv = data(n * c * h * w, 31 + i as u64);
                xv[1] = f32::NAN;
                let x = Buf::F32(xv);
                let f = Buf::F32(data(o * (c / p.groups) * p.kernel_h * p.kernel_w, 32));
                let b = Buf::F32(data(o, 33));
                let shape = if nhwc {
                    [n, p.out_h, p.out_w, o]
                } else {
                    [n, o, p.out_h, p.out_w]
                };
                let d = desc(DataType::Float32, &shape);
                let packed = pack_filter(&p, &f).unwrap().expect("a packable filter");
                let bounds = Buf::F32(vec![-0.25, 0.5]);
                for ins in [vec![&x, &f, &b], vec![&x, &f, &b, &bounds]] {
                    let want = conv2d(&p, &ins, &d).unwrap();
                    let got = conv2d_packed(&p, &ins, &d, Some(&packed)).unwrap();
                    assert_eq!(bits(&got), bits(&want), "case {i} nhwc={nhwc}");
                }
            }
        }
    }

    /// compile() fuses conv2d + clamp and conv2d + relu, and the fused
    /// graph gives the bits of the unfused one (where the conv output is
    /// also a graph output, which prevents fusion).
    #[test]
    fn compile_fuses_conv_activations() {
        use crate::backend::Backend;
        use crate::graph::Node;
        let p = Conv2dParams {
            has_bias: true,
            ..params((1, 4, 6, 6), (4, 3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1)
        };
        let f32d = |shape: &[usize]| desc(DataType::Float32, shape);
        let bytes = |v: &[f32]| Arc::new(v.iter().flat_map(|x| x.to_le_bytes()).collect());
        let x = data(144, 31);
        for act in [Op::Clamp { min: 0.0, max: 6.0 }, Op::Unary(UnaryKind::Relu)] {
            // x -> conv -> act -> conv -> act (out); conv 2 reads act 1.
            let graph = |expose: bool| {
                let mut outputs = vec![("y".to_string(), 7)];
                if expose {
                    outputs.push(("c1".to_string(), 4));
                    outputs.push(("c2".to_string(), 6));
                }
                Graph {
                    operands: vec![
                        f32d(&[1, 4, 6, 6]),
                        f32d(&[4, 4, 3, 3]),
                        f32d(&[4]),
                        f32d(&[4, 4, 3, 3]),
                        f32d(&[1, 4, 6, 6]),
                        f32d(&[1, 4, 6, 6]),
                        f32d(&[1, 4, 6, 6]),
                        f32d(&[1, 4, 6, 6]),
                    ],
                    sources: vec![
                        Source::Input("x".into()),
                        Source::Constant(bytes(&data(144, 32))),
                        Source::Constant(bytes(&data(4, 33))),
                        Source::Constant(bytes(&data(144, 34))),
                        Source::Node { node: 0, index: 0 },
                        Source::Node { node: 1, index: 0 },
                        Source::Node { node: 2, index: 0 },
                        Source::Node { node: 3, index: 0 },
                    ],
                    nodes: vec![
                        Node {
                            op: Op::Conv2d(p.clone()),
                            inputs: vec![0, 1, 2],
                            outputs: vec![4],
                            label: String::new(),
                        },
                        Node {
                            op: act.clone(),
                            inputs: vec![4],
                            outputs: vec![5],
                            label: String::new(),
                        },
                        Node {
                            op: Op::Conv2d(p.clone()),
                            inputs: vec![5, 3, 2],
                            outputs: vec![6],
                            label: String::new(),
                        },
                        Node {
                            op: act.clone(),
                            inputs: vec![6],
                            outputs: vec![7],
                            label: "last".into(),
                        },
                    ],
                    inputs: vec![("x".into(), 0)],
                    outputs,
                }
            };
            let mut cpu = super::super::CpuBackend::new();
            let (fused, plain) = (Arc::new(graph(false)), Arc::new(graph(true)));
            cpu.compile(1, fused.clone()).unwrap();
            cpu.compile(2, plain.clone()).unwrap();
            assert_eq!(cpu.graphs[&1].graph.nodes.len(), 2);
            assert_eq!(cpu.graphs[&2].graph.nodes.len(), 4);
            let a = cpu.compute(1, &fused, vec![Buf::F32(x.clone())]).unwrap();
            let b = cpu.compute(2, &plain, vec![Buf::F32(x.clone())]).unwrap();
            assert_eq!(bits(&a[0]), bits(&b[0]));
            // Some values are clamped, so the activation did something.
            assert!(b[1].to_f32_vec().iter().any(|&v| v < 0.0));
        }
    }

    #[test]
    fn conv2d_float16_and_empty() {
        let p = params((1, 2, 4, 4), (2, 3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1);
        let x = Buf::f16_from_f32(&data(32, 4));
        let f = Buf::f16_from_f32(&data(36, 5));
        let r = conv2d(&p, &[&x, &f], &desc(DataType::Float16, &[1, 2, 4, 4])).unwrap();
        let expect = naive_conv(&p, &x.to_f32_vec(), &f.to_f32_vec(), None);
        close(
            &r.to_f32_vec(),
            &Buf::f16_from_f32(&expect).to_f32_vec(),
            1e-3,
        );
        // A zero batch gives an empty output.
        let p0 = params((0, 2, 4, 4), (2, 3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1);
        let r = conv2d(
            &p0,
            &[&Buf::F32(vec![]), &Buf::F32(vec![0.0; 36])],
            &desc(DataType::Float32, &[0, 2, 4, 4]),
        )
        .unwrap();
        assert_eq!(r, Buf::F32(vec![]));
        // Zero input channels: the bias alone.
        let mut pz = params((1, 0, 2, 2), (0, 1, 1), [0; 4], [1, 1], [1, 1], 1);
        pz.out_channels = 0;
        let r = conv2d(
            &pz,
            &[&Buf::F32(vec![]), &Buf::F32(vec![])],
            &desc(DataType::Float32, &[1, 0, 2, 2]),
        )
        .unwrap();
        assert_eq!(r, Buf::F32(vec![]));
        // Mismatched sizes are an error, not a panic.
        assert!(conv2d(
            &p,
            &[&x, &Buf::f16_from_f32(&[1.0])],
            &desc(DataType::Float16, &[1, 2, 4, 4])
        )
        .is_err());
    }

    /// Direct pooling on NCHW; `None` windows (no valid element) are
    /// reported as the kernel's empty values.
    fn naive_pool(p: &Pool2dParams, x: &[f32]) -> Vec<f32> {
        let mut out = Vec::new();
        for plane in 0..p.batch * p.channels {
            for y in 0..p.out_h {
                for xo in 0..p.out_w {
                    let mut vals = Vec::new();
                    for ky in 0..p.window[0] {
                        for kx in 0..p.window[1] {
                            let iy = (y * p.strides[0] + ky * p.dilations[0]) as isize
                                - p.padding[0] as isize;
                            let ix = (xo * p.strides[1] + kx * p.dilations[1]) as isize
                                - p.padding[2] as isize;
                            if iy >= 0
                                && ix >= 0
                                && (iy as usize) < p.in_h
                                && (ix as usize) < p.in_w
                            {
                                vals.push(
                                    x[(plane * p.in_h + iy as usize) * p.in_w + ix as usize] as f64,
                                );
                            }
                        }
                    }
                    let v = match p.kind {
                        PoolKind::Max => vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                        PoolKind::Average if vals.is_empty() => 0.0,
                        PoolKind::Average => vals.iter().sum::<f64>() / vals.len() as f64,
                        PoolKind::L2 => vals.iter().map(|v| v * v).sum::<f64>().sqrt(),
                    };
                    out.push(v as f32);
                }
            }
        }
        out
    }

    #[test]
    fn pool2d_matches_naive() {
        let size = |i: usize, k: usize, p0: usize, p1: usize, s: usize, d: usize, ceil: bool| {
            let span = i + p0 + p1 - (k - 1) * d - 1;
            if ceil {
                span.div_ceil(s) + 1
            } else {
                span / s + 1
            }
        };
        let cases = [
            ((2, 3, 5, 6), [2, 2], [0, 0, 0, 0], [2, 2], [1, 1], false),
            ((1, 2, 5, 5), [3, 3], [1, 1, 1, 1], [2, 2], [1, 1], false),
            ((1, 2, 5, 5), [3, 3], [1, 1, 1, 1], [2, 2], [1, 1], true),
            ((1, 1, 7, 6), [3, 2], [2, 0, 1, 3], [3, 2], [2, 2], true),
            ((1, 1, 4, 4), [4, 4], [0, 0, 0, 0], [1, 1], [1, 1], false),
            // Global pooling over enough planes to split into tasks.
            ((2, 700, 3, 5), [3, 5], [0, 0, 0, 0], [1, 1], [1, 1], false),
            // A large padding: some windows hold padding only.
            ((1, 1, 2, 2), [2, 2], [3, 3, 3, 3], [1, 1], [1, 1], false),
        ];
        for ((n, c, h, w), window, padding, strides, dilations, ceil) in cases {
            let x = data(n * c * h * w, 7);
            for kind in [PoolKind::Average, PoolKind::Max, PoolKind::L2] {
                let p = Pool2dParams {
                    kind,
                    nhwc: false,
                    window,
                    padding,
                    strides,
                    dilations,
                    batch: n,
                    channels: c,
                    in_h: h,
                    in_w: w,
                    out_h: size(
                        h,
                        window[0],
                        padding[0],
                        padding[1],
                        strides[0],
                        dilations[0],
                        ceil,
                    ),
                    out_w: size(
                        w,
                        window[1],
                        padding[2],
                        padding[3],
                        strides[1],
                        dilations[1],
                        ceil,
                    ),
                };
                let expect = naive_pool(&p, &x);
                let (oh, ow) = (p.out_h, p.out_w);
                let Buf::F32(r) = pool2d(
                    &p,
                    &Buf::F32(x.clone()),
                    &desc(DataType::Float32, &[n, c, oh, ow]),
                )
                .unwrap() else {
                    panic!()
                };
                close(&r, &expect, 1e-6);
                let pn = Pool2dParams {
                    nhwc: true,
                    ..p.clone()
                };
                let xn = transpose_vec(&x, &[n, c, h, w], &TO_NHWC);
                let Buf::F32(r) = pool2d(
                    &pn,
                    &Buf::F32(xn),
                    &desc(DataType::Float32, &[n, oh, ow, c]),
                )
                .unwrap() else {
                    panic!()
                };
                close(&transpose_vec(&r, &[n, oh, ow, c], &TO_NCHW), &expect, 1e-6);
                let xh = Buf::f16_from_f32(&x);
                let r = pool2d(&p, &xh, &desc(DataType::Float16, &[n, c, oh, ow])).unwrap();
                let expect_h = Buf::f16_from_f32(&naive_pool(&p, &xh.to_f32_vec())).to_f32_vec();
                close(&r.to_f32_vec(), &expect_h, 1e-3);
            }
        }
    }

    #[test]
    fn average_pool_ignores_padding() {
        // 2x2 input, 3x3 window, padding 1: the corner windows see 4
        // elements, so the average is over 4, not 9.
        let p = Pool2dParams {
            kind: PoolKind::Average,
            nhwc: false,
            window: [3, 3],
            padding: [1, 1, 1, 1],
            strides: [1, 1],
            dilations: [1, 1],
            batch: 1,
            channels: 1,
            in_h: 2,
            in_w: 2,
            out_h: 2,
            out_w: 2,
        };
        let r = pool2d(
            &p,
            &Buf::F32(vec![1.0, 2.0, 3.0, 4.0]),
            &desc(DataType::Float32, &[1, 1, 2, 2]),
        )
        .unwrap();
        assert_eq!(r, Buf::F32(vec![2.5; 4]));
    }

    /// Direct scatter form of convTranspose2d on NCHW input and IOHW filter.
    fn naive_conv_transpose(
        p: &ConvTranspose2dParams,
        x: &[f32],
        f: &[f32],
        bias: Option<&[f32]>,
    ) -> Vec<f32> {
        let (cg, og) = (p.in_channels / p.groups, p.out_channels / p.groups);
        let mut out = vec![0.0f64; p.batch * p.out_channels * p.out_h * p.out_w];
        for b in 0..p.batch {
            for ci in 0..p.in_channels {
                let g = ci / cg;
                for iy in 0..p.in_h {
                    for ix in 0..p.in_w {
                        let v = x[((b * p.in_channels + ci) * p.in_h + iy) * p.in_w + ix] as f64;
                        for o in 0..og {
                            for ky in 0..p.kernel_h {
                                for kx in 0..p.kernel_w {
                                    let oy = (iy * p.strides[0] + ky * p.dilations[0]) as isize
                                        - p.padding[0] as isize;
                                    let ox = (ix * p.strides[1] + kx * p.dilations[1]) as isize
                                        - p.padding[2] as isize;
                                    if oy < 0
                                        || ox < 0
                                        || oy >= p.out_h as isize
                                        || ox >= p.out_w as isize
                                    {
                                        continue;
                                    }
                                    let oc = g * og + o;
                                    let fi = ((ci * og + o) * p.kernel_h + ky) * p.kernel_w + kx;
                                    out[((b * p.out_channels + oc) * p.out_h + oy as usize)
                                        * p.out_w
                                        + ox as usize] += v * f[fi] as f64;
                                }
                            }
                        }
                    }
                }
            }
        }
        let plane = p.out_h * p.out_w;
        out.iter()
            .enumerate()
            .map(|(i, &v)| {
                (v + bias.map_or(0.0, |b| b[(i / plane) % p.out_channels] as f64)) as f32
            })
            .collect()
    }

    #[test]
    fn conv_transpose2d_matches_naive_in_every_layout() {
        // (n, c, h, w), (og, kh, kw), padding, strides, dilations, groups,
        // extra output size (outputPadding / outputSizes).
        let cases = [
            ((1, 1, 2, 2), (1, 2, 2), [0; 4], [1, 1], [1, 1], 1, [0, 0]),
            (
                (2, 4, 3, 4),
                (3, 3, 2),
                [1, 0, 2, 1],
                [2, 3],
                [1, 2],
                2,
                [1, 2],
            ),
            (
                (1, 3, 5, 5),
                (2, 3, 3),
                [1, 1, 1, 1],
                [2, 2],
                [1, 1],
                1,
                [1, 0],
            ),
            (
                (1, 6, 4, 3),
                (1, 3, 3),
                [0, 2, 1, 0],
                [1, 2],
                [2, 1],
                6,
                [0, 1],
            ),
            ((3, 2, 1, 1), (5, 1, 1), [0; 4], [1, 1], [1, 1], 1, [0, 0]),
            (
                (1, 2, 7, 6),
                (4, 2, 3),
                [2, 1, 0, 3],
                [3, 2],
                [2, 2],
                1,
                [2, 1],
            ),
        ];
        for ((n, c, h, w), (og, kh, kw), padding, strides, dilations, groups, extra) in cases {
            let size = |i: usize, k: usize, p0: usize, p1: usize, s: usize, d: usize| {
                (i - 1) * s + (k - 1) * d + 1 - p0 - p1
            };
            let oc = og * groups;
            let base = ConvTranspose2dParams {
                nhwc: false,
                filter_layout: TransposeFilterLayout::Iohw,
                padding,
                strides,
                dilations,
                groups,
                has_bias: false,
                batch: n,
                in_channels: c,
                in_h: h,
                in_w: w,
                out_channels: oc,
                kernel_h: kh,
                kernel_w: kw,
                out_h: size(h, kh, padding[0], padding[1], strides[0], dilations[0]) + extra[0],
                out_w: size(w, kw, padding[2], padding[3], strides[1], dilations[1]) + extra[1],
            };
            let (oh, ow) = (base.out_h, base.out_w);
            let x = data(n * c * h * w, 11);
            let f = data(c * og * kh * kw, 12);
            let bias = data(oc, 13);
            for has_bias in [false, true] {
                let expect = naive_conv_transpose(&base, &x, &f, has_bias.then_some(&bias[..]));
                for nhwc in [false, true] {
                    for layout in [
                        TransposeFilterLayout::Iohw,
                        TransposeFilterLayout::Hwoi,
                        TransposeFilterLayout::Ohwi,
                    ] {
                        let p = ConvTranspose2dParams {
                            nhwc,
                            filter_layout: layout,
                            has_bias,
                            ..base.clone()
                        };
                        let xin = if nhwc {
                            transpose_vec(&x, &[n, c, h, w], &TO_NHWC)
                        } else {
                            x.clone()
                        };
                        let fin = match layout {
                            TransposeFilterLayout::Iohw => f.clone(),
                            TransposeFilterLayout::Hwoi => {
                                transpose_vec(&f, &[c, og, kh, kw], &[2, 3, 1, 0])
                            }
                            TransposeFilterLayout::Ohwi => {
                                transpose_vec(&f, &[c, og, kh, kw], &[1, 2, 3, 0])
                            }
                        };
                        let (xb, fb, bb) = (Buf::F32(xin), Buf::F32(fin), Buf::F32(bias.clone()));
                        let mut ins = vec![&xb, &fb];
                        if has_bias {
                            ins.push(&bb);
                        }
                        let oshape = if nhwc {
                            [n, oh, ow, oc]
                        } else {
                            [n, oc, oh, ow]
                        };
                        let Buf::F32(r) =
                            conv_transpose2d(&p, &ins, &[], &[desc(DataType::Float32, &oshape)])
                                .unwrap()
                                .remove(0)
                        else {
                            panic!()
                        };
                        let r = if nhwc {
                            transpose_vec(&r, &[n, oh, ow, oc], &TO_NCHW)
                        } else {
                            r
                        };
                        close(&r, &expect, 1e-5);
                    }
                }
            }
            // float16 rounds once per output.
            let xh = Buf::f16_from_f32(&x);
            let fh = Buf::f16_from_f32(&f);
            let r = conv_transpose2d(
                &base,
                &[&xh, &fh],
                &[],
                &[desc(DataType::Float16, &[n, oc, oh, ow])],
            )
            .unwrap()
            .remove(0);
            let expect = naive_conv_transpose(&base, &xh.to_f32_vec(), &fh.to_f32_vec(), None);
            close(
                &r.to_f32_vec(),
                &Buf::f16_from_f32(&expect).to_f32_vec(),
                1e-3,
            );
            // A filter of the wrong size is an error, not a panic.
            assert!(conv_transpose2d(
                &base,
                &[&Buf::F32(x.clone()), &Buf::F32(vec![0.0; 1])],
                &[],
                &[desc(DataType::Float32, &[n, oc, oh, ow])],
            )
            .is_err());
        }
    }
}

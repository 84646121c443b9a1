//! Pooling and channel concatenation read straight from the blocked
//! layout, so that a network's pools and concats (SqueezeNet's fire
//! modules, ResNet's stem) do not cost two layout changes each.
//!
//! Global pooling (one window over each whole plane, as at the end of
//! most image classifiers) writes `[n, c, 1, 1]`, the same in both
//! layouts, as NCHW. Windowed pooling writes the blocked layout. Each
//! window (or plane) is reduced with the steps the plain pools share,
//! `common::Reduce`, whose results are `common::pool_reduce`'s, in its
//! order, eight channels side by side: the same bits.

use rayon::prelude::*;

use super::simd::Block8;
use super::L;
use crate::backend::cpu::conv::common::{is_global_pool, Max, Reduce, Sum, Taps, MAX_IDENTITY};
use crate::backend::cpu::simd::{simd_level, with_simd_at, SimdLevel};
use crate::backend::cpu::util::try_filled;
use crate::error::{Error, Result};
use crate::graph::ops::conv::{Pool2dParams, PoolKind};
use crate::tensor::Buf;

/// Whether pooling `p` of a float32 NCHW operand reduces each whole
/// plane to one value, over whole channel blocks.
pub(super) fn is_global(p: &Pool2dParams) -> bool {
    // Either layout: the plan checks that the input is blocked from the
    // pool's own layout, and the [n, c, 1, 1] result is [n, 1, 1, c]'s
    // bytes too.
    is_global_pool(p) && p.channels.is_multiple_of(L)
}

/// Global pooling of blocked `x` (`[n, c / 8, h, w, 8]`) into NCHW
/// `[n, c, 1, 1]`.
pub(super) fn global(p: &Pool2dParams, x: &[f32]) -> Result<Vec<f32>> {
    // SAFETY: `simd_level` is a level this CPU has.
    unsafe { global_at(simd_level(), p, x) }
}

/// [`global`], compiled for vectors of `level` (the tests run each).
///
/// # Safety
/// The CPU has `level`'s features (it is at most `detected_level()`).
pub(super) unsafe fn global_at(level: SimdLevel, p: &Pool2dParams, x: &[f32]) -> Result<Vec<f32>> {
    let hw = p.in_h * p.in_w;
    let blocks = p.batch * p.channels / L;
    if !is_global(p) || x.len() != blocks * hw * L {
        return Err(Error::operation(
            "pool2d: the operands do not match the parameters",
        ));
    }
    let mut out = try_filled(blocks * L, 0.0f32, "the global pool2d output")?;
    // SAFETY: the caller's promise: the CPU has `level`.
    unsafe {
        match p.kind {
            PoolKind::Max => global_planes(level, x, hw, &mut out, Max),
            PoolKind::Average => global_planes(level, x, hw, &mut out, Sum::<false>),
            PoolKind::L2 => global_planes(level, x, hw, &mut out, Sum::<true>),
        }
    }
    Ok(out)
}

/// [`global`]'s loop: each block's plane (`hw` pixels of L channels)
/// reduced front to back with `red` into its L values of `out`.
///
/// # Safety
/// The CPU has `level`'s features.
unsafe fn global_planes(
    level: SimdLevel,
    x: &[f32],
    hw: usize,
    out: &mut [f32],
    red: impl Reduce<L>,
) {
    // Blocks per task: about 16 K floats of input each.
    let per = ((1 << 14) / (hw * L)).max(1);
    let run = |(t, dst): (usize, &mut [f32])| {
        // Compiled for `level`'s vectors: the L lanes of a pixel are one
        // vector operation (two, in f64, for the sums).
        // SAFETY: the caller's promise: the CPU has `level`.
        unsafe {
            with_simd_at(
                level,
                #[inline(always)]
                || {
                    for (i, dst) in dst.chunks_exact_mut(L).enumerate() {
                        let b = t * per + i;
                        let (plane, _) = x[b * hw * L..(b + 1) * hw * L].as_chunks::<L>();
                        let mut acc = red.init();
                        for px in plane {
                            red.step(&mut acc, px);
                        }
                        red.finish(acc, hw, dst);
                    }
                },
            )
        }
    };
    if x.len() >= 1 << 16 {
        out.par_chunks_mut(per * L).enumerate().for_each(run);
    } else {
        out.chunks_mut(per * L).enumerate().for_each(run);
    }
}

/// Whether windowed pooling `p` (not a global one) runs on the blocked
/// layout: whole channel blocks, a non-empty window and output, non-zero
/// strides and dilations.
pub(super) fn is_window(p: &Pool2dParams) -> bool {
    !is_global_pool(p)
        && p.channels.is_multiple_of(L)
        && !p.window.contains(&0)
        && !p.strides.contains(&0)
        && !p.dilations.contains(&0)
        && p.out_h > 0
        && p.out_w > 0
}

/// Windowed pooling `p` of blocked `x` (`[n, c / 8, h, w, 8]`) into the
/// blocked `[n, c / 8, out_h, out_w, 8]`. Each window is reduced over the
/// taps inside the input in the NCHW kernel's order (rows, then columns
/// within a row) with its steps (see `common::pool_reduce`), eight
/// channels side by side: the same bits. The taps inside are a range per
/// output row and per output column, found once for the whole call
/// instead of tested per tap.
pub(super) fn window(p: &Pool2dParams, x: &[f32]) -> Result<Vec<f32>> {
    // SAFETY: `simd_level` is a level this CPU has.
    unsafe { window_at(simd_level(), p, x) }
}

/// [`window`], compiled for vectors of `level` (the tests run each).
///
/// # Safety
/// The CPU has `level`'s features (it is at most `detected_level()`).
pub(super) unsafe fn window_at(level: SimdLevel, p: &Pool2dParams, x: &[f32]) -> Result<Vec<f32>> {
    let (h, w, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    let blocks = p.batch * p.channels / L;
    if !is_window(p) || x.len() != blocks * h * w * L {
        return Err(Error::operation(
            "pool2d: the operands do not match the parameters",
        ));
    }
    // Every element is written below (each output row by `window_rows`).
    let mut out = Buf::try_f32_for_overwrite(blocks * oh * ow * L)?;
    let taps = Taps::new(p)?;
    // SAFETY: the caller's promise: the CPU has `level`.
    unsafe {
        match p.kind {
            PoolKind::Max => window_rows(level, p, x, &taps, &mut out, Max),
            PoolKind::Average => window_rows(level, p, x, &taps, &mut out, Sum::<false>),
            PoolKind::L2 => window_rows(level, p, x, &taps, &mut out, Sum::<true>),
        }
    }
    Ok(out)
}

/// Output positions of a row whose 3x3 windows [`window_rows`] reduces
/// together.
const GROUP: usize = 4;

/// Windows [`max3x3_row`] takes side by side.
const MAX_GROUP: usize = 4;

/// A row of whole 3x3 max windows ([`max3x3_row`] for one kind).
type MaxRow = unsafe fn(*const f32, [usize; 3], usize, *mut f32);

/// The [`MaxRow`] of `level`'s vectors, where it has one (8-lane
/// vectors: AVX2 on x86-64, NEON on aarch64).
fn max3x3_for(level: SimdLevel) -> Option<MaxRow> {
    #[cfg(target_arch = "x86_64")]
    if level >= SimdLevel::Avx2 {
        return Some(max3x3_avx2);
    }
    #[cfg(target_arch = "aarch64")]
    {
        let _ = level;
        return Some(max3x3_neon);
    }
    #[allow(unreachable_code)]
    {
        let _ = level;
        None
    }
}

/// [`max3x3_row`] on `__m256`.
///
/// # Safety
/// The CPU has AVX2 and FMA; as for [`max3x3_row`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn max3x3_avx2(x: *const f32, steps: [usize; 3], n: usize, out: *mut f32) {
    // SAFETY: the features are enabled here; the rest is the caller's.
    unsafe { max3x3_row::<std::arch::x86_64::__m256>(x, steps, n, out) }
}

/// [`max3x3_row`] on `Neon8`.
///
/// # Safety
/// As for [`max3x3_row`] (every aarch64 CPU has NEON).
#[cfg(target_arch = "aarch64")]
unsafe fn max3x3_neon(x: *const f32, steps: [usize; 3], n: usize, out: *mut f32) {
    // SAFETY: NEON is aarch64's baseline; the rest is the caller's.
    unsafe { max3x3_row::<super::simd::Neon8>(x, steps, n, out) }
}

/// `n` 3x3 max windows side by side in an output row, every tap inside
/// the input, one channel block (a vector of kind `V`) each: window `j`'s
/// tap (ky, kx) is the block of 8 at `x + j * s + ky * r + kx * d` (`[s,
/// r, d]` = `steps`, in floats). Each window's result has the bits of
/// [`Max`]'s steps over its taps in order: each row's three taps are
/// first reduced among themselves, off the window's chain of dependent
/// steps (the first of their largest, as `v > m` keeps the earlier of
/// equals, and their first NaN, else their last value), then the
/// window's largest and first NaN take one step each; a NaN makes the
/// row's largest meaningless, but the window's result is then its first
/// NaN. The generic loop took 131 us for SqueezeNet's first (3x3 at
/// stride 2 of blocked 64 x 111 x 111) on an AVX-512 Zen 5 at one
/// thread: its 8-lane arrays were merged into 16-lane vectors with
/// shuffles, and every tap's index was checked.
///
/// # Safety
/// The CPU has `V`'s features; for `j < n` and `ky, kx < 3` the 8 floats
/// at `x + j * s + ky * r + kx * d` are readable, and `out .. out + n *
/// 8` is writable and not read meanwhile.
#[inline(always)]
pub(super) unsafe fn max3x3_row<V: Block8>(
    x: *const f32,
    steps: [usize; 3],
    n: usize,
    out: *mut f32,
) {
    let mut j = 0;
    // SAFETY: windows j .. j + MAX_GROUP (or j) are among the `n` the
    // caller vouched for; `V`'s features are the caller's.
    unsafe {
        while j + MAX_GROUP <= n {
            max3x3::<V, MAX_GROUP>(x.add(j * steps[0]), steps, out.add(j * L));
            j += MAX_GROUP;
        }
        while j < n {
            max3x3::<V, 1>(x.add(j * steps[0]), steps, out.add(j * L));
            j += 1;
        }
    }
}

/// `G` windows of [`max3x3_row`], their chains side by side.
///
/// # Safety
/// As for [`max3x3_row`] with `n` = `G`.
#[inline(always)]
unsafe fn max3x3<V: Block8, const G: usize>(x: *const f32, [s, r, d]: [usize; 3], out: *mut f32) {
    // SAFETY: the caller's: `V`'s features, every tap block readable,
    // the G output blocks writable.
    unsafe {
        let mut max = [V::splat(MAX_IDENTITY); G];
        let mut nan = [V::splat(0.0); G];
        for ky in 0..3 {
            for k in 0..G {
                let at = x.add(k * s + ky * r);
                let (a, b, c) = (V::load(at), V::load(at.add(d)), V::load(at.add(2 * d)));
                // `max(u, v)` is `u > v ? u : v`.
                let largest = V::max(c, V::max(b, a));
                let first = V::nan_or(a, V::nan_or(b, c));
                max[k] = V::max(largest, max[k]);
                nan[k] = V::nan_or(nan[k], first);
            }
        }
        for k in 0..G {
            V::nan_or(nan[k], max[k]).store(out.add(k * L));
        }
    }
}

/// [`window`]'s loops, output row by output row, reducing with `red`
/// over the taps inside the input, `taps`.
///
/// # Safety
/// The CPU has `level`'s features.
unsafe fn window_rows<R: Reduce<L>>(
    level: SimdLevel,
    p: &Pool2dParams,
    x: &[f32],
    taps: &Taps,
    out: &mut [f32],
    red: R,
) {
    let (h, w, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    let [kh, kw] = p.window;
    let [sh, sw] = p.strides;
    let [dh, dw] = p.dilations;
    let (pt, pl) = (p.padding[0], p.padding[2]);
    let row = ow * L;
    let Taps { rows, cols, .. } = taps;
    // Max over 3x3 windows: the output columns whose windows lie inside
    // the input across (a run: the windows in between the padded ones)
    // go to the kernel of `level`'s vectors, where it has one.
    let fast = max3x3_for(level).filter(|_| R::MAX && (kh, kw) == (3, 3));
    let c0 = cols.iter().position(|&c| c == (0, 3)).unwrap_or(ow);
    let c1 = c0 + cols[c0..].iter().take_while(|&&c| c == (0, 3)).count();
    let run = |(r, dst): (usize, &mut [f32])| {
        let (b, oy) = (r / oh, r % oh);
        // The plane's pixels, 8 channels each.
        let (plane, _) = x[b * h * w * L..(b + 1) * h * w * L].as_chunks::<L>();
        let (y0, y1) = rows[oy];
        // Compiled for `level`'s vectors: a tap is then one 8-lane
        // operation or two.
        // SAFETY: the caller's promise: the CPU has `level`.
        unsafe {
            with_simd_at(
                level,
                #[inline(always)]
                || {
                    // 3x3 windows inside the input (most of them in the
                    // common pools): fixed trip counts, unrolled.
                    let inner = (y0, y1) == (0, 3) && (kh, kw) == (3, 3);
                    let mut ox = 0;
                    while ox < ow {
                        if let (true, Some(f)) = (inner && ox == c0, fast) {
                            let at = ((oy * sh - pt) * w + c0 * sw - pl) * L;
                            let steps = [sw * L, dh * w * L, dw * L];
                            let d = &mut dst[c0 * L..c1 * L];
                            // SAFETY (this closure runs inside the
                            // unsafe block above): `fast` is for `level`, whose features
                            // this CPU has (the caller's promise). Windows
                            // c0..c1 of this row lie inside the input
                            // (`inner`: the row's taps in rows 0..3 of the
                            // window, each column's in 0..3 across), so
                            // each tap's 8 floats lie in `plane`, which
                            // `at` and `steps` address in floats; `d` is
                            // their output blocks, borrowed mutably here.
                            f(
                                plane.as_ptr().cast::<f32>().add(at),
                                steps,
                                c1 - c0,
                                d.as_mut_ptr(),
                            );
                            ox = c1;
                            continue;
                        }
                        // GROUP such windows side by side: each output's taps
                        // are one chain of dependent steps (9 maxima of 4
                        // cycles each), so outputs taken one at a time wait
                        // on that latency; taken together the chains overlap.
                        // Each output still takes its taps in the same order.
                        if inner
                            && ox + GROUP <= ow
                            && cols[ox..ox + GROUP].iter().all(|&c| c == (0, 3))
                        {
                            let mut acc = [red.init(); GROUP];
                            let base = (oy * sh - pt) * w + ox * sw - pl;
                            for ky in 0..3 {
                                for kx in 0..3 {
                                    for (j, a) in acc.iter_mut().enumerate() {
                                        red.step(a, &plane[base + j * sw + ky * dh * w + kx * dw]);
                                    }
                                }
                            }
                            for (a, d) in acc.into_iter().zip(dst[ox * L..].chunks_exact_mut(L)) {
                                red.finish(a, 9, d);
                            }
                            ox += GROUP;
                            continue;
                        }
                        let (x0, x1) = cols[ox];
                        let d = &mut dst[ox * L..][..L];
                        let mut acc = red.init();
                        if inner && (x0, x1) == (0, 3) {
                            let base = (oy * sh - pt) * w + ox * sw - pl;
                            for ky in 0..3 {
                                for kx in 0..3 {
                                    red.step(&mut acc, &plane[base + ky * dh * w + kx * dw]);
                                }
                            }
                            red.finish(acc, 9, d);
                            ox += 1;
                            continue;
                        }
                        for ky in y0..y1 {
                            let line = &plane[(oy * sh + ky * dh - pt) * w..][..w];
                            for kx in x0..x1 {
                                red.step(&mut acc, &line[ox * sw + kx * dw - pl]);
                            }
                        }
                        red.finish(acc, (y1 - y0) * (x1 - x0), d);
                        ox += 1;
                    }
                },
            )
        }
    };
    // Rows per task: about 16 K floats of output and taps each.
    let per = ((1 << 14) / (row * kh * kw).max(1)).max(1);
    if out.len() * kh * kw >= 1 << 16 {
        out.par_chunks_mut(row * per)
            .enumerate()
            .for_each(|(t, rows)| {
                rows.chunks_mut(row)
                    .enumerate()
                    .for_each(|(i, d)| run((t * per + i, d)))
            });
    } else {
        out.chunks_mut(row).enumerate().for_each(run);
    }
}

/// Concatenation on the channel axis of blocked operands whose channels
/// are whole blocks: in `[n, c / 8, h, w, 8]` each input's part of a
/// batch element is one contiguous run, so the result is those runs one
/// after another, batch element by batch element. `n` is the batch.
pub(super) fn concat(inputs: &[&[f32]], n: usize) -> Result<Vec<f32>> {
    let total: usize = inputs.iter().map(|x| x.len()).sum();
    if n == 0 || inputs.iter().any(|x| !x.len().is_multiple_of(n)) {
        return Err(Error::operation(
            "concat: the operands do not match the parameters",
        ));
    }
    let mut out = Buf::try_f32_for_overwrite(total)?;
    // The runs of the output in order: each image's part of each input.
    let runs = || {
        (0..n).flat_map(|b| {
            inputs
                .iter()
                .map(move |x| &x[b * x.len() / n..(b + 1) * x.len() / n])
        })
    };
    // Pieces of the output copied by the threads side by side: a
    // SqueezeNet concat of two 64 x 55 x 55 expands is 1.5 MB, which one
    // thread copied in 90-140 us at either thread count (SqueezeNet's
    // eight concats at two threads, fastest of 40 runs: 307-330 us
    // copied whole, 206-228 in pieces; one thread the same either way).
    let copy = |(i, dst): (usize, &mut [f32])| {
        let (mut at, mut skip) = (i * CONCAT_PIECE, 0);
        let mut rest = dst;
        for run in runs() {
            if skip + run.len() <= at {
                skip += run.len();
                continue;
            }
            let from = &run[at - skip..];
            let k = from.len().min(rest.len());
            let (head, tail) = rest.split_at_mut(k);
            head.copy_from_slice(&from[..k]);
            rest = tail;
            if rest.is_empty() {
                break;
            }
            skip += run.len();
            at = skip;
        }
    };
    if total >= 2 * CONCAT_PIECE {
        out.par_chunks_mut(CONCAT_PIECE).enumerate().for_each(copy);
    } else {
        copy((0, &mut out[..]));
    }
    Ok(out)
}

/// Floats of a blocked concat's output per task (256 KiB).
const CONCAT_PIECE: usize = 1 << 16;

//! The direct (groups 1) blocked convolution: tiles of output pixels
//! by output channel blocks, and its epilogue (bias, bounds, residual).

use rayon::prelude::*;

use super::par::{for_units, Out, PAR_WORK};
use super::simd::{Block8, Vf};
use super::{Panel, L};
use crate::error::Result;
use crate::graph::ops::conv::Conv2dParams;

/// Bytes of input a direct convolution's task reads (kept in L2 while
/// each filter panel passes over it).
const CHUNK_BYTES: usize = 160 << 10;
/// Fewest output pixels per task.
const MIN_CHUNK: usize = 6;
/// The most pixels of any tile ([`tile_pixels`]).
const MAX_TILE: usize = 16;
/// Output pixels per tile for `nv` vectors of `w` lanes per pixel: on
/// AVX2 12 accumulators of the 16 ymm registers (12 independent chains
/// of multiply-adds keep both FMA pipes busy; with 6 a single block
/// waited on their latency: 144 -> 24 channels on 56x56, 418 -> 382
/// us), on AVX-512 24 of the 32 zmm registers, or 16 for a panel of one
/// zmm vector (see [`one_vector`]: with 20 or 24 pixels such a tile ran
/// at half the speed, its accumulators spilled).
pub(super) fn tile_pixels(w: usize, nv: usize) -> usize {
    match (w, nv) {
        (8, _) => 12 / nv,
        (_, 1) => 16,
        _ => 24 / nv,
    }
}

/// Whether a panel of two blocks runs on one vector of `V` (16 pixels
/// by one zmm vector on AVX-512) rather than on two of `N` (6 pixels by
/// two ymm vectors). Both sum each output in the same order, so the
/// bits are the same; what differs is the loads. Each multiply-add of
/// the zmm tile takes one broadcast of an input value, the ymm tile's
/// take one for two multiply-adds of half the width. Measured on an
/// AVX-512 Zen 5, one thread, a 1x1 convolution to 16 channels after a
/// blocked layer: from 128 channels at 55x55 99-101 us on ymm against
/// 61-64 on zmm, from 64 at 55x55 50 against 32, from 144 to 24
/// channels at 56x56 (a panel of two blocks and one of one) 187
/// against 144, from 384 to 48 at 13x13 33 against 27. An earlier
/// measurement, on the machine of its day, had the zmm tile slower (24
/// channels from 144 at 56x56: 340 against 264 us), so the choice is
/// measured once per process on the CPU at hand (`measured_one_vector`); the
/// portable 16-lane form of the tests always takes it, so that the
/// tests compare it with the 8-lane forms bit for bit.
///
/// # Safety
/// The CPU has `V`'s and `N`'s features.
pub(super) unsafe fn one_vector<V: Vf, N: Vf>() -> bool {
    if V::W != 2 * N::W {
        return false;
    }
    if !V::HW {
        return true;
    }
    // SAFETY: a hardware `V` twice `N`'s width is `__m512` beside
    // `__m256` (NEON has one width), whose features (AVX-512F, AVX2 and
    // FMA) the caller vouches for.
    unsafe { measured_one_vector() }
}

/// [`one_vector`] for `__m512` beside `__m256`: whichever of the two
/// tiles passed a 1x1 convolution from 64 channels to 16 over 28x28
/// pixels faster, the fastest of eight alternating runs of each (about
/// 0.3 ms, once per process).
///
/// # Safety
/// The CPU has AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
unsafe fn measured_one_vector() -> bool {
    use std::arch::x86_64::{__m256, __m512};
    static CHOICE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CHOICE.get_or_init(|| {
        const ICB: usize = 8;
        const COUNT: usize = 28 * 28;
        let x: Vec<f32> = (0..ICB * COUNT * L)
            .map(|i| (i % 17) as f32 * 0.25 - 2.0)
            .collect();
        let w: Vec<f32> = (0..ICB * L * 2 * L)
            .map(|i| (i % 5) as f32 * 0.125 - 0.25)
            .collect();
        let mut out = vec![0.0f32; 2 * COUNT * L];
        let panels = [Panel {
            ob0: 0,
            nb: 2,
            off: 0,
        }];
        let g = Geometry {
            px: L,
            taps: &[0],
            ibs: COUNT * L,
            icb: ICB,
            cl: L,
            cs: 1,
            obs: COUNT * L,
            lo: f32::NEG_INFINITY,
            hi: f32::INFINITY,
        };
        super::first_is_faster(|one| {
            // SAFETY: the caller's features are both kinds'. `g` is a 1x1
            // unit-stride geometry over `ICB` blocks of `COUNT` pixels,
            // which `x` holds; `w` is one panel of two blocks, `ICB * 8`
            // rows of 16 floats; `out` holds two output blocks of `COUNT`
            // pixels; no bias, no residual.
            unsafe {
                pointwise_with::<__m512, __m256>(
                    one,
                    w.as_ptr(),
                    &panels,
                    &g,
                    x.as_ptr(),
                    std::ptr::null(),
                    std::ptr::null(),
                    out.as_mut_ptr(),
                    COUNT,
                )
            };
            std::hint::black_box(&out);
        })
    })
}

/// Not reached off x86-64 (no kind there is twice another's width).
///
/// # Safety
/// None needed.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn measured_one_vector() -> bool {
    false
}

/// The pixels of the next tile, of `left` pixels still to do in tiles
/// of at most `mr`: as many tiles as `mr` needs, of even sizes. 13
/// pixels run as 5, 4 and 4 rather than 6, 6 and 1: a tile of one
/// pixel has two chains of multiply-adds, which wait on their latency
/// for as long as a full tile takes.
fn tile_len(mr: usize, left: usize) -> usize {
    left.div_ceil(left.div_ceil(mr).max(1))
}

/// Rows of the filter panel that a tile's step prefetches ahead of the
/// one it reads (x86-64). A deep layer's panel comes from memory on its
/// first tile when the network's filters do not stay in cache (ResNet-50's
/// last stages hold 4 to 9 MiB per layer), and the hardware prefetcher
/// starts over at each 4 KiB page. Measured in ResNet-50 on an Intel
/// Xeon with AVX-512, one thread, fastest of 10 runs: the 3x3 from 512
/// channels at stride 2 to 7x7 3457 against 2826 us, the 3x3 at 7x7
/// 2334 against 2128.
///
/// Such a layer is still slower among others than alone: twelve 3x3
/// convolutions from 512 channels at 7x7 in one graph (113 MB of
/// filters) took 2.2-2.8 ms each, one alone (its filter left in L3 by
/// the run before) 1.6-1.9 ms. Tried and not kept, each measured in
/// turns with the build before: the tiles of a chunk passing together
/// over 16 KiB spans of the panel (each tile's sums stored and resumed
/// between spans, the same bits), with the next span asked for during
/// the current one, each tile its share (5-10% faster in the twelve,
/// 5-10% slower alone, the same in ResNet-50 within its noise); huge
/// pages for the packed filters (`MADV_COLLAPSE`: no change).
#[cfg(all(target_arch = "x86_64", not(miri)))]
const PF_ROWS: usize = 32;

/// What every tile of one direct convolution shares.
pub(super) struct Geometry<'a> {
    /// Floats between the tile's pixels in the input (stride * 8).
    pub px: usize,
    /// Offsets of the kernel taps from a pixel's first tap.
    pub taps: &'a [usize],
    /// Floats between input channel blocks.
    pub ibs: usize,
    pub icb: usize,
    /// Channels of an input block and the floats between them (plain
    /// input: all its channels, one block, a plane apart).
    pub cl: usize,
    pub cs: usize,
    /// Floats between output channel blocks.
    pub obs: usize,
    pub lo: f32,
    pub hi: f32,
}

/// One tile: `M` output pixels (consecutive in a row) by `NV` vectors
/// of output channels (`NV * W / 8` blocks), summed over every input
/// block and tap, then the bias, the bounds and the residual (see
/// [`Ends`]). Each output sums its terms in the same order whatever the
/// vector width, so every [`Vf`] gives the same bits.
///
/// Each input block is `g.cl` channels `g.cs` floats apart: 8 and 1 for
/// a blocked input, all of them and a plane for an NCHW one (`plain`).
///
/// # Safety
/// - The CPU has `V`'s features (run it inside [`Vf::with`]).
/// - Input: for every block `ib < g.icb`, tap `t` of `g.taps`, channel
///   `ci < g.cl` and pixel `r < M`, the float at `x + ib * g.ibs + t +
///   ci * g.cs + o(r)` is readable, where `o(r)` is `r * px`, or
///   `ends.offs[r]` when `PX` is [`CROSS`] (then `ends.offs` holds `M`
///   offsets) (`x` is the first pixel's first tap in input block 0,
///   and every tap of every pixel lies inside the input).
/// - `w` is the panel: `g.icb * g.taps.len() * g.cl` rows of `NV * W`
///   floats, readable.
/// - Output: `out` is the first pixel in output block `ob0`, and for
///   `v < NV`, `k < W / 8`, `r < M` the 8 floats at `out + (v * W / 8 +
///   k) * g.obs + r * 8` (pixel `r` of block `ob0 + v * W / 8 + k`) are
///   writable and accessed by no one else during the call; `ends.sum`,
///   when not null, is readable at the same offsets, and `ends.bias`,
///   when not null, holds the panel's `NV * W` channels.
#[inline(always)]
unsafe fn tile<V: Vf, const M: usize, const NV: usize, const PX: usize>(
    g: &Geometry,
    x: *const f32,
    w: *const f32,
    ends: Ends,
    out: *mut f32,
) {
    let Ends {
        bias, sum, next, ..
    } = ends;
    // Where this tile's steps ask for the next panel (see `Ends::next`).
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    let mut np = next;
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    let _ = next;
    // SAFETY: `V`'s features, which the caller guarantees.
    let mut acc = unsafe { [[V::splat(0.0); NV]; M] };
    // Floats between the tile's pixels in the input: known at compile
    // time for a blocked input at unit stride (`PX` = 8) or a stride of
    // 2 (`STRIDE2`), so that every
    // pixel's value is one base pointer plus a constant (otherwise the
    // compiler kept a pointer per pixel and stepped each one).
    let px = if PX == 0 || PX == CROSS { g.px } else { PX };
    // A tile across an output row's end: each pixel's own offset (kept in
    // registers; the other forms compute `r * px`, constant at unit
    // stride).
    let mut offs = [0usize; M];
    if PX == CROSS {
        for (r, o) in offs.iter_mut().enumerate() {
            // SAFETY: `ends.offs` holds `M` offsets for a crossing tile
            // (the contract of `Ends`).
            *o = unsafe { *ends.offs.add(r) };
        }
    }
    let at = |r: usize| if PX == CROSS { offs[r] } else { r * px };
    let mut wp = w;
    // Floats between the output blocks of one vector's lane groups, and
    // between vectors.
    let (obs, vs) = (g.obs, V::W / L * g.obs);
    // SAFETY: `V`'s features are the caller's. Every input load is at
    // `x + ib * g.ibs + t + ci * g.cs + at(r)` for `ib < g.icb`, `t` in
    // `g.taps`, `ci < g.cl`, `r < M` (`at(r)` is `r * px`, `px` being
    // `g.px` or, when nonzero and not `CROSS`, `PX`, which `run_tile`
    // sets only where they are equal; or the pixel's offset from
    // `ends.offs`), readable by the contract; `wp` steps through the panel's `g.icb *
    // g.taps.len() * g.cl` rows of `NV * W` floats once each, in order,
    // which is the panel's size; the bias loads read `NV * W` floats of
    // the panel's channels. Each store (and residual load) is at `out +
    // v * vs + r * 8` plus `k * obs` for lane group `k` (`vs` = `W / 8`
    // blocks of `obs`): pixel `r` of block `ob0 + v * W / 8 + k`, one of
    // the cells that the contract gives this call alone.
    unsafe {
        for ib in 0..g.icb {
            let xb = x.add(ib * g.ibs);
            for &t in g.taps {
                let a = xb.add(t);
                // One input channel: a row of the panel times each
                // pixel's value. (A macro, not a closure: a closure
                // would not inherit `V`'s features if not inlined.)
                macro_rules! step {
                    ($c:expr) => {{
                        let c: *const f32 = $c;
                        let mut bv = [V::splat(0.0); NV];
                        for (v, b) in bv.iter_mut().enumerate() {
                            *b = V::load(wp.add(v * V::W));
                        }
                        // A prefetch is a hint that reads nothing and
                        // cannot fault, so an address past the panel is
                        // sound (`wrapping_add` keeps the arithmetic
                        // defined). Not under Miri, which has no prefetch.
                        #[cfg(all(target_arch = "x86_64", not(miri)))]
                        {
                            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
                            let ahead = wp.wrapping_add(PF_ROWS * NV * V::W);
                            _mm_prefetch::<_MM_HINT_T0>(ahead.cast::<i8>());
                            _mm_prefetch::<_MM_HINT_T0>(
                                ahead.wrapping_add(NV * V::W - 1).cast::<i8>(),
                            );
                            if !np.is_null() {
                                use std::arch::x86_64::_MM_HINT_T1;
                                _mm_prefetch::<_MM_HINT_T1>(np.cast::<i8>());
                                np = np.wrapping_add(NEXT_STEP);
                            }
                        }
                        wp = wp.add(NV * V::W);
                        for (r, row) in acc.iter_mut().enumerate() {
                            let av = V::splat(*c.add(at(r)));
                            for (y, &b) in row.iter_mut().zip(&bv) {
                                *y = V::fma(av, b, *y);
                            }
                        }
                    }};
                }
                // A loop, not unrolled 8 times: unrolled, the
                // compiler hoisted loads and spilled accumulators (12
                // pixels by 2 zmm vectors).
                for ci in 0..g.cl {
                    step!(a.add(ci * g.cs));
                }
            }
        }
        let (lo, hi) = (V::splat(g.lo), V::splat(g.hi));
        for v in 0..NV {
            let b = if bias.is_null() {
                V::splat(-0.0)
            } else {
                V::load(bias.add(v * V::W))
            };
            for (r, row) in acc.iter().enumerate() {
                // Second operands win on NaN and equal zeros: the
                // clamp operator's results.
                let mut y = V::min(hi, V::max(lo, V::add(row[v], b)));
                if !sum.is_null() {
                    y = V::add(y, V::load_split(sum.add(v * vs + r * L), obs));
                }
                y.store_split(out.add(v * vs + r * L), obs);
            }
        }
    }
}

/// What a tile adds to its products: the panel's bias (its channels'
/// values, or null) and, after the bounds, a residual laid out as the
/// output (the tile's first cell, or null); and for a tile whose pixels
/// run across an output row's end (null for the others), the offset of
/// each pixel's first tap from `x`, one per pixel of the tile.
#[derive(Clone, Copy)]
struct Ends {
    bias: *const f32,
    sum: *const f32,
    offs: *const usize,
    /// Null, or where in the next panel this tile's steps start asking
    /// for it to be brought into L2, one line ([`NEXT_STEP`] floats) per
    /// step (x86-64; a hint, which reads nothing and cannot fault, so it
    /// may point anywhere).
    next: *const f32,
}

/// Floats of the next panel that a tile's step asks for: one cache line.
const NEXT_STEP: usize = 16;

/// Where tile `k` (from 0) of a panel's tiles in a task starts asking
/// for the next panel `nx` (`rows` rows, as its own panel has), or null. A
/// deep layer's panel comes from memory on its first tile, which then
/// waits on it at the memory's pace (ResNet-50's 3x3 convolutions from
/// 512 channels at 7x7: 9.4 MB of filter for 49 pixels); the tiles after
/// the first read their panel from L2 and leave the memory idle, so
/// they ask for the next panel's lines, a line per step, each tile the
/// lines after the tile before's, and the next panel's first tile finds
/// them in L2. The first tile asks for none: its own panel's lines are
/// what the memory is busy with.
pub(super) fn next_from(k: usize, nx: Option<&Panel>, rows: usize, w: *const f32) -> *const f32 {
    match nx {
        Some(nx) if k > 0 && (k - 1) * rows * NEXT_STEP < rows * nx.nb * L => {
            w.wrapping_add(nx.off + (k - 1) * rows * NEXT_STEP)
        }
        _ => std::ptr::null(),
    }
}

/// The `PX` of a tile across an output row's end: pixel `r`'s first tap
/// is at `x + ends.offs[r]`, not at one stride from the one before.
/// Without such tiles a row of 7 pixels (ResNet's last stage) ran as a
/// tile of 6 and a tile of 1, whose two chains of multiply-adds wait on
/// their latency.
const CROSS: usize = usize::MAX;

/// The `PX` of a blocked input read at a stride of 2: known at compile
/// time, each pixel's value is at a constant offset from one pointer, as
/// at unit stride; with `PX` 0 the compiler kept a pointer per pixel of
/// the tile and spilled one. ResNet-50's 3x3 convolution from 128
/// channels at stride 2, one thread, in the network (fastest of 20 runs,
/// two rounds in turns): 2034-2108 against 1899-1956 us; alone (its
/// input and filter in cache, fastest of 8 rounds of 20 in turns) 3-7%
/// faster for 64 and 128 channels, within 2% for 256 and 512.
const STRIDE2: usize = 2 * L;

/// [`tile`] for a run-time pixel count (1..=[`tile_pixels`]) and vector
/// count (1 or 2), compiled with `V`'s features; `PX` is `g.px` when
/// not 0.
///
/// # Safety
/// The CPU has `V`'s features; `m` and `nv` are those of a tile that
/// [`tile`]'s contract holds for (`M = m`, `NV = nv`).
#[allow(clippy::too_many_arguments)]
unsafe fn tile_n<V: Vf, const PX: usize>(
    m: usize,
    nv: usize,
    g: &Geometry,
    x: *const f32,
    w: *const f32,
    ends: Ends,
    out: *mut f32,
) {
    macro_rules! go {
        ($($nv:literal: $($m:literal)*);*) => {
            match (m, nv) {
                $($(($m, $nv) => V::with(
                    #[inline(always)]
                    || tile::<V, $m, $nv, PX>(g, x, w, ends, out),
                ),)*)*
                _ => unreachable!("tile of {m} pixels by {nv} vectors"),
            }
        };
    }
    // SAFETY: the caller guarantees `V`'s features, which `V::with`
    // enables; each arm calls `tile` with `M = m` and `NV = nv`, the
    // tile that the caller's contract covers (other sizes panic).
    unsafe {
        if V::W == 8 {
            go!(2: 1 2 3 4 5 6; 1: 1 2 3 4 5 6 7 8 9 10 11 12)
        } else {
            go!(1: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16;
                2: 1 2 3 4 5 6 7 8 9 10 11 12; 4: 1 2 3 4 5 6)
        }
    }
}

/// How panel `pn` runs: on `V` (`wide`) when its channels fill two or
/// more of `V`'s vectors, or one where `one` says so ([`one_vector`]),
/// else on `N`; with `nv` vectors per pixel and tiles of `mr` pixels.
fn form<V: Vf, N: Vf>(pn: &Panel, one: bool) -> (bool, usize, usize) {
    // A narrow tile's vector is one block: the tiles' and the callers'
    // bounds count on it.
    const { assert!(N::W == L) };
    let vectors = if one { 1 } else { 2 };
    let wide = (pn.nb * L).is_multiple_of(V::W) && pn.nb * L >= vectors * V::W;
    let (vw, nv) = match wide {
        true => (V::W, pn.nb * L / V::W),
        false => (N::W, pn.nb),
    };
    (wide, nv, tile_pixels(vw, nv))
}

/// [`tile_n`] on `V` or `N` as [`form`] chose, with the pixel step
/// known at compile time where it is one blocked pixel.
///
/// # Safety
/// The CPU has `V`'s features when `wide`, `N`'s when not; [`tile`]'s
/// contract holds for `m` pixels by `nv` vectors of that kind (as
/// [`form`] gives them for a panel: its `nb` blocks either way).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn run_tile<V: Vf, N: Vf>(
    wide: bool,
    m: usize,
    nv: usize,
    g: &Geometry,
    x: *const f32,
    w: *const f32,
    ends: Ends,
    out: *mut f32,
) {
    // SAFETY: the caller's contract, for the kind that `wide` picks;
    // `PX` is `L` or `STRIDE2` only where `g.px` is, so `tile` steps as `g` says,
    // and `CROSS` only where `ends.offs` holds the tile's offsets.
    unsafe {
        match (wide, g.px, !ends.offs.is_null()) {
            (true, _, true) => tile_n::<V, CROSS>(m, nv, g, x, w, ends, out),
            (false, _, true) => tile_n::<N, CROSS>(m, nv, g, x, w, ends, out),
            (true, L, false) => tile_n::<V, L>(m, nv, g, x, w, ends, out),
            (true, STRIDE2, false) => tile_n::<V, STRIDE2>(m, nv, g, x, w, ends, out),
            (true, _, false) => tile_n::<V, 0>(m, nv, g, x, w, ends, out),
            (false, L, false) => tile_n::<N, L>(m, nv, g, x, w, ends, out),
            (false, _, false) => tile_n::<N, 0>(m, nv, g, x, w, ends, out),
        }
    }
}

/// `count` consecutive pixels of a 1x1 convolution at unit stride
/// (`g.taps` is `[0]`, `g.px` one pixel) through every panel of the
/// filter packed at `w`: `x` is
/// the first pixel in input block 0 (blocks `g.ibs` apart), `out` and
/// `sum` (or null) the first pixel in output block 0 (blocks `g.obs`
/// apart), `bias` all output channels' or null. The tiles of
/// [`direct`], so the same bits.
///
/// # Safety
/// - The CPU has `V`'s and `N`'s features.
/// - `g` is a 1x1 unit-stride geometry: `taps` `[0]`, `px` and `cl` 8,
///   `cs` 1.
/// - `w` holds the filter packed for `panels` ([`super::panel_list`]
///   with `per` = `g.icb * 8`): panel `pn` at `w + pn.off`, `g.icb * 8`
///   rows of `pn.nb * 8` floats.
/// - For `ib < g.icb` and `q < count`, the 8 floats at
///   `x + ib * g.ibs + q * 8` are readable.
/// - For every block `ob` of the panels and `q < count`, the 8 floats
///   at `out + ob * g.obs + q * 8` are writable and accessed by no one
///   else during the call, and those at `sum` (when not null) at the
///   same offset readable; `bias`, when not null, holds the panels'
///   channels (`ob * 8 .. ob * 8 + 8`).
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn pointwise<V: Vf, N: Vf>(
    w: *const f32,
    panels: &[Panel],
    g: &Geometry,
    x: *const f32,
    bias: *const f32,
    sum: *const f32,
    out: *mut f32,
    count: usize,
) {
    // SAFETY: the caller's contract is `pointwise_with`'s, and includes
    // `one_vector`'s (the features of both kinds).
    unsafe {
        let one = one_vector::<V, N>();
        pointwise_with::<V, N>(one, w, panels, g, x, bias, sum, out, count)
    }
}

/// [`pointwise`] with panels of one `V` vector on `V` or not (`one`,
/// see [`form`]): the same bits either way.
///
/// # Safety
/// As for [`pointwise`].
#[allow(clippy::too_many_arguments)]
unsafe fn pointwise_with<V: Vf, N: Vf>(
    one: bool,
    w: *const f32,
    panels: &[Panel],
    g: &Geometry,
    x: *const f32,
    bias: *const f32,
    sum: *const f32,
    out: *mut f32,
    count: usize,
) {
    for pn in panels {
        let (wide, nv, mr) = form::<V, N>(pn, one);
        let mut q = 0;
        while q < count {
            let m = tile_len(mr, count - q);
            // SAFETY: `run_tile`'s contract, from ours: `form` gives the
            // panel's `nb` blocks as `nv` vectors and `m <= mr`; `x + q *
            // 8` is pixel `q` of input block 0, and the tile reads pixels
            // `q .. q + m` (`m <= count - q`) of blocks below `g.icb` at
            // tap 0; it writes pixels `q .. q + m` of blocks `pn.ob0 ..
            // pn.ob0 + pn.nb` at `out + at` (and reads `sum + at`), ours
            // alone; `bias + pn.ob0 * 8` is the panel's channels and `w +
            // pn.off` its filter.
            unsafe {
                let at = pn.ob0 * g.obs + q * L;
                let ends = Ends {
                    bias: match bias.is_null() {
                        true => bias,
                        false => bias.add(pn.ob0 * L),
                    },
                    sum: match sum.is_null() {
                        true => sum,
                        false => sum.add(at),
                    },
                    offs: std::ptr::null(),
                    next: std::ptr::null(),
                };
                let wq = w.add(pn.off);
                run_tile::<V, N>(wide, m, nv, g, x.add(q * L), wq, ends, out.add(at));
            }
            q += m;
        }
    }
}

/// The input planes with their padding (zeros) around: `[planes, hp,
/// wp, lanes]` (lanes: 8 for blocks, 1 for NCHW planes). With
/// `from_nchw` (lanes 8) `x` is NCHW and each block's 8 planes are
/// interleaved as they are copied: one pass instead of a layout change
/// and then the padded copy.
fn pad(
    x: &[f32],
    planes: usize,
    (h, w): (usize, usize),
    pad: [usize; 4],
    lanes: usize,
    from_nchw: bool,
) -> Result<Vec<f32>> {
    let [pt, pb, pl, pr] = pad;
    let (hp, wp) = (h + pt + pb, w + pl + pr);
    let mut out = crate::tensor::Buf::try_f32_for_overwrite(planes * hp * wp * lanes)?;
    let fill = |(b, dst): (usize, &mut [f32])| {
        let src = &x[b * h * w * lanes..(b + 1) * h * w * lanes];
        dst[..pt * wp * lanes].fill(0.0);
        dst[(pt + h) * wp * lanes..].fill(0.0);
        for y in 0..h {
            let row = &mut dst[(pt + y) * wp * lanes..(pt + y + 1) * wp * lanes];
            row[..pl * lanes].fill(0.0);
            row[(pl + w) * lanes..].fill(0.0);
            let row = &mut row[pl * lanes..(pl + w) * lanes];
            if from_nchw {
                interleave_row(src, h * w, y * w, row);
            } else {
                row.copy_from_slice(&src[y * w * lanes..(y + 1) * w * lanes]);
            }
        }
    };
    if planes * hp * wp * lanes >= 1 << 16 {
        out.par_chunks_mut(hp * wp * lanes)
            .enumerate()
            .for_each(fill);
    } else {
        out.chunks_mut(hp * wp * lanes).enumerate().for_each(fill);
    }
    Ok(out)
}

/// `row[q * 8 + k] = src[k * hw + at + q]`: one row of 8 NCHW planes
/// (`hw` floats apart) as blocked pixels.
fn interleave_row(src: &[f32], hw: usize, at: usize, row: &mut [f32]) {
    let w = row.len() / L;
    assert!(src.len() >= (L - 1) * hw + at + w);
    // `interleave8` reads `src[at + k * hw + q]` for `k < 8`, `q < w`,
    // the last of which, `7 * hw + at + w - 1`, is inside `src` by the
    // assert; it writes `row[q * 8 + k]`, below `w * 8 <= row.len()`.
    let (x, out) = (src[at..].as_ptr(), row.as_mut_ptr());
    // The pixels done 8 at a time, on AVX2 or NEON.
    #[cfg(target_arch = "x86_64")]
    let q = match is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 detected just above, which `with` enables; the
        // ranges as said above.
        true => unsafe {
            use std::arch::x86_64::__m256;
            __m256::with(
                #[inline(always)]
                || interleave8::<__m256>(x, hw, out, w),
            )
        },
        false => 0,
    };
    // SAFETY: NEON, which every aarch64 CPU has; the ranges as said
    // above.
    #[cfg(target_arch = "aarch64")]
    let q = unsafe {
        use super::simd::Neon8;
        Neon8::with(
            #[inline(always)]
            || interleave8::<Neon8>(x, hw, out, w),
        )
    };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let q = 0;
    for q in q..w {
        for k in 0..L {
            row[q * L + k] = src[k * hw + at + q];
        }
    }
}

/// The whole groups of 8 pixels of [`interleave_row`]; returns how many
/// pixels it wrote.
///
/// # Safety
/// Runs with `T`'s features (inside `T::with`); `x + k * hw + q`
/// readable and `out + q * 8 + k` writable for `k < 8`, `q < w`.
#[inline(always)]
unsafe fn interleave8<T: Block8>(x: *const f32, hw: usize, out: *mut f32, w: usize) -> usize {
    let mut q = 0;
    // SAFETY: `T`'s features are the caller's. With `q + 8 <= w`, each
    // load is `x + k * hw + q .. + 8` and each store `out + (q + j) * 8
    // .. + 8` for `k, j < 8`, inside the ranges the caller makes
    // readable and writable.
    unsafe {
        while q + L <= w {
            // A loop, not `array::from_fn`: a closure would not inherit
            // `T`'s features if not inlined.
            let mut v = [T::splat(0.0); L];
            for (k, vk) in v.iter_mut().enumerate() {
                *vk = T::load(x.add(k * hw + q));
            }
            for (j, tj) in T::transpose8(v).iter().enumerate() {
                tj.store(out.add((q + j) * L));
            }
            q += L;
        }
    }
    q
}

/// A plain (groups 1) convolution of blocked `x` (NCHW with `nchw_in`,
/// which only a padded one takes) into blocked `res`.
///
/// Panels whose channels fill whole `V` vectors run on `V`, the others
/// (a single block) on `N`, of 8 lanes. An OperationError when the padded
/// (or strided) copy of the input cannot be allocated.
///
/// # Safety
/// - The CPU has `V`'s and `N`'s features.
/// - `w`, `panels` and `plain` are `blocked_conv`'s packing of `p`'s
///   filter for these kinds: output channels in whole blocks, input
///   channels too unless `plain` (then at most 8), `w.len()` =
///   `oc * ic * kh * kw`.
/// - `x` holds `batch * ic * in_h * in_w` floats (blocked, or NCHW when
///   `plain` or `nchw_in`; `nchw_in` only with padding), `bias` (if
///   any) `oc`, `sum` (if any) and `res` `batch * oc * out_h * out_w`.
/// - Every tap of every output pixel lies inside the padded input
///   (`super::taps_fit`).
///
/// `super::conv` checks all but the packing, which the plan made for
/// `p`.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn direct<V: Vf, N: Vf>(
    w: &[f32],
    panels: &[Panel],
    plain: bool,
    nchw_in: bool,
    p: &Conv2dParams,
    x: &[f32],
    bias: Option<&[f32]>,
    (lo, hi): (f32, f32),
    (sum, after): (Option<&[f32]>, (f32, f32)),
    res: &mut [f32],
) -> Result<()> {
    let (n, ocb) = (p.batch, p.out_channels / L);
    // SAFETY: the caller vouches for both kinds' features.
    let one_vec = unsafe { one_vector::<V, N>() };
    // Plain input: one block of all its channels, one float per pixel.
    let (icb, lanes) = if plain {
        (1, 1)
    } else {
        (p.in_channels / L, L)
    };
    let ic = p.in_channels;
    let (kh, kw) = (p.kernel_h, p.kernel_w);
    let [pt, pb, pl, pr] = p.padding;
    // A 1x1 kernel at larger strides without padding (ResNet's
    // downsampling shortcuts) reads every `s`-th pixel: those pixels,
    // copied into planes of the output's size, make it the unit-stride
    // form. Read where they lie, a tile's pixels are two or more vector
    // widths apart, and a deep filter's tile spans more lines of input
    // than L1 holds (1024 channels to 2048 at 14x14: 3.7 ms against 2.9
    // after the copy).
    let one = kh == 1 && kw == 1 && p.padding == [0; 4];
    let picked = (one && p.strides != [1, 1] && !plain)
        .then(|| {
            every_sth(
                x,
                n * icb,
                (p.in_h, p.in_w),
                (p.out_h, p.out_w),
                (p.strides[0], p.strides[1]),
            )
        })
        .transpose()?;
    let x: &[f32] = picked.as_deref().unwrap_or(x);
    // A 1x1 kernel at unit strides without padding (or on the picked
    // pixels): the planes are one long row, so tiles run across row ends.
    let flat = one && (p.strides == [1, 1] || picked.is_some());
    let (hp, wp) = if flat {
        (1, p.out_h * p.out_w)
    } else {
        (p.in_h + pt + pb, p.in_w + pl + pr)
    };
    let (oh, ow) = if flat {
        (1, p.out_h * p.out_w)
    } else {
        (p.out_h, p.out_w)
    };
    let (sh, sw) = if flat {
        (1, 1)
    } else {
        (p.strides[0], p.strides[1])
    };
    let planes = if plain { n * ic } else { n * icb };
    let padded = (p.padding != [0; 4])
        .then(|| {
            pad(
                x,
                planes,
                (p.in_h, p.in_w),
                p.padding,
                lanes,
                nchw_in && !plain,
            )
        })
        .transpose()?;
    let xp: &[f32] = padded.as_deref().unwrap_or(x);
    let taps: Vec<usize> = (0..kh)
        .flat_map(|ky| {
            (0..kw).map(move |kx| (ky * p.dilations[0] * wp + kx * p.dilations[1]) * lanes)
        })
        .collect();
    let g = Geometry {
        px: sw * lanes,
        taps: &taps,
        ibs: hp * wp * lanes,
        icb,
        cl: if plain { ic } else { L },
        cs: if plain { hp * wp } else { 1 },
        obs: oh * ow * L,
        lo,
        hi,
    };
    // Bounds after the residual (a relu or clamp folded in, `Sum::after`)
    // are applied to each tile's cells once the tile has stored them, while
    // they are in L1: inside the tile, two more vectors of bounds made the
    // compiler spill accumulators in every tile (ResNet-50 1.5x slower).
    let after = (sum.is_some() && after != (f32::NEG_INFINITY, f32::INFINITY)).then_some(after);
    let pixels = oh * ow;
    // Pixels per task: their input (rows of the kernel's height) stays
    // in L2 while each panel of the filter passes over it. Each task
    // reads the whole filter (its panels), so a filter that L2 does not
    // hold comes from L3 or memory once per chunk: the deep layers of a
    // network (512 channels to 512 by 3x3 is 9 MiB, over 7x7 pixels)
    // then take chunks as large as half of L2 holds, with their panels
    // split among the threads rather than their pixels.
    let per_px = ic * 4 * kh * sh.max(1);
    let half_l2 = super::half_l2();
    let big = w.len() * 4 > half_l2;
    let budget = match big {
        true => half_l2.max(CHUNK_BYTES),
        false => CHUNK_BYTES,
    };
    let chunk = (budget / per_px.max(1)).clamp(MIN_CHUNK, pixels.max(MIN_CHUNK));
    let work = n * pixels * ocb * L * ic * taps.len();
    let par = work >= PAR_WORK;
    let threads = rayon::current_num_threads();
    // A whole number of chunks per thread (then a little smaller).
    let mut chunks = pixels.div_ceil(chunk);
    if par && !big {
        chunks = chunks.div_ceil(threads) * threads;
    }
    let chunk = pixels.div_ceil(chunks).max(1);
    let chunks = pixels.div_ceil(chunk);
    // Too few chunks to go round: split the panels too.
    let groups = if par && n * chunks < 4 * threads {
        (4 * threads).div_ceil(n * chunks).min(panels.len())
    } else {
        1
    };
    let (o, ws) = (Out(res.as_mut_ptr()), w.as_ptr() as usize);
    let bs = bias.map(|b| b.as_ptr() as usize);
    let ss = sum.map(|r| r.as_ptr() as usize);
    let g = &g;
    for_units(n * chunks * groups, par, move |u| {
        let _ = &o;
        let (b, c, gi) = (u / (chunks * groups), (u / groups) % chunks, u % groups);
        let (p0, p1) = (c * chunk, ((c + 1) * chunk).min(pixels));
        let first = gi * panels.len() / groups;
        let mine = &panels[first..(gi + 1) * panels.len() / groups];
        // The tiles read their input where it lies, in the flat form too.
        // (Copying each task's pixels into one run per tile first, blocks
        // `m` pixels apart, was measured faster for 1x1 from 1024 channels
        // to 2048 and back at 7x7 when it was written, before the tiles
        // brought the next panel into L2. Measured again in turns in one
        // process on an Intel Xeon with AVX-512, fastest of 40-50 runs,
        // the copy made ResNet-50 0.5-2.3% slower at one thread and up to
        // 3.7% at two; chains of 1x1 from 1024 to 2048 at 7x7 and from
        // 512 to 1024 at 14x14 were within the noise (4% faster to 7%
        // slower; medians within 3%); alone, every 1x1 of ResNet-50 was
        // as fast or slower with it, by up to 12% at 56x56.)
        let rows = g.icb * g.taps.len() * g.cl;
        for (i, pn) in mine.iter().enumerate() {
            let (wide, nv, mr) = form::<V, N>(pn, one_vec);
            let nx = panels.get(first + i + 1).filter(|_| big);
            let mut q = p0;
            let mut offs = [0usize; MAX_TILE];
            let mut k = 0;
            while q < p1 {
                let (oy, ox) = (q / ow, q % ow);
                let m = tile_len(mr, p1 - q);
                // A tile that runs past the row's end takes its pixels'
                // offsets from the first one's: the next rows' pixels
                // lie further on in the input (`ox * sw < wp`).
                let cross = ox + m > ow;
                if cross {
                    let first = oy * sh * wp + ox * sw;
                    for (r, off) in offs[..m].iter_mut().enumerate() {
                        let (y, xx) = ((q + r) / ow, (q + r) % ow);
                        *off = (y * sh * wp + xx * sw - first) * lanes;
                    }
                }
                // The tile's input where it lies in the image: its first
                // tap of pixel (oy, ox).
                let xq = xp[b * ic * hp * wp + (oy * sh * wp + ox * sw) * lanes..].as_ptr();
                // SAFETY: `run_tile`'s contract. Input: `xq` is
                // the first tap of pixel (oy, ox) of image `b` in `xp`
                // (`hp * wp` pixels of `lanes` floats per block or plane,
                // `ic * hp * wp` floats per image); the tile reads the
                // taps of output pixels `q .. q + m` of the plane (`m <=
                // p1 - q`): those of row `oy` from `ox` at `px` apart, or
                // (`cross`) each at its offset in `offs`, which holds
                // the tile's `m` pixels; all inside the padded plane by
                // `taps_fit` (rows `(oh - 1) * sh + (kh - 1) * dh < hp`,
                // columns likewise; in the flat form one row of `ow <=
                // wp` pixels). `offs` lives until the call returns.
                // Filter: `w + pn.off` is the panel (`w.len()` checked).
                // Output: pixels `q .. q + m` (`m <= p1 - q`) of blocks
                // `pn.ob0 .. pn.ob0 + pn.nb` of image `b`, inside `res`
                // (`batch * ocb * oh * ow * 8` floats) and this unit's
                // alone: units split the images, the pixel chunks and the
                // panels, and `res` is borrowed for the whole `for_units`
                // call; the residual is read at the same offsets (its
                // size checked), the bias at the panel's channels.
                unsafe {
                    let at = (b * ocb + pn.ob0) * g.obs + q * L;
                    let oq = o.0.add(at);
                    let sq = ss.map_or(std::ptr::null(), |sp| (sp as *const f32).add(at));
                    let bq = bs.map_or(std::ptr::null(), |bp| (bp as *const f32).add(pn.ob0 * L));
                    let wq = (ws as *const f32).add(pn.off);
                    let ends = Ends {
                        bias: bq,
                        sum: sq,
                        offs: match cross {
                            true => offs.as_ptr(),
                            false => std::ptr::null(),
                        },
                        next: next_from(k, nx, rows, ws as *const f32),
                    };
                    run_tile::<V, N>(wide, m, nv, g, xq, wq, ends, oq);
                    if let Some(bounds) = after {
                        clamp_cells(oq, g.obs, pn.nb, m, bounds);
                    }
                }
                q += m;
                k += 1;
            }
        }
    });
    for v in [padded, picked].into_iter().flatten() {
        crate::tensor::Buf::F32(v).recycle();
    }
    Ok(())
}

/// Clamps to `(lo, hi)` the cells of a tile that [`direct`] stored: `m`
/// pixels (8 floats each, consecutive) of `nb` output blocks `obs` floats
/// apart from `out`, as the clamp operator (and the tile's own bounds)
/// take them: the bound where the value is beyond it, else the value
/// (a NaN, or a zero equal to a zero bound, is kept).
///
/// # Safety
/// Those cells are initialized, writable, and accessed by no one else
/// during the call.
unsafe fn clamp_cells(out: *mut f32, obs: usize, nb: usize, m: usize, (lo, hi): (f32, f32)) {
    for b in 0..nb {
        // SAFETY: the caller's: block `b`'s `m * 8` floats of the tile.
        let cells = unsafe { std::slice::from_raw_parts_mut(out.add(b * obs), m * L) };
        for v in cells {
            let y = if lo > *v { lo } else { *v };
            *v = if hi < y { hi } else { y };
        }
    }
}

/// The pixels of `planes` blocked planes of `ih x iw` at every `sh`-th
/// row and `sw`-th column, `oh x ow` of them (all inside the plane), as
/// planes of that size.
fn every_sth(
    x: &[f32],
    planes: usize,
    (ih, iw): (usize, usize),
    (oh, ow): (usize, usize),
    (sh, sw): (usize, usize),
) -> Result<Vec<f32>> {
    let mut out = crate::tensor::Buf::try_f32_for_overwrite(planes * oh * ow * L)?;
    let copy = |(i, dst): (usize, &mut [f32])| {
        let (src, _) = x[i * ih * iw * L..(i + 1) * ih * iw * L].as_chunks::<L>();
        let (dst, _) = dst.as_chunks_mut::<L>();
        for (q, d) in dst.iter_mut().enumerate() {
            *d = src[(q / ow) * sh * iw + (q % ow) * sw];
        }
    };
    if out.len() >= 1 << 16 {
        out.par_chunks_mut(oh * ow * L).enumerate().for_each(copy);
    } else {
        out.chunks_mut(oh * ow * L).enumerate().for_each(copy);
    }
    Ok(out)
}

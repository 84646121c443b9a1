//! The depthwise blocked convolution.

use super::par::{for_units, Out, PAR_WORK};
use super::simd::Vf;
use super::L;
use crate::graph::ops::conv::Conv2dParams;

/// A depthwise convolution of blocked `x` into blocked `res`: each
/// output pixel is its first tap times the filter, then one
/// multiply-add per further tap (padding taps read zeros), then the
/// bias and bounds, as the NCHW kernels compute it.
///
/// Runs of pixels at unit stride run on `V` (whose vectors hold `W / 8`
/// neighbouring pixels), the rest on `N` (8 lanes, one pixel). Stride 2
/// stays on `N`: a zmm vector of two output pixels there needs its
/// halves loaded from two places (load and insert), and measured slower
/// than two ymm vectors (96 channels 112x112 -> 56x56 on AVX-512: 340 to
/// 362 against 279 to 321 us).
///
/// # Safety
/// The CPU has `V`'s features, which include `N`'s (an 8-lane kind);
/// `p` is depthwise with channels in whole blocks; `x` holds
/// `batch * c * in_h * in_w` floats, `w` `c * kh * kw`, `bias` (if
/// any) `c`, `res` `batch * c * out_h * out_w`; every tap lies inside
/// the padded input.
/// `super::conv` checks these (the channels, at build).
pub(super) unsafe fn depthwise<V: Vf, N: Vf>(
    w: &[f32],
    p: &Conv2dParams,
    x: &[f32],
    bias: Option<&[f32]>,
    bounds: (f32, f32),
    res: &mut [f32],
) {
    let (n, cb) = (p.batch, p.in_channels / L);
    let (h, wi, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    let khw = p.kernel_h * p.kernel_w;
    // Rows per task: tall bands, since every band reads its rows of the
    // kernel's height again at both ends (bands of 32 K multiply-adds
    // against 8 K, fastest of 150 MobileNetV2 runs, three A/B rounds:
    // the three largest depthwise layers 217-241 us against 244-272),
    // but at least four tasks per thread where the planes allow.
    let work = n * cb * oh * ow * L * khw;
    let threads = if work >= PAR_WORK {
        rayon::current_num_threads()
    } else {
        1
    };
    let mut rows = (32768 / (ow * khw).max(1)).clamp(1, oh);
    while rows > 1 && n * cb * oh.div_ceil(rows) < 4 * threads {
        rows = rows.div_ceil(2);
    }
    let row_chunks = oh.div_ceil(rows);
    let o = Out(res.as_mut_ptr());
    for_units(n * cb * row_chunks, work >= PAR_WORK, move |u| {
        let _ = &o;
        let (plane, rc) = (u / row_chunks, u % row_chunks);
        let blk = plane % cb;
        let xs = &x[plane * h * wi * L..(plane + 1) * h * wi * L];
        let ws = &w[blk * khw * L..(blk + 1) * khw * L];
        let bv = bias.map(|b| &b[blk * L..(blk + 1) * L]);
        let y0 = rc * rows;
        let y1 = (y0 + rows).min(oh);
        // SAFETY: `plane < batch * cb` and `y1 <= oh`, so the range ends
        // at most at `batch * cb * oh * ow * 8`, `res.len()`; units
        // split the planes and their rows, so this range is this unit's
        // alone, and `res` stays borrowed until `for_units` returns.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(o.0.add((plane * oh + y0) * ow * L), (y1 - y0) * ow * L)
        };
        // SAFETY: the caller's features, all that `plane_rows` asks;
        // `xs`, `ws`, `bv` and `dst` are the plane, filter, bias and
        // output rows that it expects.
        unsafe { plane_rows::<V, N>(xs, ws, bv, bounds, p, y0..y1, dst, true) };
    });
}

/// Output rows `ys` of one blocked plane `x` into `dst` (see
/// [`depthwise_rows`]), compiled with `V`'s features.
///
/// `x` is one plane of `p`'s input (`in_h * in_w * 8` floats), `w` its
/// block's filter (`kh * kw * 8`), `bias` its block's (8 or more),
/// `dst` rows `ys` of its output (`ys.len() * out_w * 8`); rows below
/// the input read zeros, as in the padding.
///
/// # Safety
/// The CPU has `V`'s features, which include `N`'s (an 8-lane kind).
/// The sizes are checked: a mismatch panics.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn plane_rows<V: Vf, N: Vf>(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    bounds: (f32, f32),
    p: &Conv2dParams,
    ys: std::ops::Range<usize>,
    dst: &mut [f32],
    copy_small: bool,
) {
    // SAFETY: the caller's features, which `V::with` enables; that is
    // all `depthwise_rows` asks (it checks the sizes).
    unsafe {
        V::with(
            #[inline(always)]
            || depthwise_rows::<V, N>(x, w, bias, bounds, p, ys, dst, copy_small),
        )
    }
}

/// Output rows `ys` of one blocked plane `x` of a depthwise
/// convolution into `dst`. Pixels whose taps all lie inside the input
/// read it where it is; the others (near the padding) read a small
/// zero-padded copy of the input around them: a strip of columns at
/// each side for the rows in between, whole padded rows for the rows
/// at the top and bottom. Either way eight pixels at a time, across
/// row ends, so that a narrow plane (7x7) still has eight independent
/// chains of multiply-adds. With `copy_small` a small input window is
/// copied whole (see below); a chain's bands, small for being few
/// rows of a wide plane, are not.
///
/// # Safety
/// Runs with `V`'s features (and so `N`'s). The sizes of
/// [`plane_rows`]'s contract are checked here: a call that breaks them
/// panics, it reads or writes nothing outside the slices.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn depthwise_rows<V: Vf, N: Vf>(
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    (lo, hi): (f32, f32),
    p: &Conv2dParams,
    ys: std::ops::Range<usize>,
    dst: &mut [f32],
    copy_small: bool,
) {
    let (h, wi, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    let (kh, kw) = (p.kernel_h, p.kernel_w);
    let (sh, sw) = (p.strides[0], p.strides[1]);
    let (dh, dw) = (p.dilations[0], p.dilations[1]);
    let (pt, pl) = (p.padding[0], p.padding[2]);
    if kh * kw == 0 || ys.is_empty() {
        return;
    }
    // The reads and writes below stay inside these (see `region`).
    assert!(
        x.len() >= h * wi * L
            && w.len() >= kh * kw * L
            && dst.len() >= (ys.end - ys.start) * ow * L,
        "depthwise rows: the buffers do not match the parameters"
    );
    let k = Kernel {
        w,
        kh,
        kw,
        dh,
        dw,
        bias: bias.map_or(std::ptr::null(), |b| b[..L].as_ptr()),
        lo,
        hi,
    };
    // Rows whose taps all lie inside the input, [ia, ib), and columns
    // whose taps all lie inside a row, [ox_lo, ox_hi).
    let (span_h, span_w) = ((kh - 1) * dh, (kw - 1) * dw);
    let (ia, ib) = inside(pt, h, span_h, sh, oh);
    let (ox_lo, ox_hi) = inside(pl, wi, span_w, sw, ow);
    let out = dst.as_mut_ptr();
    let (y0, y1) = (ys.start, ys.end);
    // Offsets are in floats; a pixel (oy, ox) of a region reads its
    // first tap at row oy * sh - pt - r0, column ox * sw - pl - c0 of
    // a source whose first row and column are r0 and c0.
    let region = |src: *const f32,
                  r0: isize,
                  c0: isize,
                  cols: usize,
                  rows: std::ops::Range<usize>,
                  oxs: std::ops::Range<usize>| {
        let first = |oy: usize, ox: usize| {
            let r = (oy * sh) as isize - pt as isize - r0;
            let c = (ox * sw) as isize - pl as isize - c0;
            (r as usize * cols + c as usize) * L
        };
        let at = |oy: usize, ox: usize| out.wrapping_add(((oy - y0) * ow + ox) * L);
        // SAFETY: the caller's features, which `V::with` enables (a
        // closure does not inherit them: `with` compiles the kernel with
        // them wherever this one lands). `rect`'s contract: the two
        // callers below pass regions whose every tap lies inside `src`:
        // the input plane itself (`x`, `h * wi * 8` floats, asserted)
        // for the rows and columns that `inside` finds wholly inside
        // it, or a copy that holds every row and column the region's
        // taps reach (`copy`); `at(oy, ox)` is pixel `(oy - y0, ox)` of
        // `dst`, with `oy` in `ys` and `ox < ow`, inside it (asserted);
        // `first(oy, ox + 1)` is `first(oy, ox) + sw * 8`, the `step`;
        // `src` is the input or a copy, never `dst`; `k.w` holds `kh *
        // kw * 8` floats (asserted) and `k.bias` 8 (`b[..L]`).
        unsafe {
            V::with(
                #[inline(always)]
                || k.rect::<V, N>(src, cols, sw * L, rows, oxs, first, at),
            )
        };
    };
    let (ra, rb) = (ia.clamp(y0, y1), ib.clamp(y0, y1));
    // The padded copies: input rows r0.. and columns c0.., zeros
    // outside the plane.
    let copy = |rows: std::ops::Range<usize>, oxs: std::ops::Range<usize>| {
        if rows.is_empty() || oxs.is_empty() {
            return;
        }
        let r0 = (rows.start * sh) as isize - pt as isize;
        let r1 = ((rows.end - 1) * sh + span_h) as isize - pt as isize + 1;
        let c0 = (oxs.start * sw) as isize - pl as isize;
        let c1 = ((oxs.end - 1) * sw + span_w) as isize - pl as isize + 1;
        let cols = (c1 - c0) as usize;
        let mut buf = PADDED.take();
        let size = (r1 - r0) as usize * cols * L;
        if buf.len() < size {
            buf.resize(size, 0.0);
        }
        // Every float written once: the input where it lies, zeros
        // around it (not zeros first, then the input over them).
        // Input columns [a, b) of the window's [c0, c1): none where the
        // window lies in the padding.
        let a = c0.max(0).min(c1);
        let b = c1.min(wi as isize).max(a);
        for (r, row) in (r0..r1).zip(buf[..size].chunks_exact_mut(cols * L)) {
            if r < 0 || r >= h as isize {
                row.fill(0.0);
                continue;
            }
            let (left, rest) = row.split_at_mut((a - c0) as usize * L);
            let (mid, right) = rest.split_at_mut((b - a) as usize * L);
            left.fill(0.0);
            if !mid.is_empty() {
                let from = (r as usize * wi + a as usize) * L;
                mid.copy_from_slice(&x[from..from + mid.len()]);
            }
            right.fill(0.0);
        }
        region(buf.as_ptr(), r0, c0, cols, rows, oxs);
        PADDED.set(buf);
    };
    // A small plane (7x7, 14x14) is copied whole with its padding: one
    // region, so that few groups run short; otherwise the pixels of
    // the inside rows and columns read the input in place, strips at
    // the sides of those rows and the top and bottom rows whole are
    // copied.
    let window = ((y1 - y0 - 1) * sh + span_h + 1) * ((ow - 1) * sw + span_w + 1) * L;
    if copy_small && window <= SMALL_WINDOW {
        copy(y0..y1, 0..ow);
        return;
    }
    if ra < rb {
        region(x.as_ptr(), 0, 0, wi, ra..rb, ox_lo..ox_hi);
    }
    copy(ra..rb, 0..ox_lo);
    copy(ra..rb, ox_hi..ow);
    copy(y0..ra.max(y0), 0..ow);
    copy(rb.max(ra).max(y0)..y1, 0..ow);
}

/// The form of the depthwise kernel to run where the blocked kernels
/// run on `isa`: on AVX-512, whichever of the AVX-512 and AVX2 forms is
/// faster on this CPU, measured once per process (about half a
/// millisecond). Both give the same bits, so only the time depends on
/// the choice. A zmm vector holds two neighbouring pixels, so every
/// other tap's load splits a cache line; where the CPU issues one
/// 512-bit multiply-add per cycle, that costs more than the wider
/// vectors save. On an AVX-512 Zen 5 the AVX2 form took 58-75 us
/// against 73-92 for 192 channels of 28x28, and 137-144 against
/// 150-158 for 144 of 56x56 (one thread, best of 300). Every other
/// `isa` has one form.
pub(super) fn preferred(isa: super::Isa) -> super::Isa {
    #[cfg(target_arch = "x86_64")]
    if isa == super::Isa::Avx512 {
        use super::Isa;
        static CHOICE: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        return *CHOICE.get_or_init(|| match faster_form() {
            true => Isa::Avx512,
            false => Isa::Avx2,
        });
    }
    isa
}

/// Whether the AVX-512 form of a mid-sized layer (32 channels of 28x28,
/// 3x3, small enough to run on the calling thread) runs faster than the
/// AVX2 form: the fastest of eight alternating runs of each.
#[cfg(target_arch = "x86_64")]
fn faster_form() -> bool {
    use std::arch::x86_64::{__m256, __m512};
    let p = Conv2dParams {
        nhwc: false,
        filter_layout: crate::graph::ops::conv::FilterLayout::Oihw,
        padding: [1; 4],
        strides: [1; 2],
        dilations: [1; 2],
        groups: 32,
        has_bias: false,
        batch: 1,
        in_channels: 32,
        in_h: 28,
        in_w: 28,
        out_channels: 32,
        kernel_h: 3,
        kernel_w: 3,
        out_h: 28,
        out_w: 28,
    };
    let n = 32 * 28 * 28;
    let x: Vec<f32> = (0..n).map(|i| (i % 17) as f32 * 0.25 - 2.0).collect();
    let w: Vec<f32> = (0..32 * 9).map(|i| (i % 5) as f32 * 0.125 - 0.25).collect();
    let mut res = vec![0.0f32; n];
    super::first_is_faster(|wide| {
        // SAFETY: `preferred` runs this only for `Isa::Avx512`, which
        // only `Isa::best` makes, after detecting AVX-512F, AVX2 and
        // FMA: the features of both forms. `x` and `res` hold the 32
        // x 28 x 28 input and output, `w` 32 x 3 x 3, and with
        // padding 1 every tap lies inside the padded input.
        unsafe {
            match wide {
                true => depthwise::<__m512, __m256>(&w, &p, &x, None, (0.0, 6.0), &mut res),
                false => depthwise::<__m256, __m256>(&w, &p, &x, None, (0.0, 6.0), &mut res),
            }
        }
    })
}

/// The outputs `[a, b)` of `n_out` along one axis whose taps all lie
/// inside the `n_in` inputs: output `o` reads `o * stride - pad` to
/// `o * stride - pad + span`.
fn inside(pad: usize, n_in: usize, span: usize, stride: usize, n_out: usize) -> (usize, usize) {
    let a = pad.div_ceil(stride).min(n_out);
    let b = if n_in + pad > span {
        ((n_in + pad - span - 1) / stride + 1).clamp(a, n_out)
    } else {
        a
    };
    (a, b)
}

/// Floats of padded input (16 KB) up to which a depthwise task copies
/// all it reads.
const SMALL_WINDOW: usize = 4096;

thread_local! {
    /// The zero-padded input around a depthwise task's edge pixels.
    static PADDED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A depthwise filter block and its epilogue.
#[derive(Clone, Copy)]
struct Kernel<'a> {
    /// `[kh * kw][8]`.
    w: &'a [f32],
    kh: usize,
    kw: usize,
    dh: usize,
    dw: usize,
    /// The block's 8 biases, or null.
    bias: *const f32,
    lo: f32,
    hi: f32,
}

/// Vectors per group: eight independent chains of multiply-adds keep
/// both FMA pipes busy.
const P: usize = 8;
/// A pixel step of stride 2.
const S2: usize = 2 * L;

impl Kernel<'_> {
    /// Bias (in every group of 8 lanes), lower and upper bound.
    ///
    /// # Safety
    /// `U`'s features.
    #[inline(always)]
    unsafe fn fin<U: Vf>(&self) -> (U, U, U) {
        // SAFETY: `U`'s features (the caller's); `self.bias`, when not
        // null, is `b[..8]` of the block's bias slice that
        // `depthwise_rows` holds while this kernel lives, 8 floats.
        unsafe {
            let b = match self.bias.is_null() {
                true => U::splat(-0.0),
                false => U::load8_dup(self.bias),
            };
            (b, U::splat(self.lo), U::splat(self.hi))
        }
    }

    /// Output pixels `rows` x `oxs` of a source `src` whose rows have
    /// `cols` pixels; `first(oy, ox)` is the offset of a pixel's first
    /// tap (the next pixel's is `step` further), `at(oy, ox)` where it
    /// goes. At unit stride, runs of `P` vectors of `V` (`P * W / 8`
    /// pixels) and then vectors of `V` gathered from the rows' ends into
    /// groups of `P`; otherwise eight pixels of a row at a time. The
    /// pixels left at a row's end join those of the next rows (one per
    /// vector of `N`), so a narrow plane still runs in groups of eight.
    ///
    /// # Safety
    /// `V`'s features, which include `N`'s (an 8-lane kind). For every
    /// pixel `(oy, ox)` of `rows` x `oxs`: every tap's 8 floats, at
    /// `src + first(oy, ox) + (ky * dh * cols + kx * dw) * 8`, are
    /// readable; `first(oy, ox + 1) = first(oy, ox) + step`, and `step`
    /// is `sw * 8`; the 8 floats at `at(oy, ox)` are writable, by this
    /// call alone, and overlap nothing that it reads; `self.w` holds
    /// `kh * kw * 8` floats, `self.bias` (when not null) 8.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn rect<V: Vf, N: Vf>(
        &self,
        src: *const f32,
        cols: usize,
        step: usize,
        rows: std::ops::Range<usize>,
        oxs: std::ops::Range<usize>,
        first: impl Fn(usize, usize) -> usize,
        at: impl Fn(usize, usize) -> *mut f32,
    ) {
        // Pixels per vector of V.
        let k = if step == L { V::W / L } else { 1 };
        let mut wide = Pending::<V>::new(src);
        let mut narrow = Pending::<N>::new(src);
        for oy in rows {
            if oxs.is_empty() {
                break;
            }
            // SAFETY: `first(oy, oxs.start)` is the offset of a pixel's
            // first tap, inside `src` by the contract.
            let (mut inp, mut o) = unsafe { (src.add(first(oy, oxs.start)), at(oy, oxs.start)) };
            let mut left = oxs.len();
            // SAFETY: `inp` and `o` stay the first tap and the output of
            // pixel `oxs.end - left` of this row (each step adds the
            // pixels' `step` or 8 floats per pixel done), and each call
            // covers pixels before `oxs.end` only: a run of `P` vectors
            // of `k` pixels while `left >= P * k` (`run` at unit stride,
            // `step` 8 when `k > 1`), a vector of `k` while `left >= k`,
            // `P` pixels of `N` while `left >= P`, then single pixels.
            // `run::<U, SW>` reads pixel `j * SW * U::W / 8` from `inp`,
            // `group` pixel `j` from `ins[j]`: those pixels' taps, which
            // the contract makes readable, and it writes their outputs.
            // The features are the caller's; `N` has 8 lanes, one pixel.
            unsafe {
                if k > 1 {
                    while left >= P * k {
                        self.run::<V, 1>(cols, inp, o);
                        (inp, o) = (inp.add(P * k * L), o.add(P * k * L));
                        left -= P * k;
                    }
                    while left >= k {
                        wide.push(self, cols, inp, o);
                        (inp, o) = (inp.add(k * L), o.add(k * L));
                        left -= k;
                    }
                } else {
                    while left >= P {
                        match step {
                            L => self.run::<N, 1>(cols, inp, o),
                            S2 => self.run::<N, 2>(cols, inp, o),
                            _ => self.group::<N>(
                                cols,
                                std::array::from_fn(|j| inp.add(j * step)),
                                std::array::from_fn(|j| o.add(j * L)),
                            ),
                        }
                        (inp, o) = (inp.add(P * step), o.add(P * L));
                        left -= P;
                    }
                }
                for _ in 0..left {
                    narrow.push(self, cols, inp, o);
                    (inp, o) = (inp.add(step), o.add(L));
                }
            }
        }
        // SAFETY: the vectors still pending were pushed above, each for
        // pixels inside the region, whose taps and outputs the contract
        // covers; `src` and the outputs are still valid (the caller's).
        unsafe {
            wide.flush(self, cols);
            narrow.flush(self, cols);
        }
    }

    /// `P` consecutive vectors of output pixels of a row at stride `SW`,
    /// as [`Self::group`] computes them: with the stride known, every
    /// load addresses one base pointer plus a constant.
    ///
    /// # Safety
    /// As for [`Self::group`] with `ins[j] = src + j * SW * W` and
    /// `outs[j] = out + j * W` (`SW` is 1 where `W` is over 8).
    #[inline(always)]
    unsafe fn run<U: Vf, const SW: usize>(&self, cols: usize, src: *const f32, out: *mut f32) {
        if self.is_3x3() {
            // SAFETY: `group_3x3`'s contract is `group`'s, with the very
            // `ins` and `outs` of ours, which the caller gives.
            return unsafe {
                self.group_3x3::<U>(cols, |j| src.add(j * SW * U::W), |j| out.add(j * U::W))
            };
        }
        // SAFETY: `U`'s features (the caller's). Vector `j`'s tap `(ky,
        // kx)` is loaded from `src + j * SW * W + (ky * dh * cols + kx *
        // dw) * 8`, a tap of its pixels, readable by the contract; `wt`
        // steps through the `kh * kw` rows of 8 of `self.w`, one per
        // tap; each store is the `W` floats at `out + j * W`, writable.
        unsafe {
            let (bv, lov, hiv) = self.fin::<U>();
            let w0 = U::load8_dup(self.w.as_ptr());
            let mut acc = [w0; P];
            for (j, a) in acc.iter_mut().enumerate() {
                *a = U::mul(w0, U::load(src.add(j * SW * U::W)));
            }
            let mut wt = self.w.as_ptr();
            for ky in 0..self.kh {
                let row = src.add(ky * self.dh * cols * L);
                for kx in usize::from(ky == 0)..self.kw {
                    wt = wt.add(L);
                    let wv = U::load8_dup(wt);
                    let at = row.add(kx * self.dw * L);
                    for (j, a) in acc.iter_mut().enumerate() {
                        *a = U::fma(wv, U::load(at.add(j * SW * U::W)), *a);
                    }
                }
            }
            for (j, a) in acc.iter().enumerate() {
                U::min(hiv, U::max(lov, U::add(*a, bv))).store(out.add(j * U::W));
            }
        }
    }

    /// `P` vectors of output pixels (each `W / 8` neighbouring pixels of
    /// a row, unit stride when more than one), each pixel its first tap
    /// times the filter, then one multiply-add per further tap, then
    /// `clamp(acc + bias, lo, hi)` (max and min return their second
    /// operand for NaN and for equal zeros), as the NCHW kernels compute
    /// it.
    ///
    /// # Safety
    /// `U`'s features; every tap of each pixel (first tap at `ins[j]`,
    /// rows of `cols` pixels) readable, `outs[j]` `W` writable floats.
    #[inline(always)]
    unsafe fn group<U: Vf>(&self, cols: usize, ins: [*const f32; P], outs: [*mut f32; P]) {
        if self.is_3x3() {
            // SAFETY: `group_3x3`'s contract is ours, for the same
            // vectors.
            return unsafe { self.group_3x3::<U>(cols, |j| ins[j], |j| outs[j]) };
        }
        // SAFETY: `U`'s features (the caller's). Vector `j`'s tap `(ky,
        // kx)` is loaded from `ins[j] + (ky * dh * cols + kx * dw) * 8`,
        // readable by the contract; `wt` steps through the `kh * kw` rows
        // of 8 of `self.w`, one per tap; each store is the `W` floats at
        // `outs[j]`, writable. All loads come before the stores.
        unsafe {
            let (bv, lov, hiv) = self.fin::<U>();
            let w0 = U::load8_dup(self.w.as_ptr());
            let mut acc = [w0; P];
            for (a, ptr) in acc.iter_mut().zip(&ins) {
                *a = U::mul(w0, U::load(*ptr));
            }
            let mut wt = self.w.as_ptr();
            for ky in 0..self.kh {
                let row = ky * self.dh * cols * L;
                for kx in usize::from(ky == 0)..self.kw {
                    wt = wt.add(L);
                    let wv = U::load8_dup(wt);
                    let off = row + kx * self.dw * L;
                    for (a, ptr) in acc.iter_mut().zip(&ins) {
                        *a = U::fma(wv, U::load(ptr.add(off)), *a);
                    }
                }
            }
            for (a, o) in acc.iter().zip(&outs) {
                U::min(hiv, U::max(lov, U::add(*a, bv))).store(*o);
            }
        }
    }
}

impl Kernel<'_> {
    /// A 3 x 3 filter without dilation: nearly every depthwise layer.
    #[inline(always)]
    fn is_3x3(&self) -> bool {
        self.kh == 3 && self.kw == 3 && self.dh == 1 && self.dw == 1
    }

    /// [`Self::group`] for a 3 x 3 filter without dilation, vector `j`'s
    /// first tap at `ins(j)` and its output at `outs(j)`: with the taps'
    /// offsets known at compile time the loops unroll, and where `ins`
    /// is one base plus a constant (a run at a known stride) the loads
    /// that neighbouring pixels share are made once (the compiler sees
    /// the same address). The same operations in the same order, so the
    /// same bits.
    ///
    /// # Safety
    /// As for [`Self::group`].
    #[inline(always)]
    unsafe fn group_3x3<U: Vf>(
        &self,
        cols: usize,
        ins: impl Fn(usize) -> *const f32,
        outs: impl Fn(usize) -> *mut f32,
    ) {
        // SAFETY: `U`'s features (the caller's). The callers run this
        // only where `is_3x3`, so `self.w` holds 9 rows of 8 and tap `t`
        // lies `(t / 3) * cols * 8 + (t % 3) * 8` floats from a vector's
        // first tap: each load is a tap of the vector's pixels, readable
        // by the contract, and each store the `W` floats at `outs(j)`,
        // writable.
        unsafe {
            let (bv, lov, hiv) = self.fin::<U>();
            let w0 = U::load8_dup(self.w.as_ptr());
            let mut acc = [w0; P];
            for (j, a) in acc.iter_mut().enumerate() {
                *a = U::mul(w0, U::load(ins(j)));
            }
            for t in 1..9 {
                let wv = U::load8_dup(self.w.as_ptr().add(t * L));
                let off = (t / 3) * cols * L + (t % 3) * L;
                for (j, a) in acc.iter_mut().enumerate() {
                    *a = U::fma(wv, U::load(ins(j).add(off)), *a);
                }
            }
            for (j, a) in acc.iter().enumerate() {
                U::min(hiv, U::max(lov, U::add(*a, bv))).store(outs(j));
            }
        }
    }
}

/// Vectors of pixels from rows' ends waiting for a group of `P`.
struct Pending<U> {
    ins: [*const f32; P],
    outs: [*mut f32; P],
    n: usize,
    _u: std::marker::PhantomData<U>,
}

impl<U: Vf> Pending<U> {
    fn new(src: *const f32) -> Self {
        Pending {
            ins: [src; P],
            outs: [std::ptr::null_mut(); P],
            n: 0,
            _u: std::marker::PhantomData,
        }
    }

    /// Adds a vector's first tap and output; a full group runs.
    ///
    /// # Safety
    /// [`Kernel::group`]'s contract holds for this vector (taps from
    /// `inp`, output at `o`) and `k`, and stays true until the group
    /// runs: here when it fills, else at [`Self::flush`].
    #[inline(always)]
    unsafe fn push(&mut self, k: &Kernel, cols: usize, inp: *const f32, o: *mut f32) {
        self.ins[self.n] = inp;
        self.outs[self.n] = o;
        self.n += 1;
        if self.n == P {
            // SAFETY: each of the `P` vectors was pushed under
            // `group`'s contract (see `push`'s), still true.
            unsafe { k.group::<U>(cols, self.ins, self.outs) };
            self.n = 0;
        }
    }

    /// Runs a short last group, which repeats its last vector: the same
    /// values stored twice.
    ///
    /// # Safety
    /// As for [`Self::push`], for every vector pushed since the last
    /// group ran.
    #[inline(always)]
    unsafe fn flush(&mut self, k: &Kernel, cols: usize) {
        let n = self.n;
        if n > 0 {
            for j in n..P {
                self.ins[j] = self.ins[n - 1];
                self.outs[j] = self.outs[n - 1];
            }
            // SAFETY: vectors `0..n` were pushed under `group`'s
            // contract; `n..P` repeat vector `n - 1`, so they read the
            // same taps and store the same values to the same cells
            // (`group` loads everything before it stores).
            unsafe { k.group::<U>(cols, self.ins, self.outs) };
            self.n = 0;
        }
    }
}

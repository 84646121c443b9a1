//! A prompt's product in integers: many rows of activations that are
//! int8 codes times a scale per block (the graph rounds them so, as
//! llama.cpp does; [`super::exact_int8`] recovers the codes) against
//! 4-bit weights, block by block in exact integer sums:
//!
//! ```text
//! c[i][j] = sum over blocks b of  isum(i, j, b) * (d[j][b] * da[i][b])
//! ```
//!
//! with `isum` the block's sum of `qa * code` in 32-bit integers (at most
//! 32 * 127 * 15 in size, so exact in float32 too), `d * da` rounded once
//! and each block's term added by one fused multiply-add, blocks in
//! order from a zero. Every form here computes exactly that, so they give
//! the same bits; the float32 GEMM over the dequantized weights (the
//! `tiled` path) rounds each of the K products instead, and so is
//! another, equally close, value.
//!
//! Weights are packed per task, a panel of [`NR`] weight rows at a time,
//! into the layout of byte dot products: for each group of four weights
//! along K, the four codes of each of the panel's rows in a row (so a
//! 512-bit vector holds four codes of 16 rows, and VNNI's `vpdpbusd`
//! multiplies them by four activation codes of one row broadcast to
//! every lane). The panel is reused by every row of the prompt.
//!
//! The dispatch point is [`product`]: AVX-512 with VNNI and VBMI where the
//! CPU has them; elsewhere it declines and the float path runs.

use rayon::prelude::*;

use super::{QMatrix, QK};
use crate::error::{Error, Result};

/// Weight rows (output columns) per panel: two 512-bit vectors of 16.
pub const NR: usize = 32;

/// The activations as int8 codes, row-major [rows, k], and their scales
/// per block, [rows, k / QK].
pub struct IntRows<'a> {
    pub rows: usize,
    pub qa: &'a [i8],
    pub da: &'a [f32],
}

/// Which form this CPU runs, or `None` where it has none (the float path
/// then serves).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Form {
    /// The reference the other forms are tested against; never chosen to
    /// run (`best`), since on a CPU without a faster form the float path
    /// is faster than it.
    #[cfg_attr(not(test), allow(dead_code))]
    Portable,
    #[cfg(target_arch = "x86_64")]
    Avx512Vnni,
}

impl Form {
    /// The fastest form this CPU has that is faster than the float path.
    /// The portable form is not: it is the reference the others are
    /// tested against.
    pub fn best() -> Option<Form> {
        #[cfg(target_arch = "x86_64")]
        if avx512::usable() {
            return Some(Form::Avx512Vnni);
        }
        None
    }

    /// Every form this CPU can run, the portable one first.
    #[cfg(test)]
    pub fn available() -> Vec<Form> {
        let mut v = vec![Form::Portable];
        v.extend(Form::best());
        v
    }
}

/// `c = a · wᵀ` in the integer form, `c` [rows, n] overwritten, when the
/// CPU has a form faster than the float path and `w` suits it (4-bit
/// codes without offsets). Returns whether it ran.
pub fn product(a: &IntRows, w: &QMatrix, c: &mut [f32]) -> Result<bool> {
    match Form::best() {
        Some(form) => product_as(form, a, w, c),
        None => Ok(false),
    }
}

/// [`product`] in form `form`.
pub fn product_as(form: Form, a: &IntRows, w: &QMatrix, c: &mut [f32]) -> Result<bool> {
    let (n, k) = (w.n, w.k);
    let Some(codes) = w.codes.nibbles() else {
        return Ok(false);
    };
    // The offsets' term (a zero point) would need the blocks' sums of the
    // activations too; such matrices take the float path.
    if w.offsets {
        return Ok(false);
    }
    let nb = k / QK;
    if a.qa.len() != a.rows * k || a.da.len() != a.rows * nb || c.len() != a.rows * n {
        return Err(Error::operation(
            "quantized product: the operands do not match the shapes",
        ));
    }
    // The gathers address the codes with 32-bit offsets.
    if codes.len() > i32::MAX as usize {
        return Ok(false);
    }
    let scales = w.d.view();
    let panels = n.div_ceil(NR);
    let cols = CPtr(c.as_mut_ptr());
    (0..panels).into_par_iter().try_for_each(|p| {
        let j0 = p * NR;
        let live = NR.min(n - j0);
        let mut packed = super::try_alloc(k * NR, 0u8, "a prompt's packed weights")?;
        let mut d = super::try_alloc(nb * NR, 0f32, "a prompt's packed scales")?;
        // Each row's scales widened together (float16 ones on the CPU's
        // vectors; one at a time they were a tenth of the product), then
        // placed.
        let mut room = super::try_alloc(nb, 0f32, "a row's scales")?;
        for jj in 0..live {
            let row = scales.row((j0 + jj) * nb..(j0 + jj + 1) * nb, &mut room);
            for (b, &v) in row.iter().enumerate() {
                d[b * NR + jj] = v;
            }
        }
        pack(form, codes, k, j0, live, &mut packed);
        let panel = Panel {
            k,
            j0,
            live,
            codes: &packed,
            d: &d,
        };
        // SAFETY: each task writes columns `j0 .. j0 + live` of every row
        // of `c` and no other task writes those (panels are disjoint); `c`
        // outlives the parallel loop, which joins before `product_as`
        // returns.
        let c = unsafe { std::slice::from_raw_parts_mut(cols.get(), a.rows * n) };
        run(form, a, &panel, n, c);
        Ok::<_, Error>(())
    })?;
    Ok(true)
}

/// `c`'s pointer, shared by the tasks that write its disjoint columns.
#[derive(Clone, Copy)]
struct CPtr(*mut f32);
// SAFETY: the tasks write disjoint columns of the buffer (see the use).
unsafe impl Send for CPtr {}
// SAFETY: as above.
unsafe impl Sync for CPtr {}

impl CPtr {
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// A panel of `live` weight rows from `j0`, packed ([`pack`]), with their
/// scales [k / QK][NR] (0 past `live`).
struct Panel<'a> {
    k: usize,
    j0: usize,
    live: usize,
    codes: &'a [u8],
    d: &'a [f32],
}

/// `a`'s int8 codes and block scales into `qa` and `da` on this CPU's
/// vectors, as [`super::exact_int8`] defines them: `Some(true)` when every
/// block is exact, `Some(false)` when one is not, `None` where the CPU
/// has no such form (the caller's loop then runs).
pub fn exact_int8(a: &[f32], qa: &mut [i8], da: &mut [f32]) -> Option<bool> {
    #[cfg(target_arch = "x86_64")]
    if avx512::usable() {
        // SAFETY: `usable` saw the features the function enables; it
        // checks the lengths itself.
        return Some(unsafe { avx512::exact_int8(a, qa, da) });
    }
    let _ = (a, qa, da);
    None
}

/// Packs weight rows `j0 .. j0 + live` of the 4-bit `codes` ([n, k],
/// two per byte, low half first) into `out` ([k / 4][NR][4] bytes): group
/// `g`'s four codes of row `j0 + jj` at `out[g * 4 * NR + jj * 4 ..]`,
/// zeros past `live`.
fn pack(form: Form, codes: &[u8], k: usize, j0: usize, live: usize, out: &mut [u8]) {
    match form {
        Form::Portable => pack_portable(codes, k, j0, live, out),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Form::Avx512Vnni` is only chosen after
        // `avx512::usable()` saw every feature the function enables; the
        // gathers' bounds are checked inside.
        Form::Avx512Vnni => unsafe { avx512::pack(codes, k, j0, live, out) },
    }
}

fn pack_portable(codes: &[u8], k: usize, j0: usize, live: usize, out: &mut [u8]) {
    out.fill(0);
    for jj in 0..live {
        let row = &codes[(j0 + jj) * k / 2..(j0 + jj + 1) * k / 2];
        for (h, &byte) in row.iter().enumerate() {
            // Byte `h` holds weights 2h (low half) and 2h + 1 (high half):
            // group h / 2, places 2 (h % 2) and 2 (h % 2) + 1.
            let at = (h / 2) * 4 * NR + jj * 4 + (h % 2) * 2;
            out[at] = byte & 15;
            out[at + 1] = byte >> 4;
        }
    }
}

/// Every row of `a` against `panel`, into `c`'s columns `j0 .. j0 + live`.
fn run(form: Form, a: &IntRows, panel: &Panel, n: usize, c: &mut [f32]) {
    match form {
        Form::Portable => run_portable(a, panel, n, c),
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `pack`; the lengths the kernel reads were checked
        // by `product_as` and `Panel`'s construction.
        Form::Avx512Vnni => unsafe { avx512::run(a, panel, n, c) },
    }
}

fn run_portable(a: &IntRows, panel: &Panel, n: usize, c: &mut [f32]) {
    let k = panel.k;
    let nb = k / QK;
    for i in 0..a.rows {
        let qa = &a.qa[i * k..(i + 1) * k];
        for jj in 0..panel.live {
            let mut acc = 0f32;
            for b in 0..nb {
                let mut isum = 0i32;
                for g in b * QK / 4..(b + 1) * QK / 4 {
                    let w = &panel.codes[g * 4 * NR + jj * 4..][..4];
                    for t in 0..4 {
                        isum += qa[g * 4 + t] as i32 * w[t] as i32;
                    }
                }
                let s = panel.d[b * NR + jj] * a.da[i * nb + b];
                acc = (isum as f32).mul_add(s, acc);
            }
            c[i * n + panel.j0 + jj] = acc;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{IntRows, Panel, NR, QK};
    use std::arch::x86_64::*;

    /// Rows of activations per tile: 8 vectors of integer sums and 8 of
    /// float sums, with the two weight vectors and a broadcast, fit the 32
    /// registers.
    const MR: usize = 4;

    /// AVX-512F/BW with VNNI's byte dot products and VBMI's bit-field
    /// byte selects (and FMA).
    pub fn usable() -> bool {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni")
            && is_x86_feature_detected!("avx512vbmi")
            && is_x86_feature_detected!("fma")
    }

    /// The int8 codes and scales of `a`'s blocks as [`super::super::exact_int8`]
    /// finds them, 32 values at a time: `amax` the largest magnitude,
    /// `scale = amax / 127`, each code `x * (127 / amax)` rounded to the
    /// nearest (even) integer, and every value checked to be its code
    /// times the scale. Returns false where a block is not so (the caller
    /// then has none); the same codes and scales as the portable loop
    /// wherever both finish.
    ///
    /// # Safety
    /// The CPU must have AVX-512F/BW (which [`usable`] checks).
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn exact_int8(a: &[f32], qa: &mut [i8], da: &mut [f32]) -> bool {
        assert!(a.len() == qa.len() && a.len() == da.len() * QK);
        for ((blk, q), d) in a
            .chunks_exact(QK)
            .zip(qa.chunks_exact_mut(QK))
            .zip(da.iter_mut())
        {
            let x0 = _mm512_loadu_ps(blk.as_ptr());
            let x1 = _mm512_loadu_ps(blk.as_ptr().add(16));
            let m = _mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1));
            let amax = _mm512_reduce_max_ps(m);
            if amax == 0.0 || amax.is_nan() {
                // Every value a zero (codes and scale 0), unless one is a
                // NaN (which `max` may have passed over).
                let z = _mm512_setzero_ps();
                let nz = _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(x0, z)
                    | _mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(x1, z);
                if nz != 0 {
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
            let inv = _mm512_set1_ps(127.0 / amax);
            let sv = _mm512_set1_ps(scale);
            let c0 = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm512_mul_ps(x0, inv),
            );
            let c1 = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
                _mm512_mul_ps(x1, inv),
            );
            // |c| <= 127 follows from |x| <= amax; equality with the value
            // is the check.
            let ok = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_mul_ps(c0, sv), x0)
                & _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(_mm512_mul_ps(c1, sv), x1);
            if ok != 0xffff {
                return false;
            }
            let b0 = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(c0));
            let b1 = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(c1));
            _mm_storeu_si128(q.as_mut_ptr().cast(), b0);
            _mm_storeu_si128(q.as_mut_ptr().add(16).cast(), b1);
            *d = scale;
        }
        true
    }

    /// [`super::pack_portable`]'s layout, 16 rows' groups gathered two at
    /// a time: the two bytes of group `g` of row `r` are at `r * k / 2 +
    /// 2g`, so a 32-bit gather at an even group reads that group and the
    /// next (a row holds `k / 4` groups, a multiple of 8, so the pair never
    /// passes the row's end), and VBMI's multishift picks the low or the
    /// high pair of bytes' four nibbles out into four bytes. One gather
    /// per two groups: the gathers were a quarter of a prompt's product.
    ///
    /// # Safety
    /// The CPU must have the features [`usable`] checks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vbmi")]
    pub unsafe fn pack(codes: &[u8], k: usize, j0: usize, live: usize, out: &mut [u8]) {
        let groups = k / 4;
        let row = k / 2;
        assert!(out.len() >= groups * 4 * NR && live <= NR && live > 0);
        assert!((j0 + live) * row <= codes.len() && groups.is_multiple_of(2));
        // Bit offsets of the four nibbles of each 32-bit lane's low half
        // within its 64-bit lane (0, 4, 8, 12 and 32, 36, 40, 44), and of
        // its high half (16 more each).
        let pick_lo = _mm512_set1_epi64(0x2c28_2420_0c08_0400);
        let pick_hi = _mm512_set1_epi64(0x3c38_3430_1c18_1410);
        let low = _mm512_set1_epi8(15);
        for half in 0..NR / 16 {
            let first = half * 16;
            if first >= live {
                // The rows past `live` are zeros.
                for g in 0..groups {
                    let dst = out.as_mut_ptr().add(g * 4 * NR + first * 4);
                    _mm512_storeu_si512(dst.cast(), _mm512_setzero_si512());
                }
                continue;
            }
            let rows = (live - first).min(16);
            let mask: __mmask16 = ((1u32 << rows) - 1) as u16;
            let base: [i32; 16] =
                std::array::from_fn(|r| ((j0 + first + r.min(rows - 1)) * row) as i32);
            let base = _mm512_loadu_si512(base.as_ptr().cast());
            for g in (0..groups).step_by(2) {
                let off = _mm512_add_epi32(base, _mm512_set1_epi32(2 * g as i32));
                // SAFETY (the reads): lane `r` reads bytes `off_r ..
                // off_r + 4` of `codes`, groups g and g + 1 of row `j0 +
                // first + r` (or of the last live row), inside the row
                // since g + 1 < groups, and inside `codes` since `(j0 +
                // live) * row <= codes.len()`; masked-off lanes read
                // nothing.
                let v = _mm512_mask_i32gather_epi32::<1>(
                    _mm512_setzero_si512(),
                    mask,
                    off,
                    codes.as_ptr().cast(),
                );
                let a = _mm512_and_si512(_mm512_multishift_epi64_epi8(pick_lo, v), low);
                let b = _mm512_and_si512(_mm512_multishift_epi64_epi8(pick_hi, v), low);
                let dst = out.as_mut_ptr().add(g * 4 * NR + first * 4);
                _mm512_storeu_si512(dst.cast(), a);
                _mm512_storeu_si512(dst.add(4 * NR).cast(), b);
            }
        }
    }

    /// [`super::run_portable`]'s sums, [`MR`] rows by [`NR`] columns a
    /// tile: per block, eight `vpdpbusd` groups into 32-bit sums (exact),
    /// then converted and added to the float sums by one multiply-add with
    /// `d * da`, as the portable form does.
    ///
    /// # Safety
    /// The CPU must have the features [`usable`] checks; `a`, `panel`
    /// and `c` must have the lengths `product_as` checks.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni,fma")]
    pub unsafe fn run(a: &IntRows, panel: &Panel, n: usize, c: &mut [f32]) {
        let k = panel.k;
        let nb = k / QK;
        assert!(a.qa.len() >= a.rows * k && a.da.len() >= a.rows * nb);
        assert!(panel.codes.len() >= k * NR && panel.d.len() >= nb * NR);
        assert!(c.len() >= a.rows * n && panel.j0 + panel.live <= n);
        let lo: __mmask16 = ((1u32 << panel.live.min(16)) - 1) as u16;
        let hi: __mmask16 = ((1u32 << panel.live.saturating_sub(16)) - 1) as u16;
        let mut i = 0;
        while i < a.rows {
            // A tile's rows; past the last row the last one again, its
            // results not stored.
            let r: [usize; MR] = std::array::from_fn(|t| (i + t).min(a.rows - 1));
            let qa: [*const i8; MR] = std::array::from_fn(|t| a.qa.as_ptr().add(r[t] * k));
            let da: [*const f32; MR] = std::array::from_fn(|t| a.da.as_ptr().add(r[t] * nb));
            let mut f = [_mm512_setzero_ps(); 2 * MR];
            let w = panel.codes.as_ptr();
            for b in 0..nb {
                let mut s = [_mm512_setzero_si512(); 2 * MR];
                for g in b * QK / 4..(b + 1) * QK / 4 {
                    let w0 = _mm512_loadu_si512(w.add(g * 4 * NR).cast());
                    let w1 = _mm512_loadu_si512(w.add(g * 4 * NR + 64).cast());
                    for t in 0..MR {
                        let x = _mm512_set1_epi32(qa[t].add(g * 4).cast::<i32>().read_unaligned());
                        s[2 * t] = _mm512_dpbusd_epi32(s[2 * t], w0, x);
                        s[2 * t + 1] = _mm512_dpbusd_epi32(s[2 * t + 1], w1, x);
                    }
                }
                let d0 = _mm512_loadu_ps(panel.d.as_ptr().add(b * NR));
                let d1 = _mm512_loadu_ps(panel.d.as_ptr().add(b * NR + 16));
                for t in 0..MR {
                    let x = _mm512_set1_ps(*da[t].add(b));
                    f[2 * t] = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(s[2 * t]),
                        _mm512_mul_ps(d0, x),
                        f[2 * t],
                    );
                    f[2 * t + 1] = _mm512_fmadd_ps(
                        _mm512_cvtepi32_ps(s[2 * t + 1]),
                        _mm512_mul_ps(d1, x),
                        f[2 * t + 1],
                    );
                }
            }
            for t in 0..MR.min(a.rows - i) {
                let dst = c.as_mut_ptr().add((i + t) * n + panel.j0);
                _mm512_mask_storeu_ps(dst, lo, f[2 * t]);
                if hi != 0 {
                    _mm512_mask_storeu_ps(dst.add(16), hi, f[2 * t + 1]);
                }
            }
            i += MR;
        }
    }
}

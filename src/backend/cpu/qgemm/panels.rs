//! A prompt's product takes its weights dequantized into the float32
//! GEMM's packed B panels (`tiled`): a panel row is one weight of each of
//! the panel's `nr` weight rows, so the codes are read across rows. The
//! portable form dequantizes a block of each row and then writes it
//! across, a float at a time, which on an Intel Xeon with AVX-512 took
//! 60% as long as the products themselves. Here a whole block of 4-bit
//! codes for a panel of 16 or 32 weight rows is gathered four bytes
//! (eight codes) per row at a time and written panel row by panel row,
//! `code * d + m` in two roundings as the portable form computes it, so
//! the panels hold the same bits.

use super::{QMatrix, QK};

/// Writes block `blk` (weights `blk * QK ..`) of weight rows `jb .. jb +
/// nr` into `dst`, `QK` rows of `nr` floats: row `i` holds weight `blk *
/// QK + i` of each row, `code * d + m` as [`QMatrix::dequantize_span`]
/// gives it. Returns false, having written nothing, where these weights
/// (8-bit codes, rows past the matrix) or this CPU (`nr` other than 32
/// with AVX-512 or 16 with AVX2) have no such form.
pub(super) fn block_panel(w: &QMatrix, jb: usize, blk: usize, nr: usize, dst: &mut [f32]) -> bool {
    // Which form serves this width on this CPU is decided first: where
    // none does (another architecture, no AVX2, a width the gathers do
    // not take), the caller's portable path runs at once, without this
    // function having read a block's scales it cannot use.
    let Some(form) = Form::for_width(nr) else {
        return false;
    };
    let nb = w.k / QK;
    let Some(codes) = w.codes.nibbles() else {
        return false;
    };
    if jb + nr > w.n || blk >= nb || dst.len() < QK * nr {
        return false;
    }
    // Row `jb`'s block: byte `(jb * k + blk * QK) / 2` (`k` is a multiple
    // of `QK`, so even); rows `k / 2` bytes apart.
    let first = (jb * w.k + blk * QK) / 2;
    let row = w.k / 2;
    // The last byte the gathers read: the block's 16 bytes of row
    // `jb + nr - 1`.
    let end = first + (nr - 1) * row + QK / 2;
    if end > codes.len() || (nr - 1) * row > i32::MAX as usize {
        return false;
    }
    let mut d = [0f32; 32];
    let mut m = [0f32; 32];
    w.d.view().strided(jb * nb + blk, nb, &mut d[..nr]);
    for (jj, m) in m[..nr].iter_mut().enumerate() {
        *m = w.offset((jb + jj) * nb + blk);
    }
    form.gather(&codes[first..end], row, &d, &m, dst);
    true
}

/// The gathering forms this build has: an empty enum where it has none, so
/// `for_width` is `None` and nothing past it runs.
#[derive(Clone, Copy)]
enum Form {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    Avx512x32,
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    Avx2x16,
}

impl Form {
    fn for_width(nr: usize) -> Option<Form> {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        {
            if nr == 32 && is_x86_feature_detected!("avx512f") {
                return Some(Form::Avx512x32);
            }
            if nr == 16 && is_x86_feature_detected!("avx2") {
                return Some(Form::Avx2x16);
            }
        }
        let _ = nr;
        None
    }

    /// `codes` is the span from row `jb`'s block to the last row's (checked
    /// by the caller against the matrix); `dst` holds `QK * width` floats.
    fn gather(self, codes: &[u8], row: usize, d: &[f32; 32], m: &[f32; 32], dst: &mut [f32]) {
        #[cfg(not(all(target_arch = "x86_64", not(miri))))]
        let _ = (codes, row, d, m, &dst);
        match self {
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            Form::Avx512x32 => {
                assert!(codes.len() >= 31 * row + QK / 2 && dst.len() >= QK * 32);
                // SAFETY: `for_width` chose this form only where AVX-512F
                // was detected. The gathers read 4 bytes at `base + jj *
                // row + g * 4` for `jj < 32`, `g < 4`: inside `codes` (its
                // length asserted above, the block's 16 bytes of each row);
                // the stores write `QK * 32` floats of `dst` (asserted);
                // the caller checked that `31 * row` fits an `i32`.
                unsafe { x86::panel32(codes.as_ptr(), row, d, m, dst.as_mut_ptr()) };
            }
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            Form::Avx2x16 => {
                assert!(codes.len() >= 15 * row + QK / 2 && dst.len() >= QK * 16);
                // SAFETY: as for `panel32`, with AVX2 detected by
                // `for_width`, 16 rows and `QK * 16` floats.
                unsafe { x86::panel16(codes.as_ptr(), row, d, m, dst.as_mut_ptr()) };
            }
        }
    }
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
mod x86 {
    use std::arch::x86_64::*;

    use super::QK;

    /// 32 rows' block into 32-wide panel rows.
    ///
    /// # Safety
    /// AVX-512F; `base + jj * row + g * 4 .. + 4` readable for `jj < 32`
    /// and `g < QK / 8`; `dst .. dst + QK * 32` writable; `row * 31`
    /// fits an `i32`.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn panel32(
        base: *const u8,
        row: usize,
        d: &[f32; 32],
        m: &[f32; 32],
        dst: *mut f32,
    ) {
        let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        let lo = _mm512_mullo_epi32(lanes, _mm512_set1_epi32(row as i32));
        let hi = _mm512_add_epi32(lo, _mm512_set1_epi32(16 * row as i32));
        let mask = _mm512_set1_epi32(15);
        // SAFETY: the caller's contract: the loads of `d` and `m` read
        // their 32 floats, each gather 4 bytes of a row's block, each
        // store 16 floats of row `g * 8 + t < QK` of `dst`.
        unsafe {
            let (d0, d1) = (
                _mm512_loadu_ps(d.as_ptr()),
                _mm512_loadu_ps(d.as_ptr().add(16)),
            );
            let (m0, m1) = (
                _mm512_loadu_ps(m.as_ptr()),
                _mm512_loadu_ps(m.as_ptr().add(16)),
            );
            for g in 0..QK / 8 {
                let at = base.add(g * 4).cast::<i32>();
                let v0 = _mm512_i32gather_epi32::<1>(lo, at);
                let v1 = _mm512_i32gather_epi32::<1>(hi, at);
                for t in 0..8 {
                    // Code `t` of the eight in each row's 4 bytes: weight
                    // `g * 8 + t` (bytes hold the even weight low).
                    let sh = _mm_cvtsi32_si128(4 * t as i32);
                    let c0 = _mm512_and_si512(_mm512_srl_epi32(v0, sh), mask);
                    let c1 = _mm512_and_si512(_mm512_srl_epi32(v1, sh), mask);
                    let f0 = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(c0), d0), m0);
                    let f1 = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(c1), d1), m1);
                    let out = dst.add((g * 8 + t) * 32);
                    _mm512_storeu_ps(out, f0);
                    _mm512_storeu_ps(out.add(16), f1);
                }
            }
        }
    }

    /// 16 rows' block into 16-wide panel rows.
    ///
    /// # Safety
    /// AVX2; `base + jj * row + g * 4 .. + 4` readable for `jj < 16` and
    /// `g < QK / 8`; `dst .. dst + QK * 16` writable; `row * 15` fits an
    /// `i32`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn panel16(
        base: *const u8,
        row: usize,
        d: &[f32; 32],
        m: &[f32; 32],
        dst: *mut f32,
    ) {
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let lo = _mm256_mullo_epi32(lanes, _mm256_set1_epi32(row as i32));
        let hi = _mm256_add_epi32(lo, _mm256_set1_epi32(8 * row as i32));
        let mask = _mm256_set1_epi32(15);
        // SAFETY: the caller's contract, as in `panel32` for 16 rows.
        unsafe {
            let (d0, d1) = (
                _mm256_loadu_ps(d.as_ptr()),
                _mm256_loadu_ps(d.as_ptr().add(8)),
            );
            let (m0, m1) = (
                _mm256_loadu_ps(m.as_ptr()),
                _mm256_loadu_ps(m.as_ptr().add(8)),
            );
            for g in 0..QK / 8 {
                let at = base.add(g * 4).cast::<i32>();
                let v0 = _mm256_i32gather_epi32::<1>(at, lo);
                let v1 = _mm256_i32gather_epi32::<1>(at, hi);
                for t in 0..8 {
                    let sh = _mm_cvtsi32_si128(4 * t as i32);
                    let c0 = _mm256_and_si256(_mm256_srl_epi32(v0, sh), mask);
                    let c1 = _mm256_and_si256(_mm256_srl_epi32(v1, sh), mask);
                    let f0 = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(c0), d0), m0);
                    let f1 = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(c1), d1), m1);
                    let out = dst.add((g * 8 + t) * 16);
                    _mm256_storeu_ps(out, f0);
                    _mm256_storeu_ps(out.add(8), f1);
                }
            }
        }
    }
}

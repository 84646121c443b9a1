//! Layout changes between NCHW and the blocked layout.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::par::{for_units, Out};
use super::simd::Block8;
use super::L;

/// NCHW `x` (`planes` groups of 8 planes of `hw`) into blocked `out`
/// when `into`, the other way when not: 8 pixels at a time on `T`'s
/// transpose, or on x86-64 16 at a time on AVX-512 (`wide`) where the
/// planes are large. Measured on an AVX-512 Zen 5, one thread, best of
/// 1000: 64 channels of 56x56 19.0-19.4 us against 20.6-21.0 on AVX2,
/// 32 of 112x112 40.2-40.6 against 44.0-46.4, 192 of 28x28 13.5-13.9
/// against 13.9-14.5; but 320 of 14x14 5.5-5.6 against 4.7-5.1 (each of
/// its rows starts 16 bytes past a cache line, and a misaligned 64-byte
/// access always splits one). The work is a copy, bound by memory.
///
/// # Safety
/// The CPU has `T`'s features, and with `wide` (x86-64 only, where `T`
/// is `__m256`) AVX-512F and AVX2; `x` and `out` hold at least `planes
/// * 8 * hw` floats.
pub(super) unsafe fn reorder<T: Block8>(
    x: &[f32],
    out: &mut [f32],
    planes: usize,
    hw: usize,
    into: bool,
    wide: bool,
) {
    let o = Out(out.as_mut_ptr());
    let xs = x.as_ptr() as usize;
    // Elsewhere there is no 16-pixel form.
    #[cfg(not(target_arch = "x86_64"))]
    let _ = wide;
    for_units(planes, planes * hw * L >= 1 << 16, move |b| {
        let _ = &o;
        let (x, out) = (
            (xs as *const f32).wrapping_add(b * L * hw),
            o.0.wrapping_add(b * L * hw),
        );
        // SAFETY: the caller's features (AVX-512F only where `wide`),
        // which `T::with` enables for `reorder_block`. With `b <
        // planes`, `x` and `out` point at block `b`, whose `8 * hw`
        // floats lie inside both buffers (the contract); the units write
        // disjoint blocks of `out`, which the caller's `&mut` keeps to
        // us until `for_units` returns.
        unsafe {
            #[cfg(target_arch = "x86_64")]
            if wide && hw >= WIDE_FROM {
                return reorder_block_16(x, out, hw, into);
            }
            T::with(
                #[inline(always)]
                || reorder_block::<T>(x, out, 0, hw, into),
            )
        }
    });
}

/// Pixels per plane from which the 16-pixel form runs (see [`reorder`]).
#[cfg(target_arch = "x86_64")]
const WIDE_FROM: usize = 512;

/// The vpermt2ps index tables of [`transpose_16x8`]: per stage, the
/// indices (a lane of the first source, or 16 + a lane of the second) of
/// the output with the stage's vector bit clear and of the one with it
/// set. In 8 vectors of 16 lanes, a 16 x 8 matrix stored by rows (vector
/// `j` holds rows `2j` and `2j + 1`) has its element at vector bits
/// `j2 j1 j0` and lane bits `i3 i2 i1 i0` (row `j2 j1 j0 i3`, column
/// `i2 i1 i0`); stored by columns (vector `c` holds column `c`), at
/// vector bits `i2 i1 i0` and lane bits `j2 j1 j0 i3`. Stage `k` swaps
/// vector bit `k` with lane bit `k`; the last stage also rotates the lane
/// bits (`i3 j2 j1 j0` to `j2 j1 j0 i3`).
#[cfg(any(test, target_arch = "x86_64"))]
const ROWS_TO_COLS: [[[u32; 16]; 2]; 3] = [
    [
        [0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30],
        [1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31],
    ],
    [
        [0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29],
        [2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31],
    ],
    [
        [0, 8, 1, 9, 2, 10, 3, 11, 16, 24, 17, 25, 18, 26, 19, 27],
        [4, 12, 5, 13, 6, 14, 7, 15, 20, 28, 21, 29, 22, 30, 23, 31],
    ],
];

/// The inverse's tables: the stages swap vector bits 2, 1 and 0 with
/// the same lane bits, the first one after undoing the rotation.
#[cfg(any(test, target_arch = "x86_64"))]
const COLS_TO_ROWS: [[[u32; 16]; 2]; 3] = [
    [
        [0, 2, 4, 6, 16, 18, 20, 22, 1, 3, 5, 7, 17, 19, 21, 23],
        [8, 10, 12, 14, 24, 26, 28, 30, 9, 11, 13, 15, 25, 27, 29, 31],
    ],
    [
        [0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29],
        [2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31],
    ],
    [
        [0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30],
        [1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31],
    ],
];

/// A vector of 16 floats with the two-source permute: `__m512`
/// (vpermt2ps) and, for tests on any machine, plain arrays.
#[cfg(any(test, target_arch = "x86_64"))]
trait Permute2: Copy {
    /// Lane `l` of the result: lane `idx[l] & 15` of `a`, or of `b` when
    /// `idx[l] & 16`.
    ///
    /// # Safety
    /// The kind's CPU features.
    unsafe fn permute2(a: Self, idx: &[u32; 16], b: Self) -> Self;
}

#[cfg(any(test, target_arch = "x86_64"))]
impl Permute2 for [f32; 16] {
    unsafe fn permute2(a: Self, idx: &[u32; 16], b: Self) -> Self {
        std::array::from_fn(|l| {
            let i = idx[l] as usize;
            if i & 16 == 0 {
                a[i & 15]
            } else {
                b[i & 15]
            }
        })
    }
}

#[cfg(target_arch = "x86_64")]
impl Permute2 for __m512 {
    #[inline(always)]
    unsafe fn permute2(a: Self, idx: &[u32; 16], b: Self) -> Self {
        // SAFETY: AVX-512F, which the caller guarantees; the index load
        // reads the 64 bytes of `idx`, a `[u32; 16]`, unaligned.
        unsafe { _mm512_permutex2var_ps(a, _mm512_loadu_si512(idx.as_ptr().cast()), b) }
    }
}

/// The 16 x 8 matrix in `v` by rows turned into columns, or back when
/// `tables` is [`COLS_TO_ROWS`] (see [`ROWS_TO_COLS`]): three stages of
/// eight permutes, each pairing the vectors whose indices differ in the
/// stage's bit.
///
/// # Safety
/// `P`'s CPU features.
#[cfg(any(test, target_arch = "x86_64"))]
#[inline(always)]
unsafe fn transpose_16x8<P: Permute2>(
    mut v: [P; 8],
    tables: &[[[u32; 16]; 2]; 3],
    bits: [usize; 3],
) -> [P; 8] {
    for (t, &k) in tables.iter().zip(&bits) {
        let bit = 1 << k;
        let mut w = v;
        for x in (0..8).filter(|x| x & bit == 0) {
            // SAFETY: `P`'s features, which the caller guarantees; the
            // permutes touch registers and the tables only.
            unsafe {
                w[x] = P::permute2(v[x], &t[0], v[x | bit]);
                w[x | bit] = P::permute2(v[x], &t[1], v[x | bit]);
            }
        }
        v = w;
    }
    v
}

/// [`reorder_block`] 16 pixels at a time on AVX-512 (rows of 16 pixels
/// of each of the 8 planes, or 16 blocked pixels of 8 channels), the
/// rest of the plane as AVX2 does it.
///
/// # Safety
/// The CPU has AVX-512F and AVX2; `x` and `out` hold `8 * hw` floats
/// each (one block: 8 planes of `hw`, or `hw` pixels of 8), `out` not
/// accessed by anyone else during the call.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2")]
unsafe fn reorder_block_16(x: *const f32, out: *mut f32, hw: usize, into: bool) {
    const W: usize = 16;
    let mut p = 0;
    // SAFETY: AVX-512F and AVX2 are enabled here (the caller's). With
    // `p + 16 <= hw`: plane `k`'s 16 pixels at `k * hw + p` end by `8 *
    // hw`, and the 8 vectors of 2 pixels at `(p + 2 * j) * 8` end at `(p
    // + 16) * 8 <= 8 * hw`, in `x` and `out` alike; `reorder_block` then
    // takes pixels `p..hw` under the same contract.
    unsafe {
        while p + W <= hw {
            if into {
                let c: [__m512; 8] = std::array::from_fn(|k| _mm512_loadu_ps(x.add(k * hw + p)));
                let r = transpose_16x8(c, &COLS_TO_ROWS, [2, 1, 0]);
                for (j, rj) in r.iter().enumerate() {
                    _mm512_storeu_ps(out.add((p + 2 * j) * L), *rj);
                }
            } else {
                let r: [__m512; 8] =
                    std::array::from_fn(|j| _mm512_loadu_ps(x.add((p + 2 * j) * L)));
                let c = transpose_16x8(r, &ROWS_TO_COLS, [0, 1, 2]);
                for (k, ck) in c.iter().enumerate() {
                    _mm512_storeu_ps(out.add(k * hw + p), *ck);
                }
            }
            p += W;
        }
        reorder_block::<__m256>(x, out, p, hw, into);
    }
}

/// Pixels `from..hw` of one block of 8 planes: 8 at a time on `T`'s
/// transpose, the rest one by one.
///
/// # Safety
/// Runs with `T`'s features (inside [`Vf::with`](super::simd::Vf::with),
/// or a function that enables them); `x` and `out` hold `8 * hw` floats
/// each, `out` not accessed by anyone else during the call.
#[inline(always)]
unsafe fn reorder_block<T: Block8>(
    x: *const f32,
    out: *mut f32,
    from: usize,
    hw: usize,
    into: bool,
) {
    let mut p = from;
    // SAFETY: `T`'s features are the caller's. With `p + 8 <= hw`,
    // plane `k`'s 8 pixels at `k * hw + p` and pixels `p + k` at `(p +
    // k) * 8` (8 floats each) end by `8 * hw`; the single pixels `q <
    // hw`, lanes `l < 8`, lie at `l * hw + q` and `q * 8 + l`, below `8
    // * hw`: inside `x` and `out` alike.
    unsafe {
        while p + L <= hw {
            // A loop, not `array::from_fn`: a closure would not inherit
            // `T`'s features if not inlined.
            let mut v = [T::splat(0.0); L];
            for (k, vk) in v.iter_mut().enumerate() {
                // into: row k = channel k's 8 pixels; else pixel p + k.
                *vk = T::load(if into {
                    x.add(k * hw + p)
                } else {
                    x.add((p + k) * L)
                });
            }
            let t = T::transpose8(v);
            for (k, tk) in t.iter().enumerate() {
                tk.store(if into {
                    out.add((p + k) * L)
                } else {
                    out.add(k * hw + p)
                });
            }
            p += L;
        }
        for q in p..hw {
            for l in 0..L {
                if into {
                    *out.add(q * L + l) = *x.add(l * hw + q);
                } else {
                    *out.add(l * hw + q) = *x.add(q * L + l);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain meaning of both directions, one element at a time.
    fn reference(x: &[f32], planes: usize, hw: usize, into: bool) -> Vec<f32> {
        let mut out = vec![0.0; x.len()];
        for b in 0..planes {
            for q in 0..hw {
                for l in 0..L {
                    let (nchw, blocked) = (b * L * hw + l * hw + q, b * L * hw + q * L + l);
                    match into {
                        true => out[blocked] = x[nchw],
                        false => out[nchw] = x[blocked],
                    }
                }
            }
        }
        out
    }

    /// The permute tables turn rows into columns and back: their scalar
    /// form, on any machine.
    #[test]
    fn the_16x8_tables_transpose() {
        let rows: [[f32; 16]; 8] =
            std::array::from_fn(|j| std::array::from_fn(|i| (16 * j + i) as f32));
        // SAFETY: `[f32; 16]`'s permute is plain indexing, which needs
        // no CPU features.
        let cols = unsafe { transpose_16x8(rows, &ROWS_TO_COLS, [0, 1, 2]) };
        for (c, col) in cols.iter().enumerate() {
            for (r, &x) in col.iter().enumerate() {
                assert_eq!(x, (8 * r + c) as f32, "column {c}, row {r}");
            }
        }
        // SAFETY: as above, plain arrays.
        let back = unsafe { transpose_16x8(cols, &COLS_TO_ROWS, [2, 1, 0]) };
        assert_eq!(back, rows);
    }

    /// A form of [`reorder`] this machine runs: its name and a call,
    /// whose caller gives it `x` and `out` of `planes * 8 * hw` floats.
    type Form = (
        &'static str,
        unsafe fn(&[f32], &mut [f32], usize, usize, bool),
    );

    /// The forms of [`reorder`]: the portable one (8 lanes in scalar
    /// code) everywhere, AVX2's and AVX-512's 16-pixel form where the CPU
    /// has them, NEON's on aarch64.
    fn forms() -> Vec<Form> {
        use super::super::simd::Lanes;
        let mut v: Vec<Form> = vec![("portable", |x, o, planes, hw, into| {
            // SAFETY: `Lanes` needs no CPU features; the sizes are the
            // caller's (see `Form`).
            unsafe { reorder::<Lanes<8>>(x, o, planes, hw, into, false) }
        })];
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") {
            v.push(("avx2", |x, o, planes, hw, into| {
                // SAFETY: AVX2 detected before this form was listed;
                // the sizes as above.
                unsafe { reorder::<__m256>(x, o, planes, hw, into, false) }
            }));
            if is_x86_feature_detected!("avx512f") {
                v.push(("avx512", |x, o, planes, hw, into| {
                    // SAFETY: AVX2 and AVX-512F detected before this
                    // form was listed; the sizes as above.
                    unsafe { reorder::<__m256>(x, o, planes, hw, into, true) }
                }));
            }
        }
        #[cfg(target_arch = "aarch64")]
        v.push(("neon", |x, o, planes, hw, into| {
            // SAFETY: NEON, which every aarch64 CPU has; the sizes as
            // above.
            unsafe { reorder::<super::super::simd::Neon8>(x, o, planes, hw, into, false) }
        }));
        v
    }

    /// Both directions in every form this machine runs, against the
    /// plain meaning, for planes that end in every way (whole runs of
    /// 16, runs of 8, single pixels; the 16-pixel form from 512 pixels).
    #[test]
    fn reorder_matches_the_reference() {
        // Under Miri (`scripts/miri.sh`) the planes that end in each way
        // below 512 pixels: it runs no AVX-512, so no 16-pixel form.
        let hws: &[usize] = match cfg!(miri) {
            true => &[1, 7, 8, 15, 16, 17, 33],
            false => &[
                1, 7, 8, 15, 16, 17, 24, 31, 33, 49, 196, 512, 529, 535, 536, 3136,
            ],
        };
        let forms = forms();
        for &hw in hws {
            for planes in [1, 3] {
                let x: Vec<f32> = (0..planes * L * hw).map(|i| i as f32 * 0.5 - 7.0).collect();
                for into in [true, false] {
                    let want = reference(&x, planes, hw, into);
                    for (name, run) in &forms {
                        let mut got = vec![f32::NAN; x.len()];
                        // SAFETY: `x` and `got` hold `planes * 8 * hw`
                        // floats; the form's features were detected
                        // when `forms` listed it.
                        unsafe { run(&x, &mut got, planes, hw, into) };
                        assert!(
                            got.iter()
                                .zip(&want)
                                .all(|(a, b)| a.to_bits() == b.to_bits()),
                            "hw {hw} planes {planes} into {into} {name}"
                        );
                    }
                }
            }
        }
    }
}

//! The dot products of one weight row's blocks with one activation row:
//! `sum over blocks b of d[b] * sum_j a[b*QK + j] * code[b*QK + j]` (the
//! offsets are added by the caller). A portable form, the reference, an
//! AVX2+FMA and an AVX-512F form (whose int8 forms take VNNI's dot
//! products, and VBMI's byte permute for the 4-bit codes, where the CPU
//! has them), and a NEON form (aarch64, `neon.rs`), picked once per
//! process ([`best`]); the tests hold the others to the portable one.
//! The int8 forms also come for four weight rows per pass (a decoding
//! step's one activation row against many weight rows), with the bits of
//! the one-row form.

use super::QK;

// A child of this module (it fills `Kernel`'s private fields), kept in
// its own file beside this one.
#[cfg(target_arch = "aarch64")]
#[path = "neon.rs"]
mod neon;

/// The integer form of a block dot product: codes, their scales per
/// block, int8 activations and theirs.
type IntDot<C> = fn(&[C], &[f32], &[i8], &[f32]) -> f32;

/// The same for consecutive weight rows (their codes and scales one after
/// another, a multiple of [`ROWS`] of them) against one activation row:
/// each row's sum written to its place in the last argument.
type IntDotRows<C> = fn(&[C], &[f32], &[i8], &[f32], &mut [f32]);

/// Weight rows that [`Kernel::q4i4`] and [`Kernel::q8i4`] take in each
/// pass.
pub const ROWS: usize = 4;

/// One instruction set's kernels.
pub struct Kernel {
    pub name: &'static str,
    /// 4-bit codes (`Codes::Nibbles` layout), `k / 2` bytes.
    q4: fn(&[u8], &[f32], &[f32]) -> f32,
    /// 8-bit codes, `k` bytes.
    q8: fn(&[i8], &[f32], &[f32]) -> f32,
    /// The same with int8 activations (each block `da[b] * qa`): integer
    /// dot products per block, scaled once, where the instruction set
    /// multiplies bytes (`None`: the float forms serve).
    q4i: Option<IntDot<u8>>,
    q8i: Option<IntDot<i8>>,
    /// The integer forms over [`ROWS`] weight rows at a time: a decoding
    /// step's product is one activation row against thousands of weight
    /// rows, and a single row's blocks form one chain of dependent
    /// multiply-adds, which leaves the core waiting on their latency;
    /// four rows are four independent chains over the same activation
    /// loads. Each row's sum is taken exactly as the one-row form takes
    /// it, so the results are the same bits.
    q4i4: Option<IntDotRows<u8>>,
    q8i4: Option<IntDotRows<i8>>,
}

impl Kernel {
    /// The sum of `d[b]` times the dot product of block `b` of `codes`
    /// and of `a` (`a.len()` weights, a whole number of blocks).
    #[inline]
    pub fn q4(&self, codes: &[u8], d: &[f32], a: &[f32]) -> f32 {
        assert!(
            a.len().is_multiple_of(QK) && codes.len() * 2 == a.len() && d.len() * QK == a.len()
        );
        (self.q4)(codes, d, a)
    }

    /// As [`Kernel::q4`] for 8-bit codes.
    #[inline]
    pub fn q8(&self, codes: &[i8], d: &[f32], a: &[f32]) -> f32 {
        assert!(a.len().is_multiple_of(QK) && codes.len() == a.len() && d.len() * QK == a.len());
        (self.q8)(codes, d, a)
    }

    /// Whether this instruction set takes int8 activations
    /// ([`Kernel::q4i`], [`Kernel::q8i`]).
    pub fn integer(&self) -> bool {
        self.q4i.is_some() && self.q8i.is_some()
    }

    /// As [`Kernel::q4`] with the activations as int8 codes `qa` and a
    /// scale `da` per block: `sum over b of d[b] * da[b] * sum_j qa * code`,
    /// the inner sums exact in integers. The portable form where the
    /// instruction set has none.
    #[inline]
    pub fn q4i(&self, codes: &[u8], d: &[f32], qa: &[i8], da: &[f32]) -> f32 {
        assert!(
            qa.len().is_multiple_of(QK)
                && codes.len() * 2 == qa.len()
                && d.len() * QK == qa.len()
                && da.len() == d.len()
        );
        self.q4i.unwrap_or(q4i_portable)(codes, d, qa, da)
    }

    /// As [`Kernel::q4i`] for 8-bit codes.
    #[inline]
    pub fn q8i(&self, codes: &[i8], d: &[f32], qa: &[i8], da: &[f32]) -> f32 {
        assert!(
            qa.len().is_multiple_of(QK)
                && codes.len() == qa.len()
                && d.len() * QK == qa.len()
                && da.len() == d.len()
        );
        self.q8i.unwrap_or(q8i_portable)(codes, d, qa, da)
    }

    /// As [`Kernel::q4i`] for `out.len()` consecutive weight rows (a
    /// multiple of [`ROWS`], taken [`ROWS`] at a time): `codes` and `d`
    /// hold the rows one after another; row `r`'s sum goes to `out[r]`,
    /// the one-row form's bit for bit. One call for a task's rows: a
    /// call per group cost as much as a group's work on short rows.
    #[inline]
    pub fn q4i4(&self, codes: &[u8], d: &[f32], qa: &[i8], da: &[f32], out: &mut [f32]) {
        let (k, nb, rows) = (qa.len(), da.len(), out.len());
        assert!(
            k.is_multiple_of(QK)
                && rows.is_multiple_of(ROWS)
                && codes.len() * 2 == rows * k
                && d.len() == rows * nb
                && nb * QK == k
        );
        match self.q4i4 {
            Some(f) => f(codes, d, qa, da, out),
            None => {
                for (r, o) in out.iter_mut().enumerate() {
                    *o = self.q4i(
                        &codes[r * k / 2..(r + 1) * k / 2],
                        &d[r * nb..(r + 1) * nb],
                        qa,
                        da,
                    );
                }
            }
        }
    }

    /// As [`Kernel::q4i4`] for 8-bit codes.
    #[inline]
    pub fn q8i4(&self, codes: &[i8], d: &[f32], qa: &[i8], da: &[f32], out: &mut [f32]) {
        let (k, nb, rows) = (qa.len(), da.len(), out.len());
        assert!(
            k.is_multiple_of(QK)
                && rows.is_multiple_of(ROWS)
                && codes.len() == rows * k
                && d.len() == rows * nb
                && nb * QK == k
        );
        match self.q8i4 {
            Some(f) => f(codes, d, qa, da, out),
            None => {
                for (r, o) in out.iter_mut().enumerate() {
                    *o = self.q8i(&codes[r * k..(r + 1) * k], &d[r * nb..(r + 1) * nb], qa, da);
                }
            }
        }
    }
}

/// The portable kernels: eight partial sums per block, which the
/// compiler can keep in one vector register. (On aarch64 only the tests
/// use them.)
#[cfg_attr(all(target_arch = "aarch64", not(test)), allow(dead_code))]
pub static PORTABLE: Kernel = Kernel {
    name: "portable",
    q4: q4_portable,
    q8: q8_portable,
    // Without byte multiplies the integer form gains nothing; the
    // portable one below is the reference the others are tested against.
    q4i: None,
    q8i: None,
    q4i4: None,
    q8i4: None,
};

/// The integer reference: exact block sums, then one scale per block.
/// Unlike the float forms, the integer ones take the activations in
/// their own order (byte `j` holds elements `2j` and `2j + 1`).
pub fn q4i_portable(codes: &[u8], d: &[f32], qa: &[i8], da: &[f32]) -> f32 {
    let mut total = 0f32;
    for (((c, &db), a), &dab) in codes
        .chunks_exact(QK / 2)
        .zip(d)
        .zip(qa.chunks_exact(QK))
        .zip(da)
    {
        let mut s = 0i32;
        for j in 0..QK / 2 {
            s += a[2 * j] as i32 * (c[j] & 15) as i32 + a[2 * j + 1] as i32 * (c[j] >> 4) as i32;
        }
        total += db * dab * s as f32;
    }
    total
}

/// As [`q4i_portable`] for 8-bit codes.
pub fn q8i_portable(codes: &[i8], d: &[f32], qa: &[i8], da: &[f32]) -> f32 {
    let mut total = 0f32;
    for (((c, &db), a), &dab) in codes
        .chunks_exact(QK)
        .zip(d)
        .zip(qa.chunks_exact(QK))
        .zip(da)
    {
        let s: i32 = c.iter().zip(a).map(|(&x, &y)| x as i32 * y as i32).sum();
        total += db * dab * s as f32;
    }
    total
}

fn q4_portable(codes: &[u8], d: &[f32], a: &[f32]) -> f32 {
    let mut total = 0f32;
    for ((c, &db), ab) in codes.chunks_exact(QK / 2).zip(d).zip(a.chunks_exact(QK)) {
        let mut s = [0f32; 8];
        for j in 0..QK / 2 {
            s[j % 8] += ab[j] * (c[j] & 15) as f32;
            s[j % 8] += ab[j + QK / 2] * (c[j] >> 4) as f32;
        }
        total += db * s.iter().sum::<f32>();
    }
    total
}

fn q8_portable(codes: &[i8], d: &[f32], a: &[f32]) -> f32 {
    let mut total = 0f32;
    for ((c, &db), ab) in codes.chunks_exact(QK).zip(d).zip(a.chunks_exact(QK)) {
        let mut s = [0f32; 8];
        for j in 0..QK {
            s[j % 8] += ab[j] * c[j] as f32;
        }
        total += db * s.iter().sum::<f32>();
    }
    total
}

/// The kernels this machine runs best.
pub fn best() -> &'static Kernel {
    #[cfg(target_arch = "x86_64")]
    {
        // `WEBNN_CPU_ISA=avx2` keeps an AVX-512 machine on AVX2, as for
        // the other kernels (comparisons).
        if avx512::usable() && !crate::backend::cpu::avx2_requested() {
            return match (avx512::vbmi(), avx512::vnni()) {
                (true, _) => &avx512::KERNEL_VBMI,
                (false, true) => &avx512::KERNEL_VNNI,
                _ => &avx512::KERNEL,
            };
        }
        if avx2::usable() {
            return &avx2::KERNEL;
        }
    }
    // NEON is part of every aarch64 CPU: nothing to detect.
    #[cfg(target_arch = "aarch64")]
    let best = &neon::KERNEL;
    #[cfg(not(target_arch = "aarch64"))]
    let best = &PORTABLE;
    best
}

/// The name of the kernels [`best`] picks, for the bench's report.
pub fn isa_name() -> &'static str {
    best().name
}

/// Every form this machine can run, the portable one first.
#[cfg(test)]
pub fn available() -> Vec<&'static Kernel> {
    let mut v = vec![&PORTABLE];
    #[cfg(target_arch = "x86_64")]
    {
        if avx2::usable() {
            v.push(&avx2::KERNEL);
        }
        if avx512::usable() {
            v.push(&avx512::KERNEL);
        }
        if avx512::vnni() {
            v.push(&avx512::KERNEL_VNNI);
        }
        if avx512::vbmi() {
            v.push(&avx512::KERNEL_VBMI);
        }
    }
    if !v.iter().any(|k| std::ptr::eq(*k, best())) {
        v.push(best());
    }
    v
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Kernel, QK};
    use std::arch::x86_64::*;

    pub fn usable() -> bool {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }

    pub static KERNEL: Kernel = Kernel {
        name: "avx2",
        q4: |c, d, a| {
            // SAFETY: `KERNEL` is only handed out by `best`/`available`
            // after `usable()` saw AVX2 and FMA; the lengths were checked
            // by `Kernel::q4`.
            unsafe { q4(c, d, a) }
        },
        q8: |c, d, a| {
            // SAFETY: as above, for `Kernel::q8`.
            unsafe { q8(c, d, a) }
        },
        q4i: Some(Q4I),
        q8i: Some(Q8I),
        q4i4: Some(Q4I4),
        q8i4: Some(Q8I4),
    };

    /// The integer forms, which the AVX-512 kernel takes too where the CPU
    /// has no VNNI (every CPU with AVX-512F has AVX2 and FMA).
    pub const Q4I: super::IntDot<u8> = |c, d, qa, da| {
        // SAFETY: handed out only with a kernel whose `usable()` saw AVX2
        // and FMA (this one's, or the AVX-512 one's, which checks them
        // too); the lengths were checked by `Kernel::q4i`.
        unsafe { maddubs::q4i(c, d, qa, da) }
    };
    pub const Q8I: super::IntDot<i8> = |c, d, qa, da| {
        // SAFETY: as above, for `Kernel::q8i`.
        unsafe { maddubs::q8i(c, d, qa, da) }
    };
    pub const Q4I4: super::IntDotRows<u8> = |c, d, qa, da, out| {
        // SAFETY: as above, for `Kernel::q4i4`.
        unsafe { maddubs::q4i4(c, d, qa, da, out) }
    };
    pub const Q8I4: super::IntDotRows<i8> = |c, d, qa, da, out| {
        // SAFETY: as above, for `Kernel::q8i4`.
        unsafe { maddubs::q8i4(c, d, qa, da, out) }
    };

    /// Block `b`'s 32 codes of 4 bits in element order, one per byte
    /// (`raw` points at its 16 bytes: even elements in the low halves,
    /// odd ones in the high).
    #[inline(always)]
    pub(super) unsafe fn nibbles(raw: *const u8) -> __m256i {
        let low = _mm_set1_epi8(0x0f);
        let raw = _mm_loadu_si128(raw as *const __m128i);
        let lo = _mm_and_si128(raw, low);
        let hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low);
        _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi))
    }

    /// Asks for the cache line at `p` ahead of its use, into L2. The 4-row
    /// forms read four rows' blocks in turn, a pattern the hardware's
    /// stream prefetchers follow poorly: from memory the 512-bit form read
    /// 9 GB/s of weights without this and 18-20 with it (Zen 5, 100 MB of
    /// weights, three times the L3; 8 to 32 groups ahead alike, 2 worse,
    /// the L2 hint a little ahead of L1's). `p` may lie past the
    /// codes' end (the last groups of a matrix): a prefetch is a hint,
    /// which never faults, and `wrapping_add` made the address without
    /// any claim that it is in bounds.
    #[inline(always)]
    pub(super) unsafe fn prefetch(p: *const u8) {
        _mm_prefetch::<_MM_HINT_T1>(p as *const i8);
    }

    /// Each 32-bit lane the sum of four products of unsigned bytes of `w`
    /// and signed bytes of `x` (AVX2: pairs into 16 bits, then pairs of
    /// those; no pair reaches the 16-bit bound with these operands).
    #[inline(always)]
    pub(super) unsafe fn dot_maddubs(w: __m256i, x: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1))
    }

    /// The integer forms of one instruction set, `$dot` the sum of four
    /// byte products per 32-bit lane: lane for lane, the same sums in the
    /// same order as llama.cpp's AVX2 dot product of its 4-bit and 8-bit
    /// blocks (each lane holds four consecutive elements' integer sum,
    /// scaled by `d * da` into one accumulator by a fused multiply-add,
    /// block after block). The integer lane sums are exact whichever
    /// instruction takes them, so every form gives the same bits.
    macro_rules! integer_forms {
        ($features:literal, $dot:path, $nibbles:path) => {
            use crate::backend::cpu::qgemm::kernels::avx2::hsum;
            use crate::backend::cpu::qgemm::QK;
            use std::arch::x86_64::*;
            use $nibbles as nibbles;

            /// # Safety
            /// The features named must be present;
            /// `codes.len() * 2 == qa.len()`, `d.len() * QK == qa.len()`,
            /// `da.len() == d.len()`.
            #[target_feature(enable = $features)]
            pub unsafe fn q4i(codes: &[u8], d: &[f32], qa: &[i8], da: &[f32]) -> f32 {
                let mut acc = _mm256_setzero_ps();
                let (cp, ap) = (codes.as_ptr(), qa.as_ptr());
                for (b, (&db, &dab)) in d.iter().zip(da).enumerate() {
                    // In bounds: block b's 16 code bytes and 32
                    // activations lie inside the slices whose lengths
                    // the caller checked.
                    let w = nibbles(cp.add(b * QK / 2));
                    let x = _mm256_loadu_si256(ap.add(b * QK) as *const __m256i);
                    let p = _mm256_cvtepi32_ps($dot(w, x));
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(db * dab), p, acc);
                }
                hsum(acc)
            }

            /// # Safety
            /// The features named must be present;
            /// `codes.len() == qa.len()`, `d.len() * QK == qa.len()`,
            /// `da.len() == d.len()`.
            #[target_feature(enable = $features)]
            pub unsafe fn q8i(codes: &[i8], d: &[f32], qa: &[i8], da: &[f32]) -> f32 {
                let mut acc = _mm256_setzero_ps();
                let (cp, ap) = (codes.as_ptr(), qa.as_ptr());
                for (b, (&db, &dab)) in d.iter().zip(da).enumerate() {
                    // In bounds: block b's 32 codes and 32 activations
                    // lie inside the slices whose lengths the caller
                    // checked.
                    let w = _mm256_loadu_si256(cp.add(b * QK) as *const __m256i);
                    let x = _mm256_loadu_si256(ap.add(b * QK) as *const __m256i);
                    // The byte multiply takes one unsigned operand: |w|
                    // against x with w's sign (128 * 127 * 2 still fits
                    // 16 bits).
                    let p = $dot(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
                    let p = _mm256_cvtepi32_ps(p);
                    acc = _mm256_fmadd_ps(_mm256_set1_ps(db * dab), p, acc);
                }
                hsum(acc)
            }
        };
        // The four-row forms, in a module that holds the one-row ones
        // (whose arm brings the names they use).
        (@q4i4 $features:literal, $dot:path) => {
            /// # Safety
            /// The features named must be present; `codes` and `d` hold
            /// `out.len()` rows, a multiple of `ROWS`:
            /// `codes.len() * 2 == out.len() * qa.len()`,
            /// `d.len() == out.len() * da.len()`, `da.len() * QK == qa.len()`.
            #[target_feature(enable = $features)]
            pub unsafe fn q4i4(codes: &[u8], d: &[f32], qa: &[i8], da: &[f32], out: &mut [f32]) {
                use crate::backend::cpu::qgemm::kernels::{
                    avx2::{prefetch, AHEAD},
                    ROWS,
                };
                let nb = da.len();
                let row = nb * QK / 2;
                let ap = qa.as_ptr();
                for (g, out) in out.chunks_exact_mut(ROWS).enumerate() {
                    // Group g's rows: in bounds by the lengths above.
                    let (cp, dp) = (
                        codes.as_ptr().add(g * ROWS * row),
                        d.as_ptr().add(g * ROWS * nb),
                    );
                    let mut acc = [_mm256_setzero_ps(); ROWS];
                    for (b, &dab) in da.iter().enumerate() {
                        // In bounds: block b of each of the ROWS rows (16
                        // code bytes, one scale) and of the activations.
                        // One cache line of a later group per block: the
                        // group's ROWS * row bytes are 64 * nb.
                        prefetch(cp.wrapping_add(AHEAD * ROWS * row + b * 64));
                        let x = _mm256_loadu_si256(ap.add(b * QK) as *const __m256i);
                        let dabv = _mm256_set1_ps(dab);
                        for (r, acc) in acc.iter_mut().enumerate() {
                            let w = nibbles(cp.add(r * row + b * QK / 2));
                            let p = _mm256_cvtepi32_ps($dot(w, x));
                            // d * da, the one float32 product the scalar
                            // form takes, in every lane.
                            let s = _mm256_mul_ps(_mm256_broadcast_ss(&*dp.add(r * nb + b)), dabv);
                            *acc = _mm256_fmadd_ps(s, p, *acc);
                        }
                    }
                    for (o, a) in out.iter_mut().zip(acc) {
                        *o = hsum(a);
                    }
                }
            }
        };
        (@q8i4 $features:literal, $dot:path) => {
            /// # Safety
            /// The features named must be present; `codes` and `d` hold
            /// `out.len()` rows, a multiple of `ROWS`:
            /// `codes.len() == out.len() * qa.len()`,
            /// `d.len() == out.len() * da.len()`, `da.len() * QK == qa.len()`.
            #[target_feature(enable = $features)]
            pub unsafe fn q8i4(codes: &[i8], d: &[f32], qa: &[i8], da: &[f32], out: &mut [f32]) {
                use crate::backend::cpu::qgemm::kernels::{
                    avx2::{prefetch, AHEAD},
                    ROWS,
                };
                let (k, nb) = (qa.len(), da.len());
                let ap = qa.as_ptr();
                for (g, out) in out.chunks_exact_mut(ROWS).enumerate() {
                    // Group g's rows: in bounds by the lengths above.
                    let (cp, dp) = (
                        codes.as_ptr().add(g * ROWS * k),
                        d.as_ptr().add(g * ROWS * nb),
                    );
                    let mut acc = [_mm256_setzero_ps(); ROWS];
                    for (b, &dab) in da.iter().enumerate() {
                        // In bounds: as in `q4i4`, with 32 code bytes a
                        // block. Two lines of a later group per block (its
                        // ROWS * k bytes are 128 * nb).
                        prefetch(cp.wrapping_add(AHEAD * ROWS * k + b * 128) as *const u8);
                        prefetch(cp.wrapping_add(AHEAD * ROWS * k + b * 128 + 64) as *const u8);
                        let x = _mm256_loadu_si256(ap.add(b * QK) as *const __m256i);
                        let dabv = _mm256_set1_ps(dab);
                        for (r, acc) in acc.iter_mut().enumerate() {
                            let w = _mm256_loadu_si256(cp.add(r * k + b * QK) as *const __m256i);
                            let p = $dot(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
                            let p = _mm256_cvtepi32_ps(p);
                            let s = _mm256_mul_ps(_mm256_broadcast_ss(&*dp.add(r * nb + b)), dabv);
                            *acc = _mm256_fmadd_ps(s, p, *acc);
                        }
                    }
                    for (o, a) in out.iter_mut().zip(acc) {
                        *o = hsum(a);
                    }
                }
            }
        };
    }
    pub(super) use integer_forms;

    /// The integer forms with AVX2's byte multiplies.
    pub(super) mod maddubs {
        super::integer_forms!("avx2,fma", super::dot_maddubs, super::nibbles);
        super::integer_forms!(@q4i4 "avx2,fma", super::dot_maddubs);
        super::integer_forms!(@q8i4 "avx2,fma", super::dot_maddubs);
    }

    /// How many groups of ROWS weight rows ahead the four-row forms ask
    /// for the codes (see `prefetch`).
    pub(super) const AHEAD: usize = 8;

    /// The eight lanes of `v` added.
    #[inline(always)]
    pub(super) unsafe fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    /// # Safety
    /// AVX2 and FMA must be present; `codes.len() * 2 == a.len()`,
    /// `d.len() * QK == a.len()`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn q4(codes: &[u8], d: &[f32], a: &[f32]) -> f32 {
        let low = _mm_set1_epi8(0x0f);
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let (cp, ap) = (codes.as_ptr(), a.as_ptr());
        for (b, &db) in d.iter().enumerate() {
            // In bounds: block b's 16 code bytes and 32 activations lie
            // inside the slices whose lengths the caller checked.
            let raw = _mm_loadu_si128(cp.add(b * QK / 2) as *const __m128i);
            let lo = _mm_and_si128(raw, low);
            let hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low);
            let w0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(lo));
            let w1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(lo, 8)));
            let w2 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(hi));
            let w3 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(hi, 8)));
            let x = ap.add(b * QK);
            let s0 = _mm256_fmadd_ps(
                _mm256_loadu_ps(x.add(8)),
                w1,
                _mm256_mul_ps(_mm256_loadu_ps(x), w0),
            );
            let s1 = _mm256_fmadd_ps(
                _mm256_loadu_ps(x.add(24)),
                w3,
                _mm256_mul_ps(_mm256_loadu_ps(x.add(16)), w2),
            );
            let s = _mm256_add_ps(s0, s1);
            // Two accumulators: consecutive blocks do not wait on each
            // other's FMA.
            if b % 2 == 0 {
                acc0 = _mm256_fmadd_ps(s, _mm256_set1_ps(db), acc0);
            } else {
                acc1 = _mm256_fmadd_ps(s, _mm256_set1_ps(db), acc1);
            }
        }
        hsum(_mm256_add_ps(acc0, acc1))
    }

    /// # Safety
    /// AVX2 and FMA must be present; `codes.len() == a.len()`,
    /// `d.len() * QK == a.len()`.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn q8(codes: &[i8], d: &[f32], a: &[f32]) -> f32 {
        let mut acc0 = _mm256_setzero_ps();
        let mut acc1 = _mm256_setzero_ps();
        let (cp, ap) = (codes.as_ptr(), a.as_ptr());
        for (b, &db) in d.iter().enumerate() {
            // In bounds: block b's 32 codes and 32 activations lie inside
            // the slices whose lengths the caller checked.
            let c = cp.add(b * QK);
            let lo = _mm_loadu_si128(c as *const __m128i);
            let hi = _mm_loadu_si128(c.add(16) as *const __m128i);
            let w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo));
            let w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)));
            let w2 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi));
            let w3 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)));
            let x = ap.add(b * QK);
            let s0 = _mm256_fmadd_ps(
                _mm256_loadu_ps(x.add(8)),
                w1,
                _mm256_mul_ps(_mm256_loadu_ps(x), w0),
            );
            let s1 = _mm256_fmadd_ps(
                _mm256_loadu_ps(x.add(24)),
                w3,
                _mm256_mul_ps(_mm256_loadu_ps(x.add(16)), w2),
            );
            let s = _mm256_add_ps(s0, s1);
            if b % 2 == 0 {
                acc0 = _mm256_fmadd_ps(s, _mm256_set1_ps(db), acc0);
            } else {
                acc1 = _mm256_fmadd_ps(s, _mm256_set1_ps(db), acc1);
            }
        }
        hsum(_mm256_add_ps(acc0, acc1))
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::{Kernel, QK};
    use std::arch::x86_64::*;

    /// AVX-512F, and the AVX2 and FMA that its integer forms use (every
    /// CPU with the first has the others; checked all the same).
    pub fn usable() -> bool {
        is_x86_feature_detected!("avx512f") && super::avx2::usable()
    }

    /// And VNNI's byte dot products on 256-bit vectors (AVX512_VNNI with
    /// AVX512VL): one instruction for AVX2's two.
    pub fn vnni() -> bool {
        usable() && is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512vl")
    }

    pub static KERNEL: Kernel = Kernel {
        name: "avx512",
        q4: Q4,
        q8: Q8,
        // The AVX2 integer forms (see `avx2::Q4I`): 256-bit byte
        // multiplies, present wherever AVX-512F is.
        q4i: Some(super::avx2::Q4I),
        q8i: Some(super::avx2::Q8I),
        q4i4: Some(super::avx2::Q4I4),
        q8i4: Some(super::avx2::Q8I4),
    };

    /// And VBMI's byte permutes (AVX512_VBMI with AVX512BW).
    pub fn vbmi() -> bool {
        vnni() && is_x86_feature_detected!("avx512vbmi") && is_x86_feature_detected!("avx512bw")
    }

    /// An AVX-512 kernel whose integer forms are module `$forms`'s.
    macro_rules! integer_kernel {
        ($(#[$doc:meta])* $static:ident, $name:literal, $forms:ident, $q4i4:path) => {
            $(#[$doc])*
            pub static $static: Kernel = Kernel {
                name: $name,
                q4: Q4,
                q8: Q8,
                q4i: Some(|c, d, qa, da| {
                    // SAFETY: this kernel is only handed out by
                    // `best`/`available` after the check its name says
                    // (`vnni()` or `vbmi()`) saw every feature its forms
                    // enable; the lengths were checked by `Kernel::q4i`.
                    unsafe { $forms::q4i(c, d, qa, da) }
                }),
                q8i: Some(|c, d, qa, da| {
                    // SAFETY: as above, for `Kernel::q8i`.
                    unsafe { $forms::q8i(c, d, qa, da) }
                }),
                q4i4: Some(|c, d, qa, da, out| {
                    // SAFETY: as above, for `Kernel::q4i4`.
                    unsafe { $q4i4(c, d, qa, da, out) }
                }),
                q8i4: Some(|c, d, qa, da, out| {
                    // SAFETY: as above, for `Kernel::q8i4` (whose form
                    // needs VNNI, which both checks see).
                    unsafe { wide::q8i4(c, d, qa, da, out) }
                }),
            };
        };
    }

    integer_kernel!(
        /// As [`KERNEL`], the integer forms with VNNI (the same bits: the
        /// lanes' integer sums are exact either way). Handed out after
        /// `vnni()`.
        KERNEL_VNNI,
        "avx512-vnni",
        vnni,
        vnni::q4i4
    );

    integer_kernel!(
        /// As [`KERNEL_VNNI`], the 4-bit codes put in element order by
        /// one byte permute (the same bits). Handed out after `vbmi()`.
        KERNEL_VBMI,
        "avx512-vnni-vbmi",
        vbmi,
        wide::q4i4
    );

    const Q4: fn(&[u8], &[f32], &[f32]) -> f32 = |c, d, a| {
        // SAFETY: the AVX-512 kernels are only handed out by
        // `best`/`available` after `usable()` saw AVX-512F; the lengths
        // were checked by `Kernel::q4`.
        unsafe { q4(c, d, a) }
    };
    const Q8: fn(&[i8], &[f32], &[f32]) -> f32 = |c, d, a| {
        // SAFETY: as above, for `Kernel::q8`.
        unsafe { q8(c, d, a) }
    };

    /// Each 32-bit lane the sum of four products of unsigned bytes of `w`
    /// and signed bytes of `x`, in one instruction (no saturation).
    #[inline(always)]
    unsafe fn dot_vnni(w: __m256i, x: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(_mm256_setzero_si256(), w, x)
    }

    /// The integer forms with VNNI.
    mod vnni {
        super::super::avx2::integer_forms!(
            "avx2,fma,avx512f,avx512vnni,avx512vl",
            super::dot_vnni,
            super::super::avx2::nibbles
        );
        super::super::avx2::integer_forms!(@q4i4 "avx2,fma,avx512f,avx512vnni,avx512vl", super::dot_vnni);
    }

    /// The integer forms with VNNI and VBMI's byte permutes (the kernel
    /// takes its four-row 4-bit form from [`wide`]).
    mod vbmi {
        super::super::avx2::integer_forms!(
            "avx2,fma,avx512f,avx512vnni,avx512vl,avx512bw,avx512vbmi",
            super::dot_vnni,
            super::nibbles_vbmi
        );
    }

    /// Four-row forms on 512-bit vectors: two weight rows per vector, the
    /// lower half one row's eight lanes, the upper half the next row's.
    /// Each half takes the 256-bit forms' lane sums in their order and is
    /// added up by the same `hsum`, so every row's sum keeps their bits;
    /// a vector op now serves two rows, which matters because the
    /// 256-bit forms are bound by the instructions they issue, not by
    /// memory (on Zen 5 they read 4-bit weights at 19 GB/s from L2).
    mod wide {
        use super::super::avx2::{hsum, prefetch, AHEAD};
        use super::super::ROWS;
        use super::QK;
        use std::arch::x86_64::*;

        /// The multishift control that puts each 64-bit lane's 16 codes
        /// (element `e` at bit `4e`) into bytes: even lanes take elements
        /// 0..8 of their source lane, odd lanes 8..16 (bit offsets 32 on,
        /// which wrap past bit 63 into bits the mask then clears).
        const fn shifts() -> [u8; 64] {
            let mut v = [0u8; 64];
            let mut i = 0;
            while i < 64 {
                v[i] = ((i / 8) % 2 * 32 + (i % 8) * 4) as u8;
                i += 1;
            }
            v
        }
        const SHIFTS: [u8; 64] = shifts();

        /// `x` in the lower half's lanes, `y` in the upper half's.
        #[inline(always)]
        unsafe fn halves(x: f32, y: f32) -> __m512 {
            _mm512_castpd_ps(_mm512_insertf64x4(
                _mm512_castps_pd(_mm512_set1_ps(x)),
                _mm256_castps_pd(_mm256_set1_ps(y)),
                1,
            ))
        }

        /// The upper 256 bits of `v`.
        #[inline(always)]
        unsafe fn upper(v: __m512) -> __m256 {
            _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1))
        }

        /// # Safety
        /// AVX-512F/BW/VL, VNNI and VBMI must be present; `codes` and `d`
        /// hold `out.len()` rows, a multiple of `ROWS`:
        /// `codes.len() * 2 == out.len() * qa.len()`,
        /// `d.len() == out.len() * da.len()`, `da.len() * QK == qa.len()`.
        #[target_feature(enable = "avx2,fma,avx512f,avx512vnni,avx512vl,avx512bw,avx512vbmi")]
        pub unsafe fn q4i4(codes: &[u8], d: &[f32], qa: &[i8], da: &[f32], out: &mut [f32]) {
            let nb = da.len();
            let row = nb * QK / 2;
            let ap = qa.as_ptr();
            // Output 64-bit lane i reads lane [0, 0, 1, 1, 2, 2, 3, 3][i]
            // of the two rows' 32 code bytes (the first row's 16, then
            // the second's).
            let spread = _mm512_set_epi64(3, 3, 2, 2, 1, 1, 0, 0);
            let shifts = _mm512_loadu_si512(SHIFTS.as_ptr() as *const _);
            let low = _mm512_set1_epi8(0x0f);
            for (g, out) in out.chunks_exact_mut(ROWS).enumerate() {
                // Group g's rows: in bounds by the lengths above.
                let (cp, dp) = (
                    codes.as_ptr().add(g * ROWS * row),
                    d.as_ptr().add(g * ROWS * nb),
                );
                let mut acc = [_mm512_setzero_ps(); ROWS / 2];
                for (b, &dab) in da.iter().enumerate() {
                    // In bounds: block b of each of the ROWS rows and of
                    // the activations; the prefetch as in `q4i4` of
                    // `integer_forms`.
                    prefetch(cp.wrapping_add(AHEAD * ROWS * row + b * 64));
                    let x = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                        ap.add(b * QK) as *const __m256i
                    ));
                    let dabv = _mm512_set1_ps(dab);
                    for (p, acc) in acc.iter_mut().enumerate() {
                        let r = 2 * p;
                        let raw = _mm256_loadu2_m128i(
                            cp.add((r + 1) * row + b * QK / 2) as *const __m128i,
                            cp.add(r * row + b * QK / 2) as *const __m128i,
                        );
                        let spread = _mm512_permutexvar_epi64(spread, _mm512_castsi256_si512(raw));
                        let w = _mm512_and_si512(_mm512_multishift_epi64_epi8(shifts, spread), low);
                        let dot =
                            _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), w, x));
                        // d * da per row, as the 256-bit forms take it.
                        let dr = halves(*dp.add(r * nb + b), *dp.add((r + 1) * nb + b));
                        *acc = _mm512_fmadd_ps(_mm512_mul_ps(dr, dabv), dot, *acc);
                    }
                }
                for (o, a) in out.chunks_exact_mut(2).zip(acc) {
                    o[0] = hsum(_mm512_castps512_ps256(a));
                    o[1] = hsum(upper(a));
                }
            }
        }

        /// As `q4i4` for 8-bit codes. The byte dot product takes one
        /// unsigned operand and AVX-512 has no byte sign operation: the
        /// codes are moved to unsigned (`w + 128`, one xor) and each
        /// lane's sum starts at `-128` times its activations' sum, so it
        /// ends at the exact `sum w * x` the 256-bit forms take.
        ///
        /// # Safety
        /// AVX-512F/BW/VL and VNNI must be present; `codes` and `d` hold
        /// `out.len()` rows, a multiple of `ROWS`:
        /// `codes.len() == out.len() * qa.len()`,
        /// `d.len() == out.len() * da.len()`, `da.len() * QK == qa.len()`.
        #[target_feature(enable = "avx2,fma,avx512f,avx512vnni,avx512vl,avx512bw")]
        pub unsafe fn q8i4(codes: &[i8], d: &[f32], qa: &[i8], da: &[f32], out: &mut [f32]) {
            let (k, nb) = (qa.len(), da.len());
            let ap = qa.as_ptr();
            let flip = _mm512_set1_epi8(-128);
            for (g, out) in out.chunks_exact_mut(ROWS).enumerate() {
                // Group g's rows: in bounds by the lengths above.
                let (cp, dp) = (
                    codes.as_ptr().add(g * ROWS * k),
                    d.as_ptr().add(g * ROWS * nb),
                );
                let mut acc = [_mm512_setzero_ps(); ROWS / 2];
                for (b, &dab) in da.iter().enumerate() {
                    // In bounds: block b of each of the ROWS rows (32
                    // codes each) and of the activations; two lines of a
                    // later group per block, as in `integer_forms`.
                    prefetch(cp.wrapping_add(AHEAD * ROWS * k + b * 128) as *const u8);
                    prefetch(cp.wrapping_add(AHEAD * ROWS * k + b * 128 + 64) as *const u8);
                    let x = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                        ap.add(b * QK) as *const __m256i
                    ));
                    // 128 times each lane's activations (the unsigned
                    // operand all 128), negated: every lane's start.
                    let start = _mm512_sub_epi32(
                        _mm512_setzero_si512(),
                        _mm512_dpbusd_epi32(_mm512_setzero_si512(), flip, x),
                    );
                    let dabv = _mm512_set1_ps(dab);
                    for (p, acc) in acc.iter_mut().enumerate() {
                        let r = 2 * p;
                        let w = _mm512_inserti64x4(
                            _mm512_castsi256_si512(_mm256_loadu_si256(
                                cp.add(r * k + b * QK) as *const __m256i
                            )),
                            _mm256_loadu_si256(cp.add((r + 1) * k + b * QK) as *const __m256i),
                            1,
                        );
                        let w = _mm512_xor_si512(w, flip);
                        let dot = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, w, x));
                        let dr = halves(*dp.add(r * nb + b), *dp.add((r + 1) * nb + b));
                        *acc = _mm512_fmadd_ps(_mm512_mul_ps(dr, dabv), dot, *acc);
                    }
                }
                for (o, a) in out.chunks_exact_mut(2).zip(acc) {
                    o[0] = hsum(_mm512_castps512_ps256(a));
                    o[1] = hsum(upper(a));
                }
            }
        }
    }

    /// As `avx2::nibbles` (block `b`'s 32 codes in element order, one per
    /// byte) in three operations instead of six: the 16 bytes in both
    /// halves, the upper half shifted down a nibble, both masked (low
    /// nibbles below, high ones above), then one byte permute that
    /// interleaves them (`vpermb`).
    #[inline(always)]
    unsafe fn nibbles_vbmi(raw: *const u8) -> __m256i {
        // Output byte p: element p, the low nibble of byte p / 2 (lower
        // half, index p / 2) when p is even, its high nibble (upper half,
        // index 16 + p / 2) when odd.
        const fn order() -> [i8; 32] {
            let mut v = [0i8; 32];
            let mut p = 0;
            while p < 32 {
                v[p] = (p / 2 + (p % 2) * 16) as i8;
                p += 1;
            }
            v
        }
        const ORDER: [i8; 32] = order();
        let both = _mm256_broadcastsi128_si256(_mm_loadu_si128(raw as *const __m128i));
        let split = _mm256_srlv_epi64(both, _mm256_set_epi64x(4, 4, 0, 0));
        let codes = _mm256_and_si256(split, _mm256_set1_epi8(0x0f));
        _mm256_permutexvar_epi8(_mm256_loadu_si256(ORDER.as_ptr() as *const __m256i), codes)
    }

    /// # Safety
    /// AVX-512F must be present; `codes.len() * 2 == a.len()`,
    /// `d.len() * QK == a.len()`.
    #[target_feature(enable = "avx512f")]
    unsafe fn q4(codes: &[u8], d: &[f32], a: &[f32]) -> f32 {
        let low = _mm_set1_epi8(0x0f);
        let mut acc0 = _mm512_setzero_ps();
        let mut acc1 = _mm512_setzero_ps();
        let (cp, ap) = (codes.as_ptr(), a.as_ptr());
        for (b, &db) in d.iter().enumerate() {
            // In bounds: block b's 16 code bytes and 32 activations lie
            // inside the slices whose lengths the caller checked.
            let raw = _mm_loadu_si128(cp.add(b * QK / 2) as *const __m128i);
            // The low halves are elements 0..16, the high halves 16..32.
            let lo = _mm_and_si128(raw, low);
            let hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low);
            let w0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo));
            let w1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi));
            let x = ap.add(b * QK);
            let s = _mm512_fmadd_ps(
                _mm512_loadu_ps(x.add(16)),
                w1,
                _mm512_mul_ps(_mm512_loadu_ps(x), w0),
            );
            // Two accumulators: consecutive blocks do not wait on each
            // other's FMA.
            if b % 2 == 0 {
                acc0 = _mm512_fmadd_ps(s, _mm512_set1_ps(db), acc0);
            } else {
                acc1 = _mm512_fmadd_ps(s, _mm512_set1_ps(db), acc1);
            }
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1))
    }

    /// # Safety
    /// AVX-512F must be present; `codes.len() == a.len()`,
    /// `d.len() * QK == a.len()`.
    #[target_feature(enable = "avx512f")]
    unsafe fn q8(codes: &[i8], d: &[f32], a: &[f32]) -> f32 {
        let mut acc0 = _mm512_setzero_ps();
        let mut acc1 = _mm512_setzero_ps();
        let (cp, ap) = (codes.as_ptr(), a.as_ptr());
        for (b, &db) in d.iter().enumerate() {
            // In bounds: block b's 32 codes and 32 activations lie inside
            // the slices whose lengths the caller checked.
            let c = cp.add(b * QK);
            let w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(c as *const __m128i)));
            let w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(
                c.add(16) as *const __m128i
            )));
            let x = ap.add(b * QK);
            let s = _mm512_fmadd_ps(
                _mm512_loadu_ps(x.add(16)),
                w1,
                _mm512_mul_ps(_mm512_loadu_ps(x), w0),
            );
            if b % 2 == 0 {
                acc0 = _mm512_fmadd_ps(s, _mm512_set1_ps(db), acc0);
            } else {
                acc1 = _mm512_fmadd_ps(s, _mm512_set1_ps(db), acc1);
            }
        }
        _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1))
    }
}

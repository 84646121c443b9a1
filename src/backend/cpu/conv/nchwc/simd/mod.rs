//! The float vectors the blocked kernels are written over.
//!
//! The kernels are generic over [`Vf`], a vector of `W` lanes (8 or 16)
//! that holds `W / 8` groups of the 8 lanes of a channel block. Four
//! kinds implement it: on x86-64 `__m256` (AVX2 and FMA) and `__m512`
//! (AVX-512F), on aarch64 `Neon8` (two NEON registers, `simd/neon.rs`),
//! and everywhere [`Lanes`], plain arrays with the same operations in
//! scalar code, so that the tests run the 16-lane form of every kernel
//! on any machine and compare it bit for bit with the hardware forms.
//! The operations are the ones whose results do not depend on the
//! vector width: a lane's value is the same function of its inputs in
//! every kind (fused multiply-add rounding once, max and min returning
//! their second operand for NaN and for equal zeros, as x86's do).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(target_arch = "aarch64")]
mod neon;
#[cfg(test)]
use super::L;
#[cfg(target_arch = "aarch64")]
pub(super) use neon::Neon8;

/// A vector of `W` floats; see the module comment.
///
/// # Safety
/// Every method of a hardware kind (`__m256`, `__m512`, `Neon8`)
/// executes that kind's instructions, the arithmetic as much as the
/// loads, so each is an `unsafe fn` whose caller guarantees that the
/// CPU has the kind's features: AVX2 and FMA for `__m256`, AVX-512F as
/// well for `__m512`, NEON for `Neon8` (which every aarch64 CPU has:
/// see `simd/neon.rs`). The kernels meet that by running inside
/// [`Vf::with`], entered only for an [`Isa`] that [`Isa::best`]
/// detected (see [`Isa`]). The pointer methods read or write through
/// `p` as each one says; `p` needs only the alignment of `f32` (the
/// hardware forms load and store unaligned).
pub(super) trait Vf: Copy {
    /// Lanes.
    const W: usize;
    /// Whether this is a hardware kind (`__m256`, `__m512`, `Neon8`),
    /// not the portable form the tests run.
    const HW: bool = true;
    /// Runs `f` compiled with this kind's CPU features (the kernels that
    /// it calls are `#[inline(always)]`, so they compile with them).
    ///
    /// # Safety
    /// The CPU has the features.
    unsafe fn with<R>(f: impl FnOnce() -> R) -> R;
    /// `v` in every lane.
    ///
    /// # Safety
    /// The CPU has the features.
    unsafe fn splat(v: f32) -> Self;
    /// The `W` floats at `p`.
    ///
    /// # Safety
    /// The features; `p .. p + W` readable.
    unsafe fn load(p: *const f32) -> Self;
    /// Writes the `W` lanes to `p`.
    ///
    /// # Safety
    /// The features; `p .. p + W` writable.
    unsafe fn store(self, p: *mut f32);
    /// The 8 floats at `p` in every group of 8 lanes.
    ///
    /// # Safety
    /// The features; `p .. p + 8` readable.
    unsafe fn load8_dup(p: *const f32) -> Self;
    /// Group `k` of 8 lanes from `p + k * stride`.
    ///
    /// # Safety
    /// The features; `p + k * stride .. p + k * stride + 8` readable
    /// for each `k < W / 8`.
    unsafe fn load_split(p: *const f32, stride: usize) -> Self;
    /// Group `k` of 8 lanes to `p + k * stride`.
    ///
    /// # Safety
    /// The features; `p + k * stride .. p + k * stride + 8` writable
    /// for each `k < W / 8`.
    unsafe fn store_split(self, p: *mut f32, stride: usize);
    /// `a * b + c`, rounded once.
    ///
    /// # Safety
    /// The CPU has the features (so for the rest).
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self;
    unsafe fn mul(a: Self, b: Self) -> Self;
    unsafe fn add(a: Self, b: Self) -> Self;
    unsafe fn sub(a: Self, b: Self) -> Self;
    /// `a > b ? a : b` (so `b` for NaN and equal zeros).
    unsafe fn max(a: Self, b: Self) -> Self;
    /// `a < b ? a : b`.
    unsafe fn min(a: Self, b: Self) -> Self;
}

/// A kind of 8 lanes, one channel block per vector, with the 8 x 8
/// transpose that the layout changes between NCHW and the blocked
/// layout run on (each of 8 planes' 8 pixels to 8 pixels of 8
/// channels, and back: the same transpose).
///
/// # Safety
/// As for [`Vf`]: the caller guarantees the kind's CPU features.
pub(super) trait Block8: Vf {
    /// Lane `j` of vector `i` to lane `i` of vector `j`.
    ///
    /// # Safety
    /// The CPU has the features.
    unsafe fn transpose8(r: [Self; 8]) -> [Self; 8];
    /// `a` in the lanes where it is NaN, `b` in the others (the bits of
    /// either kept as they are).
    ///
    /// # Safety
    /// The CPU has the features.
    unsafe fn nan_or(a: Self, b: Self) -> Self;
}

/// `W` floats in scalar code: the portable form of the kernels.
#[cfg(test)]
#[derive(Clone, Copy)]
pub(super) struct Lanes<const W: usize>([f32; W]);

#[cfg(test)]
impl<const W: usize> Vf for Lanes<W> {
    const W: usize = W;
    const HW: bool = false;
    #[inline(always)]
    unsafe fn with<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        Lanes([v; W])
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: `i < W`, and the caller makes `p .. p + W` readable;
        // `p` points into an `f32` slice, so it is aligned.
        Lanes(std::array::from_fn(|i| unsafe { *p.add(i) }))
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        for (i, v) in self.0.into_iter().enumerate() {
            // SAFETY: `i < W`, and the caller makes `p .. p + W`
            // writable (an aligned `f32` slice's cells).
            unsafe { *p.add(i) = v };
        }
    }
    #[inline(always)]
    unsafe fn load8_dup(p: *const f32) -> Self {
        // SAFETY: `i % L < 8`, and the caller makes `p .. p + 8`
        // readable (an aligned `f32` slice's cells).
        Lanes(std::array::from_fn(|i| unsafe { *p.add(i % L) }))
    }
    #[inline(always)]
    unsafe fn load_split(p: *const f32, stride: usize) -> Self {
        // SAFETY: lane `i` is in group `k = i / 8 < W / 8`, at
        // `p + k * stride + i % 8`, which the caller makes readable.
        Lanes(std::array::from_fn(|i| unsafe {
            *p.add(i / L * stride + i % L)
        }))
    }
    #[inline(always)]
    unsafe fn store_split(self, p: *mut f32, stride: usize) {
        for (i, v) in self.0.into_iter().enumerate() {
            // SAFETY: lane `i` is in group `k = i / 8 < W / 8`, at
            // `p + k * stride + i % 8`, which the caller makes writable.
            unsafe { *p.add(i / L * stride + i % L) = v };
        }
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        Lanes(std::array::from_fn(|i| a.0[i].mul_add(b.0[i], c.0[i])))
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        Lanes(std::array::from_fn(|i| a.0[i] * b.0[i]))
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        Lanes(std::array::from_fn(|i| a.0[i] + b.0[i]))
    }
    #[inline(always)]
    unsafe fn sub(a: Self, b: Self) -> Self {
        Lanes(std::array::from_fn(|i| a.0[i] - b.0[i]))
    }
    #[inline(always)]
    unsafe fn max(a: Self, b: Self) -> Self {
        Lanes(std::array::from_fn(|i| {
            if a.0[i] > b.0[i] {
                a.0[i]
            } else {
                b.0[i]
            }
        }))
    }
    #[inline(always)]
    unsafe fn min(a: Self, b: Self) -> Self {
        Lanes(std::array::from_fn(|i| {
            if a.0[i] < b.0[i] {
                a.0[i]
            } else {
                b.0[i]
            }
        }))
    }
}

#[cfg(test)]
impl Block8 for Lanes<8> {
    #[inline(always)]
    unsafe fn transpose8(r: [Self; 8]) -> [Self; 8] {
        std::array::from_fn(|j| Lanes(std::array::from_fn(|i| r[i].0[j])))
    }
    #[inline(always)]
    unsafe fn nan_or(a: Self, b: Self) -> Self {
        Lanes(std::array::from_fn(|i| {
            if a.0[i].is_nan() {
                a.0[i]
            } else {
                b.0[i]
            }
        }))
    }
}

/// Runs `f` with AVX2 and FMA enabled (see [`Vf::with`]).
///
/// # Safety
/// The CPU has AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// Runs `f` with AVX-512F, AVX2 and FMA enabled (see [`Vf::with`]).
///
/// # Safety
/// The CPU has AVX-512F, AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn with_avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

// In both x86 impls every method is an `unsafe fn` whose caller
// guarantees the kind's features (the trait's contract), which include
// the AVX, FMA or AVX-512F instruction of each intrinsic, and the
// pointer methods use only unaligned loads and stores (`loadu`,
// `storeu`), so the caller's range is all they need.
#[cfg(target_arch = "x86_64")]
impl Vf for __m256 {
    const W: usize = 8;
    #[inline(always)]
    unsafe fn with<R>(f: impl FnOnce() -> R) -> R {
        // SAFETY: the caller guarantees AVX2 and FMA, the features
        // that `with_avx2` enables.
        unsafe { with_avx2(f) }
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        // SAFETY: AVX, which the caller's AVX2 includes.
        unsafe { _mm256_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: AVX (the caller's); the caller makes `p .. p + 8`
        // readable, and the load is unaligned.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: AVX (the caller's); the caller makes `p .. p + 8`
        // writable, and the store is unaligned.
        unsafe { _mm256_storeu_ps(p, self) }
    }
    #[inline(always)]
    unsafe fn load8_dup(p: *const f32) -> Self {
        // SAFETY: AVX (the caller's); the 8 floats at `p`, which the
        // caller makes readable (one group: `W` is 8).
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn load_split(p: *const f32, _: usize) -> Self {
        // SAFETY: AVX (the caller's); one group of 8 (`W / 8` is 1), at
        // `p`, which the caller makes readable.
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store_split(self, p: *mut f32, _: usize) {
        // SAFETY: AVX (the caller's); one group of 8 (`W / 8` is 1), at
        // `p`, which the caller makes writable.
        unsafe { _mm256_storeu_ps(p, self) }
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        // SAFETY: FMA, which the caller guarantees.
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        // SAFETY: AVX (the caller's); registers only.
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        // SAFETY: AVX (the caller's); registers only.
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: Self, b: Self) -> Self {
        // SAFETY: AVX (the caller's); registers only.
        unsafe { _mm256_sub_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn max(a: Self, b: Self) -> Self {
        // SAFETY: AVX (the caller's); registers only.
        unsafe { _mm256_max_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn min(a: Self, b: Self) -> Self {
        // SAFETY: AVX (the caller's); registers only.
        unsafe { _mm256_min_ps(a, b) }
    }
}

#[cfg(target_arch = "x86_64")]
impl Block8 for __m256 {
    #[inline(always)]
    unsafe fn transpose8(r: [Self; 8]) -> [Self; 8] {
        // SAFETY: AVX (the caller's AVX2 includes it), all that
        // `transpose` asks; registers only.
        unsafe { crate::backend::cpu::conv::common::transpose(r) }
    }
    #[inline(always)]
    unsafe fn nan_or(a: Self, b: Self) -> Self {
        // The unordered compare of `a` with itself is true where `a` is
        // NaN; the blend takes `a` there.
        // SAFETY: AVX (the caller's); registers only.
        unsafe { _mm256_blendv_ps(b, a, _mm256_cmp_ps::<_CMP_UNORD_Q>(a, a)) }
    }
}

#[cfg(target_arch = "x86_64")]
impl Vf for __m512 {
    const W: usize = 16;
    #[inline(always)]
    unsafe fn with<R>(f: impl FnOnce() -> R) -> R {
        // SAFETY: the caller guarantees AVX-512F, AVX2 and FMA, the
        // features that `with_avx512` enables.
        unsafe { with_avx512(f) }
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        // SAFETY: AVX-512F, which the caller guarantees.
        unsafe { _mm512_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: AVX-512F (the caller's); the caller makes `p .. p +
        // 16` readable, and the load is unaligned.
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: AVX-512F (the caller's); the caller makes `p .. p +
        // 16` writable, and the store is unaligned.
        unsafe { _mm512_storeu_ps(p, self) }
    }
    #[inline(always)]
    unsafe fn load8_dup(p: *const f32) -> Self {
        // SAFETY: AVX and AVX-512F (the caller's); one unaligned load of
        // the 32 bytes at `p` (8 floats, read as 4 doubles: the bits
        // move unchanged), which the caller makes readable, broadcast in
        // registers.
        unsafe { _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(p as *const f64))) }
    }
    #[inline(always)]
    unsafe fn load_split(p: *const f32, stride: usize) -> Self {
        // SAFETY: AVX and AVX-512F (the caller's); two unaligned loads
        // of 8 floats, at `p` and `p + stride` (groups 0 and 1 of
        // `W / 8 = 2`), which the caller makes readable; the rest moves
        // registers.
        unsafe {
            let lo = _mm512_castps256_ps512(_mm256_loadu_ps(p));
            let hi = _mm256_castps_pd(_mm256_loadu_ps(p.add(stride)));
            _mm512_castpd_ps(_mm512_insertf64x4::<1>(_mm512_castps_pd(lo), hi))
        }
    }
    #[inline(always)]
    unsafe fn store_split(self, p: *mut f32, stride: usize) {
        // SAFETY: AVX and AVX-512F (the caller's); two unaligned stores
        // of 8 floats, at `p` and `p + stride` (groups 0 and 1), which
        // the caller makes writable.
        unsafe {
            _mm256_storeu_ps(p, _mm512_castps512_ps256(self));
            let hi = _mm512_extractf64x4_pd::<1>(_mm512_castps_pd(self));
            _mm256_storeu_ps(p.add(stride), _mm256_castpd_ps(hi));
        }
    }
    #[inline(always)]
    unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
        // SAFETY: AVX-512F (the caller's); registers only.
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    unsafe fn mul(a: Self, b: Self) -> Self {
        // SAFETY: AVX-512F (the caller's); registers only.
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn add(a: Self, b: Self) -> Self {
        // SAFETY: AVX-512F (the caller's); registers only.
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn sub(a: Self, b: Self) -> Self {
        // SAFETY: AVX-512F (the caller's); registers only.
        unsafe { _mm512_sub_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn max(a: Self, b: Self) -> Self {
        // SAFETY: AVX-512F (the caller's); registers only.
        unsafe { _mm512_max_ps(a, b) }
    }
    #[inline(always)]
    unsafe fn min(a: Self, b: Self) -> Self {
        // SAFETY: AVX-512F (the caller's); registers only.
        unsafe { _mm512_min_ps(a, b) }
    }
}

/// Which vectors a blocked convolution runs on, chosen at build.
///
/// The kernels' `unsafe` blocks rely on this invariant: a value `Avx2`
/// or `Avx512` names features this CPU has. Only [`Isa::best`] makes
/// them, after detecting the features, and `depthwise::preferred`,
/// which returns its argument or `Avx2` for an `Avx512` one; the tests
/// make them only after the same detection. `Neon` needs NEON, which
/// every aarch64 CPU has (a compile-time check in `simd/neon.rs`), and
/// `Portable` no features at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend::cpu) enum Isa {
    /// `__m256`: AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// `__m512` (with `__m256` for single 8-channel blocks): AVX-512F.
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// `Neon8`: two NEON registers per vector, tiles as on AVX2.
    #[cfg(target_arch = "aarch64")]
    Neon,
    /// [`Lanes`] of 16 (and 8): the portable form, for tests.
    #[cfg(test)]
    Portable,
}

impl Isa {
    /// The widest this CPU runs (`None`: none here, as on x86-64
    /// without AVX2 and FMA); `WEBNN_CPU_ISA=avx2` at build keeps
    /// AVX-512 machines on AVX2 (for comparisons). On aarch64 always
    /// NEON.
    pub(in crate::backend::cpu) fn best() -> Option<Isa> {
        #[cfg(target_arch = "x86_64")]
        {
            if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
                return None;
            }
            let narrow = crate::backend::cpu::avx2_requested();
            Some(match is_x86_feature_detected!("avx512f") && !narrow {
                true => Isa::Avx512,
                false => Isa::Avx2,
            })
        }
        #[cfg(target_arch = "aarch64")]
        {
            Some(Isa::Neon)
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        {
            None
        }
    }

    /// What the bench and the profile print.
    pub(in crate::backend::cpu) fn name(self) -> &'static str {
        match self {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => "avx2+fma",
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => "avx512f",
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => "neon",
            #[cfg(test)]
            Isa::Portable => "portable",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values on which the kinds could part: NaN, both zeros (max and
    /// min return their second operand for both), infinities, the
    /// smallest subnormal and normal, and products that round (where a
    /// multiply-add that rounded twice would differ).
    const SPECIAL: [f32; 16] = [
        f32::NAN,
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1.0e-45,
        -1.0e-45,
        f32::MIN_POSITIVE,
        1.0,
        -1.0,
        1.0 + f32::EPSILON,
        1.0 - f32::EPSILON / 2.0,
        0.1,
        -3.3,
        1.0e30,
        f32::MAX,
    ];

    /// Lanes `i` of `a`, `b` and `c` for case `k`: every pair of
    /// [`SPECIAL`] values meets in some lane of some case (`k / 16` the
    /// offset between them), then values from a small generator.
    fn inputs<const W: usize>(k: usize) -> [[f32; W]; 3] {
        let mut seed = (k as u32).wrapping_mul(2_654_435_761);
        let mut next = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            f32::from_bits(seed >> 2 | (seed & 1) << 31)
        };
        std::array::from_fn(|v| {
            std::array::from_fn(|i| match k < 256 {
                true => SPECIAL[(k % 16 + i + v * (k / 16)) % 16],
                false => next(),
            })
        })
    }

    /// Whether `a` and `b` are the same value: the same bits, or both
    /// NaN (whose payloads Rust leaves open).
    fn same(a: &[f32], b: &[f32]) -> bool {
        a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
    }

    /// The lanes of `v`.
    ///
    /// # Safety
    /// `V`'s features.
    unsafe fn lanes<V: Vf, const W: usize>(v: V) -> [f32; W] {
        let mut out = [0.0; W];
        // SAFETY: `V`'s features (the caller's); `out` holds `W` floats.
        unsafe { v.store(out.as_mut_ptr()) };
        out
    }

    /// The arithmetic of [`Vf`].
    const OPS: [&str; 6] = ["fma", "mul", "add", "sub", "max", "min"];

    /// Operation `k` of [`OPS`] on `a` and `b` (and `c`).
    ///
    /// # Safety
    /// `T`'s features.
    #[inline(always)]
    unsafe fn op<T: Vf>(k: usize, a: T, b: T, c: T) -> T {
        // SAFETY: `T`'s features, the caller's; registers only.
        unsafe {
            match k {
                0 => T::fma(a, b, c),
                1 => T::mul(a, b),
                2 => T::add(a, b),
                3 => T::sub(a, b),
                4 => T::max(a, b),
                _ => T::min(a, b),
            }
        }
    }

    /// Every operation of `V` gives each lane the bits of [`Lanes`]'s,
    /// and the loads and stores move the lanes they say they move.
    ///
    /// # Safety
    /// The CPU has `V`'s features; `V::W` is `W`.
    unsafe fn agrees_with_lanes<V: Vf, const W: usize>() {
        assert_eq!(V::W, W);
        // SAFETY: `V`'s features, the caller's (and `Lanes` needs none),
        // which `with` enables; every pointer is to an array of `W`
        // floats, or of 8 for `load8_dup`, or two groups of 8 at `p` and
        // `p + 24` in one of 32 for the split forms (`W / 8` groups).
        unsafe {
            V::with(
                #[inline(always)]
                || {
                    for k in 0..512 {
                        let [a, b, c] = inputs::<W>(k);
                        let v = |x: &[f32; W]| V::load(x.as_ptr());
                        let l = |x: &[f32; W]| Lanes::<W>::load(x.as_ptr());
                        assert!(same(&lanes::<V, W>(v(&a)), &a), "load, case {k}");
                        for (o, name) in OPS.iter().enumerate() {
                            let got = lanes::<V, W>(op(o, v(&a), v(&b), v(&c)));
                            let want = lanes::<Lanes<W>, W>(op(o, l(&a), l(&b), l(&c)));
                            assert!(same(&got, &want), "{name}, case {k}: {got:?} {want:?}");
                        }
                    }
                    let x: [f32; 32] = std::array::from_fn(|i| i as f32);
                    let dup = lanes::<V, W>(V::load8_dup(x.as_ptr()));
                    assert!((0..W).all(|i| dup[i] == (i % 8) as f32), "load8_dup");
                    let split = V::load_split(x.as_ptr(), 24);
                    let got = lanes::<V, W>(split);
                    assert!((0..W).all(|i| got[i] == (i / 8 * 24 + i % 8) as f32));
                    let mut back = [f32::NAN; 32];
                    split.store_split(back.as_mut_ptr(), 24);
                    assert!((0..W).all(|i| back[i / 8 * 24 + i % 8] == got[i]));
                    assert_eq!(lanes::<V, W>(V::splat(-0.0))[W - 1].to_bits(), 1 << 31);
                },
            )
        }
    }

    /// `T`'s transpose is [`Lanes`]'s.
    ///
    /// # Safety
    /// The CPU has `T`'s features.
    unsafe fn transposes_as_lanes<T: Block8>() {
        let x: [f32; 64] = std::array::from_fn(|i| i as f32);
        // SAFETY: `T`'s features, the caller's; each load reads 8 of
        // the 64 floats of `x`.
        let got = unsafe {
            let t = T::transpose8(std::array::from_fn(|i| T::load(x.as_ptr().add(8 * i))));
            t.map(|v| lanes::<T, 8>(v))
        };
        for (j, row) in got.iter().enumerate() {
            for (i, &v) in row.iter().enumerate() {
                assert_eq!(v, x[8 * i + j], "lane {i} of vector {j}");
            }
        }
    }

    /// The portable form against itself (the reference's own contract:
    /// the values of the operations' definitions), then every hardware
    /// kind this machine runs against it.
    #[test]
    fn every_kind_agrees_with_the_portable_form() {
        // SAFETY: `Lanes` needs no features.
        unsafe {
            agrees_with_lanes::<Lanes<8>, 8>();
            transposes_as_lanes::<Lanes<8>>();
        }
        let l = |x: f32| Lanes::<1>([x]);
        // SAFETY: as above.
        let (mx, mn) = unsafe {
            (
                Lanes::max(l(-0.0), l(0.0)).0,
                Lanes::min(l(1.0), l(f32::NAN)).0,
            )
        };
        assert_eq!(mx[0].to_bits(), 0.0f32.to_bits());
        assert!(mn[0].is_nan());
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            // SAFETY: AVX2 and FMA detected just above.
            unsafe {
                agrees_with_lanes::<__m256, 8>();
                transposes_as_lanes::<__m256>();
            }
            if is_x86_feature_detected!("avx512f") {
                // SAFETY: AVX-512F detected just above, with AVX2 and FMA.
                unsafe { agrees_with_lanes::<__m512, 16>() };
            }
        }
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON, which every aarch64 CPU has.
        unsafe {
            agrees_with_lanes::<Neon8, 8>();
            transposes_as_lanes::<Neon8>();
        }
    }
}

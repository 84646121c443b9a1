//! The float vectors the blocked kernels are written over.
//!
//! The kernels are generic over [`Vf`], a vector of `W` lanes (8 or 16)
//! that holds `W / 8` groups of the 8 lanes of a channel block. Three
//! kinds implement it: `__m256` (AVX2 and FMA), `__m512` (AVX-512F) and
//! [`Lanes`], plain arrays with the same operations in scalar code, so
//! that the tests run the 16-lane form of every kernel on any x86-64
//! machine and compare it bit for bit with the hardware forms. The
//! operations are the ones whose results do not depend on the vector
//! width: a lane's value is the same function of its inputs in all
//! three (fused multiply-add rounding once, max and min returning their
//! second operand for NaN and for equal zeros, as x86's do).

use std::arch::x86_64::*;

#[cfg(test)]
use super::L;

/// A vector of `W` floats; see the module comment.
///
/// # Safety
/// The pointer methods read or write `W` floats (`load8_dup`: 8, the
/// split forms: 8 at each of `W / 8` places). Every method of a
/// hardware kind needs its CPU features: call the kernels through
/// [`Vf::with`].
pub(super) trait Vf: Copy {
    /// Lanes.
    const W: usize;
    /// Runs `f` compiled with this kind's CPU features (the kernels that
    /// it calls are `#[inline(always)]`, so they compile with them).
    ///
    /// # Safety
    /// The CPU has the features.
    unsafe fn with<R>(f: impl FnOnce() -> R) -> R;
    fn splat(v: f32) -> Self;
    unsafe fn load(p: *const f32) -> Self;
    unsafe fn store(self, p: *mut f32);
    /// The 8 floats at `p` in every group of 8 lanes.
    unsafe fn load8_dup(p: *const f32) -> Self;
    /// Group `k` of 8 lanes from `p + k * stride`.
    unsafe fn load_split(p: *const f32, stride: usize) -> Self;
    /// Group `k` of 8 lanes to `p + k * stride`.
    unsafe fn store_split(self, p: *mut f32, stride: usize);
    /// `a * b + c`, rounded once.
    fn fma(a: Self, b: Self, c: Self) -> Self;
    fn mul(a: Self, b: Self) -> Self;
    fn add(a: Self, b: Self) -> Self;
    fn sub(a: Self, b: Self) -> Self;
    /// `a > b ? a : b` (so `b` for NaN and equal zeros).
    fn max(a: Self, b: Self) -> Self;
    /// `a < b ? a : b`.
    fn min(a: Self, b: Self) -> Self;
}

/// `W` floats in scalar code: the portable form of the kernels.
#[cfg(test)]
#[derive(Clone, Copy)]
pub(super) struct Lanes<const W: usize>([f32; W]);

#[cfg(test)]
impl<const W: usize> Vf for Lanes<W> {
    const W: usize = W;
    #[inline(always)]
    unsafe fn with<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
    #[inline(always)]
    fn splat(v: f32) -> Self {
        Lanes([v; W])
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the trait's contract.
        Lanes(std::array::from_fn(|i| unsafe { *p.add(i) }))
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        for (i, v) in self.0.into_iter().enumerate() {
            // SAFETY: the trait's contract.
            unsafe { *p.add(i) = v };
        }
    }
    #[inline(always)]
    unsafe fn load8_dup(p: *const f32) -> Self {
        // SAFETY: the trait's contract.
        Lanes(std::array::from_fn(|i| unsafe { *p.add(i % L) }))
    }
    #[inline(always)]
    unsafe fn load_split(p: *const f32, stride: usize) -> Self {
        // SAFETY: the trait's contract.
        Lanes(std::array::from_fn(|i| unsafe {
            *p.add(i / L * stride + i % L)
        }))
    }
    #[inline(always)]
    unsafe fn store_split(self, p: *mut f32, stride: usize) {
        for (i, v) in self.0.into_iter().enumerate() {
            // SAFETY: the trait's contract.
            unsafe { *p.add(i / L * stride + i % L) = v };
        }
    }
    #[inline(always)]
    fn fma(a: Self, b: Self, c: Self) -> Self {
        Lanes(std::array::from_fn(|i| a.0[i].mul_add(b.0[i], c.0[i])))
    }
    #[inline(always)]
    fn mul(a: Self, b: Self) -> Self {
        Lanes(std::array::from_fn(|i| a.0[i] * b.0[i]))
    }
    #[inline(always)]
    fn add(a: Self, b: Self) -> Self {
        Lanes(std::array::from_fn(|i| a.0[i] + b.0[i]))
    }
    #[inline(always)]
    fn sub(a: Self, b: Self) -> Self {
        Lanes(std::array::from_fn(|i| a.0[i] - b.0[i]))
    }
    #[inline(always)]
    fn max(a: Self, b: Self) -> Self {
        Lanes(std::array::from_fn(|i| {
            if a.0[i] > b.0[i] {
                a.0[i]
            } else {
                b.0[i]
            }
        }))
    }
    #[inline(always)]
    fn min(a: Self, b: Self) -> Self {
        Lanes(std::array::from_fn(|i| {
            if a.0[i] < b.0[i] {
                a.0[i]
            } else {
                b.0[i]
            }
        }))
    }
}

#[target_feature(enable = "avx2,fma")]
unsafe fn with_avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn with_avx512<R>(f: impl FnOnce() -> R) -> R {
    f()
}

// SAFETY (both impls): the trait's contract; `with` runs the callers
// with the features, into which these inline.
impl Vf for __m256 {
    const W: usize = 8;
    #[inline(always)]
    unsafe fn with<R>(f: impl FnOnce() -> R) -> R {
        unsafe { with_avx2(f) }
    }
    #[inline(always)]
    fn splat(v: f32) -> Self {
        unsafe { _mm256_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        unsafe { _mm256_storeu_ps(p, self) }
    }
    #[inline(always)]
    unsafe fn load8_dup(p: *const f32) -> Self {
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn load_split(p: *const f32, _: usize) -> Self {
        unsafe { _mm256_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store_split(self, p: *mut f32, _: usize) {
        unsafe { _mm256_storeu_ps(p, self) }
    }
    #[inline(always)]
    fn fma(a: Self, b: Self, c: Self) -> Self {
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    fn mul(a: Self, b: Self) -> Self {
        unsafe { _mm256_mul_ps(a, b) }
    }
    #[inline(always)]
    fn add(a: Self, b: Self) -> Self {
        unsafe { _mm256_add_ps(a, b) }
    }
    #[inline(always)]
    fn sub(a: Self, b: Self) -> Self {
        unsafe { _mm256_sub_ps(a, b) }
    }
    #[inline(always)]
    fn max(a: Self, b: Self) -> Self {
        unsafe { _mm256_max_ps(a, b) }
    }
    #[inline(always)]
    fn min(a: Self, b: Self) -> Self {
        unsafe { _mm256_min_ps(a, b) }
    }
}

impl Vf for __m512 {
    const W: usize = 16;
    #[inline(always)]
    unsafe fn with<R>(f: impl FnOnce() -> R) -> R {
        unsafe { with_avx512(f) }
    }
    #[inline(always)]
    fn splat(v: f32) -> Self {
        unsafe { _mm512_set1_ps(v) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        unsafe { _mm512_storeu_ps(p, self) }
    }
    #[inline(always)]
    unsafe fn load8_dup(p: *const f32) -> Self {
        unsafe { _mm512_castpd_ps(_mm512_broadcast_f64x4(_mm256_loadu_pd(p as *const f64))) }
    }
    #[inline(always)]
    unsafe fn load_split(p: *const f32, stride: usize) -> Self {
        unsafe {
            let lo = _mm512_castps256_ps512(_mm256_loadu_ps(p));
            let hi = _mm256_castps_pd(_mm256_loadu_ps(p.add(stride)));
            _mm512_castpd_ps(_mm512_insertf64x4::<1>(_mm512_castps_pd(lo), hi))
        }
    }
    #[inline(always)]
    unsafe fn store_split(self, p: *mut f32, stride: usize) {
        unsafe {
            _mm256_storeu_ps(p, _mm512_castps512_ps256(self));
            let hi = _mm512_extractf64x4_pd::<1>(_mm512_castps_pd(self));
            _mm256_storeu_ps(p.add(stride), _mm256_castpd_ps(hi));
        }
    }
    #[inline(always)]
    fn fma(a: Self, b: Self, c: Self) -> Self {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }
    #[inline(always)]
    fn mul(a: Self, b: Self) -> Self {
        unsafe { _mm512_mul_ps(a, b) }
    }
    #[inline(always)]
    fn add(a: Self, b: Self) -> Self {
        unsafe { _mm512_add_ps(a, b) }
    }
    #[inline(always)]
    fn sub(a: Self, b: Self) -> Self {
        unsafe { _mm512_sub_ps(a, b) }
    }
    #[inline(always)]
    fn max(a: Self, b: Self) -> Self {
        unsafe { _mm512_max_ps(a, b) }
    }
    #[inline(always)]
    fn min(a: Self, b: Self) -> Self {
        unsafe { _mm512_min_ps(a, b) }
    }
}

/// Which vectors a blocked convolution runs on, chosen at build.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend::cpu) enum Isa {
    /// `__m256`: AVX2 and FMA.
    Avx2,
    /// `__m512` (with `__m256` for single 8-channel blocks): AVX-512F.
    Avx512,
    /// [`Lanes`] of 16 (and 8): the portable form, for tests.
    #[cfg(test)]
    Portable,
}

impl Isa {
    /// The widest this CPU runs (`None`: not even AVX2 and FMA);
    /// `WEBNN_CPU_ISA=avx2` at build keeps AVX-512 machines on AVX2 (for
    /// comparisons).
    pub(in crate::backend::cpu) fn best() -> Option<Isa> {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            return None;
        }
        let narrow = crate::backend::cpu::avx2_requested();
        Some(match is_x86_feature_detected!("avx512f") && !narrow {
            true => Isa::Avx512,
            false => Isa::Avx2,
        })
    }

    /// What the bench and the profile print.
    pub(in crate::backend::cpu) fn name(self) -> &'static str {
        match self {
            Isa::Avx2 => "avx2+fma",
            Isa::Avx512 => "avx512f",
            #[cfg(test)]
            Isa::Portable => "portable",
        }
    }
}

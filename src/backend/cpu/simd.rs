//! The vector widths the CPU backend's plain loops are compiled for:
//! [`with_simd`] runs a closure compiled for the widest this CPU has, so
//! that loops written as scalar code (element-wise kernels, pools, the
//! GEMM's row-vector product) use 16- or 8-wide vectors without a copy of
//! each loop per instruction set. Its own module, below both the
//! element-wise kernels and the GEMM that use it; beside it, the cache
//! prefetch hint that the products share ([`prefetch`]).

/// Runs `f`, compiled for the widest vectors this CPU has: AVX-512
/// (F, BW, DQ, VL) where it has it, else AVX2 and FMA, else the baseline
/// target. The closures of the element-wise loops inline into it, so
/// their loops use 16- or 8-wide vectors. The loops are plain scalar code
/// that the compiler vectorises without reordering any arithmetic, so a
/// lane's result is the same at every width. `WEBNN_CPU_ISA=avx2` in the
/// environment (read once) keeps an AVX-512 machine on AVX2, for
/// comparisons.
#[inline(always)]
pub(crate) fn with_simd<R, F: FnOnce() -> R>(f: F) -> R {
    #[cfg(test)]
    if let Some(level) = FORCED.with(|c| c.get()) {
        // SAFETY: `pool_at` keeps only levels at most `detected_level()`.
        return unsafe { with_simd_at(level, f) };
    }
    // SAFETY: `simd_level` is `detected_level()`, or AVX2 below it, so
    // this CPU has its features.
    unsafe { with_simd_at(simd_level(), f) }
}

#[cfg(test)]
thread_local! {
    /// The level [`with_simd`] runs at on a thread of a [`pool_at`] pool.
    static FORCED: std::cell::Cell<Option<SimdLevel>> = const { std::cell::Cell::new(None) };
}

/// A pool of `threads` whose threads run every [`with_simd`] loop at
/// `level` (clipped to what this CPU has): a kernel that calls
/// `with_simd` itself, run through `install` on each of [`levels`], shows
/// that its width does not change its bits.
#[cfg(test)]
pub(crate) fn pool_at(level: SimdLevel, threads: usize) -> rayon::ThreadPool {
    let level = level.min(detected_level());
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .start_handler(move |_| FORCED.with(|c| c.set(Some(level))))
        .build()
        .expect("a test pool")
}

/// Runs `f` compiled for `level` (the tests run each level the CPU has).
///
/// # Safety
/// The CPU has `level`'s features (it is at most [`detected_level`]).
#[inline(always)]
pub(crate) unsafe fn with_simd_at<R, F: FnOnce() -> R>(level: SimdLevel, f: F) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
        unsafe fn avx512<R, F: FnOnce() -> R>(f: F) -> R {
            f()
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<R, F: FnOnce() -> R>(f: F) -> R {
            f()
        }
        match level {
            // SAFETY: the caller vouched for `level`'s features, the
            // ones `detected_level` checks and `avx512` enables.
            SimdLevel::Avx512 => return unsafe { avx512(f) },
            // SAFETY: as above: AVX2 and FMA.
            SimdLevel::Avx2 => return unsafe { avx2(f) },
            SimdLevel::Baseline => {}
        }
    }
    let _ = level;
    f()
}

/// The vectors [`with_simd`] compiles for (the x86-64 levels are never
/// chosen elsewhere).
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(crate) enum SimdLevel {
    Baseline,
    Avx2,
    Avx512,
}

impl SimdLevel {
    /// What the bench prints.
    pub(crate) fn name(self) -> &'static str {
        match self {
            // aarch64's baseline is NEON (part of the architecture),
            // which the compiler vectorises these loops with, 4 lanes
            // wide: name it, as the x86 levels are named.
            SimdLevel::Baseline if cfg!(target_arch = "aarch64") => "neon",
            SimdLevel::Baseline => "baseline",
            SimdLevel::Avx2 => "avx2+fma",
            SimdLevel::Avx512 => "avx512f",
        }
    }
}

/// The level the element-wise loops run at in this process: the widest
/// the CPU has, or AVX2 with `WEBNN_CPU_ISA=avx2` (read once).
pub(crate) fn simd_level() -> SimdLevel {
    static LEVEL: std::sync::OnceLock<SimdLevel> = std::sync::OnceLock::new();
    *LEVEL.get_or_init(|| {
        let narrow = crate::backend::cpu::avx2_requested();
        match detected_level() {
            SimdLevel::Avx512 if narrow => SimdLevel::Avx2,
            l => l,
        }
    })
}

/// The widest level this CPU has.
pub(crate) fn detected_level() -> SimdLevel {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
        {
            return SimdLevel::Avx512;
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return SimdLevel::Avx2;
        }
    }
    SimdLevel::Baseline
}

/// Every level this CPU has, narrowest first: what the tests run a
/// kernel at, to show that its width does not change its bits.
#[cfg(test)]
pub(crate) fn levels() -> Vec<SimdLevel> {
    [SimdLevel::Baseline, SimdLevel::Avx2, SimdLevel::Avx512]
        .into_iter()
        .filter(|&l| l <= detected_level())
        .collect()
}

/// Where [`prefetch`] asks for the lines: the first-level cache, or the
/// second (for data a loop reaches later than its next few iterations).
#[derive(Clone, Copy)]
pub(crate) enum CacheLevel {
    L1,
    L2,
}

/// Asks for the cache lines of `data[at]` (clipped to `data`) ahead of
/// their use, one request per 64-byte line. A hint only: it never faults
/// and changes no value; a no-op off x86-64.
#[inline(always)]
pub(crate) fn prefetch<T>(data: &[T], at: std::ops::Range<usize>, level: CacheLevel) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        let size = std::mem::size_of::<T>();
        let base = data.as_ptr().cast::<u8>();
        let end = at.end.min(data.len()) * size;
        let mut i = at.start * size;
        while i < end {
            let p = base.wrapping_add(i).cast::<i8>();
            // SAFETY: SSE is part of x86-64; a prefetch is a hint that
            // never faults and changes no memory, and the address is
            // inside `data` anyway (i < end <= its bytes).
            unsafe {
                match level {
                    CacheLevel::L1 => _mm_prefetch::<_MM_HINT_T0>(p),
                    CacheLevel::L2 => _mm_prefetch::<_MM_HINT_T1>(p),
                }
            }
            i += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, at, level);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `pool_at` pool's threads run `with_simd` at its level; other
    /// threads keep the process's level.
    #[test]
    fn pool_at_sets_the_level_of_its_threads() {
        for level in levels() {
            let seen = pool_at(level, 2)
                .install(|| rayon::join(|| FORCED.with(|c| c.get()), || FORCED.with(|c| c.get())));
            assert_eq!(seen, (Some(level), Some(level)));
        }
        assert_eq!(FORCED.with(|c| c.get()), None);
    }
}

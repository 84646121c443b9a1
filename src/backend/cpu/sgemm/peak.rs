//! The float32 multiply-add peak of this machine, measured rather than
//! taken from a data sheet: the figure the benchmark divides the GEMM's
//! GFLOP/s by. A data sheet's peak assumes a clock the core may not hold
//! (turbo, AVX frequency offsets, a virtual machine's share of a host),
//! so the only honest denominator is what the same vectors do in the
//! same process, on the same number of threads, just before.
//!
//! Each thread runs independent chains of `acc = acc * a + b` on the
//! vectors of one instruction set. There are [`CHAINS`] of them because
//! a chain issues one multiply-add per latency (4 or 5 cycles) and a core
//! may have two multiply-add ports: 12 chains cover 2 x 5 with two to
//! spare, while staying within the 16 vector registers of AVX2 (the
//! AVX-512 form uses 12 of its 32 too). No memory is touched, so the
//! figure is the arithmetic ceiling no kernel can pass.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Independent accumulation chains per thread.
pub const CHAINS: usize = 12;

/// Multiply-adds of one chain between two looks at the clock: about a
/// tenth of a millisecond at any clock and width, so the clock costs
/// nothing and a run stops close to its deadline.
const STEP: u64 = 32 * 1024;

/// One measurement: GFLOP/s (a multiply-add counts 2) on `threads`
/// threads running the vectors of `isa` at once.
#[derive(Clone, Copy, Debug)]
pub struct Peak {
    pub isa: &'static str,
    pub threads: usize,
    pub gflops: f64,
}

/// The instruction sets this CPU can measure, by the names the GEMM's
/// kernels carry ([`super::Kernel::name`]), widest first.
pub fn peak_isas() -> Vec<&'static str> {
    super::available_kernels()
        .into_iter()
        .map(|k| k.name())
        .collect()
}

/// Measures `isa` (one of [`peak_isas`]) on `threads` threads, each
/// running for about `run` after a warm-up of the same length (a core
/// may need that long to reach the clock it holds under vector load);
/// the best of three runs. `None` for an instruction set this CPU lacks.
pub fn measure_peak(isa: &str, threads: usize, run: Duration) -> Option<Peak> {
    let isa = peak_isas().into_iter().find(|&n| n == isa)?;
    let chain = chain_fn(isa)?;
    let threads = threads.max(1);
    let barrier = Barrier::new(threads);
    let mut best = 0.0f64;
    for round in 0..4 {
        let (flops, secs) = std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        let start = Instant::now();
                        let mut steps = 0u64;
                        while start.elapsed() < run {
                            black_box(chain(STEP));
                            steps += 1;
                        }
                        (steps, start.elapsed().as_secs_f64())
                    })
                })
                .collect();
            let mut steps = 0u64;
            let mut secs = 0.0f64;
            for h in handles {
                // A thread that panicked counts for nothing: the figure
                // is then too low, never too high.
                if let Ok((n, t)) = h.join() {
                    steps += n;
                    secs = secs.max(t);
                }
            }
            let per_step = (STEP * CHAINS as u64 * lanes(isa) * 2) as f64;
            (steps as f64 * per_step, secs)
        });
        // Round 0 is the warm-up.
        if round > 0 && secs > 0.0 {
            best = best.max(flops / secs / 1e9);
        }
    }
    Some(Peak {
        isa,
        threads,
        gflops: best,
    })
}

/// Floats per vector of each instruction set's chains.
fn lanes(isa: &str) -> u64 {
    match isa {
        "avx512f" => 16,
        "avx2+fma" => 8,
        "neon" => 4,
        _ => PORTABLE_LANES as u64,
    }
}

/// One thread's chains: `steps` multiply-adds on each of [`CHAINS`]
/// vectors, returning a sum of them so that nothing is optimised away.
type ChainFn = fn(u64) -> f32;

fn chain_fn(isa: &str) -> Option<ChainFn> {
    match isa {
        #[cfg(target_arch = "x86_64")]
        "avx512f" if is_x86_feature_detected!("avx512f") => Some(|n| {
            // SAFETY: the guard above saw avx512f on this CPU.
            unsafe { chains_avx512(n) }
        }),
        #[cfg(target_arch = "x86_64")]
        "avx2+fma" if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") => {
            Some(|n| {
                // SAFETY: the guard above saw avx2 and fma on this CPU.
                unsafe { chains_avx2(n) }
            })
        }
        #[cfg(target_arch = "aarch64")]
        "neon" if std::arch::is_aarch64_feature_detected!("neon") => Some(|n| {
            // SAFETY: the CPU has NEON (just detected).
            unsafe { chains_neon(n) }
        }),
        "portable" => Some(chains_portable),
        _ => None,
    }
}

/// The multiplier and addend: `acc * A + B` stays near `B / (1 - A)`
/// (here 1), far from overflow and from subnormals, which some cores
/// handle slowly.
const A: f32 = 0.999_999;
const B: f32 = 1.0e-6;

#[cfg(target_arch = "x86_64")]
macro_rules! simd_chains {
    ($name:ident, $feat:literal, $vt:ty, $set1:ident, $fma:ident, $store:ident, $w:expr) => {
        /// # Safety
        /// The CPU must support the enabled features.
        #[target_feature(enable = $feat)]
        unsafe fn $name(steps: u64) -> f32 {
            use std::arch::x86_64::*;
            let (a, b) = ($set1(A), $set1(B));
            // Distinct starts, so no two chains are the same value and
            // nothing can be merged.
            let mut acc: [$vt; CHAINS] = std::array::from_fn(|i| $set1(i as f32));
            for _ in 0..steps {
                for x in acc.iter_mut() {
                    *x = $fma(*x, a, b);
                }
            }
            let mut out = [0.0f32; $w];
            let mut sum = 0.0;
            for x in acc {
                // SAFETY: `out` holds one vector of $w floats; the
                // unaligned store takes any address.
                unsafe { $store(out.as_mut_ptr(), x) };
                sum += out.iter().sum::<f32>();
            }
            sum
        }
    };
}

#[cfg(target_arch = "x86_64")]
simd_chains!(
    chains_avx2,
    "avx2,fma",
    __m256,
    _mm256_set1_ps,
    _mm256_fmadd_ps,
    _mm256_storeu_ps,
    8
);
#[cfg(target_arch = "x86_64")]
simd_chains!(
    chains_avx512,
    "avx512f",
    __m512,
    _mm512_set1_ps,
    _mm512_fmadd_ps,
    _mm512_storeu_ps,
    16
);

/// The portable kernel's vectors: what LLVM makes of fixed-size float
/// arrays for the build's baseline (SSE2's 4 lanes on x86-64, NEON's on
/// aarch64), as wide as the portable GEMM kernel's rows.
/// The NEON kernel's vectors: 4 lanes, fused multiply-add.
///
/// # Safety
/// The CPU must have NEON (every aarch64 CPU does).
#[cfg(target_arch = "aarch64")]
#[target_feature(enable = "neon")]
unsafe fn chains_neon(steps: u64) -> f32 {
    use std::arch::aarch64::*;
    let (a, b) = (vdupq_n_f32(A), vdupq_n_f32(B));
    let mut acc: [float32x4_t; CHAINS] = std::array::from_fn(|i| vdupq_n_f32(i as f32));
    for _ in 0..steps {
        for x in acc.iter_mut() {
            *x = vfmaq_f32(b, *x, a);
        }
    }
    acc.iter().map(|&x| vaddvq_f32(x)).sum()
}

const PORTABLE_LANES: usize = super::PORTABLE_NR;

fn chains_portable(steps: u64) -> f32 {
    let mut acc = [[0.0f32; PORTABLE_LANES]; CHAINS];
    for (i, row) in acc.iter_mut().enumerate() {
        row.fill(i as f32);
    }
    for _ in 0..steps {
        for row in acc.iter_mut() {
            for x in row.iter_mut() {
                // As the portable kernel computes: a fused multiply-add
                // where the target always has one, else a multiply and
                // an add (mul_add could be a library call).
                #[cfg(target_arch = "aarch64")]
                {
                    *x = x.mul_add(A, B);
                }
                #[cfg(not(target_arch = "aarch64"))]
                {
                    *x = *x * A + B;
                }
            }
        }
    }
    acc.iter().flatten().sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_instruction_set_measures_a_positive_peak() {
        for isa in peak_isas() {
            let p = measure_peak(isa, 2, Duration::from_millis(5)).unwrap();
            assert_eq!((p.isa, p.threads), (isa, 2));
            assert!(p.gflops > 0.0 && p.gflops.is_finite(), "{p:?}");
        }
        assert!(measure_peak("no such isa", 1, Duration::from_millis(1)).is_none());
    }

    #[test]
    fn the_chains_compute_their_recurrence() {
        // acc_{n+1} = acc_n * A + B from acc_0 = i, summed over lanes and
        // chains, in f64 as a reference: the SIMD forms must compute it
        // (a compiler that dropped the loop would not).
        let steps = 100;
        let want: f64 = (0..CHAINS)
            .map(|i| {
                let mut x = i as f32;
                for _ in 0..steps {
                    x = x.mul_add(A, B);
                }
                x as f64
            })
            .sum();
        for isa in peak_isas() {
            let got = chain_fn(isa).unwrap()(steps) as f64 / lanes(isa) as f64;
            assert!(
                (got - want).abs() < 1e-3 * want,
                "{isa}: {got} against {want}"
            );
        }
    }
}

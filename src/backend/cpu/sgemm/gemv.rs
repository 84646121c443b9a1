//! A row vector times B (`m == 1`), plain or packed.

use super::*;

/// A row vector times B (`m == 1`): no packing, B streamed once. Sums run
/// over K in order, whatever the split.
pub(super) fn gemv(n: usize, k: usize, a: &[f32], b: Mat, c: &mut [f32], threads: usize) {
    let c = &mut c[..n];
    let chunk = if threads > 1 {
        n.div_ceil(threads).next_multiple_of(16)
    } else {
        n
    }
    .max(1);
    let one = |(ci, dst): (usize, &mut [f32])| {
        let j0 = ci * chunk;
        if b.cs == 1 {
            // Row-major B: axpy over contiguous rows, compiled for the
            // widest vectors the CPU has (a multiply then an add, as
            // written: the same bits at every width).
            crate::backend::cpu::simd::with_simd(
                #[inline(always)]
                || {
                    dst.fill(0.0);
                    for (p, &x) in a[..k].iter().enumerate() {
                        let row = &b.data[p * b.rs + j0..p * b.rs + j0 + dst.len()];
                        dst.iter_mut().zip(row).for_each(|(y, &bv)| *y += x * bv);
                    }
                },
            )
        } else {
            for (j, y) in dst.iter_mut().enumerate() {
                let base = (j0 + j) * b.cs;
                *y = (0..k).map(|p| a[p] * b.data[base + p * b.rs]).sum();
            }
        }
    };
    if threads > 1 && n > chunk {
        c.par_chunks_mut(chunk).enumerate().for_each(one);
    } else {
        c.chunks_mut(chunk).enumerate().for_each(one);
    }
}

/// `m` (2 to [`GEMV_ROWS`]) rows of `a` ([m, k] row-major) times a
/// row-major B (unit column stride), `c` [m, n] overwritten, with the
/// bits of [`gemv`] per row (each output zero, then `a[i][p] * b[p][j]`
/// added in order over p, a multiply then an add). Attention's query rows
/// of one head against a cache block: one row at a time read B once per
/// row and kept the sums in memory across k (two loads and a store per
/// vector of products); here each tile of columns holds every row's sums
/// in registers across k and reads B's tile once for all rows. Columns
/// past the last whole tile, and CPUs without AVX2, take [`gemv`].
pub(super) fn gemv_rows(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    b: Mat,
    c: &mut [f32],
    threads: usize,
) {
    let (a, c) = (&a[..m * k], &mut c[..m * n]);
    #[allow(unused_mut)]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if b.cs == 1
        && (2..=GEMV_ROWS).contains(&m)
        && k > 0
        && b.rs >= n
        && b.data.len() >= (k - 1) * b.rs + n
    {
        use crate::backend::cpu::simd::{simd_level, SimdLevel};
        done = match simd_level() {
            // SAFETY: the level's features are this CPU's; the checks
            // above keep every load inside `a` ([m, k]) and B (k rows `rs`
            // apart, `n` columns each) and every store inside `c`.
            SimdLevel::Avx512 => unsafe { rows_x86::avx512(m, n, k, a, b.data, b.rs, c) },
            // SAFETY: as above.
            SimdLevel::Avx2 => unsafe { rows_x86::avx2(m, n, k, a, b.data, b.rs, c) },
            SimdLevel::Baseline => 0,
        };
    }
    if done == n {
        return;
    }
    // The columns left, one row at a time.
    let rest = n - done;
    let tail = Mat {
        data: &b.data[done * b.cs..],
        rs: b.rs,
        cs: b.cs,
    };
    for (row, dst) in a.chunks_exact(k.max(1)).zip(c.chunks_exact_mut(n)) {
        gemv(rest, k, row, tail, &mut dst[done..], threads);
    }
}

#[cfg(target_arch = "x86_64")]
pub(super) mod rows_x86 {
    use std::arch::x86_64::*;

    /// How many rows of B ahead a tile asks for (see `tile`).
    const PF_ROWS: usize = 8;

    /// The tile loops of [`super::gemv_rows`] for one vector type and
    /// one type of B's elements (float32, or float16 bit patterns that
    /// `$load` widens, exactly): `R` rows' sums of two vectors of columns
    /// each in registers. Returns the columns done (whole tiles).
    macro_rules! tiles {
        ($name:ident, $features:literal, $elem:ty, $vec:ty, $lanes:expr, $zero:ident, $load:ident, $store:ident, $set1:ident, $mul:ident, $add:ident) => {
            /// # Safety
            /// The CPU has the features named; `a` holds `m * k` values,
            /// `b` `k` rows `rs >= n` apart of at least `n` columns, `c`
            /// `m * n`; `m` is 1 to 4.
            #[target_feature(enable = $features)]
            pub unsafe fn $name(
                m: usize,
                n: usize,
                k: usize,
                a: &[f32],
                b: &[$elem],
                rs: usize,
                c: &mut [f32],
            ) -> usize {
                #[inline(always)]
                unsafe fn tile<const R: usize, const V: usize>(
                    k: usize,
                    a: *const f32,
                    b: *const $elem,
                    rs: usize,
                    c: *mut f32,
                    n: usize,
                ) {
                    let mut acc = [[$zero(); V]; R];
                    for p in 0..k {
                        // In bounds: row p of B's tile and column p of
                        // each row of a (the caller's checks).
                        let bp = b.add(p * rs);
                        // The tile's part of a row some rows ahead: B is
                        // a cache block that a decoding step last
                        // touched a step ago, so it comes from memory,
                        // in runs too short (a tile's part of a row) for
                        // the hardware's prefetchers. A hint: past the
                        // last row it asks for lines it will not read.
                        let ahead = b.wrapping_add((p + PF_ROWS) * rs).cast::<i8>();
                        let bytes = V * $lanes * std::mem::size_of::<$elem>();
                        for line in (0..bytes).step_by(64) {
                            _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(line));
                        }
                        let bv: [$vec; V] = std::array::from_fn(|v| $load(bp.add(v * $lanes)));
                        for (i, acc) in acc.iter_mut().enumerate() {
                            let x = $set1(*a.add(i * k + p));
                            for (y, &bv) in acc.iter_mut().zip(&bv) {
                                *y = $add(*y, $mul(x, bv));
                            }
                        }
                    }
                    for (i, acc) in acc.iter().enumerate() {
                        for (v, &y) in acc.iter().enumerate() {
                            $store(c.add(i * n + v * $lanes), y);
                        }
                    }
                }
                /// Whole tiles of V vectors of columns `j0..` of `n`; the
                /// columns done from 0.
                #[inline(always)]
                unsafe fn tiles<const V: usize>(
                    (j0, n): (usize, usize),
                    m: usize,
                    k: usize,
                    a: &[f32],
                    b: &[$elem],
                    rs: usize,
                    c: &mut [f32],
                ) -> usize {
                    let width = V * $lanes;
                    let whole = j0 + (n - j0) / width * width;
                    let (ap, bp, cp) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
                    for j in (j0..whole).step_by(width) {
                        // In bounds: columns j..j + width < n of every row.
                        let (bj, cj) = (bp.add(j), cp.add(j));
                        match m {
                            1 => tile::<1, V>(k, ap, bj, rs, cj, n),
                            2 => tile::<2, V>(k, ap, bj, rs, cj, n),
                            3 => tile::<3, V>(k, ap, bj, rs, cj, n),
                            _ => tile::<4, V>(k, ap, bj, rs, cj, n),
                        }
                    }
                    whole
                }
                // Wide tiles where the columns allow: a tile reads its
                // part of each row of B, a whole row apart, so wider
                // tiles read B in longer runs (in attention, B is a
                // cache block that comes from memory at long contexts).
                // Every column's sum is taken in the same order whatever
                // the tile, so the width changes no bit.
                let widest = match m <= 3 {
                    true => tiles::<8>((0, n), m, k, a, b, rs, c),
                    false => 0,
                };
                let wide = tiles::<4>((widest, n), m, k, a, b, rs, c);
                tiles::<2>((wide, n), m, k, a, b, rs, c)
            }
        };
    }

    /// 16 float16 values widened (exactly).
    #[inline(always)]
    unsafe fn widen16(p: *const u16) -> __m512 {
        _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i))
    }

    /// 8 float16 values widened (exactly).
    #[inline(always)]
    unsafe fn widen8(p: *const u16) -> __m256 {
        _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i))
    }

    tiles!(
        avx512,
        "avx512f",
        f32,
        __m512,
        16,
        _mm512_setzero_ps,
        _mm512_loadu_ps,
        _mm512_storeu_ps,
        _mm512_set1_ps,
        _mm512_mul_ps,
        _mm512_add_ps
    );
    tiles!(
        avx2,
        "avx2,fma",
        f32,
        __m256,
        8,
        _mm256_setzero_ps,
        _mm256_loadu_ps,
        _mm256_storeu_ps,
        _mm256_set1_ps,
        _mm256_mul_ps,
        _mm256_add_ps
    );
    tiles!(
        avx512_f16,
        "avx512f",
        u16,
        __m512,
        16,
        _mm512_setzero_ps,
        widen16,
        _mm512_storeu_ps,
        _mm512_set1_ps,
        _mm512_mul_ps,
        _mm512_add_ps
    );
    tiles!(
        avx2_f16,
        "avx2,fma,f16c",
        u16,
        __m256,
        8,
        _mm256_setzero_ps,
        widen8,
        _mm256_storeu_ps,
        _mm256_set1_ps,
        _mm256_mul_ps,
        _mm256_add_ps
    );
}

/// [`gemv`] of each of `m` rows of `a` ([m, k]) against a row-major float16
/// `b` ([k, n] bit patterns): each row of `b` is widened once, a run of
/// columns at a time, and added into every row of `c` (in order over k, a
/// multiply then an add: the bits of `gemv` on `b` widened first).
pub(super) fn gemv_rows_f16(m: usize, n: usize, k: usize, a: &[f32], b: &[u16], c: &mut [f32]) {
    // Columns per pass: the widened run stays in registers and L1.
    const RUN: usize = 256;
    let mut run = [0f32; RUN];
    let c = &mut c[..m * n];
    // Whole tiles in registers where the CPU has the vectors (as
    // `gemv_rows`), the columns after them below.
    #[allow(unused_mut)]
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if (1..=GEMV_ROWS).contains(&m) && k > 0 && a.len() >= m * k && b.len() >= k * n {
        use crate::backend::cpu::simd::{simd_level, SimdLevel};
        let f16c = is_x86_feature_detected!("f16c");
        done = match simd_level() {
            // SAFETY: the level's features are this CPU's (F16C checked
            // for the AVX2 form; AVX-512F has its own conversion); the
            // checks above keep every access inside `a`, `b` ([k, n]) and
            // `c`.
            SimdLevel::Avx512 => unsafe { rows_x86::avx512_f16(m, n, k, a, b, n, c) },
            // SAFETY: as above.
            SimdLevel::Avx2 if f16c => unsafe { rows_x86::avx2_f16(m, n, k, a, b, n, c) },
            _ => 0,
        };
    }
    for row in c.chunks_exact_mut(n.max(1)) {
        row[done..].fill(0.0);
    }
    for j0 in (done..n).step_by(RUN) {
        let w = RUN.min(n - j0);
        for p in 0..k {
            crate::f16::widen(&b[p * n + j0..p * n + j0 + w], &mut run[..w]);
            let run = &run[..w];
            crate::backend::cpu::simd::with_simd(
                #[inline(always)]
                || {
                    for (i, row) in c.chunks_exact_mut(n).enumerate() {
                        let x = a[i * k + p];
                        row[j0..j0 + w]
                            .iter_mut()
                            .zip(run)
                            .for_each(|(y, &bv)| *y += x * bv);
                    }
                },
            );
        }
    }
}

/// One row times a packed B panel: `acc[j] += a[p] * panel[p][j]` for
/// each p in order, with the multiply-add of the micro-kernel that packed
/// the panel (fused for the SIMD kernels).
///
/// # Safety
/// When `fused`, the CPU must have AVX2 and FMA.
pub(super) unsafe fn dot_panel<const NR: usize>(
    fused: bool,
    a: &[f32],
    panel: &[f32],
    acc: &mut [f32; NR],
) {
    #[cfg(target_arch = "x86_64")]
    if fused {
        #[target_feature(enable = "avx2,fma")]
        fn fma<const NR: usize>(a: &[f32], panel: &[f32], acc: &mut [f32; NR]) {
            for (&x, row) in a.iter().zip(panel.chunks_exact(NR)) {
                for (y, &bv) in acc.iter_mut().zip(row) {
                    *y = x.mul_add(bv, *y);
                }
            }
        }
        // SAFETY: `fused`: the caller vouched for AVX2 and FMA.
        return unsafe { fma(a, panel, acc) };
    }
    let _ = fused;
    for (&x, row) in a.iter().zip(panel.chunks_exact(NR)) {
        for (y, &bv) in acc.iter_mut().zip(row) {
            // As `kernel_portable` computes.
            #[cfg(target_arch = "aarch64")]
            {
                *y = x.mul_add(bv, *y);
            }
            #[cfg(not(target_arch = "aarch64"))]
            {
                *y += x * bv;
            }
        }
    }
}

/// `c = a * B` for one row `a` and B packed in advance (a classifier's
/// final gemm): the blocked path would compute `mr` rows for this one, so
/// instead each column panel is streamed once. Each KC block's sum starts
/// from zero and is added to C, as the micro-kernels do, and the fused
/// epilogue is [`Fuse::apply`]: the bits of the blocked path.
pub(super) fn gemv_packed(
    b: &PackedB,
    a: &[f32],
    c: &mut [f32],
    threads: usize,
    fuse: Option<&Fuse>,
) {
    fn run<const NR: usize>(
        b: &PackedB,
        a: &[f32],
        c: &mut [f32],
        threads: usize,
        fuse: Option<&Fuse>,
    ) {
        let kern = b.kern;
        let fused = kern.rows.is_some();
        let (k, n) = (b.k, b.n);
        let one = |(q, dst): (usize, &mut [f32])| {
            let mut out = [0.0f32; NR];
            let mut p0 = 0;
            while p0 < k {
                let kc = kern.kc.min(k - p0);
                let panel = &b.block(p0, kc, q * NR)[..kc * NR];
                let mut acc = [0.0f32; NR];
                // SAFETY: `fused` only for a kernel with a rows form, the
                // AVX2 or AVX-512 one, which `available_kernels` lists
                // only when the CPU has AVX2 and FMA (the AVX-512 one asks
                // for both too), and a PackedB's kernel comes from there.
                unsafe { dot_panel(fused, &a[p0..p0 + kc], panel, &mut acc) };
                if p0 == 0 {
                    out = acc;
                } else {
                    out.iter_mut().zip(&acc).for_each(|(o, &x)| *o += x);
                }
                p0 += kc;
            }
            dst.copy_from_slice(&out[..dst.len()]);
            if let Some(f) = fuse {
                f.apply(0, q * NR, dst);
            }
        };
        let c = &mut c[..n];
        if threads > 1 && n > NR {
            c.par_chunks_mut(NR).enumerate().for_each(one);
        } else {
            c.chunks_mut(NR).enumerate().for_each(one);
        }
    }
    match b.kern.nr {
        8 => run::<8>(b, a, c, threads, fuse),
        16 => run::<16>(b, a, c, threads, fuse),
        32 => run::<32>(b, a, c, threads, fuse),
        _ => run::<PORTABLE_NR>(b, a, c, threads, fuse),
    }
}

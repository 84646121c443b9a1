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

/// [`gemv`] of each of `m` rows of `a` ([m, k]) against a row-major float16
/// `b` ([k, n] bit patterns): each row of `b` is widened once, a run of
/// columns at a time, and added into every row of `c` (in order over k, a
/// multiply then an add: the bits of `gemv` on `b` widened first).
pub(super) fn gemv_rows_f16(m: usize, n: usize, k: usize, a: &[f32], b: &[u16], c: &mut [f32]) {
    // Columns per pass: the widened run stays in registers and L1.
    const RUN: usize = 256;
    let mut run = [0f32; RUN];
    let c = &mut c[..m * n];
    c.fill(0.0);
    for j0 in (0..n).step_by(RUN) {
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

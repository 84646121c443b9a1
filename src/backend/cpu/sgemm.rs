//! The f32 matrix product behind matmul, gemm and conv2d.
//!
//! The classic blocked algorithm (Goto's, as in BLIS), written for this
//! crate:
//!
//! ```text
//! for jc in N by NC:              B block (KC x NC) stays in L3
//!   for pc in K by KC:            pack B[pc.., jc..] into NR-wide panels
//!     for ic in M by MC:          (parallel) pack A[ic.., pc..] into
//!                                 MR-high panels; the A block stays in L2
//!       for jr in NC by NR:       one B panel (KC x NR) stays in L1
//!         for ir in MC by MR:     micro-kernel: MR x NR tile of C in
//!                                 registers, KC rank-1 updates
//! ```
//!
//! Packing makes the micro-kernel read both operands sequentially from
//! aligned, zero-padded buffers, so it needs no edge cases: a tile that
//! sticks out of C is computed whole into a scratch tile and only its valid
//! part is copied. The micro-kernel (and with it MR, NR and the block sizes)
//! is chosen once per process: AVX-512, else AVX2+FMA, else portable code.
//!
//! Every element of C is summed in the same order (K ascending, in KC
//! blocks) whatever the number of threads, so results do not depend on the
//! pool size. [`PackedB`] packs a constant right-hand side once (at graph
//! build) in exactly the layout the B-packing step produces.

use std::cell::RefCell;
use std::sync::OnceLock;

use rayon::prelude::*;

use crate::error::{Error, Result};

/// Multiply-adds below which one thread does the whole product: a rayon
/// fork-join costs a few microseconds, which this much work repays.
const PAR_WORK: usize = 1 << 19;

/// Computes the `mr x nr` tile `C (=|+=) A_panel * B_panel`, where the A
/// panel holds `kc` columns of `mr` values and the B panel `kc` rows of
/// `nr` values. The sum starts from zero and is added to C at the end (when
/// `accumulate`), so a tile computed into scratch and added by the caller
/// rounds exactly like one written in place.
///
/// # Safety
/// `a` must be readable for `kc * mr` floats, `b` for `kc * nr`, and `c`
/// readable and writable for `mr` rows of `nr` floats, `ldc` apart; the CPU
/// must have the kernel's target features.
/// When `fuse` is not null, the kernel applies it to the finished tile
/// before storing (see [`TileFuse`]).
type KernelFn = unsafe fn(
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
type RowsKernelFn = unsafe fn(
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

/// What a micro-kernel applies to a finished tile (final sums) as it
/// stores it: `rb[r]` added to row `r` (when `rb` is not null), `cb[j]`
/// added to column `j` (when `cb` is not null), then, when `clamp`, bounds
/// as the clamp operator applies them. Raw pointers because the kernel is
/// an `unsafe fn` behind a plain function pointer; [`Fuse::tile`] makes
/// them from checked slices.
#[repr(C)]
pub(crate) struct TileFuse {
    rb: *const f32,
    cb: *const f32,
    lo: f32,
    hi: f32,
    clamp: bool,
}

/// A bias and bounds fused into the product: applied to each tile of C
/// while it is still in registers (full tiles) or in L1 (edge tiles), so
/// that conv2d's bias and clamp, or matmul's bias vector, cost no pass of
/// their own. The result is bitwise that of applying them afterwards:
/// `((sum + row_bias[i]) + col_bias[j])`, then clamped with comparisons as
/// the clamp operator does (NaN passes through, -0 stays -0).
#[derive(Clone, Copy, Default, Debug)]
pub struct Fuse<'a> {
    /// Added to every element of row `i` (conv2d: row = output channel).
    pub row_bias: Option<&'a [f32]>,
    /// Added to every element of column `j` (matmul + a bias vector).
    pub col_bias: Option<&'a [f32]>,
    /// `[min, max]` applied last.
    pub bounds: Option<(f32, f32)>,
}

impl Fuse<'_> {
    fn is_empty(&self) -> bool {
        self.row_bias.is_none() && self.col_bias.is_none() && self.bounds.is_none()
    }

    /// Fails unless the biases cover an `m x n` product.
    fn check(&self, m: usize, n: usize) -> Result<()> {
        if self.row_bias.is_some_and(|b| b.len() < m) || self.col_bias.is_some_and(|b| b.len() < n)
        {
            return Err(Error::operation("sgemm: a fused bias is too short"));
        }
        Ok(())
    }

    /// The kernel's view for the full tile at row `i`, column `j`.
    /// Callers pass tiles inside the product that [`Fuse::check`] passed.
    fn tile(&self, i: usize, j: usize) -> TileFuse {
        let (lo, hi) = self.bounds.unwrap_or((0.0, 0.0));
        TileFuse {
            rb: self.row_bias.map_or(std::ptr::null(), |b| b[i..].as_ptr()),
            cb: self.col_bias.map_or(std::ptr::null(), |b| b[j..].as_ptr()),
            lo,
            hi,
            clamp: self.bounds.is_some(),
        }
    }

    /// The scalar form: `row` is row `i` of C from column `j0` on.
    fn apply(&self, i: usize, j0: usize, row: &mut [f32]) {
        let rb = self.row_bias.map(|b| b[i]);
        for (j, x) in row.iter_mut().enumerate() {
            let mut y = *x;
            if let Some(b) = rb {
                y += b;
            }
            if let Some(cb) = self.col_bias {
                y += cb[j0 + j];
            }
            if let Some((lo, hi)) = self.bounds {
                y = clamp(y, lo, hi);
            }
            *x = y;
        }
    }
}

/// Clamps with comparisons, as the clamp operator does: NaN passes and
/// -0 stays -0. The vector kernels' `max(lo, y)` then `min(hi, y)` (which
/// return their second operand for NaN and for equal zeros) agree.
#[inline(always)]
pub fn clamp(x: f32, lo: f32, hi: f32) -> f32 {
    if x < lo {
        lo
    } else if x > hi {
        hi
    } else {
        x
    }
}

/// A micro-kernel and the blocking that suits it.
#[derive(Debug)]
pub struct Kernel {
    name: &'static str,
    /// Tile rows (A panel height) and columns (B panel width).
    mr: usize,
    nr: usize,
    /// Depth of a packed block: a KC x NR B panel should fill about half
    /// of L1, leaving room for the A panel and C lines.
    kc: usize,
    /// Rows of A packed at once (a multiple of `mr`): an MC x KC block of
    /// A stays in L2 while every B panel of the block streams past it.
    mc: usize,
    /// Columns of B packed at once (a multiple of `nr`): bounds the packed
    /// B block (KC x NC) so that it stays in L3.
    nc: usize,
    func: KernelFn,
    /// The same kernel reading B rows in place, where there is one.
    rows: Option<RowsKernelFn>,
}

/// Depths up to which a block is swept row panel by row panel (see
/// `Task::tiles`).
const SHALLOW_KC: usize = 64;

/// The largest `mr * nr` of any kernel (scratch tiles for the edges).
const MAX_TILE: usize = 12 * 32;

/// Portable kernel: plain loops over fixed-size arrays, which LLVM keeps in
/// vector registers. aarch64 has 32 NEON registers and fused multiply-add;
/// baseline x86-64 has 16 SSE registers, hence the narrower tile there.
const PORTABLE_MR: usize = 4;
#[cfg(target_arch = "aarch64")]
const PORTABLE_NR: usize = 16;
#[cfg(not(target_arch = "aarch64"))]
const PORTABLE_NR: usize = 8;

/// # Safety
/// See [`KernelFn`].
unsafe fn kernel_portable(
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
    // SAFETY: the caller guarantees kc * MR and kc * NR readable floats.
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
        // SAFETY: row r of the tile is inside C (caller's contract) and
        // nothing else references it during this call.
        let dst = unsafe { std::slice::from_raw_parts_mut(c.add(r * ldc), NR) };
        if accumulate {
            dst.iter_mut().zip(row).for_each(|(d, &v)| *d += v);
        } else {
            dst.copy_from_slice(row);
        }
        // SAFETY: a non-null `fuse` covers this tile (caller's contract).
        if let Some(f) = unsafe { fuse.as_ref() } {
            for (j, y) in dst.iter_mut().enumerate() {
                let mut v = *y;
                if !f.rb.is_null() {
                    v += unsafe { *f.rb.add(r) };
                }
                if !f.cb.is_null() {
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

/// Defines an x86 SIMD micro-kernel of `$mr` rows by `$nv` vectors of
/// `$w` lanes, in two forms: `$name` reads a packed B panel, `$rows` reads
/// B rows where they lie (see [`RowsKernelFn`]). Both x86 kernels come
/// from this one template, so the AVX-512 kernel (which the development
/// machine cannot run) shares the code that the AVX2 kernel's tests
/// exercise.
#[cfg(target_arch = "x86_64")]
macro_rules! simd_kernel {
    ($name:ident, $rows:ident, $feat:literal, $mr:expr, $nv:expr, $w:expr, $vt:ty,
     $zero:ident, $load:ident, $store:ident, $set1:ident, $fma:ident, $add:ident,
     $max:ident, $min:ident) => {
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
            // SAFETY: p < kc: row p of the kc x NR panel the caller vouched
            // for.
            simd_kernel!(@body p => unsafe { b.add(p * $nv * $w) },
                kc, a, c, ldc, accumulate, fuse, $mr, $nv, $w, $vt,
                $zero, $load, $store, $set1, $fma, $add, $max, $min)
        }

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
            // SAFETY: p < kc: columns col..col + NR of row p, which the
            // caller vouched for.
            simd_kernel!(@body p => unsafe { base.add(*offs.add(p) + col) },
                kc, a, c, ldc, accumulate, fuse, $mr, $nv, $w, $vt,
                $zero, $load, $store, $set1, $fma, $add, $max, $min)
        }
    };
    (@body $p:ident => $brow:expr, $kc:ident, $a:ident, $c:ident, $ldc:ident,
     $accumulate:ident, $fuse:ident, $mr:expr, $nv:expr, $w:expr, $vt:ty,
     $zero:ident, $load:ident, $store:ident, $set1:ident, $fma:ident, $add:ident,
     $max:ident, $min:ident) => {{
        use std::arch::x86_64::*;
        // The whole tile lives in registers: fixed-size arrays indexed
        // by constants in fully unrolled loops are promoted to them.
        let mut acc: [[$vt; $nv]; $mr] = [[$zero(); $nv]; $mr];
        // Start fetching the C tile now, so that the loads of the final
        // accumulation (C often comes from L3 or memory) overlap the
        // FMAs. Prefetches never fault, so no bounds matter here.
        for r in 0..$mr {
            let row = $c.wrapping_add(r * $ldc);
            _mm_prefetch::<_MM_HINT_T0>(row.cast::<i8>());
            _mm_prefetch::<_MM_HINT_T0>(row.wrapping_add($nv * $w - 1).cast::<i8>());
        }
        for $p in 0..$kc {
            let bp: *const f32 = $brow;
            // SAFETY: p < kc: column p of the A panel (kc * MR floats).
            let ap = unsafe { $a.add($p * $mr) };
            let mut bv: [$vt; $nv] = [$zero(); $nv];
            for (v, x) in bv.iter_mut().enumerate() {
                // SAFETY: lane block v of row p of B (see above).
                *x = unsafe { $load(bp.add(v * $w)) };
            }
            for (r, row) in acc.iter_mut().enumerate() {
                // SAFETY: element r of column p of the A panel.
                let x = $set1(unsafe { *ap.add(r) });
                for (y, &bx) in row.iter_mut().zip(&bv) {
                    *y = $fma(x, bx, *y);
                }
            }
        }
        // SAFETY: a non-null `fuse` covers this tile (caller's
        // contract).
        let fuse = unsafe { $fuse.as_ref() };
        for (r, row) in acc.iter().enumerate() {
            // SAFETY: rb (when set) has a value for each tile row.
            let rb = fuse
                .filter(|f| !f.rb.is_null())
                .map(|f| $set1(unsafe { *f.rb.add(r) }));
            for (v, &x) in row.iter().enumerate() {
                // SAFETY: (r, v) is inside the mr x nr tile of C that
                // the caller owns; cb (when set) has nr values.
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
        }
    }};
}

#[cfg(target_arch = "x86_64")]
simd_kernel!(
    kernel_avx2,
    kernel_avx2_rows,
    "avx2,fma",
    6,
    2,
    8,
    __m256,
    _mm256_setzero_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_set1_ps,
    _mm256_fmadd_ps,
    _mm256_add_ps,
    _mm256_max_ps,
    _mm256_min_ps
);

#[cfg(target_arch = "x86_64")]
simd_kernel!(
    kernel_avx512,
    kernel_avx512_rows,
    "avx512f",
    12,
    2,
    16,
    __m512,
    _mm512_setzero_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_set1_ps,
    _mm512_fmadd_ps,
    _mm512_add_ps,
    _mm512_max_ps,
    _mm512_min_ps
);

static PORTABLE: Kernel = Kernel {
    name: "portable",
    mr: PORTABLE_MR,
    nr: PORTABLE_NR,
    kc: 256,
    mc: 128,
    nc: 4096,
    func: kernel_portable,
    rows: None,
};

/// 6 x 16: 12 accumulators + 2 B vectors + 1 broadcast = 15 of the 16
/// ymm registers; 12 FMAs per 2 loads and 6 broadcasts keep both FMA
/// pipes busy. A 256 x 16 B panel is 16 KiB (half a 32 KiB L1d); the
/// 144 x 256 A block is 144 KiB (L2 is 512 KiB or more).
#[cfg(target_arch = "x86_64")]
static AVX2: Kernel = Kernel {
    name: "avx2+fma",
    mr: 6,
    nr: 16,
    kc: 256,
    mc: 144,
    nc: 4096,
    func: kernel_avx2,
    rows: Some(kernel_avx2_rows),
};

/// 12 x 32: 24 accumulators + 2 B vectors + 1 broadcast of the 32 zmm
/// registers. KC = 384: the 48 KiB B panel no longer fits beside the A
/// panel in a 48 KiB L1d, but the C tile is loaded and stored half as
/// often, and L2 feeds the panel fast enough. Measured on an AVX-512
/// Zen 5, matmul 1024^3 with B constant at one thread, two rounds:
/// 21.5-22.1 ms against 22.7-24.7 at KC = 192 (512: 21.3; 768: 21.4);
/// the transformer block 5.26-5.63 against 5.56-5.65. 384 is also the
/// depth BLIS's AVX-512 kernels use. The 192 x 384 A block is 288 KiB.
#[cfg(target_arch = "x86_64")]
static AVX512: Kernel = Kernel {
    name: "avx512f",
    mr: 12,
    nr: 32,
    kc: 384,
    mc: 192,
    nc: 4096,
    func: kernel_avx512,
    rows: Some(kernel_avx512_rows),
};

/// Every kernel this CPU can run, best first.
pub fn available_kernels() -> Vec<&'static Kernel> {
    #[allow(unused_mut)]
    let mut v: Vec<&'static Kernel> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f") {
            v.push(&AVX512);
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            v.push(&AVX2);
        }
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

/// The kernel of this process, chosen on first use.
pub fn best_kernel() -> &'static Kernel {
    static BEST: OnceLock<&'static Kernel> = OnceLock::new();
    BEST.get_or_init(|| available_kernels()[0])
}

/// 64 bytes of floats, so that a `Vec` of them is cache-line aligned: an
/// unaligned packed row would split a cache line on every vector load.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// A zero-initialised, 64-byte aligned float buffer.
#[derive(Default)]
struct AlignedBuf {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedBuf {
    fn zeroed(len: usize) -> Self {
        AlignedBuf {
            lines: vec![Line([0.0; 16]); len.div_ceil(16)],
            len,
        }
    }

    /// Grows (never shrinks) to at least `len` floats.
    fn ensure(&mut self, len: usize) {
        if self.lines.len() * 16 < len {
            *self = Self::zeroed(len);
        }
        self.len = self.len.max(len);
    }

    fn as_slice(&self) -> &[f32] {
        // SAFETY: `Line` is `repr(C)` around [f32; 16] with size 64 (no
        // padding), so the vector's storage is lines.len() * 16 contiguous
        // initialised floats, and len <= that.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<f32>(), self.len) }
    }

    fn as_mut_slice(&mut self) -> &mut [f32] {
        // SAFETY: as in `as_slice`, with exclusive access through &mut.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<f32>(), self.len) }
    }
}

/// A matrix view: element (i, j) is `data[i * rs + j * cs]`, which covers
/// row-major matrices and their transposes.
#[derive(Clone, Copy)]
struct Mat<'a> {
    data: &'a [f32],
    rs: usize,
    cs: usize,
}

impl<'a> Mat<'a> {
    /// A `rows x cols` matrix stored row-major, or (when `transposed`)
    /// the transpose of a row-major `cols x rows` matrix. Checks the size.
    fn new(data: &'a [f32], rows: usize, cols: usize, transposed: bool) -> Result<Self> {
        if data.len() < rows * cols {
            return Err(Error::operation("sgemm: an operand is too small"));
        }
        Ok(if transposed {
            Mat {
                data,
                rs: 1,
                cs: rows,
            }
        } else {
            Mat {
                data,
                rs: cols,
                cs: 1,
            }
        })
    }
}

/// A whole A panel of a row-major `a`: reads the `MR` rows side by side,
/// so that the panel is written once, front to back (the general loop
/// below writes it `mr` times with a stride, one row at a time).
#[inline(always)]
fn pack_a_full<const MR: usize>(a: Mat, i0: usize, p0: usize, kc: usize, dst: &mut [f32]) {
    let rows: [&[f32]; MR] = std::array::from_fn(|r| {
        let base = (i0 + r) * a.rs + p0;
        &a.data[base..base + kc]
    });
    for (p, d) in dst[..kc * MR].chunks_exact_mut(MR).enumerate() {
        for (x, row) in d.iter_mut().zip(&rows) {
            *x = row[p];
        }
    }
}

/// Packs rows `i0..i0 + rows` (rows <= mr), columns `p0..p0 + kc` of `a`
/// as one A panel: column p holds `mr` values, zero below `rows`.
fn pack_a_panel(a: Mat, i0: usize, rows: usize, p0: usize, kc: usize, mr: usize, dst: &mut [f32]) {
    if rows == mr && a.cs == 1 {
        match mr {
            4 => return pack_a_full::<4>(a, i0, p0, kc, dst),
            6 => return pack_a_full::<6>(a, i0, p0, kc, dst),
            12 => return pack_a_full::<12>(a, i0, p0, kc, dst),
            _ => {}
        }
    }
    let dst = &mut dst[..kc * mr];
    if rows < mr {
        dst.fill(0.0);
    }
    for r in 0..rows {
        let base = (i0 + r) * a.rs + p0 * a.cs;
        if a.cs == 1 {
            let src = &a.data[base..base + kc];
            for (d, &s) in dst[r..].iter_mut().step_by(mr).zip(src) {
                *d = s;
            }
        } else {
            for (p, d) in dst[r..].iter_mut().step_by(mr).take(kc).enumerate() {
                *d = a.data[base + p * a.cs];
            }
        }
    }
}

/// Packs columns `j0..j0 + cols` (cols <= nr), rows `p0..p0 + kc` of `b`
/// as one B panel: row p holds `nr` values, zero right of `cols`.
fn pack_b_panel(b: Mat, p0: usize, kc: usize, j0: usize, cols: usize, nr: usize, dst: &mut [f32]) {
    let dst = &mut dst[..kc * nr];
    if cols < nr {
        dst.fill(0.0);
    }
    if b.cs == 1 {
        for (p, row) in dst.chunks_exact_mut(nr).enumerate() {
            let base = (p0 + p) * b.rs + j0;
            row[..cols].copy_from_slice(&b.data[base..base + cols]);
        }
    } else {
        for j in 0..cols {
            let base = p0 * b.rs + (j0 + j) * b.cs;
            for (p, d) in dst[j..].iter_mut().step_by(nr).take(kc).enumerate() {
                *d = b.data[base + p * b.rs];
            }
        }
    }
}

/// `dst.copy_from_slice(src)` for the short runs of packing: a panel row
/// is a few dozen bytes, and a call to memcpy for each (which LLVM emits
/// for a variable length, and even for a select of fixed ones) cost conv2d
/// about a tenth of its time. On x86-64, whole 4-float groups move as SSE
/// registers (always present there), the rest one by one.
#[inline(always)]
pub fn copy_row(dst: &mut [f32], src: &[f32]) {
    let n = dst.len().min(src.len());
    let mut i = 0;
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_loadu_ps, _mm_storeu_ps};
        while i + 4 <= n {
            // SAFETY: i + 4 <= n, the length of both slices; unaligned
            // loads and stores accept any address.
            unsafe { _mm_storeu_ps(dst.as_mut_ptr().add(i), _mm_loadu_ps(src.as_ptr().add(i))) };
            i += 4;
        }
    }
    for (d, s) in dst[i..n].iter_mut().zip(&src[i..n]) {
        *d = *s;
    }
}

/// Copies one panel row: `copy_row` for the kernels' panel widths as
/// fixed-size copies (a few vector moves, no loop), which is what the
/// packing passes spend their time on.
#[inline(always)]
pub fn copy_panel_row(dst: &mut [f32], src: &[f32]) {
    fn fixed<const N: usize>(dst: &mut [f32], src: &[f32]) -> bool {
        match (
            dst.as_chunks_mut::<N>().0.first_mut(),
            src.as_chunks::<N>().0.first(),
        ) {
            (Some(d), Some(s)) => {
                *d = *s;
                true
            }
            _ => false,
        }
    }
    let done = dst.len() == src.len()
        && match dst.len() {
            16 => fixed::<16>(dst, src),
            32 => fixed::<32>(dst, src),
            8 => fixed::<8>(dst, src),
            _ => false,
        };
    if !done {
        copy_row(dst, src);
    }
}

/// Asks for the cache lines of `data[at..at + len]` (clipped to `data`)
/// ahead of their use. A hint only: it never faults and changes no value.
#[inline(always)]
fn prefetch(data: &[f32], at: usize, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let end = (at + len).min(data.len());
        let mut i = at;
        while i < end {
            // SAFETY: a prefetch reads nothing architecturally; the
            // address is inside `data` anyway.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(data[i..].as_ptr().cast::<i8>()) };
            i += 16;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (data, at, len);
}

/// Rows ahead whose segments `pack_b_block` asks for while it packs a row:
/// a block's rows are a whole row of B apart, too many streams for the
/// hardware prefetchers to follow, so without this each segment's lines
/// arrive one demand miss at a time.
const PACK_AHEAD: usize = 4;

/// Packs the `kc x cols` block of `b` at (p0, j0) into consecutive panels
/// (each `kc * nr` floats), in parallel when `parallel`.
#[allow(clippy::too_many_arguments)]
fn pack_b_block(
    b: Mat,
    p0: usize,
    kc: usize,
    j0: usize,
    cols: usize,
    nr: usize,
    dst: &mut [f32],
    parallel: bool,
) {
    // Panels are packed in groups: for a row-major B, one pass over the
    // rows of a group reads each row segment sequentially. Packing panel
    // by panel would instead touch one cache line in each of KC rows that
    // are a whole row apart, which defeats the prefetchers and the TLB.
    const GROUP: usize = 8;
    let panels = cols.div_ceil(nr);
    let dst = &mut dst[..panels * kc * nr];
    let one = |(g, chunk): (usize, &mut [f32])| {
        let q0 = g * GROUP;
        if b.cs == 1 {
            let span = (cols - q0 * nr).min(GROUP * nr);
            for p in 0..kc {
                if p + PACK_AHEAD < kc {
                    prefetch(b.data, (p0 + p + PACK_AHEAD) * b.rs + j0 + q0 * nr, span);
                }
                let row = &b.data[(p0 + p) * b.rs + j0 + q0 * nr..][..span];
                for (qi, panel) in chunk.chunks_exact_mut(kc * nr).enumerate() {
                    let j = qi * nr;
                    let w = nr.min(span - j);
                    let d = &mut panel[p * nr..(p + 1) * nr];
                    copy_panel_row(&mut d[..w], &row[j..j + w]);
                    d[w..].fill(0.0);
                }
            }
        } else {
            for (qi, panel) in chunk.chunks_exact_mut(kc * nr).enumerate() {
                let j = (q0 + qi) * nr;
                pack_b_panel(b, p0, kc, j0 + j, nr.min(cols - j), nr, panel);
            }
        }
    };
    if parallel && panels > GROUP {
        dst.par_chunks_mut(GROUP * kc * nr)
            .enumerate()
            .for_each(one);
    } else {
        dst.chunks_mut(GROUP * kc * nr).enumerate().for_each(one);
    }
}

/// A right-hand side `B` (K x N) packed once into the micro-kernel's panel
/// layout, for products with many left-hand sides (constant weights).
///
/// Layout: for each KC block of rows (in order), the ceil(N / NR) panels of
/// that block, each `kc * NR` floats, zero-padded on the right; this is
/// what packing a block of a plain B produces, so both paths share the
/// macro-kernel and give identical results.
pub struct PackedB {
    k: usize,
    n: usize,
    kern: &'static Kernel,
    data: AlignedBuf,
}

impl std::fmt::Debug for PackedB {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedB")
            .field("k", &self.k)
            .field("n", &self.n)
            .field("kernel", &self.kern.name)
            .finish()
    }
}

impl PackedB {
    /// Packs `b`: a row-major [k, n] matrix, or when `transposed` a
    /// row-major [n, k] matrix whose transpose is used.
    pub fn new(b: &[f32], k: usize, n: usize, transposed: bool) -> Result<Self> {
        Self::with_kernel(best_kernel(), b, k, n, transposed)
    }

    fn with_kernel(
        kern: &'static Kernel,
        b: &[f32],
        k: usize,
        n: usize,
        transposed: bool,
    ) -> Result<Self> {
        let bm = Mat::new(b, k, n, transposed)?;
        let panels = n.div_ceil(kern.nr);
        let mut data = AlignedBuf::zeroed(k * panels * kern.nr);
        let block = panels * kern.nr * kern.kc;
        if block > 0 {
            for (bi, dst) in data.as_mut_slice().chunks_mut(block).enumerate() {
                let p0 = bi * kern.kc;
                pack_b_block(bm, p0, kern.kc.min(k - p0), 0, n, kern.nr, dst, true);
            }
        }
        Ok(PackedB { k, n, kern, data })
    }

    /// Rows (the shared dimension K).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Columns (N).
    pub fn n(&self) -> usize {
        self.n
    }

    /// The panels of the block at rows `p0..p0 + kc`, from column `j0`
    /// (a multiple of NR) on.
    fn block(&self, p0: usize, kc: usize, j0: usize) -> &[f32] {
        let panels = self.n.div_ceil(self.kern.nr);
        let start = p0 * panels * self.kern.nr + (j0 / self.kern.nr) * kc * self.kern.nr;
        &self.data.as_slice()[start..]
    }
}

/// Writes B panels on demand: `gen(p0, kc, j0, cols, nr, dst)` fills
/// `dst` with the `cols.div_ceil(nr)` panels of rows `p0..p0 + kc` and
/// columns `j0..j0 + cols` of B, each `kc * nr` floats (row p of a panel
/// holds `nr` values), exactly as packing a plain B would. It must write
/// every element of `dst`; what it puts right of `cols` is never stored.
pub type PanelGen<'a> = &'a (dyn Fn(usize, usize, usize, usize, usize, &mut [f32]) + Sync);

/// The right-hand side of one product.
#[derive(Clone, Copy)]
enum BSrc<'a> {
    Plain(Mat<'a>),
    Packed(&'a PackedB),
    Gen(PanelGen<'a>),
    Rows(RowsB<'a>),
}

/// A right-hand side B ([k, n]) whose rows are contiguous runs of one
/// buffer: row `p` is `data[offs[p]..offs[p] + n]`. A row-major matrix is
/// one (`offs[p] = p * n`), and so is the patch matrix of a convolution
/// with unit strides over a padded input (row (c, ky, kx) is the padded
/// plane of channel c shifted by the tap), which is why a micro-kernel
/// can read it in place instead of packing it.
#[derive(Clone, Copy)]
pub struct RowsB<'a> {
    data: &'a [f32],
    offs: &'a [usize],
    n: usize,
}

impl<'a> RowsB<'a> {
    /// Checks that every row lies inside `data`.
    pub fn new(data: &'a [f32], offs: &'a [usize], n: usize) -> Result<Self> {
        if offs
            .iter()
            .any(|&o| o.checked_add(n).is_none_or(|end| end > data.len()))
        {
            return Err(Error::operation("sgemm: a B row lies outside its buffer"));
        }
        Ok(RowsB { data, offs, n })
    }

    /// Writes the panels of columns `j0..j0 + cols`, depth `p0..p0 + kc`,
    /// as packing would (zeros right of column n).
    fn pack(&self, p0: usize, kc: usize, j0: usize, cols: usize, nr: usize, dst: &mut [f32]) {
        let panels = dst.chunks_exact_mut(kc * nr).take(cols.div_ceil(nr));
        for (q, panel) in panels.enumerate() {
            let j = j0 + q * nr;
            let w = nr.min(j0 + cols - j);
            for (p, d) in panel.chunks_exact_mut(nr).enumerate() {
                let o = self.offs[p0 + p] + j;
                copy_panel_row(&mut d[..w], &self.data[o..o + w]);
                d[w..].fill(0.0);
            }
        }
    }
}

/// Packs the `kc x cols` block of a generated B at (p0, j0), in groups of
/// panels (in parallel when `parallel`).
#[allow(clippy::too_many_arguments)]
fn pack_gen_block(
    gen: PanelGen,
    p0: usize,
    kc: usize,
    j0: usize,
    cols: usize,
    nr: usize,
    dst: &mut [f32],
    parallel: bool,
) {
    const GROUP: usize = 8;
    let panels = cols.div_ceil(nr);
    let dst = &mut dst[..panels * kc * nr];
    let one = |(g, chunk): (usize, &mut [f32])| {
        let c0 = g * GROUP * nr;
        gen(p0, kc, j0 + c0, (GROUP * nr).min(cols - c0), nr, chunk);
    };
    if parallel && panels > GROUP {
        dst.par_chunks_mut(GROUP * kc * nr)
            .enumerate()
            .for_each(one);
    } else {
        dst.chunks_mut(GROUP * kc * nr).enumerate().for_each(one);
    }
}

/// C's storage shared by the tasks of one block.
#[derive(Clone, Copy)]
struct CPtr(*mut f32);
// SAFETY: tasks only write the disjoint tiles of C they are given (see
// `gemm_blocked`), while the `&mut [f32]` it came from stays borrowed.
unsafe impl Send for CPtr {}
unsafe impl Sync for CPtr {}

thread_local! {
    /// Each thread's A-packing buffer, reused across calls. A task never
    /// calls into rayon while it holds the borrow, so it cannot re-enter.
    static A_PACK: RefCell<AlignedBuf> = RefCell::new(AlignedBuf::default());
    /// Each thread's B-packing buffer, reused across products so that a
    /// run does not zero and fault in megabytes of fresh memory per
    /// product. A product that packs in parallel holds it across rayon
    /// calls, where this thread may pick up another product: that one
    /// finds it borrowed and uses a buffer of its own.
    static B_PACK: RefCell<AlignedBuf> = RefCell::new(AlignedBuf::default());
}

/// The left-hand side of one product.
#[derive(Clone, Copy)]
enum ASrc<'a> {
    Plain(Mat<'a>),
    Packed(&'a PackedA),
}

/// One task: rows `r0..r1`, the B panels `q0..q1` of the current block
/// (columns `j0 + q * nr`, clipped at `j0 + cols`), depth `p0..p0 + kc`.
struct Task<'a> {
    kern: &'static Kernel,
    a: ASrc<'a>,
    bblock: &'a [f32],
    /// B read in place (the kernel has a rows form): then `bblock` is
    /// empty.
    brows: Option<RowsB<'a>>,
    c: CPtr,
    ldc: usize,
    rows: (usize, usize),
    panels: (usize, usize),
    j0: usize,
    cols: usize,
    p0: usize,
    kc: usize,
    accumulate: bool,
    /// Applied to each finished tile by the tasks of the last KC block.
    fuse: Option<&'a Fuse<'a>>,
}

impl Task<'_> {
    /// # Safety
    /// C must be `ldc` wide with at least `rows.1` rows and `j0 + cols <=
    /// ldc`, and no other thread may touch this task's tiles meanwhile.
    unsafe fn run(&self) {
        let k = self.kern;
        let (mr, kc) = (k.mr, self.kc);
        let (r0, r1) = self.rows;
        let (q0, q1) = self.panels;
        if r0 >= r1 || q0 >= q1 {
            return;
        }
        let row_panels = (r1 - r0).div_ceil(mr);
        match self.a {
            ASrc::Packed(pa) => {
                // Row blocks start on whole panels (see gemm_blocked).
                let start = pa.block_start(self.p0) + (r0 / mr) * kc * mr;
                let apack = &pa.data.as_slice()[start..start + row_panels * kc * mr];
                // SAFETY: the caller's contract, passed on.
                unsafe { self.tiles(apack) }
            }
            ASrc::Plain(a) => A_PACK.with(|buf| {
                let mut buf = buf.borrow_mut();
                buf.ensure(row_panels * kc * mr);
                let apack = buf.as_mut_slice();
                for (ip, dst) in apack.chunks_mut(kc * mr).take(row_panels).enumerate() {
                    let i = r0 + ip * mr;
                    pack_a_panel(a, i, mr.min(r1 - i), self.p0, kc, mr, dst);
                }
                // SAFETY: the caller's contract, passed on.
                unsafe { self.tiles(apack) }
            }),
        }
    }

    /// The tiles of this task, from its packed A panels.
    ///
    /// # Safety
    /// As for [`Task::run`].
    unsafe fn tiles(&self, apack: &[f32]) {
        let k = self.kern;
        let (mr, nr, kc) = (k.mr, k.nr, self.kc);
        let (r0, r1) = self.rows;
        let (q0, q1) = self.panels;
        let row_panels = (r1 - r0).div_ceil(mr);
        let mut scratch = [0.0f32; MAX_TILE];
        // An edge panel of B read in place, packed when one comes up.
        let mut edge: Vec<f32> = Vec::new();
        // Shallow products (1x1 convolutions over few channels) are bound
        // by storing C, not by the multiply-adds: then each row panel
        // sweeps all the columns, so that C is written as `mr` sequential
        // streams rather than as every row of the block at once (which
        // overwhelms the write-combining and prefetch hardware). Deep ones
        // keep a B panel in L1 across all row panels.
        let shallow = kc <= SHALLOW_KC;
        let (outer, inner) = if shallow {
            (row_panels, q1 - q0)
        } else {
            (q1 - q0, row_panels)
        };
        for (x, y) in (0..outer).flat_map(|x| (0..inner).map(move |y| (x, y))) {
            let (ip, q) = if shallow { (x, q0 + y) } else { (y, q0 + x) };
            let jl = q * nr;
            let ncols = nr.min(self.cols - jl);
            let i = r0 + ip * mr;
            let nrows = mr.min(r1 - i);
            let ap = &apack[ip * kc * mr..(ip + 1) * kc * mr];
            // SAFETY: rows i..i+nrows and columns j0+jl..+ncols are inside
            // C (caller's contract) and belong to this task.
            let cp = unsafe { self.c.0.add(i * self.ldc + self.j0 + jl) };
            // B read in place: a whole panel of columns is inside every
            // row; an edge panel is packed here (zeros beyond the edge).
            let panel: Option<&[f32]> = match (self.brows, k.rows) {
                (Some(rb), Some(rows_fn)) if ncols == nr => {
                    let col = self.j0 + jl;
                    let whole = nrows == mr;
                    let tf = self.fuse.filter(|_| whole).map(|f| f.tile(i, col));
                    let tp = tf.as_ref().map_or(std::ptr::null(), |t| t as *const _);
                    let (dst, ldc, acc) = if whole {
                        (cp, self.ldc, self.accumulate)
                    } else {
                        (scratch.as_mut_ptr(), nr, false)
                    };
                    // SAFETY: RowsB::new checked that every row holds n
                    // floats from its offset, and col + nr <= n here; `dst`
                    // is a whole tile of C or the scratch tile; `tp` (when
                    // set) covers the whole tile.
                    unsafe {
                        rows_fn(
                            kc,
                            ap.as_ptr(),
                            rb.data.as_ptr(),
                            rb.offs[self.p0..self.p0 + kc].as_ptr(),
                            col,
                            dst,
                            ldc,
                            acc,
                            tp,
                        )
                    };
                    if whole {
                        continue;
                    }
                    None
                }
                (Some(rb), _) => {
                    edge.resize(kc * nr, 0.0);
                    rb.pack(self.p0, kc, self.j0 + jl, ncols, nr, &mut edge);
                    Some(&edge)
                }
                (None, _) => Some(&self.bblock[q * kc * nr..(q + 1) * kc * nr]),
            };
            if let Some(bp) = panel {
                if nrows == mr && ncols == nr {
                    let tf = self.fuse.map(|f| f.tile(i, self.j0 + jl));
                    let tp = tf.as_ref().map_or(std::ptr::null(), |t| t as *const _);
                    // SAFETY: a whole tile of C, as above; `tp` covers it.
                    unsafe {
                        (k.func)(
                            kc,
                            ap.as_ptr(),
                            bp.as_ptr(),
                            cp,
                            self.ldc,
                            self.accumulate,
                            tp,
                        )
                    };
                    continue;
                }
                // An edge tile: computed whole in scratch.
                // SAFETY: scratch holds MAX_TILE >= mr * nr floats.
                unsafe {
                    (k.func)(
                        kc,
                        ap.as_ptr(),
                        bp.as_ptr(),
                        scratch.as_mut_ptr(),
                        nr,
                        false,
                        std::ptr::null(),
                    )
                };
            }
            // The valid part of an edge tile (in scratch) is stored and the
            // fused bias and bounds applied in scalar form.
            for r in 0..nrows {
                // SAFETY: row r of this task's tile, as above; no other
                // reference to it is alive.
                let dst = unsafe { std::slice::from_raw_parts_mut(cp.add(r * self.ldc), ncols) };
                let src = &scratch[r * nr..r * nr + ncols];
                if self.accumulate {
                    dst.iter_mut().zip(src).for_each(|(d, &s)| *d += s);
                } else {
                    dst.copy_from_slice(src);
                }
                if let Some(f) = self.fuse {
                    f.apply(i + r, self.j0 + jl, dst);
                }
            }
        }
    }
}

/// A left-hand side `A` (M x K, row-major) packed once into the
/// micro-kernel's A-panel layout, for products whose A is constant (conv2d
/// filters, where the input is the right-hand side).
///
/// Layout: for each KC block of columns (in order), the ceil(M / MR)
/// panels of that block, each `kc * MR` floats (column p holds MR values),
/// zero below the last row; exactly what packing a plain A produces, so
/// both paths give identical results.
pub struct PackedA {
    m: usize,
    k: usize,
    kern: &'static Kernel,
    data: AlignedBuf,
}

impl PackedA {
    /// Packs the row-major [m, k] matrix `a`.
    pub fn new(a: &[f32], m: usize, k: usize) -> Result<Self> {
        let kern = best_kernel();
        let am = Mat::new(a, m, k, false)?;
        let panels = m.div_ceil(kern.mr);
        let mut data = AlignedBuf::zeroed(k * panels * kern.mr);
        let mut p0 = 0;
        while p0 < k {
            let kc = kern.kc.min(k - p0);
            let block = &mut data.as_mut_slice()[p0 * panels * kern.mr..];
            for (ip, dst) in block.chunks_mut(kc * kern.mr).take(panels).enumerate() {
                let i = ip * kern.mr;
                pack_a_panel(am, i, kern.mr.min(m - i), p0, kc, kern.mr, dst);
            }
            p0 += kc;
        }
        Ok(PackedA { m, k, kern, data })
    }

    /// Rows (M).
    pub fn m(&self) -> usize {
        self.m
    }

    /// Columns (the shared dimension K).
    pub fn k(&self) -> usize {
        self.k
    }

    /// Where the block of columns `p0..` starts (every block before it is
    /// a whole KC deep).
    fn block_start(&self, p0: usize) -> usize {
        p0 * self.m.div_ceil(self.kern.mr) * self.kern.mr
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// `c = a * b` (c row-major m x n) with `threads` threads (1: this one).
#[allow(clippy::too_many_arguments)]
fn gemm_blocked(
    kern: &'static Kernel,
    m: usize,
    n: usize,
    k: usize,
    a: Mat,
    b: BSrc,
    c: &mut [f32],
    threads: usize,
) {
    gemm_blocked_a(kern, m, n, k, ASrc::Plain(a), b, c, threads, None)
}

/// [`gemm_blocked`] with A plain or packed in advance.
#[allow(clippy::too_many_arguments)]
fn gemm_blocked_a(
    kern: &'static Kernel,
    m: usize,
    n: usize,
    k: usize,
    a: ASrc,
    b: BSrc,
    c: &mut [f32],
    threads: usize,
    fuse: Option<&Fuse>,
) {
    let c = &mut c[..m * n];
    if m == 0 || n == 0 {
        return;
    }
    let fuse = fuse.filter(|f| !f.is_empty());
    if k == 0 {
        c.fill(0.0);
        if let Some(f) = fuse {
            for (i, row) in c.chunks_exact_mut(n).enumerate() {
                f.apply(i, 0, row);
            }
        }
        return;
    }
    let mr = kern.mr;
    let row_panels = m.div_ceil(mr);
    // Row blocks: as few as MC allows, but a multiple of the thread count
    // so that no thread idles at the end; when there are fewer row blocks
    // than threads, the columns are split too (lcm(blocks, threads) tasks).
    let min_blocks = row_panels.div_ceil(kern.mc / mr);
    let (row_blocks, col_chunks) = if threads <= 1 {
        (min_blocks, 1)
    } else if min_blocks >= threads {
        (min_blocks.next_multiple_of(threads).min(row_panels), 1)
    } else {
        (min_blocks, threads / gcd(min_blocks, threads))
    };
    let cptr = CPtr(c.as_mut_ptr());
    let split = (row_blocks, col_chunks);
    if matches!(b, BSrc::Packed(_)) || matches!(b, BSrc::Rows(_) if kern.rows.is_some()) {
        let mut none = AlignedBuf::default();
        blocks(kern, (m, n, k), a, b, cptr, threads, split, fuse, &mut none);
        return;
    }
    B_PACK.with(|cell| match cell.try_borrow_mut() {
        Ok(mut bbuf) => blocks(kern, (m, n, k), a, b, cptr, threads, split, fuse, &mut bbuf),
        Err(_) => {
            let mut own = AlignedBuf::default();
            blocks(kern, (m, n, k), a, b, cptr, threads, split, fuse, &mut own)
        }
    });
}

/// The block loops of [`gemm_blocked`], packing B into `bbuf`.
#[allow(clippy::too_many_arguments)]
fn blocks(
    kern: &'static Kernel,
    (m, n, k): (usize, usize, usize),
    a: ASrc,
    b: BSrc,
    cptr: CPtr,
    threads: usize,
    (row_blocks, col_chunks): (usize, usize),
    fuse: Option<&Fuse>,
    bbuf: &mut AlignedBuf,
) {
    let (mr, nr) = (kern.mr, kern.nr);
    let row_panels = m.div_ceil(mr);
    let mut j0 = 0;
    while j0 < n {
        let cols = kern.nc.min(n - j0);
        let col_panels = cols.div_ceil(nr);
        let chunks = col_chunks.min(col_panels);
        let mut p0 = 0;
        while p0 < k {
            let kc = kern.kc.min(k - p0);
            let bblock: &[f32] = match b {
                BSrc::Packed(pb) => pb.block(p0, kc, j0),
                BSrc::Plain(bm) => {
                    bbuf.ensure(col_panels * kc * nr);
                    pack_b_block(bm, p0, kc, j0, cols, nr, bbuf.as_mut_slice(), threads > 1);
                    bbuf.as_slice()
                }
                BSrc::Gen(gen) => {
                    bbuf.ensure(col_panels * kc * nr);
                    pack_gen_block(gen, p0, kc, j0, cols, nr, bbuf.as_mut_slice(), threads > 1);
                    bbuf.as_slice()
                }
                // Read in place by the tasks.
                BSrc::Rows(_) if kern.rows.is_some() => &[],
                BSrc::Rows(rb) => {
                    bbuf.ensure(col_panels * kc * nr);
                    rb.pack(p0, kc, j0, cols, nr, bbuf.as_mut_slice());
                    bbuf.as_slice()
                }
            };
            let brows = match b {
                BSrc::Rows(rb) if kern.rows.is_some() => Some(rb),
                _ => None,
            };
            let task = |t: usize| {
                let (rb, ch) = (t / chunks, t % chunks);
                // Whole MR panels per block, so tiles sit at the same rows
                // whatever the split (results independent of threads).
                let rows = (
                    (rb * row_panels / row_blocks * mr).min(m),
                    ((rb + 1) * row_panels / row_blocks * mr).min(m),
                );
                let panels = (ch * col_panels / chunks, (ch + 1) * col_panels / chunks);
                let t = Task {
                    kern,
                    a,
                    bblock,
                    brows,
                    c: cptr,
                    ldc: n,
                    rows,
                    panels,
                    j0,
                    cols,
                    p0,
                    kc,
                    accumulate: p0 > 0,
                    fuse: fuse.filter(|_| p0 + kc == k),
                };
                // SAFETY: rows <= m, columns j0 + cols <= n = ldc, and the
                // (row block, column chunk) pairs of one block are
                // disjoint; blocks run one after another.
                unsafe { t.run() }
            };
            let tasks = row_blocks * chunks;
            if threads > 1 && tasks > 1 {
                (0..tasks).into_par_iter().for_each(task);
            } else {
                (0..tasks).for_each(task);
            }
            p0 += kc;
        }
        j0 += cols;
    }
}

/// A row vector times B (`m == 1`): no packing, B streamed once. Sums run
/// over K in order, whatever the split.
fn gemv(n: usize, k: usize, a: &[f32], b: Mat, c: &mut [f32], threads: usize) {
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
            // Row-major B: axpy over contiguous rows (vectorises).
            dst.fill(0.0);
            for (p, &x) in a[..k].iter().enumerate() {
                let row = &b.data[p * b.rs + j0..p * b.rs + j0 + dst.len()];
                dst.iter_mut().zip(row).for_each(|(y, &bv)| *y += x * bv);
            }
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

/// One row times a packed B panel: `acc[j] += a[p] * panel[p][j]` for
/// each p in order, with the multiply-add of the micro-kernel that packed
/// the panel (fused for the SIMD kernels).
fn dot_panel<const NR: usize>(fused: bool, a: &[f32], panel: &[f32], acc: &mut [f32; NR]) {
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
        // SAFETY: only the AVX2 and AVX-512 kernels (chosen when the CPU
        // has AVX2 and FMA, or AVX-512F, which implies both here) are
        // fused.
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
fn gemv_packed(b: &PackedB, a: &[f32], c: &mut [f32], threads: usize, fuse: Option<&Fuse>) {
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
                dot_panel(fused, &a[p0..p0 + kc], panel, &mut acc);
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
        16 => run::<16>(b, a, c, threads, fuse),
        32 => run::<32>(b, a, c, threads, fuse),
        _ => run::<PORTABLE_NR>(b, a, c, threads, fuse),
    }
}

fn threads_for(m: usize, n: usize, k: usize, parallel: bool) -> usize {
    if parallel && m.saturating_mul(n).saturating_mul(k) >= PAR_WORK {
        rayon::current_num_threads().max(1)
    } else {
        1
    }
}

/// `c = a' * b'` for f32 matrices, where `a'` is `a` ([m, k] row-major)
/// or, when `a_t`, the transpose of `a` ([k, m] row-major), and likewise
/// `b'` is [k, n] from `b` ([k, n], or [n, k] when `b_t`). `c` is [m, n]
/// row-major and is overwritten. With `parallel` and enough work the
/// product runs on the current rayon pool; callers that already run many
/// products in parallel pass `false`.
#[allow(clippy::too_many_arguments)]
pub fn sgemm_t(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    a_t: bool,
    b: &[f32],
    b_t: bool,
    c: &mut [f32],
    parallel: bool,
) -> Result<()> {
    let am = Mat::new(a, m, k, a_t)?;
    let bm = Mat::new(b, k, n, b_t)?;
    if c.len() < m * n {
        return Err(Error::operation("sgemm: the output is too small"));
    }
    let threads = threads_for(m, n, k, parallel);
    if m == 1 && n > 0 {
        gemv(n, k, a, bm, c, threads);
    } else {
        gemm_blocked(best_kernel(), m, n, k, am, BSrc::Plain(bm), c, threads);
    }
    Ok(())
}

/// `c = a * b` for row-major `a` [m, k], `b` [k, n], `c` [m, n] (f32);
/// see [`sgemm_t`].
///
/// # Panics
/// When a buffer is smaller than its shape says (a caller bug).
pub fn sgemm(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32], parallel: bool) {
    sgemm_t(m, n, k, a, false, b, false, c, parallel).expect("sgemm: operands too small");
}

/// `c = a' * B` with B packed in advance; `a'` is `a` ([m, K] row-major)
/// or, when `a_t`, the transpose of `a` ([K, m]). `c` is [m, N].
pub fn sgemm_packed(
    m: usize,
    a: &[f32],
    a_t: bool,
    b: &PackedB,
    c: &mut [f32],
    parallel: bool,
    fuse: &Fuse,
) -> Result<()> {
    let (k, n) = (b.k, b.n);
    let am = Mat::new(a, m, k, a_t)?;
    if c.len() < m * n {
        return Err(Error::operation("sgemm: the output is too small"));
    }
    fuse.check(m, n)?;
    let threads = threads_for(m, n, k, parallel);
    if m == 1 && k > 0 {
        gemv_packed(b, &a[..k], c, threads, Some(fuse).filter(|f| !f.is_empty()));
        return Ok(());
    }
    let (ka, bs) = (ASrc::Plain(am), BSrc::Packed(b));
    gemm_blocked_a(b.kern, m, n, k, ka, bs, c, threads, Some(fuse));
    Ok(())
}

/// `c = a' * B` where B ([k, n]) is never stored whole: `gen` writes its
/// panels as the product needs them (see [`PanelGen`]), e.g. im2col
/// patches straight into the packed layout. `a'` is `a` ([m, k]) or, when
/// `a_t`, the transpose of `a` ([k, m]); `c` is [m, n].
#[allow(clippy::too_many_arguments)]
pub fn sgemm_gen(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    a_t: bool,
    gen: PanelGen,
    c: &mut [f32],
    parallel: bool,
    fuse: &Fuse,
) -> Result<()> {
    let am = Mat::new(a, m, k, a_t)?;
    if c.len() < m * n {
        return Err(Error::operation("sgemm: the output is too small"));
    }
    fuse.check(m, n)?;
    let threads = threads_for(m, n, k, parallel);
    let (ka, bs) = (ASrc::Plain(am), BSrc::Gen(gen));
    gemm_blocked_a(best_kernel(), m, n, k, ka, bs, c, threads, Some(fuse));
    Ok(())
}

/// `c = A * b` with A packed in advance ([`PackedA`], [m, k]) and `b` a
/// row-major [k, n] matrix; `c` is [m, n].
/// `fuse` is applied to the finished product (see [`Fuse`]).
pub fn sgemm_packed_a(
    a: &PackedA,
    n: usize,
    b: &[f32],
    c: &mut [f32],
    parallel: bool,
    fuse: &Fuse,
) -> Result<()> {
    let bm = Mat::new(b, a.k, n, false)?;
    product_packed_a(a, n, BSrc::Plain(bm), c, parallel, fuse)
}

/// `c = A * B` with A packed in advance ([`PackedA`], [m, k]) and B
/// generated panel by panel (see [`sgemm_gen`]); `c` is [m, n].
pub fn sgemm_gen_packed_a(
    a: &PackedA,
    n: usize,
    gen: PanelGen,
    c: &mut [f32],
    parallel: bool,
    fuse: &Fuse,
) -> Result<()> {
    product_packed_a(a, n, BSrc::Gen(gen), c, parallel, fuse)
}

/// `c = A * B` with A packed in advance ([`PackedA`], [m, k]) and B's
/// rows read where they lie ([`RowsB`], k rows of n); `c` is [m, n].
/// `fuse` is applied to the finished product (see [`Fuse`]).
pub fn sgemm_rows_packed_a(
    a: &PackedA,
    b: RowsB,
    c: &mut [f32],
    parallel: bool,
    fuse: &Fuse,
) -> Result<()> {
    if b.offs.len() != a.k {
        return Err(Error::operation("sgemm: B has the wrong number of rows"));
    }
    product_packed_a(a, b.n, BSrc::Rows(b), c, parallel, fuse)
}

/// The product behind the `*_packed_a` entry points, once B (k x n) is
/// checked: checks C and the fused epilogue, then runs the blocked loops.
fn product_packed_a(
    a: &PackedA,
    n: usize,
    b: BSrc,
    c: &mut [f32],
    parallel: bool,
    fuse: &Fuse,
) -> Result<()> {
    let (m, k) = (a.m, a.k);
    if c.len() < m * n {
        return Err(Error::operation("sgemm: the output is too small"));
    }
    fuse.check(m, n)?;
    let threads = threads_for(m, n, k, parallel);
    gemm_blocked_a(a.kern, m, n, k, ASrc::Packed(a), b, c, threads, Some(fuse));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Equal bit for bit, any NaN matching any NaN.
    fn same_bits(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
    }

    /// Deterministic pseudo-random values in [-1, 1).
    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// f64 reference of `a' * b'` (transposes as in `sgemm_t`).
    #[allow(clippy::too_many_arguments)]
    fn naive(m: usize, n: usize, k: usize, a: &[f32], a_t: bool, b: &[f32], b_t: bool) -> Vec<f32> {
        let mut c = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f64;
                for p in 0..k {
                    let x = if a_t { a[p * m + i] } else { a[i * k + p] };
                    let y = if b_t { b[j * k + p] } else { b[p * n + j] };
                    s += x as f64 * y as f64;
                }
                c[i * n + j] = s as f32;
            }
        }
        c
    }

    /// Values in [-1, 1): the rounding error grows about like sqrt(K),
    /// bounded here by K ulps-ish of the largest partial sum.
    fn check(got: &[f32], want: &[f32], k: usize, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}");
        let tol = 1e-6 * (k as f32 + 1.0) * 4.0;
        for (i, (x, y)) in got.iter().zip(want).enumerate() {
            assert!((x - y).abs() <= tol, "{what}: element {i}: {x} vs {y}");
        }
    }

    const SHAPES: &[(usize, usize, usize)] = &[
        (1, 1, 1),
        (1, 1000, 1),
        (1, 1000, 37),
        (1, 45, 600),
        (1000, 1, 3),
        (2, 3, 4),
        (6, 16, 256),
        (12, 32, 192),
        (12, 32, 384),
        (3, 40, 769),
        (7, 17, 257),
        (17, 33, 65),
        (130, 257, 70),
        (145, 31, 300),
        (64, 300, 513),
        (5, 4100, 9),
        (0, 3, 4),
        (3, 0, 4),
        (3, 4, 0),
    ];

    #[test]
    fn every_kernel_matches_naive() {
        for kern in available_kernels() {
            for &(m, n, k) in SHAPES {
                for (a_t, b_t) in [(false, false), (true, false), (false, true), (true, true)] {
                    let a = data(m * k, 1 + m as u64);
                    let b = data(k * n, 2 + n as u64);
                    let want = naive(m, n, k, &a, a_t, &b, b_t);
                    let am = Mat::new(&a, m, k, a_t).unwrap();
                    let bm = Mat::new(&b, k, n, b_t).unwrap();
                    let what = format!("{} {m}x{n}x{k} a_t={a_t} b_t={b_t}", kern.name);
                    let mut c1 = vec![7.0f32; m * n];
                    gemm_blocked(kern, m, n, k, am, BSrc::Plain(bm), &mut c1, 1);
                    check(&c1, &want, k, &what);
                    // Any split gives bit-identical results.
                    for threads in [2, 3, 4] {
                        let mut c2 = vec![-3.0f32; m * n];
                        gemm_blocked(kern, m, n, k, am, BSrc::Plain(bm), &mut c2, threads);
                        assert_eq!(c1, c2, "{what} threads={threads}");
                    }
                    let pb = PackedB::with_kernel(kern, &b, k, n, b_t).unwrap();
                    let mut c3 = vec![1.0f32; m * n];
                    gemm_blocked(kern, m, n, k, am, BSrc::Packed(&pb), &mut c3, 2);
                    assert_eq!(c1, c3, "{what} packed");
                    // One row: the packed panels streamed (same bits).
                    if m == 1 {
                        for threads in [1, 2] {
                            let mut c9 = vec![6.0f32; n];
                            gemv_packed(&pb, &a[..k], &mut c9, threads, None);
                            assert_eq!(c1, c9, "{what} gemv_packed threads={threads}");
                        }
                    }
                    // Panels generated on demand: the same as packing B.
                    let gen = |p0: usize,
                               kc: usize,
                               j0: usize,
                               cols: usize,
                               nr: usize,
                               dst: &mut [f32]| {
                        for (q, panel) in dst.chunks_mut(kc * nr).enumerate() {
                            let j = j0 + q * nr;
                            pack_b_panel(bm, p0, kc, j, nr.min(j0 + cols - j), nr, panel);
                        }
                    };
                    for threads in [1, 2] {
                        let mut c4 = vec![5.0f32; m * n];
                        gemm_blocked(kern, m, n, k, am, BSrc::Gen(&gen), &mut c4, threads);
                        assert_eq!(c1, c4, "{what} generated");
                    }
                    // B's rows read in place (packed where the kernel has no
                    // rows form): scattered rows with gaps between them.
                    if !b_t {
                        let (gap, start) = (3, 5);
                        let mut spread = vec![f32::NAN; start + k * (n + gap)];
                        let offs: Vec<usize> = (0..k).map(|p| start + p * (n + gap)).collect();
                        for (p, &o) in offs.iter().enumerate() {
                            spread[o..o + n].copy_from_slice(&b[p * n..(p + 1) * n]);
                        }
                        let rb = RowsB::new(&spread, &offs, n).unwrap();
                        for threads in [1, 2, 3] {
                            let mut c6 = vec![4.0f32; m * n];
                            gemm_blocked(kern, m, n, k, am, BSrc::Rows(rb), &mut c6, threads);
                            assert_eq!(c1, c6, "{what} rows in place threads={threads}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn public_entry_points() {
        for &(m, n, k) in SHAPES {
            let a = data(m * k, 3);
            let b = data(k * n, 4);
            let want = naive(m, n, k, &a, false, &b, false);
            let mut c = vec![9.0f32; m * n];
            sgemm(m, n, k, &a, &b, &mut c, true);
            check(&c, &want, k, "sgemm");
            let mut c2 = vec![9.0f32; m * n];
            sgemm(m, n, k, &a, &b, &mut c2, false);
            assert_eq!(c, c2);
            // A packed in advance.
            let pa = PackedA::new(&a, m, k).unwrap();
            assert_eq!((pa.m(), pa.k()), (m, k));
            let mut c3 = vec![9.0f32; m * n];
            sgemm_packed_a(&pa, n, &b, &mut c3, true, &Fuse::default()).unwrap();
            check(&c3, &want, k, "sgemm_packed_a");
            // A fused bias and bounds give the bits of applying them
            // afterwards, in full and edge tiles alike; NaN passes.
            let mut rb = data(m, 5);
            let cb = data(n, 6);
            if m > 2 {
                rb[2] = f32::NAN;
            }
            for fuse in [
                Fuse {
                    row_bias: Some(&rb),
                    col_bias: None,
                    bounds: Some((-0.25, 0.5)),
                },
                Fuse {
                    row_bias: None,
                    col_bias: Some(&cb),
                    bounds: None,
                },
                Fuse {
                    row_bias: Some(&rb),
                    col_bias: Some(&cb),
                    bounds: Some((0.0, f32::INFINITY)),
                },
            ] {
                let mut c5 = vec![9.0f32; m * n];
                sgemm_packed_a(&pa, n, &b, &mut c5, true, &fuse).unwrap();
                let mut want5 = c3.clone();
                for (i, row) in want5.chunks_exact_mut(n.max(1)).enumerate() {
                    fuse.apply(i, 0, row);
                }
                let same = same_bits(&c5, &want5);
                assert!(same, "fused {fuse:?} {m}x{n}x{k}");
                // The scalar form clamps as the clamp operator does.
                if let Some((lo, hi)) = fuse.bounds {
                    assert!(c5.iter().all(|x| x.is_nan() || (lo..=hi).contains(x)));
                }
            }
            let short = Fuse {
                row_bias: Some(&rb[..m.saturating_sub(1)]),
                ..Fuse::default()
            };
            if m > 0 {
                assert!(sgemm_packed_a(&pa, n, &b, &mut c3.clone(), true, &short).is_err());
            }
            let gen = |p0: usize, kc: usize, j0: usize, cols: usize, nr: usize, dst: &mut [f32]| {
                for (q, panel) in dst.chunks_exact_mut(kc * nr).enumerate() {
                    for (p, row) in panel.chunks_exact_mut(nr).enumerate() {
                        for (j, x) in row.iter_mut().enumerate() {
                            let col = j0 + q * nr + j;
                            *x = if col < j0 + cols {
                                b[(p0 + p) * n + col]
                            } else {
                                0.0
                            };
                        }
                    }
                }
            };
            let mut c4 = vec![9.0f32; m * n];
            sgemm_gen_packed_a(&pa, n, &gen, &mut c4, true, &Fuse::default()).unwrap();
            assert_eq!(c3, c4, "sgemm_gen_packed_a {m}x{n}x{k}");
            // B's rows read in place, with a fused epilogue: the bits of
            // the packed path (the same sums in the same order).
            let offs: Vec<usize> = (0..k).map(|p| p * n).collect();
            let rows = RowsB::new(&b, &offs, n).unwrap();
            let fuse = Fuse {
                row_bias: Some(&rb),
                col_bias: Some(&cb),
                bounds: Some((-0.25, 0.5)),
            };
            for parallel in [true, false] {
                let mut c7 = vec![9.0f32; m * n];
                sgemm_rows_packed_a(&pa, rows, &mut c7, parallel, &Fuse::default()).unwrap();
                assert_eq!(c3, c7, "sgemm_rows_packed_a {m}x{n}x{k}");
                let (mut c8, mut want8) = (vec![9.0f32; m * n], vec![9.0f32; m * n]);
                sgemm_rows_packed_a(&pa, rows, &mut c8, parallel, &fuse).unwrap();
                sgemm_packed_a(&pa, n, &b, &mut want8, parallel, &fuse).unwrap();
                let same = same_bits(&c8, &want8);
                assert!(same, "sgemm_rows_packed_a fused {m}x{n}x{k}");
            }
            // Rows must lie inside the buffer; one row per K.
            if k > 0 && n > 0 {
                let past = vec![b.len() - n + 1; k];
                assert!(RowsB::new(&b, &past, n).is_err());
                let few = RowsB::new(&b, &offs[..k - 1], n).unwrap();
                assert!(sgemm_rows_packed_a(&pa, few, &mut c3.clone(), true, &fuse).is_err());
            }
            for (a_t, b_t) in [(true, false), (false, true), (true, true)] {
                let want = naive(m, n, k, &a, a_t, &b, b_t);
                let mut c = vec![9.0f32; m * n];
                sgemm_t(m, n, k, &a, a_t, &b, b_t, &mut c, true).unwrap();
                check(&c, &want, k, "sgemm_t");
                let pb = PackedB::new(&b, k, n, b_t).unwrap();
                assert_eq!((pb.k(), pb.n()), (k, n));
                let mut c = vec![9.0f32; m * n];
                sgemm_packed(m, &a, a_t, &pb, &mut c, true, &Fuse::default()).unwrap();
                check(&c, &want, k, "sgemm_packed");
                // With a fused epilogue: the bits of applying it after.
                let fuse = Fuse {
                    row_bias: Some(&rb),
                    col_bias: Some(&cb),
                    bounds: Some((-0.25, 0.5)),
                };
                let mut cf = vec![9.0f32; m * n];
                sgemm_packed(m, &a, a_t, &pb, &mut cf, true, &fuse).unwrap();
                for (i, row) in c.chunks_exact_mut(n.max(1)).enumerate() {
                    fuse.apply(i, 0, row);
                }
                let same = same_bits(&cf, &c);
                assert!(same, "sgemm_packed fused {m}x{n}x{k} a_t={a_t} b_t={b_t}");
            }
        }
    }

    #[test]
    fn inside_a_pool_and_with_big_strides() {
        // Larger than one NC block and several KC blocks, on 2 threads.
        let (m, n, k) = (37, 4096 + 40, 600);
        let a = data(m * k, 5);
        let b = data(k * n, 6);
        let want = naive(m, n, k, &a, false, &b, false);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let mut c = vec![0.0f32; m * n];
        pool.install(|| sgemm(m, n, k, &a, &b, &mut c, true));
        check(&c, &want, k, "pool");
    }

    #[test]
    fn short_buffers_are_errors() {
        let mut c = vec![0.0f32; 4];
        assert!(sgemm_t(2, 2, 2, &[1.0; 3], false, &[1.0; 4], false, &mut c, false).is_err());
        assert!(sgemm_t(2, 2, 2, &[1.0; 4], false, &[1.0; 3], true, &mut c, false).is_err());
        assert!(sgemm_t(
            2,
            2,
            2,
            &[1.0; 4],
            false,
            &[1.0; 4],
            true,
            &mut c[..3],
            false
        )
        .is_err());
        assert!(PackedB::new(&[1.0; 5], 2, 3, false).is_err());
        let pb = PackedB::new(&[1.0; 6], 2, 3, false).unwrap();
        let mut c = vec![0.0f32; 6];
        assert!(sgemm_packed(2, &[1.0; 3], false, &pb, &mut c, false, &Fuse::default()).is_err());
        sgemm_packed(2, &[1.0; 4], false, &pb, &mut c, false, &Fuse::default()).unwrap();
        assert_eq!(c, vec![2.0; 6]);
    }

    /// This process's user + system CPU time (Linux; 0 elsewhere), to
    /// tell whether the threads ran at once on a loaded machine.
    fn cpu_seconds() -> f64 {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        // Fields after the parenthesised command name; utime and stime
        // are the 14th and 15th fields overall, in clock ticks (100 Hz).
        let rest = stat.rsplit(')').next().unwrap_or("");
        let f: Vec<f64> = rest
            .split_whitespace()
            .skip(11)
            .take(2)
            .filter_map(|x| x.parse().ok())
            .collect();
        f.iter().sum::<f64>() / 100.0
    }

    /// `cargo test --release --lib sgemm_bench -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn sgemm_bench() {
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!("load: {}", load.trim());
        println!("kernel: {}", best_kernel().name);
        let reps: usize = std::env::var("SGEMM_REPS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(15);
        let shapes: &[(usize, usize, usize)] =
            &[(1024, 1024, 1024), (64, 3136, 576), (256, 256, 256)];
        for &(m, n, k) in shapes {
            let a = data(m * k, 1);
            let b = data(k * n, 2);
            let pb = PackedB::new(&b, k, n, false).unwrap();
            let mut c = vec![0.0f32; m * n];
            let flops = 2.0 * (m * n * k) as f64;
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                for packed in [false, true] {
                    let mut best = f64::MAX;
                    let mut times = Vec::new();
                    let cpu0 = cpu_seconds();
                    for _ in 0..reps {
                        let t = std::time::Instant::now();
                        pool.install(|| {
                            if packed {
                                sgemm_packed(m, &a, false, &pb, &mut c, true, &Fuse::default())
                                    .unwrap()
                            } else {
                                sgemm(m, n, k, &a, &b, &mut c, true)
                            }
                        });
                        let dt = t.elapsed().as_secs_f64();
                        times.push(dt);
                        best = best.min(dt);
                    }
                    let cpu = cpu_seconds() - cpu0;
                    let wall: f64 = times.iter().sum();
                    times.sort_by(f64::total_cmp);
                    let med = times[times.len() / 2];
                    println!(
                        "{m}x{n}x{k} threads={threads} packed={packed}: min {:.3} ms ({:.1} GFLOP/s), median {:.3} ms ({:.1} GFLOP/s), cpu/wall {:.2}",
                        best * 1e3,
                        flops / best / 1e9,
                        med * 1e3,
                        flops / med / 1e9,
                        cpu / wall
                    );
                }
            }
        }
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!("load after: {}", load.trim());
    }
}

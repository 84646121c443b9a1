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
//! part is copied, except where the kernel has an edge form for the rows
//! left (`kernels::Edge`), which writes them in place. The micro-kernel (and with it MR, NR and the block sizes)
//! is chosen once per process: AVX-512, else AVX2+FMA, else portable code.
//!
//! Where L2 has room, a task takes several KC blocks at once (`kg`, see
//! `Kernel::grouping`): each tile sums them in turn while it sits in L1,
//! rather than every block sweeping all of C.
//!
//! Every element of C is summed in the same order (K ascending, in KC
//! blocks) whatever the number of threads or the grouping, so results do not depend on the
//! pool size. [`PackedB`] packs a constant right-hand side once (at graph
//! build) in exactly the layout the B-packing step produces.
//!
//! The pieces: `kernels.rs` (the micro-kernels and their blocking),
//! `pack.rs` (packing, and the operands packed once), `blocked.rs` (the
//! block loops and their tasks), `gemv.rs` (one row times B), `peak.rs` (the
//! machine's multiply-add peak, for the benchmark); this file
//! holds the epilogue a kernel fuses (`Fuse`) and the entry points.

use std::cell::RefCell;
use std::sync::OnceLock;

use rayon::prelude::*;

use crate::error::{Error, Result};

/// Multiply-adds below which one thread does the whole product: a rayon
/// fork-join costs a few microseconds, which this much work repays.
const PAR_WORK: usize = 1 << 19;

mod blocked;
mod blocking;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
mod each_row;
mod gemv;
mod kernels;
#[cfg(target_arch = "aarch64")]
mod neon;
mod pack;
mod peak;
#[cfg(test)]
mod tests;

use blocked::*;
pub use blocking::Caches;
use gemv::*;
pub use kernels::*;
pub use pack::*;
pub use peak::*;

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

/// Fails unless `c` holds an `m x n` product. The product is checked
/// for overflow: the tiles are stored through raw pointers at `i * n + j`
/// for every `i < m`, `j < n`, so a wrapped `m * n` would let a short C
/// pass.
fn check_c(c: &[f32], m: usize, n: usize) -> Result<()> {
    if m.checked_mul(n).is_none_or(|len| c.len() < len) {
        return Err(Error::operation("sgemm: the output is too small"));
    }
    Ok(())
}

/// Up to this many rows of A, a product with a row-major B runs as one
/// row-vector product per row (see [`sgemm_t`]).
const GEMV_ROWS: usize = 4;

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
    check_c(c, m, n)?;
    let threads = threads_for(m, n, k, parallel);
    if k == 1 && m > GEMV_ROWS && n > 0 {
        outer(m, n, am, bm, c);
    } else if m == 1 && n > 0 {
        gemv(n, k, a, bm, c, threads);
    } else if m <= GEMV_ROWS && n > 0 && k > 0 && !a_t && bm.cs == 1 {
        // A few rows (attention's query rows per head against one cache
        // block): a row-vector product per row, B's rows streamed from
        // the cache as they are; packing B would cost more than the product.
        gemv_rows(m, n, k, a, bm, c, threads);
    } else {
        let kern = best_kernel();
        // B's row offsets (k of them, as B has k rows); where they cannot
        // be allocated, B is packed as before.
        let mut offs = Vec::new();
        if !b_t && reads_b_in_place(kern, m, n) && offs.try_reserve_exact(k).is_ok() {
            offs.extend((0..k).map(|p| p * n));
            let rb = RowsB::new(b, &offs, n)?;
            gemm_blocked(kern, m, n, k, am, BSrc::Rows(rb), c, threads);
        } else {
            gemm_blocked(kern, m, n, k, am, BSrc::Plain(bm), c, threads);
        }
    }
    Ok(())
}

/// Rows of A up to which a row-major B is read where it lies rather than
/// packed ([`reads_b_in_place`]).
const IN_PLACE_ROWS: usize = 512;

/// Whether a product of `m` rows reads its row-major B (`n` wide) in
/// place, with the kernel's rows form, instead of packing it first: the
/// same multiply-adds in the same order, so the same bits. Packing B
/// costs a pass over it (a parallel one, a fork and a join, with
/// threads), which few rows of A do not repay. Measured on an AVX-512 Zen
/// 5, both operands inputs, chained dispatches, packed against in place:
/// attention's 6 heads of 128 x 64 by 64 x 128, 67.6 against 62.1 us at
/// one thread; 128 x 1536 by 1536 x 384, 711 against 666 at one thread,
/// 612 against 426 at two; 384^3, 502 against 474 and 336 against 270;
/// 512^3 the same at one thread; 1024 x 1024 by 1024 x 1000 3% slower in
/// place. Rows a multiple of 4 KiB apart fall in one set of L1 (64 sets
/// of 64-byte lines), so a panel read in place evicts itself: 64 x 1024
/// by 1024 x 1024 took 821 us in place against 704 packed.
fn reads_b_in_place(kern: &Kernel, m: usize, n: usize) -> bool {
    kern.rows.is_some() && m <= IN_PLACE_ROWS && !(n * 4).is_multiple_of(4096)
}

/// `c = a * b` for a column `a` ([m, 1]) and a row `b` ([1, n]): each
/// output its one product added to zero, as the micro-kernels' sums start
/// (the bits of the blocked path, whose packing of both operands cost
/// more than this product: a decoding step places its new key and value
/// rows in a cache block by such products, two per layer).
fn outer(m: usize, n: usize, a: Mat, b: Mat, c: &mut [f32]) {
    for (i, row) in c.chunks_exact_mut(n).take(m).enumerate() {
        let x = a.data[i * a.rs];
        for (j, y) in row.iter_mut().enumerate() {
            *y = 0.0 + x * b.data[j * b.cs];
        }
    }
}

/// `c = a * b` for row-major f32 `a` [m, k] and float16 `b` [k, n] (bit
/// patterns), `c` [m, n] f32, overwritten: the bits of [`sgemm`] on `b`
/// widened first (the widening is exact). A few rows (a decoding step's
/// queries against a float16 cache block) read `b` as it is, each row of
/// it widened once for all rows of `a`; more rows widen `b` into a
/// buffer first (and run on the pool with `parallel`, as [`sgemm_t`]).
pub fn sgemm_f16b(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    b: &[u16],
    c: &mut [f32],
    parallel: bool,
) -> Result<()> {
    if a.len() < m * k || b.len() < k * n {
        return Err(Error::operation(
            "sgemm: an operand is smaller than its shape",
        ));
    }
    check_c(c, m, n)?;
    if m <= GEMV_ROWS && n > 0 && k > 0 {
        gemv_rows_f16(m, n, k, a, b, c);
        return Ok(());
    }
    let mut wide = Vec::new();
    wide.try_reserve_exact(k * n).map_err(|_| {
        Error::operation(format!(
            "cannot allocate {} bytes for a widened operand",
            k * n * 4
        ))
    })?;
    wide.resize(k * n, 0f32);
    crate::f16::widen(&b[..k * n], &mut wide);
    sgemm_t(m, n, k, a, false, &wide, false, c, parallel)
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
    check_c(c, m, n)?;
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
    check_c(c, m, n)?;
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
    check_c(c, m, n)?;
    fuse.check(m, n)?;
    let threads = threads_for(m, n, k, parallel);
    gemm_blocked_a(a.kern, m, n, k, ASrc::Packed(a), b, c, threads, Some(fuse));
    Ok(())
}

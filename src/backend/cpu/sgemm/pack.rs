//! Packing A and B into the micro-kernels' panel layouts, and the
//! operands packed once at build (`PackedA`, `PackedB`).

use super::*;
use crate::backend::cpu::simd;

/// unaligned packed row would split a cache line on every vector load.
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C, align(64))]
pub(super) struct Line([f32; 16]);

/// A zero-initialised, 64-byte aligned float buffer. Its fields are
/// private so that `len <= lines.len() * 16` holds everywhere (`try_zeroed`
/// and `ensure` keep it), which the slice views rely on.
#[derive(Default)]
pub(super) struct AlignedBuf {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedBuf {
    /// `len` zeros, or an OperationError naming the bytes: for the
    /// operands packed once, whose size is the operand's.
    pub(super) fn try_zeroed(len: usize) -> Result<Self> {
        let lines = crate::backend::cpu::util::try_filled(
            len.div_ceil(16),
            Line([0.0; 16]),
            "a packed matrix operand",
        )?;
        Ok(AlignedBuf { lines, len })
    }

    /// Grows (never shrinks) to at least `len` floats. Only for the
    /// per-thread packing buffers of one block, whose size the blocking
    /// bounds (kc <= 1024 deep, mc <= 1020 rows or nc <= 8192 columns):
    /// infallible, as the block loops have no error path.
    pub(super) fn ensure(&mut self, len: usize) {
        if self.lines.len() * 16 < len {
            self.lines = vec![Line([0.0; 16]); len.div_ceil(16)];
        }
        self.len = self.len.max(len);
    }

    pub(super) fn as_slice(&self) -> &[f32] {
        // `Line` is Pod (repr(C) around [f32; 16], no padding), so its
        // storage is lines.len() * 16 floats, and len is within it (the
        // struct's invariant).
        &bytemuck::cast_slice::<Line, f32>(&self.lines)[..self.len]
    }

    pub(super) fn as_mut_slice(&mut self) -> &mut [f32] {
        &mut bytemuck::cast_slice_mut::<Line, f32>(&mut self.lines)[..self.len]
    }
}

/// A matrix view: element (i, j) is `data[i * rs + j * cs]`, which covers
/// row-major matrices and their transposes.
#[derive(Clone, Copy)]
pub(super) struct Mat<'a> {
    pub(super) data: &'a [f32],
    pub(super) rs: usize,
    pub(super) cs: usize,
}

impl<'a> Mat<'a> {
    /// A `rows x cols` matrix stored row-major, or (when `transposed`)
    /// the transpose of a row-major `cols x rows` matrix. Checks the size.
    pub(super) fn new(data: &'a [f32], rows: usize, cols: usize, transposed: bool) -> Result<Self> {
        if rows.checked_mul(cols).is_none_or(|len| data.len() < len) {
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
pub(super) fn pack_a_full<const MR: usize>(
    a: Mat,
    i0: usize,
    p0: usize,
    kc: usize,
    dst: &mut [f32],
) {
    let rows: [&[f32]; MR] = std::array::from_fn(|r| {
        let base = (i0 + r) * a.rs + p0;
        &a.data[base..base + kc]
    });
    let dst = &mut dst[..kc * MR];
    #[cfg(target_arch = "x86_64")]
    let done = transpose4(&rows, dst);
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    for (p, d) in dst.chunks_exact_mut(MR).enumerate().skip(done) {
        for (x, row) in d.iter_mut().zip(&rows) {
            *x = row[p];
        }
    }
}

/// The columns of `rows` (each as long as `dst` has columns of `MR`) in
/// whole groups of 4, moved 4 x 4 at a time in SSE registers (x86-64's
/// baseline): 4 loads, 8 shuffles and 4 stores for 16 floats, where the
/// plain loop did 16 loads and 16 stores. Returns the columns it wrote.
/// Packing A for 128 x 1536 times 1536 x 384 (the transformer block's
/// second feed-forward product) took 75 us of the product's 1.45 ms on
/// an AVX-512 Zen 5 the plain way.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn transpose4<const MR: usize>(rows: &[&[f32]; MR], dst: &mut [f32]) -> usize {
    use std::arch::x86_64::*;
    let kc = dst.len() / MR;
    let whole = kc / 4 * 4;
    if rows.iter().any(|r| r.len() < whole) {
        return 0;
    }
    let d = dst.as_mut_ptr();
    // SAFETY: SSE and SSE2 are part of x86-64. Every row holds at least
    // `whole` floats (checked above) and `dst` at least kc * MR (kc =
    // dst.len() / MR): for p + 4 <= whole <= kc the loads read floats
    // p..p + 4 of rows r..r + 4 (or r + 2, r < MR), the stores write
    // floats r..r + 4 (or r + 2, or r) of columns p..p + 4, each column MR
    // floats, all inside `dst`. The rows are shared borrows and `dst` a
    // mutable one, so they do not overlap; unaligned loads and stores
    // take any address.
    unsafe {
        for p in (0..whole).step_by(4) {
            let at = |j: usize, r: usize| d.add((p + j) * MR + r);
            let mut r = 0;
            while r + 4 <= MR {
                let x: [__m128; 4] =
                    std::array::from_fn(|q| _mm_loadu_ps(rows[r + q].as_ptr().add(p)));
                let t = crate::backend::cpu::util::transpose4x4(x);
                for (j, tj) in t.into_iter().enumerate() {
                    _mm_storeu_ps(at(j, r), tj);
                }
                r += 4;
            }
            if r + 2 <= MR {
                let (x0, x1) = (
                    _mm_loadu_ps(rows[r].as_ptr().add(p)),
                    _mm_loadu_ps(rows[r + 1].as_ptr().add(p)),
                );
                let (lo, hi) = (_mm_unpacklo_ps(x0, x1), _mm_unpackhi_ps(x0, x1));
                let pair = |v: __m128, j: usize| {
                    _mm_storel_epi64(at(j, r) as *mut __m128i, _mm_castps_si128(v))
                };
                pair(lo, 0);
                pair(_mm_movehl_ps(lo, lo), 1);
                pair(hi, 2);
                pair(_mm_movehl_ps(hi, hi), 3);
                r += 2;
            }
            for (q, row) in rows.iter().enumerate().skip(r) {
                for j in 0..4 {
                    *at(j, q) = row[p + j];
                }
            }
        }
    }
    whole
}

/// Packs rows `i0..i0 + rows` (rows <= mr), columns `p0..p0 + kc` of `a`
/// as one A panel: column p holds `mr` values, zero below `rows`.
pub(super) fn pack_a_panel(
    a: Mat,
    i0: usize,
    rows: usize,
    p0: usize,
    kc: usize,
    mr: usize,
    dst: &mut [f32],
) {
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
pub(super) fn pack_b_panel(
    b: Mat,
    p0: usize,
    kc: usize,
    j0: usize,
    cols: usize,
    nr: usize,
    dst: &mut [f32],
) {
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
    // Advanced only by the x86-64 loop.
    #[cfg_attr(not(target_arch = "x86_64"), allow(unused_mut))]
    let mut i = 0;
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_loadu_ps, _mm_storeu_ps};
        while i + 4 <= n {
            // SAFETY: SSE is part of x86-64; i + 4 <= n <= the length of
            // both slices, so both ranges i..i + 4 are inside them, and
            // `dst` (mutable) and `src` (shared) cannot overlap; unaligned
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

/// Asks for the first-level cache lines of `data[at..at + len]`
/// (clipped to `data`) ahead of their use ([`simd::prefetch`]).
#[inline(always)]
pub(super) fn prefetch(data: &[f32], at: usize, len: usize) {
    simd::prefetch(data, at..at.saturating_add(len), simd::CacheLevel::L1);
}

/// Rows ahead whose segments `pack_b_block` asks for while it packs a row:
/// a block's rows are a whole row of B apart, too many streams for the
/// hardware prefetchers to follow, so without this each segment's lines
/// arrive one demand miss at a time.
pub(super) const PACK_AHEAD: usize = 4;

/// Packs the `kc x cols` block of `b` at (p0, j0) into consecutive panels
/// (each `kc * nr` floats), in parallel when `parallel`.
#[allow(clippy::too_many_arguments)]
pub(super) fn pack_b_block(
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
    pub(super) k: usize,
    pub(super) n: usize,
    pub(super) kern: &'static Kernel,
    pub(super) data: AlignedBuf,
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

    pub(super) fn with_kernel(
        kern: &'static Kernel,
        b: &[f32],
        k: usize,
        n: usize,
        transposed: bool,
    ) -> Result<Self> {
        let bm = Mat::new(b, k, n, transposed)?;
        let panels = n.div_ceil(kern.nr);
        let mut data = AlignedBuf::try_zeroed(k * panels * kern.nr)?;
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
    pub(super) fn block(&self, p0: usize, kc: usize, j0: usize) -> &[f32] {
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
pub(super) enum BSrc<'a> {
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
    pub(super) data: &'a [f32],
    pub(super) offs: &'a [usize],
    pub(super) n: usize,
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
    pub(super) fn pack(
        &self,
        p0: usize,
        kc: usize,
        j0: usize,
        cols: usize,
        nr: usize,
        dst: &mut [f32],
    ) {
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
pub(super) fn pack_gen_block(
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

/// A left-hand side `A` (M x K, row-major) packed once into the
/// micro-kernel's A-panel layout, for products whose A is constant (conv2d
/// filters, where the input is the right-hand side).
///
/// Layout: for each KC block of columns (in order), the ceil(M / MR)
/// panels of that block, each `kc * MR` floats (column p holds MR values),
/// zero below the last row; exactly what packing a plain A produces, so
/// both paths give identical results.
pub struct PackedA {
    pub(super) m: usize,
    pub(super) k: usize,
    pub(super) kern: &'static Kernel,
    pub(super) data: AlignedBuf,
}

impl PackedA {
    /// Packs the row-major [m, k] matrix `a`.
    pub fn new(a: &[f32], m: usize, k: usize) -> Result<Self> {
        let kern = best_kernel();
        let am = Mat::new(a, m, k, false)?;
        let panels = m.div_ceil(kern.mr);
        let mut data = AlignedBuf::try_zeroed(k * panels * kern.mr)?;
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
    pub(super) fn block_start(&self, p0: usize) -> usize {
        p0 * self.m.div_ceil(self.kern.mr) * self.kern.mr
    }
}

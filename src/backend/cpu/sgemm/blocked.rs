//! The blocked product: its loops over B blocks, the tasks of one
//! block, and each task's tiles.

use super::blocking::{MAX_KC, MAX_KG};
use super::*;

/// C's storage shared by the tasks of one block.
#[derive(Clone, Copy)]
pub(super) struct CPtr(*mut f32);
// SAFETY: a CPtr is made only in `gemm_blocked_a`, from the `&mut [f32]`
// of the whole product, which stays mutably borrowed until every task of
// `blocks` has returned (rayon's `for_each` joins them), so the memory
// outlives every use on any thread; each task writes only the tiles of
// its own (row block, column chunk), disjoint from every other task's
// (see `blocks`), so moving the pointer to another thread races with
// nothing.
unsafe impl Send for CPtr {}
// SAFETY: shared by reference between the tasks of one block, which only
// copy the pointer out and write their disjoint tiles, as for `Send`.
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
pub(super) enum ASrc<'a> {
    Plain(Mat<'a>),
    Packed(&'a PackedA),
}

/// One KC block of a task's group: depth `p0..p0 + kc`, and its packed B
/// block (empty where B is read in place).
#[derive(Clone, Copy)]
pub(super) struct KBlock<'a> {
    pub(super) p0: usize,
    pub(super) kc: usize,
    pub(super) bblock: &'a [f32],
}

impl KBlock<'_> {
    const NONE: KBlock<'static> = KBlock {
        p0: 0,
        kc: 0,
        bblock: &[],
    };
}

/// One task: rows `r0..r1`, the B panels `q0..q1` of the current blocks
/// (columns `j0 + q * nr`, clipped at `j0 + cols`), over the KC blocks
/// `blocks` (consecutive, at most [`MAX_KG`]; see [`Kernel::grouping`]).
pub(super) struct Task<'a> {
    pub(super) kern: &'static Kernel,
    pub(super) a: ASrc<'a>,
    pub(super) blocks: &'a [KBlock<'a>],
    /// B read in place (the kernel has a rows form): then the blocks'
    /// `bblock`s are empty.
    pub(super) brows: Option<RowsB<'a>>,
    pub(super) c: CPtr,
    pub(super) ldc: usize,
    pub(super) rows: (usize, usize),
    pub(super) panels: (usize, usize),
    pub(super) j0: usize,
    pub(super) cols: usize,
    /// Applied to each finished tile after the last of `blocks`, when it
    /// is the product's last KC block.
    pub(super) fuse: Option<&'a Fuse<'a>>,
}

impl Task<'_> {
    /// # Safety
    /// `c` must point to `ldc`-wide rows, at least `rows.1` of them, all
    /// writable, with `j0 + cols <= ldc`; no other thread may read or write
    /// this task's tiles (rows `rows`, the columns of panels `panels`)
    /// meanwhile; `kern` must come from [`available_kernels`] (its target
    /// features are present); `fuse`, when set, must have passed
    /// [`Fuse::check`] for a product of at least `rows.1` rows and
    /// `j0 + cols` columns.
    pub(super) unsafe fn run(&self) {
        let k = self.kern;
        let mr = k.mr;
        let (r0, r1) = self.rows;
        let (q0, q1) = self.panels;
        let g = self.blocks.len().min(MAX_KG);
        if r0 >= r1 || q0 >= q1 || g == 0 {
            return;
        }
        let row_panels = (r1 - r0).div_ceil(mr);
        match self.a {
            ASrc::Packed(pa) => {
                let mut apacks: [&[f32]; MAX_KG] = [&[]; MAX_KG];
                for (ap, blk) in apacks.iter_mut().zip(&self.blocks[..g]) {
                    // Row blocks start on whole panels (see gemm_blocked).
                    let start = pa.block_start(blk.p0) + (r0 / mr) * blk.kc * mr;
                    *ap = &pa.data.as_slice()[start..start + row_panels * blk.kc * mr];
                }
                // SAFETY: `run`'s contract is `tiles`' (C, features, fuse);
                // `apacks` hold the `row_panels` panels of each block that
                // `tiles` reads (sliced with bounds checks just above).
                unsafe { self.tiles(&apacks[..g]) }
            }
            ASrc::Plain(a) => A_PACK.with(|buf| {
                let mut buf = buf.borrow_mut();
                // Every block but a product's last is a whole KC deep.
                let stride = row_panels * k.kc * mr;
                buf.ensure(g * stride);
                for (bi, blk) in self.blocks[..g].iter().enumerate() {
                    let dst = &mut buf.as_mut_slice()[bi * stride..];
                    for (ip, dst) in dst.chunks_mut(blk.kc * mr).take(row_panels).enumerate() {
                        let i = r0 + ip * mr;
                        pack_a_panel(a, i, mr.min(r1 - i), blk.p0, blk.kc, mr, dst);
                    }
                }
                let all = buf.as_slice();
                let mut apacks: [&[f32]; MAX_KG] = [&[]; MAX_KG];
                for (bi, (ap, blk)) in apacks.iter_mut().zip(&self.blocks[..g]).enumerate() {
                    *ap = &all[bi * stride..bi * stride + row_panels * blk.kc * mr];
                }
                // SAFETY: as in the packed arm; `ensure` sized the buffer
                // to the `row_panels` panels of every block just packed.
                unsafe { self.tiles(&apacks[..g]) }
            }),
        }
    }

    /// The tiles of this task, from its packed A panels (`apacks`, one
    /// per block of the group: one `kc * mr` panel per `mr` rows of the
    /// task, sliced with bounds checks, so only C needs the contract).
    /// Each tile takes every block of the group in turn, so it stays in
    /// L1 between them.
    ///
    /// # Safety
    /// As for [`Task::run`].
    pub(super) unsafe fn tiles(&self, apacks: &[&[f32]]) {
        let k = self.kern;
        let mr = k.mr;
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
        // keep a B panel in L1 across all row panels. (Keeping the A panel
        // in L1 instead, over groups of B panels that L2 holds, as BLIS
        // orders its loops, measured the same in turns on an AVX-512 Xeon:
        // 1024^3 at one thread 167-175 GFLOP/s either way.)
        let shallow = self.blocks[0].kc <= SHALLOW_KC;
        // A last panel of one or two columns goes to the column pass,
        // after the tiles.
        let column = self.column_edge();
        let q1 = q1 - usize::from(column.is_some());
        let (outer, inner) = if shallow {
            (row_panels, q1 - q0)
        } else {
            (q1 - q0, row_panels)
        };
        let last = self.blocks.len() - 1;
        for (x, y) in (0..outer).flat_map(|x| (0..inner).map(move |y| (x, y))) {
            let (ip, q) = if shallow { (x, q0 + y) } else { (y, q0 + x) };
            for (bi, (blk, apack)) in self.blocks.iter().zip(apacks).enumerate() {
                let ap = &apack[ip * blk.kc * mr..(ip + 1) * blk.kc * mr];
                let fuse = self.fuse.filter(|_| bi == last);
                // SAFETY: as for `run` (the tile at `ip`, `q` is this
                // task's); `ap` is a checked panel of this block.
                unsafe { self.tile(blk, fuse, ap, ip, q, &mut scratch, &mut edge) };
            }
        }
        if let Some(func) = column {
            // SAFETY: as for `run` (the last panel's column is this
            // task's); `func` is `self.kern`'s own (`column_edge`).
            unsafe { self.column(func, apacks) };
        }
    }

    /// The kernel's column pass ([`ColumnFn`]), where this task's last
    /// panel is the product's last and one or two columns wide. There an
    /// edge tile (a narrow kernel into scratch, eight columns wide) costs
    /// about as much as a whole one: it streams its whole A panel for one
    /// or two columns of sums. Measured on an AMD EPYC (Zen 3, AVX2), one
    /// thread, a 1280 x 320 A by a packed 320 x N, fastest of 300 runs:
    /// with edge tiles N = 48 took 0.47-0.48 ms, 49 0.60-0.62, 56
    /// 0.57-0.58, 64 0.62; with the column pass 49 and 50 took 0.52-0.53.
    fn column_edge(&self) -> Option<ColumnFn> {
        let k = self.kern;
        let func = k.column?;
        let (q0, q1) = self.panels;
        let w = self.cols.saturating_sub(q1.checked_sub(1)? * k.nr);
        let fits = k.mr <= COLUMN_LANES && self.blocks.iter().all(|b| b.kc <= MAX_KC);
        (q1 > q0 && (1..=COLUMN_MAX).contains(&w) && fits).then_some(func)
    }

    /// The last panel of this task, one or two columns wide, by the
    /// column pass `func`: each KC block in turn over every row panel,
    /// the sums written to C or added to it and the fused bias and bounds
    /// applied in scalar form, as an edge tile from scratch is, so with
    /// the same bits.
    ///
    /// # Safety
    /// As for [`Task::run`]; `func` is the kernel's column pass and the
    /// last panel is one or two columns wide ([`Task::column_edge`]).
    unsafe fn column(&self, func: ColumnFn, apacks: &[&[f32]]) {
        let k = self.kern;
        let (mr, nr) = (k.mr, k.nr);
        let (r0, r1) = self.rows;
        let row_panels = (r1 - r0).div_ceil(mr);
        let q = self.panels.1 - 1;
        let jl = q * nr;
        let w = self.cols - jl;
        let col = self.j0 + jl;
        let last = self.blocks.len() - 1;
        let mut bcol = [0.0f32; COLUMN_MAX * MAX_KC];
        let mut out = [0.0f32; COLUMN_PANELS * COLUMN_MAX * COLUMN_LANES];
        for (bi, (blk, apack)) in self.blocks.iter().zip(apacks).enumerate() {
            let (kc, p0) = (blk.kc, blk.p0);
            // The block's w columns of B, each kc deep.
            for (c, dst) in bcol.chunks_exact_mut(kc).take(w).enumerate() {
                match self.brows {
                    Some(rb) => {
                        for (p, d) in dst.iter_mut().enumerate() {
                            *d = rb.data[rb.offs[p0 + p] + col + c];
                        }
                    }
                    None => {
                        let bp = &blk.bblock[q * kc * nr..(q + 1) * kc * nr];
                        for (d, row) in dst.iter_mut().zip(bp.chunks_exact(nr)) {
                            *d = row[c];
                        }
                    }
                }
            }
            let accumulate = p0 > 0;
            let fuse = self.fuse.filter(|_| bi == last);
            for ip0 in (0..row_panels).step_by(COLUMN_PANELS) {
                let np = COLUMN_PANELS.min(row_panels - ip0);
                let ap = &apack[ip0 * kc * mr..(ip0 + np) * kc * mr];
                // SAFETY: the kernel runs on this CPU (caller's
                // contract); `ap` holds the np (1..=COLUMN_PANELS) checked
                // panels of kc * mr floats, `bcol` w (1..=COLUMN_MAX)
                // columns of kc <= MAX_KC floats, and `out` the whole
                // output.
                unsafe { func(kc, ap.as_ptr(), np, bcol.as_ptr(), w, out.as_mut_ptr()) };
                for p in 0..np {
                    let i = r0 + (ip0 + p) * mr;
                    for r in 0..mr.min(r1 - i) {
                        let sums = (0..w).map(|c| out[(c * COLUMN_PANELS + p) * COLUMN_LANES + r]);
                        // SAFETY: row i + r < r1 of C, columns col..col +
                        // w = j0 + cols <= ldc: this task's last panel.
                        unsafe { self.store_row(i + r, col, sums, accumulate, fuse) };
                    }
                }
            }
        }
    }

    /// One tile (row panel `ip`, column panel `q`) over one KC block:
    /// written when the block is the product's first, else added to.
    ///
    /// # Safety
    /// As for [`Task::run`]; `ip` and `q` must be panels of this task.
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile(
        &self,
        blk: &KBlock,
        fuse: Option<&Fuse>,
        ap: &[f32],
        ip: usize,
        q: usize,
        scratch: &mut [f32; MAX_TILE],
        edge: &mut Vec<f32>,
    ) {
        let k = self.kern;
        let (mr, nr, kc) = (k.mr, k.nr, blk.kc);
        let (r0, r1) = self.rows;
        let accumulate = blk.p0 > 0;
        let jl = q * nr;
        let ncols = nr.min(self.cols - jl);
        let i = r0 + ip * mr;
        let nrows = mr.min(r1 - i);
        // A kernel for this edge tile's rows, when there is one.
        let edge_kernel = match nrows < mr && ncols == nr {
            true => k.edges.iter().find(|e| e.rows == nrows),
            false => None,
        };
        // SAFETY: i < r1 <= rows.1 and j0 + jl < j0 + cols <= ldc, so
        // the offset is inside the rows of C the caller vouched for
        // (the same allocation).
        let cp = unsafe { self.c.0.add(i * self.ldc + self.j0 + jl) };
        // B read in place: a whole panel of columns is inside every
        // row; an edge panel is packed here (zeros beyond the edge).
        let panel: Option<&[f32]> = match (self.brows, k.rows) {
            (Some(rb), Some(rows_fn)) if ncols == nr => {
                let col = self.j0 + jl;
                let whole = nrows == mr;
                let direct = whole || edge_kernel.is_some();
                let tf = fuse.filter(|_| direct).map(|f| f.tile(i, col));
                let tp = tf.as_ref().map_or(std::ptr::null(), |t| t as *const _);
                let (dst, ldc, acc) = if direct {
                    (cp, self.ldc, accumulate)
                } else {
                    (scratch.as_mut_ptr(), nr, false)
                };
                let rows_fn = edge_kernel.map_or(rows_fn, |e| e.rows_fn);
                // SAFETY: `kern` (and so its rows form and edge forms)
                // runs on this CPU (caller's contract). A: `ap` is one
                // bounds-checked panel of kc * mr floats, and an edge
                // kernel reads the first `rows` of each column of it.
                // B: `RowsB::new` checked offs[p] + n <= data.len() for
                // every row, the kc offsets are a checked subslice, and
                // col + nr = j0 + jl + nr <= j0 + cols <= n (ncols ==
                // nr). C: when `direct`, `dst` is this task's tile of
                // nrows (= mr, or the edge kernel's rows) by nr, inside
                // C as `cp` is, written by no other task; otherwise the
                // scratch tile, mr * nr <= MAX_TILE floats, nr apart.
                // `tp`, set only when direct, points to `tf`, alive
                // over the call; its row bias has rows.1 >= i + nrows
                // values from row i and its column bias n >= col + nr
                // from column col (`Fuse::check`).
                unsafe {
                    rows_fn(
                        kc,
                        ap.as_ptr(),
                        rb.data.as_ptr(),
                        rb.offs[blk.p0..blk.p0 + kc].as_ptr(),
                        col,
                        dst,
                        ldc,
                        acc,
                        tp,
                    )
                };
                if direct {
                    return;
                }
                None
            }
            (Some(rb), _) => {
                edge.resize(kc * nr, 0.0);
                rb.pack(blk.p0, kc, self.j0 + jl, ncols, nr, edge);
                Some(edge.as_slice())
            }
            (None, _) => Some(&blk.bblock[q * kc * nr..(q + 1) * kc * nr]),
        };
        if let Some(bp) = panel {
            if (nrows == mr || edge_kernel.is_some()) && ncols == nr {
                let tf = fuse.map(|f| f.tile(i, self.j0 + jl));
                let tp = tf.as_ref().map_or(std::ptr::null(), |t| t as *const _);
                let func = edge_kernel.map_or(k.func, |e| e.func);
                // SAFETY: as for the rows form above, with B the
                // bounds-checked packed panel `bp` of kc * nr floats;
                // C is this task's whole tile (nrows == mr, or the
                // edge kernel's nrows) of nr columns (ncols == nr).
                unsafe { (func)(kc, ap.as_ptr(), bp.as_ptr(), cp, self.ldc, accumulate, tp) };
                return;
            }
            // An edge tile: computed in scratch, as wide as the edge
            // needs where the kernel has a narrower form.
            let func = match k.narrow {
                Some(narrow) => narrow.for_cols(ncols, nr).unwrap_or(k.func),
                None => k.func,
            };
            // SAFETY: the kernel runs on this CPU (caller's contract);
            // `ap` and `bp` are the checked kc * mr and kc * nr panels;
            // the local scratch holds MAX_TILE >= mr * nr floats, which
            // the kernel writes as mr rows of nr (a narrow one: of their
            // first ncols or more); no fuse.
            unsafe {
                (func)(
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
            let sums = scratch[r * nr..r * nr + ncols].iter().copied();
            // SAFETY: row i + r < r1 of C, columns j0 + jl.. + ncols <=
            // j0 + cols: this task's tile.
            unsafe { self.store_row(i + r, self.j0 + jl, sums, accumulate, fuse) };
        }
    }

    /// One row's sums from scratch (an edge tile's, or the column
    /// pass's) stored at `row`, from column `col`: written, or added to C
    /// when the KC block is not the product's first; then the fused bias
    /// and bounds, in scalar form. The one place both edge paths store,
    /// so that they give the same bits.
    ///
    /// # Safety
    /// As for [`Task::run`]; `row` is one of this task's rows and `col ..
    /// col + sums.len()` columns of one of its panels, which no other
    /// thread touches while this runs.
    unsafe fn store_row(
        &self,
        row: usize,
        col: usize,
        sums: impl ExactSizeIterator<Item = f32>,
        accumulate: bool,
        fuse: Option<&Fuse>,
    ) {
        // SAFETY: the caller's contract puts row and these columns inside
        // C (rows < rows.1, columns <= ldc) and in this task's part of
        // it; the slice ends with this call, before any kernel call.
        let dst = unsafe {
            std::slice::from_raw_parts_mut(self.c.0.add(row * self.ldc + col), sums.len())
        };
        for (d, x) in dst.iter_mut().zip(sums) {
            *d = if accumulate { *d + x } else { x };
        }
        if let Some(f) = fuse {
            f.apply(row, col, dst);
        }
    }
}

pub(super) fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// `c = a * b` (c row-major m x n) with `threads` threads (1: this one).
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm_blocked(
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

/// [`gemm_blocked`] with A plain or packed in advance. `kern` must come
/// from [`available_kernels`] (see [`Kernel`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm_blocked_a(
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
    // Checked (the entry points return an error before this): the tiles
    // are written through `CPtr` anywhere in these m * n floats.
    let c = &mut c[..m.checked_mul(n).expect("sgemm: m * n overflows")];
    if m == 0 || n == 0 {
        return;
    }
    let fuse = fuse.filter(|f| !f.is_empty());
    // Checked again (the entry points return an error before this): the
    // kernels read the biases through raw pointers.
    if let Some(f) = fuse {
        f.check(m, n).expect("sgemm: a fused bias is too short");
    }
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
    let (_, mc, _) = kern.grouping(m, n, k, threads);
    // Row blocks: as few as MC allows, but a multiple of the thread count
    // so that no thread idles at the end; when there are fewer row blocks
    // than threads, the columns are split too (lcm(blocks, threads) tasks).
    let min_blocks = row_panels.div_ceil(mc / mr);
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

/// The block loops of [`gemm_blocked`], packing B into `bbuf`: the KC
/// blocks go by groups of [`Kernel::grouping`]'s `g` (one block each
/// where it is 1), and the tasks of a group take all its blocks.
#[allow(clippy::too_many_arguments)]
pub(super) fn blocks(
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
    let (g, _, nc) = kern.grouping(m, n, k, threads);
    let row_panels = m.div_ceil(mr);
    let mut j0 = 0;
    while j0 < n {
        let cols = nc.min(n - j0);
        let col_panels = cols.div_ceil(nr);
        let chunks = col_chunks.min(col_panels);
        // Where each block of a group starts in `bbuf` (every block but
        // a product's last is a whole KC deep).
        let stride = col_panels * kern.kc * nr;
        let mut p0 = 0;
        while p0 < k {
            let mut group = [KBlock::NONE; MAX_KG];
            let mut ng = 0;
            let mut end = p0;
            while ng < g && end < k {
                let kc = kern.kc.min(k - end);
                group[ng] = KBlock {
                    p0: end,
                    kc,
                    bblock: &[],
                };
                ng += 1;
                end += kc;
            }
            // Pack the group's B blocks, where B needs packing.
            let packs = match b {
                BSrc::Packed(_) => false,
                BSrc::Rows(_) => kern.rows.is_none(),
                BSrc::Plain(_) | BSrc::Gen(_) => true,
            };
            if packs {
                bbuf.ensure(ng * stride);
                for (bi, blk) in group[..ng].iter().enumerate() {
                    let dst = &mut bbuf.as_mut_slice()[bi * stride..];
                    match b {
                        BSrc::Plain(bm) => {
                            pack_b_block(bm, blk.p0, blk.kc, j0, cols, nr, dst, threads > 1)
                        }
                        BSrc::Gen(gen) => {
                            pack_gen_block(gen, blk.p0, blk.kc, j0, cols, nr, dst, threads > 1)
                        }
                        BSrc::Rows(rb) => rb.pack(blk.p0, blk.kc, j0, cols, nr, dst),
                        BSrc::Packed(_) => {}
                    }
                }
            }
            for (bi, blk) in group[..ng].iter_mut().enumerate() {
                blk.bblock = match b {
                    BSrc::Packed(pb) => pb.block(blk.p0, blk.kc, j0),
                    // Read in place by the tasks.
                    BSrc::Rows(_) if !packs => &[],
                    _ => &bbuf.as_slice()[bi * stride..],
                };
            }
            let brows = match b {
                BSrc::Rows(rb) if kern.rows.is_some() => Some(rb),
                _ => None,
            };
            let blocks = &group[..ng];
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
                    blocks,
                    brows,
                    c: cptr,
                    ldc: n,
                    rows,
                    panels,
                    j0,
                    cols,
                    fuse: fuse.filter(|_| end == k),
                };
                // SAFETY: `cptr` is the start of C's m * n floats (sliced
                // in `gemm_blocked_a`, borrowed until this returns):
                // rows.1 <= m rows of ldc = n, and j0 + cols <= n. The
                // tasks of one group take distinct (row block, column
                // chunk) pairs, whose row ranges (whole panels, rising
                // with rb) and panel ranges (rising with ch) do not
                // overlap, and groups run one after another, so no two
                // running tasks share a tile. `kern` and `fuse` come from
                // `gemm_blocked_a`'s caller, as its contract says.
                unsafe { t.run() }
            };
            let tasks = row_blocks * chunks;
            if threads > 1 && tasks > 1 {
                (0..tasks).into_par_iter().for_each(task);
            } else {
                (0..tasks).for_each(task);
            }
            p0 = end;
        }
        j0 += cols;
    }
}

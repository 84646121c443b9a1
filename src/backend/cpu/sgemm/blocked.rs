//! The blocked product: its loops over B blocks, the tasks of one
//! block, and each task's tiles.

use super::*;

/// C's storage shared by the tasks of one block.
#[derive(Clone, Copy)]
pub(super) struct CPtr(*mut f32);
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
pub(super) enum ASrc<'a> {
    Plain(Mat<'a>),
    Packed(&'a PackedA),
}

/// One task: rows `r0..r1`, the B panels `q0..q1` of the current block
/// (columns `j0 + q * nr`, clipped at `j0 + cols`), depth `p0..p0 + kc`.
pub(super) struct Task<'a> {
    pub(super) kern: &'static Kernel,
    pub(super) a: ASrc<'a>,
    pub(super) bblock: &'a [f32],
    /// B read in place (the kernel has a rows form): then `bblock` is
    /// empty.
    pub(super) brows: Option<RowsB<'a>>,
    pub(super) c: CPtr,
    pub(super) ldc: usize,
    pub(super) rows: (usize, usize),
    pub(super) panels: (usize, usize),
    pub(super) j0: usize,
    pub(super) cols: usize,
    pub(super) p0: usize,
    pub(super) kc: usize,
    pub(super) accumulate: bool,
    /// Applied to each finished tile by the tasks of the last KC block.
    pub(super) fuse: Option<&'a Fuse<'a>>,
}

impl Task<'_> {
    /// # Safety
    /// C must be `ldc` wide with at least `rows.1` rows and `j0 + cols <=
    /// ldc`, and no other thread may touch this task's tiles meanwhile.
    pub(super) unsafe fn run(&self) {
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
    pub(super) unsafe fn tiles(&self, apack: &[f32]) {
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
            // A kernel for this edge tile's rows, when there is one.
            let edge_kernel = match nrows < mr && ncols == nr {
                true => k.edges.iter().find(|e| e.rows == nrows),
                false => None,
            };
            // SAFETY: rows i..i+nrows and columns j0+jl..+ncols are inside
            // C (caller's contract) and belong to this task.
            let cp = unsafe { self.c.0.add(i * self.ldc + self.j0 + jl) };
            // B read in place: a whole panel of columns is inside every
            // row; an edge panel is packed here (zeros beyond the edge).
            let panel: Option<&[f32]> = match (self.brows, k.rows) {
                (Some(rb), Some(rows_fn)) if ncols == nr => {
                    let col = self.j0 + jl;
                    let whole = nrows == mr;
                    let direct = whole || edge_kernel.is_some();
                    let tf = self.fuse.filter(|_| direct).map(|f| f.tile(i, col));
                    let tp = tf.as_ref().map_or(std::ptr::null(), |t| t as *const _);
                    let (dst, ldc, acc) = if direct {
                        (cp, self.ldc, self.accumulate)
                    } else {
                        (scratch.as_mut_ptr(), nr, false)
                    };
                    let rows_fn = edge_kernel.map_or(rows_fn, |e| e.rows_fn);
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
                    if direct {
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
                if (nrows == mr || edge_kernel.is_some()) && ncols == nr {
                    let tf = self.fuse.map(|f| f.tile(i, self.j0 + jl));
                    let tp = tf.as_ref().map_or(std::ptr::null(), |t| t as *const _);
                    let func = edge_kernel.map_or(k.func, |e| e.func);
                    // SAFETY: a whole tile of C (or the edge kernel's rows
                    // of it), as above; `tp` covers it.
                    unsafe {
                        (func)(
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

/// [`gemm_blocked`] with A plain or packed in advance.
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

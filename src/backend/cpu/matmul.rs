//! Matrix multiplication CPU kernels: `matmul`, `gemm`, and the f32 sgemm
//! core that conv2d also uses.
//!
//! float16 operands are widened to f32, multiplied in f32 and rounded once
//! at the output.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::op::GemmParams;
use crate::tensor::Buf;
use crate::types::OperandDescriptor;

use super::util::{broadcast_strides, floats, from_floats, strides};

/// Rows of C per parallel task (a multiple of the 4-row micro-kernel).
const MC: usize = 64;
/// Columns of C per task: a 4 x NC strip of C stays in L1 while B rows
/// stream past it.
const NC: usize = 256;
/// Depth of one pass: a KC x NC panel of B (256 KiB) stays in L2 and is
/// reused by every 4-row group of the task.
const KC: usize = 256;
/// Multiply-adds below which threading costs more than it saves.
const PAR_WORK: usize = 1 << 18;

/// A raw pointer that tasks may share because each writes a disjoint tile.
#[derive(Clone, Copy)]
struct TilePtr(*mut f32);
// SAFETY: the pointer is only dereferenced through `tile_rows`, and the
// tiles handed to different tasks never overlap (see `sgemm`).
unsafe impl Send for TilePtr {}
unsafe impl Sync for TilePtr {}

/// `c[i][j] += sum_p a[i][p] * b[p][j]` for four rows of C at once:
/// every loaded row segment of B feeds four multiply-adds. The inner loop
/// runs over equal-length slices, so it has no bounds checks and
/// vectorises.
#[inline(always)]
fn kernel4(c: [&mut [f32]; 4], a: [&[f32]; 4], b: &[f32], ldb: usize, kb: usize) {
    let [c0, c1, c2, c3] = c;
    let nb = c0.len();
    for p in 0..kb {
        let brow = &b[p * ldb..p * ldb + nb];
        let (x0, x1, x2, x3) = (a[0][p], a[1][p], a[2][p], a[3][p]);
        for ((((y0, y1), y2), y3), &bj) in c0
            .iter_mut()
            .zip(c1.iter_mut())
            .zip(c2.iter_mut())
            .zip(c3.iter_mut())
            .zip(brow)
        {
            *y0 += x0 * bj;
            *y1 += x1 * bj;
            *y2 += x2 * bj;
            *y3 += x3 * bj;
        }
    }
}

/// The single-row remainder of [`kernel4`].
#[inline(always)]
fn kernel1(c: &mut [f32], a: &[f32], b: &[f32], ldb: usize, kb: usize) {
    let nb = c.len();
    for (p, &x) in a[..kb].iter().enumerate() {
        let brow = &b[p * ldb..p * ldb + nb];
        for (y, &bj) in c.iter_mut().zip(brow) {
            *y += x * bj;
        }
    }
}

/// Computes one tile of C: rows `i0..i1`, columns `j0..j1`, accumulating
/// into C (which the caller has initialised).
///
/// # Safety
/// `c` must point to an `m x n` row-major matrix, the tile must lie inside
/// it, and no other thread may access the tile meanwhile.
unsafe fn tile(
    c: TilePtr,
    n: usize,
    k: usize,
    a: &[f32],
    b: &[f32],
    rows: (usize, usize),
    cols: (usize, usize),
) {
    let (i0, i1) = rows;
    let (j0, j1) = cols;
    let nb = j1 - j0;
    // SAFETY (for every row slice below): rows i0..i1 and columns j0..j1
    // are inside the matrix and owned by this call; distinct rows never
    // alias.
    let row = |i: usize| unsafe { std::slice::from_raw_parts_mut(c.0.add(i * n + j0), nb) };
    // When several 4-row groups reuse the B panel, copy it to contiguous
    // rows first: B rows `n` apart (a power of two, typically) map to the
    // same cache sets and evict each other; the copy is read MC/4 times.
    let pack = i1 - i0 > 4;
    let mut packed = Vec::new();
    let mut p0 = 0;
    while p0 < k {
        let kb = KC.min(k - p0);
        let (bpanel, ldb) = if pack {
            packed.clear();
            for p in p0..p0 + kb {
                packed.extend_from_slice(&b[p * n + j0..p * n + j1]);
            }
            (&packed[..], nb)
        } else {
            (&b[p0 * n + j0..], n)
        };
        let mut i = i0;
        while i + 4 <= i1 {
            let a_rows = [0, 1, 2, 3].map(|r| &a[(i + r) * k + p0..(i + r) * k + p0 + kb]);
            kernel4(
                [row(i), row(i + 1), row(i + 2), row(i + 3)],
                a_rows,
                bpanel,
                ldb,
                kb,
            );
            i += 4;
        }
        while i < i1 {
            kernel1(row(i), &a[i * k + p0..i * k + p0 + kb], bpanel, ldb, kb);
            i += 1;
        }
        p0 += kb;
    }
}

/// `c = a * b` for row-major `a` [m, k], `b` [k, n], `c` [m, n] (f32).
///
/// C is split into MC x NC tiles; with `parallel` and enough work the tiles
/// run on the rayon pool, otherwise in order on this thread (callers that
/// already run many sgemms in parallel pass `false`).
pub(super) fn sgemm(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    parallel: bool,
) {
    assert!(
        a.len() >= m * k && b.len() >= k * n && c.len() >= m * n,
        "sgemm: operands too small"
    );
    c[..m * n].fill(0.0);
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    let ptr = TilePtr(c.as_mut_ptr());
    let row_tiles = m.div_ceil(MC);
    // With a single row tile (small M) the column tiles are the only
    // parallelism, and B is streamed once: make them as wide as the threads
    // allow (up to 2048 columns, whose 4-row C strip still fits in L1) so
    // that B is read in long contiguous runs.
    let nc = if row_tiles == 1 {
        n.div_ceil(rayon::current_num_threads().max(1))
            .clamp(NC, 2048)
    } else {
        NC
    };
    let col_tiles = n.div_ceil(nc);
    let run = |t: usize| {
        let (ti, tj) = (t / col_tiles, t % col_tiles);
        let rows = (ti * MC, ((ti + 1) * MC).min(m));
        let cols = (tj * nc, ((tj + 1) * nc).min(n));
        // SAFETY: `c` holds m x n elements (asserted above) and tile `t`
        // is a distinct (row block, column block) pair, so no two tasks
        // touch the same element; `c` stays borrowed until they finish.
        unsafe { tile(ptr, n, k, a, b, rows, cols) }
    };
    let tiles = row_tiles * col_tiles;
    if parallel && tiles > 1 && m * n * k >= PAR_WORK {
        (0..tiles).into_par_iter().for_each(run);
    } else {
        (0..tiles).for_each(run);
    }
}

/// Widens the float operands `a` and `b`, checking their element counts.
fn widen<'a>(x: &'a Buf, d: &OperandDescriptor) -> Result<std::borrow::Cow<'a, [f32]>> {
    let v = floats(x)?;
    if v.len() != d.element_count() {
        return Err(Error::operation(
            "a tensor does not hold as many elements as its shape",
        ));
    }
    Ok(v)
}

/// `matmul`: [..., M, K] x [..., K, N] -> [...batch, M, N], the batch
/// dimensions broadcast bidirectionally.
pub fn matmul(
    a: &Buf,
    da: &OperandDescriptor,
    b: &Buf,
    db: &OperandDescriptor,
    out: &OperandDescriptor,
) -> Result<Buf> {
    let (ra, rb, ro) = (da.rank(), db.rank(), out.rank());
    if ra < 2 || rb < 2 || ro < 2 {
        return Err(Error::operation("matmul needs operands of rank 2 or more"));
    }
    let (m, k) = (da.shape[ra - 2], da.shape[ra - 1]);
    let n = db.shape[rb - 1];
    if db.shape[rb - 2] != k || out.shape[ro - 2] != m || out.shape[ro - 1] != n {
        return Err(Error::operation("matmul: inconsistent shapes"));
    }
    let batch_shape = &out.shape[..ro - 2];
    let (ba, bb) = (&da.shape[..ra - 2], &db.shape[..rb - 2]);
    let fits = |s: &[usize]| {
        s.len() <= batch_shape.len()
            && s.iter()
                .rev()
                .zip(batch_shape.iter().rev())
                .all(|(&x, &o)| x == o || x == 1)
    };
    if !fits(ba) || !fits(bb) {
        return Err(Error::operation(
            "matmul: the batch dimensions do not broadcast",
        ));
    }
    let av = widen(a, da)?;
    let bv = widen(b, db)?;
    let batches: usize = batch_shape.iter().product();
    // Matrix offsets of each output batch in a and b (0 strides where
    // broadcast).
    let (sa, sb) = (
        broadcast_strides(ba, batch_shape),
        broadcast_strides(bb, batch_shape),
    );
    let bs = strides(batch_shape);
    let offsets = |t: usize| {
        let (mut oa, mut ob) = (0, 0);
        for d in 0..batch_shape.len() {
            let i = (t / bs[d]) % batch_shape[d];
            oa += i * sa[d];
            ob += i * sb[d];
        }
        (oa * m * k, ob * k * n)
    };
    let mut res = vec![0.0f32; batches * m * n];
    let mn = m * n;
    if mn > 0 {
        let one = |(t, c): (usize, &mut [f32]), parallel: bool| {
            let (oa, ob) = offsets(t);
            sgemm(
                m,
                n,
                k,
                &av[oa..oa + m * k],
                &bv[ob..ob + k * n],
                c,
                parallel,
            );
        };
        // Many small products: one thread per product; few large ones: the
        // threads share each product.
        if batches > 1 && m * n * k < PAR_WORK * 4 {
            res.par_chunks_mut(mn)
                .enumerate()
                .for_each(|x| one(x, false));
        } else {
            res.chunks_mut(mn).enumerate().for_each(|x| one(x, true));
        }
    }
    from_floats(out.data_type, res)
}

/// `x` as a row-major [rows, cols] matrix, transposed when `t` (so that it
/// is read as the [cols, rows] matrix `x^T`).
fn maybe_transpose(x: &[f32], rows: usize, cols: usize, t: bool) -> std::borrow::Cow<'_, [f32]> {
    if !t {
        return std::borrow::Cow::Borrowed(x);
    }
    let mut v = vec![0.0f32; rows * cols];
    for i in 0..rows {
        for j in 0..cols {
            v[j * rows + i] = x[i * cols + j];
        }
    }
    std::borrow::Cow::Owned(v)
}

/// `gemm`: `alpha * A' * B' + beta * C`, where A' and B' are A and B
/// transposed on request and C (optional) broadcasts to [M, N].
pub fn gemm(
    p: &GemmParams,
    inputs: &[&Buf],
    descs: &[&OperandDescriptor],
    out: &OperandDescriptor,
) -> Result<Buf> {
    let want = if p.has_c { 3 } else { 2 };
    if inputs.len() < want || descs.len() < want {
        return Err(Error::operation("gemm: missing operands"));
    }
    let (m, n, k) = (p.m, p.n, p.k);
    let a_shape = if p.a_transpose { [k, m] } else { [m, k] };
    let b_shape = if p.b_transpose { [n, k] } else { [k, n] };
    if descs[0].shape != a_shape || descs[1].shape != b_shape || out.shape != [m, n] {
        return Err(Error::operation("gemm: inconsistent shapes"));
    }
    let av = widen(inputs[0], descs[0])?;
    let bv = widen(inputs[1], descs[1])?;
    let at = maybe_transpose(&av, a_shape[0], a_shape[1], p.a_transpose);
    let bt = maybe_transpose(&bv, b_shape[0], b_shape[1], p.b_transpose);
    let mut res = vec![0.0f32; m * n];
    sgemm(m, n, k, &at, &bt, &mut res, true);
    let alpha = p.alpha as f32;
    if alpha != 1.0 {
        res.iter_mut().for_each(|x| *x *= alpha);
    }
    if p.has_c && m * n > 0 {
        let dc = descs[2];
        let cv = widen(inputs[2], dc)?;
        let mn = [m, n];
        let fits = dc.rank() <= 2
            && dc
                .shape
                .iter()
                .rev()
                .zip(mn.iter().rev())
                .all(|(&x, &o)| x == o || x == 1);
        if !fits {
            return Err(Error::operation("gemm: c does not broadcast to [M, N]"));
        }
        let s = broadcast_strides(&dc.shape, &mn);
        let beta = p.beta as f32;
        for i in 0..m {
            for j in 0..n {
                res[i * n + j] += beta * cv[i * s[0] + j * s[1]];
            }
        }
    }
    from_floats(out.data_type, res)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::f16::f16_to_f32;
    use crate::types::DataType;

    fn desc(dt: DataType, shape: &[usize]) -> OperandDescriptor {
        OperandDescriptor {
            data_type: dt,
            shape: shape.to_vec(),
        }
    }

    /// Deterministic pseudo-random values in [-1, 1).
    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    fn naive(m: usize, n: usize, k: usize, a: &[f32], b: &[f32]) -> Vec<f32> {
        let mut c = vec![0.0f32; m * n];
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0f64;
                for p in 0..k {
                    s += a[i * k + p] as f64 * b[p * n + j] as f64;
                }
                c[i * n + j] = s as f32;
            }
        }
        c
    }

    fn close(x: &[f32], y: &[f32], tol: f32) {
        assert_eq!(x.len(), y.len());
        for (i, (a, b)) in x.iter().zip(y).enumerate() {
            assert!(
                (a - b).abs() <= tol * (1.0 + b.abs()),
                "element {i}: {a} vs {b}"
            );
        }
    }

    #[test]
    fn sgemm_matches_naive() {
        for &(m, n, k) in &[
            (1, 1, 1),
            (3, 5, 7),
            (4, 4, 4),
            (67, 300, 513),
            (1, 700, 300),
            (130, 1, 70),
            (0, 3, 4),
            (3, 4, 0),
        ] {
            let a = data(m * k, 1);
            let b = data(k * n, 2);
            let mut c = vec![5.0f32; m * n];
            sgemm(m, n, k, &a, &b, &mut c, true);
            close(&c, &naive(m, n, k, &a, &b), 1e-4);
            let mut c2 = vec![0.0f32; m * n];
            sgemm(m, n, k, &a, &b, &mut c2, false);
            close(&c2, &c, 0.0);
        }
    }

    #[test]
    fn matmul_broadcasts_batches() {
        // a [2, 1, 3, 4] x b [3, 4, 5] -> [2, 3, 3, 5].
        let (sa, sb, so) = ([2, 1, 3, 4], [3, 4, 5], [2, 3, 3, 5]);
        let a = data(24, 3);
        let b = data(60, 4);
        let r = matmul(
            &Buf::F32(a.clone()),
            &desc(DataType::Float32, &sa),
            &Buf::F32(b.clone()),
            &desc(DataType::Float32, &sb),
            &desc(DataType::Float32, &so),
        )
        .unwrap();
        let Buf::F32(r) = r else { panic!() };
        let mut expect = Vec::new();
        for i in 0..2 {
            for j in 0..3 {
                expect.extend(naive(
                    3,
                    5,
                    4,
                    &a[i * 12..i * 12 + 12],
                    &b[j * 20..j * 20 + 20],
                ));
            }
        }
        close(&r, &expect, 1e-5);

        // Rank 2 times rank 3, many small batches (the per-batch parallel path).
        let a = data(6, 5);
        let b = data(64 * 15, 6);
        let r = matmul(
            &Buf::F32(a.clone()),
            &desc(DataType::Float32, &[2, 3]),
            &Buf::F32(b.clone()),
            &desc(DataType::Float32, &[64, 3, 5]),
            &desc(DataType::Float32, &[64, 2, 5]),
        )
        .unwrap();
        let Buf::F32(r) = r else { panic!() };
        let expect: Vec<f32> = (0..64)
            .flat_map(|t| naive(2, 5, 3, &a, &b[t * 15..t * 15 + 15]))
            .collect();
        close(&r, &expect, 1e-5);
    }

    #[test]
    fn matmul_float16_rounds_once() {
        let a: Vec<f32> = data(12, 7);
        let b: Vec<f32> = data(20, 8);
        let ah = Buf::f16_from_f32(&a);
        let bh = Buf::f16_from_f32(&b);
        let r = matmul(
            &ah,
            &desc(DataType::Float16, &[3, 4]),
            &bh,
            &desc(DataType::Float16, &[4, 5]),
            &desc(DataType::Float16, &[3, 5]),
        )
        .unwrap();
        let aw = ah.to_f32_vec();
        let bw = bh.to_f32_vec();
        let expect = Buf::f16_from_f32(&naive(3, 5, 4, &aw, &bw));
        // The f32 sums may differ from the f64 reference in the last f32
        // bit, which can flip a float16 rounding: allow one half ulp step.
        let (Buf::F16(r), Buf::F16(e)) = (&r, &expect) else {
            panic!()
        };
        for (x, y) in r.iter().zip(e) {
            assert!(
                (f16_to_f32(*x) - f16_to_f32(*y)).abs() <= 1e-3,
                "{x:#x} vs {y:#x}"
            );
        }
    }

    #[test]
    fn matmul_zero_sized() {
        let r = matmul(
            &Buf::F32(vec![]),
            &desc(DataType::Float32, &[0, 2, 3]),
            &Buf::F32(vec![0.0; 12]),
            &desc(DataType::Float32, &[3, 4]),
            &desc(DataType::Float32, &[0, 2, 4]),
        )
        .unwrap();
        assert_eq!(r, Buf::F32(vec![]));
        let r = matmul(
            &Buf::F32(vec![]),
            &desc(DataType::Float32, &[2, 0]),
            &Buf::F32(vec![]),
            &desc(DataType::Float32, &[0, 3]),
            &desc(DataType::Float32, &[2, 3]),
        )
        .unwrap();
        assert_eq!(r, Buf::F32(vec![0.0; 6]));
    }

    #[test]
    fn gemm_matches_naive() {
        let (m, n, k) = (5, 7, 3);
        for (at, bt) in [(false, false), (true, false), (false, true), (true, true)] {
            for c_shape in [
                None,
                Some(vec![]),
                Some(vec![7]),
                Some(vec![5, 1]),
                Some(vec![5, 7]),
            ] {
                let a = data(m * k, 9);
                let b = data(k * n, 10);
                let a_shape = if at { [k, m] } else { [m, k] };
                let b_shape = if bt { [n, k] } else { [k, n] };
                let a_mat = maybe_transpose(&a, a_shape[0], a_shape[1], at).into_owned();
                let b_mat = maybe_transpose(&b, b_shape[0], b_shape[1], bt).into_owned();
                let p = GemmParams {
                    alpha: 0.5,
                    beta: -2.0,
                    a_transpose: at,
                    b_transpose: bt,
                    has_c: c_shape.is_some(),
                    m,
                    n,
                    k,
                };
                let ab = naive(m, n, k, &a_mat, &b_mat);
                let cs = c_shape.clone().unwrap_or_default();
                let cn: usize = cs.iter().product();
                let c = data(cn, 11);
                let expect: Vec<f32> = (0..m * n)
                    .map(|t| {
                        let (i, j) = (t / n, t % n);
                        let cterm = match cs.as_slice() {
                            _ if !p.has_c => 0.0,
                            [] => -2.0 * c[0],
                            [_] => -2.0 * c[j],
                            [_, 1] => -2.0 * c[i],
                            _ => -2.0 * c[i * n + j],
                        };
                        0.5 * ab[t] + cterm
                    })
                    .collect();
                let (ba, bb, bc) = (Buf::F32(a), Buf::F32(b), Buf::F32(c));
                let (da, db, dc) = (
                    desc(DataType::Float32, &a_shape),
                    desc(DataType::Float32, &b_shape),
                    desc(DataType::Float32, &cs),
                );
                let mut ins = vec![&ba, &bb];
                let mut ds = vec![&da, &db];
                if p.has_c {
                    ins.push(&bc);
                    ds.push(&dc);
                }
                let r = gemm(&p, &ins, &ds, &desc(DataType::Float32, &[m, n])).unwrap();
                let Buf::F32(r) = r else { panic!() };
                close(&r, &expect, 1e-5);
            }
        }
    }
}

//! Matrix multiplication CPU kernels: `matmul` and `gemm`, on the f32
//! sgemm of `sgemm/` (re-exported here for conv2d).
//!
//! float16 operands are widened to f32, multiplied in f32 and rounded once
//! at the output.

use rayon::prelude::*;

use crate::error::{Error, Result};

use crate::graph::ops::elementwise::BinaryKind;
use crate::graph::ops::matmul::GemmParams;
use crate::graph::{Graph, Op};
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

use super::qgemm::{self, BlockSums, QMatrix};
pub(super) use super::sgemm::sgemm;
use super::sgemm::{sgemm_f16b, sgemm_packed, sgemm_t, Fuse, PackedB};
use super::util::{broadcast_strides, floats, from_floats, strides};

/// Multiply-adds per product below which batched products run in
/// parallel one per thread rather than one after another on all threads.
const PAR_WORK: usize = 1 << 18;

/// Rows per group where a batched product's rows are split between tasks:
/// a multiple of every sgemm kernel's tile height.
const ROW_GROUP: usize = 48;

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
/// dimensions broadcast bidirectionally. `prepacked`: B (rank 2) packed at
/// build time; `b` is then not read.
pub fn matmul(
    a: &Buf,
    da: &OperandDescriptor,
    b: &Buf,
    db: &OperandDescriptor,
    out: &OperandDescriptor,
    prepacked: Option<&PackedB>,
    bias: Option<&Buf>,
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
    // A bias vector fused by `fuse_bias` (float32 graphs only).
    let bias = match bias {
        None => None,
        Some(Buf::F32(v)) if v.len() == n => Some(v.as_slice()),
        Some(_) => return Err(Error::operation("matmul: bad fused bias")),
    };
    let av = widen(a, da)?;
    let batches: usize = batch_shape.iter().product();
    if bb.is_empty() && ba == batch_shape {
        // Every batch of A meets the same B: the batches are the row
        // blocks of one [batches * M, K] x [K, N] product (row-major, so
        // no copy), which packs B once and parallelises better.
        let rows = batches * m;
        // Every element is written by the product.
        let mut res = Buf::try_f32_for_overwrite(rows * n)?;
        match prepacked.filter(|pb| pb.k() == k && pb.n() == n) {
            Some(pb) => {
                let fuse = Fuse {
                    col_bias: bias,
                    ..Fuse::default()
                };
                sgemm_packed(rows, &av, false, pb, &mut res, true, &fuse)?;
                return from_floats(out.data_type, res);
            }
            None => sgemm_t(
                rows,
                n,
                k,
                &av,
                false,
                &widen(b, db)?,
                false,
                &mut res,
                true,
            )?,
        }
        add_rows(&mut res, bias);
        return from_floats(out.data_type, res);
    }
    // A float16 B (a float16 cache block that `fuse::widen_into_products`
    // let the product read as it is) is widened per product by
    // `sgemm_f16b`, not here as a whole.
    let b16 = match b {
        Buf::F16(h) if db.data_type == DataType::Float16 => Some(h.as_slice()),
        _ => None,
    };
    let bv = match b16 {
        Some(_) => std::borrow::Cow::Borrowed(&[][..]),
        None => widen(b, db)?,
    };
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
    // Every element is written by the products.
    let mut res = Buf::try_f32_for_overwrite(batches * m * n)?;
    let mn = m * n;
    if mn > 0 {
        // Rows `r0 ..` of product `t` (as many as `c` holds) into `c`.
        let part = |t: usize, r0: usize, c: &mut [f32], parallel: bool| -> Result<()> {
            let (oa, ob) = offsets(t);
            let rows = c.len() / n;
            let a = &av[oa + r0 * k..oa + (r0 + rows) * k];
            match b16 {
                Some(h) => sgemm_f16b(rows, n, k, a, &h[ob..ob + k * n], c, parallel),
                None => {
                    sgemm(rows, n, k, a, &bv[ob..ob + k * n], c, parallel);
                    Ok(())
                }
            }
        };
        // Small products, many (two or more per thread), or as many as the
        // threads divide evenly: one thread per product. Otherwise each
        // product's rows are split between tasks too, and every task runs
        // on one thread: an attention's 3 heads on 2 threads ran as two
        // rounds, the second on one thread, and sharing each product
        // (a fork and a join per block of it) scaled no better. Row
        // groups are whole multiples of [`ROW_GROUP`], so the kernels'
        // tiles sit at the rows they have in the whole product (the same
        // bits).
        let threads = rayon::current_num_threads();
        let per_product = batches == 1
            || m * n * k < PAR_WORK * 4
            || batches >= 2 * threads
            || batches.is_multiple_of(threads);
        if batches > 1 && per_product {
            res.par_chunks_mut(mn)
                .enumerate()
                .try_for_each(|(t, c)| part(t, 0, c, false))?;
        } else if batches > 1 {
            let pieces = (2 * threads).div_ceil(batches);
            let rows = m.div_ceil(pieces).next_multiple_of(ROW_GROUP).min(m);
            res.par_chunks_mut(mn).enumerate().try_for_each(|(t, c)| {
                c.par_chunks_mut(rows * n)
                    .enumerate()
                    .try_for_each(|(p, c)| part(t, p * rows, c, false))
            })?;
        } else if batches == 1 {
            part(0, 0, &mut res, true)?;
        }
    }
    add_rows(&mut res, bias);
    from_floats(out.data_type, res)
}

/// Adds `bias` (when given) to every row of `res`, as the add it stands
/// for would (`x + b`, one rounding).
fn add_rows(res: &mut [f32], bias: Option<&[f32]>) {
    if let Some(b) = bias.filter(|b| !b.is_empty()) {
        for row in res.chunks_exact_mut(b.len()) {
            row.iter_mut().zip(b).for_each(|(x, &v)| *x += v);
        }
    }
}

/// Finds each float32 matmul whose only reader (no graph output) adds a
/// constant float32 vector along the last axis (shape `[N]`, or ones then
/// N), and makes the add part of the matmul: the matmul node gets the
/// constant as a third input and the add's output (see [`super::absorb`]).
/// Results are bitwise those of the unfused graph (one f32 addition per
/// element, as the add kernel does).
pub(super) fn fuse_bias(
    graph: &Graph,
    constants: &crate::backend::cpu::Constants,
) -> Option<Graph> {
    let (readers, reader) = super::readers(graph);
    let mut merges = Vec::new();
    for (ni, node) in graph.nodes.iter().enumerate() {
        let (Op::Matmul, [o], 2) = (&node.op, &node.outputs[..], node.inputs.len()) else {
            continue;
        };
        let d = &graph.operands[*o];
        if readers[*o] != 1 || d.data_type != DataType::Float32 || d.rank() < 2 {
            continue;
        }
        let a = reader[*o];
        let add = &graph.nodes[a];
        let c = match add.inputs[..] {
            [x, c] if x == *o && c != *o => c,
            [c, x] if x == *o && c != *o => c,
            _ => continue,
        };
        let dc = &graph.operands[c];
        let n = d.shape[d.rank() - 1];
        let vector = dc.shape.last() == Some(&n)
            && dc.shape.len() <= d.rank()
            && dc.shape.iter().rev().skip(1).all(|&s| s == 1);
        let is_add = matches!(add.op, Op::Binary(BinaryKind::Add));
        if is_add
            && vector
            && dc.data_type == DataType::Float32
            && matches!(constants.get(&c).map(|b| &**b), Some(Buf::F32(_)))
            && add.outputs.len() == 1
            && graph.operands[add.outputs[0]].shape == d.shape
        {
            merges.push((ni, a, c));
        }
    }
    (!merges.is_empty()).then(|| super::absorb(graph, &merges))
}

/// `x` as a row-major [rows, cols] matrix, transposed when `t` (so that it
/// is read as the [cols, rows] matrix `x^T`).
#[cfg(test)]
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
/// `prepacked`: B' packed at build time; B is then not read.
pub fn gemm(
    p: &GemmParams,
    inputs: &[&Buf],
    descs: &[&OperandDescriptor],
    out: &OperandDescriptor,
    prepacked: Option<&PackedB>,
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
    // Every element is written by the product.
    let mut res = Buf::try_f32_for_overwrite(m * n)?;
    // The transposes are read in place (the packing absorbs them).
    match prepacked.filter(|pb| pb.k() == k && pb.n() == n) {
        Some(pb) => sgemm_packed(m, &av, p.a_transpose, pb, &mut res, true, &Fuse::default())?,
        None => {
            let bv = widen(inputs[1], descs[1])?;
            sgemm_t(
                m,
                n,
                k,
                &av,
                p.a_transpose,
                &bv,
                p.b_transpose,
                &mut res,
                true,
            )?;
        }
    }
    let c = match p.has_c {
        true => Some((inputs[2], descs[2])),
        false => None,
    };
    gemm_epilogue(p, &mut res, c)?;
    from_floats(out.data_type, res)
}

/// `alpha * res + beta * c` in place, `res` the [M, N] product and `c`
/// (when given) broadcasting to it.
fn gemm_epilogue(
    p: &GemmParams,
    res: &mut [f32],
    c: Option<(&Buf, &OperandDescriptor)>,
) -> Result<()> {
    let (m, n) = (p.m, p.n);
    let alpha = p.alpha as f32;
    if alpha != 1.0 {
        res.iter_mut().for_each(|x| *x *= alpha);
    }
    if let Some((c, dc)) = c.filter(|_| m * n > 0) {
        let cv = widen(c, dc)?;
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
    Ok(())
}

/// A matmul or gemm whose B is constant quantized weights, packed at
/// compile (`fuse::quantized_products`): `inputs` are the node's others,
/// `[a]` for matmul (A of any rank 2 or more, its batches as rows) and
/// `[a]` or `[a, c]` for gemm.
pub fn quantized(
    op: &Op,
    w: &QMatrix,
    sums: Option<&BlockSums>,
    inputs: &[&Buf],
    descs: &[&OperandDescriptor],
    out: &OperandDescriptor,
) -> Result<Buf> {
    let (Some(a), Some(da)) = (inputs.first(), descs.first()) else {
        return Err(Error::operation("matmul: missing operands"));
    };
    let k = *da.shape.last().unwrap_or(&0);
    let n = *out.shape.last().unwrap_or(&0);
    if da.rank() < 2 || out.rank() < 2 || k != w.k() || n != w.n() {
        return Err(Error::operation("matmul: inconsistent shapes"));
    }
    let rows = da.element_count() / k.max(1);
    if out.element_count() != rows * n {
        return Err(Error::operation("matmul: inconsistent shapes"));
    }
    let av = widen(a, da)?;
    let mut res = Buf::try_f32_for_overwrite(rows * n)?;
    qgemm::product_with(rows, &av, w, sums, &mut res)?;
    if let Op::Gemm(p) = op {
        if p.m != rows || p.n != n || p.k != k || p.a_transpose {
            return Err(Error::operation("gemm: inconsistent shapes"));
        }
        let c = match p.has_c {
            true => Some((
                *inputs
                    .get(1)
                    .ok_or_else(|| Error::operation("gemm: missing operands"))?,
                *descs
                    .get(1)
                    .ok_or_else(|| Error::operation("gemm: missing operands"))?,
            )),
            false => None,
        };
        gemm_epilogue(p, &mut res, c)?;
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

    /// A few large products on more threads than divide them (their rows
    /// split between tasks) give the bits they give on one thread, with
    /// a float32 or a float16 B, rows a multiple of the split or not.
    #[test]
    fn batched_products_split_by_rows_keep_their_bits() {
        for (batches, m, dtb) in [
            (3, 384, DataType::Float32),
            (3, 384, DataType::Float16),
            (3, 250, DataType::Float32),
            (5, 100, DataType::Float32),
        ] {
            let (k, n) = (64, 128);
            let a = data(batches * m * k, 7);
            let bf = data(batches * k * n, 8);
            let b = match dtb {
                DataType::Float16 => {
                    Buf::F16(bf.iter().map(|&v| crate::f16::f32_to_f16(v)).collect())
                }
                _ => Buf::F32(bf),
            };
            let run = |threads: usize| {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                pool.install(|| {
                    matmul(
                        &Buf::F32(a.clone()),
                        &desc(DataType::Float32, &[batches, m, k]),
                        &b,
                        &desc(dtb, &[batches, k, n]),
                        &desc(DataType::Float32, &[batches, m, n]),
                        None,
                        None,
                    )
                    .unwrap()
                })
            };
            let (Buf::F32(one), Buf::F32(two), Buf::F32(four)) = (run(1), run(2), run(4)) else {
                panic!()
            };
            assert!(one
                .iter()
                .zip(&two)
                .all(|(x, y)| x.to_bits() == y.to_bits()));
            assert!(one
                .iter()
                .zip(&four)
                .all(|(x, y)| x.to_bits() == y.to_bits()));
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
            None,
            None,
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
            None,
            None,
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
            None,
            None,
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
            None,
            None,
        )
        .unwrap();
        assert_eq!(r, Buf::F32(vec![]));
        let r = matmul(
            &Buf::F32(vec![]),
            &desc(DataType::Float32, &[2, 0]),
            &Buf::F32(vec![]),
            &desc(DataType::Float32, &[0, 3]),
            &desc(DataType::Float32, &[2, 3]),
            None,
            None,
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
                let r = gemm(&p, &ins, &ds, &desc(DataType::Float32, &[m, n]), None).unwrap();
                let Buf::F32(r) = r else { panic!() };
                close(&r, &expect, 1e-5);
                // B packed in advance (as at build for a constant B).
                let Buf::F32(bvec) = &bb else { panic!() };
                let pb = PackedB::new(bvec, k, n, bt).unwrap();
                let r = gemm(&p, &ins, &ds, &desc(DataType::Float32, &[m, n]), Some(&pb)).unwrap();
                let Buf::F32(r) = r else { panic!() };
                close(&r, &expect, 1e-5);
            }
        }
    }

    #[test]
    fn matmul_rank2_b_folds_batches_and_uses_prepacked() {
        // a [2, 3, 37, 70] x b [70, 45]: one [222, 70] x [70, 45] product.
        let (m, k, n) = (37, 70, 45);
        let a = data(6 * m * k, 12);
        let b = data(k * n, 13);
        let expect: Vec<f32> = (0..6)
            .flat_map(|t| naive(m, n, k, &a[t * m * k..(t + 1) * m * k], &b))
            .collect();
        let pb = PackedB::new(&b, k, n, false).unwrap();
        for pre in [None, Some(&pb)] {
            let r = matmul(
                &Buf::F32(a.clone()),
                &desc(DataType::Float32, &[2, 3, m, k]),
                // With B packed, the kernel must not read b.
                &Buf::F32(if pre.is_some() { vec![] } else { b.clone() }),
                &desc(DataType::Float32, &[k, n]),
                &desc(DataType::Float32, &[2, 3, m, n]),
                pre,
                None,
            )
            .unwrap();
            let Buf::F32(r) = r else { panic!() };
            close(&r, &expect, 1e-4);
        }
    }
}

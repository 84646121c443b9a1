//! CPU kernels: gather, gatherElements, gatherND, scatterElements, scatterND.
//!
//! These only move elements, so they are generic over the element storage
//! (float16 moves as bit patterns, int4/uint4 as unpacked slots: no
//! conversion, no rounding).
//!
//! Index values are only known here. The spec asks that indices be kept in
//! the allowed range [-N, N) of their dimension (its notes on each of these
//! operators speak of clamping them), with a negative index counting from the
//! end. Every index is therefore clamped to [-N, N-1] and a negative one then
//! has N added ([`resolve`]), so no value (i64::MIN, u32::MAX included) can
//! read or write outside a tensor.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::elementwise::try_build_rows;
use super::shape::Elem;
use super::util::{strides, try_copy, try_vec};
use crate::error::{Error, Result};
use crate::graph::ops::gather::GatherOp;
use crate::tensor::Buf;
use crate::types::OperandDescriptor;

/// Below this many output elements the gathers run on one thread.
const PAR_MIN: usize = 1 << 15;

/// Runs `$f::<T>($args)` for the element type `T` of `$buf`.
macro_rules! dispatch {
    ($buf:expr, $f:ident($($arg:expr),*)) => {
        match $buf {
            Buf::F32(_) => $f::<f32>($($arg),*),
            Buf::F16(_) => $f::<u16>($($arg),*),
            Buf::I32(_) => $f::<i32>($($arg),*),
            Buf::U32(_) => $f::<u32>($($arg),*),
            Buf::I64(_) => $f::<i64>($($arg),*),
            Buf::U64(_) => $f::<u64>($($arg),*),
            Buf::I8(_) => $f::<i8>($($arg),*),
            Buf::U8(_) => $f::<u8>($($arg),*),
        }
    };
}

/// Runs one operator of this family; returns one buffer per output.
pub fn run(
    op: &GatherOp,
    inputs: &[&Buf],
    in_descs: &[&OperandDescriptor],
    out_descs: &[OperandDescriptor],
) -> Result<Vec<Buf>> {
    let scatter = matches!(op, GatherOp::ScatterElements { .. } | GatherOp::ScatterNd);
    let need = if scatter { 3 } else { 2 };
    if inputs.len() != need || in_descs.len() != need || out_descs.len() != 1 {
        return Err(Error::operation(format!(
            "{} got {} inputs and {} outputs",
            op.name(),
            inputs.len(),
            out_descs.len()
        )));
    }
    for (b, d) in inputs.iter().zip(in_descs) {
        check_len(b, d)?;
    }
    let (x, dx) = (inputs[0], in_descs[0]);
    let idx = indices(inputs[1])?;
    let di = in_descs[1];
    let out = &out_descs[0];
    let res = match *op {
        GatherOp::Gather { axis } => dispatch!(x, gather_t(x, &dx.shape, &idx, axis, out)),
        GatherOp::GatherElements { axis } => {
            dispatch!(
                x,
                gather_elements_t(x, &dx.shape, &idx, &di.shape, axis, out)
            )
        }
        GatherOp::GatherNd => dispatch!(x, gather_nd_t(x, &dx.shape, &idx, &di.shape, out)),
        GatherOp::ScatterElements { axis } => dispatch!(
            x,
            scatter_elements_t(x, &dx.shape, &idx, &di.shape, inputs[2], axis, out)
        ),
        GatherOp::ScatterNd => {
            dispatch!(
                x,
                scatter_nd_t(x, &dx.shape, &idx, &di.shape, inputs[2], out)
            )
        }
    }?;
    Ok(vec![res])
}

/// `gather` of rows of a large constant read where the constant's bytes
/// lie (`fuse::gathers_from_constants`): the table is never converted to
/// an element buffer, only the gathered rows are. `table` describes
/// `bytes`; its type takes a whole number of bytes per element (not
/// int4/uint4, which the rewrite leaves alone). The same indices, the
/// same clamping ([`resolve`]) and the same result as [`run`].
pub fn gather_table(
    bytes: &[u8],
    table: &OperandDescriptor,
    axis: usize,
    ids: &Buf,
    di: &OperandDescriptor,
    out: &OperandDescriptor,
) -> Result<Buf> {
    check_len(ids, di)?;
    let size = table.data_type.bits() / 8;
    let count = table.element_count();
    if !table.data_type.bits().is_multiple_of(8) || bytes.len() != count.saturating_mul(size) {
        return Err(Error::operation(
            "gather: the table does not match its type",
        ));
    }
    let idx = indices(ids)?;
    let (outer, n, inner) = split_at_axis(&table.shape, axis).ok_or_else(|| bad_shape("gather"))?;
    if outer * idx.len() * inner != out.element_count() || out.data_type != table.data_type {
        return Err(bad_shape("gather"));
    }
    // Resolved once, as `gather_t` does, not once per outer position.
    let mut rows: Vec<usize> = try_vec(idx.len(), "the gathered rows")?;
    for &i in &idx {
        rows.push(resolve(i, n).ok_or_else(|| bad_shape("gather"))?);
    }
    let run = inner * size;
    let mut res: Vec<u8> = try_vec(out.element_count() * size, "the output of gather")?;
    for o in 0..outer {
        for &r in &rows {
            let start = (o * n + r) * run;
            res.extend_from_slice(&bytes[start..start + run]);
        }
    }
    Buf::from_bytes(out.data_type, &res, out.element_count())
}

fn check_len(b: &Buf, d: &OperandDescriptor) -> Result<()> {
    if b.len() != d.element_count() {
        return Err(Error::operation(format!(
            "a tensor holds {} elements but its shape {:?} needs {}",
            b.len(),
            d.shape,
            d.element_count()
        )));
    }
    Ok(())
}

fn typed<T: Elem>(b: &Buf) -> Result<&[T]> {
    T::of(b).ok_or_else(|| Error::operation("a kernel got inputs of different element types"))
}

/// The index values as i64 (int32, uint32 and int64 all fit).
fn indices(b: &Buf) -> Result<Vec<i64>> {
    match b {
        Buf::I32(v) => {
            let mut o = try_vec(v.len(), "the indices")?;
            o.extend(v.iter().map(|&i| i as i64));
            Ok(o)
        }
        Buf::U32(v) => {
            let mut o = try_vec(v.len(), "the indices")?;
            o.extend(v.iter().map(|&i| i as i64));
            Ok(o)
        }
        Buf::I64(v) => try_copy(v, "the indices"),
        _ => Err(Error::operation("indices must be int32, uint32 or int64")),
    }
}

/// Maps an index into a dimension of size `n` (n ≥ 1) to a position in
/// [0, n): clamped into the allowed range [-n, n-1] first, then a negative
/// index counts from the end. So `n` or more reads the last element and
/// below `-n` the first. Returns `None` only for an empty dimension, which
/// valid shapes never have.
pub fn resolve(index: i64, n: usize) -> Option<usize> {
    let n = i64::try_from(n).ok().filter(|&n| n > 0)?;
    let c = index.clamp(-n, n - 1);
    Some(if c < 0 { c + n } else { c } as usize)
}

fn bad_shape(what: &str) -> Error {
    Error::operation(format!("{what}: inconsistent shapes"))
}

/// Sizes before, at and after `axis` of `shape`.
fn split_at_axis(shape: &[usize], axis: usize) -> Option<(usize, usize, usize)> {
    let n = *shape.get(axis)?;
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product();
    Some((outer, n, inner))
}

/// gather: output `[outer, k, inner]` where `k` runs over the indices;
/// each `inner` run is copied from input row `(o, resolve(indices[k]))`.
fn gather_t<T: Elem>(
    x: &Buf,
    shape: &[usize],
    idx: &[i64],
    axis: usize,
    out: &OperandDescriptor,
) -> Result<Buf> {
    let x = typed::<T>(x)?;
    let (outer, n, inner) = split_at_axis(shape, axis).ok_or_else(|| bad_shape("gather"))?;
    let k = idx.len();
    if outer * k * inner != out.element_count() {
        return Err(bad_shape("gather"));
    }
    let mut rows: Vec<usize> = try_vec(k, "the gathered rows")?;
    for &i in idx {
        rows.push(resolve(i, n).ok_or_else(|| bad_shape("gather"))?);
    }
    let mut res: Vec<T> = try_vec(out.element_count(), "the output of gather")?;
    // One block of the output per outer position: k runs of `inner`.
    let block = |o: usize, dst: &mut Vec<T>| {
        for &r in &rows {
            let start = (o * n + r) * inner;
            dst.extend_from_slice(&x[start..start + inner]);
        }
    };
    if out.element_count() >= PAR_MIN && outer > 1 {
        let parts: Vec<Vec<T>> = (0..outer)
            .into_par_iter()
            .map(|o| {
                let mut v = try_vec(k * inner, "a block of the output of gather")?;
                block(o, &mut v);
                Ok(v)
            })
            .collect::<Result<_>>()?;
        for p in parts {
            res.extend_from_slice(&p);
        }
    } else {
        for o in 0..outer {
            block(o, &mut res);
        }
    }
    Ok(T::wrap(res))
}

/// gatherElements: output (of the indices' shape) at `(o, j, i)` is input
/// `(o, resolve(indices[o, j, i]), i)`, with `o`/`i` the flattened
/// dimensions before/after `axis`.
fn gather_elements_t<T: Elem>(
    x: &Buf,
    shape: &[usize],
    idx: &[i64],
    idx_shape: &[usize],
    axis: usize,
    out: &OperandDescriptor,
) -> Result<Buf> {
    let x = typed::<T>(x)?;
    let (outer, n, inner) =
        split_at_axis(shape, axis).ok_or_else(|| bad_shape("gatherElements"))?;
    let (i_outer, k, i_inner) =
        split_at_axis(idx_shape, axis).ok_or_else(|| bad_shape("gatherElements"))?;
    if i_outer != outer || i_inner != inner || idx.len() != out.element_count() {
        return Err(bad_shape("gatherElements"));
    }
    if n == 0 {
        return Err(bad_shape("gatherElements"));
    }
    let total = idx.len();
    if total == 0 {
        return Ok(T::wrap(Vec::new()));
    }
    // n ≥ 1 and n ≤ x.len() (check_len), so it fits an i64.
    let ni = n as i64;
    let at = |id: i64| -> usize {
        let c = id.clamp(-ni, ni - 1);
        (if c < 0 { c + ni } else { c }) as usize
    };
    // The output is `outer` slabs of `k` rows of `inner` (one row per
    // (outer, k) position). Each chunk is walked a slab's part at a time,
    // so no element pays a division; indices are clamped and wrapped as
    // `resolve` does.
    let slab = k * inner;
    let fill = |start: usize, chunk: &mut [MaybeUninit<T>]| {
        let mut done = 0;
        while done < chunk.len() {
            let p = start + done;
            let o = p / slab;
            let seg = (slab - p % slab).min(chunk.len() - done);
            let base = &x[o * n * inner..(o + 1) * n * inner];
            let (out, ids) = (&mut chunk[done..done + seg], &idx[p..p + seg]);
            if inner == 1 {
                for (d, &id) in out.iter_mut().zip(ids) {
                    d.write(base[at(id)]);
                }
            } else {
                // Chunks start on rows, and so do segments (a slab is
                // whole rows).
                for (row, ids) in out.chunks_exact_mut(inner).zip(ids.chunks_exact(inner)) {
                    for (i, (d, &id)) in row.iter_mut().zip(ids).enumerate() {
                        d.write(base[at(id) * inner + i]);
                    }
                }
            }
            done += seg;
        }
    };
    // SAFETY: every chunk holds whole rows of `inner` (try_build_rows) and
    // `fill` writes each element of each row.
    let res = unsafe { try_build_rows(total, inner, fill)? };
    Ok(T::wrap(res))
}

/// For gatherND/scatterND: the number of coordinates, the coordinate
/// length, the element offset of each coordinate's slice, and the slice
/// length.
fn nd_offsets(
    what: &str,
    shape: &[usize],
    idx: &[i64],
    idx_shape: &[usize],
) -> Result<(Vec<usize>, usize)> {
    let c = *idx_shape.last().ok_or_else(|| bad_shape(what))?;
    if c > shape.len() {
        return Err(bad_shape(what));
    }
    let count: usize = idx_shape[..idx_shape.len() - 1].iter().product();
    if count * c != idx.len() {
        return Err(bad_shape(what));
    }
    let s = strides(shape);
    let slice: usize = shape[c..].iter().product();
    let mut offsets = try_vec(count, "the slice offsets")?;
    for j in 0..count {
        let coord = &idx[j * c..(j + 1) * c];
        offsets.push(
            coord
                .iter()
                .enumerate()
                .try_fold(0usize, |off, (d, &v)| {
                    Some(off + resolve(v, shape[d])? * s[d])
                })
                .ok_or_else(|| bad_shape(what))?,
        );
    }
    Ok((offsets, slice))
}

/// gatherND: output slice `j` is the input slice at coordinate
/// `indices[j, :]` (each component resolved in its own dimension).
fn gather_nd_t<T: Elem>(
    x: &Buf,
    shape: &[usize],
    idx: &[i64],
    idx_shape: &[usize],
    out: &OperandDescriptor,
) -> Result<Buf> {
    let x = typed::<T>(x)?;
    let (offsets, slice) = nd_offsets("gatherND", shape, idx, idx_shape)?;
    if offsets.len() * slice != out.element_count() {
        return Err(bad_shape("gatherND"));
    }
    let mut res: Vec<T> = try_vec(out.element_count(), "the output of gatherND")?;
    for &off in &offsets {
        res.extend_from_slice(&x[off..off + slice]);
    }
    Ok(T::wrap(res))
}

/// scatterElements: the output starts as a copy of the input; then, in the
/// indices' row-major order, update `(o, j, i)` is written to output
/// `(o, resolve(indices[o, j, i]), i)`. The spec leaves the result of
/// duplicate indices unspecified; writing sequentially makes it
/// deterministic: the last update in row-major order wins.
fn scatter_elements_t<T: Elem>(
    x: &Buf,
    shape: &[usize],
    idx: &[i64],
    idx_shape: &[usize],
    updates: &Buf,
    axis: usize,
    out: &OperandDescriptor,
) -> Result<Buf> {
    let x = typed::<T>(x)?;
    let u = typed::<T>(updates)?;
    let (outer, n, inner) =
        split_at_axis(shape, axis).ok_or_else(|| bad_shape("scatterElements"))?;
    let (i_outer, k, i_inner) =
        split_at_axis(idx_shape, axis).ok_or_else(|| bad_shape("scatterElements"))?;
    if i_outer != outer
        || i_inner != inner
        || u.len() != idx.len()
        || x.len() != out.element_count()
        || n == 0
    {
        return Err(bad_shape("scatterElements"));
    }
    let mut res = try_copy(x, "the scatterElements output")?;
    for (p, (&v, &i)) in u.iter().zip(idx).enumerate() {
        let o = p / (k * inner);
        let r = resolve(i, n).unwrap_or(0);
        res[(o * n + r) * inner + p % inner] = v;
    }
    Ok(T::wrap(res))
}

/// scatterND: the output starts as a copy of the input; then, in order,
/// update slice `j` replaces the output slice at coordinate `indices[j, :]`.
/// Duplicate coordinates: the last slice written wins (deterministic; the
/// spec leaves it unspecified).
fn scatter_nd_t<T: Elem>(
    x: &Buf,
    shape: &[usize],
    idx: &[i64],
    idx_shape: &[usize],
    updates: &Buf,
    out: &OperandDescriptor,
) -> Result<Buf> {
    let x = typed::<T>(x)?;
    let u = typed::<T>(updates)?;
    let (offsets, slice) = nd_offsets("scatterND", shape, idx, idx_shape)?;
    if offsets.len() * slice != u.len() || x.len() != out.element_count() {
        return Err(bad_shape("scatterND"));
    }
    let mut res = try_copy(x, "the scatterND output")?;
    for (j, &off) in offsets.iter().enumerate() {
        res[off..off + slice].copy_from_slice(&u[j * slice..(j + 1) * slice]);
    }
    Ok(T::wrap(res))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::DataType;

    fn desc(dt: DataType, shape: &[usize]) -> OperandDescriptor {
        OperandDescriptor::new(dt, shape.to_vec()).unwrap()
    }

    fn unravel(mut p: usize, shape: &[usize]) -> Vec<usize> {
        let mut c = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            c[d] = p % shape[d];
            p /= shape[d];
        }
        c
    }

    fn ravel(c: &[usize], shape: &[usize]) -> usize {
        c.iter().zip(shape).fold(0, |acc, (&x, &n)| acc * n + x)
    }

    /// The spec's rule written the obvious way: clamp into [-n, n-1], then
    /// count negatives from the end.
    fn naive_resolve(i: i64, n: usize) -> usize {
        let n = n as i128;
        let c = (i as i128).max(-n).min(n - 1);
        (if c < 0 { c + n } else { c }) as usize
    }

    /// Deterministic pseudo-random indices, many out of range.
    fn some_indices(count: usize, n: usize, seed: u64) -> Vec<i64> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
        (0..count)
            .map(|k| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                match k % 7 {
                    5 => i64::MIN,
                    6 => i64::MAX,
                    _ => ((s >> 33) % (4 * n as u64 + 3)) as i64 - 2 * n as i64 - 1,
                }
            })
            .collect()
    }

    fn run1(op: GatherOp, ins: &[(&Buf, OperandDescriptor)], out: OperandDescriptor) -> Buf {
        let bufs: Vec<&Buf> = ins.iter().map(|(b, _)| *b).collect();
        let descs: Vec<&OperandDescriptor> = ins.iter().map(|(_, d)| d).collect();
        run(&op, &bufs, &descs, &[out]).unwrap().remove(0)
    }

    fn iota_i64(n: usize) -> Vec<i64> {
        (0..n as i64).map(|v| v * 3 - 7).collect()
    }

    #[test]
    fn resolve_clamps_and_wraps() {
        assert_eq!(resolve(0, 3), Some(0));
        assert_eq!(resolve(2, 3), Some(2));
        assert_eq!(resolve(3, 3), Some(2));
        assert_eq!(resolve(-1, 3), Some(2));
        assert_eq!(resolve(-3, 3), Some(0));
        assert_eq!(resolve(-4, 3), Some(0));
        assert_eq!(resolve(i64::MIN, 3), Some(0));
        assert_eq!(resolve(i64::MAX, 3), Some(2));
        assert_eq!(resolve(u32::MAX as i64, 5), Some(4));
        assert_eq!(resolve(5, 0), None);
        for i in -10..10 {
            assert_eq!(resolve(i, 4), Some(naive_resolve(i, 4)));
        }
    }

    #[test]
    fn gather_matches_reference() {
        for (shape, ishape, axis) in [
            (vec![5usize], vec![], 0usize),
            (vec![4, 3], vec![2], 0),
            (vec![4, 3], vec![3], 1),
            (vec![2, 3, 5], vec![2, 2], 1),
            (vec![3, 1, 2, 7], vec![3, 1, 2], 3),
            (vec![2, 3, 4], vec![4], 2),
        ] {
            let dx = desc(DataType::Int64, &shape);
            let x = Buf::I64(iota_i64(dx.element_count()));
            let n = shape[axis];
            let count: usize = ishape.iter().product();
            let idx = some_indices(count, n, 7);
            let mut oshape = shape[..axis].to_vec();
            oshape.extend_from_slice(&ishape);
            oshape.extend_from_slice(&shape[axis + 1..]);
            let dout = desc(DataType::Int64, &oshape);
            let got = run1(
                GatherOp::Gather { axis },
                &[
                    (&x, dx.clone()),
                    (&Buf::I64(idx.clone()), desc(DataType::Int64, &ishape)),
                ],
                dout.clone(),
            );
            let want: Vec<i64> = (0..dout.element_count())
                .map(|p| {
                    let oc = unravel(p, &oshape);
                    let ic = &oc[axis..axis + ishape.len()];
                    let k = ravel(ic, &ishape);
                    let mut xc = oc[..axis].to_vec();
                    xc.push(naive_resolve(idx[k], n));
                    xc.extend_from_slice(&oc[axis + ishape.len()..]);
                    (ravel(&xc, &shape) as i64) * 3 - 7
                })
                .collect();
            assert_eq!(got, Buf::I64(want), "shape {shape:?} axis {axis}");
        }
    }

    #[test]
    fn gather_large_parallel_path() {
        // Large enough to take the parallel path: [64, 5, 128] gathered with
        // 7 indices along axis 1.
        let shape = [64usize, 5, 128];
        let dx = desc(DataType::Float32, &shape);
        let x = Buf::F32((0..dx.element_count()).map(|v| v as f32).collect());
        let idx = vec![4i32, -1, 0, 9, -9, 2, 3];
        let dout = desc(DataType::Float32, &[64, 7, 128]);
        let got = run1(
            GatherOp::Gather { axis: 1 },
            &[
                (&x, dx),
                (&Buf::I32(idx.clone()), desc(DataType::Int32, &[7])),
            ],
            dout.clone(),
        );
        let Buf::F32(g) = got else { panic!() };
        for p in (0..dout.element_count()).step_by(97) {
            let c = unravel(p, &[64, 7, 128]);
            let r = naive_resolve(idx[c[1]] as i64, 5);
            assert_eq!(g[p], ravel(&[c[0], r, c[2]], &shape) as f32);
        }
    }

    #[test]
    fn gather_moves_float16_and_int4_bits() {
        let x = Buf::F16(vec![0x3c00, 0x7e00, 0x8001, 0xfc00]);
        let idx = Buf::U32(vec![3, 1, u32::MAX, 0]);
        let got = run1(
            GatherOp::Gather { axis: 0 },
            &[
                (&x, desc(DataType::Float16, &[4])),
                (&idx, desc(DataType::Uint32, &[4])),
            ],
            desc(DataType::Float16, &[4]),
        );
        // u32::MAX is a large positive index: clamped to the last element.
        assert_eq!(got, Buf::F16(vec![0xfc00, 0x7e00, 0xfc00, 0x3c00]));
        let x = Buf::I8(vec![-8, 7, -1]);
        let got = run1(
            GatherOp::Gather { axis: 0 },
            &[
                (&x, desc(DataType::Int4, &[3])),
                (&Buf::I64(vec![-1, 0]), desc(DataType::Int64, &[2])),
            ],
            desc(DataType::Int4, &[2]),
        );
        assert_eq!(got, Buf::I8(vec![-1, -8]));
    }

    #[test]
    fn gather_elements_and_scatter_elements_match_reference() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for (shape, k, axis) in [
            (vec![6usize], 3usize, 0usize),
            (vec![4, 3], 2, 0),
            (vec![4, 3], 5, 1),
            (vec![2, 3, 5], 1, 1),
            (vec![3, 2, 2, 3], 4, 3),
            // Past the parallel threshold: rows of 100 and of one
            // element, and one row of all of them.
            (vec![3, 300, 2, 50], 250, 1),
            (vec![40, 3000], 2000, 1),
            (vec![2, 70000], 1, 0),
        ] {
            let dx = desc(DataType::Int32, &shape);
            let x = Buf::I32((0..dx.element_count() as i32).collect());
            let mut ishape = shape.clone();
            ishape[axis] = k;
            let di = desc(DataType::Int64, &ishape);
            let n = shape[axis];
            let idx = some_indices(di.element_count(), n, 11);
            let target = |p: usize| {
                let mut c = unravel(p, &ishape);
                c[axis] = naive_resolve(idx[p], n);
                ravel(&c, &shape)
            };
            let got = pool.install(|| {
                run1(
                    GatherOp::GatherElements { axis },
                    &[(&x, dx.clone()), (&Buf::I64(idx.clone()), di.clone())],
                    desc(DataType::Int32, &ishape),
                )
            });
            let want: Vec<i32> = (0..di.element_count()).map(|p| target(p) as i32).collect();
            assert_eq!(got, Buf::I32(want));

            let upd: Vec<i32> = (0..di.element_count() as i32).map(|v| -1 - v).collect();
            let got = run1(
                GatherOp::ScatterElements { axis },
                &[
                    (&x, dx.clone()),
                    (&Buf::I64(idx.clone()), di.clone()),
                    (&Buf::I32(upd.clone()), desc(DataType::Int32, &ishape)),
                ],
                dx.clone(),
            );
            let mut want: Vec<i32> = (0..dx.element_count() as i32).collect();
            for p in 0..di.element_count() {
                want[target(p)] = upd[p];
            }
            assert_eq!(got, Buf::I32(want));
        }
    }

    #[test]
    fn gather_nd_and_scatter_nd_match_reference() {
        for (shape, ishape) in [
            (vec![5usize], vec![3usize, 1usize]),
            (vec![2, 2], vec![3, 2]),
            (vec![2, 2], vec![2, 1]),
            (vec![3, 4, 2], vec![2, 2, 2]),
            (vec![3, 4, 2], vec![1]),
            (vec![3, 4, 2], vec![4, 3]),
        ] {
            let dx = desc(DataType::Uint64, &shape);
            let x = Buf::U64((0..dx.element_count() as u64).map(|v| v * 10).collect());
            let c = *ishape.last().unwrap();
            let di = desc(DataType::Int64, &ishape);
            let idx = some_indices(di.element_count(), 3, 5);
            let count = di.element_count() / c;
            let slice: usize = shape[c..].iter().product();
            let mut oshape = ishape[..ishape.len() - 1].to_vec();
            oshape.extend_from_slice(&shape[c..]);
            let start = |j: usize| {
                let mut coord: Vec<usize> = (0..c)
                    .map(|d| naive_resolve(idx[j * c + d], shape[d]))
                    .collect();
                coord.resize(shape.len(), 0);
                ravel(&coord, &shape)
            };
            let got = run1(
                GatherOp::GatherNd,
                &[(&x, dx.clone()), (&Buf::I64(idx.clone()), di.clone())],
                desc(DataType::Uint64, &oshape),
            );
            let mut want = Vec::new();
            for j in 0..count {
                want.extend((0..slice).map(|s| ((start(j) + s) * 10) as u64));
            }
            assert_eq!(got, Buf::U64(want), "shape {shape:?} indices {ishape:?}");

            let upd: Vec<u64> = (0..count * slice).map(|v| 1000 + v as u64).collect();
            let got = run1(
                GatherOp::ScatterNd,
                &[
                    (&x, dx.clone()),
                    (&Buf::I64(idx.clone()), di.clone()),
                    (&Buf::U64(upd.clone()), desc(DataType::Uint64, &oshape)),
                ],
                dx.clone(),
            );
            let mut want: Vec<u64> = (0..dx.element_count() as u64).map(|v| v * 10).collect();
            for j in 0..count {
                for s in 0..slice {
                    want[start(j) + s] = upd[j * slice + s];
                }
            }
            assert_eq!(
                got,
                Buf::U64(want),
                "scatter shape {shape:?} indices {ishape:?}"
            );
        }
    }

    #[test]
    fn scatter_duplicates_last_write_wins() {
        // Indices [1, -3, 7] in a dimension of 4 resolve to [1, 1, 3]: the
        // second update (2.0) overwrites the first (1.0) at element 1, and
        // 7 is clamped to the last element, 3, which gets 3.0.
        let x = Buf::F16(vec![0; 4]);
        let got = run1(
            GatherOp::ScatterElements { axis: 0 },
            &[
                (&x, desc(DataType::Float16, &[4])),
                (&Buf::I32(vec![1, -3, 7]), desc(DataType::Int32, &[3])),
                (
                    &Buf::F16(vec![0x3c00, 0x4000, 0x4200]),
                    desc(DataType::Float16, &[3]),
                ),
            ],
            desc(DataType::Float16, &[4]),
        );
        assert_eq!(got, Buf::F16(vec![0, 0x4000, 0, 0x4200]));
        let got = run1(
            GatherOp::ScatterNd,
            &[
                (&Buf::U8(vec![9; 3]), desc(DataType::Uint8, &[3])),
                (&Buf::U32(vec![2, 0, 2]), desc(DataType::Uint32, &[3, 1])),
                (&Buf::U8(vec![1, 2, 3]), desc(DataType::Uint8, &[3])),
            ],
            desc(DataType::Uint8, &[3]),
        );
        assert_eq!(got, Buf::U8(vec![2, 9, 3]));
    }

    #[test]
    fn mismatched_buffers_are_errors_not_panics() {
        let r = run(
            &GatherOp::Gather { axis: 0 },
            &[&Buf::F32(vec![1.0; 3]), &Buf::I32(vec![0])],
            &[&desc(DataType::Float32, &[4]), &desc(DataType::Int32, &[1])],
            &[desc(DataType::Float32, &[1])],
        );
        assert!(r.is_err());
        let r = run(
            &GatherOp::GatherNd,
            &[&Buf::F32(vec![1.0; 4]), &Buf::F32(vec![0.0])],
            &[
                &desc(DataType::Float32, &[4]),
                &desc(DataType::Float32, &[1]),
            ],
            &[desc(DataType::Float32, &[])],
        );
        assert!(r.is_err());
    }
}

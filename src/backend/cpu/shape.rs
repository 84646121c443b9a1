//! Data movement CPU kernels: transpose, concat and slice.
//!
//! These only move elements, so they are written once, generically over the
//! element storage ([`Elem`]), and work for every data type (int4/uint4 are
//! stored unpacked, one element per slot, so they need no special case).

use crate::error::{Error, Result};
use crate::tensor::Buf;
use crate::types::OperandDescriptor;

use super::util::{strides, try_vec};

/// An element type of [`Buf`] storage: lets generic kernels borrow a typed
/// slice out of a `Buf` and wrap a result back into the same variant.
///
/// `u16` stands for float16 bit patterns (the only `u16` variant).
pub(super) trait Elem: Copy + Send + Sync + 'static {
    /// The elements, when `b` holds this element type.
    fn of(b: &Buf) -> Option<&[Self]>;
    /// Wraps elements into the matching `Buf` variant.
    fn wrap(v: Vec<Self>) -> Buf;
    /// The elements of `b`, when it holds this element type.
    fn unwrap(b: Buf) -> Option<Vec<Self>>;
}

macro_rules! elem {
    ($($t:ty => $variant:ident),*) => {$(
        impl Elem for $t {
            fn of(b: &Buf) -> Option<&[Self]> {
                match b {
                    Buf::$variant(v) => Some(v),
                    _ => None,
                }
            }
            fn wrap(v: Vec<Self>) -> Buf {
                Buf::$variant(v)
            }
            fn unwrap(b: Buf) -> Option<Vec<Self>> {
                match b {
                    Buf::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    )*};
}

elem!(f32 => F32, u16 => F16, i32 => I32, u32 => U32, i64 => I64, u64 => U64, i8 => I8, u8 => U8);

/// Runs the generic function `$f::<T>($args)` for the element type `T` of
/// `$buf` (the function receives the buffer and must re-borrow it typed).
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

/// The typed elements of `b`, or an OperationError when the storage is not
/// of type `T` (which validation rules out).
fn typed<T: Elem>(b: &Buf) -> Result<&[T]> {
    T::of(b).ok_or_else(|| Error::operation("a kernel got inputs of different element types"))
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

/// Gathers `out_shape` elements from `x`: output element at multi-index `o`
/// is read at `base + sum(o[i] * src_strides[i])`. Shared by transpose and
/// slice; the innermost dimension is a tight loop.
fn gather<T: Copy>(
    x: &[T],
    base: usize,
    out_shape: &[usize],
    src_strides: &[usize],
) -> Result<Vec<T>> {
    gather_into(Vec::new(), x, base, out_shape, src_strides)
}

/// Empties `out` and makes room for `total` elements, fallibly.
fn make_room<T>(out: &mut Vec<T>, total: usize, what: &str) -> Result<()> {
    out.clear();
    if out.capacity() < total {
        *out = try_vec(total, what)?;
    }
    Ok(())
}

/// [`gather`] into `out` (emptied first; its memory is reused).
fn gather_into<T: Copy>(
    mut out: Vec<T>,
    x: &[T],
    base: usize,
    out_shape: &[usize],
    src_strides: &[usize],
) -> Result<Vec<T>> {
    let total: usize = out_shape.iter().product();
    make_room(&mut out, total, "the output")?;
    if total == 0 {
        return Ok(out);
    }
    let rank = out_shape.len();
    if rank == 0 {
        out.push(x[base]);
        return Ok(out);
    }
    let inner = out_shape[rank - 1];
    let inner_stride = src_strides[rank - 1];
    let mut idx = vec![0usize; rank - 1];
    let mut off = base;
    loop {
        if inner_stride == 1 {
            out.extend_from_slice(&x[off..off + inner]);
        } else {
            out.extend((0..inner).map(|j| x[off + j * inner_stride]));
        }
        // Advance the odometer over the outer dimensions.
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return Ok(out);
            }
            d -= 1;
            idx[d] += 1;
            off += src_strides[d];
            if idx[d] < out_shape[d] {
                break;
            }
            off -= src_strides[d] * idx[d];
            idx[d] = 0;
        }
    }
}

/// Permutes the dimensions of a row-major array: output dimension `i` is
/// input dimension `perm[i]`. Used by conv/pool and the normalizations to
/// change layouts; its output allocation fails with an OperationError
/// instead of aborting.
pub(super) fn transpose_vec<T: Copy>(x: &[T], shape: &[usize], perm: &[usize]) -> Result<Vec<T>> {
    transpose_vec_into(Vec::new(), x, shape, perm)
}

/// [`transpose_vec`] into `out` (emptied first; its memory is reused).
pub(super) fn transpose_vec_into<T: Copy>(
    out: Vec<T>,
    x: &[T],
    shape: &[usize],
    perm: &[usize],
) -> Result<Vec<T>> {
    let s = strides(shape);
    // Output axes that step through `x` as one (the next one's run ends
    // where this one's step goes) are merged, and axes of one element
    // dropped: the same elements in the same order, in fewer, longer
    // axes. NHWC to NCHW is then [n, c, h * w] from [n, h * w, c], a
    // batch of 2-D transposes in tiles rather than a gather of single
    // elements.
    let mut out_shape: Vec<usize> = Vec::new();
    let mut src: Vec<usize> = Vec::new();
    for &p in perm {
        let (d, st) = (shape[p], s[p]);
        if d == 1 {
            continue;
        }
        match (out_shape.last_mut(), src.last_mut()) {
            (Some(ld), Some(ls)) if *ls == st * d => {
                *ld *= d;
                *ls = st;
            }
            _ => {
                out_shape.push(d);
                src.push(st);
            }
        }
    }
    if out_shape.is_empty() {
        // One element (or none: a zero-sized axis is kept above).
        out_shape.push(1);
        src.push(1);
    }
    let rank = out_shape.len();
    if rank >= 2 && src[rank - 2] == 1 && src[rank - 1] != 1 && x.len() == s[0] * shape[0] {
        return transpose_inner(out, x, &out_shape, &src);
    }
    gather_into(out, x, 0, &out_shape, &src)
}

/// Transpose whose two innermost output dimensions swap the input's
/// contiguous axis with a strided one (e.g. [0, 2, 3, 1] or the last two
/// axes): a batch of 2-D transposes, copied in square tiles so that both
/// the reads and the writes stay within a few cache lines.
fn transpose_inner<T: Copy>(
    mut out: Vec<T>,
    x: &[T],
    out_shape: &[usize],
    src: &[usize],
) -> Result<Vec<T>> {
    const TILE: usize = 16;
    let total: usize = out_shape.iter().product();
    let rank = out_shape.len();
    let (rows, cols) = (out_shape[rank - 2], out_shape[rank - 1]);
    let cs = src[rank - 1];
    make_room(&mut out, total, "the output of transpose")?;
    if total == 0 {
        return Ok(out);
    }
    // The tiles below read without bounds checks: the farthest element
    // any output reads must lie in `x` (true when `src` is a permutation
    // of `x`'s strides, as its callers' are; checked once, not per read).
    let last: usize = out_shape.iter().zip(src).map(|(&d, &s)| (d - 1) * s).sum();
    assert!(
        last < x.len(),
        "transpose: the strides reach past the input"
    );
    let dst = &mut out.spare_capacity_mut()[..total];
    let outer_shape = &out_shape[..rank - 2];
    let outer_src = &src[..rank - 2];
    let mut idx = vec![0usize; outer_shape.len()];
    let mut base = 0usize;
    for block in dst.chunks_exact_mut(rows * cols) {
        for i0 in (0..rows).step_by(TILE) {
            let i1 = (i0 + TILE).min(rows);
            for j0 in (0..cols).step_by(TILE) {
                let j1 = (j0 + TILE).min(cols);
                #[cfg(target_arch = "x86_64")]
                if std::mem::size_of::<T>() == 4 && i1 - i0 == TILE && j1 - j0 == TILE {
                    // SAFETY: T is 4 bytes, moved as bits (every 4-byte
                    // element type here, f32, i32 and u32, has no padding
                    // and takes any bits). Reads: `base + i + j * cs` for
                    // i, j < 16 of this whole tile is at most
                    // `base + (rows - 1) + (cols - 1) * cs <= last`, inside
                    // `x` (asserted above; `base` sums idx[d] * src[d]
                    // with idx[d] < out_shape[d], src[rank - 2] == 1 and
                    // src[rank - 1] == cs). Writes: row i0 + i < rows,
                    // columns j0.. + 16 <= cols of `block`, rows * cols
                    // elements (the tile is whole). `x` is shared and
                    // `out` owned, so they cannot overlap.
                    unsafe {
                        tile16_4byte(
                            x.as_ptr().add(base + i0 + j0 * cs).cast(),
                            cs,
                            block.as_mut_ptr().add(i0 * cols + j0).cast(),
                            cols,
                        )
                    };
                    continue;
                }
                for i in i0..i1 {
                    let drow = &mut block[i * cols + j0..i * cols + j1];
                    let s0 = base + i + j0 * cs;
                    for (j, d) in drow.iter_mut().enumerate() {
                        d.write(x[s0 + j * cs]);
                    }
                }
            }
        }
        // Advance the odometer over the outer dimensions.
        for d in (0..outer_shape.len()).rev() {
            idx[d] += 1;
            base += outer_src[d];
            if idx[d] < outer_shape[d] {
                break;
            }
            base -= outer_src[d] * idx[d];
            idx[d] = 0;
        }
    }
    // SAFETY: `dst` is the first `total` slots of the capacity (reserved
    // above); its `rows * cols` blocks cover it (total is a whole number
    // of them), and in each the tiles (i0, j0) cover every row and column,
    // each writing all its elements (the SSE tile or the scalar loop).
    unsafe { out.set_len(total) };
    Ok(out)
}

/// One 16 x 16 tile of [`transpose_inner`] for 4-byte elements, 4 x 4
/// at a time in SSE registers (x86-64's baseline; the shuffles move bits,
/// NaN payloads included): `dst[i * ld + j] = src[i + j * cs]`. The
/// scalar loop took 46 us for the transformer block's [1, 128, 6, 64] ->
/// [1, 6, 64, 128].
///
/// The tile writes its 16 output rows a quarter line at a time. Where
/// those rows are a multiple of 4 KiB apart ([`ALIASED`]), all 16 lines
/// fall in one set of the first-level cache (64 sets of 64-byte lines on
/// current x86 cores, 8 to 12 ways): they evict each other half written,
/// and each comes back from the next level for its next quarter. Such a
/// tile is transposed into a local buffer first and each output line then
/// written whole. Measured on an AVX-512 Zen 5, one thread, fastest of
/// ten blocks of ten: a 1024 x 1024 transpose 0.64 to 0.45 ms, 2048 x 512
/// 0.54 to 0.30 (1000 x 1000 took 0.13 before; buffered it took 0.19,
/// so rows that do not alias keep the direct stores, and no buffer).
///
/// # Safety
/// `src + i + j * cs` readable and `dst + i * ld + j` writable for
/// `i, j < 16`, the two ranges not overlapping.
#[cfg(target_arch = "x86_64")]
unsafe fn tile16_4byte(src: *const f32, cs: usize, dst: *mut f32, ld: usize) {
    use std::arch::x86_64::*;
    // SAFETY: SSE is part of x86-64; the loads read src + i' + j' * cs
    // and the stores write dst + i' * ld + j' for i' = i + q < 16 and
    // j'..j' + 4 <= 16, all covered by the caller's contract, or the
    // same floats of the local 16 x 16 buffer (i' * 16 + j' < 256), whose
    // rows are then read back and stored at dst + r * ld + c for r < 16,
    // c..c + 4 <= 16, covered too; unaligned loads and stores take any
    // address.
    unsafe {
        // The 4 x 4 blocks into `to`, rows `step` floats apart.
        let blocks = |to: *mut f32, step: usize| {
            for j in (0..16).step_by(4) {
                for i in (0..16).step_by(4) {
                    let x: [__m128; 4] =
                        std::array::from_fn(|q| _mm_loadu_ps(src.add(i + (j + q) * cs)));
                    let t = super::util::transpose4x4(x);
                    for (q, tq) in t.into_iter().enumerate() {
                        _mm_storeu_ps(to.add((i + q) * step + j), tq);
                    }
                }
            }
        };
        if !ld.is_multiple_of(ALIASED) {
            blocks(dst, ld);
            return;
        }
        let mut buf = [0.0f32; 256];
        blocks(buf.as_mut_ptr(), 16);
        for (r, row) in buf.chunks_exact(16).enumerate() {
            for c in (0..16).step_by(4) {
                _mm_storeu_ps(dst.add(r * ld + c), _mm_loadu_ps(row.as_ptr().add(c)));
            }
        }
    }
}

/// Output rows this many floats apart (4 KiB) or a multiple of it fall
/// in one set of the first-level cache (see [`tile16_4byte`]).
#[cfg(target_arch = "x86_64")]
const ALIASED: usize = 1024;

fn transpose_t<T: Elem>(x: &Buf, d: &OperandDescriptor, perm: &[usize]) -> Result<Buf> {
    // Recycled memory: a fresh buffer per run costs page faults.
    let out = Buf::recycled(&T::wrap(Vec::new()), x.len())
        .and_then(T::unwrap)
        .unwrap_or_default();
    Ok(T::wrap(transpose_vec_into(
        out,
        typed::<T>(x)?,
        &d.shape,
        perm,
    )?))
}

/// `transpose`: output dimension `i` is input dimension `perm[i]`.
pub fn transpose(
    x: &Buf,
    d: &OperandDescriptor,
    perm: &[usize],
    out: &OperandDescriptor,
) -> Result<Buf> {
    check_len(x, d)?;
    let rank = d.rank();
    let mut seen = vec![false; rank];
    if perm.len() != rank
        || perm
            .iter()
            .any(|&p| p >= rank || std::mem::replace(&mut seen[p], true))
    {
        return Err(Error::operation("transpose got an invalid permutation"));
    }
    let r = dispatch!(x, transpose_t(x, d, perm))?;
    debug_assert_eq!(r.len(), out.element_count());
    Ok(r)
}

fn concat_t<T: Elem>(
    xs: &[&Buf],
    ds: &[&OperandDescriptor],
    axis: usize,
    out: &OperandDescriptor,
) -> Result<Buf> {
    let parts: Vec<&[T]> = xs.iter().map(|b| typed::<T>(b)).collect::<Result<_>>()?;
    // Each input is `outer` rows of one contiguous block of
    // `shape[axis] * inner` elements; the output interleaves those blocks.
    let outer: usize = out.shape[..axis].iter().product();
    let inner: usize = out.shape[axis + 1..].iter().product();
    let blocks: Vec<usize> = ds.iter().map(|d| d.shape[axis] * inner).collect();
    let mut v = try_vec(out.element_count(), "the output of concat")?;
    for o in 0..outer {
        for (p, &bl) in parts.iter().zip(&blocks) {
            v.extend_from_slice(&p[o * bl..(o + 1) * bl]);
        }
    }
    Ok(T::wrap(v))
}

/// `concat`: joins the inputs along `axis` (all other dimensions equal).
pub fn concat(
    xs: &[&Buf],
    ds: &[&OperandDescriptor],
    axis: usize,
    out: &OperandDescriptor,
) -> Result<Buf> {
    let first = xs
        .first()
        .ok_or_else(|| Error::operation("concat got no inputs"))?;
    if xs.len() != ds.len() || axis >= out.rank() {
        return Err(Error::operation("concat got inconsistent inputs"));
    }
    for (b, d) in xs.iter().zip(ds) {
        check_len(b, d)?;
        let same_outside = d.rank() == out.rank()
            && d.shape
                .iter()
                .zip(&out.shape)
                .enumerate()
                .all(|(i, (a, o))| i == axis || a == o);
        if !same_outside {
            return Err(Error::operation("concat got inputs of different shapes"));
        }
    }
    if ds.iter().map(|d| d.shape[axis]).sum::<usize>() != out.shape[axis] {
        return Err(Error::operation("concat sizes do not add up"));
    }
    dispatch!(first, concat_t(xs, ds, axis, out))
}

fn slice_t<T: Elem>(
    x: &Buf,
    d: &OperandDescriptor,
    starts: &[usize],
    steps: &[usize],
    out: &OperandDescriptor,
) -> Result<Buf> {
    let s = strides(&d.shape);
    let base: usize = starts.iter().zip(&s).map(|(a, b)| a * b).sum();
    let src: Vec<usize> = steps.iter().zip(&s).map(|(a, b)| a * b).collect();
    Ok(T::wrap(gather(typed::<T>(x)?, base, &out.shape, &src)?))
}

/// `slice`: output element `o` is input element `starts + o * strides`
/// (the output shape is already resolved in `out`).
pub fn slice(
    x: &Buf,
    d: &OperandDescriptor,
    starts: &[usize],
    strides: &[usize],
    out: &OperandDescriptor,
) -> Result<Buf> {
    check_len(x, d)?;
    let rank = d.rank();
    if starts.len() != rank || strides.len() != rank || out.rank() != rank {
        return Err(Error::operation("slice got parameters of the wrong rank"));
    }
    // Every read index must be inside the input (validation guarantees it;
    // checked here so a bad IR cannot make the kernel panic).
    for i in 0..rank {
        if out.shape[i] > 0 && starts[i] + (out.shape[i] - 1) * strides[i] >= d.shape[i] {
            return Err(Error::operation("slice reads outside the input"));
        }
    }
    dispatch!(x, slice_t(x, d, starts, strides, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::DataType;

    fn desc(dt: DataType, shape: &[usize]) -> OperandDescriptor {
        OperandDescriptor {
            data_type: dt,
            shape: shape.to_vec(),
        }
    }

    /// Unravels a flat index into a multi-index of `shape`.
    fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
        let mut idx = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = i % shape[d];
            i /= shape[d];
        }
        idx
    }

    fn ravel(idx: &[usize], shape: &[usize]) -> usize {
        idx.iter().zip(shape).fold(0, |acc, (&i, &s)| acc * s + i)
    }

    #[test]
    fn transpose_matches_naive() {
        for (shape, perm) in [
            (vec![2, 3, 4], vec![2, 0, 1]),
            (vec![5, 1, 3, 2], vec![3, 1, 0, 2]),
            (vec![7], vec![0]),
            (vec![], vec![]),
            (vec![3, 0, 2], vec![1, 2, 0]),
            // Batches of 2-D transposes with whole 16 x 16 tiles and
            // ragged ones (4-byte elements move 4 x 4 in registers).
            (vec![1, 40, 3, 36], vec![0, 2, 3, 1]),
            (vec![48, 35], vec![1, 0]),
            (vec![2, 33, 17], vec![0, 2, 1]),
            // Output rows 4 KiB apart and more (the tiles go through a
            // buffer), with a ragged edge of rows.
            (vec![1024, 35], vec![1, 0]),
            (vec![2, 2048, 18], vec![0, 2, 1]),
            // Output rows of one tile's width.
            (vec![16, 40], vec![1, 0]),
            // Axes merged before the transpose: NHWC to NCHW and back
            // (a tiled 2-D transpose per batch), runs kept whole with
            // axes of one element between them, and all of them one.
            (vec![2, 5, 7, 3], vec![0, 3, 1, 2]),
            (vec![2, 3, 5, 7], vec![0, 2, 3, 1]),
            (vec![4, 1, 6, 1, 5], vec![2, 1, 4, 0, 3]),
            (vec![3, 1, 4, 5], vec![0, 1, 2, 3]),
            (vec![1, 1, 1], vec![2, 0, 1]),
            (vec![6, 4, 2, 3], vec![2, 3, 0, 1]),
        ] {
            let n: usize = shape.iter().product();
            let x: Vec<i64> = (0..n as i64).map(|v| v * 3 - 7).collect();
            let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
            let mut expect = vec![0i64; n];
            for (i, e) in expect.iter_mut().enumerate() {
                let o = unravel(i, &out_shape);
                let mut src = vec![0; shape.len()];
                for (k, &p) in perm.iter().enumerate() {
                    src[p] = o[k];
                }
                *e = x[ravel(&src, &shape)];
            }
            let f32s = |v: &[i64]| Buf::F32(v.iter().map(|&a| a as f32).collect());
            let i32s = |v: &[i64]| Buf::I32(v.iter().map(|&a| a as i32).collect());
            for (xb, want, dt) in [
                (
                    Buf::I64(x.clone()),
                    Buf::I64(expect.clone()),
                    DataType::Int64,
                ),
                (f32s(&x), f32s(&expect), DataType::Float32),
                (i32s(&x), i32s(&expect), DataType::Int32),
            ] {
                let r = transpose(&xb, &desc(dt, &shape), &perm, &desc(dt, &out_shape)).unwrap();
                assert_eq!(r, want, "{shape:?} {perm:?} {dt:?}");
            }
        }
    }

    #[test]
    fn transpose_int4_storage() {
        let x = Buf::I8(vec![-8, 7, 1, 2, 3, 4]);
        let r = transpose(
            &x,
            &desc(DataType::Int4, &[2, 3]),
            &[1, 0],
            &desc(DataType::Int4, &[3, 2]),
        )
        .unwrap();
        assert_eq!(r, Buf::I8(vec![-8, 2, 7, 3, 1, 4]));
    }

    #[test]
    fn concat_matches_naive() {
        let a = Buf::F32((0..12).map(|v| v as f32).collect());
        let b = Buf::F32((100..106).map(|v| v as f32).collect());
        let (da, db) = (
            desc(DataType::Float32, &[2, 2, 3]),
            desc(DataType::Float32, &[2, 1, 3]),
        );
        let r = concat(
            &[&a, &b],
            &[&da, &db],
            1,
            &desc(DataType::Float32, &[2, 3, 3]),
        )
        .unwrap();
        let expect: Vec<f32> = [
            0, 1, 2, 3, 4, 5, 100, 101, 102, 6, 7, 8, 9, 10, 11, 103, 104, 105,
        ]
        .iter()
        .map(|&v| v as f32)
        .collect();
        assert_eq!(r, Buf::F32(expect));
        // Axis 0 and a zero-sized part.
        let e = Buf::U8(vec![]);
        let c = Buf::U8(vec![1, 2, 3]);
        let r = concat(
            &[&c, &e, &c],
            &[
                &desc(DataType::Uint8, &[1, 3]),
                &desc(DataType::Uint8, &[0, 3]),
                &desc(DataType::Uint8, &[1, 3]),
            ],
            0,
            &desc(DataType::Uint8, &[2, 3]),
        )
        .unwrap();
        assert_eq!(r, Buf::U8(vec![1, 2, 3, 1, 2, 3]));
        // Mixed storage is an error, not a panic.
        assert!(concat(
            &[&a, &c],
            &[&da, &da],
            0,
            &desc(DataType::Float32, &[4, 2, 3])
        )
        .is_err());
    }

    #[test]
    fn slice_matches_naive() {
        let shape = [4, 5, 6];
        let n = 120;
        let x: Vec<u16> = (0..n as u16).collect();
        let starts = [1, 0, 2];
        let steps = [2, 3, 1];
        let sizes = [3, 5, 4];
        let out_shape: Vec<usize> = sizes
            .iter()
            .zip(&steps)
            .map(|(z, s): (&usize, &usize)| z.div_ceil(*s))
            .collect();
        let r = slice(
            &Buf::F16(x.clone()),
            &desc(DataType::Float16, &shape),
            &starts,
            &steps,
            &desc(DataType::Float16, &out_shape),
        )
        .unwrap();
        let total: usize = out_shape.iter().product();
        let expect: Vec<u16> = (0..total)
            .map(|i| {
                let o = unravel(i, &out_shape);
                let src: Vec<usize> = (0..3).map(|d| starts[d] + o[d] * steps[d]).collect();
                x[ravel(&src, &shape)]
            })
            .collect();
        assert_eq!(r, Buf::F16(expect));
        // Out-of-range parameters are refused, not a panic.
        assert!(slice(
            &Buf::F16(x),
            &desc(DataType::Float16, &shape),
            &[3, 0, 0],
            &[2, 1, 1],
            &desc(DataType::Float16, &[2, 5, 6])
        )
        .is_err());
    }
}

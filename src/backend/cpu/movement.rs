//! CPU kernels: expand, pad, reverse, split, tile, triangular, resample2d.
//!
//! expand, pad, reverse, split, tile and nearest-neighbor resample2d are one
//! kernel, [`remap`]: each output coordinate of each dimension maps to an
//! input coordinate (or to the padding value), independently of the other
//! dimensions, so a table per dimension describes the whole operator. The
//! tables hold input offsets (coordinate times stride), and every read is
//! bounds-checked, so a wrong table can give wrong values but never a panic.
//! They work on the storage of any data type (int4/uint4 are unpacked, one
//! element per slot; float16 elements are copied as bit patterns).

use crate::error::{Error, Result};
use crate::graph::args::MlNumber;
use crate::graph::ops::movement::{MovementOp, PadMode};
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

use super::resample;
use super::util::{floats, from_floats, strides, try_vec as alloc};

/// How the coordinates of one output dimension map to input offsets
/// (coordinate times stride). Each costs what a dimension costs, not what
/// its elements cost: only nearest-neighbour resampling keeps a table (one
/// entry per output coordinate, allocated fallibly).
enum Axis {
    /// Coordinate `o` reads offset `base + o * step`: identity (`step` the
    /// stride), broadcast (`step` 0), reverse (negative `step`), split.
    Affine {
        len: usize,
        base: usize,
        step: isize,
    },
    /// Tile: coordinate `o` reads `(o % n) * s`.
    Wrap { len: usize, n: usize, s: usize },
    /// Pad: coordinate `o` reads `(o - p0) * s` inside `[p0, p0 + n)`, and
    /// outside it the padding value or a clamped or mirrored coordinate.
    Pad {
        len: usize,
        n: usize,
        p0: usize,
        s: usize,
        mode: PadMode,
    },
    /// Any other map, one offset per output coordinate.
    Table(Vec<usize>),
}

impl Axis {
    fn len(&self) -> usize {
        match self {
            Axis::Affine { len, .. } | Axis::Wrap { len, .. } | Axis::Pad { len, .. } => *len,
            Axis::Table(t) => t.len(),
        }
    }

    /// The input offset that output coordinate `o < len` reads; `None` is
    /// a padding element. Wrapping arithmetic: an offset out of range is
    /// caught by the bounds-checked read, never a panic.
    #[inline]
    fn at(&self, o: usize) -> Option<usize> {
        match *self {
            Axis::Affine { base, step, .. } => {
                Some(base.wrapping_add_signed((o as isize).wrapping_mul(step)))
            }
            Axis::Wrap { n, s, .. } => Some((o % n.max(1)).wrapping_mul(s)),
            Axis::Pad { n, p0, s, mode, .. } => mode.source(o, n, p0).map(|i| i.wrapping_mul(s)),
            Axis::Table(ref t) => t.get(o).copied(),
        }
    }
}

/// One [`Axis`] per output dimension.
type Tables = Vec<Axis>;

/// Applies `$f` (a generic function taking a typed slice and returning a
/// `Result<Vec<T>>` of the same element type) to the elements of a `Buf`,
/// wrapping the result in the same variant.
macro_rules! map_buf {
    ($buf:expr, $f:expr) => {
        match $buf {
            Buf::F32(v) => Buf::F32($f(v.as_slice())?),
            Buf::F16(v) => Buf::F16($f(v.as_slice())?),
            Buf::I32(v) => Buf::I32($f(v.as_slice())?),
            Buf::U32(v) => Buf::U32($f(v.as_slice())?),
            Buf::I64(v) => Buf::I64($f(v.as_slice())?),
            Buf::U64(v) => Buf::U64($f(v.as_slice())?),
            Buf::I8(v) => Buf::I8($f(v.as_slice())?),
            Buf::U8(v) => Buf::U8($f(v.as_slice())?),
        }
    };
}

/// Runs one operator of this family; returns one buffer per output.
pub fn run(
    op: &MovementOp,
    inputs: &[&Buf],
    in_descs: &[&OperandDescriptor],
    out_descs: &[OperandDescriptor],
) -> Result<Vec<Buf>> {
    let (x, xd) = match (inputs.first(), in_descs.first()) {
        (Some(x), Some(d)) => (*x, *d),
        _ => return Err(Error::operation(format!("{} needs an input", op.name()))),
    };
    if x.len() != xd.element_count() {
        return Err(Error::operation(format!(
            "{}: the input holds {} elements but its shape {:?} needs {}",
            op.name(),
            x.len(),
            xd.shape,
            xd.element_count()
        )));
    }
    let out = out_descs
        .first()
        .ok_or_else(|| Error::operation(format!("{} has no output", op.name())))?;
    if out.rank() != xd.rank() && !matches!(op, MovementOp::Expand) {
        return Err(Error::operation(format!(
            "{}: the output rank differs from the input rank",
            op.name()
        )));
    }
    let buf = match op {
        MovementOp::Expand => remap_buf(x, &expand_tables(&xd.shape, &out.shape)?, None)?,
        MovementOp::Pad {
            begin,
            end,
            mode,
            value,
        } => {
            let fill = fill_value(xd.data_type, *value)?;
            remap_buf(x, &pad_tables(&xd.shape, begin, end, *mode)?, Some(&fill))?
        }
        // Only the innermost axis (with any of size 1): each row reversed
        // where it lies (RoPE's pairs swap this way, [T, heads, 32, 2]).
        MovementOp::Reverse { axes }
            if axes.contains(&xd.rank().wrapping_sub(1))
                && axes
                    .iter()
                    .all(|&a| a + 1 == xd.rank() || xd.shape.get(a) == Some(&1)) =>
        {
            let n = xd.shape[xd.rank() - 1];
            map_buf!(x, |v: &[_]| reverse_rows(v, n))
        }
        MovementOp::Reverse { axes } => {
            let tables = per_dim(&xd.shape, |d, n, s| {
                Ok(if axes.contains(&d) {
                    Axis::Affine {
                        len: n,
                        base: n.saturating_sub(1) * s,
                        step: -(s as isize),
                    }
                } else {
                    identity(n, s)
                })
            })?;
            remap_buf(x, &tables, None)?
        }
        MovementOp::Tile { repetitions } => {
            let tables = per_dim(&xd.shape, |d, n, s| {
                let r = repetitions.get(d).copied().unwrap_or(1);
                let len = n
                    .checked_mul(r)
                    .ok_or_else(|| Error::operation("tile: the output size overflows"))?;
                Ok(if r == 1 {
                    identity(n, s)
                } else if n == 1 {
                    Axis::Affine {
                        len,
                        base: 0,
                        step: 0,
                    }
                } else {
                    Axis::Wrap { len, n, s }
                })
            })?;
            remap_buf(x, &tables, None)?
        }
        MovementOp::Triangular { upper, diagonal } => {
            map_buf!(x, |v| triangular(v, &xd.shape, *upper, *diagonal))
        }
        MovementOp::Resample2d { linear, axes } => {
            if *linear {
                let shapes = (&xd.shape[..], &out.shape[..]);
                match x {
                    Buf::I8(v) => {
                        Buf::I8(resample::linear_int(v, shapes, *axes, f32::from, |e| {
                            e.clamp(-128.0, 127.0) as i8
                        })?)
                    }
                    Buf::U8(v) => {
                        Buf::U8(resample::linear_int(v, shapes, *axes, f32::from, |e| {
                            e.clamp(0.0, 255.0) as u8
                        })?)
                    }
                    _ => {
                        let v = floats(x)?;
                        let r = resample::linear(&v, &xd.shape, &out.shape, *axes)?;
                        from_floats(xd.data_type, r)?
                    }
                }
            } else if let Some(r) = resample::nearest_buf(x, &xd.shape, &out.shape, *axes) {
                r?
            } else {
                let tables = per_dim(&xd.shape, |d, n, s| {
                    let m = out.shape.get(d).copied().unwrap_or(n);
                    Ok(if axes.contains(&d) {
                        let mut t = alloc(m, "a resample2d index table")?;
                        t.extend((0..m).map(|o| resample::nearest(n, m, o) * s));
                        Axis::Table(t)
                    } else {
                        identity(n, s)
                    })
                })?;
                remap_buf(x, &tables, None)?
            }
        }
        MovementOp::Split { axis, sizes } => return split(x, &xd.shape, *axis, sizes),
    };
    if buf.len() != out.element_count() {
        return Err(Error::operation(format!(
            "{} produced {} elements for the output shape {:?}",
            op.name(),
            buf.len(),
            out.shape
        )));
    }
    Ok(vec![buf])
}

/// Builds one [`Axis`] per input dimension from `f(dim, size, stride)`.
fn per_dim(shape: &[usize], f: impl Fn(usize, usize, usize) -> Result<Axis>) -> Result<Tables> {
    let st = strides(shape);
    shape
        .iter()
        .zip(&st)
        .enumerate()
        .map(|(d, (&n, &s))| f(d, n, s))
        .collect()
}

fn identity(n: usize, s: usize) -> Axis {
    Axis::Affine {
        len: n,
        base: 0,
        step: s as isize,
    }
}

/// Input aligned to the right of the output; size-1 (and missing leading)
/// dimensions are broadcast (stride 0).
fn expand_tables(in_shape: &[usize], out_shape: &[usize]) -> Result<Tables> {
    let off = out_shape
        .len()
        .checked_sub(in_shape.len())
        .ok_or_else(|| Error::operation("expand: the output rank is below the input rank"))?;
    let st = strides(in_shape);
    Ok(out_shape
        .iter()
        .enumerate()
        .map(|(d, &m)| {
            if d < off || in_shape[d - off] == 1 {
                Axis::Affine {
                    len: m,
                    base: 0,
                    step: 0,
                }
            } else {
                identity(m, st[d - off])
            }
        })
        .collect())
}

/// Output coordinate `o` of a padded dimension of size `n` reads input
/// coordinate `o - begin`, mirrored or clamped into `[0, n)` outside it.
fn pad_tables(shape: &[usize], begin: &[usize], end: &[usize], mode: PadMode) -> Result<Tables> {
    per_dim(shape, |d, n, s| {
        let (p0, p1) = (
            begin.get(d).copied().unwrap_or(0),
            end.get(d).copied().unwrap_or(0),
        );
        let len = n
            .checked_add(p0)
            .and_then(|l| l.checked_add(p1))
            .ok_or_else(|| Error::operation("pad: the output size overflows"))?;
        Ok(Axis::Pad {
            len,
            n,
            p0,
            s,
            mode,
        })
    })
}

/// The cast padding value as a one-element buffer of type `dt`.
fn fill_value(dt: DataType, v: MlNumber) -> Result<Buf> {
    let i = match v {
        MlNumber::BigInt(i) => i,
        MlNumber::Double(d) => d as i128,
    };
    let f = v.as_f64();
    Ok(match dt {
        DataType::Float32 => Buf::F32(vec![f as f32]),
        DataType::Float16 => Buf::f16_from_f32(&[f as f32]),
        DataType::Int32 => Buf::I32(vec![i as i32]),
        DataType::Uint32 => Buf::U32(vec![i as u32]),
        DataType::Int64 => Buf::I64(vec![i as i64]),
        DataType::Uint64 => Buf::U64(vec![i as u64]),
        DataType::Int8 | DataType::Int4 => Buf::I8(vec![i as i8]),
        DataType::Uint8 | DataType::Uint4 => Buf::U8(vec![i as u8]),
    })
}

/// [`remap`] on any storage; `fill` (of the same variant) is required when
/// a table has padding entries.
fn remap_buf(x: &Buf, tables: &Tables, fill: Option<&Buf>) -> Result<Buf> {
    macro_rules! go {
        ($($variant:ident),*) => {
            match x {
                $(Buf::$variant(v) => {
                    let fill = match fill {
                        Some(Buf::$variant(f)) => f.first().copied(),
                        Some(_) => {
                            return Err(Error::operation("the padding value has another type"))
                        }
                        None => None,
                    };
                    Buf::$variant(remap(v, tables, fill)?)
                })*
            }
        };
    }
    Ok(go!(F32, F16, I32, U32, I64, U64, I8, U8))
}

/// Output element at multi-index `o` is `x[sum(tables[d].at(o[d]))]`, or
/// `fill` when any is `None`. The innermost dimension is a slice copy where
/// the map is contiguous, else a tight strided loop.
fn remap<T: Copy + Default>(x: &[T], tables: &Tables, fill: Option<T>) -> Result<Vec<T>> {
    let total = tables
        .iter()
        .try_fold(1usize, |acc, t| acc.checked_mul(t.len()))
        .ok_or_else(|| Error::operation("the output element count overflows"))?;
    let mut out = alloc(total, "the output")?;
    if total == 0 {
        return Ok(out);
    }
    let fill = fill.unwrap_or_default();
    let Some((inner, outer)) = tables.split_last() else {
        out.push(x.first().copied().unwrap_or(fill));
        return Ok(out);
    };
    let mut idx = [0usize; MAX_RANK];
    let idx = idx
        .get_mut(..outer.len())
        .ok_or_else(|| Error::operation("the rank is above the supported maximum"))?;
    loop {
        let base = idx
            .iter()
            .zip(outer)
            .try_fold(0usize, |acc, (&i, t)| Some(acc.wrapping_add(t.at(i)?)));
        match base {
            None => out.extend(std::iter::repeat_n(fill, inner.len())),
            Some(b) => row(&mut out, x, b, inner, fill),
        }
        // Advance the odometer over the outer dimensions.
        let mut d = outer.len();
        loop {
            if d == 0 {
                return Ok(out);
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < outer[d].len() {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// The highest rank [`remap`] walks (WebNN implementations cap ranks far
/// below this).
const MAX_RANK: usize = 64;

/// Appends one output row, the innermost dimension `ax` read from offset `b`.
#[inline]
fn row<T: Copy>(out: &mut Vec<T>, x: &[T], b: usize, ax: &Axis, fill: T) {
    let read = |off: usize| x.get(off).copied().unwrap_or(fill);
    let span = |start: usize, n: usize| x.get(start..start.checked_add(n)?);
    match *ax {
        Axis::Affine { len, base, step: 1 } => match span(b.wrapping_add(base), len) {
            Some(src) => out.extend_from_slice(src),
            None => out.extend((0..len).map(|o| read(b.wrapping_add(base).wrapping_add(o)))),
        },
        Axis::Affine { len, base, step: 0 } => {
            out.extend(std::iter::repeat_n(read(b.wrapping_add(base)), len))
        }
        Axis::Wrap { len, n, s: 1 } if n > 0 && len % n == 0 => match span(b, n) {
            Some(src) => (0..len / n).for_each(|_| out.extend_from_slice(src)),
            None => out.extend((0..len).map(|o| read(b.wrapping_add(o % n)))),
        },
        Axis::Pad {
            len, n, p0, s: 1, ..
        } if p0.checked_add(n).is_some_and(|e| e <= len) => {
            out.extend((0..p0).map(|o| ax.at(o).map_or(fill, |off| read(b.wrapping_add(off)))));
            match span(b, n) {
                Some(src) => out.extend_from_slice(src),
                None => out.extend((0..n).map(|i| read(b.wrapping_add(i)))),
            }
            out.extend(
                (p0 + n..len).map(|o| ax.at(o).map_or(fill, |off| read(b.wrapping_add(off)))),
            );
        }
        _ => out
            .extend((0..ax.len()).map(|o| ax.at(o).map_or(fill, |off| read(b.wrapping_add(off))))),
    }
}

/// Consecutive pieces of `sizes[i]` along `axis`.
fn split(x: &Buf, shape: &[usize], axis: usize, sizes: &[usize]) -> Result<Vec<Buf>> {
    let mut start = 0;
    let mut outs = alloc(sizes.len(), "the outputs of split")?;
    for &size in sizes {
        let tables = per_dim(shape, |d, n, s| {
            Ok(if d == axis {
                Axis::Affine {
                    len: size,
                    base: start * s,
                    step: s as isize,
                }
            } else {
                identity(n, s)
            })
        })?;
        outs.push(remap_buf(x, &tables, None)?);
        start += size;
    }
    if shape.get(axis) != Some(&start) {
        return Err(Error::operation(
            "split: the sizes do not add up to the axis",
        ));
    }
    Ok(outs)
}

/// Zeroes the elements of each matrix (last two dimensions) outside the
/// kept triangle: column - row >= diagonal (upper) or <= diagonal (lower).
/// `x` with each row of `n` reversed.
fn reverse_rows<T: Copy>(x: &[T], n: usize) -> Result<Vec<T>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut out = alloc(x.len(), "the output of reverse")?;
    let Some(&first) = x.first() else {
        return Ok(out);
    };
    // Filled, then written row by row: extending by each reversed row took
    // a length check per row, most of the time for short rows (RoPE's
    // pairs: rows of 2).
    out.resize(x.len(), first);
    if n == 2 {
        // Pairs swapped: a loop the compiler turns into shuffles.
        for (o, p) in out.chunks_exact_mut(2).zip(x.chunks_exact(2)) {
            o[0] = p[1];
            o[1] = p[0];
        }
        return Ok(out);
    }
    for (o, row) in out.chunks_exact_mut(n).zip(x.chunks_exact(n)) {
        for (d, &v) in o.iter_mut().zip(row.iter().rev()) {
            *d = v;
        }
    }
    Ok(out)
}

fn triangular<T: Copy + Default>(
    x: &[T],
    shape: &[usize],
    upper: bool,
    diagonal: i64,
) -> Result<Vec<T>> {
    let r = shape.len();
    let (rows, cols) = match (r.checked_sub(2), r.checked_sub(1)) {
        (Some(a), Some(b)) => (shape[a], shape[b]),
        _ => return Err(Error::operation("triangular needs rank 2 or more")),
    };
    let mut out = alloc(x.len(), "the output of triangular")?;
    out.extend_from_slice(x);
    if rows == 0 || cols == 0 {
        return Ok(out);
    }
    for (k, row) in out.chunks_mut(cols).enumerate() {
        let i = (k % rows) as i64;
        for (j, v) in row.iter_mut().enumerate() {
            let d = j as i64 - i;
            let keep = if upper { d >= diagonal } else { d <= diagonal };
            if !keep {
                *v = T::default();
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::simd::{levels, pool_at};
    use crate::f16::f32_to_f16;

    fn desc(dt: DataType, shape: &[usize]) -> OperandDescriptor {
        OperandDescriptor::new(dt, shape.to_vec()).unwrap()
    }

    fn count(shape: &[usize]) -> usize {
        shape.iter().product()
    }

    /// The multi-index of flat index `i` in `shape`.
    fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
        let mut idx = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = i % shape[d];
            i /= shape[d];
        }
        idx
    }

    fn ravel(idx: &[usize], shape: &[usize]) -> usize {
        idx.iter().zip(shape).fold(0, |acc, (&i, &n)| acc * n + i)
    }

    /// A buffer of `dt` holding small distinct-ish values derived from the
    /// flat index.
    fn sample(dt: DataType, n: usize) -> Buf {
        let v = |i: usize| ((i * 7 + 3) % 23) as i64 - 11;
        match dt {
            DataType::Float32 => Buf::F32((0..n).map(|i| v(i) as f32 * 0.25).collect()),
            DataType::Float16 => Buf::F16((0..n).map(|i| f32_to_f16(v(i) as f32 * 0.5)).collect()),
            DataType::Int32 => Buf::I32((0..n).map(|i| v(i) as i32).collect()),
            DataType::Uint32 => Buf::U32((0..n).map(|i| v(i).unsigned_abs() as u32).collect()),
            DataType::Int64 => Buf::I64((0..n).map(|i| v(i) * 1_000_000_007).collect()),
            DataType::Uint64 => Buf::U64((0..n).map(|i| v(i).unsigned_abs() << 40).collect()),
            DataType::Int8 => Buf::I8((0..n).map(|i| v(i) as i8).collect()),
            DataType::Uint8 => Buf::U8((0..n).map(|i| v(i).unsigned_abs() as u8 * 9).collect()),
            DataType::Int4 => Buf::I8((0..n).map(|i| (v(i) % 8) as i8).collect()),
            DataType::Uint4 => Buf::U8((0..n).map(|i| (v(i).unsigned_abs() % 16) as u8).collect()),
        }
    }

    /// Builds the expected buffer element by element: `src(out_index)` is
    /// the flat input index to copy, or `None` for `fill`.
    fn naive(
        x: &Buf,
        out_shape: &[usize],
        fill: Option<&Buf>,
        src: impl Fn(&[usize]) -> Option<usize>,
    ) -> Buf {
        macro_rules! go {
            ($($variant:ident),*) => {
                match x {
                    $(Buf::$variant(v) => {
                        let f = match fill {
                            Some(Buf::$variant(f)) => f[0],
                            _ => Default::default(),
                        };
                        Buf::$variant(
                            (0..count(out_shape))
                                .map(|i| match src(&unravel(i, out_shape)) {
                                    Some(j) => v[j],
                                    None => f,
                                })
                                .collect(),
                        )
                    })*
                }
            };
        }
        go!(F32, F16, I32, U32, I64, U64, I8, U8)
    }

    fn run1(op: &MovementOp, x: &Buf, xd: &OperandDescriptor, out: &OperandDescriptor) -> Buf {
        let mut r = run(op, &[x], &[xd], std::slice::from_ref(out)).unwrap();
        assert_eq!(r.len(), 1);
        r.pop().unwrap()
    }

    #[test]
    fn expand_matches_reference() {
        for (dt, from, to) in [
            (DataType::Int32, vec![3, 1, 5], vec![2, 3, 4, 5]),
            (DataType::Float16, vec![], vec![3, 2]),
            (DataType::Uint4, vec![1, 7], vec![3, 7]),
            (DataType::Int64, vec![1, 1], vec![2, 3, 1, 5]),
        ] {
            let xd = desc(dt, &from);
            let x = sample(dt, count(&from));
            let out = desc(dt, &to);
            let got = run1(&MovementOp::Expand, &x, &xd, &out);
            let off = to.len() - from.len();
            let want = naive(&x, &to, None, |o| {
                let idx: Vec<usize> = (0..from.len())
                    .map(|d| if from[d] == 1 { 0 } else { o[d + off] })
                    .collect();
                Some(ravel(&idx, &from))
            });
            assert_eq!(got, want, "{dt:?} {from:?} -> {to:?}");
        }
    }

    /// Mirrors `i` into [0, n) by bouncing off the ends, one step at a time.
    fn bounce(mut i: i64, n: i64) -> i64 {
        loop {
            if i < 0 {
                i = -i;
            } else if i >= n {
                i = 2 * (n - 1) - i;
            } else {
                return i;
            }
        }
    }

    #[test]
    fn pad_matches_reference() {
        let modes = [PadMode::Constant, PadMode::Edge, PadMode::Reflection];
        for dt in [
            DataType::Float32,
            DataType::Float16,
            DataType::Int64,
            DataType::Uint8,
            DataType::Int4,
        ] {
            for mode in modes {
                let shape = [3, 4, 1];
                let (begin, end) = match mode {
                    PadMode::Reflection => (vec![2, 0, 0], vec![1, 3, 0]),
                    _ => (vec![4, 0, 2], vec![1, 5, 1]),
                };
                let out_shape: Vec<usize> = (0..3).map(|d| shape[d] + begin[d] + end[d]).collect();
                let value = if dt.is_float() {
                    MlNumber::Double(-1.5)
                } else {
                    MlNumber::BigInt(5)
                };
                let op = MovementOp::Pad {
                    begin: begin.clone(),
                    end: end.clone(),
                    mode,
                    value,
                };
                let x = sample(dt, count(&shape));
                let got = run1(&op, &x, &desc(dt, &shape), &desc(dt, &out_shape));
                let fill = fill_value(dt, value).unwrap();
                let want = naive(&x, &out_shape, Some(&fill), |o| {
                    let mut idx = vec![0; 3];
                    for d in 0..3 {
                        let i = o[d] as i64 - begin[d] as i64;
                        let n = shape[d] as i64;
                        idx[d] = match mode {
                            _ if (0..n).contains(&i) => i,
                            PadMode::Constant => return None,
                            PadMode::Edge => i.clamp(0, n - 1),
                            PadMode::Reflection => bounce(i, n),
                        } as usize;
                    }
                    Some(ravel(&idx, &shape))
                });
                assert_eq!(got, want, "{dt:?} {mode:?}");
            }
        }
        // The fill value keeps float16 precision and integer types.
        assert_eq!(
            fill_value(DataType::Float16, MlNumber::Double(0.5)).unwrap(),
            Buf::F16(vec![0x3800])
        );
        assert_eq!(
            fill_value(DataType::Uint64, MlNumber::BigInt(u64::MAX as i128)).unwrap(),
            Buf::U64(vec![u64::MAX])
        );
    }

    #[test]
    fn reverse_of_pairs_swaps_them() {
        // The last axis of 2 (RoPE's pairs) takes its own loop.
        let shape = [3, 4, 2];
        for dt in [DataType::Float32, DataType::Float16, DataType::Int64] {
            let x = sample(dt, count(&shape));
            let xd = desc(dt, &shape);
            let got = run1(&MovementOp::Reverse { axes: vec![2] }, &x, &xd, &xd);
            let want = naive(&x, &shape, None, |o| {
                Some(ravel(&[o[0], o[1], 1 - o[2]], &shape))
            });
            assert_eq!(got, want, "reverse {dt:?}");
        }
    }

    #[test]
    fn reverse_tile_split_match_reference() {
        let shape = [2, 3, 5];
        for dt in [DataType::Uint8, DataType::Float16, DataType::Int64] {
            let x = sample(dt, count(&shape));
            let xd = desc(dt, &shape);
            for axes in [vec![], vec![0, 2], vec![2, 1, 0], vec![1], vec![2]] {
                let got = run1(&MovementOp::Reverse { axes: axes.clone() }, &x, &xd, &xd);
                let want = naive(&x, &shape, None, |o| {
                    let idx: Vec<usize> = (0..3)
                        .map(|d| {
                            if axes.contains(&d) {
                                shape[d] - 1 - o[d]
                            } else {
                                o[d]
                            }
                        })
                        .collect();
                    Some(ravel(&idx, &shape))
                });
                assert_eq!(got, want, "reverse {dt:?} {axes:?}");
            }

            let reps = [3, 1, 2];
            let out_shape: Vec<usize> = (0..3).map(|d| shape[d] * reps[d]).collect();
            let got = run1(
                &MovementOp::Tile {
                    repetitions: reps.to_vec(),
                },
                &x,
                &xd,
                &desc(dt, &out_shape),
            );
            let want = naive(&x, &out_shape, None, |o| {
                let idx: Vec<usize> = (0..3).map(|d| o[d] % shape[d]).collect();
                Some(ravel(&idx, &shape))
            });
            assert_eq!(got, want, "tile {dt:?}");

            let sizes = vec![1, 3, 1];
            let outs: Vec<OperandDescriptor> =
                sizes.iter().map(|&s| desc(dt, &[2, 3, s])).collect();
            let got = run(
                &MovementOp::Split {
                    axis: 2,
                    sizes: sizes.clone(),
                },
                &[&x],
                &[&xd],
                &outs,
            )
            .unwrap();
            assert_eq!(got.len(), 3);
            let mut start = 0;
            for (g, &s) in got.iter().zip(&sizes) {
                let want = naive(&x, &[2, 3, s], None, |o| {
                    Some(ravel(&[o[0], o[1], o[2] + start], &shape))
                });
                assert_eq!(g, &want, "split {dt:?} piece at {start}");
                start += s;
            }
        }
        // A scalar reverses and tiles to itself.
        let x = Buf::I32(vec![42]);
        let d = desc(DataType::Int32, &[]);
        assert_eq!(run1(&MovementOp::Reverse { axes: vec![] }, &x, &d, &d), x);
        assert_eq!(
            run1(
                &MovementOp::Tile {
                    repetitions: vec![]
                },
                &x,
                &d,
                &d
            ),
            x
        );
    }

    #[test]
    fn triangular_matches_reference() {
        let shape = [2, 3, 4];
        for dt in [
            DataType::Float32,
            DataType::Float16,
            DataType::Int8,
            DataType::Uint64,
        ] {
            let x = sample(dt, count(&shape));
            let xd = desc(dt, &shape);
            for upper in [true, false] {
                for diagonal in [-4, -1, 0, 1, 2, 5, i32::MIN as i64, i32::MAX as i64] {
                    let op = MovementOp::Triangular { upper, diagonal };
                    let got = run1(&op, &x, &xd, &xd);
                    let want = naive(&x, &shape, None, |o| {
                        let (i, j) = (o[1] as i64, o[2] as i64);
                        let keep = if upper {
                            j >= i + diagonal
                        } else {
                            j <= i + diagonal
                        };
                        keep.then(|| ravel(o, &shape))
                    });
                    assert_eq!(got, want, "{dt:?} upper={upper} diagonal={diagonal}");
                }
            }
        }
    }

    /// The spec's formulas, written out directly for a 4-D input.
    fn resample_reference(
        x: &[f32],
        s: &[usize],
        o_shape: &[usize],
        axes: [usize; 2],
        linear: bool,
    ) -> Vec<f32> {
        let coord = |d: usize, o: usize| {
            let scale = o_shape[d] as f64 / s[d] as f64;
            ((o as f64 + 0.5) / scale - 0.5).clamp(0.0, (s[d] - 1) as f64)
        };
        let at = |idx: &[usize]| x[ravel(idx, s)] as f64;
        (0..count(o_shape))
            .map(|i| {
                let o = unravel(i, o_shape);
                let (cy, cx) = (coord(axes[0], o[axes[0]]), coord(axes[1], o[axes[1]]));
                let mut idx = o.clone();
                if !linear {
                    idx[axes[0]] = (cy - 0.5).ceil().max(0.0) as usize;
                    idx[axes[1]] = (cx - 0.5).ceil().max(0.0) as usize;
                    return at(&idx) as f32;
                }
                let (y0, y1, x0, x1) = (cy.floor(), cy.ceil(), cx.floor(), cx.ceil());
                let v = |yy: f64, xx: f64| {
                    let mut k = o.clone();
                    k[axes[0]] = yy as usize;
                    k[axes[1]] = xx as usize;
                    at(&k)
                };
                let (tx, ty) = (cx - x0, cy - y0);
                let vy0 = v(y0, x0) * (1.0 - tx) + v(y0, x1) * tx;
                let vy1 = v(y1, x0) * (1.0 - tx) + v(y1, x1) * tx;
                (vy0 * (1.0 - ty) + vy1 * ty) as f32
            })
            .collect()
    }

    #[test]
    fn resample2d_matches_reference() {
        let shape = [2, 3, 4, 5];
        let cases: [([usize; 2], [usize; 2]); 5] = [
            ([2, 3], [7, 11]),
            ([2, 3], [3, 2]),
            ([3, 2], [1, 9]),
            ([1, 0], [5, 1]),
            ([0, 3], [3, 5]),
        ];
        for (axes, sizes) in cases {
            let mut out_shape = shape.to_vec();
            out_shape[axes[0]] = sizes[0];
            out_shape[axes[1]] = sizes[1];
            for linear in [false, true] {
                for dt in [DataType::Float32, DataType::Float16] {
                    let x = sample(dt, count(&shape));
                    let xf = x.to_f32_vec();
                    let op = MovementOp::Resample2d { linear, axes };
                    let got = run1(&op, &x, &desc(dt, &shape), &desc(dt, &out_shape));
                    let want = from_floats(
                        dt,
                        resample_reference(&xf, &shape, &out_shape, axes, linear),
                    )
                    .unwrap();
                    assert_eq!(
                        got, want,
                        "{dt:?} axes={axes:?} sizes={sizes:?} linear={linear}"
                    );
                }
            }
        }
        // The spec's example: 4x4 -> 8x8 linear, second row of pairs.
        let x: Vec<f32> = [
            0., 1., 2., 3., 0., 1., 2., 3., 12., 13., 14., 15., 12., 13., 14., 15.,
        ]
        .to_vec();
        let got = run1(
            &MovementOp::Resample2d {
                linear: true,
                axes: [2, 3],
            },
            &Buf::F32(x),
            &desc(DataType::Float32, &[1, 1, 4, 4]),
            &desc(DataType::Float32, &[1, 1, 8, 8]),
        );
        let Buf::F32(v) = got else { panic!() };
        assert_eq!(&v[0..8], &[0.0, 0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3.0]);
        assert_eq!(&v[24..32], &[3.0, 3.25, 3.75, 4.25, 4.75, 5.25, 5.75, 6.0]);
        assert_eq!(
            &v[32..40],
            &[9.0, 9.25, 9.75, 10.25, 10.75, 11.25, 11.75, 12.0]
        );
    }

    /// The row kernels (adjacent increasing axes: nchw, nhwc, rank 2 and
    /// 3) give the reference's bits, for every element type: up and down,
    /// rows longer than a strip, columns of more elements than a strip,
    /// and outputs split across a pool of three threads, at every vector
    /// width this CPU has.
    #[test]
    fn resample2d_rows_give_the_reference_bits() {
        let cases: [(&[usize], [usize; 2], [usize; 2]); 8] = [
            (&[2, 4, 64, 80], [2, 3], [130, 161]),
            (&[2, 3, 37, 41], [2, 3], [11, 7]),
            (&[1, 29, 20, 30], [1, 2], [61, 77]),
            (&[1, 9, 13, 600], [1, 2], [20, 5]),
            (&[3, 50, 70], [0, 1], [101, 33]),
            (&[300, 400], [0, 1], [300, 401]),
            (&[5, 1, 1], [1, 2], [4, 3]),
            (&[2, 6, 9, 2], [1, 2], [6, 9]),
        ];
        for level in levels() {
            let pool = pool_at(level, 3);
            for (shape, axes, sizes) in cases {
                let mut out_shape = shape.to_vec();
                out_shape[axes[0]] = sizes[0];
                out_shape[axes[1]] = sizes[1];
                let n = count(shape);
                let wide: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 9.0).collect();
                for dt in [
                    DataType::Float32,
                    DataType::Float16,
                    DataType::Int64,
                    DataType::Uint8,
                    DataType::Int8,
                ] {
                    let x = match dt {
                        DataType::Float32 => Buf::F32(wide.clone()),
                        DataType::Float16 => {
                            Buf::F16(wide.iter().map(|&v| f32_to_f16(v)).collect())
                        }
                        DataType::Int8 => Buf::I8(wide.iter().map(|&v| (v * 14.0) as i8).collect()),
                        _ => sample(dt, n),
                    };
                    assert!(resample::nearest_buf(&x, shape, &out_shape, axes).is_some());
                    for linear in [false, true] {
                        if linear && dt == DataType::Int64 {
                            continue;
                        }
                        let op = MovementOp::Resample2d { linear, axes };
                        let got =
                            pool.install(|| run1(&op, &x, &desc(dt, shape), &desc(dt, &out_shape)));
                        let want = if linear {
                            let r =
                                resample_reference(&x.to_f32_vec(), shape, &out_shape, axes, true);
                            match dt {
                                DataType::Int8 => Buf::I8(
                                    r.iter()
                                        .map(|e| e.round_ties_even().clamp(-128.0, 127.0) as i8)
                                        .collect(),
                                ),
                                DataType::Uint8 => Buf::U8(
                                    r.iter()
                                        .map(|e| e.round_ties_even().clamp(0.0, 255.0) as u8)
                                        .collect(),
                                ),
                                _ => from_floats(dt, r).unwrap(),
                            }
                        } else {
                            let near = |d: usize, o: usize| {
                                let scale = out_shape[d] as f64 / shape[d] as f64;
                                let c = ((o as f64 + 0.5) / scale - 0.5)
                                    .clamp(0.0, (shape[d] - 1) as f64);
                                (c - 0.5).ceil().max(0.0) as usize
                            };
                            naive(&x, &out_shape, None, |o| {
                                let mut i = o.to_vec();
                                i[axes[0]] = near(axes[0], o[axes[0]]);
                                i[axes[1]] = near(axes[1], o[axes[1]]);
                                Some(ravel(&i, shape))
                            })
                        };
                        assert!(
                        got == want,
                        "{dt:?} {shape:?} axes={axes:?} sizes={sizes:?} linear={linear} at {level:?}"
                    );
                    }
                }
            }
        }
    }

    #[test]
    fn bad_inputs_are_errors_not_panics() {
        let x = Buf::F32(vec![1.0, 2.0]);
        let d3 = desc(DataType::Float32, &[3]);
        assert!(run(
            &MovementOp::Reverse { axes: vec![0] },
            &[&x],
            &[&d3],
            std::slice::from_ref(&d3)
        )
        .is_err());
        assert!(run(&MovementOp::Expand, &[], &[], std::slice::from_ref(&d3)).is_err());
        let d2 = desc(DataType::Float32, &[2]);
        assert!(run(
            &MovementOp::Triangular {
                upper: true,
                diagonal: 0
            },
            &[&x],
            &[&d2],
            std::slice::from_ref(&d2)
        )
        .is_err());
        assert!(run(
            &MovementOp::Split {
                axis: 0,
                sizes: vec![1]
            },
            &[&x],
            &[&d2],
            std::slice::from_ref(&d2)
        )
        .is_err());
    }

    #[test]
    fn huge_outputs_are_errors_that_name_the_bytes() {
        // Shapes past the descriptor's limits, built directly: the tables
        // cost nothing per element, and the output allocation fails
        // fallibly (no abort) with the bytes in the message.
        let huge = 1usize << 61;
        let x = Buf::F32(vec![1.0]);
        let xd = desc(DataType::Float32, &[1]);
        let out = OperandDescriptor {
            data_type: DataType::Float32,
            shape: vec![huge],
        };
        let ops = [
            MovementOp::Expand,
            MovementOp::Tile {
                repetitions: vec![huge],
            },
            MovementOp::Pad {
                begin: vec![0],
                end: vec![huge - 1],
                mode: PadMode::Edge,
                value: MlNumber::Double(0.0),
            },
            MovementOp::Pad {
                begin: vec![huge - 1],
                end: vec![0],
                mode: PadMode::Constant,
                value: MlNumber::Double(0.0),
            },
        ];
        for op in &ops {
            let e = run(op, &[&x], &[&xd], std::slice::from_ref(&out)).unwrap_err();
            assert!(
                e.message
                    .contains(&format!("cannot allocate {} bytes", (huge as u128) * 4)),
                "{}: {}",
                op.name(),
                e.message
            );
        }
    }

    #[test]
    fn tables_cost_what_the_dimensions_cost() {
        // A broadcast dimension is stride 0, never a table.
        let t = expand_tables(&[1, 3], &[i32::MAX as usize, 3]).unwrap();
        assert!(matches!(t[0], Axis::Affine { step: 0, .. }));
        assert!(matches!(t[1], Axis::Affine { step: 1, .. }));
        let t = pad_tables(&[4], &[1 << 40], &[1 << 40], PadMode::Reflection).unwrap();
        assert_eq!(t[0].len(), (1 << 41) + 4);
    }
}

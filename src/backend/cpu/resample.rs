//! CPU kernel: resample2d.
//!
//! Over two adjacent axes in increasing order (nchw's `[2, 3]`, nhwc's
//! `[1, 2]`: what models and converters write) the input is `outer`
//! planes of `h_in` rows of `w_in * inner` elements, and each output row
//! comes from one input row (nearest neighbour) or two (linear), so the
//! kernels work a row at a time, rows split across the pool:
//! - nearest: an output row is its input row gathered by a column table
//!   (`inner` elements per column); the next output rows that read the
//!   same input row copy the first.
//! - linear: the spec's `vy0` and `vy1` are horizontal interpolations of
//!   input rows `y0` and `y1`. Each is computed once per input row, in
//!   strips that stay in L1 and are kept while the following output rows
//!   need them, and an output row is their vertical interpolation, a loop
//!   that vectorises. The arithmetic is the spec's formula in f64, in its
//!   order, rounded once to f32: the bits of evaluating each output alone
//!   (which [`linear_general`] does, for other axes).
//!
//! Nearest neighbour over other axes goes through the movement module's
//! remap tables.

use std::mem::MaybeUninit;

use crate::error::{Error, Result};
use crate::tensor::Buf;

use super::elementwise::try_build_rows;
use super::util::{strides, try_vec as alloc};

/// The spec's half-pixel input coordinate of output coordinate `o` when a
/// dimension of size `n` is resampled to `m`, clamped to `[0, n - 1]`.
fn source_coordinate(n: usize, m: usize, o: usize) -> f64 {
    let scale = m as f64 / n as f64;
    let c = (o as f64 + 0.5) / scale - 0.5;
    c.clamp(0.0, n.saturating_sub(1) as f64)
}

/// Nearest neighbour: `ceil(coordinate - 0.5)`, so halves round down.
pub(super) fn nearest(n: usize, m: usize, o: usize) -> usize {
    let c = (source_coordinate(n, m, o) - 0.5).ceil().max(0.0) as usize;
    c.min(n.saturating_sub(1))
}

/// A resampling over adjacent axes `a, a + 1` as rows: `outer` planes
/// (the dimensions before `a`), `h_in` rows of `w_in` columns of `inner`
/// elements (the dimensions after `a + 1`) each, to `h_out` by `w_out`.
#[derive(Clone, Copy, Debug)]
struct Plan {
    outer: usize,
    h_in: usize,
    w_in: usize,
    h_out: usize,
    w_out: usize,
    inner: usize,
}

impl Plan {
    /// The plan for `axes`, or None where they are not adjacent and
    /// increasing, the shapes differ off them, the input is empty or a
    /// count overflows (those take the general walks).
    fn of(in_shape: &[usize], out_shape: &[usize], axes: [usize; 2]) -> Option<Plan> {
        let [a, b] = axes;
        if b != a.checked_add(1)? || b >= in_shape.len() || out_shape.len() != in_shape.len() {
            return None;
        }
        let same_elsewhere = in_shape
            .iter()
            .zip(out_shape)
            .enumerate()
            .all(|(d, (i, o))| d == a || d == b || i == o);
        if !same_elsewhere || in_shape[a] == 0 || in_shape[b] == 0 {
            return None;
        }
        let product = |s: &[usize]| s.iter().try_fold(1usize, |acc, &n| acc.checked_mul(n));
        let plan = Plan {
            outer: product(&in_shape[..a])?,
            h_in: in_shape[a],
            w_in: in_shape[b],
            h_out: out_shape[a],
            w_out: out_shape[b],
            inner: product(&in_shape[b + 1..])?,
        };
        // Every count the kernels form, checked once here.
        plan.input_len()?;
        plan.output_len()?;
        Some(plan)
    }

    fn input_len(&self) -> Option<usize> {
        self.outer
            .checked_mul(self.h_in)?
            .checked_mul(self.w_in)?
            .checked_mul(self.inner)
    }

    fn output_len(&self) -> Option<usize> {
        self.outer
            .checked_mul(self.h_out)?
            .checked_mul(self.w_out)?
            .checked_mul(self.inner)
    }

    /// Elements in one input row and in one output row.
    fn rows(&self) -> (usize, usize) {
        (self.w_in * self.inner, self.w_out * self.inner)
    }

    /// The input length checked against the plan, and the output's.
    fn lengths(&self, x: usize) -> Result<usize> {
        match (self.input_len(), self.output_len()) {
            (Some(n), Some(total)) if n == x => Ok(total),
            _ => Err(Error::operation(
                "resample2d: the input does not have its shape's elements",
            )),
        }
    }

    /// The input row (plane times `h_in` plus row) that output row `r`
    /// (plane times `h_out` plus row) reads at input row `y` of its plane.
    fn source(&self, r: usize, y: usize) -> usize {
        (r / self.h_out) * self.h_in + y
    }
}

/// Nearest-neighbour resampling of `x` (any element type: the values
/// are copied) when `axes` are adjacent and increasing; None otherwise.
pub(super) fn nearest_buf(
    x: &Buf,
    in_shape: &[usize],
    out_shape: &[usize],
    axes: [usize; 2],
) -> Option<Result<Buf>> {
    let p = Plan::of(in_shape, out_shape, axes)?;
    Some(match x {
        Buf::F32(v) => nearest_rows(v, &p).map(Buf::F32),
        Buf::F16(v) => nearest_rows(v, &p).map(Buf::F16),
        Buf::I32(v) => nearest_rows(v, &p).map(Buf::I32),
        Buf::U32(v) => nearest_rows(v, &p).map(Buf::U32),
        Buf::I64(v) => nearest_rows(v, &p).map(Buf::I64),
        Buf::U64(v) => nearest_rows(v, &p).map(Buf::U64),
        Buf::I8(v) => nearest_rows(v, &p).map(Buf::I8),
        Buf::U8(v) => nearest_rows(v, &p).map(Buf::U8),
    })
}

fn nearest_rows<T: Copy + Send + Sync + 'static>(x: &[T], p: &Plan) -> Result<Vec<T>> {
    let total = p.lengths(x.len())?;
    if total == 0 {
        return Ok(Vec::new());
    }
    let (ri, ro) = p.rows();
    let mut ys = alloc(p.h_out, "a resample2d row table")?;
    ys.extend((0..p.h_out).map(|y| nearest(p.h_in, p.h_out, y)));
    let mut xs = alloc(p.w_out, "a resample2d column table")?;
    xs.extend((0..p.w_out).map(|c| nearest(p.w_in, p.w_out, c) * p.inner));
    let inner = p.inner;
    // SAFETY: every chunk holds whole output rows (`try_build_rows`), and
    // `fill` writes each of them: a row copied whole from one written
    // before it in the same chunk, or `ro = w_out * inner` elements
    // zipped with the `w_out` columns of `xs`, `inner` elements each
    // (`src[c..c + inner]` is `inner` long, bounds-checked).
    unsafe {
        try_build_rows(
            total,
            ro,
            #[inline(always)]
            |start: usize, chunk: &mut [MaybeUninit<T>]| {
                // The input row of the chunk's last row made from scratch, and
                // where that output row is in the chunk.
                let mut made: Option<(usize, usize)> = None;
                for k in 0..chunk.len() / ro {
                    let r = start / ro + k;
                    let s = p.source(r, ys[r % p.h_out]);
                    let at = k * ro;
                    if let Some((_, from)) = made.filter(|&(prev, _)| prev == s) {
                        // Written above in this chunk (MaybeUninit<T> is Copy).
                        chunk.copy_within(from..from + ro, at);
                        continue;
                    }
                    let src = &x[s * ri..(s + 1) * ri];
                    let dst = &mut chunk[at..at + ro];
                    if inner == 1 {
                        for (d, &c) in dst.iter_mut().zip(&xs) {
                            d.write(src[c]);
                        }
                    } else {
                        for (d, &c) in dst.chunks_exact_mut(inner).zip(&xs) {
                            for (e, &v) in d.iter_mut().zip(&src[c..c + inner]) {
                                e.write(v);
                            }
                        }
                    }
                    made = Some((s, at));
                }
            },
        )
    }
}

/// Output elements of a strip of a row that [`linear_rows`] interpolates
/// at once: two strips of f64 (8 KiB) stay in L1.
const STRIP: usize = 512;

/// Per output column: the input offsets (column times `inner`) of its
/// two neighbours and their weights `1 - tx` and `tx`.
struct Columns {
    lo: Vec<usize>,
    hi: Vec<usize>,
    w0: Vec<f64>,
    w1: Vec<f64>,
}

/// Bilinear resampling of float values (float16 and the 8-bit types are
/// widened first): the row kernel where `axes` are adjacent and
/// increasing, else [`linear_general`].
pub(super) fn linear(
    x: &[f32],
    in_shape: &[usize],
    out_shape: &[usize],
    axes: [usize; 2],
) -> Result<Vec<f32>> {
    match Plan::of(in_shape, out_shape, axes) {
        Some(p) => linear_rows(x, &p),
        None => linear_general(x, in_shape, out_shape, axes),
    }
}

/// [`linear`] for int8/uint8 (allowed since #891): widened to f32,
/// interpolated, rounded to the nearest value (ties to even) and narrowed
/// by `narrow`; the weights sum to 1, so the result stays within the
/// type's range. Both buffers are allocated fallibly.
pub(super) fn linear_int<T: Copy>(
    v: &[T],
    (in_shape, out_shape): (&[usize], &[usize]),
    axes: [usize; 2],
    wide: impl Fn(T) -> f32,
    narrow: impl Fn(f32) -> T,
) -> Result<Vec<T>> {
    let mut w = alloc(v.len(), "a resample2d input in float32")?;
    w.extend(v.iter().map(|&e| wide(e)));
    let r = linear(&w, in_shape, out_shape, axes)?;
    let mut out = alloc(r.len(), "the output of resample2d")?;
    out.extend(r.iter().map(|&e| narrow(e.round_ties_even())));
    Ok(out)
}

fn linear_rows(x: &[f32], p: &Plan) -> Result<Vec<f32>> {
    let total = p.lengths(x.len())?;
    if total == 0 {
        return Ok(Vec::new());
    }
    let (ri, ro) = p.rows();
    let mut ys = alloc(p.h_out, "a resample2d row table")?;
    ys.extend((0..p.h_out).map(|o| {
        let c = source_coordinate(p.h_in, p.h_out, o);
        let (lo, hi) = (c.floor(), c.ceil());
        (lo as usize, hi as usize, c - lo)
    }));
    let mut cols = Columns {
        lo: alloc(p.w_out, "a resample2d column table")?,
        hi: alloc(p.w_out, "a resample2d column table")?,
        w0: alloc(p.w_out, "a resample2d column table")?,
        w1: alloc(p.w_out, "a resample2d column table")?,
    };
    for o in 0..p.w_out {
        let c = source_coordinate(p.w_in, p.w_out, o);
        let (lo, hi) = (c.floor(), c.ceil());
        cols.lo.push(lo as usize * p.inner);
        cols.hi.push(hi as usize * p.inner);
        cols.w0.push(1.0 - (c - lo));
        cols.w1.push(c - lo);
    }
    let (cols, inner) = (&cols, p.inner);
    // SAFETY: every chunk holds whole output rows (`try_build_rows`), and
    // `fill` writes each of them: strips `c0..c1` cover `0..ro`, and in
    // each the `c1 - c0` elements of the row are zipped with `h0` and
    // `h1`, both sliced to `c1 - c0 <= STRIP` values.
    unsafe {
        try_build_rows(
            total,
            ro,
            #[inline(always)]
            |start: usize, chunk: &mut [MaybeUninit<f32>]| {
                let rows = chunk.len() / ro;
                let mut h = [[0.0f64; STRIP]; 2];
                for c0 in (0..ro).step_by(STRIP) {
                    let c1 = (c0 + STRIP).min(ro);
                    // The input rows whose strips `h` holds.
                    let mut held = [usize::MAX; 2];
                    for k in 0..rows {
                        let r = start / ro + k;
                        let (y0, y1, ty) = ys[r % p.h_out];
                        let (s0, s1) = (p.source(r, y0), p.source(r, y1));
                        // Each row's strip in a slot: the one that
                        // holds it, else the one the other row does not
                        // need. (Written out rather than as a closure,
                        // which the compiler leaves out of line, without
                        // the vector features.)
                        let mut at = [0usize; 2];
                        for (a, (s, keep)) in at.iter_mut().zip([(s0, s1), (s1, s0)]) {
                            *a = match held.iter().position(|&v| v == s) {
                                Some(i) => i,
                                None => {
                                    let i = usize::from(held[0] == keep);
                                    let row = &x[s * ri..(s + 1) * ri];
                                    horizontal(row, cols, inner, c0, c1, &mut h[i]);
                                    held[i] = s;
                                    i
                                }
                            };
                        }
                        let [i0, i1] = at;
                        let (h0, h1) = (&h[i0][..c1 - c0], &h[i1][..c1 - c0]);
                        let wy = 1.0 - ty;
                        let dst = &mut chunk[k * ro + c0..k * ro + c1];
                        for ((d, &a), &b) in dst.iter_mut().zip(h0).zip(h1) {
                            d.write((a * wy + b * ty) as f32);
                        }
                    }
                }
            },
        )
    }
}

/// `h[j - c0]` = the spec's `vy` of output column `j` (of a row of
/// `w_out * inner`) for `j` in `c0..c1`: the input `row`'s neighbours
/// weighted, in f64.
#[inline(always)]
fn horizontal(
    row: &[f32],
    cols: &Columns,
    inner: usize,
    c0: usize,
    c1: usize,
    h: &mut [f64; STRIP],
) {
    if inner == 1 {
        let js = c0..c1;
        let (lo, hi) = (&cols.lo[js.clone()], &cols.hi[js.clone()]);
        let (w0, w1) = (&cols.w0[js.clone()], &cols.w1[js]);
        for ((((d, &a), &b), &p), &q) in h.iter_mut().zip(lo).zip(hi).zip(w0).zip(w1) {
            *d = row[a] as f64 * p + row[b] as f64 * q;
        }
        return;
    }
    // Columns of `inner` contiguous elements, whose strip may start or
    // end inside one.
    let mut j = c0;
    while j < c1 {
        let (col, e) = (j / inner, j % inner);
        let n = (inner - e).min(c1 - j);
        let (a, b) = (cols.lo[col] + e, cols.hi[col] + e);
        let (p, q) = (cols.w0[col], cols.w1[col]);
        let d = &mut h[j - c0..j - c0 + n];
        for ((d, &u), &v) in d.iter_mut().zip(&row[a..a + n]).zip(&row[b..b + n]) {
            *d = u as f64 * p + v as f64 * q;
        }
        j += n;
    }
}

/// Bilinear interpolation over any two dimensions `axes` (the others are
/// copied), each output computed alone in f64 and rounded once.
fn linear_general(
    x: &[f32],
    in_shape: &[usize],
    out_shape: &[usize],
    axes: [usize; 2],
) -> Result<Vec<f32>> {
    let rank = in_shape.len();
    if out_shape.len() != rank || axes.iter().any(|&a| a >= rank) {
        return Err(Error::operation("resample2d: inconsistent shapes"));
    }
    let st = strides(in_shape);
    // Per output coordinate of each dimension: (low offset, high offset,
    // weight of the high one).
    let tables: Vec<Vec<(usize, usize, f64)>> = (0..rank)
        .map(|d| {
            let (n, m, s) = (in_shape[d], out_shape[d], st[d]);
            let mut t = alloc(m, "a resample2d index table")?;
            if axes.contains(&d) {
                t.extend((0..m).map(|o| {
                    let c = source_coordinate(n, m, o);
                    let (lo, hi) = (c.floor(), c.ceil());
                    (lo as usize * s, hi as usize * s, c - lo)
                }));
            } else {
                t.extend((0..m).map(|o| (o * s, o * s, 0.0)));
            }
            Ok(t)
        })
        .collect::<Result<_>>()?;
    let total: usize = out_shape.iter().product();
    let mut out = alloc(total, "the output of resample2d")?;
    if total == 0 {
        return Ok(out);
    }
    let read = |off: usize| x.get(off).copied().unwrap_or(0.0) as f64;
    let (a, b) = (axes[0], axes[1]);
    let mut idx = vec![0usize; rank];
    loop {
        let base: usize = (0..rank)
            .filter(|&d| d != a && d != b)
            .map(|d| tables[d][idx[d]].0)
            .sum();
        let (y0, y1, ty) = tables[a][idx[a]];
        let (x0, x1, tx) = tables[b][idx[b]];
        let vy0 = read(base + y0 + x0) * (1.0 - tx) + read(base + y0 + x1) * tx;
        let vy1 = read(base + y1 + x0) * (1.0 - tx) + read(base + y1 + x1) * tx;
        out.push((vy0 * (1.0 - ty) + vy1 * ty) as f32);
        let mut d = rank;
        loop {
            if d == 0 {
                return Ok(out);
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < out_shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

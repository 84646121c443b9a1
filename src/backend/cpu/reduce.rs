//! CPU kernels: Reductions (reduceL1 ... reduceSumSquare), argMin/argMax, cumulativeSum.
//!
//! Floats accumulate in f64 (float16 widened exactly) and are rounded once
//! per output element. Integers use wrapping arithmetic in their own type,
//! so no data can make a kernel panic.

use crate::error::{Error, Result};
use crate::graph::ops::reduce::{ReduceKind, ReduceOp};
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

use super::elementwise::exp_f32;
use super::util::{floats, from_floats, try_filled, try_vec};
use rayon::prelude::*;

/// Outputs (or inputs) at least this large are split across the pool.
const PAR_MIN: usize = 1 << 16;

/// Runs one operator of this family; returns one buffer per output.
pub fn run(
    op: &ReduceOp,
    inputs: &[&Buf],
    in_descs: &[&OperandDescriptor],
    out_descs: &[OperandDescriptor],
) -> Result<Vec<Buf>> {
    let x = inputs[0];
    let shape = &in_descs[0].shape;
    let out = &out_descs[0];
    let buf = match op {
        ReduceOp::Reduce { kind, axes, .. } => {
            reduce(*kind, x, shape, axes, out.data_type, out.element_count())?
        }
        ReduceOp::ArgMinMax { max, axis, .. } => arg_min_max(x, shape, *axis, *max, out.data_type)?,
        ReduceOp::CumulativeSum {
            axis,
            exclusive,
            reversed,
        } => cumulative_sum(x, shape, *axis, *exclusive, *reversed, out.data_type)?,
    };
    Ok(vec![buf])
}

/// The input seen as runs of adjacent axes that are all reduced or all kept
/// (size-1 axes dropped, as they change nothing): `(size, reduced)`.
/// Collapsing makes the innermost loop as long as possible.
fn segments(shape: &[usize], axes: &[usize]) -> Vec<(usize, bool)> {
    let mut segs: Vec<(usize, bool)> = Vec::new();
    for (i, &n) in shape.iter().enumerate() {
        if n == 1 {
            continue;
        }
        let r = axes.contains(&i);
        match segs.last_mut() {
            Some((s, last_r)) if *last_r == r => *s *= n,
            _ => segs.push((n, r)),
        }
    }
    if segs.is_empty() {
        segs.push((1, false));
    }
    segs
}

/// Walks the input in memory order, one run of the last segment at a time:
/// `visit(in_start, out_start)`. When the last segment is kept, the run maps
/// element by element to `out[out_start..]`; when it is reduced, the whole
/// run reduces into `out[out_start]`. Inlined, so that a caller inside
/// `with_simd` has its `visit` compiled for the vectors it chose (an
/// outlined walk is baseline code, its loops 4 lanes wide).
#[inline(always)]
fn walk(segs: &[(usize, bool)], mut visit: impl FnMut(usize, usize)) {
    let (head, last) = segs.split_at(segs.len() - 1);
    let (last_n, last_reduced) = last[0];
    // Output stride of each head segment: the product of the kept sizes
    // after it (0 for reduced segments).
    let mut ostr = vec![0usize; head.len()];
    let mut acc = if last_reduced { 1 } else { last_n };
    for (i, &(n, r)) in head.iter().enumerate().rev() {
        if !r {
            ostr[i] = acc;
            acc *= n;
        }
    }
    let runs: usize = head.iter().map(|s| s.0).product();
    let mut idx = vec![0usize; head.len()];
    let mut o = 0usize;
    for run in 0..runs {
        visit(run * last_n, o);
        for d in (0..head.len()).rev() {
            idx[d] += 1;
            o += ostr[d];
            if idx[d] < head[d].0 {
                break;
            }
            o -= ostr[d] * head[d].0;
            idx[d] = 0;
        }
    }
}

/// Folds `x` into `out_len` accumulators starting at `init` with
/// `f(acc, value, out_index)`.
fn fold<T: Copy, A: Copy>(
    segs: &[(usize, bool)],
    x: &[T],
    out_len: usize,
    init: A,
    f: impl Fn(A, T, usize) -> A,
) -> Result<Vec<A>> {
    let mut acc = try_filled(out_len, init, "the accumulators of a reduction")?;
    let (n, reduced) = segs[segs.len() - 1];
    walk(segs, |i, o| {
        let run = &x[i..i + n];
        if reduced {
            let mut a = acc[o];
            for &v in run {
                a = f(a, v, o);
            }
            acc[o] = a;
        } else {
            for (j, (a, &v)) in acc[o..o + n].iter_mut().zip(run).enumerate() {
                *a = f(*a, v, o + j);
            }
        }
    });
    Ok(acc)
}

/// The sums of `g(v, o)` in f64 for each output `o`. Where the reduced axes
/// end the shape (a norm's mean over a row), each run is summed in
/// [`LANES`] partial sums, vectorised, then added in a fixed order: an
/// f64 chain of one add per value was latency-bound (a 128 x 576 mean,
/// 40 us), and the partial sums differ from the chain's only in f64's
/// last bits, below the one rounding to the output's type. Elsewhere the
/// values are added in memory order.
fn sums(
    segs: &[(usize, bool)],
    x: &[f32],
    out_len: usize,
    g: impl Fn(f64, usize) -> f64 + Copy,
) -> Result<Vec<f64>> {
    let (n, reduced) = segs[segs.len() - 1];
    if !reduced || n < LANES {
        return fold(segs, x, out_len, 0.0, |a, v, o| a + g(v as f64, o));
    }
    let mut acc = try_filled(out_len, 0.0f64, "the accumulators of a reduction")?;
    super::simd::with_simd(
        #[inline(always)]
        || {
            walk(
                segs,
                #[inline(always)]
                |i, o| {
                    acc[o] += lane_sums(
                        &x[i..i + n],
                        #[inline(always)]
                        |v| g(v, o),
                    )
                },
            )
        },
    );
    Ok(acc)
}

/// Partial sums per run in [`sums`]: two AVX-512 registers of f64.
const LANES: usize = 16;

/// `sum g(v)` over `run` in [`LANES`] partial sums (lane `j` takes the
/// values at `j` modulo `LANES`), added lane by lane in order, then the
/// values past the last whole group.
#[inline(always)]
fn lane_sums(run: &[f32], g: impl Fn(f64) -> f64) -> f64 {
    let mut lanes = [0f64; LANES];
    let mut groups = run.chunks_exact(LANES);
    for c in &mut groups {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += g(v as f64);
        }
    }
    let mut s = lanes.iter().fold(0.0, |s, &l| s + l);
    for &v in groups.remainder() {
        s += g(v as f64);
    }
    s
}

/// A float reduction in f64.
fn reduce_floats(
    kind: ReduceKind,
    segs: &[(usize, bool)],
    x: &[f32],
    out_len: usize,
) -> Result<Vec<f64>> {
    use ReduceKind::*;
    let count = (x.len() / out_len.max(1)) as f64;
    Ok(match kind {
        L1 => sums(segs, x, out_len, |v, _| v.abs())?,
        L2 => sums(segs, x, out_len, |v, _| v * v)?
            .into_iter()
            .map(f64::sqrt)
            .collect(),
        SumSquare => sums(segs, x, out_len, |v, _| v * v)?,
        Sum => sums(segs, x, out_len, |v, _| v)?,
        LogSum => sums(segs, x, out_len, |v, _| v)?
            .into_iter()
            .map(f64::ln)
            .collect(),
        Mean => sums(segs, x, out_len, |v, _| v)?
            .into_iter()
            .map(|s| s / count)
            .collect(),
        Product => fold(segs, x, out_len, 1.0, |a, v, _| a * v as f64)?,
        Max => extremes(segs, x, out_len, true)?,
        Min => extremes(segs, x, out_len, false)?,
        LogSumExp => {
            // log(sum(exp(x))) = m + log(sum(exp(x - m))) with m the maximum,
            // so that large values do not overflow exp. Each x - m is
            // rounded once to f32 and exponentiated in f32 (within about
            // an ulp, vectorised); the sum is in f64.
            let m = extremes(segs, x, out_len, true)?;
            let s = sums(segs, x, out_len, |v, o| lse_term(v as f32, m[o]))?;
            m.iter()
                .zip(s)
                .map(|(&m, s)| if m.is_finite() { m + s.ln() } else { m })
                .collect()
        }
    })
}

/// A term of reduceLogSumExp's sum: `exp(v - m)`, the difference rounded
/// once to f32.
#[inline(always)]
fn lse_term(v: f32, m: f64) -> f64 {
    exp_f32(v - m as f32) as f64
}

/// reduceMax (`max`) or reduceMin in f32 (exact), widened to f64: NaN
/// among the values gives NaN. A run along reduced axes is folded in
/// [`LANES`] lanes, vectorised; kept innermost axes fold element-wise.
fn extremes(segs: &[(usize, bool)], x: &[f32], out_len: usize, max: bool) -> Result<Vec<f64>> {
    let init = if max {
        f32::NEG_INFINITY
    } else {
        f32::INFINITY
    };
    let (n, reduced) = segs[segs.len() - 1];
    let mut acc = try_filled(out_len, init, "the accumulators of a reduction")?;
    // Closures, not functions: a function item's call shim may stay out
    // of line, compiled without the vector features.
    let (first_max, first_min) = (|v: f32, a: f32| v > a, |v: f32, a: f32| v < a);
    super::simd::with_simd(
        #[inline(always)]
        || match (reduced, max) {
            (true, true) => walk(
                segs,
                #[inline(always)]
                |i, o| acc[o] = pick(acc[o], lanes_best(&x[i..i + n], first_max), first_max),
            ),
            (true, false) => walk(
                segs,
                #[inline(always)]
                |i, o| acc[o] = pick(acc[o], lanes_best(&x[i..i + n], first_min), first_min),
            ),
            (false, true) => walk(
                segs,
                #[inline(always)]
                |i, o| {
                    for (a, &v) in acc[o..o + n].iter_mut().zip(&x[i..i + n]) {
                        *a = pick(*a, v, first_max);
                    }
                },
            ),
            (false, false) => walk(
                segs,
                #[inline(always)]
                |i, o| {
                    for (a, &v) in acc[o..o + n].iter_mut().zip(&x[i..i + n]) {
                        *a = pick(*a, v, first_min);
                    }
                },
            ),
        },
    );
    let mut out = try_vec(out_len, "the accumulators of a reduction")?;
    // One NaN for every NaN result, whichever value brought it.
    out.extend(
        acc.into_iter()
            .map(|a| if a.is_nan() { f64::NAN } else { a as f64 }),
    );
    Ok(out)
}

/// `v` replaces `a` when it is better, or NaN: once NaN, a fold stays NaN.
#[inline(always)]
fn pick(a: f32, v: f32, better: impl Fn(f32, f32) -> bool) -> f32 {
    if better(v, a) | v.is_nan() {
        v
    } else {
        a
    }
}

/// The best of `run` by [`pick`], in [`LANES`] lanes (lane `j` takes the
/// values at `j` modulo `LANES`) combined in order, then the values past
/// the last whole group. The extreme of a set, and whether it holds NaN,
/// do not depend on the order: the same value as one running fold.
#[inline(always)]
fn lanes_best(run: &[f32], better: impl Fn(f32, f32) -> bool + Copy) -> f32 {
    let init = if better(0.0, 1.0) {
        f32::INFINITY
    } else {
        f32::NEG_INFINITY
    };
    let mut lanes = [init; LANES];
    let mut groups = run.chunks_exact(LANES);
    for c in &mut groups {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = pick(*l, v, better);
        }
    }
    let mut a = lanes.iter().fold(init, |a, &l| pick(a, l, better));
    for &v in groups.remainder() {
        a = pick(a, v, better);
    }
    a
}

/// Integer element types: wrapping arithmetic that never panics.
trait IntElem: Copy + PartialOrd {
    const ZERO: Self;
    const ONE: Self;
    const MIN: Self;
    const MAX: Self;
    fn wadd(self, o: Self) -> Self;
    fn wmul(self, o: Self) -> Self;
    fn wabs(self) -> Self;
}

macro_rules! int_elem {
    ($($t:ty, $abs:expr;)*) => {$(
        impl IntElem for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const MIN: Self = <$t>::MIN;
            const MAX: Self = <$t>::MAX;
            fn wadd(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn wmul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn wabs(self) -> Self {
                let f: fn($t) -> $t = $abs;
                f(self)
            }
        }
    )*};
}

int_elem! {
    i8, |v| v.wrapping_abs();
    u8, |v| v;
    i32, |v| v.wrapping_abs();
    u32, |v| v;
    i64, |v| v.wrapping_abs();
    u64, |v| v;
}

/// An integer reduction in the element type (wrapping). Only the kinds the
/// spec allows for integers exist here.
fn reduce_ints<T: IntElem>(
    kind: ReduceKind,
    segs: &[(usize, bool)],
    x: &[T],
    out_len: usize,
) -> Result<Vec<T>> {
    use ReduceKind::*;
    Ok(match kind {
        Sum => fold(segs, x, out_len, T::ZERO, |a, v, _| a.wadd(v))?,
        L1 => fold(segs, x, out_len, T::ZERO, |a, v, _| a.wadd(v.wabs()))?,
        SumSquare => fold(segs, x, out_len, T::ZERO, |a, v, _| a.wadd(v.wmul(v)))?,
        Product => fold(segs, x, out_len, T::ONE, |a, v, _| a.wmul(v))?,
        Max => fold(
            segs,
            x,
            out_len,
            T::MIN,
            |a, v, _| if v > a { v } else { a },
        )?,
        Min => fold(
            segs,
            x,
            out_len,
            T::MAX,
            |a, v, _| if v < a { v } else { a },
        )?,
        _ => {
            return Err(Error::operation(format!(
                "{} does not take integer inputs",
                kind.name()
            )))
        }
    })
}

fn reduce(
    kind: ReduceKind,
    x: &Buf,
    shape: &[usize],
    axes: &[usize],
    out_type: DataType,
    out_len: usize,
) -> Result<Buf> {
    let segs = segments(shape, axes);
    let expected: usize = segs.iter().map(|s| s.0).product();
    let kept: usize = segs.iter().filter(|s| !s.1).map(|s| s.0).product();
    if expected != x.len() || kept != out_len {
        return Err(Error::operation("reduce: the input size does not match"));
    }
    Ok(match x {
        Buf::F32(_) | Buf::F16(_) => {
            let v = floats(x)?;
            let r = reduce_floats(kind, &segs, &v, out_len)?;
            let mut o = try_vec(r.len(), "the output of a reduction")?;
            o.extend(r.into_iter().map(|a| a as f32));
            from_floats(out_type, o)?
        }
        Buf::I32(v) => Buf::I32(reduce_ints(kind, &segs, v, out_len)?),
        Buf::U32(v) => Buf::U32(reduce_ints(kind, &segs, v, out_len)?),
        Buf::I64(v) => Buf::I64(reduce_ints(kind, &segs, v, out_len)?),
        Buf::U64(v) => Buf::U64(reduce_ints(kind, &segs, v, out_len)?),
        Buf::I8(v) => Buf::I8(reduce_ints(kind, &segs, v, out_len)?),
        Buf::U8(v) => Buf::U8(reduce_ints(kind, &segs, v, out_len)?),
    })
}

/// The sizes before, along and after `axis`.
fn split_at_axis(shape: &[usize], axis: usize) -> Result<(usize, usize, usize)> {
    if axis >= shape.len() {
        return Err(Error::operation("the axis is out of range"));
    }
    Ok((
        shape[..axis].iter().product(),
        shape[axis],
        shape[axis + 1..].iter().product(),
    ))
}

/// Index of the first minimum (or maximum) along the middle dimension.
/// Ties keep the first index; a NaN never replaces the current best.
fn arg_best<T: Copy + PartialOrd + Send + Sync>(
    x: &[T],
    outer: usize,
    n: usize,
    inner: usize,
    max: bool,
) -> Result<Vec<i64>> {
    let mut out = try_filled(outer * inner, 0i64, "the output of argMin/argMax")?;
    if inner == 1 {
        // Along the last axis (a sampler's argMax over the vocabulary):
        // each row on its own, in vector passes.
        let rows = |(o, i): (&mut [i64], &[T])| {
            super::simd::with_simd(
                #[inline(always)]
                || match max {
                    true => o[0] = first_best(i, |v, b| v > b) as i64,
                    false => o[0] = first_best(i, |v, b| v < b) as i64,
                },
            )
        };
        if x.len() >= PAR_MIN && outer > 1 {
            out.par_chunks_mut(1).zip(x.par_chunks(n)).for_each(rows);
        } else {
            out.chunks_mut(1).zip(x.chunks(n)).for_each(rows);
        }
        return Ok(out);
    }
    let mut best: Vec<T> = try_vec(inner, "the running extremes of argMin/argMax")?;
    for o in 0..outer {
        let base = o * n * inner;
        best.clear();
        best.extend_from_slice(&x[base..base + inner]);
        let idx = &mut out[o * inner..(o + 1) * inner];
        let rows = &x[base + inner..base + n * inner];
        match max {
            true => columns_best(&mut best, idx, rows, |v, b| v > b),
            false => columns_best(&mut best, idx, rows, |v, b| v < b),
        }
    }
    Ok(out)
}

/// The columns' running scans of [`arg_best`] over `rows` (rows 1.. of
/// one outer block, each as long as `best`): a strictly `better` value
/// replaces a column's best and its index. Selects rather than a branch,
/// compiled for this CPU's vectors, so that the columns are lanes (a
/// branch per element kept it scalar: 0.41 ms over axis 0 of a 1024 x
/// 1024 matrix against 0.14 over axis 1).
#[inline(always)]
fn columns_best<T: Copy + PartialOrd>(
    best: &mut [T],
    idx: &mut [i64],
    rows: &[T],
    better: impl Fn(T, T) -> bool + Copy,
) {
    super::simd::with_simd(
        #[inline(always)]
        || {
            for (k, row) in rows.chunks_exact(best.len()).enumerate() {
                let k = k as i64 + 1;
                for ((b, i), &v) in best.iter_mut().zip(idx.iter_mut()).zip(row) {
                    let take = better(v, *b);
                    *b = if take { v } else { *b };
                    *i = if take { k } else { *i };
                }
            }
        },
    )
}

/// The index in `row` (not empty) that a running scan keeping the first
/// strictly `better` value gives: 0 when `row[0]` is NaN (nothing is
/// better than NaN), else the first position of the best value that is
/// not NaN. Two passes that vectorise: the best value, in [`LANES`]
/// lanes that start at `row[0]` (NaN is never better, so it never
/// enters), then its first position, found a block at a time.
#[inline(always)]
fn first_best<T: Copy + PartialOrd>(row: &[T], better: impl Fn(T, T) -> bool + Copy) -> usize {
    let first = row[0];
    #[allow(clippy::eq_op)]
    if first != first {
        return 0;
    }
    let mut lanes = [first; LANES];
    let mut groups = row.chunks_exact(LANES);
    for c in &mut groups {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l = if better(v, *l) { v } else { *l };
        }
    }
    let mut b = first;
    for &v in lanes.iter().chain(groups.remainder()) {
        if better(v, b) {
            b = v;
        }
    }
    // A block holds `b` when an element equals it (the reduction has no
    // early exit, so it vectorises); then the element within it.
    let mut at = 0;
    for blk in row.chunks(256) {
        if blk.iter().fold(false, |f, &v| f | (v == b)) {
            return at + blk.iter().position(|&v| v == b).unwrap_or(0);
        }
        at += blk.len();
    }
    0
}

fn arg_min_max(
    x: &Buf,
    shape: &[usize],
    axis: usize,
    max: bool,
    out_type: DataType,
) -> Result<Buf> {
    let (outer, n, inner) = split_at_axis(shape, axis)?;
    if outer * n * inner != x.len() || n == 0 {
        return Err(Error::operation(
            "argMin/argMax: the input size does not match",
        ));
    }
    let idx = match x {
        Buf::F32(_) | Buf::F16(_) => arg_best(&floats(x)?, outer, n, inner, max)?,
        Buf::I32(v) => arg_best(v, outer, n, inner, max)?,
        Buf::U32(v) => arg_best(v, outer, n, inner, max)?,
        Buf::I64(v) => arg_best(v, outer, n, inner, max)?,
        Buf::U64(v) => arg_best(v, outer, n, inner, max)?,
        Buf::I8(v) => arg_best(v, outer, n, inner, max)?,
        Buf::U8(v) => arg_best(v, outer, n, inner, max)?,
    };
    match out_type {
        // Validation keeps the axis size within the output type's range.
        DataType::Int32 => {
            let mut o = try_vec(idx.len(), "the output of argMin/argMax")?;
            o.extend(idx.into_iter().map(|i| i as i32));
            Ok(Buf::I32(o))
        }
        DataType::Int64 => Ok(Buf::I64(idx)),
        other => Err(Error::operation(format!(
            "argMin/argMax cannot produce {}",
            other.name()
        ))),
    }
}

/// A running sum along the middle dimension, one row of `inner` at a time.
/// `add` accumulates, `store` converts the running sum to the element.
/// Each outer block is its own scan: large inputs split them across the
/// pool. Along the last axis (`inner` 1) a block is one plain loop.
fn scan<T, A, U>(
    x: &[T],
    (outer, n, inner): (usize, usize, usize),
    exclusive: bool,
    reversed: bool,
    zero: A,
    add: impl Fn(A, T) -> A + Sync,
    store: impl Fn(A) -> U + Sync,
) -> Result<Vec<U>>
where
    T: Copy + Sync,
    A: Copy + Send + Sync,
    U: Copy + Default + Send + Sync,
{
    let mut out = try_filled(x.len(), U::default(), "the output of cumulativeSum")?;
    let block = n * inner;
    if block == 0 {
        return Ok(out);
    }
    let one = |(dst, src): (&mut [U], &[T])| -> Result<()> {
        if inner == 1 {
            let mut s = zero;
            let mut step = |d: &mut U, &v: &T| {
                if exclusive {
                    *d = store(s);
                    s = add(s, v);
                } else {
                    s = add(s, v);
                    *d = store(s);
                }
            };
            match reversed {
                false => dst.iter_mut().zip(src).for_each(|(d, v)| step(d, v)),
                true => dst.iter_mut().zip(src).rev().for_each(|(d, v)| step(d, v)),
            }
            return Ok(());
        }
        let mut sums = try_filled(inner, zero, "the running sums of cumulativeSum")?;
        for step in 0..n {
            let k = if reversed { n - 1 - step } else { step };
            let row = &src[k * inner..(k + 1) * inner];
            let dst = &mut dst[k * inner..(k + 1) * inner];
            for ((s, d), &v) in sums.iter_mut().zip(dst).zip(row) {
                if exclusive {
                    *d = store(*s);
                    *s = add(*s, v);
                } else {
                    *s = add(*s, v);
                    *d = store(*s);
                }
            }
        }
        Ok(())
    };
    if x.len() >= PAR_MIN && outer > 1 {
        out.par_chunks_mut(block)
            .zip(x.par_chunks(block))
            .try_for_each(one)?;
    } else {
        out.chunks_mut(block)
            .zip(x.chunks(block))
            .try_for_each(one)?;
    }
    Ok(out)
}

fn cumulative_sum(
    x: &Buf,
    shape: &[usize],
    axis: usize,
    exclusive: bool,
    reversed: bool,
    out_type: DataType,
) -> Result<Buf> {
    let dims = split_at_axis(shape, axis)?;
    if dims.0 * dims.1 * dims.2 != x.len() {
        return Err(Error::operation(
            "cumulativeSum: the input size does not match",
        ));
    }
    macro_rules! ints {
        ($v:expr, $variant:ident) => {
            Buf::$variant(scan(
                $v,
                dims,
                exclusive,
                reversed,
                IntElem::ZERO,
                |a, v| IntElem::wadd(a, v),
                |a| a,
            )?)
        };
    }
    Ok(match x {
        Buf::F32(_) | Buf::F16(_) => {
            let v = floats(x)?;
            let sums = scan(
                &v,
                dims,
                exclusive,
                reversed,
                0.0f64,
                |a, v| a + v as f64,
                |a| a as f32,
            )?;
            from_floats(out_type, sums)?
        }
        Buf::I32(v) => ints!(v, I32),
        Buf::U32(v) => ints!(v, U32),
        Buf::I64(v) => ints!(v, I64),
        Buf::U64(v) => ints!(v, U64),
        Buf::I8(v) => ints!(v, I8),
        Buf::U8(v) => ints!(v, U8),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::f16::{f16_to_f32, f32_to_f16};

    /// Row-major coordinates of flat index `i`.
    fn coords(mut i: usize, shape: &[usize]) -> Vec<usize> {
        let mut c = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            c[d] = i % shape[d];
            i /= shape[d];
        }
        c
    }

    /// Naive reference: for each output (keepDimensions shape), collects the
    /// input values whose kept coordinates match.
    fn naive_groups(shape: &[usize], axes: &[usize]) -> Vec<Vec<usize>> {
        let out_shape: Vec<usize> = shape
            .iter()
            .enumerate()
            .map(|(i, &n)| if axes.contains(&i) { 1 } else { n })
            .collect();
        let total: usize = shape.iter().product();
        let out_total: usize = out_shape.iter().product();
        let mut groups = vec![Vec::new(); out_total];
        for i in 0..total {
            let c = coords(i, shape);
            let mut o = 0;
            for d in 0..shape.len() {
                o = o * out_shape[d] + if axes.contains(&d) { 0 } else { c[d] };
            }
            groups[o].push(i);
        }
        groups
    }

    fn naive_float(kind: ReduceKind, vals: &[f64]) -> f64 {
        use ReduceKind::*;
        let sum: f64 = vals.iter().sum();
        match kind {
            L1 => vals.iter().map(|v| v.abs()).sum(),
            L2 => vals.iter().map(|v| v * v).sum::<f64>().sqrt(),
            LogSum => sum.ln(),
            LogSumExp => vals.iter().map(|v| v.exp()).sum::<f64>().ln(),
            Max => vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
            Mean => sum / vals.len() as f64,
            Min => vals.iter().cloned().fold(f64::INFINITY, f64::min),
            Product => vals.iter().product(),
            Sum => sum,
            SumSquare => vals.iter().map(|v| v * v).sum(),
        }
    }

    const KINDS: [ReduceKind; 10] = [
        ReduceKind::L1,
        ReduceKind::L2,
        ReduceKind::LogSum,
        ReduceKind::LogSumExp,
        ReduceKind::Max,
        ReduceKind::Mean,
        ReduceKind::Min,
        ReduceKind::Product,
        ReduceKind::Sum,
        ReduceKind::SumSquare,
    ];

    const CASES: &[(&[usize], &[usize])] = &[
        (&[], &[]),
        (&[5], &[0]),
        (&[5], &[]),
        (&[3, 5], &[0]),
        (&[3, 5], &[1]),
        (&[2, 3, 5], &[0, 2]),
        (&[2, 1, 3, 5], &[1, 2]),
        (&[3, 2, 1, 7], &[0, 1, 2, 3]),
        (&[2, 3, 2, 3], &[1, 3]),
        (&[2, 3, 2, 3], &[0, 2]),
        // Runs long enough for the partial sums (whole groups and a rest;
        // a reduced axis before them too).
        (&[3, 37], &[1]),
        (&[2, 576], &[1]),
        (&[2, 3, 48], &[0, 2]),
        (&[4, 16], &[1]),
    ];

    fn values(n: usize) -> Vec<f32> {
        // Positive values keep LogSum finite; a spread exercises max/min.
        (0..n)
            .map(|i| 0.5 + ((i * 7 + 3) % 11) as f32 * 0.25)
            .collect()
    }

    #[test]
    fn float_reductions_match_naive() {
        for &(shape, axes) in CASES {
            let n: usize = shape.iter().product();
            let x = values(n);
            let groups = naive_groups(shape, axes);
            for kind in KINDS {
                for dt in [DataType::Float32, DataType::Float16] {
                    let buf = match dt {
                        DataType::Float32 => Buf::F32(x.clone()),
                        _ => Buf::F16(x.iter().map(|&v| f32_to_f16(v)).collect()),
                    };
                    let got = reduce(kind, &buf, shape, axes, dt, groups.len()).unwrap();
                    assert_eq!(got.len(), groups.len());
                    for (o, g) in groups.iter().enumerate() {
                        let vals: Vec<f64> = g.iter().map(|&i| buf.get_f64(i)).collect();
                        let mut want = naive_float(kind, &vals);
                        // What the output type can hold (the long rows'
                        // products overflow).
                        want = match dt {
                            DataType::Float16 => f16_to_f32(f32_to_f16(want as f32)) as f64,
                            _ => want as f32 as f64,
                        };
                        if want.is_infinite() {
                            assert_eq!(got.get_f64(o), want);
                            continue;
                        }
                        let have = got.get_f64(o);
                        let tol = if dt == DataType::Float16 { 2e-3 } else { 1e-6 };
                        assert!(
                            (have - want).abs() <= tol * want.abs().max(1.0),
                            "{kind:?} {shape:?} {axes:?} {dt:?} out {o}: {have} vs {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn int_reductions_wrap() {
        let x: Vec<i32> = vec![i32::MAX, 1, -3, i32::MIN, 7, 2];
        let shape = [2, 3];
        let s = reduce(
            ReduceKind::Sum,
            &Buf::I32(x.clone()),
            &shape,
            &[1],
            DataType::Int32,
            2,
        )
        .unwrap();
        assert_eq!(
            s,
            Buf::I32(vec![
                i32::MAX.wrapping_add(1).wrapping_add(-3),
                i32::MIN.wrapping_add(9)
            ])
        );
        let l1 = reduce(
            ReduceKind::L1,
            &Buf::I32(x.clone()),
            &shape,
            &[0],
            DataType::Int32,
            3,
        )
        .unwrap();
        assert_eq!(l1, Buf::I32(vec![i32::MAX.wrapping_add(i32::MIN), 8, 5]));
        let p = reduce(
            ReduceKind::Product,
            &Buf::U32(vec![1 << 20, 1 << 20, 3]),
            &[3],
            &[0],
            DataType::Uint32,
            1,
        )
        .unwrap();
        assert_eq!(p, Buf::U32(vec![0]));
        let sq = reduce(
            ReduceKind::SumSquare,
            &Buf::U32(vec![3, 4]),
            &[2],
            &[0],
            DataType::Uint32,
            1,
        )
        .unwrap();
        assert_eq!(sq, Buf::U32(vec![25]));
        let mx = reduce(
            ReduceKind::Max,
            &Buf::I8(vec![-8, 3, -1, 7]),
            &[2, 2],
            &[0],
            DataType::Int4,
            2,
        )
        .unwrap();
        assert_eq!(mx, Buf::I8(vec![-1, 7]));
        let mn = reduce(
            ReduceKind::Min,
            &Buf::U64(vec![u64::MAX, 5, 9]),
            &[3],
            &[0],
            DataType::Uint64,
            1,
        )
        .unwrap();
        assert_eq!(mn, Buf::U64(vec![5]));
        assert!(reduce(
            ReduceKind::Mean,
            &Buf::I32(vec![1]),
            &[1],
            &[0],
            DataType::Int32,
            1
        )
        .is_err());
    }

    /// reduceMax and reduceMin in every layout (runs in lanes, kept
    /// innermost axes, short runs) give exactly the extreme, and NaN
    /// wherever a NaN is among the values, wherever it sits in a run.
    #[test]
    fn max_and_min_are_exact_and_nan_wins() {
        let cases: &[(&[usize], &[usize])] = &[
            (&[3, 37], &[1]),
            (&[37, 3], &[0]),
            (&[2, 100, 5], &[1]),
            (&[4, 70], &[0, 1]),
            (&[5, 3], &[1]),
        ];
        for &(shape, axes) in cases {
            let n: usize = shape.iter().product();
            let groups = naive_groups(shape, axes);
            for nan_at in [None, Some(0), Some(17 % n), Some(n - 1), Some(n / 2)] {
                let mut x: Vec<f32> = (0..n)
                    .map(|i| ((i * 2654435761) % 1000) as f32 - 500.0)
                    .collect();
                x[n / 3] = -0.0;
                if let Some(k) = nan_at {
                    x[k] = f32::from_bits(0x7fc0_1234);
                }
                for (kind, max) in [(ReduceKind::Max, true), (ReduceKind::Min, false)] {
                    let got = reduce(
                        kind,
                        &Buf::F32(x.clone()),
                        shape,
                        axes,
                        DataType::Float32,
                        groups.len(),
                    )
                    .unwrap();
                    for (o, g) in groups.iter().enumerate() {
                        let vals: Vec<f32> = g.iter().map(|&i| x[i]).collect();
                        let have = got.get_f64(o);
                        if vals.iter().any(|v| v.is_nan()) {
                            assert!(have.is_nan(), "{kind:?} {shape:?} {axes:?} out {o}");
                            continue;
                        }
                        let want = vals.iter().fold(vals[0], |a, &v| {
                            if (max && v > a) || (!max && v < a) {
                                v
                            } else {
                                a
                            }
                        });
                        assert_eq!(have, want as f64, "{kind:?} {shape:?} {axes:?} out {o}");
                    }
                }
            }
        }
    }

    #[test]
    fn log_sum_exp_is_stable() {
        let r = reduce(
            ReduceKind::LogSumExp,
            &Buf::F32(vec![1000.0, 1000.0]),
            &[2],
            &[0],
            DataType::Float32,
            1,
        )
        .unwrap();
        let want = 1000.0 + 2f64.ln();
        assert!((r.get_f64(0) - want).abs() < 1e-3);
        // Long rows (the vectorised terms) and a reduced leading axis
        // (element-wise terms): within 2 ulp of the f64 value.
        for (shape, axes) in [([3usize, 1000], [1usize]), ([1000, 3], [0])] {
            let x: Vec<f32> = (0..3000)
                .map(|i| ((i * 2654435761usize) % 4001) as f32 / 100.0 - 20.0)
                .collect();
            let r = reduce(
                ReduceKind::LogSumExp,
                &Buf::F32(x.clone()),
                &shape,
                &axes,
                DataType::Float32,
                3,
            )
            .unwrap();
            for (o, g) in naive_groups(&shape, &axes).iter().enumerate() {
                let want = g.iter().map(|&i| (x[i] as f64).exp()).sum::<f64>().ln();
                let ulp = (want as f32).abs() * f32::EPSILON;
                let have = r.get_f64(o);
                assert!(
                    (have - want).abs() <= 2.0 * ulp as f64,
                    "{shape:?} out {o}: {have} vs {want}"
                );
            }
        }
        let r = reduce(
            ReduceKind::LogSumExp,
            &Buf::F32(vec![f32::NEG_INFINITY; 2]),
            &[2],
            &[0],
            DataType::Float32,
            1,
        )
        .unwrap();
        assert_eq!(r.get_f64(0), f64::NEG_INFINITY);
    }

    fn naive_arg(x: &[f64], shape: &[usize], axis: usize, max: bool) -> Vec<i64> {
        let (outer, n, inner) = split_at_axis(shape, axis).unwrap();
        let mut out = Vec::new();
        for o in 0..outer {
            for j in 0..inner {
                let mut best = 0;
                for k in 0..n {
                    let v = x[(o * n + k) * inner + j];
                    let b = x[(o * n + best) * inner + j];
                    if (max && v > b) || (!max && v < b) {
                        best = k;
                    }
                }
                out.push(best as i64);
            }
        }
        out
    }

    #[test]
    fn arg_min_max_matches_naive() {
        let shape = [3, 4, 5];
        let n = 60;
        // Few distinct values, so that ties are common.
        let x: Vec<f64> = (0..n).map(|i| ((i * 13 + 5) % 7) as f64 - 3.0).collect();
        for axis in 0..3 {
            for max in [false, true] {
                let want = naive_arg(&x, &shape, axis, max);
                let f16 = Buf::F16(x.iter().map(|&v| f32_to_f16(v as f32)).collect());
                let i8b = Buf::I8(x.iter().map(|&v| v as i8).collect());
                let i64b = Buf::I64(x.iter().map(|&v| v as i64).collect());
                for b in [f16, i8b, i64b] {
                    let got = arg_min_max(&b, &shape, axis, max, DataType::Int64).unwrap();
                    assert_eq!(got, Buf::I64(want.clone()), "axis {axis} max {max}");
                }
                let got = arg_min_max(
                    &Buf::F32(x.iter().map(|&v| v as f32).collect()),
                    &shape,
                    axis,
                    max,
                    DataType::Int32,
                )
                .unwrap();
                assert_eq!(got, Buf::I32(want.iter().map(|&i| i as i32).collect()));
            }
        }
        // Columns wider than a vector, with ties and NaNs (a NaN is never
        // better, and a column that starts with one keeps index 0).
        let shape = [9, 70];
        let x: Vec<f64> = (0..630)
            .map(|i| match i % 11 {
                3 => f64::NAN,
                _ => ((i * 7 + 2) % 5) as f64,
            })
            .collect();
        for max in [false, true] {
            let want = naive_arg(&x, &shape, 0, max);
            let b = Buf::F32(x.iter().map(|&v| v as f32).collect());
            let got = arg_min_max(&b, &shape, 0, max, DataType::Int64).unwrap();
            assert_eq!(got, Buf::I64(want), "columns with NaNs, max {max}");
        }
        // Ties pick the first index.
        let got = arg_min_max(
            &Buf::U32(vec![2, 9, 9, 1, 1]),
            &[5],
            0,
            true,
            DataType::Int32,
        )
        .unwrap();
        assert_eq!(got, Buf::I32(vec![1]));
        let got = arg_min_max(
            &Buf::U32(vec![2, 9, 9, 1, 1]),
            &[5],
            0,
            false,
            DataType::Int32,
        )
        .unwrap();
        assert_eq!(got, Buf::I32(vec![3]));
    }

    /// Along the last axis, rows long enough for the vector passes and
    /// enough of them for the pool: the index a running scan gives, with
    /// NaN first in a row, NaN inside it, both zeros tied for the best,
    /// and the best in the rest after the last whole group.
    #[test]
    fn arg_min_max_of_long_rows_is_the_scans() {
        let (rows, n) = (70, 1000);
        let mut x: Vec<f32> = (0..rows * n)
            .map(|i| ((i * 2654435761usize) % 97) as f32 - 48.0)
            .collect();
        let row = |r: usize| r * n;
        x[row(1)] = f32::NAN;
        x[row(2) + 500] = f32::NAN;
        for j in 0..n {
            x[row(3) + j] = if j % 2 == 0 { -0.0 } else { 0.0 } - (j % 5 != 3) as u8 as f32;
        }
        x[row(4) + n - 1] = 1e9;
        x[row(5) + n - 2] = -1e9;
        x[row(6)..row(7)].fill(f32::NAN);
        let shape = [rows, n];
        let wide: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        for max in [false, true] {
            let want = naive_arg(&wide, &shape, 1, max);
            let got = arg_min_max(&Buf::F32(x.clone()), &shape, 1, max, DataType::Int64).unwrap();
            assert_eq!(got, Buf::I64(want.clone()), "max {max}");
            let ints: Vec<i32> = x.iter().map(|&v| v as i32).collect();
            let want = naive_arg(
                &ints.iter().map(|&v| v as f64).collect::<Vec<_>>(),
                &shape,
                1,
                max,
            );
            let got = arg_min_max(&Buf::I32(ints), &shape, 1, max, DataType::Int64).unwrap();
            assert_eq!(got, Buf::I64(want), "int32 max {max}");
        }
    }

    #[test]
    fn cumulative_sums() {
        let x = Buf::I32(vec![1, 2, 3, 4]);
        let run = |ex, rev| cumulative_sum(&x, &[4], 0, ex, rev, DataType::Int32).unwrap();
        assert_eq!(run(false, false), Buf::I32(vec![1, 3, 6, 10]));
        assert_eq!(run(true, false), Buf::I32(vec![0, 1, 3, 6]));
        assert_eq!(run(false, true), Buf::I32(vec![10, 9, 7, 4]));
        assert_eq!(run(true, true), Buf::I32(vec![9, 7, 4, 0]));
        // [2, 3] along axis 0: columns.
        let y = Buf::F32(vec![1.0, 2.0, 3.0, 10.0, 20.0, 30.0]);
        let r = cumulative_sum(&y, &[2, 3], 0, false, false, DataType::Float32).unwrap();
        assert_eq!(r, Buf::F32(vec![1.0, 2.0, 3.0, 11.0, 22.0, 33.0]));
        let r = cumulative_sum(&y, &[2, 3], 1, false, true, DataType::Float32).unwrap();
        assert_eq!(r, Buf::F32(vec![6.0, 5.0, 3.0, 60.0, 50.0, 30.0]));
        // float16: summed in f64, rounded once per output.
        let h = Buf::F16([0.1f32, 0.2, 0.3].iter().map(|&v| f32_to_f16(v)).collect());
        let r = cumulative_sum(&h, &[3], 0, false, false, DataType::Float16).unwrap();
        let Buf::F16(bits) = &r else { panic!() };
        let exact: f64 = (0..3).map(|i| h.get_f64(i)).sum();
        assert_eq!(bits[2], f32_to_f16(exact as f32));
        assert!((f16_to_f32(bits[1]) - 0.3).abs() < 1e-3);
        // Wrapping, never a panic.
        let w = cumulative_sum(
            &Buf::U8(vec![200, 100]),
            &[2],
            0,
            false,
            false,
            DataType::Uint8,
        )
        .unwrap();
        assert_eq!(w, Buf::U8(vec![200, 44]));
    }
}

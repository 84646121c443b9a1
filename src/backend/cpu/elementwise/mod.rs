//! Element-wise CPU kernels: binary operators with broadcasting, unary
//! operators, clamp, softmax (`softmax.rs`), cast (`cast.rs`) and the
//! fused language-model rows (`fused.rs`).
//!
//! Floats compute in f32 (float16 is widened exactly and the result rounded
//! once). Integer arithmetic wraps and never panics: kernels must not abort
//! the process whatever the data.

use std::borrow::Cow;
use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::f16::{f16_to_f32, f32_to_f16};
use crate::graph::ops::elementwise::{BinaryKind, UnaryKind};
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

use super::sgemm::clamp as clamp_f32;
use super::util::{broadcast_strides, coalesce, floats, pooled_copy};

mod cast;
mod fused;
mod halves;
pub(super) use halves::{broadcast_halves, map_halves, zip_halves};
mod math;
mod softmax;

pub use cast::cast;
pub use fused::{rope, swiglu};
#[cfg(test)]
use math::erf;
use math::{cos_f32, erf_f32, log_f32, sigmoid, sin_f32, tan_f32, tanh_f32, TRIG_MAX};
pub(super) use math::{exp_f32, exp_m1_f32, ln_1p_unit};
pub use softmax::{softmax, softmax_fused, softmax_owned};
#[cfg(test)]
use softmax::{softmax_row, sum_lanes};

/// Output elements above which element-wise loops are split across threads.
const PAR_MIN: usize = 1 << 16;

/// How many of `units` (rows, blocks, chunks) that together hold
/// `elements` values one parallel task takes: about four tasks a thread
/// when the input is large enough to split (`PAR_MIN` values and more than
/// one thread), which balances the load without much scheduling; all of
/// them otherwise. Never 0, so that it can size `chunks`.
pub(super) fn units_per_task(elements: usize, units: usize) -> usize {
    let threads = rayon::current_num_threads();
    if elements >= PAR_MIN && threads > 1 {
        units.div_ceil(threads * 4).max(1)
    } else {
        units.max(1)
    }
}

/// Builds a vector of `n` elements without zero-filling it first: `fill`
/// receives the offset of a chunk and the chunk, and must write every
/// element of it. Chunks run in parallel when `n` is large and the pool has
/// more than one thread. The allocation fails with an OperationError naming
/// the bytes instead of aborting.
///
/// # Safety
/// `fill` must write every element of every chunk it is given (the
/// vector's length is set to `n` afterwards, exposing them), unless it
/// panics.
pub(super) unsafe fn try_build_vec<U, F>(n: usize, fill: F) -> Result<Vec<U>>
where
    U: Copy + Send + 'static,
    F: Fn(usize, &mut [MaybeUninit<U>]) + Sync,
{
    // SAFETY: the caller's contract, passed on.
    Ok(unsafe { fill_vec(Buf::try_vec_for_overwrite(n)?, n, 16, fill) })
}

/// [`try_build_vec`] for a kernel that writes whole rows of `row`
/// elements: every chunk starts on a row and holds whole rows (`n` a
/// multiple of `row`, the last chunk possibly fewer rows).
///
/// # Safety
/// As [`try_build_vec`].
pub(super) unsafe fn try_build_rows<U, F>(n: usize, row: usize, fill: F) -> Result<Vec<U>>
where
    U: Copy + Send + 'static,
    F: Fn(usize, &mut [MaybeUninit<U>]) + Sync,
{
    if row == 0 || !n.is_multiple_of(row) {
        return Err(Error::operation("rows that do not tile the output"));
    }
    // SAFETY: the caller's contract, passed on.
    Ok(unsafe { fill_vec(Buf::try_vec_for_overwrite(n)?, n, row, fill) })
}

/// The body of [`try_build_vec`]: `v` has room for `n` elements.
///
/// # Safety
/// As [`try_build_vec`].
unsafe fn fill_vec<U, F>(mut v: Vec<U>, n: usize, unit: usize, fill: F) -> Vec<U>
where
    U: Copy + Send + 'static,
    F: Fn(usize, &mut [MaybeUninit<U>]) + Sync,
{
    {
        let spare = &mut v.spare_capacity_mut()[..n];
        // Whole cache lines (or the caller's rows) per chunk.
        let chunk = units_per_task(n, n.div_ceil(unit)) * unit;
        if chunk < n {
            spare.par_chunks_mut(chunk).enumerate().for_each(|(i, c)| {
                with_simd(
                    #[inline(always)]
                    || fill(i * chunk, c),
                )
            });
        } else {
            with_simd(
                #[inline(always)]
                || fill(0, spare),
            );
        }
    }
    // SAFETY: the chunks handed to `fill` cover `spare[..n]`, and `fill`
    // wrote every element of each (the caller's contract; a panic in it
    // unwinds past this with the length still 0); the caller gave room
    // for `n`, so n <= capacity.
    unsafe { v.set_len(n) };
    v
}

// The vector levels and `with_simd` live in `cpu/simd.rs`, which the
// GEMM's kernels use too; re-exported for this module's many callers.
pub(super) use super::simd::{simd_level, with_simd};

/// `x[i] = f(x[i])` in place, vectorisable, in chunks across the pool
/// for large inputs.
pub(super) fn map_in_place<F: Fn(f32) -> f32 + Sync>(x: &mut [f32], f: F) {
    let run = |c: &mut [f32]| {
        with_simd(
            #[inline(always)]
            || apply_in_place(c, &f),
        )
    };
    let chunk = units_per_task(x.len(), x.len().div_ceil(16)) * 16;
    if chunk < x.len() {
        x.par_chunks_mut(chunk).for_each(run);
    } else {
        run(x);
    }
}

/// The loop of [`map_in_place`] over one chunk (its own function so that
/// the tests can run it at each vector level).
#[inline(always)]
pub(super) fn apply_in_place<F: Fn(f32) -> f32>(c: &mut [f32], f: &F) {
    for v in c.iter_mut() {
        *v = f(*v);
    }
}

/// `out[i] = f(x[i])` over equal-length slices (vectorisable when `f` is).
#[inline(always)]
fn map1<T: Copy, U: Copy, F: Fn(T) -> U>(x: &[T], out: &mut [MaybeUninit<U>], f: &F) {
    for (o, &v) in out.iter_mut().zip(x) {
        o.write(f(v));
    }
}

/// `out[i] = f(x[i], y[i])` over equal-length slices.
#[inline(always)]
fn map2<T: Copy, U: Copy, F: Fn(T, T) -> U>(x: &[T], y: &[T], out: &mut [MaybeUninit<U>], f: &F) {
    for ((o, &p), &q) in out.iter_mut().zip(x).zip(y) {
        o.write(f(p, q));
    }
}

/// Applies `f` to `a` and `b` broadcast (numpy style) to `out_shape`.
///
/// Same-shape operands and a single-element operand are flat loops; else
/// the innermost output dimension is a tight loop over contiguous or
/// repeated elements, and the outer dimensions are walked per row. Large
/// outputs are split across threads.
pub(super) fn broadcast_map<T, U, F>(
    a: &[T],
    sa: &[usize],
    b: &[T],
    sb: &[usize],
    out_shape: &[usize],
    f: F,
) -> Result<Vec<U>>
where
    T: Copy + Sync,
    U: Copy + Send + 'static,
    F: Fn(T, T) -> U + Sync,
{
    let total: usize = out_shape.iter().product();
    if total == 0 {
        return Ok(Vec::new());
    }
    // Fast paths: same shape, or one side a single element.
    if a.len() == total && b.len() == total {
        // SAFETY: `map2` writes each element of the chunk `o`, zipped with
        // inputs of exactly `o.len()` elements (bounds-checked slices).
        return unsafe {
            try_build_vec(
                total,
                #[inline(always)]
                |s, o| {
                    let e = s + o.len();
                    map2(&a[s..e], &b[s..e], o, &f)
                },
            )
        };
    }
    if a.len() == 1 && b.len() == total {
        let x = a[0];
        // SAFETY: `map1` writes each element of the chunk `o`, zipped with
        // an input of exactly `o.len()` elements (bounds-checked slice).
        return unsafe {
            try_build_vec(
                total,
                #[inline(always)]
                |s, o| map1(&b[s..s + o.len()], o, &|y| f(x, y)),
            )
        };
    }
    if b.len() == 1 && a.len() == total {
        let y = b[0];
        // SAFETY: as above.
        return unsafe {
            try_build_vec(
                total,
                #[inline(always)]
                |s, o| map1(&a[s..s + o.len()], o, &|x| f(x, y)),
            )
        };
    }
    let (ta, tb) = (
        broadcast_strides(sa, out_shape),
        broadcast_strides(sb, out_shape),
    );
    // The same walk over fewer, longer rows where the operands allow.
    let (out_shape, [ta, tb]) = coalesce(out_shape, [&ta, &tb]);
    let out_shape = &out_shape[..];
    let rank = out_shape.len();
    let inner = out_shape[rank - 1];
    let (ia, ib) = (ta[rank - 1], tb[rank - 1]);
    let outer_shape = &out_shape[..rank - 1];
    // Offsets of the first element of output row `r` in a and b.
    let row_offsets = |mut r: usize| {
        let (mut oa, mut ob) = (0, 0);
        for d in (0..rank - 1).rev() {
            let i = r % outer_shape[d];
            r /= outer_shape[d];
            oa += i * ta[d];
            ob += i * tb[d];
        }
        (oa, ob)
    };
    let row = |r: usize, dst: &mut [MaybeUninit<U>]| {
        let (oa, ob) = row_offsets(r);
        match (ia, ib) {
            (1, 1) => map2(&a[oa..oa + inner], &b[ob..ob + inner], dst, &f),
            (1, 0) => {
                let y = b[ob];
                map1(&a[oa..oa + inner], dst, &|x| f(x, y))
            }
            (0, 1) => {
                let x = a[oa];
                map1(&b[ob..ob + inner], dst, &|y| f(x, y))
            }
            _ => {
                for (j, d) in dst.iter_mut().enumerate() {
                    d.write(f(a[oa + j * ia], b[ob + j * ib]));
                }
            }
        }
    };
    // Chunks of whole rows, so each row is one tight loop.
    let rows = total / inner;
    let rows_per_chunk = units_per_task(total, rows);
    let chunk = rows_per_chunk * inner;
    let mut v: Vec<U> = Buf::try_vec_for_overwrite(total)?;
    let work = |(c, dst): (usize, &mut [MaybeUninit<U>])| {
        with_simd(
            #[inline(always)]
            || {
                for (j, d) in dst.chunks_mut(inner).enumerate() {
                    row(c * rows_per_chunk + j, d);
                }
            },
        )
    };
    let spare = &mut v.spare_capacity_mut()[..total];
    if chunk < total {
        spare.par_chunks_mut(chunk).enumerate().for_each(work);
    } else {
        work((0, spare));
    }
    // SAFETY: the chunks (`chunk` a whole number of rows, the last one
    // shorter but still whole rows as inner divides total) cover
    // `spare[..total]`, each row of `inner` elements goes to `row`, and
    // every arm of `row` writes each element of it (map1 and map2 zip
    // `dst` with inputs of exactly `inner` elements, sliced with bounds
    // checks, so a short input panics instead); total <= capacity
    // (`try_vec_for_overwrite`).
    unsafe { v.set_len(total) };
    Ok(v)
}

/// `(0..n).map(f)`, in parallel for large `n`; an OperationError when the
/// result cannot be allocated.
pub(super) fn par_map<U: Copy + Send + 'static, F: Fn(usize) -> U + Sync>(
    n: usize,
    f: F,
) -> Result<Vec<U>> {
    // SAFETY: the loop writes each element of the chunk `o`.
    unsafe {
        try_build_vec(
            n,
            #[inline(always)]
            |s, o| {
                for (i, d) in o.iter_mut().enumerate() {
                    d.write(f(s + i));
                }
            },
        )
    }
}

/// `x.map(f)`, vectorisable and in parallel for large inputs; an
/// OperationError when the result cannot be allocated.
pub(super) fn map_slice<T, U, F>(x: &[T], f: F) -> Result<Vec<U>>
where
    T: Copy + Sync,
    U: Copy + Send + 'static,
    F: Fn(T) -> U + Sync,
{
    // SAFETY: `map1` writes each element of the chunk `o`, zipped with an
    // input of exactly `o.len()` elements (bounds-checked slice).
    unsafe {
        try_build_vec(
            x.len(),
            #[inline(always)]
            |s, o| map1(&x[s..s + o.len()], o, &f),
        )
    }
}

/// Integer element types: wrapping arithmetic that never panics.
trait Int: Copy + Ord + Send + Sync + Default + 'static {
    const ZERO: Self;
    const ONE: Self;
    fn wadd(self, o: Self) -> Self;
    fn wsub(self, o: Self) -> Self;
    fn wmul(self, o: Self) -> Self;
    /// Quotient truncated toward zero; 0 when dividing by zero (a defined
    /// result instead of a panic or a trap; WebNN leaves it unspecified).
    fn wdiv(self, o: Self) -> Self;
    fn wneg(self) -> Self;
    fn wabs(self) -> Self;
    fn is_neg(self) -> bool;
    /// Parity (two's complement: right for negative values too).
    fn is_odd(self) -> bool;
    /// The exponent as u64 when it is non-negative.
    fn as_exp(self) -> Option<u64>;
    fn sat_from_f64(x: f64) -> Self;
}

macro_rules! int_impl {
    ($($t:ty),*) => {$(
        impl Int for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            fn wadd(self, o: Self) -> Self { self.wrapping_add(o) }
            fn wsub(self, o: Self) -> Self { self.wrapping_sub(o) }
            fn wmul(self, o: Self) -> Self { self.wrapping_mul(o) }
            fn wdiv(self, o: Self) -> Self {
                // Division by zero yields 0; MIN / -1 wraps to MIN.
                if o == 0 { 0 } else { self.wrapping_div(o) }
            }
            fn wneg(self) -> Self { self.wrapping_neg() }
            #[allow(unused_comparisons)]
            fn wabs(self) -> Self { if self < 0 { self.wrapping_neg() } else { self } }
            #[allow(unused_comparisons)]
            fn is_neg(self) -> bool { self < 0 }
            fn is_odd(self) -> bool { self & 1 == 1 }
            #[allow(unused_comparisons)]
            fn as_exp(self) -> Option<u64> { if self < 0 { None } else { Some(self as u64) } }
            // `as` from f64 truncates toward zero, saturates at the type's
            // bounds and maps NaN to 0.
            fn sat_from_f64(x: f64) -> Self { x as $t }
        }
    )*};
}

int_impl!(i32, u32, i64, u64, i8, u8);

/// `base ^ exp` for integers: wrapping for non-negative exponents; for
/// negative ones the exact value where it is an integer (base 1 or -1) and
/// 0 otherwise (the truncated value of 1/base^|exp|).
fn int_pow<T: Int>(base: T, exp: T) -> T {
    match exp.as_exp() {
        Some(mut e) => {
            // Square-and-multiply over the full u64 exponent range.
            let (mut acc, mut b) = (T::ONE, base);
            while e > 0 {
                if e & 1 == 1 {
                    acc = acc.wmul(b);
                }
                b = b.wmul(b);
                e >>= 1;
            }
            acc
        }
        None => {
            if base == T::ONE {
                T::ONE
            } else if base.is_neg() && base.wneg() == T::ONE {
                // (-1)^e: 1 for even e, -1 for odd.
                if exp.is_odd() {
                    base
                } else {
                    T::ONE
                }
            } else {
                T::ZERO
            }
        }
    }
}

/// Binds `$f` to the integer function of `$k` on `$t` (a zero-sized fn
/// item, so each use is monomorphised and inlined) and evaluates `$body`.
macro_rules! with_int_binary {
    ($k:expr, $t:ty, $f:ident => $body:expr) => {
        match $k {
            BinaryKind::Add => {
                let $f = <$t as Int>::wadd;
                $body
            }
            BinaryKind::Sub => {
                let $f = <$t as Int>::wsub;
                $body
            }
            BinaryKind::Mul => {
                let $f = <$t as Int>::wmul;
                $body
            }
            BinaryKind::Div => {
                let $f = <$t as Int>::wdiv;
                $body
            }
            BinaryKind::Max => {
                let $f = |x: $t, y: $t| x.max(y);
                $body
            }
            BinaryKind::Min => {
                let $f = |x: $t, y: $t| x.min(y);
                $body
            }
            BinaryKind::Pow => {
                let $f = int_pow::<$t>;
                $body
            }
        }
    };
}

/// Float max/min propagate NaN (unlike `f32::max`), so a NaN input is not
/// silently replaced by the other operand.
fn fmax(x: f32, y: f32) -> f32 {
    if x.is_nan() || y.is_nan() {
        f32::NAN
    } else {
        x.max(y)
    }
}

fn fmin(x: f32, y: f32) -> f32 {
    if x.is_nan() || y.is_nan() {
        f32::NAN
    } else {
        x.min(y)
    }
}

/// Binds `$f` to the f32 function of `$k` (each arm monomorphised, so the
/// loops around it vectorise) and evaluates `$body`.
macro_rules! with_float_binary {
    ($k:expr, $f:ident => $body:expr) => {
        match $k {
            BinaryKind::Add => {
                let $f = |x: f32, y: f32| x + y;
                $body
            }
            BinaryKind::Sub => {
                let $f = |x: f32, y: f32| x - y;
                $body
            }
            BinaryKind::Mul => {
                let $f = |x: f32, y: f32| x * y;
                $body
            }
            BinaryKind::Div => {
                let $f = |x: f32, y: f32| x / y;
                $body
            }
            BinaryKind::Max => {
                let $f = fmax;
                $body
            }
            BinaryKind::Min => {
                let $f = fmin;
                $body
            }
            BinaryKind::Pow => {
                let $f = f32::powf;
                $body
            }
        }
    };
}

fn check_len(b: &Buf, d: &OperandDescriptor) -> Result<()> {
    if b.len() == d.element_count() {
        Ok(())
    } else {
        Err(Error::operation(
            "a tensor does not hold as many elements as its shape",
        ))
    }
}

fn mismatch() -> Error {
    Error::operation("an element-wise kernel got operands of different types")
}

/// `pow` by a one-element exponent that an exact IEEE operation gives:
/// `x * x` for 2 (pow's value, rounded once), `sqrt` for 0.5 (but -0 and
/// -inf, whose square roots are -0 and NaN, have pow +0 and +inf) and
/// `1 / x` for -1. Converters write a layer normalisation's variance as
/// `pow(d, 2)`, which went through libm's `powf` per element (10 ms for
/// 1M values against about 1 for a multiply), and the tanh form of GELU
/// as `pow(x, 3)` (3.6 ms for 1M values through `powf`). 3 and 4 are
/// products in f64 rounded once to f32: `x * x` is exact there and the
/// last product one rounding, and the f32 rounding of that is the
/// correctly rounded power for every float32 (checked over all of them
/// against the exact integer power: none differ, where glibc's `powf`
/// misses the cube of 477,841 positive floats by an ulp).
#[derive(Clone, Copy)]
enum PowBy {
    Square,
    Cube,
    Fourth,
    Sqrt,
    Reciprocal,
}

impl PowBy {
    /// The form for `x ** y` where `y` broadcasts one value over an `x` of
    /// the output's shape; None for any other exponent or shape.
    fn of(x: &Buf, y: &Buf, out: &OperandDescriptor) -> Option<PowBy> {
        if x.len() != out.element_count() {
            return None;
        }
        // Operands of two types are left to `binary`, which refuses them.
        let e = match (x, y) {
            (Buf::F32(_), Buf::F32(v)) if v.len() == 1 => v[0],
            (Buf::F16(_), Buf::F16(v)) if v.len() == 1 => f16_to_f32(v[0]),
            _ => return None,
        };
        if e == 2.0 {
            Some(PowBy::Square)
        } else if e == 3.0 {
            Some(PowBy::Cube)
        } else if e == 4.0 {
            Some(PowBy::Fourth)
        } else if e == 0.5 {
            Some(PowBy::Sqrt)
        } else if e == -1.0 {
            Some(PowBy::Reciprocal)
        } else {
            None
        }
    }
}

/// Binds `$f` to the f32 function of a [`PowBy`] and evaluates `$body`.
macro_rules! with_pow_by {
    ($p:expr, $f:ident => $body:expr) => {
        match $p {
            PowBy::Square => {
                let $f = |x: f32| x * x;
                $body
            }
            PowBy::Cube => {
                let $f = |x: f32| {
                    let d = x as f64;
                    (d * d * d) as f32
                };
                $body
            }
            PowBy::Fourth => {
                let $f = |x: f32| {
                    let d = x as f64;
                    let s = d * d;
                    (s * s) as f32
                };
                $body
            }
            PowBy::Sqrt => {
                let $f = |x: f32| {
                    if x == 0.0 {
                        0.0
                    } else if x == f32::NEG_INFINITY {
                        f32::INFINITY
                    } else {
                        x.sqrt()
                    }
                };
                $body
            }
            PowBy::Reciprocal => {
                let $f = |x: f32| 1.0 / x;
                $body
            }
        }
    };
}

/// Element-wise `add`, `sub`, `mul`, `div`, `max`, `min`, `pow` with
/// bidirectional broadcasting, for every numeric type.
pub fn binary(
    k: BinaryKind,
    a: &Buf,
    da: &OperandDescriptor,
    b: &Buf,
    db: &OperandDescriptor,
    out: &OperandDescriptor,
) -> Result<Buf> {
    check_len(a, da)?;
    check_len(b, db)?;
    let rank = out.rank();
    let fits = |s: &[usize]| {
        s.len() <= rank
            && s.iter()
                .rev()
                .zip(out.shape.iter().rev())
                .all(|(&x, &o)| x == o || x == 1)
    };
    if !fits(&da.shape) || !fits(&db.shape) {
        return Err(Error::operation(
            "the operands do not broadcast to the output",
        ));
    }
    let (sa, sb, so) = (&da.shape[..], &db.shape[..], &out.shape[..]);
    if let Some(p) = (k == BinaryKind::Pow)
        .then(|| PowBy::of(a, b, out))
        .flatten()
    {
        match a {
            Buf::F32(x) => return Ok(Buf::F32(with_pow_by!(p, f => map_slice(x, f)?))),
            Buf::F16(h) => {
                return Ok(Buf::F16(with_pow_by!(p, f => halves::map_halves(h, f)?)));
            }
            _ => {}
        }
    }
    macro_rules! ints {
        ($x:ident, $variant:ident, $t:ty) => {{
            let Buf::$variant(y) = b else {
                return Err(mismatch());
            };
            Buf::$variant(with_int_binary!(k, $t, f => broadcast_map($x, sa, y, sb, so, f)?))
        }};
    }
    Ok(match a {
        Buf::F32(x) => {
            let Buf::F32(y) = b else {
                return Err(mismatch());
            };
            Buf::F32(with_float_binary!(k, f => broadcast_map(x, sa, y, sb, so, f)?))
        }
        Buf::F16(hx) => {
            let Buf::F16(hy) = b else {
                return Err(mismatch());
            };
            // In f32 and rounded once: the bits of each element's own
            // conversions (see `unary`), on whole vectors; operands of
            // the output's shape a chunk at a time.
            if sa == so && sb == so {
                return Ok(Buf::F16(
                    with_float_binary!(k, f => halves::zip_halves(hx, hy, f)?),
                ));
            }
            Buf::F16(with_float_binary!(k, f => halves::broadcast_halves(hx, sa, hy, sb, so, f)?))
        }
        Buf::I32(x) => ints!(x, I32, i32),
        Buf::U32(x) => ints!(x, U32, u32),
        Buf::I64(x) => ints!(x, I64, i64),
        Buf::U64(x) => ints!(x, U64, u64),
        Buf::I8(x) => ints!(x, I8, i8),
        Buf::U8(x) => ints!(x, U8, u8),
    })
}

/// `acc[i] = f(acc[i], other[i])` with `other` (shape `so`) broadcast to
/// `out_shape`, the shape of `acc`; rows in parallel for large outputs.
fn binary_in_place<F: Fn(f32, f32) -> f32 + Sync>(
    acc: &mut [f32],
    other: &[f32],
    so: &[usize],
    out_shape: &[usize],
    f: F,
) {
    let total = acc.len();
    if total == 0 {
        return;
    }
    // The same walk over fewer, longer rows where the operand allows (as
    // `broadcast_map`): RoPE's `[T, 12, 32, 2]` times `[T, 1, 32, 2]` in
    // place ran as rows of 2, with a row's offset found by divisions, at
    // eight times the time of the copying form.
    let tb = broadcast_strides(so, out_shape);
    let acc_strides = broadcast_strides(out_shape, out_shape);
    let (out_shape, [_, tb]) = coalesce(out_shape, [&acc_strides, &tb]);
    let out_shape = &out_shape[..];
    let rank = out_shape.len();
    let inner = out_shape[rank - 1].max(1);
    let ib = tb[rank - 1];
    let outer_shape = &out_shape[..rank - 1];
    let row_offset = |mut r: usize| {
        let mut ob = 0;
        for d in (0..outer_shape.len()).rev() {
            let i = r % outer_shape[d];
            r /= outer_shape[d];
            ob += i * tb[d];
        }
        ob
    };
    let same = other.len() == total;
    let scalar = other.len() == 1;
    // Runs over whole rows starting at row `r0`.
    let work = |r0: usize, dst: &mut [f32]| {
        with_simd(
            #[inline(always)]
            || {
                if same {
                    let s = r0 * inner;
                    let len = dst.len();
                    for (x, &y) in dst.iter_mut().zip(&other[s..s + len]) {
                        *x = f(*x, y);
                    }
                } else if scalar {
                    let y = other[0];
                    for x in dst.iter_mut() {
                        *x = f(*x, y);
                    }
                } else {
                    for (j, row) in dst.chunks_mut(inner).enumerate() {
                        let ob = row_offset(r0 + j);
                        if ib == 1 {
                            for (x, &y) in row.iter_mut().zip(&other[ob..ob + inner]) {
                                *x = f(*x, y);
                            }
                        } else {
                            let y = other[ob];
                            for x in row.iter_mut() {
                                *x = f(*x, y);
                            }
                        }
                    }
                }
            },
        )
    };
    let per = units_per_task(total, total / inner);
    if per * inner < total {
        acc.par_chunks_mut(per * inner)
            .enumerate()
            .for_each(|(c, dst)| work(c * per, dst));
    } else {
        work(0, acc);
    }
}

/// [`binary`] that may write into an operand handed over as owned (one of
/// the output's shape and type), saving the output allocation.
pub fn binary_owned(
    k: BinaryKind,
    a: Cow<'_, Buf>,
    da: &OperandDescriptor,
    b: Cow<'_, Buf>,
    db: &OperandDescriptor,
    out: &OperandDescriptor,
) -> Result<Buf> {
    let total = out.element_count();
    let fits = |s: &[usize]| {
        s.len() <= out.rank()
            && s.iter()
                .rev()
                .zip(out.shape.iter().rev())
                .all(|(&x, &o)| x == o || x == 1)
    };
    let usable = |x: &Cow<'_, Buf>, d: &OperandDescriptor| {
        matches!(x, Cow::Owned(Buf::F32(_)))
            && x.len() == total
            && d.element_count() == total
            && out.data_type == crate::types::DataType::Float32
    };
    let shapes_ok = a.len() == da.element_count()
        && b.len() == db.element_count()
        && fits(&da.shape)
        && fits(&db.shape);
    if shapes_ok && matches!(&*a, Buf::F32(_)) && matches!(&*b, Buf::F32(_)) {
        let by = (k == BinaryKind::Pow)
            .then(|| PowBy::of(&a, &b, out))
            .flatten();
        if let (Some(p), true) = (by, usable(&a, da)) {
            let Cow::Owned(Buf::F32(mut x)) = a else {
                unreachable!()
            };
            with_pow_by!(p, f => map_in_place(&mut x, f));
            return Ok(Buf::F32(x));
        }
        if usable(&a, da) {
            let (Cow::Owned(Buf::F32(mut x)), Buf::F32(y)) = (a, &*b) else {
                unreachable!()
            };
            with_float_binary!(k, f => binary_in_place(&mut x, y, &db.shape, &out.shape, f));
            return Ok(Buf::F32(x));
        }
        if usable(&b, db) {
            let (Buf::F32(x), Cow::Owned(Buf::F32(mut y))) = (&*a, b) else {
                unreachable!()
            };
            with_float_binary!(k, f => {
                binary_in_place(&mut y, x, &da.shape, &out.shape, |q, p| f(p, q))
            });
            return Ok(Buf::F32(y));
        }
    }
    binary(k, &a, da, &b, db, out)
}

/// Returns its argument: a place where a closure can carry
/// `#[inline(always)]` (an attribute on a closure is stable in argument
/// position, not in a `let`).
///
/// A function item bound to a variable is called through its `Fn::call`
/// shim, which LLVM may leave out of line once the body is large; outlined,
/// it loses `with_simd`'s target features and runs one scalar SSE2 element
/// per call (erf of 1M values: 13 ms instead of 2.5).
#[inline(always)]
pub(super) fn inlined<F: Fn(f32) -> f32>(f: F) -> F {
    f
}

/// Binds `$f` to the f32 function of `$k` (monomorphised per arm, so the
/// loop around it is inlined and, where the function allows, vectorised)
/// and evaluates `$body`.
macro_rules! with_float_unary {
    ($k:expr, $f:ident => $body:expr) => {
        match $k {
            UnaryKind::Abs => {
                let $f = f32::abs;
                $body
            }
            UnaryKind::Neg => {
                let $f = |x: f32| -x;
                $body
            }
            UnaryKind::Exp => {
                let $f = inlined(
                    #[inline(always)]
                    |x: f32| exp_f32(x),
                );
                $body
            }
            UnaryKind::Log => {
                let $f = inlined(
                    #[inline(always)]
                    |x: f32| log_f32(x),
                );
                $body
            }
            UnaryKind::Sqrt => {
                let $f = f32::sqrt;
                $body
            }
            // NaN stays NaN (a plain max(0) would turn it into 0).
            UnaryKind::Relu => {
                let $f = |x: f32| if x < 0.0 { 0.0 } else { x };
                $body
            }
            UnaryKind::Sigmoid => {
                let $f = inlined(
                    #[inline(always)]
                    |x: f32| sigmoid(x),
                );
                $body
            }
            UnaryKind::Tanh => {
                let $f = inlined(
                    #[inline(always)]
                    |x: f32| tanh_f32(x),
                );
                $body
            }
            UnaryKind::Ceil => {
                let $f = f32::ceil;
                $body
            }
            UnaryKind::Cos => {
                let $f = inlined(
                    #[inline(always)]
                    |x: f32| cos_f32(x),
                );
                $body
            }
            UnaryKind::Erf => {
                let $f = inlined(
                    #[inline(always)]
                    |x: f32| erf_f32(x),
                );
                $body
            }
            UnaryKind::Floor => {
                let $f = f32::floor;
                $body
            }
            UnaryKind::Identity => {
                let $f = |x: f32| x;
                $body
            }
            UnaryKind::Reciprocal => {
                let $f = |x: f32| 1.0 / x;
                $body
            }
            UnaryKind::RoundEven => {
                let $f = f32::round_ties_even;
                $body
            }
            UnaryKind::Sin => {
                let $f = inlined(
                    #[inline(always)]
                    |x: f32| sin_f32(x),
                );
                $body
            }
            // 1 if > 0, -1 if < 0, else 0: the spec's "0 otherwise" takes
            // in NaN.
            UnaryKind::Sign => {
                let $f = |x: f32| {
                    if x > 0.0 {
                        1.0
                    } else if x < 0.0 {
                        -1.0
                    } else {
                        0.0f32
                    }
                };
                $body
            }
            UnaryKind::Tan => {
                let $f = inlined(
                    #[inline(always)]
                    |x: f32| tan_f32(x),
                );
                $body
            }
        }
    };
}

#[cfg(test)]
fn float_unary(k: UnaryKind) -> fn(f32) -> f32 {
    with_float_unary!(k, f => f as fn(f32) -> f32)
}

#[cfg(test)]
fn float_binary(k: BinaryKind) -> fn(f32, f32) -> f32 {
    with_float_binary!(k, f => f as fn(f32, f32) -> f32)
}

fn int_unary<T: Int>(k: UnaryKind, v: &[T]) -> Result<Vec<T>> {
    // Each arm its own closure, so that `map_slice` is monomorphised
    // around it and the loop runs on vectors; a `fn` pointer chosen by
    // the match was called once per element (abs of 1M int32: 1.86 ms
    // against 0.16 for an add).
    match k {
        UnaryKind::Abs => map_slice(v, |x: T| x.wabs()),
        UnaryKind::Neg => map_slice(v, |x: T| x.wneg()),
        UnaryKind::Relu => map_slice(v, |x: T| x.max(T::ZERO)),
        UnaryKind::Identity => map_slice(v, |x: T| x),
        UnaryKind::Sign => map_slice(v, |x: T| {
            if x.is_neg() {
                T::ONE.wneg()
            } else if x == T::ZERO {
                T::ZERO
            } else {
                T::ONE
            }
        }),
        _ => Err(Error::operation(format!(
            "{} is not defined for integer tensors",
            k.name()
        ))),
    }
}

/// sin, cos and tan of the finite values beyond [`TRIG_MAX`], which the
/// vectorised forms do not reduce exactly: libm's, one by one (a pass
/// that finds none in most tensors). float16 never needs it: its largest
/// value is 65504.
fn trig_beyond_reduction(k: UnaryKind, x: &[f32], r: &mut [f32]) {
    let f: fn(f32) -> f32 = match k {
        UnaryKind::Sin => f32::sin,
        UnaryKind::Cos => f32::cos,
        UnaryKind::Tan => f32::tan,
        _ => return,
    };
    // Beyond the bound and finite: `abs` of an infinity is not below
    // infinity, and a NaN compares false.
    let beyond = |v: f32| v.abs() > TRIG_MAX && v.abs() < f32::INFINITY;
    // Blocks searched by a reduction without an early exit (it
    // vectorises; a search that stops at the first hit does not), and
    // fixed only where one holds such a value.
    with_simd(
        #[inline(always)]
        || {
            for (rc, xc) in r.chunks_mut(256).zip(x.chunks(256)) {
                if xc.iter().fold(false, |a, &v| a | beyond(v)) {
                    for (o, &v) in rc.iter_mut().zip(xc) {
                        if beyond(v) {
                            *o = f(v);
                        }
                    }
                }
            }
        },
    );
}

/// Element-wise unary operators. `abs`, `neg`, `relu`, `sign` also take
/// integers (wrapping) and `identity` every type; the others are
/// float-only.
pub fn unary(k: UnaryKind, x: &Buf, out: &OperandDescriptor) -> Result<Buf> {
    if x.len() != out.element_count() {
        return Err(Error::operation(
            "unary: the output size differs from the input",
        ));
    }
    Ok(match x {
        Buf::F32(v) => {
            let mut r = with_float_unary!(k, f => map_slice(v, f)?);
            trig_beyond_reduction(k, v, &mut r);
            Buf::F32(r)
        }
        // Widened (exactly), computed in f32 and rounded once, as
        // `f32_to_f16(f(f16_to_f32(h)))` per element would give (a NaN
        // comes out quiet either way), but with F16C's conversions and
        // the f32 loop on whole vectors rather than each element
        // converted in software alone: an order of magnitude faster.
        Buf::F16(h) => Buf::F16(with_float_unary!(k, f => halves::map_halves(h, f)?)),
        Buf::I32(v) => Buf::I32(int_unary(k, v)?),
        Buf::U32(v) => Buf::U32(int_unary(k, v)?),
        Buf::I64(v) => Buf::I64(int_unary(k, v)?),
        Buf::U64(v) => Buf::U64(int_unary(k, v)?),
        Buf::I8(v) => Buf::I8(int_unary(k, v)?),
        Buf::U8(v) => Buf::U8(int_unary(k, v)?),
    })
}

fn clamp_int<T: Int>(v: &[T], min: f64, max: f64) -> Result<Vec<T>> {
    // The bounds are converted to the input's type by saturation, then
    // compared exactly in that type.
    let (lo, hi) = (T::sat_from_f64(min), T::sat_from_f64(max));
    map_slice(v, |x| x.max(lo).min(hi))
}

/// `clamp`: bounds compared in the input's type (integers: the bounds
/// saturated to the type's range; floats: the bounds as f32). NaN stays NaN.
pub fn clamp(x: &Buf, min: f64, max: f64, out: &OperandDescriptor) -> Result<Buf> {
    if x.len() != out.element_count() {
        return Err(Error::operation(
            "clamp: the output size differs from the input",
        ));
    }
    let (lo, hi) = (min as f32, max as f32);
    Ok(match x {
        Buf::F32(v) => Buf::F32(map_slice(v, move |x| clamp_f32(x, lo, hi))?),
        // In f32 and rounded once (see `unary`).
        Buf::F16(h) => Buf::F16(halves::map_halves(h, move |x| clamp_f32(x, lo, hi))?),
        Buf::I32(v) => Buf::I32(clamp_int(v, min, max)?),
        Buf::U32(v) => Buf::U32(clamp_int(v, min, max)?),
        Buf::I64(v) => Buf::I64(clamp_int(v, min, max)?),
        Buf::U64(v) => Buf::U64(clamp_int(v, min, max)?),
        Buf::I8(v) => Buf::I8(clamp_int(v, min, max)?),
        Buf::U8(v) => Buf::U8(clamp_int(v, min, max)?),
    })
}

/// The elements of a float buffer as an owned f32 vector: a float32 buffer
/// handed over is reused as is.
pub(super) fn owned_floats(x: Cow<'_, Buf>) -> Result<Vec<f32>> {
    match x {
        Cow::Owned(Buf::F32(v)) => Ok(v),
        Cow::Borrowed(Buf::F32(v)) => pooled_copy(v),
        other => Ok(floats(&other)?.into_owned()),
    }
}

// Last: the tests use the macros above, which are in scope only after
// their definitions.
#[cfg(test)]
mod tests;

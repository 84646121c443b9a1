//! Element-wise CPU kernels: binary operators with broadcasting, unary
//! operators, clamp, softmax and cast.
//!
//! Floats compute in f32 (float16 is widened exactly and the result rounded
//! once). Integer arithmetic wraps and never panics: kernels must not abort
//! the process whatever the data.

use std::borrow::Cow;
use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::f16::{f16_to_f32, f32_to_f16};
use crate::graph::op::{BinaryKind, UnaryKind};
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

use super::sgemm::clamp as clamp_f32;
use super::util::{broadcast_strides, floats, from_floats};

/// Output elements above which element-wise loops are split across threads.
const PAR_MIN: usize = 1 << 16;

/// Builds a vector of `n` elements without zero-filling it first: `fill`
/// receives the offset of a chunk and the chunk, and must write every
/// element of it. Chunks run in parallel when `n` is large and the pool has
/// more than one thread.
pub(super) fn build_vec<U, F>(n: usize, fill: F) -> Vec<U>
where
    U: Copy + Send + 'static,
    F: Fn(usize, &mut [MaybeUninit<U>]) + Sync,
{
    let mut v: Vec<U> = Buf::vec_for_overwrite(n);
    {
        let spare = &mut v.spare_capacity_mut()[..n];
        let threads = rayon::current_num_threads();
        if n >= PAR_MIN && threads > 1 {
            // A few chunks per thread balance the load without much
            // scheduling; whole cache lines per chunk.
            let chunk = n.div_ceil(threads * 4).next_multiple_of(16);
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
    // SAFETY: `fill` wrote all `n` elements (every caller writes each element
    // of the chunk it is given), and `n` is within the capacity.
    unsafe { v.set_len(n) };
    v
}

/// Runs `f`, compiled for the widest vectors this CPU has: AVX-512
/// (F, BW, DQ, VL) where it has it, else AVX2 and FMA, else the baseline
/// target. The closures of the element-wise loops inline into it, so
/// their loops use 16- or 8-wide vectors. The loops are plain scalar code
/// that the compiler vectorises without reordering any arithmetic, so a
/// lane's result is the same at every width. `WEBNN_CPU_ISA=avx2` in the
/// environment (read once) keeps an AVX-512 machine on AVX2, for
/// comparisons.
#[inline(always)]
pub(super) fn with_simd<R, F: FnOnce() -> R>(f: F) -> R {
    // SAFETY: `simd_level` detected the features.
    unsafe { with_simd_at(simd_level(), f) }
}

/// Runs `f` compiled for `level` (the tests run each level the CPU has).
///
/// # Safety
/// The CPU has `level`'s features (it is at most [`detected_level`]).
#[inline(always)]
pub(super) unsafe fn with_simd_at<R, F: FnOnce() -> R>(level: SimdLevel, f: F) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
        unsafe fn avx512<R, F: FnOnce() -> R>(f: F) -> R {
            f()
        }
        #[target_feature(enable = "avx2,fma")]
        unsafe fn avx2<R, F: FnOnce() -> R>(f: F) -> R {
            f()
        }
        match level {
            // SAFETY: the caller's contract.
            SimdLevel::Avx512 => return unsafe { avx512(f) },
            // SAFETY: as above.
            SimdLevel::Avx2 => return unsafe { avx2(f) },
            SimdLevel::Baseline => {}
        }
    }
    let _ = level;
    f()
}

/// The vectors [`with_simd`] compiles for.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub(super) enum SimdLevel {
    Baseline,
    Avx2,
    Avx512,
}

impl SimdLevel {
    /// What the bench prints.
    pub(super) fn name(self) -> &'static str {
        match self {
            SimdLevel::Baseline => "baseline",
            SimdLevel::Avx2 => "avx2+fma",
            SimdLevel::Avx512 => "avx512f",
        }
    }
}

/// The level the element-wise loops run at in this process: the widest
/// the CPU has, or AVX2 with `WEBNN_CPU_ISA=avx2` (read once).
pub(super) fn simd_level() -> SimdLevel {
    static LEVEL: std::sync::OnceLock<SimdLevel> = std::sync::OnceLock::new();
    *LEVEL.get_or_init(|| {
        let narrow = crate::backend::cpu::avx2_requested();
        match detected_level() {
            SimdLevel::Avx512 if narrow => SimdLevel::Avx2,
            l => l,
        }
    })
}

/// The widest level this CPU has.
pub(super) fn detected_level() -> SimdLevel {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512dq")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
        {
            return SimdLevel::Avx512;
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return SimdLevel::Avx2;
        }
    }
    SimdLevel::Baseline
}

/// `e^x` in f32 within about 1 ulp over the whole range (subnormal results
/// included, overflow to +inf, NaN kept), written with plain arithmetic and
/// bit operations so that loops over it vectorise (libm's `expf` does
/// not).
#[inline(always)]
pub(super) fn exp_f32(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that n * LN2_HI is exact for |n| < 256.
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // 1.5 * 2^23: adding it rounds to an integer held in the low mantissa.
    const SHIFT: f32 = 12_582_912.0;
    // At or below -104 the result rounds to 0: those lanes compute e^0
    // and give 0, so that no multiply in them underflows. (An underflow
    // to a subnormal or 0 costs a microcode assist on many x86 cores:
    // a softmax whose row is mostly masked at -1e9 took 370 us instead of
    // 140 for [1, 12, 128, 128] on an AVX-512 Zen 5.) Above 89 it
    // overflows either way.
    let zero = x <= -104.0;
    let x = if zero { 0.0 } else { x.clamp(-104.0, 89.0) };
    let t = x * LOG2E + SHIFT;
    let n = t - SHIFT;
    let ni = (t.to_bits() as i32).wrapping_sub(SHIFT.to_bits() as i32);
    let r = (x - n * LN2_HI) - n * LN2_LO;
    // Taylor series of e^r for |r| <= ln2/2 to degree 7 (error < 1e-8).
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    // 2^n as two normal factors, so results down to the subnormals round
    // only once.
    let n1 = ni >> 1;
    let n2 = ni - n1;
    let s1 = f32::from_bits(((n1 + 127) as u32) << 23);
    let s2 = f32::from_bits(((n2 + 127) as u32) << 23);
    if zero {
        0.0
    } else {
        p * s1 * s2
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
) -> Vec<U>
where
    T: Copy + Sync,
    U: Copy + Send + 'static,
    F: Fn(T, T) -> U + Sync,
{
    let total: usize = out_shape.iter().product();
    if total == 0 {
        return Vec::new();
    }
    // Fast paths: same shape, or one side a single element.
    if a.len() == total && b.len() == total {
        return build_vec(
            total,
            #[inline(always)]
            |s, o| {
                let e = s + o.len();
                map2(&a[s..e], &b[s..e], o, &f)
            },
        );
    }
    if a.len() == 1 && b.len() == total {
        let x = a[0];
        return build_vec(
            total,
            #[inline(always)]
            |s, o| map1(&b[s..s + o.len()], o, &|y| f(x, y)),
        );
    }
    if b.len() == 1 && a.len() == total {
        let y = b[0];
        return build_vec(
            total,
            #[inline(always)]
            |s, o| map1(&a[s..s + o.len()], o, &|x| f(x, y)),
        );
    }
    let rank = out_shape.len();
    let ta = broadcast_strides(sa, out_shape);
    let tb = broadcast_strides(sb, out_shape);
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
    let rows_per_chunk = if total >= PAR_MIN {
        rows.div_ceil(rayon::current_num_threads() * 4).max(1)
    } else {
        rows
    };
    let chunk = rows_per_chunk * inner;
    let mut v: Vec<U> = Buf::vec_for_overwrite(total);
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
    // SAFETY: every row of the output was written above.
    unsafe { v.set_len(total) };
    v
}

/// `(0..n).map(f)`, in parallel for large `n`.
pub(super) fn par_map<U: Copy + Send + 'static, F: Fn(usize) -> U + Sync>(
    n: usize,
    f: F,
) -> Vec<U> {
    build_vec(
        n,
        #[inline(always)]
        |s, o| {
            for (i, d) in o.iter_mut().enumerate() {
                d.write(f(s + i));
            }
        },
    )
}

/// `x.map(f)`, vectorisable and in parallel for large inputs.
pub(super) fn map_slice<T, U, F>(x: &[T], f: F) -> Vec<U>
where
    T: Copy + Sync,
    U: Copy + Send + 'static,
    F: Fn(T) -> U + Sync,
{
    build_vec(
        x.len(),
        #[inline(always)]
        |s, o| map1(&x[s..s + o.len()], o, &f),
    )
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
    macro_rules! ints {
        ($x:ident, $variant:ident, $t:ty) => {{
            let Buf::$variant(y) = b else {
                return Err(mismatch());
            };
            Buf::$variant(with_int_binary!(k, $t, f => broadcast_map($x, sa, y, sb, so, f)))
        }};
    }
    Ok(match a {
        Buf::F32(x) => {
            let Buf::F32(y) = b else {
                return Err(mismatch());
            };
            Buf::F32(with_float_binary!(k, f => broadcast_map(x, sa, y, sb, so, f)))
        }
        Buf::F16(x) => {
            let Buf::F16(y) = b else {
                return Err(mismatch());
            };
            Buf::F16(
                with_float_binary!(k, f => broadcast_map(x, sa, y, sb, so, |p, q| {
                    f32_to_f16(f(f16_to_f32(p), f16_to_f32(q)))
                })),
            )
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
    let rank = out_shape.len();
    let inner = if rank == 0 {
        1
    } else {
        out_shape[rank - 1].max(1)
    };
    let tb = broadcast_strides(so, out_shape);
    let ib = tb.last().copied().unwrap_or(0);
    let outer_shape = &out_shape[..rank.saturating_sub(1)];
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
    let rows = total / inner;
    let threads = rayon::current_num_threads();
    if total >= PAR_MIN && threads > 1 {
        let per = rows.div_ceil(threads * 4).max(1);
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

fn sigmoid(x: f32) -> f32 {
    // exp(-x) overflows to inf for very negative x, giving exactly 0.
    1.0 / (1.0 + (-x).exp())
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
                let $f = f32::exp;
                $body
            }
            UnaryKind::Log => {
                let $f = f32::ln;
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
                let $f = sigmoid;
                $body
            }
            UnaryKind::Tanh => {
                let $f = f32::tanh;
                $body
            }
            UnaryKind::Ceil => {
                let $f = f32::ceil;
                $body
            }
            UnaryKind::Cos => {
                let $f = f32::cos;
                $body
            }
            UnaryKind::Erf => {
                let $f = |x: f32| erf(x as f64) as f32;
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
                let $f = f32::sin;
                $body
            }
            // 1 if > 0, -1 if < 0, else the input itself (±0 and NaN).
            UnaryKind::Sign => {
                let $f = |x: f32| {
                    if x > 0.0 {
                        1.0
                    } else if x < 0.0 {
                        -1.0
                    } else {
                        x
                    }
                };
                $body
            }
            UnaryKind::Tan => {
                let $f = f32::tan;
                $body
            }
        }
    };
}

#[cfg(test)]
fn float_unary(k: UnaryKind) -> fn(f32) -> f32 {
    with_float_unary!(k, f => f as fn(f32) -> f32)
}

/// The error function in f64, accurate to a few ulps of f64 (far beyond
/// what the f32/f16 outputs keep).
///
/// For |x| <= 6 it sums the series of Abramowitz & Stegun 7.1.6,
/// `erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_{n>=0} 2^n x^(2n+1) / (1*3*...*(2n+1))`,
/// whose terms are all of one sign, so no cancellation loses precision
/// (unlike the alternating Maclaurin series). Beyond 6, 1 - erf(|x|) is
/// below 2.2e-17 and the result is ±1 in f64.
pub(super) fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    if a > 6.0 {
        return 1.0f64.copysign(x);
    }
    let x2 = a * a;
    let mut term = a;
    let mut sum = a;
    let mut n = 0.0f64;
    // The term ratio 2x^2/(2n+3) falls below 1 after n ~ x^2; stop once the
    // terms no longer change the sum (at most a few hundred steps).
    while n < 500.0 {
        term *= 2.0 * x2 / (2.0 * n + 3.0);
        let next = sum + term;
        if next == sum {
            break;
        }
        sum = next;
        n += 1.0;
    }
    let r = std::f64::consts::FRAC_2_SQRT_PI * (-x2).exp() * sum;
    r.min(1.0).copysign(x)
}

fn int_unary<T: Int>(k: UnaryKind, v: &[T]) -> Result<Vec<T>> {
    let f: fn(T) -> T = match k {
        UnaryKind::Abs => T::wabs,
        UnaryKind::Neg => T::wneg,
        UnaryKind::Relu => |x| x.max(T::ZERO),
        UnaryKind::Identity => |x| x,
        UnaryKind::Sign => |x| {
            if x.is_neg() {
                T::ONE.wneg()
            } else if x == T::ZERO {
                T::ZERO
            } else {
                T::ONE
            }
        },
        _ => {
            return Err(Error::operation(format!(
                "{} is not defined for integer tensors",
                k.name()
            )))
        }
    };
    Ok(par_map(v.len(), |i| f(v[i])))
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
        Buf::F32(v) => Buf::F32(with_float_unary!(k, f => map_slice(v, f))),
        Buf::F16(v) => Buf::F16(with_float_unary!(k, f => {
            map_slice(v, |h| f32_to_f16(f(f16_to_f32(h))))
        })),
        Buf::I32(v) => Buf::I32(int_unary(k, v)?),
        Buf::U32(v) => Buf::U32(int_unary(k, v)?),
        Buf::I64(v) => Buf::I64(int_unary(k, v)?),
        Buf::U64(v) => Buf::U64(int_unary(k, v)?),
        Buf::I8(v) => Buf::I8(int_unary(k, v)?),
        Buf::U8(v) => Buf::U8(int_unary(k, v)?),
    })
}

fn clamp_int<T: Int>(v: &[T], min: f64, max: f64) -> Vec<T> {
    // The bounds are converted to the input's type by saturation, then
    // compared exactly in that type.
    let (lo, hi) = (T::sat_from_f64(min), T::sat_from_f64(max));
    par_map(v.len(), |i| v[i].max(lo).min(hi))
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
        Buf::F32(v) => Buf::F32(par_map(v.len(), |i| clamp_f32(v[i], lo, hi))),
        Buf::F16(v) => Buf::F16(par_map(v.len(), |i| {
            f32_to_f16(clamp_f32(f16_to_f32(v[i]), lo, hi))
        })),
        Buf::I32(v) => Buf::I32(clamp_int(v, min, max)),
        Buf::U32(v) => Buf::U32(clamp_int(v, min, max)),
        Buf::I64(v) => Buf::I64(clamp_int(v, min, max)),
        Buf::U64(v) => Buf::U64(clamp_int(v, min, max)),
        Buf::I8(v) => Buf::I8(clamp_int(v, min, max)),
        Buf::U8(v) => Buf::U8(clamp_int(v, min, max)),
    })
}

/// Sum of `v` in f32 over 8 independent lanes (vectorisable, and more
/// accurate than one running sum).
#[inline(always)]
pub(super) fn sum_lanes(v: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let mut chunks = v.chunks_exact(8);
    for c in &mut chunks {
        for j in 0..8 {
            lanes[j] += c[j];
        }
    }
    let mut s = 0.0f32;
    for &x in chunks.remainder() {
        s += x;
    }
    for l in lanes {
        s += l;
    }
    s
}

/// Maximum of `v` (-inf when empty); vectorisable. NaNs may be skipped:
/// callers get NaN from them elsewhere.
#[inline(always)]
fn max_lanes(v: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let mut chunks = v.chunks_exact(8);
    for c in &mut chunks {
        for j in 0..8 {
            lanes[j] = if c[j] > lanes[j] { c[j] } else { lanes[j] };
        }
    }
    let mut m = f32::NEG_INFINITY;
    for &x in chunks.remainder().iter().chain(&lanes) {
        m = fmax(m, x);
    }
    m
}

/// Softmax of one contiguous row, in place.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn softmax_row(row: &mut [f32]) {
    // Subtracting the maximum keeps exp() from overflowing; the result is
    // mathematically unchanged.
    let mut m = max_lanes(row);
    if m.is_infinite() {
        // All -inf (0/0) or some +inf (inf/inf): no finite shift exists;
        // compute without it, which yields NaN like the formula does.
        m = 0.0;
    }
    for i in 0..row.len() {
        row[i] = exp_f32(row[i] - m);
    }
    let inv = 1.0 / sum_lanes(row);
    for i in 0..row.len() {
        row[i] *= inv;
    }
}

/// Softmax of one group of `n` values spaced `stride` apart, starting at
/// `x[0]`, in place.
fn softmax_strided(x: &mut [f32], n: usize, stride: usize) {
    let mut m = f32::NEG_INFINITY;
    for i in 0..n {
        m = fmax(m, x[i * stride]);
    }
    if m.is_infinite() {
        m = 0.0;
    }
    let mut sum = 0.0f32;
    for i in 0..n {
        let e = exp_f32(x[i * stride] - m);
        x[i * stride] = e;
        sum += e;
    }
    let inv = 1.0 / sum;
    for i in 0..n {
        x[i * stride] *= inv;
    }
}

/// `softmax` along `axis` (float types).
pub fn softmax(x: &Buf, axis: usize, out: &OperandDescriptor) -> Result<Buf> {
    softmax_owned(Cow::Borrowed(x), axis, out)
}

/// `softmax`, computed in the input's own buffer when it is handed over.
pub fn softmax_owned(x: Cow<'_, Buf>, axis: usize, out: &OperandDescriptor) -> Result<Buf> {
    let shape = &out.shape;
    if axis >= shape.len() || x.len() != out.element_count() {
        return Err(Error::operation("softmax: bad axis or size"));
    }
    let mut v = owned_floats(x)?;
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let block = n * inner;
    if let Some(groups) = v.len().checked_div(block) {
        // Groups of whole blocks per task.
        let per = if v.len() >= PAR_MIN && rayon::current_num_threads() > 1 {
            groups.div_ceil(rayon::current_num_threads() * 4).max(1) * block
        } else {
            v.len()
        };
        let run = |c: &mut [f32]| {
            with_simd(
                #[inline(always)]
                || {
                    if inner == 1 {
                        for row in c.chunks_exact_mut(n) {
                            softmax_row(row);
                        }
                    } else {
                        for b in c.chunks_exact_mut(block) {
                            for j in 0..inner {
                                softmax_strided(&mut b[j..], n, inner);
                            }
                        }
                    }
                },
            )
        };
        if per < v.len() {
            v.par_chunks_mut(per).for_each(run);
        } else {
            run(&mut v);
        }
    }
    from_floats(out.data_type, v)
}

/// The elements of a float buffer as an owned f32 vector: a float32 buffer
/// handed over is reused as is.
pub(super) fn owned_floats(x: Cow<'_, Buf>) -> Result<Vec<f32>> {
    match x {
        Cow::Owned(Buf::F32(v)) => Ok(v),
        Cow::Borrowed(Buf::F32(v)) => Ok(v.clone()),
        other => Ok(floats(&other)?.into_owned()),
    }
}

/// A source value of a cast: floats are exact in f32 (float16 widens
/// exactly), integers exact in i128.
#[derive(Clone, Copy)]
enum Num {
    F(f32),
    I(i128),
}

/// Converts to an integer type of `bits` bits (`signed` or not), whose
/// range is `[lo, hi]`.
///
/// Integers keep their lowest `bits` bits, read as two's complement for
/// signed targets: the WebNN cast table specifies this for out-of-range
/// integer values. Floats truncate toward zero; out of range the spec
/// leaves the result implementation-defined, and here it saturates at the
/// bounds with NaN becoming 0 (total and deterministic).
fn num_to_int(n: Num, lo: i128, hi: i128, bits: u32, signed: bool) -> i128 {
    match n {
        // `as i128` truncates, saturates and maps NaN to 0.
        Num::F(f) => (f as i128).clamp(lo, hi),
        Num::I(i) => {
            let shift = 128 - bits;
            if signed {
                (i << shift) >> shift
            } else {
                (((i << shift) as u128) >> shift) as i128
            }
        }
    }
}

fn num_to_f32(n: Num) -> f32 {
    match n {
        Num::F(f) => f,
        // Rounds to nearest, ties to even.
        Num::I(i) => i as f32,
    }
}

/// Converts every element to `to`. One generic loop per (source, target)
/// pair; `num` reads a source element.
fn cast_from<S: Copy + Sync, F: Fn(S) -> Num + Sync>(src: &[S], num: F, to: DataType) -> Buf {
    let n = src.len();
    macro_rules! int {
        ($variant:ident, $t:ty, $lo:expr, $hi:expr, $bits:expr, $signed:expr) => {
            Buf::$variant(par_map(n, |i| {
                num_to_int(num(src[i]), $lo as i128, $hi as i128, $bits, $signed) as $t
            }))
        };
    }
    match to {
        DataType::Float32 => Buf::F32(par_map(n, |i| num_to_f32(num(src[i])))),
        // Integers reach float16 through f32 without double rounding: those
        // not exact in f32 (beyond 2^24) overflow float16 either way.
        DataType::Float16 => Buf::F16(par_map(n, |i| f32_to_f16(num_to_f32(num(src[i]))))),
        DataType::Int32 => int!(I32, i32, i32::MIN, i32::MAX, 32, true),
        DataType::Uint32 => int!(U32, u32, 0, u32::MAX, 32, false),
        DataType::Int64 => int!(I64, i64, i64::MIN, i64::MAX, 64, true),
        DataType::Uint64 => int!(U64, u64, 0, u64::MAX, 64, false),
        DataType::Int8 => int!(I8, i8, i8::MIN, i8::MAX, 8, true),
        DataType::Uint8 => int!(U8, u8, 0, u8::MAX, 8, false),
        DataType::Int4 => int!(I8, i8, -8, 7, 4, true),
        DataType::Uint4 => int!(U8, u8, 0, 15, 4, false),
    }
}

/// `cast` between any two data types, following the cast table of the
/// WebNN spec: to float, the nearest representable value (ties to even),
/// +/-Infinity out of range; integer to integer, the same value, or out of
/// range the lowest N bits as two's complement; float to integer, truncated
/// toward zero, and out of range (implementation-defined) saturated, with
/// NaN giving 0. int4/uint4 follow the integer rules with N = 4.
pub fn cast(x: &Buf, to: DataType, out: &OperandDescriptor) -> Result<Buf> {
    if x.len() != out.element_count() {
        return Err(Error::operation(
            "cast: the output size differs from the input",
        ));
    }
    Ok(match x {
        Buf::F32(v) => cast_from(v, Num::F, to),
        Buf::F16(v) => cast_from(v, |h| Num::F(f16_to_f32(h)), to),
        Buf::I32(v) => cast_from(v, |i| Num::I(i as i128), to),
        Buf::U32(v) => cast_from(v, |i| Num::I(i as i128), to),
        Buf::I64(v) => cast_from(v, |i| Num::I(i as i128), to),
        Buf::U64(v) => cast_from(v, |i| Num::I(i as i128), to),
        Buf::I8(v) => cast_from(v, |i| Num::I(i as i128), to),
        Buf::U8(v) => cast_from(v, |i| Num::I(i as i128), to),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(dt: DataType, shape: &[usize]) -> OperandDescriptor {
        OperandDescriptor {
            data_type: dt,
            shape: shape.to_vec(),
        }
    }

    fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
        let mut idx = vec![0; shape.len()];
        for d in (0..shape.len()).rev() {
            idx[d] = i % shape[d];
            i /= shape[d];
        }
        idx
    }

    /// Flat index in `shape` of output multi-index `o` (right-aligned,
    /// broadcast dimensions read at 0).
    fn bcast_index(o: &[usize], shape: &[usize]) -> usize {
        let off = o.len() - shape.len();
        shape.iter().enumerate().fold(0, |acc, (d, &s)| {
            acc * s + if s == 1 { 0 } else { o[d + off] }
        })
    }

    const KINDS: [BinaryKind; 7] = [
        BinaryKind::Add,
        BinaryKind::Sub,
        BinaryKind::Mul,
        BinaryKind::Div,
        BinaryKind::Max,
        BinaryKind::Min,
        BinaryKind::Pow,
    ];

    fn naive_f64(k: BinaryKind, x: f64, y: f64) -> f64 {
        match k {
            BinaryKind::Add => x + y,
            BinaryKind::Sub => x - y,
            BinaryKind::Mul => x * y,
            BinaryKind::Div => x / y,
            BinaryKind::Max => x.max(y),
            BinaryKind::Min => x.min(y),
            BinaryKind::Pow => x.powf(y),
        }
    }

    #[test]
    fn binary_broadcast_matches_naive() {
        let cases: &[(&[usize], &[usize], &[usize])] = &[
            (&[2, 1, 3], &[4, 1], &[2, 4, 3]),
            (&[5], &[3, 1], &[3, 5]),
            (&[], &[2, 3], &[2, 3]),
            (&[2, 3], &[], &[2, 3]),
            (&[3, 4], &[3, 4], &[3, 4]),
            (&[1, 4, 1], &[3, 1, 5], &[3, 4, 5]),
            (&[2, 0, 3], &[1, 3], &[2, 0, 3]),
            (&[300, 300], &[300, 1], &[300, 300]),
        ];
        for &(sa, sb, so) in cases {
            let na: usize = sa.iter().product();
            let nb: usize = sb.iter().product();
            let a: Vec<f32> = (0..na).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
            let b: Vec<f32> = (0..nb).map(|i| 1.0 + (i % 5) as f32 * 0.5 - 1.5).collect();
            for k in KINDS {
                let r = binary(
                    k,
                    &Buf::F32(a.clone()),
                    &desc(DataType::Float32, sa),
                    &Buf::F32(b.clone()),
                    &desc(DataType::Float32, sb),
                    &desc(DataType::Float32, so),
                )
                .unwrap();
                let total: usize = so.iter().product();
                let expect: Vec<f32> = (0..total)
                    .map(|i| {
                        let o = unravel(i, so);
                        naive_f64(
                            k,
                            a[bcast_index(&o, sa)] as f64,
                            b[bcast_index(&o, sb)] as f64,
                        ) as f32
                    })
                    .collect();
                let Buf::F32(r) = r else { panic!() };
                assert_eq!(r.len(), expect.len());
                for (x, y) in r.iter().zip(&expect) {
                    assert!(
                        x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-6 * y.abs(),
                        "{k:?} {sa:?} {sb:?}: {x} vs {y}"
                    );
                }

                // The same on int32 (no pow of negatives: checked below).
                if k != BinaryKind::Pow {
                    let ai: Vec<i32> = (0..na as i32).map(|i| i * 3 - 7).collect();
                    let bi: Vec<i32> = (0..nb as i32).map(|i| i % 4 - 1).collect();
                    let r = binary(
                        k,
                        &Buf::I32(ai.clone()),
                        &desc(DataType::Int32, sa),
                        &Buf::I32(bi.clone()),
                        &desc(DataType::Int32, sb),
                        &desc(DataType::Int32, so),
                    )
                    .unwrap();
                    let expect: Vec<i32> = (0..total)
                        .map(|i| {
                            let o = unravel(i, so);
                            let (x, y) = (ai[bcast_index(&o, sa)], bi[bcast_index(&o, sb)]);
                            match k {
                                BinaryKind::Add => x + y,
                                BinaryKind::Sub => x - y,
                                BinaryKind::Mul => x * y,
                                BinaryKind::Div => {
                                    if y == 0 {
                                        0
                                    } else {
                                        x / y
                                    }
                                }
                                BinaryKind::Max => x.max(y),
                                BinaryKind::Min => x.min(y),
                                BinaryKind::Pow => unreachable!(),
                            }
                        })
                        .collect();
                    assert_eq!(r, Buf::I32(expect), "{k:?} {sa:?} {sb:?}");
                }
            }
        }
    }

    #[test]
    fn binary_float16_rounds_once() {
        let a = Buf::f16_from_f32(&[1.0, 2.5, -3.0, 1000.0]);
        let b = Buf::f16_from_f32(&[3.0]);
        let r = binary(
            BinaryKind::Div,
            &a,
            &desc(DataType::Float16, &[4]),
            &b,
            &desc(DataType::Float16, &[]),
            &desc(DataType::Float16, &[4]),
        )
        .unwrap();
        assert_eq!(
            r,
            Buf::f16_from_f32(&[1.0 / 3.0, 2.5 / 3.0, -1.0, 1000.0 / 3.0])
        );
        let r = binary(
            BinaryKind::Mul,
            &a,
            &desc(DataType::Float16, &[4]),
            &Buf::f16_from_f32(&[100.0]),
            &desc(DataType::Float16, &[1]),
            &desc(DataType::Float16, &[4]),
        )
        .unwrap();
        // 1000 * 100 overflows float16.
        assert_eq!(r, Buf::f16_from_f32(&[100.0, 250.0, -300.0, f32::INFINITY]));
    }

    fn bin<T: Clone>(
        k: BinaryKind,
        dt: DataType,
        a: Vec<T>,
        b: Vec<T>,
        wrap: fn(Vec<T>) -> Buf,
    ) -> Buf {
        let n = a.len();
        binary(
            k,
            &wrap(a),
            &desc(dt, &[n]),
            &wrap(b),
            &desc(dt, &[n]),
            &desc(dt, &[n]),
        )
        .unwrap()
    }

    #[test]
    fn integer_arithmetic_never_panics() {
        use BinaryKind::*;
        let i32s = |a: Vec<i32>, b: Vec<i32>, k| bin(k, DataType::Int32, a, b, Buf::I32);
        assert_eq!(
            i32s(vec![i32::MAX, i32::MIN], vec![1, 1], Add),
            Buf::I32(vec![i32::MIN, i32::MIN + 1])
        );
        assert_eq!(
            i32s(vec![i32::MIN, 5], vec![1, -7], Sub),
            Buf::I32(vec![i32::MAX, 12])
        );
        assert_eq!(
            i32s(vec![i32::MAX, -7], vec![2, 3], Mul),
            Buf::I32(vec![-2, -21])
        );
        assert_eq!(
            i32s(vec![7, i32::MIN, -7, 0], vec![0, -1, 2, 0], Div),
            Buf::I32(vec![0, i32::MIN, -3, 0])
        );
        assert_eq!(
            i32s(
                vec![2, 1, -1, -1, 3, 0, -2, 2],
                vec![-1, -5, -3, -2, 0, 0, 3, 31],
                Pow
            ),
            Buf::I32(vec![0, 1, -1, 1, 1, 1, -8, i32::MIN])
        );
        assert_eq!(i32s(vec![2], vec![i32::MAX], Pow), Buf::I32(vec![0]));
        assert_eq!(
            bin(
                Pow,
                DataType::Uint8,
                vec![3u8, 2, 0],
                vec![5, 8, 0],
                Buf::U8
            ),
            Buf::U8(vec![243, 0, 1])
        );
        assert_eq!(
            bin(
                Pow,
                DataType::Int64,
                vec![3i64, -1],
                vec![i64::MAX, i64::MIN],
                Buf::I64
            ),
            // 3 has order dividing 2^62 modulo 2^64, so 3^(2^63 - 1) is the
            // inverse of 3, 0xAAAA_AAAA_AAAA_AAAB.
            Buf::I64(vec![0xAAAA_AAAA_AAAA_AAABu64 as i64, 1])
        );
        assert_eq!(
            bin(Div, DataType::Uint64, vec![9u64, 9], vec![0, 2], Buf::U64),
            Buf::U64(vec![0, 4])
        );
        assert_eq!(
            bin(Sub, DataType::Uint32, vec![0u32], vec![1], Buf::U32),
            Buf::U32(vec![u32::MAX])
        );
        assert_eq!(
            bin(Max, DataType::Int8, vec![-128i8, 5], vec![127, -5], Buf::I8),
            Buf::I8(vec![127, 5])
        );
        assert_eq!(
            bin(Min, DataType::Int8, vec![-128i8, 5], vec![127, -5], Buf::I8),
            Buf::I8(vec![-128, -5])
        );
        // Mixed storage is an error, not a panic.
        assert!(binary(
            Add,
            &Buf::I32(vec![1]),
            &desc(DataType::Int32, &[1]),
            &Buf::F32(vec![1.0]),
            &desc(DataType::Float32, &[1]),
            &desc(DataType::Int32, &[1])
        )
        .is_err());
    }

    #[test]
    fn float_max_min_propagate_nan() {
        let r = bin(
            BinaryKind::Max,
            DataType::Float32,
            vec![f32::NAN, 1.0],
            vec![0.0, f32::NAN],
            Buf::F32,
        );
        let Buf::F32(r) = r else { panic!() };
        assert!(r[0].is_nan() && r[1].is_nan());
    }

    #[test]
    fn unary_ops() {
        let x = vec![-2.0f32, -0.5, 0.0, 0.5, 3.0, f32::NAN];
        let d = desc(DataType::Float32, &[6]);
        type Reference = (UnaryKind, fn(f64) -> f64);
        let refs: [Reference; 8] = [
            (UnaryKind::Abs, f64::abs),
            (UnaryKind::Neg, |v| -v),
            (UnaryKind::Exp, f64::exp),
            (UnaryKind::Log, f64::ln),
            (UnaryKind::Sqrt, f64::sqrt),
            (UnaryKind::Relu, |v| if v < 0.0 { 0.0 } else { v }),
            (UnaryKind::Sigmoid, |v| 1.0 / (1.0 + (-v).exp())),
            (UnaryKind::Tanh, f64::tanh),
        ];
        for (k, f) in refs {
            let Buf::F32(r) = unary(k, &Buf::F32(x.clone()), &d).unwrap() else {
                panic!()
            };
            for (a, &v) in r.iter().zip(&x) {
                let e = f(v as f64) as f32;
                assert!(
                    a == &e
                        || (a.is_nan() && e.is_nan())
                        || (a - e).abs() <= 2e-7 * (1.0 + e.abs()),
                    "{k:?}({v}) = {a}, want {e}"
                );
            }
            // float16: computed in f32, rounded once.
            let h = Buf::f16_from_f32(&x);
            let r = unary(k, &h, &desc(DataType::Float16, &[6])).unwrap();
            let xw = h.to_f32_vec();
            let Buf::F16(want) =
                Buf::f16_from_f32(&xw.iter().map(|&v| float_unary(k)(v)).collect::<Vec<_>>())
            else {
                panic!()
            };
            let Buf::F16(got) = r else { panic!() };
            assert_eq!(got, want, "{k:?}");
        }
        // Sigmoid saturates without NaN.
        let Buf::F32(r) = unary(
            UnaryKind::Sigmoid,
            &Buf::F32(vec![-1000.0, 1000.0]),
            &desc(DataType::Float32, &[2]),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(r, vec![0.0, 1.0]);
        let di = desc(DataType::Int32, &[3]);
        let xi = Buf::I32(vec![i32::MIN, -3, 4]);
        assert_eq!(
            unary(UnaryKind::Abs, &xi, &di).unwrap(),
            Buf::I32(vec![i32::MIN, 3, 4])
        );
        assert_eq!(
            unary(UnaryKind::Neg, &xi, &di).unwrap(),
            Buf::I32(vec![i32::MIN, 3, -4])
        );
        assert_eq!(
            unary(UnaryKind::Relu, &xi, &di).unwrap(),
            Buf::I32(vec![0, 0, 4])
        );
        assert_eq!(
            unary(
                UnaryKind::Relu,
                &Buf::I8(vec![-8, 7]),
                &desc(DataType::Int8, &[2])
            )
            .unwrap(),
            Buf::I8(vec![0, 7])
        );
        assert!(unary(UnaryKind::Exp, &xi, &di).is_err());
        assert_eq!(
            unary(
                UnaryKind::Exp,
                &Buf::F32(vec![]),
                &desc(DataType::Float32, &[0, 4])
            )
            .unwrap(),
            Buf::F32(vec![])
        );
    }

    #[test]
    fn new_unary_ops() {
        let x = vec![-2.5f32, -1.5, -0.5, 0.5, 1.5, 2.5, 0.0, -3.7];
        let d = desc(DataType::Float32, &[8]);
        let go = |k| {
            let Buf::F32(r) = unary(k, &Buf::F32(x.clone()), &d).unwrap() else {
                panic!()
            };
            r
        };
        // Halfway cases round to the even neighbour.
        assert_eq!(
            go(UnaryKind::RoundEven),
            vec![-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, 0.0, -4.0]
        );
        assert_eq!(
            go(UnaryKind::Ceil),
            vec![-2.0, -1.0, -0.0, 1.0, 2.0, 3.0, 0.0, -3.0]
        );
        assert_eq!(
            go(UnaryKind::Floor),
            vec![-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 0.0, -4.0]
        );
        assert_eq!(
            go(UnaryKind::Sign),
            vec![-1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 0.0, -1.0]
        );
        assert_eq!(go(UnaryKind::Identity), x);
        let r = go(UnaryKind::Reciprocal);
        assert_eq!(r[0], -0.4);
        assert_eq!(r[6], f32::INFINITY);
        for (k, f) in [
            (UnaryKind::Sin, f64::sin as fn(f64) -> f64),
            (UnaryKind::Cos, f64::cos),
            (UnaryKind::Tan, f64::tan),
        ] {
            for (a, &v) in go(k).iter().zip(&x) {
                let e = f(v as f64);
                assert!(
                    (*a as f64 - e).abs() <= 1e-6 * (1.0 + e.abs()),
                    "{k:?}({v})"
                );
            }
        }
        // erf against values from its definition (tabulated to 1e-10).
        let table = [
            (0.0, 0.0),
            (0.1, 0.1124629160),
            (0.5, 0.5204998778),
            (1.0, 0.8427007929),
            (2.0, 0.9953222650),
            (3.0, 0.9999779095),
            (-1.5, -0.9661051465),
        ];
        for (v, e) in table {
            assert!((erf(v) - e).abs() < 1e-9, "erf({v}) = {}", erf(v));
        }
        assert_eq!(erf(7.0), 1.0);
        assert_eq!(erf(-f64::INFINITY), -1.0);
        assert!(erf(f64::NAN).is_nan());
        // Small arguments keep full relative precision: erf(x) ~ 2x/sqrt(pi).
        let tiny = 1e-30;
        assert!((erf(tiny) / (tiny * std::f64::consts::FRAC_2_SQRT_PI) - 1.0).abs() < 1e-15);
        // Integers: sign and identity.
        let di = desc(DataType::Int64, &[3]);
        assert_eq!(
            unary(UnaryKind::Sign, &Buf::I64(vec![i64::MIN, 0, 9]), &di).unwrap(),
            Buf::I64(vec![-1, 0, 1])
        );
        assert_eq!(
            unary(
                UnaryKind::Identity,
                &Buf::U8(vec![3, 255]),
                &desc(DataType::Uint8, &[2])
            )
            .unwrap(),
            Buf::U8(vec![3, 255])
        );
        assert!(unary(UnaryKind::Erf, &Buf::I64(vec![1, 2, 3]), &di).is_err());
    }

    #[test]
    fn clamp_all_types() {
        // The conformance vectors for int8/uint8 and the 64-bit types.
        let r = clamp(
            &Buf::I8(vec![-128, 127, -4, -2, 1, 0, 2, 4]),
            -2.0,
            125.0,
            &desc(DataType::Int8, &[8]),
        )
        .unwrap();
        assert_eq!(r, Buf::I8(vec![-2, 125, -2, -2, 1, 0, 2, 4]));
        let r = clamp(
            &Buf::U64(vec![5294967295, 127, 5, 0]),
            5.0,
            5294967290.0,
            &desc(DataType::Uint64, &[4]),
        )
        .unwrap();
        assert_eq!(r, Buf::U64(vec![5294967290, 127, 5, 5]));
        // Bounds beyond the type saturate.
        let r = clamp(
            &Buf::I64(vec![i64::MIN, 0, i64::MAX]),
            -1e30,
            9.3e18,
            &desc(DataType::Int64, &[3]),
        )
        .unwrap();
        assert_eq!(r, Buf::I64(vec![i64::MIN, 0, i64::MAX]));
        let r = clamp(
            &Buf::U8(vec![0, 100, 255]),
            f64::NEG_INFINITY,
            1e9,
            &desc(DataType::Uint8, &[3]),
        )
        .unwrap();
        assert_eq!(r, Buf::U8(vec![0, 100, 255]));
        let r = clamp(
            &Buf::U32(vec![0, 100]),
            -5.0,
            50.0,
            &desc(DataType::Uint32, &[2]),
        )
        .unwrap();
        assert_eq!(r, Buf::U32(vec![0, 50]));
        // Floats: NaN passes through; infinities clamp.
        let Buf::F32(r) = clamp(
            &Buf::F32(vec![f32::NAN, f32::NEG_INFINITY, 0.3, 9.0]),
            0.0,
            6.0,
            &desc(DataType::Float32, &[4]),
        )
        .unwrap() else {
            panic!()
        };
        assert!(r[0].is_nan());
        assert_eq!(&r[1..], &[0.0, 0.3, 6.0]);
        let r = clamp(
            &Buf::f16_from_f32(&[-1.0, 0.25, 7.0]),
            0.0,
            6.0,
            &desc(DataType::Float16, &[3]),
        )
        .unwrap();
        assert_eq!(r, Buf::f16_from_f32(&[0.0, 0.25, 6.0]));
    }

    /// exp_f32 against the exact value rounded to f32, across the
    /// underflow: within an ulp down to the subnormals, exactly +0 from
    /// -104 down (the lanes that skip their arithmetic).
    #[test]
    fn exp_f32_is_close_through_the_underflow() {
        let mut x = -120.0f32;
        while x < 20.0 {
            let got = exp_f32(x);
            let want = (x as f64).exp() as f32;
            if x <= -104.0 {
                assert_eq!(got.to_bits(), 0, "e^{x}");
            } else {
                let ulp = f32::from_bits(want.to_bits() + 1) - want;
                assert!((got - want).abs() <= ulp, "e^{x}: {got:e} vs {want:e}");
            }
            x += 0.013;
        }
        assert!(exp_f32(f32::NAN).is_nan());
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
    }

    #[test]
    fn softmax_matches_naive() {
        let shape = [2, 3, 4];
        let x: Vec<f32> = (0..24).map(|i| ((i * 7) % 11) as f32 * 0.3 - 1.0).collect();
        for axis in 0..3 {
            let Buf::F32(r) =
                softmax(&Buf::F32(x.clone()), axis, &desc(DataType::Float32, &shape)).unwrap()
            else {
                panic!()
            };
            for i in 0..24 {
                let o = unravel(i, &shape);
                let mut sum = 0.0f64;
                for j in 0..shape[axis] {
                    let mut q = o.clone();
                    q[axis] = j;
                    sum += (x[(q[0] * 3 + q[1]) * 4 + q[2]] as f64).exp();
                }
                let e = (x[i] as f64).exp() / sum;
                assert!(
                    (r[i] as f64 - e).abs() < 1e-6,
                    "axis {axis} element {i}: {} vs {e}",
                    r[i]
                );
            }
        }
        // Large values do not overflow.
        let Buf::F32(r) = softmax(
            &Buf::F32(vec![1000.0, 1000.0, -1000.0]),
            0,
            &desc(DataType::Float32, &[3]),
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(r, vec![0.5, 0.5, 0.0]);
        let r = softmax(
            &Buf::f16_from_f32(&[0.0, 0.0, 0.0, 0.0]),
            1,
            &desc(DataType::Float16, &[1, 4]),
        )
        .unwrap();
        assert_eq!(r, Buf::f16_from_f32(&[0.25; 4]));
        assert_eq!(
            softmax(&Buf::F32(vec![]), 1, &desc(DataType::Float32, &[2, 0])).unwrap(),
            Buf::F32(vec![])
        );
    }

    fn cast1(x: Buf, from: DataType, to: DataType) -> Buf {
        let n = x.len();
        let r = cast(&x, to, &desc(to, &[n])).unwrap();
        let _ = from;
        r
    }

    #[test]
    fn cast_follows_the_spec_table() {
        use DataType::*;
        // Integer to integer: the same value in range, else the low bits.
        assert_eq!(
            cast1(Buf::I8(vec![-1, 5]), Int8, Uint8),
            Buf::U8(vec![255, 5])
        );
        assert_eq!(
            cast1(Buf::I32(vec![300, -129, 127]), Int32, Int8),
            Buf::I8(vec![44, 127, 127])
        );
        assert_eq!(
            cast1(Buf::I64(vec![-1, 1 << 40]), Int64, Uint32),
            Buf::U32(vec![u32::MAX, 0])
        );
        assert_eq!(
            cast1(Buf::U64(vec![u64::MAX]), Uint64, Int64),
            Buf::I64(vec![-1])
        );
        assert_eq!(
            cast1(Buf::U32(vec![u32::MAX]), Uint32, Int64),
            Buf::I64(vec![u32::MAX as i64])
        );
        assert_eq!(
            cast1(Buf::I32(vec![-1, 9, 7, -8, 16]), Int32, Int4),
            Buf::I8(vec![-1, -7, 7, -8, 0])
        );
        assert_eq!(
            cast1(Buf::I32(vec![-1, 9, 17]), Int32, Uint4),
            Buf::U8(vec![15, 9, 1])
        );
        assert_eq!(
            cast1(Buf::I8(vec![-8, 7]), Int4, Uint8),
            Buf::U8(vec![248, 7])
        );
        assert_eq!(cast1(Buf::U8(vec![15]), Uint4, Int4), Buf::I8(vec![-1]));
        // Float to integer: truncation; out of range saturates; NaN is 0.
        let f = Buf::F32(vec![
            84.777,
            -43.5,
            -2.5,
            300.7,
            -1.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ]);
        assert_eq!(
            cast1(f.clone(), Float32, Int32),
            Buf::I32(vec![84, -43, -2, 300, -1, 0, i32::MAX, i32::MIN])
        );
        assert_eq!(
            cast1(f.clone(), Float32, Uint8),
            Buf::U8(vec![84, 0, 0, 255, 0, 0, 255, 0])
        );
        assert_eq!(
            cast1(f.clone(), Float32, Int4),
            Buf::I8(vec![7, -8, -2, 7, -1, 0, 7, -8])
        );
        assert_eq!(
            cast1(f.clone(), Float32, Uint64),
            Buf::U64(vec![84, 0, 0, 300, 0, 0, u64::MAX, 0])
        );
        assert_eq!(
            cast1(Buf::f16_from_f32(&[3.1, -3.9, 65504.0]), Float16, Int64),
            Buf::I64(vec![3, -3, 65504])
        );
        // To float: nearest, ties to even; out of range +/-Infinity.
        assert_eq!(
            cast1(
                Buf::F32(vec![1.0003, 65520.0, -1e6, 2049.0]),
                Float32,
                Float16
            ),
            Buf::f16_from_f32(&[1.0003, f32::INFINITY, f32::NEG_INFINITY, 2048.0])
        );
        assert_eq!(
            cast1(
                Buf::I32(vec![2049, 2051, 65519, 70000, -70000]),
                Int32,
                Float16
            ),
            Buf::f16_from_f32(&[2048.0, 2052.0, 65504.0, f32::INFINITY, f32::NEG_INFINITY])
        );
        assert_eq!(
            cast1(Buf::I64(vec![i64::MAX, (1 << 24) + 1]), Int64, Float32),
            Buf::F32(vec![9.223372e18, 16777216.0])
        );
        assert_eq!(
            cast1(Buf::U64(vec![u64::MAX]), Uint64, Float16),
            Buf::f16_from_f32(&[f32::INFINITY])
        );
        assert_eq!(
            cast1(Buf::I8(vec![-8, 7]), Int4, Float32),
            Buf::F32(vec![-8.0, 7.0])
        );
        let h = Buf::f16_from_f32(&[3.103_515_6, -0.0, f32::NAN]);
        let Buf::F32(w) = cast1(h.clone(), Float16, Float32) else {
            panic!()
        };
        assert_eq!(w[0], 3.103_515_6);
        assert!(w[1] == 0.0 && w[1].is_sign_negative() && w[2].is_nan());
        assert_eq!(cast1(h.clone(), Float16, Float16), h);
        assert_eq!(cast1(Buf::U8(vec![]), Uint8, Int64), Buf::I64(vec![]));
    }

    /// Inputs for the width test: a spread of magnitudes of both signs,
    /// and the special values.
    fn spread(n: usize) -> Vec<f32> {
        let mut state = 0x9e37_79b9u32;
        let mut v: Vec<f32> = (0..n)
            .map(|i| {
                state ^= state << 13;
                state ^= state >> 17;
                state ^= state << 5;
                let m = (state >> 8) as f32 / (1u32 << 24) as f32;
                let e = (i % 23) as i32 - 11;
                let s = if state & 1 == 0 { 1.0 } else { -1.0 };
                s * m * 2f32.powi(e)
            })
            .collect();
        v.extend([
            0.0,
            -0.0,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE,
            1e-40,
            -1e-40,
            88.7,
            -103.9,
            1e30,
            -1e30,
        ]);
        v
    }

    fn same_bits(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len()
            && a.iter()
                .zip(b)
                .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
    }

    /// The element-wise loops give the same bits at every vector width
    /// this CPU has (16 lanes on AVX-512, 8 on AVX2, the baseline target):
    /// the unary operators, the exponential, softmax rows and the lane
    /// sums, and the binary arithmetic.
    #[test]
    fn every_width_gives_the_same_bits() {
        let levels: Vec<SimdLevel> = [SimdLevel::Baseline, SimdLevel::Avx2, SimdLevel::Avx512]
            .into_iter()
            .filter(|&l| l <= detected_level())
            .collect();
        eprintln!("element-wise widths compared: {levels:?}");
        let x = spread(4099);
        let y: Vec<f32> = x.iter().rev().copied().collect();
        let run = |level: SimdLevel| {
            let mut outs: Vec<Vec<f32>> = Vec::new();
            let kinds = [
                UnaryKind::Abs,
                UnaryKind::Neg,
                UnaryKind::Exp,
                UnaryKind::Log,
                UnaryKind::Sqrt,
                UnaryKind::Relu,
                UnaryKind::Sigmoid,
                UnaryKind::Tanh,
                UnaryKind::Ceil,
                UnaryKind::Cos,
                UnaryKind::Erf,
                UnaryKind::Floor,
                UnaryKind::Identity,
                UnaryKind::Reciprocal,
                UnaryKind::RoundEven,
                UnaryKind::Sin,
                UnaryKind::Sign,
                UnaryKind::Tan,
            ];
            for k in kinds {
                outs.push(with_float_unary!(k, f => {
                    let mut o = vec![0.0f32; x.len()];
                    // SAFETY: `level` is at most the detected one.
                    unsafe {
                        with_simd_at(
                            level,
                            #[inline(always)]
                            || {
                                for (d, &v) in o.iter_mut().zip(&x) {
                                    *d = f(v);
                                }
                            },
                        )
                    };
                    o
                }));
            }
            // SAFETY: as above.
            unsafe {
                with_simd_at(
                    level,
                    #[inline(always)]
                    || {
                        outs.push(x.iter().map(|&v| exp_f32(v)).collect());
                        let mut rows = x.clone();
                        for r in rows.chunks_mut(37) {
                            softmax_row(r);
                        }
                        outs.push(rows);
                        outs.push(x.chunks(61).map(sum_lanes).collect());
                        outs.push(x.iter().zip(&y).map(|(&a, &b)| a + b).collect());
                        outs.push(x.iter().zip(&y).map(|(&a, &b)| a * b).collect());
                        outs.push(x.iter().zip(&y).map(|(&a, &b)| a / b).collect());
                        outs.push(x.iter().zip(&y).map(|(&a, &b)| fmax(a, b)).collect());
                        outs.push(x.iter().zip(&y).map(|(&a, &b)| fmin(a, b)).collect());
                    },
                )
            };
            outs
        };
        let base = run(levels[0]);
        for &l in &levels[1..] {
            let got = run(l);
            for (i, (a, b)) in got.iter().zip(&base).enumerate() {
                assert!(
                    same_bits(a, b),
                    "kernel {i} differs between {l:?} and {:?}",
                    levels[0]
                );
            }
        }
    }
}

//! CPU kernels: activations with parameters (elu, gelu, hardSigmoid,
//! hardSwish, leakyRelu, linear, softplus, softsign), prelu and where.
//!
//! The float activations run as loops that vectorise (each op's function
//! monomorphised and inlined into `with_simd`'s copies): the piecewise
//! linear ones (hardSigmoid, hardSwish, leakyRelu, linear, softsign)
//! evaluate their formula in f64 and round once to f32; elu, softplus and
//! gelu compute in f32 from the vectorisable exponential and logarithm of
//! `elementwise::math`, within a few ulps. float16 is widened and rounded
//! once at the end. NaN inputs give NaN: clamps are written with
//! comparisons, not `min`/`max`, which would replace NaN by the bound.

use rayon::prelude::*;

use std::borrow::Cow;

use super::elementwise::{
    broadcast_halves, broadcast_map, exp_f32, exp_m1_f32, inlined, ln_1p_unit, map_halves,
    map_in_place, map_slice, zip_halves,
};
use super::simd::with_simd;
use super::util::{broadcast_strides, floats, from_floats, try_copy, try_filled};
use crate::error::{Error, Result};
use crate::graph::ops::activation::ActivationOp;
use crate::graph::ops::broadcasts_to;
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

/// Output elements above which `where` splits its rows across threads.
const PAR_MIN: usize = 1 << 16;

/// `v` limited to [lo, hi], NaN unchanged.
fn clamp_keep_nan(v: f64, lo: f64, hi: f64) -> f64 {
    if v < lo {
        lo
    } else if v > hi {
        hi
    } else {
        v
    }
}

/// Binds `$f` to the f32 function of a one-input float activation
/// (monomorphised per arm and inlined through `inlined`, so the loop
/// around it vectorises) and evaluates `$body`; `$other` for prelu and
/// where.
macro_rules! with_float_activation {
    ($op:expr, $f:ident => $body:expr, $other:expr) => {
        match *$op {
            // e^x - 1 from exp_m1, which keeps its precision near 0.
            ActivationOp::Elu { alpha } => {
                let $f = inlined(
                    #[inline(always)]
                    move |x: f32| {
                        if x > 0.0 {
                            x
                        } else {
                            (alpha * exp_m1_f32(x) as f64) as f32
                        }
                    },
                );
                $body
            }
            ActivationOp::Gelu => {
                let $f = inlined(
                    #[inline(always)]
                    |x: f32| gelu_f32(x),
                );
                $body
            }
            ActivationOp::HardSigmoid { alpha, beta } => {
                let $f = inlined(
                    #[inline(always)]
                    move |x: f32| clamp_keep_nan(alpha * x as f64 + beta, 0.0, 1.0) as f32,
                );
                $body
            }
            ActivationOp::HardSwish => {
                let $f = inlined(
                    #[inline(always)]
                    |x: f32| {
                        let x = x as f64;
                        (x * clamp_keep_nan(x + 3.0, 0.0, 6.0) / 6.0) as f32
                    },
                );
                $body
            }
            ActivationOp::LeakyRelu { alpha } => {
                let $f = inlined(
                    #[inline(always)]
                    move |x: f32| {
                        let x = x as f64;
                        (if x >= 0.0 { x } else { alpha * x }) as f32
                    },
                );
                $body
            }
            ActivationOp::Linear { alpha, beta } => {
                let $f = inlined(
                    #[inline(always)]
                    move |x: f32| (alpha * x as f64 + beta) as f32,
                );
                $body
            }
            // ln(1 + e^x) = max(x, 0) + ln(1 + e^-|x|): never overflows,
            // and keeps the small tail for very negative x. A NaN goes
            // through e^-|x| (max would drop it).
            ActivationOp::Softplus => {
                let $f = inlined(
                    #[inline(always)]
                    |x: f32| x.max(0.0) + ln_1p_unit(exp_f32(-x.abs())),
                );
                $body
            }
            // x / (1 + |x|) is inf/inf at ±inf; the function's limit there
            // is ±1, which is what it approaches for every large finite x.
            ActivationOp::Softsign => {
                let $f = inlined(
                    #[inline(always)]
                    |x: f32| {
                        let x = x as f64;
                        if x.is_infinite() {
                            x.signum() as f32
                        } else {
                            (x / (1.0 + x.abs())) as f32
                        }
                    },
                );
                $body
            }
            ActivationOp::Prelu | ActivationOp::Where => $other,
        }
    };
}

/// gelu in f32, vectorisable: `0.5 x (1 + erf(x / sqrt 2))` with erf by
/// the rational approximation of Abramowitz and Stegun, formula 7.1.26
/// (absolute error at most 1.5e-7), which is what the WebNN reference
/// implementation uses for gelu: results agree with other implementations
/// within the conformance tolerance even where it and the exact erf differ
/// by tens of float32 ulps (near x = -2, where 1 + erf is small). The
/// `erf` operator itself is within about an ulp (`elementwise::math`). With `q = 1 - erf(|z|) = poly(t) e^(-z^2)`, the factor
/// `1 + erf(z)` is `q` for negative z (no cancellation in the tail) and
/// `2 - q` otherwise. `z^2 = x^2 / 2` is split exactly into a float and a
/// small remainder (Dekker's product), so the exponential keeps full
/// relative precision even where `x^2` is large.
#[inline(always)]
fn gelu_f32(x: f32) -> f32 {
    // Beyond |x| = 20, 1 + erf is 0 or 2 in f32; clamping keeps x^2 finite.
    let xc = x.clamp(-20.0, 20.0);
    let a = xc.abs() * std::f32::consts::FRAC_1_SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * a);
    let poly = t
        * (0.254_829_6
            + t * (-0.284_496_74 + t * (1.421_413_7 + t * (-1.453_152_1 + t * 1.061_405_4))));
    // x^2 = hi + lo exactly.
    let c = xc * 4097.0;
    let xh = c - (c - xc);
    let xl = xc - xh;
    let hi = xc * xc;
    let lo = ((xh * xh - hi) + 2.0 * xh * xl) + xl * xl;
    // e^(-(hi + lo) / 2) = e^(-hi / 2) (1 - lo / 2) (|lo| is tiny).
    let e = super::elementwise::exp_f32(-0.5 * hi);
    let pl = poly * (1.0 - 0.5 * lo);
    if xc < 0.0 {
        // One rounding into the subnormals at most, in the last product.
        (0.5 * x * pl) * e
    } else {
        0.5 * x * (2.0 - pl * e)
    }
}

/// gelu over the elements of `x` (a float buffer), in its own buffer when
/// it is handed over as float32.
pub(super) fn gelu_owned(x: Cow<'_, Buf>, out: &OperandDescriptor) -> Result<Buf> {
    if x.len() != out.element_count() {
        return Err(Error::operation("the output size differs from the input"));
    }
    match (x, out.data_type) {
        (Cow::Owned(Buf::F32(mut v)), DataType::Float32) => {
            map_in_place(
                &mut v,
                inlined(
                    #[inline(always)]
                    |x: f32| gelu_f32(x),
                ),
            );
            Ok(Buf::F32(v))
        }
        (x, dt) => {
            // float16 a chunk at a time (see `elementwise::map_halves`).
            if let (Buf::F16(h), DataType::Float16) = (&*x, dt) {
                let f = inlined(
                    #[inline(always)]
                    |x: f32| gelu_f32(x),
                );
                return Ok(Buf::F16(map_halves(h, f)?));
            }
            let v = floats(&x)?;
            let r = map_slice(
                &v,
                inlined(
                    #[inline(always)]
                    |x: f32| gelu_f32(x),
                ),
            )?;
            from_floats(out.data_type, r)
        }
    }
}

/// A float activation on one input.
fn float_activation(op: &ActivationOp, x: &Buf, out: &OperandDescriptor) -> Result<Buf> {
    if x.len() != out.element_count() {
        return Err(Error::operation("the output size differs from the input"));
    }
    if let ActivationOp::Gelu = op {
        return gelu_owned(Cow::Borrowed(x), out);
    }
    // float16 a chunk at a time (see `elementwise::map_halves`).
    if let (Buf::F16(h), DataType::Float16) = (x, out.data_type) {
        return Ok(Buf::F16(
            with_float_activation!(op, f => map_halves(h, f)?, {
                return Err(Error::operation(format!(
                    "{} is not a one-input activation",
                    op.name()
                )));
            }),
        ));
    }
    let v = floats(x)?;
    let r = with_float_activation!(op, f => map_slice(&v, f)?, {
        return Err(Error::operation(format!(
            "{} is not a one-input activation",
            op.name()
        )));
    });
    from_floats(out.data_type, r)
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
    Error::operation("an activation kernel got operands of different types")
}

fn no_broadcast() -> Error {
    Error::operation("the operands do not broadcast to the output")
}

/// `prelu`: `x >= 0 ? x : slope * x`, input and slope broadcast to the
/// output. Integers multiply with wrapping.
fn prelu(
    x: &Buf,
    dx: &OperandDescriptor,
    s: &Buf,
    ds: &OperandDescriptor,
    out: &OperandDescriptor,
) -> Result<Buf> {
    check_len(x, dx)?;
    check_len(s, ds)?;
    if !broadcasts_to(&dx.shape, &out.shape) || !broadcasts_to(&ds.shape, &out.shape) {
        return Err(no_broadcast());
    }
    let (sx, ss, so) = (&dx.shape[..], &ds.shape[..], &out.shape[..]);
    // NaN input: `NaN < 0` is false, so NaN passes through.
    fn f32_prelu(v: f32, k: f32) -> f32 {
        if v < 0.0 {
            k * v
        } else {
            v
        }
    }
    macro_rules! ints {
        ($a:ident, $variant:ident) => {{
            let Buf::$variant(k) = s else {
                return Err(mismatch());
            };
            Buf::$variant(broadcast_map($a, sx, k, ss, so, |v, k| {
                if v < 0 {
                    v.wrapping_mul(k)
                } else {
                    v
                }
            })?)
        }};
    }
    Ok(match x {
        Buf::F32(a) => {
            let Buf::F32(k) = s else {
                return Err(mismatch());
            };
            Buf::F32(broadcast_map(a, sx, k, ss, so, f32_prelu)?)
        }
        Buf::F16(a) => {
            let Buf::F16(k) = s else {
                return Err(mismatch());
            };
            // In f32 and rounded once, with F16C's conversions where the
            // CPU has them (see `elementwise::zip_halves`): the bits of
            // each element's own conversions.
            if sx == so && ss == so {
                Buf::F16(zip_halves(a, k, f32_prelu)?)
            } else {
                Buf::F16(broadcast_halves(a, sx, k, ss, so, f32_prelu)?)
            }
        }
        Buf::I32(a) => ints!(a, I32),
        Buf::I64(a) => ints!(a, I64),
        Buf::I8(a) => ints!(a, I8),
        _ => {
            return Err(Error::operation(
                "prelu is defined for float32, float16, int64, int32 and int8",
            ))
        }
    })
}

/// `where` on one element type: `c[i] != 0 ? t[i] : f[i]` with all three
/// broadcast to `out` (numpy rules). Each output row walks the three
/// inputs with their broadcast strides (0 on broadcast dimensions).
#[allow(clippy::too_many_arguments)]
fn select<T: Pick + Send + Sync + Default>(
    c: &[u8],
    sc: &[usize],
    t: &[T],
    st: &[usize],
    f: &[T],
    sf: &[usize],
    out: &[usize],
) -> Result<Vec<T>> {
    let total: usize = out.iter().product();
    if total == 0 {
        return Ok(Vec::new());
    }
    if out.is_empty() {
        return Ok(vec![if c[0] != 0 { t[0] } else { f[0] }]);
    }
    let rank = out.len();
    let mut rows = Rows {
        c,
        t,
        f,
        tc: broadcast_strides(sc, out),
        tt: broadcast_strides(st, out),
        tf: broadcast_strides(sf, out),
        out,
        // When the false operand has the output's shape (a decoding
        // step's cache block, its new row placed where the condition
        // says), the output starts as a copy of it and each row writes
        // only what the condition selects: no fill first.
        whole_f: sf == out,
        chosen: Vec::new(),
    };
    let inner = out[rank - 1];
    // A condition that is one row for every output row of several (a [B]
    // mask over [.., B]) and selects few of its positions: those
    // positions, found once. Their list is at most a row long, and asked
    // for fallibly: without the memory, each row reads the condition.
    let same_row = rows.tc[rank - 1] == 1
        && rows.tc[..rank - 1].iter().all(|&s| s == 0)
        && total / inner.max(1) > 1
        && {
            let picked = c[..inner].iter().filter(|&&v| v != 0).count();
            picked * 4 <= inner && rows.chosen.try_reserve_exact(picked).is_ok()
        };
    if same_row {
        rows.chosen.extend((0..inner).filter(|&j| c[j] != 0));
    }
    let mut res = match rows.whole_f {
        true => try_copy(f, "the output of where")?,
        false => try_filled(total, T::default(), "the output of where")?,
    };
    // Rows of a few elements go to the pool (and to the vector loops) in
    // groups, so that neither is paid per row.
    let per_task = (SELECT_GROUP / inner).max(1);
    let group = inner * per_task;
    let run = |(g, dst): (usize, &mut [T])| {
        let first = g * per_task;
        with_simd(
            #[inline(always)]
            || {
                for (k, row) in dst.chunks_mut(inner).enumerate() {
                    rows.row(first + k, row);
                }
            },
        )
    };
    if total >= PAR_MIN {
        res.par_chunks_mut(group).enumerate().for_each(run);
    } else {
        res.chunks_mut(group).enumerate().for_each(run);
    }
    Ok(res)
}

/// A choice between two values by a condition byte, as bit operations
/// on a mask. Written as `if c != 0 { a } else { b }`, the compiler
/// turns the two loads and the choice into one load from a chosen
/// address, which no loop vectorises; the mask keeps both loads.
trait Pick: Copy {
    fn pick(c: u8, a: Self, b: Self) -> Self;
}

macro_rules! pick_by_mask {
    ($($t:ty),*) => {$(
        impl Pick for $t {
            #[inline(always)]
            fn pick(c: u8, a: Self, b: Self) -> Self {
                let m = (<$t>::from(c != 0)).wrapping_neg();
                (a & m) | (b & !m)
            }
        }
    )*};
}
pick_by_mask!(u8, u16, u32, u64, i8, i32, i64);

impl Pick for f32 {
    #[inline(always)]
    fn pick(c: u8, a: Self, b: Self) -> Self {
        f32::from_bits(u32::pick(c, a.to_bits(), b.to_bits()))
    }
}

/// How many elements one task of `where` takes at least (whole rows).
const SELECT_GROUP: usize = 1 << 14;

/// The operands of `where` with their strides in the output's frame,
/// read one output row at a time.
struct Rows<'a, T> {
    c: &'a [u8],
    t: &'a [T],
    f: &'a [T],
    tc: Vec<usize>,
    tt: Vec<usize>,
    tf: Vec<usize>,
    out: &'a [usize],
    /// The output started as a copy of the false operand.
    whole_f: bool,
    /// The positions a condition row shared by every output row selects.
    chosen: Vec<usize>,
}

impl<T: Pick> Rows<'_, T> {
    /// Writes output row `r` into `dst`. Inlined into the caller's
    /// `with_simd`, so that the selects below are vector blends: each
    /// loop reads both of its operands and combines them by a mask
    /// ([`Pick`]), with no branch and no conditional store.
    #[inline(always)]
    fn row(&self, r: usize, dst: &mut [T]) {
        let (c, t, f, out) = (self.c, self.t, self.f, self.out);
        let rank = out.len();
        // Offsets of the row's first element in each input.
        let (mut oc, mut ot, mut of) = (0, 0, 0);
        let mut rest = r;
        for d in (0..rank - 1).rev() {
            let i = rest % out[d];
            rest /= out[d];
            oc += i * self.tc[d];
            ot += i * self.tt[d];
            of += i * self.tf[d];
        }
        let (ic, it, iff) = (self.tc[rank - 1], self.tt[rank - 1], self.tf[rank - 1]);
        let n = dst.len();
        // The row of one operand: copied when it runs along the row,
        // repeated when it is broadcast along it.
        let take = |src: &[T], o: usize, stride: usize, dst: &mut [T]| match stride {
            0 => dst.fill(src[o]),
            _ => dst.copy_from_slice(&src[o..o + n]),
        };
        match (ic, it, iff) {
            // One condition for the whole row (a row or a block selected
            // at a time, as a decoding step places its value row): the
            // row is one operand's.
            (0, 0 | 1, 0 | 1) => match (c[oc] != 0, self.whole_f) {
                (true, _) => take(t, ot, it, dst),
                (false, true) => {}
                (false, false) => take(f, of, iff, dst),
            },
            // A few positions of one shared condition row: the false
            // operand's row, then the selected elements of the true one.
            (1, 0 | 1, 0 | 1) if !self.chosen.is_empty() => {
                if !self.whole_f {
                    take(f, of, iff, dst);
                }
                for &j in &self.chosen {
                    dst[j] = t[ot + j * it];
                }
            }
            // A condition per element over contiguous (or repeated)
            // operands: a blend of two rows.
            (1, 1, 1) => {
                let (c, t) = (&c[oc..oc + n], &t[ot..ot + n]);
                if self.whole_f {
                    for ((v, &cj), &a) in dst.iter_mut().zip(c).zip(t) {
                        *v = T::pick(cj, a, *v);
                    }
                } else {
                    let f = &f[of..of + n];
                    for (((v, &cj), &a), &b) in dst.iter_mut().zip(c).zip(t).zip(f) {
                        *v = T::pick(cj, a, b);
                    }
                }
            }
            (1, 0, 1) => {
                let (c, a) = (&c[oc..oc + n], t[ot]);
                if self.whole_f {
                    for (v, &cj) in dst.iter_mut().zip(c) {
                        *v = T::pick(cj, a, *v);
                    }
                } else {
                    let f = &f[of..of + n];
                    for ((v, &cj), &b) in dst.iter_mut().zip(c).zip(f) {
                        *v = T::pick(cj, a, b);
                    }
                }
            }
            (1, 1, 0) => {
                let (c, t, b) = (&c[oc..oc + n], &t[ot..ot + n], f[of]);
                for ((v, &cj), &a) in dst.iter_mut().zip(c).zip(t) {
                    *v = T::pick(cj, a, b);
                }
            }
            (1, 0, 0) => {
                let (c, a, b) = (&c[oc..oc + n], t[ot], f[of]);
                for (v, &cj) in dst.iter_mut().zip(c) {
                    *v = T::pick(cj, a, b);
                }
            }
            _ => {
                for (j, v) in dst.iter_mut().enumerate() {
                    *v = T::pick(c[oc + j * ic], t[ot + j * it], f[of + j * iff]);
                }
            }
        }
    }
}

/// `where(condition, trueValue, falseValue)` for every data type.
fn where_(ins: [(&Buf, &OperandDescriptor); 3], out: &OperandDescriptor) -> Result<Buf> {
    for (b, d) in ins {
        check_len(b, d)?;
        if !broadcasts_to(&d.shape, &out.shape) {
            return Err(no_broadcast());
        }
    }
    let [(c, dc), (t, dt), (f, df)] = ins;
    let Buf::U8(c) = c else {
        return Err(Error::operation("the condition of where must be uint8"));
    };
    let (sc, st, sf, so) = (&dc.shape[..], &dt.shape[..], &df.shape[..], &out.shape[..]);
    macro_rules! sel {
        ($($variant:ident),*) => {
            match (t, f) {
                $((Buf::$variant(t), Buf::$variant(f)) => {
                    Buf::$variant(select(c, sc, t, st, f, sf, so)?)
                })*
                _ => return Err(mismatch()),
            }
        };
    }
    Ok(sel!(F32, F16, I32, U32, I64, U64, I8, U8))
}

/// Runs one operator of this family; returns one buffer per output.
pub fn run(
    op: &ActivationOp,
    inputs: &[&Buf],
    in_descs: &[&OperandDescriptor],
    out_descs: &[OperandDescriptor],
) -> Result<Vec<Buf>> {
    let out = out_descs
        .first()
        .ok_or_else(|| Error::operation("an activation needs one output"))?;
    let r = match (op, inputs, in_descs) {
        (ActivationOp::Prelu, [x, s], [dx, ds]) => prelu(x, dx, s, ds, out)?,
        (ActivationOp::Where, [c, t, f], [dc, dt, df]) => where_([(c, dc), (t, dt), (f, df)], out)?,
        (ActivationOp::Prelu | ActivationOp::Where, _, _) => {
            return Err(Error::operation(format!(
                "{} got the wrong number of inputs",
                op.name()
            )))
        }
        (_, [x], _) => float_activation(op, x, out)?,
        _ => return Err(Error::operation("an activation needs one input")),
    };
    Ok(vec![r])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::DataType;

    fn desc(dt: DataType, shape: &[usize]) -> OperandDescriptor {
        OperandDescriptor::new(dt, shape.to_vec()).unwrap()
    }

    fn run1(op: ActivationOp, x: Buf, dt: DataType) -> Buf {
        let d = desc(dt, &[x.len()]);
        run(&op, &[&x], &[&d], std::slice::from_ref(&d))
            .unwrap()
            .remove(0)
    }

    /// Naive references, written straight from the spec's expressions.
    fn reference(op: &ActivationOp, x: f64) -> f64 {
        match *op {
            ActivationOp::Elu { alpha } => x.max(0.0) + alpha * (x.min(0.0).exp() - 1.0),
            ActivationOp::Gelu => {
                // erf by plain midpoint integration of 2/sqrt(pi) e^-t^2.
                let n = 20000;
                let h = (x / 2f64.sqrt()) / n as f64;
                let s: f64 = (0..n)
                    .map(|i| (-((i as f64 + 0.5) * h).powi(2)).exp())
                    .sum();
                0.5 * x * (1.0 + std::f64::consts::FRAC_2_SQRT_PI * s * h)
            }
            ActivationOp::HardSigmoid { alpha, beta } => (alpha * x + beta).clamp(0.0, 1.0),
            ActivationOp::HardSwish => x * (x + 3.0).clamp(0.0, 6.0) / 6.0,
            ActivationOp::LeakyRelu { alpha } => x.max(0.0) + alpha * x.min(0.0),
            ActivationOp::Linear { alpha, beta } => alpha * x + beta,
            ActivationOp::Softplus => (1.0 + x.exp()).ln(),
            ActivationOp::Softsign => x / (1.0 + x.abs()),
            _ => unreachable!(),
        }
    }

    #[test]
    fn float_activations_match_reference() {
        let xs: Vec<f32> = vec![-7.5, -3.0, -1.25, -0.5, -0.0, 0.0, 0.3, 1.0, 2.75, 3.5, 9.0];
        let ops = [
            ActivationOp::Elu { alpha: 0.5 },
            ActivationOp::Gelu,
            ActivationOp::HardSigmoid {
                alpha: 0.2f32 as f64,
                beta: 0.5,
            },
            ActivationOp::HardSwish,
            ActivationOp::LeakyRelu {
                alpha: 0.01f32 as f64,
            },
            ActivationOp::Linear {
                alpha: 2.0,
                beta: -1.0,
            },
            ActivationOp::Softplus,
            ActivationOp::Softsign,
        ];
        for op in &ops {
            let Buf::F32(r) = run1(op.clone(), Buf::F32(xs.clone()), DataType::Float32) else {
                panic!()
            };
            for (&got, &x) in r.iter().zip(&xs) {
                let want = reference(op, x as f64);
                assert!(
                    ((got as f64) - want).abs() <= 1e-6 * (1.0 + want.abs()),
                    "{op:?}({x}) = {got}, want {want}"
                );
            }
            // float16: computed wide, rounded once.
            let h = Buf::f16_from_f32(&xs);
            let widened = h.to_f32_vec();
            let r = run1(op.clone(), h, DataType::Float16);
            let want: Vec<f32> = with_float_activation!(
                op,
                f => widened.iter().map(|&x| f(x)).collect(),
                unreachable!()
            );
            assert_eq!(r, Buf::f16_from_f32(&want), "{op:?} float16");
            // NaN stays NaN.
            let Buf::F32(r) = run1(op.clone(), Buf::F32(vec![f32::NAN]), DataType::Float32) else {
                panic!()
            };
            assert!(r[0].is_nan(), "{op:?}(NaN)");
        }
        // Extremes: softplus does not overflow, softsign saturates.
        let Buf::F32(r) = run1(
            ActivationOp::Softplus,
            Buf::F32(vec![1000.0, -1000.0, f32::INFINITY]),
            DataType::Float32,
        ) else {
            panic!()
        };
        assert_eq!(r, vec![1000.0, 0.0, f32::INFINITY]);
        let Buf::F32(r) = run1(
            ActivationOp::Softsign,
            Buf::F32(vec![f32::INFINITY, f32::NEG_INFINITY]),
            DataType::Float32,
        ) else {
            panic!()
        };
        assert_eq!(r, vec![1.0, -1.0]);
    }

    #[test]
    fn prelu_broadcasts_both_ways() {
        // input [2, 3], slope [3].
        let x = Buf::F32(vec![-1.0, 2.0, -3.0, 4.0, -5.0, 0.0]);
        let s = Buf::F32(vec![0.5, 2.0, 0.25]);
        let r = run(
            &ActivationOp::Prelu,
            &[&x, &s],
            &[
                &desc(DataType::Float32, &[2, 3]),
                &desc(DataType::Float32, &[3]),
            ],
            &[desc(DataType::Float32, &[2, 3])],
        )
        .unwrap();
        assert_eq!(r, vec![Buf::F32(vec![-0.5, 2.0, -0.75, 4.0, -10.0, 0.0])]);
        // input [3], slope [2, 1]: the output is [2, 3].
        let r = run(
            &ActivationOp::Prelu,
            &[&Buf::I8(vec![-3, 0, 5]), &Buf::I8(vec![2, -100])],
            &[&desc(DataType::Int8, &[3]), &desc(DataType::Int8, &[2, 1])],
            &[desc(DataType::Int8, &[2, 3])],
        )
        .unwrap();
        // -3 * -100 = 300 wraps to 44 in int8.
        assert_eq!(r, vec![Buf::I8(vec![-6, 0, 5, 44, 0, 5])]);
        let r = run(
            &ActivationOp::Prelu,
            &[&Buf::I64(vec![i64::MIN, 7]), &Buf::I64(vec![3])],
            &[&desc(DataType::Int64, &[2]), &desc(DataType::Int64, &[])],
            &[desc(DataType::Int64, &[2])],
        )
        .unwrap();
        assert_eq!(r, vec![Buf::I64(vec![i64::MIN.wrapping_mul(3), 7])]);
        let r = run(
            &ActivationOp::Prelu,
            &[&Buf::f16_from_f32(&[-2.0, 3.0]), &Buf::f16_from_f32(&[0.5])],
            &[
                &desc(DataType::Float16, &[2]),
                &desc(DataType::Float16, &[1]),
            ],
            &[desc(DataType::Float16, &[2])],
        )
        .unwrap();
        assert_eq!(r, vec![Buf::f16_from_f32(&[-1.0, 3.0])]);
    }

    /// float16 prelu gives, for every half against a partner of every
    /// class (NaNs of every payload, signalling ones included, zeros of
    /// both signs, subnormals, infinities), the bits of each element's own
    /// conversions around the f32 form: with operands of the output's
    /// shape (a chunk at a time) and with a broadcast slope.
    #[test]
    fn prelu_float16_gives_each_elements_own_bits() {
        use crate::f16::{f16_to_f32, f32_to_f16};
        let all = crate::backend::testing::all_halves();
        let n = all.len();
        let partner = crate::backend::testing::partner_halves(&all);
        let one = |v: u16, k: u16| {
            let (v, k) = (f16_to_f32(v), f16_to_f32(k));
            f32_to_f16(if v < 0.0 { k * v } else { v })
        };
        let d = desc(DataType::Float16, &[n]);
        let r = run(
            &ActivationOp::Prelu,
            &[&Buf::F16(all.clone()), &Buf::F16(partner.clone())],
            &[&d, &d],
            std::slice::from_ref(&d),
        )
        .unwrap();
        let want: Vec<u16> = all.iter().zip(&partner).map(|(&v, &k)| one(v, k)).collect();
        assert!(r == vec![Buf::F16(want)], "same shapes");
        let row = &partner[..256];
        let ds = desc(DataType::Float16, &[n / 256, 256]);
        let r = run(
            &ActivationOp::Prelu,
            &[&Buf::F16(all.clone()), &Buf::F16(row.to_vec())],
            &[&ds, &desc(DataType::Float16, &[256])],
            std::slice::from_ref(&ds),
        )
        .unwrap();
        let want: Vec<u16> = (0..n).map(|i| one(all[i], row[i % 256])).collect();
        assert!(r == vec![Buf::F16(want)], "a broadcast slope");
    }

    /// Every way the three operands can broadcast to a rank-3 output
    /// (each dimension full or 1, the leading ones possibly absent) gives
    /// the naive selection: the row forms (one condition a row, a
    /// condition per element), the general one, and with each of them a
    /// false operand of the output's shape (copied, then written where
    /// the condition selects).
    #[test]
    fn where_broadcasts_every_way() {
        let out = [2usize, 3, 4];
        let shape = |mask: usize, drop: usize| -> Vec<usize> {
            let full: Vec<usize> = (0..3)
                .map(|d| if mask >> d & 1 == 1 { out[d] } else { 1 })
                .collect();
            full[drop.min(full.len())..].to_vec()
        };
        let count = |s: &[usize]| s.iter().product::<usize>();
        for cm in 0..8 {
            for tm in 0..8 {
                for fm in 0..8 {
                    let (sc, st, sf) = (shape(cm, 0), shape(tm, (tm % 3) & 1), shape(fm, fm % 2));
                    let c: Vec<u8> = (0..count(&sc))
                        .map(|i| ((i * 7 + cm) % 3 == 0) as u8 * 9)
                        .collect();
                    let t: Vec<f32> = (0..count(&st)).map(|i| i as f32 + 0.5).collect();
                    let f: Vec<f32> = (0..count(&sf)).map(|i| -(i as f32) - 1.0).collect();
                    check_where(out, (&c, &sc), (&t, &st), (&f, &sf), "");
                }
            }
        }
    }

    /// Runs `where` on float32 operands and checks every bit of its
    /// output against the naive selection (operand shapes aligned right).
    fn check_where(
        out: [usize; 3],
        (c, sc): (&[u8], &[usize]),
        (t, st): (&[f32], &[usize]),
        (f, sf): (&[f32], &[usize]),
        what: &str,
    ) {
        let at = |s: &[usize], o: [usize; 3]| -> usize {
            let pad = 3 - s.len();
            let pick = |d: usize, n: usize| if n == 1 { 0 } else { o[d + pad] };
            s.iter()
                .enumerate()
                .fold(0, |a, (d, &n)| a * n + pick(d, n))
        };
        let r = run(
            &ActivationOp::Where,
            &[
                &Buf::U8(c.to_vec()),
                &Buf::F32(t.to_vec()),
                &Buf::F32(f.to_vec()),
            ],
            &[
                &desc(DataType::Uint8, sc),
                &desc(DataType::Float32, st),
                &desc(DataType::Float32, sf),
            ],
            &[desc(DataType::Float32, &out)],
        )
        .unwrap();
        let Buf::F32(r) = &r[0] else {
            panic!("not float32")
        };
        assert_eq!(r.len(), out.iter().product::<usize>());
        let mut k = 0;
        for i in 0..out[0] {
            for j in 0..out[1] {
                for l in 0..out[2] {
                    let o = [i, j, l];
                    let want = match c[at(sc, o)] != 0 {
                        true => t[at(st, o)],
                        false => f[at(sf, o)],
                    };
                    assert_eq!(
                        r[k].to_bits(),
                        want.to_bits(),
                        "{what} {sc:?} {st:?} {sf:?} at {o:?}"
                    );
                    k += 1;
                }
            }
        }
    }

    /// Outputs large enough for several tasks of several rows each, with
    /// a sparse and a dense condition (the shared-row list and the
    /// blends): every bit of each value chosen (NaN payloads and -0
    /// among them), as a naive walk chooses it.
    #[test]
    fn where_at_scale_keeps_every_bit() {
        let out = [3usize, 50, 700];
        let shape = |mask: usize| -> Vec<usize> {
            (0..3)
                .map(|d| if mask >> d & 1 == 1 { out[d] } else { 1 })
                .collect()
        };
        let bits = |i: usize, salt: u32| match i % 5 {
            0 => f32::NAN.to_bits() | (i as u32 & 0xffff) | salt,
            1 => (-0.0f32).to_bits(),
            _ => (i as u32).wrapping_mul(2654435761) ^ salt,
        };
        for dense in [false, true] {
            for cm in 0..8 {
                for (tm, fm) in [(7, 7), (4, 7), (7, 4), (0, 7), (7, 0), (0, 0), (4, 4)] {
                    let (sc, st, sf) = (shape(cm), shape(tm), shape(fm));
                    let n = |s: &[usize]| s.iter().product::<usize>();
                    let c: Vec<u8> = (0..n(&sc))
                        .map(|i| match dense {
                            true => (i % 3 != 0) as u8 * (i as u8 | 1),
                            false => (i % 11 == 4) as u8 * 128,
                        })
                        .collect();
                    let t: Vec<f32> = (0..n(&st)).map(|i| f32::from_bits(bits(i, 1))).collect();
                    let f: Vec<f32> = (0..n(&sf)).map(|i| f32::from_bits(bits(i, 2))).collect();
                    let what = format!("dense {dense}");
                    check_where(out, (&c, &sc), (&t, &st), (&f, &sf), &what);
                }
            }
        }
    }

    #[test]
    fn where_matches_naive_reference() {
        // condition [2, 1, 3], trueValue [4, 1], falseValue [3] -> [2, 4, 3].
        let c: Vec<u8> = vec![1, 0, 7, 0, 255, 0];
        let t: Vec<i32> = vec![10, 20, 30, 40];
        let f: Vec<i32> = vec![-1, -2, -3];
        let out = [2usize, 4, 3];
        let r = run(
            &ActivationOp::Where,
            &[
                &Buf::U8(c.clone()),
                &Buf::I32(t.clone()),
                &Buf::I32(f.clone()),
            ],
            &[
                &desc(DataType::Uint8, &[2, 1, 3]),
                &desc(DataType::Int32, &[4, 1]),
                &desc(DataType::Int32, &[3]),
            ],
            &[desc(DataType::Int32, &out)],
        )
        .unwrap();
        let mut want = Vec::new();
        for i in 0..2 {
            for &tj in &t {
                for (k, &fk) in f.iter().enumerate() {
                    want.push(if c[i * 3 + k] != 0 { tj } else { fk });
                }
            }
        }
        assert_eq!(r, vec![Buf::I32(want)]);
        // Scalars, float16 and 64-bit values.
        let r = run(
            &ActivationOp::Where,
            &[
                &Buf::U8(vec![0]),
                &Buf::f16_from_f32(&[1.0]),
                &Buf::f16_from_f32(&[2.0]),
            ],
            &[
                &desc(DataType::Uint8, &[]),
                &desc(DataType::Float16, &[]),
                &desc(DataType::Float16, &[]),
            ],
            &[desc(DataType::Float16, &[])],
        )
        .unwrap();
        assert_eq!(r, vec![Buf::f16_from_f32(&[2.0])]);
        let r = run(
            &ActivationOp::Where,
            &[
                &Buf::U8(vec![1, 0, 1]),
                &Buf::U64(vec![u64::MAX]),
                &Buf::U64(vec![1, 2, 3]),
            ],
            &[
                &desc(DataType::Uint8, &[3]),
                &desc(DataType::Uint64, &[1]),
                &desc(DataType::Uint64, &[3]),
            ],
            &[desc(DataType::Uint64, &[3])],
        )
        .unwrap();
        assert_eq!(r, vec![Buf::U64(vec![u64::MAX, 2, u64::MAX])]);
        // Mismatched storage is an error, not a panic.
        assert!(run(
            &ActivationOp::Where,
            &[&Buf::U8(vec![1]), &Buf::U64(vec![1]), &Buf::I64(vec![1])],
            &[
                &desc(DataType::Uint8, &[1]),
                &desc(DataType::Uint64, &[1]),
                &desc(DataType::Int64, &[1]),
            ],
            &[desc(DataType::Uint64, &[1])],
        )
        .is_err());
    }

    /// Every one-input float activation gives the same bits at every
    /// vector width this CPU has (gelu both through its in-place slice
    /// loop and through the shared one).
    #[test]
    fn float_activations_same_bits_at_every_width() {
        use super::super::elementwise::apply_in_place;
        use super::super::simd::{levels, with_simd_at, SimdLevel};
        let x: Vec<f32> = (0..5003)
            .map(|i| (i as f32 - 2500.0) * 0.0123)
            .chain([
                0.0,
                -0.0,
                f32::NAN,
                f32::INFINITY,
                f32::NEG_INFINITY,
                -25.0,
                -90.0,
                1e-40,
                -1e-40,
            ])
            .collect();
        let ops = [
            ActivationOp::Elu { alpha: 0.7 },
            ActivationOp::Gelu,
            ActivationOp::HardSigmoid {
                alpha: 0.2,
                beta: 0.5,
            },
            ActivationOp::HardSwish,
            ActivationOp::LeakyRelu { alpha: 0.1 },
            ActivationOp::Linear {
                alpha: 1.5,
                beta: -0.25,
            },
            ActivationOp::Softplus,
            ActivationOp::Softsign,
        ];
        let run = |op: &ActivationOp, level: SimdLevel| {
            let mut v = x.clone();
            // SAFETY: `levels()` lists only the levels this CPU has.
            unsafe {
                with_simd_at(
                    level,
                    #[inline(always)]
                    || {
                        with_float_activation!(
                            op,
                            f => v.iter_mut().for_each(|e| *e = f(*e)),
                            unreachable!()
                        )
                    },
                )
            };
            v
        };
        let gelu_in_place = |level: SimdLevel| {
            let mut v = x.clone();
            // SAFETY: as above.
            unsafe {
                with_simd_at(
                    level,
                    #[inline(always)]
                    || apply_in_place(&mut v, &inlined(|x: f32| gelu_f32(x))),
                )
            };
            v
        };
        let same = |a: &[f32], b: &[f32], what: &str| {
            for (i, (a, b)) in a.iter().zip(b).enumerate() {
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "{what}({}): {a} against {b}",
                    x[i]
                );
            }
        };
        for op in &ops {
            let base = run(op, SimdLevel::Baseline);
            for l in levels() {
                same(&run(op, l), &base, &format!("{op:?} at {l:?}"));
            }
        }
        let base = run(&ActivationOp::Gelu, SimdLevel::Baseline);
        for l in levels() {
            same(&gelu_in_place(l), &base, &format!("gelu in place at {l:?}"));
        }
    }
}

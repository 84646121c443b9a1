//! Scalar f32 functions written with plain arithmetic, selects and bit
//! operations, so that a loop over one vectorises inside `with_simd`
//! (libm's `expf`, `tanhf` and an iterated `erf` are calls per element:
//! `erf` of 1M values took 85 ms, `tanh` 19 ms, an add 1 ms). Each takes
//! every branch's arithmetic in every lane and selects, so that no lane's
//! value depends on the vector width.
//!
//! The polynomials below are Chebyshev interpolants of the named function
//! (in f64, at 8, 13 and 6 nodes), rewritten in the monomial basis and
//! rounded to f32; the tests bound each function's error against an f64
//! reference over its whole range.

/// `e^x` in f32 within about 1 ulp over the whole range (subnormal results
/// included, overflow to +inf, NaN kept), written with plain arithmetic and
/// bit operations so that loops over it vectorise (libm's `expf` does
/// not).
#[inline(always)]
pub(in crate::backend::cpu) fn exp_f32(x: f32) -> f32 {
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

/// `1 / (1 + e^-x)` from [`exp_f32`], so that a loop over it runs on
/// vectors (libm's `expf` does not: a language model's SwiGLU sigmoids
/// were 7% of a prompt). With `e = e^-|x|`, never above 1: `1 / (1 + e)`
/// for x >= 0 and `e / (1 + e)` below, which keeps the subnormal results
/// down to about -103.9 where `e^-x` itself would overflow. Within about
/// 2 ulp.
#[inline(always)]
pub(super) fn sigmoid(x: f32) -> f32 {
    let e = exp_f32(-x.abs());
    let r = 1.0 / (1.0 + e);
    if x >= 0.0 {
        r
    } else {
        e * r
    }
}

/// erf in f32 within about 1 ulp (1.14 at worst in the tests, which
/// hold it to 1.5): for |x| < 1, `x + x q(x^2)` with `q(s) ~ erf(x)/x - 1`, so the polynomial's
/// rounding is scaled down by q's size (about 0.13); from 1,
/// `1 - e^(-x^2) r(x)` with `r ~ erfc(x) e^(x^2)` (smooth and between 0.14
/// and 0.43 there) in `u = (x - 2.5) / 1.5`. From 4 on, 1 - erf(x) is
/// under 1.6e-8, less than half the gap below 1 in f32, so the clamp to 4
/// gives exactly 1. NaN stays NaN.
#[inline(always)]
pub(super) fn erf_f32(x: f32) -> f32 {
    const SMALL: [f32; 8] = [
        1.2837917e-01,
        -3.7612638e-01,
        1.1283782e-01,
        -2.686543e-02,
        5.2210316e-03,
        -8.4840803e-04,
        1.1265959e-04,
        -9.667045e-06,
    ];
    const ERFCX: [f32; 13] = [
        2.1080637e-01,
        -1.11521006e-01,
        5.6110486e-02,
        -2.7005717e-02,
        1.248952e-02,
        -5.56738e-03,
        2.4024874e-03,
        -1.0170089e-03,
        4.1298693e-04,
        -1.4405779e-04,
        5.6303576e-05,
        -3.6888912e-05,
        1.3365836e-05,
    ];
    let a = x.abs();
    let s = a * a;
    let near = a + a * horner(&SMALL, s);
    // `clamp` keeps a NaN (where `min` and `max` would drop it).
    let c = a.clamp(1.0, 4.0);
    let far = 1.0 - exp_f32(-(c * c)) * horner(&ERFCX, (c - 2.5) * (2.0 / 3.0));
    let r = if a < 1.0 { near } else { far };
    r.copysign(x)
}

/// tanh in f32 within 2 ulp (1.52 at worst in the tests): for
/// |x| < 0.625, `x + x s r(s)` with
/// `s = x^2` and `r(s) ~ (tanh(x)/x - 1) / s` (starting at -1/3), which
/// keeps the relative precision of small arguments; from there,
/// `(1 - e) / (1 + e)` with `e = e^(-2|x|)`, at most e^-1.25, so neither
/// difference cancels. Large |x| gives e = 0 and exactly ±1; NaN stays NaN
/// and -0 stays -0.
#[inline(always)]
pub(super) fn tanh_f32(x: f32) -> f32 {
    const SMALL: [f32; 6] = [
        -3.3333334e-01,
        1.3333304e-01,
        -5.3959258e-02,
        2.1768918e-02,
        -8.343945e-03,
        2.292745e-03,
    ];
    let a = x.abs();
    let s = a * a;
    let near = a + a * (s * horner(&SMALL, s));
    let e = exp_f32(-2.0 * a);
    let far = (1.0 - e) / (1.0 + e);
    let r = if a < 0.625 { near } else { far };
    r.copysign(x)
}

/// `ln((1 + s) / (1 - s)) = 2 atanh(s)` for |s| <= 1/3:
/// `2 (s + s w r(w))` with `w = s^2` and `r(w) ~ (atanh(s)/s - 1) / w`
/// (starting at 1/3), so small s keeps its relative precision.
#[inline(always)]
fn ln_ratio(s: f32) -> f32 {
    const R: [f32; 6] = [
        3.3333334e-01,
        2.0000005e-01,
        1.4285153e-01,
        1.1132355e-01,
        8.732356e-02,
        1.03937924e-01,
    ];
    let w = s * s;
    2.0 * (s + s * (w * horner(&R, w)))
}

/// The natural logarithm in f32 within 2 ulp (1.78 at worst in the tests):
/// `x = 2^k m` with m in [sqrt(1/2), sqrt(2)) from the bits (a subnormal
/// scaled by 2^23 first), then `k ln 2 + ln m` with `ln m` from
/// [`ln_ratio`] of `(m - 1) / (m + 1)` (m - 1 is exact) and ln 2 split so
/// that `k * LN2_HI` is exact. 0 gives -inf, +inf itself, and a negative
/// number or NaN gives NaN.
#[inline(always)]
pub(in crate::backend::cpu) fn log_f32(x: f32) -> f32 {
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    const SQRT2_BITS: u32 = 0x3fb5_04f3;
    let sub = x < f32::MIN_POSITIVE;
    let xn = if sub { x * 8_388_608.0 } else { x };
    let bits = xn.to_bits();
    let mut k = ((bits >> 23) & 0xff) as i32 - if sub { 127 + 23 } else { 127 };
    let mut mb = (bits & 0x007f_ffff) | 0x3f80_0000;
    // m above sqrt 2: halve it (exact) and count one more power.
    let high = mb > SQRT2_BITS;
    mb = if high { mb - 0x0080_0000 } else { mb };
    k += high as i32;
    let f = f32::from_bits(mb) - 1.0;
    let lm = ln_ratio(f / (2.0 + f));
    let kf = k as f32;
    let r = kf * LN2_HI + (kf * LN2_LO + lm);
    if x == f32::INFINITY {
        x
    } else if x > 0.0 {
        r
    } else if x == 0.0 {
        f32::NEG_INFINITY
    } else {
        f32::NAN
    }
}

/// `ln(1 + e)` for e in [0, 1] (as softplus needs it, with `e = e^-|x|`)
/// within 2.5 ulp (1.96 at worst in the tests): [`ln_ratio`] of
/// `e / (2 + e)`, at most 1/3. NaN stays NaN.
#[inline(always)]
pub(in crate::backend::cpu) fn ln_1p_unit(e: f32) -> f32 {
    ln_ratio(e / (2.0 + e))
}

/// `e^x - 1` in f32 within 2.5 ulp (1.81 at worst in the tests, above 1):
/// `x + x^2 p(x)` where |x| < 0.5 (`p ~ (e^x - 1 - x) / x^2`, from 1/2),
/// and `exp_f32(x) - 1` beyond, where the result is at least 0.39 in
/// size, so the difference loses little.
#[inline(always)]
pub(in crate::backend::cpu) fn exp_m1_f32(x: f32) -> f32 {
    const P: [f32; 8] = [
        0.5,
        1.6666667e-01,
        4.1666668e-02,
        8.333334e-03,
        1.3888673e-03,
        1.9841074e-04,
        2.4939733e-05,
        2.7682834e-06,
    ];
    let near = x + (x * x) * horner(&P, x);
    let far = exp_f32(x) - 1.0;
    // -0 + (+0) would give +0; e^-0 - 1 is -0 as x is.
    if x == 0.0 {
        x
    } else if x.abs() < 0.5 {
        near
    } else {
        far
    }
}

/// The largest |x| whose sine, cosine and tangent come from
/// [`quarter_turns`] (there `q < 2^20`, so `q * PIO2_HI` is exact); those
/// of larger finite values are libm's, in a pass of their own in `unary`.
pub(super) const TRIG_MAX: f32 = 1.0e6;

/// x as `q pi/2 + r` in f64, with q the integer nearest `x 2/pi`:
/// `(r, q mod 4)`, |r| at most about pi/4. pi/2 is split into a 33-bit
/// part, whose product with q is exact for |x| <= [`TRIG_MAX`], and the
/// rest, so r is within about 2^-66 of its exact value. An infinity or
/// NaN gives a NaN r.
#[inline(always)]
fn quarter_turns(x: f32) -> (f64, u64) {
    // 1.5 * 2^52: adding it rounds to an integer held in the low bits.
    const SHIFT: f64 = 6_755_399_441_055_744.0;
    const PIO2_HI: f64 = 1.570_796_326_734_125_6;
    const PIO2_LO: f64 = 6.077_100_506_506_192e-11;
    let w = x as f64;
    let t = w * std::f64::consts::FRAC_2_PI + SHIFT;
    let q = t - SHIFT;
    ((w - q * PIO2_HI) - q * PIO2_LO, t.to_bits() & 3)
}

/// sin and cos of r, |r| <= pi/4 (and a little beyond), in f64 by their
/// Taylor series to r^13 and r^14 (the first terms left out are below
/// 1e-11 of the result there, far under an f32 ulp).
#[inline(always)]
fn sin_cos_poly(r: f64) -> (f64, f64) {
    let z = r * r;
    let s = r + r
        * z
        * (-1.0 / 6.0
            + z * (1.0 / 120.0
                + z * (-1.0 / 5040.0 + z * (1.0 / 362_880.0 + z * (-1.0 / 39_916_800.0)))));
    let c = 1.0
        + z * (-0.5
            + z * (1.0 / 24.0
                + z * (-1.0 / 720.0
                    + z * (1.0 / 40_320.0
                        + z * (-1.0 / 3_628_800.0 + z * (1.0 / 479_001_600.0))))));
    (s, c)
}

/// sin in f32 within an ulp for |x| <= [`TRIG_MAX`] (computed in f64 and
/// rounded once); -0 stays -0, infinities and NaN give NaN.
#[inline(always)]
pub(super) fn sin_f32(x: f32) -> f32 {
    let (r, q) = quarter_turns(x);
    let (s, c) = sin_cos_poly(r);
    let v = if q & 1 == 0 { s } else { c };
    let v = if q & 2 == 0 { v } else { -v };
    if x == 0.0 {
        x
    } else {
        v as f32
    }
}

/// cos in f32 within an ulp for |x| <= [`TRIG_MAX`], as [`sin_f32`].
#[inline(always)]
pub(super) fn cos_f32(x: f32) -> f32 {
    let (r, q) = quarter_turns(x);
    let (s, c) = sin_cos_poly(r);
    let v = if q & 1 == 0 { c } else { s };
    // Negative in the second and third quarter turns.
    (if (q + 1) & 2 == 0 { v } else { -v }) as f32
}

/// tan in f32 within an ulp for |x| <= [`TRIG_MAX`]: `s / c` or, an odd
/// number of quarter turns on, `-c / s`, divided in f64 and rounded once.
#[inline(always)]
pub(super) fn tan_f32(x: f32) -> f32 {
    let (r, q) = quarter_turns(x);
    let (s, c) = sin_cos_poly(r);
    let v = if q & 1 == 0 { s / c } else { -c / s };
    if x == 0.0 {
        x
    } else {
        v as f32
    }
}

/// `c[0] + v (c[1] + v (c[2] + ...))`, each step rounded (no fused
/// multiply-add, so every vector width and the scalar form agree).
#[inline(always)]
fn horner<const N: usize>(c: &[f32; N], v: f32) -> f32 {
    let mut r = c[N - 1];
    for &k in c[..N - 1].iter().rev() {
        r = r * v + k;
    }
    r
}

/// The error function in f64, accurate to a few ulps of f64: the
/// reference that [`erf_f32`] is tested against (and was fitted to).
///
/// For |x| <= 6 it sums the series of Abramowitz & Stegun 7.1.6,
/// `erf(x) = 2/sqrt(pi) * exp(-x^2) * sum_{n>=0} 2^n x^(2n+1) / (1*3*...*(2n+1))`,
/// whose terms are all of one sign, so no cancellation loses precision
/// (unlike the alternating Maclaurin series). Beyond 6, 1 - erf(|x|) is
/// below 2.2e-17 and the result is ±1 in f64.
#[cfg(test)]
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The gap between `want` (an f64 reference) rounded to f32 and the
    /// next f32 away from zero: an ulp at the result.
    fn ulp_at(want: f64) -> f64 {
        let w = (want as f32).abs();
        (f32::from_bits(w.to_bits() + 1) - w) as f64
    }

    /// The largest error of `f` in ulps over every 4099th positive f32
    /// (zero, the subnormals and the normals to f32::MAX) and a dense
    /// grid over [0, 6], where both functions change; and checks the
    /// odd symmetry bit for bit.
    fn worst_ulps(f: fn(f32) -> f32, reference: fn(f64) -> f64) -> (f64, f32) {
        let sparse = (0..0x7f80_0000u32).step_by(4099).map(f32::from_bits);
        let dense = (0..600_000).map(|i| i as f32 * 1e-5);
        let mut worst = (0.0, 0.0);
        for x in sparse.chain(dense) {
            let got = f(x);
            assert_eq!(f(-x).to_bits(), (-got).to_bits(), "f(-{x:e})");
            let want = reference(x as f64);
            let e = (got as f64 - want).abs() / ulp_at(want);
            if e > worst.0 {
                worst = (e, x);
            }
        }
        worst
    }

    /// The largest error in ulps of `f` against `reference` over `xs`.
    fn worst_over(
        f: fn(f32) -> f32,
        reference: fn(f64) -> f64,
        xs: impl Iterator<Item = f32>,
    ) -> (f64, f32) {
        let mut worst = (0.0, 0.0);
        for x in xs {
            let want = reference(x as f64);
            let e = (f(x) as f64 - want).abs() / ulp_at(want);
            if e > worst.0 {
                worst = (e, x);
            }
        }
        worst
    }

    #[test]
    fn log_f32_is_within_two_ulps() {
        // Every 4099th positive float, subnormals included, and every
        // 64th one in [1/2, 2), where ln x is small and the relative
        // error hardest to keep.
        let xs = (1..0x7f80_0000u32)
            .step_by(4099)
            .chain((0x3f00_0000..0x4000_0000).step_by(64))
            .map(f32::from_bits)
            .filter(|&x| x != 1.0);
        let (e, x) = worst_over(log_f32, f64::ln, xs);
        assert!(e <= 2.0, "log_f32 is {e} ulp off at {x:e}");
        assert_eq!(log_f32(1.0).to_bits(), 0);
        assert_eq!(log_f32(0.0), f32::NEG_INFINITY);
        assert_eq!(log_f32(-0.0), f32::NEG_INFINITY);
        assert_eq!(log_f32(f32::INFINITY), f32::INFINITY);
        for x in [-1.0, -f32::from_bits(1), f32::NEG_INFINITY, f32::NAN] {
            assert!(log_f32(x).is_nan(), "ln({x})");
        }
    }

    #[test]
    fn ln_1p_unit_is_within_two_and_a_half_ulps() {
        // Every 16th float in (0, 1], subnormals included.
        let xs = (1..=0x3f80_0000u32).step_by(16).map(f32::from_bits);
        let (e, x) = worst_over(ln_1p_unit, f64::ln_1p, xs);
        assert!(e <= 2.5, "ln_1p_unit is {e} ulp off at {x:e}");
        assert_eq!(ln_1p_unit(0.0).to_bits(), 0);
        assert!(ln_1p_unit(f32::NAN).is_nan());
    }

    #[test]
    fn exp_m1_f32_is_within_two_and_a_half_ulps() {
        // Every 1024th float of either sign up to 88 in size (e^88 is
        // near the top of f32), and a dense grid across the switch at 1/2.
        let xs = (1..0x42b0_0000u32)
            .step_by(1024)
            .flat_map(|b| [f32::from_bits(b), -f32::from_bits(b)])
            .chain((0..200_000).map(|i| -1.0 + i as f32 * 1e-5));
        let (e, x) = worst_over(exp_m1_f32, f64::exp_m1, xs);
        assert!(e <= 2.5, "exp_m1_f32 is {e} ulp off at {x:e}");
        assert_eq!(exp_m1_f32(0.0).to_bits(), 0);
        assert_eq!(exp_m1_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(exp_m1_f32(f32::NEG_INFINITY), -1.0);
        assert_eq!(exp_m1_f32(-200.0), -1.0);
        assert_eq!(exp_m1_f32(f32::INFINITY), f32::INFINITY);
        assert!(exp_m1_f32(f32::NAN).is_nan());
    }

    /// sin, cos and tan within an ulp of f64's over every 257th float up
    /// to [`TRIG_MAX`] of either sign and a dense grid over [-10, 10]
    /// (near the zeros and poles of the first quarter turns); zeros keep
    /// their sign, infinities and NaN give NaN.
    #[test]
    fn sin_cos_tan_are_within_an_ulp() {
        let sparse = (0..TRIG_MAX.to_bits())
            .step_by(257)
            .flat_map(|b| [f32::from_bits(b), -f32::from_bits(b)]);
        let dense = (0..2_000_000).map(|i| -10.0 + i as f32 * 1e-5);
        let xs: Vec<f32> = sparse.chain(dense).chain([TRIG_MAX, -TRIG_MAX]).collect();
        type Pair = (fn(f32) -> f32, fn(f64) -> f64, &'static str);
        let fns: [Pair; 3] = [
            (sin_f32, f64::sin, "sin"),
            (cos_f32, f64::cos, "cos"),
            (tan_f32, f64::tan, "tan"),
        ];
        for (f, reference, name) in fns {
            let (e, x) = worst_over(f, reference, xs.iter().copied());
            assert!(e <= 1.0, "{name} is {e} ulp off at {x:e}");
            for x in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
                assert!(f(x).is_nan(), "{name}({x})");
            }
        }
        for z in [0.0f32, -0.0] {
            assert_eq!(sin_f32(z).to_bits(), z.to_bits());
            assert_eq!(tan_f32(z).to_bits(), z.to_bits());
            assert_eq!(cos_f32(z), 1.0);
        }
    }

    fn check_specials(f: fn(f32) -> f32) {
        assert!(f(f32::NAN).is_nan());
        assert!(f(-f32::NAN).is_nan());
        assert_eq!(f(0.0).to_bits(), 0.0f32.to_bits());
        assert_eq!(f(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(f(f32::INFINITY), 1.0);
        assert_eq!(f(f32::NEG_INFINITY), -1.0);
        assert_eq!(f(f32::MAX), 1.0);
        // The smallest subnormal: the result is the nearest multiple of
        // it to x times the slope at 0 (2/sqrt(pi) for erf, 1 for tanh).
        let tiny = f32::from_bits(1);
        assert!(f(tiny) == tiny || f(tiny) == f32::from_bits(2));
    }

    #[test]
    fn erf_f32_is_within_an_ulp_and_a_half() {
        let (e, x) = worst_ulps(erf_f32, erf);
        assert!(e <= 1.5, "erf_f32 is {e} ulp off at {x:e}");
        check_specials(erf_f32);
        // The switch from the series to 1 - erfc, and the clamp.
        for x in [
            0.99999994f32,
            1.0,
            1.0000001,
            3.9999998,
            4.0,
            4.0000005,
            9.0,
        ] {
            let want = erf(x as f64);
            assert!(
                (erf_f32(x) as f64 - want).abs() <= 1.5 * ulp_at(want),
                "erf({x})"
            );
        }
        assert_eq!(erf_f32(4.0), 1.0);
    }

    #[test]
    fn tanh_f32_is_within_two_ulps() {
        let (e, x) = worst_ulps(tanh_f32, f64::tanh);
        assert!(e <= 2.0, "tanh_f32 is {e} ulp off at {x:e}");
        check_specials(tanh_f32);
        for x in [0.62499994f32, 0.625, 0.62500006, 9.0, 9.1, 52.0] {
            let want = (x as f64).tanh();
            assert!(
                (tanh_f32(x) as f64 - want).abs() <= 2.0 * ulp_at(want),
                "tanh({x})"
            );
        }
    }
}

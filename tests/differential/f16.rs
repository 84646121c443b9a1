//! IEEE binary16 for the reference, written from the format's definition
//! (1 sign bit, 5 exponent bits biased by 15, 10 fraction bits) so that
//! it shares nothing with the crate's conversions.

/// The largest finite half.
pub const MAX: f64 = 65504.0;

/// The exponent of `a` (> 0, finite): `floor(log2(a))`, read from its bits.
fn exponent(a: f64) -> i32 {
    let bits = a.to_bits();
    let e = ((bits >> 52) & 0x7ff) as i32;
    if e == 0 {
        // Subnormal doubles are far below any half.
        -1074
    } else {
        e - 1023
    }
}

/// `x` rounded to the nearest half, ties to even; beyond the largest
/// half's rounding range, an infinity of its sign.
pub fn round(x: f64) -> f64 {
    if x.is_nan() || x.is_infinite() || x == 0.0 {
        return x;
    }
    let a = x.abs();
    // The spacing of halves around a: 2^(e - 10) for normal halves,
    // 2^-24 for subnormal ones (e < -14).
    let quantum = 2f64.powi(exponent(a).max(-14) - 10);
    // Division and multiplication by a power of two are exact here.
    let r = (a / quantum).round_ties_even() * quantum;
    let r = if r > MAX { f64::INFINITY } else { r };
    r.copysign(x)
}

/// The bit pattern of `x`, which must be a half (`round(x) == x`) or NaN.
pub fn to_bits(x: f64) -> u16 {
    let sign = if x.is_sign_negative() { 0x8000 } else { 0 };
    if x.is_nan() {
        return 0x7e00;
    }
    let a = x.abs();
    if a.is_infinite() {
        return sign | 0x7c00;
    }
    if a < 2f64.powi(-14) {
        // Subnormal (or zero): a multiple of 2^-24.
        return sign | (a / 2f64.powi(-24)) as u16;
    }
    let e = exponent(a);
    let frac = ((a / 2f64.powi(e) - 1.0) * 1024.0) as u16;
    sign | (((e + 15) as u16) << 10) | frac
}

pub fn from_bits(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let e = ((h >> 10) & 0x1f) as i32;
    let frac = (h & 0x3ff) as f64;
    let mag = match e {
        0 => frac * 2f64.powi(-24),
        31 if frac == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        _ => (1.0 + frac / 1024.0) * 2f64.powi(e - 15),
    };
    sign * mag
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_half_round_trips() {
        for h in 0..=u16::MAX {
            let x = from_bits(h);
            if x.is_nan() {
                continue;
            }
            assert_eq!(round(x), x, "{h:#06x}");
            assert_eq!(to_bits(x), h, "{h:#06x}");
        }
    }

    #[test]
    fn rounding_ties_to_even_and_overflow() {
        // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: even is 1.
        assert_eq!(round(1.0 + 2f64.powi(-11)), 1.0);
        // 1 + 3 * 2^-11 lies halfway between 1 + 2^-10 and 1 + 2^-9.
        assert_eq!(round(1.0 + 3.0 * 2f64.powi(-11)), 1.0 + 2f64.powi(-9));
        assert_eq!(round(65519.0), 65504.0);
        assert_eq!(round(65520.0), f64::INFINITY);
        assert_eq!(round(-65520.0), f64::NEG_INFINITY);
        // Half the smallest subnormal rounds to (signed) zero.
        assert_eq!(round(2f64.powi(-25)), 0.0);
        assert!(round(-(2f64.powi(-25))).is_sign_negative());
        assert_eq!(round(3.0 * 2f64.powi(-25)), 2f64.powi(-23));
    }
}

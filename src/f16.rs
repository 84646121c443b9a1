//! IEEE 754 binary16 conversions (round to nearest, ties to even).
//!
//! float16 tensors are stored as their bit patterns (`u16`); kernels compute
//! in f32 and round once per operator output.

/// Converts an f32 to the nearest binary16 bit pattern (ties to even).
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32;
    let man = bits & 0x7f_ffff;
    if exp == 0xff {
        // Infinity or NaN (keep NaN quiet and non-zero).
        return sign
            | 0x7c00
            | if man != 0 {
                0x200 | (man >> 13) as u16
            } else {
                0
            };
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // Subnormal half (or zero): shift the mantissa with its implicit bit.
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let half = m >> shift;
        let rem = m & ((1 << shift) - 1);
        let halfway = 1 << (shift - 1);
        let rounded = if rem > halfway || (rem == halfway && (half & 1) == 1) {
            half + 1
        } else {
            half
        };
        return sign | rounded as u16;
    }
    let half = ((e as u32) << 10) | (man >> 13);
    let rem = man & 0x1fff;
    let rounded = if rem > 0x1000 || (rem == 0x1000 && (half & 1) == 1) {
        half + 1
    } else {
        half
    };
    // A carry out of the mantissa correctly bumps the exponent (up to inf).
    sign | rounded as u16
}

/// Converts a binary16 bit pattern to f32 (exact).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    let bits = if exp == 0 {
        if man == 0 {
            sign
        } else {
            // Normalise the subnormal.
            let mut e = 127 - 15 + 1;
            let mut m = man;
            while m & 0x400 == 0 {
                m <<= 1;
                e -= 1;
            }
            sign | ((e as u32) << 23) | ((m & 0x3ff) << 13)
        }
    } else if exp == 0x1f {
        sign | 0x7f80_0000 | (man << 13)
    } else {
        sign | ((exp + 127 - 15) << 23) | (man << 13)
    };
    f32::from_bits(bits)
}

/// Rounds every value to the nearest float16 (ties to even), kept as
/// f32: what a float16 operator's output holds when a kernel computes in
/// f32 and stores in f32 (the CPU backend's blocked convolutions, whose
/// float16 operands stay in f32 between the chain's ends). The same
/// results as [`f32_to_f16`] then [`f16_to_f32`], NaN payloads included;
/// with F16C, 8 values per instruction pair.
pub fn round_in_place(v: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx") && is_x86_feature_detected!("f16c") {
        // SAFETY: both features were detected just above.
        unsafe { round_f16c(v) };
        return;
    }
    for x in v {
        *x = f16_to_f32(f32_to_f16(*x));
    }
}

/// float16 bit patterns as f32 (exact), into `out` (as long as `h`).
/// A signalling NaN may come out quiet (F16C quiets it); narrowed again
/// it is the half [`f32_to_f16`] gives either way.
pub fn widen(h: &[u16], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx") && is_x86_feature_detected!("f16c") {
        // SAFETY: both features were detected just above.
        unsafe { widen_f16c(h, out) };
        return;
    }
    for (o, &x) in out.iter_mut().zip(h) {
        *o = f16_to_f32(x);
    }
}

/// f32 values as float16 bit patterns (rounded to nearest, ties to
/// even), into `out` (as long as `x`).
pub fn narrow(x: &[f32], out: &mut [u16]) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx") && is_x86_feature_detected!("f16c") {
        // SAFETY: both features were detected just above.
        unsafe { narrow_f16c(x, out) };
        return;
    }
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f32_to_f16(v);
    }
}

/// # Safety
/// The CPU must have AVX and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn narrow_f16c(x: &[f32], out: &mut [u16]) {
    use std::arch::x86_64::*;
    let mut outs = out.chunks_exact_mut(8);
    let mut ins = x.chunks_exact(8);
    for (o, v) in (&mut outs).zip(&mut ins) {
        // SAFETY: `v` is 8 floats and `o` 8 halves (16 bytes); unaligned
        // loads and stores take any address; the features are this
        // function's.
        unsafe {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(v.as_ptr()));
            _mm_storeu_si128(o.as_mut_ptr().cast(), h);
        }
    }
    for (o, &v) in outs.into_remainder().iter_mut().zip(ins.remainder()) {
        *o = f32_to_f16(v);
    }
}

/// # Safety
/// The CPU must have AVX and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn round_f16c(v: &mut [f32]) {
    use std::arch::x86_64::*;
    let mut chunks = v.chunks_exact_mut(8);
    for c in &mut chunks {
        // SAFETY: `c` is 8 floats, read and written whole; unaligned
        // loads and stores take any address; the features are this
        // function's.
        unsafe {
            let x = _mm256_loadu_ps(c.as_ptr());
            // Rounding from the immediate (nearest, ties to even), not
            // from MXCSR.
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x);
            _mm256_storeu_ps(c.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
    }
    for x in chunks.into_remainder() {
        *x = f16_to_f32(f32_to_f16(*x));
    }
}

/// # Safety
/// The CPU must have AVX and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx,f16c")]
unsafe fn widen_f16c(h: &[u16], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let mut outs = out.chunks_exact_mut(8);
    let mut ins = h.chunks_exact(8);
    for (o, x) in (&mut outs).zip(&mut ins) {
        // SAFETY: `x` is 8 halves (16 bytes) and `o` 8 floats; unaligned
        // loads and stores take any address; the features are this
        // function's.
        unsafe {
            let v = _mm_loadu_si128(x.as_ptr().cast());
            _mm256_storeu_ps(o.as_mut_ptr(), _mm256_cvtph_ps(v));
        }
    }
    for (o, &x) in outs.into_remainder().iter_mut().zip(ins.remainder()) {
        *o = f16_to_f32(x);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vector forms give the scalar conversions' bits: every half
    /// widened, and f32 values across the whole range (every exponent,
    /// ties, subnormal halves, overflow, NaN with payloads) rounded.
    #[test]
    fn the_slice_forms_match_the_scalar_ones() {
        let halves: Vec<u16> = (0..=u16::MAX).collect();
        let mut wide = vec![0.0f32; halves.len()];
        widen(&halves, &mut wide);
        for (&h, w) in halves.iter().zip(&wide) {
            // F16C quiets a signalling NaN as it widens; narrowed again
            // (as every float16 output is) the two are the same half.
            let want = f16_to_f32(h);
            match want.is_nan() {
                true => assert_eq!(f32_to_f16(*w), f32_to_f16(want), "{h:#06x}"),
                false => assert_eq!(w.to_bits(), want.to_bits(), "{h:#06x}"),
            }
        }
        // Every 4099th f32 pattern (odd, so every low-bit pattern and
        // tie comes up), and the halfway points between halves.
        let mut xs: Vec<f32> = (0..=u32::MAX / 4099)
            .map(|i| f32::from_bits(i * 4099))
            .collect();
        xs.extend((0..u16::MAX).map(|h| f32::from_bits(f16_to_f32(h).to_bits() + 0x1000)));
        let mut narrowed = vec![0u16; xs.len()];
        narrow(&xs, &mut narrowed);
        for (x, h) in xs.iter().zip(&narrowed) {
            assert_eq!(*h, f32_to_f16(*x), "{:#010x}", x.to_bits());
        }
        let mut got = xs.clone();
        round_in_place(&mut got);
        for (x, g) in xs.iter().zip(&got) {
            let want = f16_to_f32(f32_to_f16(*x));
            assert_eq!(g.to_bits(), want.to_bits(), "{:#010x}", x.to_bits());
        }
    }

    #[test]
    fn round_trips_every_half() {
        for h in 0..=u16::MAX {
            let f = f16_to_f32(h);
            if f.is_nan() {
                assert!(f16_to_f32(f32_to_f16(f)).is_nan());
            } else {
                assert_eq!(f32_to_f16(f), h, "pattern {h:#06x}");
            }
        }
    }

    #[test]
    fn rounds_ties_to_even() {
        // 1 + 2^-11 is halfway between 1 and the next half; ties to even -> 1.
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3c00);
        // 1 + 3*2^-11 is halfway; rounds up to even mantissa 2.
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3c02);
        assert_eq!(f32_to_f16(65520.0), 0x7c00);
        assert_eq!(f32_to_f16(65519.0), 0x7bff);
        assert_eq!(f32_to_f16(2f32.powi(-25)), 0x0000);
        assert_eq!(f32_to_f16(2f32.powi(-25) * 1.5), 0x0001);
    }
}

// Float helpers appended to the element-wise and softmax shaders (unused
// ones cost nothing). Each exists because a driver's own form disagreed
// with the CPU backend and the spec's tolerances (found by the
// differential fuzzer, tests/differential.rs).

// NaN, by the bits: drivers may compile a comparison as if no NaN exists.
fn is_nan_f(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

// e^x within a few ULP. A driver's exp(x) is commonly exp2(x * log2(e)),
// whose product rounds with an error that grows with |x| (lavapipe: 36 ULP
// at x = 80). Here x = n ln2 + r with |r| <= ln2 / 2 (ln2 as the sum of
// two floats, the first exact in n * hi for every n needed), and
// e^x = 2^n e^r, the power exact. The clamp keeps n within ldexp's range:
// e^89 overflows and e^-104 is below the smallest subnormal anyway.
fn exp_r(x: f32) -> f32 {
    let c = clamp(x, -104.0, 89.0);
    let n = round(c * 1.4426950408889634);
    let r = (c - n * 0.693145751953125) - n * 1.4286068202862268e-06;
    return select(ldexp(exp(r), i32(n)), x, is_nan_f(x));
}

// ln(x) within a few ULP, near 1 included, subnormal x included. A
// driver's log has an absolute error, large against a result near 0
// (lavapipe: 21 ULP for log(0.95)), and flushes a subnormal x to 0. Here
// x = 2^e m with m in [sqrt(1/2), sqrt(2)) taken from the bits (a
// subnormal as its bits times 2^-149), and ln m = 2 atanh(u) with
// u = (m - 1) / (m + 1), |u| < 0.172, by its series to u^11 (the next
// term is below 2^-27 of the sum); m - 1 is exact. Zero, negatives,
// infinity and NaN keep the driver's log.
fn log_r(x: f32) -> f32 {
    var b = bitcast<u32>(x);
    if (b == 0u || b >= 0x7f800000u) {
        return log(x);
    }
    var e = -127;
    if (b < 0x00800000u) {
        // f32(b) is exact (b < 2^23) and normal; x = f32(b) 2^-149.
        b = bitcast<u32>(f32(b));
        e = -127 - 149;
    }
    e += i32(b >> 23u);
    var m = bitcast<f32>((b & 0x007fffffu) | 0x3f800000u);
    if (m > 1.4142135) {
        m = m * 0.5;
        e += 1;
    }
    let u = (m - 1.0) / (m + 1.0);
    let u2 = u * u;
    let series = 1.0 + u2 * (0.33333334 + u2 * (0.2 + u2 * (0.14285715 + u2 * (0.11111111 + u2 * 0.09090909))));
    let lm = 2.0 * u * series;
    // e ln2 with ln2 as the sum of two floats (e * hi exact).
    let fe = f32(e);
    return (fe * 0.693145751953125 + lm) + fe * 1.4286068202862268e-06;
}

// max and min that return NaN when either operand is NaN, as the CPU
// backend does (WGSL leaves the result unspecified, and drivers return
// the other operand).
fn max_nan(x: f32, y: f32) -> f32 {
    return select(max(x, y), x + y, is_nan_f(x) || is_nan_f(y));
}

fn min_nan(x: f32, y: f32) -> f32 {
    return select(min(x, y), x + y, is_nan_f(x) || is_nan_f(y));
}

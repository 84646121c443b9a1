// Element-wise binary operator with numpy broadcasting.
//
// The host substitutes {{T}} (the element type) and {{EXPR}} (the operator
// on `x` and `y`). Parameters, as u32 words:
//   p[0]                      element count of the output
//   p[1]                      rank r (at least 1, dimensions coalesced)
//   p[2 .. 2+r]               output shape
//   p[2+r .. 2+2r]            strides of a in elements (0 where broadcast)
//   p[2+2r .. 2+3r]           strides of b in elements (0 where broadcast)

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<{{T}}>;
@group(0) @binding(2) var<storage, read> b: array<{{T}}>;
@group(0) @binding(3) var<storage, read_write> out: array<{{T}}>;

// SPIR-V leaves pow() undefined for x < 0 and for x == 0 with y <= 0, so the
// float version handles those cases itself, as C's pow does. The base's
// sign and zero are read from its bits: drivers flush a subnormal base to
// zero, in comparisons too.
fn pow_f32(x: f32, y: f32) -> f32 {
    if (y == 0.0) {
        return 1.0;
    }
    // Read through the parameter buffer so that no constant folding sees a
    // non-finite literal.
    let inf = bitcast<f32>(p[0] * 0u + 0x7f800000u);
    let nan = bitcast<f32>(p[0] * 0u + 0x7fc00000u);
    // As C's pow: 1 to any power is 1, and otherwise NaN in gives NaN
    // (tested by the bits: comparisons may assume there is none).
    if (x == 1.0) {
        return 1.0;
    }
    if (is_nan_f(x) || is_nan_f(y)) {
        return nan;
    }
    let bx = bitcast<u32>(x);
    let mag = bx & 0x7fffffffu;
    if (mag == 0u) {
        if (y > 0.0) {
            return 0.0;
        }
        return inf;
    }
    if (bx >= 0x80000000u) {
        // (-inf)^y: inf or 0 by the sign of y, negative for an odd
        // integer y, as C's pow (not NaN for a fraction, as a finite
        // negative base gives).
        let odd = abs(y) < 16777216.0 && y == floor(y) && (u32(abs(y)) & 1u) == 1u;
        if (mag == 0x7f800000u) {
            let r = select(0.0, inf, y > 0.0);
            return select(r, -r, odd);
        }
        if (y != floor(y)) {
            return nan;
        }
        // Every float at or above 2^24 is an even integer.
        let r = pow_mag(mag, y, inf);
        return select(r, -r, odd);
    }
    return pow_mag(mag, y, inf);
}

// |x|^y for |x| given by its bits (finite, not zero). A subnormal
// |x| = b 2^-149 (which drivers flush to 0) is b^y 2^(-149 y): the power of
// two split into an integer n, applied exactly by ldexp in steps that stay
// within its range, and 2^f for the rest, with the rounding error of
// -149 y (exact by fma) folded in. Beyond |y| >= 2 the result is 0 or inf
// in float32 anyway, which b^y alone could not give.
fn pow_mag(mag: u32, y: f32, inf: f32) -> f32 {
    if (mag >= 0x00800000u) {
        return pow(bitcast<f32>(mag), y);
    }
    if (y >= 2.0) {
        return 0.0;
    }
    if (y <= -2.0) {
        return inf;
    }
    let t = -149.0 * y;
    let err = fma(-149.0, y, -t);
    let n = floor(t);
    let r = pow(f32(mag), y) * exp2(t - n) * (1.0 + err * 0.6931472);
    let k = i32(n);
    let h = k / 4;
    return ldexp(ldexp(ldexp(ldexp(r, h), h), h), k - 3 * h);
}

// Integer powers by repeated squaring (wrapping on overflow); negative
// exponents truncate towards zero as 1 / x^-y does.
fn pow_i32(x: i32, y: i32) -> i32 {
    if (y < 0) {
        if (x == 1) {
            return 1;
        }
        if (x == -1) {
            if ((y & 1) == 0) {
                return 1;
            }
            return -1;
        }
        return 0;
    }
    var base = x;
    var e = y;
    var r = 1;
    loop {
        if (e == 0) {
            break;
        }
        if ((e & 1) == 1) {
            r = r * base;
        }
        base = base * base;
        e = e >> 1u;
    }
    return r;
}

fn pow_u32(x: u32, y: u32) -> u32 {
    var base = x;
    var e = y;
    var r = 1u;
    loop {
        if (e == 0u) {
            break;
        }
        if ((e & 1u) == 1u) {
            r = r * base;
        }
        base = base * base;
        e = e >> 1u;
    }
    return r;
}

fn op(x: {{T}}, y: {{T}}) -> {{T}} {
    return {{EXPR}};
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    // Large tensors spread their workgroups over y (see the host's grid).
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {
        return;
    }
    let rank = p[1];
    var rem = i;
    var ia = 0u;
    var ib = 0u;
    for (var d = rank; d > 0u; d--) {
        let k = d - 1u;
        let dim = p[2u + k];
        let c = rem % dim;
        rem = rem / dim;
        ia += c * p[2u + rank + k];
        ib += c * p[2u + 2u * rank + k];
    }
    out[i] = op(a[ia], b[ib]);
}

// 64-bit integer arithmetic on (low, high) word pairs, the working
// representation of int64 and uint64 (WGSL has no 64-bit integers).
// Everything wraps modulo 2^64, as the CPU backend's wrapping arithmetic;
// int64 is two's complement, so add, sub and mul are the same functions
// for both types and only comparisons, division and pow tell them apart.
// Appended to the kernels that compute on pairs.

fn negative(v: vec2<u32>) -> bool {
    return (v.y & 0x80000000u) != 0u;
}

fn is_zero64(v: vec2<u32>) -> bool {
    return (v.x | v.y) == 0u;
}

fn neg64(v: vec2<u32>) -> vec2<u32> {
    let lo = ~v.x + 1u;
    return vec2<u32>(lo, ~v.y + select(0u, 1u, lo == 0u));
}

// |v| as an unsigned pair (INT64_MIN's magnitude 2^63 fits).
fn abs64(v: vec2<u32>) -> vec2<u32> {
    return select(v, neg64(v), negative(v));
}

fn lt_s64(a: vec2<u32>, b: vec2<u32>) -> bool {
    let ah = bitcast<i32>(a.y);
    let bh = bitcast<i32>(b.y);
    return ah < bh || (ah == bh && a.x < b.x);
}

fn lt_u64(a: vec2<u32>, b: vec2<u32>) -> bool {
    return a.y < b.y || (a.y == b.y && a.x < b.x);
}

fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}

fn sub64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    return vec2<u32>(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x));
}

// The full 64-bit product of two words, from 16-bit partial products
// (none of whose sums can overflow a word).
fn mul_wide(a: u32, b: u32) -> vec2<u32> {
    let a0 = a & 0xffffu;
    let a1 = a >> 16u;
    let b0 = b & 0xffffu;
    let b1 = b >> 16u;
    let p00 = a0 * b0;
    let p01 = a0 * b1;
    let p10 = a1 * b0;
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    let lo = (p00 & 0xffffu) | (mid << 16u);
    let hi = a1 * b1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    return vec2<u32>(lo, hi);
}

// The low 64 bits of a * b: the high-by-high product only reaches bit 64
// and the cross products only need their low words.
fn mul64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let p = mul_wide(a.x, b.x);
    return vec2<u32>(p.x, p.y + a.x * b.y + a.y * b.x);
}

fn shl1(v: vec2<u32>) -> vec2<u32> {
    return vec2<u32>(v.x << 1u, (v.y << 1u) | (v.x >> 31u));
}

fn shr1(v: vec2<u32>) -> vec2<u32> {
    return vec2<u32>((v.x >> 1u) | (v.y << 31u), v.y >> 1u);
}

// a / b for unsigned pairs, truncated; b must not be 0. Restoring long
// division one bit at a time. Before shift i (from 0) the remainder is
// below 2^i, so no bit ever shifts out of it.
fn udiv64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    if ((a.y | b.y) == 0u) {
        return vec2<u32>(a.x / b.x, 0u);
    }
    if (lt_u64(a, b)) {
        return vec2<u32>(0u, 0u);
    }
    var n = a;
    var q = vec2<u32>(0u, 0u);
    var r = vec2<u32>(0u, 0u);
    for (var i = 0u; i < 64u; i++) {
        r = shl1(r);
        r.x = r.x | (n.y >> 31u);
        n = shl1(n);
        q = shl1(q);
        if (!lt_u64(r, b)) {
            r = sub64(r, b);
            q.x = q.x | 1u;
        }
    }
    return q;
}

// Integer division truncates toward zero; division by zero gives 0, and
// INT64_MIN / -1 wraps to INT64_MIN (the CPU backend's results).
fn div_u64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    if (is_zero64(b)) {
        return vec2<u32>(0u, 0u);
    }
    return udiv64(a, b);
}

fn div_s64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    if (is_zero64(b)) {
        return vec2<u32>(0u, 0u);
    }
    let q = udiv64(abs64(a), abs64(b));
    return select(q, neg64(q), negative(a) != negative(b));
}

fn max_s64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    return select(a, b, lt_s64(a, b));
}

fn min_s64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    return select(a, b, lt_s64(b, a));
}

fn max_u64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    return select(a, b, lt_u64(a, b));
}

fn min_u64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    return select(a, b, lt_u64(b, a));
}

// x^y by square-and-multiply over every bit of y, wrapping.
fn pow_u64(x: vec2<u32>, y: vec2<u32>) -> vec2<u32> {
    var base = x;
    var e = y;
    var r = vec2<u32>(1u, 0u);
    loop {
        if (is_zero64(e)) {
            break;
        }
        if ((e.x & 1u) == 1u) {
            r = mul64(r, base);
        }
        base = mul64(base, base);
        e = shr1(e);
    }
    return r;
}

// A negative exponent gives the truncated 1 / x^-y: 1 for x = 1, ±1 for
// x = -1 (by the exponent's parity), 0 otherwise.
fn pow_s64(x: vec2<u32>, y: vec2<u32>) -> vec2<u32> {
    if (negative(y)) {
        if (x.x == 1u && x.y == 0u) {
            return x;
        }
        if ((x.x & x.y) == 0xffffffffu) {
            return select(vec2<u32>(1u, 0u), x, (y.x & 1u) == 1u);
        }
        return vec2<u32>(0u, 0u);
    }
    return pow_u64(x, y);
}

// triangular: keeps the elements of each matrix (last two dimensions)
// whose column - row is >= (upper) or <= (lower) the diagonal, zeroes the
// rest. Signed differences are (negative, magnitude) pairs of u32 so no
// size or diagonal can overflow.
// Parameters, as u32 words:
//   p[0]   element count      p[1]   rows         p[2]   columns
//   p[3]   words per element  p[4]   1 for upper, 0 for lower
//   p[5]   1 when the (clamped) diagonal is negative
//   p[6]   its magnitude

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

// a >= b for signed values given as (negative, magnitude).
fn ge(an: bool, am: u32, bn: bool, bm: u32) -> bool {
    if (an != bn) {
        return bn;
    }
    if (an) {
        return am <= bm;
    }
    return am >= bm;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {
        return;
    }
    let cols = p[2];
    let col = i % cols;
    let row = (i / cols) % p[1];
    let neg = row > col;
    let mag = select(col - row, row - col, neg);
    let dneg = p[5] != 0u;
    var keep: bool;
    if (p[4] != 0u) {
        keep = ge(neg, mag, dneg, p[6]);
    } else {
        keep = ge(dneg, p[6], neg, mag);
    }
    let w = p[3];
    for (var k = 0u; k < w; k++) {
        dst[i * w + k] = select(0u, src[i * w + k], keep);
    }
}

// out = A x B for float32 A ([M, K], row-major; or float16 values, held
// widened) and B given as quantized codes: B[k][n] = (code(k, n) - zero)
// * scale + offset, the three taken per output column n and block of
// `block` elements along K from the table `blk` ([N, K / block] triples). The codes are the constant's own
// packed bytes (4-bit codes two a byte, the first in the low half; 8-bit
// ones four a word, the first in the low byte); code (k, n) is element
// n * K + k when they are laid out [N, K] (p[5] = 1), k * N + n when
// [K, N].
//
// Each workgroup of 64 invocations computes TM rows by 64 columns of the
// output, one column per invocation: A's rows are staged TK elements of
// K at a time in workgroup memory, and each invocation walks K once,
// dequantizing each of its column's codes once, in a register, for all
// TM rows (the table's entry is read once per block). Sums run over k in
// order, one fma each. The bindings, parameters and substitutions are
// qmatmul_common.wgsl's.

const TK: u32 = 32u;

var<workgroup> ta: array<f32, 256>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let d = dims();
    let col = wg.x * 64u + li;
    let row0 = wg.y * TM;
    let live = col < d.n;

    // The TM rows' sums, by name (see matmul.wgsl: a private array indexed
    // by a loop variable may be kept in memory, not registers).
    const_assert TM == 8u;
    var s0 = 0.0;
    var s1 = 0.0;
    var s2 = 0.0;
    var s3 = 0.0;
    var s4 = 0.0;
    var s5 = 0.0;
    var s6 = 0.0;
    var s7 = 0.0;
    var scale = 0.0;
    var zero = 0.0;
    var minimum = 0.0;
    // The first k of the next block (its entry is read on reaching it).
    var next = 0u;
    for (var k0 = 0u; k0 < d.k; k0 += TK) {
        for (var l = li; l < TM * TK; l += 64u) {
            let r = row0 + l / TK;
            let c = k0 + l % TK;
            var v = 0.0;
            if (r < d.m && c < d.k) {
                v = a[r * d.k + c];
            }
            ta[l] = v;
        }
        workgroupBarrier();
        if (live) {
            let end = min(TK, d.k - k0);
            for (var t = 0u; t < end; t++) {
                let kk = k0 + t;
                if (kk == next) {
                    let t = entry(kk, col);
                    scale = t.x;
                    zero = t.y;
                    minimum = t.z;
                    next = kk + d.blen;
                }
                let e = element(kk, col);
                let w = {{WEIGHT}};
                s0 = fma(ta[t], w, s0);
                s1 = fma(ta[TK + t], w, s1);
                s2 = fma(ta[2u * TK + t], w, s2);
                s3 = fma(ta[3u * TK + t], w, s3);
                s4 = fma(ta[4u * TK + t], w, s4);
                s5 = fma(ta[5u * TK + t], w, s5);
                s6 = fma(ta[6u * TK + t], w, s6);
                s7 = fma(ta[7u * TK + t], w, s7);
            }
        }
        workgroupBarrier();
    }

    var acc = array<f32, 8>(s0, s1, s2, s3, s4, s5, s6, s7);
    if (live) {
        for (var i = 0u; i < TM; i++) {
            let r = row0 + i;
            if (r < d.m) {
                out[r * d.n + col] = {{STORE}};
            }
        }
    }
}

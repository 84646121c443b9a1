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
// order, one fma each.
//
// The host substitutes CODE (the integer code of element e of `q`),
// WEIGHT (the weight from code(e) and its block's scale, zero and
// minimum, as the graph's dequantizeLinear and add compute and round
// it), STORE (the value written from `acc[i]` at output row r, column
// col) and EXTRA (further declarations: gemm's C, float16 rounding).
//
// Parameters, as u32 words:
//   p[0], p[1], p[2]   M, N, K
//   p[3], p[4]         the block length along K and blocks per column
//   p[5]               1 when the codes are laid out [N, K]
//   p[6], p[7]         gemm's alpha and beta (f32 bits)
//   p[8], p[9]         C's strides over output rows and columns

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> q: array<u32>;
@group(0) @binding(3) var<storage, read> blk: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
{{EXTRA}}
const TM: u32 = 8u;
const TK: u32 = 32u;

fn code(e: u32) -> f32 {
    return f32({{CODE}});
}

var<workgroup> ta: array<f32, 256>;

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let m = p[0];
    let n = p[1];
    let k = p[2];
    let blen = p[3];
    let nkb = p[4];
    let rows = p[5] != 0u;
    let col = wg.x * 64u + li;
    let row0 = wg.y * TM;
    let live = col < n;

    var acc: array<f32, 8>;
    var scale = 0.0;
    var zero = 0.0;
    var minimum = 0.0;
    // The first k of the next block (its entry is read on reaching it).
    var next = 0u;
    for (var k0 = 0u; k0 < k; k0 += TK) {
        for (var l = li; l < TM * TK; l += 64u) {
            let r = row0 + l / TK;
            let c = k0 + l % TK;
            var v = 0.0;
            if (r < m && c < k) {
                v = a[r * k + c];
            }
            ta[l] = v;
        }
        workgroupBarrier();
        if (live) {
            let end = min(TK, k - k0);
            for (var t = 0u; t < end; t++) {
                let kk = k0 + t;
                if (kk == next) {
                    let b = (col * nkb + kk / blen) * 3u;
                    scale = blk[b];
                    zero = blk[b + 1u];
                    minimum = blk[b + 2u];
                    next = kk + blen;
                }
                var e = kk * n + col;
                if (rows) {
                    e = col * k + kk;
                }
                let w = {{WEIGHT}};
                for (var i = 0u; i < TM; i++) {
                    acc[i] = fma(ta[i * TK + t], w, acc[i]);
                }
            }
        }
        workgroupBarrier();
    }

    if (live) {
        for (var i = 0u; i < TM; i++) {
            let r = row0 + i;
            if (r < m) {
                out[r * n + col] = {{STORE}};
            }
        }
    }
}

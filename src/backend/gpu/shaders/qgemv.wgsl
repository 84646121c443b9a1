// out = A x B as qmatmul.wgsl computes it (the same bindings, parameters
// and substitutions: CODE, WEIGHT, STORE, EXTRA). That shader gives each
// invocation one output column and walks all of K in it, so a product of
// few columns (576 outputs at K = 1536) keeps a handful of workgroups
// busy, each invocation a long chain of dependent fmas. Here LANES
// invocations share a column: lane j takes chunks of CH elements of K,
// j, j + LANES, ... (adjacent lanes read adjacent codes), sums them in
// order for each of its TM rows, one fma each, and the lanes' sums are
// then added pairwise in workgroup memory (a fixed tree: the result does
// not depend on timing).
//
// Each workgroup computes COLS columns of TM rows (from row wg.y * TM).

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> q: array<u32>;
@group(0) @binding(3) var<storage, read> blk: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
{{EXTRA}}
const TM: u32 = 8u;
const COLS: u32 = 8u;
const LANES: u32 = 32u;
const CH: u32 = 8u;
const WG: u32 = 256u; // COLS * LANES

fn code(e: u32) -> f32 {
    return f32({{CODE}});
}

// Each invocation's TM partial sums, row-major by row.
var<workgroup> part: array<f32, 2048>; // TM * WG

@compute @workgroup_size(256)
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
    let lane = li % LANES;
    let col = wg.x * COLS + li / LANES;
    let live = col < n;
    let row0 = wg.y * TM;
    let rows_here = min(TM, m - row0);

    var acc: array<f32, 8>;
    var scale = 0.0;
    var zero = 0.0;
    var minimum = 0.0;
    // The first k past the block whose entry is held (a lane's k only
    // grows, so the entry is read again on passing it).
    var next = 0u;
    if (live) {
        for (var k0 = lane * CH; k0 < k; k0 += LANES * CH) {
            let end = min(k0 + CH, k);
            for (var kk = k0; kk < end; kk++) {
                if (kk >= next) {
                    let kb = kk / blen;
                    let b = (col * nkb + kb) * 3u;
                    scale = blk[b];
                    zero = blk[b + 1u];
                    minimum = blk[b + 2u];
                    next = (kb + 1u) * blen;
                }
                var e = kk * n + col;
                if (rows) {
                    e = col * k + kk;
                }
                let w = {{WEIGHT}};
                for (var i = 0u; i < TM; i++) {
                    if (i < rows_here) {
                        acc[i] = fma(a[(row0 + i) * k + kk], w, acc[i]);
                    }
                }
            }
        }
    }
    for (var i = 0u; i < TM; i++) {
        part[i * WG + li] = acc[i];
    }
    workgroupBarrier();
    for (var s = LANES / 2u; s > 0u; s = s / 2u) {
        if (lane < s) {
            for (var i = 0u; i < TM; i++) {
                part[i * WG + li] += part[i * WG + li + s];
            }
        }
        workgroupBarrier();
    }
    if (live && lane == 0u) {
        for (var i = 0u; i < TM; i++) {
            let r = row0 + i;
            if (i < rows_here) {
                acc[i] = part[i * WG + li];
                out[r * n + col] = {{STORE}};
            }
        }
    }
}

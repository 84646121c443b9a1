// out = A x B as qmatmul.wgsl computes it (the bindings, parameters and
// substitutions are qmatmul_common.wgsl's). That shader gives each
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

const COLS: u32 = 8u;
const LANES: u32 = 32u;
const CH: u32 = 8u;
const WG: u32 = 256u; // COLS * LANES

// Each invocation's TM partial sums, row-major by row.
var<workgroup> part: array<f32, 2048>; // TM * WG

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let d = dims();
    let lane = li % LANES;
    let col = wg.x * COLS + li / LANES;
    let live = col < d.n;
    let row0 = wg.y * TM;
    let rows_here = min(TM, d.m - row0);

    var acc: array<f32, 8>;
    var scale = 0.0;
    var zero = 0.0;
    var minimum = 0.0;
    // The first k past the block whose entry is held (a lane's k only
    // grows, so the entry is read again on passing it).
    var next = 0u;
    if (live) {
        for (var k0 = lane * CH; k0 < d.k; k0 += LANES * CH) {
            let end = min(k0 + CH, d.k);
            for (var kk = k0; kk < end; kk++) {
                if (kk >= next) {
                    let t = entry(kk, col);
                    scale = t.x;
                    zero = t.y;
                    minimum = t.z;
                    next = (kk / d.blen + 1u) * d.blen;
                }
                let e = element(kk, col);
                let w = {{WEIGHT}};
                for (var i = 0u; i < TM; i++) {
                    if (i < rows_here) {
                        acc[i] = fma(a[(row0 + i) * d.k + kk], w, acc[i]);
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
                out[r * d.n + col] = {{STORE}};
            }
        }
    }
}

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

    // The TM rows' sums, by name (see qmatmul.wgsl).
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
                let ai = row0 * d.k + kk;
                s0 = fma(a[ai], w, s0);
                if (rows_here > 1u) {
                    s1 = fma(a[ai + d.k], w, s1);
                }
                if (rows_here > 2u) {
                    s2 = fma(a[ai + 2u * d.k], w, s2);
                }
                if (rows_here > 3u) {
                    s3 = fma(a[ai + 3u * d.k], w, s3);
                }
                if (rows_here > 4u) {
                    s4 = fma(a[ai + 4u * d.k], w, s4);
                }
                if (rows_here > 5u) {
                    s5 = fma(a[ai + 5u * d.k], w, s5);
                }
                if (rows_here > 6u) {
                    s6 = fma(a[ai + 6u * d.k], w, s6);
                }
                if (rows_here > 7u) {
                    s7 = fma(a[ai + 7u * d.k], w, s7);
                }
            }
        }
    }
    var acc = array<f32, 8>(s0, s1, s2, s3, s4, s5, s6, s7);
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

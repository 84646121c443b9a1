// argMin/argMax along the middle dimension of an input seen as
// (outer, n, inner): one invocation per (outer, inner) pair walks the n
// elements. The first best element wins ties; a NaN never replaces the
// current best, and a NaN first element stays the best (the CPU backend's
// rule). The element and output types and better() and store() are
// substituted per element type, direction and output type.
// Parameters, as u32 words: p[0] outputs (outer * inner), p[1] n,
// p[2] inner.

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<$ELEM>;
@group(0) @binding(2) var<storage, read_write> out: array<$OUT>;

fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

$BETTER

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {
        return;
    }
    let n = p[1];
    let inner = p[2];
    var idx = (i / inner) * n * inner + i % inner;
    var best = x[idx];
    var k_best = 0u;
    for (var k = 1u; k < n; k++) {
        idx += inner;
        let v = x[idx];
        if (better(v, best)) {
            best = v;
            k_best = k;
        }
    }
    out[i] = store(k_best);
}

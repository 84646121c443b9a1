// cumulativeSum along the middle dimension of an input seen as
// (outer, n, inner): one invocation per (outer, inner) pair runs the sum
// forwards or backwards, storing each element's sum before (exclusive) or
// after (inclusive) adding it. The element type and the functions zero(),
// add() and value() are substituted per element type.
// Parameters, as u32 words: p[0] lines (outer * inner), p[1] n,
// p[2] inner, p[3] reversed (0/1), p[4] exclusive (0/1), p[5] zero.

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<$ELEM>;
@group(0) @binding(2) var<storage, read_write> out: array<$ELEM>;

$ACCUMULATE

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {
        return;
    }
    let n = p[1];
    let inner = p[2];
    let reversed = p[3] != 0u;
    let exclusive = p[4] != 0u;
    let first = (i / inner) * n * inner + i % inner;
    var acc = zero();
    for (var s = 0u; s < n; s++) {
        let k = select(s, n - 1u - s, reversed);
        let idx = first + k * inner;
        let v = x[idx];
        if (exclusive) {
            out[idx] = value(acc);
            acc = add(acc, v);
        } else {
            acc = add(acc, v);
            out[idx] = value(acc);
        }
    }
}

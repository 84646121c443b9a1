// softmax along one axis of a float32 tensor viewed as [outer, axis, inner].
//
// One invocation per (outer, inner) pair walks the axis three times: the
// maximum, the sum of exponentials above it, and the normalised outputs.
// Parameters, as u32 words:
//   p[0]   outer * inner (the number of invocations)
//   p[1]   axis size
//   p[2]   inner size

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {
        return;
    }
    let len = p[1];
    let inner = p[2];
    let base = (i / inner) * len * inner + i % inner;
    // A NaN anywhere makes the maximum NaN, and so every output, as on the
    // CPU backend (float.wgsl: max_nan, exp_r).
    var m = x[base];
    for (var k = 1u; k < len; k++) {
        m = max_nan(m, x[base + k * inner]);
    }
    var s = 0.0;
    for (var k = 0u; k < len; k++) {
        s += exp_r(x[base + k * inner] - m);
    }
    for (var k = 0u; k < len; k++) {
        let j = base + k * inner;
        out[j] = exp_r(x[j] - m) / s;
    }
}

// A state's starting value: the given initial state, or zeros.
//   p[0]  element count
//   p[1]  1 when the initial state is bound

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {
        return;
    }
    var v = 0.0;
    if (p[1] != 0u) {
        v = src[i];
    }
    dst[i] = v;
}

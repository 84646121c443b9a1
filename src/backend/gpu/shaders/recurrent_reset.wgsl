// gru with the reset gate applied before the recurrent matmul: replaces
// the new gate's rows of gh with recurrentBias + R_n . (r * h), where
// r = f(gx_r + gh_r) is recomputed from the step's projections.

@group(0) @binding(1) var<storage, read> r: array<f32>;
@group(0) @binding(2) var<storage, read> rbias: array<f32>;
@group(0) @binding(3) var<storage, read> h: array<f32>;
@group(0) @binding(4) var<storage, read> gx: array<f32>;
@group(0) @binding(5) var<storage, read_write> gh: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p[0]) {
        return;
    }
    let dirs = p[2];
    let batch = p[3];
    let hs = p[5];
    let rows = p[6] * hs;
    let j = i % hs;
    let b = (i / hs) % batch;
    let d = i / (hs * batch);
    let t = time_of(d);
    let rb = p[15] * hs;
    let row = p[16] * hs + j;
    var acc = 0.0;
    if (p[10] != 0u) {
        acc = rbias[d * rows + row];
    }
    let gxr = ((t * dirs + d) * batch + b) * rows;
    let ghr = (d * batch + b) * rows;
    let rr = (d * rows + row) * hs;
    let hr = (d * batch + b) * hs;
    for (var k = 0u; k < hs; k++) {
        let reset = act(p[18], gx[gxr + rb + k] + gh[ghr + rb + k]);
        acc = fma(r[rr + k], reset * h[hr + k], acc);
    }
    gh[ghr + row] = acc;
}

// gru with the reset gate applied before the recurrent matmul: replaces
// the new gate's rows of gh with R_n . (r * h), where r is recomputed from
// the step's projections and the biases.

@group(0) @binding(1) var<storage, read> r: array<f32>;
@group(0) @binding(2) var<storage, read> h: array<f32>;
@group(0) @binding(3) var<storage, read> gx: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<f32>;
@group(0) @binding(5) var<storage, read> rbias: array<f32>;
@group(0) @binding(6) var<storage, read_write> gh: array<f32>;

// Bias elements, zero when the bias is absent (its binding then holds a
// stand-in that must not be indexed).
fn bias_at(i: u32) -> f32 {
    if (p[9] != 0u) {
        return bias[i];
    }
    return 0.0;
}

fn rbias_at(i: u32) -> f32 {
    if (p[10] != 0u) {
        return rbias[i];
    }
    return 0.0;
}

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
    let gxr = ((t * dirs + d) * batch + b) * rows;
    let ghr = (d * batch + b) * rows;
    let rr = (d * rows + row) * hs;
    let hr = (d * batch + b) * hs;
    for (var k = 0u; k < hs; k++) {
        let br = d * rows + rb + k;
        let reset = act(p[18], gate_sum(gx[gxr + rb + k], gh[ghr + rb + k], bias_at(br), rbias_at(br)));
        acc = fma(r[rr + k], reset * h[hr + k], acc);
    }
    gh[ghr + row] = acc;
}

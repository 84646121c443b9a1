// The recurrent projection of one step: gh[d, b, row] = R[d, row] . h[d, b].

@group(0) @binding(1) var<storage, read> r: array<f32>;
@group(0) @binding(2) var<storage, read> h: array<f32>;
@group(0) @binding(3) var<storage, read_write> gh: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p[0]) {
        return;
    }
    let batch = p[3];
    let hs = p[5];
    let rows = p[6] * hs;
    let row = i % rows;
    let b = (i / rows) % batch;
    let d = i / (rows * batch);
    var acc = 0.0;
    let rr = (d * rows + row) * hs;
    let hr = (d * batch + b) * hs;
    for (var k = 0u; k < hs; k++) {
        acc = fma(r[rr + k], h[hr + k], acc);
    }
    gh[i] = acc;
}

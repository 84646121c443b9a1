// gru with the reset gate applied before the recurrent matmul: replaces
// the new gate's rows of gh with R_n . (r * h), where r is recomputed from
// the step's projections and the biases.

@group(0) @binding(2) var<storage, read_write> gh: array<f32>;
@group(0) @binding(5) var<storage, read> r: array<f32>;
@group(0) @binding(6) var<storage, read> h: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p[0]) {
        return;
    }
    let u = unit_of(i);
    let hs = u.hs;
    let rb = p[15] * hs;
    let row = p[16] * hs + u.j;
    var acc = 0.0;
    let rr = (u.bias + row) * hs;
    // i is (direction * batch + batch row) * hs + j.
    let hr = i - u.j;
    for (var k = 0u; k < hs; k++) {
        let br = u.bias + rb + k;
        let reset = act(p[18], gate_sum(gx[u.gx + rb + k], gh[u.gh + rb + k], bias_at(br), rbias_at(br)));
        acc = fma(r[rr + k], reset * h[hr + k], acc);
    }
    gh[u.gh + row] = acc;
}

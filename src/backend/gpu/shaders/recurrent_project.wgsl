// The input projection of every time step at once:
// gx[t, d, b, row] = W[d, row] . x[t, b]. The biases are added by the gate
// kernels, after the two projections, in the order of the reference.

@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> gx: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p[0]) {
        return;
    }
    let dirs = p[2];
    let batch = p[3];
    let isz = p[4];
    let rows = p[6] * p[5];
    let row = i % rows;
    let b = (i / rows) % batch;
    let d = (i / (rows * batch)) % dirs;
    let t = i / (rows * batch * dirs);
    var acc = 0.0;
    let wr = (d * rows + row) * isz;
    let xr = (t * batch + b) * isz;
    for (var k = 0u; k < isz; k++) {
        acc = fma(w[wr + k], x[xr + k], acc);
    }
    gx[i] = acc;
}

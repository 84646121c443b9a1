// One gru step of every direction, batch row and hidden unit: gates from
// the step's projections, then h' = z * h + (1 - z) * n, written to the
// state (the last-hidden output) and to the sequence.

@group(0) @binding(1) var<storage, read> gx: array<f32>;
@group(0) @binding(2) var<storage, read> gh: array<f32>;
@group(0) @binding(3) var<storage, read_write> h: array<f32>;
@group(0) @binding(4) var<storage, read_write> seq: array<f32>;

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
    let gxr = ((t * dirs + d) * batch + b) * rows + j;
    let ghr = (d * batch + b) * rows + j;
    let zb = p[14] * hs;
    let rb = p[15] * hs;
    let nb = p[16] * hs;
    let z = act(p[18], gx[gxr + zb] + gh[ghr + zb]);
    var n = 0.0;
    if (p[12] != 0u) {
        let reset = act(p[18], gx[gxr + rb] + gh[ghr + rb]);
        n = act(p[19], gx[gxr + nb] + reset * gh[ghr + nb]);
    } else {
        n = act(p[19], gx[gxr + nb] + gh[ghr + nb]);
    }
    let hn = z * h[i] + (1.0 - z) * n;
    h[i] = hn;
    if (p[13] != 0u) {
        seq[t * dirs * batch * hs + i] = hn;
    }
}

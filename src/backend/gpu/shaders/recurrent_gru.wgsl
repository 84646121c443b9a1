// One gru step of every direction, batch row and hidden unit: gates from
// the step's projections, then h' = z * h + (1 - z) * n, written to the
// state (the last-hidden output) and to the sequence.

@group(0) @binding(2) var<storage, read> gh: array<f32>;
@group(0) @binding(5) var<storage, read_write> h: array<f32>;
@group(0) @binding(6) var<storage, read_write> seq: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p[0]) {
        return;
    }
    let u = unit_of(i);
    let hs = u.hs;
    let gxr = u.gx + u.j;
    let ghr = u.gh + u.j;
    let br = u.bias + u.j;
    let zb = p[14] * hs;
    let rb = p[15] * hs;
    let nb = p[16] * hs;
    let z = act(p[18], gate_sum(gx[gxr + zb], gh[ghr + zb], bias_at(br + zb), rbias_at(br + zb)));
    // The new gate: x-side with its bias, then the recurrent side with
    // its bias (inside the reset for resetAfter; before the reset-gated
    // product, which the reset pass left in gh, otherwise).
    let xn = gx[gxr + nb] + bias_at(br + nb);
    let rbn = rbias_at(br + nb);
    var n = 0.0;
    if (p[12] != 0u) {
        let reset = act(p[18], gate_sum(gx[gxr + rb], gh[ghr + rb], bias_at(br + rb), rbias_at(br + rb)));
        n = act(p[19], xn + reset * (gh[ghr + nb] + rbn));
    } else {
        n = act(p[19], (xn + rbn) + gh[ghr + nb]);
    }
    let hn = z * h[i] + (1.0 - z) * n;
    h[i] = hn;
    if (p[13] != 0u) {
        seq[u.seq + i] = hn;
    }
}

// One lstm step of every direction, batch row and hidden unit: gates i,
// f, o (with peepholes on the incoming cell state) and g from the step's
// projections, then c' = f * c + i * g and h' = o * act(c'), written to
// the states (the last-hidden and last-cell outputs) and the sequence.

@group(0) @binding(2) var<storage, read> gh: array<f32>;
@group(0) @binding(5) var<storage, read> peep: array<f32>;
@group(0) @binding(6) var<storage, read_write> h: array<f32>;
@group(0) @binding(7) var<storage, read_write> c: array<f32>;
@group(0) @binding(8) var<storage, read_write> seq: array<f32>;

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
    let cs = c[i];
    // Peepholes are packed i, o, f whatever the layout.
    var pi = 0.0;
    var po = 0.0;
    var pf = 0.0;
    if (p[11] != 0u) {
        let pr = u.d * 3u * hs + u.j;
        pi = peep[pr] * cs;
        po = peep[pr + hs] * cs;
        pf = peep[pr + 2u * hs] * cs;
    }
    let ib = p[14] * hs;
    let ob = p[15] * hs;
    let fb = p[16] * hs;
    let gb = p[17] * hs;
    let ig = act(p[18], gate_sum(gx[gxr + ib], gh[ghr + ib], bias_at(br + ib), rbias_at(br + ib)) + pi);
    let og = act(p[18], gate_sum(gx[gxr + ob], gh[ghr + ob], bias_at(br + ob), rbias_at(br + ob)) + po);
    let fg = act(p[18], gate_sum(gx[gxr + fb], gh[ghr + fb], bias_at(br + fb), rbias_at(br + fb)) + pf);
    let gg = act(p[19], gate_sum(gx[gxr + gb], gh[ghr + gb], bias_at(br + gb), rbias_at(br + gb)));
    // One rounding fewer than two products and a sum.
    let cn = fma(fg, cs, ig * gg);
    let hn = og * act(p[20], cn);
    c[i] = cn;
    h[i] = hn;
    if (p[13] != 0u) {
        seq[u.seq + i] = hn;
    }
}

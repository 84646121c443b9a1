// Direct float32 convTranspose2d as a gather: one invocation per output
// element sums the input positions and filter taps that land on it, so no
// two invocations write the same element and no atomics are needed.
//
// Output row oy receives tap ky of input row iy when
// iy * strideH + ky * dilationH = oy + padTop; the same holds for columns.
// Layouts are handled through strides (canonical NCHW input/output, IOHW
// filter, where I counts every input channel and O the output channels of
// one group), so the filter strides are (i, o, h, w). The parameters and
// bindings: conv_common.wgsl.

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {
        return;
    }
    let ih = p[3];
    let iw = p[4];
    let oc = p[5];
    let kh = p[6];
    let kw = p[7];
    let oh = p[9];
    let ow = p[10];
    let sh = p[13];
    let sw = p[14];
    let ox = i % ow;
    let oy = (i / ow) % oh;
    let o = (i / (ow * oh)) % oc;
    let b = i / (ow * oh * oc);
    let cg = p[2] / p[8];
    let og = oc / p[8];
    let c0 = (o / og) * cg;
    let ol = o % og;
    // The host checked that these sums fit in a word.
    let ty0 = oy + p[11];
    let tx0 = ox + p[12];
    var acc = 0.0;
    for (var ci = 0u; ci < cg; ci++) {
        let xc = b * p[18] + (c0 + ci) * p[19];
        let fc = (c0 + ci) * p[22] + ol * p[23];
        for (var ky = 0u; ky < kh; ky++) {
            let dy = ky * p[15];
            if (dy > ty0) {
                break;
            }
            let ty = ty0 - dy;
            if (ty % sh != 0u) {
                continue;
            }
            let iy = ty / sh;
            if (iy >= ih) {
                continue;
            }
            let xr = xc + iy * p[20];
            let fr = fc + ky * p[24];
            for (var kx = 0u; kx < kw; kx++) {
                let dx = kx * p[16];
                if (dx > tx0) {
                    break;
                }
                let tx = tx0 - dx;
                if (tx % sw != 0u) {
                    continue;
                }
                let ix = tx / sw;
                if (ix >= iw) {
                    continue;
                }
                acc = fma(x[xr + ix * p[21]], f[fr + kx * p[25]], acc);
            }
        }
    }
    if (p[17] != 0u) {
        acc += bias[o];
    }
    out[b * p[26] + o * p[27] + oy * p[28] + ox * p[29]] = acc;
}

// float32 pooling (average, max, l2): one invocation per output element.
// Padding and positions past the input are never part of a window: the
// average divides by the number of input elements it covers, and a window
// wholly outside the input gives 0 (average, l2) or -infinity (max).
//
// The host substitutes {{KIND}}: 0 average, 1 max, 2 l2.
// Parameters, as u32 words:
//   p[0]                 output element count
//   p[1 .. 5]            batch, channels, in height, in width
//   p[5], p[6]           out height, out width
//   p[7], p[8]           window height, width
//   p[9], p[10]          padding top, left
//   p[11], p[12]         strides (h, w)
//   p[13], p[14]         dilations (h, w)
//   p[15 .. 19]          input strides (n, c, h, w)
//   p[19 .. 23]          output strides (n, c, h, w)

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;

const KIND: u32 = {{KIND}}u;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {
        return;
    }
    let ch = p[2];
    let ih = i32(p[3]);
    let iw = i32(p[4]);
    let oh = p[5];
    let ow = p[6];
    let ox = i % ow;
    let oy = (i / ow) % oh;
    let c = (i / (ow * oh)) % ch;
    let b = i / (ow * oh * ch);
    let base = b * p[15] + c * p[16];
    let y0 = i32(oy * p[11]) - i32(p[9]);
    let x0 = i32(ox * p[12]) - i32(p[10]);
    // -infinity, read through the parameters so that no constant folding
    // sees a non-finite literal.
    var acc = 0.0;
    if (KIND == 1u) {
        acc = -bitcast<f32>(p[0] * 0u + 0x7f800000u);
    }
    var count = 0u;
    var nan = false;
    for (var ky = 0u; ky < p[7]; ky++) {
        let iy = y0 + i32(ky * p[13]);
        if (iy < 0 || iy >= ih) {
            continue;
        }
        for (var kx = 0u; kx < p[8]; kx++) {
            let ix = x0 + i32(kx * p[14]);
            if (ix < 0 || ix >= iw) {
                continue;
            }
            let v = x[base + u32(iy) * p[17] + u32(ix) * p[18]];
            count++;
            if (KIND == 1u) {
                if ((bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u) {
                    nan = true;
                }
                acc = max(acc, v);
            } else if (KIND == 2u) {
                acc += v * v;
            } else {
                acc += v;
            }
        }
    }
    var r = acc;
    if (KIND == 0u) {
        if (count > 0u) {
            r = acc / f32(count);
        }
    } else if (KIND == 2u) {
        r = sqrt(acc);
    } else if (nan) {
        r = bitcast<f32>(p[0] * 0u + 0x7fc00000u);
    }
    out[b * p[19] + c * p[20] + oy * p[21] + ox * p[22]] = r;
}

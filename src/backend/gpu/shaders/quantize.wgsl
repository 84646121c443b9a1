// quantizeLinear and dequantizeLinear, one invocation per element. Input
// element i uses scale and zero point element k: its coordinates divided
// by the block sizes, row-major over the scale's shape (input / block).
// Quantized values are read and written as raw 32-bit words (int32 and
// the widened int8/int4 share uint32's bits); floats are f32 bits.
// Parameters, as u32 words:
//   p[0] elements, p[1] rank r, p[2] lowest and p[3] highest value of the
//   quantized type (as bits), p[4] signed (0/1),
//   p[5 .. 5+r] input shape, then r block sizes, then r scale strides.

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read> scale: array<f32>;
@group(0) @binding(3) var<storage, read> zero_point: array<u32>;
@group(0) @binding(4) var<storage, read_write> out: array<u32>;

fn scale_index(i: u32) -> u32 {
    let r = p[1];
    var rem = i;
    var k = 0u;
    for (var d = r; d > 0u; d--) {
        let a = d - 1u;
        let dim = p[5u + a];
        k += (rem % dim) / p[5u + r + a] * p[5u + 2u * r + a];
        rem = rem / dim;
    }
    return k;
}

fn flat_index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.y * nwg.x * 256u + gid.x;
}

// Whether the integer-valued, non-negative m exceeds d.
fn above(m: f32, d: u32) -> bool {
    return m >= 4294967296.0 || u32(m) > d;
}

// saturate(roundEven(x / scale) + zeroPoint), computed exactly: the
// rounded quotient q is compared with the distances from the zero point
// to the type's bounds (exact in u32), and a q within them is added to
// the zero point modulo 2^32. NaN has no quantized value and becomes 0.
@compute @workgroup_size(256)
fn quantize(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p[0]) {
        return;
    }
    let k = scale_index(i);
    let q = round(bitcast<f32>(x[i]) / scale[k]);
    if ((bitcast<u32>(q) & 0x7fffffffu) > 0x7f800000u) {
        out[i] = 0u;
        return;
    }
    let z = zero_point[k];
    let lo = p[2];
    let hi = p[3];
    if (q >= 0.0) {
        out[i] = select(z + u32(q), hi, above(q, hi - z));
    } else {
        out[i] = select(z - u32(-q), lo, above(-q, z - lo));
    }
}

// (x - zeroPoint) * scale: the difference is formed exactly as a sign and
// a magnitude in u32 (it may not fit the input type), then converted.
@compute @workgroup_size(256)
fn dequantize(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = flat_index(gid, nwg);
    if (i >= p[0]) {
        return;
    }
    let k = scale_index(i);
    let v = x[i];
    let z = zero_point[k];
    let below = select(v < z, bitcast<i32>(v) < bitcast<i32>(z), p[4] != 0u);
    let m = f32(select(v - z, z - v, below));
    out[i] = bitcast<u32>(select(m, -m, below) * scale[k]);
}

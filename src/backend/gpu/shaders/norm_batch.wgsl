// batchNormalization: every element is normalized with the mean, variance,
// scale and bias of its channel k = (i / inner) % channels.
// y = (x - mean) * (scale / sqrt(variance + epsilon)) + bias, the CPU
// backend's order of operations. scale_of() and bias_of() are substituted
// (constants when the operator has no scale or bias), and so are the
// optional bindings they read.
// Parameters, as u32 words: p[0] elements, p[1] inner, p[2] channels,
// p[3] epsilon (f32 bits).

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> mean: array<f32>;
@group(0) @binding(3) var<storage, read> variance: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
$SCALE_BIAS

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {
        return;
    }
    let k = (i / p[1]) % p[2];
    let a = scale_of(k) / sqrt(variance[k] + bitcast<f32>(p[3]));
    out[i] = (x[i] - mean[k]) * a + bias_of(k);
}

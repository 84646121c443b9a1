// Element-wise unary operator (also clamp).
//
// The host substitutes {{T}} (the element type) and {{EXPR}} (the operator
// on `v`). Parameters, as u32 words:
//   p[0]   element count
//   p[1]   lower bound bits (clamp, or alpha), as {{T}}
//   p[2]   upper bound bits (clamp, or beta), as {{T}}

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> out: array<{{T}}>;

fn lo() -> {{T}} {
    return bitcast<{{T}}>(p[1]);
}

fn hi() -> {{T}} {
    return bitcast<{{T}}>(p[2]);
}

// Helpers of the float activations (unused ones cost nothing).

// e^x - 1, without the cancellation of exp(x) - 1 near 0.
fn expm1_f(x: f32) -> f32 {
    if (abs(x) < 1e-3) {
        return x + x * x * (0.5 + x / 6.0);
    }
    return exp(x) - 1.0;
}

// ln(1 + t) for t >= 0, keeping the tail for tiny t.
fn log1p_f(t: f32) -> f32 {
    if (t < 1e-3) {
        return t - t * t * (0.5 - t / 3.0);
    }
    return log(1.0 + t);
}

// erf by Abramowitz and Stegun 7.1.26 (as the CPU backend's gelu).
fn erf_as(x: f32) -> f32 {
    let a = abs(x);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let y = 1.0 - poly * exp(-a * a);
    return select(y, -y, x < 0.0);
}

// tan(x) = tan(x - k pi): the argument is first reduced to [-pi/2, pi/2]
// with pi as the sum of two floats (the first exact in k * 3.140625), then
// sin/cos. NVIDIA's tan() of the unreduced argument was 2.4e-3 off at
// -23.73, beyond the conformance tolerance.
fn tan_reduced(x: f32) -> f32 {
    let k = round(x * 0.31830988618379067);
    let r = (x - k * 3.140625) - k * 0.0009676535897931160;
    return sin(r) / cos(r);
}

// clamp(y, l, h) that keeps NaN.
fn clamp_nan(y: f32, l: f32, h: f32) -> f32 {
    return select(select(y, l, y < l), h, y > h);
}

fn op(v: {{T}}) -> {{T}} {
    return {{EXPR}};
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {
        return;
    }
    out[i] = op(x[i]);
}

// Shared by the recurrent kernels (prepended to each). Parameters, as u32
// words, the same for every kernel of one operator:
//   p[0]          invocation count of this kernel
//   p[1 .. 7]     steps, directions, batch, input size, hidden size, gates
//   p[7]          time step s (per-step kernels)
//   p[8]          1 when the only direction is backward
//   p[9 .. 12]    1 when bias / recurrentBias / peepholeWeight are bound
//   p[12]         gru: 1 for resetAfter
//   p[13]         1 when the sequence output is bound
//   p[14 .. 18]   row block of each gate (gru z, r, n; lstm i, o, f, g)
//   p[18 .. 21]   activations (0 relu, 1 sigmoid, 2 tanh)
// Weights are [directions, gates * hidden, input size | hidden size],
// biases [directions, gates * hidden], states [directions, batch, hidden].

@group(0) @binding(0) var<storage, read> p: array<u32>;

fn act(code: u32, v: f32) -> f32 {
    if (code == 0u) {
        return max(v, 0.0);
    }
    if (code == 1u) {
        // Two forms so that exp never overflows.
        if (v >= 0.0) {
            return 1.0 / (1.0 + exp(-v));
        }
        let e = exp(v);
        return e / (1.0 + e);
    }
    // Some drivers compute tanh as a ratio of exponentials, which gives
    // NaN once they overflow; tanh(±10) already rounds to ±1 in f32.
    return tanh(clamp(v, -10.0, 10.0));
}

// The time slice direction d reads at step s: the second direction of
// "both", and "backward", run from the end of the sequence.
fn time_of(d: u32) -> u32 {
    if (p[8] != 0u || d == 1u) {
        return p[1] - 1u - p[7];
    }
    return p[7];
}

fn flat_index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.y * nwg.x * 256u + gid.x;
}

// A gate's pre-activation W.x + R.h + bias + recurrentBias, summed in
// that order, as the reference does (absent biases are zeros).
fn gate_sum(wx: f32, rh: f32, b: f32, rb: f32) -> f32 {
    return ((wx + rh) + b) + rb;
}

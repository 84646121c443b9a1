// Shared by the kernels with one invocation per direction, batch row and
// hidden unit of a step (gru, lstm, gru's reset pass), after
// recurrent_common.wgsl. Each binds the input projection and the biases
// as declared here, and declares the recurrent projection (binding 2) and
// its other operands (from binding 5 on) itself.

@group(0) @binding(1) var<storage, read> gx: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read> rbias: array<f32>;

// Bias elements, zero when the bias is absent (its binding then holds a
// stand-in that must not be indexed).
fn bias_at(i: u32) -> f32 {
    if (p[9] != 0u) {
        return bias[i];
    }
    return 0.0;
}

fn rbias_at(i: u32) -> f32 {
    if (p[10] != 0u) {
        return rbias[i];
    }
    return 0.0;
}

// Where invocation i works: hidden unit j of a batch row in direction d,
// and where that row's gate rows start in the input projection (gx, at
// the step's time slice), the recurrent projection (gh) and the biases,
// and the step's slice of the sequence output (seq).
struct Unit {
    hs: u32,
    j: u32,
    d: u32,
    gx: u32,
    gh: u32,
    bias: u32,
    seq: u32,
}

fn unit_of(i: u32) -> Unit {
    let dirs = p[2];
    let batch = p[3];
    let hs = p[5];
    let rows = p[6] * hs;
    let b = (i / hs) % batch;
    let d = i / (hs * batch);
    let t = time_of(d);
    let gx = ((t * dirs + d) * batch + b) * rows;
    return Unit(hs, i % hs, d, gx, (d * batch + b) * rows, d * rows, t * dirs * batch * hs);
}

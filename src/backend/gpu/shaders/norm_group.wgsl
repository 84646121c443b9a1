// instanceNormalization and layerNormalization: the input is split into
// groups (one per combination of the kept coordinates), each normalized
// with its own mean and population variance (two passes, so the variance
// does not cancel):
// y = (x - mean) * (scale / sqrt(variance + epsilon)) + bias.
// Element j of a group (row-major over the reduced dimensions, in the
// order of the operator's axes) uses scale and bias element j, or, with a
// non-zero channel count C, element (group % C).
// `small` runs one invocation per group; `large` one workgroup per group,
// its invocations striding over the group and summing in a tree.
// scale_of() and bias_of() are substituted (constants when absent), and
// so are the optional bindings they read.
// Parameters, as u32 words:
//   p[0] groups, p[1] group length, p[2] kept rank kr, p[3] reduced rank rr,
//   p[4] channels C (0: per element), p[5] epsilon (f32 bits),
//   p[6 ..] kept sizes, kept strides, reduced sizes, reduced strides.

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
$SCALE_BIAS

// The offset of the first element of group g.
fn group_base(g: u32) -> u32 {
    let kr = p[2];
    var rem = g;
    var off = 0u;
    for (var d = kr; d > 0u; d--) {
        let k = d - 1u;
        let dim = p[6u + k];
        off += (rem % dim) * p[6u + kr + k];
        rem = rem / dim;
    }
    return off;
}

// The offset of element j of a group from its first element.
fn element(j: u32) -> u32 {
    let o = 6u + 2u * p[2];
    let rr = p[3];
    var rem = j;
    var off = 0u;
    for (var d = rr; d > 0u; d--) {
        let k = d - 1u;
        let dim = p[o + k];
        off += (rem % dim) * p[o + rr + k];
        rem = rem / dim;
    }
    return off;
}

// Scale and bias index of element j of group g.
fn param_index(g: u32, j: u32) -> u32 {
    return select(j, g % max(p[4], 1u), p[4] != 0u);
}

fn store_out(g: u32, base: u32, j: u32, mean: f32, inv: f32) {
    let k = param_index(g, j);
    let idx = base + element(j);
    out[idx] = (x[idx] - mean) * (inv * scale_of(k)) + bias_of(k);
}

@compute @workgroup_size(256)
fn small(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = gid.y * nwg.x * 256u + gid.x;
    if (g >= p[0]) {
        return;
    }
    let len = p[1];
    let base = group_base(g);
    var sum = 0.0;
    for (var j = 0u; j < len; j++) {
        sum += x[base + element(j)];
    }
    let mean = sum / f32(len);
    var sq = 0.0;
    for (var j = 0u; j < len; j++) {
        let d = x[base + element(j)] - mean;
        sq += d * d;
    }
    let inv = 1.0 / sqrt(sq / f32(len) + bitcast<f32>(p[5]));
    for (var j = 0u; j < len; j++) {
        store_out(g, base, j, mean, inv);
    }
}

var<workgroup> sums: array<f32, 256>;

// The sum of every invocation's v, returned to all of them.
fn workgroup_sum(lid: u32, v: f32) -> f32 {
    sums[lid] = v;
    workgroupBarrier();
    for (var stride = 128u; stride > 0u; stride = stride / 2u) {
        if (lid < stride) {
            sums[lid] += sums[lid + stride];
        }
        workgroupBarrier();
    }
    let total = sums[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(256)
fn large(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let g = wid.y * nwg.x + wid.x;
    if (g >= p[0]) {
        return;
    }
    let len = p[1];
    let base = group_base(g);
    var sum = 0.0;
    for (var j = lid; j < len; j += 256u) {
        sum += x[base + element(j)];
    }
    let mean = workgroup_sum(lid, sum) / f32(len);
    var sq = 0.0;
    for (var j = lid; j < len; j += 256u) {
        let d = x[base + element(j)] - mean;
        sq += d * d;
    }
    let inv = 1.0 / sqrt(workgroup_sum(lid, sq) / f32(len) + bitcast<f32>(p[5]));
    for (var j = lid; j < len; j += 256u) {
        store_out(g, base, j, mean, inv);
    }
}

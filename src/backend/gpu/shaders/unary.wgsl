// Element-wise unary operator (also clamp).
//
// The host substitutes {{T}} (the element type) and {{EXPR}} (the operator
// on `v`). Parameters, as u32 words:
//   p[0]   element count
//   p[1]   lower bound bits (clamp only, as {{T}})
//   p[2]   upper bound bits (clamp only, as {{T}})

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;
@group(0) @binding(2) var<storage, read_write> out: array<{{T}}>;

fn lo() -> {{T}} {
    return bitcast<{{T}}>(p[1]);
}

fn hi() -> {{T}} {
    return bitcast<{{T}}>(p[2]);
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

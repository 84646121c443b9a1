// resample2d, linear mode, on f32 (float16 too: it is computed as f32).
//
// As in movement_remap.wgsl, each output coordinate of each dimension has
// a table entry, here three words: the low and high input offsets and the
// weight of the high one (f32 bits; 0 and low == high outside the two
// resampled dimensions). Interpolated first along the second axis, then
// along the first, as the CPU kernel does.
// Parameters, as u32 words:
//   p[0]             output element count
//   p[1]             rank r
//   p[2], p[3]       the resampled dimensions
//   p[4 .. 4+r]      output shape
//   p[4+r ..]        the tables, three words per entry

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

fn at(off: u32) -> f32 {
    return src[min(off, arrayLength(&src) - 1u)];
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {
        return;
    }
    let rank = p[1];
    let a = p[2];
    let b = p[3];
    var end = 4u + rank;
    for (var d = 0u; d < rank; d++) {
        end += 3u * p[4u + d];
    }
    var rem = i;
    var base = 0u;
    var y = vec3<u32>(0u, 0u, 0u);
    var x = vec3<u32>(0u, 0u, 0u);
    for (var d = rank; d > 0u; d--) {
        let k = d - 1u;
        let dim = p[4u + k];
        end -= 3u * dim;
        let e = end + 3u * (rem % dim);
        rem = rem / dim;
        let t = vec3<u32>(p[e], p[e + 1u], p[e + 2u]);
        if (k == a) {
            y = t;
        } else if (k == b) {
            x = t;
        } else {
            base += t.x;
        }
    }
    let ty = bitcast<f32>(y.z);
    let tx = bitcast<f32>(x.z);
    let v0 = at(base + y.x + x.x) * (1.0 - tx) + at(base + y.x + x.y) * tx;
    let v1 = at(base + y.y + x.x) * (1.0 - tx) + at(base + y.y + x.y) * tx;
    dst[i] = v0 * (1.0 - ty) + v1 * ty;
}

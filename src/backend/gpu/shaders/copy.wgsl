// Strided copy of 32-bit elements: transpose, slice and concat.
//
// Every element i of an r-dimensional walk (row-major over `shape`) is
// copied from src[src_off + sum(c_d * ss_d)] to dst[dst_off + sum(c_d * ds_d)].
// Parameters, as u32 words:
//   p[0]                   element count of the walk
//   p[1]                   rank r (at least 1)
//   p[2], p[3]             source and destination element offsets
//   p[4 .. 4+r]            shape of the walk
//   p[4+r .. 4+2r]         source strides
//   p[4+2r .. 4+3r]        destination strides

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {
        return;
    }
    let rank = p[1];
    var rem = i;
    var is = p[2];
    var id = p[3];
    for (var d = rank; d > 0u; d--) {
        let k = d - 1u;
        let dim = p[4u + k];
        let c = rem % dim;
        rem = rem / dim;
        is += c * p[4u + rank + k];
        id += c * p[4u + 2u * rank + k];
    }
    dst[id] = src[is];
}

// expand-like remaps: tile, pad, reverse and nearest-neighbour resample2d.
//
// Every output coordinate of each dimension maps, independently of the
// other dimensions, to an input element offset (coordinate times stride)
// or to the padding value, so one table per dimension describes the whole
// operator. The host builds the tables from the resolved parameters.
// Parameters, as u32 words:
//   p[0]                   output element count
//   p[1]                   rank r
//   p[2]                   words per element (1, or 2 for int64/uint64)
//   p[3], p[4]             the padding value's words
//   p[5 .. 5+r]            output shape
//   p[5+r ..]              the tables of dimensions 0, 1, ..., r-1, one
//                          entry per output coordinate: an input offset in
//                          elements, or 0xffffffff for padding

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;

const FILL: u32 = 0xffffffffu;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {
        return;
    }
    let rank = p[1];
    let w = p[2];
    // The tables follow the shape; walk them from the last one back.
    var end = 5u + rank;
    for (var d = 0u; d < rank; d++) {
        end += p[5u + d];
    }
    var rem = i;
    var off = 0u;
    var pad = false;
    for (var d = rank; d > 0u; d--) {
        let dim = p[4u + d];
        end -= dim;
        let t = p[end + rem % dim];
        rem = rem / dim;
        if (t == FILL) {
            pad = true;
        } else {
            off += t;
        }
    }
    let last = arrayLength(&src) - 1u;
    for (var k = 0u; k < w; k++) {
        if (pad) {
            dst[i * w + k] = p[3u + k];
        } else {
            // The tables keep reads in range; the clamp guards the buffer
            // regardless.
            dst[i * w + k] = src[min(off * w + k, last)];
        }
    }
}

// What the two shaders of quantized products share (prepended to
// qmatmul.wgsl and qgemv.wgsl; their first comments say what each does):
// the bindings, the parameters and the substitutions.
//
// The host substitutes CODE (the integer code of element e of `q`),
// WEIGHT (the weight from code(e) and its block's scale, zero and
// minimum, as the graph's dequantizeLinear and add compute and round
// it), STORE (the value written from `acc[i]` at output row r, column
// col) and EXTRA (further declarations: gemm's C, float16 rounding).
//
// Parameters, as u32 words:
//   p[0], p[1], p[2]   M, N, K
//   p[3], p[4]         the block length along K and blocks per column
//   p[5]               1 when the codes are laid out [N, K]
//   p[6], p[7]         gemm's alpha and beta (f32 bits)
//   p[8], p[9]         C's strides over output rows and columns

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> q: array<u32>;
@group(0) @binding(3) var<storage, read> blk: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
{{EXTRA}}
// Output rows of a workgroup.
const TM: u32 = 8u;

fn code(e: u32) -> f32 {
    return f32({{CODE}});
}

// The product's sizes: M, N, K and the block length along K.
struct Dims {
    m: u32,
    n: u32,
    k: u32,
    blen: u32,
}

fn dims() -> Dims {
    return Dims(p[0], p[1], p[2], p[3]);
}

// The index in `q` of code (k, col), for either layout of the codes.
fn element(k: u32, col: u32) -> u32 {
    if (p[5] != 0u) {
        return col * p[2] + k;
    }
    return k * p[1] + col;
}

// Column col's table entry for the block holding k: its scale, zero
// point and minimum.
fn entry(k: u32, col: u32) -> vec3<f32> {
    let b = (col * p[4] + k / p[3]) * 3u;
    return vec3<f32>(blk[b], blk[b + 1u], blk[b + 2u]);
}

// Batched matrix product out[z] = a[z] x b[z] for row-major float32
// matrices a (M x K) and b (K x N).
//
// Each 16x16 workgroup computes a 64x64 block of the output, each thread a
// 4x4 sub-block (rows ly + 16i, columns lx + 16j, so that neighbouring
// threads read neighbouring words of the shared tiles). The sub-block is
// four vec4 variables, one per row, written out by name: no private array
// is indexed by a loop variable. With the sub-block as such an array
// (`acc[i][j]`, and the operands' `av[i]`, `bv[j]`), NVIDIA's Vulkan driver
// ran matmul 1024^3 at 0.34 TFLOP/s on an H200; as vectors, 5.0 (4096^3:
// 0.36 and 3.9), with the same sums in the same order. The shared
// dimension is walked in steps of 16, staging a 64x16 tile of a and a 16x64
// tile of b in workgroup memory; out-of-range elements are staged as zero,
// so any M, N, K work.
//
// The host substitutes the placeholders LOAD_A and LOAD_B (the element of a at row
// `r`, column `c` of the logical M x K matrix, and of b in K x N, given the
// batch offsets a0 and b0), STORE (the value written from the sum `v`
// at output row `r`, column `c`) and EXTRA (further declarations):
// matmul reads row-major operands; gemm reads transposed ones as such and
// adds alpha, beta and c.
//
// Parameters, as u32 words:
//   p[0], p[1], p[2]          M, N, K
//   p[3]                      batch count
//   p[4 + 2z], p[5 + 2z]      element offsets of a and b for batch z
//                             (broadcast batches repeat an offset)

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
{{EXTRA}}
fn load_a(a0: u32, r: u32, c: u32, m: u32, k: u32) -> f32 {
    return {{LOAD_A}};
}

fn load_b(b0: u32, r: u32, c: u32, k: u32, n: u32) -> f32 {
    return {{LOAD_B}};
}

// 64 rows x 16 of a, and 16 x 64 columns of b, both row-major.
var<workgroup> ta: array<f32, 1024>;
var<workgroup> tb: array<f32, 1024>;

// Writes one row of a thread's sub-block: the sums `row` of output row `r`,
// columns `first` + 16j.
fn store_row(o0: u32, r: u32, first: u32, m: u32, n: u32, row: vec4<f32>) {
    if (r >= m) {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        let c = first + 16u * j;
        if (c < n) {
            let v = row[j];
            out[o0 + r * n + c] = {{STORE}};
        }
    }
}

@compute @workgroup_size(16, 16)
fn main(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let m = p[0];
    let n = p[1];
    let k = p[2];
    let z = wg.z;
    let a0 = p[4u + 2u * z];
    let b0 = p[5u + 2u * z];
    let row0 = wg.y * 64u;
    let col0 = wg.x * 64u;

    // Rows ly, ly + 16, ly + 32 and ly + 48 of the sub-block.
    var c0 = vec4<f32>(0.0);
    var c1 = vec4<f32>(0.0);
    var c2 = vec4<f32>(0.0);
    var c3 = vec4<f32>(0.0);
    let tiles = (k + 15u) / 16u;
    for (var t = 0u; t < tiles; t++) {
        let k0 = t * 16u;
        for (var l = 0u; l < 4u; l++) {
            let idx = li + 256u * l;
            let ar = row0 + idx / 16u;
            let ak = k0 + idx % 16u;
            var va = 0.0;
            if (ar < m && ak < k) {
                va = load_a(a0, ar, ak, m, k);
            }
            ta[idx] = va;
            let bk = k0 + idx / 64u;
            let bc = col0 + idx % 64u;
            var vb = 0.0;
            if (bk < k && bc < n) {
                vb = load_b(b0, bk, bc, k, n);
            }
            tb[idx] = vb;
        }
        workgroupBarrier();
        // Each sum takes its terms in the order of K, one fused
        // multiply-add each.
        for (var kk = 0u; kk < 16u; kk++) {
            let bi = kk * 64u + lid.x;
            let bv = vec4<f32>(tb[bi], tb[bi + 16u], tb[bi + 32u], tb[bi + 48u]);
            let ai = lid.y * 16u + kk;
            c0 = fma(vec4<f32>(ta[ai]), bv, c0);
            c1 = fma(vec4<f32>(ta[ai + 256u]), bv, c1);
            c2 = fma(vec4<f32>(ta[ai + 512u]), bv, c2);
            c3 = fma(vec4<f32>(ta[ai + 768u]), bv, c3);
        }
        workgroupBarrier();
    }

    let o0 = z * m * n;
    let r0 = row0 + lid.y;
    let cx = col0 + lid.x;
    store_row(o0, r0, cx, m, n, c0);
    store_row(o0, r0 + 16u, cx, m, n, c1);
    store_row(o0, r0 + 32u, cx, m, n, c2);
    store_row(o0, r0 + 48u, cx, m, n, c3);
}

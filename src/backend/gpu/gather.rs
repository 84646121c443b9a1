//! gather, gatherElements, gatherND, scatterElements, scatterND.
//!
//! Data moves as whole elements of one word, or two for int64/uint64, so
//! every data type is accepted. Indices (int32, uint32 or int64) are read
//! as 64-bit two's complement pairs and resolved as the CPU backend does:
//! clamped into [-n, n-1], a negative one then counting from the end, so
//! no value can reach outside a tensor.
//!
//! Each operator is one function `locate(e)` in WGSL: the input element a
//! gathered output element `e` reads, or the output element that update
//! `e` of a scatter writes. The scatters copy the input to the output, then
//! make duplicates deterministic the way the CPU does (the last update in
//! row-major order wins): every update claims its target with an atomic
//! maximum of its position, and only the winner writes.

use super::shape::strides;
use super::{convert, word, Gpu, NodeIo, Step};
use crate::error::{Error, Result};
use crate::graph::ops::gather::GatherOp;
use crate::types::{DataType, OperandDescriptor};

/// The family's answer to [`super::supports`].
pub(super) fn supports(op: &str, operand: &str, dt: DataType) -> bool {
    let family = matches!(
        op,
        "gather" | "gatherElements" | "gatherND" | "scatterElements" | "scatterND"
    );
    family
        && match operand {
            "indices" => matches!(dt, DataType::Int32 | DataType::Uint32 | DataType::Int64),
            _ => true,
        }
}

/// Shared WGSL: the parameters, the index reader for the indices' type and
/// the resolution of an index into a dimension.
///
/// Parameters, as u32 words:
///   p[0]  invocations (gathers: output elements; scatters: updates)
///   p[1]  words per data element     p[2]  n, the indexed dimension
///   p[3]  k, the indices along it    p[4]  inner (elements after it)
///   p[5]  c, the coordinate length   p[6]  slice (gatherND/scatterND)
///   p[7 .. 7+c]  sizes of the indexed dimensions (ND)
///   p[7+c .. 7+2c]  their strides (ND)
fn prelude(index_type: DataType) -> Result<String> {
    let (ty, read) = match index_type {
        DataType::Int32 => (
            "i32",
            "let v = ind[k];\n    return vec2<u32>(bitcast<u32>(v), select(0u, 0xffffffffu, v < 0));",
        ),
        DataType::Uint32 => ("u32", "return vec2<u32>(ind[k], 0u);"),
        DataType::Int64 => ("vec2<u32>", "return ind[k];"),
        other => {
            return Err(Error::not_supported(format!(
                "{} indices are not supported on the GPU backend",
                other.name()
            )))
        }
    };
    Ok(format!(
        "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> ind: array<{ty}>;

// Index k as a signed 64-bit (low, high) pair.
fn index(k: u32) -> vec2<u32> {{
    {read}
}}

// The position an index selects in a dimension of n >= 1 elements: the
// index clamped into [-n, n-1], a negative one then plus n.
fn resolve(v: vec2<u32>, n: u32) -> u32 {{
    if ((v.y & 0x80000000u) != 0u) {{
        // Below -2^32 + 1 (high word not all ones, or -2^32 itself): -n.
        if (v.y != 0xffffffffu || v.x == 0u) {{
            return 0u;
        }}
        let m = ~v.x + 1u;
        if (m >= n) {{
            return 0u;
        }}
        return n - m;
    }}
    if (v.y != 0u) {{
        return n - 1u;
    }}
    return min(v.x, n - 1u);
}}
"
    ))
}

/// The WGSL `locate` of each operator (see the module comment).
fn locate(op: &GatherOp) -> &'static str {
    match op {
        // Output [outer, k, inner] from input [outer, n, inner], index k.
        GatherOp::Gather { .. } => {
            "fn locate(e: u32) -> u32 {
    let t = e / p[4];
    let r = resolve(index(t % p[3]), p[2]);
    return ((t / p[3]) * p[2] + r) * p[4] + e % p[4];
}"
        }
        // Element e of [outer, k, inner] (indices, output or updates) at
        // [outer, n, inner] of the data, its own index.
        GatherOp::GatherElements { .. } | GatherOp::ScatterElements { .. } => {
            "fn locate(e: u32) -> u32 {
    let t = e / p[4];
    let r = resolve(index(e), p[2]);
    return ((t / p[3]) * p[2] + r) * p[4] + e % p[4];
}"
        }
        // Slice j = e / slice starts at the coordinate indices[j, :].
        GatherOp::GatherNd | GatherOp::ScatterNd => {
            "fn locate(e: u32) -> u32 {
    let c = p[5];
    let slice = p[6];
    let j = e / slice;
    var off = e % slice;
    for (var d = 0u; d < c; d++) {
        off += resolve(index(j * c + d), p[7u + d]) * p[7u + c + d];
    }
    return off;
}"
        }
    }
}

const MAIN_HEAD: &str = "@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.y * nwg.x * 256u + gid.x;
    if (e >= p[0]) {
        return;
    }
    let w = p[1];
";

/// Gathers: each output element copies its located input element.
const GATHER_MAIN: &str = "@group(0) @binding(2) var<storage, read> src: array<u32>;
@group(0) @binding(3) var<storage, read_write> dst: array<u32>;
$HEAD    let s = locate(e);
    for (var k = 0u; k < w; k++) {
        dst[e * w + k] = src[s * w + k];
    }
}
";

/// Scatters, first pass: each update claims its target with position + 1.
const CLAIM_MAIN: &str = "@group(0) @binding(2) var<storage, read_write> win: array<atomic<u32>>;
$HEAD    atomicMax(&win[locate(e)], e + 1u);
}
";

/// Scatters, second pass: the winning update of each target writes it.
const WRITE_MAIN: &str = "@group(0) @binding(2) var<storage, read> win: array<u32>;
@group(0) @binding(3) var<storage, read> upd: array<u32>;
@group(0) @binding(4) var<storage, read_write> dst: array<u32>;
$HEAD    let t = locate(e);
    if (win[t] == e + 1u) {
        for (var k = 0u; k < w; k++) {
            dst[t * w + k] = upd[e * w + k];
        }
    }
}
";

/// Scatters, before the passes: the output gets the input and the claims
/// are cleared (the scratch buffer persists between dispatches).
const INIT: &str = "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> src: array<u32>;
@group(0) @binding(2) var<storage, read_write> dst: array<u32>;
@group(0) @binding(3) var<storage, read_write> win: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.y * nwg.x * 256u + gid.x;
    if (e >= p[0]) {
        return;
    }
    let w = p[1];
    for (var k = 0u; k < w; k++) {
        dst[e * w + k] = src[e * w + k];
    }
    win[e] = 0u;
}
";

/// Sizes before, at and after `axis` of `shape`.
fn split_at_axis(shape: &[usize], axis: usize) -> Option<(u64, u64, u64)> {
    let n = *shape.get(axis)? as u64;
    let outer = shape[..axis].iter().map(|&d| d as u64).product();
    let inner = shape[axis + 1..].iter().map(|&d| d as u64).product();
    Some((outer, n, inner))
}

fn bad_shape(op: &GatherOp) -> Error {
    Error::operation(format!("{}: inconsistent shapes", op.name()))
}

/// The parameter words after p[1] for `op` (see [`prelude`]); the data
/// shape is `x`, the indices' `ind`.
fn op_params(op: &GatherOp, x: &OperandDescriptor, ind: &OperandDescriptor) -> Result<Vec<u32>> {
    let bad = || bad_shape(op);
    let (n, k, inner, c, slice, dims) = match *op {
        GatherOp::Gather { axis } => {
            let (_, n, inner) = split_at_axis(&x.shape, axis).ok_or_else(bad)?;
            let k = ind.element_count() as u64;
            (n, k, inner, 0, 0, Vec::new())
        }
        GatherOp::GatherElements { axis } | GatherOp::ScatterElements { axis } => {
            let (outer, n, inner) = split_at_axis(&x.shape, axis).ok_or_else(bad)?;
            let (i_outer, k, i_inner) = split_at_axis(&ind.shape, axis).ok_or_else(bad)?;
            if i_outer != outer || i_inner != inner {
                return Err(bad());
            }
            (n, k, inner, 0, 0, Vec::new())
        }
        GatherOp::GatherNd | GatherOp::ScatterNd => {
            let c = *ind.shape.last().ok_or_else(bad)?;
            if c > x.shape.len() {
                return Err(bad());
            }
            let st = strides(&x.shape);
            let slice: u64 = x.shape[c..].iter().map(|&d| d as u64).product();
            let mut dims = Vec::with_capacity(2 * c);
            for &d in &x.shape[..c] {
                dims.push(word(d as u64)?);
            }
            for &s in &st[..c] {
                dims.push(word(s)?);
            }
            (1, 0, 1, c as u64, slice, dims)
        }
    };
    // Every dimension an index selects in holds at least one element
    // when any element is moved; `resolve` relies on it.
    if n == 0 || dims[..dims.len() / 2].contains(&0) {
        return Err(bad());
    }
    let mut p = vec![word(n)?, word(k)?, word(inner)?, word(c)?, word(slice)?];
    p.extend(dims);
    Ok(p)
}

/// The steps of one operator of the family.
pub(super) fn build(gpu: &mut Gpu, op: &GatherOp, io: &NodeIo) -> Result<Vec<Step>> {
    let scatter = matches!(op, GatherOp::ScatterElements { .. } | GatherOp::ScatterNd);
    let need = if scatter { 3 } else { 2 };
    if io.ins.len() != need
        || io.in_descs.len() != need
        || io.outs.len() != 1
        || io.out_descs.len() != 1
    {
        return Err(Error::operation(format!(
            "{} got {} inputs and {} outputs",
            op.name(),
            io.ins.len(),
            io.outs.len()
        )));
    }
    let (x, ind, out) = (io.in_descs[0], io.in_descs[1], io.out_descs[0]);
    let dt = x.data_type;
    let w = convert::words(dt);
    let out_count = out.element_count() as u64;
    let (count, expected_out) = if scatter {
        let upd = io.in_descs[2];
        (upd.element_count() as u64, x.element_count() as u64)
    } else {
        (out_count, out_count)
    };
    if out_count != expected_out || out.data_type != dt {
        return Err(bad_shape(op));
    }
    // Word offsets (element * words + word) must fit a u32, and so must
    // the scatters' claims (position + 1).
    word(x.element_count() as u64 * w)?;
    word(out_count * w)?;
    word(count * w + 1)?;
    let mut steps = Vec::new();
    if scatter && out_count > 0 {
        let win = gpu.storage(out_count * 4, "scatter claims")?;
        let p = gpu.params(&[word(out_count)?, w as u32])?;
        let grid = gpu.grid_1d(out_count)?;
        steps.push(gpu.step(
            INIT.to_string(),
            "main",
            &[&p, io.ins[0], io.outs[0], &win],
            grid,
        )?);
        if count > 0 {
            let mut pw = vec![word(count)?, w as u32];
            pw.extend(op_params(op, x, ind)?);
            let p = gpu.params(&pw)?;
            let grid = gpu.grid_1d(count)?;
            let head = format!("{}\n{}\n", prelude(ind.data_type)?, locate(op));
            let claim = format!("{head}{}", CLAIM_MAIN.replace("$HEAD", MAIN_HEAD));
            steps.push(gpu.step(claim, "main", &[&p, io.ins[1], &win], grid)?);
            let write = format!("{head}{}", WRITE_MAIN.replace("$HEAD", MAIN_HEAD));
            steps.push(gpu.step(
                write,
                "main",
                &[&p, io.ins[1], &win, io.ins[2], io.outs[0]],
                grid,
            )?);
        }
    } else if !scatter && count > 0 {
        let mut pw = vec![word(count)?, w as u32];
        pw.extend(op_params(op, x, ind)?);
        let p = gpu.params(&pw)?;
        let grid = gpu.grid_1d(count)?;
        let src = format!(
            "{}\n{}\n{}",
            prelude(ind.data_type)?,
            locate(op),
            GATHER_MAIN.replace("$HEAD", MAIN_HEAD)
        );
        steps.push(gpu.step(src, "main", &[&p, io.ins[1], io.ins[0], io.outs[0]], grid)?);
    }
    Ok(steps)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::GpuBackend;
    use crate::backend::Backend;
    use crate::graph::args::Val;
    use crate::graph::GraphBuilder;
    use crate::tensor::Buf;
    use crate::types::{DataType, OperandDescriptor};

    const INDEX: [DataType; 3] = [DataType::Int32, DataType::Uint32, DataType::Int64];

    fn axis(a: f64) -> Val {
        dict(&[("axis", n(a))])
    }

    #[test]
    fn gathers_every_type() {
        let Some(mut be) = backend() else { return };
        for dt in DataType::ALL {
            for it in INDEX {
                check_vs_cpu(
                    &mut be,
                    "gather",
                    &[dt, it],
                    &[&[4, 3, 5], &[2, 7]],
                    &[axis(1.0)],
                    0.0,
                );
                check_vs_cpu(
                    &mut be,
                    "gatherElements",
                    &[dt, it],
                    &[&[4, 3, 5], &[4, 6, 5]],
                    &[axis(1.0)],
                    0.0,
                );
                check_vs_cpu(
                    &mut be,
                    "gatherND",
                    &[dt, it],
                    &[&[4, 3, 5], &[7, 2]],
                    &[],
                    0.0,
                );
            }
        }
    }

    #[test]
    fn gather_shapes() {
        let Some(mut be) = backend() else { return };
        for it in INDEX {
            for (x, i, a) in [
                (&[5usize][..], &[][..], 0.0),
                (&[300], &[301], 0.0),
                (&[2, 1, 3], &[3, 1], 1.0),
                (&[3, 257], &[2], 1.0),
                (&[3, 257], &[1], 0.0),
            ] {
                check_vs_cpu(&mut be, "gather", &[F, it], &[x, i], &[axis(a)], 0.0);
            }
            for (x, i, a) in [
                (&[300usize][..], &[700usize][..], 0.0),
                (&[2, 1, 3], &[2, 4, 3], 1.0),
                (&[7, 9], &[7, 1], 1.0),
            ] {
                check_vs_cpu(
                    &mut be,
                    "gatherElements",
                    &[F, it],
                    &[x, i],
                    &[axis(a)],
                    0.0,
                );
            }
            for (x, i) in [
                (&[300usize][..], &[5usize, 1][..]),
                (&[2, 3, 4], &[3]),
                (&[2, 3, 4], &[2, 2, 1]),
                (&[2, 3, 4], &[2, 2, 3]),
                (&[4, 1, 70], &[20, 2]),
            ] {
                check_vs_cpu(&mut be, "gatherND", &[F, it], &[x, i], &[], 0.0);
            }
        }
    }

    #[test]
    fn scatters_every_type() {
        let Some(mut be) = backend() else { return };
        for dt in DataType::ALL {
            for it in INDEX {
                check_vs_cpu(
                    &mut be,
                    "scatterElements",
                    &[dt, it, dt],
                    &[&[4, 3, 5], &[4, 6, 5], &[4, 6, 5]],
                    &[axis(1.0)],
                    0.0,
                );
                check_vs_cpu(
                    &mut be,
                    "scatterND",
                    &[dt, it, dt],
                    &[&[4, 3, 5], &[7, 2], &[7, 5]],
                    &[],
                    0.0,
                );
            }
        }
        for it in INDEX {
            check_vs_cpu(
                &mut be,
                "scatterElements",
                &[F, it, F],
                &[&[300], &[700], &[700]],
                &[axis(0.0)],
                0.0,
            );
            check_vs_cpu(
                &mut be,
                "scatterElements",
                &[F, it, F],
                &[&[3, 1, 2], &[3, 4, 2], &[3, 4, 2]],
                &[axis(1.0)],
                0.0,
            );
            check_vs_cpu(
                &mut be,
                "scatterND",
                &[F, it, F],
                &[&[300], &[500, 1], &[500]],
                &[],
                0.0,
            );
            check_vs_cpu(
                &mut be,
                "scatterND",
                &[F, it, F],
                &[&[2, 3, 4], &[5, 3], &[5]],
                &[],
                0.0,
            );
            check_vs_cpu(
                &mut be,
                "scatterND",
                &[F, it, F],
                &[&[2, 3, 4], &[3], &[]],
                &[],
                0.0,
            );
        }
    }

    /// Runs `name` on explicit data and compares with the CPU kernel.
    fn explicit(be: &mut GpuBackend, name: &str, data: &[(Buf, OperandDescriptor)], extra: &[Val]) {
        let mut args: Vec<Arg> = data
            .iter()
            .map(|(b, d)| Arg::D(b.clone(), d.clone()))
            .collect();
        args.extend(extra.iter().cloned().map(Arg::V));
        check_call_vs_cpu(be, name, &args, None, 0, 0.0, 0.0);
    }

    #[test]
    fn huge_and_negative_indices() {
        let Some(mut be) = backend() else { return };
        let x = Buf::I64((0..6).map(|v| v * 1_000_000_007 - (1 << 40)).collect());
        let dx = desc(DataType::Int64, &[6]);
        let i64s = vec![
            0,
            5,
            6,
            -1,
            -6,
            -7,
            i64::MIN,
            i64::MAX,
            u32::MAX as i64,
            -(u32::MAX as i64),
            1 << 32,
            -(1 << 32),
            (1 << 32) + 2,
            -(1 << 32) - 1,
            -(1 << 32) + 3,
            3,
        ];
        let di = desc(DataType::Int64, &[i64s.len()]);
        explicit(
            &mut be,
            "gather",
            &[
                (x.clone(), dx.clone()),
                (Buf::I64(i64s.clone()), di.clone()),
            ],
            &[],
        );
        let i32s = vec![0, 5, 6, -1, -6, -7, i32::MIN, i32::MAX];
        let d32 = desc(DataType::Int32, &[i32s.len()]);
        explicit(
            &mut be,
            "gather",
            &[(x.clone(), dx.clone()), (Buf::I32(i32s), d32)],
            &[],
        );
        let u32s = vec![0, 5, 6, u32::MAX, 1 << 31, 2];
        let du = desc(DataType::Uint32, &[u32s.len()]);
        explicit(
            &mut be,
            "gather",
            &[(x.clone(), dx.clone()), (Buf::U32(u32s), du)],
            &[],
        );
        // Duplicates: the last update in row-major order wins, as on the CPU.
        let upd = Buf::I64((0..i64s.len() as i64).map(|v| -v - 1).collect());
        explicit(
            &mut be,
            "scatterElements",
            &[
                (x.clone(), dx.clone()),
                (Buf::I64(i64s.clone()), di.clone()),
                (upd, desc(DataType::Int64, &[i64s.len()])),
            ],
            &[],
        );
        let nd = desc(DataType::Int64, &[i64s.len(), 1]);
        explicit(
            &mut be,
            "gatherND",
            &[
                (x.clone(), dx.clone()),
                (Buf::I64(i64s.clone()), nd.clone()),
            ],
            &[],
        );
        let upd = Buf::I64((0..i64s.len() as i64).map(|v| v + 100).collect());
        explicit(
            &mut be,
            "scatterND",
            &[
                (x, dx),
                (Buf::I64(i64s.clone()), nd),
                (upd, desc(DataType::Int64, &[i64s.len()])),
            ],
            &[],
        );
    }

    #[test]
    fn scatter_reruns_with_new_indices() {
        // The claims buffer persists in the compiled graph; a second
        // dispatch with other indices must not see the first one's claims.
        let Some(mut be) = backend() else { return };
        let mut b = GraphBuilder::new();
        let x = b.input("a", desc(F, &[4])).unwrap();
        let i = b.input("b", desc(I, &[3])).unwrap();
        let u = b.input("c", desc(F, &[3])).unwrap();
        let out = b
            .call(
                "scatterElements",
                &[operand(&b, x), operand(&b, i), operand(&b, u)],
            )
            .unwrap()[0];
        let g = std::sync::Arc::new(b.build(vec![("out".into(), out)]).unwrap());
        be.compile(1, g.clone()).unwrap();
        let first = be
            .compute(
                1,
                &g,
                vec![
                    Buf::F32(vec![0.0; 4]),
                    Buf::I32(vec![3, 3, 3]),
                    Buf::F32(vec![1.0, 2.0, 3.0]),
                ],
            )
            .unwrap();
        assert_eq!(first[0], Buf::F32(vec![0.0, 0.0, 0.0, 3.0]));
        let second = be
            .compute(
                1,
                &g,
                vec![
                    Buf::F32(vec![0.0; 4]),
                    Buf::I32(vec![0, 1, 3]),
                    Buf::F32(vec![1.0, 2.0, 3.0]),
                ],
            )
            .unwrap();
        assert_eq!(second[0], Buf::F32(vec![1.0, 2.0, 0.0, 3.0]));
        be.destroy_graph(1);
    }
}

//! Products over quantized constant weights: the forms recognised run as
//! one step reading the codes (no float32 B is allocated and the nodes
//! that computed it do not run) and give what the same graph gives run
//! node by node on the GPU and on the CPU backend; the forms refused run
//! node by node with the same results.

use std::sync::Arc;

use super::super::testing::*;
use super::super::GpuBackend;
use super::{recognize, runs};
use crate::backend::cpu::CpuBackend;
use crate::backend::Backend;
use crate::graph::args::Val;
use crate::graph::{Graph, GraphBuilder, OperandId};
use crate::tensor::Buf;
use crate::types::DataType;

const I4: DataType = DataType::Int4;
const U4: DataType = DataType::Uint4;
const I8: DataType = DataType::Int8;
const U8: DataType = DataType::Uint8;
const H: DataType = DataType::Float16;

/// The tolerance of the GPU's float32 matmul tests against a reference.
const TOL: f32 = 1e-4;

/// How many float16 values lie between two float16 values (held as f32).
fn half_ulps(a: f32, b: f32) -> usize {
    let order = |x: f32| {
        let h = crate::f16::f32_to_f16(x);
        match h & 0x8000 {
            0 => i32::from(h),
            _ => -i32::from(h & 0x7fff),
        }
    };
    (order(a) - order(b)).unsigned_abs() as usize
}

fn op(b: &GraphBuilder, id: OperandId) -> Val {
    operand(b, id)
}

/// `n` codes spread over `dt`'s whole range.
fn codes(dt: DataType, n: usize, seed: u64) -> Vec<f64> {
    let (lo, hi) = match dt {
        DataType::Uint4 => (0, 15),
        DataType::Int4 => (-8, 7),
        DataType::Uint8 => (0, 255),
        _ => (-128, 127),
    };
    let span = (hi - lo + 1) as f32;
    random(n, seed)
        .iter()
        .map(|x| (lo + (((x + 2.0) / 4.0 * span) as i32).min(hi - lo)) as f64)
        .collect()
}

/// `n` scales of about 0.01..0.03; when `any_sign`, of either sign and
/// with some zeros (which validation refuses in a constant scale, but
/// not in a cast of one).
fn scales(n: usize, seed: u64, any_sign: bool) -> Vec<f64> {
    random(n, seed)
        .iter()
        .enumerate()
        .map(|(i, &x)| match (any_sign, i % 7) {
            (true, 3) => 0.0,
            (true, _) => x as f64 * 0.01 + x.signum() as f64 * 0.01,
            (false, _) => x.abs() as f64 * 0.01 + 0.01,
        })
        .collect()
}

fn shape(v: &[usize]) -> Val {
    list(&v.iter().map(|&x| x as f64).collect::<Vec<_>>())
}

/// `dequantizeLinear(q, scale, zero)` over constants: codes of `dt` in
/// `qshape`, scale (float32, or float16 cast to float32 when `half`) and
/// zero point in `sshape`. A float16 scale has zeros and negative values.
fn dequantize(
    b: &mut GraphBuilder,
    dt: DataType,
    qshape: &[usize],
    sshape: &[usize],
    half: bool,
    seed: u64,
) -> OperandId {
    let count = |s: &[usize]| s.iter().product::<usize>();
    let q = constant(b, dt, qshape, &codes(dt, count(qshape), seed));
    let sv = scales(count(sshape), seed + 1, half);
    let s = if half {
        let h = constant(b, H, sshape, &sv);
        b.call("cast", &[op(b, h), Val::String("float32".into())])
            .unwrap()[0]
    } else {
        constant(b, DataType::Float32, sshape, &sv)
    };
    let z = constant(b, dt, sshape, &codes(dt, count(sshape), seed + 2));
    b.call("dequantizeLinear", &[op(b, q), op(b, s), op(b, z)])
        .unwrap()[0]
}

/// GGUF Q4_1's form: int4 (or uint4) codes [N, K] with a float16 scale
/// per block of 32, the block's minimum added after, transposed into
/// matmul's B.
fn q4_1(b: &mut GraphBuilder, dt: DataType, n: usize, k: usize, seed: u64) -> OperandId {
    let w = dequantize(b, dt, &[n, k], &[n, k / 32], true, seed);
    let blocks = b
        .call("reshape", &[op(b, w), shape(&[n, k / 32, 32])])
        .unwrap()[0];
    let mins: Vec<f64> = random(n * k / 32, seed + 3)
        .iter()
        .map(|&x| x as f64 * 0.1)
        .collect();
    let m = constant(b, DataType::Float32, &[n, k / 32, 1], &mins);
    let sum = b.call("add", &[op(b, blocks), op(b, m)]).unwrap()[0];
    let w = b.call("reshape", &[op(b, sum), shape(&[n, k])]).unwrap()[0];
    b.call("transpose", &[op(b, w)]).unwrap()[0]
}

/// Runs `g` on the GPU with products over quantized weights fused (when
/// `fused` says how many must be) and node by node, and on the CPU
/// backend; compares all three. Returns the fused run's outputs.
fn check(be: &mut GpuBackend, g: Graph, fused: usize, what: &str) -> Vec<Buf> {
    let inputs: Vec<Buf> = g
        .inputs
        .iter()
        .enumerate()
        .map(|(i, (_, id))| {
            let x = random(g.operands[*id].element_count(), 40 + i as u64);
            match g.operands[*id].data_type {
                H => Buf::f16_from_f32(&x),
                _ => Buf::F32(x),
            }
        })
        .collect();
    let half = g.outputs.iter().any(|(_, o)| g.operands[*o].data_type == H);
    // The longest reduction of the graph's products.
    let k = g
        .nodes
        .iter()
        .filter(|n| matches!(n.op, crate::graph::Op::Matmul | crate::graph::Op::Gemm(_)))
        .map(|n| *g.operands[n.inputs[0]].shape.last().unwrap_or(&0))
        .max()
        .unwrap_or(0);
    let products: Vec<u64> = g
        .nodes
        .iter()
        .filter(|n| matches!(n.op, crate::graph::Op::Matmul | crate::graph::Op::Gemm(_)))
        .map(|n| g.operands[n.inputs[1]].byte_length() as u64)
        .collect();
    let b_bytes = products.iter().copied().min().unwrap_or(0);
    let g = Arc::new(g);
    let mut cpu = CpuBackend::new();
    cpu.compile(1, g.clone()).unwrap();
    let want = cpu.compute(1, &g, inputs.clone()).unwrap();

    be.qmatmul = true;
    be.compile(7, g.clone()).unwrap();
    let cg = &be.graphs[&7];
    assert_eq!(cg.quantized, fused, "{what}: fused products");
    if fused > 0 && fused == products.len() {
        // No buffer of the graph is as large as a float32 B.
        let largest = cg.buffers.iter().map(|b| b.size()).max().unwrap_or(0);
        assert!(largest < b_bytes, "{what}: a {largest}-byte buffer");
    }
    let steps = cg.steps.len();
    let got = be.compute(7, &g, inputs.clone()).unwrap();
    be.destroy_graph(7);
    // Again with every product on the shader that walks K in order in
    // one invocation (products of few rows otherwise split K).
    be.qgemv = false;
    be.compile(9, g.clone()).unwrap();
    let ordered = be.compute(9, &g, inputs.clone()).unwrap();
    be.destroy_graph(9);
    be.qgemv = true;

    be.qmatmul = false;
    be.compile(8, g.clone()).unwrap();
    assert_eq!(be.graphs[&8].quantized, 0, "{what}: node by node");
    let unfused_steps = be.graphs[&8].steps.len();
    let plain = be.compute(8, &g, inputs).unwrap();
    be.destroy_graph(8);
    be.qmatmul = true;
    if fused > 0 {
        assert!(
            steps < unfused_steps,
            "{what}: {steps} steps fused, {unfused_steps} not"
        );
    }

    assert_eq!(got.len(), want.len(), "{what}: outputs");
    for (i, (((g, o), p), w)) in got.iter().zip(&ordered).zip(&plain).zip(&want).enumerate() {
        let w = w.to_f32_vec();
        let (g, o, p) = (g.to_f32_vec(), o.to_f32_vec(), p.to_f32_vec());
        if !half {
            assert_close(&g, &w, TOL, &format!("{what}: output {i}, fused"));
            assert_close(&o, &w, TOL, &format!("{what}: output {i}, fused in order"));
            assert_close(&p, &w, TOL, &format!("{what}: output {i}, node by node"));
            continue;
        }
        // A float16 product's weights are the node-by-node path's
        // exactly (rounded where the graph rounds them), and the shader
        // that walks K in order sums as the node-by-node one does, one
        // fma each from zero: the same bits.
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&o),
            bits(&p),
            "{what}: output {i}, fused in order against node by node"
        );
        // The lanes that split K sum in another order, and the CPU
        // backend's fused float16 product multiplies the weights
        // unrounded (see `cpu/fuse.rs`): both within the conformance
        // tests' tolerance for a float16 gemm, 2K units in the last place.
        for (j, ((&gv, &ov), &wv)) in g.iter().zip(&o).zip(&w).enumerate() {
            let (d, e) = (half_ulps(gv, wv), half_ulps(gv, ov));
            assert!(
                d <= 2 * k && e <= 2 * k,
                "{what}: output {i}, element {j}: {gv} against the CPU's {wv} ({d} ulps) \
                 and the ordered shader's {ov} ({e} ulps)"
            );
        }
    }
    got
}

/// The graph `out = matmul(a, w)` with `a` an input of `ashape`.
fn matmul_graph(ashape: &[usize], w: impl FnOnce(&mut GraphBuilder) -> OperandId) -> Graph {
    let mut b = GraphBuilder::new();
    let a = b.input("a", desc(DataType::Float32, ashape)).unwrap();
    let w = w(&mut b);
    let out = b.call("matmul", &[op(&b, a), op(&b, w)]).unwrap()[0];
    b.build(vec![("out".into(), out)]).unwrap()
}

#[test]
fn int4_blocks_of_32_with_an_offset() {
    let Some(mut be) = backend() else { return };
    let (n, k) = (64, 256);
    for dt in [I4, U4] {
        for m in [1, 5] {
            let g = matmul_graph(&[m, k], |b| q4_1(b, dt, n, k, 3));
            // The constants, the float16 cast, the dequantization, the
            // reshapes, the add and the transpose all go: one step.
            let cg_nodes = g.nodes.len();
            assert!(cg_nodes > 5);
            check(&mut be, g, 1, &format!("q4_1 {dt:?} m={m}"));
        }
    }
}

#[test]
fn uint4_with_zero_points_in_gemm() {
    let Some(mut be) = backend() else { return };
    // N not a multiple of the 64 columns of a workgroup, M of its 8 rows.
    let (n, k) = (40, 128);
    for m in [1, 5, 11] {
        for with_c in [false, true] {
            let mut b = GraphBuilder::new();
            let a = b.input("a", desc(DataType::Float32, &[m, k])).unwrap();
            // Blocks of 64 along K, zero points over the whole range.
            let w = dequantize(&mut b, U4, &[n, k], &[n, k / 64], true, 11);
            let mut opts = vec![("bTranspose", Val::Bool(true)), ("alpha", Val::Number(0.5))];
            if with_c {
                let c = b.input("c", desc(DataType::Float32, &[n])).unwrap();
                opts.push(("c", op(&b, c)));
                opts.push(("beta", Val::Number(-2.0)));
            }
            let out = b
                .call("gemm", &[op(&b, a), op(&b, w), dict(&opts)])
                .unwrap()[0];
            let g = b.build(vec![("out".into(), out)]).unwrap();
            check(&mut be, g, 1, &format!("uint4 gemm m={m} c={with_c}"));
        }
    }
}

#[test]
fn int8_per_axis_without_a_transpose() {
    let Some(mut be) = backend() else { return };
    // B is [K, N] as it stands, a scale per column (axis 1); K = 200 is
    // not a multiple of the shader's 32-element steps along K.
    let (n, k) = (24, 200);
    for (m, ashape) in [(1, vec![1, k]), (5, vec![5, k]), (6, vec![2, 3, k])] {
        let g = matmul_graph(&ashape, |b| dequantize(b, I8, &[k, n], &[n], false, 5));
        check(&mut be, g, 1, &format!("int8 per axis m={m}"));
    }
}

#[test]
fn reshaped_codes_and_a_transpose() {
    let Some(mut be) = backend() else { return };
    // uint8 codes stored [2N, K/2], one scale per output row ([N, 1]
    // over the codes: blocks of 2 rows), reshaped to [N, K], transposed.
    let (n, k) = (20, 100);
    let g = matmul_graph(&[5, k], |b| {
        let w = dequantize(b, U8, &[2 * n, k / 2], &[n, 1], true, 7);
        let w = b.call("reshape", &[op(b, w), shape(&[n, k])]).unwrap()[0];
        b.call("transpose", &[op(b, w)]).unwrap()[0]
    });
    check(&mut be, g, 1, "uint8 reshaped");
    // Per tensor, int4 [K, N] read through a transpose of gemm's
    // bTranspose: the codes laid out [K, N].
    let (n, k) = (33, 64);
    let mut b = GraphBuilder::new();
    let a = b.input("a", desc(DataType::Float32, &[3, k])).unwrap();
    let w = dequantize(&mut b, I4, &[k, n], &[], false, 9);
    let t = b.call("transpose", &[op(&b, w)]).unwrap()[0];
    let o = dict(&[("bTranspose", Val::Bool(true))]);
    let out = b.call("gemm", &[op(&b, a), op(&b, t), o]).unwrap()[0];
    let g = b.build(vec![("out".into(), out)]).unwrap();
    check(&mut be, g, 1, "int4 per tensor, [K, N]");
}

#[test]
fn refused_forms_run_node_by_node() {
    let Some(mut be) = backend() else { return };
    let (n, k) = (16, 64);
    // A scale that is an input, not a constant.
    let mut b = GraphBuilder::new();
    let a = b.input("a", desc(DataType::Float32, &[5, k])).unwrap();
    let q = constant(&mut b, I8, &[n, k], &codes(I8, n * k, 1));
    let s = b.input("s", desc(DataType::Float32, &[n, 1])).unwrap();
    let z = constant(&mut b, I8, &[n, 1], &codes(I8, n, 2));
    let w = b
        .call("dequantizeLinear", &[op(&b, q), op(&b, s), op(&b, z)])
        .unwrap()[0];
    let t = b.call("transpose", &[op(&b, w)]).unwrap()[0];
    let out = b.call("matmul", &[op(&b, a), op(&b, t)]).unwrap()[0];
    let g = b.build(vec![("out".into(), out)]).unwrap();
    check(&mut be, g, 0, "input scale");

    // The dequantized weights are also a graph output: one product fused
    // (the second one's B is its own), the other left as written.
    let mut b = GraphBuilder::new();
    let a = b.input("a", desc(DataType::Float32, &[3, k])).unwrap();
    let w = dequantize(&mut b, I4, &[n, k], &[n, k / 32], false, 4);
    let t = b.call("transpose", &[op(&b, w)]).unwrap()[0];
    let out = b.call("matmul", &[op(&b, a), op(&b, t)]).unwrap()[0];
    let g2 = q4_1(&mut b, U4, n, k, 8);
    let out2 = b.call("matmul", &[op(&b, a), op(&b, g2)]).unwrap()[0];
    let g = b
        .build(vec![
            ("out".into(), out),
            ("w".into(), w),
            ("out2".into(), out2),
        ])
        .unwrap();
    check(&mut be, g, 1, "weights as an output");

    // Blocks of 4 along K: a table as large as the weights.
    let g = matmul_graph(&[2, k], |b| {
        let w = dequantize(b, U4, &[n, k], &[n, k / 4], false, 6);
        b.call("transpose", &[op(b, w)]).unwrap()[0]
    });
    check(&mut be, g, 0, "blocks of 4");
}

/// `dequantizeLinear(q, scale, zero)` in float16: codes of `dt` in
/// `qshape`, a float16 scale constant and a zero point in `sshape`.
fn dequantize16(
    b: &mut GraphBuilder,
    dt: DataType,
    qshape: &[usize],
    sshape: &[usize],
    seed: u64,
) -> OperandId {
    let count = |s: &[usize]| s.iter().product::<usize>();
    let q = constant(b, dt, qshape, &codes(dt, count(qshape), seed));
    let s = constant(b, H, sshape, &scales(count(sshape), seed + 1, false));
    let z = constant(b, dt, sshape, &codes(dt, count(sshape), seed + 2));
    b.call("dequantizeLinear", &[op(b, q), op(b, s), op(b, z)])
        .unwrap()[0]
}

/// Float16 products (a float16 model's MatMulNBits as onnxruntime-web
/// writes it, and Q4_1 with its minimum added in float16) run as one
/// step and give the node-by-node path's values: each weight is rounded
/// to float16 where the graph rounds it. A float16 chain that passes
/// through float32 (a cast) runs node by node.
#[test]
fn float16_products_round_as_the_graph_does() {
    let Some(mut be) = backend() else { return };
    let (n, k) = (48, 128);
    let graph16 = |m: usize, w: &dyn Fn(&mut GraphBuilder) -> OperandId| {
        let mut b = GraphBuilder::new();
        let a = b.input("a", desc(H, &[m, k])).unwrap();
        let w = w(&mut b);
        let out = b.call("matmul", &[op(&b, a), op(&b, w)]).unwrap()[0];
        b.build(vec![("out".into(), out)]).unwrap()
    };
    for m in [1, 6] {
        // uint4 codes [N, K], a scale and zero point per block of 32.
        let g = graph16(m, &|b| {
            let w = dequantize16(b, U4, &[n, k], &[n, k / 32], 5);
            b.call("transpose", &[op(b, w)]).unwrap()[0]
        });
        check(&mut be, g, 1, &format!("float16 blocks of 32, m={m}"));
        // Q4_1: the float16 minimum added per block.
        let g = graph16(m, &|b| {
            let w = dequantize16(b, I4, &[n, k], &[n, k / 32], 6);
            let blocks = b
                .call("reshape", &[op(b, w), shape(&[n, k / 32, 32])])
                .unwrap()[0];
            let mins: Vec<f64> = random(n * k / 32, 7)
                .iter()
                .map(|&x| x as f64 * 0.1)
                .collect();
            let mn = constant(b, H, &[n, k / 32, 1], &mins);
            let sum = b.call("add", &[op(b, blocks), op(b, mn)]).unwrap()[0];
            let w = b.call("reshape", &[op(b, sum), shape(&[n, k])]).unwrap()[0];
            b.call("transpose", &[op(b, w)]).unwrap()[0]
        });
        check(&mut be, g, 1, &format!("float16 Q4_1, m={m}"));
    }
    // gemm with bTranspose and a float16 C, int8 per output channel.
    let mut b = GraphBuilder::new();
    let a = b.input("a", desc(H, &[3, k])).unwrap();
    let c = b.input("c", desc(H, &[n])).unwrap();
    let w = dequantize16(&mut b, I8, &[n, k], &[n, 1], 8);
    let o = dict(&[
        ("bTranspose", Val::Bool(true)),
        ("c", op(&b, c)),
        ("alpha", Val::Number(0.5)),
    ]);
    let out = b.call("gemm", &[op(&b, a), op(&b, w), o]).unwrap()[0];
    check(
        &mut be,
        b.build(vec![("out".into(), out)]).unwrap(),
        1,
        "float16 gemm",
    );
    // Dequantized in float32, then cast to float16: not this path's.
    let g = graph16(2, &|b| {
        let w = dequantize(b, U4, &[n, k], &[n, k / 32], false, 9);
        let h = b
            .call("cast", &[op(b, w), Val::String("float16".into())])
            .unwrap()[0];
        b.call("transpose", &[op(b, h)]).unwrap()[0]
    });
    check(&mut be, g, 0, "a cast in the chain");
}

/// What the recogniser makes of the forms, without a GPU.
#[test]
fn recognised_descriptions() {
    let g = matmul_graph(&[5, 256], |b| q4_1(b, I4, 64, 256, 3));
    let r = recognize(&g);
    assert_eq!(r.len(), 1);
    let q = r.values().next().unwrap();
    assert_eq!(
        (q.dt, q.m, q.n, q.k, q.block, q.rows),
        (I4, 5, 64, 256, 32, true)
    );
    assert!(q.offset.is_some() && q.gemm.is_none() && !q.half);

    let g = matmul_graph(&[2, 3, 200], |b| {
        dequantize(b, I8, &[200, 24], &[24], false, 5)
    });
    let q = recognize(&g).into_values().next().unwrap();
    assert_eq!((q.m, q.n, q.k, q.block, q.rows), (6, 24, 200, 200, false));

    // Blocks along K of [K, N] codes: 4 blocks of 16 rows.
    let g = matmul_graph(&[1, 64], |b| dequantize(b, U8, &[64, 8], &[4, 8], false, 2));
    let q = recognize(&g).into_values().next().unwrap();
    assert_eq!((q.block, q.rows), (16, false));

    // Blocks along N, not K: each block still spans K.
    let g = matmul_graph(&[1, 32], |b| {
        let w = dequantize(b, I8, &[16, 32], &[4, 1], false, 2);
        b.call("transpose", &[op(b, w)]).unwrap()[0]
    });
    let q = recognize(&g).into_values().next().unwrap();
    assert_eq!((q.block, q.rows), (32, true));

    // A transpose other than [1, 0] of a rank-2 B does not exist; a B
    // that is a plain input is not quantized.
    let g = op_graph("matmul", DataType::Float32, &[&[2, 4], &[4, 3]], &[]).unwrap();
    assert!(recognize(&g).is_empty());
}

#[test]
fn runs_of_blockwise_broadcasts() {
    // [N, K] = [4, 64] with blocks of 32 along K: runs of 32 along C = K.
    assert_eq!(runs(&[4, 64], &[1, 32], 64), Some((1, 32)));
    // Per tensor.
    assert_eq!(runs(&[4, 64], &[4, 64], 64), Some((4, 64)));
    // Codes [8, 32] viewed as [4, 64]: dimension 0 splits into (4, 2).
    assert_eq!(runs(&[8, 32], &[2, 32], 64), Some((1, 64)));
    assert_eq!(runs(&[8, 32], &[1, 32], 64), Some((1, 32)));
    // [K, N] = [64, 8] with blocks of 16 rows, per column.
    assert_eq!(runs(&[64, 8], &[16, 1], 8), Some((16, 1)));
    // C not on a boundary a split can make: [6, 10] as [?, 4].
    assert_eq!(runs(&[6, 10], &[1, 10], 4), None);
    // A split whose block neither divides nor is divided by the part in
    // C: [12] with blocks of 3, C = 2.
    assert_eq!(runs(&[12], &[3], 2), None);
}

/// Two graphs over the same constants upload the codes and the block
/// table once; a graph over the same codes with other offsets (here
/// negated) uploads its own, and computes what the CPU backend does.
#[test]
fn graphs_share_uploads_of_the_same_constants() {
    use crate::graph::Source;
    let Some(mut be) = backend() else { return };
    let (n, k) = (32, 128);
    let g = matmul_graph(&[1, k], |b| q4_1(b, U4, n, k, 5));
    let mut other = g.clone();
    // The offsets: the float32 constant of one value per block.
    let at = (0..other.operands.len())
        .find(|&i| {
            matches!(other.sources[i], Source::Constant(_))
                && other.operands[i].data_type == DataType::Float32
                && other.operands[i].shape == [n, k / 32, 1]
        })
        .expect("the graph adds constant offsets");
    let Source::Constant(bytes) = &other.sources[at] else {
        unreachable!()
    };
    let mut negated = bytes.as_ref().clone();
    for e in negated.chunks_mut(4) {
        e[3] ^= 0x80;
    }
    other.sources[at] = Source::Constant(Arc::new(negated));
    let (g, other) = (Arc::new(g), Arc::new(other));
    be.compile(1, g.clone()).unwrap();
    be.compile(2, g.clone()).unwrap();
    be.compile(3, other.clone()).unwrap();
    let held = |be: &GpuBackend, id| be.graphs[&id].uploads[0].clone();
    assert!(Arc::ptr_eq(&held(&be, 1), &held(&be, 2)));
    assert!(!Arc::ptr_eq(&held(&be, 1), &held(&be, 3)));
    let x = vec![Buf::F32(random(k, 9))];
    let mut cpu = CpuBackend::new();
    for (id, graph) in [(1, &g), (3, &other)] {
        let got = be.compute(id, graph, x.clone()).unwrap();
        cpu.compile(id, graph.clone()).unwrap();
        let want = cpu.compute(id, graph, x.clone()).unwrap();
        assert_close(&f32s(&got[0]), &f32s(&want[0]), TOL, &format!("graph {id}"));
    }
    // Once no graph holds them, they are gone, and made again.
    let first = Arc::downgrade(&held(&be, 1));
    for id in [1, 2, 3] {
        be.destroy_graph(id);
    }
    assert!(first.upgrade().is_none());
    be.compile(4, g.clone()).unwrap();
    let got = be.compute(4, &g, x.clone()).unwrap();
    let want = cpu.compute(1, &g, x).unwrap();
    assert_close(&f32s(&got[0]), &f32s(&want[0]), TOL, "graph 4");
}

//! The rewrite on graphs as loaders write them: each form of quantized
//! weights that qualifies runs as one quantized product (the nodes that
//! computed B are gone) and gives the definition's values; forms that do
//! not qualify are left as written.

use std::sync::Arc;

use crate::backend::cpu::CpuBackend;
use crate::backend::testing::{constant, desc, dict, list, random};
use crate::backend::Backend;
use crate::f16::f32_to_f16;
use crate::graph::args::Val;
use crate::graph::{Graph, GraphBuilder, OperandId};
use crate::tensor::Buf;
use crate::types::DataType;

fn op(b: &GraphBuilder, id: OperandId) -> Val {
    crate::backend::testing::operand(b, id)
}

/// How the weights are written.
struct Form {
    dt: DataType,
    /// The scale's and zero point's shape over the [N, K] codes.
    blocks: [usize; 2],
    /// A per-block offset added after the dequantization (Q4_1's minimum).
    offset: bool,
    /// Zero points all 0, as GGUF's formats have them (else random).
    zero_free: bool,
    /// The scale as a float16 constant cast to float32.
    half_scale: bool,
    /// B as `transpose([N, K])` read by matmul, else gemm's bTranspose.
    matmul: bool,
}

/// The graph, its inputs' values, and the definition's result.
fn graph(f: &Form, rows: usize, n: usize, k: usize, seed: u64) -> (Graph, Vec<f32>, Vec<f32>) {
    let (lo, hi) = match f.dt {
        DataType::Uint4 => (0, 15),
        DataType::Int4 => (-8, 7),
        DataType::Uint8 => (0, 255),
        _ => (-128, 127),
    };
    let r = random(n * k + 3 * n * k, seed);
    let span = (hi - lo + 1) as f32;
    let q: Vec<f64> = r[..n * k]
        .iter()
        .map(|x| (lo + (((x + 2.0) / 4.0 * span) as i32).min(hi - lo)) as f64)
        .collect();
    let nb = f.blocks[0] * f.blocks[1];
    let scale: Vec<f64> = r[n * k..n * k + nb]
        .iter()
        .map(|x| f32_to_f16_round(0.01 + x.abs() as f64 * 0.01, f.half_scale))
        .collect();
    let zero: Vec<f64> = r[2 * n * k..2 * n * k + nb]
        .iter()
        .map(|x| match f.zero_free {
            true => 0.0,
            false => (lo + (((x + 2.0) / 4.0 * span) as i32).min(hi - lo)) as f64,
        })
        .collect();
    let min: Vec<f64> = r[3 * n * k..3 * n * k + n * f.blocks[1]]
        .iter()
        .map(|&x| x as f64 * 0.1)
        .collect();
    let mut b = GraphBuilder::new();
    let a = b.input("a", desc(DataType::Float32, &[rows, k])).unwrap();
    let qc = constant(&mut b, f.dt, &[n, k], &q);
    let s = match f.half_scale {
        true => {
            let h = constant(&mut b, DataType::Float16, &f.blocks, &scale);
            b.call("cast", &[op(&b, h), Val::String("float32".into())])
                .unwrap()[0]
        }
        false => constant(&mut b, DataType::Float32, &f.blocks, &scale),
    };
    let z = constant(&mut b, f.dt, &f.blocks, &zero);
    let mut w = b
        .call("dequantizeLinear", &[op(&b, qc), op(&b, s), op(&b, z)])
        .unwrap()[0];
    // The block along K and the scale's index of each weight.
    let (bn, bk) = (n / f.blocks[0], k / f.blocks[1]);
    let at = |i: usize, j: usize| (i / bn) * f.blocks[1] + j / bk;
    if f.offset {
        let per = k / f.blocks[1];
        let shaped = b
            .call(
                "reshape",
                &[op(&b, w), list(&[n as f64, f.blocks[1] as f64, per as f64])],
            )
            .unwrap()[0];
        let m = constant(&mut b, DataType::Float32, &[n, f.blocks[1], 1], &min);
        let sum = b.call("add", &[op(&b, shaped), op(&b, m)]).unwrap()[0];
        w = b
            .call("reshape", &[op(&b, sum), list(&[n as f64, k as f64])])
            .unwrap()[0];
    }
    let out = match f.matmul {
        true => {
            let t = b.call("transpose", &[op(&b, w)]).unwrap()[0];
            b.call("matmul", &[op(&b, a), op(&b, t)]).unwrap()[0]
        }
        false => {
            let o = dict(&[("bTranspose", Val::Bool(true))]);
            b.call("gemm", &[op(&b, a), op(&b, w), o]).unwrap()[0]
        }
    };
    let g = b.build(vec![("out".into(), out)]).unwrap();
    let x = random(rows * k, seed + 9);
    let mut want = vec![0f32; rows * n];
    for i in 0..rows {
        for j in 0..n {
            let mut acc = 0f64;
            for t in 0..k {
                let blk = at(j, t);
                let mut wv = ((q[j * k + t] - zero[blk]) * scale[blk]) as f32;
                if f.offset {
                    wv += min[j * f.blocks[1] + t / (k / f.blocks[1])] as f32;
                }
                acc += x[i * k + t] as f64 * wv as f64;
            }
            want[i * n + j] = acc as f32;
        }
    }
    (g, x, want)
}

/// `x` as float16 would hold it, when `half`.
fn f32_to_f16_round(x: f64, half: bool) -> f64 {
    match half {
        true => crate::f16::f16_to_f32(f32_to_f16(x as f32)) as f64,
        false => x,
    }
}

/// Compiles and runs the graph; returns the result and how many products
/// run quantized.
fn run(g: Graph, x: Vec<f32>) -> (Vec<f32>, usize, usize) {
    let g = Arc::new(g);
    let mut cpu = CpuBackend::new();
    cpu.compile(1, g.clone()).unwrap();
    let fused = cpu.graphs[&1].quantized.len();
    let nodes = cpu.graphs[&1].graph.nodes.len();
    let out = cpu.compute(1, &g, vec![Buf::F32(x)]).unwrap();
    (out[0].to_f32_vec(), fused, nodes)
}

fn assert_near(got: &[f32], want: &[f32], what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * w.abs().max(1.0),
            "{what}: element {i}: {g} against {w}"
        );
    }
}

#[test]
fn quantized_weights_run_as_one_product() {
    let (n, k) = (40, 128);
    let forms = [
        // GGUF's Q4_1: blocks of 32, a float16 scale, the minimum added.
        Form {
            dt: DataType::Uint4,
            blocks: [n, k / 32],
            offset: true,
            half_scale: true,
            matmul: false,
            zero_free: false,
        },
        // Q8_0 and ONNX MatMulNBits-style: blocks of 64 / 128, a zero point.
        Form {
            dt: DataType::Int8,
            blocks: [n, k / 64],
            offset: false,
            half_scale: false,
            matmul: true,
            zero_free: false,
        },
        Form {
            dt: DataType::Int4,
            blocks: [n, k / 128],
            offset: false,
            half_scale: false,
            matmul: true,
            zero_free: false,
        },
        // Per row (per output channel) and per tensor.
        Form {
            dt: DataType::Uint8,
            blocks: [n, 1],
            offset: false,
            half_scale: true,
            matmul: false,
            zero_free: false,
        },
        Form {
            dt: DataType::Uint4,
            blocks: [1, 1],
            offset: true,
            half_scale: false,
            matmul: true,
            zero_free: false,
        },
    ];
    for (fi, f) in forms.iter().enumerate() {
        for rows in [1, 5, 12] {
            let (g, x, want) = graph(f, rows, n, k, fi as u64 * 10 + rows as u64);
            // Float16 scales, one per block of 32 (GGUF's layout), are
            // read from their constant; per row, they are not the
            // matrix's per-block scales, which it keeps.
            let mut cpu = CpuBackend::new();
            cpu.compile(1, Arc::new(g.clone())).unwrap();
            let shared = cpu.graphs[&1].quantized.values().all(|q| q.shares_scales());
            assert_eq!(shared, f.half_scale && f.blocks == [n, k / 32], "form {fi}");
            let (got, fused, nodes) = run(g, x);
            assert_eq!(
                (fused, nodes),
                (1, 1),
                "form {fi}: one quantized product, nothing else"
            );
            assert_near(&got, &want, &format!("form {fi} rows {rows}"));
        }
    }
}

#[test]
fn other_forms_run_as_written() {
    let (n, k) = (8, 64);
    // Blocks of 16 along K: two scales in a block of 32.
    let f = Form {
        dt: DataType::Uint4,
        blocks: [n, k / 16],
        offset: false,
        half_scale: false,
        matmul: false,
        zero_free: false,
    };
    let (g, x, want) = graph(&f, 3, n, k, 1);
    let (got, fused, _) = run(g, x);
    assert_eq!(fused, 0);
    assert_near(&got, &want, "blocks of 16");
    // Blocks along N, not K (the product's reduction axis).
    let f = Form {
        dt: DataType::Int8,
        blocks: [n / 2, 1],
        offset: false,
        half_scale: false,
        matmul: false,
        zero_free: false,
    };
    let (g, x, want) = graph(&f, 2, n, k, 2);
    let (got, fused, _) = run(g, x);
    assert_eq!(fused, 1, "a scale per two rows is constant along K");
    assert_near(&got, &want, "blocks along N");
}

/// A float16 product (a float16 model's `MatMulNBits`, and Q4_1 with its
/// minimum added in float16) runs as one quantized product that reads
/// its float16 scales where they lie, and gives the graph's result within
/// what separates them: the graph rounds each weight to float16 (after
/// the dequantization, and again after the offset's add) and the product
/// does not, at most a part in 2^11 of each product term per rounding;
/// both round the output to float16.
#[test]
fn float16_products_run_as_one_product() {
    use crate::f16::f16_to_f32;
    let round16 = |x: f64| f16_to_f32(f32_to_f16(x as f32)) as f64;
    let (n, k) = (40, 128);
    let nb = k / 32;
    for offset in [false, true] {
        for rows in [1, 5, 12] {
            let seed = rows as u64 + 10 * offset as u64;
            let r = random(n * k + 3 * n * nb, seed);
            let q: Vec<f64> = r[..n * k]
                .iter()
                .map(|x| (((x + 2.0) / 4.0 * 16.0) as i32).min(15) as f64)
                .collect();
            let scale: Vec<f64> = r[n * k..n * k + n * nb]
                .iter()
                .map(|x| round16(0.01 + x.abs() as f64 * 0.01))
                .collect();
            let zero: Vec<f64> = r[n * k + n * nb..n * k + 2 * n * nb]
                .iter()
                .map(|x| (((x + 2.0) / 4.0 * 16.0) as i32).min(15) as f64)
                .collect();
            let min: Vec<f64> = r[n * k + 2 * n * nb..]
                .iter()
                .map(|&x| round16(x as f64 * 0.1))
                .collect();
            let mut b = GraphBuilder::new();
            let a = b.input("a", desc(DataType::Float16, &[rows, k])).unwrap();
            let qc = constant(&mut b, DataType::Uint4, &[n, k], &q);
            let sc = constant(&mut b, DataType::Float16, &[n, nb], &scale);
            let zc = constant(&mut b, DataType::Uint4, &[n, nb], &zero);
            let mut w = b
                .call("dequantizeLinear", &[op(&b, qc), op(&b, sc), op(&b, zc)])
                .unwrap()[0];
            if offset {
                let shape = list(&[n as f64, nb as f64, 32.0]);
                let blocks = b.call("reshape", &[op(&b, w), shape]).unwrap()[0];
                let m = constant(&mut b, DataType::Float16, &[n, nb, 1], &min);
                let sum = b.call("add", &[op(&b, blocks), op(&b, m)]).unwrap()[0];
                w = b
                    .call("reshape", &[op(&b, sum), list(&[n as f64, k as f64])])
                    .unwrap()[0];
            }
            let o = dict(&[("bTranspose", Val::Bool(true))]);
            let out = b.call("gemm", &[op(&b, a), op(&b, w), o]).unwrap()[0];
            let g = Arc::new(b.build(vec![("out".into(), out)]).unwrap());
            let x = Buf::f16_from_f32(&random(rows * k, seed + 5));
            let xv = x.to_f32_vec();

            let mut cpu = CpuBackend::new();
            cpu.compile(1, g.clone()).unwrap();
            let cg = &cpu.graphs[&1];
            let what = format!("offset {offset} rows {rows}");
            assert_eq!((cg.quantized.len(), cg.graph.nodes.len()), (1, 1), "{what}");
            assert!(cg.quantized.values().all(|q| q.shares_scales()), "{what}");
            let got = cpu.compute(1, &g, vec![x]).unwrap();
            assert!(matches!(got[0], Buf::F16(_)), "{what}: a float16 output");
            let got = got[0].to_f32_vec();
            for i in 0..rows {
                for j in 0..n {
                    let (mut want, mut mag) = (0f64, 0f64);
                    for t in 0..k {
                        let blk = j * nb + t / 32;
                        let mut wv = round16((q[j * k + t] - zero[blk]) * scale[blk]);
                        if offset {
                            wv = round16(wv + min[blk]);
                        }
                        let term = xv[i * k + t] as f64 * wv;
                        want += term;
                        mag += term.abs();
                    }
                    // One unit in the last place of the float16 result,
                    // and the weights' roundings.
                    let ulp = 2f64.powf((want.abs().max(6.2e-5)).log2().floor() - 10.0);
                    let tol = ulp + mag * 2f64.powi(-10);
                    let g = got[i * n + j] as f64;
                    assert!(
                        (g - want).abs() <= tol,
                        "{what}: [{i}, {j}] {g} against {want}"
                    );
                }
            }
        }
    }
}

/// Two graphs over the same constant bytes share one packed matrix, with
/// per-block offsets and without (a zero point of 0 and nothing added, as
/// in Q8_0 and in graphs that multiply Q4_1's minimum on their own: the
/// offsets then sum to -0.0, which once made every graph pack its own).
#[test]
fn graphs_share_packed_weights() {
    for offset in [true, false] {
        let f = Form {
            dt: DataType::Uint4,
            blocks: [16, 2],
            offset,
            half_scale: true,
            matmul: false,
            zero_free: !offset,
        };
        let (g, ..) = graph(&f, 2, 16, 64, 3);
        let g = Arc::new(g);
        let mut cpu = CpuBackend::new();
        cpu.compile(1, g.clone()).unwrap();
        cpu.compile(2, g.clone()).unwrap();
        let one = cpu.graphs[&1].quantized.values().next().unwrap().clone();
        let two = cpu.graphs[&2].quantized.values().next().unwrap().clone();
        assert!(Arc::ptr_eq(&one, &two), "offset {offset}");
    }
}

/// Packed weights are found by the constants they were made from, not
/// by the codes alone: a graph over the same codes' bytes whose scales
/// are other bytes (here negated) packs its own matrix, and computes what
/// it computes alone.
#[test]
fn graphs_over_other_scales_pack_their_own() {
    use crate::graph::ops::quantize::QuantizeOp;
    use crate::graph::{Op, Source};
    let f = Form {
        dt: DataType::Uint4,
        blocks: [16, 2],
        offset: true,
        half_scale: true,
        matmul: false,
        zero_free: false,
    };
    let (g, x, _) = graph(&f, 2, 16, 64, 3);
    let mut other = g.clone();
    let deq = other
        .nodes
        .iter()
        .find(|n| matches!(n.op, Op::Quantize(QuantizeOp::Dequantize { .. })))
        .unwrap();
    // The scale's constant, behind its cast to float32.
    let mut at = deq.inputs[1];
    while let Source::Node { node, .. } = other.sources[at] {
        at = other.nodes[node].inputs[0];
    }
    let size = other.operands[at].data_type.bits() / 8;
    let Source::Constant(bytes) = &other.sources[at] else {
        panic!("the scale is a constant");
    };
    let mut negated = bytes.as_ref().clone();
    for e in negated.chunks_mut(size) {
        // Little-endian: the sign bit is in the last byte.
        *e.last_mut().unwrap() ^= 0x80;
    }
    other.sources[at] = Source::Constant(Arc::new(negated));
    let (g, other) = (Arc::new(g), Arc::new(other));
    let mut cpu = CpuBackend::new();
    cpu.compile(1, g.clone()).unwrap();
    cpu.compile(2, other.clone()).unwrap();
    let held = |id| cpu.graphs[&id].quantized.values().next().unwrap().clone();
    assert!(!Arc::ptr_eq(&held(1), &held(2)));
    let run = |cpu: &mut CpuBackend, id, g: &Arc<Graph>| {
        cpu.compute(id, g, vec![Buf::F32(x.clone())]).unwrap()[0].to_f32_vec()
    };
    let (first, second) = (run(&mut cpu, 1, &g), run(&mut cpu, 2, &other));
    let mut alone = CpuBackend::new();
    alone.compile(1, other.clone()).unwrap();
    let want = run(&mut alone, 1, &other);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&second), bits(&want));
    assert_ne!(bits(&first), bits(&second));
}

/// A cast of a float16 constant read by a product becomes a constant
/// (which the product then packs) and gives the bits of the cast.
#[test]
fn casts_of_constants_are_computed_once() {
    let (m, k, n) = (2, 3, 4);
    let mut b = GraphBuilder::new();
    let a = b.input("a", desc(DataType::Float32, &[m, k])).unwrap();
    let w: Vec<f64> = (0..k * n).map(|i| i as f64 * 0.37 - 1.1).collect();
    let h = constant(&mut b, DataType::Float16, &[k, n], &w);
    let c = b
        .call("cast", &[op(&b, h), Val::String("float32".into())])
        .unwrap()[0];
    let r = b
        .call("reshape", &[op(&b, c), list(&[k as f64, n as f64])])
        .unwrap()[0];
    let out = b.call("matmul", &[op(&b, a), op(&b, r)]).unwrap()[0];
    let g = Arc::new(b.build(vec![("out".into(), out)]).unwrap());
    let mut cpu = CpuBackend::new();
    cpu.compile(1, g.clone()).unwrap();
    let cg = &cpu.graphs[&1];
    assert_eq!(cg.graph.nodes.len(), 1, "only the matmul is left");
    assert_eq!(cg.packed.len(), 1, "its B is a constant, packed");
    let x = random(m * k, 4);
    let got = cpu.compute(1, &g, vec![Buf::F32(x.clone())]).unwrap()[0].to_f32_vec();
    let wh: Vec<f32> = w
        .iter()
        .map(|&v| crate::f16::f16_to_f32(f32_to_f16(v as f32)))
        .collect();
    let want: Vec<f32> = (0..m * n)
        .map(|t| (0..k).map(|p| x[t / n * k + p] * wh[p * n + t % n]).sum())
        .collect();
    assert_near(&got, &want, "cast folded");
}

#[test]
fn products_read_float16_operands_that_only_they_widen() {
    // matmul(a, cast(h, float32)) with h a float16 input: the cast is
    // gone and the product reads h, with the bits of the graph as
    // written, for few rows of A (the row-vector form) and many (the
    // widened copy), batched and broadcast.
    for (rows, batch_a, batch_b) in [(3, 3, 3), (12, 2, 1), (1, 1, 4)] {
        let (k, n) = (40, 70);
        let batch = batch_a.max(batch_b);
        let mut b = GraphBuilder::new();
        let a = b
            .input("a", desc(DataType::Float32, &[batch_a, rows, k]))
            .unwrap();
        let h = b
            .input("h", desc(DataType::Float16, &[batch_b, k, n]))
            .unwrap();
        let c = b
            .call("cast", &[op(&b, h), Val::String("float32".into())])
            .unwrap()[0];
        let out = b.call("matmul", &[op(&b, a), op(&b, c)]).unwrap()[0];
        let g = Arc::new(b.build(vec![("out".into(), out)]).unwrap());
        let x = random(batch_a * rows * k, 5);
        let hv: Vec<u16> = random(batch_b * k * n, 6)
            .iter()
            .map(|&v| f32_to_f16(v))
            .collect();
        let mut cpu = CpuBackend::new();
        cpu.compile(1, g.clone()).unwrap();
        assert_eq!(
            cpu.graphs[&1].graph.nodes.len(),
            1,
            "only the matmul is left"
        );
        let inputs = || vec![Buf::F32(x.clone()), Buf::F16(hv.clone())];
        let got = cpu.compute(1, &g, inputs()).unwrap()[0].to_f32_vec();
        // The same product of float32 operands, in a graph of its own.
        let mut b = GraphBuilder::new();
        let a = b
            .input("a", desc(DataType::Float32, &[batch_a, rows, k]))
            .unwrap();
        let w = b
            .input("w", desc(DataType::Float32, &[batch_b, k, n]))
            .unwrap();
        let out = b.call("matmul", &[op(&b, a), op(&b, w)]).unwrap()[0];
        let g2 = Arc::new(b.build(vec![("out".into(), out)]).unwrap());
        cpu.compile(2, g2.clone()).unwrap();
        let wide: Vec<f32> = hv.iter().map(|&v| crate::f16::f16_to_f32(v)).collect();
        let want = cpu
            .compute(2, &g2, vec![Buf::F32(x.clone()), Buf::F32(wide)])
            .unwrap()[0]
            .to_f32_vec();
        assert_eq!(got.len(), batch * rows * n);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&got),
            bits(&want),
            "rows {rows}, batches {batch_a} x {batch_b}"
        );
    }
}

#[test]
fn a_widened_operand_that_another_node_reads_stays() {
    let mut b = GraphBuilder::new();
    let a = b.input("a", desc(DataType::Float32, &[2, 3, 4])).unwrap();
    let h = b.input("h", desc(DataType::Float16, &[2, 4, 5])).unwrap();
    let c = b
        .call("cast", &[op(&b, h), Val::String("float32".into())])
        .unwrap()[0];
    let p = b.call("matmul", &[op(&b, a), op(&b, c)]).unwrap()[0];
    let g = Arc::new(b.build(vec![("p".into(), p), ("c".into(), c)]).unwrap());
    let mut cpu = CpuBackend::new();
    cpu.compile(1, g).unwrap();
    assert_eq!(
        cpu.graphs[&1].graph.nodes.len(),
        2,
        "the cast is an output too"
    );
}

/// gemm(a, cast(h), bTranspose) with h a float16 constant: the cast is
/// gone, B is packed from h (no float32 copy of it is kept), and the
/// result has the bits of the cast folded first, for one row and many.
#[test]
fn a_float16_constant_b_is_packed_from_itself() {
    for m in [1, 40] {
        let (k, n) = (18, 70);
        let w: Vec<f64> = random(n * k, 11).iter().map(|&v| v as f64).collect();
        let build = |widen: bool| {
            let mut b = GraphBuilder::new();
            let a = b.input("a", desc(DataType::Float32, &[m, k])).unwrap();
            let bt = if widen {
                let h = constant(&mut b, DataType::Float16, &[n, k], &w);
                b.call("cast", &[op(&b, h), Val::String("float32".into())])
                    .unwrap()[0]
            } else {
                let wh: Vec<f64> = w.iter().map(|&v| f32_to_f16_round(v, true)).collect();
                constant(&mut b, DataType::Float32, &[n, k], &wh)
            };
            let opts = dict(&[("bTranspose", Val::Bool(true))]);
            let out = b.call("gemm", &[op(&b, a), op(&b, bt), opts]).unwrap()[0];
            Arc::new(b.build(vec![("out".into(), out)]).unwrap())
        };
        let x = random(m * k, 12);
        let mut cpu = CpuBackend::new();
        let (g1, g2) = (build(true), build(false));
        cpu.compile(1, g1.clone()).unwrap();
        cpu.compile(2, g2.clone()).unwrap();
        let cg = &cpu.graphs[&1];
        assert_eq!(cg.graph.nodes.len(), 1, "only the gemm is left");
        assert_eq!(cg.packed.len(), 1, "its B is packed");
        let b_id = cg.graph.nodes[0].inputs[1];
        assert_eq!(cg.graph.operands[b_id].data_type, DataType::Float16);
        let got = cpu.compute(1, &g1, vec![Buf::F32(x.clone())]).unwrap()[0].to_f32_vec();
        let want = cpu.compute(2, &g2, vec![Buf::F32(x.clone())]).unwrap()[0].to_f32_vec();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&want), "rows {m}");
    }
}

/// gather(table, ids) with a large int8 or float16 constant table: the
/// table is read where it lies (never converted, so not held twice), and
/// the rows are those of the gather as written, out-of-range and negative
/// indices clamped and wrapped alike; along axis 0 and axis 1.
#[test]
fn gathers_read_large_constant_tables_in_place() {
    for (dt, axis) in [
        (DataType::Int8, 0),
        (DataType::Float16, 1),
        (DataType::Int8, 1),
    ] {
        let (v, k) = (8200, 160);
        let values: Vec<f64> = (0..v * k)
            .map(|i| ((i * 7919) % 255) as f64 - 127.0)
            .collect();
        let ids = [3i32, -1, 8199, 70000, -9000, 0];
        let build = |big: bool| {
            let mut b = GraphBuilder::new();
            let x = b.input("ids", desc(DataType::Int32, &[ids.len()])).unwrap();
            // The same table as a constant, or as an input (run as written).
            let t = match big {
                true => constant(&mut b, dt, &[v, k], &values),
                false => b.input("t", desc(dt, &[v, k])).unwrap(),
            };
            let opts = dict(&[("axis", Val::Number(axis as f64))]);
            let out = b.call("gather", &[op(&b, t), op(&b, x), opts]).unwrap()[0];
            Arc::new(b.build(vec![("out".into(), out)]).unwrap())
        };
        let mut cpu = CpuBackend::new();
        let (g1, g2) = (build(true), build(false));
        cpu.compile(1, g1.clone()).unwrap();
        cpu.compile(2, g2.clone()).unwrap();
        let cg = &cpu.graphs[&1];
        assert_eq!(
            cg.tables.len(),
            1,
            "{dt:?} axis {axis}: the table is read in place"
        );
        assert!(cg.constants.is_empty(), "and never converted");
        let idv = Buf::I32(ids.to_vec());
        let table = match &g1.sources[g1.nodes[0].inputs[0]] {
            crate::graph::Source::Constant(bytes) => Buf::from_bytes(dt, bytes, v * k).unwrap(),
            _ => unreachable!("the first graph's table is a constant"),
        };
        let got = cpu.compute(1, &g1, vec![idv.clone()]).unwrap();
        let want = cpu.compute(2, &g2, vec![idv, table]).unwrap();
        assert_eq!(got, want, "{dt:?} axis {axis}");
    }
}

/// Q4_1's minimum as a graph with llama.cpp's numerics multiplies it (the
/// block sums of the activations, rounded to float16 or not, times the
/// minimums, added to the product over the codes) runs as the one
/// quantized node, and gives the bits of the two products added: the
/// product over the codes from a graph of its own, the minimums' product
/// from a graph that runs as written.
#[test]
fn block_sum_products_fold_into_the_quantized_one() {
    // A decoding step's few rows, and a prefill's (the tiled product).
    for rows in [3, 40] {
        block_sums_fold(rows);
    }
}

fn block_sums_fold(rows: usize) {
    let (n, k) = (40, 96);
    let nb = k / 32;
    let r = random(n * k + 3 * n * nb + rows * k, 11);
    let codes: Vec<f64> = r[..n * k]
        .iter()
        .map(|x| ((x + 1.0) * 7.9) as i64 as f64)
        .collect();
    let at = n * k;
    let scale: Vec<f64> = r[at..at + n * nb]
        .iter()
        .map(|x| 0.01 + x.abs() as f64 * 0.02)
        .collect();
    let mins: Vec<f64> = r[at + n * nb..at + 2 * n * nb]
        .iter()
        .map(|&x| x as f64 * 0.1)
        .collect();
    // Activations that are int8 codes times a float16 scale per block, as
    // the rounding before a product makes them: their block sums are exact.
    let x: Vec<f32> = r[at + 3 * n * nb..]
        .chunks(32)
        .enumerate()
        .flat_map(|(b, blk)| {
            let d = crate::f16::f16_to_f32(f32_to_f16(0.003 + b as f32 * 0.001));
            blk.iter()
                .map(move |v| (v * 127.0).round() * d)
                .collect::<Vec<_>>()
        })
        .collect();
    let cast = |b: &mut GraphBuilder, x: OperandId, to: &str| {
        b.call("cast", &[op(b, x), Val::String(to.into())]).unwrap()[0]
    };
    let bt = || dict(&[("bTranspose", Val::Bool(true))]);
    // The product over the codes ([rows, n]), of `a`.
    let codes_product = |b: &mut GraphBuilder, a: OperandId| {
        let q = constant(b, DataType::Uint4, &[n, k], &codes);
        let s16 = constant(b, DataType::Float16, &[n, nb], &scale);
        let s = cast(b, s16, "float32");
        let z = constant(b, DataType::Uint4, &[n, nb], &vec![0.0; n * nb]);
        let w = b
            .call("dequantizeLinear", &[op(b, q), op(b, s), op(b, z)])
            .unwrap()[0];
        b.call("gemm", &[op(b, a), op(b, w), bt()]).unwrap()[0]
    };
    // The minimums' product ([rows, n]), of `a`.
    let mins_product = |b: &mut GraphBuilder, a: OperandId, round16: bool| {
        let r3 = b
            .call(
                "reshape",
                &[op(b, a), list(&[rows as f64, nb as f64, 32.0])],
            )
            .unwrap()[0];
        let mut s = b
            .call("reduceSum", &[op(b, r3), dict(&[("axes", list(&[2.0]))])])
            .unwrap()[0];
        if round16 {
            let h = cast(b, s, "float16");
            s = cast(b, h, "float32");
        }
        let m16 = constant(b, DataType::Float16, &[n, nb], &mins);
        let m = cast(b, m16, "float32");
        b.call("gemm", &[op(b, s), op(b, m), bt()]).unwrap()[0]
    };
    let xd = || desc(DataType::Float32, &[rows, k]);
    for round16 in [true, false] {
        let mut b = GraphBuilder::new();
        let a = b.input("a", xd()).unwrap();
        let (p, p2) = (codes_product(&mut b, a), mins_product(&mut b, a, round16));
        let sum = b.call("add", &[op(&b, p), op(&b, p2)]).unwrap()[0];
        let g = Arc::new(b.build(vec![("out".into(), sum)]).unwrap());
        let mut cpu = CpuBackend::new();
        cpu.compile(1, g.clone()).unwrap();
        let cg = &cpu.graphs[&1];
        assert_eq!((cg.graph.nodes.len(), cg.sums.len()), (1, 1), "one node");
        // A second graph over the same constants holds the same matrix.
        cpu.compile(4, g.clone()).unwrap();
        let held = |id| cpu.graphs[&id].sums.values().next().unwrap().clone();
        assert!(Arc::ptr_eq(&held(1), &held(4)));
        let got = cpu.compute(1, &g, vec![Buf::F32(x.clone())]).unwrap()[0].to_f32_vec();
        // The two products apart.
        let mut b = GraphBuilder::new();
        let a = b.input("a", xd()).unwrap();
        let p = codes_product(&mut b, a);
        let g1 = Arc::new(b.build(vec![("p".into(), p)]).unwrap());
        let mut b = GraphBuilder::new();
        let a = b.input("a", xd()).unwrap();
        let p2 = mins_product(&mut b, a, round16);
        let g2 = Arc::new(b.build(vec![("p2".into(), p2)]).unwrap());
        cpu.compile(2, g1.clone()).unwrap();
        cpu.compile(3, g2.clone()).unwrap();
        assert!(cpu.graphs[&3].sums.is_empty() && cpu.graphs[&3].quantized.is_empty());
        let one = cpu.compute(2, &g1, vec![Buf::F32(x.clone())]).unwrap()[0].to_f32_vec();
        let two = cpu.compute(3, &g2, vec![Buf::F32(x.clone())]).unwrap()[0].to_f32_vec();
        let want: Vec<u32> = one
            .iter()
            .zip(&two)
            .map(|(p, q)| (p + q).to_bits())
            .collect();
        let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, want, "rows {rows}, round16 {round16}");
    }
}

/// The rounding of activations to int8 blocks and back, as llama.cpp's
/// numerics write it, runs as one node with the bits of the ten it
/// stands for: against the same graph with its zero point an input
/// (which leaves it as written), over blocks with ties, zeros, a NaN,
/// an infinity and huge and tiny values, with the scale through float16
/// and without, the floor on either side of the max, and enough of them
/// to run in parallel.
#[test]
fn rounded_blocks_run_as_one_node_with_the_same_bits() {
    // 400 rows of 192: more than 64 K values, so the fused node splits
    // them between tasks.
    let (rows, nb) = (400, 6);
    let k = nb * 32;
    let mut x: Vec<f32> = random(rows * k, 21).iter().map(|v| v * 3.0).collect();
    // Block 1: all zeros, one of them negative.
    x[32..64].fill(0.0);
    x[40] = -0.0;
    // Block 2: halves of the step (ties: max 127 gives a scale of 1).
    for (j, v) in x[64..96].iter_mut().enumerate() {
        *v = j as f32 - 15.5;
    }
    x[64] = 127.0;
    // Block 3: a NaN; block 4: an infinity; block 5: huge and tiny.
    x[100] = f32::NAN;
    x[130] = f32::NEG_INFINITY;
    x[160] = 3.0e38;
    x[161] = 1.0e-40;
    let cast = |b: &mut GraphBuilder, x: OperandId, to: &str| {
        b.call("cast", &[op(b, x), Val::String(to.into())]).unwrap()[0]
    };
    let build = |round16: bool, floor_first: bool, zero_input: bool| {
        let mut b = GraphBuilder::new();
        let a = b.input("a", desc(DataType::Float32, &[rows, k])).unwrap();
        let z = match zero_input {
            true => b.input("z", desc(DataType::Int8, &[rows, nb, 1])).unwrap(),
            false => constant(
                &mut b,
                DataType::Int8,
                &[rows, nb, 1],
                &vec![0.0; rows * nb],
            ),
        };
        let shape = list(&[rows as f64, nb as f64, 32.0]);
        let blocks = b.call("reshape", &[op(&b, a), shape]).unwrap()[0];
        let abs = b.call("abs", &[op(&b, blocks)]).unwrap()[0];
        let keep = dict(&[("axes", list(&[2.0])), ("keepDimensions", Val::Bool(true))]);
        let amax = b.call("reduceMax", &[op(&b, abs), keep]).unwrap()[0];
        let c = constant(&mut b, DataType::Float32, &[], &[127.0]);
        let d = b.call("div", &[op(&b, amax), op(&b, c)]).unwrap()[0];
        let t = constant(&mut b, DataType::Float32, &[], &[1e-30]);
        let (l, r) = if floor_first { (t, d) } else { (d, t) };
        let safe = b.call("max", &[op(&b, l), op(&b, r)]).unwrap()[0];
        let q = b
            .call("quantizeLinear", &[op(&b, blocks), op(&b, safe), op(&b, z)])
            .unwrap()[0];
        let s = match round16 {
            true => {
                let h = cast(&mut b, d, "float16");
                cast(&mut b, h, "float32")
            }
            false => d,
        };
        let y = b
            .call("dequantizeLinear", &[op(&b, q), op(&b, s), op(&b, z)])
            .unwrap()[0];
        let out = b
            .call("reshape", &[op(&b, y), list(&[rows as f64, k as f64])])
            .unwrap()[0];
        Arc::new(b.build(vec![("y".into(), out)]).unwrap())
    };
    for (round16, floor_first) in [(true, false), (false, true), (true, true)] {
        let mut cpu = CpuBackend::new();
        let fused = build(round16, floor_first, false);
        cpu.compile(1, fused.clone()).unwrap();
        let cg = &cpu.graphs[&1];
        assert_eq!(
            (cg.rounds.len(), cg.graph.nodes.len()),
            (1, 3),
            "reshape, rounding, reshape"
        );
        let got = cpu.compute(1, &fused, vec![Buf::F32(x.clone())]).unwrap()[0].to_f32_vec();
        let plain = build(round16, floor_first, true);
        cpu.compile(2, plain.clone()).unwrap();
        assert!(
            cpu.graphs[&2].rounds.is_empty(),
            "a zero point that is an input stays"
        );
        let zeros = Buf::I8(vec![0; rows * nb]);
        let want = cpu
            .compute(2, &plain, vec![Buf::F32(x.clone()), zeros])
            .unwrap()[0]
            .to_f32_vec();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&got),
            bits(&want),
            "round16 {round16}, floor first {floor_first}"
        );
        // The blocks did round: some value is not its input.
        assert!(got.iter().zip(&x).any(|(g, x)| g != x && x.is_finite()));
    }
}

/// A masked softmax rounded through float16, as a language model's
/// attention writes it, runs as one node and gives the bits of its nodes
/// run one by one; so do a masked softmax without the rounding and a
/// rounded one without a mask.
#[test]
fn masked_rounded_softmax_runs_as_one_node_with_the_same_bits() {
    let (h, g, t, w) = (3, 2, 5, 37);
    let len = h * g * t * w;
    let x: Vec<f32> = random(len, 31).iter().map(|v| v * 6.0).collect();
    // A causal mask of -1e9 above the diagonal, and one fully masked row.
    let mut mask: Vec<f32> = (0..t * w)
        .map(|i| if i % w > i / w + 30 { -1e9 } else { 0.0 })
        .collect();
    mask[2 * w..3 * w].fill(f32::NEG_INFINITY);
    let cast = |b: &mut GraphBuilder, x: OperandId, to: &str| {
        b.call("cast", &[op(b, x), Val::String(to.into())]).unwrap()[0]
    };
    let cpu_run = |graph: Arc<Graph>, inputs: Vec<Buf>, nodes: Option<usize>| {
        let mut cpu = CpuBackend::new();
        cpu.compile(1, graph.clone()).unwrap();
        if let Some(n) = nodes {
            assert_eq!(cpu.graphs[&1].softmaxes.len(), 1);
            let ops: Vec<_> = cpu.graphs[&1]
                .graph
                .nodes
                .iter()
                .map(|n| format!("{:?}", n.op))
                .collect();
            assert_eq!(cpu.graphs[&1].graph.nodes.len(), n, "{ops:?}");
        }
        cpu.compute(1, &graph, inputs).unwrap()[0].to_f32_vec()
    };
    // The mask as [t, w] or [1, 1, t, w]; with it and the rounding, or
    // one of them.
    // x a graph input, or an intermediate (x times 1) that the fused node
    // takes over as its output.
    for (mask_shape, masked, round16, computed) in [
        (vec![t, w], true, true, false),
        (vec![t, w], true, true, true),
        (vec![1, 1, t, w], true, true, false),
        (vec![t, w], true, false, true),
        (vec![t, w], false, true, true),
    ] {
        let mut b = GraphBuilder::new();
        let xi = b
            .input("x", desc(DataType::Float32, &[h, g, t, w]))
            .unwrap();
        let xi = match computed {
            true => {
                let one = constant(&mut b, DataType::Float32, &[], &[1.0]);
                b.call("mul", &[op(&b, xi), op(&b, one)]).unwrap()[0]
            }
            false => xi,
        };
        let mi = b.input("m", desc(DataType::Float32, &mask_shape)).unwrap();
        let a = match masked {
            true => b.call("add", &[op(&b, xi), op(&b, mi)]).unwrap()[0],
            false => xi,
        };
        let s = b.call("softmax", &[op(&b, a), Val::Number(3.0)]).unwrap()[0];
        let y = match round16 {
            true => {
                let r = b
                    .call(
                        "reshape",
                        &[op(&b, s), list(&[h as f64, (g * t) as f64, w as f64])],
                    )
                    .unwrap()[0];
                let half = cast(&mut b, r, "float16");
                cast(&mut b, half, "float32")
            }
            false => s,
        };
        let mut outs = vec![("y".to_string(), y)];
        if !masked {
            // The mask input must be read by something.
            outs.push((
                "m".to_string(),
                b.call("identity", &[op(&b, mi)]).unwrap()[0],
            ));
        }
        let fused = Arc::new(b.build(outs).unwrap());
        let nodes = usize::from(!masked) + usize::from(computed) + 1;
        let got = cpu_run(
            fused,
            vec![Buf::F32(x.clone()), Buf::F32(mask.clone())],
            Some(nodes),
        );

        // The same nodes one graph each.
        let one = |name: &str,
                   args: &dyn Fn(&mut GraphBuilder, OperandId, OperandId) -> OperandId,
                   v: Vec<f32>| {
            let mut b = GraphBuilder::new();
            let xi = b
                .input("x", desc(DataType::Float32, &[h, g, t, w]))
                .unwrap();
            let mi = b.input("m", desc(DataType::Float32, &mask_shape)).unwrap();
            let y = args(&mut b, xi, mi);
            let keep = b.call("identity", &[op(&b, mi)]).unwrap()[0];
            let graph = Arc::new(
                b.build(vec![(name.to_string(), y), ("m".into(), keep)])
                    .unwrap(),
            );
            cpu_run(graph, vec![Buf::F32(v), Buf::F32(mask.clone())], None)
        };
        let mut want = x.clone();
        if masked {
            want = one(
                "a",
                &|b, x, m| b.call("add", &[op(b, x), op(b, m)]).unwrap()[0],
                want,
            );
        }
        want = one(
            "s",
            &|b, x, _| b.call("softmax", &[op(b, x), Val::Number(3.0)]).unwrap()[0],
            want,
        );
        if round16 {
            want = one(
                "r",
                &|b, x, _| {
                    let half = b
                        .call("cast", &[op(b, x), Val::String("float16".into())])
                        .unwrap()[0];
                    b.call("cast", &[op(b, half), Val::String("float32".into())])
                        .unwrap()[0]
                },
                want,
            );
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&got),
            bits(&want),
            "mask {mask_shape:?} {masked} round16 {round16}"
        );
        // Not vacuous: the rows are probabilities, some of them rounded.
        assert!(got.iter().any(|&p| p > 0.0 && p < 1.0));
    }
}

/// SwiGLU over the two halves of one product, as a language model's
/// feed-forward block writes it, runs as one node reading the product
/// where it lies, and gives the bits of its nodes run one by one; so
/// does one over separate operands, with the products either way round.
#[test]
fn swiglu_over_a_products_halves_runs_as_one_node_with_the_same_bits() {
    let n = 37;
    for (rows, gate_first, sliced, swapped) in [
        (5, true, true, false),
        (1, true, true, true),
        (4, false, true, false),
        (3, true, false, true),
    ] {
        let y: Vec<f32> = random(rows * 2 * n, 41 + rows as u64)
            .iter()
            .map(|v| v * 8.0)
            .collect();
        let (go, uo) = if gate_first { (0, n) } else { (n, 0) };
        let mut b = GraphBuilder::new();
        let yi = b
            .input("y", desc(DataType::Float32, &[rows, 2 * n]))
            .unwrap();
        let half = |b: &mut GraphBuilder, at: usize| {
            let starts = list(&[0.0, at as f64]);
            let sizes = list(&[rows as f64, n as f64]);
            b.call("slice", &[op(b, yi), starts, sizes]).unwrap()[0]
        };
        let (g, u) = match sliced {
            true => (half(&mut b, go), half(&mut b, uo)),
            // Separate operands: each half times 1 (the same values).
            false => {
                let one = constant(&mut b, DataType::Float32, &[], &[1.0]);
                let (g0, u0) = (half(&mut b, go), half(&mut b, uo));
                (
                    b.call("mul", &[op(&b, g0), op(&b, one)]).unwrap()[0],
                    b.call("mul", &[op(&b, u0), op(&b, one)]).unwrap()[0],
                )
            }
        };
        let s = b.call("sigmoid", &[op(&b, g)]).unwrap()[0];
        let (a, c) = if swapped { (s, g) } else { (g, s) };
        let p = b.call("mul", &[op(&b, a), op(&b, c)]).unwrap()[0];
        let (a, c) = if swapped { (u, p) } else { (p, u) };
        let h = b.call("mul", &[op(&b, a), op(&b, c)]).unwrap()[0];
        let fused = Arc::new(b.build(vec![("h".into(), h)]).unwrap());
        let mut cpu = CpuBackend::new();
        cpu.compile(1, fused.clone()).unwrap();
        let cg = &cpu.graphs[&1];
        assert_eq!(cg.swiglus.len(), 1);
        // Sliced: the one node; else the two halves' slices and products.
        assert_eq!(cg.graph.nodes.len(), if sliced { 1 } else { 5 });
        let got = cpu.compute(1, &fused, vec![Buf::F32(y.clone())]).unwrap()[0].to_f32_vec();

        // The nodes one graph each.
        let mut run =
            |id: u64,
             shape: &[usize],
             args: &[&[f32]],
             f: &dyn Fn(&mut GraphBuilder, &[OperandId]) -> OperandId| {
                let mut b = GraphBuilder::new();
                let ins: Vec<OperandId> = (0..args.len())
                    .map(|i| {
                        b.input(&format!("i{i}"), desc(DataType::Float32, shape))
                            .unwrap()
                    })
                    .collect();
                let out = f(&mut b, &ins);
                let graph = Arc::new(b.build(vec![("o".into(), out)]).unwrap());
                cpu.compile(id, graph.clone()).unwrap();
                let inputs = args.iter().map(|a| Buf::F32(a.to_vec())).collect();
                cpu.compute(id, &graph, inputs).unwrap()[0].to_f32_vec()
            };
        let cut = |off: usize| -> Vec<f32> {
            (0..rows)
                .flat_map(|r| y[r * 2 * n + off..r * 2 * n + off + n].to_vec())
                .collect()
        };
        let (gv, uv) = (cut(go), cut(uo));
        let sv = run(2, &[rows, n], &[&gv], &|b, i| {
            b.call("sigmoid", &[op(b, i[0])]).unwrap()[0]
        });
        let pv = run(3, &[rows, n], &[&gv, &sv], &|b, i| {
            b.call("mul", &[op(b, i[0]), op(b, i[1])]).unwrap()[0]
        });
        let want = run(4, &[rows, n], &[&pv, &uv], &|b, i| {
            b.call("mul", &[op(b, i[0]), op(b, i[1])]).unwrap()[0]
        });
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&got),
            bits(&want),
            "rows {rows} gate first {gate_first} sliced {sliced}"
        );
        assert!(got.iter().any(|&v| v != 0.0));
    }
}

/// RoPE on adjacent pairs, as a language model's graph writes it over a
/// slice of its Q/K/V product, runs as one node reading the product's
/// rows where they lie and gives the bits of its nodes run one by one;
/// so does one over a dense operand, with the sums and products either
/// way round and factors shared by every row.
#[test]
fn rope_over_a_products_rows_runs_as_one_node_with_the_same_bits() {
    let (heads, p) = (4, 4);
    let w = heads * p * 2;
    for (t, sliced, swapped, per_row) in [
        (5, true, false, true),
        (1, true, true, true),
        (3, false, true, true),
        (4, true, false, false),
    ] {
        let wide = w + 8;
        let y: Vec<f32> = random(t * wide, 51 + t as u64)
            .iter()
            .map(|v| v * 3.0)
            .collect();
        let fshape = [if per_row { t } else { 1 }, 1, p, 2];
        let flen = fshape.iter().product::<usize>();
        let c: Vec<f32> = random(flen, 61).to_vec();
        let s: Vec<f32> = random(flen, 62).to_vec();
        let mut b = GraphBuilder::new();
        let yi = b.input("y", desc(DataType::Float32, &[t, wide])).unwrap();
        let ci = b.input("c", desc(DataType::Float32, &fshape)).unwrap();
        let si = b.input("s", desc(DataType::Float32, &fshape)).unwrap();
        let shape4 = list(&[t as f64, heads as f64, p as f64, 2.0]);
        let r = match sliced {
            true => {
                let starts = list(&[0.0, 4.0]);
                let sizes = list(&[t as f64, w as f64]);
                let x = b.call("slice", &[op(&b, yi), starts, sizes]).unwrap()[0];
                b.call("reshape", &[op(&b, x), shape4]).unwrap()[0]
            }
            // A dense operand: the rows times 1 (the same values).
            false => {
                let one = constant(&mut b, DataType::Float32, &[], &[1.0]);
                let starts = list(&[0.0, 4.0]);
                let sizes = list(&[t as f64, w as f64]);
                let x = b.call("slice", &[op(&b, yi), starts, sizes]).unwrap()[0];
                let x = b.call("reshape", &[op(&b, x), shape4]).unwrap()[0];
                b.call("mul", &[op(&b, x), op(&b, one)]).unwrap()[0]
            }
        };
        let axes = dict(&[("axes", list(&[3.0]))]);
        let rev = b.call("reverse", &[op(&b, r), axes]).unwrap()[0];
        let (a1, a2) = if swapped { (ci, r) } else { (r, ci) };
        let m1 = b.call("mul", &[op(&b, a1), op(&b, a2)]).unwrap()[0];
        let (b1, b2) = if swapped { (si, rev) } else { (rev, si) };
        let m2 = b.call("mul", &[op(&b, b1), op(&b, b2)]).unwrap()[0];
        let (s1, s2) = if swapped { (m2, m1) } else { (m1, m2) };
        let out = b.call("add", &[op(&b, s1), op(&b, s2)]).unwrap()[0];
        let fused = Arc::new(b.build(vec![("o".into(), out)]).unwrap());
        let mut cpu = CpuBackend::new();
        cpu.compile(1, fused.clone()).unwrap();
        let cg = &cpu.graphs[&1];
        assert_eq!(cg.ropes.len(), 1);
        // Sliced: the one node; dense: the slice, reshape and product too.
        assert_eq!(cg.graph.nodes.len(), if sliced { 1 } else { 4 });
        let inputs = vec![
            Buf::F32(y.clone()),
            Buf::F32(c.clone()),
            Buf::F32(s.clone()),
        ];
        let got = cpu.compute(1, &fused, inputs).unwrap()[0].to_f32_vec();

        // The nodes one graph each.
        let x4: Vec<f32> = (0..t)
            .flat_map(|r| y[r * wide + 4..r * wide + 4 + w].to_vec())
            .collect();
        let shape = [t, heads, p, 2];
        let mut id = 1;
        let mut run =
            |ins: &[(&[usize], &[f32])],
             f: &dyn Fn(&mut GraphBuilder, &[OperandId]) -> OperandId| {
                id += 1;
                let mut b = GraphBuilder::new();
                let ids: Vec<OperandId> = ins
                    .iter()
                    .enumerate()
                    .map(|(i, (sh, _))| {
                        b.input(&format!("i{i}"), desc(DataType::Float32, sh))
                            .unwrap()
                    })
                    .collect();
                let o = f(&mut b, &ids);
                let graph = Arc::new(b.build(vec![("o".into(), o)]).unwrap());
                cpu.compile(id, graph.clone()).unwrap();
                let bufs = ins.iter().map(|(_, v)| Buf::F32(v.to_vec())).collect();
                cpu.compute(id, &graph, bufs).unwrap()[0].to_f32_vec()
            };
        let rv = run(&[(&shape, &x4)], &|b, i| {
            b.call("reverse", &[op(b, i[0]), dict(&[("axes", list(&[3.0]))])])
                .unwrap()[0]
        });
        let mul = |b: &mut GraphBuilder, i: &[OperandId]| {
            b.call("mul", &[op(b, i[0]), op(b, i[1])]).unwrap()[0]
        };
        let p1 = run(&[(&shape, &x4), (&fshape, &c)], &mul);
        let p2 = run(&[(&shape, &rv), (&fshape, &s)], &mul);
        let want = run(&[(&shape, &p1), (&shape, &p2)], &|b, i| {
            b.call("add", &[op(b, i[0]), op(b, i[1])]).unwrap()[0]
        });
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(&got),
            bits(&want),
            "t {t} sliced {sliced} swapped {swapped}"
        );
    }
}

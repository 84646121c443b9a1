//! The blocked kernels in the other layouts and float types: networks
//! built in nhwc run on them with the bits of NCHW, float16 networks with
//! their nodes' rounding, and a first layer's plain form takes either.

use super::*;
use crate::graph::ops::shape::ConcatParams;

/// `g` (NCHW, as [`Block::graph`] builds it) with every convolution and
/// pooling in nhwc: its 4-D activations `[n, h, w, c]`, the filters
/// unchanged (OIHW), so that it computes the same function.
pub(super) fn in_nhwc(g: &Graph) -> Graph {
    let mut g = g.clone();
    let constant: Vec<bool> = g
        .sources
        .iter()
        .map(|s| matches!(s, Source::Constant(_)))
        .collect();
    for (d, &c) in g.operands.iter_mut().zip(&constant) {
        if let (&[n, ch, h, w], false) = (&d.shape[..], c) {
            d.shape = vec![n, h, w, ch];
        }
    }
    for node in &mut g.nodes {
        match &mut node.op {
            Op::Conv2d(p) => p.nhwc = true,
            Op::Pool2d(p) => p.nhwc = true,
            // Channels are the last axis in nhwc.
            Op::Concat(ConcatParams { axis }) if *axis == 1 => *axis = 3,
            _ => {}
        }
    }
    g
}

/// `x` of shape `[n, c, h, w]` in `[n, h, w, c]`, or back (`back`, the
/// same dims named as NCHW).
pub(super) fn nhwc_of(
    x: &[f32],
    (n, c, h, w): (usize, usize, usize, usize),
    back: bool,
) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for b in 0..n {
        for ci in 0..c {
            for q in 0..h * w {
                let (nchw, nhwc) = ((b * c + ci) * h * w + q, (b * h * w + q) * c + ci);
                match back {
                    false => out[nhwc] = x[nchw],
                    true => out[nchw] = x[nhwc],
                }
            }
        }
    }
    out
}

/// An inverted residual block with a 3x3 depthwise convolution padded
/// by 1 (MobileNetV2's), input `x`, `c` expanded channels, stride `s`.
fn padded_3x3(
    x: (usize, usize, usize, usize),
    expand: bool,
    c: usize,
    s: usize,
    project: Option<usize>,
    residual: bool,
) -> Block {
    block3x3(x, expand, c, [1; 4], s, project, residual)
}

/// The same networks in nhwc run on the blocked kernels as in NCHW: the
/// same convolutions blocked, the same chains, residual sums and global
/// pooling, and the same bits (the layout changes at the ends are
/// copies), on every form of the kernels.
#[test]
fn nhwc_networks_run_blocked_with_the_bits_of_nchw() {
    use crate::backend::Backend;
    use crate::graph::ops::conv::{Pool2dParams, PoolKind};
    if !available() {
        return;
    }
    let block = padded_3x3;
    let mut graphs: Vec<(Graph, (usize, usize, usize, usize))> = [
        block((1, 16, 30, 29), true, 32, 1, Some(16), true),
        block((2, 8, 57, 60), true, 24, 2, Some(16), false),
        block((1, 16, 28, 28), false, 16, 1, Some(8), false),
        block((1, 8, 9, 7), true, 16, 1, None, false),
    ]
    .iter()
    .map(|b| (b.graph(), b.x))
    .collect();
    // A Winograd 3x3 (padded, from the graph input, so NCHW's form reads
    // its input unblocked) into a global average pool.
    {
        let (n, c, h) = (1, 16, 10);
        let mut g = Builder::new(&[n, c, h, h]);
        let y = g.conv(0, params((n, c, h, h), (24, 3, 3), [1; 4], 1, 1, 1));
        let pool = Pool2dParams {
            kind: PoolKind::Average,
            nhwc: false,
            window: [h, h],
            padding: [0; 4],
            strides: [1, 1],
            dilations: [1, 1],
            batch: n,
            channels: 24,
            in_h: h,
            in_w: h,
            out_h: 1,
            out_w: 1,
        };
        let y = g.push(Op::Pool2d(pool), vec![y], &[n, 24, 1, 1]);
        graphs.push((g.output(y), (n, c, h, h)));
    }
    for (i, (nchw, x)) in graphs.into_iter().enumerate() {
        let nhwc = in_nhwc(&nchw);
        let mut cpu = crate::backend::cpu::CpuBackend::new();
        cpu.compile(1, Arc::new(nchw.clone())).unwrap();
        cpu.compile(2, Arc::new(nhwc.clone())).unwrap();
        let shape = |id: u64| {
            let cg = &cpu.graphs[&id];
            let pl = cg.nchwc.as_ref().expect("a plan");
            let nodes = 0..cg.graph.nodes.len();
            nodes
                .map(|m| {
                    (
                        pl.conv(m).map(std::mem::discriminant),
                        pl.chain(m).is_some(),
                        pl.sum(m).is_some(),
                        pl.is_pool(m),
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(shape(1), shape(2), "case {i}: the plans differ");
        assert!(
            shape(2).iter().any(|s| s.0.is_some()),
            "case {i}: nothing blocked"
        );
        let xs = random(x.0 * x.1 * x.2 * x.3, i as u64 + 3);
        let out = &nchw.operands[nchw.outputs[0].1].shape;
        let od = (out[0], out[1], out[2], out[3]);
        for isa in isas() {
            for id in [1, 2] {
                let cg = cpu.graphs.get_mut(&id).unwrap();
                cg.nchwc = plan_for(&cg.graph, &cg.constants, isa);
            }
            let want = run_graph(&mut cpu, 1, &nchw, &xs).remove(0);
            let got = run_graph(&mut cpu, 2, &nhwc, &nhwc_of(&xs, x, false)).remove(0);
            assert!(
                same_bits(&nhwc_of(&got, od, true), &want),
                "case {i} {isa:?}"
            );
        }
    }
}

/// The nhwc layout changes place each element as the layout defines
/// (checked by plain indexing), invert each other, and refuse channels
/// that are not whole blocks; in parallel (large) and not.
#[test]
fn nhwc_layout_changes_place_each_element_and_invert() {
    for (n, c, h, w) in [(2, 16, 3, 5), (1, 24, 70, 70), (3, 8, 1, 1)] {
        let d = f32d(&[n, h, w, c]);
        let x: Vec<f32> = (0..n * c * h * w).map(|i| i as f32).collect();
        let b = nhwc_relayout(&Buf::F32(x.clone()), &d, true).unwrap();
        let want = block(&nhwc_of(&x, (n, c, h, w), true), (n, c, h, w));
        assert!(same_bits(&b.to_f32_vec(), &want), "{n} {c} {h} {w}");
        let back = nhwc_relayout(&b, &d, false).unwrap();
        assert!(same_bits(&back.to_f32_vec(), &x));
    }
    let bad = f32d(&[1, 1, 1, 12]);
    assert!(nhwc_relayout(&Buf::F32(vec![0.0; 12]), &bad, true).is_err());
}

/// `g` (float32, as [`Block::graph`] builds it) in float16: every
/// operand, constants rounded to float16.
pub(super) fn in_half(g: &Graph) -> Graph {
    let mut g = g.clone();
    for d in &mut g.operands {
        d.data_type = DataType::Float16;
    }
    for s in &mut g.sources {
        if let Source::Constant(b) = s {
            let halves = b
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .flat_map(|x| crate::f16::f32_to_f16(x).to_le_bytes());
            *s = Source::Constant(Arc::new(halves.collect()));
        }
    }
    g
}

/// float16 networks run on the blocked kernels (in both layouts), with
/// their residual adds blocked but not summed in the convolutions'
/// epilogue (which would round once where the nodes round twice), their
/// depthwise blocks as chains where the planes are large enough (each
/// stage rounded as its node: `float16_depthwise_chains_give_the_bits_of_their_nodes`),
/// and agree with the paths of `conv/` within the one float16 rounding
/// that a different summation order can move.
#[test]
fn float16_networks_run_blocked_and_round_as_their_nodes() {
    use crate::backend::Backend;
    if !available() {
        return;
    }
    let block = padded_3x3;
    let cases = [
        block((1, 16, 30, 29), true, 32, 1, Some(16), true),
        block((2, 8, 17, 20), true, 24, 2, Some(16), false),
    ];
    for (i, b) in cases.iter().enumerate() {
        for nhwc in [false, true] {
            let f32g = b.graph();
            let g = Arc::new(in_half(&match nhwc {
                true => in_nhwc(&f32g),
                false => f32g,
            }));
            let mut cpu = crate::backend::cpu::CpuBackend::new();
            cpu.compile(1, g.clone()).unwrap();
            cpu.compile(2, g.clone()).unwrap();
            cpu.graphs.get_mut(&2).unwrap().nchwc = None;
            let cg = &cpu.graphs[&1];
            let pl = cg.nchwc.as_ref().expect("a plan");
            let nodes = 0..cg.graph.nodes.len();
            let convs = nodes.clone().filter(|&m| pl.conv(m).is_some()).count();
            let want = [b.residual, b.expand, true, b.project.is_some()];
            assert_eq!(convs, want.iter().filter(|&&c| c).count(), "case {i}");
            assert!(nodes.clone().all(|m| pl.sum(m).is_none()));
            // The first case's planes are chained (870 pixels), the
            // second's too small to be (90).
            let chained = nodes.clone().any(|m| pl.chain(m).is_some());
            assert_eq!(chained, i == 0, "case {i}");
            let out = cg.graph.outputs[0].1;
            let add = cg
                .graph
                .nodes
                .iter()
                .position(|n| matches!(n.op, Op::Binary(_)));
            if let Some(a) = add {
                assert!(pl.is_half(cg.graph.nodes[a].outputs[0]), "case {i}: add");
            }
            assert!(pl.is_half(out), "case {i}");
            let x = random(b.x.0 * b.x.1 * b.x.2 * b.x.3, i as u64 + 9);
            let xh = Buf::f16_from_f32(&x);
            let run = |cpu: &mut crate::backend::cpu::CpuBackend, id| {
                let r = cpu.compute(id, &g, vec![xh.clone()]).unwrap().remove(0);
                assert!(matches!(r, Buf::F16(_)), "case {i}: a float16 result");
                r.to_f32_vec()
            };
            let (got, want) = (run(&mut cpu, 1), run(&mut cpu, 2));
            assert_within_a_half_step(&got, &want, &format!("case {i} nhwc {nhwc}"));
        }
    }
}

/// A first layer over 3 channels (the plain form, which reads its input
/// as NCHW float32) runs blocked from an nhwc or float16 input too, put
/// in that form first: nhwc with the bits of NCHW, float16 within one
/// float16 step of the node-by-node paths, on every form of the kernels.
#[test]
fn plain_first_layers_take_nhwc_and_float16_inputs() {
    use crate::backend::Backend;
    if !available() {
        return;
    }
    let x = (2, 3, 23, 21);
    let mut b = Builder::new(&[x.0, x.1, x.2, x.3]);
    let y = b.conv(0, params(x, (16, 3, 3), [1; 4], 2, 1, 1));
    let y = b.relu6(y, &[2, 16, 12, 11]);
    let y = b.conv(y, params((2, 16, 12, 11), (8, 1, 1), [0; 4], 1, 1, 1));
    let nchw = b.output(y);
    let od = (2, 8, 12, 11);
    let nhwc = in_nhwc(&nchw);
    let xs = random(x.0 * x.1 * x.2 * x.3, 31);
    let mut cpu = crate::backend::cpu::CpuBackend::new();
    let graphs = [nchw.clone(), nhwc.clone(), in_half(&nchw), in_half(&nhwc)];
    for (id, g) in graphs.iter().enumerate() {
        cpu.compile(id as u64, Arc::new(g.clone())).unwrap();
    }
    // The float16 graphs again, on the node-by-node paths.
    for (id, g) in graphs.iter().enumerate().skip(2) {
        cpu.compile(id as u64 + 10, Arc::new(g.clone())).unwrap();
        cpu.graphs.get_mut(&(id as u64 + 10)).unwrap().nchwc = None;
    }
    for isa in isas() {
        for id in 0..4u64 {
            let cg = cpu.graphs.get_mut(&id).unwrap();
            cg.nchwc = plan_for(&cg.graph, &cg.constants, isa);
            let pl = cg.nchwc.as_ref().expect("a plan");
            assert!(
                matches!(pl.conv(0), Some(Conv::Direct { plain: true, .. })),
                "graph {id} {isa:?}: the first layer is not blocked"
            );
        }
        let want = run_graph(&mut cpu, 0, &nchw, &xs).remove(0);
        let got = run_graph(&mut cpu, 1, &nhwc, &nhwc_of(&xs, x, false)).remove(0);
        assert!(same_bits(&nhwc_of(&got, od, true), &want), "nhwc {isa:?}");
        for id in [2u64, 3] {
            let input = match id {
                2 => xs.clone(),
                _ => nhwc_of(&xs, x, false),
            };
            let xh = Buf::f16_from_f32(&input);
            let g = &graphs[id as usize];
            let mut run = |id: u64| {
                let r = cpu.compute(id, g, vec![xh.clone()]).unwrap().remove(0);
                assert!(matches!(r, Buf::F16(_)), "graph {id}: a float16 result");
                r.to_f32_vec()
            };
            let (got, want) = (run(id), run(id + 10));
            assert_within_a_half_step(&got, &want, &format!("graph {id} {isa:?}"));
        }
    }
}

/// float16 results `got` against `want` computed in another summation
/// order: each within one float16 step (2^-10 of the value's binade, or
/// the smallest normal's step near zero), and most of them equal (both
/// orders round to the same half).
fn assert_within_a_half_step(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    let mut moved = 0;
    for (a, w) in got.iter().zip(want) {
        let step = (w.abs().max(a.abs()) * 2f32.powi(-10)).max(2f32.powi(-24));
        assert!((a - w).abs() <= step * 1.001, "{what}: {a} vs {w}");
        moved += usize::from(a != w);
    }
    assert!(
        moved * 20 < got.len(),
        "{what}: {moved} of {} moved",
        got.len()
    );
}

use std::sync::Arc;

use super::*;
use crate::backend::testing::random;
use crate::graph::ops::elementwise::ClampParams;
use crate::graph::ops::elementwise::{BinaryKind, UnaryKind};
use crate::graph::{Node, Source};

/// conv/tests.rs's test parameters, square strides and dilations, with a
/// bias.
fn params(
    x: (usize, usize, usize, usize),
    o: (usize, usize, usize),
    padding: [usize; 4],
    s: usize,
    d: usize,
    groups: usize,
) -> Conv2dParams {
    Conv2dParams {
        has_bias: true,
        ..crate::backend::cpu::conv::tests::params(x, o, padding, [s, s], [d, d], groups)
    }
}

fn f32d(shape: &[usize]) -> OperandDescriptor {
    OperandDescriptor {
        data_type: DataType::Float32,
        shape: shape.to_vec(),
    }
}

/// A node of one output.
fn node(op: Op, inputs: Vec<usize>, out: usize) -> Node {
    Node {
        op,
        inputs,
        outputs: vec![out],
        label: String::new(),
    }
}

/// A small graph's result against the plain kernels': convolutions
/// of up to 145 terms each, summed in other orders, differ by a few
/// units in the 5th digit.
fn assert_near(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (a, b) in got.iter().zip(want) {
        assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{a} vs {b}");
    }
}

/// The outputs of compiled graph `id` (of `graph`, one input) for `x`.
fn run_graph(
    cpu: &mut crate::backend::cpu::CpuBackend,
    id: u64,
    graph: &Graph,
    x: &[f32],
) -> Vec<Vec<f32>> {
    use crate::backend::Backend;
    cpu.compute(id, graph, vec![Buf::F32(x.to_vec())])
        .unwrap()
        .iter()
        .map(|b| b.to_f32_vec())
        .collect()
}

/// Graphs 1 (a plan with some nodes fused), 2 (the same plan, those
/// nodes apart) and 3 (no plan) of `graph` on `x`: 1 gives the bits of 2
/// and comes near 3.
fn fused_apart_plain(cpu: &mut crate::backend::cpu::CpuBackend, graph: &Graph, x: &[f32]) {
    let mut run = |id| run_graph(cpu, id, graph, x).remove(0);
    let (fused, apart, plain) = (run(1), run(2), run(3));
    assert!(same_bits(&fused, &apart));
    assert_near(&fused, &plain);
}

/// Bounds that leave every value as it is, and bounds that cut some of
/// the tests' values on both sides, applied after a residual.
const NO_BOUNDS: (f32, f32) = (f32::NEG_INFINITY, f32::INFINITY);
const AFTER: (f32, f32) = (-0.25, 0.5);

/// A convolution's results with a residual `r` added (`sum`), and then
/// clamped to [`AFTER`] (`clamped`), against its results `got` without:
/// the sums as the add node computes them and the clamp operator's
/// results of those, bit for bit.
fn check_sums(sum: &[f32], clamped: &[f32], got: &[f32], r: &[f32], what: &str) {
    let (lo, hi) = AFTER;
    let (mut below, mut above) = (false, false);
    for (k, ((&a, &c), &b)) in sum.iter().zip(clamped).zip(got).enumerate() {
        let s = b + r[k];
        assert_eq!(a.to_bits(), s.to_bits(), "{what} sum at {k}");
        let want = if s < lo {
            lo
        } else if s > hi {
            hi
        } else {
            s
        };
        (below, above) = (below || s < lo, above || s > hi);
        assert_eq!(c.to_bits(), want.to_bits(), "{what} clamped sum at {k}");
    }
    assert!(
        below && above,
        "{what}: the bounds after the sum cut nothing"
    );
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

/// The same bits, except that any NaN equals any NaN. For results of
/// arithmetic on NaNs of several payloads (a sum over a window holding
/// two): which payload an addition keeps depends on its operands' order
/// in the machine code, which the compiler may swap (Rust leaves NaN
/// payloads of arithmetic unspecified), so no two kernels can promise it.
fn same_bits_any_nan(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

fn bytes(v: &[f32]) -> Arc<Vec<u8>> {
    Arc::new(v.iter().flat_map(|x| x.to_le_bytes()).collect())
}

/// The kernels' forms this machine runs: the portable one (16-lane
/// vectors in scalar code, with 8-lane ones for single blocks)
/// everywhere, first, as the reference the others are compared with;
/// AVX2 and AVX-512 where the CPU has them; NEON on aarch64. All give
/// the same bits.
fn isas() -> Vec<Isa> {
    #[allow(unused_mut)]
    let mut v = vec![Isa::Portable];
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        v.push(Isa::Avx2);
        if is_x86_feature_detected!("avx512f") {
            v.push(Isa::Avx512);
        } else {
            eprintln!("nchwc tests: no AVX-512 here, its form not run");
        }
    }
    #[cfg(target_arch = "aarch64")]
    v.push(Isa::Neon);
    v
}

/// NCHW `x` of shape `[n, c, h, w]` (`c` whole blocks) in the blocked
/// layout, written with plain indexing (the layout's definition).
fn block(x: &[f32], (_, c, h, w): (usize, usize, usize, usize)) -> Vec<f32> {
    let hw = h * w;
    let mut out = vec![0.0; x.len()];
    for (i, &v) in x.iter().enumerate() {
        let (b, ci, q) = (i / (c * hw), (i / hw) % c, i % hw);
        out[((b * c / L + ci / L) * hw + q) * L + ci % L] = v;
    }
    out
}

/// The inverse of [`block`].
fn unblock(x: &[f32], (_, c, h, w): (usize, usize, usize, usize)) -> Vec<f32> {
    let hw = h * w;
    let mut out = vec![0.0; x.len()];
    for (i, v) in out.iter_mut().enumerate() {
        let (b, ci, q) = (i / (c * hw), (i / hw) % c, i % hw);
        *v = x[((b * c / L + ci / L) * hw + q) * L + ci % L];
    }
    out
}

/// A one-node conv2d graph (input, filter, bias constants) and its
/// blocked form for the kernels of `isa`.
fn one_conv(p: &Conv2dParams, f: &[f32], isa: Isa) -> (Graph, Conv) {
    let x = [p.batch, p.in_channels, p.in_h, p.in_w];
    let fd = [
        p.out_channels,
        p.in_channels / p.groups,
        p.kernel_h,
        p.kernel_w,
    ];
    let g = Graph {
        operands: vec![
            f32d(&x),
            f32d(&fd),
            f32d(&[p.out_channels]),
            f32d(&[p.batch, p.out_channels, p.out_h, p.out_w]),
        ],
        sources: vec![
            Source::Input("x".into()),
            Source::Constant(bytes(f)),
            Source::Constant(bytes(&vec![0.0; p.out_channels])),
            Source::Node { node: 0, index: 0 },
        ],
        nodes: vec![Node {
            op: Op::Conv2d(p.clone()),
            inputs: vec![0, 1, 2],
            outputs: vec![3],
            label: String::new(),
        }],
        inputs: vec![("x".into(), 0)],
        outputs: vec![("y".into(), 3)],
    };
    let constants = HashMap::from([(1, Arc::new(Buf::F32(f.to_vec())))]);
    let c = blocked_conv(&g, &g.nodes[0], p, &constants, isa).expect("a blocked form");
    (g, c)
}

#[test]
fn layout_changes_place_each_element_and_invert() {
    let (n, c, h, w) = (2, 16, 3, 5);
    let d = f32d(&[n, c, h, w]);
    let x: Vec<f32> = (0..n * c * h * w).map(|i| i as f32).collect();
    for isa in isas() {
        let b = to_blocked(&Buf::F32(x.clone()), &d, isa).unwrap();
        let Buf::F32(bv) = &b else { unreachable!() };
        for (i, &v) in x.iter().enumerate() {
            let (bi, ci, p) = (i / (c * h * w), (i / (h * w)) % c, i % (h * w));
            assert_eq!(bv[((bi * c / L + ci / L) * h * w + p) * L + ci % L], v);
        }
        assert_eq!(to_nchw(&b, &d, isa).unwrap().to_f32_vec(), x, "{isa:?}");
        // Not whole channel blocks: an error, not a wrong answer.
        assert!(to_blocked(&Buf::F32(vec![0.0; 12]), &f32d(&[1, 12, 1, 1]), isa).is_err());
    }
}

/// Plain blocked convolutions agree with the NCHW kernels (to the
/// rounding of a different summation order) over kernel sizes,
/// strides, dilations, uneven padding, batches, rows shorter and
/// longer than a tile, odd output block counts, bias and bounds; each
/// form of the kernels ([`isas`]) gives the same bits.
#[test]
fn direct_matches_the_nchw_kernels() {
    let cases = [
        // (n, c, h, w), (o, kh, kw), padding, stride, dilation
        ((1, 8, 7, 7), (8, 1, 1), [0; 4], 1, 1),
        ((1, 16, 13, 11), (24, 1, 1), [0; 4], 1, 1),
        ((2, 8, 9, 10), (16, 3, 3), [1, 1, 1, 1], 1, 1),
        ((1, 24, 12, 12), (40, 3, 3), [0, 1, 0, 1], 2, 1),
        ((1, 16, 10, 9), (8, 3, 2), [2, 1, 0, 2], 1, 2),
        ((1, 8, 4, 3), (16, 5, 5), [2, 2, 2, 2], 1, 1),
        ((1, 32, 6, 6), (16, 1, 1), [0; 4], 2, 1),
        // 1x1 at stride 3 over two images: the picked pixels' copy.
        ((2, 16, 9, 7), (24, 1, 1), [0; 4], 3, 1),
        // Rows of 7 and 5 pixels: tiles across the rows' ends.
        ((1, 16, 14, 14), (16, 3, 3), [1, 1, 1, 1], 2, 1),
        // Rows of 14 pixels at stride 2 into 4 blocks: tiles inside a
        // row, whose pixels are two apart at compile time (`STRIDE2`).
        ((1, 16, 28, 28), (32, 3, 3), [1, 1, 1, 1], 2, 1),
        ((1, 8, 5, 5), (24, 3, 3), [1, 1, 1, 1], 1, 2),
        ((1, 64, 20, 20), (64, 3, 3), [1, 1, 1, 1], 1, 1),
        ((1, 16, 5, 30), (8, 3, 3), [1, 1, 1, 1], 1, 1),
        // 7 blocks (panels of 4, 2 and 1 on AVX-512), rows over 24.
        ((1, 16, 9, 31), (56, 1, 1), [0; 4], 1, 1),
        ((1, 8, 4, 29), (48, 3, 3), [1, 1, 1, 1], 1, 1),
        // Four panels or more: 1x1 tiles of two sizes (the last panel
        // narrower), at unit stride, on picked pixels, and split between
        // threads.
        ((1, 24, 7, 7), (136, 1, 1), [0; 4], 1, 1),
        ((2, 16, 14, 14), (128, 1, 1), [0; 4], 2, 1),
        ((1, 64, 14, 14), (136, 1, 1), [0; 4], 1, 1),
        // Plain input (channels not whole blocks), read in NCHW.
        ((1, 3, 15, 15), (32, 3, 3), [0, 1, 0, 1], 2, 1),
        ((2, 5, 7, 9), (8, 3, 3), [1, 1, 1, 1], 1, 1),
        ((1, 4, 6, 6), (24, 1, 1), [0; 4], 1, 1),
        // Plain input into panels of 8 blocks (AVX-512's and the portable
        // form's), then of 4 and 1, or 1: tiles of 6 pixels by 4 vectors.
        ((1, 3, 23, 21), (104, 7, 7), [3, 3, 3, 3], 2, 1),
        ((1, 3, 17, 19), (72, 3, 3), [0, 1, 0, 1], 2, 1),
        ((2, 3, 9, 9), (64, 3, 3), [1, 1, 1, 1], 1, 1),
        // Filters larger than half of L2 (up to 4 MiB of it): chunks as
        // large as L2 holds, the panels split among threads.
        ((1, 256, 9, 9), (264, 3, 3), [1, 1, 1, 1], 2, 1),
        ((1, 1024, 7, 7), (520, 1, 1), [0; 4], 1, 1),
    ];
    for (i, &case) in cases.iter().enumerate() {
        direct_case(i, case);
    }
}

/// A direct convolution: input `(n, c, h, w)`, output channels and
/// kernel `(o, kh, kw)`, padding, stride and dilation.
type DirectCase = (
    (usize, usize, usize, usize),
    (usize, usize, usize),
    [usize; 4],
    usize,
    usize,
);

/// [`direct_matches_the_nchw_kernels`] on case `i`.
fn direct_case(i: usize, (x, o, pad, s, d): DirectCase) {
    let p = params(x, o, pad, s, d, 1);
    let xs = random(p.batch * p.in_channels * p.in_h * p.in_w, i as u64 + 1);
    let f = random(
        p.out_channels * p.in_channels * p.kernel_h * p.kernel_w,
        i as u64 + 40,
    );
    let bias = random(p.out_channels, i as u64 + 80);
    let dims = |d: &OperandDescriptor| (d.shape[0], d.shape[1], d.shape[2], d.shape[3]);
    for bounds in [None, Some([-0.25f32, 0.5])] {
        let mut first: Option<Vec<f32>> = None;
        for isa in isas() {
            let (g, c) = one_conv(&p, &f, isa);
            let out = &g.operands[3];
            let (xb, fb, bb) = (
                Buf::F32(xs.clone()),
                Buf::F32(f.clone()),
                Buf::F32(bias.clone()),
            );
            let lim = bounds.map(|b| Buf::F32(b.to_vec()));
            let mut ins = vec![&xb, &fb, &bb];
            ins.extend(lim.as_ref());
            let want = crate::backend::cpu::conv::conv2d(&p, &ins, out)
                .unwrap()
                .to_f32_vec();
            let xblk = match p.in_channels % L {
                0 => Buf::F32(block(&xs, dims(&g.operands[0]))),
                _ => xb.clone(),
            };
            ins[0] = &xblk;
            let got = conv(&c, &p, &ins, None, out).unwrap().to_f32_vec();
            // A padded one reading its input in NCHW (blocking it as
            // it pads): the same bits.
            if p.padding != [0; 4] && p.in_channels.is_multiple_of(L) {
                let Conv::Direct {
                    w,
                    panels,
                    plain,
                    isa,
                    ..
                } = &c
                else {
                    unreachable!()
                };
                let c2 = Conv::Direct {
                    w: w.clone(),
                    panels: panels.clone(),
                    plain: *plain,
                    nchw_in: true,
                    isa: *isa,
                };
                let mut ins2 = ins.clone();
                ins2[0] = &xb;
                let got2 = conv(&c2, &p, &ins2, None, out).unwrap().to_f32_vec();
                assert!(
                    got.iter()
                        .zip(&got2)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "case {i} {isa:?}: NCHW input differs"
                );
            }
            let got = unblock(&got, dims(out));
            assert_eq!(got.len(), want.len());
            // With a residual: the same products, then the sum, as
            // the add node would compute it (bit for bit).
            let r = random(got.len(), i as u64 + 120);
            let rb = Buf::F32(block(&r, dims(out)));
            let with = |after| {
                let v = conv(&c, &p, &ins, Some((&rb, after)), out)
                    .unwrap()
                    .to_f32_vec();
                unblock(&v, dims(out))
            };
            check_sums(
                &with(NO_BOUNDS),
                &with(AFTER),
                &got,
                &r,
                &format!("case {i} {isa:?}"),
            );
            // Two orders of the same k + 1 terms differ by at most
            // (k + 1) * eps times the sum of their magnitudes (the
            // same convolution of the absolute values).
            let abs = |v: &[f32]| Buf::F32(v.iter().map(|x| x.abs()).collect());
            let (xa, fa, ba) = (abs(&xs), abs(&f), abs(&bias));
            let mag = crate::backend::cpu::conv::conv2d(&p, &[&xa, &fa, &ba], out)
                .unwrap()
                .to_f32_vec();
            let terms = (p.in_channels * p.kernel_h * p.kernel_w + 1) as f32;
            for (k, (a, b)) in got.iter().zip(&want).enumerate() {
                let tol = terms * f32::EPSILON * mag[k];
                assert!((a - b).abs() <= tol, "case {i} at {k}: {a} vs {b}");
            }
            if bounds.is_some() {
                assert!(
                    got.contains(&0.5) && got.contains(&-0.25),
                    "case {i}: bounds unused"
                );
            }
            match &first {
                None => first = Some(got),
                Some(f0) => assert!(
                    f0.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "case {i}: {isa:?} differs from the portable form"
                ),
            }
        }
    }
}

/// Depthwise blocked convolutions give the NCHW kernel's values bit
/// for bit (same order of operations), NaN inputs included, in every
/// form of the kernels ([`isas`]).
#[test]
fn depthwise_matches_the_nchw_kernel_bitwise() {
    let cases = [
        ((1, 8, 7, 7), (3, 3), [1, 1, 1, 1], 1, 1),
        ((2, 16, 14, 13), (3, 3), [0, 1, 0, 1], 2, 1),
        ((1, 24, 9, 20), (5, 3), [2, 2, 1, 1], 1, 2),
        ((1, 8, 1, 1), (3, 3), [1, 1, 1, 1], 1, 1),
        ((1, 16, 30, 29), (3, 3), [1, 1, 1, 1], 1, 1),
        ((1, 8, 5, 9), (1, 1), [0; 4], 1, 1),
        // Padding wider than the filter's reach: windows in the padding.
        ((1, 8, 6, 6), (3, 3), [4, 3, 5, 4], 1, 1),
        ((1, 8, 40, 40), (3, 3), [5, 4, 6, 3], 2, 1),
        // Planes too large to copy whole: in place, with strips.
        ((1, 8, 40, 37), (3, 3), [0, 1, 2, 1], 2, 1),
        ((1, 8, 33, 35), (5, 3), [2, 1, 1, 2], 1, 2),
        ((1, 8, 64, 64), (3, 3), [1, 1, 1, 1], 1, 1),
        // Rows of odd lengths at unit stride: pairs and single pixels.
        ((1, 16, 11, 45), (3, 3), [1, 1, 1, 1], 1, 1),
        ((1, 8, 70, 67), (3, 3), [1, 1, 1, 1], 1, 1),
        // Stride 2 on rows long enough for runs of wide vectors (two
        // output pixels per AVX-512 vector), with dilation too.
        ((1, 16, 112, 112), (3, 3), [0, 1, 0, 1], 2, 1),
        ((1, 8, 50, 71), (3, 3), [1, 1, 1, 1], 2, 2),
    ];
    for (i, &case) in cases.iter().enumerate() {
        depthwise_case(i, case);
    }
}

/// A depthwise convolution: input `(n, c, h, w)`, kernel `(kh, kw)`,
/// padding, stride and dilation.
type DepthwiseCase = (
    (usize, usize, usize, usize),
    (usize, usize),
    [usize; 4],
    usize,
    usize,
);

/// [`depthwise_matches_the_nchw_kernel_bitwise`] on case `i`.
fn depthwise_case(i: usize, (x, (kh, kw), pad, s, d): DepthwiseCase) {
    let c = x.1;
    let p = params(x, (c, kh, kw), pad, s, d, c);
    let mut xs = random(p.batch * c * p.in_h * p.in_w, i as u64 + 1);
    xs[3] = f32::NAN;
    let f = random(c * kh * kw, i as u64 + 40);
    let bias = random(c, i as u64 + 80);
    let dims = (p.batch, c, p.in_h, p.in_w);
    let odims = (p.batch, c, p.out_h, p.out_w);
    // The NCHW kernel fuses its multiply-adds, as the blocked forms do,
    // on aarch64 and where an x86-64 CPU has AVX2 and FMA: then the bits
    // agree. Without them (Miri's portable x86-64 build, which reports
    // no x86 features) it rounds each product, and the outputs are held
    // to the bound that any two roundings of the same k + 1 terms meet,
    // (k + 1) * eps times the sum of their magnitudes, with NaN in the
    // same places.
    #[cfg(target_arch = "x86_64")]
    let fused = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
    #[cfg(not(target_arch = "x86_64"))]
    let fused = cfg!(target_arch = "aarch64");
    let mag = (!fused).then(|| {
        let abs = |v: &[f32]| v.iter().map(|x| x.abs()).collect::<Vec<f32>>();
        let mut m = vec![0.0f32; p.batch * c * p.out_h * p.out_w];
        let (xa, fa, ba) = (abs(&xs), abs(&f), abs(&bias));
        crate::backend::cpu::conv::depthwise::depthwise_nchw(&xa, &fa, Some(&ba), None, &p, &mut m);
        m
    });
    let terms = (kh * kw + 1) as f32;
    for bounds in [None, Some((-0.25f32, 0.5f32))] {
        let mut want = vec![7.0f32; p.batch * c * p.out_h * p.out_w];
        crate::backend::cpu::conv::depthwise::depthwise_nchw(
            &xs,
            &f,
            Some(&bias),
            bounds,
            &p,
            &mut want,
        );
        for isa in isas() {
            let (g, conv_b) = one_conv(&p, &f, isa);
            let out = &g.operands[3];
            let (fb, bb) = (Buf::F32(f.clone()), Buf::F32(bias.clone()));
            let lim = bounds.map(|(lo, hi)| Buf::F32(vec![lo, hi]));
            let xblk = Buf::F32(block(&xs, dims));
            let mut ins = vec![&xblk, &fb, &bb];
            ins.extend(lim.as_ref());
            let got = conv(&conv_b, &p, &ins, None, out).unwrap().to_f32_vec();
            let got = unblock(&got, odims);
            let same = got.iter().zip(&want).enumerate().all(|(k, (a, b))| {
                (a.is_nan() && b.is_nan())
                    || match &mag {
                        None => a.to_bits() == b.to_bits(),
                        Some(m) => (a - b).abs() <= terms * f32::EPSILON * m[k],
                    }
            });
            assert!(same, "case {i} {isa:?} bounds {bounds:?}");
        }
    }
}

/// A graph: conv -> depthwise -> add of the two -> 1x1 conv (output),
/// and a relu of the sum (output). The convolutions and the add run
/// blocked, the relu reads the sum converted back, the outputs come
/// out in NCHW; the results agree with the same graph run plain.
#[test]
fn a_chain_runs_blocked_and_matches_the_plain_graph() {
    use crate::backend::Backend;
    if !available() {
        return;
    }
    // Dilated: an undilated one would run by Winograd, which reads its
    // input blocked.
    let p1 = params((1, 16, 9, 9), (16, 3, 3), [2, 2, 2, 2], 1, 2, 1);
    let p2 = params((1, 16, 9, 9), (16, 3, 3), [1, 1, 1, 1], 1, 1, 16);
    let p3 = params((1, 16, 9, 9), (24, 1, 1), [0; 4], 1, 1, 1);
    let conv = |p: &Conv2dParams, inputs, out| node(Op::Conv2d(p.clone()), inputs, out);
    let a = [1, 16, 9, 9];
    let graph = Arc::new(Graph {
        operands: vec![
            f32d(&a),
            f32d(&[16, 16, 3, 3]),
            f32d(&[16]),
            f32d(&[16, 1, 3, 3]),
            f32d(&[24, 16, 1, 1]),
            f32d(&a),
            f32d(&a),
            f32d(&a),
            f32d(&[1, 24, 9, 9]),
            f32d(&a),
        ],
        sources: vec![
            Source::Input("x".into()),
            Source::Constant(bytes(&random(16 * 16 * 9, 2))),
            Source::Constant(bytes(&random(16, 3))),
            Source::Constant(bytes(&random(16 * 9, 4))),
            Source::Constant(bytes(&random(24 * 16, 5))),
            Source::Node { node: 0, index: 0 },
            Source::Node { node: 1, index: 0 },
            Source::Node { node: 2, index: 0 },
            Source::Node { node: 3, index: 0 },
            Source::Node { node: 4, index: 0 },
        ],
        nodes: vec![
            conv(&p1, vec![0, 1, 2], 5),
            conv(&p2, vec![5, 3, 2], 6),
            node(Op::Binary(BinaryKind::Add), vec![5, 6], 7),
            conv(
                &Conv2dParams {
                    has_bias: false,
                    ..p3
                },
                vec![7, 4],
                8,
            ),
            node(Op::Unary(UnaryKind::Relu), vec![7], 9),
        ],
        inputs: vec![("x".into(), 0)],
        outputs: vec![("y".into(), 8), ("r".into(), 9)],
    });
    let mut cpu = crate::backend::cpu::CpuBackend::new();
    cpu.compile(1, graph.clone()).unwrap();
    cpu.compile(2, graph.clone()).unwrap();
    let plan = cpu.graphs[&1].nchwc.as_ref().expect("a plan");
    let blocked: Vec<bool> = (5..10).map(|i| plan.is_blocked(i)).collect();
    // The relu of a blocked operand is blocked too (element-wise, the
    // layout does not matter); as a graph output it is converted back.
    assert_eq!(blocked, [true, true, true, true, true]);
    // The first convolution pads the graph's input (NCHW) as it blocks
    // it, in one pass; the depthwise one reads its blocked input.
    assert!(matches!(
        plan.conv(0),
        Some(Conv::Direct { nchw_in: true, .. })
    ));
    assert!(!plan.wants_blocked(&graph, 0, 0) && plan.wants_blocked(&graph, 1, 0));
    cpu.graphs.get_mut(&2).unwrap().nchwc = None;
    let x = random(16 * 81, 1);
    let (got, want) = (
        run_graph(&mut cpu, 1, &graph, &x),
        run_graph(&mut cpu, 2, &graph, &x),
    );
    assert_eq!(got.len(), 2);
    for (g, w) in got.iter().zip(&want) {
        assert_near(g, w);
    }
}

/// conv -> 1x1 conv -> add of the two (the output): the 1x1
/// convolution does the add in its epilogue; the result is bit for
/// bit that of the two nodes run blocked, and agrees with the plain
/// graph. Then with a relu after the add, with a clamp after a 3x3
/// (Winograd) one, and with a relu after an add that is an output too
/// (the relu then stays a node of its own).
#[test]
fn a_residual_add_runs_in_the_convolution_before_it() {
    use crate::backend::Backend;
    if !available() {
        return;
    }
    let relu = Op::Unary(UnaryKind::Relu);
    let clamp = Op::Clamp(ClampParams { min: 0.0, max: 6.0 });
    let cases = [
        (1, None, false),
        (1, Some(relu.clone()), false),
        (3, Some(clamp), false),
        (1, Some(relu), true),
    ];
    for (i, (k, act, both)) in cases.into_iter().enumerate() {
        let p1 = params((1, 16, 9, 9), (16, 3, 3), [1, 1, 1, 1], 1, 1, 1);
        let pad = [k / 2; 4];
        let p2 = params((1, 16, 9, 9), (16, k, k), pad, 1, 1, 1);
        let conv = |p: &Conv2dParams, inputs, out| node(Op::Conv2d(p.clone()), inputs, out);
        let a = [1, 16, 9, 9];
        let mut operands = vec![
            f32d(&a),
            f32d(&[16, 16, 3, 3]),
            f32d(&[16]),
            f32d(&[16, 16, k, k]),
            f32d(&a),
            f32d(&a),
            f32d(&a),
        ];
        let mut sources = vec![
            Source::Input("x".into()),
            Source::Constant(bytes(&random(16 * 16 * 9, 2))),
            Source::Constant(bytes(&random(16, 3))),
            Source::Constant(bytes(&random(16 * 16 * k * k, 4))),
            Source::Node { node: 0, index: 0 },
            Source::Node { node: 1, index: 0 },
            Source::Node { node: 2, index: 0 },
        ];
        let mut nodes = vec![
            conv(&p1, vec![0, 1, 2], 4),
            conv(&p2, vec![4, 3, 2], 5),
            node(Op::Binary(BinaryKind::Add), vec![5, 4], 6),
        ];
        let mut outputs = vec![("y".to_string(), 6)];
        if let Some(op) = act.clone() {
            operands.push(f32d(&a));
            sources.push(Source::Node { node: 3, index: 0 });
            nodes.push(node(op, vec![6], 7));
            outputs = match both {
                true => vec![("y".into(), 7), ("s".into(), 6)],
                false => vec![("y".into(), 7)],
            };
        }
        let graph = Arc::new(Graph {
            operands,
            sources,
            nodes,
            inputs: vec![("x".into(), 0)],
            outputs,
        });
        let mut cpu = crate::backend::cpu::CpuBackend::new();
        for id in 1..=3 {
            cpu.compile(id, graph.clone()).unwrap();
        }
        let plan = cpu.graphs[&1].nchwc.as_ref().expect("a plan");
        let s = plan.sum(1).expect("the second convolution does the add");
        let form_ok = match k {
            1 => matches!(plan.conv(1), Some(Conv::Direct { .. })),
            _ => matches!(plan.conv(1), Some(Conv::Winograd { .. })),
        };
        assert!(form_ok, "case {i}");
        let folded = act.is_some() && !both;
        let want = match (&act, folded) {
            (Some(Op::Clamp(_)), true) => (7, (0.0, 6.0)),
            (Some(_), true) => (7, (0.0, f32::INFINITY)),
            _ => (6, NO_BOUNDS),
        };
        assert_eq!(
            (s.residual, s.out, s.after),
            (4, want.0, want.1),
            "case {i}"
        );
        assert!(plan.is_fused(2) && plan.sum(0).is_none(), "case {i}");
        assert_eq!(plan.is_fused(3), folded, "case {i}");
        // Graph 2: blocked, the add (and the activation) nodes of their
        // own; graph 3: plain.
        let g2 = cpu.graphs.get_mut(&2).unwrap().nchwc.as_mut().unwrap();
        g2.sums.clear();
        g2.fused.iter_mut().for_each(|f| *f = false);
        cpu.graphs.get_mut(&3).unwrap().nchwc = None;
        let x = random(16 * 81, 1);
        let mut run = |id| run_graph(&mut cpu, id, &graph, &x);
        let (fused, apart, plain) = (run(1), run(2), run(3));
        assert_eq!(fused.len(), apart.len());
        for ((f, a), p) in fused.iter().zip(&apart).zip(&plain) {
            assert!(same_bits(f, a), "case {i}");
            assert_near(f, p);
        }
        // The activation cut something (the test would not see it
        // otherwise).
        if act.is_some() {
            assert!(fused[0].contains(&0.0), "case {i}");
        }
    }
}

/// conv -> global average, max and l2 pooling: the pools read the
/// blocked output where it lies, with the bits of the NCHW kernel run
/// on a converted copy (and near the plain graph's).
#[test]
fn global_pools_read_the_blocked_layout() {
    use crate::backend::Backend;
    use crate::graph::ops::conv::{Pool2dParams, PoolKind};
    if !available() {
        return;
    }
    let p1 = params((1, 16, 7, 7), (24, 3, 3), [1, 1, 1, 1], 1, 1, 1);
    let pool = |kind| Pool2dParams {
        kind,
        nhwc: false,
        window: [7, 7],
        padding: [0; 4],
        strides: [1, 1],
        dilations: [1, 1],
        batch: 1,
        channels: 24,
        in_h: 7,
        in_w: 7,
        out_h: 1,
        out_w: 1,
    };
    let kinds = [PoolKind::Average, PoolKind::Max, PoolKind::L2];
    let mut operands = vec![
        f32d(&[1, 16, 7, 7]),
        f32d(&[24, 16, 3, 3]),
        f32d(&[24]),
        f32d(&[1, 24, 7, 7]),
    ];
    let mut sources = vec![
        Source::Input("x".into()),
        Source::Constant(bytes(&random(24 * 16 * 9, 2))),
        Source::Constant(bytes(&random(24, 3))),
        Source::Node { node: 0, index: 0 },
    ];
    let mut nodes = vec![node(Op::Conv2d(p1), vec![0, 1, 2], 3)];
    let mut outputs = Vec::new();
    for (k, kind) in kinds.into_iter().enumerate() {
        operands.push(f32d(&[1, 24, 1, 1]));
        sources.push(Source::Node {
            node: k + 1,
            index: 0,
        });
        nodes.push(node(Op::Pool2d(pool(kind)), vec![3], 4 + k));
        outputs.push((format!("y{k}"), 4 + k));
    }
    let graph = Arc::new(Graph {
        operands,
        sources,
        nodes,
        inputs: vec![("x".into(), 0)],
        outputs,
    });
    let mut cpu = crate::backend::cpu::CpuBackend::new();
    for id in 1..=3 {
        cpu.compile(id, graph.clone()).unwrap();
    }
    let plan = cpu.graphs[&1].nchwc.as_ref().expect("a plan");
    assert!((1..=3).all(|n| plan.is_pool(n) && plan.wants_blocked(&graph, n, 0)));
    assert!((4..=6).all(|i| !plan.is_blocked(i)));
    // Graph 2: the pools read an NCHW copy; graph 3: plain.
    let g2 = cpu.graphs.get_mut(&2).unwrap().nchwc.as_mut().unwrap();
    g2.pools.iter_mut().for_each(|f| *f = false);
    cpu.graphs.get_mut(&3).unwrap().nchwc = None;
    let x = random(16 * 49, 1);
    let mut run = |id| run_graph(&mut cpu, id, &graph, &x);
    let (blocked, copied, plain) = (run(1), run(2), run(3));
    assert_eq!(blocked.len(), 3);
    for k in 0..3 {
        assert_eq!(blocked[k].len(), 24);
        assert!(same_bits(&blocked[k], &copied[k]));
        assert_near(&blocked[k], &plain[k]);
    }
    // In float16 too: the pools read the blocked output (float32 holding
    // the convolution's float16 values) and narrow their float32 results
    // once, as the NCHW kernel does, so the float16 results have its bits.
    let half = Arc::new(layouts::in_half(&graph));
    for id in 4..=5 {
        cpu.compile(id, half.clone()).unwrap();
    }
    let plan = cpu.graphs[&4].nchwc.as_ref().expect("a float16 plan");
    assert!((1..=3).all(|n| plan.is_pool(n) && plan.wants_blocked(&half, n, 0)));
    assert!((4..=6).all(|i| !plan.is_blocked(i)));
    let g5 = cpu.graphs.get_mut(&5).unwrap().nchwc.as_mut().unwrap();
    g5.pools.iter_mut().for_each(|f| *f = false);
    let xh = Buf::f16_from_f32(&x);
    let mut run = |id| {
        let r = cpu.compute(id, &half, vec![xh.clone()]).unwrap();
        assert!(
            r.iter().all(|b| matches!(b, Buf::F16(_))),
            "float16 results"
        );
        r.iter().map(|b| b.to_f32_vec()).collect::<Vec<_>>()
    };
    let (blocked, copied) = (run(4), run(5));
    assert_eq!(blocked.len(), 3);
    for k in 0..3 {
        assert_eq!(blocked[k].len(), 24);
        assert!(same_bits(&blocked[k], &copied[k]), "float16 pool {k}");
    }
}

/// The depthwise form is the plan's own on every form but AVX-512, and
/// there one of AVX-512's and AVX2's, measured once and kept (both give
/// the same bits: see `depthwise_matches_the_nchw_kernel_bitwise`).
#[test]
fn the_depthwise_form_is_measured_once_and_kept() {
    #[cfg(target_arch = "x86_64")]
    assert_eq!(depthwise::preferred(Isa::Avx2), Isa::Avx2);
    #[cfg(target_arch = "aarch64")]
    assert_eq!(depthwise::preferred(Isa::Neon), Isa::Neon);
    assert_eq!(depthwise::preferred(Isa::Portable), Isa::Portable);
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") {
        let first = depthwise::preferred(Isa::Avx512);
        assert!(matches!(first, Isa::Avx2 | Isa::Avx512));
        for _ in 0..3 {
            assert_eq!(depthwise::preferred(Isa::Avx512), first);
        }
    }
}

/// A 1x1 convolution from a graph input straight to a graph output
/// stays in its own layout (nothing to chain with, a layout change at
/// each end); the same convolution feeding another one runs blocked.
#[test]
fn a_lone_1x1_convolution_is_not_blocked() {
    use crate::backend::Backend;
    if !available() {
        return;
    }
    let p = Conv2dParams {
        has_bias: false,
        ..params((1, 16, 6, 6), (16, 1, 1), [0; 4], 1, 1, 1)
    };
    let f = bytes(&random(16 * 16, 7));
    let d = f32d(&[1, 16, 6, 6]);
    for chained in [false, true] {
        let mut operands = vec![d.clone(), f32d(&[16, 16, 1, 1]), d.clone()];
        let mut sources = vec![
            Source::Input("x".into()),
            Source::Constant(f.clone()),
            Source::Node { node: 0, index: 0 },
        ];
        let mut nodes = vec![node(Op::Conv2d(p.clone()), vec![0, 1], 2)];
        if chained {
            operands.push(d.clone());
            sources.push(Source::Node { node: 1, index: 0 });
            nodes.push(node(Op::Conv2d(p.clone()), vec![2, 1], 3));
        }
        let graph = Arc::new(Graph {
            operands,
            sources,
            nodes,
            inputs: vec![("x".into(), 0)],
            outputs: vec![("y".into(), 2 + usize::from(chained))],
        });
        let mut cpu = crate::backend::cpu::CpuBackend::new();
        cpu.compile(1, graph).unwrap();
        let plan = cpu.graphs[&1].nchwc.as_ref();
        let first = plan.and_then(|pl| pl.conv(0));
        assert_eq!(first.is_some(), chained, "chained: {chained}");
    }
}

/// One depthwise block for [`depthwise_chains_give_the_bits_of_their_nodes`]:
/// input `[n, ic, h, w]`, an expanding 1x1 convolution to `c` channels
/// (when `expand`) clamped to [0, 6], the depthwise one (kernel `k`,
/// padding, stride, dilation) clamped too, a projecting 1x1 one to `oc`
/// (when given), plus the block's input (when `residual`, the output of
/// a 1x1 convolution of `x`).
struct Block {
    x: (usize, usize, usize, usize),
    expand: bool,
    c: usize,
    k: (usize, usize),
    pad: [usize; 4],
    s: usize,
    d: usize,
    project: Option<usize>,
    residual: bool,
}

/// A [`Block`] with a 3x3 depthwise filter, undilated.
fn block3x3(
    x: (usize, usize, usize, usize),
    expand: bool,
    c: usize,
    pad: [usize; 4],
    s: usize,
    project: Option<usize>,
    residual: bool,
) -> Block {
    Block {
        x,
        expand,
        c,
        k: (3, 3),
        pad,
        s,
        d: 1,
        project,
        residual,
    }
}

/// A graph built node by node: one input `x`, random constants.
struct Builder {
    g: Graph,
    seed: u64,
}

impl Builder {
    fn new(x: &[usize]) -> Builder {
        let g = Graph {
            operands: vec![f32d(x)],
            sources: vec![Source::Input("x".into())],
            nodes: vec![],
            inputs: vec![("x".into(), 0)],
            outputs: vec![],
        };
        Builder { g, seed: 10 }
    }

    fn constant(&mut self, shape: &[usize]) -> usize {
        self.seed += 1;
        self.g.operands.push(f32d(shape));
        let len = shape.iter().product();
        let v = random(len, self.seed);
        self.g.sources.push(Source::Constant(bytes(&v)));
        self.g.operands.len() - 1
    }

    fn push(&mut self, op: Op, inputs: Vec<usize>, shape: &[usize]) -> usize {
        let g = &mut self.g;
        g.operands.push(f32d(shape));
        g.sources.push(Source::Node {
            node: g.nodes.len(),
            index: 0,
        });
        let out = g.operands.len() - 1;
        g.nodes.push(node(op, inputs, out));
        out
    }

    /// A conv2d of `p` on `x`, with a random filter and bias; its output.
    fn conv(&mut self, x: usize, p: Conv2dParams) -> usize {
        let f = self.constant(&[
            p.out_channels,
            p.in_channels / p.groups,
            p.kernel_h,
            p.kernel_w,
        ]);
        let b = self.constant(&[p.out_channels]);
        let out = [p.batch, p.out_channels, p.out_h, p.out_w];
        self.push(Op::Conv2d(p), vec![x, f, b], &out)
    }

    /// Clamps `x` (of `shape`) to [0, 6].
    fn relu6(&mut self, x: usize, shape: &[usize]) -> usize {
        self.push(
            Op::Clamp(ClampParams { min: 0.0, max: 6.0 }),
            vec![x],
            shape,
        )
    }

    fn output(mut self, y: usize) -> Graph {
        self.g.outputs.push(("y".into(), y));
        self.g
    }
}

impl Block {
    fn graph(&self) -> Graph {
        let (n, ic, h, w) = self.x;
        let mut g = Builder::new(&[n, ic, h, w]);
        let mut y = 0;
        // A residual is blocked when a convolution computes it (a graph
        // input is not): a 1x1 one first.
        if self.residual {
            y = g.conv(y, params((n, ic, h, w), (ic, 1, 1), [0; 4], 1, 1, 1));
        }
        let x = y;
        if self.expand {
            y = g.conv(y, params((n, ic, h, w), (self.c, 1, 1), [0; 4], 1, 1, 1));
            y = g.relu6(y, &[n, self.c, h, w]);
        }
        let (kh, kw) = self.k;
        let p = params(
            (n, self.c, h, w),
            (self.c, kh, kw),
            self.pad,
            self.s,
            self.d,
            self.c,
        );
        let (oh, ow) = (p.out_h, p.out_w);
        y = g.conv(y, p);
        y = g.relu6(y, &[n, self.c, oh, ow]);
        if let Some(oc) = self.project {
            y = g.conv(y, params((n, self.c, oh, ow), (oc, 1, 1), [0; 4], 1, 1, 1));
            if self.residual {
                y = g.push(Op::Binary(BinaryKind::Add), vec![y, x], &[n, oc, oh, ow]);
            }
        }
        g.output(y)
    }
}

/// Compiles `graph` as graph 3, with `isa`'s plan and its one chain, and
/// as graph 4, with the same plan and the chain's nodes apart.
fn chained_and_apart(
    cpu: &mut crate::backend::cpu::CpuBackend,
    graph: &Arc<Graph>,
    isa: Isa,
    case: usize,
) {
    use crate::backend::Backend;
    for (id, chained) in [(3, true), (4, false)] {
        cpu.compile(id, graph.clone()).unwrap();
        let cg = cpu.graphs.get_mut(&id).unwrap();
        let mut plan = plan_for(&cg.graph, &cg.constants, isa).unwrap();
        if !chained {
            for m in plan.chains.values().flat_map(Chain::absorbed) {
                plan.fused[m] = false;
            }
            plan.chains.clear();
        }
        assert_eq!(plan.chains.len(), usize::from(chained), "case {case}");
        cg.nchwc = Some(plan);
    }
}

/// Expanding, depthwise and projecting convolutions run as one chain,
/// a band of rows at a time (the planes below are cut into several
/// bands, and into a part per thread), with the bits of the same nodes
/// run one by one, for every form of the kernels; and near the plain
/// graph's.
#[test]
fn depthwise_chains_give_the_bits_of_their_nodes() {
    use crate::backend::Backend;
    if !available() {
        return;
    }
    let block = block3x3;
    let cases = [
        // MobileNetV2's shapes: a residual block, a strided one.
        block((1, 16, 30, 29), true, 32, [1; 4], 1, Some(16), true),
        block((2, 8, 57, 60), true, 24, [0, 1, 0, 1], 2, Some(16), false),
        // Many bands, at both strides.
        block((1, 8, 112, 112), true, 48, [1; 4], 1, Some(8), true),
        block((1, 16, 112, 111), true, 32, [1; 4], 2, Some(24), false),
        // Either 1x1 convolution alone.
        block((1, 16, 28, 28), false, 16, [1; 4], 1, Some(8), false),
        block((1, 8, 30, 29), true, 16, [1, 0, 1, 0], 1, None, false),
        // A taller, dilated filter; no padding at the bottom.
        Block {
            k: (5, 3),
            d: 2,
            ..block((1, 8, 40, 36), true, 16, [2, 0, 1, 1], 1, Some(8), false)
        },
    ];
    for (i, b) in cases.iter().enumerate() {
        let graph = Arc::new(b.graph());
        let mut cpu = crate::backend::cpu::CpuBackend::new();
        cpu.compile(1, graph.clone()).unwrap();
        let plan = cpu.graphs[&1].nchwc.as_ref().expect("a plan");
        let stem = usize::from(b.residual);
        let ch = plan
            .chain(stem)
            .unwrap_or_else(|| panic!("case {i}: no chain"));
        // Compiled nodes: [stem,] [expand,] depthwise[, project[, add]]
        // (the clamps fused into the convolutions before them).
        let dw = stem + usize::from(b.expand);
        assert_eq!(ch.depthwise, dw, "case {i}");
        assert_eq!(ch.expand.is_some(), b.expand, "case {i}");
        assert_eq!(ch.project, b.project.map(|_| dw + 1), "case {i}");
        assert_eq!(ch.out, cpu.graphs[&1].graph.outputs[0].1, "case {i}");
        assert!(ch.absorbed().all(|m| plan.is_fused(m)), "case {i}");
        let x = random(b.x.0 * b.x.1 * b.x.2 * b.x.3, i as u64);
        let plain = {
            cpu.compile(2, graph.clone()).unwrap();
            cpu.graphs.get_mut(&2).unwrap().nchwc = None;
            run_graph(&mut cpu, 2, &graph, &x).remove(0)
        };
        for isa in isas() {
            chained_and_apart(&mut cpu, &graph, isa, i);
            let (got, want) = (
                run_graph(&mut cpu, 3, &graph, &x).remove(0),
                run_graph(&mut cpu, 4, &graph, &x).remove(0),
            );
            assert!(same_bits(&got, &want), "case {i} {isa:?}");
            assert_near(&got, &plain);
        }
    }
}

/// MobileNet (v1)'s depthwise, 1x1, depthwise, 1x1: the 1x1 between the
/// two depthwise convolutions joins one chain only (projecting for the
/// first), so both chains run, with the bits of their nodes.
#[test]
fn a_1x1_between_two_depthwise_convolutions_joins_one_chain() {
    use crate::backend::Backend;
    if !available() {
        return;
    }
    let (c, h) = (16, 30);
    let mut g = Builder::new(&[1, c, h, h]);
    let dw = params((1, c, h, h), (c, 3, 3), [1; 4], 1, 1, c);
    let pw = |oc| params((1, c, h, h), (oc, 1, 1), [0; 4], 1, 1, 1);
    let mut y = 0;
    for oc in [c, 8] {
        y = g.conv(y, dw.clone());
        y = g.relu6(y, &[1, c, h, h]);
        y = g.conv(y, pw(oc));
        if oc == c {
            y = g.relu6(y, &[1, c, h, h]);
        }
    }
    let graph = Arc::new(g.output(y));
    let mut cpu = crate::backend::cpu::CpuBackend::new();
    for id in 1..=3 {
        cpu.compile(id, graph.clone()).unwrap();
    }
    // Compiled nodes (the clamps fused): depthwise, 1x1, depthwise, 1x1.
    let plan = cpu
        .graphs
        .get_mut(&2)
        .unwrap()
        .nchwc
        .as_mut()
        .expect("a plan");
    let chains: Vec<_> = [0, 2]
        .iter()
        .map(|&n| {
            plan.chain(n)
                .map(|ch| (ch.expand, ch.depthwise, ch.project))
        })
        .collect();
    assert_eq!(chains, [Some((None, 0, Some(1))), Some((None, 2, Some(3)))]);
    assert_eq!(plan.chains.len(), 2);
    assert!((0..4)
        .map(|m| plan.is_fused(m))
        .eq([false, true, false, true]));
    plan.chains.clear();
    plan.fused.iter_mut().for_each(|f| *f = false);
    cpu.graphs.get_mut(&3).unwrap().nchwc = None;
    let x = random(c * h * h, 7);
    fused_apart_plain(&mut cpu, &graph, &x);
}

/// A plane too wide for a band of one row within the bound runs node by
/// node (its intermediates then count against the memory budget).
#[test]
fn a_plane_too_wide_for_the_band_buffers_is_not_chained() {
    use crate::backend::Backend;
    if !available() {
        return;
    }
    let block = |w| Block {
        x: (1, 8, 1, w),
        expand: true,
        c: 16,
        k: (3, 3),
        pad: [1; 4],
        s: 1,
        d: 1,
        project: Some(8),
        residual: false,
    };
    // 16 channels: 64 bytes a pixel, times three expanded rows and an
    // output row.
    for (w, chained) in [(16_000, true), (17_000, false)] {
        let graph = Arc::new(block(w).graph());
        let mut cpu = crate::backend::cpu::CpuBackend::new();
        cpu.compile(1, graph).unwrap();
        let plan = cpu.graphs[&1].nchwc.as_ref().expect("a plan");
        assert_eq!(plan.chain(0).is_some(), chained, "width {w}");
    }
}

/// The kernels' cases at sizes Miri interprets in seconds (see
/// `tests/miri.rs`).
mod miri;

/// Padding and strides so large that a padded plane's size overflows:
/// 2^31 rows by 2^30 columns of 8 floats is 2^64, which wrapped to an
/// empty copy that the depthwise kernel then read far outside of (the
/// direct kernel's padded copy wrapped the same way). Such a
/// convolution is refused with an error, in every form.
#[test]
fn padding_whose_padded_plane_overflows_is_refused() {
    let (sh, sw) = ((1 << 30) - 1, (1 << 29) - 1);
    let padding = [1 << 30, (1 << 30) - 1, 1 << 29, (1 << 29) - 1];
    for groups in [8, 1] {
        let p = Conv2dParams {
            has_bias: true,
            ..crate::backend::cpu::conv::tests::params(
                (1, 8, 1, 1),
                (8, 2, 2),
                padding,
                [sh, sw],
                [1, 1],
                groups,
            )
        };
        assert_eq!((p.out_h, p.out_w), (3, 3));
        let f = random(8 * (8 / groups) * 4, 3);
        for isa in isas() {
            let (g, c) = one_conv(&p, &f, isa);
            let (x, fb, bb) = (
                Buf::F32(random(8, 1)),
                Buf::F32(f.clone()),
                Buf::F32(vec![0.5; 8]),
            );
            let got = conv(&c, &p, &[&x, &fb, &bb], None, &g.operands[3]);
            assert!(got.is_err(), "groups {groups} {isa:?}");
        }
    }
}

/// nhwc and float16 networks on the blocked kernels (see
/// `tests/layouts.rs`).
mod layouts;

/// Windowed pooling and channel concatenation on the blocked layout (see
/// `tests/pools.rs`).
mod pools;

/// 3x3 convolutions by Winograd and the plan's choice of that form (see
/// `tests/winograd_form.rs`).
mod winograd_form;
use winograd_form::winograd_case;

/// Float16 depthwise chains compute in float32 and round each stage's
/// rows to float16 where its node rounds its output: the bits of the same
/// blocked nodes run one by one, for every form of the kernels (a
/// residual add stays a node of its own in float16).
#[test]
fn float16_depthwise_chains_give_the_bits_of_their_nodes() {
    use crate::backend::Backend;
    if !available() {
        return;
    }
    let block = block3x3;
    let cases = [
        block((1, 16, 30, 29), true, 32, [1; 4], 1, Some(16), true),
        block((2, 8, 57, 60), true, 24, [0, 1, 0, 1], 2, Some(16), false),
        block((1, 8, 112, 112), true, 48, [1; 4], 1, Some(8), false),
        block((1, 16, 28, 28), false, 16, [1; 4], 1, Some(8), false),
        block((1, 8, 30, 29), true, 16, [1, 0, 1, 0], 1, None, false),
    ];
    for (i, b) in cases.iter().enumerate() {
        let graph = Arc::new(layouts::in_half(&b.graph()));
        let x: Vec<u16> = random(b.x.0 * b.x.1 * b.x.2 * b.x.3, i as u64)
            .iter()
            .map(|&v| crate::f16::f32_to_f16(v * 4.0))
            .collect();
        let mut cpu = crate::backend::cpu::CpuBackend::new();
        let run = |cpu: &mut crate::backend::cpu::CpuBackend, id| {
            cpu.compute(id, &graph, vec![Buf::F16(x.clone())])
                .unwrap()
                .remove(0)
        };
        cpu.compile(1, graph.clone()).unwrap();
        let plan = cpu.graphs[&1].nchwc.as_ref().expect("a plan");
        let stem = usize::from(b.residual);
        assert!(plan.chain(stem).is_some(), "case {i}: no chain");
        for isa in isas() {
            chained_and_apart(&mut cpu, &graph, isa, i);
            let (got, want) = (run(&mut cpu, 3), run(&mut cpu, 4));
            assert!(matches!(got, Buf::F16(_)), "case {i}");
            assert_eq!(got, want, "case {i} {isa:?}");
        }
    }
}

/// The tiles after a panel's first ask for the next panel's lines, each
/// tile the run after the one before, until the panel is covered; the
/// first tile, and any tile of the last panel, ask for none.
#[test]
fn tiles_after_the_first_ask_for_the_next_panel() {
    let rows = 72;
    let next = Panel {
        ob0: 4,
        nb: 4,
        off: 1000,
    };
    let w = std::ptr::null::<f32>().wrapping_add(1 << 20);
    let at = |k| direct::next_from(k, Some(&next), rows, w);
    assert!(
        at(0).is_null(),
        "the first tile reads its own panel from memory"
    );
    // A panel of 4 blocks is 72 rows of 32 floats; a tile asks for one
    // line of 16 floats per row it steps through, so two tiles cover it.
    assert_eq!(at(1), w.wrapping_add(1000));
    assert_eq!(at(2), w.wrapping_add(1000 + 72 * 16));
    assert!(at(3).is_null(), "the panel is covered after two tiles");
    assert!(direct::next_from(1, None, rows, w).is_null());
    // A narrow next panel (2 blocks: 16 floats a row) takes one tile.
    let narrow = Panel { nb: 2, ..next };
    assert_eq!(
        direct::next_from(1, Some(&narrow), rows, w),
        w.wrapping_add(1000)
    );
    assert!(direct::next_from(2, Some(&narrow), rows, w).is_null());
}

/// Panels of two blocks run on one vector of the 16-lane portable form
/// always (so that `direct_matches_the_nchw_kernels` compares that tile
/// with the 8-lane forms' two-vector one bit for bit), never where no
/// kind is twice another's width, and on AVX-512 as measured (either
/// answer, the same one at every call); such a tile holds 16 pixels,
/// which the tiles' offset arrays hold.
#[test]
fn panels_of_two_blocks_take_one_wide_vector_where_it_is_faster() {
    use simd::Lanes;
    // SAFETY: the portable form needs no CPU features.
    unsafe {
        assert!(direct::one_vector::<Lanes<16>, Lanes<8>>());
        assert!(!direct::one_vector::<Lanes<8>, Lanes<8>>());
    }
    assert_eq!(direct::tile_pixels(16, 1), 16);
    assert_eq!(direct::tile_pixels(16, 2), 12);
    assert_eq!(direct::tile_pixels(8, 2), 6);
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m256, __m512};
        if matches!(Isa::best(), Some(Isa::Avx2 | Isa::Avx512)) {
            // SAFETY: AVX2 and FMA, detected.
            assert!(!unsafe { direct::one_vector::<__m256, __m256>() });
        }
        if Isa::best() == Some(Isa::Avx512) {
            // SAFETY: AVX-512F, AVX2 and FMA, detected.
            let [first, again] = [(); 2].map(|_| unsafe { direct::one_vector::<__m512, __m256>() });
            assert_eq!(first, again);
        }
    }
}

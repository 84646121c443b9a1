//! 3x3 convolutions by Winograd's F(2x2, 3x3): the form against the
//! NCHW kernel (within the bound of two orders of the same terms, with a
//! residual and bounds after it bit for bit), special values kept inside
//! their windows, and when the plan picks the form.

use super::*;

/// Winograd's form of a 3x3 convolution (packed for `isa`).
fn winograd_form(p: &Conv2dParams, f: &[f32], isa: Isa) -> Conv {
    let (ic, oc) = (p.in_channels, p.out_channels);
    let panels = panel_list(oc / L, isa, ic);
    let u = winograd::pack(f, ic, oc, &panels);
    Conv::Winograd { u, panels, isa }
}

/// Winograd F(2x2, 3x3) against the NCHW kernel, over padding (none,
/// even, uneven, wider than the kernel's reach), odd output sizes (tiles
/// cut at the edges), batches, groups of tiles that cross rows and
/// images, odd output block counts (panels of 4, 2 and 1), bias, bounds
/// and a residual. Each output is held to the bound any summation order
/// of its terms meets, (k + 1) * eps times the sum of their magnitudes;
/// each form ([`isas`]) gives the same bits; with a residual the bits
/// are the sum's, as the add node would compute it.
#[test]
fn winograd_matches_the_nchw_kernel() {
    let cases = [
        // (n, c, h, w), o, padding
        ((1, 8, 4, 4), 8, [1, 1, 1, 1]),
        ((1, 16, 8, 8), 16, [1, 1, 1, 1]),
        ((2, 16, 7, 9), 24, [1, 1, 1, 1]),
        ((1, 32, 6, 5), 8, [0; 4]),
        ((1, 24, 10, 11), 56, [2, 0, 1, 2]),
        ((3, 8, 5, 3), 16, [0, 1, 1, 0]),
        ((1, 64, 20, 20), 64, [1, 1, 1, 1]),
        ((1, 16, 3, 3), 16, [3, 3, 3, 3]),
        ((2, 64, 30, 29), 32, [1, 1, 1, 1]),
        // Few tiles, many channels: the panels split between tasks,
        // which share a group's transformed input.
        ((1, 128, 4, 4), 128, [1, 1, 1, 1]),
        ((1, 64, 3, 3), 512, [1, 1, 1, 1]),
    ];
    for (i, &case) in cases.iter().enumerate() {
        winograd_case(i, case);
    }
}

/// A Winograd convolution: input `(n, c, h, w)`, output channels,
/// padding.
pub(super) type WinogradCase = ((usize, usize, usize, usize), usize, [usize; 4]);

/// [`winograd_matches_the_nchw_kernel`] on case `i`.
pub(super) fn winograd_case(i: usize, (x, o, pad): WinogradCase) {
    let dims = |d: &OperandDescriptor| (d.shape[0], d.shape[1], d.shape[2], d.shape[3]);
    let p = params(x, (o, 3, 3), pad, 1, 1, 1);
    assert!(winograd::fits(&p), "case {i}");
    let xs = random(p.batch * p.in_channels * p.in_h * p.in_w, i as u64 + 1);
    let f = random(p.out_channels * p.in_channels * 9, i as u64 + 40);
    let bias = random(p.out_channels, i as u64 + 80);
    let out = f32d(&[p.batch, p.out_channels, p.out_h, p.out_w]);
    let (xb, fb, bb) = (
        Buf::F32(xs.clone()),
        Buf::F32(f.clone()),
        Buf::F32(bias.clone()),
    );
    let abs = |v: &[f32]| Buf::F32(v.iter().map(|x| x.abs()).collect());
    let mag = crate::backend::cpu::conv::conv2d(&p, &[&abs(&xs), &abs(&f), &abs(&bias)], &out)
        .unwrap()
        .to_f32_vec();
    let terms = (p.in_channels * 9 + 1) as f32;
    let xblk = Buf::F32(block(&xs, dims(&f32d(&[x.0, x.1, x.2, x.3]))));
    for bounds in [None, Some([-0.25f32, 0.5])] {
        let lim = bounds.map(|b| Buf::F32(b.to_vec()));
        let mut ins = vec![&xb, &fb, &bb];
        ins.extend(lim.as_ref());
        let want = crate::backend::cpu::conv::conv2d(&p, &ins, &out)
            .unwrap()
            .to_f32_vec();
        ins[0] = &xblk;
        let mut first: Option<Vec<f32>> = None;
        for isa in isas() {
            let c = winograd_form(&p, &f, isa);
            let got = unblock(
                &conv(&c, &p, &ins, None, &out).unwrap().to_f32_vec(),
                dims(&out),
            );
            for (k, (a, b)) in got.iter().zip(&want).enumerate() {
                let tol = terms * f32::EPSILON * mag[k];
                assert!((a - b).abs() <= tol, "case {i} {isa:?} at {k}: {a} vs {b}");
            }
            if bounds.is_some() {
                assert!(
                    got.contains(&0.5) && got.contains(&-0.25),
                    "case {i}: bounds unused"
                );
            }
            let r = random(got.len(), i as u64 + 120);
            let rb = Buf::F32(block(&r, dims(&out)));
            let with = |after| {
                let v = conv(&c, &p, &ins, Some((&rb, after)), &out)
                    .unwrap()
                    .to_f32_vec();
                unblock(&v, dims(&out))
            };
            check_sums(
                &with(NO_BOUNDS),
                &with(AFTER),
                &got,
                &r,
                &format!("case {i} {isa:?}"),
            );
            match &first {
                None => first = Some(got),
                Some(f0) => assert!(
                    same_bits(f0, &got),
                    "case {i}: {isa:?} differs from the portable form"
                ),
            }
        }
    }
}

/// Special values: a NaN or an infinite input reaches exactly the
/// outputs whose windows hold it (the transforms' zero coefficients add
/// nothing of it to the others), as in the direct form; there a NaN
/// stays NaN, and an infinity gives an infinity or NaN (the direct form
/// gives plus or minus infinity where no filter tap is 0).
#[test]
fn winograd_keeps_special_values_inside_their_windows() {
    let p = params((1, 8, 6, 6), (8, 3, 3), [1, 1, 1, 1], 1, 1, 1);
    let f = random(8 * 8 * 9, 8);
    let out = f32d(&[1, 8, 6, 6]);
    let (fb, bb) = (Buf::F32(f.clone()), Buf::F32(vec![0.0; 8]));
    for special in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let mut xs = random(8 * 36, 7);
        xs[2 * 36 + 2 * 6 + 3] = special; // channel 2, row 2, column 3
        let xb = Buf::F32(xs.clone());
        let want = crate::backend::cpu::conv::conv2d(&p, &[&xb, &fb, &bb], &out)
            .unwrap()
            .to_f32_vec();
        let xblk = Buf::F32(block(&xs, (1, 8, 6, 6)));
        for isa in isas() {
            let c = winograd_form(&p, &f, isa);
            let got = conv(&c, &p, &[&xblk, &fb, &bb], None, &out).unwrap();
            let got = unblock(&got.to_f32_vec(), (1, 8, 6, 6));
            for (k, (a, b)) in got.iter().zip(&want).enumerate() {
                let (y, x) = ((k % 36) / 6, k % 6);
                let inside = (1..=3).contains(&y) && (2..=4).contains(&x);
                assert_eq!(!a.is_finite(), inside, "{special} {isa:?} at {k}");
                assert_eq!(!b.is_finite(), inside, "{special} {isa:?} at {k}");
                if special.is_nan() {
                    assert_eq!(a.is_nan(), inside, "{isa:?} at {k}");
                }
            }
        }
    }
}

/// The plan runs 3x3 convolutions of 16 or more input channels by
/// Winograd, smaller ones directly, and lets a Winograd convolution do
/// the residual add after it; the graph's results are the same bits
/// with the add run as a node, and near the plain graph's.
#[test]
fn the_plan_runs_wide_3x3_convolutions_by_winograd() {
    use crate::backend::Backend;
    if !available() {
        return;
    }
    // x -> 3x3 (8 -> 16, direct) -> 3x3 (16 -> 16, Winograd) -> + the
    // first's output.
    let p1 = params((1, 8, 9, 9), (16, 3, 3), [1, 1, 1, 1], 1, 1, 1);
    let p2 = params((1, 16, 9, 9), (16, 3, 3), [1, 1, 1, 1], 1, 1, 1);
    let conv = |p: &Conv2dParams, inputs, out| node(Op::Conv2d(p.clone()), inputs, out);
    let a = [1, 16, 9, 9];
    let graph = Arc::new(Graph {
        operands: vec![
            f32d(&[1, 8, 9, 9]),
            f32d(&[16, 8, 3, 3]),
            f32d(&[16]),
            f32d(&[16, 16, 3, 3]),
            f32d(&a),
            f32d(&a),
            f32d(&a),
        ],
        sources: vec![
            Source::Input("x".into()),
            Source::Constant(bytes(&random(16 * 8 * 9, 2))),
            Source::Constant(bytes(&random(16, 3))),
            Source::Constant(bytes(&random(16 * 16 * 9, 4))),
            Source::Node { node: 0, index: 0 },
            Source::Node { node: 1, index: 0 },
            Source::Node { node: 2, index: 0 },
        ],
        nodes: vec![
            conv(&p1, vec![0, 1, 2], 4),
            conv(&p2, vec![4, 3, 2], 5),
            node(Op::Binary(BinaryKind::Add), vec![5, 4], 6),
        ],
        inputs: vec![("x".into(), 0)],
        outputs: vec![("y".into(), 6)],
    });
    let mut cpu = crate::backend::cpu::CpuBackend::new();
    for id in 1..=3 {
        cpu.compile(id, graph.clone()).unwrap();
    }
    let plan = cpu.graphs[&1].nchwc.as_ref().expect("a plan");
    assert!(matches!(plan.conv(0), Some(Conv::Direct { .. })));
    assert!(matches!(plan.conv(1), Some(Conv::Winograd { .. })));
    let s = plan.sum(1).expect("the Winograd convolution does the add");
    assert_eq!((s.residual, s.out), (4, 6));
    let g2 = cpu.graphs.get_mut(&2).unwrap().nchwc.as_mut().unwrap();
    g2.sums.clear();
    g2.fused.iter_mut().for_each(|f| *f = false);
    cpu.graphs.get_mut(&3).unwrap().nchwc = None;
    let x = random(8 * 81, 1);
    fused_apart_plain(&mut cpu, &graph, &x);
}

/// A 3x3 convolution of 512 channels to 512 over 7x7 pixels (16 tiles,
/// a transformed filter of 16 MiB, more than any L2 holds) runs on the
/// direct kernel; over 16x16 pixels (64 tiles) by Winograd.
#[test]
fn few_tiles_of_a_wide_filter_run_directly() {
    use crate::backend::Backend;
    if !available() {
        return;
    }
    let f = bytes(&random(512 * 512 * 9, 5));
    for (hw, winograd) in [(7, false), (16, true)] {
        let p = Conv2dParams {
            has_bias: false,
            ..params((1, 512, hw, hw), (512, 3, 3), [1, 1, 1, 1], 1, 1, 1)
        };
        let graph = Arc::new(Graph {
            operands: vec![
                f32d(&[1, 512, hw, hw]),
                f32d(&[512, 512, 3, 3]),
                f32d(&[1, 512, hw, hw]),
                f32d(&[1, 512, hw, hw]),
            ],
            sources: vec![
                Source::Input("x".into()),
                Source::Constant(f.clone()),
                Source::Node { node: 0, index: 0 },
                Source::Node { node: 1, index: 0 },
            ],
            nodes: vec![
                node(Op::Conv2d(p.clone()), vec![0, 1], 2),
                node(Op::Conv2d(p.clone()), vec![2, 1], 3),
            ],
            inputs: vec![("x".into(), 0)],
            outputs: vec![("y".into(), 3)],
        });
        let mut cpu = crate::backend::cpu::CpuBackend::new();
        cpu.compile(1, graph).unwrap();
        let plan = cpu.graphs[&1].nchwc.as_ref().expect("a plan");
        for n in 0..2 {
            let c = plan.conv(n);
            assert_eq!(
                matches!(c, Some(Conv::Winograd { .. })),
                winograd,
                "{hw}x{hw}, node {n}"
            );
            assert!(matches!(
                c,
                Some(Conv::Direct { .. } | Conv::Winograd { .. })
            ));
        }
    }
}

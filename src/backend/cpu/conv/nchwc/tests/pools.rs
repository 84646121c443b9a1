//! Windowed pooling and channel concatenation read the blocked layout:
//! the kernel gives the bits of the NCHW kernel (special values
//! included), and networks of convolutions, pools and concats (in
//! NCHW, nhwc and float16) give the bits of the same plan with those
//! nodes run on converted copies.

use super::layouts::{in_half, in_nhwc, nhwc_of};
use super::*;
use crate::backend::cpu::conv::tests::pool_params as pool;
use crate::backend::cpu::simd::{levels, SimdLevel};
use crate::graph::ops::conv::{Pool2dParams, PoolKind};
use crate::graph::ops::shape::ConcatParams;

/// Input, window, padding, strides, dilations, ceil rounding.
type Case = (
    (usize, usize, usize, usize),
    [usize; 2],
    [usize; 4],
    [usize; 2],
    [usize; 2],
    bool,
);

/// The shapes and windows the tests run: SqueezeNet's (3x3, stride 2,
/// ceil), ResNet's stem (3x3, stride 2, padded), a window that can lie
/// wholly in the padding (ceil with a large stride), dilation, uneven
/// padding and strides, a 2x2 and a window of the whole height; rows
/// of 3x3 windows inside the input that the kernel takes four at a time
/// (21 of them with one left over, and dilated ones behind padding).
fn cases() -> Vec<Case> {
    vec![
        ((1, 16, 15, 15), [3, 3], [0; 4], [2, 2], [1, 1], true),
        ((2, 8, 16, 13), [3, 3], [1, 1, 1, 1], [2, 2], [1, 1], false),
        ((1, 8, 7, 9), [2, 2], [0, 1, 0, 1], [3, 3], [1, 1], true),
        ((1, 24, 11, 10), [3, 2], [2, 0, 1, 2], [1, 2], [2, 3], false),
        ((1, 8, 8, 8), [2, 2], [0; 4], [2, 2], [1, 1], false),
        ((1, 16, 6, 5), [6, 1], [0, 0, 1, 1], [1, 1], [1, 1], false),
        ((1, 8, 9, 23), [3, 3], [0; 4], [1, 1], [1, 1], false),
        ((2, 16, 10, 31), [3, 3], [1, 2, 2, 1], [1, 1], [2, 2], false),
    ]
}

/// Pooling `p` of NCHW `v` (of shape `x`) by the blocked kernel at every
/// vector width this CPU has (each result back in NCHW), and by the NCHW
/// kernel.
fn blocked_and_nchw(
    p: &Pool2dParams,
    x: (usize, usize, usize, usize),
    v: &[f32],
) -> (Vec<(SimdLevel, Vec<f32>)>, Vec<f32>) {
    let od = OperandDescriptor {
        data_type: DataType::Float32,
        shape: vec![x.0, x.1, p.out_h, p.out_w],
    };
    let want = crate::backend::cpu::conv::pool2d(p, &Buf::F32(v.to_vec()), &od)
        .unwrap()
        .to_f32_vec();
    let blocked = block(v, x);
    let got = levels()
        .into_iter()
        .map(|level| {
            // SAFETY: `levels` gives only levels this CPU has.
            let got = unsafe { pool::window_at(level, p, &blocked) }.unwrap();
            (level, unblock(&got, (x.0, x.1, p.out_h, p.out_w)))
        })
        .collect();
    (got, want)
}

/// Puts into `v`, every `period` floats, a pair of specials (NaNs of two
/// payloads, both zeros, both infinities, in turn, so that windows see the
/// two NaNs side by side: the first of a window's NaNs is its result) and
/// a run of a zero and a negative zero (windows see both side by side).
fn with_specials(v: &mut [f32], period: usize) {
    let specials = [
        f32::NAN,
        f32::from_bits(0x7fc0_1234),
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ];
    for (j, e) in v.iter_mut().enumerate() {
        match j % period {
            0 | 1 => *e = specials[(j / period + j % period) % specials.len()],
            5 => *e = 0.0,
            6 => *e = -0.0,
            _ => {}
        }
    }
}

/// The kernel against the NCHW kernel, every kind and case, on input
/// that holds NaNs of two payloads, both zeros and both infinities
/// (max keeps the first NaN of a window and the first of equal values,
/// as the NCHW kernel does): the same bits, NaN payloads of the sums
/// aside.
#[test]
fn windowed_pooling_gives_the_bits_of_the_nchw_kernel() {
    for (i, &(x, win, pad, s, d, ceil)) in cases().iter().enumerate() {
        for kind in [PoolKind::Max, PoolKind::Average, PoolKind::L2] {
            let p = pool(kind, x, win, pad, s, d, ceil);
            assert!(pool::is_window(&p), "case {i}");
            let len = x.0 * x.1 * x.2 * x.3;
            let mut v = random(len, i as u64 + 40);
            with_specials(&mut v, 23);
            let (got, want) = blocked_and_nchw(&p, x, &v);
            for (level, got) in got {
                // Max selects, so it keeps a NaN's payload; sums compute
                // with it.
                let same = match kind {
                    PoolKind::Max => same_bits(&got, &want),
                    _ => same_bits_any_nan(&got, &want),
                };
                assert!(same, "case {i} {kind:?} {level:?}");
            }
        }
    }
    // Not whole channel blocks, a global window, a zero stride: no
    // blocked form.
    let global = pool(
        PoolKind::Max,
        (1, 8, 4, 4),
        [4, 4],
        [0; 4],
        [1, 1],
        [1, 1],
        false,
    );
    assert!(!pool::is_window(&global));
    let mut odd = pool(
        PoolKind::Max,
        (1, 12, 4, 4),
        [2, 2],
        [0; 4],
        [1, 1],
        [1, 1],
        false,
    );
    assert!(!pool::is_window(&odd));
    odd.channels = 8;
    odd.strides = [0, 1];
    assert!(!pool::is_window(&odd));
    assert!(pool::window(&odd, &[0.0; 128]).is_err());
}

/// The 3x3 max kernel's portable form (`Lanes`, on any machine) against
/// the NCHW kernel, on windows that all lie inside the input (its steps
/// along a row, between rows and between taps all differ from a block's
/// 8 floats), with NaNs of two payloads side by side, both zeros and
/// both infinities: the same bits. The hardware forms meet the NCHW
/// kernel through `window_at` in the test above.
#[test]
fn the_portable_3x3_max_kernel_gives_the_bits_of_the_nchw_kernel() {
    use super::simd::Lanes;
    let x = (1, 16, 11, 23);
    let (h, w) = (x.2, x.3);
    let p = pool(PoolKind::Max, x, [3, 3], [0; 4], [1, 2], [2, 1], false);
    let mut v = random(x.1 * h * w, 7);
    with_specials(&mut v, 13);
    let (_, want) = blocked_and_nchw(&p, x, &v);
    let blocked = block(&v, x);
    let (oh, ow) = (p.out_h, p.out_w);
    let mut got = vec![0.0f32; x.1 * oh * ow];
    let steps = [p.strides[1] * L, p.dilations[0] * w * L, p.dilations[1] * L];
    for b in 0..x.1 / L {
        for oy in 0..oh {
            let at = (b * h + oy * p.strides[0]) * w * L;
            let out = (b * oh + oy) * ow * L;
            // SAFETY: `Lanes` needs no CPU feature; with no padding and
            // floor rounding every window of output row `oy` lies inside
            // block `b`'s plane, so each tap's 8 floats are in `blocked`;
            // the row's `ow` output blocks are in `got`.
            unsafe {
                pool::max3x3_row::<Lanes<8>>(
                    blocked.as_ptr().add(at),
                    steps,
                    ow,
                    got.as_mut_ptr().add(out),
                )
            };
        }
    }
    assert!(same_bits(&unblock(&got, (x.0, x.1, oh, ow)), &want));
}

/// Global pooling of the blocked layout, at every vector width this CPU
/// has, on input with NaNs of two payloads, zeros of both signs and
/// infinities: the bits of the NCHW kernel (NaN payloads of the sums
/// aside), planes of one pixel and of many, one batch element and two.
#[test]
fn global_pooling_gives_the_bits_of_the_nchw_kernel_at_every_width() {
    let specials = [f32::NAN, f32::from_bits(0x7fc0_4321), -0.0, f32::INFINITY];
    for (i, x) in [(1, 24, 7, 7), (2, 16, 13, 13), (1, 8, 1, 1), (1, 16, 3, 5)]
        .into_iter()
        .enumerate()
    {
        for kind in [PoolKind::Max, PoolKind::Average, PoolKind::L2] {
            let p = pool(kind, x, [x.2, x.3], [0; 4], [1, 1], [1, 1], false);
            assert!(pool::is_global(&p), "case {i}");
            let len = x.0 * x.1 * x.2 * x.3;
            let mut v = random(len, i as u64 + 90);
            for (j, e) in v.iter_mut().enumerate().filter(|(j, _)| j % 17 == 3) {
                *e = specials[(j / 17) % specials.len()];
            }
            let od = OperandDescriptor {
                data_type: DataType::Float32,
                shape: vec![x.0, x.1, 1, 1],
            };
            let want = crate::backend::cpu::conv::pool2d(&p, &Buf::F32(v.clone()), &od)
                .unwrap()
                .to_f32_vec();
            let blocked = block(&v, x);
            for level in levels() {
                // SAFETY: `levels` gives only levels this CPU has.
                let got = unsafe { pool::global_at(level, &p, &blocked) }.unwrap();
                let same = match kind {
                    PoolKind::Max => same_bits(&got, &want),
                    _ => same_bits_any_nan(&got, &want),
                };
                assert!(same, "case {i} {kind:?} {level:?}");
            }
        }
    }
}

/// Max pools of input without NaN, whose windows tie between zeros of
/// both signs (in one row and across rows, the other values negative),
/// and of the same input with one NaN, one infinity or one huge value:
/// the bits of the NCHW kernel (the first of equal values, the first
/// NaN). Every case above, a tall window, and SqueezeNet's first pool,
/// which the kernel splits into tasks over two threads.
#[test]
fn max_pools_keep_the_first_of_tied_zeros() {
    let mut all = cases();
    all.push(((1, 64, 111, 111), [3, 3], [0; 4], [2, 2], [1, 1], true));
    all.push(((1, 8, 40, 12), [9, 2], [4, 4, 0, 1], [1, 1], [1, 1], false));
    let pool2 = crate::backend::cpu::pool(2).unwrap();
    for (i, &(x, win, pad, s, d, ceil)) in all.iter().enumerate() {
        let p = pool(PoolKind::Max, x, win, pad, s, d, ceil);
        let len = x.0 * x.1 * x.2 * x.3;
        let mut v: Vec<f32> = random(len, i as u64 + 70)
            .iter()
            .map(|e| -e.abs())
            .collect();
        for (j, e) in v.iter_mut().enumerate() {
            match j % 7 {
                0 | 3 => *e = 0.0,
                1 | 5 => *e = -0.0,
                _ => {}
            }
        }
        for special in [
            None,
            Some(f32::NAN),
            Some(f32::NEG_INFINITY),
            Some(f32::MAX),
        ] {
            let mut v = v.clone();
            if let Some(e) = special {
                // Near the middle of a plane.
                v[len / 2 + x.3 / 2] = e;
            }
            let (got, want) = pool2.install(|| blocked_and_nchw(&p, x, &v));
            for (level, got) in got {
                assert!(same_bits(&got, &want), "case {i} {special:?} {level:?}");
            }
        }
    }
}

/// Concatenation of blocked operands is each batch element's parts one
/// after another: the blocked form of the NCHW concatenation. At 37x41
/// the output (145,632 floats) is copied in three pieces by the threads,
/// whose bounds fall inside the parts.
#[test]
fn blocked_concat_is_the_blocked_form_of_the_concatenation() {
    for (n, h, w) in [(2, 3, 5), (2, 37, 41)] {
        let cs = [8, 24, 16];
        let parts: Vec<Vec<f32>> = cs
            .iter()
            .enumerate()
            .map(|(i, &c)| random(n * c * h * w, i as u64 + 60))
            .collect();
        let mut want = Vec::new();
        for b in 0..n {
            for (p, &c) in parts.iter().zip(&cs) {
                want.extend_from_slice(&p[b * c * h * w..(b + 1) * c * h * w]);
            }
        }
        let total = cs.iter().sum::<usize>();
        let blocked: Vec<Vec<f32>> = parts
            .iter()
            .zip(&cs)
            .map(|(p, &c)| block(p, (n, c, h, w)))
            .collect();
        let refs: Vec<&[f32]> = blocked.iter().map(|v| &v[..]).collect();
        let pool2 = crate::backend::cpu::pool(2).unwrap();
        let got = pool2.install(|| pool::concat(&refs, n)).unwrap();
        assert!(same_bits(&unblock(&got, (n, total, h, w)), &want));
    }
    assert!(pool::concat(&[&[0.0; 5]], 2).is_err());
}

/// A small SqueezeNet-like network of batch `n`: a convolution, a max
/// pool (ceil rounding), a fire module (a 1x1 squeeze to `sqc` channels,
/// then 1x1 and 3x3 expands concatenated: the 3x3 runs by Winograd from
/// 16 channels, directly from 8), an average pool with padding and a 1x1
/// convolution.
fn fire_graph(n: usize, sqc: usize) -> (Graph, (usize, usize, usize, usize)) {
    let (c, h) = (8, 17);
    let mut g = Builder::new(&[n, c, h, h]);
    let y = g.conv(0, params((n, c, h, h), (16, 3, 3), [1; 4], 1, 1, 1));
    let mp = pool(
        PoolKind::Max,
        (n, 16, h, h),
        [3, 3],
        [0; 4],
        [2, 2],
        [1, 1],
        true,
    );
    let s = mp.out_h;
    let y = g.push(Op::Pool2d(mp), vec![y], &[n, 16, s, s]);
    let sq = g.conv(y, params((n, 16, s, s), (sqc, 1, 1), [0; 4], 1, 1, 1));
    let e1 = g.conv(sq, params((n, sqc, s, s), (16, 1, 1), [0; 4], 1, 1, 1));
    let e3 = g.conv(sq, params((n, sqc, s, s), (24, 3, 3), [1; 4], 1, 1, 1));
    let cat = g.push(
        Op::Concat(ConcatParams { axis: 1 }),
        vec![e1, e3],
        &[n, 40, s, s],
    );
    let ap = pool(
        PoolKind::Average,
        (n, 40, s, s),
        [3, 3],
        [1; 4],
        [1, 1],
        [1, 1],
        false,
    );
    let y = g.push(Op::Pool2d(ap), vec![cat], &[n, 40, s, s]);
    let y = g.conv(y, params((n, 40, s, s), (16, 1, 1), [0; 4], 1, 1, 1));
    (g.output(y), (n, c, h, h))
}

/// The network runs its pools and concat on the blocked layout (no
/// layout change between its first convolution and its output), with
/// the bits of the same plan running those nodes on converted copies;
/// in NCHW, nhwc (the same bits as NCHW) and float16, on every form of
/// the kernels, at batch 1 and 2, with direct and Winograd expands. At
/// batch 1 the expands write into the concatenation's output (float16
/// ones rounding their parts) and the concat node runs no more.
#[test]
fn pools_and_concats_keep_networks_blocked() {
    for (n, sqc) in [(1, 8), (1, 16), (2, 16)] {
        pools_and_concats_keep_network_blocked(n, sqc);
    }
}

fn pools_and_concats_keep_network_blocked(n: usize, sqc: usize) {
    use crate::backend::Backend;
    if !available() {
        return;
    }
    let (nchw, x) = fire_graph(n, sqc);
    let xs = random(x.0 * x.1 * x.2 * x.3, 77);
    let out = &nchw.operands[nchw.outputs[0].1].shape;
    let od = (out[0], out[1], out[2], out[3]);
    let forms = [
        ("nchw", nchw.clone()),
        ("nhwc", in_nhwc(&nchw)),
        ("float16", in_half(&nchw)),
    ];
    let mut nchw_bits = Vec::new();
    for (name, g) in forms {
        let g = Arc::new(g);
        let input = match name {
            "nhwc" => Buf::F32(nhwc_of(&xs, x, false)),
            "float16" => Buf::f16_from_f32(&xs),
            _ => Buf::F32(xs.clone()),
        };
        let mut cpu = crate::backend::cpu::CpuBackend::new();
        cpu.compile(1, g.clone()).unwrap();
        cpu.compile(2, g.clone()).unwrap();
        for isa in isas() {
            // Graph 2: the pools and the concat on converted copies.
            for (id, windows) in [(1, true), (2, false)] {
                let cg = cpu.graphs.get_mut(&id).unwrap();
                cg.nchwc = plan_with(&cg.graph, &cg.constants, isa, windows);
            }
            let pl = cpu.graphs[&1].nchwc.as_ref().expect("a plan");
            let kinds: Vec<&str> = g
                .nodes
                .iter()
                .enumerate()
                .map(|(m, node)| match &node.op {
                    Op::Pool2d(_) if pl.is_pool(m) => "pool",
                    Op::Concat(_) if pl.is_concat(m) => "concat",
                    Op::Conv2d(_) if pl.conv(m).is_some() => "conv",
                    _ => "other",
                })
                .collect();
            assert_eq!(
                kinds,
                ["conv", "pool", "conv", "conv", "conv", "concat", "pool", "conv"],
                "{name} {isa:?}"
            );
            let forms: Vec<&str> = [3, 4]
                .iter()
                .map(|&m| match pl.conv(m) {
                    Some(Conv::Direct { .. }) => "direct",
                    Some(Conv::Winograd { .. }) => "winograd",
                    _ => "other",
                })
                .collect();
            let e3 = if sqc >= 16 { "winograd" } else { "direct" };
            assert_eq!(forms, ["direct", e3], "{name} {isa:?}");
            let in_place = n == 1;
            assert_eq!(pl.is_elided(5), in_place, "{name} {isa:?} batch {n}");
            let parts: Vec<_> = [3, 4]
                .iter()
                .map(|&m| pl.concat_part(m).map(|t| t.at))
                .collect();
            let s = g.operands[g.nodes[3].outputs[0]].element_count();
            let want = match in_place {
                true => [Some(0), Some(s)],
                false => [None, None],
            };
            assert_eq!(parts, want, "{name} {isa:?} batch {n}");
            // Every intermediate stays blocked.
            let produced = g.nodes.iter().map(|node| node.outputs[0]);
            assert!(produced.clone().all(|o| pl.is_blocked(o)), "{name} {isa:?}");
            let g2 = cpu.graphs[&2].nchwc.as_ref().expect("a plan");
            assert!((0..g.nodes.len()).all(|m| !g2.is_pool(m) && !g2.is_concat(m)));
            assert!((0..g.nodes.len()).all(|m| !g2.is_elided(m) && g2.concat_part(m).is_none()));
            let run = |cpu: &mut crate::backend::cpu::CpuBackend, id| {
                cpu.compute(id, &g, vec![input.clone()])
                    .unwrap()
                    .remove(0)
                    .to_f32_vec()
            };
            let (got, want) = (run(&mut cpu, 1), run(&mut cpu, 2));
            assert!(same_bits(&got, &want), "{name} {isa:?}");
            match name {
                "nchw" => nchw_bits.push(got),
                "nhwc" => {
                    let back = nhwc_of(&got, od, true);
                    assert!(
                        nchw_bits.iter().any(|b| same_bits(b, &back)),
                        "nhwc {isa:?}"
                    );
                }
                _ => {}
            }
        }
    }
}

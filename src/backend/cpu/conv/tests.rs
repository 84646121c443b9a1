use super::*;
use crate::backend::cpu::simd::levels;
use crate::graph::ops::conv::{ConvTranspose2dParams, TransposeFilterLayout};
use crate::graph::ops::conv::{FilterLayout, Pool2dParams, PoolKind};
use crate::graph::ops::elementwise::ClampParams;
use crate::types::DataType;
use pool::pool2d_at;

/// Every conv2d filter layout.
const FILTER_LAYOUTS: [FilterLayout; 4] = [
    FilterLayout::Oihw,
    FilterLayout::Hwio,
    FilterLayout::Ohwi,
    FilterLayout::Ihwo,
];

fn data(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Direct 7-loop convolution on NCHW input and OIHW filter.
fn naive_conv(p: &Conv2dParams, x: &[f32], f: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    let (cg, og) = (p.in_channels / p.groups, p.out_channels / p.groups);
    let mut out = vec![0.0f32; p.batch * p.out_channels * p.out_h * p.out_w];
    for b in 0..p.batch {
        for o in 0..p.out_channels {
            let g = o / og;
            for y in 0..p.out_h {
                for xo in 0..p.out_w {
                    let mut s = bias.map_or(0.0, |b| b[o] as f64);
                    for c in 0..cg {
                        for ky in 0..p.kernel_h {
                            for kx in 0..p.kernel_w {
                                let iy = (y * p.strides[0] + ky * p.dilations[0]) as isize
                                    - p.padding[0] as isize;
                                let ix = (xo * p.strides[1] + kx * p.dilations[1]) as isize
                                    - p.padding[2] as isize;
                                if iy < 0
                                    || ix < 0
                                    || iy >= p.in_h as isize
                                    || ix >= p.in_w as isize
                                {
                                    continue;
                                }
                                let xi = ((b * p.in_channels + g * cg + c) * p.in_h + iy as usize)
                                    * p.in_w
                                    + ix as usize;
                                let fi = ((o * cg + c) * p.kernel_h + ky) * p.kernel_w + kx;
                                s += x[xi] as f64 * f[fi] as f64;
                            }
                        }
                    }
                    out[((b * p.out_channels + o) * p.out_h + y) * p.out_w + xo] = s as f32;
                }
            }
        }
    }
    out
}

/// Parameters with the output size computed as validation does.
#[allow(clippy::too_many_arguments)]
pub(crate) fn params(
    (batch, c, h, w): (usize, usize, usize, usize),
    (o, kh, kw): (usize, usize, usize),
    padding: [usize; 4],
    strides: [usize; 2],
    dilations: [usize; 2],
    groups: usize,
) -> Conv2dParams {
    let out = |i: usize, k: usize, p0: usize, p1: usize, s: usize, d: usize| {
        (i + p0 + p1 - (k - 1) * d - 1) / s + 1
    };
    Conv2dParams {
        nhwc: false,
        filter_layout: FilterLayout::Oihw,
        padding,
        strides,
        dilations,
        groups,
        has_bias: false,
        batch,
        in_channels: c,
        in_h: h,
        in_w: w,
        out_channels: o,
        kernel_h: kh,
        kernel_w: kw,
        out_h: out(h, kh, padding[0], padding[1], strides[0], dilations[0]),
        out_w: out(w, kw, padding[2], padding[3], strides[1], dilations[1]),
    }
}

fn desc(dt: DataType, shape: &[usize]) -> OperandDescriptor {
    OperandDescriptor {
        data_type: dt,
        shape: shape.to_vec(),
    }
}

fn close(x: &[f32], y: &[f32], tol: f32) {
    assert_eq!(x.len(), y.len());
    for (i, (a, b)) in x.iter().zip(y).enumerate() {
        assert!(
            a == b || (a - b).abs() <= tol * (1.0 + b.abs()),
            "element {i}: {a} vs {b}"
        );
    }
}

/// The bit patterns of a float buffer, for bitwise comparisons.
fn bits(v: &Buf) -> Vec<u32> {
    v.to_f32_vec().iter().map(|x| x.to_bits()).collect()
}

#[test]
fn conv2d_matches_naive_in_every_layout() {
    let cases = [
        params((2, 4, 7, 6), (6, 3, 2), [1, 0, 2, 1], [2, 1], [1, 2], 2),
        params((1, 3, 5, 5), (2, 3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1),
        params((2, 4, 6, 5), (4, 3, 3), [1, 1, 1, 1], [1, 2], [1, 1], 4),
        params((1, 3, 4, 4), (6, 2, 2), [0, 0, 0, 0], [2, 2], [1, 1], 3),
        params((3, 5, 4, 3), (7, 1, 1), [0, 0, 0, 0], [1, 1], [1, 1], 1),
        params((1, 2, 9, 9), (3, 3, 3), [2, 1, 0, 3], [3, 2], [2, 3], 1),
        params((1, 1, 1, 1), (1, 1, 1), [0, 0, 0, 0], [1, 1], [1, 1], 1),
        // Enough work per unit for the parallel sgemm path.
        params((1, 32, 40, 40), (64, 3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1),
        // Many depthwise units (the per-unit parallel path).
        params(
            (2, 32, 10, 10),
            (32, 3, 3),
            [1, 1, 1, 1],
            [1, 1],
            [1, 1],
            32,
        ),
        // Depthwise: strides, dilations, odd and asymmetric padding,
        // other kernel sizes, many small planes (parallel chunks).
        params((1, 5, 9, 11), (5, 3, 3), [1, 1, 1, 1], [2, 2], [1, 1], 5),
        params((2, 3, 8, 7), (3, 3, 3), [0, 1, 2, 0], [1, 2], [2, 1], 3),
        params((1, 4, 13, 10), (4, 5, 5), [2, 2, 2, 2], [2, 2], [1, 1], 4),
        params((1, 3, 7, 9), (3, 2, 4), [1, 0, 3, 1], [3, 1], [1, 2], 3),
        params((1, 3, 6, 6), (3, 1, 1), [0; 4], [1, 1], [1, 1], 3),
        params(
            (1, 200, 5, 4),
            (200, 3, 3),
            [1, 1, 1, 1],
            [1, 1],
            [1, 1],
            200,
        ),
        // Unit stride with padding and dilation (the padded-grid path),
        // wide enough for several panels and KC blocks.
        params((1, 40, 9, 37), (5, 3, 3), [2, 0, 1, 3], [1, 1], [2, 3], 1),
        params((2, 6, 5, 5), (4, 1, 1), [1, 0, 0, 2], [1, 1], [1, 1], 2),
        // 1x1 with a stride (im2col).
        params((1, 3, 7, 8), (4, 1, 1), [0; 4], [2, 3], [1, 1], 1),
        // Pointwise: one product of the pixels (nhwc), and of one-pixel
        // planes in either layout, several rows and one (a vector).
        params((2, 12, 3, 5), (7, 1, 1), [0; 4], [1, 1], [1, 1], 1),
        params((3, 40, 1, 1), (37, 1, 1), [0; 4], [1, 1], [1, 1], 1),
        params((1, 300, 1, 1), (70, 1, 1), [0; 4], [1, 1], [1, 1], 1),
    ];
    for base in cases {
        let (n, c, h, w) = (base.batch, base.in_channels, base.in_h, base.in_w);
        let (o, i, kh, kw) = (
            base.out_channels,
            base.in_channels / base.groups,
            base.kernel_h,
            base.kernel_w,
        );
        let x = data(n * c * h * w, 1);
        let f = data(o * i * kh * kw, 2);
        let bias = data(o, 3);
        for has_bias in [false, true] {
            let expect = naive_conv(&base, &x, &f, has_bias.then_some(&bias[..]));
            for nhwc in [false, true] {
                for layout in FILTER_LAYOUTS {
                    let p = Conv2dParams {
                        nhwc,
                        filter_layout: layout,
                        has_bias,
                        ..base.clone()
                    };
                    let xin = if nhwc {
                        transpose_vec(&x, &[n, c, h, w], &TO_NHWC).unwrap()
                    } else {
                        x.clone()
                    };
                    let fin = match layout {
                        FilterLayout::Oihw => f.clone(),
                        FilterLayout::Hwio => {
                            transpose_vec(&f, &[o, i, kh, kw], &[2, 3, 1, 0]).unwrap()
                        }
                        FilterLayout::Ohwi => {
                            transpose_vec(&f, &[o, i, kh, kw], &[0, 2, 3, 1]).unwrap()
                        }
                        FilterLayout::Ihwo => {
                            transpose_vec(&f, &[o, i, kh, kw], &[1, 2, 3, 0]).unwrap()
                        }
                    };
                    let (xb, fb, bb) = (Buf::F32(xin), Buf::F32(fin), Buf::F32(bias.clone()));
                    let mut ins = vec![&xb, &fb];
                    if has_bias {
                        ins.push(&bb);
                    }
                    let oshape = if nhwc {
                        [n, p.out_h, p.out_w, o]
                    } else {
                        [n, o, p.out_h, p.out_w]
                    };
                    let Buf::F32(r) = conv2d(&p, &ins, &desc(DataType::Float32, &oshape)).unwrap()
                    else {
                        panic!()
                    };
                    // The filter packed in advance (as compile does for
                    // a constant one) gives the same bits.
                    if let Some(packed) = pack_filter(&p, &fb).unwrap() {
                        let d = desc(DataType::Float32, &oshape);
                        let got = conv2d_packed(&p, &ins, &d, Some(&packed)).unwrap();
                        assert_eq!(got, Buf::F32(r.clone()));
                    }
                    let r = if nhwc {
                        transpose_vec(&r, &[n, p.out_h, p.out_w, o], &TO_NCHW).unwrap()
                    } else {
                        r
                    };
                    close(&r, &expect, 1e-5);
                }
            }
        }
    }
}

/// A trailing `[min, max]` input (a fused clamp or relu) gives the
/// bits of the clamp operator applied to the unfused result.
#[test]
fn fused_activation_is_bitwise_the_clamp() {
    let cases = [
        params((1, 8, 9, 9), (8, 3, 3), [1, 1, 1, 1], [2, 2], [1, 1], 8),
        params((1, 6, 10, 11), (7, 3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1),
        params((1, 6, 10, 11), (7, 1, 1), [0; 4], [1, 1], [1, 1], 1),
        params((2, 20, 1, 1), (9, 1, 1), [0; 4], [1, 1], [1, 1], 1),
        params((1, 3, 11, 11), (4, 3, 3), [1, 1, 1, 1], [2, 2], [1, 1], 1),
    ];
    for base in cases {
        let (n, c, h, w) = (base.batch, base.in_channels, base.in_h, base.in_w);
        let o = base.out_channels;
        let p = Conv2dParams {
            has_bias: true,
            ..base.clone()
        };
        let mut xv = data(n * c * h * w, 21);
        xv[3] = f32::NAN;
        let x = Buf::F32(xv);
        let f = Buf::F32(data(o * (c / p.groups) * p.kernel_h * p.kernel_w, 22));
        let b = Buf::F32(data(o, 23));
        let d = desc(DataType::Float32, &[n, o, p.out_h, p.out_w]);
        let plain = conv2d(&p, &[&x, &f, &b], &d).unwrap();
        for (lo, hi) in [(0.0f64, 6.0f64), (-0.25, 0.5), (0.0, f64::INFINITY)] {
            let want = super::super::elementwise::clamp(&plain, lo, hi, &d).unwrap();
            let bounds = Buf::F32(vec![lo as f32, hi as f32]);
            let got = conv2d(&p, &[&x, &f, &b, &bounds], &d).unwrap();
            assert_eq!(bits(&got), bits(&want), "{lo} {hi}");
        }
        // Bad bounds are an error.
        let bad = Buf::F32(vec![0.0]);
        assert!(conv2d(&p, &[&x, &f, &b, &bad], &d).is_err());
    }
}

/// A 1x1 convolution whose pixels are rows (nhwc, or one-pixel planes)
/// packs its filter as one product's B in every filter layout; others
/// pack per group. A float16 filter packs widened, with the bits of the
/// dispatch that widens it itself.
#[test]
fn pointwise_convolutions_pack_one_product() {
    let cases = [
        ((2, 12, 3, 5), false, false),
        ((2, 12, 3, 5), true, true),
        ((1, 64, 1, 1), false, true),
        ((1, 64, 1, 1), true, true),
    ];
    for ((n, c, h, w), nhwc, one) in cases {
        for layout in FILTER_LAYOUTS {
            let p = Conv2dParams {
                nhwc,
                filter_layout: layout,
                has_bias: true,
                ..params((n, c, h, w), (24, 1, 1), [0; 4], [1, 1], [1, 1], 1)
            };
            let f: Vec<u16> = data(24 * c, 41)
                .iter()
                .map(|&v| crate::f16::f32_to_f16(v))
                .collect();
            let f = Buf::F16(f);
            let packed = pack_filter(&p, &f).unwrap().expect("a packable filter");
            assert_eq!(
                matches!(packed, PackedFilter::Pointwise(_)),
                one,
                "{nhwc} {layout:?}"
            );
            let x = Buf::F32(data(n * c * h * w, 42));
            let b = Buf::F32(data(24, 43));
            let shape = if nhwc { [n, h, w, 24] } else { [n, 24, h, w] };
            let d = desc(DataType::Float32, &shape);
            let want = conv2d(&p, &[&x, &f, &b], &d).unwrap();
            let got = conv2d_packed(&p, &[&x, &f, &b], &d, Some(&packed)).unwrap();
            assert_eq!(bits(&got), bits(&want), "{nhwc} {layout:?}");
        }
    }
}

/// Unit-stride convolutions with a packed filter read B in place
/// (`conv_rows`, over the padded width): the bits of the packed-panel
/// path, for paddings on every side, dilations, non-square kernels,
/// groups, batches, NHWC, with bias and bounds (NaN included).
#[test]
fn rows_in_place_match_packed_panels() {
    let cases = [
        params((1, 8, 9, 9), (8, 3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1),
        params((2, 6, 10, 11), (7, 3, 3), [0, 2, 1, 0], [1, 1], [1, 1], 1),
        params((1, 5, 12, 13), (9, 5, 3), [2, 2, 1, 1], [1, 1], [2, 3], 1),
        params((1, 4, 7, 40), (6, 1, 3), [0, 0, 1, 1], [1, 1], [1, 1], 2),
        params((1, 3, 6, 6), (20, 1, 1), [1, 0, 0, 2], [1, 1], [1, 1], 1),
        params((1, 33, 9, 18), (13, 3, 1), [1, 1, 0, 0], [1, 1], [1, 1], 1),
        params((1, 70, 8, 8), (16, 3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1),
    ];
    for (i, base) in cases.into_iter().enumerate() {
        for nhwc in [false, true] {
            let p = Conv2dParams {
                has_bias: true,
                nhwc,
                ..base.clone()
            };
            let (n, c, h, w) = (p.batch, p.in_channels, p.in_h, p.in_w);
            let o = p.out_channels;
            let mut xv = data(n * c * h * w, 31 + i as u64);
            xv[1] = f32::NAN;
            let x = Buf::F32(xv);
            let f = Buf::F32(data(o * (c / p.groups) * p.kernel_h * p.kernel_w, 32));
            let b = Buf::F32(data(o, 33));
            let shape = if nhwc {
                [n, p.out_h, p.out_w, o]
            } else {
                [n, o, p.out_h, p.out_w]
            };
            let d = desc(DataType::Float32, &shape);
            let packed = pack_filter(&p, &f).unwrap().expect("a packable filter");
            let bounds = Buf::F32(vec![-0.25, 0.5]);
            for ins in [vec![&x, &f, &b], vec![&x, &f, &b, &bounds]] {
                let want = conv2d(&p, &ins, &d).unwrap();
                let got = conv2d_packed(&p, &ins, &d, Some(&packed)).unwrap();
                assert_eq!(bits(&got), bits(&want), "case {i} nhwc={nhwc}");
            }
        }
    }
}

/// compile() fuses conv2d + clamp and conv2d + relu, and the fused
/// graph gives the bits of the unfused one (where the conv output is
/// also a graph output, which prevents fusion), in float32 and float16
/// (bounds that float16 cannot hold included: the one rounding after
/// the clamp gives the two roundings' bits).
#[test]
fn compile_fuses_conv_activations() {
    use crate::backend::Backend;
    use crate::graph::Node;
    let p = Conv2dParams {
        has_bias: true,
        ..params((1, 4, 6, 6), (4, 3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1)
    };
    let x = data(144, 31);
    let acts = [
        Op::Clamp(ClampParams { min: 0.0, max: 6.0 }),
        Op::Unary(UnaryKind::Relu),
        Op::Clamp(ClampParams {
            min: -0.1,
            max: 0.3,
        }),
    ];
    for (dt, act) in [DataType::Float32, DataType::Float16]
        .into_iter()
        .flat_map(|dt| acts.iter().map(move |a| (dt, a)))
    {
        let f32d = |shape: &[usize]| desc(dt, shape);
        let bytes = |v: &[f32]| -> Arc<Vec<u8>> {
            Arc::new(match dt {
                DataType::Float16 => v
                    .iter()
                    .flat_map(|&x| crate::f16::f32_to_f16(x).to_le_bytes())
                    .collect(),
                _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            })
        };
        let input = || match dt {
            DataType::Float16 => Buf::f16_from_f32(&x),
            _ => Buf::F32(x.clone()),
        };
        // x -> conv -> act -> conv -> act (out); conv 2 reads act 1.
        let graph = |expose: bool| {
            let mut outputs = vec![("y".to_string(), 7)];
            if expose {
                outputs.push(("c1".to_string(), 4));
                outputs.push(("c2".to_string(), 6));
            }
            Graph {
                operands: vec![
                    f32d(&[1, 4, 6, 6]),
                    f32d(&[4, 4, 3, 3]),
                    f32d(&[4]),
                    f32d(&[4, 4, 3, 3]),
                    f32d(&[1, 4, 6, 6]),
                    f32d(&[1, 4, 6, 6]),
                    f32d(&[1, 4, 6, 6]),
                    f32d(&[1, 4, 6, 6]),
                ],
                sources: vec![
                    Source::Input("x".into()),
                    Source::Constant(bytes(&data(144, 32))),
                    Source::Constant(bytes(&data(4, 33))),
                    Source::Constant(bytes(&data(144, 34))),
                    Source::Node { node: 0, index: 0 },
                    Source::Node { node: 1, index: 0 },
                    Source::Node { node: 2, index: 0 },
                    Source::Node { node: 3, index: 0 },
                ],
                nodes: vec![
                    Node {
                        op: Op::Conv2d(p.clone()),
                        inputs: vec![0, 1, 2],
                        outputs: vec![4],
                        label: String::new(),
                    },
                    Node {
                        op: act.clone(),
                        inputs: vec![4],
                        outputs: vec![5],
                        label: String::new(),
                    },
                    Node {
                        op: Op::Conv2d(p.clone()),
                        inputs: vec![5, 3, 2],
                        outputs: vec![6],
                        label: String::new(),
                    },
                    Node {
                        op: act.clone(),
                        inputs: vec![6],
                        outputs: vec![7],
                        label: "last".into(),
                    },
                ],
                inputs: vec![("x".into(), 0)],
                outputs,
            }
        };
        let mut cpu = super::super::CpuBackend::new();
        let (fused, plain) = (Arc::new(graph(false)), Arc::new(graph(true)));
        cpu.compile(1, fused.clone()).unwrap();
        cpu.compile(2, plain.clone()).unwrap();
        assert_eq!(cpu.graphs[&1].graph.nodes.len(), 2);
        assert_eq!(cpu.graphs[&2].graph.nodes.len(), 4);
        let a = cpu.compute(1, &fused, vec![input()]).unwrap();
        let b = cpu.compute(2, &plain, vec![input()]).unwrap();
        assert_eq!(bits(&a[0]), bits(&b[0]), "{dt:?} {act:?}");
        // Some values are clamped, so the activation did something.
        let c1 = b[1].to_f32_vec();
        assert!(c1.iter().any(|&v| v < 0.0), "{dt:?} {act:?}");
        if matches!(act, Op::Clamp(ClampParams { max, .. }) if *max < 1.0) {
            assert!(c1.iter().any(|&v| v > 0.3), "{dt:?} {act:?}");
        }
    }
}

#[test]
fn conv2d_float16_and_empty() {
    let p = params((1, 2, 4, 4), (2, 3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1);
    let x = Buf::f16_from_f32(&data(32, 4));
    let f = Buf::f16_from_f32(&data(36, 5));
    let r = conv2d(&p, &[&x, &f], &desc(DataType::Float16, &[1, 2, 4, 4])).unwrap();
    let expect = naive_conv(&p, &x.to_f32_vec(), &f.to_f32_vec(), None);
    close(
        &r.to_f32_vec(),
        &Buf::f16_from_f32(&expect).to_f32_vec(),
        1e-3,
    );
    // A zero batch gives an empty output.
    let p0 = params((0, 2, 4, 4), (2, 3, 3), [1, 1, 1, 1], [1, 1], [1, 1], 1);
    let r = conv2d(
        &p0,
        &[&Buf::F32(vec![]), &Buf::F32(vec![0.0; 36])],
        &desc(DataType::Float32, &[0, 2, 4, 4]),
    )
    .unwrap();
    assert_eq!(r, Buf::F32(vec![]));
    // Zero input channels: the bias alone.
    let mut pz = params((1, 0, 2, 2), (0, 1, 1), [0; 4], [1, 1], [1, 1], 1);
    pz.out_channels = 0;
    let r = conv2d(
        &pz,
        &[&Buf::F32(vec![]), &Buf::F32(vec![])],
        &desc(DataType::Float32, &[1, 0, 2, 2]),
    )
    .unwrap();
    assert_eq!(r, Buf::F32(vec![]));
    // Mismatched sizes are an error, not a panic.
    assert!(conv2d(
        &p,
        &[&x, &Buf::f16_from_f32(&[1.0])],
        &desc(DataType::Float16, &[1, 2, 4, 4])
    )
    .is_err());
}

/// Direct pooling on NCHW; `None` windows (no valid element) are
/// reported as the kernel's empty values.
fn naive_pool(p: &Pool2dParams, x: &[f32]) -> Vec<f32> {
    let mut out = Vec::new();
    for plane in 0..p.batch * p.channels {
        for y in 0..p.out_h {
            for xo in 0..p.out_w {
                let mut vals = Vec::new();
                for ky in 0..p.window[0] {
                    for kx in 0..p.window[1] {
                        let iy = (y * p.strides[0] + ky * p.dilations[0]) as isize
                            - p.padding[0] as isize;
                        let ix = (xo * p.strides[1] + kx * p.dilations[1]) as isize
                            - p.padding[2] as isize;
                        if iy >= 0 && ix >= 0 && (iy as usize) < p.in_h && (ix as usize) < p.in_w {
                            vals.push(
                                x[(plane * p.in_h + iy as usize) * p.in_w + ix as usize] as f64,
                            );
                        }
                    }
                }
                let v = match p.kind {
                    PoolKind::Max => vals.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                    PoolKind::Average if vals.is_empty() => 0.0,
                    PoolKind::Average => vals.iter().sum::<f64>() / vals.len() as f64,
                    PoolKind::L2 => vals.iter().map(|v| v * v).sum::<f64>().sqrt(),
                };
                out.push(v as f32);
            }
        }
    }
    out
}

/// The parameters of pooling `[n, c, h, w]` (NCHW) with `window`,
/// `padding` `[t, b, l, r]`, `strides` and `dilations`, the output size
/// rounded up when `ceil` (as the builder resolves it).
pub(crate) fn pool_params(
    kind: PoolKind,
    (n, c, h, w): (usize, usize, usize, usize),
    window: [usize; 2],
    padding: [usize; 4],
    strides: [usize; 2],
    dilations: [usize; 2],
    ceil: bool,
) -> Pool2dParams {
    let size = |i: usize, k: usize, p0: usize, p1: usize, s: usize, d: usize| {
        let span = i + p0 + p1 - (k - 1) * d - 1;
        if ceil {
            span.div_ceil(s) + 1
        } else {
            span / s + 1
        }
    };
    Pool2dParams {
        kind,
        nhwc: false,
        window,
        padding,
        strides,
        dilations,
        batch: n,
        channels: c,
        in_h: h,
        in_w: w,
        out_h: size(
            h,
            window[0],
            padding[0],
            padding[1],
            strides[0],
            dilations[0],
        ),
        out_w: size(
            w,
            window[1],
            padding[2],
            padding[3],
            strides[1],
            dilations[1],
        ),
    }
}

#[test]
fn pool2d_matches_naive() {
    let cases = [
        ((2, 3, 5, 6), [2, 2], [0, 0, 0, 0], [2, 2], [1, 1], false),
        ((1, 2, 5, 5), [3, 3], [1, 1, 1, 1], [2, 2], [1, 1], false),
        ((1, 2, 5, 5), [3, 3], [1, 1, 1, 1], [2, 2], [1, 1], true),
        ((1, 1, 7, 6), [3, 2], [2, 0, 1, 3], [3, 2], [2, 2], true),
        ((1, 1, 4, 4), [4, 4], [0, 0, 0, 0], [1, 1], [1, 1], false),
        // Global pooling over enough planes to split into tasks.
        ((2, 700, 3, 5), [3, 5], [0, 0, 0, 0], [1, 1], [1, 1], false),
        // A large padding: some windows hold padding only.
        ((1, 1, 2, 2), [2, 2], [3, 3, 3, 3], [1, 1], [1, 1], false),
    ];
    for ((n, c, h, w), window, padding, strides, dilations, ceil) in cases {
        let x = data(n * c * h * w, 7);
        for kind in [PoolKind::Average, PoolKind::Max, PoolKind::L2] {
            let p = pool_params(
                kind,
                (n, c, h, w),
                window,
                padding,
                strides,
                dilations,
                ceil,
            );
            let expect = naive_pool(&p, &x);
            let (oh, ow) = (p.out_h, p.out_w);
            let Buf::F32(r) = pool2d(
                &p,
                &Buf::F32(x.clone()),
                &desc(DataType::Float32, &[n, c, oh, ow]),
            )
            .unwrap() else {
                panic!()
            };
            close(&r, &expect, 1e-6);
            let pn = Pool2dParams {
                nhwc: true,
                ..p.clone()
            };
            let xn = transpose_vec(&x, &[n, c, h, w], &TO_NHWC).unwrap();
            let Buf::F32(r) = pool2d(
                &pn,
                &Buf::F32(xn),
                &desc(DataType::Float32, &[n, oh, ow, c]),
            )
            .unwrap() else {
                panic!()
            };
            close(
                &transpose_vec(&r, &[n, oh, ow, c], &TO_NCHW).unwrap(),
                &expect,
                1e-6,
            );
            let xh = Buf::f16_from_f32(&x);
            let r = pool2d(&p, &xh, &desc(DataType::Float16, &[n, c, oh, ow])).unwrap();
            let expect_h = Buf::f16_from_f32(&naive_pool(&p, &xh.to_f32_vec())).to_f32_vec();
            close(&r.to_f32_vec(), &expect_h, 1e-3);
        }
    }
}

/// Each output of `pool2d` has the bits of its window reduced alone, in
/// the window's order, by `pool_reduce` (the definition every pooling
/// path shares), in nchw and in nhwc, with NaNs among the inputs: over
/// strides, dilations, asymmetric and window-sized padding, ceil
/// rounding and enough rows to split into tasks.
#[test]
fn pool2d_rows_have_the_bits_of_each_window_alone() {
    let cases = [
        ((1, 64, 23, 23), [3, 3], [0, 0, 0, 0], [2, 2], [1, 1], true),
        ((2, 3, 9, 11), [3, 3], [1, 1, 1, 1], [1, 1], [1, 1], false),
        ((1, 5, 10, 7), [2, 3], [0, 1, 2, 0], [2, 3], [1, 1], true),
        ((1, 4, 12, 13), [3, 2], [2, 2, 1, 3], [1, 2], [2, 3], false),
        ((1, 3, 4, 4), [3, 3], [3, 3, 3, 3], [3, 3], [1, 1], true),
        ((1, 300, 6, 6), [6, 6], [0, 0, 0, 0], [1, 1], [1, 1], false),
        ((1, 2, 40, 300), [3, 3], [1, 1, 1, 1], [1, 1], [1, 1], false),
        // Rows long enough for whole blocks of positions at strides 2 and
        // 3, with padding, dilation and a block that overlaps the last.
        ((1, 3, 9, 80), [3, 3], [1, 1, 1, 1], [2, 2], [1, 1], false),
        ((1, 2, 8, 90), [3, 3], [0, 0, 0, 0], [2, 2], [2, 2], true),
        ((1, 2, 7, 100), [2, 3], [0, 0, 2, 1], [1, 3], [1, 2], true),
        // Two and four vectors of positions at a time (inside ranges of 32
        // and of 64 or more) at stride 2.
        ((1, 2, 6, 140), [3, 3], [1, 1, 1, 1], [2, 2], [1, 1], false),
        // nhwc pixels of whole vectors of channels and a tail.
        ((1, 37, 9, 9), [3, 3], [1, 1, 1, 1], [2, 2], [1, 1], true),
        // Half blocks: rows whose inside range is 8 to 15 positions
        // (SqueezeNet's 27 to 13 at stride 2; 8 exactly at stride 1; 14
        // at stride 1 with padding), nhwc pixels of 8 and of 12 channels.
        ((1, 12, 27, 27), [3, 3], [0, 0, 0, 0], [2, 2], [1, 1], false),
        ((1, 8, 5, 10), [3, 3], [0, 0, 0, 0], [1, 1], [1, 1], false),
        ((1, 3, 6, 16), [2, 3], [1, 0, 1, 1], [1, 1], [1, 1], true),
    ];
    for (ci, ((n, c, h, w), window, padding, strides, dilations, ceil)) in
        cases.into_iter().enumerate()
    {
        // Every kind over finite values; max also over NaNs dense enough
        // that windows hold several, of distinct payloads, so that which
        // one it keeps tells the order of its taps.
        let all = [PoolKind::Average, PoolKind::Max, PoolKind::L2];
        for (nans, kind) in all
            .map(|k| (false, k))
            .into_iter()
            .chain([(true, PoolKind::Max)])
        {
            let mut x = data(n * c * h * w, 11 + ci as u64);
            if nans {
                for i in (5..x.len()).step_by(5) {
                    x[i] = f32::from_bits(0x7fc0_0000 | i as u32);
                }
            }
            let p = pool_params(
                kind,
                (n, c, h, w),
                window,
                padding,
                strides,
                dilations,
                ceil,
            );
            let (oh, ow) = (p.out_h, p.out_w);
            let mut expect = Vec::new();
            for plane in x.chunks_exact(h * w) {
                for (oy, ox) in (0..oh).flat_map(|y| (0..ow).map(move |xo| (y, xo))) {
                    let tap = |k: usize, o: usize, a: usize| {
                        (o * p.strides[a] + k * p.dilations[a])
                            .checked_sub(p.padding[2 * a])
                            .filter(|&i| i < [h, w][a])
                    };
                    let taps = (0..window[0])
                        .filter_map(|ky| tap(ky, oy, 0))
                        .flat_map(|iy| {
                            (0..window[1])
                                .filter_map(move |kx| tap(kx, ox, 1))
                                .map(move |ix| plane[iy * w + ix])
                        });
                    expect.push(common::pool_reduce(kind, taps).to_bits());
                }
            }
            let same = |got: &[f32], layout: &str| {
                assert_eq!(got.len(), expect.len());
                for (i, (g, &e)) in got.iter().zip(&expect).enumerate() {
                    let e = f32::from_bits(e);
                    assert!(
                        g.to_bits() == e.to_bits(),
                        "{layout} {kind:?} (NaNs: {nans}) case {ci}: output {i} is {g:?}, not {e:?}"
                    );
                }
            };
            let pn = Pool2dParams {
                nhwc: true,
                ..p.clone()
            };
            let xn = Buf::F32(transpose_vec(&x, &[n, c, h, w], &TO_NHWC).unwrap());
            let x = Buf::F32(x);
            // At every vector width this CPU has: the blocks of 16 and
            // of 8 are one vector, two or four, or scalar code.
            for level in levels() {
                // SAFETY: `levels` gives only levels this CPU has.
                let got =
                    unsafe { pool2d_at(level, &p, &x, &desc(DataType::Float32, &[n, c, oh, ow])) };
                same(&got.unwrap().to_f32_vec(), &format!("{level:?} nchw"));
                // SAFETY: as above.
                let got = unsafe {
                    pool2d_at(level, &pn, &xn, &desc(DataType::Float32, &[n, oh, ow, c]))
                };
                same(
                    &transpose_vec(&got.unwrap().to_f32_vec(), &[n, oh, ow, c], &TO_NCHW).unwrap(),
                    &format!("{level:?} nhwc"),
                );
            }
        }
    }
}

/// Integer max pools (their own kernel, in the operand's type) give what
/// the float kernel gives on the same values, in both layouts, over
/// strides, dilation, uneven padding and ceil rounding; a window wholly
/// in the padding gives the type's minimum where the float one gives
/// -inf.
#[test]
fn integer_max_pools_give_the_float_pools_values() {
    let cases = [
        ((2, 3, 9, 11), [3, 3], [1, 1, 1, 1], [1, 1], [1, 1], false),
        ((1, 4, 12, 13), [3, 2], [2, 2, 1, 3], [1, 2], [2, 3], false),
        ((1, 5, 10, 7), [2, 3], [0, 1, 2, 0], [2, 3], [1, 1], true),
        ((1, 3, 4, 4), [3, 3], [3, 3, 3, 3], [3, 3], [1, 1], true),
    ];
    for (ci, ((n, c, h, w), window, padding, strides, dilations, ceil)) in
        cases.into_iter().enumerate()
    {
        let p = pool_params(
            PoolKind::Max,
            (n, c, h, w),
            window,
            padding,
            strides,
            dilations,
            ceil,
        );
        let ints: Vec<i32> = data(n * c * h * w, 31 + ci as u64)
            .iter()
            .map(|v| (v * 1000.0) as i32)
            .collect();
        let floats: Vec<f32> = ints.iter().map(|&v| v as f32).collect();
        for nhwc in [false, true] {
            let p = Pool2dParams { nhwc, ..p.clone() };
            let (xi, xf) = if nhwc {
                let to = |v: &[f32]| transpose_vec(v, &[n, c, h, w], &TO_NHWC).unwrap();
                (to(&floats).iter().map(|&v| v as i32).collect(), to(&floats))
            } else {
                (ints.clone(), floats.clone())
            };
            let shape = if nhwc {
                [n, p.out_h, p.out_w, c]
            } else {
                [n, c, p.out_h, p.out_w]
            };
            let got = pool2d(&p, &Buf::I32(xi), &desc(DataType::Int32, &shape)).unwrap();
            let want = pool2d(&p, &Buf::F32(xf), &desc(DataType::Float32, &shape))
                .unwrap()
                .to_f32_vec();
            let Buf::I32(got) = got else {
                panic!("an int32 result")
            };
            let want: Vec<i32> = want
                .iter()
                .map(|&v| {
                    if v == f32::NEG_INFINITY {
                        i32::MIN
                    } else {
                        v as i32
                    }
                })
                .collect();
            assert_eq!(got, want, "case {ci} nhwc {nhwc}");
            if ci == 3 {
                assert!(got.contains(&i32::MIN), "a window wholly in the padding");
            }
        }
    }
}

#[test]
fn average_pool_ignores_padding() {
    // 2x2 input, 3x3 window, padding 1: the corner windows see 4
    // elements, so the average is over 4, not 9.
    let p = Pool2dParams {
        kind: PoolKind::Average,
        nhwc: false,
        window: [3, 3],
        padding: [1, 1, 1, 1],
        strides: [1, 1],
        dilations: [1, 1],
        batch: 1,
        channels: 1,
        in_h: 2,
        in_w: 2,
        out_h: 2,
        out_w: 2,
    };
    let r = pool2d(
        &p,
        &Buf::F32(vec![1.0, 2.0, 3.0, 4.0]),
        &desc(DataType::Float32, &[1, 1, 2, 2]),
    )
    .unwrap();
    assert_eq!(r, Buf::F32(vec![2.5; 4]));
}

/// Direct scatter form of convTranspose2d on NCHW input and IOHW filter.
fn naive_conv_transpose(
    p: &ConvTranspose2dParams,
    x: &[f32],
    f: &[f32],
    bias: Option<&[f32]>,
) -> Vec<f32> {
    let (cg, og) = (p.in_channels / p.groups, p.out_channels / p.groups);
    let mut out = vec![0.0f64; p.batch * p.out_channels * p.out_h * p.out_w];
    for b in 0..p.batch {
        for ci in 0..p.in_channels {
            let g = ci / cg;
            for iy in 0..p.in_h {
                for ix in 0..p.in_w {
                    let v = x[((b * p.in_channels + ci) * p.in_h + iy) * p.in_w + ix] as f64;
                    for o in 0..og {
                        for ky in 0..p.kernel_h {
                            for kx in 0..p.kernel_w {
                                let oy = (iy * p.strides[0] + ky * p.dilations[0]) as isize
                                    - p.padding[0] as isize;
                                let ox = (ix * p.strides[1] + kx * p.dilations[1]) as isize
                                    - p.padding[2] as isize;
                                if oy < 0
                                    || ox < 0
                                    || oy >= p.out_h as isize
                                    || ox >= p.out_w as isize
                                {
                                    continue;
                                }
                                let oc = g * og + o;
                                let fi = ((ci * og + o) * p.kernel_h + ky) * p.kernel_w + kx;
                                out[((b * p.out_channels + oc) * p.out_h + oy as usize)
                                    * p.out_w
                                    + ox as usize] += v * f[fi] as f64;
                            }
                        }
                    }
                }
            }
        }
    }
    let plane = p.out_h * p.out_w;
    out.iter()
        .enumerate()
        .map(|(i, &v)| (v + bias.map_or(0.0, |b| b[(i / plane) % p.out_channels] as f64)) as f32)
        .collect()
}

#[test]
fn conv_transpose2d_matches_naive_in_every_layout() {
    // (n, c, h, w), (og, kh, kw), padding, strides, dilations, groups,
    // extra output size (outputPadding / outputSizes).
    let cases = [
        ((1, 1, 2, 2), (1, 2, 2), [0; 4], [1, 1], [1, 1], 1, [0, 0]),
        (
            (2, 4, 3, 4),
            (3, 3, 2),
            [1, 0, 2, 1],
            [2, 3],
            [1, 2],
            2,
            [1, 2],
        ),
        (
            (1, 3, 5, 5),
            (2, 3, 3),
            [1, 1, 1, 1],
            [2, 2],
            [1, 1],
            1,
            [1, 0],
        ),
        (
            (1, 6, 4, 3),
            (1, 3, 3),
            [0, 2, 1, 0],
            [1, 2],
            [2, 1],
            6,
            [0, 1],
        ),
        ((3, 2, 1, 1), (5, 1, 1), [0; 4], [1, 1], [1, 1], 1, [0, 0]),
        (
            (1, 2, 7, 6),
            (4, 2, 3),
            [2, 1, 0, 3],
            [3, 2],
            [2, 2],
            1,
            [2, 1],
        ),
        // Planes enough to be added up across the pool (see PAR_PLANES),
        // and a kernel wider than the stride, so that taps overlap.
        (
            (1, 8, 48, 47),
            (8, 3, 3),
            [1, 0, 1, 2],
            [2, 2],
            [1, 1],
            1,
            [1, 0],
        ),
    ];
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    for ((n, c, h, w), (og, kh, kw), padding, strides, dilations, groups, extra) in cases {
        let size = |i: usize, k: usize, p0: usize, p1: usize, s: usize, d: usize| {
            (i - 1) * s + (k - 1) * d + 1 - p0 - p1
        };
        let oc = og * groups;
        let base = ConvTranspose2dParams {
            nhwc: false,
            filter_layout: TransposeFilterLayout::Iohw,
            padding,
            strides,
            dilations,
            groups,
            has_bias: false,
            batch: n,
            in_channels: c,
            in_h: h,
            in_w: w,
            out_channels: oc,
            kernel_h: kh,
            kernel_w: kw,
            out_h: size(h, kh, padding[0], padding[1], strides[0], dilations[0]) + extra[0],
            out_w: size(w, kw, padding[2], padding[3], strides[1], dilations[1]) + extra[1],
        };
        let (oh, ow) = (base.out_h, base.out_w);
        let x = data(n * c * h * w, 11);
        let f = data(c * og * kh * kw, 12);
        let bias = data(oc, 13);
        for has_bias in [false, true] {
            let expect = naive_conv_transpose(&base, &x, &f, has_bias.then_some(&bias[..]));
            for nhwc in [false, true] {
                for layout in [
                    TransposeFilterLayout::Iohw,
                    TransposeFilterLayout::Hwoi,
                    TransposeFilterLayout::Ohwi,
                ] {
                    let p = ConvTranspose2dParams {
                        nhwc,
                        filter_layout: layout,
                        has_bias,
                        ..base.clone()
                    };
                    let xin = if nhwc {
                        transpose_vec(&x, &[n, c, h, w], &TO_NHWC).unwrap()
                    } else {
                        x.clone()
                    };
                    let fin = match layout {
                        TransposeFilterLayout::Iohw => f.clone(),
                        TransposeFilterLayout::Hwoi => {
                            transpose_vec(&f, &[c, og, kh, kw], &[2, 3, 1, 0]).unwrap()
                        }
                        TransposeFilterLayout::Ohwi => {
                            transpose_vec(&f, &[c, og, kh, kw], &[1, 2, 3, 0]).unwrap()
                        }
                    };
                    let (xb, fb, bb) = (Buf::F32(xin), Buf::F32(fin), Buf::F32(bias.clone()));
                    let mut ins = vec![&xb, &fb];
                    if has_bias {
                        ins.push(&bb);
                    }
                    let oshape = if nhwc {
                        [n, oh, ow, oc]
                    } else {
                        [n, oc, oh, ow]
                    };
                    let Buf::F32(r) = pool
                        .install(|| {
                            conv_transpose2d(&p, &ins, &[], &[desc(DataType::Float32, &oshape)])
                        })
                        .unwrap()
                        .remove(0)
                    else {
                        panic!()
                    };
                    let r = if nhwc {
                        transpose_vec(&r, &[n, oh, ow, oc], &TO_NCHW).unwrap()
                    } else {
                        r
                    };
                    close(&r, &expect, 1e-5);
                }
            }
        }
        // float16 rounds once per output.
        let xh = Buf::f16_from_f32(&x);
        let fh = Buf::f16_from_f32(&f);
        let r = conv_transpose2d(
            &base,
            &[&xh, &fh],
            &[],
            &[desc(DataType::Float16, &[n, oc, oh, ow])],
        )
        .unwrap()
        .remove(0);
        let expect = naive_conv_transpose(&base, &xh.to_f32_vec(), &fh.to_f32_vec(), None);
        close(
            &r.to_f32_vec(),
            &Buf::f16_from_f32(&expect).to_f32_vec(),
            1e-3,
        );
        // A filter of the wrong size is an error, not a panic.
        assert!(conv_transpose2d(
            &base,
            &[&Buf::F32(x.clone()), &Buf::F32(vec![0.0; 1])],
            &[],
            &[desc(DataType::Float32, &[n, oc, oh, ow])],
        )
        .is_err());
    }
}

/// Average and l2 pools over windows of millions of taps sum in f64, as
/// the reductions do: a 4096x4096 window of 3s averages to exactly 3 and
/// its l2 is exactly 12288 (in f32 the sum would round at every tap past
/// 2^24 and drift), on the NCHW kernel (global and windowed) and the
/// blocked one (global and windowed).
#[test]
fn pools_of_huge_windows_sum_like_the_reductions() {
    let s = 4096;
    let x = Buf::F32(vec![3.0; s * s]);
    for kind in [PoolKind::Average, PoolKind::L2] {
        let global = pool_params(kind, (1, 1, s, s), [s, s], [0; 4], [1, 1], [1, 1], false);
        // One row of padding on top: not a global pool; its first window
        // holds s - 1 rows of the input, its second all s.
        let padded = pool_params(
            kind,
            (1, 1, s, s),
            [s, s],
            [1, 0, 0, 0],
            [1, 1],
            [1, 1],
            false,
        );
        for p in [global, padded] {
            let out =
                OperandDescriptor::new(DataType::Float32, vec![1, 1, p.out_h, p.out_w]).unwrap();
            let got = pool2d(&p, &x, &out).unwrap();
            let want: Vec<f32> = (0..p.out_h)
                .map(|oy| {
                    let taps = ((s - p.padding[0] + oy) * s) as f64;
                    match kind {
                        PoolKind::L2 => (9.0 * taps).sqrt() as f32,
                        _ => 3.0,
                    }
                })
                .collect();
            assert_eq!(got, Buf::F32(want), "{kind:?} {p:?}");
        }
    }
}

/// A pool whose padding makes a one-element input's output 2^60 elements
/// asks for more bytes than exist: an OperationError naming them (float
/// and integer kernels), never an abort.
#[test]
fn a_pool_output_too_large_to_allocate_is_an_error_that_names_the_bytes() {
    let pad = (1usize << 30) - 1;
    let p = pool_params(
        PoolKind::Max,
        (1, 1, 1, 1),
        [1, 1],
        [0, pad, 0, pad],
        [1, 1],
        [1, 1],
        false,
    );
    let elements = (p.out_h * p.out_w) as u128;
    assert_eq!(elements, 1 << 60);
    for (x, dt, size) in [
        (Buf::F32(vec![1.0]), DataType::Float32, 4),
        (Buf::I32(vec![1]), DataType::Int32, 4),
    ] {
        let out = OperandDescriptor {
            data_type: dt,
            shape: vec![1, 1, p.out_h, p.out_w],
        };
        let e = pool2d(&p, &x, &out).unwrap_err();
        assert!(
            e.message
                .contains(&format!("cannot allocate {} bytes", elements * size)),
            "{dt:?}: {}",
            e.message
        );
    }
}

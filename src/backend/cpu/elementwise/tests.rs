use super::*;
use crate::backend::cpu::simd::{levels, pool_at, with_simd_at, SimdLevel};

fn desc(dt: DataType, shape: &[usize]) -> OperandDescriptor {
    OperandDescriptor {
        data_type: dt,
        shape: shape.to_vec(),
    }
}

fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

/// Flat index in `shape` of output multi-index `o` (right-aligned,
/// broadcast dimensions read at 0).
fn bcast_index(o: &[usize], shape: &[usize]) -> usize {
    let off = o.len() - shape.len();
    shape.iter().enumerate().fold(0, |acc, (d, &s)| {
        acc * s + if s == 1 { 0 } else { o[d + off] }
    })
}

/// Every float unary operator.
const UNARY_KINDS: [UnaryKind; 18] = [
    UnaryKind::Abs,
    UnaryKind::Neg,
    UnaryKind::Exp,
    UnaryKind::Log,
    UnaryKind::Sqrt,
    UnaryKind::Relu,
    UnaryKind::Sigmoid,
    UnaryKind::Tanh,
    UnaryKind::Ceil,
    UnaryKind::Cos,
    UnaryKind::Erf,
    UnaryKind::Floor,
    UnaryKind::Identity,
    UnaryKind::Reciprocal,
    UnaryKind::RoundEven,
    UnaryKind::Sin,
    UnaryKind::Sign,
    UnaryKind::Tan,
];

const KINDS: [BinaryKind; 7] = [
    BinaryKind::Add,
    BinaryKind::Sub,
    BinaryKind::Mul,
    BinaryKind::Div,
    BinaryKind::Max,
    BinaryKind::Min,
    BinaryKind::Pow,
];

fn naive_f64(k: BinaryKind, x: f64, y: f64) -> f64 {
    match k {
        BinaryKind::Add => x + y,
        BinaryKind::Sub => x - y,
        BinaryKind::Mul => x * y,
        BinaryKind::Div => x / y,
        BinaryKind::Max => x.max(y),
        BinaryKind::Min => x.min(y),
        BinaryKind::Pow => x.powf(y),
    }
}

#[test]
fn binary_broadcast_matches_naive() {
    let cases: &[(&[usize], &[usize], &[usize])] = &[
        (&[2, 1, 3], &[4, 1], &[2, 4, 3]),
        (&[5], &[3, 1], &[3, 5]),
        (&[], &[2, 3], &[2, 3]),
        (&[2, 3], &[], &[2, 3]),
        (&[3, 4], &[3, 4], &[3, 4]),
        (&[1, 4, 1], &[3, 1, 5], &[3, 4, 5]),
        (&[2, 0, 3], &[1, 3], &[2, 0, 3]),
        (&[300, 300], &[300, 1], &[300, 300]),
    ];
    for &(sa, sb, so) in cases {
        binary_case(sa, sb, so);
    }
}

/// [`binary_broadcast_matches_naive`] on one case: shapes of `a`, `b`
/// and the output.
fn binary_case(sa: &[usize], sb: &[usize], so: &[usize]) {
    let na: usize = sa.iter().product();
    let nb: usize = sb.iter().product();
    let a: Vec<f32> = (0..na).map(|i| 0.5 + (i % 7) as f32 * 0.25).collect();
    let b: Vec<f32> = (0..nb).map(|i| 1.0 + (i % 5) as f32 * 0.5 - 1.5).collect();
    for k in KINDS {
        let r = binary(
            k,
            &Buf::F32(a.clone()),
            &desc(DataType::Float32, sa),
            &Buf::F32(b.clone()),
            &desc(DataType::Float32, sb),
            &desc(DataType::Float32, so),
        )
        .unwrap();
        let total: usize = so.iter().product();
        let expect: Vec<f32> = (0..total)
            .map(|i| {
                let o = unravel(i, so);
                naive_f64(
                    k,
                    a[bcast_index(&o, sa)] as f64,
                    b[bcast_index(&o, sb)] as f64,
                ) as f32
            })
            .collect();
        let Buf::F32(r) = r else { panic!() };
        assert_eq!(r.len(), expect.len());
        for (x, y) in r.iter().zip(&expect) {
            assert!(
                x == y || (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-6 * y.abs(),
                "{k:?} {sa:?} {sb:?}: {x} vs {y}"
            );
        }

        // The same on int32 (no pow of negatives: checked below).
        if k != BinaryKind::Pow {
            let ai: Vec<i32> = (0..na as i32).map(|i| i * 3 - 7).collect();
            let bi: Vec<i32> = (0..nb as i32).map(|i| i % 4 - 1).collect();
            let r = binary(
                k,
                &Buf::I32(ai.clone()),
                &desc(DataType::Int32, sa),
                &Buf::I32(bi.clone()),
                &desc(DataType::Int32, sb),
                &desc(DataType::Int32, so),
            )
            .unwrap();
            let expect: Vec<i32> = (0..total)
                .map(|i| {
                    let o = unravel(i, so);
                    let (x, y) = (ai[bcast_index(&o, sa)], bi[bcast_index(&o, sb)]);
                    match k {
                        BinaryKind::Add => x + y,
                        BinaryKind::Sub => x - y,
                        BinaryKind::Mul => x * y,
                        BinaryKind::Div => {
                            if y == 0 {
                                0
                            } else {
                                x / y
                            }
                        }
                        BinaryKind::Max => x.max(y),
                        BinaryKind::Min => x.min(y),
                        BinaryKind::Pow => unreachable!(),
                    }
                })
                .collect();
            assert_eq!(r, Buf::I32(expect), "{k:?} {sa:?} {sb:?}");
        }
    }
}

/// The in-place form (an operand of the output's shape handed over as
/// owned) gives the copying form's bits, with the other operand broadcast
/// in every pattern the dimension merging meets (RoPE's among them), on
/// either side (so `sub` and `div` keep their order), above and below the
/// size where rows run in parallel.
#[test]
fn binary_in_place_gives_the_copying_bits() {
    let so = [3usize, 4, 5, 2];
    let big = [64usize, 12, 32, 2];
    let cases: Vec<(&[usize], &[usize])> = vec![
        (&so, &[3, 1, 5, 2]),
        (&so, &[1, 4, 1, 1]),
        (&so, &[5, 2]),
        (&so, &[2]),
        (&so, &[1]),
        (&so, &[3, 4, 1, 2]),
        (&big, &[64, 1, 32, 2]),
        (&big, &[64, 12, 1, 1]),
    ];
    for (out_shape, other) in cases {
        let n: usize = out_shape.iter().product();
        let m: usize = other.iter().product();
        let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() + 1.5).collect();
        let y: Vec<f32> = (0..m).map(|i| (i as f32 * 0.71).cos() - 0.25).collect();
        let (dx, dy, dout) = (
            desc(DataType::Float32, out_shape),
            desc(DataType::Float32, other),
            desc(DataType::Float32, out_shape),
        );
        for k in [BinaryKind::Sub, BinaryKind::Div, BinaryKind::Mul] {
            let (bx, by) = (Buf::F32(x.clone()), Buf::F32(y.clone()));
            let want = binary(k, &bx, &dx, &by, &dy, &dout).unwrap();
            let got = binary_owned(
                k,
                Cow::Owned(bx.clone()),
                &dx,
                Cow::Borrowed(&by),
                &dy,
                &dout,
            )
            .unwrap();
            assert_eq!(got, want, "{k:?} {out_shape:?} by {other:?}");
            let want = binary(k, &by, &dy, &bx, &dx, &dout).unwrap();
            let got = binary_owned(k, Cow::Borrowed(&by), &dy, Cow::Owned(bx), &dx, &dout).unwrap();
            assert_eq!(got, want, "{k:?} {other:?} by {out_shape:?}");
        }
    }
}

#[test]
fn binary_float16_rounds_once() {
    let a = Buf::f16_from_f32(&[1.0, 2.5, -3.0, 1000.0]);
    let b = Buf::f16_from_f32(&[3.0]);
    let r = binary(
        BinaryKind::Div,
        &a,
        &desc(DataType::Float16, &[4]),
        &b,
        &desc(DataType::Float16, &[]),
        &desc(DataType::Float16, &[4]),
    )
    .unwrap();
    assert_eq!(
        r,
        Buf::f16_from_f32(&[1.0 / 3.0, 2.5 / 3.0, -1.0, 1000.0 / 3.0])
    );
    let r = binary(
        BinaryKind::Mul,
        &a,
        &desc(DataType::Float16, &[4]),
        &Buf::f16_from_f32(&[100.0]),
        &desc(DataType::Float16, &[1]),
        &desc(DataType::Float16, &[4]),
    )
    .unwrap();
    // 1000 * 100 overflows float16.
    assert_eq!(r, Buf::f16_from_f32(&[100.0, 250.0, -300.0, f32::INFINITY]));
}

fn bin<T: Clone>(
    k: BinaryKind,
    dt: DataType,
    a: Vec<T>,
    b: Vec<T>,
    wrap: fn(Vec<T>) -> Buf,
) -> Buf {
    let n = a.len();
    binary(
        k,
        &wrap(a),
        &desc(dt, &[n]),
        &wrap(b),
        &desc(dt, &[n]),
        &desc(dt, &[n]),
    )
    .unwrap()
}

#[test]
fn integer_arithmetic_never_panics() {
    use BinaryKind::*;
    let i32s = |a: Vec<i32>, b: Vec<i32>, k| bin(k, DataType::Int32, a, b, Buf::I32);
    assert_eq!(
        i32s(vec![i32::MAX, i32::MIN], vec![1, 1], Add),
        Buf::I32(vec![i32::MIN, i32::MIN + 1])
    );
    assert_eq!(
        i32s(vec![i32::MIN, 5], vec![1, -7], Sub),
        Buf::I32(vec![i32::MAX, 12])
    );
    assert_eq!(
        i32s(vec![i32::MAX, -7], vec![2, 3], Mul),
        Buf::I32(vec![-2, -21])
    );
    assert_eq!(
        i32s(vec![7, i32::MIN, -7, 0], vec![0, -1, 2, 0], Div),
        Buf::I32(vec![0, i32::MIN, -3, 0])
    );
    assert_eq!(
        i32s(
            vec![2, 1, -1, -1, 3, 0, -2, 2],
            vec![-1, -5, -3, -2, 0, 0, 3, 31],
            Pow
        ),
        Buf::I32(vec![0, 1, -1, 1, 1, 1, -8, i32::MIN])
    );
    assert_eq!(i32s(vec![2], vec![i32::MAX], Pow), Buf::I32(vec![0]));
    assert_eq!(
        bin(
            Pow,
            DataType::Uint8,
            vec![3u8, 2, 0],
            vec![5, 8, 0],
            Buf::U8
        ),
        Buf::U8(vec![243, 0, 1])
    );
    assert_eq!(
        bin(
            Pow,
            DataType::Int64,
            vec![3i64, -1],
            vec![i64::MAX, i64::MIN],
            Buf::I64
        ),
        // 3 has order dividing 2^62 modulo 2^64, so 3^(2^63 - 1) is the
        // inverse of 3, 0xAAAA_AAAA_AAAA_AAAB.
        Buf::I64(vec![0xAAAA_AAAA_AAAA_AAABu64 as i64, 1])
    );
    assert_eq!(
        bin(Div, DataType::Uint64, vec![9u64, 9], vec![0, 2], Buf::U64),
        Buf::U64(vec![0, 4])
    );
    assert_eq!(
        bin(Sub, DataType::Uint32, vec![0u32], vec![1], Buf::U32),
        Buf::U32(vec![u32::MAX])
    );
    assert_eq!(
        bin(Max, DataType::Int8, vec![-128i8, 5], vec![127, -5], Buf::I8),
        Buf::I8(vec![127, 5])
    );
    assert_eq!(
        bin(Min, DataType::Int8, vec![-128i8, 5], vec![127, -5], Buf::I8),
        Buf::I8(vec![-128, -5])
    );
    // Mixed storage is an error, not a panic.
    assert!(binary(
        Add,
        &Buf::I32(vec![1]),
        &desc(DataType::Int32, &[1]),
        &Buf::F32(vec![1.0]),
        &desc(DataType::Float32, &[1]),
        &desc(DataType::Int32, &[1])
    )
    .is_err());
}

#[test]
fn float_max_min_propagate_nan() {
    let r = bin(
        BinaryKind::Max,
        DataType::Float32,
        vec![f32::NAN, 1.0],
        vec![0.0, f32::NAN],
        Buf::F32,
    );
    let Buf::F32(r) = r else { panic!() };
    assert!(r[0].is_nan() && r[1].is_nan());
}

#[test]
fn unary_ops() {
    let x = vec![-2.0f32, -0.5, 0.0, 0.5, 3.0, f32::NAN];
    let d = desc(DataType::Float32, &[6]);
    type Reference = (UnaryKind, fn(f64) -> f64);
    let refs: [Reference; 8] = [
        (UnaryKind::Abs, f64::abs),
        (UnaryKind::Neg, |v| -v),
        (UnaryKind::Exp, f64::exp),
        (UnaryKind::Log, f64::ln),
        (UnaryKind::Sqrt, f64::sqrt),
        (UnaryKind::Relu, |v| if v < 0.0 { 0.0 } else { v }),
        (UnaryKind::Sigmoid, |v| 1.0 / (1.0 + (-v).exp())),
        (UnaryKind::Tanh, f64::tanh),
    ];
    for (k, f) in refs {
        let Buf::F32(r) = unary(k, &Buf::F32(x.clone()), &d).unwrap() else {
            panic!()
        };
        for (a, &v) in r.iter().zip(&x) {
            let e = f(v as f64) as f32;
            assert!(
                a == &e || (a.is_nan() && e.is_nan()) || (a - e).abs() <= 2e-7 * (1.0 + e.abs()),
                "{k:?}({v}) = {a}, want {e}"
            );
        }
        // float16: computed in f32, rounded once.
        let h = Buf::f16_from_f32(&x);
        let r = unary(k, &h, &desc(DataType::Float16, &[6])).unwrap();
        let xw = h.to_f32_vec();
        let Buf::F16(want) =
            Buf::f16_from_f32(&xw.iter().map(|&v| float_unary(k)(v)).collect::<Vec<_>>())
        else {
            panic!()
        };
        let Buf::F16(got) = r else { panic!() };
        assert_eq!(got, want, "{k:?}");
    }
    // Sigmoid saturates without NaN.
    let Buf::F32(r) = unary(
        UnaryKind::Sigmoid,
        &Buf::F32(vec![-1000.0, 1000.0]),
        &desc(DataType::Float32, &[2]),
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(r, vec![0.0, 1.0]);
    // Below about -87.3 the value is subnormal, not 0 (as long as e^x is:
    // to about -103.3, the last subnormal of f32); just above the switch
    // to e^x the two forms agree.
    let xs = vec![-90.0f32, -100.0, -103.0, -80.001, -79.999];
    let Buf::F32(r) = unary(
        UnaryKind::Sigmoid,
        &Buf::F32(xs.clone()),
        &desc(DataType::Float32, &[5]),
    )
    .unwrap() else {
        panic!()
    };
    for (&x, &y) in xs.iter().zip(&r) {
        let want = (x as f64).exp() / (1.0 + (x as f64).exp());
        assert!(y > 0.0, "sigmoid({x}) = {y}");
        assert!(
            ((y as f64 - want) / want).abs() < 1e-6 || (y as f64 - want).abs() < 1e-44,
            "sigmoid({x}) = {y:e}, want {want:e}"
        );
    }
    // Over the range where it is neither 0 nor 1 in float32: within 4 ulp
    // of the float64 value (e^-|x| within about 1, then 1 + e, its
    // reciprocal and, below 0, the product each round once).
    let xs: Vec<f32> = (0..20001)
        .map(|i| -104.0 + i as f32 * (121.0 / 20000.0))
        .collect();
    let Buf::F32(r) = unary(
        UnaryKind::Sigmoid,
        &Buf::F32(xs.clone()),
        &desc(DataType::Float32, &[xs.len()]),
    )
    .unwrap() else {
        panic!()
    };
    let mut worst = 0f64;
    for (&x, &y) in xs.iter().zip(&r) {
        let want = 1.0 / (1.0 + (-(x as f64)).exp());
        let w = (want as f32).abs();
        let ulp = (f32::from_bits(w.to_bits() + 1) - w) as f64;
        worst = worst.max((y as f64 - want).abs() / ulp);
    }
    println!("sigmoid: {worst:.2} ulp at most");
    assert!(worst <= 4.0, "sigmoid: {worst} ulp");
    let di = desc(DataType::Int32, &[3]);
    let xi = Buf::I32(vec![i32::MIN, -3, 4]);
    assert_eq!(
        unary(UnaryKind::Abs, &xi, &di).unwrap(),
        Buf::I32(vec![i32::MIN, 3, 4])
    );
    assert_eq!(
        unary(UnaryKind::Neg, &xi, &di).unwrap(),
        Buf::I32(vec![i32::MIN, 3, -4])
    );
    assert_eq!(
        unary(UnaryKind::Relu, &xi, &di).unwrap(),
        Buf::I32(vec![0, 0, 4])
    );
    assert_eq!(
        unary(
            UnaryKind::Relu,
            &Buf::I8(vec![-8, 7]),
            &desc(DataType::Int8, &[2])
        )
        .unwrap(),
        Buf::I8(vec![0, 7])
    );
    assert!(unary(UnaryKind::Exp, &xi, &di).is_err());
    assert_eq!(
        unary(
            UnaryKind::Exp,
            &Buf::F32(vec![]),
            &desc(DataType::Float32, &[0, 4])
        )
        .unwrap(),
        Buf::F32(vec![])
    );
}

#[test]
fn new_unary_ops() {
    let x = vec![-2.5f32, -1.5, -0.5, 0.5, 1.5, 2.5, 0.0, -3.7];
    let d = desc(DataType::Float32, &[8]);
    let go = |k| {
        let Buf::F32(r) = unary(k, &Buf::F32(x.clone()), &d).unwrap() else {
            panic!()
        };
        r
    };
    // Halfway cases round to the even neighbour.
    assert_eq!(
        go(UnaryKind::RoundEven),
        vec![-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, 0.0, -4.0]
    );
    assert_eq!(
        go(UnaryKind::Ceil),
        vec![-2.0, -1.0, -0.0, 1.0, 2.0, 3.0, 0.0, -3.0]
    );
    assert_eq!(
        go(UnaryKind::Floor),
        vec![-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 0.0, -4.0]
    );
    assert_eq!(
        go(UnaryKind::Sign),
        vec![-1.0, -1.0, -1.0, 1.0, 1.0, 1.0, 0.0, -1.0]
    );
    assert_eq!(go(UnaryKind::Identity), x);
    let r = go(UnaryKind::Reciprocal);
    assert_eq!(r[0], -0.4);
    assert_eq!(r[6], f32::INFINITY);
    for (k, f) in [
        (UnaryKind::Sin, f64::sin as fn(f64) -> f64),
        (UnaryKind::Cos, f64::cos),
        (UnaryKind::Tan, f64::tan),
    ] {
        for (a, &v) in go(k).iter().zip(&x) {
            let e = f(v as f64);
            assert!(
                (*a as f64 - e).abs() <= 1e-6 * (1.0 + e.abs()),
                "{k:?}({v})"
            );
        }
    }
    // erf against values from its definition (tabulated to 1e-10).
    let table = [
        (0.0, 0.0),
        (0.1, 0.1124629160),
        (0.5, 0.5204998778),
        (1.0, 0.8427007929),
        (2.0, 0.9953222650),
        (3.0, 0.9999779095),
        (-1.5, -0.9661051465),
    ];
    for (v, e) in table {
        assert!((erf(v) - e).abs() < 1e-9, "erf({v}) = {}", erf(v));
    }
    assert_eq!(erf(7.0), 1.0);
    assert_eq!(erf(-f64::INFINITY), -1.0);
    assert!(erf(f64::NAN).is_nan());
    // Small arguments keep full relative precision: erf(x) ~ 2x/sqrt(pi).
    let tiny = 1e-30;
    assert!((erf(tiny) / (tiny * std::f64::consts::FRAC_2_SQRT_PI) - 1.0).abs() < 1e-15);
    // Integers: sign and identity.
    let di = desc(DataType::Int64, &[3]);
    assert_eq!(
        unary(UnaryKind::Sign, &Buf::I64(vec![i64::MIN, 0, 9]), &di).unwrap(),
        Buf::I64(vec![-1, 0, 1])
    );
    assert_eq!(
        unary(
            UnaryKind::Identity,
            &Buf::U8(vec![3, 255]),
            &desc(DataType::Uint8, &[2])
        )
        .unwrap(),
        Buf::U8(vec![3, 255])
    );
    assert!(unary(UnaryKind::Erf, &Buf::I64(vec![1, 2, 3]), &di).is_err());
}

#[test]
fn clamp_all_types() {
    // The conformance vectors for int8/uint8 and the 64-bit types.
    let r = clamp(
        &Buf::I8(vec![-128, 127, -4, -2, 1, 0, 2, 4]),
        -2.0,
        125.0,
        &desc(DataType::Int8, &[8]),
    )
    .unwrap();
    assert_eq!(r, Buf::I8(vec![-2, 125, -2, -2, 1, 0, 2, 4]));
    let r = clamp(
        &Buf::U64(vec![5294967295, 127, 5, 0]),
        5.0,
        5294967290.0,
        &desc(DataType::Uint64, &[4]),
    )
    .unwrap();
    assert_eq!(r, Buf::U64(vec![5294967290, 127, 5, 5]));
    // Bounds beyond the type saturate.
    let r = clamp(
        &Buf::I64(vec![i64::MIN, 0, i64::MAX]),
        -1e30,
        9.3e18,
        &desc(DataType::Int64, &[3]),
    )
    .unwrap();
    assert_eq!(r, Buf::I64(vec![i64::MIN, 0, i64::MAX]));
    let r = clamp(
        &Buf::U8(vec![0, 100, 255]),
        f64::NEG_INFINITY,
        1e9,
        &desc(DataType::Uint8, &[3]),
    )
    .unwrap();
    assert_eq!(r, Buf::U8(vec![0, 100, 255]));
    let r = clamp(
        &Buf::U32(vec![0, 100]),
        -5.0,
        50.0,
        &desc(DataType::Uint32, &[2]),
    )
    .unwrap();
    assert_eq!(r, Buf::U32(vec![0, 50]));
    // Floats: NaN passes through; infinities clamp.
    let Buf::F32(r) = clamp(
        &Buf::F32(vec![f32::NAN, f32::NEG_INFINITY, 0.3, 9.0]),
        0.0,
        6.0,
        &desc(DataType::Float32, &[4]),
    )
    .unwrap() else {
        panic!()
    };
    assert!(r[0].is_nan());
    assert_eq!(&r[1..], &[0.0, 0.3, 6.0]);
    let r = clamp(
        &Buf::f16_from_f32(&[-1.0, 0.25, 7.0]),
        0.0,
        6.0,
        &desc(DataType::Float16, &[3]),
    )
    .unwrap();
    assert_eq!(r, Buf::f16_from_f32(&[0.0, 0.25, 6.0]));
}

/// exp_f32 against the exact value rounded to f32, across the
/// underflow: within an ulp down to the subnormals, exactly +0 from
/// -104 down (the lanes that skip their arithmetic).
#[test]
fn exp_f32_is_close_through_the_underflow() {
    let mut x = -120.0f32;
    while x < 20.0 {
        let got = exp_f32(x);
        let want = (x as f64).exp() as f32;
        if x <= -104.0 {
            assert_eq!(got.to_bits(), 0, "e^{x}");
        } else {
            let ulp = f32::from_bits(want.to_bits() + 1) - want;
            assert!((got - want).abs() <= ulp, "e^{x}: {got:e} vs {want:e}");
        }
        x += 0.013;
    }
    assert!(exp_f32(f32::NAN).is_nan());
    assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
    assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
}

#[test]
fn softmax_matches_naive() {
    let shape = [2, 3, 4];
    let x: Vec<f32> = (0..24).map(|i| ((i * 7) % 11) as f32 * 0.3 - 1.0).collect();
    for axis in 0..3 {
        let Buf::F32(r) =
            softmax(&Buf::F32(x.clone()), axis, &desc(DataType::Float32, &shape)).unwrap()
        else {
            panic!()
        };
        for i in 0..24 {
            let o = unravel(i, &shape);
            let mut sum = 0.0f64;
            for j in 0..shape[axis] {
                let mut q = o.clone();
                q[axis] = j;
                sum += (x[(q[0] * 3 + q[1]) * 4 + q[2]] as f64).exp();
            }
            let e = (x[i] as f64).exp() / sum;
            assert!(
                (r[i] as f64 - e).abs() < 1e-6,
                "axis {axis} element {i}: {} vs {e}",
                r[i]
            );
        }
    }
    // Large values do not overflow.
    let Buf::F32(r) = softmax(
        &Buf::F32(vec![1000.0, 1000.0, -1000.0]),
        0,
        &desc(DataType::Float32, &[3]),
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(r, vec![0.5, 0.5, 0.0]);
    let r = softmax(
        &Buf::f16_from_f32(&[0.0, 0.0, 0.0, 0.0]),
        1,
        &desc(DataType::Float16, &[1, 4]),
    )
    .unwrap();
    assert_eq!(r, Buf::f16_from_f32(&[0.25; 4]));
    assert_eq!(
        softmax(&Buf::F32(vec![]), 1, &desc(DataType::Float32, &[2, 0])).unwrap(),
        Buf::F32(vec![])
    );
}

/// Softmax of one column, `n` values `stride` apart from `x[0]`, walked
/// one element at a time: the form the column kernel must reproduce.
fn softmax_column_walk(x: &mut [f32], n: usize, stride: usize) {
    let mut m = f32::NEG_INFINITY;
    for i in 0..n {
        m = fmax(m, x[i * stride]);
    }
    if m == f32::NEG_INFINITY {
        m = 0.0;
    }
    let mut sum = 0.0f32;
    for i in 0..n {
        let e = exp_f32(x[i * stride] - m);
        x[i * stride] = e;
        sum += e;
    }
    let inv = 1.0 / sum;
    for i in 0..n {
        x[i * stride] *= inv;
    }
}

/// A softmax over an axis with elements after it (axis 0 of a matrix,
/// the channels of nchw) gives the bits of walking each column alone:
/// strips of columns with a remainder, a group narrower than a strip,
/// one row, columns of -inf, NaN and infinities, sizes past the parallel
/// threshold with one group and with several, on a pool of three
/// threads at every vector width.
#[test]
fn softmax_columns_give_the_column_walks_bits() {
    let pools: Vec<_> = levels().into_iter().map(|l| (l, pool_at(l, 3))).collect();
    for &(groups, n, inner) in &[
        (1, 7, 2),
        (3, 5, 700),
        (2, 1, 9),
        (1, 3, 1100),
        (4, 17, 3),
        (1, 300, 600),
        (9, 16, 600),
        (2, 40000, 2),
    ] {
        let len = groups * n * inner;
        let mut x = spread(len);
        x.truncate(len);
        // A column of -inf, one with a NaN, one with +inf (where present).
        for (j, v) in [f32::NEG_INFINITY, f32::NAN, f32::INFINITY]
            .into_iter()
            .enumerate()
        {
            if j < inner {
                for i in 0..n {
                    if !v.is_nan() || i == n / 2 {
                        x[i * inner + j] = v;
                    }
                }
            }
        }
        let mut want = x.clone();
        for b in want.chunks_mut(n * inner) {
            for j in 0..inner {
                softmax_column_walk(&mut b[j..], n, inner);
            }
        }
        let shape = [groups, n, inner];
        for (level, pool) in &pools {
            let Buf::F32(got) = pool
                .install(|| softmax(&Buf::F32(x.clone()), 1, &desc(DataType::Float32, &shape)))
                .unwrap()
            else {
                panic!()
            };
            assert!(
                same_bits(&got, &want),
                "softmax over axis 1 of {shape:?} at {level:?}"
            );
        }
    }
}

fn cast1(x: Buf, from: DataType, to: DataType) -> Buf {
    let n = x.len();
    let r = cast(&x, to, &desc(to, &[n])).unwrap();
    let _ = from;
    r
}

#[test]
fn cast_follows_the_spec_table() {
    use DataType::*;
    // Integer to integer: the same value in range, else the low bits.
    assert_eq!(
        cast1(Buf::I8(vec![-1, 5]), Int8, Uint8),
        Buf::U8(vec![255, 5])
    );
    assert_eq!(
        cast1(Buf::I32(vec![300, -129, 127]), Int32, Int8),
        Buf::I8(vec![44, 127, 127])
    );
    assert_eq!(
        cast1(Buf::I64(vec![-1, 1 << 40]), Int64, Uint32),
        Buf::U32(vec![u32::MAX, 0])
    );
    assert_eq!(
        cast1(Buf::U64(vec![u64::MAX]), Uint64, Int64),
        Buf::I64(vec![-1])
    );
    assert_eq!(
        cast1(Buf::U32(vec![u32::MAX]), Uint32, Int64),
        Buf::I64(vec![u32::MAX as i64])
    );
    assert_eq!(
        cast1(Buf::I32(vec![-1, 9, 7, -8, 16]), Int32, Int4),
        Buf::I8(vec![-1, -7, 7, -8, 0])
    );
    assert_eq!(
        cast1(Buf::I32(vec![-1, 9, 17]), Int32, Uint4),
        Buf::U8(vec![15, 9, 1])
    );
    assert_eq!(
        cast1(Buf::I8(vec![-8, 7]), Int4, Uint8),
        Buf::U8(vec![248, 7])
    );
    assert_eq!(cast1(Buf::U8(vec![15]), Uint4, Int4), Buf::I8(vec![-1]));
    // Float to integer: truncation; out of range saturates; NaN is 0.
    let f = Buf::F32(vec![
        84.777,
        -43.5,
        -2.5,
        300.7,
        -1.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
    ]);
    assert_eq!(
        cast1(f.clone(), Float32, Int32),
        Buf::I32(vec![84, -43, -2, 300, -1, 0, i32::MAX, i32::MIN])
    );
    assert_eq!(
        cast1(f.clone(), Float32, Uint8),
        Buf::U8(vec![84, 0, 0, 255, 0, 0, 255, 0])
    );
    assert_eq!(
        cast1(f.clone(), Float32, Int4),
        Buf::I8(vec![7, -8, -2, 7, -1, 0, 7, -8])
    );
    assert_eq!(
        cast1(f.clone(), Float32, Uint64),
        Buf::U64(vec![84, 0, 0, 300, 0, 0, u64::MAX, 0])
    );
    assert_eq!(
        cast1(Buf::f16_from_f32(&[3.1, -3.9, 65504.0]), Float16, Int64),
        Buf::I64(vec![3, -3, 65504])
    );
    // To float: nearest, ties to even; out of range +/-Infinity.
    assert_eq!(
        cast1(
            Buf::F32(vec![1.0003, 65520.0, -1e6, 2049.0]),
            Float32,
            Float16
        ),
        Buf::f16_from_f32(&[1.0003, f32::INFINITY, f32::NEG_INFINITY, 2048.0])
    );
    assert_eq!(
        cast1(
            Buf::I32(vec![2049, 2051, 65519, 70000, -70000]),
            Int32,
            Float16
        ),
        Buf::f16_from_f32(&[2048.0, 2052.0, 65504.0, f32::INFINITY, f32::NEG_INFINITY])
    );
    assert_eq!(
        cast1(Buf::I64(vec![i64::MAX, (1 << 24) + 1]), Int64, Float32),
        Buf::F32(vec![9.223372e18, 16777216.0])
    );
    assert_eq!(
        cast1(Buf::U64(vec![u64::MAX]), Uint64, Float16),
        Buf::f16_from_f32(&[f32::INFINITY])
    );
    assert_eq!(
        cast1(Buf::I8(vec![-8, 7]), Int4, Float32),
        Buf::F32(vec![-8.0, 7.0])
    );
    let h = Buf::f16_from_f32(&[3.103_515_6, -0.0, f32::NAN]);
    let Buf::F32(w) = cast1(h.clone(), Float16, Float32) else {
        panic!()
    };
    assert_eq!(w[0], 3.103_515_6);
    assert!(w[1] == 0.0 && w[1].is_sign_negative() && w[2].is_nan());
    assert_eq!(cast1(h.clone(), Float16, Float16), h);
    assert_eq!(cast1(Buf::U8(vec![]), Uint8, Int64), Buf::I64(vec![]));
}

/// Inputs for the width test: a spread of magnitudes of both signs,
/// and the special values.
fn spread(n: usize) -> Vec<f32> {
    let mut state = 0x9e37_79b9u32;
    let mut v: Vec<f32> = (0..n)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            let m = (state >> 8) as f32 / (1u32 << 24) as f32;
            let e = (i % 23) as i32 - 11;
            let s = if state & 1 == 0 { 1.0 } else { -1.0 };
            s * m * 2f32.powi(e)
        })
        .collect();
    v.extend([
        0.0,
        -0.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MIN_POSITIVE,
        1e-40,
        -1e-40,
        88.7,
        -103.9,
        1e30,
        -1e30,
    ]);
    v
}

fn same_bits(a: &[f32], b: &[f32]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
}

/// The element-wise loops give the same bits at every vector width
/// this CPU has (16 lanes on AVX-512, 8 on AVX2, the baseline target):
/// the unary operators, the exponential, softmax rows and the lane
/// sums, and the binary arithmetic.
#[test]
fn every_width_gives_the_same_bits() {
    let levels = levels();
    eprintln!("element-wise widths compared: {levels:?}");
    // Under Miri (`scripts/miri.sh`) a few whole vectors and a part of
    // one at every width, and the special values.
    let x = spread(if cfg!(miri) { 67 } else { 4099 });
    let y: Vec<f32> = x.iter().rev().copied().collect();
    let run = |level: SimdLevel| {
        let mut outs: Vec<Vec<f32>> = Vec::new();
        let kinds = UNARY_KINDS;
        for k in kinds {
            outs.push(with_float_unary!(k, f => {
                let mut o = vec![0.0f32; x.len()];
                // SAFETY: `run` gets only the `levels` kept above, those
                // at most `detected_level()`, whose features (each level
                // implies the ones below it) this CPU has.
                unsafe {
                    with_simd_at(
                        level,
                        #[inline(always)]
                        || {
                            for (d, &v) in o.iter_mut().zip(&x) {
                                *d = f(v);
                            }
                        },
                    )
                };
                o
            }));
        }
        // SAFETY: `level` is one of `levels`, as above.
        unsafe {
            with_simd_at(
                level,
                #[inline(always)]
                || {
                    outs.push(x.iter().map(|&v| exp_f32(v)).collect());
                    let mut rows = x.clone();
                    for r in rows.chunks_mut(37) {
                        softmax_row(r);
                    }
                    outs.push(rows);
                    outs.push(x.chunks(61).map(sum_lanes).collect());
                    outs.push(x.iter().zip(&y).map(|(&a, &b)| a + b).collect());
                    outs.push(x.iter().zip(&y).map(|(&a, &b)| a * b).collect());
                    outs.push(x.iter().zip(&y).map(|(&a, &b)| a / b).collect());
                    outs.push(x.iter().zip(&y).map(|(&a, &b)| fmax(a, b)).collect());
                    outs.push(x.iter().zip(&y).map(|(&a, &b)| fmin(a, b)).collect());
                },
            )
        };
        outs
    };
    let base = run(levels[0]);
    for &l in &levels[1..] {
        let got = run(l);
        for (i, (a, b)) in got.iter().zip(&base).enumerate() {
            assert!(
                same_bits(a, b),
                "kernel {i} differs between {l:?} and {:?}",
                levels[0]
            );
        }
    }
}

/// Sized for Miri (`scripts/miri.sh`): the binary kernel's rows written
/// into uninitialised memory (`try_build_vec`), every broadcast form but
/// the one large enough to split across threads.
#[test]
fn binary_broadcast_matches_naive_small() {
    let cases: &[(&[usize], &[usize], &[usize])] = &[
        (&[2, 1, 3], &[4, 1], &[2, 4, 3]),
        (&[5], &[3, 1], &[3, 5]),
        (&[], &[2, 3], &[2, 3]),
        (&[2, 3], &[], &[2, 3]),
        (&[3, 4], &[3, 4], &[3, 4]),
        (&[1, 4, 1], &[3, 1, 5], &[3, 4, 5]),
        (&[2, 0, 3], &[1, 3], &[2, 0, 3]),
    ];
    for &(sa, sb, so) in cases {
        binary_case(sa, sb, so);
    }
}

/// `got`, where both inputs of element `i` (`pair(i)`) are NaN and it is
/// a NaN, given `want`'s bits: which of two NaNs an operation returns is
/// the hardware's and the compiler's choice of operand order (x86 keeps
/// the first source's, and a vectorised loop may swap them), in f32 as
/// in float16.
fn nan_pairs_aside(
    mut got: Vec<u16>,
    want: &[u16],
    pair: impl Fn(usize) -> (u16, u16),
) -> Vec<u16> {
    let nan = |h: u16| h & 0x7c00 == 0x7c00 && h & 0x3ff != 0;
    for (i, g) in got.iter_mut().enumerate() {
        let (p, q) = pair(i);
        if nan(p) && nan(q) && nan(*g) && nan(want[i]) {
            *g = want[i];
        }
    }
    got
}

/// float16 element-wise operators, computed in f32 on whole vectors and
/// rounded once, give for every float16 value (NaNs of every payload,
/// both zeros, subnormals, infinities) the bits of that element's own
/// conversions around the f32 function: each unary operator; each
/// binary one against a shuffled partner of the same shape and against
/// a broadcast row (two NaNs give a NaN: see `nan_pairs_aside`); clamp.
#[test]
fn float16_operators_give_each_elements_own_bits() {
    use crate::f16::{f16_to_f32, f32_to_f16};
    let all = crate::backend::testing::all_halves();
    let n = all.len();
    let h = Buf::F16(all.clone());
    let d = desc(DataType::Float16, &[n]);
    let one = |f: &dyn Fn(f32) -> f32, v: u16| f32_to_f16(f(f16_to_f32(v)));
    let bits = |b: Buf| match b {
        Buf::F16(v) => v,
        _ => panic!("a float16 result"),
    };
    // The first element that differs, not 65,536 of them.
    let same = |got: &[u16], want: &[u16], what: &str| {
        assert_eq!(got.len(), want.len(), "{what}");
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            panic!(
                "{what}: element {i} is {:#06x}, not {:#06x}",
                got[i], want[i]
            );
        }
    };
    for k in UNARY_KINDS {
        let f = float_unary(k);
        let got = bits(unary(k, &h, &d).unwrap());
        let want: Vec<u16> = all.iter().map(|&v| one(&f, v)).collect();
        same(&got, &want, &format!("{k:?}"));
    }
    let partner = crate::backend::testing::partner_halves(&all);
    let hp = Buf::F16(partner.clone());
    let row: Vec<u16> = partner[..256].to_vec();
    let (rows, shape) = (n / 256, [n / 256, 256]);
    for k in KINDS {
        let f = float_binary(k);
        let two = |p: u16, q: u16| f32_to_f16(f(f16_to_f32(p), f16_to_f32(q)));
        let got = bits(binary(k, &h, &d, &hp, &d, &d).unwrap());
        let want: Vec<u16> = all.iter().zip(&partner).map(|(&p, &q)| two(p, q)).collect();
        let got = nan_pairs_aside(got, &want, |i| (all[i], partner[i]));
        same(&got, &want, &format!("{k:?}"));
        let ds = desc(DataType::Float16, &shape);
        let got = bits(
            binary(
                k,
                &h,
                &ds,
                &Buf::F16(row.clone()),
                &desc(DataType::Float16, &[256]),
                &ds,
            )
            .unwrap(),
        );
        let want: Vec<u16> = (0..rows * 256).map(|i| two(all[i], row[i % 256])).collect();
        let got = nan_pairs_aside(got, &want, |i| (all[i], row[i % 256]));
        same(&got, &want, &format!("{k:?} broadcast"));
        // The row first (a leading one in its shape), then a column: the
        // whole-operand walk.
        let dr = desc(DataType::Float16, &[1, 256]);
        let got = bits(binary(k, &Buf::F16(row.clone()), &dr, &h, &ds, &ds).unwrap());
        let want: Vec<u16> = (0..rows * 256).map(|i| two(row[i % 256], all[i])).collect();
        let got = nan_pairs_aside(got, &want, |i| (row[i % 256], all[i]));
        same(&got, &want, &format!("{k:?} row first"));
        let col: Vec<u16> = partner[..rows].to_vec();
        let dc = desc(DataType::Float16, &[rows, 1]);
        let got = bits(binary(k, &h, &ds, &Buf::F16(col.clone()), &dc, &ds).unwrap());
        let want: Vec<u16> = (0..rows * 256).map(|i| two(all[i], col[i / 256])).collect();
        let got = nan_pairs_aside(got, &want, |i| (all[i], col[i / 256]));
        same(&got, &want, &format!("{k:?} column"));
    }
    let got = bits(clamp(&h, -2.5, 0.75, &d).unwrap());
    let want: Vec<u16> = all
        .iter()
        .map(|&v| one(&|x| clamp_f32(x, -2.5, 0.75), v))
        .collect();
    same(&got, &want, "clamp");
}

/// `pow` by a one-element 2, 3, 4, 0.5 or -1 (the exact forms of `PowBy`)
/// gives the correctly rounded power: as float32 (a new output and in
/// place in an owned operand) against the f64 value rounded once (exact
/// for the square; for the root and the quotient a double rounding that
/// is innocuous with 53 bits over 24) or, for 3 and 4, the exact integer
/// power rounded once (`exact_power`), and as float16 for every half.
/// Signed zeros, infinities and negative bases follow pow, not sqrt.
#[test]
fn pow_by_small_integers_half_and_minus_one_is_the_rounded_power() {
    let reference = |x: f32, e: f32| -> f32 {
        let w = x as f64;
        if e == 3.0 || e == 4.0 {
            exact_power(x, e as u32)
        } else if e == 2.0 {
            (w * w) as f32
        } else if e == 0.5 {
            if x == 0.0 {
                0.0
            } else if x == f32::NEG_INFINITY {
                f32::INFINITY
            } else {
                w.sqrt() as f32
            }
        } else {
            (1.0 / w) as f32
        }
    };
    let xs: Vec<f32> = (0..0x7f80_0000u32)
        .step_by(4099)
        .flat_map(|b| [f32::from_bits(b), -f32::from_bits(b)])
        .chain([
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -1.0,
            f32::MAX,
            f32::from_bits(1),
        ])
        .collect();
    let n = xs.len();
    let same = |got: &[f32], e: f32, how: &str| {
        for (&x, &g) in xs.iter().zip(got) {
            let want = reference(x, e);
            assert!(
                g.to_bits() == want.to_bits() || (g.is_nan() && want.is_nan()),
                "pow({x:e}, {e}) {how}: {g:e}, want {want:e}"
            );
            // And libm's powf agrees to within an ulp (counted in the
            // bits, which subnormal results need: a relative bound
            // failed glibc's square of 5.226886e-20, one ulp off).
            let p = x.powf(e);
            let ulps = (p.to_bits() as i64 - g.to_bits() as i64).abs();
            assert!(
                (p.is_nan() && g.is_nan())
                    || p == g
                    || (p.is_sign_negative() == g.is_sign_negative() && ulps <= 1),
                "pow({x:e}, {e}) {how}: {g:e}, powf {p:e}"
            );
        }
    };
    let d = desc(DataType::Float32, &[n]);
    let scalar = desc(DataType::Float32, &[]);
    for e in [2.0f32, 3.0, 4.0, 0.5, -1.0] {
        let b = Buf::F32(vec![e]);
        let Buf::F32(got) =
            binary(BinaryKind::Pow, &Buf::F32(xs.clone()), &d, &b, &scalar, &d).unwrap()
        else {
            panic!()
        };
        same(&got, e, "into a new output");
        let owned = Cow::Owned(Buf::F32(xs.clone()));
        let Buf::F32(got) =
            binary_owned(BinaryKind::Pow, owned, &d, Cow::Borrowed(&b), &scalar, &d).unwrap()
        else {
            panic!()
        };
        same(&got, e, "in place");
        // Every float16 value, by a float16 exponent.
        let halves: Vec<u16> = (0..=u16::MAX).collect();
        let dh = desc(DataType::Float16, &[halves.len()]);
        let Buf::F16(got) = binary(
            BinaryKind::Pow,
            &Buf::F16(halves.clone()),
            &dh,
            &Buf::F16(vec![f32_to_f16(e)]),
            &desc(DataType::Float16, &[1]),
            &dh,
        )
        .unwrap() else {
            panic!()
        };
        for (&h, &g) in halves.iter().zip(&got) {
            let want = f32_to_f16(reference(f16_to_f32(h), e));
            let nan = |v: u16| v & 0x7c00 == 0x7c00 && v & 0x3ff != 0;
            assert!(
                g == want || (nan(g) && nan(want)),
                "pow({h:#x}, {e}) float16: {g:#x}, want {want:#x}"
            );
        }
    }
}

/// `x` to the power `n` (at most 4) rounded once to float32, from the
/// exact integer power of its significand (at most 96 bits): the
/// definition, computed without floating-point arithmetic but the last
/// exact scaling.
fn exact_power(x: f32, n: u32) -> f32 {
    if !x.is_finite() || x == 0.0 {
        return (x as f64).powi(n as i32) as f32;
    }
    let b = x.to_bits();
    let (exp, frac) = (((b >> 23) & 0xff) as i32, (b & 0x7f_ffff) as u128);
    // x = m * 2^e with m an integer.
    let (m, e) = match exp {
        0 => (frac, -149),
        _ => (frac | 0x80_0000, exp - 150),
    };
    let (p, pe) = (m.pow(n), n as i32 * e);
    // The result's quantum: 24 bits below its leading bit, or the
    // subnormals' 2^-149.
    let lead = 127 - p.leading_zeros() as i32 + pe;
    let q = (lead - 23).max(-149);
    let drop = q - pe;
    let k = if drop <= 0 {
        p << -drop
    } else if drop > 100 {
        0
    } else {
        let (t, rest, half) = (p >> drop, p & ((1 << drop) - 1), 1u128 << (drop - 1));
        t + u128::from(rest > half || (rest == half && t & 1 == 1))
    };
    // k <= 2^24: exact in f64, and so is the scaling; f32 overflows to
    // infinity where the rounded value passes its range.
    let v = (k as f64 * 2f64.powi(q)) as f32;
    if b >> 31 == 1 && n % 2 == 1 {
        -v
    } else {
        v
    }
}

/// sin, cos and tan of float32 values past the vectorised reduction are
/// libm's (the pass after the loop), and those below it are within an ulp
/// of f64's, in one tensor; infinities and NaN give NaN.
#[test]
fn trig_of_large_values_is_libms() {
    let xs = vec![
        1.5f32,
        -0.0,
        1.0e6,
        1.0000001e6,
        -3.0e6,
        1.0e7,
        123_456_790.0,
        -1.0e30,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NAN,
    ];
    let d = desc(DataType::Float32, &[xs.len()]);
    for (k, libm, f64f) in [
        (
            UnaryKind::Sin,
            f32::sin as fn(f32) -> f32,
            f64::sin as fn(f64) -> f64,
        ),
        (UnaryKind::Cos, f32::cos, f64::cos),
        (UnaryKind::Tan, f32::tan, f64::tan),
    ] {
        let Buf::F32(r) = unary(k, &Buf::F32(xs.clone()), &d).unwrap() else {
            panic!()
        };
        for (&x, &y) in xs.iter().zip(&r) {
            if !x.is_finite() {
                assert!(y.is_nan(), "{k:?}({x})");
            } else if x.abs() > 1.0e6 {
                assert_eq!(y.to_bits(), libm(x).to_bits(), "{k:?}({x:e})");
            } else {
                let want = f64f(x as f64);
                let ulp = {
                    let w = (want as f32).abs();
                    (f32::from_bits(w.to_bits() + 1) - w) as f64
                };
                assert!(
                    (y as f64 - want).abs() <= ulp,
                    "{k:?}({x:e}) = {y:e}, want {want:e}"
                );
            }
        }
    }
}

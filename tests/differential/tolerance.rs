//! Tolerances and the comparison, as the conformance runner
//! (`scripts/conformance.js`) applies the WPT vectors' rules: per
//! operator ULP counts or absolute bounds (the vectors' README, "Comparing
//! results"), a graph's bound the sum of its operators' (WPT's
//! `getPrecisionTolerance`). Never looser: where the vectors give no rule
//! (reduceL2, reduceProduct), the bound is built from the same per-step
//! counts the vectors use for their neighbours.

use webnn_node::tensor::Buf;
use webnn_node::types::DataType;

use super::f16;
use super::model::{Op, Tensor};
use super::reference::filter_dims;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Tol {
    Ulp(u64),
    Atol(f64),
}

/// One operator's tolerance, given its operands.
pub fn of(op: &Op, ins: &[&Tensor], out: DataType) -> Tol {
    let f16 = out == DataType::Float16;
    if !out.is_float() {
        return Tol::Ulp(0);
    }
    let atol = if f16 { 1.0 / 512.0 } else { 1.0 / 1024.0 };
    match op {
        Op::Binary(k) => Tol::Ulp(match *k {
            "add" | "sub" | "mul" => 1,
            "div" => 2,
            "max" | "min" => 0,
            "pow" => 32,
            _ => unreachable!(),
        }),
        Op::Logical(_) | Op::LogicalUnary(_) => Tol::Ulp(0),
        Op::Unary(k) => match *k {
            "abs" | "ceil" | "floor" | "neg" | "relu" | "sign" | "identity" | "roundEven" => {
                Tol::Ulp(0)
            }
            "sigmoid" => Tol::Ulp(if f16 { 10 } else { 34 }),
            "exp" => Tol::Ulp(if f16 { 1 } else { 32 }),
            "sqrt" => Tol::Ulp(1),
            "reciprocal" => Tol::Ulp(2),
            "log" => Tol::Atol(1.0 / 1024.0),
            "tanh" | "erf" | "sin" | "cos" => Tol::Atol(atol),
            _ => unreachable!("{k}"),
        },
        Op::Cast(_) => Tol::Ulp(1),
        Op::Clamp { .. }
        | Op::Transpose { .. }
        | Op::Reshape { .. }
        | Op::Concat { .. }
        | Op::Slice { .. } => Tol::Ulp(0),
        Op::Softmax { axis } => Tol::Ulp(3 * ins[0].shape[*axis] as u64 + 3),
        Op::Reduce { kind, axes, .. } => {
            let s = &ins[0].shape;
            let n: u64 = match axes {
                None => s.iter().product::<usize>() as u64,
                Some(a) => a.iter().map(|&d| s[d]).product::<usize>() as u64,
            };
            Tol::Ulp(match *kind {
                "reduceSum" | "reduceL1" | "reduceProduct" => n,
                "reduceMean" => n + 2,
                "reduceSumSquare" => 2 * n,
                // The sum of squares' 2N, then one for the square root.
                "reduceL2" => 2 * n + 1,
                "reduceLogSum" => n + 18,
                "reduceLogSumExp" => 2 * n + 18,
                "reduceMax" | "reduceMin" => 0,
                _ => unreachable!("{kind}"),
            })
        }
        Op::Conv2d(c) | Op::ConvTranspose2d(c) => {
            let x = &ins[0].shape;
            let channels = if c.nhwc { x[3] } else { x[1] };
            let [_, _, kh, kw] = filter_dims(c.filter_layout, &ins[1].shape);
            Tol::Ulp((2 * kh * kw * (channels / c.groups)) as u64)
        }
        Op::Matmul => {
            let a = &ins[0].shape;
            Tol::Ulp(2 * a[a.len() - 1] as u64)
        }
        Op::Gemm {
            alpha, beta, at, c, ..
        } => {
            let a = &ins[0].shape;
            let k = if *at { a[0] } else { a[1] } as u64;
            let mut t = 2 * k;
            if alpha.is_some_and(|a| a != 1.0) {
                t += 1;
            }
            if *c && *beta != Some(0.0) {
                t += 1;
            }
            if beta.is_some_and(|b| b != 1.0) {
                t += 1;
            }
            Tol::Ulp(t)
        }
        Op::Pool(p) => match p.kind {
            "maxPool2d" => Tol::Ulp(0),
            _ => {
                let x = &ins[0].shape;
                let [kh, kw] = p
                    .window
                    .unwrap_or(if p.nhwc { [x[1], x[2]] } else { [x[2], x[3]] });
                Tol::Ulp((kh * kw + 2) as u64)
            }
        },
        Op::BatchNorm { .. } => Tol::Ulp(6),
        Op::LayerNorm { .. } => Tol::Ulp(14),
    }
}

/// A graph's tolerance from its operators' (ULP counts add up; an
/// absolute bound applies when its operator is the last and the others
/// are exact).
pub fn sum(parts: &[Tol]) -> Tol {
    let mut ulp = 0;
    for (i, t) in parts.iter().enumerate() {
        match *t {
            Tol::Ulp(u) => ulp += u,
            Tol::Atol(a) => {
                assert!(
                    i + 1 == parts.len() && ulp == 0,
                    "an absolute tolerance only ends a chain of exact operators"
                );
                return Tol::Atol(a);
            }
        }
    }
    Tol::Ulp(ulp)
}

/// The elements of an output as f64 (float16 through the reference's own
/// decoding).
pub fn values(b: &Buf) -> Vec<f64> {
    match b {
        Buf::F32(v) => v.iter().map(|&x| x as f64).collect(),
        Buf::F16(v) => v.iter().map(|&h| f16::from_bits(h)).collect(),
        Buf::I32(v) => v.iter().map(|&x| x as f64).collect(),
        Buf::U32(v) => v.iter().map(|&x| x as f64).collect(),
        Buf::I64(v) => v.iter().map(|&x| x as f64).collect(),
        Buf::U64(v) => v.iter().map(|&x| x as f64).collect(),
        Buf::I8(v) => v.iter().map(|&x| x as f64).collect(),
        Buf::U8(v) => v.iter().map(|&x| x as f64).collect(),
    }
}

/// WPT's float32 ULP key: the float32's bits of |x|, negated for negative
/// x, so neighbours are 1 apart and the zeros 0.
fn key32(x: f64) -> i64 {
    let b = (x.abs() as f32).to_bits() as i64;
    if x < 0.0 {
        -b
    } else {
        b
    }
}

/// The distance of `got` from `want` under `tol`'s metric, and whether it
/// passes. NaN matches NaN (of any payload) and nothing else.
pub fn check(dt: DataType, got: f64, want: f64, tol: Tol) -> (bool, f64) {
    if got.is_nan() || want.is_nan() {
        return (got.is_nan() && want.is_nan(), f64::INFINITY);
    }
    if got == want {
        return (true, 0.0);
    }
    match tol {
        Tol::Atol(a) => {
            let d = (got - want).abs();
            (d <= a, d)
        }
        Tol::Ulp(u) => {
            let d = match dt {
                DataType::Float32 => (key32(got) - key32(want)).unsigned_abs() as f64,
                DataType::Float16 => {
                    let (a, h) = (f16::to_bits(got), f16::to_bits(want));
                    if a & 0x7fff == 0 && h & 0x7fff == 0 {
                        0.0
                    } else {
                        (a as f64 - h as f64).abs()
                    }
                }
                _ => (got - want).abs(),
            };
            (d <= u as f64, d)
        }
    }
}

#[derive(Debug, Clone)]
pub struct Mismatch {
    pub index: usize,
    pub got: f64,
    pub want: f64,
    pub distance: f64,
    /// How many elements are off.
    pub count: usize,
}

/// The first element of `got` outside `tol` of `want`, if any.
pub fn compare(dt: DataType, got: &[f64], want: &[f64], tol: Tol) -> Option<Mismatch> {
    let mut first: Option<Mismatch> = None;
    let mut count = 0;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let (ok, d) = check(dt, g, w, tol);
        if !ok {
            count += 1;
            if first.is_none() {
                first = Some(Mismatch {
                    index: i,
                    got: g,
                    want: w,
                    distance: d,
                    count: 0,
                });
            }
        }
    }
    first.map(|mut m| {
        m.count = count;
        m
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ulp_distances_follow_the_runner() {
        let one = 1.0f64;
        let next = f32::from_bits(1.0f32.to_bits() + 1) as f64;
        assert_eq!(
            check(DataType::Float32, next, one, Tol::Ulp(1)),
            (true, 1.0)
        );
        assert!(!check(DataType::Float32, next, one, Tol::Ulp(0)).0);
        assert!(check(DataType::Float32, -0.0, 0.0, Tol::Ulp(0)).0);
        assert!(check(DataType::Float32, f64::NAN, f64::NAN, Tol::Ulp(0)).0);
        assert!(!check(DataType::Float32, f64::NAN, 1.0, Tol::Ulp(1000)).0);
        assert!(
            !check(
                DataType::Float32,
                f64::INFINITY,
                f32::MAX as f64,
                Tol::Ulp(0)
            )
            .0
        );
        // float16: opposite signs are far apart (no sign folding).
        let tiny = 2f64.powi(-24);
        assert!(!check(DataType::Float16, -tiny, tiny, Tol::Ulp(10)).0);
        assert!(check(DataType::Float16, 1.0 + 2f64.powi(-10), 1.0, Tol::Ulp(1)).0);
        assert!(check(DataType::Float32, 1.0009, 1.0, Tol::Atol(1.0 / 1024.0)).0);
        assert!(!check(DataType::Int32, 3.0, 4.0, Tol::Ulp(0)).0);
    }
}

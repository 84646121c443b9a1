//! CPU kernels: comparison and logical operators (equal, notEqual, greater,
//! greaterOrEqual, lesser, lesserOrEqual, logicalNot, logicalAnd, logicalOr,
//! logicalXor, isNaN, isInfinite), all with uint8 outputs of 0 or 1.
//!
//! Comparisons follow IEEE semantics: any comparison with NaN is false,
//! except notEqual, which is true. float16 compares exactly in f32 (the
//! widening is exact). Logical operators treat any non-zero byte as true.

use super::elementwise::{broadcast_map, map_slice};
use crate::error::{Error, Result};
use crate::graph::ops::broadcasts_to;
use crate::graph::ops::logical::LogicalOp;
use crate::tensor::Buf;
use crate::types::OperandDescriptor;

/// Binds `$f` to the comparison of `$op` (a closure of its own per
/// operator, so that `broadcast_map` inlines it and vectorises the loop;
/// a `fn` pointer chosen at run time is one call per element) and
/// evaluates `$body`; an operator that is not a comparison is an error.
macro_rules! with_compare {
    ($op:expr, $f:ident => $body:expr) => {
        match $op {
            LogicalOp::Equal => {
                let $f = |x, y| (x == y) as u8;
                $body
            }
            LogicalOp::NotEqual => {
                let $f = |x, y| (x != y) as u8;
                $body
            }
            LogicalOp::Greater => {
                let $f = |x, y| (x > y) as u8;
                $body
            }
            LogicalOp::GreaterOrEqual => {
                let $f = |x, y| (x >= y) as u8;
                $body
            }
            LogicalOp::Lesser => {
                let $f = |x, y| (x < y) as u8;
                $body
            }
            LogicalOp::LesserOrEqual => {
                let $f = |x, y| (x <= y) as u8;
                $body
            }
            op => {
                return Err(Error::operation(format!(
                    "{} is not a comparison",
                    op.name()
                )))
            }
        }
    };
}

/// Binds `$f` to the logical operator `$op` on bytes (as
/// [`with_compare`] binds a comparison) and evaluates `$body`.
macro_rules! with_logical {
    ($op:expr, $f:ident => $body:expr) => {
        match $op {
            LogicalOp::LogicalAnd => {
                let $f = |x: u8, y: u8| (x != 0 && y != 0) as u8;
                $body
            }
            LogicalOp::LogicalOr => {
                let $f = |x: u8, y: u8| (x != 0 || y != 0) as u8;
                $body
            }
            LogicalOp::LogicalXor => {
                let $f = |x: u8, y: u8| ((x != 0) != (y != 0)) as u8;
                $body
            }
            op => return not_logical(op),
        }
    };
}

/// An operator routed to the wrong kernel (never from a validated graph).
fn not_logical<T>(op: LogicalOp) -> Result<T> {
    Err(Error::operation(format!(
        "{} is not a logical operator",
        op.name()
    )))
}

fn check_len(b: &Buf, d: &OperandDescriptor) -> Result<()> {
    if b.len() == d.element_count() {
        Ok(())
    } else {
        Err(Error::operation(
            "a tensor does not hold as many elements as its shape",
        ))
    }
}

fn mismatch() -> Error {
    Error::operation("a logical kernel got operands of different types")
}

/// A binary comparison or logical operator with bidirectional broadcasting.
fn binary(
    op: LogicalOp,
    a: &Buf,
    da: &OperandDescriptor,
    b: &Buf,
    db: &OperandDescriptor,
    out: &OperandDescriptor,
) -> Result<Buf> {
    check_len(a, da)?;
    check_len(b, db)?;
    let fits = |s: &[usize]| broadcasts_to(s, &out.shape);
    if !fits(&da.shape) || !fits(&db.shape) {
        return Err(Error::operation(
            "the operands do not broadcast to the output",
        ));
    }
    let (sa, sb, so) = (&da.shape[..], &db.shape[..], &out.shape[..]);
    if matches!(
        op,
        LogicalOp::LogicalAnd | LogicalOp::LogicalOr | LogicalOp::LogicalXor
    ) {
        let (Buf::U8(x), Buf::U8(y)) = (a, b) else {
            return Err(mismatch());
        };
        return Ok(Buf::U8(
            with_logical!(op, f => broadcast_map(x, sa, y, sb, so, f)?),
        ));
    }
    macro_rules! cmp {
        ($x:ident, $variant:ident) => {{
            let Buf::$variant(y) = b else {
                return Err(mismatch());
            };
            with_compare!(op, f => broadcast_map($x, sa, y, sb, so, f)?)
        }};
    }
    Ok(Buf::U8(match a {
        Buf::F32(x) => cmp!(x, F32),
        // float16 compares in f32: both operands widened first (F16C
        // where the CPU has it; exact), then the float32 loops.
        Buf::F16(_) => {
            let Buf::F16(_) = b else {
                return Err(mismatch());
            };
            let (x, y) = (a.try_to_f32_vec()?, b.try_to_f32_vec()?);
            with_compare!(op, f => broadcast_map(&x, sa, &y, sb, so, |p: f32, q: f32| f(p, q))?)
        }
        Buf::I32(x) => cmp!(x, I32),
        Buf::U32(x) => cmp!(x, U32),
        Buf::I64(x) => cmp!(x, I64),
        Buf::U64(x) => cmp!(x, U64),
        Buf::I8(x) => cmp!(x, I8),
        Buf::U8(x) => cmp!(x, U8),
    }))
}

/// logicalNot, isNaN, isInfinite.
fn unary(op: LogicalOp, x: &Buf, out: &OperandDescriptor) -> Result<Buf> {
    if x.len() != out.element_count() {
        return Err(Error::operation("the output size differs from the input"));
    }
    // float16 is tested on its bits (exponent all ones; then a payload
    // for NaN, none for an infinity), as its widening to f32 would keep.
    Ok(Buf::U8(match (op, x) {
        (LogicalOp::LogicalNot, Buf::U8(v)) => map_slice(v, |b| (b == 0) as u8)?,
        (LogicalOp::LogicalNot, _) => {
            return Err(Error::operation("logicalNot needs a uint8 tensor"))
        }
        (LogicalOp::IsNaN, Buf::F16(v)) => map_slice(v, |h| (h & 0x7fff > 0x7c00) as u8)?,
        (LogicalOp::IsInfinite, Buf::F16(v)) => map_slice(v, |h| (h & 0x7fff == 0x7c00) as u8)?,
        (LogicalOp::IsNaN, Buf::F32(v)) => map_slice(v, |x| x.is_nan() as u8)?,
        (LogicalOp::IsInfinite, Buf::F32(v)) => map_slice(v, |x| x.is_infinite() as u8)?,
        (LogicalOp::IsNaN | LogicalOp::IsInfinite, _) => {
            return Err(Error::operation(format!(
                "{} needs a float tensor",
                op.name()
            )))
        }
        _ => return not_logical(op),
    }))
}

/// Runs one operator of this family; returns one buffer per output.
pub fn run(
    op: &LogicalOp,
    inputs: &[&Buf],
    in_descs: &[&OperandDescriptor],
    out_descs: &[OperandDescriptor],
) -> Result<Vec<Buf>> {
    let out = out_descs
        .first()
        .ok_or_else(|| Error::operation("a logical operator needs one output"))?;
    let r = if op.is_binary() {
        match (inputs, in_descs) {
            ([a, b], [da, db]) => binary(*op, a, da, b, db, out)?,
            _ => return Err(Error::operation("a binary operator needs two inputs")),
        }
    } else {
        match inputs {
            [x] => unary(*op, x, out)?,
            _ => return Err(Error::operation("a unary operator needs one input")),
        }
    };
    Ok(vec![r])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::DataType;

    fn desc(dt: DataType, shape: &[usize]) -> OperandDescriptor {
        OperandDescriptor::new(dt, shape.to_vec()).unwrap()
    }

    fn run2(op: LogicalOp, a: Buf, sa: &[usize], b: Buf, sb: &[usize], dt: DataType) -> Vec<u8> {
        let so = crate::graph::ops::broadcast_shapes(sa, sb).unwrap();
        let r = run(
            &op,
            &[&a, &b],
            &[&desc(dt, sa), &desc(dt, sb)],
            &[desc(DataType::Uint8, &so)],
        )
        .unwrap();
        let Buf::U8(v) = r.into_iter().next().unwrap() else {
            panic!()
        };
        v
    }

    /// A comparison with the f32 operator it must agree with.
    type Reference = (LogicalOp, fn(f32, f32) -> bool);

    const COMPARISONS: [Reference; 6] = [
        (LogicalOp::Equal, |x, y| x == y),
        (LogicalOp::NotEqual, |x, y| x != y),
        (LogicalOp::Greater, |x, y| x > y),
        (LogicalOp::GreaterOrEqual, |x, y| x >= y),
        (LogicalOp::Lesser, |x, y| x < y),
        (LogicalOp::LesserOrEqual, |x, y| x <= y),
    ];

    #[test]
    fn comparisons_match_naive_reference() {
        use LogicalOp::*;
        // [2, 3] against [3] (broadcast), odd sizes, float32 with NaN.
        let a = vec![1.0f32, f32::NAN, -0.0, 2.5, 3.0, f32::INFINITY];
        let b = vec![1.0f32, 2.0, 0.0];
        for (op, f) in COMPARISONS {
            let want: Vec<u8> = (0..6).map(|i| f(a[i], b[i % 3]) as u8).collect();
            let got = run2(
                op,
                Buf::F32(a.clone()),
                &[2, 3],
                Buf::F32(b.clone()),
                &[3],
                DataType::Float32,
            );
            assert_eq!(got, want, "{op:?}");
            // float16: the same values are exact in float16.
            let got = run2(
                op,
                Buf::f16_from_f32(&a),
                &[2, 3],
                Buf::f16_from_f32(&b),
                &[3],
                DataType::Float16,
            );
            assert_eq!(got, want, "{op:?} float16");
        }
        // NaN: only notEqual is true.
        assert_eq!(
            run2(
                NotEqual,
                Buf::F32(vec![f32::NAN]),
                &[],
                Buf::F32(vec![f32::NAN]),
                &[],
                DataType::Float32
            ),
            vec![1]
        );
        // Integers compare exactly (beyond f32 precision too).
        assert_eq!(
            run2(
                Greater,
                Buf::I64(vec![i64::MAX, i64::MIN, 5]),
                &[3],
                Buf::I64(vec![i64::MAX - 1]),
                &[1],
                DataType::Int64
            ),
            vec![1, 0, 0]
        );
        assert_eq!(
            run2(
                LesserOrEqual,
                Buf::U32(vec![0, u32::MAX]),
                &[2, 1],
                Buf::U32(vec![0, 1, u32::MAX]),
                &[3],
                DataType::Uint32
            ),
            vec![1, 1, 1, 0, 0, 1]
        );
        assert_eq!(
            run2(
                Equal,
                Buf::I8(vec![-8, 7]),
                &[2],
                Buf::I8(vec![-8, -7]),
                &[2],
                DataType::Int8
            ),
            vec![1, 0]
        );
    }

    #[test]
    fn logical_ops_treat_nonzero_as_true() {
        use LogicalOp::*;
        let a = Buf::U8(vec![0, 0, 5, 255]);
        let b = Buf::U8(vec![0, 1, 0, 2]);
        let go = |op| run2(op, a.clone(), &[4], b.clone(), &[4], DataType::Uint8);
        assert_eq!(go(LogicalAnd), vec![0, 0, 0, 1]);
        assert_eq!(go(LogicalOr), vec![0, 1, 1, 1]);
        assert_eq!(go(LogicalXor), vec![0, 1, 1, 0]);
        let r = run(
            &LogicalNot,
            &[&a],
            &[&desc(DataType::Uint8, &[4])],
            &[desc(DataType::Uint8, &[4])],
        )
        .unwrap();
        assert_eq!(r, vec![Buf::U8(vec![1, 1, 0, 0])]);
    }

    #[test]
    fn nan_and_infinity_tests() {
        let x = [
            1.5f32,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            65504.0,
            1e30,
        ];
        let d = desc(DataType::Float32, &[7]);
        let o = desc(DataType::Uint8, &[7]);
        let r = run(
            &LogicalOp::IsNaN,
            &[&Buf::F32(x.to_vec())],
            &[&d],
            std::slice::from_ref(&o),
        )
        .unwrap();
        assert_eq!(r, vec![Buf::U8(vec![0, 1, 0, 0, 0, 0, 0])]);
        let r = run(
            &LogicalOp::IsInfinite,
            &[&Buf::F32(x.to_vec())],
            &[&d],
            std::slice::from_ref(&o),
        )
        .unwrap();
        assert_eq!(r, vec![Buf::U8(vec![0, 0, 1, 1, 0, 0, 0])]);
        // In float16, 1e30 rounds to infinity.
        let h = Buf::f16_from_f32(&x);
        let dh = desc(DataType::Float16, &[7]);
        let r = run(
            &LogicalOp::IsInfinite,
            &[&h],
            &[&dh],
            std::slice::from_ref(&o),
        )
        .unwrap();
        assert_eq!(r, vec![Buf::U8(vec![0, 0, 1, 1, 0, 0, 1])]);
        let r = run(&LogicalOp::IsNaN, &[&h], &[&dh], &[o]).unwrap();
        assert_eq!(r, vec![Buf::U8(vec![0, 1, 0, 0, 0, 0, 0])]);
        // Wrong storage is an error, not a panic.
        assert!(run(
            &LogicalOp::IsNaN,
            &[&Buf::I32(vec![1])],
            &[&desc(DataType::Int32, &[1])],
            &[desc(DataType::Uint8, &[1])]
        )
        .is_err());
    }

    /// Every float16 value: isNaN and isInfinite on its bits, and each
    /// comparison against a few values (zeros, a subnormal, NaN), as the
    /// exact f32 widening of each value gives them.
    #[test]
    fn float16_tests_and_comparisons_are_those_of_f32() {
        use crate::f16::f16_to_f32;
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let n = all.len();
        let widened: Vec<f32> = all.iter().map(|&h| f16_to_f32(h)).collect();
        let (dh, o) = (desc(DataType::Float16, &[n]), desc(DataType::Uint8, &[n]));
        for (op, test) in [
            (LogicalOp::IsNaN, f32::is_nan as fn(f32) -> bool),
            (LogicalOp::IsInfinite, f32::is_infinite),
        ] {
            let r = run(
                &op,
                &[&Buf::F16(all.clone())],
                &[&dh],
                std::slice::from_ref(&o),
            );
            let want: Vec<u8> = widened.iter().map(|&x| test(x) as u8).collect();
            assert_eq!(r.unwrap(), vec![Buf::U8(want)], "{op:?}");
        }
        for y in [0x0000u16, 0x8000, 0x0001, 0x3c00, 0xfc00, 0x7e00] {
            for (op, f) in COMPARISONS {
                let got = run2(
                    op,
                    Buf::F16(all.clone()),
                    &[n],
                    Buf::F16(vec![y]),
                    &[],
                    DataType::Float16,
                );
                let want: Vec<u8> = widened.iter().map(|&x| f(x, f16_to_f32(y)) as u8).collect();
                assert_eq!(got, want, "{op:?} against {y:#06x}");
            }
        }
    }
}

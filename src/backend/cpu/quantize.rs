//! CPU kernels: quantizeLinear and dequantizeLinear.
//!
//! quantizeLinear: `saturate(roundEven(x / scale) + zeroPoint)` to the zero
//! point's type; dequantizeLinear: `(x - zeroPoint) * scale`. Scale and zero
//! point are read blockwise: input element at coordinates `c` uses the
//! scale element at `c / block` (scale aligned to the input's trailing
//! dimensions).

use crate::error::{Error, Result};
use crate::graph::ops::quantize::QuantizeOp;
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

use super::util::{floats, from_floats};

/// For every input element (row-major), the index of its scale element.
fn scale_indices(shape: &[usize], block: &[usize], scale_len: usize) -> Result<Vec<usize>> {
    let bad = || Error::operation("quantize: the scale does not match the parameters");
    if block.len() != shape.len() || block.contains(&0) {
        return Err(bad());
    }
    // The scale's own shape (input dims / block) and its row-major strides.
    let sshape: Vec<usize> = shape.iter().zip(block).map(|(s, b)| s / b).collect();
    if sshape.iter().product::<usize>() != scale_len {
        return Err(bad());
    }
    let sst = super::util::strides(&sshape);
    let n: usize = shape.iter().product();
    Ok((0..n)
        .map(|i| {
            let (mut rem, mut k) = (i, 0);
            for d in (0..shape.len()).rev() {
                k += (rem % shape[d]) / block[d] * sst[d];
                rem /= shape[d];
            }
            k
        })
        .collect())
}

/// The value range of a quantized type.
fn range(dt: DataType) -> Option<(f64, f64)> {
    Some(match dt {
        DataType::Uint8 => (0.0, 255.0),
        DataType::Int8 => (-128.0, 127.0),
        DataType::Uint4 => (0.0, 15.0),
        DataType::Int4 => (-8.0, 7.0),
        DataType::Uint32 => (0.0, u32::MAX as f64),
        DataType::Int32 => (i32::MIN as f64, i32::MAX as f64),
        _ => return None,
    })
}

/// Stores already rounded and saturated values as `dt`.
fn to_ints(dt: DataType, v: impl Iterator<Item = f64>) -> Result<Buf> {
    Ok(match dt {
        DataType::Uint8 | DataType::Uint4 => Buf::U8(v.map(|x| x as u8).collect()),
        DataType::Int8 | DataType::Int4 => Buf::I8(v.map(|x| x as i8).collect()),
        DataType::Uint32 => Buf::U32(v.map(|x| x as u32).collect()),
        DataType::Int32 => Buf::I32(v.map(|x| x as i32).collect()),
        _ => return Err(Error::operation("quantizeLinear: not a quantized type")),
    })
}

/// Runs one operator of this family; returns one buffer per output.
pub fn run(
    op: &QuantizeOp,
    inputs: &[&Buf],
    in_descs: &[&OperandDescriptor],
    out_descs: &[OperandDescriptor],
) -> Result<Vec<Buf>> {
    let bad = || Error::operation("quantize: the operands do not match the parameters");
    let out = out_descs.first().ok_or_else(bad)?;
    let d = in_descs.first().ok_or_else(bad)?;
    if inputs.len() < 3 {
        return Err(bad());
    }
    let (x, scale, zero) = (inputs[0], inputs[1], inputs[2]);
    if x.len() != d.element_count() || scale.len() != zero.len() {
        return Err(bad());
    }
    let block = match op {
        QuantizeOp::Quantize { block } | QuantizeOp::Dequantize { block } => block,
    };
    let idx = scale_indices(&d.shape, block, scale.len())?;
    let s = floats(scale)?;
    let zp: Vec<f64> = (0..zero.len()).map(|i| zero.get_f64(i)).collect();
    let buf = match op {
        QuantizeOp::Quantize { .. } => {
            let (lo, hi) = range(out.data_type).ok_or_else(bad)?;
            let xv = floats(x)?;
            to_ints(
                out.data_type,
                xv.iter().zip(&idx).map(|(&v, &k)| {
                    // The division is the input type's (f32; float16 is
                    // computed in f32); NaN saturates to 0 in the casts.
                    let q = (v / s[k]) as f64;
                    (q.round_ties_even() + zp[k]).clamp(lo, hi)
                }),
            )?
        }
        QuantizeOp::Dequantize { .. } => {
            // x - zeroPoint is exact in f64 for every quantized type, so
            // the result is rounded once, to the scale's type.
            let r: Vec<f32> = idx
                .iter()
                .enumerate()
                .map(|(i, &k)| ((x.get_f64(i) - zp[k]) * s[k] as f64) as f32)
                .collect();
            from_floats(out.data_type, r)?
        }
    };
    Ok(vec![buf])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(dt: DataType, shape: &[usize]) -> OperandDescriptor {
        OperandDescriptor {
            data_type: dt,
            shape: shape.to_vec(),
        }
    }

    fn quant(x: Buf, xs: &[usize], s: Buf, z: Buf, block: Vec<usize>, dt: DataType) -> Buf {
        let d = desc(DataType::Float32, xs);
        run(
            &QuantizeOp::Quantize { block },
            &[&x, &s, &z],
            &[&d],
            &[desc(dt, xs)],
        )
        .unwrap()
        .remove(0)
    }

    #[test]
    fn quantize_rounds_half_to_even_and_saturates() {
        let x = Buf::F32(vec![0.5, 1.5, 2.5, -0.5, -1.5, 1000.0, -1000.0, f32::NAN]);
        // scale 1, zero point 0: ties go to the even neighbour. NaN has no
        // quantized value; it becomes 0 whatever the zero point.
        let r = quant(
            x.clone(),
            &[8],
            Buf::F32(vec![1.0]),
            Buf::I8(vec![0]),
            vec![8],
            DataType::Int8,
        );
        assert_eq!(r, Buf::I8(vec![0, 2, 2, 0, -2, 127, -128, 0]));
        let r = quant(
            x.clone(),
            &[8],
            Buf::F32(vec![1.0]),
            Buf::U8(vec![10]),
            vec![8],
            DataType::Uint8,
        );
        assert_eq!(r, Buf::U8(vec![10, 12, 12, 10, 8, 255, 0, 0]));
        let r = quant(
            x.clone(),
            &[8],
            Buf::F32(vec![1.0]),
            Buf::I8(vec![1]),
            vec![8],
            DataType::Int4,
        );
        assert_eq!(r, Buf::I8(vec![1, 3, 3, 1, -1, 7, -8, 0]));
        let r = quant(
            x,
            &[8],
            Buf::F32(vec![1.0]),
            Buf::U8(vec![3]),
            vec![8],
            DataType::Uint4,
        );
        assert_eq!(r, Buf::U8(vec![3, 5, 5, 3, 1, 15, 0, 0]));
    }

    #[test]
    fn blockwise_scales() {
        // [2, 4] input, scale [2, 2]: each scale covers a 1x2 block.
        let x = Buf::F32(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        let s = Buf::F32(vec![1.0, 2.0, 0.5, 4.0]);
        let z = Buf::I32(vec![0, 100, -5, 1_000_000]);
        let r = quant(x, &[2, 4], s, z, vec![1, 2], DataType::Int32);
        // 1/1, 2/1 | 3/2=1.5->2 +100, 4/2=2 +100 | 10-5, 12-5 | 7/4=1.75->2, 2.
        assert_eq!(
            r,
            Buf::I32(vec![1, 2, 102, 102, 5, 7, 1_000_002, 1_000_002])
        );
        assert_eq!(
            scale_indices(&[3, 4], &[3, 2], 2).unwrap(),
            vec![0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1, 1]
        );
        assert!(scale_indices(&[3, 4], &[3, 2], 3).is_err());
    }

    #[test]
    fn dequantize_all_types() {
        let d = |x: Buf, dt: DataType, z: Buf, s: Buf, out: DataType, n: usize| {
            let di = desc(dt, &[n]);
            run(
                &QuantizeOp::Dequantize { block: vec![n] },
                &[&x, &s, &z],
                &[&di],
                &[desc(out, &[n])],
            )
            .unwrap()
            .remove(0)
            .to_f32_vec()
        };
        let s = Buf::F32(vec![0.5]);
        assert_eq!(
            d(
                Buf::U8(vec![0, 255, 10]),
                DataType::Uint8,
                Buf::U8(vec![10]),
                s.clone(),
                DataType::Float32,
                3
            ),
            vec![-5.0, 122.5, 0.0]
        );
        assert_eq!(
            d(
                Buf::I8(vec![-8, 7, 0]),
                DataType::Int4,
                Buf::I8(vec![-1]),
                s.clone(),
                DataType::Float32,
                3
            ),
            vec![-3.5, 4.0, 0.5]
        );
        // int32 extremes: the difference is exact before scaling.
        assert_eq!(
            d(
                Buf::I32(vec![i32::MAX, i32::MIN]),
                DataType::Int32,
                Buf::I32(vec![i32::MIN]),
                Buf::F32(vec![1.0]),
                DataType::Float32,
                2
            ),
            vec![u32::MAX as f32, 0.0]
        );
        assert_eq!(
            d(
                Buf::U32(vec![7]),
                DataType::Uint32,
                Buf::U32(vec![3]),
                Buf::f16_from_f32(&[0.25]),
                DataType::Float16,
                1
            ),
            vec![1.0]
        );
    }
}

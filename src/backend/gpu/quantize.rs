//! quantizeLinear, dequantizeLinear (`shaders/quantize.wgsl`), one
//! invocation per element, with the graph layer's blockwise mapping of
//! elements to scale and zero point elements.

use super::{is_float, is_word, word, Gpu, NodeIo, Step};
use crate::error::{Error, Result};
use crate::graph::ops::quantize::QuantizeOp;
use crate::types::DataType;

const QUANTIZE: &str = include_str!("shaders/quantize.wgsl");

/// The quantized types the kernels take (every one the operators allow:
/// all are held in one 32-bit word).
fn is_quantized(dt: DataType) -> bool {
    is_word(dt) && !is_float(dt)
}

/// The family's answer to [`super::supports`].
pub(super) fn supports(op: &str, operand: &str, dt: DataType) -> bool {
    let float_side = match (op, operand) {
        ("quantizeLinear", "input" | "scale") => true,
        ("quantizeLinear", "zeroPoint" | "output") => false,
        ("dequantizeLinear", "scale" | "output") => true,
        ("dequantizeLinear", "input" | "zeroPoint") => false,
        ("quantizeLinear" | "dequantizeLinear", "") => return is_word(dt),
        _ => return false,
    };
    if float_side {
        is_float(dt)
    } else {
        is_quantized(dt)
    }
}

/// The lowest and highest values of a quantized type, as 32-bit words,
/// and whether it is signed.
fn bounds(dt: DataType) -> Option<(u32, u32, bool)> {
    Some(match dt {
        DataType::Uint8 => (0, 255, false),
        DataType::Uint4 => (0, 15, false),
        DataType::Uint32 => (0, u32::MAX, false),
        DataType::Int8 => (-128i32 as u32, 127, true),
        DataType::Int4 => (-8i32 as u32, 7, true),
        DataType::Int32 => (i32::MIN as u32, i32::MAX as u32, true),
        _ => return None,
    })
}

/// The steps of one operator of the family.
pub(super) fn build(gpu: &mut Gpu, op: &QuantizeOp, io: &NodeIo) -> Result<Vec<Step>> {
    let bad = || {
        Error::operation(format!(
            "{}: the operands do not match the parameters",
            op.name()
        ))
    };
    if io.ins.len() != 3 || io.in_descs.len() != 3 || io.outs.is_empty() || io.out_descs.is_empty()
    {
        return Err(bad());
    }
    let (x, xd) = (io.ins[0], io.in_descs[0]);
    let (quantize, block, quantized) = match op {
        QuantizeOp::Quantize { block } => (true, block, io.out_descs[0].data_type),
        QuantizeOp::Dequantize { block } => (false, block, xd.data_type),
    };
    let (lo, hi, signed) = bounds(quantized).ok_or_else(|| {
        Error::not_supported(format!(
            "{} on {} is not supported on the GPU backend",
            op.name(),
            quantized.name()
        ))
    })?;
    let shape = &xd.shape;
    let count = xd.element_count() as u64;
    if count == 0 {
        return Ok(vec![]);
    }
    if block.len() != shape.len() || block.contains(&0) {
        return Err(bad());
    }
    // The scale's shape (input / block) and its row-major strides.
    let sshape: Vec<u64> = shape
        .iter()
        .zip(block)
        .map(|(&s, &b)| (s / b) as u64)
        .collect();
    if sshape.iter().product::<u64>() != io.in_descs[1].element_count() as u64 {
        return Err(bad());
    }
    let mut sst = vec![1u64; sshape.len()];
    for d in (0..sshape.len().saturating_sub(1)).rev() {
        sst[d] = sst[d + 1] * sshape[d + 1];
    }
    let mut p = vec![word(count)?, shape.len() as u32, lo, hi, u32::from(signed)];
    for &s in shape {
        p.push(word(s as u64)?);
    }
    for &b in block {
        p.push(word(b as u64)?);
    }
    for &s in &sst {
        p.push(word(s)?);
    }
    let params = gpu.params(&p)?;
    let grid = gpu.grid_1d(count)?;
    let entry = if quantize { "quantize" } else { "dequantize" };
    Ok(vec![gpu.step(
        QUANTIZE.to_string(),
        entry,
        &[&params, x, io.ins[1], io.ins[2], io.outs[0]],
        grid,
    )?])
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::tensor::Buf;

    const H: DataType = DataType::Float16;
    const QUANTIZED: [DataType; 6] = [
        DataType::Uint8,
        DataType::Int8,
        DataType::Uint4,
        DataType::Int4,
        DataType::Uint32,
        DataType::Int32,
    ];

    /// Runs `name(x, scale, zeroPoint)` with the given data on the GPU and
    /// the CPU kernel and compares (exactly for quantized outputs; float16
    /// within one half ulp, the CPU rounding to f32 first).
    fn compare(name: &str, d: [(DataType, &[usize], Buf); 3]) {
        let Some(mut be) = backend() else { return };
        let args = d.map(|(dt, s, values)| Arg::D(values, desc(dt, s)));
        check_call_vs_cpu(&mut be, name, &args, None, 0, 1e-6, 1e-3);
    }

    /// Random zero points spread over `dt`'s range (random_buf keeps
    /// int32 small).
    fn zero_points(dt: DataType, n: usize, seed: u64) -> Buf {
        match random_buf(dt, n, seed) {
            Buf::I32(v) => Buf::I32(v.iter().map(|x| x.wrapping_mul(40_000_000)).collect()),
            Buf::U32(v) => Buf::U32(v.iter().map(|x| x.wrapping_mul(40_000_000)).collect()),
            Buf::U8(v) if dt == DataType::Uint8 => Buf::U8(
                v.iter()
                    .enumerate()
                    .map(|(i, x)| (x * 100).wrapping_add(i as u8))
                    .collect(),
            ),
            other => other,
        }
    }

    /// (input shape, scale shape) pairs: per tensor, per axis, blockwise,
    /// lower rank scales.
    const SHAPES: [(&[usize], &[usize]); 7] = [
        (&[3, 4], &[1, 1]),
        (&[3, 4], &[3, 1]),
        (&[6, 4], &[2, 2]),
        (&[3, 4], &[2]),
        (&[5], &[]),
        (&[], &[]),
        (&[7, 300], &[7, 3]),
    ];

    #[test]
    fn quantize_linear() {
        for xt in [F, H] {
            for zt in QUANTIZED {
                for (i, (xs, ss)) in SHAPES.iter().enumerate() {
                    let nx: usize = xs.iter().product();
                    let ns: usize = ss.iter().product();
                    // Inputs large enough to saturate every type, scales
                    // of either sign, including some exact ties.
                    let mut x: Vec<f32> = random(nx, i as u64).iter().map(|v| v * 200.0).collect();
                    if nx > 4 {
                        x[0] = 2.5;
                        x[1] = -3.5;
                        x[2] = 1e30;
                        x[3] = f32::NAN;
                    }
                    let mut s: Vec<f32> =
                        random(ns, 50 + i as u64).iter().map(|v| v / 4.0).collect();
                    // A unit scale for the first block, where the ties are.
                    if let Some(first) = s.first_mut() {
                        *first = 1.0;
                    }
                    let to = |v: Vec<f32>| {
                        if xt == H {
                            Buf::f16_from_f32(&v)
                        } else {
                            Buf::F32(v)
                        }
                    };
                    compare(
                        "quantizeLinear",
                        [
                            (xt, xs, to(x)),
                            (xt, ss, to(s)),
                            (zt, ss, zero_points(zt, ns, 70 + i as u64)),
                        ],
                    );
                }
            }
        }
    }

    #[test]
    fn dequantize_linear() {
        for st in [F, H] {
            for xt in QUANTIZED {
                for (i, (xs, ss)) in SHAPES.iter().enumerate() {
                    let nx: usize = xs.iter().product();
                    let ns: usize = ss.iter().product();
                    let s: Vec<f32> = random(ns, 50 + i as u64).iter().map(|v| v / 4.0).collect();
                    let s = if st == H {
                        Buf::f16_from_f32(&s)
                    } else {
                        Buf::F32(s)
                    };
                    compare(
                        "dequantizeLinear",
                        [
                            (xt, xs, zero_points(xt, nx, i as u64)),
                            (st, ss, s),
                            (xt, ss, zero_points(xt, ns, 90 + i as u64)),
                        ],
                    );
                }
            }
        }
        // int32 extremes: the difference does not fit the type.
        compare(
            "dequantizeLinear",
            [
                (DataType::Int32, &[3], Buf::I32(vec![i32::MAX, i32::MIN, 0])),
                (F, &[], Buf::F32(vec![0.5])),
                (DataType::Int32, &[], Buf::I32(vec![i32::MIN])),
            ],
        );
        compare(
            "dequantizeLinear",
            [
                (DataType::Uint32, &[3], Buf::U32(vec![0, u32::MAX, 5])),
                (F, &[], Buf::F32(vec![-0.5])),
                (DataType::Uint32, &[], Buf::U32(vec![u32::MAX])),
            ],
        );
    }
}

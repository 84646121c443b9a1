//! CPU kernels: batchNormalization, instanceNormalization, layerNormalization.
//!
//! All three compute `scale * (x - mean) / sqrt(variance + epsilon) + bias`
//! in f32 (float16 widened, rounded once per output). Instance and layer
//! normalization compute the mean and the (population) variance of each
//! group on the fly, accumulating in f64.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::ops::norm::NormOp;
use crate::tensor::Buf;
use crate::types::OperandDescriptor;

use super::elementwise::{try_build_vec, with_simd};
use super::shape::transpose_vec;
use super::util::{floats, from_floats};
use super::util::{pooled_copy, try_filled, try_vec};

/// Elements below which groups are normalized on this thread.
const PAR_MIN: usize = 1 << 15;

/// An optional scale and an optional bias, as f32 values.
type ScaleBias = (Option<Vec<f32>>, Option<Vec<f32>>);

/// The optional scale and bias after `first` fixed inputs, as f32 vectors.
fn scale_bias(inputs: &[&Buf], first: usize, has_scale: bool, has_bias: bool) -> Result<ScaleBias> {
    let mut next = first;
    let mut take = |present: bool| -> Result<Option<Vec<f32>>> {
        if !present {
            return Ok(None);
        }
        let b = inputs
            .get(next)
            .ok_or_else(|| Error::operation("normalization: missing scale or bias"))?;
        next += 1;
        Ok(Some(floats(b)?.into_owned()))
    };
    let s = take(has_scale)?;
    let b = take(has_bias)?;
    Ok((s, b))
}

/// Normalizes each contiguous row of `x` (length `len`) in place with its
/// own mean and variance; element `j` of a row uses `scale[j]`/`bias[j]`
/// when `per_element`, else `scale[row % channels]` (one value per row).
fn normalize_rows(
    x: &mut [f32],
    len: usize,
    epsilon: f32,
    scale: Option<&[f32]>,
    bias: Option<&[f32]>,
    per_element: bool,
    channels: usize,
) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    // Per-element scale and bias as full rows (ones and zeros when
    // absent), so the inner loop is branch-free and vectorises.
    let ones;
    let zeros;
    let (srow, brow): (&[f32], &[f32]) = if per_element {
        let s = match scale {
            Some(s) if s.len() >= len => &s[..len],
            _ => {
                ones = try_filled(len, 1.0f32, "a row of ones")?;
                &ones[..]
            }
        };
        let b = match bias {
            Some(b) if b.len() >= len => &b[..len],
            _ => {
                zeros = try_filled(len, 0.0f32, "a row of zeros")?;
                &zeros[..]
            }
        };
        (s, b)
    } else {
        (&[], &[])
    };
    let run = |(r, row): (usize, &mut [f32])| {
        with_simd(
            #[inline(always)]
            || {
                // Mean and variance accumulated in f64 over independent lanes
                // (vectorisable); the variance in a second pass, which does not
                // cancel.
                let mut lanes = [0.0f64; 8];
                let mut chunks = row.chunks_exact(8);
                for c in &mut chunks {
                    for j in 0..8 {
                        lanes[j] += c[j] as f64;
                    }
                }
                let mut sum: f64 = chunks.remainder().iter().map(|&v| v as f64).sum();
                sum += lanes.iter().sum::<f64>();
                let mean = sum / len as f64;
                let mut lanes = [0.0f64; 8];
                let mut chunks = row.chunks_exact(8);
                for c in &mut chunks {
                    for j in 0..8 {
                        let d = c[j] as f64 - mean;
                        lanes[j] += d * d;
                    }
                }
                let mut sq: f64 = chunks
                    .remainder()
                    .iter()
                    .map(|&v| (v as f64 - mean) * (v as f64 - mean))
                    .sum();
                sq += lanes.iter().sum::<f64>();
                let var = sq / len as f64;
                let inv = 1.0 / (var + epsilon as f64).sqrt();
                if per_element {
                    for ((v, &s), &b) in row.iter_mut().zip(srow).zip(brow) {
                        *v = ((*v as f64 - mean) * (inv * s as f64) + b as f64) as f32;
                    }
                } else {
                    let k = r % channels.max(1);
                    let s = scale.map_or(1.0, |s| s[k] as f64) * inv;
                    let b = bias.map_or(0.0, |b| b[k] as f64);
                    for v in row.iter_mut() {
                        *v = ((*v as f64 - mean) * s + b) as f32;
                    }
                }
            },
        )
    };
    if x.len() >= PAR_MIN {
        x.par_chunks_mut(len).enumerate().for_each(run);
    } else {
        x.chunks_mut(len).enumerate().for_each(run);
    }
    Ok(())
}

fn inverse(perm: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    inv
}

/// Runs one operator of this family; returns one buffer per output.
/// The elements as an owned vector, copied (fallibly) when borrowed.
fn owned(x: std::borrow::Cow<'_, [f32]>) -> Result<Vec<f32>> {
    match x {
        std::borrow::Cow::Owned(v) => Ok(v),
        std::borrow::Cow::Borrowed(b) => pooled_copy(b),
    }
}

pub fn run(
    op: &NormOp,
    inputs: &[&Buf],
    in_descs: &[&OperandDescriptor],
    out_descs: &[OperandDescriptor],
) -> Result<Vec<Buf>> {
    let bad = || Error::operation("normalization: the operands do not match the parameters");
    let out = out_descs.first().ok_or_else(bad)?;
    let d = in_descs.first().ok_or_else(bad)?;
    let x = floats(inputs.first().ok_or_else(bad)?)?;
    let shape = &d.shape;
    if x.len() != d.element_count() || out.shape != *shape {
        return Err(bad());
    }
    let res = match op {
        NormOp::Batch {
            axis,
            epsilon,
            has_scale,
            has_bias,
        } => {
            let axis = *axis;
            if axis >= shape.len() || inputs.len() < 3 {
                return Err(bad());
            }
            let c = shape[axis];
            let inner: usize = shape[axis + 1..].iter().product();
            let mean = floats(inputs[1])?;
            let var = floats(inputs[2])?;
            let (scale, bias) = scale_bias(inputs, 3, *has_scale, *has_bias)?;
            let sized = |v: &[f32]| v.len() == c;
            if !sized(&mean)
                || !sized(&var)
                || scale.as_deref().is_some_and(|s| !sized(s))
                || bias.as_deref().is_some_and(|b| !sized(b))
            {
                return Err(bad());
            }
            // Per channel: y = x * a + b' with a = scale / sqrt(var + eps),
            // computed in f64 so the only f32 rounding is the result's.
            let mut coef: Vec<(f64, f64, f64)> = try_vec(c, "the channel coefficients")?;
            coef.extend((0..c).map(|k| {
                let a = scale.as_ref().map_or(1.0, |s| s[k] as f64)
                    / (var[k] as f64 + *epsilon as f64).sqrt();
                let b = bias.as_ref().map_or(0.0, |b| b[k] as f64);
                (mean[k] as f64, a, b)
            }));
            let norm = |v: f32, (m, a, b): (f64, f64, f64)| ((v as f64 - m) * a + b) as f32;
            // A chunk is walked in runs of one coefficient (a channel's
            // plane, `inner` long) or, with the channels innermost, runs
            // of consecutive channels: loops that vectorise, with no
            // division per element.
            let fill = |s: usize, o: &mut [MaybeUninit<f32>]| {
                let mut i = s;
                let mut rest = o;
                while !rest.is_empty() {
                    let n = if inner > 1 {
                        let n = (inner - i % inner).min(rest.len());
                        let k = coef[(i / inner) % c];
                        for (d, &v) in rest[..n].iter_mut().zip(&x[i..i + n]) {
                            d.write(norm(v, k));
                        }
                        n
                    } else {
                        let k0 = i % c;
                        let n = (c - k0).min(rest.len());
                        let runs = rest[..n].iter_mut().zip(&x[i..i + n]);
                        for ((d, &v), &k) in runs.zip(&coef[k0..k0 + n]) {
                            d.write(norm(v, k));
                        }
                        n
                    };
                    i += n;
                    rest = &mut rest[n..];
                }
            };
            if x.is_empty() {
                Vec::new()
            } else {
                // SAFETY: `fill` writes every element of each chunk: the
                // runs it takes are non-empty (inner > 0 and c > 0, as x
                // is not empty) and cover the chunk to its end.
                unsafe { try_build_vec(x.len(), fill)? }
            }
        }
        NormOp::Instance {
            nhwc,
            epsilon,
            has_scale,
            has_bias,
        } => {
            if shape.len() != 4 {
                return Err(bad());
            }
            let (scale, bias) = scale_bias(inputs, 1, *has_scale, *has_bias)?;
            let c = if *nhwc { shape[3] } else { shape[1] };
            if scale.as_ref().is_some_and(|s| s.len() != c)
                || bias.as_ref().is_some_and(|b| b.len() != c)
            {
                return Err(bad());
            }
            // NCHW rows are the (batch, channel) planes; NHWC is moved to
            // NCHW and back.
            let (n, h, w) = if *nhwc {
                (shape[0], shape[1], shape[2])
            } else {
                (shape[0], shape[2], shape[3])
            };
            let mut v = if *nhwc {
                transpose_vec(&x, shape, &[0, 3, 1, 2])?
            } else {
                owned(x)?
            };
            normalize_rows(
                &mut v,
                h * w,
                *epsilon,
                scale.as_deref(),
                bias.as_deref(),
                false,
                c,
            )?;
            if *nhwc {
                transpose_vec(&v, &[n, c, h, w], &[0, 2, 3, 1])?
            } else {
                v
            }
        }
        NormOp::Layer {
            axes,
            epsilon,
            has_scale,
            has_bias,
        } => {
            let rank = shape.len();
            if axes.iter().any(|&a| a >= rank) {
                return Err(bad());
            }
            let (scale, bias) = scale_bias(inputs, 1, *has_scale, *has_bias)?;
            let len: usize = axes.iter().map(|&a| shape[a]).product();
            if scale.as_ref().is_some_and(|s| s.len() != len)
                || bias.as_ref().is_some_and(|b| b.len() != len)
            {
                return Err(bad());
            }
            // Move the kept dimensions first and the reduced ones last, in
            // the order of `axes`: each group is then one contiguous row
            // laid out exactly like scale and bias.
            let mut perm: Vec<usize> = (0..rank).filter(|a| !axes.contains(a)).collect();
            perm.extend_from_slice(axes);
            let identity = perm.iter().enumerate().all(|(i, &p)| i == p);
            let mut v = if identity {
                owned(x)?
            } else {
                transpose_vec(&x, shape, &perm)?
            };
            normalize_rows(
                &mut v,
                len,
                *epsilon,
                scale.as_deref(),
                bias.as_deref(),
                true,
                1,
            )?;
            if identity {
                v
            } else {
                let moved: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
                transpose_vec(&v, &moved, &inverse(&perm))?
            }
        }
    };
    Ok(vec![from_floats(out.data_type, res)?])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::shape::transpose_vec;
    use crate::types::DataType;

    fn data(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(7);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
            })
            .collect()
    }

    fn desc(dt: DataType, shape: &[usize]) -> OperandDescriptor {
        OperandDescriptor {
            data_type: dt,
            shape: shape.to_vec(),
        }
    }

    fn strides(shape: &[usize]) -> Vec<usize> {
        super::super::util::strides(shape)
    }

    /// Naive normalization: for every element, the statistics of the
    /// elements that share its coordinates outside `axes`; scale/bias
    /// indexed by the coordinates along `axes` in that order.
    fn naive(
        x: &[f32],
        shape: &[usize],
        axes: &[usize],
        eps: f64,
        scale: Option<&[f32]>,
        bias: Option<&[f32]>,
    ) -> Vec<f32> {
        let st = strides(shape);
        let coords = |i: usize| -> Vec<usize> {
            (0..shape.len())
                .map(|d| (i / st[d]) % shape[d])
                .collect::<Vec<_>>()
        };
        let n = x.len();
        (0..n)
            .map(|i| {
                let ci = coords(i);
                let group: Vec<f64> = (0..n)
                    .filter(|&j| {
                        let cj = coords(j);
                        (0..shape.len()).all(|d| axes.contains(&d) || cj[d] == ci[d])
                    })
                    .map(|j| x[j] as f64)
                    .collect();
                let m = group.iter().sum::<f64>() / group.len() as f64;
                let v = group.iter().map(|g| (g - m) * (g - m)).sum::<f64>() / group.len() as f64;
                let mut k = 0;
                for &a in axes {
                    k = k * shape[a] + ci[a];
                }
                let s = scale.map_or(1.0, |s| s[k] as f64);
                let b = bias.map_or(0.0, |b| b[k] as f64);
                ((x[i] as f64 - m) / (v + eps).sqrt() * s + b) as f32
            })
            .collect()
    }

    fn close(x: &[f32], y: &[f32], tol: f32) {
        assert_eq!(x.len(), y.len());
        for (i, (a, b)) in x.iter().zip(y).enumerate() {
            assert!(
                (a - b).abs() <= tol * (1.0 + b.abs()),
                "element {i}: {a} vs {b}"
            );
        }
    }

    fn run1(op: &NormOp, ins: &[&Buf], d: &OperandDescriptor) -> Buf {
        run(op, ins, &[d], std::slice::from_ref(d))
            .unwrap()
            .remove(0)
    }

    #[test]
    fn layer_norm_matches_naive() {
        for (shape, axes) in [
            (vec![2, 3, 4], vec![1, 2]),
            (vec![2, 3, 4], vec![2, 0]),
            (vec![3, 1, 5, 2], vec![3, 1, 2]),
            (vec![4, 6], vec![]),
            (vec![], vec![]),
            (vec![5], vec![0]),
        ] {
            let n: usize = shape.iter().product();
            let len: usize = axes.iter().map(|&a| shape[a]).product();
            let x = data(n, 1);
            let s = data(len, 2);
            let b = data(len, 3);
            let expect = naive(&x, &shape, &axes, 1e-5, Some(&s), Some(&b));
            let op = NormOp::Layer {
                axes: axes.clone(),
                epsilon: 1e-5,
                has_scale: true,
                has_bias: true,
            };
            let (xb, sb, bb) = (Buf::F32(x.clone()), Buf::F32(s), Buf::F32(b));
            let r = run1(&op, &[&xb, &sb, &bb], &desc(DataType::Float32, &shape));
            close(&r.to_f32_vec(), &expect, 1e-5);
            // float16, no scale/bias.
            let xh = Buf::f16_from_f32(&x);
            let op = NormOp::Layer {
                axes: axes.clone(),
                epsilon: 1e-5,
                has_scale: false,
                has_bias: false,
            };
            let r = run1(&op, &[&xh], &desc(DataType::Float16, &shape));
            let expect = naive(&xh.to_f32_vec(), &shape, &axes, 1e-5, None, None);
            close(&r.to_f32_vec(), &expect, 2e-3);
        }
    }

    #[test]
    fn instance_norm_matches_naive_in_both_layouts() {
        let (n, c, h, w) = (2, 3, 3, 5);
        let x = data(n * c * h * w, 4);
        let s = data(c, 5);
        let b = data(c, 6);
        let expect_all = naive(&x, &[n, c, h, w], &[2, 3], 1e-5, None, None);
        // naive() indexes scale by the reduced axes; apply the per-channel
        // scale and bias here instead.
        let expect: Vec<f32> = expect_all
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let ch = (i / (h * w)) % c;
                v * s[ch] + b[ch]
            })
            .collect();
        let (sb, bb) = (Buf::F32(s), Buf::F32(b));
        for nhwc in [false, true] {
            let op = NormOp::Instance {
                nhwc,
                epsilon: 1e-5,
                has_scale: true,
                has_bias: true,
            };
            let (xin, shape) = if nhwc {
                (
                    transpose_vec(&x, &[n, c, h, w], &[0, 2, 3, 1]).unwrap(),
                    [n, h, w, c],
                )
            } else {
                (x.clone(), [n, c, h, w])
            };
            let r = run1(
                &op,
                &[&Buf::F32(xin), &sb, &bb],
                &desc(DataType::Float32, &shape),
            )
            .to_f32_vec();
            let r = if nhwc {
                transpose_vec(&r, &[n, h, w, c], &[0, 3, 1, 2]).unwrap()
            } else {
                r
            };
            close(&r, &expect, 1e-5);
        }
    }

    #[test]
    fn batch_norm_on_any_axis() {
        let shape = [2, 3, 4];
        let x = data(24, 7);
        for axis in 0..3 {
            let c = shape[axis];
            let mean = data(c, 8);
            let var: Vec<f32> = data(c, 9).iter().map(|v| v.abs() + 0.5).collect();
            let s = data(c, 10);
            let b = data(c, 11);
            let st = strides(&shape);
            let expect: Vec<f32> = (0..24)
                .map(|i| {
                    let k = (i / st[axis]) % c;
                    ((x[i] as f64 - mean[k] as f64) / (var[k] as f64 + 1e-3).sqrt() * s[k] as f64
                        + b[k] as f64) as f32
                })
                .collect();
            let op = NormOp::Batch {
                axis,
                epsilon: 1e-3,
                has_scale: true,
                has_bias: true,
            };
            let bufs = [&x, &mean, &var, &s, &b].map(|v| Buf::F32(v.clone()));
            let ins: Vec<&Buf> = bufs.iter().collect();
            let r = run1(&op, &ins, &desc(DataType::Float32, &shape));
            close(&r.to_f32_vec(), &expect, 1e-6);
            // Only a bias: mean and variance still apply.
            let op = NormOp::Batch {
                axis,
                epsilon: 1e-3,
                has_scale: false,
                has_bias: true,
            };
            let r = run1(
                &op,
                &[ins[0], ins[1], ins[2], ins[4]],
                &desc(DataType::Float32, &shape),
            );
            let st = strides(&shape);
            let expect: Vec<f32> = (0..24)
                .map(|i| {
                    let k = (i / st[axis]) % c;
                    ((x[i] as f64 - mean[k] as f64) / (var[k] as f64 + 1e-3).sqrt() + b[k] as f64)
                        as f32
                })
                .collect();
            close(&r.to_f32_vec(), &expect, 1e-6);
        }
    }

    #[test]
    fn mismatched_operands_are_errors() {
        let op = NormOp::Batch {
            axis: 1,
            epsilon: 1e-5,
            has_scale: true,
            has_bias: false,
        };
        let x = Buf::F32(vec![0.0; 6]);
        let m = Buf::F32(vec![0.0; 3]);
        let short = Buf::F32(vec![1.0; 2]);
        let d = desc(DataType::Float32, &[2, 3]);
        assert!(run(&op, &[&x, &m, &m, &short], &[&d], std::slice::from_ref(&d)).is_err());
        assert!(run(&op, &[&x, &m, &m], &[&d], std::slice::from_ref(&d)).is_err());
    }
}

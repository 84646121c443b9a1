//! batchNormalization, instanceNormalization, layerNormalization, computed
//! in f32 (float16 too, rounded by the fix-up step after).
//!
//! batchNormalization is elementwise (`shaders/norm_batch.wgsl`); the other
//! two find each group's mean and variance first (`shaders/norm_group.wgsl`:
//! one invocation per group when groups are short, one workgroup per group
//! otherwise).

use super::shape::strides;
use super::{is_float, word, Gpu, NodeIo, Step};
use crate::error::{Error, Result};
use crate::graph::ops::norm::NormOp;
use crate::types::DataType;

const BATCH: &str = include_str!("shaders/norm_batch.wgsl");
const GROUP: &str = include_str!("shaders/norm_group.wgsl");

/// Groups at most this long are normalized by one invocation each.
const SMALL_GROUP: u64 = 64;

/// The family's answer to [`super::supports`]: every operand of the three
/// operators is float32 or float16.
pub(super) fn supports(op: &str, _operand: &str, dt: DataType) -> bool {
    match op {
        "batchNormalization" | "instanceNormalization" | "layerNormalization" => is_float(dt),
        _ => false,
    }
}

/// The optional scale and bias bindings (from `first` on) and the WGSL
/// `scale_of(k)` / `bias_of(k)` reading them, or 1 and 0 when absent.
fn scale_bias(first: u32, has_scale: bool, has_bias: bool) -> String {
    let mut src = String::new();
    let mut b = first;
    for (present, name, f, absent) in [
        (has_scale, "scale", "scale_of", "1.0"),
        (has_bias, "bias", "bias_of", "0.0"),
    ] {
        if present {
            src += &format!(
                "@group(0) @binding({b}) var<storage, read> {name}: array<f32>;\n\
                 fn {f}(k: u32) -> f32 {{\n    return {name}[k];\n}}\n"
            );
            b += 1;
        } else {
            src += &format!("fn {f}(k: u32) -> f32 {{\n    return {absent};\n}}\n");
        }
    }
    src
}

/// The steps of one operator of the family.
pub(super) fn build(gpu: &mut Gpu, op: &NormOp, io: &NodeIo) -> Result<Vec<Step>> {
    let bad = || {
        Error::operation(format!(
            "{}: the operands do not match the parameters",
            op.name()
        ))
    };
    let (Some(&x), Some(&d), Some(&out)) = (io.ins.first(), io.in_descs.first(), io.outs.first())
    else {
        return Err(bad());
    };
    if !is_float(d.data_type) {
        return Err(Error::not_supported(format!(
            "{} on {} is not supported on the GPU backend",
            op.name(),
            d.data_type.name()
        )));
    }
    let shape = &d.shape;
    let count = d.element_count() as u64;
    if count == 0 {
        return Ok(vec![]);
    }
    word(count)?;
    let st = strides(shape);
    match op {
        NormOp::Batch {
            axis,
            epsilon,
            has_scale,
            has_bias,
        } => {
            let want = 3 + usize::from(*has_scale) + usize::from(*has_bias);
            if *axis >= shape.len() || io.ins.len() != want {
                return Err(bad());
            }
            let source = BATCH.replace("$SCALE_BIAS", &scale_bias(5, *has_scale, *has_bias));
            let params = gpu.params(&[
                word(count)?,
                word(st[*axis])?,
                word(shape[*axis] as u64)?,
                epsilon.to_bits(),
            ])?;
            let mut bufs = vec![&params, x, io.ins[1], io.ins[2], out];
            bufs.extend(&io.ins[3..]);
            let grid = gpu.grid_1d(count)?;
            Ok(vec![gpu.step(source, "main", &bufs, grid)?])
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
            // Groups are (batch, channel); the channel is the group index
            // modulo the channel count in both layouts.
            let (kept, reduced, c) = if *nhwc {
                ([0, 3], [1, 2], shape[3])
            } else {
                ([0, 1], [2, 3], shape[1])
            };
            groups(
                gpu,
                io,
                &kept,
                &reduced,
                c.max(1),
                *epsilon,
                *has_scale,
                *has_bias,
            )
        }
        NormOp::Layer {
            axes,
            epsilon,
            has_scale,
            has_bias,
        } => {
            if axes.iter().any(|&a| a >= shape.len()) {
                return Err(bad());
            }
            let kept: Vec<usize> = (0..shape.len()).filter(|a| !axes.contains(a)).collect();
            groups(gpu, io, &kept, axes, 0, *epsilon, *has_scale, *has_bias)
        }
    }
}

/// The steps normalizing each group of the input: groups run over the
/// `kept` dimensions, their elements over `reduced` (in that order);
/// `channels` 0 reads scale/bias per element, otherwise per group modulo
/// `channels`.
#[allow(clippy::too_many_arguments)]
fn groups(
    gpu: &mut Gpu,
    io: &NodeIo,
    kept: &[usize],
    reduced: &[usize],
    channels: usize,
    epsilon: f32,
    has_scale: bool,
    has_bias: bool,
) -> Result<Vec<Step>> {
    let d = io.in_descs[0];
    let shape = &d.shape;
    let st = strides(shape);
    let want = 1 + usize::from(has_scale) + usize::from(has_bias);
    if io.ins.len() != want {
        return Err(Error::operation(
            "normalization: the operands do not match the parameters",
        ));
    }
    let size = |dims: &[usize]| dims.iter().map(|&a| shape[a] as u64).product::<u64>();
    let (n_groups, len) = (size(kept), size(reduced));
    let mut p = vec![
        word(n_groups)?,
        word(len)?,
        kept.len() as u32,
        reduced.len() as u32,
        word(channels as u64)?,
        epsilon.to_bits(),
    ];
    for dims in [kept, reduced] {
        for &a in dims {
            p.push(word(shape[a] as u64)?);
        }
        for &a in dims {
            p.push(word(st[a])?);
        }
    }
    let source = GROUP.replace("$SCALE_BIAS", &scale_bias(3, has_scale, has_bias));
    let params = gpu.params(&p)?;
    let mut bufs = vec![&params, io.ins[0], io.outs[0]];
    bufs.extend(&io.ins[1..]);
    if len <= SMALL_GROUP {
        let grid = gpu.grid_1d(n_groups)?;
        Ok(vec![gpu.step(source, "small", &bufs, grid)?])
    } else {
        // One 256-wide workgroup per group.
        let grid = gpu.grid_1d(n_groups * 256)?;
        Ok(vec![gpu.step(source, "large", &bufs, grid)?])
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;
    use crate::graph::args::Val;
    use crate::tensor::Buf;

    const H: DataType = DataType::Float16;

    /// Builds `name(x, fixed..., options)` where options may name further
    /// inputs (scale, bias), and compares GPU and CPU on random data.
    fn check<'a>(
        name: &str,
        dt: DataType,
        x: &[usize],
        fixed: &[&[usize]],
        optional: &[(&'a str, &[usize])],
        opts: Vec<(&'a str, Val)>,
        tol: f32,
    ) {
        let Some(mut be) = backend() else { return };
        let seed = 31;
        let mut args = vec![Arg::T(dt, x)];
        for (i, s) in fixed.iter().enumerate() {
            if name == "batchNormalization" && i == 1 {
                // Variances must be positive.
                let r = random_buf(dt, s.iter().product(), seed + 2);
                let v: Vec<f32> = r.to_f32_vec().iter().map(|v| v.abs() + 0.1).collect();
                let v = if dt == H {
                    Buf::f16_from_f32(&v)
                } else {
                    Buf::F32(v)
                };
                args.push(Arg::D(v, desc(dt, s)));
            } else {
                args.push(Arg::T(dt, s));
            }
        }
        let mut members: Vec<(&str, Arg)> = opts.into_iter().map(|(k, v)| (k, Arg::V(v))).collect();
        members.extend(optional.iter().map(|(k, s)| (*k, Arg::T(dt, s))));
        check_call_vs_cpu(
            &mut be,
            name,
            &args,
            Some(&members),
            seed,
            tol,
            tol.max(1e-3),
        );
    }

    #[test]
    fn batch_normalization() {
        for dt in [F, H] {
            for (shape, axis) in [
                (&[2usize, 3, 4, 5][..], 1usize),
                (&[2, 3, 4, 5], 3),
                (&[2, 3, 4, 5], 0),
                (&[7, 300], 1),
                (&[1, 1], 0),
                (&[5], 0),
            ] {
                let c: &[usize] = &[shape[axis]];
                for (scale, bias) in [(false, false), (true, false), (false, true), (true, true)] {
                    let mut optional = vec![];
                    if scale {
                        optional.push(("scale", c));
                    }
                    if bias {
                        optional.push(("bias", c));
                    }
                    let opts = vec![("axis", n(axis as f64)), ("epsilon", n(1e-3))];
                    check(
                        "batchNormalization",
                        dt,
                        shape,
                        &[c, c],
                        &optional,
                        opts,
                        1e-5,
                    );
                }
            }
        }
    }

    #[test]
    fn instance_normalization() {
        for dt in [F, H] {
            // Small groups (one invocation each) and large ones (a
            // workgroup each, lengths not multiples of 256).
            for (n_, c, h, w) in [(2, 3, 4, 5), (1, 2, 1, 1), (2, 3, 17, 31), (1, 1, 40, 40)] {
                for nhwc in [false, true] {
                    let shape = if nhwc { [n_, h, w, c] } else { [n_, c, h, w] };
                    let cs: &[usize] = &[c];
                    let layout = s(if nhwc { "nhwc" } else { "nchw" });
                    for optional in [
                        vec![],
                        vec![("scale", cs), ("bias", cs)],
                        vec![("bias", cs)],
                    ] {
                        let opts = vec![("layout", layout.clone())];
                        check(
                            "instanceNormalization",
                            dt,
                            &shape,
                            &[],
                            &optional,
                            opts,
                            1e-4,
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn layer_normalization() {
        let cases: Vec<(Vec<usize>, Option<Vec<f64>>)> = vec![
            (vec![2, 3, 4], None),
            (vec![2, 3, 4], Some(vec![2.0, 0.0])),
            (vec![2, 3, 4], Some(vec![1.0])),
            (vec![3, 1, 5, 2], Some(vec![3.0, 1.0, 2.0])),
            (vec![4, 6], Some(vec![])),
            (vec![], None),
            (vec![5], Some(vec![0.0])),
            (vec![3, 300], Some(vec![1.0])),
            (vec![5, 70, 9], Some(vec![0.0, 2.0])),
            (vec![2, 600], None),
        ];
        for dt in [F, H] {
            for (shape, axes) in &cases {
                let ax: Vec<usize> = match axes {
                    Some(a) => a.iter().map(|&v| v as usize).collect(),
                    None => (1..shape.len().max(1)).collect(),
                };
                let sb: Vec<usize> = ax.iter().map(|&a| shape[a]).collect();
                let mut opts = vec![("epsilon", n(1e-4))];
                if let Some(a) = axes {
                    opts.push(("axes", list(a)));
                }
                for optional in [
                    vec![],
                    vec![("scale", &sb[..]), ("bias", &sb[..])],
                    vec![("scale", &sb[..])],
                ] {
                    check(
                        "layerNormalization",
                        dt,
                        shape,
                        &[],
                        &optional,
                        opts.clone(),
                        1e-4,
                    );
                }
            }
        }
    }
}

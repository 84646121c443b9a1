//! convTranspose2d: per (batch, group) one product gives every tap's
//! contribution, then col2im adds them up.

use rayon::prelude::*;

use crate::backend::cpu::matmul::sgemm;
use crate::backend::cpu::shape::transpose_vec;
use crate::backend::cpu::util::{floats, from_floats, try_filled};
use crate::error::{Error, Result};
use crate::graph::ops::conv::{ConvTranspose2dParams, TransposeFilterLayout};
use crate::tensor::Buf;
use crate::types::OperandDescriptor;

use super::common::{TO_NCHW, TO_NHWC, UNIT_PAR_WORK};

/// The convTranspose2d filter as [groups][og * kh * kw][cg] (each group's
/// block transposed for the sgemm), whatever its layout.
fn transpose_filter_groups(f: &[f32], p: &ConvTranspose2dParams) -> Result<Vec<f32>> {
    let g = p.groups;
    let (c, og, kh, kw) = (p.in_channels, p.out_channels / g, p.kernel_h, p.kernel_w);
    // Canonical IOHW: [c, og, kh, kw] (the filter itself when it is).
    let iohw = match p.filter_layout {
        TransposeFilterLayout::Iohw => std::borrow::Cow::Borrowed(f),
        TransposeFilterLayout::Hwoi => transpose_vec(f, &[kh, kw, og, c], &[3, 2, 0, 1])?.into(),
        TransposeFilterLayout::Ohwi => transpose_vec(f, &[og, kh, kw, c], &[3, 0, 1, 2])?.into(),
    };
    // [g, cg, og*kh*kw] -> [g, og*kh*kw, cg].
    transpose_vec(&iohw, &[g, c / g, og * kh * kw], &[0, 2, 1])
}

/// `convTranspose2d` with nchw/nhwc input, iohw/hwoi/ohwi filters,
/// padding, strides, dilations, groups and an optional bias (`inputs[2]`).
///
/// Each input element scatters `value * filter` into the output window
/// that starts at `(iy * stride - padBegin, ix * stride - padBegin)`;
/// taps outside the output (cut off by padding, or beyond outputSizes)
/// are dropped and output positions no tap reaches (outputPadding) hold
/// the bias only. Per (batch, group): one sgemm gives every tap's
/// contribution ([og * kh * kw, h * w]), then col2im adds them up.
pub fn conv_transpose2d(
    p: &ConvTranspose2dParams,
    inputs: &[&Buf],
    _in_descs: &[&OperandDescriptor],
    out_descs: &[OperandDescriptor],
) -> Result<Vec<Buf>> {
    let bad = || Error::operation("convTranspose2d: the operands do not match the parameters");
    let out = out_descs.first().ok_or_else(bad)?;
    let g = p.groups;
    if g == 0
        || !p.in_channels.is_multiple_of(g)
        || !p.out_channels.is_multiple_of(g)
        || p.strides.contains(&0)
    {
        return Err(bad());
    }
    let (n, c, h, w) = (p.batch, p.in_channels, p.in_h, p.in_w);
    let (oc, oh, ow) = (p.out_channels, p.out_h, p.out_w);
    let (cg, og) = (c / g, oc / g);
    let (kh, kw) = (p.kernel_h, p.kernel_w);
    let x = floats(inputs.first().ok_or_else(bad)?)?;
    let f = floats(inputs.get(1).ok_or_else(bad)?)?;
    let bias = if p.has_bias {
        Some(floats(inputs.get(2).ok_or_else(bad)?)?)
    } else {
        None
    };
    if x.len() != n * c * h * w
        || f.len() != c * og * kh * kw
        || bias.as_ref().is_some_and(|b| b.len() != oc)
        || out.element_count() != n * oc * oh * ow
    {
        return Err(bad());
    }
    let x = if p.nhwc {
        std::borrow::Cow::Owned(transpose_vec(&x, &[n, h, w, c], &TO_NCHW)?)
    } else {
        x
    };
    let wt = transpose_filter_groups(&f, p)?;
    let taps = og * kh * kw;
    let (in_plane, plane) = (h * w, oh * ow);
    let mut res = try_filled(n * oc * plane, 0.0f32, "the convTranspose2d output")?;
    let unit = og * plane;
    let run = |(t, dst): (usize, &mut [f32]), parallel: bool| {
        let (b, gi) = (t / g, t % g);
        let xs = &x[(b * c + gi * cg) * in_plane..(b * c + (gi + 1) * cg) * in_plane];
        let wg = &wt[gi * taps * cg..(gi + 1) * taps * cg];
        let mut col = try_filled(taps * in_plane, 0.0f32, "convTranspose2d's tap columns")?;
        sgemm(taps, in_plane, cg, wg, xs, &mut col, parallel);
        // col2im: row (o, ky, kx) holds that tap's value for every input
        // position.
        for (r, row) in col.chunks(in_plane.max(1)).enumerate().take(taps) {
            let (o, ky, kx) = (r / (kh * kw), (r / kw) % kh, r % kw);
            let dplane = &mut dst[o * plane..(o + 1) * plane];
            for iy in 0..h {
                let Some(oy) = (iy * p.strides[0] + ky * p.dilations[0])
                    .checked_sub(p.padding[0])
                    .filter(|&v| v < oh)
                else {
                    continue;
                };
                let drow = &mut dplane[oy * ow..(oy + 1) * ow];
                for ix in 0..w {
                    if let Some(ox) = (ix * p.strides[1] + kx * p.dilations[1])
                        .checked_sub(p.padding[2])
                        .filter(|&v| v < ow)
                    {
                        drow[ox] += row[iy * w + ix];
                    }
                }
            }
        }
        Ok(())
    };
    if unit > 0 {
        if n * g > 1 && taps * in_plane * cg < UNIT_PAR_WORK {
            res.par_chunks_mut(unit)
                .enumerate()
                .try_for_each(|u| run(u, false))?;
        } else {
            res.chunks_mut(unit)
                .enumerate()
                .try_for_each(|u| run(u, true))?;
        }
        if let Some(bias) = &bias {
            for (i, ch) in res.chunks_mut(plane).enumerate() {
                let v = bias[i % oc];
                ch.iter_mut().for_each(|y| *y += v);
            }
        }
    }
    let res = if p.nhwc {
        transpose_vec(&res, &[n, oc, oh, ow], &TO_NHWC)?
    } else {
        res
    };
    Ok(vec![from_floats(out.data_type, res)?])
}

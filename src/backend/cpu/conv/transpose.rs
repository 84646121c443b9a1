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

use super::common::{window_taps, TO_NCHW, TO_NHWC, UNIT_PAR_WORK};

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

/// Output elements of one unit above which its planes are added up across
/// the pool.
const PAR_PLANES: usize = 1 << 16;

/// The input positions `lo..hi` along one axis whose tap `k` lands inside
/// the output (`0..out`): position `i` lands at `i * stride + k * dilation
/// - pad_begin`. That is a convolution's window read the other way (the
/// tap as the output position, the positions as its taps), so
/// `window_taps` with stride and dilation exchanged.
fn landing(
    len: usize,
    k: usize,
    stride: usize,
    dilation: usize,
    pad: usize,
    out: usize,
) -> (usize, usize) {
    window_taps(k, len, dilation, stride, pad, out)
}

/// col2im for one output plane: `rows` are its `kh * kw` taps' values at
/// every input position, added in tap order into `dst` (`out_h` by
/// `out_w`, zero or partly summed), each element receiving its taps in
/// the order a walk of the taps would add them.
fn col2im_plane(p: &ConvTranspose2dParams, rows: &[f32], dst: &mut [f32]) {
    let (h, w, ow) = (p.in_h, p.in_w, p.out_w);
    let (sy, sx) = (p.strides[0], p.strides[1]);
    let in_plane = h * w;
    for (r, row) in rows.chunks_exact(in_plane.max(1)).enumerate() {
        let (ky, kx) = (r / p.kernel_w, r % p.kernel_w);
        let (y0, y1) = landing(h, ky, sy, p.dilations[0], p.padding[0], p.out_h);
        let (x0, x1) = landing(w, kx, sx, p.dilations[1], p.padding[2], ow);
        if x0 == x1 {
            continue;
        }
        let ox0 = x0 * sx + kx * p.dilations[1] - p.padding[2];
        for iy in y0..y1 {
            let oy = iy * sy + ky * p.dilations[0] - p.padding[0];
            let src = &row[iy * w + x0..iy * w + x1];
            let drow = &mut dst[oy * ow + ox0..(oy + 1) * ow];
            if sx == 1 {
                for (d, &v) in drow.iter_mut().zip(src) {
                    *d += v;
                }
            } else {
                // An index loop over a slice cut to the last element
                // written: no bounds checks (`step_by` kept several).
                let drow = &mut drow[..(src.len() - 1) * sx + 1];
                for (i, &v) in src.iter().enumerate() {
                    drow[i * sx] += v;
                }
            }
        }
    }
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
    // One unit's product, then its col2im: plane by plane, across the
    // pool when the units run one after another.
    let run = |t: usize, dst: &mut [f32], col: &mut [f32], parallel: bool| {
        let (b, gi) = (t / g, t % g);
        let xs = &x[(b * c + gi * cg) * in_plane..(b * c + (gi + 1) * cg) * in_plane];
        let wg = &wt[gi * taps * cg..(gi + 1) * taps * cg];
        sgemm(taps, in_plane, cg, wg, xs, col, parallel);
        let col = &*col;
        let add = |(o, dplane): (usize, &mut [f32])| {
            let rows = &col[o * kh * kw * in_plane..(o + 1) * kh * kw * in_plane];
            col2im_plane(p, rows, dplane);
            if let Some(bias) = &bias {
                let v = bias[gi * og + o];
                dplane.iter_mut().for_each(|y| *y += v);
            }
        };
        if parallel && unit >= PAR_PLANES {
            dst.par_chunks_mut(plane).enumerate().for_each(add);
        } else {
            dst.chunks_mut(plane).enumerate().for_each(add);
        }
    };
    if unit > 0 {
        if n * g > 1 && taps * in_plane * cg < UNIT_PAR_WORK {
            res.par_chunks_mut(unit)
                .enumerate()
                .try_for_each(|(t, dst)| -> Result<()> {
                    let mut col =
                        try_filled(taps * in_plane, 0.0f32, "convTranspose2d's tap columns")?;
                    run(t, dst, &mut col, false);
                    Ok(())
                })?;
        } else {
            let mut col = try_filled(taps * in_plane, 0.0f32, "convTranspose2d's tap columns")?;
            for (t, dst) in res.chunks_mut(unit).enumerate() {
                run(t, dst, &mut col, true);
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

//! The products path of conv2d (every conv2d that is not depthwise): each
//! (batch, group) unit as a product on `sgemm/`, its B panels made straight
//! from the padded input ([`conv_gen`], no im2col matrix) or, with unit
//! strides and a packed filter, read in place ([`conv_rows`]).

use rayon::prelude::*;

use crate::backend::cpu::sgemm::{
    copy_panel_row, copy_row, sgemm_gen, sgemm_gen_packed_a, sgemm_rows_packed_a, Fuse, PackedA,
    RowsB,
};
use crate::error::Result;
use crate::graph::ops::conv::Conv2dParams;
use crate::tensor::Buf;

use super::common::{pad_split, reach};

/// One (batch, group) unit of a convolution, as a product whose B panels
/// are made straight from the input, never as an im2col matrix: the input
/// channels are copied once with their padding and split by column phase
/// ([`pad_split`]), after which the patch row of tap (c, ky, kx) for output
/// row `oy` is a contiguous run of phase `(kx * dw) % sw` of channel c,
/// `ow` long, at row `oy * sh + ky * dh`, column `(kx * dw) / sw` on. A
/// panel of `nr` output columns is a few such runs (one per output row it
/// touches). The product writes the output directly, with bias and bounds
/// fused.
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_gen(
    xs: &[f32],
    wg: &[f32],
    cg: usize,
    og: usize,
    p: &Conv2dParams,
    fuse: &Fuse,
    dst: &mut [f32],
    parallel: bool,
    packed: Option<&PackedA>,
) -> Result<()> {
    let (h, w, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    let (kh, kw) = (p.kernel_h, p.kernel_w);
    let (sh, sw) = (p.strides[0], p.strides[1]);
    let (dh, dw) = (p.dilations[0], p.dilations[1]);
    let (pt, pl) = (p.padding[0], p.padding[2]);
    let (hu, wu) = reach(p);
    let wq = wu.div_ceil(sw);
    let chan = sw * hu * wq;
    // Only the cells the input covers are written: the rest is padding.
    let mut xp_buf = Buf::try_f32_for_overwrite(cg * chan)?;
    xp_buf.fill(0.0);
    for (c, d) in xp_buf.chunks_exact_mut(chan).enumerate() {
        pad_split(
            &xs[c * h * w..(c + 1) * h * w],
            (h, w),
            (pt, pl),
            (hu, wu, sw),
            d,
        );
    }
    let n = oh * ow;
    let khw = kh * kw;
    // Offset of tap (ky, kx) in a channel's phase-split block.
    let taps: Vec<usize> = (0..khw)
        .map(|t| {
            let (ky, kx) = (t / kw, t % kw);
            ((kx * dw) % sw) * hu * wq + ky * dh * wq + (kx * dw) / sw
        })
        .collect();
    let xp: &[f32] = &xp_buf;
    let gen = move |p0: usize, kc: usize, j0: usize, cols: usize, nr: usize, dst: &mut [f32]| {
        for (q, panel) in dst.chunks_exact_mut(kc * nr).enumerate() {
            // The runs of this panel's columns: (first column in the panel,
            // offset of its output row and column in a phase plane, length).
            let j = j0 + q * nr;
            let end = (j + nr).min(j0 + cols).min(n);
            let mut runs = [(0usize, 0usize, 0usize); 33];
            let mut count = 0;
            let mut at = j;
            while at < end && count < runs.len() {
                let (oy, ox) = (at / ow, at % ow);
                let len = (end - at).min(ow - ox);
                runs[count] = (at - j, oy * sh * wq + ox, len);
                count += 1;
                at += len;
            }
            let runs = &runs[..count];
            let whole = matches!(runs, [(0, _, len)] if *len == nr);
            let (mut cbase, mut t) = ((p0 / khw) * chan, p0 % khw);
            for row in panel.chunks_exact_mut(nr) {
                let base = cbase + taps[t];
                if whole {
                    let s = base + runs[0].1;
                    copy_panel_row(row, &xp[s..s + nr]);
                } else {
                    // Short runs: element loops, not a memmove call each.
                    for &(d, off, len) in runs {
                        let s = base + off;
                        copy_row(&mut row[d..d + len], &xp[s..s + len]);
                    }
                    if let Some(&(d, _, len)) = runs.last() {
                        row[d + len..].fill(0.0);
                    } else {
                        row.fill(0.0);
                    }
                }
                t += 1;
                if t == khw {
                    t = 0;
                    cbase += chan;
                }
            }
        }
    };
    match packed {
        Some(pa) => sgemm_gen_packed_a(pa, n, &gen, dst, parallel, fuse)?,
        None => sgemm_gen(og, n, cg * khw, wg, false, &gen, dst, parallel, fuse)?,
    }
    Buf::F32(xp_buf).recycle();
    Ok(())
}

/// One (batch, group) unit of a conv2d with unit strides and a packed
/// filter, as a product whose B is read in place ([`RowsB`]): no patch
/// matrix and no packing. The input is padded once (`wp` =
/// padded width, the columns the taps reach) and the product runs over
/// the padded width: column `oy * wp + ox` of B's row (c, ky, kx) is
/// padded element (oy + ky*dh, ox + kx*dw) of plane c, a plain shift. Of
/// each output row the first `ow` columns are the output; the other
/// `wp - ow` mix neighbouring rows and are dropped when the rows are
/// copied out (skipped where `wp == ow`).
#[allow(clippy::too_many_arguments)]
pub(super) fn conv_rows(
    xs: &[f32],
    cg: usize,
    og: usize,
    p: &Conv2dParams,
    fuse: &Fuse,
    dst: &mut [f32],
    parallel: bool,
    pa: &PackedA,
) -> Result<()> {
    let (h, w, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    let (kh, kw) = (p.kernel_h, p.kernel_w);
    let (dh, dw) = (p.dilations[0], p.dilations[1]);
    let (pt, pl) = (p.padding[0], p.padding[2]);
    let (hu, wp) = reach(p);
    let chan = hu * wp;
    // The last tap row runs (kw - 1) * dw past the last plane. Padding
    // and copy-out are a pass over the input and the output each: split
    // by plane across the pool like the product (serial, they held the
    // second thread back for a tenth of a 3x3 conv).
    let mut xp = Buf::try_f32_for_overwrite(cg * chan + (kw - 1) * dw)?;
    let pad = |(c, d): (usize, &mut [f32])| {
        d.fill(0.0);
        if c < cg {
            pad_split(
                &xs[c * h * w..(c + 1) * h * w],
                (h, w),
                (pt, pl),
                (hu, wp, 1),
                d,
            );
        }
    };
    if parallel {
        xp.par_chunks_mut(chan).enumerate().for_each(pad);
    } else {
        xp.chunks_mut(chan).enumerate().for_each(pad);
    }
    let offs: Vec<usize> = (0..cg * kh * kw)
        .map(|k| {
            let (c, t) = (k / (kh * kw), k % (kh * kw));
            c * chan + (t / kw) * dh * wp + (t % kw) * dw
        })
        .collect();
    let nq = oh * wp;
    let b = RowsB::new(&xp, &offs, nq)?;
    if wp == ow {
        sgemm_rows_packed_a(pa, b, dst, parallel, fuse)?;
    } else {
        let mut wide = Buf::try_f32_for_overwrite(og * nq)?;
        sgemm_rows_packed_a(pa, b, &mut wide, parallel, fuse)?;
        let copy_out = |(d, s): (&mut [f32], &[f32])| {
            for (d, s) in d.chunks_exact_mut(ow).zip(s.chunks_exact(wp)) {
                d.copy_from_slice(&s[..ow]);
            }
        };
        if parallel {
            dst.par_chunks_exact_mut(oh * ow)
                .zip(wide.par_chunks_exact(nq))
                .for_each(copy_out);
        } else {
            dst.chunks_exact_mut(oh * ow)
                .zip(wide.chunks_exact(nq))
                .for_each(copy_out);
        }
        Buf::F32(wide).recycle();
    }
    Buf::F32(xp).recycle();
    Ok(())
}

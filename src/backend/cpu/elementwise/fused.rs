//! Row kernels of the fused language-model patterns (see `fuse`): SwiGLU
//! and the rotary embedding, each the bits of the operators it stands for.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

use super::math::sigmoid;
use super::{units_per_task, with_simd};

/// SwiGLU, `(g * sigmoid(g)) * u`, with each output row's gate values at
/// `gate.0 .. gate.0 + n` of a row `gate.1` wide of `g` and its up values
/// likewise in `u` (`n` the output's last size): the slices, the sigmoid
/// and the two products it stands for (see `fuse::fused_swiglus`), their
/// bits, in one pass.
pub fn swiglu(
    g: &Buf,
    gate: (usize, usize),
    u: &Buf,
    up: (usize, usize),
    out: &OperandDescriptor,
) -> Result<Buf> {
    let bad = || Error::operation("swiglu: the fused operands do not match");
    let n = out.shape.last().copied().unwrap_or(0);
    let (Buf::F32(gv), Buf::F32(uv)) = (g, u) else {
        return Err(bad());
    };
    if n == 0 || out.data_type != DataType::Float32 || gate.0 + n > gate.1 || up.0 + n > up.1 {
        return Err(bad());
    }
    let rows = out.element_count() / n;
    if gv.len() != rows * gate.1 || uv.len() != rows * up.1 {
        return Err(bad());
    }
    let mut o = Buf::try_f32_for_overwrite(rows * n)?;
    // Whole rows per task.
    let per = units_per_task(rows * n, rows);
    let run = |(t, c): (usize, &mut [f32])| {
        with_simd(
            #[inline(always)]
            || {
                for (i, row) in c.chunks_exact_mut(n).enumerate() {
                    let r = t * per + i;
                    let gr = &gv[r * gate.1 + gate.0..][..n];
                    let ur = &uv[r * up.1 + up.0..][..n];
                    for ((o, &g), &u) in row.iter_mut().zip(gr).zip(ur) {
                        *o = (g * sigmoid(g)) * u;
                    }
                }
            },
        )
    };
    if per < rows {
        o.par_chunks_mut(per * n).enumerate().for_each(run);
    } else {
        run((0, &mut o));
    }
    Ok(Buf::F32(o))
}

/// Rotation of adjacent pairs, `(x0 c0 + x1 s0, x1 c1 + x0 s1)` for each
/// pair of `out` ([t, heads, P, 2]), x's row `i` at `at.0 .. at.0 + heads
/// * P * 2` of a row `at.1` wide of `x`, the factors from `c` and `s`
/// (shaped `factors`: [t or 1, heads or 1, P, 2]): the slice, the
/// reverse, the two products and the sum it stands for (see
/// `fuse::fused_ropes`), their bits, in one pass.
pub fn rope(
    x: &Buf,
    at: (usize, usize),
    c: &Buf,
    s: &Buf,
    factors: &[usize],
    out: &OperandDescriptor,
) -> Result<Buf> {
    let bad = || Error::operation("rope: the fused operands do not match");
    let (&[t, heads, p, 2], &[ft, fh, fp, 2]) = (&out.shape[..], factors) else {
        return Err(bad());
    };
    let (Buf::F32(xv), Buf::F32(cv), Buf::F32(sv)) = (x, c, s) else {
        return Err(bad());
    };
    let w = heads * p * 2;
    let fits = (ft == t || ft == 1) && (fh == heads || fh == 1) && fp == p;
    if !fits
        || out.data_type != DataType::Float32
        || at.0 + w > at.1
        || xv.len() != t * at.1
        || cv.len() != ft * fh * p * 2
        || sv.len() != cv.len()
    {
        return Err(bad());
    }
    let mut o = Buf::try_f32_for_overwrite(t * w)?;
    if w == 0 {
        return Ok(Buf::F32(o));
    }
    // Whole rows per task.
    let per = units_per_task(t * w, t);
    let run = |(task, rows): (usize, &mut [f32])| {
        with_simd(
            #[inline(always)]
            || {
                for (i, row) in rows.chunks_exact_mut(w).enumerate() {
                    let r = task * per + i;
                    let xr = &xv[r * at.1 + at.0..][..w];
                    for (h, (oh, xh)) in row
                        .chunks_exact_mut(2 * p)
                        .zip(xr.chunks_exact(2 * p))
                        .enumerate()
                    {
                        let f = ((if ft == 1 { 0 } else { r }) * fh + if fh == 1 { 0 } else { h })
                            * 2
                            * p;
                        let (ch, sh) = (&cv[f..f + 2 * p], &sv[f..f + 2 * p]);
                        for (((o, x), c), s) in oh
                            .chunks_exact_mut(2)
                            .zip(xh.chunks_exact(2))
                            .zip(ch.chunks_exact(2))
                            .zip(sh.chunks_exact(2))
                        {
                            o[0] = x[0] * c[0] + x[1] * s[0];
                            o[1] = x[1] * c[1] + x[0] * s[1];
                        }
                    }
                }
            },
        )
    };
    if per < t {
        o.par_chunks_mut(per * w).enumerate().for_each(run);
    } else {
        run((0, &mut o));
    }
    Ok(Buf::F32(o))
}

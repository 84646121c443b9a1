//! pool2d: average, l2 and max pooling of float tensors (computed in NCHW
//! float32), and max pooling of integer tensors in their own type.

use rayon::prelude::*;

use crate::backend::cpu::shape::transpose_vec;
use crate::backend::cpu::util::{floats, from_floats, try_filled};
use crate::error::{Error, Result};
use crate::graph::ops::conv::{Pool2dParams, PoolKind};
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

use super::common::{is_global_pool, pool_reduce, TO_NCHW, TO_NHWC};

/// Input coordinate of output position `o` and kernel tap `k`, or `None`
/// in the padding.
#[inline(always)]
fn src_index(
    o: usize,
    k: usize,
    stride: usize,
    dilation: usize,
    pad: usize,
    size: usize,
) -> Option<usize> {
    (o * stride + k * dilation)
        .checked_sub(pad)
        .filter(|&i| i < size)
}

/// Reduces one output position's window over one input plane.
fn pool_window(x: &[f32], p: &Pool2dParams, y: usize, xo: usize) -> f32 {
    let rows = (0..p.window[0])
        .filter_map(|ky| src_index(y, ky, p.strides[0], p.dilations[0], p.padding[0], p.in_h));
    let taps = rows.flat_map(|iy| {
        (0..p.window[1])
            .filter_map(move |kx| {
                src_index(xo, kx, p.strides[1], p.dilations[1], p.padding[2], p.in_w)
            })
            .map(move |ix| x[iy * p.in_w + ix])
    });
    pool_reduce(p.kind, taps)
}

/// maxPool2d of an integer tensor, in its own type (the spec allows any
/// data type for maxPool2d). A window wholly in the padding reduces
/// nothing and gives the type's minimum, as the float kernel gives -inf.
fn max_pool_ints<T: Copy + PartialOrd + Send + Sync>(
    x: &[T],
    p: &Pool2dParams,
    min: T,
) -> Result<Vec<T>> {
    let (n, c, h, w) = (p.batch, p.channels, p.in_h, p.in_w);
    let (oh, ow) = (p.out_h, p.out_w);
    if x.len() != n * c * h * w || p.strides.contains(&0) {
        return Err(Error::operation(
            "maxPool2d: the operands do not match the parameters",
        ));
    }
    // Element (b, ch, y, x) of either layout.
    let at = |b: usize, ch: usize, y: usize, xx: usize| {
        if p.nhwc {
            ((b * h + y) * w + xx) * c + ch
        } else {
            ((b * c + ch) * h + y) * w + xx
        }
    };
    let mut out = try_filled(n * c * oh * ow, min, "the maxPool2d output")?;
    out.par_iter_mut().enumerate().for_each(|(i, dst)| {
        // `i` walks the output in its own layout.
        let (b, ch, oy, ox) = if p.nhwc {
            (i / (oh * ow * c), i % c, (i / (ow * c)) % oh, (i / c) % ow)
        } else {
            (
                i / (c * oh * ow),
                (i / (oh * ow)) % c,
                (i / ow) % oh,
                i % ow,
            )
        };
        let mut acc = min;
        for ky in 0..p.window[0] {
            let Some(iy) = src_index(oy, ky, p.strides[0], p.dilations[0], p.padding[0], h) else {
                continue;
            };
            for kx in 0..p.window[1] {
                let Some(ix) = src_index(ox, kx, p.strides[1], p.dilations[1], p.padding[2], w)
                else {
                    continue;
                };
                let v = x[at(b, ch, iy, ix)];
                if v > acc {
                    acc = v;
                }
            }
        }
        *dst = acc;
    });
    Ok(out)
}

pub fn pool2d(p: &Pool2dParams, x: &Buf, out: &OperandDescriptor) -> Result<Buf> {
    let (n, c, h, w) = (p.batch, p.channels, p.in_h, p.in_w);
    let (oh, ow) = (p.out_h, p.out_w);
    if p.kind == PoolKind::Max {
        let ints = match x {
            Buf::I32(v) => Some(Buf::I32(max_pool_ints(v, p, i32::MIN)?)),
            Buf::U32(v) => Some(Buf::U32(max_pool_ints(v, p, u32::MIN)?)),
            Buf::I64(v) => Some(Buf::I64(max_pool_ints(v, p, i64::MIN)?)),
            Buf::U64(v) => Some(Buf::U64(max_pool_ints(v, p, u64::MIN)?)),
            // int4/uint4 are held unpacked in these too; their minimums
            // are in range of the wider type, and a window is never empty
            // unless wholly in the padding.
            Buf::I8(v) => Some(Buf::I8(max_pool_ints(v, p, int_min8(out.data_type))?)),
            Buf::U8(v) => Some(Buf::U8(max_pool_ints(v, p, 0)?)),
            Buf::F32(_) | Buf::F16(_) => None,
        };
        if let Some(b) = ints {
            return Ok(b);
        }
    }
    let xv = floats(x)?;
    if xv.len() != n * c * h * w || out.element_count() != n * c * oh * ow || p.strides.contains(&0)
    {
        return Err(Error::operation(
            "pool2d: the operands do not match the parameters",
        ));
    }
    let xv = if p.nhwc {
        std::borrow::Cow::Owned(transpose_vec(&xv, &[n, h, w, c], &TO_NCHW)?)
    } else {
        xv
    };
    let (in_plane, plane) = (h * w, oh * ow);
    let mut res = try_filled(n * c * plane, 0.0f32, "the pool2d output")?;
    // Global pooling (one window over each whole plane, as at the end of
    // most image classifiers): each plane reduced front to back (the
    // window's own order, so the same bits), many planes per task rather
    // than a task and two index computations per element.
    if is_global_pool(p) {
        let per = (1usize << 14).div_ceil(in_plane).max(1);
        let run = |(i, dst): (usize, &mut [f32])| {
            let src = &xv[i * per * in_plane..];
            for (d, x) in dst.iter_mut().zip(src.chunks_exact(in_plane)) {
                *d = pool_reduce(p.kind, x.iter().copied());
            }
        };
        res.par_chunks_mut(per).enumerate().for_each(run);
    } else if plane > 0 {
        let run = |(i, dst): (usize, &mut [f32])| {
            let src = &xv[i * in_plane..(i + 1) * in_plane];
            for (t, d) in dst.iter_mut().enumerate() {
                *d = pool_window(src, p, t / ow, t % ow);
            }
        };
        if res.len() * p.window[0] * p.window[1] >= 1 << 16 {
            res.par_chunks_mut(plane).enumerate().for_each(run);
        } else {
            res.chunks_mut(plane).enumerate().for_each(run);
        }
    }
    let res = if p.nhwc {
        transpose_vec(&res, &[n, c, oh, ow], &TO_NHWC)?
    } else {
        res
    };
    from_floats(out.data_type, res)
}

/// The smallest value of int8 or int4 (both held as i8).
fn int_min8(dt: DataType) -> i8 {
    if dt == DataType::Int4 {
        -8
    } else {
        i8::MIN
    }
}

//! pool2d: average, l2 and max pooling of float tensors (computed in NCHW
//! float32), and max pooling of integer tensors in their own type.

use rayon::prelude::*;

use crate::backend::cpu::simd::{simd_level, with_simd_at, SimdLevel};
use crate::backend::cpu::util::{floats, from_floats, try_filled};
use crate::error::{Error, Result};
use crate::graph::ops::conv::{Pool2dParams, PoolKind};
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

use super::common::{is_global_pool, pool_reduce, Max, Reduce, Sum, Taps};

/// Output positions (nchw) or channels (nhwc) reduced side by side: one
/// AVX-512 vector of floats, two AVX2 ones.
const V: usize = 16;

/// Two and four blocks: wide rows take several vectors of positions at
/// a time, whose reductions are independent chains of instructions (a
/// max tap's is several cycles long), so that one runs while another
/// waits (maxPool2d 3x3 of 64x128x128 at one thread: 1.06 ms a vector at
/// a time, 0.69 two, 0.65 four).
const W2: usize = 2 * V;
const W4: usize = 4 * V;

/// Half a block: where a row's inside range or a pixel's channels are
/// fewer than V (SqueezeNet's last pool has rows of 13), blocks of H keep
/// them in vectors rather than one output at a time.
const H: usize = V / 2;

/// One output row of a pool, as its windows read the input: `src` is the
/// input rows of the row's plane (nchw, where `lanes` is 1) or image
/// (nhwc, where it is the channel count); `y0..y1` the window rows inside
/// the input, `cols` each output column's taps inside a row. Methods, not
/// closures: a closure LLVM leaves out of line is compiled without the
/// target features of the `with_simd` it was written in, as SSE2 code.
struct Row<'a> {
    src: &'a [f32],
    lanes: usize,
    w: usize,
    /// Input row of window row 0, plus `pt` (so never negative), and the
    /// rows' step.
    iy: usize,
    dh: usize,
    pt: usize,
    y0: usize,
    y1: usize,
    cols: &'a [(usize, usize)],
    sw: usize,
    dw: usize,
    pl: usize,
}

impl<'a> Row<'a> {
    /// The input row of window row `ky` (one inside the input).
    #[inline(always)]
    fn line(&self, ky: usize) -> &'a [f32] {
        let iy = self.iy + ky * self.dh - self.pt;
        let run = self.w * self.lanes;
        &self.src[iy * run..(iy + 1) * run]
    }

    /// One output value, lane `l` of column `ox`, over its window: the
    /// column's taps of each window row inside the input.
    #[inline(always)]
    fn one<R: Reduce<1>>(&self, red: &R, ox: usize, l: usize, dst: &mut f32) {
        let (x0, x1) = self.cols[ox];
        let mut acc = red.init();
        for ky in self.y0..self.y1 {
            let line = self.line(ky);
            for kx in x0..x1 {
                let ix = ox * self.sw + kx * self.dw - self.pl;
                red.step(&mut acc, &[line[ix * self.lanes + l]]);
            }
        }
        red.finish(
            acc,
            (self.y1 - self.y0) * (x1 - x0),
            std::array::from_mut(dst),
        );
    }

    /// `B` output positions `ox..ox + B` of an nchw row whose windows lie
    /// inside the row (every column tap `0..kw`), `S` input values apart:
    /// each tap is one read of `B` values `S` apart (whole vectors and a
    /// shuffle for S of 1 or 2) into accumulators held over the window.
    #[inline(always)]
    fn positions<R: Reduce<B>, const S: usize, const B: usize>(
        &self,
        red: &R,
        kw: usize,
        ox: usize,
        dst: &mut [f32],
    ) {
        let mut acc = red.init();
        for ky in self.y0..self.y1 {
            let line = self.line(ky);
            for kx in 0..kw {
                let at = ox * S + kx * self.dw - self.pl;
                let run = &line[at..at + (B - 1) * S + 1];
                red.step(&mut acc, &std::array::from_fn(|j| run[j * S]));
            }
        }
        red.finish(acc, (self.y1 - self.y0) * kw, dst);
    }

    /// One nhwc output pixel `px` (all its channels) of column `ox`, `B`
    /// channels at a time, each tap one read of `B` channels of an input
    /// pixel; the last `B` end with the pixel (taking again channels of
    /// the ones before: the same values).
    #[inline(always)]
    fn channels<R: Reduce<B>, const B: usize>(&self, red: &R, ox: usize, px: &mut [f32]) {
        let (x0, x1) = self.cols[ox];
        let lanes = self.lanes;
        let mut l0 = 0;
        while l0 < lanes {
            let l = l0.min(lanes - B);
            let mut acc = red.init();
            for ky in self.y0..self.y1 {
                let line = self.line(ky);
                for kx in x0..x1 {
                    let at = (ox * self.sw + kx * self.dw - self.pl) * lanes + l;
                    let tap: &[f32; B] = line[at..at + B].try_into().expect("B values");
                    red.step(&mut acc, tap);
                }
            }
            red.finish(acc, (self.y1 - self.y0) * (x1 - x0), &mut px[l..l + B]);
            l0 = l + B;
        }
    }
}

/// One output row `oy` of a pool: `dst` (`out_w` positions of `lanes`
/// values) from `src` (as [`Row`] takes it), reduced with `red`, over the
/// window taps `taps` finds inside the input. Each output takes its
/// window's taps in the window's order (rows, then columns within a row),
/// as [`pool_reduce`] does, so it has the bits of reducing its window
/// alone; V outputs at a time (V positions of a plane, or V channels of a
/// pixel; H where there are fewer than V; two or four V positions of
/// wide planes) keep their accumulators in
/// registers over a window.
#[inline(always)]
fn pool_row<R: Reduce<W4> + Reduce<W2> + Reduce<V> + Reduce<H> + Reduce<1>>(
    p: &Pool2dParams,
    red: &R,
    src: &[f32],
    lanes: usize,
    oy: usize,
    taps: &Taps,
    dst: &mut [f32],
) {
    let (inside, inside_end) = taps.inside;
    let row = Row {
        src,
        lanes,
        w: p.in_w,
        iy: oy * p.strides[0],
        dh: p.dilations[0],
        pt: p.padding[0],
        y0: taps.rows[oy].0,
        y1: taps.rows[oy].1,
        cols: &taps.cols,
        sw: p.strides[1],
        dw: p.dilations[1],
        pl: p.padding[2],
    };
    if lanes > 1 {
        // nhwc: V channels of a pixel at a time (H where the pixel has
        // fewer than V), each tap a vector read.
        for (ox, px) in dst.chunks_exact_mut(lanes).enumerate() {
            if lanes >= V {
                row.channels::<R, V>(red, ox, px);
            } else if lanes >= H {
                row.channels::<R, H>(red, ox, px);
            } else {
                for (l, d) in px.iter_mut().enumerate() {
                    row.one(red, ox, l, d);
                }
            }
        }
        return;
    }
    // nchw: the positions whose windows lie inside the row are a range,
    // taken V at a time (H where the range is shorter than V); the last
    // block of the range ends with it, taking again outputs of the one
    // before (the same values). The others go one at a time.
    let span = inside_end - inside;
    let b = if span >= W4 {
        W4
    } else if span >= W2 {
        W2
    } else if span >= V {
        V
    } else {
        H
    };
    let kw = p.window[1];
    let mut ox = 0;
    while ox < dst.len() {
        if !(inside..inside_end).contains(&ox) || span < H {
            row.one(red, ox, 0, &mut dst[ox]);
            ox += 1;
            continue;
        }
        let ox0 = ox.min(inside_end - b);
        let block = &mut dst[ox0..ox0 + b];
        match (row.sw, b) {
            (1, W4) => row.positions::<R, 1, W4>(red, kw, ox0, block),
            (2, W4) => row.positions::<R, 2, W4>(red, kw, ox0, block),
            (1, W2) => row.positions::<R, 1, W2>(red, kw, ox0, block),
            (2, W2) => row.positions::<R, 2, W2>(red, kw, ox0, block),
            (1, V) => row.positions::<R, 1, V>(red, kw, ox0, block),
            (2, V) => row.positions::<R, 2, V>(red, kw, ox0, block),
            (1, H) => row.positions::<R, 1, H>(red, kw, ox0, block),
            (2, H) => row.positions::<R, 2, H>(red, kw, ox0, block),
            _ => {
                for (j, d) in block.iter_mut().enumerate() {
                    row.one(red, ox0 + j, 0, d);
                }
            }
        }
        ox = ox0 + b;
    }
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
    let taps = Taps::new(p)?;
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
        let ((y0, y1), (x0, x1)) = (taps.rows[oy], taps.cols[ox]);
        for ky in y0..y1 {
            let iy = oy * p.strides[0] + ky * p.dilations[0] - p.padding[0];
            for kx in x0..x1 {
                let ix = ox * p.strides[1] + kx * p.dilations[1] - p.padding[2];
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
    // SAFETY: `simd_level` is a level this CPU has.
    unsafe { pool2d_at(simd_level(), p, x, out) }
}

/// [`pool2d`], its float loops compiled for vectors of `level` (the tests
/// run every level the CPU has).
///
/// # Safety
/// The CPU has `level`'s features (it is at most `detected_level()`).
pub(crate) unsafe fn pool2d_at(
    level: SimdLevel,
    p: &Pool2dParams,
    x: &Buf,
    out: &OperandDescriptor,
) -> Result<Buf> {
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
    // Every element is written below (by the global reduction, or by
    // `pool_row`, whose outputs cover each row).
    let mut res = Buf::try_f32_for_overwrite(n * c * oh * ow)?;
    // Global pooling in nchw (one window over each whole plane, as at the
    // end of most image classifiers): each plane reduced front to back
    // (the window's own order, so the same bits), many planes per task.
    if !p.nhwc && is_global_pool(p) {
        let in_plane = h * w;
        let per = (1usize << 14).div_ceil(in_plane).max(1);
        let run = |(i, dst): (usize, &mut [f32])| {
            let src = &xv[i * per * in_plane..];
            for (d, x) in dst.iter_mut().zip(src.chunks_exact(in_plane)) {
                *d = pool_reduce(p.kind, x.iter().copied());
            }
        };
        res.par_chunks_mut(per).enumerate().for_each(run);
        return from_floats(out.data_type, res);
    }
    // Otherwise by output rows, in the tensor's own layout: a row is one
    // plane's (nchw) or one image's pixels with all their channels
    // (nhwc, so each tap reads whole pixels).
    let lanes = if p.nhwc { c } else { 1 };
    let (unit_in, row_out) = (h * w * lanes, ow * lanes);
    if res.is_empty() || row_out == 0 {
        return from_floats(out.data_type, res);
    }
    let [kh, kw] = p.window;
    let taps = Taps::new(p)?;
    // Rows per task: some 16K taps of work each.
    let per = ((1usize << 14) / row_out.saturating_mul(kh * kw).max(1)).max(1);
    let run = |(t, dst): (usize, &mut [f32])| {
        // Compiled for `level`'s vectors (`pool_row` inlines into this,
        // and its loops over V lanes become vector operations).
        // SAFETY: the caller's promise: the CPU has `level`.
        unsafe {
            with_simd_at(
                level,
                #[inline(always)]
                || {
                    for (k, dst) in dst.chunks_exact_mut(row_out).enumerate() {
                        let r = t * per + k;
                        let (unit, oy) = (r / oh, r % oh);
                        let src = &xv[unit * unit_in..(unit + 1) * unit_in];
                        match p.kind {
                            PoolKind::Max => pool_row(p, &Max, src, lanes, oy, &taps, dst),
                            PoolKind::Average => {
                                pool_row(p, &Sum::<false>, src, lanes, oy, &taps, dst)
                            }
                            PoolKind::L2 => pool_row(p, &Sum::<true>, src, lanes, oy, &taps, dst),
                        }
                    }
                },
            )
        }
    };
    if res.len().saturating_mul(kh * kw) >= 1 << 16 {
        res.par_chunks_mut(per * row_out).enumerate().for_each(run);
    } else {
        res.chunks_mut(per * row_out).enumerate().for_each(run);
    }
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

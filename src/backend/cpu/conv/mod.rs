//! Convolution and pooling CPU kernels.
//!
//! Both canonicalise to NCHW input (and OIHW filter) in f32, compute there,
//! and convert the result back to the requested layout and type. conv2d
//! runs each (batch, group) as a product on `sgemm/`, whose B panels are
//! made straight from the padded input (no im2col matrix); depthwise
//! convolutions have a direct kernel.
//!
//! The paths, one file each, under this planner (which picks the path of
//! each convolution): `gemm.rs` (conv2d as products), `depthwise.rs` (the
//! NCHW depthwise kernel) and `depthwise8.rs` (8 channels at once, x86-64),
//! `transpose.rs` (convTranspose2d), `pool.rs` (pool2d), and `nchwc/`
//! (convolution chains in a channel-blocked layout). `common.rs` holds what
//! several of them share; the paths import it, never each other.

use std::sync::Arc;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::graph::ops::conv::{Conv2dParams, FilterLayout};
use crate::graph::ops::elementwise::ClampParams;
use crate::graph::ops::elementwise::UnaryKind;
use crate::graph::{Graph, Op, Source};
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

use super::matmul::sgemm;
use super::sgemm::{clamp, sgemm_packed, sgemm_packed_a, Fuse, PackedA, PackedB};
use super::shape::transpose_vec;
use super::util::{floats, from_floats};

mod common;
mod depthwise;
mod depthwise8;
mod gemm;
pub(super) mod nchwc;
mod pool;
#[cfg(test)]
pub(super) mod tests;
mod transpose;

pub(super) use common::plain_input;
use common::{filter_oihw, TO_NCHW, TO_NHWC, UNIT_PAR_WORK};
use depthwise::depthwise_nchw;
use gemm::{conv_gen, conv_rows};
pub(super) use pool::pool2d;
pub(super) use transpose::conv_transpose2d;

/// The epilogue of every conv2d path: adds the bias (when there is one)
/// and applies the fused activation bounds (when there are some).
#[inline(always)]
fn finish(dst: &mut [f32], bias: Option<f32>, act: Option<(f32, f32)>) {
    match (bias, act) {
        (None, None) => {}
        (Some(b), None) => dst.iter_mut().for_each(|y| *y += b),
        (None, Some((lo, hi))) => dst.iter_mut().for_each(|y| *y = clamp(*y, lo, hi)),
        (Some(b), Some((lo, hi))) => dst.iter_mut().for_each(|y| *y = clamp(*y + b, lo, hi)),
    }
}

/// Depthwise conv2d (one input and one output channel per group) on NCHW
/// `x` with OIHW filter `f`: planes in parallel.
fn depthwise(
    x: &[f32],
    f: &[f32],
    bias: Option<&[f32]>,
    act: Option<(f32, f32)>,
    p: &Conv2dParams,
    res: &mut [f32],
) {
    // Narrow planes (the late layers of a network) on 8 channels at once;
    // wide ones plane by plane, which keeps a plane in cache (measured
    // per layer with WEBNN_CPU_PROFILE: the 8-channel kernel is 1.2-2.3x
    // faster below 32 columns, slower on 56 and 112).
    #[cfg(target_arch = "x86_64")]
    if p.out_w < 32 && depthwise8::available() {
        let bounds = act.unwrap_or((f32::NEG_INFINITY, f32::INFINITY));
        // SAFETY: `available()` on the line above found AVX2 and FMA,
        // the whole of `depthwise8`'s contract.
        unsafe { depthwise8::depthwise8(x, f, bias, bounds, p, res) };
        return;
    }
    depthwise_nchw(x, f, bias, act, p, res)
}

/// `conv2d` with nchw/nhwc input, any filter layout, padding, strides,
/// dilations, groups (depthwise included) and an optional bias
/// (`inputs[2]`).
///
/// A further input after those (never made by validation; attached by
/// `compile()` when it fuses a following clamp or relu) is a float32
/// `[min, max]`: each output is then clamped as the clamp operator would,
/// after the bias.
pub fn conv2d(p: &Conv2dParams, inputs: &[&Buf], out: &OperandDescriptor) -> Result<Buf> {
    conv2d_packed(p, inputs, out, None)
}

/// A constant filter prepared at build for the path its convolution
/// takes ([`pack_filter`]).
pub(in crate::backend::cpu) enum PackedFilter {
    /// Per group, the products' left-hand side (output channels by taps).
    Groups(Vec<PackedA>),
    /// A [`pointwise`] convolution's right-hand side, `[C, O]`.
    Pointwise(PackedB),
}

/// Whether `p` is one product of its pixels by the filter: a 1x1
/// convolution at unit strides without padding, in one group, whose
/// pixels are the rows of its input and output, as they are in nhwc
/// (`[pixels, C]`) and in nchw with one pixel per plane (the classifier
/// of a network that pools before it). `[pixels, C] x [C, O]` is then
/// the whole convolution, with no layout change on either side; the
/// planes-as-columns path would transpose an nhwc input and output, and
/// at one pixel would run a product one column wide.
fn pointwise(p: &Conv2dParams) -> bool {
    p.groups == 1
        && p.kernel_h == 1
        && p.kernel_w == 1
        && p.strides == [1, 1]
        && p.padding == [0; 4]
        && (p.nhwc || (p.in_h == 1 && p.in_w == 1))
}

/// A [`pointwise`] convolution's filter as the product's packed B. A
/// 1x1 filter is `[O, C]` in `oihw` and `ohwi` and `[C, O]` in `hwio`
/// and `ihwo` (one group: i = C), so no layout is converted first.
fn pointwise_b(p: &Conv2dParams, f: &[f32]) -> Result<PackedB> {
    let transposed = matches!(p.filter_layout, FilterLayout::Oihw | FilterLayout::Ohwi);
    PackedB::new(f, p.in_channels, p.out_channels, transposed)
}

/// The constant filter of a conv2d prepared for its path: packed as B for
/// a [`pointwise`] one, otherwise packed once per group as the products'
/// left-hand side; `None` for a depthwise conv2d or a filter that is not
/// float32 or float16 (float16 is widened exactly, as each dispatch would
/// widen it).
pub(in crate::backend::cpu) fn pack_filter(
    p: &Conv2dParams,
    filter: &Buf,
) -> Result<Option<PackedFilter>> {
    let g = p.groups;
    if g == 0 || !p.in_channels.is_multiple_of(g) || !p.out_channels.is_multiple_of(g) {
        return Ok(None);
    }
    let (cg, og) = (p.in_channels / g, p.out_channels / g);
    let kk = cg * p.kernel_h * p.kernel_w;
    if !matches!(filter, Buf::F32(_) | Buf::F16(_)) {
        return Ok(None);
    }
    let f = floats(filter)?;
    if (cg == 1 && og == 1) || f.len() != p.out_channels * kk || og * kk == 0 {
        return Ok(None);
    }
    if pointwise(p) {
        return pointwise_b(p, &f).map(|b| Some(PackedFilter::Pointwise(b)));
    }
    let f = filter_oihw(&f, p)?;
    (0..g)
        .map(|gi| PackedA::new(&f[gi * og * kk..(gi + 1) * og * kk], og, kk))
        .collect::<Result<Vec<_>>>()
        .map(|v| Some(PackedFilter::Groups(v)))
}

/// [`conv2d`], with the filter prepared in advance by [`pack_filter`]
/// when `packed` is given (the filter operand is then only checked, not
/// read).
pub(in crate::backend::cpu) fn conv2d_packed(
    p: &Conv2dParams,
    inputs: &[&Buf],
    out: &OperandDescriptor,
    packed: Option<&PackedFilter>,
) -> Result<Buf> {
    let g = p.groups;
    if g == 0
        || !p.in_channels.is_multiple_of(g)
        || !p.out_channels.is_multiple_of(g)
        || p.strides.contains(&0)
        || p.dilations.contains(&0)
    {
        return Err(Error::operation("conv2d: invalid groups or strides"));
    }
    let (n, c, h, w) = (p.batch, p.in_channels, p.in_h, p.in_w);
    let (oc, oh, ow) = (p.out_channels, p.out_h, p.out_w);
    let (cg, og) = (c / g, oc / g);
    let kk = cg * p.kernel_h * p.kernel_w;
    let x = floats(
        inputs
            .first()
            .ok_or_else(|| Error::operation("conv2d: no input"))?,
    )?;
    let f = floats(
        inputs
            .get(1)
            .ok_or_else(|| Error::operation("conv2d: no filter"))?,
    )?;
    let bias = if p.has_bias {
        let b = floats(
            inputs
                .get(2)
                .ok_or_else(|| Error::operation("conv2d: no bias"))?,
        )?;
        Some(b)
    } else {
        None
    };
    let act = match inputs.get(2 + usize::from(p.has_bias)) {
        None => None,
        Some(b) => match &*floats(b)? {
            &[lo, hi] => Some((lo, hi)),
            _ => return Err(Error::operation("conv2d: bad activation bounds")),
        },
    };
    let ok = x.len() == n * c * h * w
        && f.len() == oc * kk
        && bias.as_ref().is_none_or(|b| b.len() == oc)
        && out.element_count() == n * oc * oh * ow;
    // Every read must land inside the padded input.
    let reach = |o: usize, k: usize, s: usize, d: usize| {
        (o.saturating_sub(1)) * s + (k.saturating_sub(1)) * d
    };
    let fits = oh == 0
        || ow == 0
        || (p.kernel_h > 0
            && p.kernel_w > 0
            && reach(oh, p.kernel_h, p.strides[0], p.dilations[0])
                < h + p.padding[0] + p.padding[1]
            && reach(ow, p.kernel_w, p.strides[1], p.dilations[1])
                < w + p.padding[2] + p.padding[3]);
    if !ok || !fits {
        return Err(Error::operation(
            "conv2d: the operands do not match the parameters",
        ));
    }
    if pointwise(p) && oc > 0 {
        let fresh;
        let b = match packed {
            Some(PackedFilter::Pointwise(b)) if b.k() == c && b.n() == oc => b,
            // Packed here as build packs a constant filter, so that both
            // give the same bits.
            _ => {
                fresh = pointwise_b(p, &f)?;
                &fresh
            }
        };
        let m = n * h * w;
        let mut res = Buf::try_f32_for_overwrite(m * oc)?;
        let fuse = Fuse {
            row_bias: None,
            col_bias: bias.as_deref(),
            bounds: act,
        };
        sgemm_packed(m, &x, false, b, &mut res, true, &fuse)?;
        return from_floats(out.data_type, res);
    }
    let packed = match packed {
        Some(PackedFilter::Groups(v)) => Some(&v[..]),
        _ => None,
    };
    let x = if p.nhwc {
        std::borrow::Cow::Owned(transpose_vec(&x, &[n, h, w, c], &TO_NCHW)?)
    } else {
        x
    };
    // Products with every group's filter packed never read it: the
    // conversion to OIHW (a copy of the whole filter in any other layout)
    // is then skipped.
    let all_packed = packed.is_some_and(|v| {
        v.len() == g && v.iter().all(|a| a.m() == og && a.k() == kk) && !(cg == 1 && og == 1)
    });
    let f = if all_packed { f } else { filter_oihw(&f, p)? };
    let bias = bias.as_deref();
    let plane = oh * ow;
    let unit = og * plane;
    // Every path below writes every element.
    let mut res = Buf::try_f32_for_overwrite(n * oc * plane)?;
    if unit > 0 && cg == 1 && og == 1 {
        depthwise(&x, &f, bias, act, p, &mut res);
    } else if unit > 0 {
        // A 1x1 kernel with unit strides and no padding reads the input
        // as is.
        let direct =
            p.kernel_h == 1 && p.kernel_w == 1 && p.strides == [1, 1] && p.padding == [0; 4];
        let units = n * g;
        let run = |(t, dst): (usize, &mut [f32]), parallel: bool| -> Result<()> {
            let (b, gi) = (t / g, t % g);
            let xs = &x[(b * c + gi * cg) * h * w..(b * c + (gi + 1) * cg) * h * w];
            let wg = &f[gi * og * kk..(gi + 1) * og * kk];
            let bg = bias.map(|bv| &bv[gi * og..(gi + 1) * og]);
            let pa = packed
                .and_then(|v| v.get(gi))
                .filter(|a| a.m() == og && a.k() == kk);
            // Bias and activation are applied to each tile of the product
            // as it is finished (row o of the product is output channel o).
            let fuse = Fuse {
                row_bias: bg,
                col_bias: None,
                bounds: act,
            };
            // Unit strides with a kernel wider than 1x1: B read in place.
            // (A 1x1 kernel reads planes as they are, but there packing
            // wins: each of its K rows is a separate page-strided stream.)
            if let (Some(pa), [1, 1], false) = (pa, p.strides, direct) {
                return conv_rows(xs, cg, og, p, &fuse, dst, parallel, pa);
            }
            if !direct {
                return conv_gen(xs, wg, cg, og, p, &fuse, dst, parallel, pa);
            }
            match pa {
                Some(pa) => sgemm_packed_a(pa, plane, xs, dst, parallel, &fuse),
                None => {
                    sgemm(og, plane, kk, wg, xs, dst, parallel);
                    for (o, d) in dst.chunks_exact_mut(plane).enumerate() {
                        finish(d, bg.map(|bv| bv[o]), act);
                    }
                    Ok(())
                }
            }
        };
        if units > 1 && og * plane * kk < UNIT_PAR_WORK {
            res.par_chunks_mut(unit)
                .enumerate()
                .try_for_each(|u| run(u, false))?;
        } else {
            res.chunks_mut(unit)
                .enumerate()
                .try_for_each(|u| run(u, true))?;
        }
    }
    let res = if p.nhwc {
        transpose_vec(&res, &[n, oc, oh, ow], &TO_NHWC)?
    } else {
        res
    };
    from_floats(out.data_type, res)
}

/// Fuses each float32 or float16 conv2d whose only reader is a clamp or relu (and
/// that is no graph output) with that activation: the conv2d node gets
/// the activation's output and a trailing constant input `[min, max]`
/// (see [`conv2d`]), and the activation node goes. Returns the rewritten
/// graph (`None`: nothing to fuse); new constants go into `constants`.
/// Results are bitwise those of the unfused graph: the conv computes the
/// same values and clamps them as the clamp and relu kernels do (relu is
/// clamp to [0, +inf], NaN and -0 included).
pub(super) fn fuse_activations(
    graph: &Graph,
    constants: &mut crate::backend::cpu::Constants,
) -> Option<Graph> {
    let (readers, reader) = super::readers(graph);
    // conv node -> (activation node, bounds).
    let mut fuse: Vec<(usize, usize, f32, f32)> = Vec::new();
    for (ni, node) in graph.nodes.iter().enumerate() {
        let Op::Conv2d(p) = &node.op else { continue };
        let [o] = node.outputs[..] else { continue };
        // float16 too: rounding to float16 is monotonic, so clamping
        // before the result's one rounding gives the bits that clamping
        // the rounded result and rounding again give, for any bounds
        // (a bound's nearest half is the nearest half to every value that
        // rounds past it).
        if readers[o] != 1
            || !matches!(
                graph.operands[o].data_type,
                DataType::Float32 | DataType::Float16
            )
            || node.inputs.len() != 2 + usize::from(p.has_bias)
        {
            continue;
        }
        let a = reader[o];
        let act = &graph.nodes[a];
        let (lo, hi) = match act.op {
            Op::Clamp(ClampParams { min, max }) => (min as f32, max as f32),
            Op::Unary(UnaryKind::Relu) => (0.0, f32::INFINITY),
            _ => continue,
        };
        if act.inputs[..] != [o] || act.outputs.len() != 1 {
            continue;
        }
        fuse.push((ni, a, lo, hi));
    }
    if fuse.is_empty() {
        return None;
    }
    let mut g = graph.clone();
    let mut merges = Vec::with_capacity(fuse.len());
    for &(ni, a, lo, hi) in &fuse {
        let id = g.operands.len();
        let bounds = [lo, hi];
        g.operands.push(OperandDescriptor {
            data_type: DataType::Float32,
            shape: vec![2],
        });
        g.sources.push(Source::Constant(Arc::new(
            bounds.iter().flat_map(|v| v.to_le_bytes()).collect(),
        )));
        constants.insert(id, std::sync::Arc::new(Buf::F32(vec![lo, hi])));
        merges.push((ni, a, id));
    }
    Some(super::absorb(&g, &merges))
}

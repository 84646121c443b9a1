//! `conv2d` (both input layouts, every filter layout, groups, padding,
//! strides, dilations, bias) and `averagePool2d` / `maxPool2d` /
//! `l2Pool2d`, as direct float32 kernels: one invocation per output
//! element, layouts expressed as strides.

use super::{is_float, word, Gpu, NodeIo, Step};
use crate::error::{Error, Result};
use crate::graph::op::{Conv2dParams, FilterLayout, Pool2dParams, PoolKind};
use crate::graph::ops::conv::ConvTranspose2dParams;
use crate::types::{DataType, OperandDescriptor};

/// The family's answer to [`super::supports`]: float kernels (float16
/// computed in f32).
pub(super) fn supports(op: &str, _operand: &str, dt: DataType) -> bool {
    matches!(op, "conv2d" | "averagePool2d" | "maxPool2d" | "l2Pool2d") && is_float(dt)
}

/// `convTranspose2d`.
pub(super) fn conv_transpose2d(
    gpu: &mut Gpu,
    c: &ConvTranspose2dParams,
    io: &NodeIo,
) -> Result<Vec<Step>> {
    let _ = (gpu, c, io);
    Err(Error::not_supported(
        "convTranspose2d is not supported on the GPU backend yet",
    ))
}

const CONV2D: &str = include_str!("shaders/conv2d.wgsl");
const POOL2D: &str = include_str!("shaders/pool2d.wgsl");

/// Strides (n, c, h, w) of an activation tensor in `nhwc` or nchw layout.
fn act_strides(nhwc: bool, c: usize, h: usize, w: usize) -> [u64; 4] {
    let (c, h, w) = (c as u64, h as u64, w as u64);
    if nhwc {
        [h * w * c, 1, w * c, c]
    } else {
        [c * h * w, h * w, w, 1]
    }
}

/// Strides (o, i, h, w) of a conv2d filter of `layout`, where i counts the
/// input channels of one group.
fn filter_strides(layout: FilterLayout, o: usize, i: usize, h: usize, w: usize) -> [u64; 4] {
    let (o, i, h, w) = (o as u64, i as u64, h as u64, w as u64);
    match layout {
        FilterLayout::Oihw => [i * h * w, h * w, w, 1],
        FilterLayout::Hwio => [1, o, w * i * o, i * o],
        FilterLayout::Ohwi => [h * w * i, 1, w * i, i],
        FilterLayout::Ihwo => [1, h * w * o, w * o, o],
    }
}

fn push_words(p: &mut Vec<u32>, v: &[u64]) -> Result<()> {
    for &x in v {
        p.push(word(x)?);
    }
    Ok(())
}

pub(super) fn conv2d(
    gpu: &mut Gpu,
    c: &Conv2dParams,
    ins: &[&wgpu::Buffer],
    in_descs: &[&OperandDescriptor],
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let n = out_desc.element_count() as u64;
    if n == 0 {
        return Ok(None);
    }
    word(in_descs[0].element_count() as u64)?;
    word(in_descs[1].element_count() as u64)?;
    let cg = c.in_channels / c.groups.max(1);
    let mut p = vec![word(n)?];
    push_words(
        &mut p,
        &[
            c.batch,
            c.in_channels,
            c.in_h,
            c.in_w,
            c.out_channels,
            c.kernel_h,
            c.kernel_w,
            c.groups,
            c.out_h,
            c.out_w,
            c.padding[0],
            c.padding[2],
            c.strides[0],
            c.strides[1],
            c.dilations[0],
            c.dilations[1],
        ]
        .map(|v| v as u64),
    )?;
    p.push(u32::from(c.has_bias));
    push_words(&mut p, &act_strides(c.nhwc, c.in_channels, c.in_h, c.in_w))?;
    push_words(
        &mut p,
        &filter_strides(c.filter_layout, c.out_channels, cg, c.kernel_h, c.kernel_w),
    )?;
    push_words(
        &mut p,
        &act_strides(c.nhwc, c.out_channels, c.out_h, c.out_w),
    )?;
    let params = gpu.params(&p)?;
    let grid = gpu.grid_1d(n)?;
    // Without a bias, the parameters stand in for the unread binding.
    let bias = if c.has_bias { ins[2] } else { &params };
    gpu.step(
        CONV2D.to_string(),
        "main",
        &[&params, ins[0], ins[1], bias, out],
        grid,
    )
    .map(Some)
}

pub(super) fn pool2d(
    gpu: &mut Gpu,
    q: &Pool2dParams,
    input: &wgpu::Buffer,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let n = out_desc.element_count() as u64;
    if n == 0 {
        return Ok(None);
    }
    word((q.batch * q.channels * q.in_h * q.in_w) as u64)?;
    let mut p = vec![word(n)?];
    push_words(
        &mut p,
        &[
            q.batch,
            q.channels,
            q.in_h,
            q.in_w,
            q.out_h,
            q.out_w,
            q.window[0],
            q.window[1],
            q.padding[0],
            q.padding[2],
            q.strides[0],
            q.strides[1],
            q.dilations[0],
            q.dilations[1],
        ]
        .map(|v| v as u64),
    )?;
    push_words(&mut p, &act_strides(q.nhwc, q.channels, q.in_h, q.in_w))?;
    push_words(&mut p, &act_strides(q.nhwc, q.channels, q.out_h, q.out_w))?;
    let kind = match q.kind {
        PoolKind::Average => "0",
        PoolKind::Max => "1",
        PoolKind::L2 => "2",
    };
    let params = gpu.params(&p)?;
    let grid = gpu.grid_1d(n)?;
    gpu.step(
        POOL2D.replace("{{KIND}}", kind),
        "main",
        &[&params, input, out],
        grid,
    )
    .map(Some)
}

//! `conv2d` and `convTranspose2d` (both input layouts, every filter
//! layout, groups, padding, strides, dilations, bias) and `averagePool2d` /
//! `maxPool2d` / `l2Pool2d`, as direct float32 kernels: one invocation per
//! output element, layouts expressed as strides.

use super::{convert, is_float, word, Gpu, NodeIo, Step};
use crate::error::{Error, Result};
use crate::graph::ops::conv::{Conv2dParams, ConvParams, FilterLayout, Pool2dParams, PoolKind};
use crate::graph::ops::conv::{ConvTranspose2dParams, TransposeFilterLayout};
use crate::types::{DataType, OperandDescriptor};

/// The family's answer to [`super::supports`]: float kernels (float16
/// computed in f32).
pub(super) fn supports(op: &str, _operand: &str, dt: DataType) -> bool {
    match op {
        // maxPool2d takes any data type (see `int_max_pool_source`).
        "maxPool2d" => true,
        "conv2d" | "convTranspose2d" | "averagePool2d" | "l2Pool2d" => is_float(dt),
        _ => false,
    }
}

/// `convTranspose2d`: a gather over the input positions and taps that
/// reach each output element (see the shader).
pub(super) fn conv_transpose2d(
    gpu: &mut Gpu,
    c: &ConvTranspose2dParams,
    io: &NodeIo,
) -> Result<Vec<Step>> {
    let (Some(&out), Some(out_desc)) = (io.outs.first(), io.out_descs.first()) else {
        return Err(Error::operation("convTranspose2d has no output"));
    };
    let n = out_desc.element_count() as u64;
    if n == 0 {
        return Ok(Vec::new());
    }
    let g = c.groups;
    if io.ins.len() < 2 + usize::from(c.has_bias)
        || g == 0
        || !c.in_channels.is_multiple_of(g)
        || !c.out_channels.is_multiple_of(g)
        || c.strides.contains(&0)
    {
        return Err(Error::operation(
            "convTranspose2d: the operands do not match the parameters",
        ));
    }
    for d in io.in_descs {
        word(d.element_count() as u64)?;
    }
    // The shader forms out + padBegin and (kernel - 1) * dilation in u32.
    word((c.out_h + c.padding[0]) as u64)?;
    word((c.out_w + c.padding[2]) as u64)?;
    word((c.kernel_h.saturating_sub(1) * c.dilations[0]) as u64)?;
    word((c.kernel_w.saturating_sub(1) * c.dilations[1]) as u64)?;
    let og = c.out_channels / g;
    let filter =
        transpose_filter_strides(c.filter_layout, c.in_channels, og, c.kernel_h, c.kernel_w);
    let step = conv_step(gpu, CONV_TRANSPOSE2D, n, c, filter, io.ins, out)?;
    Ok(vec![step])
}

/// Strides (i, o, h, w) of a convTranspose2d filter of `layout`, where i
/// counts all input channels and o the output channels of one group.
fn transpose_filter_strides(
    layout: TransposeFilterLayout,
    i: usize,
    o: usize,
    h: usize,
    w: usize,
) -> [u64; 4] {
    let (i, o, h, w) = (i as u64, o as u64, h as u64, w as u64);
    match layout {
        TransposeFilterLayout::Iohw => [o * h * w, h * w, w, 1],
        TransposeFilterLayout::Hwoi => [1, i, w * o * i, o * i],
        TransposeFilterLayout::Ohwi => [1, h * w * i, w * i, i],
    }
}

// Both conv kernels start with the parameters and bindings conv_step
// makes, joined at compile time.
const CONV2D: &str = concat!(
    include_str!("shaders/conv_common.wgsl"),
    "\n",
    include_str!("shaders/conv2d.wgsl")
);
const CONV_TRANSPOSE2D: &str = concat!(
    include_str!("shaders/conv_common.wgsl"),
    "\n",
    include_str!("shaders/conv_transpose2d.wgsl")
);
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

/// The step of conv2d or convTranspose2d (`source`), whose shaders read
/// the same parameter words: the invocation count `n`, the geometry, the
/// bias flag, and the strides of the input, of the filter (`filter`, in the
/// order the shader reads them) and of the output.
fn conv_step<L>(
    gpu: &mut Gpu,
    source: &str,
    n: u64,
    c: &ConvParams<L>,
    filter: [u64; 4],
    ins: &[&wgpu::Buffer],
    out: &wgpu::Buffer,
) -> Result<Step> {
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
    push_words(&mut p, &filter)?;
    push_words(
        &mut p,
        &act_strides(c.nhwc, c.out_channels, c.out_h, c.out_w),
    )?;
    let params = gpu.params(&p)?;
    let grid = gpu.grid_1d(n)?;
    // Without a bias, the parameters stand in for the unread binding.
    let bias = if c.has_bias { ins[2] } else { &params };
    gpu.step(
        source.to_string(),
        "main",
        &[&params, ins[0], ins[1], bias, out],
        grid,
    )
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
    let filter = filter_strides(c.filter_layout, c.out_channels, cg, c.kernel_h, c.kernel_w);
    conv_step(gpu, CONV2D, n, c, filter, ins, out).map(Some)
}

pub(super) fn pool2d(
    gpu: &mut Gpu,
    q: &Pool2dParams,
    input: &wgpu::Buffer,
    out: &wgpu::Buffer,
    out_desc: &OperandDescriptor,
) -> Result<Option<Step>> {
    let dt = out_desc.data_type;
    // maxPool2d allows any data type: integers have a kernel of their own
    // (below); average and l2 pooling are float-only.
    if !is_float(dt) && q.kind != PoolKind::Max {
        return Err(Error::not_supported(format!(
            "pool2d on {} is not supported on the GPU backend",
            dt.name()
        )));
    }
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
    let source = if is_float(dt) {
        POOL2D.replace("{{KIND}}", kind)
    } else {
        int_max_pool_source(dt)
    };
    let params = gpu.params(&p)?;
    let grid = gpu.grid_1d(n)?;
    gpu.step(source, "main", &[&params, input, out], grid)
        .map(Some)
}

/// maxPool2d on integer words (i32, u32) or word pairs (int64, uint64),
/// with the parameters of pool2d.wgsl. A window wholly outside the input
/// gives the type's minimum, as the CPU kernel does.
fn int_max_pool_source(dt: DataType) -> String {
    let t = convert::compute_type(dt);
    let (lowest, greater, helpers) = match (t, dt) {
        ("vec2<u32>", DataType::Int64) => (
            "vec2<u32>(0u, 0x80000000u)",
            "lt_s64(b, a)",
            super::elementwise::INT64,
        ),
        ("vec2<u32>", _) => (
            "vec2<u32>(0u, 0u)",
            "lt_u64(b, a)",
            super::elementwise::INT64,
        ),
        ("i32", DataType::Int4) => ("-8", "a > b", ""),
        ("i32", DataType::Int8) => ("-128", "a > b", ""),
        ("i32", _) => ("i32(-2147483647 - 1)", "a > b", ""),
        _ => ("0u", "a > b", ""),
    };
    format!(
        "@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<{t}>;
@group(0) @binding(2) var<storage, read_write> out: array<{t}>;

fn greater(a: {t}, b: {t}) -> bool {{
    return {greater};
}}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {{
    let i = gid.y * nwg.x * 256u + gid.x;
    if (i >= p[0]) {{
        return;
    }}
    let ch = p[2];
    let ih = i32(p[3]);
    let iw = i32(p[4]);
    let oh = p[5];
    let ow = p[6];
    let ox = i % ow;
    let oy = (i / ow) % oh;
    let c = (i / (ow * oh)) % ch;
    let b = i / (ow * oh * ch);
    let base = b * p[15] + c * p[16];
    let y0 = i32(oy * p[11]) - i32(p[9]);
    let x0 = i32(ox * p[12]) - i32(p[10]);
    var acc: {t} = {lowest};
    for (var ky = 0u; ky < p[7]; ky++) {{
        let iy = y0 + i32(ky * p[13]);
        if (iy < 0 || iy >= ih) {{
            continue;
        }}
        for (var kx = 0u; kx < p[8]; kx++) {{
            let ix = x0 + i32(kx * p[14]);
            if (ix < 0 || ix >= iw) {{
                continue;
            }}
            let v = x[base + u32(iy) * p[17] + u32(ix) * p[18]];
            if (greater(v, acc)) {{
                acc = v;
            }}
        }}
    }}
    out[b * p[19] + c * p[20] + oy * p[21] + ox * p[22]] = acc;
}}
{helpers}"
    )
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::graph::args::Val;
    use crate::types::DataType;

    /// (input layout, filter layout, input shape, filter shape, options)
    type Case<'a> = (
        &'a str,
        &'a str,
        Vec<usize>,
        Vec<usize>,
        Vec<(&'a str, Val)>,
    );

    /// Runs `name` (conv2d or convTranspose2d) with `case`'s layouts,
    /// shapes and options in `dt`, without and with a bias of `out_c`
    /// values, against the CPU kernel.
    fn check_case(
        be: &mut super::super::GpuBackend,
        name: &str,
        dt: DataType,
        case: &Case,
        out_c: usize,
        seed: u64,
        f16_tol: f32,
    ) {
        let (il, fl, si, sf, opts) = case;
        for bias in [false, true] {
            let mut o: Vec<(&str, Arg)> =
                opts.iter().map(|(k, v)| (*k, Arg::V(v.clone()))).collect();
            o.push(("inputLayout", Arg::V(s(il))));
            o.push(("filterLayout", Arg::V(s(fl))));
            let bias_shape = [out_c];
            if bias {
                o.push(("bias", Arg::T(dt, &bias_shape)));
            }
            let args = [Arg::T(dt, si), Arg::T(dt, sf)];
            check_call_vs_cpu(be, name, &args, Some(&o), seed, 1e-4, f16_tol);
        }
    }

    #[test]
    fn conv2d_options() {
        let Some(mut be) = backend() else { return };
        let cases: Vec<Case> = vec![
            ("nchw", "oihw", vec![1, 3, 9, 11], vec![5, 3, 3, 3], vec![]),
            (
                "nchw",
                "oihw",
                vec![2, 4, 10, 7],
                vec![6, 2, 3, 2],
                vec![
                    ("groups", n(2.0)),
                    ("padding", list(&[1.0, 2.0, 0.0, 1.0])),
                    ("strides", list(&[2.0, 1.0])),
                    ("dilations", list(&[1.0, 2.0])),
                ],
            ),
            ("nhwc", "ohwi", vec![1, 8, 8, 3], vec![4, 3, 3, 3], vec![]),
            (
                "nhwc",
                "hwio",
                vec![2, 7, 9, 4],
                vec![3, 3, 4, 5],
                vec![("padding", list(&[1.0, 1.0, 1.0, 1.0]))],
            ),
            (
                "nhwc",
                "ihwo",
                vec![1, 6, 6, 8],
                vec![1, 3, 3, 8],
                vec![("groups", n(8.0)), ("strides", list(&[2.0, 2.0]))],
            ),
            (
                "nchw",
                "hwio",
                vec![1, 6, 5, 5],
                vec![1, 1, 3, 6],
                vec![("groups", n(2.0))],
            ),
        ];
        for case in &cases {
            let out_c = match case.1 {
                "oihw" | "ohwi" => case.3[0],
                _ => case.3[3],
            };
            check_case(&mut be, "conv2d", F, case, out_c, 7, 1e-4);
        }
    }

    #[test]
    fn conv_transpose2d_options() {
        let Some(mut be) = backend() else { return };
        let cases: Vec<Case> = vec![
            ("nchw", "iohw", vec![1, 1, 1, 1], vec![1, 1, 1, 1], vec![]),
            ("nchw", "iohw", vec![1, 3, 9, 11], vec![3, 5, 3, 3], vec![]),
            (
                "nchw",
                "iohw",
                vec![2, 4, 7, 5],
                vec![4, 3, 3, 2],
                vec![
                    ("groups", n(2.0)),
                    ("padding", list(&[1.0, 2.0, 0.0, 1.0])),
                    ("strides", list(&[2.0, 3.0])),
                    ("dilations", list(&[2.0, 1.0])),
                    ("outputPadding", list(&[1.0, 2.0])),
                ],
            ),
            (
                "nhwc",
                "hwoi",
                vec![1, 5, 6, 4],
                vec![3, 2, 3, 4],
                vec![
                    ("strides", list(&[2.0, 2.0])),
                    ("outputSizes", list(&[12.0, 13.0])),
                ],
            ),
            (
                "nhwc",
                "ohwi",
                vec![2, 4, 4, 6],
                vec![2, 3, 3, 6],
                vec![
                    ("groups", n(3.0)),
                    ("padding", list(&[2.0, 1.0, 1.0, 2.0])),
                    ("dilations", list(&[2.0, 2.0])),
                ],
            ),
            (
                "nchw",
                "ohwi",
                vec![1, 2, 3, 3],
                vec![4, 2, 2, 2],
                vec![
                    ("strides", list(&[3.0, 2.0])),
                    ("outputPadding", list(&[2.0, 1.0])),
                ],
            ),
            (
                "nchw",
                "hwoi",
                vec![1, 6, 17, 19],
                vec![3, 3, 2, 6],
                vec![("groups", n(2.0))],
            ),
            // More than 256 outputs per channel plane and a large depth.
            (
                "nhwc",
                "iohw",
                vec![1, 20, 21, 16],
                vec![16, 3, 4, 4],
                vec![],
            ),
        ];
        for case in &cases {
            let (_, fl, _, sf, opts) = case;
            let groups = opts
                .iter()
                .find(|(k, _)| *k == "groups")
                .map_or(1, |(_, v)| match v {
                    Val::Number(g) => *g as usize,
                    _ => 1,
                });
            let out_c = groups
                * match *fl {
                    "iohw" => sf[1],
                    "hwoi" => sf[2],
                    _ => sf[0],
                };
            for dt in [DataType::Float32, DataType::Float16] {
                check_case(&mut be, "convTranspose2d", dt, case, out_c, 11, 2e-3);
            }
        }
    }
}

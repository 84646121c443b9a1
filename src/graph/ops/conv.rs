//! `conv2d()` and the 2-D pooling operators.

use super::{arg, check, lim, window_output, OpDef, FLOATS};
use crate::error::Result;
use crate::graph::args::{Ctx, Val};
use crate::graph::op::{Conv2dParams, FilterLayout, Pool2dParams, PoolKind};
use crate::graph::{GraphBuilder, Op, OperandId};
use crate::types::OperandDescriptor;

/// (batch, channels, height, width) of a 4-D shape in the nchw or nhwc
/// layout.
fn split_layout(s: &[usize], nhwc: bool) -> (usize, usize, usize, usize) {
    if nhwc {
        (s[0], s[3], s[1], s[2])
    } else {
        (s[0], s[1], s[2], s[3])
    }
}

/// The 4-D shape of (batch, channels, height, width) in the nchw or nhwc
/// layout.
fn join_layout(nhwc: bool, batch: usize, channels: usize, h: usize, w: usize) -> Vec<usize> {
    if nhwc {
        vec![batch, h, w, channels]
    } else {
        vec![batch, channels, h, w]
    }
}

/// Reads a list option of exactly `n` values, each at least `min`.
fn fixed_list<const N: usize>(
    ctx: &Ctx,
    v: &Val,
    what: &str,
    default: [usize; N],
    min: u32,
) -> Result<[usize; N]> {
    match ctx.opt_u32_list(v, what)? {
        None => Ok(default),
        Some(l) if l.len() == N && l.iter().all(|&x| x >= min) => {
            let mut out = [0; N];
            for (o, x) in out.iter_mut().zip(l) {
                *o = x as usize;
            }
            Ok(out)
        }
        Some(l) => Err(ctx.err(format!(
            "{what} must have {N} values, each at least {min}; got {l:?}"
        ))),
    }
}

/// `conv2d(input, filter, options)`.
fn build_conv2d(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("conv2d");
    let opts = ctx.options(arg(args, 2))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let w = b.operand(&ctx, arg(args, 1), "filter")?;
    let bias = b.opt_operand(&ctx, opts.member("bias"), "bias")?;
    let padding = fixed_list::<4>(&ctx, opts.member("padding"), "padding", [0; 4], 0)?;
    let strides = fixed_list::<2>(&ctx, opts.member("strides"), "strides", [1; 2], 1)?;
    let dilations = fixed_list::<2>(&ctx, opts.member("dilations"), "dilations", [1; 2], 1)?;
    let groups = ctx.u32_or(opts.member("groups"), "groups", 1)? as usize;
    let nhwc = ctx.enum_or(
        opts.member("inputLayout"),
        "inputLayout",
        &["nchw", "nhwc"],
        "nchw",
    )? == "nhwc";
    let filter_layout = match ctx.enum_or(
        opts.member("filterLayout"),
        "filterLayout",
        &["oihw", "hwio", "ohwi", "ihwo"],
        "oihw",
    )? {
        "oihw" => FilterLayout::Oihw,
        "hwio" => FilterLayout::Hwio,
        "ohwi" => FilterLayout::Ohwi,
        _ => FilterLayout::Ihwo,
    };
    let (di, dw) = (b.desc(x).clone(), b.desc(w).clone());
    check(&ctx, "input", &di)?;
    check(&ctx, "filter", &dw)?;
    if di.data_type != dw.data_type {
        return Err(ctx.err("input and filter must have the same data type"));
    }
    if groups == 0 {
        return Err(ctx.err("groups must be greater than 0"));
    }
    let s = &di.shape;
    let (batch, in_channels, in_h, in_w) = split_layout(s, nhwc);
    let f = &dw.shape;
    let (out_channels, filter_in, kernel_h, kernel_w) = match filter_layout {
        FilterLayout::Oihw => (f[0], f[1], f[2], f[3]),
        FilterLayout::Hwio => (f[3], f[2], f[0], f[1]),
        FilterLayout::Ohwi => (f[0], f[3], f[1], f[2]),
        FilterLayout::Ihwo => (f[3], f[0], f[1], f[2]),
    };
    if in_channels % groups != 0 || in_channels / groups != filter_in {
        return Err(ctx.err(format!(
            "the input has {in_channels} channels, which is not groups ({groups}) times the filter's {filter_in} input channels"
        )));
    }
    if out_channels % groups != 0 {
        return Err(ctx.err(format!(
            "the filter's {out_channels} output channels are not divisible by groups ({groups})"
        )));
    }
    let mut inputs = vec![x, w];
    if let Some(bias) = bias {
        let db = b.desc(bias);
        check(&ctx, "bias", db)?;
        if db.data_type != di.data_type || db.shape != [out_channels] {
            return Err(ctx.err(format!(
                "bias must be a 1-D {} tensor of {out_channels} values",
                di.data_type.name()
            )));
        }
        inputs.push(bias);
    }
    let out_h = window_output(
        in_h,
        kernel_h,
        padding[0],
        padding[1],
        strides[0],
        dilations[0],
        false,
    );
    let out_w = window_output(
        in_w,
        kernel_w,
        padding[2],
        padding[3],
        strides[1],
        dilations[1],
        false,
    );
    let (out_h, out_w) = match (out_h, out_w) {
        (Some(h), Some(w)) => (h, w),
        _ => {
            return Err(ctx.err(format!(
            "the dilated {kernel_h}x{kernel_w} filter does not fit the padded {in_h}x{in_w} input"
        )))
        }
    };
    let shape = join_layout(nhwc, batch, out_channels, out_h, out_w);
    let out = OperandDescriptor::new(di.data_type, shape).map_err(|e| ctx.err(e.message))?;
    let params = Conv2dParams {
        nhwc,
        filter_layout,
        padding,
        strides,
        dilations,
        groups,
        has_bias: bias.is_some(),
        batch,
        in_channels,
        in_h,
        in_w,
        out_channels,
        kernel_h,
        kernel_w,
        out_h,
        out_w,
    };
    Ok(b.push(Op::Conv2d(params), inputs, vec![out], ctx.label))
}

pub const CONV2D: OpDef = OpDef {
    name: "conv2d",
    build: build_conv2d,
    operands: &[
        lim("input", FLOATS, 4, 4),
        lim("filter", FLOATS, 4, 4),
        lim("bias", FLOATS, 1, 1),
        lim("output", FLOATS, 4, 4),
    ],
};

/// `averagePool2d` / `maxPool2d` / `l2Pool2d(input, options)`.
fn pool2d(
    b: &mut GraphBuilder,
    args: &[Val],
    kind: PoolKind,
    name: &str,
) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new(name);
    let opts = ctx.options(arg(args, 1))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let d = b.desc(x).clone();
    check(&ctx, "input", &d)?;
    let nhwc = ctx.enum_or(opts.member("layout"), "layout", &["nchw", "nhwc"], "nchw")? == "nhwc";
    let s = &d.shape;
    let (batch, channels, in_h, in_w) = split_layout(s, nhwc);
    let window = fixed_list::<2>(
        &ctx,
        opts.member("windowDimensions"),
        "windowDimensions",
        [in_h, in_w],
        1,
    )?;
    let padding = fixed_list::<4>(&ctx, opts.member("padding"), "padding", [0; 4], 0)?;
    let strides = fixed_list::<2>(&ctx, opts.member("strides"), "strides", [1; 2], 1)?;
    let dilations = fixed_list::<2>(&ctx, opts.member("dilations"), "dilations", [1; 2], 1)?;
    let ceil = ctx.enum_or(
        opts.member("roundingType"),
        "roundingType",
        &["floor", "ceil"],
        "floor",
    )? == "ceil";
    let size = |ceil: bool| {
        Some((
            window_output(
                in_h,
                window[0],
                padding[0],
                padding[1],
                strides[0],
                dilations[0],
                ceil,
            )?,
            window_output(
                in_w,
                window[1],
                padding[2],
                padding[3],
                strides[1],
                dilations[1],
                ceil,
            )?,
        ))
    };
    let floor_size = size(false).ok_or_else(|| {
        ctx.err(format!(
            "the {}x{} window does not fit the padded {in_h}x{in_w} input",
            window[0], window[1]
        ))
    })?;
    let (out_h, out_w) = match ctx.opt_u32_list(opts.member("outputSizes"), "outputSizes")? {
        None => {
            if ceil {
                size(true).unwrap_or(floor_size)
            } else {
                floor_size
            }
        }
        Some(o) => {
            let o = (
                *o.first().unwrap_or(&0) as usize,
                *o.get(1).unwrap_or(&0) as usize,
            );
            // outputSizes must be one of the two roundings of the window
            // arithmetic; it overrides roundingType.
            if Some(o) != size(true) && o != floor_size {
                return Err(ctx.err(format!(
                    "outputSizes {o:?} is neither the floor {floor_size:?} nor the ceil rounding of the window arithmetic"
                )));
            }
            o
        }
    };
    let shape = join_layout(nhwc, batch, channels, out_h, out_w);
    let out = OperandDescriptor::new(d.data_type, shape).map_err(|e| ctx.err(e.message))?;
    let params = Pool2dParams {
        kind,
        nhwc,
        window,
        padding,
        strides,
        dilations,
        batch,
        channels,
        in_h,
        in_w,
        out_h,
        out_w,
    };
    Ok(b.push(Op::Pool2d(params), vec![x], vec![out], ctx.label))
}

fn build_average_pool2d(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    pool2d(b, args, PoolKind::Average, "averagePool2d")
}

fn build_max_pool2d(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    pool2d(b, args, PoolKind::Max, "maxPool2d")
}

pub const AVERAGE_POOL2D: OpDef = OpDef {
    name: "averagePool2d",
    build: build_average_pool2d,
    operands: &[lim("input", FLOATS, 4, 4), lim("output", FLOATS, 4, 4)],
};

pub const MAX_POOL2D: OpDef = OpDef {
    name: "maxPool2d",
    build: build_max_pool2d,
    operands: &[lim("input", FLOATS, 4, 4), lim("output", FLOATS, 4, 4)],
};

fn build_l2_pool2d(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    pool2d(b, args, PoolKind::L2, "l2Pool2d")
}

pub const L2_POOL2D: OpDef = OpDef {
    name: "l2Pool2d",
    build: build_l2_pool2d,
    operands: &[lim("input", FLOATS, 4, 4), lim("output", FLOATS, 4, 4)],
};

/// Filter layouts of convTranspose2d (`MLConvTranspose2dFilterOperandLayout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransposeFilterLayout {
    /// [inputChannels, outputChannels/groups, height, width]
    Iohw,
    /// [height, width, outputChannels/groups, inputChannels]
    Hwoi,
    /// [outputChannels/groups, height, width, inputChannels]
    Ohwi,
}

/// Resolved convTranspose2d parameters. Inputs: input, filter, and bias
/// when `has_bias`. Sizes are in the canonical NCHW sense whatever the
/// layouts; `out_h`/`out_w` already include outputPadding or come from
/// outputSizes.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvTranspose2dParams {
    pub nhwc: bool,
    pub filter_layout: TransposeFilterLayout,
    /// [beginning height, ending height, beginning width, ending width].
    pub padding: [usize; 4],
    pub strides: [usize; 2],
    pub dilations: [usize; 2],
    pub groups: usize,
    pub has_bias: bool,
    pub batch: usize,
    pub in_channels: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_channels: usize,
    pub kernel_h: usize,
    pub kernel_w: usize,
    pub out_h: usize,
    pub out_w: usize,
}

/// The spec's "calculate convtranspose output size" (without
/// outputPadding); `None` when it is not positive or overflows.
fn conv_transpose_size(
    input: usize,
    filter: usize,
    pad_begin: usize,
    pad_end: usize,
    stride: usize,
    dilation: usize,
) -> Option<usize> {
    let effective = (filter as i128 - 1) * dilation as i128 + 1;
    let size =
        (input as i128 - 1) * stride as i128 + effective - pad_begin as i128 - pad_end as i128;
    if size > 0 && size <= u32::MAX as i128 {
        Some(size as usize)
    } else {
        None
    }
}

/// `convTranspose2d(input, filter, options)`, following the spec's steps
/// in order.
fn build_conv_transpose2d(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("convTranspose2d");
    let opts = ctx.options(arg(args, 2))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let w = b.operand(&ctx, arg(args, 1), "filter")?;
    let bias = b.opt_operand(&ctx, opts.member("bias"), "bias")?;
    let nhwc = ctx.enum_or(
        opts.member("inputLayout"),
        "inputLayout",
        &["nchw", "nhwc"],
        "nchw",
    )? == "nhwc";
    let filter_layout = match ctx.enum_or(
        opts.member("filterLayout"),
        "filterLayout",
        &["iohw", "hwoi", "ohwi"],
        "iohw",
    )? {
        "iohw" => TransposeFilterLayout::Iohw,
        "hwoi" => TransposeFilterLayout::Hwoi,
        _ => TransposeFilterLayout::Ohwi,
    };
    let groups = ctx.u32_or(opts.member("groups"), "groups", 1)? as usize;
    let (di, dw) = (b.desc(x).clone(), b.desc(w).clone());
    check(&ctx, "input", &di)?;
    check(&ctx, "filter", &dw)?;
    if di.data_type != dw.data_type {
        return Err(ctx.err("input and filter must have the same data type"));
    }
    let padding = fixed_list::<4>(&ctx, opts.member("padding"), "padding", [0; 4], 0)?;
    let strides = fixed_list::<2>(&ctx, opts.member("strides"), "strides", [1; 2], 1)?;
    let dilations = fixed_list::<2>(&ctx, opts.member("dilations"), "dilations", [1; 2], 1)?;
    let output_padding = fixed_list::<2>(
        &ctx,
        opts.member("outputPadding"),
        "outputPadding",
        [0; 2],
        0,
    )?;
    let output_sizes = match opts.member("outputSizes") {
        Val::Undefined => None,
        v => Some(fixed_list::<2>(&ctx, v, "outputSizes", [0; 2], 0)?),
    };
    if output_sizes.is_none()
        && (output_padding[0] >= strides[0] || output_padding[1] >= strides[1])
    {
        return Err(ctx.err(format!(
            "outputPadding {output_padding:?} must be smaller than strides {strides:?}"
        )));
    }
    if groups == 0 {
        return Err(ctx.err("groups must be greater than 0"));
    }
    let s = &di.shape;
    let (batch, in_channels, in_h, in_w) = split_layout(s, nhwc);
    let f = &dw.shape;
    let (filter_in, filter_out, kernel_h, kernel_w) = match filter_layout {
        TransposeFilterLayout::Iohw => (f[0], f[1], f[2], f[3]),
        TransposeFilterLayout::Hwoi => (f[3], f[2], f[0], f[1]),
        TransposeFilterLayout::Ohwi => (f[3], f[0], f[1], f[2]),
    };
    if in_channels != filter_in {
        return Err(ctx.err(format!(
            "the input has {in_channels} channels but the filter has {filter_in} input channels"
        )));
    }
    // Each group reads in_channels / groups input channels: the split must
    // be exact for the operation to be defined.
    if !in_channels.is_multiple_of(groups) {
        return Err(ctx.err(format!(
            "the input's {in_channels} channels are not divisible by groups ({groups})"
        )));
    }
    let out_channels = filter_out
        .checked_mul(groups)
        .filter(|&c| c > 0 && c <= u32::MAX as usize)
        .ok_or_else(|| {
            ctx.err(format!(
                "outputChannels ({filter_out} * {groups}) is not a valid dimension"
            ))
        })?;
    let mut inputs = vec![x, w];
    if let Some(bias) = bias {
        let db = b.desc(bias);
        if db.shape != [out_channels] {
            return Err(ctx.err(format!(
                "bias must have shape [{out_channels}], not {:?}",
                db.shape
            )));
        }
        check(&ctx, "bias", db)?;
        if db.data_type != di.data_type {
            return Err(ctx.err("bias must have the input's data type"));
        }
        inputs.push(bias);
    }
    let calc_h = conv_transpose_size(
        in_h,
        kernel_h,
        padding[0],
        padding[1],
        strides[0],
        dilations[0],
    );
    let calc_w = conv_transpose_size(
        in_w,
        kernel_w,
        padding[2],
        padding[3],
        strides[1],
        dilations[1],
    );
    let (calc_h, calc_w) = match (calc_h, calc_w) {
        (Some(h), Some(w)) => (h, w),
        _ => {
            return Err(ctx.err(format!(
                "the padding {padding:?} leaves no output for a {in_h}x{in_w} input and a {kernel_h}x{kernel_w} filter"
            )))
        }
    };
    let (out_h, out_w) = match output_sizes {
        Some([oh, ow]) => {
            if oh < calc_h || oh >= calc_h + strides[0] {
                return Err(ctx.err(format!(
                    "outputSizes[0] ({oh}) must be in [{calc_h}, {})",
                    calc_h + strides[0]
                )));
            }
            if ow < calc_w || ow >= calc_w + strides[1] {
                return Err(ctx.err(format!(
                    "outputSizes[1] ({ow}) must be in [{calc_w}, {})",
                    calc_w + strides[1]
                )));
            }
            (oh, ow)
        }
        None => (calc_h + output_padding[0], calc_w + output_padding[1]),
    };
    let shape = join_layout(nhwc, batch, out_channels, out_h, out_w);
    let out = OperandDescriptor::new(di.data_type, shape).map_err(|e| ctx.err(e.message))?;
    let params = ConvTranspose2dParams {
        nhwc,
        filter_layout,
        padding,
        strides,
        dilations,
        groups,
        has_bias: bias.is_some(),
        batch,
        in_channels,
        in_h,
        in_w,
        out_channels,
        kernel_h,
        kernel_w,
        out_h,
        out_w,
    };
    Ok(b.push(Op::ConvTranspose2d(params), inputs, vec![out], ctx.label))
}

pub const CONV_TRANSPOSE2D: OpDef = OpDef {
    name: "convTranspose2d",
    build: build_conv_transpose2d,
    operands: &[
        lim("input", FLOATS, 4, 4),
        lim("filter", FLOATS, 4, 4),
        lim("bias", FLOATS, 1, 1),
        lim("output", FLOATS, 4, 4),
    ],
};

/// This family's builder methods.
pub const DEFS: &[OpDef] = &[
    CONV2D,
    AVERAGE_POOL2D,
    MAX_POOL2D,
    L2_POOL2D,
    CONV_TRANSPOSE2D,
];

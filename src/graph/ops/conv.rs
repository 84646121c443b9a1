//! `conv2d()` and the 2-D pooling operators.

use super::{arg, check, lim, window_output, OpDef, FLOATS};
use crate::error::Result;
use crate::graph::args::{Ctx, Val};
use crate::graph::op::{Conv2dParams, FilterLayout, Pool2dParams, PoolKind};
use crate::graph::{GraphBuilder, Op, OperandId};
use crate::types::OperandDescriptor;

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
    let (batch, in_channels, in_h, in_w) = if nhwc {
        (s[0], s[3], s[1], s[2])
    } else {
        (s[0], s[1], s[2], s[3])
    };
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
    let shape = if nhwc {
        vec![batch, out_h, out_w, out_channels]
    } else {
        vec![batch, out_channels, out_h, out_w]
    };
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
    let (batch, channels, in_h, in_w) = if nhwc {
        (s[0], s[3], s[1], s[2])
    } else {
        (s[0], s[1], s[2], s[3])
    };
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
    let shape = if nhwc {
        vec![batch, out_h, out_w, channels]
    } else {
        vec![batch, channels, out_h, out_w]
    };
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

/// Resolved convTranspose2d parameters (filled in when it is written).
#[derive(Debug, Clone, PartialEq)]
pub enum ConvTranspose2dParams {}

/// This family's builder methods.
pub const DEFS: &[OpDef] = &[CONV2D, AVERAGE_POOL2D, MAX_POOL2D];

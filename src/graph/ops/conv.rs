//! `conv2d()` and the 2-D pooling operators.

use super::{arg, check, lim, window_output, OpDef, ALL_TYPES, FLOATS};
use crate::error::Result;
use crate::graph::args::{Ctx, Val};
use crate::graph::{GraphBuilder, OperandId};
use crate::types::{DataType, OperandDescriptor};

/// Filter layouts of conv2d (`MLConv2dFilterOperandLayout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterLayout {
    Oihw,
    Hwio,
    Ohwi,
    Ihwo,
}

/// Resolved conv2d (`L` = [`FilterLayout`]) and convTranspose2d (`L` =
/// `TransposeFilterLayout`) parameters. Inputs: input, filter, and bias
/// when `has_bias`. Sizes are in the canonical NCHW / OIHW sense whatever
/// the layouts; for convTranspose2d `out_h`/`out_w` already include
/// outputPadding or come from outputSizes.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvParams<L> {
    pub nhwc: bool,
    pub filter_layout: L,
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

impl<L> ConvParams<L> {
    /// The filter taps over its group's input channels: the multiply-adds
    /// behind each output element (of a conv2d; a convTranspose2d's at
    /// most).
    pub fn taps(&self) -> usize {
        (self.in_channels / self.groups.max(1))
            .saturating_mul(self.kernel_h)
            .saturating_mul(self.kernel_w)
    }
}

/// Resolved conv2d parameters.
pub type Conv2dParams = ConvParams<FilterLayout>;

/// The pooling reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolKind {
    Average,
    Max,
    L2,
}

/// Resolved pool2d parameters. Input: input.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool2dParams {
    pub kind: PoolKind,
    pub nhwc: bool,
    pub window: [usize; 2],
    pub padding: [usize; 4],
    pub strides: [usize; 2],
    pub dilations: [usize; 2],
    pub batch: usize,
    pub channels: usize,
    pub in_h: usize,
    pub in_w: usize,
    pub out_h: usize,
    pub out_w: usize,
}

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

/// The padding, strides and dilations of a 2-D window.
struct Window {
    padding: [usize; 4],
    strides: [usize; 2],
    dilations: [usize; 2],
}

impl Window {
    fn read(ctx: &Ctx, opts: &Val) -> Result<Self> {
        Ok(Window {
            padding: fixed_list::<4>(ctx, opts.member("padding"), "padding", [0; 4], 0)?,
            strides: fixed_list::<2>(ctx, opts.member("strides"), "strides", [1; 2], 1)?,
            dilations: fixed_list::<2>(ctx, opts.member("dilations"), "dilations", [1; 2], 1)?,
        })
    }

    /// The output (height, width) for a `kernel` over `input`, where
    /// `axis(input, kernel, pad_begin, pad_end, stride, dilation)` gives
    /// one axis' size; `None` where either axis has none.
    fn output<T>(
        &self,
        input: [usize; 2],
        kernel: [usize; 2],
        axis: impl Fn(usize, usize, usize, usize, usize, usize) -> Option<T>,
    ) -> Option<(T, T)> {
        let (p, s, d) = (self.padding, self.strides, self.dilations);
        let h = axis(input[0], kernel[0], p[0], p[1], s[0], d[0]);
        let w = axis(input[1], kernel[1], p[2], p[3], s[1], d[1]);
        Some((h?, w?))
    }
}

/// A layout enum option: `layouts` pairs each allowed value with what it
/// resolves to, the default first.
fn layout<L: Copy>(ctx: &Ctx, opts: &Val, what: &str, layouts: &[(&'static str, L)]) -> Result<L> {
    let names: Vec<&'static str> = layouts.iter().map(|&(name, _)| name).collect();
    let name = ctx.enum_or(opts.member(what), what, &names, layouts[0].0)?;
    Ok(layouts
        .iter()
        .find(|&&(n, _)| n == name)
        .map_or(layouts[0].1, |&(_, l)| l))
}

/// `MLInputOperandLayout`, as "is nhwc".
const INPUT_LAYOUTS: &[(&str, bool)] = &[("nchw", false), ("nhwc", true)];

const FILTER_LAYOUTS: &[(&str, FilterLayout)] = &[
    ("oihw", FilterLayout::Oihw),
    ("hwio", FilterLayout::Hwio),
    ("ohwi", FilterLayout::Ohwi),
    ("ihwo", FilterLayout::Ihwo),
];

const TRANSPOSE_FILTER_LAYOUTS: &[(&str, TransposeFilterLayout)] = &[
    ("iohw", TransposeFilterLayout::Iohw),
    ("hwoi", TransposeFilterLayout::Hwoi),
    ("ohwi", TransposeFilterLayout::Ohwi),
];

/// The output of a conv2d / convTranspose2d: the input's data type and
/// layout, and the resolved sizes.
fn conv_output<L>(ctx: &Ctx, data_type: DataType, p: &ConvParams<L>) -> Result<OperandDescriptor> {
    let shape = join_layout(p.nhwc, p.batch, p.out_channels, p.out_h, p.out_w);
    OperandDescriptor::new(data_type, shape).map_err(|e| ctx.err(e.message))
}

/// `conv2d(input, filter, options)`.
fn build_conv2d(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("conv2d");
    let opts = ctx.options(arg(args, 2))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let w = b.operand(&ctx, arg(args, 1), "filter")?;
    let bias = b.opt_operand(&ctx, opts.member("bias"), "bias")?;
    let win = Window::read(&ctx, opts)?;
    let groups = ctx.u32_or(opts.member("groups"), "groups", 1)? as usize;
    let nhwc = layout(&ctx, opts, "inputLayout", INPUT_LAYOUTS)?;
    let filter_layout = layout(&ctx, opts, "filterLayout", FILTER_LAYOUTS)?;
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
    let out = win.output([in_h, in_w], [kernel_h, kernel_w], |i, k, pb, pe, s, d| {
        window_output(i, k, pb, pe, s, d, false)
    });
    let (out_h, out_w) = out.ok_or_else(|| {
        ctx.err(format!(
            "the dilated {kernel_h}x{kernel_w} filter does not fit the padded {in_h}x{in_w} input"
        ))
    })?;
    let params = ConvParams {
        nhwc,
        filter_layout,
        padding: win.padding,
        strides: win.strides,
        dilations: win.dilations,
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
    let out = conv_output(&ctx, di.data_type, &params)?;
    Ok(b.push(params, inputs, vec![out], ctx.label))
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
    let nhwc = layout(&ctx, opts, "layout", INPUT_LAYOUTS)?;
    let s = &d.shape;
    let (batch, channels, in_h, in_w) = split_layout(s, nhwc);
    let window = fixed_list::<2>(
        &ctx,
        opts.member("windowDimensions"),
        "windowDimensions",
        [in_h, in_w],
        1,
    )?;
    let win = Window::read(&ctx, opts)?;
    // `outputShapeRounding` is the current name of `roundingType`; clients
    // pass both, and the new name wins when both are given.
    let legacy_ceil = ctx.enum_or(
        opts.member("roundingType"),
        "roundingType",
        &["floor", "ceil"],
        "floor",
    )? == "ceil";
    let ceil = match opts.member("outputShapeRounding") {
        v if v.is_undefined() => legacy_ceil,
        v => ctx.enum_or(v, "outputShapeRounding", &["floor", "ceil"], "floor")? == "ceil",
    };
    let size = |ceil: bool| {
        win.output([in_h, in_w], window, |i, k, pb, pe, s, d| {
            window_output(i, k, pb, pe, s, d, ceil)
        })
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
            // arithmetic; it overrides outputShapeRounding.
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
        padding: win.padding,
        strides: win.strides,
        dilations: win.dilations,
        batch,
        channels,
        in_h,
        in_w,
        out_h,
        out_w,
    };
    Ok(b.push(params, vec![x], vec![out], ctx.label))
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

/// maxPool2d takes any data type (a maximum needs only an order).
pub const MAX_POOL2D: OpDef = OpDef {
    name: "maxPool2d",
    build: build_max_pool2d,
    operands: &[
        lim("input", ALL_TYPES, 4, 4),
        lim("output", ALL_TYPES, 4, 4),
    ],
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

/// Resolved convTranspose2d parameters.
pub type ConvTranspose2dParams = ConvParams<TransposeFilterLayout>;

/// The spec's "calculate convtranspose output size" (without
/// outputPadding). It may be zero or negative: outputPadding or
/// outputSizes can still make the output a valid dimension, and only the
/// final size is checked (i128 holds every value from usize arguments).
fn conv_transpose_size(
    input: usize,
    filter: usize,
    pad_begin: usize,
    pad_end: usize,
    stride: usize,
    dilation: usize,
) -> Option<i128> {
    let effective = (filter as i128 - 1) * dilation as i128 + 1;
    Some((input as i128 - 1) * stride as i128 + effective - pad_begin as i128 - pad_end as i128)
}

/// `convTranspose2d(input, filter, options)`, following the spec's steps
/// in order.
fn build_conv_transpose2d(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("convTranspose2d");
    let opts = ctx.options(arg(args, 2))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let w = b.operand(&ctx, arg(args, 1), "filter")?;
    let bias = b.opt_operand(&ctx, opts.member("bias"), "bias")?;
    let nhwc = layout(&ctx, opts, "inputLayout", INPUT_LAYOUTS)?;
    let filter_layout = layout(&ctx, opts, "filterLayout", TRANSPOSE_FILTER_LAYOUTS)?;
    let groups = ctx.u32_or(opts.member("groups"), "groups", 1)? as usize;
    let (di, dw) = (b.desc(x).clone(), b.desc(w).clone());
    check(&ctx, "input", &di)?;
    check(&ctx, "filter", &dw)?;
    if di.data_type != dw.data_type {
        return Err(ctx.err("input and filter must have the same data type"));
    }
    let win = Window::read(&ctx, opts)?;
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
        && (output_padding[0] >= win.strides[0] || output_padding[1] >= win.strides[1])
    {
        return Err(ctx.err(format!(
            "outputPadding {output_padding:?} must be smaller than strides {:?}",
            win.strides
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
    let (calc_h, calc_w) = win
        .output([in_h, in_w], [kernel_h, kernel_w], conv_transpose_size)
        .expect("conv_transpose_size always has a value");
    let strides = win.strides.map(|s| s as i128);
    let (out_h, out_w) = match output_sizes {
        Some([oh, ow]) => {
            let (oh, ow) = (oh as i128, ow as i128);
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
        None => (
            calc_h + output_padding[0] as i128,
            calc_w + output_padding[1] as i128,
        ),
    };
    // A valid dimension: greater than zero and within `long`.
    let valid = |v: i128| v > 0 && v <= i32::MAX as i128;
    if !valid(out_h) || !valid(out_w) {
        return Err(ctx.err(format!(
            "the output size {out_h}x{out_w} (padding {:?}, a {in_h}x{in_w} input, a {kernel_h}x{kernel_w} filter) is not a valid dimension",
            win.padding
        )));
    }
    let (out_h, out_w) = (out_h as usize, out_w as usize);
    let params = ConvParams {
        nhwc,
        filter_layout,
        padding: win.padding,
        strides: win.strides,
        dilations: win.dilations,
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
    let out = conv_output(&ctx, di.data_type, &params)?;
    Ok(b.push(params, inputs, vec![out], ctx.label))
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

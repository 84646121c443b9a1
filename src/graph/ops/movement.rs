//! expand, pad, reverse, split, tile, triangular, resample2d.
//!
//! Every operator here only moves (or, for resample2d, interpolates)
//! elements. Validation resolves all defaults, so the kernels get explicit
//! axes, paddings, split sizes and the already cast padding value.

use super::{arg, check, lim, OpDef, ALL_TYPES, MAX_RANK, MAX_SEQUENCE};
use crate::error::Result;
use crate::f16::{f16_to_f32, f32_to_f16};
use crate::graph::args::{Ctx, MlNumber, Val};
use crate::graph::{GraphBuilder, OperandId};
use crate::types::{DataType, OperandDescriptor};

/// `MLPaddingMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PadMode {
    /// Fill with the (cast) `value`.
    Constant,
    /// Repeat the edge element.
    Edge,
    /// Mirror without repeating the edge element: `[c b | a b c | b a]`.
    Reflection,
}

impl PadMode {
    /// The input coordinate that output coordinate `o` of a dimension of
    /// size `n` padded by `p0` in front reads, or `None` for the constant
    /// fill: `o - p0` inside, mirrored or clamped into `[0, n)` outside
    /// (`[c b | a b c | b a]`: -1 reads 1, n reads n - 2). Validation keeps
    /// mirrors inside; the clamp keeps a read in range regardless. One
    /// rule for every backend.
    pub fn source(self, o: usize, n: usize, p0: usize) -> Option<usize> {
        let last = n as i64 - 1;
        let i = o as i64 - p0 as i64;
        let i = if (0..=last).contains(&i) {
            i
        } else {
            match self {
                PadMode::Constant => return None,
                PadMode::Edge => i,
                PadMode::Reflection if i < 0 => -i,
                PadMode::Reflection => 2 * last - i,
            }
        };
        Some(i.clamp(0, last.max(0)) as usize)
    }
}

/// The resolved operators of this family. Each takes one input; `Split`
/// has one output per entry of `sizes`, the others one output whose
/// descriptor the kernel reads for the output shape.
#[derive(Debug, Clone, PartialEq)]
pub enum MovementOp {
    /// Broadcast to the output shape (input right-aligned, size-1 dims
    /// repeated).
    Expand,
    Pad {
        begin: Vec<usize>,
        end: Vec<usize>,
        mode: PadMode,
        /// The padding value already cast to the input's data type: a
        /// `Double` for float types, a `BigInt` within range otherwise.
        value: MlNumber,
    },
    /// Dimensions to reverse (distinct, in range; may be empty).
    Reverse { axes: Vec<usize> },
    /// Consecutive pieces of `sizes[i]` along `axis`.
    Split { axis: usize, sizes: Vec<usize> },
    /// Repetitions per dimension (each at least 1).
    Tile { repetitions: Vec<usize> },
    /// Keeps elements with `col - row >= diagonal` (upper) or
    /// `col - row <= diagonal` (lower) of the last two dimensions.
    Triangular { upper: bool, diagonal: i64 },
    /// `axes[0]`, `axes[1]`: the two resampled dimensions (output sizes are
    /// in the output descriptor).
    Resample2d { linear: bool, axes: [usize; 2] },
}

impl MovementOp {
    pub fn name(&self) -> &'static str {
        match self {
            MovementOp::Expand => "expand",
            MovementOp::Pad { .. } => "pad",
            MovementOp::Reverse { .. } => "reverse",
            MovementOp::Split { .. } => "split",
            MovementOp::Tile { .. } => "tile",
            MovementOp::Triangular { .. } => "triangular",
            MovementOp::Resample2d { .. } => "resample2d",
        }
    }
}

fn descriptor(ctx: &Ctx, dt: DataType, shape: Vec<usize>) -> Result<OperandDescriptor> {
    OperandDescriptor::new(dt, shape).map_err(|e| ctx.err(e.message))
}

/// Reads the one input operand and checks it against the `input` limit.
fn input(b: &GraphBuilder, ctx: &Ctx, v: &Val) -> Result<(OperandId, OperandDescriptor)> {
    let x = b.operand(ctx, v, "input")?;
    let d = b.desc(x).clone();
    check(ctx, "input", &d)?;
    Ok((x, d))
}

/// A list of axes of a rank-`rank` tensor: each in range, no duplicates.
fn axes_list(ctx: &Ctx, list: Vec<u32>, rank: usize, what: &str) -> Result<Vec<usize>> {
    let mut seen = vec![false; rank];
    for &a in &list {
        let a = a as usize;
        if a >= rank {
            return Err(ctx.err(format!(
                "{what} {list:?}: the axis {a} is out of range for rank {rank}"
            )));
        }
        if std::mem::replace(&mut seen[a], true) {
            return Err(ctx.err(format!("{what} {list:?} contains {a} twice")));
        }
    }
    Ok(list.into_iter().map(|a| a as usize).collect())
}

/// `expand(input, newShape)`: the input must be unidirectionally
/// broadcastable to `newShape`, which is then the output shape.
fn build_expand(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("expand");
    ctx.options(arg(args, 2))?;
    let (x, d) = input(b, &ctx, arg(args, 0))?;
    let shape = super::shape::new_shape(&ctx, arg(args, 1))?;
    if !super::broadcasts_to(&d.shape, &shape) {
        return Err(ctx.err(format!(
            "the input shape {:?} is not unidirectionally broadcastable to newShape {shape:?}",
            d.shape
        )));
    }
    let out = descriptor(&ctx, d.data_type, shape)?;
    Ok(b.push(MovementOp::Expand, vec![x], vec![out], ctx.label))
}

/// The spec's "cast" of an `MLNumber` to `dt`: floats round to nearest,
/// integers are clamped to the type's range and rounded half to even (NaN
/// gives 0). int4/uint4 are clamped to their 4-bit ranges the same way.
pub fn cast_number(dt: DataType, v: MlNumber) -> MlNumber {
    let (lo, hi): (i128, i128) = match dt {
        DataType::Float32 => return MlNumber::Double(v.as_f64() as f32 as f64),
        DataType::Float16 => {
            return MlNumber::Double(f16_to_f32(f32_to_f16(v.as_f64() as f32)) as f64)
        }
        DataType::Int64 => (i64::MIN as i128, i64::MAX as i128),
        DataType::Uint64 => (0, u64::MAX as i128),
        DataType::Int32 => (i32::MIN as i128, i32::MAX as i128),
        DataType::Uint32 => (0, u32::MAX as i128),
        DataType::Int8 => (-128, 127),
        DataType::Uint8 => (0, 255),
        DataType::Int4 => (-8, 7),
        DataType::Uint4 => (0, 15),
    };
    let i = match v {
        MlNumber::BigInt(i) => i,
        MlNumber::Double(x) if x.is_nan() => 0,
        MlNumber::Double(x) => {
            let x = x.clamp(lo as f64, hi as f64).round_ties_even();
            // Clamped to the range above (as f64, which may round the
            // 64-bit bounds up by one: the clamp below settles it).
            x as i128
        }
    };
    MlNumber::BigInt(i.clamp(lo, hi))
}

/// `pad(input, beginningPadding, endingPadding, {mode, value})`.
///
/// The spec dropped the `"symmetric"` mode of earlier drafts (#843), and no
/// client we know of sends it (onnxruntime-web maps ONNX's reflect, edge and
/// constant only), so it is a TypeError like any unknown mode.
fn build_pad(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("pad");
    let opts = ctx.options(arg(args, 3))?;
    let (x, d) = input(b, &ctx, arg(args, 0))?;
    let begin = ctx.u32_list(arg(args, 1), "beginningPadding")?;
    let end = ctx.u32_list(arg(args, 2), "endingPadding")?;
    let mode = match ctx.enum_or(
        opts.member("mode"),
        "mode",
        &["constant", "edge", "reflection"],
        "constant",
    )? {
        "edge" => PadMode::Edge,
        "reflection" => PadMode::Reflection,
        _ => PadMode::Constant,
    };
    let value = match opts.member("value") {
        Val::Undefined => MlNumber::Double(0.0),
        v => ctx.ml_number(v, "value")?,
    };
    let rank = d.rank();
    if rank == 0 {
        return Err(ctx.err("the input must not be a scalar"));
    }
    if begin.len() != rank || end.len() != rank {
        return Err(ctx.err(format!(
            "beginningPadding ({} values) and endingPadding ({} values) must both have {rank} values",
            begin.len(),
            end.len()
        )));
    }
    let mut shape = d.shape.clone();
    for i in 0..rank {
        let (p0, p1, n) = (begin[i] as usize, end[i] as usize, d.shape[i]);
        let fits = match mode {
            PadMode::Constant | PadMode::Edge => true,
            // Reflection is bounded: each side mirrors at most n - 1
            // elements, since the edge element is not repeated.
            PadMode::Reflection => p0 < n && p1 < n,
        };
        if !fits {
            return Err(ctx.err(format!(
                "the padding ({p0}, {p1}) of dimension {i} is too large for its size {n} in this mode"
            )));
        }
        shape[i] = n + p0 + p1;
    }
    let out = descriptor(&ctx, d.data_type, shape)?;
    let op = MovementOp::Pad {
        begin: begin.into_iter().map(|v| v as usize).collect(),
        end: end.into_iter().map(|v| v as usize).collect(),
        mode,
        value: cast_number(d.data_type, value),
    };
    Ok(b.push(op, vec![x], vec![out], ctx.label))
}

/// `reverse(input, {axes})`: all axes when `axes` is absent.
fn build_reverse(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("reverse");
    let opts = ctx.options(arg(args, 1))?;
    let (x, d) = input(b, &ctx, arg(args, 0))?;
    let axes = match ctx.opt_u32_list(opts.member("axes"), "axes")? {
        None => (0..d.rank()).collect(),
        Some(l) => axes_list(&ctx, l, d.rank(), "axes")?,
    };
    Ok(b.push(MovementOp::Reverse { axes }, vec![x], vec![d], ctx.label))
}

/// The `splits` argument of split.
enum Splits {
    Count(usize),
    Sizes(Vec<u32>),
}

/// `split(input, splits, {axis})`: `splits` is a count of equal pieces or
/// the list of piece sizes.
fn build_split(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("split");
    let opts = ctx.options(arg(args, 2))?;
    let (x, d) = input(b, &ctx, arg(args, 0))?;
    let axis = ctx.u32_or(opts.member("axis"), "axis", 0)? as usize;
    // `unsigned long or sequence<unsigned long>`: a list is the sizes,
    // anything else must be the count.
    let splits = match arg(args, 1) {
        v @ Val::List(_) => Splits::Sizes(ctx.u32_list(v, "splits")?),
        v => Splits::Count(ctx.u32(v, "splits")? as usize),
    };
    if axis >= d.rank() {
        return Err(ctx.err(format!("axis {axis} is out of range for rank {}", d.rank())));
    }
    let dim = d.shape[axis];
    let count = match &splits {
        Splits::Count(n) => *n,
        Splits::Sizes(l) => l.len(),
    };
    if count > MAX_SEQUENCE {
        return Err(ctx.err(format!(
            "splits asks for {count} outputs, more than {MAX_SEQUENCE}"
        )));
    }
    let sizes: Vec<usize> = match splits {
        Splits::Count(n) => {
            if n == 0 {
                return Err(ctx.err("splits must not be 0"));
            }
            if dim % n != 0 {
                return Err(ctx.err(format!(
                    "splits ({n}) does not divide the size {dim} of axis {axis}"
                )));
            }
            vec![dim / n; n]
        }
        Splits::Sizes(l) => {
            if l.contains(&0) {
                return Err(ctx.err(format!("splits {l:?} contains 0")));
            }
            let sum: u64 = l.iter().map(|&v| v as u64).sum();
            if sum != dim as u64 {
                return Err(ctx.err(format!(
                    "splits {l:?} sum to {sum}, not the size {dim} of axis {axis}"
                )));
            }
            l.into_iter().map(|v| v as usize).collect()
        }
    };
    let outs = sizes
        .iter()
        .map(|&s| {
            let mut shape = d.shape.clone();
            shape[axis] = s;
            descriptor(&ctx, d.data_type, shape)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(b.push(MovementOp::Split { axis, sizes }, vec![x], outs, ctx.label))
}

/// `tile(input, repetitions)`.
fn build_tile(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("tile");
    ctx.options(arg(args, 2))?;
    let (x, d) = input(b, &ctx, arg(args, 0))?;
    let reps = ctx.u32_list(arg(args, 1), "repetitions")?;
    if reps.len() != d.rank() {
        return Err(ctx.err(format!(
            "repetitions has {} values but the input has rank {}",
            reps.len(),
            d.rank()
        )));
    }
    if reps.contains(&0) {
        return Err(ctx.err(format!("repetitions {reps:?} contains 0")));
    }
    let mut shape = Vec::with_capacity(d.rank());
    for (&n, &r) in d.shape.iter().zip(&reps) {
        shape.push(
            n.checked_mul(r as usize)
                .ok_or_else(|| ctx.err("the tiled shape overflows"))?,
        );
    }
    let out = descriptor(&ctx, d.data_type, shape)?;
    let repetitions = reps.into_iter().map(|v| v as usize).collect();
    Ok(b.push(
        MovementOp::Tile { repetitions },
        vec![x],
        vec![out],
        ctx.label,
    ))
}

/// `triangular(input, {upper, diagonal})`.
fn build_triangular(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("triangular");
    let opts = ctx.options(arg(args, 1))?;
    let (x, d) = input(b, &ctx, arg(args, 0))?;
    let upper = ctx.bool_or(opts.member("upper"), "upper", true)?;
    let diagonal = match opts.member("diagonal") {
        Val::Undefined => 0,
        v => ctx.i32(v, "diagonal")? as i64,
    };
    Ok(b.push(
        MovementOp::Triangular { upper, diagonal },
        vec![x],
        vec![d],
        ctx.label,
    ))
}

/// `resample2d(input, {mode, scales, sizes, axes})`.
fn build_resample2d(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("resample2d");
    let opts = ctx.options(arg(args, 1))?;
    let (x, d) = input(b, &ctx, arg(args, 0))?;
    let linear = ctx.enum_or(
        opts.member("mode"),
        "mode",
        &["nearest-neighbor", "linear"],
        "nearest-neighbor",
    )? == "linear";
    // `sequence<float>`: finite numbers, rounded to float32.
    let scales: Vec<f32> = match opts.member("scales") {
        Val::Undefined => vec![1.0, 1.0],
        v => ctx
            .list(v, "scales")?
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let what = format!("scales[{i}]");
                let f = ctx.number(s, &what)?;
                if f.is_finite() {
                    Ok(f as f32)
                } else {
                    Err(ctx.err(format!("{what} must be a finite number")))
                }
            })
            .collect::<Result<_>>()?,
    };
    let sizes = ctx.opt_u32_list(opts.member("sizes"), "sizes")?;
    let axes = ctx.opt_u32_list(opts.member("axes"), "axes")?;
    if scales.len() != 2 || scales.iter().any(|&s| s <= 0.0) {
        return Err(ctx.err(format!(
            "scales {scales:?} must have 2 values greater than 0"
        )));
    }
    if let Some(s) = &sizes {
        if s.len() != 2 || s.contains(&0) {
            return Err(ctx.err(format!("sizes {s:?} must have 2 values greater than 0")));
        }
    }
    let axes = match axes {
        None => vec![2, 3],
        Some(l) => {
            if l.len() != 2 {
                return Err(ctx.err(format!("axes {l:?} must have 2 values")));
            }
            axes_list(&ctx, l, d.rank(), "axes")?
        }
    };
    let axes = [axes[0], axes[1]];
    let mut shape = d.shape.clone();
    for (i, &a) in axes.iter().enumerate() {
        let size = match &sizes {
            Some(s) => s[i] as f64,
            None => (d.shape[a] as f64 * scales[i] as f64).floor(),
        };
        if !(1.0..=i32::MAX as f64).contains(&size) {
            return Err(ctx.err(format!(
                "the output size {size} of axis {a} is not a valid dimension"
            )));
        }
        shape[a] = size as usize;
    }
    let out = descriptor(&ctx, d.data_type, shape)?;
    Ok(b.push(
        MovementOp::Resample2d { linear, axes },
        vec![x],
        vec![out],
        ctx.label,
    ))
}

pub const EXPAND: OpDef = OpDef {
    name: "expand",
    build: build_expand,
    operands: &[
        lim("input", ALL_TYPES, 0, MAX_RANK),
        lim("output", ALL_TYPES, 0, MAX_RANK),
    ],
};

pub const PAD: OpDef = OpDef {
    name: "pad",
    build: build_pad,
    operands: &[
        // A scalar cannot be padded (the method steps refuse rank 0).
        lim("input", ALL_TYPES, 1, MAX_RANK),
        lim("output", ALL_TYPES, 1, MAX_RANK),
    ],
};

/// resample2d: the float types and, since #891, int8 and uint8 (image data).
const RESAMPLE_TYPES: &[DataType] = &[
    DataType::Float32,
    DataType::Float16,
    DataType::Int8,
    DataType::Uint8,
];

pub const RESAMPLE2D: OpDef = OpDef {
    name: "resample2d",
    build: build_resample2d,
    operands: &[
        lim("input", RESAMPLE_TYPES, 4, 4),
        lim("output", RESAMPLE_TYPES, 4, 4),
    ],
};

pub const REVERSE: OpDef = OpDef {
    name: "reverse",
    build: build_reverse,
    operands: &[
        lim("input", ALL_TYPES, 0, MAX_RANK),
        lim("output", ALL_TYPES, 0, MAX_RANK),
    ],
};

pub const SPLIT: OpDef = OpDef {
    name: "split",
    build: build_split,
    operands: &[
        // axis must be < rank, so a scalar cannot be split.
        lim("input", ALL_TYPES, 1, MAX_RANK),
        lim("outputs", ALL_TYPES, 1, MAX_RANK),
    ],
};

pub const TILE: OpDef = OpDef {
    name: "tile",
    build: build_tile,
    operands: &[
        lim("input", ALL_TYPES, 0, MAX_RANK),
        lim("output", ALL_TYPES, 0, MAX_RANK),
    ],
};

pub const TRIANGULAR: OpDef = OpDef {
    name: "triangular",
    build: build_triangular,
    operands: &[
        lim("input", ALL_TYPES, 2, MAX_RANK),
        lim("output", ALL_TYPES, 2, MAX_RANK),
    ],
};

/// This family's builder methods.
pub const DEFS: &[OpDef] = &[EXPAND, PAD, RESAMPLE2D, REVERSE, SPLIT, TILE, TRIANGULAR];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn input(b: &mut GraphBuilder, dt: DataType, shape: &[usize]) -> Val {
        let id = b
            .input("x", OperandDescriptor::new(dt, shape.to_vec()).unwrap())
            .unwrap();
        Val::Operand { builder: b.id, id }
    }

    fn num(v: f64) -> Val {
        Val::Number(v)
    }

    fn list(v: &[f64]) -> Val {
        Val::List(v.iter().map(|&x| Val::Number(x)).collect())
    }

    fn opts(kv: &[(&str, Val)]) -> Val {
        Val::Dict(kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
    }

    /// Calls `name` on an input of `dt`/`shape` followed by `rest`; returns
    /// the output shapes and the resolved operator.
    fn call(
        name: &str,
        dt: DataType,
        shape: &[usize],
        rest: &[Val],
    ) -> Result<(Vec<Vec<usize>>, MovementOp)> {
        let mut b = GraphBuilder::new();
        let mut args = vec![input(&mut b, dt, shape)];
        args.extend_from_slice(rest);
        let outs = b.call(name, &args)?;
        let shapes = outs.iter().map(|&o| b.desc(o).shape.clone()).collect();
        let g = b
            .build(
                outs.iter()
                    .enumerate()
                    .map(|(i, &o)| (format!("o{i}"), o))
                    .collect(),
            )
            .unwrap();
        let op = g.nodes.last().unwrap().op.clone();
        Ok((
            shapes,
            MovementOp::try_from(op).unwrap_or_else(|other| panic!("{other:?}")),
        ))
    }

    fn type_error(r: Result<(Vec<Vec<usize>>, MovementOp)>) -> String {
        match r {
            Err(e) => {
                assert_eq!(e.kind, ErrorKind::Type, "{}", e.message);
                e.message
            }
            Ok(v) => panic!("expected a TypeError, got {v:?}"),
        }
    }

    const F32: DataType = DataType::Float32;

    #[test]
    fn expand_shapes_and_errors() {
        let (s, _) = call("expand", F32, &[3, 1], &[list(&[2, 3, 4].map(f64::from))]).unwrap();
        assert_eq!(s, vec![vec![2, 3, 4]]);
        let (s, _) = call("expand", DataType::Int4, &[], &[list(&[5.0])]).unwrap();
        assert_eq!(s, vec![vec![5]]);
        // Unidirectional only: the input may not be larger than newShape.
        type_error(call("expand", F32, &[3, 4], &[list(&[4.0])]));
        type_error(call("expand", F32, &[3], &[list(&[2.0, 2.0])]));
        type_error(call("expand", F32, &[3], &[list(&[0.0])]));
        type_error(call("expand", F32, &[3], &[list(&[-1.0])]));
    }

    #[test]
    fn pad_resolution_and_errors() {
        let (s, op) = call(
            "pad",
            DataType::Int8,
            &[2, 3],
            &[
                list(&[1.0, 0.0]),
                list(&[0.0, 2.0]),
                opts(&[("value", num(300.0))]),
            ],
        )
        .unwrap();
        assert_eq!(s, vec![vec![3, 5]]);
        assert_eq!(
            op,
            MovementOp::Pad {
                begin: vec![1, 0],
                end: vec![0, 2],
                mode: PadMode::Constant,
                // Cast clamps to the int8 range.
                value: MlNumber::BigInt(127),
            }
        );
        let refl = opts(&[("mode", Val::String("reflection".into()))]);
        call(
            "pad",
            F32,
            &[3],
            &[list(&[2.0]), list(&[2.0]), refl.clone()],
        )
        .unwrap();
        // Reflection needs padding < the dimension size.
        type_error(call(
            "pad",
            F32,
            &[3],
            &[list(&[3.0]), list(&[0.0]), refl.clone()],
        ));
        type_error(call("pad", F32, &[3], &[list(&[0.0]), list(&[3.0]), refl]));
        // "symmetric" left the spec (#843): an unknown mode now.
        let sym = opts(&[("mode", Val::String("symmetric".into()))]);
        type_error(call("pad", F32, &[3], &[list(&[1.0]), list(&[1.0]), sym]));
        let edge = opts(&[("mode", Val::String("edge".into()))]);
        call("pad", F32, &[1], &[list(&[9.0]), list(&[9.0]), edge]).unwrap();
        let bad = opts(&[("mode", Val::String("wrap".into()))]);
        type_error(call("pad", F32, &[3], &[list(&[0.0]), list(&[0.0]), bad]));
        type_error(call("pad", F32, &[], &[list(&[]), list(&[])]));
        type_error(call("pad", F32, &[3], &[list(&[1.0, 1.0]), list(&[1.0])]));
        assert_eq!(
            cast_number(DataType::Uint8, MlNumber::Double(2.5)),
            MlNumber::BigInt(2)
        );
        assert_eq!(
            cast_number(DataType::Int32, MlNumber::Double(f64::NAN)),
            MlNumber::BigInt(0)
        );
        assert_eq!(
            cast_number(DataType::Int64, MlNumber::Double(1e300)),
            MlNumber::BigInt(i64::MAX as i128)
        );
        assert_eq!(
            cast_number(DataType::Uint4, MlNumber::BigInt(-3)),
            MlNumber::BigInt(0)
        );
        assert_eq!(
            cast_number(DataType::Float16, MlNumber::Double(0.1)),
            MlNumber::Double(0.0999755859375)
        );
    }

    #[test]
    fn reverse_split_tile_triangular() {
        let (_, op) = call("reverse", F32, &[2, 3, 4], &[]).unwrap();
        assert_eq!(
            op,
            MovementOp::Reverse {
                axes: vec![0, 1, 2]
            }
        );
        let (_, op) = call("reverse", F32, &[2, 3], &[opts(&[("axes", list(&[]))])]).unwrap();
        assert_eq!(op, MovementOp::Reverse { axes: vec![] });
        type_error(call(
            "reverse",
            F32,
            &[2, 3],
            &[opts(&[("axes", list(&[2.0]))])],
        ));
        type_error(call(
            "reverse",
            F32,
            &[2, 3],
            &[opts(&[("axes", list(&[1.0, 1.0]))])],
        ));

        let (s, op) = call("split", F32, &[6, 4], &[num(3.0)]).unwrap();
        assert_eq!(s, vec![vec![2, 4]; 3]);
        assert_eq!(
            op,
            MovementOp::Split {
                axis: 0,
                sizes: vec![2, 2, 2]
            }
        );
        let (s, _) = call(
            "split",
            F32,
            &[6, 4],
            &[list(&[1.0, 3.0]), opts(&[("axis", num(1.0))])],
        )
        .unwrap();
        assert_eq!(s, vec![vec![6, 1], vec![6, 3]]);
        type_error(call("split", F32, &[6, 4], &[num(4.0)]));
        type_error(call("split", F32, &[6, 4], &[num(0.0)]));
        type_error(call("split", F32, &[6, 4], &[list(&[2.0, 0.0, 4.0])]));
        type_error(call("split", F32, &[6, 4], &[list(&[2.0, 2.0])]));
        type_error(call(
            "split",
            F32,
            &[6, 4],
            &[num(2.0), opts(&[("axis", num(2.0))])],
        ));
        type_error(call("split", F32, &[], &[num(1.0)]));

        let (s, _) = call("tile", DataType::Uint4, &[2, 3], &[list(&[3.0, 1.0])]).unwrap();
        assert_eq!(s, vec![vec![6, 3]]);
        type_error(call("tile", F32, &[2, 3], &[list(&[1.0])]));
        type_error(call("tile", F32, &[2, 3], &[list(&[1.0, 0.0])]));

        let (_, op) = call("triangular", F32, &[2, 2], &[]).unwrap();
        assert_eq!(
            op,
            MovementOp::Triangular {
                upper: true,
                diagonal: 0
            }
        );
        let (_, op) = call(
            "triangular",
            DataType::Uint64,
            &[2, 2, 2],
            &[opts(&[
                ("upper", Val::Bool(false)),
                ("diagonal", num(-5.0)),
            ])],
        )
        .unwrap();
        assert_eq!(
            op,
            MovementOp::Triangular {
                upper: false,
                diagonal: -5
            }
        );
        type_error(call("triangular", F32, &[4], &[]));
        type_error(call(
            "triangular",
            F32,
            &[2, 2],
            &[opts(&[("diagonal", num(0.5))])],
        ));
    }

    #[test]
    fn resample2d_shapes_and_errors() {
        let x = [1, 2, 3, 5];
        let (s, op) = call("resample2d", F32, &x, &[]).unwrap();
        assert_eq!(s, vec![x.to_vec()]);
        assert_eq!(
            op,
            MovementOp::Resample2d {
                linear: false,
                axes: [2, 3]
            }
        );
        // floor(3 * 1.5) = 4, floor(5 * 0.5) = 2.
        let (s, _) = call(
            "resample2d",
            DataType::Float16,
            &x,
            &[opts(&[("scales", list(&[1.5, 0.5]))])],
        )
        .unwrap();
        assert_eq!(s, vec![vec![1, 2, 4, 2]]);
        // sizes win over scales; axes in any order.
        let (s, op) = call(
            "resample2d",
            F32,
            &x,
            &[opts(&[
                ("mode", Val::String("linear".into())),
                ("scales", list(&[9.0, 9.0])),
                ("sizes", list(&[7.0, 4.0])),
                ("axes", list(&[3.0, 0.0])),
            ])],
        )
        .unwrap();
        assert_eq!(s, vec![vec![4, 2, 3, 7]]);
        assert_eq!(
            op,
            MovementOp::Resample2d {
                linear: true,
                axes: [3, 0]
            }
        );
        let bad = |o: Val| type_error(call("resample2d", F32, &x, &[o]));
        bad(opts(&[("scales", list(&[1.0]))]));
        bad(opts(&[("scales", list(&[1.0, 0.0]))]));
        bad(opts(&[("scales", list(&[1.0, -2.0]))]));
        bad(opts(&[("scales", list(&[1.0, f64::INFINITY]))]));
        // floor(5 * 0.1) = 0 is not a valid dimension.
        bad(opts(&[("scales", list(&[1.0, 0.1]))]));
        bad(opts(&[("sizes", list(&[1.0, 0.0]))]));
        bad(opts(&[("sizes", list(&[1.0, 2.0, 3.0]))]));
        bad(opts(&[("axes", list(&[1.0, 1.0]))]));
        bad(opts(&[("axes", list(&[1.0, 4.0]))]));
        bad(opts(&[("axes", list(&[1.0]))]));
        bad(opts(&[("mode", Val::String("cubic".into()))]));
        type_error(call("resample2d", F32, &[1, 2, 3], &[]));
        type_error(call("resample2d", DataType::Int32, &x, &[]));
        // int8 and uint8 are allowed since #891.
        call("resample2d", DataType::Int8, &x, &[]).unwrap();
        call("resample2d", DataType::Uint8, &x, &[]).unwrap();
    }
}

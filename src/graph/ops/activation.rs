//! Activations with parameters (elu, gelu, hardSigmoid, hardSwish, leakyRelu,
//! linear, softplus, softsign), prelu and where.
//!
//! Spec: the sections of those names in webmachinelearning/webnn `index.bs`.
//! Scalar options are `double`s (finite, else a TypeError) "cast to the
//! input's data type": they are stored here already rounded to it.

use super::{
    arg, broadcast_shapes, check, lim, OpDef, OperandLimit, ALL_TYPES, FLOATS, MAX_RANK, SIGNED,
};
use crate::error::Result;
use crate::f16::{f16_to_f32, f32_to_f16};
use crate::graph::args::{Ctx, Val};
use crate::graph::{GraphBuilder, OperandId};
use crate::types::{DataType, OperandDescriptor};

/// The resolved operators of this family. Input: input, except prelu
/// (input, slope) and where (condition, trueValue, falseValue), which
/// broadcast their inputs to the output.
#[derive(Debug, Clone, PartialEq)]
pub enum ActivationOp {
    /// `x > 0 ? x : alpha * (exp(x) - 1)`.
    Elu { alpha: f64 },
    /// `0.5 * x * (1 + erf(x / sqrt(2)))`.
    Gelu,
    /// `max(0, min(1, alpha * x + beta))`.
    HardSigmoid { alpha: f64, beta: f64 },
    /// `x * max(0, min(6, x + 3)) / 6`.
    HardSwish,
    /// `x >= 0 ? x : alpha * x`.
    LeakyRelu { alpha: f64 },
    /// `alpha * x + beta`.
    Linear { alpha: f64, beta: f64 },
    /// `ln(1 + exp(x))`.
    Softplus,
    /// `x / (1 + |x|)`.
    Softsign,
    /// `x >= 0 ? x : slope * x`, input and slope broadcast.
    Prelu,
    /// `condition != 0 ? trueValue : falseValue`, all three broadcast.
    Where,
}

impl ActivationOp {
    pub fn name(&self) -> &'static str {
        match self {
            ActivationOp::Elu { .. } => "elu",
            ActivationOp::Gelu => "gelu",
            ActivationOp::HardSigmoid { .. } => "hardSigmoid",
            ActivationOp::HardSwish => "hardSwish",
            ActivationOp::LeakyRelu { .. } => "leakyRelu",
            ActivationOp::Linear { .. } => "linear",
            ActivationOp::Softplus => "softplus",
            ActivationOp::Softsign => "softsign",
            ActivationOp::Prelu => "prelu",
            ActivationOp::Where => "where",
        }
    }
}

/// Casts a scalar option to the input's float type ("cast |options|.alpha
/// to |input|'s dataType").
fn cast_to(dt: DataType, v: f64) -> f64 {
    match dt {
        DataType::Float16 => f16_to_f32(f32_to_f16(v as f32)) as f64,
        _ => v as f32 as f64,
    }
}

/// Reads a `double` option with its default, cast to `dt`.
fn scalar(ctx: &Ctx, opts: &Val, key: &str, default: f64, dt: DataType) -> Result<f64> {
    Ok(cast_to(dt, ctx.finite_or(opts.member(key), key, default)?))
}

const FLOAT_OPERANDS: &[OperandLimit] = &[
    lim("input", FLOATS, 0, MAX_RANK),
    lim("output", FLOATS, 0, MAX_RANK),
];

/// The float activations: validate the input, read the options, copy the
/// input's descriptor to the output.
fn activation(
    b: &mut GraphBuilder,
    args: &[Val],
    name: &'static str,
    resolve: fn(&Ctx, &Val, DataType) -> Result<ActivationOp>,
) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new(name);
    let opts = ctx.options(arg(args, 1))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let d = b.desc(x).clone();
    check(&ctx, "input", &d)?;
    let op = resolve(&ctx, opts, d.data_type)?;
    Ok(b.push(op, vec![x], vec![d], ctx.label))
}

macro_rules! activations {
    ($($konst:ident, $name:literal, $f:ident, |$ctx:ident, $opts:ident, $dt:ident| $resolve:expr;)*) => {$(
        fn $f(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
            #[allow(unused_variables)]
            fn resolve($ctx: &Ctx, $opts: &Val, $dt: DataType) -> Result<ActivationOp> {
                Ok($resolve)
            }
            activation(b, args, $name, resolve)
        }
        pub const $konst: OpDef = OpDef { name: $name, build: $f, operands: FLOAT_OPERANDS };
    )*};
}

activations! {
    ELU, "elu", build_elu, |ctx, o, dt| ActivationOp::Elu {
        alpha: scalar(ctx, o, "alpha", 1.0, dt)?,
    };
    GELU, "gelu", build_gelu, |ctx, o, dt| ActivationOp::Gelu;
    HARD_SIGMOID, "hardSigmoid", build_hard_sigmoid, |ctx, o, dt| ActivationOp::HardSigmoid {
        alpha: scalar(ctx, o, "alpha", 0.2, dt)?,
        beta: scalar(ctx, o, "beta", 0.5, dt)?,
    };
    HARD_SWISH, "hardSwish", build_hard_swish, |ctx, o, dt| ActivationOp::HardSwish;
    LEAKY_RELU, "leakyRelu", build_leaky_relu, |ctx, o, dt| ActivationOp::LeakyRelu {
        alpha: scalar(ctx, o, "alpha", 0.01, dt)?,
    };
    LINEAR, "linear", build_linear, |ctx, o, dt| ActivationOp::Linear {
        alpha: scalar(ctx, o, "alpha", 1.0, dt)?,
        beta: scalar(ctx, o, "beta", 0.0, dt)?,
    };
    SOFTPLUS, "softplus", build_softplus, |ctx, o, dt| ActivationOp::Softplus;
    SOFTSIGN, "softsign", build_softsign, |ctx, o, dt| ActivationOp::Softsign;
}

/// `prelu(input, slope, options)`.
fn build_prelu(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("prelu");
    ctx.options(arg(args, 2))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let s = b.operand(&ctx, arg(args, 1), "slope")?;
    let (dx, ds) = (b.desc(x), b.desc(s));
    check(&ctx, "input", dx)?;
    check(&ctx, "slope", ds)?;
    if ds.data_type != dx.data_type {
        return Err(ctx.err(format!(
            "slope must have the data type of input ({} vs {})",
            ds.data_type.name(),
            dx.data_type.name()
        )));
    }
    let shape = broadcast_shapes(&ds.shape, &dx.shape).ok_or_else(|| {
        ctx.err(format!(
            "the shapes of slope {:?} and input {:?} do not broadcast",
            ds.shape, dx.shape
        ))
    })?;
    let out = OperandDescriptor::new(dx.data_type, shape).map_err(|e| ctx.err(e.message))?;
    Ok(b.push(ActivationOp::Prelu, vec![x, s], vec![out], ctx.label))
}

pub const PRELU: OpDef = OpDef {
    name: "prelu",
    build: build_prelu,
    operands: &[
        lim("input", SIGNED, 0, MAX_RANK),
        lim("slope", SIGNED, 0, MAX_RANK),
        lim("output", SIGNED, 0, MAX_RANK),
    ],
};

/// `where(condition, trueValue, falseValue, options)`.
fn build_where(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("where");
    ctx.options(arg(args, 3))?;
    let c = b.operand(&ctx, arg(args, 0), "condition")?;
    let t = b.operand(&ctx, arg(args, 1), "trueValue")?;
    let f = b.operand(&ctx, arg(args, 2), "falseValue")?;
    let (dc, dt, df) = (b.desc(c), b.desc(t), b.desc(f));
    check(&ctx, "condition", dc)?;
    check(&ctx, "trueValue", dt)?;
    check(&ctx, "falseValue", df)?;
    if df.data_type != dt.data_type {
        return Err(ctx.err(format!(
            "falseValue must have the data type of trueValue ({} vs {})",
            df.data_type.name(),
            dt.data_type.name()
        )));
    }
    let shape = broadcast_shapes(&dt.shape, &df.shape).ok_or_else(|| {
        ctx.err(format!(
            "the shapes of trueValue {:?} and falseValue {:?} do not broadcast",
            dt.shape, df.shape
        ))
    })?;
    let shape = broadcast_shapes(&dc.shape, &shape).ok_or_else(|| {
        ctx.err(format!(
            "the shape of condition {:?} does not broadcast with {shape:?}",
            dc.shape
        ))
    })?;
    let out = OperandDescriptor::new(dt.data_type, shape).map_err(|e| ctx.err(e.message))?;
    Ok(b.push(ActivationOp::Where, vec![c, t, f], vec![out], ctx.label))
}

pub const WHERE: OpDef = OpDef {
    name: "where",
    build: build_where,
    operands: &[
        lim("condition", &[DataType::Uint8], 0, MAX_RANK),
        lim("trueValue", ALL_TYPES, 0, MAX_RANK),
        lim("falseValue", ALL_TYPES, 0, MAX_RANK),
        lim("output", ALL_TYPES, 0, MAX_RANK),
    ],
};

/// This family's builder methods.
pub const DEFS: &[OpDef] = &[
    ELU,
    GELU,
    HARD_SIGMOID,
    HARD_SWISH,
    LEAKY_RELU,
    LINEAR,
    SOFTPLUS,
    SOFTSIGN,
    PRELU,
    WHERE,
];

#[cfg(test)]
mod tests {
    use super::super::testing::input;
    use super::*;

    fn opts(kv: &[(&str, Val)]) -> Val {
        Val::Dict(kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
    }

    /// The resolved operator of `name` on a [2] input of type `dt`.
    fn op_of(name: &str, dt: DataType, options: Option<Val>) -> ActivationOp {
        let mut b = GraphBuilder::new();
        let x = input(&mut b, "x", dt, &[2]);
        let mut args = vec![x];
        args.extend(options);
        let out = b.call(name, &args).unwrap();
        let g = b.build(vec![("o".to_string(), out[0])]).unwrap();
        ActivationOp::try_from(g.nodes.last().unwrap().op.clone())
            .unwrap_or_else(|other| panic!("{other:?}"))
    }

    #[test]
    fn defaults_and_casts() {
        let f = DataType::Float32;
        assert_eq!(op_of("elu", f, None), ActivationOp::Elu { alpha: 1.0 });
        assert_eq!(
            op_of("hardSigmoid", f, None),
            ActivationOp::HardSigmoid {
                alpha: 0.2f32 as f64,
                beta: 0.5
            }
        );
        assert_eq!(
            op_of("leakyRelu", f, None),
            ActivationOp::LeakyRelu {
                alpha: 0.01f32 as f64
            }
        );
        assert_eq!(
            op_of("linear", f, None),
            ActivationOp::Linear {
                alpha: 1.0,
                beta: 0.0
            }
        );
        // float16: 0.1 rounds to 0.0999755859375.
        assert_eq!(
            op_of(
                "leakyRelu",
                DataType::Float16,
                Some(opts(&[("alpha", Val::Number(0.1))]))
            ),
            ActivationOp::LeakyRelu {
                alpha: 0.0999755859375
            }
        );
    }

    #[test]
    fn validation_errors() {
        let mut b = GraphBuilder::new();
        let x = input(&mut b, "x", DataType::Float32, &[2, 3]);
        let i = input(&mut b, "i", DataType::Int32, &[2, 3]);
        let u = input(&mut b, "u", DataType::Uint8, &[3]);
        let s = input(&mut b, "s", DataType::Float32, &[4]);
        // Float-only activations refuse integers.
        for name in ["elu", "gelu", "hardSwish", "softplus", "softsign"] {
            assert!(b.call(name, std::slice::from_ref(&i)).is_err(), "{name}");
        }
        // Non-finite or non-number options.
        assert!(b
            .call(
                "elu",
                &[x.clone(), opts(&[("alpha", Val::Number(f64::NAN))])]
            )
            .is_err());
        assert!(b
            .call(
                "linear",
                &[x.clone(), opts(&[("beta", Val::String("1".into()))])]
            )
            .is_err());
        // prelu: types must match, shapes must broadcast, uint8 refused.
        assert!(b.call("prelu", &[x.clone(), i.clone()]).is_err());
        assert!(b.call("prelu", &[x.clone(), s.clone()]).is_err());
        assert!(b.call("prelu", &[u.clone(), u.clone()]).is_err());
        let out = b.call("prelu", &[i.clone(), i.clone()]).unwrap();
        assert_eq!(b.desc(out[0]).shape, vec![2, 3]);
        // Bidirectional: a slope larger than the input widens the output.
        let big = input(&mut b, "big", DataType::Float32, &[4, 2, 3]);
        let out = b.call("prelu", &[x.clone(), big]).unwrap();
        assert_eq!(b.desc(out[0]).shape, vec![4, 2, 3]);
        // where: condition uint8, values of one type, shapes broadcast.
        assert!(b.call("where", &[x.clone(), x.clone(), x.clone()]).is_err());
        assert!(b.call("where", &[u.clone(), x.clone(), i.clone()]).is_err());
        assert!(b.call("where", &[u.clone(), x.clone(), s.clone()]).is_err());
        let c = input(&mut b, "c", DataType::Uint8, &[5, 1, 1]);
        let out = b.call("where", &[c, x.clone(), u.clone()]);
        assert!(out.is_err());
        let c = input(&mut b, "c2", DataType::Uint8, &[5, 1, 1]);
        let out = b.call("where", &[c, i.clone(), i]).unwrap();
        assert_eq!(b.desc(out[0]).shape, vec![5, 2, 3]);
        assert_eq!(b.desc(out[0]).data_type, DataType::Int32);
    }
}

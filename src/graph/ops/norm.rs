//! batchNormalization, instanceNormalization, layerNormalization.

use super::{arg, check, lim, OpDef, FLOATS, MAX_RANK};
use crate::error::Result;
use crate::graph::args::{Ctx, Val};
use crate::graph::{GraphBuilder, OperandId};
use crate::types::{DataType, OperandDescriptor};

/// The resolved operators of this family. Inputs are listed on each
/// variant; the optional scale and bias follow in that order when present.
#[derive(Debug, Clone, PartialEq)]
pub enum NormOp {
    /// Inputs: input, mean, variance, [scale], [bias].
    Batch {
        axis: usize,
        /// Already cast to the input's data type.
        epsilon: f32,
        has_scale: bool,
        has_bias: bool,
    },
    /// Inputs: input, [scale], [bias]. Input is 4-D; statistics over the
    /// spatial dimensions of each (batch, channel).
    Instance {
        nhwc: bool,
        epsilon: f32,
        has_scale: bool,
        has_bias: bool,
    },
    /// Inputs: input, [scale], [bias]. Statistics over `axes`; scale and
    /// bias have the sizes of `axes`, in the order of `axes`.
    Layer {
        axes: Vec<usize>,
        epsilon: f32,
        has_scale: bool,
        has_bias: bool,
    },
}

impl NormOp {
    pub fn name(&self) -> &'static str {
        match self {
            NormOp::Batch { .. } => "batchNormalization",
            NormOp::Instance { .. } => "instanceNormalization",
            NormOp::Layer { .. } => "layerNormalization",
        }
    }
}

/// "Casting" epsilon to the input's data type: float16 rounds it to the
/// nearest float16 value.
fn cast_epsilon(eps: f64, dt: DataType) -> f32 {
    match dt {
        DataType::Float16 => crate::f16::f16_to_f32(crate::f16::f32_to_f16(eps as f32)),
        _ => eps as f32,
    }
}

/// Checks an optional 1-D scale/bias operand: allowed type, same type as
/// the input, shape `[size]`.
fn check_vector(
    b: &GraphBuilder,
    ctx: &Ctx,
    id: Option<OperandId>,
    what: &str,
    input: &OperandDescriptor,
    size: usize,
) -> Result<()> {
    if let Some(id) = id {
        let d = b.desc(id);
        check(ctx, what, d)?;
        if d.data_type != input.data_type {
            return Err(ctx.err(format!(
                "{what} has data type {}, not the input's {}",
                d.data_type.name(),
                input.data_type.name()
            )));
        }
        if d.shape != [size] {
            return Err(ctx.err(format!(
                "{what} must have shape [{size}], not {:?}",
                d.shape
            )));
        }
    }
    Ok(())
}

/// `batchNormalization(input, mean, variance, options)`.
fn build_batch_normalization(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("batchNormalization");
    let opts = ctx.options(arg(args, 3))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let mean = b.operand(&ctx, arg(args, 1), "mean")?;
    let var = b.operand(&ctx, arg(args, 2), "variance")?;
    let scale = b.opt_operand(&ctx, opts.member("scale"), "scale")?;
    let bias = b.opt_operand(&ctx, opts.member("bias"), "bias")?;
    let axis = ctx.u32_or(opts.member("axis"), "axis", 1)? as usize;
    let epsilon = ctx.finite_or(opts.member("epsilon"), "epsilon", 1e-5)?;
    let di = b.desc(x).clone();
    check(&ctx, "input", &di)?;
    if axis >= di.rank() {
        return Err(ctx.err(format!(
            "axis {axis} is out of range for an input of rank {}",
            di.rank()
        )));
    }
    let size = di.shape[axis];
    check_vector(b, &ctx, Some(mean), "mean", &di, size)?;
    check_vector(b, &ctx, Some(var), "variance", &di, size)?;
    check_vector(b, &ctx, scale, "scale", &di, size)?;
    check_vector(b, &ctx, bias, "bias", &di, size)?;
    let mut inputs = vec![x, mean, var];
    inputs.extend(scale);
    inputs.extend(bias);
    let op = NormOp::Batch {
        axis,
        epsilon: cast_epsilon(epsilon, di.data_type),
        has_scale: scale.is_some(),
        has_bias: bias.is_some(),
    };
    Ok(b.push(op, inputs, vec![di], ctx.label))
}

/// `instanceNormalization(input, options)`.
fn build_instance_normalization(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("instanceNormalization");
    let opts = ctx.options(arg(args, 1))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let scale = b.opt_operand(&ctx, opts.member("scale"), "scale")?;
    let bias = b.opt_operand(&ctx, opts.member("bias"), "bias")?;
    let epsilon = ctx.finite_or(opts.member("epsilon"), "epsilon", 1e-5)?;
    let nhwc = ctx.enum_or(opts.member("layout"), "layout", &["nchw", "nhwc"], "nchw")? == "nhwc";
    let di = b.desc(x).clone();
    check(&ctx, "input", &di)?;
    let size = di.shape[if nhwc { 3 } else { 1 }];
    check_vector(b, &ctx, scale, "scale", &di, size)?;
    check_vector(b, &ctx, bias, "bias", &di, size)?;
    let mut inputs = vec![x];
    inputs.extend(scale);
    inputs.extend(bias);
    let op = NormOp::Instance {
        nhwc,
        epsilon: cast_epsilon(epsilon, di.data_type),
        has_scale: scale.is_some(),
        has_bias: bias.is_some(),
    };
    Ok(b.push(op, inputs, vec![di], ctx.label))
}

/// `layerNormalization(input, options)`.
fn build_layer_normalization(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("layerNormalization");
    let opts = ctx.options(arg(args, 1))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let scale = b.opt_operand(&ctx, opts.member("scale"), "scale")?;
    let bias = b.opt_operand(&ctx, opts.member("bias"), "bias")?;
    let axes = ctx.opt_u32_list(opts.member("axes"), "axes")?;
    let epsilon = ctx.finite_or(opts.member("epsilon"), "epsilon", 1e-5)?;
    let di = b.desc(x).clone();
    check(&ctx, "input", &di)?;
    let rank = di.rank();
    let axes: Vec<usize> = match axes {
        // Every dimension but the first (none for rank 0 or 1).
        None => (1..rank.max(1)).collect(),
        Some(a) => {
            let a: Vec<usize> = a.into_iter().map(|v| v as usize).collect();
            for (i, &v) in a.iter().enumerate() {
                if v >= rank {
                    return Err(ctx.err(format!(
                        "axes[{i}] ({v}) is out of range for an input of rank {rank}"
                    )));
                }
                if a[..i].contains(&v) {
                    return Err(ctx.err(format!("axes contains {v} twice")));
                }
            }
            a
        }
    };
    let expect: Vec<usize> = axes.iter().map(|&a| di.shape[a]).collect();
    for (id, what) in [(scale, "scale"), (bias, "bias")] {
        let Some(id) = id else { continue };
        let d = b.desc(id);
        check(&ctx, what, d)?;
        if d.data_type != di.data_type {
            return Err(ctx.err(format!(
                "{what} has data type {}, not the input's {}",
                d.data_type.name(),
                di.data_type.name()
            )));
        }
        if d.rank() != axes.len() {
            return Err(ctx.err(format!(
                "{what} has rank {}, but axes has {} values",
                d.rank(),
                axes.len()
            )));
        }
        if d.shape != expect {
            return Err(ctx.err(format!(
                "{what} must have shape {expect:?} (the input's sizes along axes), not {:?}",
                d.shape
            )));
        }
    }
    let mut inputs = vec![x];
    inputs.extend(scale);
    inputs.extend(bias);
    let op = NormOp::Layer {
        axes,
        epsilon: cast_epsilon(epsilon, di.data_type),
        has_scale: scale.is_some(),
        has_bias: bias.is_some(),
    };
    Ok(b.push(op, inputs, vec![di], ctx.label))
}

pub const BATCH_NORMALIZATION: OpDef = OpDef {
    name: "batchNormalization",
    build: build_batch_normalization,
    operands: &[
        // Rank 1 or more: the axis must name a dimension (#882).
        lim("input", FLOATS, 1, MAX_RANK),
        lim("mean", FLOATS, 1, 1),
        lim("variance", FLOATS, 1, 1),
        lim("scale", FLOATS, 1, 1),
        lim("bias", FLOATS, 1, 1),
        lim("output", FLOATS, 1, MAX_RANK),
    ],
};

pub const INSTANCE_NORMALIZATION: OpDef = OpDef {
    name: "instanceNormalization",
    build: build_instance_normalization,
    operands: &[
        lim("input", FLOATS, 4, 4),
        lim("scale", FLOATS, 1, 1),
        lim("bias", FLOATS, 1, 1),
        lim("output", FLOATS, 4, 4),
    ],
};

pub const LAYER_NORMALIZATION: OpDef = OpDef {
    name: "layerNormalization",
    build: build_layer_normalization,
    operands: &[
        lim("input", FLOATS, 0, MAX_RANK),
        lim("scale", FLOATS, 0, MAX_RANK),
        lim("bias", FLOATS, 0, MAX_RANK),
        lim("output", FLOATS, 0, MAX_RANK),
    ],
};

/// This family's builder methods.
pub const DEFS: &[OpDef] = &[
    BATCH_NORMALIZATION,
    INSTANCE_NORMALIZATION,
    LAYER_NORMALIZATION,
];

#[cfg(test)]
mod tests {
    use super::super::testing::{err, input};
    use super::*;

    fn dict(items: Vec<(&str, Val)>) -> Val {
        Val::Dict(items.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
    }

    fn nums(v: &[u32]) -> Val {
        Val::List(v.iter().map(|&x| Val::Number(x as f64)).collect())
    }

    #[test]
    fn batch_norm_validation() {
        let mut b = GraphBuilder::new();
        let x = input(&mut b, "x", DataType::Float32, &[2, 3, 4]);
        let m3 = input(&mut b, "m", DataType::Float32, &[3]);
        let m4 = input(&mut b, "m4", DataType::Float32, &[4]);
        let h3 = input(&mut b, "h", DataType::Float16, &[3]);
        let ok = b
            .call("batchNormalization", &[x.clone(), m3.clone(), m3.clone()])
            .unwrap();
        assert_eq!(b.desc(ok[0]).shape, vec![2, 3, 4]);
        // axis 2 takes the size 4.
        b.call(
            "batchNormalization",
            &[
                x.clone(),
                m4.clone(),
                m4.clone(),
                dict(vec![("axis", Val::Number(2.0))]),
            ],
        )
        .unwrap();
        assert!(err(b.call(
            "batchNormalization",
            &[
                x.clone(),
                m3.clone(),
                m3.clone(),
                dict(vec![("axis", Val::Number(3.0))])
            ]
        ))
        .contains("axis"));
        assert!(
            err(b.call("batchNormalization", &[x.clone(), m4.clone(), m3.clone()]))
                .contains("mean")
        );
        assert!(
            err(b.call("batchNormalization", &[x.clone(), m3.clone(), h3.clone()]))
                .contains("variance")
        );
        assert!(err(b.call(
            "batchNormalization",
            &[x.clone(), m3.clone(), m3.clone(), dict(vec![("scale", m4)])]
        ))
        .contains("scale"));
        let i = input(&mut b, "i", DataType::Int32, &[2, 3]);
        assert!(b.call("batchNormalization", &[i, m3.clone(), m3]).is_err());
    }

    #[test]
    fn instance_norm_validation() {
        let mut b = GraphBuilder::new();
        let x = input(&mut b, "x", DataType::Float16, &[1, 2, 3, 5]);
        let s2 = input(&mut b, "s2", DataType::Float16, &[2]);
        let s5 = input(&mut b, "s5", DataType::Float16, &[5]);
        b.call(
            "instanceNormalization",
            &[x.clone(), dict(vec![("scale", s2.clone())])],
        )
        .unwrap();
        b.call(
            "instanceNormalization",
            &[
                x.clone(),
                dict(vec![
                    ("bias", s5.clone()),
                    ("layout", Val::String("nhwc".into())),
                ]),
            ],
        )
        .unwrap();
        assert!(err(b.call(
            "instanceNormalization",
            &[x.clone(), dict(vec![("bias", s5)])]
        ))
        .contains("bias"));
        let x3 = input(&mut b, "x3", DataType::Float16, &[1, 2, 3]);
        assert!(err(b.call("instanceNormalization", &[x3])).contains("rank"));
        assert!(b
            .call(
                "instanceNormalization",
                &[x, dict(vec![("layout", Val::String("nwhc".into()))])]
            )
            .is_err());
    }

    #[test]
    fn layer_norm_validation() {
        let mut b = GraphBuilder::new();
        let x = input(&mut b, "x", DataType::Float32, &[2, 3, 4]);
        let s34 = input(&mut b, "s34", DataType::Float32, &[3, 4]);
        let s43 = input(&mut b, "s43", DataType::Float32, &[4, 3]);
        // Default axes [1, 2].
        b.call(
            "layerNormalization",
            &[x.clone(), dict(vec![("scale", s34.clone())])],
        )
        .unwrap();
        assert!(err(b.call(
            "layerNormalization",
            &[x.clone(), dict(vec![("scale", s43.clone())])]
        ))
        .contains("scale"));
        // Scale follows the order of axes.
        b.call(
            "layerNormalization",
            &[
                x.clone(),
                dict(vec![("bias", s43.clone()), ("axes", nums(&[2, 1]))]),
            ],
        )
        .unwrap();
        assert!(err(b.call(
            "layerNormalization",
            &[x.clone(), dict(vec![("axes", nums(&[1, 1]))])]
        ))
        .contains("twice"));
        assert!(err(b.call(
            "layerNormalization",
            &[x.clone(), dict(vec![("axes", nums(&[3]))])]
        ))
        .contains("out of range"));
        assert!(err(b.call(
            "layerNormalization",
            &[x, dict(vec![("scale", s34), ("axes", nums(&[2]))])]
        ))
        .contains("rank"));
        // A scalar input has no default axes.
        let s = input(&mut b, "s", DataType::Float32, &[]);
        b.call("layerNormalization", &[s]).unwrap();
    }
}

//! Reductions (reduceL1 ... reduceSumSquare), argMin/argMax, cumulativeSum.
//!
//! Spec: "Reduction operations", "argMin/argMax operations" and
//! `cumulativeSum()` of webmachinelearning/webnn `index.bs`.

use super::{arg, check, lim, OpDef, OperandLimit, ALL_TYPES, FLOATS, MAX_RANK};
use crate::error::Result;
use crate::graph::args::{Ctx, Val};
use crate::graph::{GraphBuilder, OperandId};
use crate::types::{DataType, OperandDescriptor};

/// The reduction function of a `reduce*` operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceKind {
    L1,
    L2,
    LogSum,
    LogSumExp,
    Max,
    Mean,
    Min,
    Product,
    Sum,
    SumSquare,
}

impl ReduceKind {
    pub fn name(self) -> &'static str {
        match self {
            ReduceKind::L1 => "reduceL1",
            ReduceKind::L2 => "reduceL2",
            ReduceKind::LogSum => "reduceLogSum",
            ReduceKind::LogSumExp => "reduceLogSumExp",
            ReduceKind::Max => "reduceMax",
            ReduceKind::Mean => "reduceMean",
            ReduceKind::Min => "reduceMin",
            ReduceKind::Product => "reduceProduct",
            ReduceKind::Sum => "reduceSum",
            ReduceKind::SumSquare => "reduceSumSquare",
        }
    }
}

/// The resolved operators of this family. Each has one input (`input`) and
/// one output.
#[derive(Debug, Clone, PartialEq)]
pub enum ReduceOp {
    /// `axes` are the reduced input axes, sorted, without duplicates (all
    /// axes when the option was absent; empty means every element is
    /// reduced on its own). `keep_dimensions` only affects the output shape.
    Reduce {
        kind: ReduceKind,
        axes: Vec<usize>,
        keep_dimensions: bool,
    },
    /// argMin (`max == false`) / argMax along `axis`; the output type
    /// (int32 or int64) is the output descriptor's.
    ArgMinMax {
        max: bool,
        axis: usize,
        keep_dimensions: bool,
    },
    CumulativeSum {
        axis: usize,
        exclusive: bool,
        reversed: bool,
    },
}

impl ReduceOp {
    pub fn name(&self) -> &'static str {
        match self {
            ReduceOp::Reduce { kind, .. } => kind.name(),
            ReduceOp::ArgMinMax { max: false, .. } => "argMin",
            ReduceOp::ArgMinMax { max: true, .. } => "argMax",
            ReduceOp::CumulativeSum { .. } => "cumulativeSum",
        }
    }
}

/// "Calculate reduction output sizes": `None` (all axes) or the given axes,
/// which must be in range and distinct. Returns the sorted reduced axes and
/// the output shape.
fn reduction_sizes(
    ctx: &Ctx,
    shape: &[usize],
    axes: Option<Vec<u32>>,
    keep_dimensions: bool,
) -> Result<(Vec<usize>, Vec<usize>)> {
    let rank = shape.len();
    let axes: Vec<usize> = match axes {
        None => (0..rank).collect(),
        Some(list) => {
            let mut seen = vec![false; rank];
            let mut out = Vec::with_capacity(list.len());
            for a in list {
                let a = a as usize;
                if a >= rank {
                    return Err(ctx.err(format!(
                        "the axis {a} is out of range for an input of rank {rank}"
                    )));
                }
                if seen[a] {
                    return Err(ctx.err(format!("the axis {a} appears more than once")));
                }
                seen[a] = true;
                out.push(a);
            }
            out.sort_unstable();
            out
        }
    };
    let out_shape = if keep_dimensions {
        let mut s = shape.to_vec();
        for &a in &axes {
            s[a] = 1;
        }
        s
    } else {
        (0..rank)
            .filter(|i| !axes.contains(i))
            .map(|i| shape[i])
            .collect()
    };
    Ok((axes, out_shape))
}

/// "Create reduction operation": the allowed data types are the op's input
/// limit (the spec lists them per operator; reduceMax/reduceMin allow any).
fn reduce(b: &mut GraphBuilder, args: &[Val], kind: ReduceKind) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new(kind.name());
    let opts = ctx.options(arg(args, 1))?;
    let axes = ctx.opt_u32_list(opts.member("axes"), "axes")?;
    let keep_dimensions = ctx.bool_or(opts.member("keepDimensions"), "keepDimensions", false)?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let d = b.desc(x).clone();
    check(&ctx, "input", &d)?;
    let (axes, shape) = reduction_sizes(&ctx, &d.shape, axes, keep_dimensions)?;
    let out = OperandDescriptor::new(d.data_type, shape).map_err(|e| ctx.err(e.message))?;
    let op = ReduceOp::Reduce {
        kind,
        axes,
        keep_dimensions,
    };
    Ok(b.push(op, vec![x], vec![out], ctx.label))
}

/// The types the spec allows for reduceL1/Product/Sum/SumSquare (64-bit
/// integers too, since #695), and for cumulativeSum (8-bit integers were
/// dropped by #912).
const SUM_TYPES: &[DataType] = &[
    DataType::Float32,
    DataType::Float16,
    DataType::Int32,
    DataType::Uint32,
    DataType::Int64,
    DataType::Uint64,
];

macro_rules! reduce_ops {
    ($($konst:ident, $name:literal, $kind:ident, $f:ident, $types:expr;)*) => {$(
        fn $f(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
            reduce(b, args, ReduceKind::$kind)
        }
        pub const $konst: OpDef = OpDef {
            name: $name,
            build: $f,
            operands: &[lim("input", $types, 0, MAX_RANK), lim("output", $types, 0, MAX_RANK)],
        };
    )*};
}

reduce_ops! {
    REDUCE_L1, "reduceL1", L1, build_reduce_l1, SUM_TYPES;
    REDUCE_L2, "reduceL2", L2, build_reduce_l2, FLOATS;
    REDUCE_LOG_SUM, "reduceLogSum", LogSum, build_reduce_log_sum, FLOATS;
    REDUCE_LOG_SUM_EXP, "reduceLogSumExp", LogSumExp, build_reduce_log_sum_exp, FLOATS;
    REDUCE_MAX, "reduceMax", Max, build_reduce_max, ALL_TYPES;
    REDUCE_MEAN, "reduceMean", Mean, build_reduce_mean, FLOATS;
    REDUCE_MIN, "reduceMin", Min, build_reduce_min, ALL_TYPES;
    REDUCE_PRODUCT, "reduceProduct", Product, build_reduce_product, SUM_TYPES;
    REDUCE_SUM, "reduceSum", Sum, build_reduce_sum, SUM_TYPES;
    REDUCE_SUM_SQUARE, "reduceSumSquare", SumSquare, build_reduce_sum_square, SUM_TYPES;
}

/// The index types argMin/argMax can produce.
const INDEX_TYPES: &[DataType] = &[DataType::Int32, DataType::Int64];

const ARG_OPERANDS: &[OperandLimit] = &[
    lim("input", ALL_TYPES, 1, MAX_RANK),
    lim("output", INDEX_TYPES, 0, MAX_RANK),
];

/// "Create an argMin/argMax operation".
fn arg_min_max(b: &mut GraphBuilder, args: &[Val], max: bool) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new(if max { "argMax" } else { "argMin" });
    let opts = ctx.options(arg(args, 2))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let axis = ctx.u32(arg(args, 1), "axis")?;
    let keep_dimensions = ctx.bool_or(opts.member("keepDimensions"), "keepDimensions", false)?;
    let out_type = match opts.member("outputDataType") {
        Val::Undefined => DataType::Int32,
        v => ctx.data_type(v, "outputDataType")?,
    };
    let d = b.desc(x).clone();
    check(&ctx, "input", &d)?;
    if !INDEX_TYPES.contains(&out_type) {
        return Err(ctx.err(format!(
            "outputDataType {} is not supported (int32 or int64)",
            out_type.name()
        )));
    }
    // The largest index must be representable in the output type.
    let limit = match out_type {
        DataType::Int32 => i32::MAX as u64,
        _ => i64::MAX as u64,
    };
    if let Some(&n) = d.shape.get(axis as usize) {
        if n as u64 > limit {
            return Err(ctx.err(format!(
                "the axis size {n} exceeds the largest {} value",
                out_type.name()
            )));
        }
    }
    let (_, shape) = reduction_sizes(&ctx, &d.shape, Some(vec![axis]), keep_dimensions)?;
    let out = OperandDescriptor::new(out_type, shape).map_err(|e| ctx.err(e.message))?;
    let op = ReduceOp::ArgMinMax {
        max,
        axis: axis as usize,
        keep_dimensions,
    };
    Ok(b.push(op, vec![x], vec![out], ctx.label))
}

fn build_arg_min(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    arg_min_max(b, args, false)
}

fn build_arg_max(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    arg_min_max(b, args, true)
}

pub const ARG_MIN: OpDef = OpDef {
    name: "argMin",
    build: build_arg_min,
    operands: ARG_OPERANDS,
};

pub const ARG_MAX: OpDef = OpDef {
    name: "argMax",
    build: build_arg_max,
    operands: ARG_OPERANDS,
};

/// `cumulativeSum(input, axis, options)`.
fn build_cumulative_sum(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let mut ctx = Ctx::new("cumulativeSum");
    let opts = ctx.options(arg(args, 2))?;
    let x = b.operand(&ctx, arg(args, 0), "input")?;
    let axis = ctx.u32(arg(args, 1), "axis")? as usize;
    let exclusive = ctx.bool_or(opts.member("exclusive"), "exclusive", false)?;
    let reversed = ctx.bool_or(opts.member("reversed"), "reversed", false)?;
    let d = b.desc(x).clone();
    check(&ctx, "input", &d)?;
    if axis >= d.rank() {
        return Err(ctx.err(format!(
            "axis {axis} is out of range for an input of rank {}",
            d.rank()
        )));
    }
    let op = ReduceOp::CumulativeSum {
        axis,
        exclusive,
        reversed,
    };
    Ok(b.push(op, vec![x], vec![d], ctx.label))
}

/// The spec allows any data type; a running sum is arithmetic, so the 4-bit
/// types (which would overflow at once) are left out, as for the other
/// arithmetic operators.
pub const CUMULATIVE_SUM: OpDef = OpDef {
    name: "cumulativeSum",
    build: build_cumulative_sum,
    operands: &[
        lim("input", SUM_TYPES, 1, MAX_RANK),
        lim("output", SUM_TYPES, 1, MAX_RANK),
    ],
};

/// This family's builder methods.
pub const DEFS: &[OpDef] = &[
    ARG_MAX,
    ARG_MIN,
    CUMULATIVE_SUM,
    REDUCE_L1,
    REDUCE_L2,
    REDUCE_LOG_SUM,
    REDUCE_LOG_SUM_EXP,
    REDUCE_MAX,
    REDUCE_MEAN,
    REDUCE_MIN,
    REDUCE_PRODUCT,
    REDUCE_SUM,
    REDUCE_SUM_SQUARE,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn builder_with(dt: DataType, shape: &[usize]) -> (GraphBuilder, Val) {
        let mut b = GraphBuilder::new();
        let id = b
            .input("x", OperandDescriptor::new(dt, shape.to_vec()).unwrap())
            .unwrap();
        let v = Val::Operand { builder: b.id, id };
        (b, v)
    }

    fn dict(items: &[(&str, Val)]) -> Val {
        Val::Dict(
            items
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        )
    }

    fn nums(v: &[u32]) -> Val {
        Val::List(v.iter().map(|&x| Val::Number(x as f64)).collect())
    }

    fn out_desc(b: &GraphBuilder, ids: &[OperandId]) -> OperandDescriptor {
        b.desc(ids[0]).clone()
    }

    fn type_error(r: Result<Vec<OperandId>>) -> bool {
        matches!(r, Err(e) if e.kind == ErrorKind::Type)
    }

    #[test]
    fn reduce_shapes() {
        let (mut b, x) = builder_with(DataType::Float32, &[2, 3, 4]);
        let ids = b.call("reduceSum", std::slice::from_ref(&x)).unwrap();
        assert_eq!(out_desc(&b, &ids).shape, Vec::<usize>::new());
        let o = dict(&[("axes", nums(&[2, 0]))]);
        let ids = b.call("reduceMean", &[x.clone(), o]).unwrap();
        assert_eq!(out_desc(&b, &ids).shape, vec![3]);
        let o = dict(&[("axes", nums(&[1])), ("keepDimensions", Val::Bool(true))]);
        let ids = b.call("reduceL2", &[x.clone(), o]).unwrap();
        assert_eq!(out_desc(&b, &ids).shape, vec![2, 1, 4]);
        let o = dict(&[("axes", nums(&[]))]);
        let ids = b.call("reduceMax", &[x.clone(), o]).unwrap();
        assert_eq!(out_desc(&b, &ids).shape, vec![2, 3, 4]);
    }

    #[test]
    fn reduce_errors() {
        let (mut b, x) = builder_with(DataType::Float32, &[2, 3]);
        let o = dict(&[("axes", nums(&[2]))]);
        assert!(type_error(b.call("reduceSum", &[x.clone(), o])));
        let o = dict(&[("axes", nums(&[1, 1]))]);
        assert!(type_error(b.call("reduceSum", &[x.clone(), o])));
        let o = dict(&[("axes", Val::List(vec![Val::Number(-1.0)]))]);
        assert!(type_error(b.call("reduceSum", &[x.clone(), o])));
        let o = dict(&[("keepDimensions", Val::Number(1.0))]);
        assert!(type_error(b.call("reduceSum", &[x.clone(), o])));
        // Integer inputs: allowed for sums, refused for float-only ops.
        let (mut b, x) = builder_with(DataType::Int32, &[2, 3]);
        assert!(b.call("reduceSum", std::slice::from_ref(&x)).is_ok());
        assert!(b.call("reduceMax", std::slice::from_ref(&x)).is_ok());
        assert!(type_error(b.call("reduceMean", std::slice::from_ref(&x))));
        assert!(type_error(b.call("reduceL2", std::slice::from_ref(&x))));
        let (mut b, x) = builder_with(DataType::Int8, &[2, 3]);
        assert!(type_error(b.call("reduceSum", std::slice::from_ref(&x))));
        assert!(b.call("reduceMin", std::slice::from_ref(&x)).is_ok());
    }

    #[test]
    fn scalar_reduce() {
        let (mut b, x) = builder_with(DataType::Float32, &[]);
        let ids = b.call("reduceProduct", std::slice::from_ref(&x)).unwrap();
        assert_eq!(out_desc(&b, &ids).shape, Vec::<usize>::new());
        let o = dict(&[("axes", nums(&[0]))]);
        assert!(type_error(b.call("reduceProduct", &[x.clone(), o])));
    }

    #[test]
    fn arg_min_max_validation() {
        let (mut b, x) = builder_with(DataType::Float16, &[2, 3]);
        let ids = b.call("argMax", &[x.clone(), Val::Number(1.0)]).unwrap();
        let d = out_desc(&b, &ids);
        assert_eq!((d.data_type, d.shape), (DataType::Int32, vec![2]));
        let o = dict(&[
            ("keepDimensions", Val::Bool(true)),
            ("outputDataType", Val::String("int64".into())),
        ]);
        let ids = b.call("argMin", &[x.clone(), Val::Number(0.0), o]).unwrap();
        let d = out_desc(&b, &ids);
        assert_eq!((d.data_type, d.shape), (DataType::Int64, vec![1, 3]));
        assert!(type_error(b.call("argMin", &[x.clone(), Val::Number(2.0)])));
        assert!(type_error(b.call("argMin", std::slice::from_ref(&x))));
        let o = dict(&[("outputDataType", Val::String("float32".into()))]);
        assert!(type_error(
            b.call("argMin", &[x.clone(), Val::Number(0.0), o])
        ));
        let o = dict(&[("outputDataType", Val::String("int33".into()))]);
        assert!(type_error(b.call("argMin", &[x, Val::Number(0.0), o])));
    }

    #[test]
    fn cumulative_sum_validation() {
        let (mut b, x) = builder_with(DataType::Int32, &[2, 3]);
        let ids = b
            .call("cumulativeSum", &[x.clone(), Val::Number(1.0)])
            .unwrap();
        assert_eq!(out_desc(&b, &ids).shape, vec![2, 3]);
        assert!(type_error(
            b.call("cumulativeSum", &[x.clone(), Val::Number(2.0)])
        ));
        let o = dict(&[("exclusive", Val::String("yes".into()))]);
        assert!(type_error(
            b.call("cumulativeSum", &[x, Val::Number(0.0), o])
        ));
        let (mut b, x) = builder_with(DataType::Float32, &[]);
        assert!(type_error(b.call("cumulativeSum", &[x, Val::Number(0.0)])));
    }
}

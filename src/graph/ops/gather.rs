//! gather, gatherElements, gatherND, scatterElements, scatterND.
//!
//! Validation follows the spec's method steps in order. Index *values* are
//! only known at dispatch, so out-of-range indices are not an error here:
//! the kernels clamp every index into the allowed range [-N, N) of its
//! dimension and then map a negative index to `index + N` (the spec's notes
//! on these operators call for clamping; see `backend::cpu::gather`).

use super::{arg, check, lim, OpDef, ALL_TYPES, MAX_RANK};
use crate::error::Result;
use crate::graph::args::{Ctx, Val};
use crate::graph::{GraphBuilder, OperandId};
use crate::types::{DataType, OperandDescriptor};

/// The data types an `indices` operand may have.
pub const INDEX_TYPES: &[DataType] = &[DataType::Int32, DataType::Uint32, DataType::Int64];

/// The resolved operators of this family. Inputs are, in order, `input`,
/// `indices` and (scatter only) `updates`; shapes come from the input
/// descriptors.
#[derive(Debug, Clone, PartialEq)]
pub enum GatherOp {
    /// `gather(input, indices, {axis})`: output shape is
    /// `input[..axis] ++ indices ++ input[axis+1..]`.
    Gather { axis: usize },
    /// `gatherElements(input, indices, {axis})`: output shape is the
    /// indices' shape.
    GatherElements { axis: usize },
    /// `gatherND(input, indices)`: the last dimension of `indices` holds
    /// coordinates into the leading dimensions of `input`.
    GatherNd,
    /// `scatterElements(input, indices, updates, {axis})`.
    ScatterElements { axis: usize },
    /// `scatterND(input, indices, updates)`.
    ScatterNd,
}

impl GatherOp {
    pub fn name(&self) -> &'static str {
        match *self {
            GatherOp::Gather { .. } => "gather",
            GatherOp::GatherElements { .. } => "gatherElements",
            GatherOp::GatherNd => "gatherND",
            GatherOp::ScatterElements { .. } => "scatterElements",
            GatherOp::ScatterNd => "scatterND",
        }
    }
}

/// Creates the output descriptor, turning a too-large or too-high-rank
/// shape into this operator's TypeError.
fn output_desc(ctx: &Ctx, dt: DataType, shape: Vec<usize>) -> Result<OperandDescriptor> {
    if shape.len() > MAX_RANK {
        return Err(ctx.err(format!(
            "the output shape {shape:?} has more than {MAX_RANK} dimensions"
        )));
    }
    OperandDescriptor::new(dt, shape).map_err(|e| ctx.err(e.message))
}

/// Reads `input`, `indices` and the options (at `args[2]`) shared by gather
/// and gatherElements; returns (ctx, input, indices, axis).
fn read_gather_args<'a>(
    name: &'a str,
    b: &GraphBuilder,
    args: &[Val],
    opts_at: usize,
) -> Result<(Ctx<'a>, OperandId, OperandId, Option<u32>)> {
    let mut ctx = Ctx::new(name);
    let opts = ctx.options(arg(args, opts_at))?;
    // `axis` only exists in MLGatherOptions / MLScatterOptions; gatherND and
    // scatterND take plain MLOperatorOptions and ignore it.
    let axis = if matches!(name, "gather" | "gatherElements" | "scatterElements") {
        Some(ctx.u32_or(opts.member("axis"), "axis", 0)?)
    } else {
        None
    };
    let input = b.operand(&ctx, arg(args, 0), "input")?;
    let indices = b.operand(&ctx, arg(args, 1), "indices")?;
    Ok((ctx, input, indices, axis))
}

/// `gather(input, indices, options)`.
fn build_gather(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let (ctx, x, ind, axis) = read_gather_args("gather", b, args, 2)?;
    let axis = axis.unwrap_or(0) as usize;
    let (dx, di) = (b.desc(x).clone(), b.desc(ind).clone());
    check(&ctx, "indices", &di)?;
    check(&ctx, "input", &dx)?;
    if axis >= dx.rank() {
        return Err(ctx.err(format!(
            "axis ({axis}) must be less than the input's rank ({})",
            dx.rank()
        )));
    }
    let mut shape = dx.shape[..axis].to_vec();
    shape.extend_from_slice(&di.shape);
    shape.extend_from_slice(&dx.shape[axis + 1..]);
    let out = output_desc(&ctx, dx.data_type, shape)?;
    Ok(b.push(
        GatherOp::Gather { axis },
        vec![x, ind],
        vec![out],
        ctx.label,
    ))
}

/// The expected indices shape of gatherElements/scatterElements: the
/// input's shape with `shape[axis]` taken from the indices.
fn check_elements_shapes(
    ctx: &Ctx,
    dx: &OperandDescriptor,
    di: &OperandDescriptor,
    axis: usize,
) -> Result<()> {
    if di.rank() != dx.rank() {
        return Err(ctx.err(format!(
            "indices has rank {}, but must have the input's rank {}",
            di.rank(),
            dx.rank()
        )));
    }
    if axis >= dx.rank() {
        return Err(ctx.err(format!(
            "axis ({axis}) must be less than the input's rank ({})",
            dx.rank()
        )));
    }
    let mut expected = dx.shape.clone();
    expected[axis] = di.shape[axis];
    if di.shape != expected {
        return Err(ctx.err(format!(
            "indices has shape {:?}, but must be {expected:?} (the input's shape except along axis {axis})",
            di.shape
        )));
    }
    Ok(())
}

/// `gatherElements(input, indices, options)`.
fn build_gather_elements(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let (ctx, x, ind, axis) = read_gather_args("gatherElements", b, args, 2)?;
    let axis = axis.unwrap_or(0) as usize;
    let (dx, di) = (b.desc(x).clone(), b.desc(ind).clone());
    check(&ctx, "indices", &di)?;
    check(&ctx, "input", &dx)?;
    check_elements_shapes(&ctx, &dx, &di, axis)?;
    // The output has the indices' shape (equal to the input's but along
    // `axis`), with the input's data type.
    let out = output_desc(&ctx, dx.data_type, di.shape.clone())?;
    Ok(b.push(
        GatherOp::GatherElements { axis },
        vec![x, ind],
        vec![out],
        ctx.label,
    ))
}

/// The shape of the slices gatherND reads and scatterND writes:
/// `indices[..-1] ++ input[coordinateSize..]`, or an error when the
/// coordinates are longer than the input's rank.
fn nd_slices_shape(
    ctx: &Ctx,
    dx: &OperandDescriptor,
    di: &OperandDescriptor,
) -> Result<Vec<usize>> {
    let indexable = di.rank() - 1;
    let coordinate_size = di.shape[indexable];
    if coordinate_size > dx.rank() {
        return Err(ctx.err(format!(
            "the indices' last dimension ({coordinate_size}) is larger than the input's rank ({})",
            dx.rank()
        )));
    }
    let mut shape = di.shape[..indexable].to_vec();
    shape.extend_from_slice(&dx.shape[coordinate_size..]);
    Ok(shape)
}

/// `gatherND(input, indices, options)`.
fn build_gather_nd(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let (ctx, x, ind, _) = read_gather_args("gatherND", b, args, 2)?;
    let (dx, di) = (b.desc(x).clone(), b.desc(ind).clone());
    check(&ctx, "indices", &di)?;
    check(&ctx, "input", &dx)?;
    let shape = nd_slices_shape(&ctx, &dx, &di)?;
    let out = output_desc(&ctx, dx.data_type, shape)?;
    Ok(b.push(GatherOp::GatherNd, vec![x, ind], vec![out], ctx.label))
}

/// `scatterElements(input, indices, updates, options)`.
fn build_scatter_elements(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let (ctx, x, ind, axis) = read_gather_args("scatterElements", b, args, 3)?;
    let axis = axis.unwrap_or(0) as usize;
    let upd = b.operand(&ctx, arg(args, 2), "updates")?;
    let (dx, di, du) = (b.desc(x).clone(), b.desc(ind).clone(), b.desc(upd).clone());
    check(&ctx, "indices", &di)?;
    if du.data_type != dx.data_type {
        return Err(ctx.err(format!(
            "updates has data type {}, but must have the input's data type {}",
            du.data_type.name(),
            dx.data_type.name()
        )));
    }
    check(&ctx, "input", &dx)?;
    check(&ctx, "updates", &du)?;
    if du.rank() != dx.rank() {
        return Err(ctx.err(format!(
            "updates has rank {}, but must have the input's rank {}",
            du.rank(),
            dx.rank()
        )));
    }
    check_elements_shapes(&ctx, &dx, &di, axis)?;
    if du.shape != di.shape {
        return Err(ctx.err(format!(
            "updates has shape {:?}, but must have the indices' shape {:?}",
            du.shape, di.shape
        )));
    }
    let out = output_desc(&ctx, dx.data_type, dx.shape.clone())?;
    Ok(b.push(
        GatherOp::ScatterElements { axis },
        vec![x, ind, upd],
        vec![out],
        ctx.label,
    ))
}

/// `scatterND(input, indices, updates, options)`.
fn build_scatter_nd(b: &mut GraphBuilder, args: &[Val]) -> Result<Vec<OperandId>> {
    let (ctx, x, ind, _) = read_gather_args("scatterND", b, args, 3)?;
    let upd = b.operand(&ctx, arg(args, 2), "updates")?;
    let (dx, di, du) = (b.desc(x).clone(), b.desc(ind).clone(), b.desc(upd).clone());
    check(&ctx, "indices", &di)?;
    if du.data_type != dx.data_type {
        return Err(ctx.err(format!(
            "updates has data type {}, but must have the input's data type {}",
            du.data_type.name(),
            dx.data_type.name()
        )));
    }
    check(&ctx, "input", &dx)?;
    check(&ctx, "updates", &du)?;
    let expected = nd_slices_shape(&ctx, &dx, &di)?;
    if du.shape != expected {
        return Err(ctx.err(format!(
            "updates has shape {:?}, but must be {expected:?} (the indices' leading dimensions, then the input's dimensions past the coordinates)",
            du.shape
        )));
    }
    let out = output_desc(&ctx, dx.data_type, dx.shape.clone())?;
    Ok(b.push(GatherOp::ScatterNd, vec![x, ind, upd], vec![out], ctx.label))
}

/// This family's builder methods.
pub const DEFS: &[OpDef] = &[
    OpDef {
        name: "gather",
        build: build_gather,
        operands: &[
            // Rank 1 or more: the axis must name a dimension (#882).
            lim("input", ALL_TYPES, 1, MAX_RANK),
            lim("indices", INDEX_TYPES, 0, MAX_RANK),
            lim("output", ALL_TYPES, 0, MAX_RANK),
        ],
    },
    OpDef {
        name: "gatherElements",
        build: build_gather_elements,
        operands: &[
            lim("input", ALL_TYPES, 1, MAX_RANK),
            lim("indices", INDEX_TYPES, 1, MAX_RANK),
            lim("output", ALL_TYPES, 1, MAX_RANK),
        ],
    },
    OpDef {
        name: "gatherND",
        build: build_gather_nd,
        operands: &[
            lim("input", ALL_TYPES, 1, MAX_RANK),
            lim("indices", INDEX_TYPES, 1, MAX_RANK),
            lim("output", ALL_TYPES, 0, MAX_RANK),
        ],
    },
    OpDef {
        name: "scatterElements",
        build: build_scatter_elements,
        operands: &[
            lim("input", ALL_TYPES, 1, MAX_RANK),
            lim("indices", INDEX_TYPES, 1, MAX_RANK),
            lim("updates", ALL_TYPES, 1, MAX_RANK),
            lim("output", ALL_TYPES, 1, MAX_RANK),
        ],
    },
    OpDef {
        name: "scatterND",
        build: build_scatter_nd,
        operands: &[
            lim("input", ALL_TYPES, 1, MAX_RANK),
            lim("indices", INDEX_TYPES, 1, MAX_RANK),
            lim("updates", ALL_TYPES, 0, MAX_RANK),
            lim("output", ALL_TYPES, 1, MAX_RANK),
        ],
    },
];

#[cfg(test)]
mod tests {
    use super::super::testing::input;
    use super::*;
    use crate::error::ErrorKind;

    fn axis(a: f64) -> Val {
        Val::Dict(vec![("axis".into(), Val::Number(a))])
    }

    /// Calls `op` and returns the output shape, or the TypeError's message.
    fn shape_of(
        b: &mut GraphBuilder,
        op: &str,
        args: &[Val],
    ) -> std::result::Result<Vec<usize>, String> {
        match b.call(op, args) {
            Ok(out) => Ok(b.desc(out[0]).shape.clone()),
            Err(e) => {
                assert_eq!(e.kind, ErrorKind::Type, "{}", e.message);
                assert!(e.message.starts_with(op), "{}", e.message);
                Err(e.message)
            }
        }
    }

    #[test]
    fn gather_shapes_and_errors() {
        let mut b = GraphBuilder::new();
        let x = input(&mut b, "x", DataType::Float16, &[4, 3, 2]);
        let i0 = input(&mut b, "i0", DataType::Int32, &[]);
        let i2 = input(&mut b, "i2", DataType::Int64, &[5, 6]);
        let f = input(&mut b, "f", DataType::Float32, &[2]);
        let u8i = input(&mut b, "u8i", DataType::Uint8, &[2]);
        let s = input(&mut b, "s", DataType::Float32, &[]);
        assert_eq!(
            shape_of(&mut b, "gather", &[x.clone(), i0.clone()]),
            Ok(vec![3, 2])
        );
        assert_eq!(
            shape_of(&mut b, "gather", &[x.clone(), i2.clone(), axis(1.0)]),
            Ok(vec![4, 5, 6, 2])
        );
        assert_eq!(
            shape_of(&mut b, "gather", &[x.clone(), i2.clone(), axis(2.0)]),
            Ok(vec![4, 3, 5, 6])
        );
        let out = b.call("gather", &[x.clone(), i0.clone()]).unwrap();
        assert_eq!(b.desc(out[0]).data_type, DataType::Float16);
        // axis out of range, indices of a non-index type, scalar input.
        assert!(
            shape_of(&mut b, "gather", &[x.clone(), i0.clone(), axis(3.0)])
                .unwrap_err()
                .contains("axis")
        );
        assert!(shape_of(&mut b, "gather", &[x.clone(), f]).is_err());
        assert!(shape_of(&mut b, "gather", &[x.clone(), u8i]).is_err());
        assert!(shape_of(&mut b, "gather", &[s, i0.clone()]).is_err());
        // Bad option values and missing operands.
        assert!(shape_of(&mut b, "gather", &[x.clone(), i0.clone(), axis(-1.0)]).is_err());
        assert!(shape_of(&mut b, "gather", &[x.clone(), i0.clone(), axis(0.5)]).is_err());
        assert!(shape_of(&mut b, "gather", &[x.clone(), i0.clone(), Val::Number(0.0)]).is_err());
        assert!(shape_of(&mut b, "gather", std::slice::from_ref(&x)).is_err());
        // Output rank above the limit: 8 + 2 - 1.
        let big = input(&mut b, "big", DataType::Float32, &[1; 8]);
        assert!(shape_of(&mut b, "gather", &[big, i2]).is_err());
    }

    #[test]
    fn gather_elements_and_scatter_elements_validation() {
        let mut b = GraphBuilder::new();
        let x = input(&mut b, "x", DataType::Int8, &[4, 3]);
        let i_ok0 = input(&mut b, "i0", DataType::Uint32, &[2, 3]);
        let i_ok1 = input(&mut b, "i1", DataType::Int32, &[4, 5]);
        let i_rank = input(&mut b, "ir", DataType::Int32, &[12]);
        let i_f = input(&mut b, "if", DataType::Float32, &[2, 3]);
        let u_ok = input(&mut b, "u0", DataType::Int8, &[2, 3]);
        let u_type = input(&mut b, "ut", DataType::Uint8, &[2, 3]);
        let u_shape = input(&mut b, "us", DataType::Int8, &[3, 2]);
        let ge = "gatherElements";
        assert_eq!(
            shape_of(&mut b, ge, &[x.clone(), i_ok0.clone()]),
            Ok(vec![2, 3])
        );
        assert_eq!(
            shape_of(&mut b, ge, &[x.clone(), i_ok1.clone(), axis(1.0)]),
            Ok(vec![4, 5])
        );
        // [4, 5] differs from the input off axis 0.
        assert!(shape_of(&mut b, ge, &[x.clone(), i_ok1.clone()]).is_err());
        assert!(shape_of(&mut b, ge, &[x.clone(), i_rank.clone()]).is_err());
        assert!(shape_of(&mut b, ge, &[x.clone(), i_f.clone()]).is_err());
        assert!(shape_of(&mut b, ge, &[x.clone(), i_ok0.clone(), axis(2.0)]).is_err());

        let se = "scatterElements";
        assert_eq!(
            shape_of(&mut b, se, &[x.clone(), i_ok0.clone(), u_ok.clone()]),
            Ok(vec![4, 3])
        );
        assert!(shape_of(&mut b, se, &[x.clone(), i_ok0.clone(), u_type]).is_err());
        assert!(shape_of(&mut b, se, &[x.clone(), i_ok0.clone(), u_shape]).is_err());
        assert!(shape_of(&mut b, se, &[x.clone(), i_f, u_ok.clone()]).is_err());
        assert!(shape_of(
            &mut b,
            se,
            &[x.clone(), i_ok0.clone(), u_ok.clone(), axis(2.0)]
        )
        .is_err());
        assert!(shape_of(&mut b, se, &[x.clone(), i_ok0.clone()]).is_err());
        // The axis must fit the indices' shape: [2, 3] is not [4, 3] off axis 1.
        assert!(shape_of(&mut b, se, &[x, i_ok0, u_ok, axis(1.0)]).is_err());
    }

    #[test]
    fn nd_shapes_and_errors() {
        let mut b = GraphBuilder::new();
        let x = input(&mut b, "x", DataType::Uint4, &[2, 3, 4]);
        let i1 = input(&mut b, "i1", DataType::Int64, &[5, 1]);
        let i3 = input(&mut b, "i3", DataType::Int32, &[3]);
        let i4 = input(&mut b, "i4", DataType::Int32, &[2, 4]);
        let i0 = input(&mut b, "i0", DataType::Int32, &[]);
        assert_eq!(
            shape_of(&mut b, "gatherND", &[x.clone(), i1.clone()]),
            Ok(vec![5, 3, 4])
        );
        // A full coordinate gives a scalar.
        assert_eq!(
            shape_of(&mut b, "gatherND", &[x.clone(), i3.clone()]),
            Ok(vec![])
        );
        assert!(shape_of(&mut b, "gatherND", &[x.clone(), i4.clone()])
            .unwrap_err()
            .contains("rank"));
        assert!(shape_of(&mut b, "gatherND", &[x.clone(), i0]).is_err());

        let u = input(&mut b, "u", DataType::Uint4, &[5, 3, 4]);
        let u0 = input(&mut b, "u0", DataType::Uint4, &[]);
        let u_bad = input(&mut b, "ub", DataType::Uint4, &[5, 4, 3]);
        let u_type = input(&mut b, "ut", DataType::Uint8, &[5, 3, 4]);
        assert_eq!(
            shape_of(&mut b, "scatterND", &[x.clone(), i1.clone(), u.clone()]),
            Ok(vec![2, 3, 4])
        );
        assert_eq!(
            shape_of(&mut b, "scatterND", &[x.clone(), i3.clone(), u0.clone()]),
            Ok(vec![2, 3, 4])
        );
        assert!(shape_of(&mut b, "scatterND", &[x.clone(), i1.clone(), u_bad]).is_err());
        assert!(shape_of(&mut b, "scatterND", &[x.clone(), i1.clone(), u_type]).is_err());
        assert!(shape_of(&mut b, "scatterND", &[x.clone(), i4, u.clone()]).is_err());
        assert!(shape_of(&mut b, "scatterND", &[x, i1, u0]).is_err());
    }

    #[test]
    fn labels_name_the_operator() {
        let mut b = GraphBuilder::new();
        let x = input(&mut b, "x", DataType::Float32, &[2]);
        let i = input(&mut b, "i", DataType::Int32, &[1]);
        let opts = Val::Dict(vec![
            ("axis".into(), Val::Number(1.0)),
            ("label".into(), Val::String("g1".into())),
        ]);
        let e = b.call("gather", &[x, i, opts]).unwrap_err();
        assert!(e.message.starts_with("gather [g1]:"), "{}", e.message);
    }
}

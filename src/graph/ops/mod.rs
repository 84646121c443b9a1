//! Operator families: argument reading, validation and output inference.
//!
//! Each family module turns the JS arguments of its builder methods into an
//! [`Op`](crate::graph::Op) with resolved parameters and the output
//! descriptors, following the steps of the WebNN spec. [`OPS`] is the one
//! registry: it maps builder method names to their functions and declares
//! the data types and ranks each operand accepts, which both validation and
//! `opSupportLimits()` read.

pub mod activation;
pub mod conv;
pub mod elementwise;
pub mod gather;
pub mod logical;
pub mod matmul;
pub mod movement;
pub mod norm;
pub mod quantize;
pub mod recurrent;
pub mod reduce;
pub mod shape;
#[cfg(test)]
mod testing;

use crate::error::Result;
use crate::graph::args::{Ctx, Val};
use crate::graph::{GraphBuilder, OperandId};
use crate::types::{DataType, OperandDescriptor};

/// Signature of a builder method: reads `args`, validates, adds the node(s).
pub type BuildFn = fn(&mut GraphBuilder, &[Val]) -> Result<Vec<OperandId>>;

/// The data types and ranks one operand of an operator accepts.
#[derive(Debug, Clone, Copy)]
pub struct OperandLimit {
    /// The IDL name of the argument or option (`input`, `a`, `filter`,
    /// `bias`, ...), or `output` / `outputs`.
    pub name: &'static str,
    pub types: &'static [DataType],
    pub min_rank: usize,
    pub max_rank: usize,
}

/// One builder method.
pub struct OpDef {
    pub name: &'static str,
    pub build: BuildFn,
    /// Operand inputs and the output(s), as reported by `opSupportLimits()`.
    pub operands: &'static [OperandLimit],
}

pub use crate::types::MAX_RANK;

/// The most operands a sequence argument or result may hold: concat's
/// inputs and split's outputs (#933).
pub const MAX_SEQUENCE: usize = 8192;

use DataType::*;
pub const FLOATS: &[DataType] = &[Float32, Float16];
/// Every type but the 4-bit ones.
pub const NUMERIC: &[DataType] = &[Float32, Float16, Int32, Uint32, Int64, Uint64, Int8, Uint8];
pub const ALL_TYPES: &[DataType] = &[
    Float32, Float16, Int32, Uint32, Int64, Uint64, Int8, Uint8, Int4, Uint4,
];
/// Signed types (for abs, neg, relu).
pub const SIGNED: &[DataType] = &[Float32, Float16, Int32, Int64, Int8];

pub const fn lim(
    name: &'static str,
    types: &'static [DataType],
    min_rank: usize,
    max_rank: usize,
) -> OperandLimit {
    OperandLimit {
        name,
        types,
        min_rank,
        max_rank,
    }
}

/// Every operator family's builder methods. Each family file owns its
/// `DEFS`; this list is the registry that lookup, validation and
/// `opSupportLimits()` read.
pub static FAMILIES: &[&[OpDef]] = &[
    elementwise::DEFS,
    matmul::DEFS,
    conv::DEFS,
    shape::DEFS,
    logical::DEFS,
    activation::DEFS,
    reduce::DEFS,
    gather::DEFS,
    movement::DEFS,
    quantize::DEFS,
    norm::DEFS,
    recurrent::DEFS,
];

/// Every builder method of every family.
pub fn all() -> impl Iterator<Item = &'static OpDef> {
    FAMILIES.iter().flat_map(|f| f.iter())
}

pub fn lookup(name: &str) -> Option<BuildFn> {
    find(name).map(|d| d.build)
}

pub fn find(name: &str) -> Option<&'static OpDef> {
    all().find(|d| d.name == name)
}

/// The limit named `operand` of operator `op` (a programming error if absent).
pub fn limit(op: &str, operand: &str) -> &'static OperandLimit {
    find(op)
        .and_then(|d| d.operands.iter().find(|l| l.name == operand))
        .unwrap_or_else(|| panic!("no limit {op}.{operand}"))
}

/// Checks an operand against its declared limit (data type and rank).
pub fn check(ctx: &Ctx, operand: &str, desc: &OperandDescriptor) -> Result<()> {
    let l = limit(ctx.op, operand);
    if !l.types.contains(&desc.data_type) {
        return Err(ctx.err(format!(
            "{operand} has data type {}, which is not one of {:?}",
            desc.data_type.name(),
            l.types.iter().map(|t| t.name()).collect::<Vec<_>>()
        )));
    }
    if desc.rank() < l.min_rank || desc.rank() > l.max_rank {
        return Err(ctx.err(format!(
            "{operand} has rank {}, outside [{}, {}]",
            desc.rank(),
            l.min_rank,
            l.max_rank
        )));
    }
    Ok(())
}

/// Reads `args[i]`, treating a missing trailing argument as `undefined`.
pub fn arg(args: &[Val], i: usize) -> &Val {
    static UNDEF: Val = Val::Undefined;
    args.get(i).unwrap_or(&UNDEF)
}

/// Bidirectional (numpy) broadcasting of two shapes.
pub fn broadcast_shapes(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i < rank - a.len() {
            1
        } else {
            a[i - (rank - a.len())]
        };
        let db = if i < rank - b.len() {
            1
        } else {
            b[i - (rank - b.len())]
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return None;
        };
    }
    Some(out)
}

/// Whether `from` broadcasts to `to` unidirectionally (only `from` grows).
pub fn broadcasts_to(from: &[usize], to: &[usize]) -> bool {
    from.len() <= to.len()
        && from
            .iter()
            .rev()
            .zip(to.iter().rev())
            .all(|(&f, &t)| f == t || f == 1)
}

/// Output size of a windowed dimension (conv/pool), or `None` when the
/// window does not fit.
pub fn window_output(
    input: usize,
    window: usize,
    pad_begin: usize,
    pad_end: usize,
    stride: usize,
    dilation: usize,
    ceil: bool,
) -> Option<usize> {
    let effective = dilation
        .checked_mul(window.checked_sub(1)?)?
        .checked_add(1)?;
    let padded = input.checked_add(pad_begin)?.checked_add(pad_end)?;
    let span = padded.checked_sub(effective)?;
    let steps = if ceil {
        span.div_ceil(stride)
    } else {
        span / stride
    };
    Some(steps + 1)
}

/// Whether a builder method returns a sequence of operands (split and the
/// recurrent operators) rather than one.
pub fn returns_sequence(name: &str) -> bool {
    matches!(name, "split" | "gru" | "lstm" | "lstmCell")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting() {
        assert_eq!(broadcast_shapes(&[2, 1, 3], &[4, 1]), Some(vec![2, 4, 3]));
        assert_eq!(broadcast_shapes(&[], &[5]), Some(vec![5]));
        assert_eq!(broadcast_shapes(&[2], &[3]), None);
        assert!(broadcasts_to(&[1, 3], &[2, 3]));
        assert!(!broadcasts_to(&[2, 3], &[3]));
    }

    #[test]
    fn registry_names_are_unique() {
        let mut names: Vec<&str> = all().map(|d| d.name).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), n);
    }

    #[test]
    fn window_sizes() {
        assert_eq!(window_output(5, 3, 1, 1, 1, 1, false), Some(5));
        assert_eq!(window_output(5, 3, 0, 0, 2, 1, false), Some(2));
        assert_eq!(window_output(6, 3, 0, 0, 2, 1, true), Some(3));
        assert_eq!(window_output(2, 3, 0, 0, 1, 1, false), None);
    }
}

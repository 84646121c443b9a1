//! SwiGLU read from its product, as one node.
//!
//! A language model's feed-forward block, as `lib/llm/graphs.js` writes
//! it, multiplies the gate and up matrices as one product (their rows
//! stacked) and slices the halves apart:
//!
//! ```text
//! g = slice(y, [0, 0], [T, n])     y: [T, 2n] (or any two column ranges)
//! u = slice(y, [0, n], [T, n])
//! h = mul(mul(g, sigmoid(g)), u)
//! ```
//!
//! Five nodes, two of them copies of half of y, and three passes over the
//! halves. [`fused_swiglus`] makes the last `mul` read y (or g and u
//! where they are not such slices) and compute `(g * sigmoid(g)) * u`
//! in one pass (`elementwise::swiglu`, the same bits); the other nodes
//! are then dead, unless something else reads them.

use std::collections::HashMap;

use super::{producer, rewired, row_slice};
use crate::graph::ops::elementwise::{BinaryKind, UnaryKind};
use crate::graph::{Graph, Node, Op, OperandId};
use crate::types::DataType;

/// Where a fused SwiGLU node reads its gate and its up values: each row
/// of the output (its last axis, `n` wide) from `offset .. offset + n` of
/// a row `stride` wide of the node's input (its first input for the
/// gate, its second for up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend::cpu) struct SwiGlu {
    pub gate: (usize, usize),
    pub up: (usize, usize),
}

/// The fused SwiGLUs, by the fused node's output operand (the node reads
/// the gate's source, then up's).
pub(in crate::backend::cpu) type SwiGlus = HashMap<OperandId, SwiGlu>;

/// The graph with each SwiGLU of the module comment's form as one node;
/// `None` when there is none.
pub(in crate::backend::cpu) fn fused_swiglus(graph: &Graph) -> Option<(Graph, SwiGlus)> {
    rewired(graph, matched)
}

/// The SwiGLU that `node` ends, and the inputs it then reads.
fn matched(g: &Graph, node: &Node) -> Option<(SwiGlu, Vec<OperandId>)> {
    let (Op::Binary(BinaryKind::Mul), [l, r], [y]) =
        (&node.op, &node.inputs[..], &node.outputs[..])
    else {
        return None;
    };
    let dy = &g.operands[*y];
    let n = *dy.shape.last()?;
    let fits = |id: OperandId| {
        let d = &g.operands[id];
        d.data_type == DataType::Float32 && d.shape == dy.shape
    };
    if dy.data_type != DataType::Float32 || n == 0 || !fits(*l) || !fits(*r) {
        return None;
    }
    // One side is g * sigmoid(g) (either way round), the other u.
    let silu = |p: OperandId| -> Option<OperandId> {
        let m = producer(g, p)?;
        let (Op::Binary(BinaryKind::Mul), [a, b]) = (&m.op, &m.inputs[..]) else {
            return None;
        };
        let sig = |s: OperandId, x: OperandId| {
            producer(g, s).is_some_and(|sn| {
                matches!((&sn.op, &sn.inputs[..]), (Op::Unary(UnaryKind::Sigmoid), [i]) if *i == x)
            })
        };
        match (sig(*b, *a), sig(*a, *b)) {
            (true, _) => Some(*a),
            (false, true) => Some(*b),
            _ => None,
        }
    };
    let (gate, up) = match (silu(*l), silu(*r)) {
        (Some(gate), _) => (gate, *r),
        (None, Some(gate)) => (gate, *l),
        _ => return None,
    };
    if !fits(gate) {
        return None;
    }
    let (gs, gspan) = source(g, gate, n);
    let (us, uspan) = source(g, up, n);
    Some((
        SwiGlu {
            gate: gspan,
            up: uspan,
        },
        vec![gs, us],
    ))
}

/// Where the values of `x` (rows `n` wide) lie: in the operand a slice
/// of whole rows took them from (`fuse::row_slice`), at `(offset, row
/// width)`, or in x itself.
fn source(g: &Graph, x: OperandId, n: usize) -> (OperandId, (usize, usize)) {
    match row_slice(g, x, n) {
        Some((from, offset, width)) => (from, (offset, width)),
        None => (x, (0, n)),
    }
}

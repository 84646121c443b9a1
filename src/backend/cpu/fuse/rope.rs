//! Rotary position embedding on adjacent pairs, as one node.
//!
//! A language model's graph (`lib/llm/graphs.js`) rotates each pair
//! `(x0, x1)` of a head by its position's angle with standard operators:
//!
//! ```text
//! r = reshape(x, [T, heads, P, 2])        x: [T, W], perhaps a slice of whole
//!                                            rows of the Q/K/V product
//! y = add(mul(r, c), mul(reverse(r, {axes: [3]}), s))
//!                                         c, s: [T or 1, heads or 1, P, 2]
//! ```
//!
//! (`c` holds each angle's cosine twice, `s` its sine negated then as it
//! is.) The slice, the reverse, the two products and the sum are five
//! passes over the rows. [`fused_ropes`] makes the `add` read x's rows
//! where they lie, c and s, and compute each pair's
//! `(x0 c0 + x1 s0, x1 c1 + x0 s1)` in one pass (`elementwise::rope`,
//! the same bits: the same products, the same sums); the other nodes
//! are then dead, unless something else reads them.

use std::collections::HashMap;

use super::{producer, rewired, row_slice};
use crate::graph::ops::elementwise::BinaryKind;
use crate::graph::ops::movement::MovementOp;
use crate::graph::{Graph, Node, Op, OperandId};
use crate::types::DataType;

/// Where a fused rotation reads x: output row `t` (its first axis) from
/// `offset .. offset + W` of row `t`, `stride` wide, of the node's first
/// input; its second and third inputs are c and s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend::cpu) struct Rope {
    pub offset: usize,
    pub stride: usize,
}

/// The fused rotations, by the fused node's output operand.
pub(in crate::backend::cpu) type Ropes = HashMap<OperandId, Rope>;

/// The graph with each rotation of the module comment's form as one
/// node; `None` when there is none.
pub(in crate::backend::cpu) fn fused_ropes(graph: &Graph) -> Option<(Graph, Ropes)> {
    rewired(graph, matched)
}

/// The rotation that `node` (an `add`) ends, and the inputs it then reads.
fn matched(g: &Graph, node: &Node) -> Option<(Rope, Vec<OperandId>)> {
    let (Op::Binary(BinaryKind::Add), [l, r], [y]) =
        (&node.op, &node.inputs[..], &node.outputs[..])
    else {
        return None;
    };
    let dy = &g.operands[*y];
    let f32 = |id: OperandId| g.operands[id].data_type == DataType::Float32;
    let [t, heads, p, 2] = dy.shape[..] else {
        return None;
    };
    if !f32(*y) || t == 0 || heads == 0 || p == 0 {
        return None;
    }
    // A product of a rank-4 operand shaped like y and a factor spread
    // over y's first two axes: (operand, factor).
    let factor_ok = |f: OperandId| {
        let df = &g.operands[f];
        f32(f)
            && df.shape.len() == 4
            && (df.shape[0] == t || df.shape[0] == 1)
            && (df.shape[1] == heads || df.shape[1] == 1)
            && df.shape[2..] == [p, 2]
    };
    let product = |id: OperandId| -> Option<(OperandId, OperandId)> {
        let m = producer(g, id)?;
        let (Op::Binary(BinaryKind::Mul), [a, b]) = (&m.op, &m.inputs[..]) else {
            return None;
        };
        let shaped = |x: OperandId| f32(x) && g.operands[x].shape == dy.shape;
        match (shaped(*a) && factor_ok(*b), shaped(*b) && factor_ok(*a)) {
            (true, _) => Some((*a, *b)),
            (false, true) => Some((*b, *a)),
            _ => None,
        }
    };
    let reversed = |id: OperandId| -> Option<OperandId> {
        let n = producer(g, id)?;
        match (&n.op, &n.inputs[..]) {
            (Op::Movement(MovementOp::Reverse { axes }), [x]) if axes[..] == [3] => Some(*x),
            _ => None,
        }
    };
    let ((rr, c), (rv, s)) = (product(*l)?, product(*r)?);
    // One side multiplies r by c, the other reverse(r) by s.
    let (x, c, s) = match (reversed(rr), reversed(rv)) {
        (None, Some(x)) if x == rr => (rr, c, s),
        (Some(x), None) if x == rv => (rv, s, c),
        _ => return None,
    };
    if g.operands[c].shape != g.operands[s].shape {
        return None;
    }
    let (src, spec) = source(g, x, t, heads * p * 2);
    Some((spec, vec![src, c, s]))
}

/// Where the rows of `x` ([t, heads, P, 2]) lie: in a float32 [t, W']
/// operand that a slice of whole rows took a reshape's input from, or
/// that a reshape of [t, w] made x from, or in x itself.
fn source(g: &Graph, x: OperandId, t: usize, w: usize) -> (OperandId, Rope) {
    let dense = |id: OperandId| {
        (
            id,
            Rope {
                offset: 0,
                stride: w,
            },
        )
    };
    let Some(rs) = producer(g, x) else {
        return dense(x);
    };
    let (Op::Reshape, [flat]) = (&rs.op, &rs.inputs[..]) else {
        return dense(x);
    };
    if g.operands[*flat].shape != [t, w] || g.operands[*flat].data_type != DataType::Float32 {
        return dense(x);
    }
    // A slice of whole rows of the Q/K/V product (`fuse::row_slice`).
    match row_slice(g, *flat, w) {
        Some((from, offset, stride)) => (from, Rope { offset, stride }),
        None => (
            *flat,
            Rope {
                offset: 0,
                stride: w,
            },
        ),
    }
}

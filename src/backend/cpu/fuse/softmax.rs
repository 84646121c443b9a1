//! A softmax with its mask and its rounding, as one node.
//!
//! A language model's attention, as `lib/llm/graphs.js` writes it, adds a
//! mask to the scores, takes the softmax over the last axis and, with
//! llama.cpp's numerics, rounds the probabilities through float16:
//!
//! ```text
//! a = add(x, mask)                 mask: [.., W], spread over x's leading axes
//! p = softmax(a, last axis)        perhaps reshaped after (the last axis kept)
//! y = cast(cast(p, float16), float32)
//! ```
//!
//! Each node is a pass over a whole attention matrix (a 1,500-token
//! prompt's chunks hold 7 MB ones, well past the second-level cache), and
//! the passes were a fifth of such a prompt. [`fused_softmaxes`] makes the
//! last node read x and the mask and compute the rest row by row while
//! the row is in the first-level cache (`elementwise::softmax_fused`,
//! the same bits); the other nodes are then dead, unless something else
//! reads them. A softmax with a mask and no rounding, or with a rounding
//! and no mask, is fused likewise.

use std::collections::HashMap;

use super::{producer, rewired};
use crate::graph::ops::elementwise::{BinaryKind, SoftmaxParams};
use crate::graph::{Graph, Node, Op, OperandId};
use crate::types::DataType;

/// What a fused softmax node computes besides the softmax of its first
/// input over the last axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend::cpu) struct FusedSoftmax {
    /// A second input is added first, element `i` of x reading element
    /// `i % len` of it.
    pub mask: bool,
    /// The results are rounded to float16 (and kept as float32).
    pub round16: bool,
}

/// The fused softmaxes, by the fused node's output operand (the node
/// reads x, and the mask where there is one).
pub(in crate::backend::cpu) type Softmaxes = HashMap<OperandId, FusedSoftmax>;

/// The graph with each softmax of the module comment's forms as one node;
/// `None` when there is none.
pub(in crate::backend::cpu) fn fused_softmaxes(graph: &Graph) -> Option<(Graph, Softmaxes)> {
    rewired(graph, matched)
}

/// The fused softmax that `node` ends, and the inputs it then reads.
fn matched(g: &Graph, node: &Node) -> Option<(FusedSoftmax, Vec<OperandId>)> {
    let f32 = |id: OperandId| g.operands[id].data_type == DataType::Float32;
    let [y] = node.outputs[..] else {
        return None;
    };
    if !f32(y) {
        return None;
    }
    // The softmax's output, rounded through float16 by two casts or not.
    let (round16, mut p) = match (&node.op, &node.inputs[..]) {
        (Op::Cast(_), [h]) => {
            let inner = producer(g, *h)?;
            let (Op::Cast(_), [p]) = (&inner.op, &inner.inputs[..]) else {
                return None;
            };
            if g.operands[*h].data_type != DataType::Float16 || !f32(*p) {
                return None;
            }
            (true, *p)
        }
        (Op::Softmax(_), _) => (false, y),
        _ => return None,
    };
    // Through reshapes that keep the last axis: the rows stay the rows.
    let last = |id: OperandId| g.operands[id].shape.last().copied();
    let n = last(y)?;
    if n == 0 {
        return None;
    }
    while p != y {
        let r = producer(g, p)?;
        match (&r.op, &r.inputs[..]) {
            (Op::Reshape, [i]) if last(*i) == Some(n) => p = *i,
            _ => break,
        }
    }
    let s = producer(g, p)?;
    let (Op::Softmax(SoftmaxParams { axis }), [a]) = (&s.op, &s.inputs[..]) else {
        return None;
    };
    let da = &g.operands[*a];
    if *axis + 1 != da.rank() || last(*a) != Some(n) || !f32(*a) {
        return None;
    }
    // x + mask, the mask whole rows spread over x's leading axes.
    let spread = |x: OperandId, m: OperandId| {
        let (dx, dm) = (&g.operands[x], &g.operands[m]);
        let lead = dm.shape.iter().take_while(|&&d| d == 1).count();
        let tail = &dm.shape[lead..];
        f32(x)
            && f32(m)
            && dx.shape == da.shape
            && !tail.is_empty()
            && tail.len() <= da.rank()
            && da.shape[da.rank() - tail.len()..] == *tail
    };
    let masked = producer(g, *a).and_then(|add| match (&add.op, &add.inputs[..]) {
        (Op::Binary(BinaryKind::Add), [l, r]) if spread(*l, *r) => Some((*l, *r)),
        (Op::Binary(BinaryKind::Add), [l, r]) if spread(*r, *l) => Some((*r, *l)),
        _ => None,
    });
    match masked {
        Some((x, m)) => Some((
            FusedSoftmax {
                mask: true,
                round16,
            },
            vec![x, m],
        )),
        None if round16 => Some((
            FusedSoftmax {
                mask: false,
                round16,
            },
            vec![*a],
        )),
        None => None,
    }
}

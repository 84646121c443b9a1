//! Activations rounded to int8 blocks and back, as one node.
//!
//! A graph that takes llama.cpp's numerics rounds each activation row to
//! int8 per block of 32 before every quantized product, in standard
//! operators (`lib/llm/graphs.js`):
//!
//! ```text
//! amax = reduceMax(abs(x), {axes: [2], keepDimensions: true})   x: [rows, nb, 32] float32
//! d    = div(amax, c)                        c: a float32 scalar constant
//! q    = quantizeLinear(x, max(d, t), z)     t: likewise; z: int8 zeros [rows, nb, 1]
//! y    = dequantizeLinear(q, s, z')          s: d, or cast(cast(d, float16), float32)
//! ```
//!
//! Ten nodes a rounding, four roundings a layer: on a decoding step's one
//! row each node is a microsecond of bookkeeping around a few hundred
//! elements. [`rounded_blocks`] makes the `dequantizeLinear` read x alone
//! and compute the rest itself (`quantize::round_blocks`, the same bits);
//! the other nodes are then dead, unless something else reads them.

use std::collections::HashMap;

use super::{constant, producer, rewired, QK};
use crate::backend::cpu::quantize::RoundBlocks;
use crate::graph::ops::elementwise::{BinaryKind, UnaryKind};
use crate::graph::ops::quantize::QuantizeOp;
use crate::graph::ops::reduce::{ReduceKind, ReduceOp};
use crate::graph::{Graph, Node, Op, OperandId};
use crate::tensor::Buf;
use crate::types::DataType;

/// The roundings, by the `dequantizeLinear` node's output operand (the
/// node reads x alone).
pub(in crate::backend::cpu) type Rounds = HashMap<OperandId, RoundBlocks>;

/// The graph with each rounding of the module comment's form as one
/// node; `None` when there is none.
pub(in crate::backend::cpu) fn rounded_blocks(graph: &Graph) -> Option<(Graph, Rounds)> {
    rewired(graph, |g, node| {
        matched(g, node).map(|(spec, x)| (spec, vec![x]))
    })
}

/// The rounding that `node` (a `dequantizeLinear`) ends, and its x.
fn matched(g: &Graph, node: &Node) -> Option<(RoundBlocks, OperandId)> {
    let (Op::Quantize(QuantizeOp::Dequantize { .. }), [q, s, z], [y]) =
        (&node.op, &node.inputs[..], &node.outputs[..])
    else {
        return None;
    };
    let qn = producer(g, *q)?;
    let (Op::Quantize(QuantizeOp::Quantize { .. }), [x, safe, z2]) = (&qn.op, &qn.inputs[..])
    else {
        return None;
    };
    let dx = &g.operands[*x];
    let [rows, nb, QK] = dx.shape[..] else {
        return None;
    };
    let col = [rows, nb, 1];
    let f32_col = |id: OperandId| {
        g.operands[id].data_type == DataType::Float32 && g.operands[id].shape == col
    };
    let zeros = |id: OperandId| {
        g.operands[id].shape == col
            && matches!(constant(g, id), Some(Buf::I8(v)) if v.iter().all(|&z| z == 0))
    };
    if dx.data_type != DataType::Float32
        || g.operands[*q].data_type != DataType::Int8
        || g.operands[*y].data_type != DataType::Float32
        || g.operands[*y].shape != dx.shape
        || !zeros(*z)
        || !zeros(*z2)
        || !f32_col(*safe)
    {
        return None;
    }
    // safe = max(d, t), either way round.
    let mn = producer(g, *safe)?;
    let (Op::Binary(BinaryKind::Max), [a, b]) = (&mn.op, &mn.inputs[..]) else {
        return None;
    };
    let (d, floor) = match (scalar(g, *a), scalar(g, *b)) {
        (None, Some(t)) => (*a, t),
        (Some(t), None) => (*b, t),
        _ => return None,
    };
    if !f32_col(d) || !f32_col(*s) {
        return None;
    }
    // s = d, or d through float16.
    let round16 = match *s == d {
        true => false,
        false => {
            let outer = producer(g, *s)?;
            let (Op::Cast(_), [h]) = (&outer.op, &outer.inputs[..]) else {
                return None;
            };
            let inner = producer(g, *h)?;
            let (Op::Cast(_), [from]) = (&inner.op, &inner.inputs[..]) else {
                return None;
            };
            if *from != d || g.operands[*h].data_type != DataType::Float16 {
                return None;
            }
            true
        }
    };
    // d = div(amax, c).
    let dn = producer(g, d)?;
    let (Op::Binary(BinaryKind::Div), [amax, c]) = (&dn.op, &dn.inputs[..]) else {
        return None;
    };
    let divisor = scalar(g, *c)?;
    // amax = reduceMax(abs(x)) over the block's axis.
    let rn = producer(g, *amax)?;
    let (
        Op::Reduce(ReduceOp::Reduce {
            kind: ReduceKind::Max,
            axes,
            ..
        }),
        [ax],
    ) = (&rn.op, &rn.inputs[..])
    else {
        return None;
    };
    let an = producer(g, *ax)?;
    let (Op::Unary(UnaryKind::Abs), [x2]) = (&an.op, &an.inputs[..]) else {
        return None;
    };
    if axes[..] != [2] || !f32_col(*amax) || x2 != x {
        return None;
    }
    let spec = RoundBlocks {
        divisor,
        floor,
        round16,
    };
    Some((spec, *x))
}

/// The value of a one-element float32 constant.
fn scalar(g: &Graph, id: OperandId) -> Option<f32> {
    if g.operands[id].element_count() != 1 {
        return None;
    }
    match constant(g, id)? {
        Buf::F32(v) if v.len() == 1 => Some(v[0]),
        _ => None,
    }
}

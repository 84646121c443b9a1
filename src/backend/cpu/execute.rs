//! Running a compiled graph: each node's inputs from the slots of the
//! values computed so far (inputs and constants borrowed, intermediates
//! owned), its kernel (or the fused form the compile chose: a quantized
//! product, a constant table, a blocked convolution), and each value
//! freed after its last reader, within the context's memory budget.

use super::*;
use crate::graph::ops::quantize::QuantizeOp;

/// A value during a run: borrowed (inputs, constants) or owned.
enum Slot<'a> {
    Empty,
    Borrowed(&'a Buf),
    Owned(Buf),
}

impl Slot<'_> {
    fn get(&self) -> Option<&Buf> {
        match self {
            Slot::Empty => None,
            Slot::Borrowed(b) => Some(b),
            Slot::Owned(b) => Some(b),
        }
    }
}

/// The inputs of node `n` that are stored in the other layout than it
/// reads them in, converted (by input position); `None` when none is.
fn convert_inputs(
    pl: &nchwc::Plan,
    g: &Graph,
    n: usize,
    slots: &[Slot],
) -> Result<Option<Vec<Option<Buf>>>> {
    let node = &g.nodes[n];
    // A plain blocked convolution (a first layer's few channels) reads its
    // input as NCHW float32 where it lies: an nhwc or float16 one is put
    // in that form first.
    let plain_from = match (&node.op, pl.conv(n)) {
        (Op::Conv2d(p), Some(nchwc::Conv::Direct { plain: true, .. }))
            if p.nhwc
                || node.inputs.first().is_some_and(|&x| {
                    g.operands[x].data_type == crate::types::DataType::Float16
                }) =>
        {
            Some(p)
        }
        _ => None,
    };
    let differs = |k: usize, i: usize| {
        (k == 0 && plain_from.is_some()) || pl.wants_blocked(g, n, k) != pl.is_blocked(i)
    };
    if !node.inputs.iter().enumerate().any(|(k, &i)| differs(k, i)) {
        return Ok(None);
    }
    let started = profile::CPU.enabled().then(std::time::Instant::now);
    let mut out = Vec::with_capacity(node.inputs.len());
    for (k, &i) in node.inputs.iter().enumerate() {
        if !differs(k, i) {
            out.push(None);
            continue;
        }
        let x = slots[i]
            .get()
            .ok_or_else(|| Error::operation("an operand is missing"))?;
        let d = &g.operands[i];
        out.push(Some(match plain_from {
            Some(p) if k == 0 => conv::plain_input(x, p)?,
            _ if pl.is_blocked(i) => pl.to_plain(x, d, i)?,
            _ => pl.to_blocked(x, d, i)?,
        }));
    }
    if let Some(t) = started {
        let key = || format!("{n:3} (layout change of its inputs)");
        profile::CPU.record(key, t.elapsed().as_nanos() as u64);
    }
    Ok(Some(out))
}

/// Rounds a blocked float16 node's float32 result to float16 values, in
/// parallel where it is large: run on one thread after a node that ran on
/// all of them, it was a third of a float16 network's extra time at 2
/// threads. Element by element, so the bits are the same either way.
fn round_to_half(v: &mut [f32]) {
    use rayon::prelude::*;
    const CHUNK: usize = 1 << 14;
    if v.len() >= 4 * CHUNK {
        v.par_chunks_mut(CHUNK).for_each(crate::f16::round_in_place);
    } else {
        crate::f16::round_in_place(v);
    }
}

/// Frees the inputs of node `n` that no later node reads; their memory
/// goes to the pool, for a later node (or the next run) that needs a
/// buffer of their size.
fn free_dead(cg: &CompiledGraph, n: usize, slots: &mut [Slot], live: &mut usize) {
    for &i in &cg.graph.nodes[n].inputs {
        if cg.last_use[i] == n {
            if let Slot::Owned(b) = std::mem::replace(&mut slots[i], Slot::Empty) {
                *live = live.saturating_sub(cg.operand_bytes(i));
                b.recycle();
            }
        }
    }
}

/// Executes a compiled graph on the given input buffers; returns the outputs
/// in `graph.outputs` order.
pub(super) fn execute(
    cg: &CompiledGraph,
    inputs: &[&Buf],
    budget: Option<usize>,
) -> Result<Vec<Buf>> {
    let g = &*cg.graph;
    // Bytes of intermediates alive, against the budget.
    let mut live = 0usize;
    let mut slots: Vec<Slot> = (0..g.operands.len()).map(|_| Slot::Empty).collect();
    for ((_, id), buf) in g.inputs.iter().zip(inputs) {
        slots[*id] = Slot::Borrowed(buf);
    }
    for (id, buf) in &cg.constants {
        slots[*id] = Slot::Borrowed(buf.as_ref());
    }
    use std::borrow::Cow;

    use crate::graph::ops::activation::ActivationOp;

    // Multi-output nodes get their descriptors cloned into this buffer;
    // single-output nodes borrow theirs.
    let mut multi: Vec<OperandDescriptor> = Vec::new();
    // The outputs of concatenations that their inputs' convolutions write
    // in place (by operand), until the concat node.
    let mut concats: HashMap<usize, Vec<f32>> = HashMap::new();
    for (n, node) in g.nodes.iter().enumerate() {
        let plan = cg.nchwc.as_ref();
        // An add that the convolution before it has done: only its
        // inputs' lifetimes end here.
        if plan.is_some_and(|pl| pl.is_fused(n)) {
            free_dead(cg, n, &mut slots, &mut live);
            continue;
        }
        // A concatenation whose parts are written: its output is whole
        // (counted in `live` since its first part).
        if plan.is_some_and(|pl| pl.is_elided(n)) {
            let v = node
                .outputs
                .first()
                .and_then(|o| concats.remove(o).map(|v| (*o, v)));
            let Some((o, v)) = v else {
                return Err(Error::operation("a concatenation's parts were not written"));
            };
            slots[o] = Slot::Owned(Buf::F32(v));
            free_dead(cg, n, &mut slots, &mut live);
            continue;
        }
        // A convolution that writes into a concatenation's output.
        let into = plan.and_then(|pl| pl.concat_part(n));
        let sum = plan.and_then(|pl| pl.sum(n));
        // A depthwise chain that this node starts: it writes the chain's
        // output (see `nchwc::Chain`).
        let chain = plan.and_then(|pl| pl.chain(n));
        let in_descs: Vec<&OperandDescriptor> =
            node.inputs.iter().map(|&i| &g.operands[i]).collect();
        let out_descs: &[OperandDescriptor] = match (chain, &node.outputs[..]) {
            (Some(ch), _) => std::slice::from_ref(&g.operands[ch.out]),
            (None, [o]) => std::slice::from_ref(&g.operands[*o]),
            _ => {
                multi.clear();
                multi.extend(node.outputs.iter().map(|&o| g.operands[o].clone()));
                &multi
            }
        };
        let needed: usize = match (chain, into) {
            (Some(ch), _) => cg.operand_bytes(ch.out),
            (None, Some(to)) if concats.contains_key(&to.out) => 0,
            (None, Some(to)) => cg.operand_bytes(to.out),
            (None, None) => node.outputs.iter().map(|&o| cg.operand_bytes(o)).sum(),
        };
        if let Some(budget) = budget {
            if live.saturating_add(needed) > budget {
                return Err(Error::operation(format!(
                    "cannot allocate {needed} bytes for the output of {}{}: the context's memoryLimit leaves {} bytes",
                    node.op.name(),
                    if node.label.is_empty() { String::new() } else { format!(" [{}]", node.label) },
                    budget.saturating_sub(live)
                )));
            }
        }
        live += needed;
        // A float16 node whose output is held blocked in float32 (see
        // `nchwc`): its blocked inputs are float32 values too, so it
        // computes on float32 descriptors, and its result is rounded to
        // float16 below.
        let half = plan.is_some_and(|pl| node.outputs.len() == 1 && pl.is_half(node.outputs[0]));
        let (half_ins, half_out);
        let (in_descs, out_descs) = match half {
            true => {
                let wide = |d: &OperandDescriptor| OperandDescriptor {
                    data_type: match d.data_type {
                        crate::types::DataType::Float16 => crate::types::DataType::Float32,
                        t => t,
                    },
                    shape: d.shape.clone(),
                };
                half_ins = in_descs.iter().map(|d| wide(d)).collect::<Vec<_>>();
                half_out = wide(&out_descs[0]);
                (
                    half_ins.iter().collect::<Vec<_>>(),
                    std::slice::from_ref(&half_out),
                )
            }
            false => (in_descs, out_descs),
        };
        // Inputs stored in the other layout than this node reads them in,
        // converted (kept until the node is done).
        let converted = match &cg.nchwc {
            Some(pl) => convert_inputs(pl, g, n, &slots)?,
            None => None,
        };
        let started = profile::CPU.enabled().then(std::time::Instant::now);
        // An owned intermediate that dies here and is read once by this
        // node can become the output of an element-wise node in place.
        let reusable = |slots: &[Slot], i: usize| {
            cg.last_use[i] == n
                && matches!(slots[i], Slot::Owned(_))
                && node.inputs.iter().filter(|&&j| j == i).count() == 1
        };
        // A fused softmax (see `fuse::fused_softmaxes`): a softmax node, or
        // the cast that rounds its results.
        let fused_softmax = match node.op {
            Op::Softmax(_) | Op::Cast(_) if !cg.softmaxes.is_empty() => {
                node.outputs.first().and_then(|o| cg.softmaxes.get(o))
            }
            _ => None,
        };
        // A fused SwiGLU (see `fuse::fused_swiglus`): a `mul` node.
        let fused_swiglu = match node.op {
            Op::Binary(_) if !cg.swiglus.is_empty() => {
                node.outputs.first().and_then(|o| cg.swiglus.get(o))
            }
            _ => None,
        };
        // A fused rotation (see `fuse::fused_ropes`): an `add` node.
        let fused_rope = match node.op {
            Op::Binary(_) if !cg.ropes.is_empty() => {
                node.outputs.first().and_then(|o| cg.ropes.get(o))
            }
            _ => None,
        };
        let in_place = fused_swiglu.is_none()
            && fused_rope.is_none()
            && (fused_softmax.is_some()
                || matches!(
                    node.op,
                    Op::Binary(_)
                        | Op::Softmax(_)
                        | Op::Activation(ActivationOp::Gelu)
                        | Op::Reshape
                ))
            && node.outputs.len() == 1
            && converted.is_none()
            && node.inputs.iter().any(|&i| reusable(&slots, i));
        let results = if in_place {
            let mut taken: Vec<Option<Buf>> = Vec::with_capacity(node.inputs.len());
            for &i in &node.inputs {
                if reusable(&slots, i) {
                    if let Slot::Owned(b) = std::mem::replace(&mut slots[i], Slot::Empty) {
                        live = live.saturating_sub(cg.operand_bytes(i));
                        taken.push(Some(b));
                        continue;
                    }
                }
                taken.push(None);
            }
            let mut args: Vec<Cow<Buf>> = Vec::with_capacity(node.inputs.len());
            for (&i, t) in node.inputs.iter().zip(taken) {
                args.push(match t {
                    Some(b) => Cow::Owned(b),
                    None => Cow::Borrowed(slots[i].get().expect("operand computed before use")),
                });
            }
            let out = &out_descs[0];
            let mut args = args.into_iter();
            let mut next = || {
                args.next()
                    .ok_or_else(|| Error::operation("an operator is missing an input"))
            };
            match &node.op {
                _ if fused_softmax.is_some() => {
                    let Some(spec) = fused_softmax else {
                        unreachable!("checked by the guard")
                    };
                    let x = next()?;
                    let mask = match spec.mask {
                        true => Some(next()?),
                        false => None,
                    };
                    elementwise::softmax_fused(x, mask.as_deref(), spec.round16, out)
                }
                Op::Binary(k) => {
                    let (a, b) = (next()?, next()?);
                    elementwise::binary_owned(*k, a, in_descs[0], b, in_descs[1], out)
                }
                Op::Softmax(SoftmaxParams { axis }) => {
                    elementwise::softmax_owned(next()?, *axis, out)
                }
                // The same elements: the buffer moves on, no copy.
                Op::Reshape => Ok(next()?.into_owned()),
                _ => activation::gelu_owned(next()?, out),
            }
            .map(|b| vec![b])
        } else {
            let ins: Vec<&Buf> = node
                .inputs
                .iter()
                .enumerate()
                .map(|(k, &i)| {
                    let c = converted.as_ref().and_then(|c| c[k].as_ref());
                    c.unwrap_or_else(|| slots[i].get().expect("operand computed before use"))
                })
                .collect();
            let blocked = plan.and_then(|pl| pl.conv(n));
            // Looked up only for the operators they can be (a decode step
            // runs thousands of nodes; each lookup hashes).
            let quantized = match node.op {
                Op::Matmul | Op::Gemm(_) if !cg.quantized.is_empty() => {
                    node.outputs.first().and_then(|o| cg.quantized.get(o))
                }
                _ => None,
            };
            let table = match node.op {
                Op::Gather(_) if !cg.tables.is_empty() => {
                    node.outputs.first().and_then(|o| cg.tables.get(o))
                }
                _ => None,
            };
            let round = match node.op {
                Op::Quantize(QuantizeOp::Dequantize { .. }) if !cg.rounds.is_empty() => {
                    node.outputs.first().and_then(|o| cg.rounds.get(o))
                }
                _ => None,
            };
            let conv_packed = match node.op {
                Op::Conv2d(_) if !cg.conv_packed.is_empty() => cg.conv_packed.get(&n),
                _ => None,
            };
            match (&node.op, conv_packed, blocked) {
                _ if fused_rope.is_some() => {
                    let (Some(spec), [x, c, s], [_, dc, _]) = (fused_rope, &ins[..], &in_descs[..])
                    else {
                        return Err(Error::operation("rope: missing operands"));
                    };
                    let at = (spec.offset, spec.stride);
                    elementwise::rope(x, at, c, s, &dc.shape, &out_descs[0]).map(|b| vec![b])
                }
                _ if fused_swiglu.is_some() => {
                    let (Some(spec), [g, u]) = (fused_swiglu, &ins[..]) else {
                        return Err(Error::operation("swiglu: missing operands"));
                    };
                    elementwise::swiglu(g, spec.gate, u, spec.up, &out_descs[0]).map(|b| vec![b])
                }
                _ if fused_softmax.is_some() => {
                    let (Some(spec), Some(&x)) = (fused_softmax, ins.first()) else {
                        return Err(Error::operation("softmax: missing operands"));
                    };
                    let mask = match spec.mask {
                        true => Some(
                            *ins.get(1)
                                .ok_or_else(|| Error::operation("softmax: missing operands"))?,
                        ),
                        false => None,
                    };
                    elementwise::softmax_fused(Cow::Borrowed(x), mask, spec.round16, &out_descs[0])
                        .map(|b| vec![b])
                }
                (Op::Matmul | Op::Gemm(_), _, _) if quantized.is_some() => {
                    let Some(w) = quantized else {
                        unreachable!("checked by the guard")
                    };
                    let sums = node.outputs.first().and_then(|o| cg.sums.get(o));
                    matmul::quantized(
                        &node.op,
                        w,
                        sums.map(|s| &**s),
                        &ins,
                        &in_descs,
                        &out_descs[0],
                    )
                    .map(|b| vec![b])
                }
                (Op::Quantize(_), _, _) if round.is_some() => {
                    let (Some(spec), [x], [dx]) = (round, &ins[..], &in_descs[..]) else {
                        return Err(Error::operation("dequantizeLinear: missing operands"));
                    };
                    let block = dx.shape.last().copied().unwrap_or(0);
                    quantize::round_blocks(spec, x, block).map(|b| vec![b])
                }
                (Op::Gather(GatherOp::Gather { axis }), _, _) if table.is_some() => {
                    let (Some((bytes, d)), [ids], [di]) = (table, &ins[..], &in_descs[..]) else {
                        return Err(Error::operation("gather: missing operands"));
                    };
                    gather::gather_table(bytes, d, *axis, ids, di, &out_descs[0]).map(|b| vec![b])
                }
                (_, _, Some(_)) if chain.is_some() => {
                    let (Some(pl), Some(ch)) = (plan, chain) else {
                        unreachable!("a chain comes from a plan")
                    };
                    let residual = match ch.project.and_then(|m| pl.sum(m)) {
                        Some(s) => Some(
                            slots[s.residual]
                                .get()
                                .ok_or_else(|| Error::operation("an operand is missing"))?,
                        ),
                        None => None,
                    };
                    pl.run_chain(g, ch, ins[0], |i| slots[i].get(), residual)
                        .map(|b| vec![b])
                }
                (Op::Conv2d(p), _, Some(c)) if into.is_some() => {
                    let Some(to) = into else {
                        unreachable!("checked by the guard")
                    };
                    let v = match concats.entry(to.out) {
                        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                        std::collections::hash_map::Entry::Vacant(e) => {
                            e.insert(Buf::try_f32_for_overwrite(to.total)?)
                        }
                    };
                    let part = v
                        .get_mut(to.at..to.at + out_descs[0].element_count())
                        .ok_or_else(|| {
                            Error::operation("a concatenation's part is out of range")
                        })?;
                    // Nothing to store: the part is written (and rounded
                    // as this node's own result would be).
                    nchwc::conv_into(c, p, &ins, None, &out_descs[0], part).map(|()| {
                        if half {
                            round_to_half(part);
                        }
                        Vec::new()
                    })
                }
                (Op::Conv2d(p), _, Some(c)) => {
                    let residual = match sum {
                        Some(s) => Some((
                            slots[s.residual]
                                .get()
                                .ok_or_else(|| Error::operation("an operand is missing"))?,
                            s.after,
                        )),
                        None => None,
                    };
                    nchwc::conv(c, p, &ins, residual, &out_descs[0]).map(|b| vec![b])
                }
                (Op::Conv2d(p), Some(packed), None) => {
                    conv::conv2d_packed(p, &ins, &out_descs[0], Some(packed)).map(|b| vec![b])
                }
                (Op::Recurrent(o), _, _) if !cg.recurrent.is_empty() => {
                    recurrent::run(o, &ins, &in_descs, out_descs, cg.recurrent.get(&n))
                }
                (Op::Pool2d(p), _, None) if plan.is_some_and(|pl| pl.is_pool(n)) => {
                    nchwc::pool(p, ins[0], out_descs[0].data_type).map(|b| vec![b])
                }
                (Op::Concat(_), _, None) if plan.is_some_and(|pl| pl.is_concat(n)) => {
                    nchwc::concat(&ins, out_descs[0].shape[0]).map(|b| vec![b])
                }
                _ => run_op(
                    &node.op,
                    &ins,
                    &in_descs,
                    out_descs,
                    // Only products have a packed B (`prepack`).
                    match node.op {
                        Op::Matmul | Op::Gemm(_) => cg.packed.get(&n).map(|p| &**p),
                        _ => None,
                    },
                ),
            }
        };
        if let Some(t) = started {
            let key = || {
                let shapes: Vec<_> = in_descs.iter().map(|d| d.shape.clone()).collect();
                let fused = match chain {
                    Some(ch) => format!(
                        " chain ({}depthwise {}{})",
                        if ch.expand.is_some() { "1x1, " } else { "" },
                        ch.depthwise,
                        match ch.project {
                            Some(m) if plan.and_then(|pl| pl.sum(m)).is_some() => ", 1x1 + add",
                            Some(_) => ", 1x1",
                            None => "",
                        }
                    ),
                    None if sum.is_some() => " (+ add)".into(),
                    None => String::new(),
                };
                format!(
                    "{n:3} {}{fused} {shapes:?} -> {:?}",
                    node.op.name(),
                    out_descs[0].shape
                )
            };
            profile::CPU.record(key, t.elapsed().as_nanos() as u64);
        }
        let results = results.map_err(|e| {
            if node.label.is_empty() {
                e
            } else {
                Error::new(
                    e.kind,
                    format!("{} (operator labelled {:?})", e.message, node.label),
                )
            }
        })?;
        // A convolution that does the residual add writes the add's output.
        let outputs = match (chain, sum) {
            (Some(ch), _) => std::slice::from_ref(&ch.out),
            (None, Some(s)) => std::slice::from_ref(&s.out),
            (None, None) => &node.outputs[..],
        };
        for (&o, mut r) in outputs.iter().zip(results) {
            if half {
                match &mut r {
                    Buf::F32(v) => round_to_half(v),
                    _ => return Err(Error::operation("a blocked float16 result is not float32")),
                }
            }
            slots[o] = Slot::Owned(r);
        }
        for b in converted.into_iter().flatten().flatten() {
            b.recycle();
        }
        free_dead(cg, n, &mut slots, &mut live);
    }
    // One operand may be bound to several output names: the first takes its
    // buffer, the others copy that result.
    let mut results: Vec<Buf> = Vec::with_capacity(g.outputs.len());
    for (k, (_, id)) in g.outputs.iter().enumerate() {
        let out = match std::mem::replace(&mut slots[*id], Slot::Empty) {
            // Graph outputs are in their own layout, not blocked.
            Slot::Owned(b) => match cg.nchwc.as_ref().filter(|pl| pl.is_blocked(*id)) {
                Some(pl) => {
                    let plain = pl.to_plain(&b, &g.operands[*id], *id);
                    b.recycle();
                    plain?
                }
                None => b,
            },
            Slot::Borrowed(b) => b.clone(),
            Slot::Empty => match g.outputs[..k].iter().position(|(_, o)| o == id) {
                Some(first) => results[first].pooled_clone(),
                None => return Err(Error::operation("an output was never computed")),
            },
        };
        results.push(out);
    }
    Ok(results)
}

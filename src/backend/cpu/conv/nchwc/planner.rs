//! The plan of a graph's blocked layout: which operands are stored
//! blocked (and in which layout and type), which convolutions run blocked
//! and in which form, and which nodes a blocked convolution does with
//! its own work (residual sums and the activations after them, a
//! concatenation's parts), decided once at build by walking the graph.

use std::collections::HashMap;

use super::*;

/// Decides the layout of every operand of `graph` (see the module
/// comment); `None` when nothing would run blocked.
pub(in crate::backend::cpu) fn plan(
    graph: &Graph,
    constants: &crate::backend::cpu::Constants,
) -> Option<Plan> {
    match disabled() {
        true => None,
        false => plan_for(graph, constants, best()?),
    }
}

/// [`plan`] for the kernels of `isa`.
pub(super) fn plan_for(
    graph: &Graph,
    constants: &crate::backend::cpu::Constants,
    isa: Isa,
) -> Option<Plan> {
    plan_with(graph, constants, isa, true)
}

/// [`plan_for`], with windowed pools and concats run blocked only when
/// `windows` (the tests compare both).
pub(super) fn plan_with(
    graph: &Graph,
    constants: &crate::backend::cpu::Constants,
    isa: Isa,
    windows: bool,
) -> Option<Plan> {
    let mut blocked = vec![false; graph.operands.len()];
    // The layout each operand has been seen in by a blocked node (a
    // tensor of shape [1, 8, 8, 8] could be read both ways by two
    // nodes: the second does not run blocked).
    let mut layout: Vec<Option<bool>> = vec![None; graph.operands.len()];
    let mut half = vec![false; graph.operands.len()];
    let mut convs = HashMap::new();
    let mut pools = vec![false; graph.nodes.len()];
    let mut concats = vec![false; graph.nodes.len()];
    let uses = uses(graph);
    for (ni, node) in graph.nodes.iter().enumerate() {
        let [out] = node.outputs[..] else { continue };
        match &node.op {
            Op::Pool2d(p) => {
                let Some(&x) = node.inputs.first() else {
                    continue;
                };
                let from_blocked = blocked[x] && layout[x] == Some(p.nhwc);
                let d = &graph.operands[out];
                if from_blocked && float_4d(d) == Some(half[x]) && pool::is_global(p) {
                    // Its output (1x1 planes) is the same in both layouts
                    // and stays NCHW; a float16 one is narrowed from the
                    // float32 result, as the plain kernel's is.
                    pools[ni] = true;
                } else if windows
                    && from_blocked
                    && float_4d(d) == Some(half[x])
                    && pool::is_window(p)
                {
                    // float16: max picks a float16 value; average and l2
                    // are rounded as the node's own result is.
                    pools[ni] = true;
                    blocked[out] = true;
                    layout[out] = layout[x];
                    half[out] = half[x];
                }
            }
            Op::Concat(ConcatParams { axis }) => {
                let Some(&first) = node.inputs.first() else {
                    continue;
                };
                let l = layout[first];
                // The channel axis of the layout the inputs are blocked in.
                let channels = if l == Some(true) { 3 } else { 1 };
                let d = &graph.operands[out];
                concats[ni] = windows
                    && blocked[first]
                    && *axis == channels
                    && float_4d(d) == Some(half[first])
                    && node.inputs.iter().all(|&i| {
                        let s = &graph.operands[i].shape;
                        blocked[i]
                            && layout[i] == l
                            && half[i] == half[first]
                            && s.len() == 4
                            && s[0] == d.shape[0]
                            && s[channels].is_multiple_of(L)
                    });
                if concats[ni] {
                    blocked[out] = true;
                    layout[out] = l;
                    half[out] = half[first];
                }
            }
            Op::Conv2d(p) => {
                // Winograd reads its input blocked, unpadded: a graph
                // input pays a layout change (which the direct kernel
                // folds into its padded copy), still far less than the
                // products it saves.
                let x = node.inputs[0];
                if layout[x].is_some_and(|l| l != p.nhwc) || alone(p, blocked[x], uses.2[out]) {
                    continue;
                }
                let winograd = winograd_conv(node, p, constants, isa);
                if let Some(mut c) =
                    winograd.or_else(|| blocked_conv(graph, node, p, constants, isa))
                {
                    match &mut c {
                        // The padded copy that blocks as it pads reads
                        // NCHW only.
                        Conv::Direct {
                            plain: false,
                            nchw_in,
                            ..
                        } => {
                            *nchw_in = !p.nhwc
                                && p.padding != [0; 4]
                                && !blocked[x]
                                && graph.operands[x].data_type == DataType::Float32
                        }
                        // The form measured faster on this CPU (the same
                        // bits either way).
                        Conv::Depthwise { isa, .. } => *isa = depthwise::preferred(*isa),
                        _ => {}
                    }
                    // A plain input is read in NCHW whatever the
                    // layout: none is set for it.
                    if !matches!(c, Conv::Direct { plain: true, .. }) {
                        layout[x] = Some(p.nhwc);
                    }
                    convs.insert(ni, c);
                    blocked[out] = true;
                    layout[out] = Some(p.nhwc);
                    half[out] = graph.operands[out].data_type == DataType::Float16;
                }
            }
            // Element-wise on one operand (ResNet's ReLU after the
            // residual sum): the layout does not matter. float16 ones
            // compute in float32 and round, as their own kernels do.
            Op::Unary(_) | Op::Clamp(_) => {
                let d = &graph.operands[out];
                if let [x] = node.inputs[..] {
                    blocked[out] = blocked[x]
                        && float_4d(d) == Some(half[x])
                        && graph.operands[x].shape == d.shape;
                    if blocked[out] {
                        layout[out] = layout[x];
                        half[out] = half[x];
                    }
                }
            }
            Op::Binary(_) => {
                let d = &graph.operands[out];
                if let [a, b] = node.inputs[..] {
                    blocked[out] = blocked[a]
                        && blocked[b]
                        && layout[a] == layout[b]
                        && half[a] == half[b]
                        && float_4d(d) == Some(half[a])
                        && graph.operands[a].shape == d.shape
                        && graph.operands[b].shape == d.shape;
                    if blocked[out] {
                        layout[out] = layout[a];
                        half[out] = half[a];
                    }
                }
            }
            _ => {}
        }
    }
    let (mut sums, mut fused) = residual_sums(graph, &blocked, &half, &convs, &uses);
    let mut chains = chain::find(graph, &convs, &sums, (&uses.0, &uses.1, &uses.2));
    // A chain computes in float32 and rounds each stage's rows to
    // float16 where its node would (all of its stages or none are
    // float16: a stage reads the one before blocked, as its own type).
    chains.retain(|&first, ch| {
        let out = |m: usize| graph.nodes[m].outputs[0];
        std::iter::once(first)
            .chain(ch.absorbed())
            .all(|m| half[out(m)] == half[ch.out])
    });
    for m in chains.values().flat_map(Chain::absorbed) {
        fused[m] = true;
    }
    activations_after_sums(
        graph, &blocked, &half, &mut sums, &chains, &mut fused, &uses,
    );
    let (into, elided) = concats_in_place(
        graph,
        &concats,
        &half,
        &convs,
        (&sums, &chains, &fused),
        &uses,
    );
    (!convs.is_empty()).then_some(Plan {
        blocked,
        nhwc: layout.iter().map(|l| *l == Some(true)).collect(),
        half,
        convs,
        sums,
        chains,
        fused,
        pools,
        concats,
        into,
        elided,
        isa,
    })
}

/// Folds into each residual sum of a direct or Winograd convolution
/// outside a chain the relu or clamp that alone reads the sum (see
/// [`Sum::after`]): the node runs no more, and its memory pass over the
/// sum with it (ResNet-50's sixteen: 1.3 ms of a 62 ms inference at one
/// thread). A chain's projection keeps its sums as they are.
fn activations_after_sums(
    graph: &Graph,
    blocked: &[bool],
    half: &[bool],
    sums: &mut HashMap<usize, Sum>,
    chains: &HashMap<usize, Chain>,
    fused: &mut [bool],
    (_, readers, reader): &Uses,
) {
    for (ci, s) in sums.iter_mut() {
        if chains.contains_key(ci) || fused[*ci] || readers[s.out] != 1 {
            continue;
        }
        // Its one reader may be the graph's output (no node).
        let a = reader[s.out];
        let Some(node) = graph.nodes.get(a) else {
            continue;
        };
        let after = match node.op {
            Op::Clamp(crate::graph::ops::elementwise::ClampParams { min, max }) => {
                (min as f32, max as f32)
            }
            Op::Unary(crate::graph::ops::elementwise::UnaryKind::Relu) => (0.0, f32::INFINITY),
            _ => continue,
        };
        let ([x], [out]) = (&node.inputs[..], &node.outputs[..]) else {
            continue;
        };
        if *x == s.out && blocked[*out] && !half[*out] {
            s.after = after;
            s.out = *out;
            fused[a] = true;
        }
    }
}

/// The blocked concatenations whose every input a convolution writes in
/// place (see [`ConcatPart`]): of one image, each input produced by a
/// convolution that writes only it (no residual add, no chain) and read
/// by nothing else (a float16 one rounds its part to float16 as it
/// would its own output). The producers by node, and the
/// concatenations.
fn concats_in_place(
    graph: &Graph,
    concats: &[bool],
    half: &[bool],
    convs: &HashMap<usize, Conv>,
    (sums, chains, fused): (&HashMap<usize, Sum>, &HashMap<usize, Chain>, &[bool]),
    (producer, readers, _): &Uses,
) -> (HashMap<usize, ConcatPart>, Vec<bool>) {
    let mut into = HashMap::new();
    let mut elided = vec![false; graph.nodes.len()];
    for (ni, node) in graph.nodes.iter().enumerate() {
        let [out] = node.outputs[..] else { continue };
        let d = &graph.operands[out];
        if !concats[ni] || d.shape.first() != Some(&1) {
            continue;
        }
        let total = d.element_count();
        let mut at = 0;
        let mut parts = Vec::with_capacity(node.inputs.len());
        for &i in &node.inputs {
            let m = producer[i];
            let writes_it = convs.contains_key(&m)
                && !sums.contains_key(&m)
                && !chains.contains_key(&m)
                && !fused[m]
                && graph.nodes[m].outputs[..] == [i]
                && half[i] == half[out]
                && readers[i] == 1
                && !into.contains_key(&m);
            if !writes_it {
                break;
            }
            parts.push((m, ConcatPart { out, at, total }));
            at += graph.operands[i].element_count();
        }
        if parts.len() == node.inputs.len() && at == total {
            into.extend(parts);
            elided[ni] = true;
        }
    }
    (into, elided)
}

/// Whether a conv2d of `p` is a 1x1 product with nothing to chain with:
/// unit strides, no padding, one group, its input not held blocked
/// (`blocked_in`) and its output read by no node (`reader`, from
/// [`uses`], is `usize::MAX`: a graph output). Blocked, such a
/// convolution would pay a layout change at each end for nothing; in
/// its own layout it is one product of the filter and the planes (or the
/// pixels, in nhwc) as they lie. Measured alone on an Intel Xeon with
/// AVX-512, one thread, an inference with its input written and its
/// output read: 1x1 from 32 channels to 96 at 112x112 2.0-2.1 ms against
/// 2.5, from 96 to 576 at 14x14 0.36-0.38 against 0.44, from 320 to 1280
/// at 7x7 0.47 against 0.45-0.46.
pub(super) fn alone(p: &Conv2dParams, blocked_in: bool, reader: usize) -> bool {
    p.kernel_h == 1
        && p.kernel_w == 1
        && p.strides == [1, 1]
        && p.dilations == [1, 1]
        && p.padding == [0; 4]
        && p.groups == 1
        && !blocked_in
        && reader == usize::MAX
}

/// Each operand's producing node (`usize::MAX` for none), number of
/// readers (a graph output counts as one) and last reading node.
type Uses = (Vec<usize>, Vec<usize>, Vec<usize>);

fn uses(graph: &Graph) -> Uses {
    let mut producer = vec![usize::MAX; graph.operands.len()];
    let mut readers = vec![0usize; graph.operands.len()];
    let mut reader = vec![usize::MAX; graph.operands.len()];
    for (ni, node) in graph.nodes.iter().enumerate() {
        for &o in &node.outputs {
            producer[o] = ni;
        }
        for &i in &node.inputs {
            readers[i] += 1;
            reader[i] = ni;
        }
    }
    for (_, o) in &graph.outputs {
        readers[*o] += 1;
    }
    (producer, readers, reader)
}

/// The blocked element-wise adds that the direct convolution producing
/// one of their inputs can do in its epilogue (see [`Sum`]).
fn residual_sums(
    graph: &Graph,
    blocked: &[bool],
    half: &[bool],
    convs: &HashMap<usize, Conv>,
    (producer, readers, _): &Uses,
) -> (HashMap<usize, Sum>, Vec<bool>) {
    let mut sums = HashMap::new();
    let mut fused = vec![false; graph.nodes.len()];
    for (ni, node) in graph.nodes.iter().enumerate() {
        let (Op::Binary(BinaryKind::Add), [a, b], [out]) =
            (&node.op, &node.inputs[..], &node.outputs[..])
        else {
            continue;
        };
        // A float16 sum rounds the convolution's result, then the add's;
        // the epilogue would round once.
        if !blocked[*out] || half[*out] || a == b {
            continue;
        }
        for (c, r) in [(*a, *b), (*b, *a)] {
            let ci = producer[c];
            let direct = matches!(
                convs.get(&ci),
                Some(Conv::Direct { .. } | Conv::Winograd { .. })
            );
            // The residual exists when the convolution runs; the
            // convolution's output has no other reader.
            if direct && readers[c] == 1 && producer[r] < ci && !sums.contains_key(&ci) {
                sums.insert(
                    ci,
                    Sum {
                        residual: r,
                        out: *out,
                        after: (f32::NEG_INFINITY, f32::INFINITY),
                    },
                );
                fused[ni] = true;
                break;
            }
        }
    }
    (sums, fused)
}

//! Convolution chains in a channel-blocked layout ("NCHW8c").
//!
//! In NCHW every convolution has to bring its input into a shape the
//! vector unit likes: the products pack panels of B out of the input
//! planes (one read and one write of the whole input per layer) and the
//! depthwise kernel interleaves eight planes and splits them again. In the
//! blocked layout a tensor `[n, c, h, w]` is stored as
//! `[n, c / 8, h, w, 8]`: one 8-lane vector holds one pixel of eight
//! channels. A convolution then reads its input where it lies: a row of
//! output pixels times 16 output channels is a tile of broadcast inputs
//! and filter vectors (the filter packed once at build), and a depthwise
//! tap is one load and one multiply-add per pixel. Its output is blocked
//! again, so a chain of convolutions (and the element-wise adds between
//! them, which do not care about the layout) pays the layout change only
//! at its ends.
//!
//! [`plan`] decides at build which operands are stored blocked: the
//! outputs of the float32 NCHW convolutions whose channel counts are
//! multiples of 8 (plain or depthwise, constant filter), and of
//! element-wise binary nodes whose two inputs are blocked operands of
//! their own shape. A node that wants an input in the other layout gets a
//! converted copy (`to_blocked`, `to_nchw`); graph outputs are always
//! NCHW. Only on x86-64 with AVX2 and FMA; elsewhere the plan is empty
//! and every convolution runs in `conv.rs`.

use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::graph::op::{BinaryKind, Conv2dParams, Op};
use crate::graph::Graph;
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

/// Channels per block: the lanes of an AVX2 float vector.
pub(super) const L: usize = 8;

/// Which operands of a compiled graph are stored blocked, and the
/// filters of the convolutions that run blocked.
pub(super) struct Plan {
    blocked: Vec<bool>,
    convs: HashMap<usize, Conv>,
    /// Direct convolutions (by node) that add a residual in their
    /// epilogue and write the sum: the add node runs no more.
    sums: HashMap<usize, Sum>,
    /// Add nodes whose sum a convolution writes.
    fused: Vec<bool>,
}

/// A residual add folded into the convolution before it: `out =
/// conv(...) + residual`, where the add read the convolution's output
/// (read by nothing else) and `residual`, an operand computed before the
/// convolution. The same two roundings as the two nodes.
pub(super) struct Sum {
    pub residual: usize,
    pub out: usize,
}

/// A convolution that runs in the blocked layout, its filter packed.
pub(super) enum Conv {
    /// groups = 1: `w` holds one panel per 16 output channels (8 for an
    /// odd last block), each `[ic / 8][kh * kw][8 input][nb * 8 output]`,
    /// or with `plain` (the input read in NCHW: the few input channels of
    /// a network's first layer) `[kh * kw][ic][nb * 8]`.
    Direct {
        w: Vec<f32>,
        panels: Vec<Panel>,
        plain: bool,
    },
    /// groups = channels: `w` is `[c / 8][kh * kw][8]`.
    Depthwise { w: Vec<f32> },
}

/// A panel of a direct convolution's filter: output channel block `ob0`
/// and the next `nb - 1`, at `off` in the packed filter.
#[derive(Clone, Copy)]
pub(super) struct Panel {
    ob0: usize,
    nb: usize,
    off: usize,
}

/// Whether `WEBNN_CPU_NCHWC=0` turns the blocked layout off (read at each
/// build, so one process can compare both ways).
fn disabled() -> bool {
    std::env::var("WEBNN_CPU_NCHWC").is_ok_and(|v| v == "0")
}

/// Whether this CPU runs the blocked kernels.
pub(super) fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

fn is_f32_4d(d: &OperandDescriptor) -> bool {
    d.data_type == DataType::Float32 && d.rank() == 4
}

/// The blocked form of a conv2d node, when it has one: float32 NCHW, a
/// constant float32 filter, channel counts multiples of 8, and plain
/// (groups 1) or depthwise.
fn blocked_conv(
    graph: &Graph,
    node: &crate::graph::Node,
    p: &Conv2dParams,
    constants: &HashMap<usize, Buf>,
) -> Option<Conv> {
    let (x, f) = (*node.inputs.first()?, *node.inputs.get(1)?);
    let out = *node.outputs.first()?;
    // Input channels that are not whole blocks are read in NCHW, for a
    // plain convolution of at most 8 of them (an image's 3 or 4).
    let plain = !p.in_channels.is_multiple_of(L);
    if p.nhwc
        || !is_f32_4d(&graph.operands[x])
        || !is_f32_4d(&graph.operands[out])
        || (plain && (p.groups != 1 || p.in_channels > L))
        || !p.out_channels.is_multiple_of(L)
        || p.kernel_h == 0
        || p.kernel_w == 0
        || p.out_h == 0
        || p.out_w == 0
        || p.strides.contains(&0)
        || p.dilations.contains(&0)
    {
        return None;
    }
    let Buf::F32(f) = constants.get(&f)? else {
        return None;
    };
    let khw = p.kernel_h * p.kernel_w;
    let depthwise = p.groups == p.in_channels && p.groups == p.out_channels;
    if !depthwise && p.groups != 1 {
        return None;
    }
    let cg = p.in_channels / p.groups;
    if f.len() != p.out_channels * cg * khw {
        return None;
    }
    let f = super::conv::filter_oihw(f, p);
    if depthwise {
        let c = p.in_channels;
        let mut w = vec![0.0f32; c * khw];
        for cb in 0..c / L {
            for t in 0..khw {
                for l in 0..L {
                    w[(cb * khw + t) * L + l] = f[(cb * L + l) * khw + t];
                }
            }
        }
        return Some(Conv::Depthwise { w });
    }
    let (ic, ocb) = (p.in_channels, p.out_channels / L);
    let mut w = Vec::with_capacity(p.out_channels * ic * khw);
    let mut panels = Vec::new();
    let mut ob0 = 0;
    while ob0 < ocb {
        // Panels of 2 blocks, an odd count's last of 1. (Panels of 3
        // blocks by 4 pixels measured slower: 144 -> 24 channels on 56x56,
        // 496 against 672 us.)
        let nb = (ocb - ob0).min(2);
        panels.push(Panel {
            ob0,
            nb,
            off: w.len(),
        });
        // Input channels in the order the kernel reads them: blocks of 8,
        // within them taps, within those channels (plain: one block of
        // all ic).
        let (blocks, per) = if plain { (1, ic) } else { (ic / L, L) };
        for ib in 0..blocks {
            for t in 0..khw {
                for ci in ib * per..(ib + 1) * per {
                    for o in ob0 * L..(ob0 + nb) * L {
                        w.push(f[(o * ic + ci) * khw + t]);
                    }
                }
            }
        }
        ob0 += nb;
    }
    Some(Conv::Direct { w, panels, plain })
}

/// Decides the layout of every operand of `graph` (see the module
/// comment); `None` when nothing would run blocked.
pub(super) fn plan(graph: &Graph, constants: &HashMap<usize, Buf>) -> Option<Plan> {
    if !available() || disabled() {
        return None;
    }
    let mut blocked = vec![false; graph.operands.len()];
    let mut convs = HashMap::new();
    for (ni, node) in graph.nodes.iter().enumerate() {
        let [out] = node.outputs[..] else { continue };
        match &node.op {
            Op::Conv2d(p) => {
                if let Some(c) = blocked_conv(graph, node, p, constants) {
                    convs.insert(ni, c);
                    blocked[out] = true;
                }
            }
            Op::Binary(_) => {
                let d = &graph.operands[out];
                if let [a, b] = node.inputs[..] {
                    blocked[out] = blocked[a]
                        && blocked[b]
                        && is_f32_4d(d)
                        && graph.operands[a].shape == d.shape
                        && graph.operands[b].shape == d.shape;
                }
            }
            _ => {}
        }
    }
    let (sums, fused) = residual_sums(graph, &blocked, &convs);
    (!convs.is_empty()).then_some(Plan {
        blocked,
        convs,
        sums,
        fused,
    })
}

/// The blocked element-wise adds that the direct convolution producing
/// one of their inputs can do in its epilogue (see [`Sum`]).
fn residual_sums(
    graph: &Graph,
    blocked: &[bool],
    convs: &HashMap<usize, Conv>,
) -> (HashMap<usize, Sum>, Vec<bool>) {
    let mut producer = vec![usize::MAX; graph.operands.len()];
    let mut readers = vec![0usize; graph.operands.len()];
    for (ni, node) in graph.nodes.iter().enumerate() {
        for &o in &node.outputs {
            producer[o] = ni;
        }
        for &i in &node.inputs {
            readers[i] += 1;
        }
    }
    for (_, o) in &graph.outputs {
        readers[*o] += 1;
    }
    let mut sums = HashMap::new();
    let mut fused = vec![false; graph.nodes.len()];
    for (ni, node) in graph.nodes.iter().enumerate() {
        let (Op::Binary(BinaryKind::Add), [a, b], [out]) =
            (&node.op, &node.inputs[..], &node.outputs[..])
        else {
            continue;
        };
        if !blocked[*out] || a == b {
            continue;
        }
        for (c, r) in [(*a, *b), (*b, *a)] {
            let ci = producer[c];
            let direct = matches!(convs.get(&ci), Some(Conv::Direct { .. }));
            // The residual exists when the convolution runs; the
            // convolution's output has no other reader.
            if direct && readers[c] == 1 && producer[r] < ci && !sums.contains_key(&ci) {
                sums.insert(
                    ci,
                    Sum {
                        residual: r,
                        out: *out,
                    },
                );
                fused[ni] = true;
                break;
            }
        }
    }
    (sums, fused)
}

impl Plan {
    /// Whether operand `i` is stored blocked.
    pub(super) fn is_blocked(&self, i: usize) -> bool {
        self.blocked[i]
    }

    /// Whether node `n` reads its input `index` in the blocked layout.
    pub(super) fn wants_blocked(&self, graph: &Graph, n: usize, index: usize) -> bool {
        if let Some(c) = self.convs.get(&n) {
            return index == 0 && !matches!(c, Conv::Direct { plain: true, .. });
        }
        let node = &graph.nodes[n];
        matches!(node.op, Op::Binary(_)) && node.outputs.first().is_some_and(|&o| self.blocked[o])
    }

    /// The blocked convolution of node `n`, when it runs blocked.
    pub(super) fn conv(&self, n: usize) -> Option<&Conv> {
        self.convs.get(&n)
    }

    /// The residual add that convolution node `n` does, when it does one.
    pub(super) fn sum(&self, n: usize) -> Option<&Sum> {
        self.sums.get(&n)
    }

    /// Whether add node `n` is done by the convolution before it.
    pub(super) fn is_fused(&self, n: usize) -> bool {
        self.fused.get(n).copied().unwrap_or(false)
    }
}

/// `(n, c, h * w)` of a 4-D operand whose channels are whole blocks.
fn dims(d: &OperandDescriptor) -> Result<(usize, usize, usize)> {
    match d.shape[..] {
        [n, c, h, w] if c.is_multiple_of(L) => Ok((n, c, h * w)),
        _ => Err(Error::operation(
            "blocked layout: not a 4-D operand of whole channel blocks",
        )),
    }
}

fn f32s(b: &Buf) -> Result<&[f32]> {
    match b {
        Buf::F32(v) => Ok(v),
        _ => Err(Error::operation("blocked layout: not a float32 operand")),
    }
}

/// An NCHW operand `x` of descriptor `d` in the blocked layout.
pub(super) fn to_blocked(x: &Buf, d: &OperandDescriptor) -> Result<Buf> {
    relayout(x, d, true)
}

/// A blocked operand `x` of descriptor `d` back in NCHW.
pub(super) fn to_nchw(x: &Buf, d: &OperandDescriptor) -> Result<Buf> {
    relayout(x, d, false)
}

/// `x` into the blocked layout (`into`) or out of it.
fn relayout(x: &Buf, d: &OperandDescriptor, into: bool) -> Result<Buf> {
    let (n, c, hw) = dims(d)?;
    let x = f32s(x)?;
    if x.len() != n * c * hw {
        return Err(Error::operation("blocked layout: operand size mismatch"));
    }
    let mut out = Buf::f32_for_overwrite(x.len());
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: the plan (the only caller's source) exists only where
        // `available()`; sizes checked above.
        unsafe { kernels::reorder(x, &mut out, n * c / L, hw, into) };
    }
    Ok(Buf::F32(out))
}

/// Runs the blocked convolution `c` of parameters `p` on `inputs` (input
/// blocked, filter, bias when `p.has_bias`, fused bounds `[lo, hi]` when
/// present, as `conv::conv2d` takes them); the output is blocked.
/// Runs blocked convolution `c`; with `sum` (a direct convolution's
/// residual, blocked, of the output's shape) adds it to the result.
pub(super) fn conv(
    c: &Conv,
    p: &Conv2dParams,
    inputs: &[&Buf],
    sum: Option<&Buf>,
    out: &OperandDescriptor,
) -> Result<Buf> {
    let bad = || Error::operation("conv2d: the operands do not match the parameters");
    let x = f32s(inputs.first().ok_or_else(bad)?)?;
    let bias = match p.has_bias {
        true => Some(f32s(inputs.get(2).ok_or_else(bad)?)?),
        false => None,
    };
    let bounds = match inputs.get(2 + usize::from(p.has_bias)) {
        None => (f32::NEG_INFINITY, f32::INFINITY),
        Some(b) => match *f32s(b)? {
            [lo, hi] => (lo, hi),
            _ => return Err(Error::operation("conv2d: bad activation bounds")),
        },
    };
    let (n, ic, oc) = (p.batch, p.in_channels, p.out_channels);
    let (h, w, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    let reach = |o: usize, k: usize, s: usize, d: usize| (o - 1) * s + (k - 1) * d;
    let fits = oh > 0
        && ow > 0
        && reach(oh, p.kernel_h, p.strides[0], p.dilations[0]) < h + p.padding[0] + p.padding[1]
        && reach(ow, p.kernel_w, p.strides[1], p.dilations[1]) < w + p.padding[2] + p.padding[3];
    let sum = sum.map(f32s).transpose()?;
    if x.len() != n * ic * h * w
        || bias.is_some_and(|b| b.len() != oc)
        || sum.is_some_and(|r| r.len() != n * oc * oh * ow)
        || (sum.is_some() && matches!(c, Conv::Depthwise { .. }))
        || out.element_count() != n * oc * oh * ow
        || !fits
    {
        return Err(bad());
    }
    let mut res = Buf::f32_for_overwrite(n * oc * oh * ow);
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a plan (which made `c`) exists only where `available()`;
    // the sizes and the reach of every tap were checked above.
    unsafe {
        match c {
            Conv::Direct { w, panels, plain } => {
                if w.len() != oc * ic * p.kernel_h * p.kernel_w {
                    return Err(bad());
                }
                kernels::direct(w, panels, *plain, p, x, bias, bounds, sum, &mut res)
            }
            Conv::Depthwise { w } => {
                if w.len() != oc * p.kernel_h * p.kernel_w || ic != oc {
                    return Err(bad());
                }
                kernels::depthwise(w, p, x, bias, bounds, &mut res)
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (c, bias, bounds, sum);
    Ok(Buf::F32(res))
}

#[cfg(target_arch = "x86_64")]
mod kernels {
    use std::arch::x86_64::*;

    use rayon::prelude::*;

    use super::{Panel, L};
    use crate::graph::op::Conv2dParams;

    /// Multiply-adds below which a convolution runs on one thread.
    const PAR_WORK: usize = 1 << 18;
    /// Bytes of input a direct convolution's task reads (kept in L2 while
    /// each filter panel passes over it).
    const CHUNK_BYTES: usize = 160 << 10;
    /// Output pixels per tile of the direct kernel for a panel of 2
    /// blocks (12 accumulators); a single block takes twice as many, so
    /// that it too has 12 independent chains of multiply-adds (with 6 it
    /// waits on their latency: 144 -> 24 channels on 56x56, 418 -> 382 us).
    const MR: usize = 6;

    fn tile_pixels(nb: usize) -> usize {
        if nb == 1 {
            2 * MR
        } else {
            MR
        }
    }

    /// A raw pointer that tasks writing disjoint parts share.
    #[derive(Clone, Copy)]
    struct Out(*mut f32);
    // SAFETY: each task writes its own cells (see the callers).
    unsafe impl Send for Out {}
    unsafe impl Sync for Out {}

    /// Runs `f(u)` for `u` in 0..units, in parallel when `par`.
    fn for_units(units: usize, par: bool, f: impl Fn(usize) + Sync + Send) {
        if par && units > 1 {
            (0..units).into_par_iter().for_each(f);
        } else {
            (0..units).for_each(f);
        }
    }

    /// NCHW `x` (`planes` groups of 8 planes of `hw`) into blocked `out`
    /// when `into`, the other way when not.
    ///
    /// # Safety
    /// AVX2; `x` and `out` hold `planes * 8 * hw` floats.
    pub(super) unsafe fn reorder(x: &[f32], out: &mut [f32], planes: usize, hw: usize, into: bool) {
        let o = Out(out.as_mut_ptr());
        let xs = x.as_ptr() as usize;
        for_units(planes, planes * hw * L >= 1 << 16, move |b| {
            let _ = &o;
            // SAFETY: block b's 8 * hw floats of both buffers.
            unsafe {
                reorder_block(
                    (xs as *const f32).add(b * L * hw),
                    o.0.add(b * L * hw),
                    hw,
                    into,
                )
            }
        });
    }

    #[target_feature(enable = "avx2")]
    unsafe fn reorder_block(x: *const f32, out: *mut f32, hw: usize, into: bool) {
        let mut p = 0;
        // SAFETY (all): offsets below 8 * hw in both blocks.
        unsafe {
            while p + L <= hw {
                let mut v = [_mm256_setzero_ps(); L];
                for (k, vk) in v.iter_mut().enumerate() {
                    // into: row k = channel k's 8 pixels; else pixel p + k.
                    *vk = _mm256_loadu_ps(if into {
                        x.add(k * hw + p)
                    } else {
                        x.add((p + k) * L)
                    });
                }
                let t = crate::backend::cpu::depthwise::transpose(v);
                for (k, tk) in t.iter().enumerate() {
                    _mm256_storeu_ps(
                        if into {
                            out.add((p + k) * L)
                        } else {
                            out.add(k * hw + p)
                        },
                        *tk,
                    );
                }
                p += L;
            }
            for q in p..hw {
                for l in 0..L {
                    if into {
                        *out.add(q * L + l) = *x.add(l * hw + q);
                    } else {
                        *out.add(l * hw + q) = *x.add(q * L + l);
                    }
                }
            }
        }
    }

    /// What every tile of one direct convolution shares.
    struct Geometry<'a> {
        /// Floats between the tile's pixels in the input (stride * 8).
        px: usize,
        /// Offsets of the kernel taps from a pixel's first tap.
        taps: &'a [usize],
        /// Floats between input channel blocks.
        ibs: usize,
        icb: usize,
        /// Plain input: its channels (one block) and the floats between
        /// their planes.
        cl: usize,
        cs: usize,
        /// Floats between output channel blocks.
        obs: usize,
        lo: f32,
        hi: f32,
    }

    /// One tile: `MR` output pixels (consecutive in a row) by `NB` output
    /// channel blocks, summed over every input block and tap, then the
    /// bias, the bounds and the residual (see [`Ends`]).
    ///
    /// # Safety
    /// AVX2 and FMA; `x` is the tile's first pixel's first tap in input
    /// block 0, and every tap of every pixel in every block lies inside
    /// the input; `w` is the panel; `out` the tile's first pixel in output
    /// block `ob0`, and the tile's cells of the `NB` blocks are the
    /// caller's.
    /// With `PLAIN`, the input is NCHW: one block of `g.cl` channels
    /// `g.cs` floats apart.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn tile<const M: usize, const NB: usize, const PLAIN: bool>(
        g: &Geometry,
        x: *const f32,
        w: *const f32,
        Ends { bias, sum }: Ends,
        out: *mut f32,
    ) {
        let mut acc = [[_mm256_setzero_ps(); NB]; M];
        let mut wp = w;
        // SAFETY: see the contract; the panel is icb * taps * 8 rows of
        // NB * 8 floats, read in order.
        unsafe {
            for ib in 0..g.icb {
                let xb = x.add(ib * g.ibs);
                for &t in g.taps {
                    let a = xb.add(t);
                    // One input channel: a row of the panel times each
                    // pixel's value.
                    let mut step = |c: *const f32| {
                        let mut bv = [_mm256_setzero_ps(); NB];
                        for (v, b) in bv.iter_mut().enumerate() {
                            *b = _mm256_loadu_ps(wp.add(v * L));
                        }
                        wp = wp.add(NB * L);
                        for (r, row) in acc.iter_mut().enumerate() {
                            let av = _mm256_broadcast_ss(&*c.add(r * g.px));
                            for (y, &b) in row.iter_mut().zip(&bv) {
                                *y = _mm256_fmadd_ps(av, b, *y);
                            }
                        }
                    };
                    if PLAIN {
                        for ci in 0..g.cl {
                            step(a.add(ci * g.cs));
                        }
                    } else {
                        for ci in 0..L {
                            step(a.add(ci));
                        }
                    }
                }
            }
            let (lo, hi) = (_mm256_set1_ps(g.lo), _mm256_set1_ps(g.hi));
            for v in 0..NB {
                let b = if bias.is_null() {
                    _mm256_set1_ps(-0.0)
                } else {
                    _mm256_loadu_ps(bias.add(v * L))
                };
                for (r, row) in acc.iter().enumerate() {
                    // Second operands win on NaN and equal zeros: the
                    // clamp operator's results.
                    let mut y = _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_add_ps(row[v], b)));
                    if !sum.is_null() {
                        y = _mm256_add_ps(y, _mm256_loadu_ps(sum.add(v * g.obs + r * L)));
                    }
                    _mm256_storeu_ps(out.add(v * g.obs + r * L), y);
                }
            }
        }
    }

    /// What a tile adds to its products: the panel's bias (`NB * 8`
    /// values, or null) and, after the bounds, a residual laid out as the
    /// output (the tile's first cell, or null).
    #[derive(Clone, Copy)]
    struct Ends {
        bias: *const f32,
        sum: *const f32,
    }

    /// [`tile`] for a run-time pixel count (1..=MR) and block count.
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile_n<const PLAIN: bool>(
        m: usize,
        nb: usize,
        g: &Geometry,
        x: *const f32,
        w: *const f32,
        ends: Ends,
        out: *mut f32,
    ) {
        macro_rules! go {
            ($($nb:literal: $($m:literal)*);*) => {
                match (m, nb) {
                    $($(($m, $nb) => tile::<$m, $nb, PLAIN>(g, x, w, ends, out),)*)*
                    _ => unreachable!("tile of {m} pixels by {nb} blocks"),
                }
            };
        }
        // SAFETY: the caller's contract is tile's.
        unsafe { go!(2: 1 2 3 4 5 6; 1: 1 2 3 4 5 6 7 8 9 10 11 12) }
    }

    /// The input planes with their padding (zeros) around: `[planes, hp,
    /// wp, lanes]` (lanes: 8 for blocks, 1 for NCHW planes).
    fn pad(
        x: &[f32],
        planes: usize,
        (h, w): (usize, usize),
        pad: [usize; 4],
        lanes: usize,
    ) -> Vec<f32> {
        let [pt, pb, pl, pr] = pad;
        let (hp, wp) = (h + pt + pb, w + pl + pr);
        let mut out = crate::tensor::Buf::f32_for_overwrite(planes * hp * wp * lanes);
        let fill = |(b, dst): (usize, &mut [f32])| {
            let src = &x[b * h * w * lanes..(b + 1) * h * w * lanes];
            dst[..pt * wp * lanes].fill(0.0);
            dst[(pt + h) * wp * lanes..].fill(0.0);
            for y in 0..h {
                let row = &mut dst[(pt + y) * wp * lanes..(pt + y + 1) * wp * lanes];
                row[..pl * lanes].fill(0.0);
                row[(pl + w) * lanes..].fill(0.0);
                row[pl * lanes..(pl + w) * lanes]
                    .copy_from_slice(&src[y * w * lanes..(y + 1) * w * lanes]);
            }
        };
        if planes * hp * wp * lanes >= 1 << 16 {
            out.par_chunks_mut(hp * wp * lanes)
                .enumerate()
                .for_each(fill);
        } else {
            out.chunks_mut(hp * wp * lanes).enumerate().for_each(fill);
        }
        out
    }

    /// A plain (groups 1) convolution of blocked `x` into blocked `res`.
    ///
    /// # Safety
    /// AVX2 and FMA; the sizes and the taps' reach match `p` (checked by
    /// `super::conv`).
    #[allow(clippy::too_many_arguments)]
    pub(super) unsafe fn direct(
        w: &[f32],
        panels: &[Panel],
        plain: bool,
        p: &Conv2dParams,
        x: &[f32],
        bias: Option<&[f32]>,
        (lo, hi): (f32, f32),
        sum: Option<&[f32]>,
        res: &mut [f32],
    ) {
        let (n, ocb) = (p.batch, p.out_channels / L);
        // Plain input: one block of all its channels, one float per pixel.
        let (icb, lanes) = if plain {
            (1, 1)
        } else {
            (p.in_channels / L, L)
        };
        let ic = p.in_channels;
        let (kh, kw) = (p.kernel_h, p.kernel_w);
        let [pt, pb, pl, pr] = p.padding;
        // A 1x1 kernel at unit strides without padding: the planes are one
        // long row, so tiles run across row ends.
        let flat = kh == 1 && kw == 1 && p.strides == [1, 1] && p.padding == [0; 4];
        let (hp, wp) = if flat {
            (1, p.in_h * p.in_w)
        } else {
            (p.in_h + pt + pb, p.in_w + pl + pr)
        };
        let (oh, ow) = if flat {
            (1, p.out_h * p.out_w)
        } else {
            (p.out_h, p.out_w)
        };
        let (sh, sw) = if flat {
            (1, 1)
        } else {
            (p.strides[0], p.strides[1])
        };
        let planes = if plain { n * ic } else { n * icb };
        let padded =
            (p.padding != [0; 4]).then(|| pad(x, planes, (p.in_h, p.in_w), p.padding, lanes));
        let xp: &[f32] = padded.as_deref().unwrap_or(x);
        let taps: Vec<usize> = (0..kh)
            .flat_map(|ky| {
                (0..kw).map(move |kx| (ky * p.dilations[0] * wp + kx * p.dilations[1]) * lanes)
            })
            .collect();
        let g = Geometry {
            px: sw * lanes,
            taps: &taps,
            ibs: hp * wp * lanes,
            icb,
            cl: ic,
            cs: hp * wp,
            obs: oh * ow * L,
            lo,
            hi,
        };
        let pixels = oh * ow;
        // Pixels per task: their input (rows of the kernel's height) stays
        // in L2 while each panel of the filter passes over it.
        let per_px = ic * 4 * kh * sh.max(1);
        let chunk = (CHUNK_BYTES / per_px.max(1)).clamp(MR, pixels.max(MR));
        let work = n * pixels * ocb * L * ic * taps.len();
        let par = work >= PAR_WORK;
        let threads = rayon::current_num_threads();
        // A whole number of chunks per thread (then a little smaller).
        let mut chunks = pixels.div_ceil(chunk);
        if par {
            chunks = chunks.div_ceil(threads) * threads;
        }
        let chunk = pixels.div_ceil(chunks).max(1);
        let chunks = pixels.div_ceil(chunk);
        // Too few chunks to go round: split the panels too.
        let groups = if par && n * chunks < 4 * threads {
            (4 * threads).div_ceil(n * chunks).min(panels.len())
        } else {
            1
        };
        let (o, xs, ws) = (
            Out(res.as_mut_ptr()),
            xp.as_ptr() as usize,
            w.as_ptr() as usize,
        );
        let bs = bias.map(|b| b.as_ptr() as usize);
        let ss = sum.map(|r| r.as_ptr() as usize);
        let g = &g;
        for_units(n * chunks * groups, par, move |u| {
            let _ = &o;
            let (b, c, gi) = (u / (chunks * groups), (u / groups) % chunks, u % groups);
            let (p0, p1) = (c * chunk, ((c + 1) * chunk).min(pixels));
            let mine = &panels[gi * panels.len() / groups..(gi + 1) * panels.len() / groups];
            for pn in mine {
                let mr = tile_pixels(pn.nb);
                let mut q = p0;
                while q < p1 {
                    let (oy, ox) = (q / ow, q % ow);
                    let m = mr.min(ow - ox).min(p1 - q);
                    // SAFETY: tile's contract: the pixel's taps lie in the
                    // (padded) input by the reach check; the tile's output
                    // cells belong to this unit (its pixels, its panels).
                    unsafe {
                        let xq = (xs as *const f32)
                            .add(b * ic * hp * wp + (oy * sh * wp + ox * sw) * lanes);
                        let at = (b * ocb + pn.ob0) * g.obs + q * L;
                        let oq = o.0.add(at);
                        let sq = ss.map_or(std::ptr::null(), |sp| (sp as *const f32).add(at));
                        let bq =
                            bs.map_or(std::ptr::null(), |bp| (bp as *const f32).add(pn.ob0 * L));
                        let wq = (ws as *const f32).add(pn.off);
                        let ends = Ends { bias: bq, sum: sq };
                        if plain {
                            tile_n::<true>(m, pn.nb, g, xq, wq, ends, oq);
                        } else {
                            tile_n::<false>(m, pn.nb, g, xq, wq, ends, oq);
                        }
                    }
                    q += m;
                }
            }
        });
        if let Some(v) = padded {
            crate::tensor::Buf::F32(v).recycle();
        }
    }

    /// A depthwise convolution of blocked `x` into blocked `res`: each
    /// output pixel is its first tap times the filter, then one
    /// multiply-add per further tap (padding taps read zeros), then the
    /// bias and bounds, as the NCHW kernels compute it.
    ///
    /// # Safety
    /// AVX2 and FMA; sizes as `p` says (checked by `super::conv`).
    pub(super) unsafe fn depthwise(
        w: &[f32],
        p: &Conv2dParams,
        x: &[f32],
        bias: Option<&[f32]>,
        bounds: (f32, f32),
        res: &mut [f32],
    ) {
        let (n, cb) = (p.batch, p.in_channels / L);
        let (h, wi, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
        let khw = p.kernel_h * p.kernel_w;
        // Rows per task: a few thousand multiply-adds at least.
        let rows = (8192 / (ow * khw).max(1)).clamp(1, oh);
        let row_chunks = oh.div_ceil(rows);
        let work = n * cb * oh * ow * L * khw;
        let o = Out(res.as_mut_ptr());
        for_units(n * cb * row_chunks, work >= PAR_WORK, move |u| {
            let _ = &o;
            let (plane, rc) = (u / row_chunks, u % row_chunks);
            let blk = plane % cb;
            let xs = &x[plane * h * wi * L..(plane + 1) * h * wi * L];
            let ws = &w[blk * khw * L..(blk + 1) * khw * L];
            let bv = bias.map(|b| &b[blk * L..(blk + 1) * L]);
            let y0 = rc * rows;
            let y1 = (y0 + rows).min(oh);
            // SAFETY: rows y0..y1 of this plane are this unit's.
            let dst = unsafe {
                std::slice::from_raw_parts_mut(
                    o.0.add((plane * oh + y0) * ow * L),
                    (y1 - y0) * ow * L,
                )
            };
            // SAFETY: the caller's features.
            unsafe { depthwise_rows(xs, ws, bv, bounds, p, y0..y1, dst) };
        });
    }

    /// Output rows `ys` of one blocked plane `x` of a depthwise
    /// convolution into `dst`. Pixels whose taps all lie inside the input
    /// read it where it is; the others (near the padding) read a small
    /// zero-padded copy of the input around them: a strip of columns at
    /// each side for the rows in between, whole padded rows for the rows
    /// at the top and bottom. Either way eight pixels at a time, across
    /// row ends, so that a narrow plane (7x7) still has eight independent
    /// chains of multiply-adds.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn depthwise_rows(
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        (lo, hi): (f32, f32),
        p: &Conv2dParams,
        ys: std::ops::Range<usize>,
        dst: &mut [f32],
    ) {
        let (h, wi, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
        let (kh, kw) = (p.kernel_h, p.kernel_w);
        let (sh, sw) = (p.strides[0], p.strides[1]);
        let (dh, dw) = (p.dilations[0], p.dilations[1]);
        let (pt, pl) = (p.padding[0], p.padding[2]);
        if kh * kw == 0 || ys.is_empty() {
            return;
        }
        let bv = match bias {
            // SAFETY: 8 floats.
            Some(b) => unsafe { _mm256_loadu_ps(b[..L].as_ptr()) },
            None => _mm256_set1_ps(-0.0),
        };
        let (lov, hiv) = (_mm256_set1_ps(lo), _mm256_set1_ps(hi));
        let k = Kernel {
            w,
            kh,
            kw,
            dh,
            dw,
            fin: (bv, lov, hiv),
        };
        // Rows whose taps all lie inside the input, [ia, ib), and columns
        // whose taps all lie inside a row, [ox_lo, ox_hi).
        let (span_h, span_w) = ((kh - 1) * dh, (kw - 1) * dw);
        let (ia, ib) = inside(pt, h, span_h, sh, oh);
        let (ox_lo, ox_hi) = inside(pl, wi, span_w, sw, ow);
        let out = dst.as_mut_ptr();
        let (y0, y1) = (ys.start, ys.end);
        // Offsets are in floats; a pixel (oy, ox) of a region reads its
        // first tap at row oy * sh - pt - r0, column ox * sw - pl - c0 of
        // a source whose first row and column are r0 and c0.
        let region = |src: *const f32,
                      r0: isize,
                      c0: isize,
                      cols: usize,
                      rows: std::ops::Range<usize>,
                      oxs: std::ops::Range<usize>| {
            let first = |oy: usize, ox: usize| {
                let r = (oy * sh) as isize - pt as isize - r0;
                let c = (ox * sw) as isize - pl as isize - c0;
                (r as usize * cols + c as usize) * L
            };
            // SAFETY: every tap of these pixels lies inside `src` (the
            // callers' regions), and (oy, ox) is a pixel of `dst`.
            unsafe {
                k.rect(src, cols, sw * L, rows, oxs, first, |oy, ox| {
                    out.add(((oy - y0) * ow + ox) * L)
                })
            };
        };
        let (ra, rb) = (ia.clamp(y0, y1), ib.clamp(y0, y1));
        // The padded copies: input rows r0.. and columns c0.., zeros
        // outside the plane.
        let copy = |rows: std::ops::Range<usize>, oxs: std::ops::Range<usize>| {
            if rows.is_empty() || oxs.is_empty() {
                return;
            }
            let r0 = (rows.start * sh) as isize - pt as isize;
            let r1 = ((rows.end - 1) * sh + span_h) as isize - pt as isize + 1;
            let c0 = (oxs.start * sw) as isize - pl as isize;
            let c1 = ((oxs.end - 1) * sw + span_w) as isize - pl as isize + 1;
            let cols = (c1 - c0) as usize;
            PADDED.with(|cell| {
                let mut buf = cell.borrow_mut();
                buf.clear();
                buf.resize((r1 - r0) as usize * cols * L, 0.0);
                for r in r0.max(0)..r1.min(h as isize) {
                    let (a, b) = (c0.max(0), c1.min(wi as isize));
                    if a >= b {
                        continue;
                    }
                    let from = (r as usize * wi + a as usize) * L;
                    let to = ((r - r0) as usize * cols + (a - c0) as usize) * L;
                    let n = (b - a) as usize * L;
                    buf[to..to + n].copy_from_slice(&x[from..from + n]);
                }
                region(buf.as_ptr(), r0, c0, cols, rows, oxs);
            });
        };
        // A small plane (7x7, 14x14) is copied whole with its padding: one
        // region, so that few groups run short; otherwise the pixels of
        // the inside rows and columns read the input in place, strips at
        // the sides of those rows and the top and bottom rows whole are
        // copied.
        let window = ((y1 - y0 - 1) * sh + span_h + 1) * ((ow - 1) * sw + span_w + 1) * L;
        if window <= SMALL_WINDOW {
            copy(y0..y1, 0..ow);
            return;
        }
        if ra < rb {
            region(x.as_ptr(), 0, 0, wi, ra..rb, ox_lo..ox_hi);
        }
        copy(ra..rb, 0..ox_lo);
        copy(ra..rb, ox_hi..ow);
        copy(y0..ra.max(y0), 0..ow);
        copy(rb.max(ra).max(y0)..y1, 0..ow);
    }

    /// The outputs `[a, b)` of `n_out` along one axis whose taps all lie
    /// inside the `n_in` inputs: output `o` reads `o * stride - pad` to
    /// `o * stride - pad + span`.
    fn inside(pad: usize, n_in: usize, span: usize, stride: usize, n_out: usize) -> (usize, usize) {
        let a = pad.div_ceil(stride).min(n_out);
        let b = if n_in + pad > span {
            ((n_in + pad - span - 1) / stride + 1).clamp(a, n_out)
        } else {
            a
        };
        (a, b)
    }

    /// Floats of padded input (16 KB) up to which a depthwise task copies
    /// all it reads.
    const SMALL_WINDOW: usize = 4096;

    thread_local! {
        /// The zero-padded input around a depthwise task's edge pixels.
        static PADDED: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    /// A depthwise filter block and its epilogue.
    #[derive(Clone, Copy)]
    struct Kernel<'a> {
        /// `[kh * kw][8]`.
        w: &'a [f32],
        kh: usize,
        kw: usize,
        dh: usize,
        dw: usize,
        /// Bias, lower and upper bound.
        fin: (__m256, __m256, __m256),
    }

    /// Pixels per group: eight independent chains of multiply-adds keep
    /// both FMA pipes busy.
    const P: usize = 8;
    /// A pixel step of stride 2.
    const S2: usize = 2 * L;

    impl Kernel<'_> {
        /// Output pixels `rows` x `oxs` of a source `src` whose rows have
        /// `cols` pixels; `first(oy, ox)` is the offset of a pixel's first
        /// tap (the next pixel's is `step` further), `at(oy, ox)` where it
        /// goes. Eight pixels of a row at a time; the few left at a row's
        /// end join those of the next rows, so a narrow plane still runs
        /// in groups of eight.
        ///
        /// # Safety
        /// AVX2 and FMA; every tap of every pixel inside `src`, every
        /// output pixel writable.
        #[target_feature(enable = "avx2,fma")]
        #[allow(clippy::too_many_arguments)]
        unsafe fn rect(
            &self,
            src: *const f32,
            cols: usize,
            step: usize,
            rows: std::ops::Range<usize>,
            oxs: std::ops::Range<usize>,
            first: impl Fn(usize, usize) -> usize,
            at: impl Fn(usize, usize) -> *mut f32,
        ) {
            let mut pend_in = [src; P];
            let mut pend_out = [std::ptr::null_mut(); P];
            let mut n = 0;
            for oy in rows {
                if oxs.is_empty() {
                    break;
                }
                // SAFETY (all): the caller's bounds.
                let (mut inp, mut o) =
                    unsafe { (src.add(first(oy, oxs.start)), at(oy, oxs.start)) };
                let mut left = oxs.len();
                while left >= P {
                    unsafe {
                        match step {
                            L => self.run8::<1>(cols, inp, o),
                            S2 => self.run8::<2>(cols, inp, o),
                            _ => self.group(
                                cols,
                                std::array::from_fn(|j| inp.add(j * step)),
                                std::array::from_fn(|j| o.add(j * L)),
                            ),
                        }
                        (inp, o) = (inp.add(P * step), o.add(P * L));
                    };
                    left -= P;
                }
                for _ in 0..left {
                    pend_in[n] = inp;
                    pend_out[n] = o;
                    n += 1;
                    if n == P {
                        unsafe { self.group(cols, pend_in, pend_out) };
                        n = 0;
                    }
                    unsafe { (inp, o) = (inp.add(step), o.add(L)) };
                }
            }
            if n > 0 {
                // A short last group repeats its last pixel: the same
                // value stored twice.
                for j in n..P {
                    pend_in[j] = pend_in[n - 1];
                    pend_out[j] = pend_out[n - 1];
                }
                unsafe { self.group(cols, pend_in, pend_out) };
            }
        }

        /// Eight consecutive output pixels of a row at stride `SW`, as
        /// [`Self::group`] computes them: with the stride known, every
        /// load addresses one base pointer plus a constant.
        ///
        /// # Safety
        /// As for [`Self::group`] with `ins[j] = src + j * SW * 8` and
        /// `outs[j] = out + j * 8`.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn run8<const SW: usize>(&self, cols: usize, src: *const f32, out: *mut f32) {
            let (bv, lov, hiv) = self.fin;
            // SAFETY: the caller's bounds.
            unsafe {
                let w0 = _mm256_loadu_ps(self.w.as_ptr());
                let mut acc: [__m256; P] = std::array::from_fn(|j| {
                    _mm256_mul_ps(w0, _mm256_loadu_ps(src.add(j * SW * L)))
                });
                let mut wt = self.w.as_ptr();
                for ky in 0..self.kh {
                    let row = src.add(ky * self.dh * cols * L);
                    for kx in usize::from(ky == 0)..self.kw {
                        wt = wt.add(L);
                        let wv = _mm256_loadu_ps(wt);
                        let at = row.add(kx * self.dw * L);
                        for (j, a) in acc.iter_mut().enumerate() {
                            *a = _mm256_fmadd_ps(wv, _mm256_loadu_ps(at.add(j * SW * L)), *a);
                        }
                    }
                }
                for (j, a) in acc.iter().enumerate() {
                    let v = _mm256_min_ps(hiv, _mm256_max_ps(lov, _mm256_add_ps(*a, bv)));
                    _mm256_storeu_ps(out.add(j * L), v);
                }
            }
        }

        /// Eight output pixels, each its first tap times the filter, then
        /// one multiply-add per further tap, then `clamp(acc + bias, lo,
        /// hi)` (max and min return their second operand for NaN and for
        /// equal zeros), as the NCHW kernels compute it.
        ///
        /// # Safety
        /// AVX2 and FMA; every tap of each pixel (first tap at `ins[j]`,
        /// rows of `cols` pixels) readable, `outs[j]` 8 writable floats.
        #[inline]
        #[target_feature(enable = "avx2,fma")]
        unsafe fn group(&self, cols: usize, ins: [*const f32; P], outs: [*mut f32; P]) {
            let (bv, lov, hiv) = self.fin;
            // SAFETY: the caller's bounds.
            unsafe {
                let w0 = _mm256_loadu_ps(self.w.as_ptr());
                let mut acc: [__m256; P] =
                    std::array::from_fn(|j| _mm256_mul_ps(w0, _mm256_loadu_ps(ins[j])));
                let mut wt = self.w.as_ptr();
                for ky in 0..self.kh {
                    let row = ky * self.dh * cols * L;
                    for kx in usize::from(ky == 0)..self.kw {
                        wt = wt.add(L);
                        let wv = _mm256_loadu_ps(wt);
                        let off = row + kx * self.dw * L;
                        for (a, ptr) in acc.iter_mut().zip(&ins) {
                            *a = _mm256_fmadd_ps(wv, _mm256_loadu_ps(ptr.add(off)), *a);
                        }
                    }
                }
                for (a, o) in acc.iter().zip(&outs) {
                    let v = _mm256_min_ps(hiv, _mm256_max_ps(lov, _mm256_add_ps(*a, bv)));
                    _mm256_storeu_ps(*o, v);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::gpu::testing::random;
    use crate::graph::op::{BinaryKind, UnaryKind};
    use crate::graph::{Node, Source};

    /// conv.rs's test parameters, square strides and dilations, with a
    /// bias.
    fn params(
        x: (usize, usize, usize, usize),
        o: (usize, usize, usize),
        padding: [usize; 4],
        s: usize,
        d: usize,
        groups: usize,
    ) -> Conv2dParams {
        Conv2dParams {
            has_bias: true,
            ..crate::backend::cpu::conv::tests::params(x, o, padding, [s, s], [d, d], groups)
        }
    }

    fn f32d(shape: &[usize]) -> OperandDescriptor {
        OperandDescriptor {
            data_type: DataType::Float32,
            shape: shape.to_vec(),
        }
    }

    /// A node of one output.
    fn node(op: Op, inputs: Vec<usize>, out: usize) -> Node {
        Node {
            op,
            inputs,
            outputs: vec![out],
            label: String::new(),
        }
    }

    /// A small graph's result against the plain kernels': convolutions
    /// of up to 145 terms each, summed in other orders, differ by a few
    /// units in the 5th digit.
    fn assert_near(got: &[f32], want: &[f32]) {
        assert_eq!(got.len(), want.len());
        for (a, b) in got.iter().zip(want) {
            assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }

    fn bytes(v: &[f32]) -> Arc<Vec<u8>> {
        Arc::new(v.iter().flat_map(|x| x.to_le_bytes()).collect())
    }

    /// A one-node conv2d graph (input, filter, bias constants) and its
    /// blocked form.
    fn one_conv(p: &Conv2dParams, f: &[f32]) -> (Graph, Conv) {
        let x = [p.batch, p.in_channels, p.in_h, p.in_w];
        let fd = [
            p.out_channels,
            p.in_channels / p.groups,
            p.kernel_h,
            p.kernel_w,
        ];
        let g = Graph {
            operands: vec![
                f32d(&x),
                f32d(&fd),
                f32d(&[p.out_channels]),
                f32d(&[p.batch, p.out_channels, p.out_h, p.out_w]),
            ],
            sources: vec![
                Source::Input("x".into()),
                Source::Constant(bytes(f)),
                Source::Constant(bytes(&vec![0.0; p.out_channels])),
                Source::Node { node: 0, index: 0 },
            ],
            nodes: vec![Node {
                op: Op::Conv2d(p.clone()),
                inputs: vec![0, 1, 2],
                outputs: vec![3],
                label: String::new(),
            }],
            inputs: vec![("x".into(), 0)],
            outputs: vec![("y".into(), 3)],
        };
        let constants = HashMap::from([(1, Buf::F32(f.to_vec()))]);
        let c = blocked_conv(&g, &g.nodes[0], p, &constants).expect("a blocked form");
        (g, c)
    }

    #[test]
    fn layout_changes_place_each_element_and_invert() {
        if !available() {
            return;
        }
        let (n, c, h, w) = (2, 16, 3, 5);
        let d = f32d(&[n, c, h, w]);
        let x: Vec<f32> = (0..n * c * h * w).map(|i| i as f32).collect();
        let b = to_blocked(&Buf::F32(x.clone()), &d).unwrap();
        let Buf::F32(bv) = &b else { unreachable!() };
        for (i, &v) in x.iter().enumerate() {
            let (bi, ci, p) = (i / (c * h * w), (i / (h * w)) % c, i % (h * w));
            assert_eq!(bv[((bi * c / L + ci / L) * h * w + p) * L + ci % L], v);
        }
        assert_eq!(to_nchw(&b, &d).unwrap().to_f32_vec(), x);
        // Not whole channel blocks: an error, not a wrong answer.
        assert!(to_blocked(&Buf::F32(vec![0.0; 12]), &f32d(&[1, 12, 1, 1])).is_err());
    }

    /// Plain blocked convolutions agree with the NCHW kernels (to the
    /// rounding of a different summation order) over kernel sizes,
    /// strides, dilations, uneven padding, batches, rows shorter and
    /// longer than a tile, odd output block counts, bias and bounds.
    #[test]
    fn direct_matches_the_nchw_kernels() {
        if !available() {
            return;
        }
        let cases = [
            // (n, c, h, w), (o, kh, kw), padding, stride, dilation
            ((1, 8, 7, 7), (8, 1, 1), [0; 4], 1, 1),
            ((1, 16, 13, 11), (24, 1, 1), [0; 4], 1, 1),
            ((2, 8, 9, 10), (16, 3, 3), [1, 1, 1, 1], 1, 1),
            ((1, 24, 12, 12), (40, 3, 3), [0, 1, 0, 1], 2, 1),
            ((1, 16, 10, 9), (8, 3, 2), [2, 1, 0, 2], 1, 2),
            ((1, 8, 4, 3), (16, 5, 5), [2, 2, 2, 2], 1, 1),
            ((1, 32, 6, 6), (16, 1, 1), [0; 4], 2, 1),
            ((1, 64, 20, 20), (64, 3, 3), [1, 1, 1, 1], 1, 1),
            ((1, 16, 5, 30), (8, 3, 3), [1, 1, 1, 1], 1, 1),
            // Plain input (channels not whole blocks), read in NCHW.
            ((1, 3, 15, 15), (32, 3, 3), [0, 1, 0, 1], 2, 1),
            ((2, 5, 7, 9), (8, 3, 3), [1, 1, 1, 1], 1, 1),
            ((1, 4, 6, 6), (24, 1, 1), [0; 4], 1, 1),
        ];
        for (i, &(x, o, pad, s, d)) in cases.iter().enumerate() {
            let p = params(x, o, pad, s, d, 1);
            let xs = random(p.batch * p.in_channels * p.in_h * p.in_w, i as u64 + 1);
            let f = random(
                p.out_channels * p.in_channels * p.kernel_h * p.kernel_w,
                i as u64 + 40,
            );
            let bias = random(p.out_channels, i as u64 + 80);
            let (g, c) = one_conv(&p, &f);
            let out = &g.operands[3];
            for bounds in [None, Some([-0.25f32, 0.5])] {
                let (xb, fb, bb) = (
                    Buf::F32(xs.clone()),
                    Buf::F32(f.clone()),
                    Buf::F32(bias.clone()),
                );
                let lim = bounds.map(|b| Buf::F32(b.to_vec()));
                let mut ins = vec![&xb, &fb, &bb];
                ins.extend(lim.as_ref());
                let want = crate::backend::cpu::conv::conv2d(&p, &ins, out)
                    .unwrap()
                    .to_f32_vec();
                let xblk = match p.in_channels % L {
                    0 => to_blocked(&xb, &g.operands[0]).unwrap(),
                    _ => xb.clone(),
                };
                ins[0] = &xblk;
                let got_blocked = conv(&c, &p, &ins, None, out).unwrap();
                let got = to_nchw(&got_blocked, out).unwrap().to_f32_vec();
                assert_eq!(got.len(), want.len());
                // With a residual: the same products, then the sum, as
                // the add node would compute it (bit for bit).
                let r = random(got.len(), i as u64 + 120);
                let rb = to_blocked(&Buf::F32(r.clone()), out).unwrap();
                let with = conv(&c, &p, &ins, Some(&rb), out).unwrap();
                let with = to_nchw(&with, out).unwrap().to_f32_vec();
                for (k, (a, b)) in with.iter().zip(&got).enumerate() {
                    assert_eq!(a.to_bits(), (b + r[k]).to_bits(), "case {i} sum at {k}");
                }
                // Two orders of the same k + 1 terms differ by at most
                // (k + 1) * eps times the sum of their magnitudes (the
                // same convolution of the absolute values).
                let abs = |v: &[f32]| Buf::F32(v.iter().map(|x| x.abs()).collect());
                let (xa, fa, ba) = (abs(&xs), abs(&f), abs(&bias));
                let mag = crate::backend::cpu::conv::conv2d(&p, &[&xa, &fa, &ba], out)
                    .unwrap()
                    .to_f32_vec();
                let terms = (p.in_channels * p.kernel_h * p.kernel_w + 1) as f32;
                for (k, (a, b)) in got.iter().zip(&want).enumerate() {
                    let tol = terms * f32::EPSILON * mag[k];
                    assert!((a - b).abs() <= tol, "case {i} at {k}: {a} vs {b}");
                }
                if bounds.is_some() {
                    assert!(
                        got.contains(&0.5) && got.contains(&-0.25),
                        "case {i}: bounds unused"
                    );
                }
            }
        }
    }

    /// Depthwise blocked convolutions give the NCHW kernel's values bit
    /// for bit (same order of operations), NaN inputs included.
    #[test]
    fn depthwise_matches_the_nchw_kernel_bitwise() {
        if !available() {
            return;
        }
        let cases = [
            ((1, 8, 7, 7), (3, 3), [1, 1, 1, 1], 1, 1),
            ((2, 16, 14, 13), (3, 3), [0, 1, 0, 1], 2, 1),
            ((1, 24, 9, 20), (5, 3), [2, 2, 1, 1], 1, 2),
            ((1, 8, 1, 1), (3, 3), [1, 1, 1, 1], 1, 1),
            ((1, 16, 30, 29), (3, 3), [1, 1, 1, 1], 1, 1),
            ((1, 8, 5, 9), (1, 1), [0; 4], 1, 1),
            // Planes too large to copy whole: in place, with strips.
            ((1, 8, 40, 37), (3, 3), [0, 1, 2, 1], 2, 1),
            ((1, 8, 33, 35), (5, 3), [2, 1, 1, 2], 1, 2),
            ((1, 8, 64, 64), (3, 3), [1, 1, 1, 1], 1, 1),
        ];
        for (i, &(x, (kh, kw), pad, s, d)) in cases.iter().enumerate() {
            let c = x.1;
            let p = params(x, (c, kh, kw), pad, s, d, c);
            let mut xs = random(p.batch * c * p.in_h * p.in_w, i as u64 + 1);
            xs[3] = f32::NAN;
            let f = random(c * kh * kw, i as u64 + 40);
            let bias = random(c, i as u64 + 80);
            let (g, conv_b) = one_conv(&p, &f);
            let out = &g.operands[3];
            for bounds in [None, Some((-0.25f32, 0.5f32))] {
                let mut want = vec![7.0f32; out.element_count()];
                crate::backend::cpu::conv::depthwise_nchw(
                    &xs,
                    &f,
                    Some(&bias),
                    bounds,
                    &p,
                    &mut want,
                );
                let (xb, fb, bb) = (
                    Buf::F32(xs.clone()),
                    Buf::F32(f.clone()),
                    Buf::F32(bias.clone()),
                );
                let lim = bounds.map(|(lo, hi)| Buf::F32(vec![lo, hi]));
                let xblk = to_blocked(&xb, &g.operands[0]).unwrap();
                let mut ins = vec![&xblk, &fb, &bb];
                ins.extend(lim.as_ref());
                let got = to_nchw(&conv(&conv_b, &p, &ins, None, out).unwrap(), out)
                    .unwrap()
                    .to_f32_vec();
                let same = got
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
                assert!(same, "case {i} bounds {bounds:?}");
            }
        }
    }

    /// A graph: conv -> depthwise -> add of the two -> 1x1 conv (output),
    /// and a relu of the sum (output). The convolutions and the add run
    /// blocked, the relu reads the sum converted back, the outputs come
    /// out in NCHW; the results agree with the same graph run plain.
    #[test]
    fn a_chain_runs_blocked_and_matches_the_plain_graph() {
        use crate::backend::Backend;
        if !available() {
            return;
        }
        let p1 = params((1, 16, 9, 9), (16, 3, 3), [1, 1, 1, 1], 1, 1, 1);
        let p2 = params((1, 16, 9, 9), (16, 3, 3), [1, 1, 1, 1], 1, 1, 16);
        let p3 = params((1, 16, 9, 9), (24, 1, 1), [0; 4], 1, 1, 1);
        let conv = |p: &Conv2dParams, inputs, out| node(Op::Conv2d(p.clone()), inputs, out);
        let a = [1, 16, 9, 9];
        let graph = Arc::new(Graph {
            operands: vec![
                f32d(&a),
                f32d(&[16, 16, 3, 3]),
                f32d(&[16]),
                f32d(&[16, 1, 3, 3]),
                f32d(&[24, 16, 1, 1]),
                f32d(&a),
                f32d(&a),
                f32d(&a),
                f32d(&[1, 24, 9, 9]),
                f32d(&a),
            ],
            sources: vec![
                Source::Input("x".into()),
                Source::Constant(bytes(&random(16 * 16 * 9, 2))),
                Source::Constant(bytes(&random(16, 3))),
                Source::Constant(bytes(&random(16 * 9, 4))),
                Source::Constant(bytes(&random(24 * 16, 5))),
                Source::Node { node: 0, index: 0 },
                Source::Node { node: 1, index: 0 },
                Source::Node { node: 2, index: 0 },
                Source::Node { node: 3, index: 0 },
                Source::Node { node: 4, index: 0 },
            ],
            nodes: vec![
                conv(&p1, vec![0, 1, 2], 5),
                conv(&p2, vec![5, 3, 2], 6),
                node(Op::Binary(BinaryKind::Add), vec![5, 6], 7),
                conv(
                    &Conv2dParams {
                        has_bias: false,
                        ..p3
                    },
                    vec![7, 4],
                    8,
                ),
                node(Op::Unary(UnaryKind::Relu), vec![7], 9),
            ],
            inputs: vec![("x".into(), 0)],
            outputs: vec![("y".into(), 8), ("r".into(), 9)],
        });
        let mut cpu = crate::backend::cpu::CpuBackend::new();
        cpu.compile(1, graph.clone()).unwrap();
        cpu.compile(2, graph.clone()).unwrap();
        let plan = cpu.graphs[&1].nchwc.as_ref().expect("a plan");
        let blocked: Vec<bool> = (5..10).map(|i| plan.is_blocked(i)).collect();
        assert_eq!(blocked, [true, true, true, true, false]);
        cpu.graphs.get_mut(&2).unwrap().nchwc = None;
        let x = random(16 * 81, 1);
        let got = cpu.compute(1, &graph, vec![Buf::F32(x.clone())]).unwrap();
        let want = cpu.compute(2, &graph, vec![Buf::F32(x)]).unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert_near(&g.to_f32_vec(), &w.to_f32_vec());
        }
    }

    /// conv -> 1x1 conv -> add of the two (the output): the 1x1
    /// convolution does the add in its epilogue; the result is bit for
    /// bit that of the two nodes run blocked, and agrees with the plain
    /// graph.
    #[test]
    fn a_residual_add_runs_in_the_convolution_before_it() {
        use crate::backend::Backend;
        if !available() {
            return;
        }
        let p1 = params((1, 16, 9, 9), (16, 3, 3), [1, 1, 1, 1], 1, 1, 1);
        let p2 = params((1, 16, 9, 9), (16, 1, 1), [0; 4], 1, 1, 1);
        let conv = |p: &Conv2dParams, inputs, out| node(Op::Conv2d(p.clone()), inputs, out);
        let a = [1, 16, 9, 9];
        let graph = Arc::new(Graph {
            operands: vec![
                f32d(&a),
                f32d(&[16, 16, 3, 3]),
                f32d(&[16]),
                f32d(&[16, 16, 1, 1]),
                f32d(&a),
                f32d(&a),
                f32d(&a),
            ],
            sources: vec![
                Source::Input("x".into()),
                Source::Constant(bytes(&random(16 * 16 * 9, 2))),
                Source::Constant(bytes(&random(16, 3))),
                Source::Constant(bytes(&random(16 * 16, 4))),
                Source::Node { node: 0, index: 0 },
                Source::Node { node: 1, index: 0 },
                Source::Node { node: 2, index: 0 },
            ],
            nodes: vec![
                conv(&p1, vec![0, 1, 2], 4),
                conv(&p2, vec![4, 3, 2], 5),
                node(Op::Binary(BinaryKind::Add), vec![5, 4], 6),
            ],
            inputs: vec![("x".into(), 0)],
            outputs: vec![("y".into(), 6)],
        });
        let mut cpu = crate::backend::cpu::CpuBackend::new();
        for id in 1..=3 {
            cpu.compile(id, graph.clone()).unwrap();
        }
        let plan = cpu.graphs[&1].nchwc.as_ref().expect("a plan");
        let s = plan.sum(1).expect("the 1x1 convolution does the add");
        assert_eq!((s.residual, s.out), (4, 6));
        assert!(plan.is_fused(2) && plan.sum(0).is_none());
        // Graph 2: blocked, the add a node of its own; graph 3: plain.
        let g2 = cpu.graphs.get_mut(&2).unwrap().nchwc.as_mut().unwrap();
        g2.sums.clear();
        g2.fused.iter_mut().for_each(|f| *f = false);
        cpu.graphs.get_mut(&3).unwrap().nchwc = None;
        let x = random(16 * 81, 1);
        let run = |cpu: &mut crate::backend::cpu::CpuBackend, id| {
            cpu.compute(id, &graph, vec![Buf::F32(x.clone())]).unwrap()[0].to_f32_vec()
        };
        let (fused, apart, plain) = (run(&mut cpu, 1), run(&mut cpu, 2), run(&mut cpu, 3));
        assert!(fused
            .iter()
            .zip(&apart)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
        assert_near(&fused, &plain);
    }
}

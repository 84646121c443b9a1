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
//! outputs of the float32 convolutions whose channel counts are
//! multiples of 8 (plain or depthwise, constant filter; not a lone 1x1
//! one, see [`planner::alone`]); of
//! element-wise binary nodes whose two inputs are blocked operands of
//! their own shape and layout, and of unary ones and clamps of a blocked
//! input; of windowed pooling of a blocked input, and of concatenation
//! on the channel axis of blocked inputs (`pool.rs`). A node that wants an input in the other
//! layout gets a converted copy (`Plan::to_blocked`, `Plan::to_plain`);
//! graph outputs are always in their own layout. Convolutions in `nhwc`
//! run blocked too: the blocked form of an `[n, h, w, c]` operand is the
//! same `[n, c / 8, h, w, 8]`, so the kernels are the same and only the
//! layout changes at a chain's ends differ (each pixel's channels are
//! contiguous there, so they are plain copies of 8 floats). So do
//! float16 convolutions: their blocked operands hold float32 values that
//! are float16 values (widened exactly as a chain starts, each blocked
//! node's output rounded to float16 as the node's own would be, narrowed
//! exactly at the end), which the float32 kernels compute on; a
//! depthwise chain rounds each stage's rows where its node would, while
//! residual adds, which would round once where the two nodes round
//! twice, stay apart for them. On x86-64 with AVX2 and FMA and on
//! aarch64 (NEON, which every aarch64 CPU has); elsewhere the plan is
//! empty and every convolution runs on the paths of `conv/`.
//!
//! The kernels are written once over a vector type (`simd::Vf`). On
//! aarch64 a vector is two NEON registers of 4 lanes, one 8-channel
//! block, and the kernels take AVX2's shapes (`simd/neon.rs`). On
//! x86-64 they run on AVX-512 where the CPU has it (chosen at build,
//! [`Isa`]), with the same 8-channel blocks: a zmm vector holds one
//! pixel of two blocks in the direct kernel (panels of 4 blocks, tiles
//! of 12 pixels) and two neighbouring pixels of one block in the
//! depthwise kernel at unit stride (where that form measures faster
//! than AVX2's on this CPU: `depthwise::preferred`); the rest runs on
//! ymm vectors as on AVX2. Every output is computed in the same order
//! whatever the width, so the forms agree bit for bit, and the tests
//! run a portable 16-lane form on any machine.
//! Plain 3x3 convolutions at unit stride of 16 or more input channels
//! run by Winograd's F(2x2, 3x3) instead (`winograd.rs`), their 16
//! products per tile on the direct kernel's tile.
//! The layout changes (`relayout.rs`) move 16 pixels at a time on
//! AVX-512 where the planes are large (a 16 x 8 transpose in three
//! stages of two-source permutes, whose tables the tests check on any
//! machine), 8 at a time otherwise (an 8 x 8 transpose of AVX2's or
//! NEON's vectors).

// The blocked path has kernels for x86-64 and aarch64 (the targets this
// package is built for). On any other architecture `Isa` has no
// hardware form, so the planner never builds a plan and the kernels
// are compiled unused.
#![cfg_attr(
    not(any(target_arch = "x86_64", target_arch = "aarch64")),
    allow(dead_code, unreachable_code, unused_variables)
)]

use std::collections::HashMap;

use crate::backend::cpu::util::{try_filled, try_vec};
use crate::error::{Error, Result};
use crate::graph::op::Op;
use crate::graph::ops::conv::Conv2dParams;
use crate::graph::ops::elementwise::BinaryKind;
use crate::graph::ops::shape::ConcatParams;
use crate::graph::Graph;
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

mod chain;
mod depthwise;
mod direct;
mod par;
mod planner;
mod pool;
mod relayout;
pub(super) mod simd;
#[cfg(test)]
mod tests;
mod winograd;

/// Channels per block: the lanes of an AVX2 float vector (two NEON
/// ones).
pub(super) const L: usize = 8;

/// Which operands of a compiled graph are stored blocked, and the
/// filters of the convolutions that run blocked.
pub(in crate::backend::cpu) struct Plan {
    blocked: Vec<bool>,
    /// Each operand's layout as the blocked nodes that write or read it
    /// see it (`true`: nhwc); for the others, false and unused.
    nhwc: Vec<bool>,
    /// Blocked operands that are float16 (held as float32 values that
    /// float16 represents).
    half: Vec<bool>,
    convs: HashMap<usize, Conv>,
    /// Direct convolutions (by node) that add a residual in their
    /// epilogue and write the sum: the add node runs no more.
    sums: HashMap<usize, Sum>,
    /// Depthwise chains, by first node.
    chains: HashMap<usize, Chain>,
    /// Nodes whose work an earlier node does: adds whose sum a
    /// convolution writes, the later convolutions of a chain.
    fused: Vec<bool>,
    /// Pooling nodes (by node) that read their blocked input where it
    /// lies: global ones write NCHW (`pool::global`), windowed ones the
    /// blocked layout (`pool::window`).
    pools: Vec<bool>,
    /// Concatenations on the channel axis (by node) of blocked operands
    /// into a blocked one (`pool::concat`).
    concats: Vec<bool>,
    /// Convolutions (by node) that write their output into their part of
    /// a concatenation's (see [`ConcatPart`]).
    into: HashMap<usize, ConcatPart>,
    /// Concatenations (by node) whose parts their inputs' convolutions
    /// write: the node runs no more.
    elided: Vec<bool>,
    /// The vectors the layout changes run on (the plan's choice, made
    /// once at build).
    isa: Isa,
}

/// A residual add folded into the convolution before it: `out =
/// conv(...) + residual`, where the add read the convolution's output
/// (read by nothing else) and `residual`, an operand computed before the
/// convolution. The same two roundings as the two nodes. With `after`,
/// the relu or clamp that alone read the add's output is folded too
/// (ResNet's ReLU after each block's sum): `out` is then its output,
/// clamped to those bounds as the node would (`(-inf, inf)` otherwise,
/// which leaves every value as it is).
pub(in crate::backend::cpu) struct Sum {
    pub residual: usize,
    pub out: usize,
    pub after: (f32, f32),
}

/// A convolution that writes its output where it lies in a blocked
/// concatenation's (an input of one image, so its blocks are one run of
/// the output's), which its producers fill and the concat node no longer
/// copies. SqueezeNet's eight fire modules each concatenate two
/// expanding convolutions: their copies were 0.2 ms of a 5 ms inference
/// at one thread, and the slowest of its nodes to vary at two.
pub(in crate::backend::cpu) struct ConcatPart {
    /// The concatenation's output operand.
    pub out: usize,
    /// Floats of the output before this convolution's part.
    pub at: usize,
    /// Floats of the whole output.
    pub total: usize,
}

/// A depthwise chain (`chain.rs`): an expanding 1x1 convolution, a
/// depthwise one and a projecting 1x1 one (at least one of the two),
/// run by the first node a band of rows at a time; the operand it
/// writes.
pub(in crate::backend::cpu) struct Chain {
    pub(in crate::backend::cpu) expand: Option<usize>,
    pub(in crate::backend::cpu) depthwise: usize,
    pub(in crate::backend::cpu) project: Option<usize>,
    /// The last convolution's output, or the output of the residual add
    /// that the projection does.
    pub(in crate::backend::cpu) out: usize,
}

impl Chain {
    /// The nodes whose work the first one does.
    pub(super) fn absorbed(&self) -> impl Iterator<Item = usize> + '_ {
        let dw = self.expand.map(|_| self.depthwise);
        dw.into_iter().chain(self.project)
    }
}

/// A convolution that runs in the blocked layout, its filter packed.
pub(in crate::backend::cpu) enum Conv {
    /// groups = 1: `w` holds one panel per 16 output channels (8 for an
    /// odd last block), each `[ic / 8][kh * kw][8 input][nb * 8 output]`,
    /// or with `plain` (the input read in NCHW: the few input channels of
    /// a network's first layer) `[kh * kw][ic][nb * 8]`.
    Direct {
        w: Vec<f32>,
        panels: Vec<Panel>,
        plain: bool,
        /// Blocked input channels, padding, and an input that is not
        /// stored blocked (a graph input): read in NCHW and blocked as it
        /// is padded, in one pass.
        nchw_in: bool,
        isa: Isa,
    },
    /// groups = channels: `w` is `[c / 8][kh * kw][8]`.
    Depthwise { w: Vec<f32>, isa: Isa },
    /// groups = 1, 3x3, unit strides and dilations, by Winograd's
    /// F(2x2, 3x3) (`winograd.rs`): `u` is the transformed filter, 16
    /// slabs (one per position) of `panels` as a 1x1 direct
    /// convolution's.
    Winograd {
        u: Vec<f32>,
        panels: Vec<Panel>,
        isa: Isa,
    },
}

pub(in crate::backend::cpu) use planner::plan;
#[cfg(test)]
use planner::{plan_for, plan_with};
pub(super) use simd::Isa;

/// A panel of a direct convolution's filter: output channel block `ob0`
/// and the next `nb - 1`, at `off` in the packed filter.
#[derive(Clone, Copy)]
pub(in crate::backend::cpu) struct Panel {
    ob0: usize,
    nb: usize,
    off: usize,
}

/// Half of this machine's L2: what a filter may take and still stay in
/// cache while a task's tiles pass over it. A filter larger than this
/// comes from L3 or memory whenever a kernel reads it again (the direct
/// kernel's chunking and the choice against Winograd both go by it).
pub(super) fn half_l2() -> usize {
    crate::backend::cpu::sgemm::Caches::this_machine().l2 / 2
}

/// Whether `run(true)` is faster than `run(false)` on this CPU: the
/// fastest of eight alternating runs of each. For the kernel forms that
/// give the same bits and are chosen by time, once per process
/// (`depthwise::preferred`, `direct::one_vector`).
#[cfg(target_arch = "x86_64")]
fn first_is_faster(mut run: impl FnMut(bool)) -> bool {
    let mut best = [u128::MAX; 2];
    for _ in 0..8 {
        for (k, first) in [true, false].into_iter().enumerate() {
            let t = std::time::Instant::now();
            run(first);
            best[k] = best[k].min(t.elapsed().as_nanos());
        }
    }
    best[0] <= best[1]
}

/// Whether `WEBNN_CPU_NCHWC=0` turns the blocked layout off (read at each
/// build, so one process can compare both ways).
fn disabled() -> bool {
    std::env::var("WEBNN_CPU_NCHWC").is_ok_and(|v| v == "0")
}

/// Whether this CPU runs the blocked kernels.
#[cfg(test)]
pub(super) fn available() -> bool {
    best().is_some()
}

/// The blocked kernels' vectors as the bench prints them: the depthwise
/// form where it differs (see [`depthwise::preferred`]), and on AVX-512
/// the tile of a panel of two blocks (see `direct::one_vector`).
pub(in crate::backend::cpu) fn isa_name() -> String {
    let Some(isa) = best() else {
        return match cfg!(target_arch = "x86_64") {
            true => "off (no AVX2+FMA)".into(),
            false => "off (no kernels for this architecture)".into(),
        };
    };
    let mut measured = Vec::new();
    let d = depthwise::preferred(isa);
    if d != isa {
        measured.push(format!("depthwise {}", d.name()));
    }
    #[cfg(target_arch = "x86_64")]
    if isa == Isa::Avx512 {
        use std::arch::x86_64::{__m256, __m512};
        // SAFETY: `best` gives `Avx512` only where it detected
        // AVX-512F, AVX2 and FMA, both kinds' features.
        let one = unsafe { direct::one_vector::<__m512, __m256>() };
        measured.push(format!(
            "16-channel panels on {}",
            if one { "one zmm" } else { "two ymm" }
        ));
    }
    match measured.is_empty() {
        true => isa.name().into(),
        false => format!("{} ({}, measured here)", isa.name(), measured.join(", ")),
    }
}

/// The vectors the blocked kernels run on here (see [`Isa::best`]).
pub(super) fn best() -> Option<Isa> {
    Isa::best()
}

/// For a 4-D float operand, whether it is float16; `None` for others.
fn float_4d(d: &OperandDescriptor) -> Option<bool> {
    match (d.data_type, d.rank()) {
        (DataType::Float32, 4) => Some(false),
        (DataType::Float16, 4) => Some(true),
        _ => None,
    }
}

/// A float constant as f32 values (float16 widened exactly).
fn constant_f32(b: &Buf) -> Option<std::borrow::Cow<'_, [f32]>> {
    crate::backend::cpu::util::floats(b).ok()
}

/// The blocked form of a conv2d node, when it has one: float32 or
/// float16, a constant filter, channel counts multiples of 8, and plain
/// (groups 1) or depthwise; packed for the kernels of `isa`.
fn blocked_conv(
    graph: &Graph,
    node: &crate::graph::Node,
    p: &Conv2dParams,
    constants: &crate::backend::cpu::Constants,
    isa: Isa,
) -> Option<Conv> {
    let (x, f) = (*node.inputs.first()?, *node.inputs.get(1)?);
    let out = *node.outputs.first()?;
    // Input channels that are not whole blocks are read in NCHW, for a
    // plain convolution of at most 8 of them (an image's 3 or 4).
    let plain = !p.in_channels.is_multiple_of(L);
    let half = float_4d(&graph.operands[x])?;
    // The plain form reads its input as NCHW float32: an nhwc or float16
    // one (a network's first layer, over 3 or 4 channels) is put in that
    // form first (`conv::plain_input`).
    if float_4d(&graph.operands[out]) != Some(half)
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
    let f = constant_f32(constants.get(&f)?)?;
    let khw = p.kernel_h * p.kernel_w;
    let depthwise = p.groups == p.in_channels && p.groups == p.out_channels;
    if !depthwise && p.groups != 1 {
        return None;
    }
    let cg = p.in_channels / p.groups;
    if f.len() != p.out_channels * cg * khw {
        return None;
    }
    // A filter whose OIHW or packed copy cannot be allocated is not
    // packed: the generic path then meets the same allocation and reports
    // it.
    let f = super::common::filter_oihw(&f, p).ok()?;
    if depthwise {
        let c = p.in_channels;
        let mut w = try_filled(c * khw, 0.0f32, "a packed depthwise filter").ok()?;
        for cb in 0..c / L {
            for t in 0..khw {
                for l in 0..L {
                    w[(cb * khw + t) * L + l] = f[(cb * L + l) * khw + t];
                }
            }
        }
        return Some(Conv::Depthwise { w, isa });
    }
    let ic = p.in_channels;
    let mut w = try_vec(p.out_channels * ic * khw, "a packed filter").ok()?;
    let panels = match plain {
        true => panel_list_wide(p.out_channels / L, isa, ic * khw, plain_panel_blocks(isa)),
        false => panel_list(p.out_channels / L, isa, ic * khw),
    };
    for &Panel { ob0, nb, .. } in &panels {
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
    }
    Some(Conv::Direct {
        w,
        panels,
        plain,
        nchw_in: false,
        isa,
    })
}

/// The panels of a direct convolution's filter for `ocb` output blocks,
/// each output channel `per` floats (input channels times taps): panels
/// of 2 blocks (AVX2; AVX-512: 4, see `panel_blocks`), then 2, an odd
/// count's last of 1. (On AVX2, panels of 3 blocks by 4 pixels measured
/// slower: 144 -> 24 channels on 56x56, 496 against 672 us.)
fn panel_list(ocb: usize, isa: Isa, per: usize) -> Vec<Panel> {
    panel_list_wide(ocb, isa, per, panel_blocks(isa))
}

/// [`panel_list`] with panels of `widest` blocks first (then as there).
fn panel_list_wide(ocb: usize, isa: Isa, per: usize, widest: usize) -> Vec<Panel> {
    let narrow = panel_blocks(isa);
    let (mut panels, mut ob0, mut off) = (Vec::new(), 0, 0);
    while ob0 < ocb {
        let nb = match ocb - ob0 {
            r if r >= widest => widest,
            r if r >= narrow => narrow,
            r => r.min(2),
        };
        panels.push(Panel { ob0, nb, off });
        off += nb * L * per;
        ob0 += nb;
    }
    panels
}

/// The Winograd form of a conv2d node (see [`Conv::Winograd`]), where
/// it has one and is worth it: a constant filter, enough channels that
/// the products dominate the transforms.
fn winograd_conv(
    node: &crate::graph::Node,
    p: &Conv2dParams,
    constants: &crate::backend::cpu::Constants,
    isa: Isa,
) -> Option<Conv> {
    if winograd_disabled()
        || !winograd::fits(p)
        || p.in_channels < WINOGRAD_MIN_CHANNELS
        || p.in_channels * p.out_channels > WINOGRAD_MAX_PAIRS
    {
        return None;
    }
    let (ic, oc) = (p.in_channels, p.out_channels);
    // Few tiles and a transformed filter that L2 does not hold: the
    // filter comes from memory at each dispatch (a network's filters do
    // not stay in cache), and the direct form reads 9 floats per channel
    // pair where this reads 16.
    let tiles = p.batch * p.out_h.div_ceil(2) * p.out_w.div_ceil(2);
    if tiles < WINOGRAD_MIN_TILES && winograd::POS * ic * oc * 4 > half_l2() {
        return None;
    }
    let f = constant_f32(constants.get(node.inputs.get(1)?)?)?;
    if f.len() != oc * ic * 9 {
        return None;
    }
    let f = super::common::filter_oihw(&f, p).ok()?;
    let panels = panel_list(oc / L, isa, ic);
    let u = winograd::pack(&f, ic, oc, &panels);
    Some(Conv::Winograd { u, panels, isa })
}

/// Input channels from which a 3x3 convolution runs by Winograd.
const WINOGRAD_MIN_CHANNELS: usize = 16;

/// Tiles (2x2 blocks of output pixels, over the batch) below which a 3x3
/// convolution whose transformed filter L2 does not hold runs on the
/// direct kernel. Measured in ResNet-50 on an Intel Xeon with AVX-512
/// (2 MiB of L2), one thread, fastest of 20 runs: 512 channels to 512 at
/// 7x7 (16 tiles, 16 MiB transformed) 2.9-3.1 ms by Winograd against
/// 2.0-2.1 directly; 256 to 256 at 14x14 (49 tiles, 4 MiB) 1.25-1.5
/// against 1.35-1.5; at 28x28 and 56x56 Winograd is 1.5-1.7x faster.
const WINOGRAD_MIN_TILES: usize = 32;

/// Channel pairs (in times out) up to which a 3x3 convolution runs by
/// Winograd: its transformed filter holds 16 floats per pair where the
/// filter holds 9, so 64 MiB at this bound (1024 channels in and out;
/// 512 and 512, the widest in ResNets and VGG, take 16 MiB).
const WINOGRAD_MAX_PAIRS: usize = 1 << 20;

/// Whether `WEBNN_CPU_WINOGRAD=0` keeps 3x3 convolutions on the direct
/// kernel (read at each build, so one process can compare both ways).
fn winograd_disabled() -> bool {
    std::env::var("WEBNN_CPU_WINOGRAD").is_ok_and(|v| v == "0")
}

/// Output channel blocks per panel of a direct convolution: 2 (a tile
/// of 6 pixels by 2 ymm vectors) on AVX2, and on NEON (6 pixels by 2
/// vectors of two registers: 24 accumulators of the 32 registers); on
/// AVX-512 4, a tile of 12 pixels by 2 zmm vectors, each vector two
/// blocks of one pixel (the blocks stay 8 channels wide, so the layout
/// and the plan are the same on all; 16-channel blocks would not divide
/// MobileNetV2's 24). The portable form is AVX-512's shape.
fn panel_blocks(isa: Isa) -> usize {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => 2,
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => 4,
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => 2,
        #[cfg(test)]
        Isa::Portable => 4,
    }
}

/// Output channel blocks per panel of a convolution that reads its few
/// input channels in NCHW (`plain`: a network's first layer): on
/// AVX-512 8, a tile of 6 pixels by 4 zmm vectors, so that the padded
/// image is read once for 64 channels rather than once per 32.
/// Measured on an Intel Xeon with AVX-512, one thread, fastest of 30
/// runs in turns: SqueezeNet's 3 to 64 channels by 3x3 at stride 2
/// 410 -> 331-373 us, ResNet-50's by 7x7 1502-1558 -> 1354-1423 us.
/// Elsewhere tiles of 6 pixels were slower (a 3x3 from 512 channels at
/// 7x7 1.7 -> 1.8-2.0 ms), as were AVX-512's other kernels.
/// The portable form (tests) is AVX-512's shape here too.
fn plain_panel_blocks(isa: Isa) -> usize {
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => 8,
        #[cfg(test)]
        Isa::Portable => 8,
        _ => panel_blocks(isa),
    }
}

impl Plan {
    /// Whether operand `i` is stored blocked.
    pub(in crate::backend::cpu) fn is_blocked(&self, i: usize) -> bool {
        self.blocked[i]
    }

    /// Whether node `n` reads its input `index` in the blocked layout.
    pub(in crate::backend::cpu) fn wants_blocked(
        &self,
        graph: &Graph,
        n: usize,
        index: usize,
    ) -> bool {
        if let Some(c) = self.convs.get(&n) {
            let nchw = matches!(c, Conv::Direct { plain: true, .. })
                || matches!(c, Conv::Direct { nchw_in: true, .. });
            return index == 0 && !nchw;
        }
        if self.is_pool(n) {
            return index == 0;
        }
        if self.is_concat(n) {
            return true;
        }
        let node = &graph.nodes[n];
        matches!(node.op, Op::Binary(_) | Op::Unary(_) | Op::Clamp(_))
            && node.outputs.first().is_some_and(|&o| self.blocked[o])
    }

    /// Whether pooling node `n` reads its blocked input where it lies
    /// (run it with [`pool`]).
    pub(in crate::backend::cpu) fn is_pool(&self, n: usize) -> bool {
        self.pools.get(n).copied().unwrap_or(false)
    }

    /// Whether concat node `n` joins blocked operands into a blocked one
    /// (run it with [`concat`]).
    pub(in crate::backend::cpu) fn is_concat(&self, n: usize) -> bool {
        self.concats.get(n).copied().unwrap_or(false)
    }

    /// The blocked convolution of node `n`, when it runs blocked.
    pub(in crate::backend::cpu) fn conv(&self, n: usize) -> Option<&Conv> {
        self.convs.get(&n)
    }

    /// The depthwise chain that node `n` runs, when it starts one.
    pub(in crate::backend::cpu) fn chain(&self, n: usize) -> Option<&Chain> {
        self.chains.get(&n)
    }

    /// The residual add that convolution node `n` does, when it does one.
    pub(in crate::backend::cpu) fn sum(&self, n: usize) -> Option<&Sum> {
        self.sums.get(&n)
    }

    /// Operand `i`, `x` of descriptor `d` (NCHW, or nhwc where the
    /// blocked nodes read it so; float16 widened), in the blocked layout.
    pub(in crate::backend::cpu) fn to_blocked(
        &self,
        x: &Buf,
        d: &OperandDescriptor,
        i: usize,
    ) -> Result<Buf> {
        let wide;
        let x = match x {
            Buf::F16(h) => {
                let mut v = Buf::try_f32_for_overwrite(h.len())?;
                crate::f16::widen(h, &mut v);
                wide = Buf::F32(v);
                &wide
            }
            x => x,
        };
        match self.nhwc[i] {
            true => nhwc_relayout(x, d, true),
            false => to_blocked(x, d, self.isa),
        }
    }

    /// Blocked operand `i`, `x` of descriptor `d`, back in its own
    /// layout (NCHW or nhwc) and type (float16 narrowed: exact, as its
    /// values are float16's).
    pub(in crate::backend::cpu) fn to_plain(
        &self,
        x: &Buf,
        d: &OperandDescriptor,
        i: usize,
    ) -> Result<Buf> {
        let plain = match self.nhwc[i] {
            true => nhwc_relayout(x, d, false),
            false => to_nchw(x, d, self.isa),
        }?;
        match (self.half[i], &plain) {
            (true, Buf::F32(v)) => {
                let h = Buf::try_f16_from_f32(v)?;
                plain.recycle();
                Ok(h)
            }
            _ => Ok(plain),
        }
    }

    /// Whether operand `i` is float16 held blocked in float32: the node
    /// that writes it rounds its result to float16 (see the module
    /// comment).
    pub(in crate::backend::cpu) fn is_half(&self, i: usize) -> bool {
        self.blocked[i] && self.half[i]
    }

    /// Where convolution `n` writes its output, when it writes it into a
    /// concatenation's.
    pub(in crate::backend::cpu) fn concat_part(&self, n: usize) -> Option<&ConcatPart> {
        self.into.get(&n)
    }

    /// Whether concatenation `n`'s inputs were written in place (by
    /// [`Plan::concat_part`]'s convolutions): its output is whole.
    pub(in crate::backend::cpu) fn is_elided(&self, n: usize) -> bool {
        self.elided.get(n).copied().unwrap_or(false)
    }

    /// Whether node `n`'s work is done by an earlier node: an add by the
    /// convolution before it, a convolution by its chain's first node.
    pub(in crate::backend::cpu) fn is_fused(&self, n: usize) -> bool {
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

/// Pooling `p` of blocked `x` (a node that [`Plan::is_pool`] names): a
/// global one into NCHW `[n, c, 1, 1]` of the output's type `dt` (float16
/// narrowed from the float32 sums, as the plain kernel narrows its
/// results), a windowed one into the blocked layout (float32, rounded by
/// the caller where the operand is float16).
pub(in crate::backend::cpu) fn pool(
    p: &crate::graph::ops::conv::Pool2dParams,
    x: &Buf,
    dt: DataType,
) -> Result<Buf> {
    match pool::is_global(p) {
        true => crate::backend::cpu::util::from_floats(dt, pool::global(p, f32s(x)?)?),
        false => pool::window(p, f32s(x)?).map(Buf::F32),
    }
}

/// The channel concatenation of blocked `inputs` of batch `n` (a node
/// that [`Plan::is_concat`] names), blocked.
pub(in crate::backend::cpu) fn concat(inputs: &[&Buf], n: usize) -> Result<Buf> {
    let xs = inputs.iter().map(|x| f32s(x)).collect::<Result<Vec<_>>>()?;
    pool::concat(&xs, n).map(Buf::F32)
}

/// An NCHW operand `x` of descriptor `d` in the blocked layout, moved
/// with `isa`'s vectors.
fn to_blocked(x: &Buf, d: &OperandDescriptor, isa: Isa) -> Result<Buf> {
    relayout(x, d, true, isa)
}

/// A blocked operand `x` of descriptor `d` back in NCHW.
fn to_nchw(x: &Buf, d: &OperandDescriptor, isa: Isa) -> Result<Buf> {
    relayout(x, d, false, isa)
}

/// `x` into the blocked layout (`into`) or out of it.
fn relayout(x: &Buf, d: &OperandDescriptor, into: bool, isa: Isa) -> Result<Buf> {
    let (n, c, hw) = dims(d)?;
    let x = f32s(x)?;
    if x.len() != n * c * hw {
        return Err(Error::operation("blocked layout: operand size mismatch"));
    }
    let mut out = Buf::try_f32_for_overwrite(x.len())?;
    let (o, blocks) = (&mut out[..], n * c / L);
    // SAFETY: `isa` names features this CPU has (see `Isa`): AVX2 for
    // `Avx2`, AVX-512F and AVX2 for `Avx512` (the 16-pixel form, `wide`,
    // only there), NEON (every aarch64 CPU's) for `Neon`, none for
    // `Portable`. `x` holds `n * c * hw` floats (checked above) and
    // `out` as many, which with `c` a multiple of 8 (`dims`) are `n * c
    // / 8` blocks of `8 * hw`.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                relayout::reorder::<std::arch::x86_64::__m256>(x, o, blocks, hw, into, false)
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                relayout::reorder::<std::arch::x86_64::__m256>(x, o, blocks, hw, into, true)
            }
            #[cfg(target_arch = "aarch64")]
            Isa::Neon => relayout::reorder::<simd::Neon8>(x, o, blocks, hw, into, false),
            #[cfg(test)]
            Isa::Portable => relayout::reorder::<simd::Lanes<8>>(x, o, blocks, hw, into, false),
        }
    }
    Ok(Buf::F32(out))
}

/// An nhwc operand `x` of descriptor `d` (`[n, h, w, c]`, `c` whole
/// blocks) into the blocked layout (`into`) or out of it. A pixel's
/// channels are contiguous in both, 8 at a time, so this is a copy of
/// 8-float runs: each blocked plane gathers one run from every pixel
/// (into), or each pixel gathers one run from every plane (out of);
/// bound by memory, in parallel over planes or rows of pixels.
fn nhwc_relayout(x: &Buf, d: &OperandDescriptor, into: bool) -> Result<Buf> {
    use rayon::prelude::*;
    let (n, hw, c) = match d.shape[..] {
        [n, h, w, c] if c.is_multiple_of(L) => (n, h * w, c),
        _ => {
            return Err(Error::operation(
                "blocked layout: not a 4-D operand of whole channel blocks",
            ))
        }
    };
    let x = f32s(x)?;
    if x.len() != n * hw * c {
        return Err(Error::operation("blocked layout: operand size mismatch"));
    }
    let mut out = Buf::try_f32_for_overwrite(x.len())?;
    if x.is_empty() {
        return Ok(Buf::F32(out));
    }
    let o = &mut out[..];
    let blocks = c / L;
    // Small tensors stay on this thread: a fork costs more than the copy.
    let parallel = x.len() >= 1 << 16;
    if into {
        // Plane (b, cb): pixel q's run is x[(b * hw + q) * c + cb * 8..].
        let plane = |(k, dst): (usize, &mut [f32])| {
            let (b, cb) = (k / blocks, k % blocks);
            let src = &x[b * hw * c..(b + 1) * hw * c];
            for (run, px) in dst.chunks_exact_mut(L).zip(src.chunks_exact(c)) {
                run.copy_from_slice(&px[cb * L..(cb + 1) * L]);
            }
        };
        match parallel {
            true => o.par_chunks_mut(hw * L).enumerate().for_each(plane),
            false => o.chunks_mut(hw * L).enumerate().for_each(plane),
        }
    } else {
        // Rows of up to 64 pixels of one batch: pixel q of batch b takes
        // run cb from x[((b * blocks + cb) * hw + q) * 8..].
        let rows = 64usize.min(hw);
        let row = |b: usize, (r, dst): (usize, &mut [f32])| {
            for (dq, px) in dst.chunks_exact_mut(c).enumerate() {
                let q = r * rows + dq;
                for (cb, run) in px.chunks_exact_mut(L).enumerate() {
                    let at = ((b * blocks + cb) * hw + q) * L;
                    run.copy_from_slice(&x[at..at + L]);
                }
            }
        };
        match parallel {
            true => o.par_chunks_mut(hw * c).enumerate().for_each(|(b, batch)| {
                batch
                    .par_chunks_mut(rows * c)
                    .enumerate()
                    .for_each(|r| row(b, r))
            }),
            false => o.chunks_mut(hw * c).enumerate().for_each(|(b, batch)| {
                batch
                    .chunks_mut(rows * c)
                    .enumerate()
                    .for_each(|r| row(b, r))
            }),
        }
    }
    Ok(Buf::F32(out))
}

/// Whether `p` has output pixels, every tap of each lies inside the
/// padded input, and a padded plane is not far larger than an input
/// and an output plane together.
///
/// The last bounds the kernels' padded copies, and keeps their sizes
/// and offsets from overflowing: padding and strides of up to 2^32 - 1
/// each make a padded plane of up to 2^66 floats for a 3x3 output (a
/// product that wrapped to an empty copy, read far outside of).
fn taps_fit(p: &Conv2dParams) -> bool {
    let reach = |o: usize, k: usize, s: usize, d: usize| (o - 1) * s + (k - 1) * d;
    let [pt, pb, pl, pr] = p.padding;
    let (hp, wp) = (p.in_h + pt + pb, p.in_w + pl + pr);
    let planes = p.in_h * p.in_w + p.out_h * p.out_w;
    p.out_h > 0
        && p.out_w > 0
        && p.kernel_h > 0
        && p.kernel_w > 0
        && reach(p.out_h, p.kernel_h, p.strides[0], p.dilations[0]) < hp
        && reach(p.out_w, p.kernel_w, p.strides[1], p.dilations[1]) < wp
        && hp
            .checked_mul(wp)
            .is_some_and(|padded| padded <= 4 * planes + MAX_PAD_FLOATS)
}

/// Floats of a padded plane allowed beyond four times its input and
/// output planes (see [`taps_fit`]): padding up to 127 around a single
/// pixel, whatever the strides.
const MAX_PAD_FLOATS: usize = 1 << 16;

/// A convolution's bias (or none; float16 widened) and bounds `(lo, hi)`.
type Epilogue<'a> = (Option<std::borrow::Cow<'a, [f32]>>, (f32, f32));

/// [`Epilogue`] of a float32 convolution: the bias is the operand.
type F32Epilogue<'a> = (Option<&'a [f32]>, (f32, f32));

/// A convolution's bias (when `p.has_bias`) and fused bounds `[lo, hi]`
/// (when it has more inputs than those), its input `k` being `input(k)`
/// of `count`.
fn ends<'a>(
    p: &Conv2dParams,
    count: usize,
    input: impl Fn(usize) -> Option<&'a Buf>,
) -> Result<Epilogue<'a>> {
    let bad = || Error::operation("conv2d: the operands do not match the parameters");
    let bias = match p.has_bias {
        true => Some(constant_f32(input(2).ok_or_else(bad)?).ok_or_else(bad)?),
        false => None,
    };
    let at = 2 + usize::from(p.has_bias);
    let bounds = match at < count {
        false => (f32::NEG_INFINITY, f32::INFINITY),
        true => match *f32s(input(at).ok_or_else(bad)?)? {
            [lo, hi] => (lo, hi),
            _ => return Err(Error::operation("conv2d: bad activation bounds")),
        },
    };
    Ok((bias, bounds))
}

/// Runs the blocked convolution `c` of parameters `p` on `inputs` (input
/// blocked, or NCHW for a `plain` or `nchw_in` one, filter, bias when
/// `p.has_bias`, fused bounds `[lo, hi]` when present, as `conv::conv2d`
/// takes them); the output is blocked.
/// Runs blocked convolution `c`; with `sum` (a direct convolution's
/// residual, blocked, of the output's shape, and the bounds after it:
/// [`Sum::after`]) adds it to the result.
pub(in crate::backend::cpu) fn conv(
    c: &Conv,
    p: &Conv2dParams,
    inputs: &[&Buf],
    sum: Option<(&Buf, (f32, f32))>,
    out: &OperandDescriptor,
) -> Result<Buf> {
    let mut res = Buf::try_f32_for_overwrite(out.element_count())?;
    conv_into(c, p, inputs, sum, out, &mut res)?;
    Ok(Buf::F32(res))
}

/// [`conv`] into `res` (the output's floats, blocked): a buffer of its
/// own or its part of a concatenation's ([`Plan::concat_part`]).
pub(in crate::backend::cpu) fn conv_into(
    c: &Conv,
    p: &Conv2dParams,
    inputs: &[&Buf],
    sum: Option<(&Buf, (f32, f32))>,
    out: &OperandDescriptor,
    res: &mut [f32],
) -> Result<()> {
    let bad = || Error::operation("conv2d: the operands do not match the parameters");
    let x = f32s(inputs.first().ok_or_else(bad)?)?;
    let (bias, bounds) = ends(p, inputs.len(), |k| inputs.get(k).copied())?;
    let bias = bias.as_deref();
    let (n, ic, oc) = (p.batch, p.in_channels, p.out_channels);
    let (h, w, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    let fits = taps_fit(p);
    let after = sum.map_or((f32::NEG_INFINITY, f32::INFINITY), |(_, a)| a);
    let sum = sum.map(|(s, _)| f32s(s)).transpose()?;
    if x.len() != n * ic * h * w
        || bias.is_some_and(|b| b.len() != oc)
        || sum.is_some_and(|r| r.len() != n * oc * oh * ow)
        || (sum.is_some() && matches!(c, Conv::Depthwise { .. }))
        || out.element_count() != n * oc * oh * ow
        || res.len() != n * oc * oh * ow
        || !fits
    {
        return Err(bad());
    }
    #[cfg(test)]
    use simd::Lanes;
    #[cfg(target_arch = "aarch64")]
    use simd::Neon8;
    #[cfg(target_arch = "x86_64")]
    use std::arch::x86_64::{__m256, __m512};
    // SAFETY: each arm runs the kernels of the `Isa` that `c` was packed
    // for, which names features this CPU has (see `Isa`; `Neon` needs
    // NEON, which every aarch64 CPU has, and `Portable` none), and the
    // 8-lane kind beside it is AVX2's, which AVX-512 machines have too
    // (`Isa::best` checks both), or the same kind. The kernels' size
    // contracts were checked above: `x`, `bias`, `sum` and `res` against
    // `p`, every tap inside the padded input (`taps_fit`), and per form
    // the filter's length (and for Winograd `fits`). The channel blocks
    // and the packing are `c`'s, made by the plan for this node's `p`.
    // `res` is borrowed mutably while the input and the residual are
    // borrowed, so it aliases neither.
    unsafe {
        match c {
            Conv::Direct {
                w,
                panels,
                plain,
                nchw_in,
                isa,
            } => {
                if w.len() != oc * ic * p.kernel_h * p.kernel_w {
                    return Err(bad());
                }
                let (plain, nchw_in) = (*plain, *nchw_in);
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2 => direct::direct::<__m256, __m256>(
                        w,
                        panels,
                        plain,
                        nchw_in,
                        p,
                        x,
                        bias,
                        bounds,
                        (sum, after),
                        res,
                    )?,
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 => direct::direct::<__m512, __m256>(
                        w,
                        panels,
                        plain,
                        nchw_in,
                        p,
                        x,
                        bias,
                        bounds,
                        (sum, after),
                        res,
                    )?,
                    #[cfg(target_arch = "aarch64")]
                    Isa::Neon => direct::direct::<Neon8, Neon8>(
                        w,
                        panels,
                        plain,
                        nchw_in,
                        p,
                        x,
                        bias,
                        bounds,
                        (sum, after),
                        res,
                    )?,
                    #[cfg(test)]
                    Isa::Portable => direct::direct::<Lanes<16>, Lanes<8>>(
                        w,
                        panels,
                        plain,
                        nchw_in,
                        p,
                        x,
                        bias,
                        bounds,
                        (sum, after),
                        res,
                    )?,
                }
            }
            Conv::Winograd { u, panels, isa } => {
                if u.len() != winograd::POS * oc * ic || !winograd::fits(p) {
                    return Err(bad());
                }
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2 => winograd::winograd::<__m256, __m256>(
                        u,
                        panels,
                        p,
                        x,
                        bias,
                        bounds,
                        (sum, after),
                        res,
                    ),
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 => winograd::winograd::<__m512, __m256>(
                        u,
                        panels,
                        p,
                        x,
                        bias,
                        bounds,
                        (sum, after),
                        res,
                    ),
                    #[cfg(target_arch = "aarch64")]
                    Isa::Neon => winograd::winograd::<Neon8, Neon8>(
                        u,
                        panels,
                        p,
                        x,
                        bias,
                        bounds,
                        (sum, after),
                        res,
                    ),
                    #[cfg(test)]
                    Isa::Portable => winograd::winograd::<Lanes<16>, Lanes<8>>(
                        u,
                        panels,
                        p,
                        x,
                        bias,
                        bounds,
                        (sum, after),
                        res,
                    ),
                }
            }
            Conv::Depthwise { w, isa } => {
                if w.len() != oc * p.kernel_h * p.kernel_w || ic != oc {
                    return Err(bad());
                }
                match isa {
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx2 => depthwise::depthwise::<__m256, __m256>(w, p, x, bias, bounds, res),
                    #[cfg(target_arch = "x86_64")]
                    Isa::Avx512 => {
                        depthwise::depthwise::<__m512, __m256>(w, p, x, bias, bounds, res)
                    }
                    #[cfg(target_arch = "aarch64")]
                    Isa::Neon => depthwise::depthwise::<Neon8, Neon8>(w, p, x, bias, bounds, res),
                    #[cfg(test)]
                    Isa::Portable => {
                        depthwise::depthwise::<Lanes<16>, Lanes<8>>(w, p, x, bias, bounds, res)
                    }
                }
            }
        }
    }
    Ok(())
}

impl Plan {
    /// Runs chain `ch` of `g` on its first node's input `x` (blocked);
    /// `operand(i)` is operand `i` where computed (the stages' filters,
    /// biases and bounds are constants), `sum` the residual when the
    /// projection adds one. The result is blocked, the shape of
    /// `ch.out`.
    pub(in crate::backend::cpu) fn run_chain<'a>(
        &'a self,
        g: &Graph,
        ch: &Chain,
        x: &Buf,
        operand: impl Fn(usize) -> Option<&'a Buf>,
        sum: Option<&Buf>,
    ) -> Result<Buf> {
        let bad = || Error::operation("conv2d chain: the operands do not match the parameters");
        // Each stage's bias as float32: the operand itself, or a float16
        // one widened (exactly), held here for the chain's run.
        let stages = std::iter::once(ch.depthwise)
            .chain(ch.expand)
            .chain(ch.project);
        // At most three stages: a slot each, found by node.
        let mut epilogues: [Option<(usize, Epilogue<'a>)>; 3] = [None, None, None];
        for (slot, m) in epilogues.iter_mut().zip(stages) {
            let node = &g.nodes[m];
            let Op::Conv2d(p) = &node.op else {
                return Err(bad());
            };
            let (bias, bounds) = ends(p, node.inputs.len(), |k| operand(*node.inputs.get(k)?))?;
            if bias.as_ref().is_some_and(|b| b.len() != p.out_channels) {
                return Err(bad());
            }
            *slot = Some((m, (bias, bounds)));
        }
        let stage = |m: usize| -> Result<(&Conv, &Conv2dParams, F32Epilogue<'_>)> {
            let Op::Conv2d(p) = &g.nodes[m].op else {
                return Err(bad());
            };
            let c = self.convs.get(&m).ok_or_else(bad)?;
            let (_, (bias, bounds)) = epilogues
                .iter()
                .flatten()
                .find(|(k, _)| *k == m)
                .ok_or_else(bad)?;
            Ok((c, p, (bias.as_deref(), *bounds)))
        };
        use chain::{Dw, Pw};
        let pointwise = |m: usize| -> Result<(Pw<'_>, &Conv2dParams)> {
            let (c, p, (bias, bounds)) = stage(m)?;
            let Conv::Direct { w, panels, .. } = c else {
                return Err(bad());
            };
            let (ic, oc) = (p.in_channels, p.out_channels);
            if w.len() != ic * oc || !ic.is_multiple_of(L) || !oc.is_multiple_of(L) {
                return Err(bad());
            }
            let pw = Pw {
                w,
                panels,
                bias,
                bounds,
                ic,
                oc,
            };
            Ok((pw, p))
        };
        let (c, p, (bias, bounds)) = stage(ch.depthwise)?;
        let Conv::Depthwise { w, isa: dw_isa } = c else {
            return Err(bad());
        };
        let d = Dw { w, p, bias, bounds };
        let e = ch.expand.map(pointwise).transpose()?;
        let pj = ch.project.map(pointwise).transpose()?;
        let (n, c) = (p.batch, p.in_channels);
        let size = |q: &Conv2dParams, h: usize, w: usize| {
            q.batch == n && (q.in_h, q.in_w) == (h, w) && (q.out_h, q.out_w) == (h, w)
        };
        let (ic, oc) = (
            e.as_ref().map_or(c, |(e, _)| e.ic),
            pj.as_ref().map_or(c, |(q, _)| q.oc),
        );
        let ok = c.is_multiple_of(L)
            && p.groups == c
            && p.out_channels == c
            && w.len() == c * p.kernel_h * p.kernel_w
            && chain::fits(p)
            && e.as_ref()
                .is_none_or(|(e, q)| e.oc == c && size(q, p.in_h, p.in_w))
            && pj
                .as_ref()
                .is_none_or(|(pj, q)| pj.ic == c && size(q, p.out_h, p.out_w))
            && x.len() == n * ic * p.in_h * p.in_w
            && g.operands[ch.out].element_count() == n * oc * p.out_h * p.out_w;
        let x = f32s(x)?;
        let sum = sum.map(f32s).transpose()?;
        if !ok || sum.is_some_and(|r| r.len() != n * oc * p.out_h * p.out_w) {
            return Err(bad());
        }
        let mut res = Buf::try_f32_for_overwrite(n * oc * p.out_h * p.out_w)?;
        let (e, pj) = (e.as_ref().map(|v| &v.0), pj.as_ref().map(|v| &v.0));
        // A float16 chain rounds each stage's rows to float16 as its node
        // would round its output.
        let half = self.half[ch.out];
        #[cfg(test)]
        use simd::Lanes;
        #[cfg(target_arch = "aarch64")]
        use simd::Neon8;
        #[cfg(target_arch = "x86_64")]
        use std::arch::x86_64::{__m256, __m512};
        // SAFETY: `self.isa` and `dw_isa` name features this CPU has
        // (see `Isa`; the depthwise form is the plan's or, by
        // `preferred`, AVX2 on an AVX-512 plan; NEON is in every aarch64
        // CPU), and each arm runs exactly those kinds (other pairs are
        // refused). `chain`'s contract was checked above: the stages'
        // channels and planes fit together (`ok`), the depthwise
        // parameters fit bands (`chain::fits`), every filter's and
        // bias's length, `x`, `sum` and the output against the shapes.
        // `res` is a fresh buffer.
        unsafe {
            match (self.isa, dw_isa) {
                #[cfg(target_arch = "x86_64")]
                (Isa::Avx2, Isa::Avx2) => {
                    chain::chain::<__m256, __m256, __m256>(e, &d, pj, x, sum, half, &mut res)
                }
                #[cfg(target_arch = "x86_64")]
                (Isa::Avx512, Isa::Avx2) => {
                    chain::chain::<__m512, __m256, __m256>(e, &d, pj, x, sum, half, &mut res)
                }
                #[cfg(target_arch = "x86_64")]
                (Isa::Avx512, Isa::Avx512) => {
                    chain::chain::<__m512, __m256, __m512>(e, &d, pj, x, sum, half, &mut res)
                }
                #[cfg(target_arch = "aarch64")]
                (Isa::Neon, Isa::Neon) => {
                    chain::chain::<Neon8, Neon8, Neon8>(e, &d, pj, x, sum, half, &mut res)
                }
                #[cfg(test)]
                (Isa::Portable, Isa::Portable) => chain::chain::<Lanes<16>, Lanes<8>, Lanes<16>>(
                    e, &d, pj, x, sum, half, &mut res,
                ),
                // (Outside the tests every pair on aarch64 is NEON's.)
                #[allow(unreachable_patterns)]
                _ => return Err(bad()),
            }
        }
        Ok(Buf::F32(res))
    }
}

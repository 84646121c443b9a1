//! Depthwise chains: an expanding 1x1 convolution, a depthwise one and a
//! projecting 1x1 one (MobileNetV2's inverted residual block, either 1x1
//! optional) run together, a band of rows at a time.
//!
//! Run node by node, the widest tensors of such a block (the expanded
//! planes, six times the block's channels) are written whole and read
//! back by the next node: 4.8 MB for MobileNetV2's second block, beyond
//! L2, so both passes go to L3 or memory. In a band the expanded rows
//! that one band of depthwise output rows reads, and those output rows,
//! stay in two small per-thread buffers; only the chain's input and
//! output cross memory. The expanded rows that the next band reads too
//! (the filter's height less the stride) are moved to the front of the
//! buffer, not computed again.
//!
//! Each stage is the kernel that runs it as a node (the direct kernel's
//! tiles for the 1x1 convolutions, the depthwise kernel's rows, each
//! band a small convolution of its own with the padding that falls in
//! it), and every output is computed in the same order, so a chain gives
//! the bits of its nodes run one by one. A float16 chain computes in
//! float32 as its blocked nodes do and rounds each stage's new rows to
//! float16 where the node would round its output, so it gives their bits
//! too.

use std::collections::HashMap;

use super::direct::{pointwise, Geometry};
use super::par::{for_units, Out, PAR_WORK};
use super::simd::Vf;
use super::{Chain, Conv, Panel, Sum, L};
use crate::graph::op::Op;
use crate::graph::ops::conv::Conv2dParams;
use crate::graph::Graph;

/// Depthwise output pixels per plane from which a chain runs: smaller
/// planes fit in L2 node by node.
const MIN_PIXELS: usize = 28 * 28;

/// Bytes of the two band buffers together: half of a 1 MB L2, the rest
/// left to the 1x1 convolutions' filters and the rows streaming in and
/// out. (MobileNetV2 in one process, chains against nodes, ten rounds:
/// 256 KB gained 1-4%, 512 KB 2-3% at one thread and 3% at two, 768 KB
/// about the same.)
const BAND_BYTES: usize = 512 << 10;

/// The most a thread's band buffers take (a band of one row).
const MAX_BAND_BYTES: usize = 4 << 20;

/// Whether `WEBNN_CPU_CHAIN=0` runs such blocks node by node (read at
/// each build, so one process can compare both ways).
fn disabled() -> bool {
    std::env::var("WEBNN_CPU_CHAIN").is_ok_and(|v| v == "0")
}

fn params(graph: &Graph, n: usize) -> Option<&Conv2dParams> {
    match &graph.nodes[n].op {
        Op::Conv2d(p) => Some(p),
        _ => None,
    }
}

/// Whether node `n` runs as a blocked 1x1 convolution at unit stride
/// without padding, reading its input blocked.
fn pointwise_node(graph: &Graph, convs: &HashMap<usize, Conv>, n: usize) -> bool {
    let blocked = matches!(
        convs.get(&n),
        Some(Conv::Direct {
            plain: false,
            nchw_in: false,
            ..
        })
    );
    blocked
        && params(graph, n).is_some_and(|p| {
            p.kernel_h == 1 && p.kernel_w == 1 && p.strides == [1, 1] && p.padding == [0; 4]
        })
}

/// The chains of a plan's convolutions, by first node. `producer` and
/// `readers` are each operand's producing node (or `usize::MAX`) and
/// number of readers (graph outputs counted), `reader` its last reader.
pub(super) fn find(
    graph: &Graph,
    convs: &HashMap<usize, Conv>,
    sums: &HashMap<usize, Sum>,
    (producer, readers, reader): (&[usize], &[usize], &[usize]),
) -> HashMap<usize, Chain> {
    let mut chains = HashMap::new();
    if disabled() {
        return chains;
    }
    // A node joins one chain at most: in MobileNet (v1)'s depthwise,
    // 1x1, depthwise, 1x1 ... the 1x1 between two depthwise convolutions
    // projects for the first (in node order) and does not expand for the
    // second.
    let mut taken = vec![false; graph.nodes.len()];
    let mut depthwise: Vec<usize> = convs
        .iter()
        .filter(|(_, c)| matches!(c, Conv::Depthwise { .. }))
        .map(|(&d, _)| d)
        .collect();
    depthwise.sort_unstable();
    for d in depthwise {
        let Some(p) = params(graph, d) else {
            continue;
        };
        if p.out_h * p.out_w < MIN_PIXELS || !fits(p) {
            continue;
        }
        // One row of output and the expanded rows it reads: beyond
        // MAX_BAND_BYTES (a plane of absurd width) node by node, under
        // the context's memory budget, rather than outside it.
        let expanded = (p.kernel_h - 1) * p.dilations[0] + 1;
        let row = 4 * p.in_channels * (expanded * p.in_w + p.out_w);
        if row > MAX_BAND_BYTES {
            continue;
        }
        let (x, y) = (graph.nodes[d].inputs[0], graph.nodes[d].outputs[0]);
        let e = producer[x];
        let expand = (e != usize::MAX
            && !taken[e]
            && readers[x] == 1
            && pointwise_node(graph, convs, e)
            && !sums.contains_key(&e))
        .then_some(e);
        let first = expand.unwrap_or(d);
        let pn = reader[y];
        let project = (readers[y] == 1
            && pn != usize::MAX
            && pointwise_node(graph, convs, pn)
            && graph.nodes[pn].inputs[0] == y
            // The residual exists when the chain runs.
            && sums.get(&pn).is_none_or(|s| producer[s.residual] < first))
        .then_some(pn);
        if expand.is_none() && project.is_none() {
            continue;
        }
        let out = match project {
            Some(pn) => sums.get(&pn).map_or(graph.nodes[pn].outputs[0], |s| s.out),
            None => y,
        };
        for m in expand.into_iter().chain([d]).chain(project) {
            taken[m] = true;
        }
        chains.insert(
            first,
            Chain {
                expand,
                depthwise: d,
                project,
                out,
            },
        );
    }
    chains
}

/// Whether depthwise convolution `p` can run in bands: every tap inside
/// the padded input, nonzero strides, and padding within the filter's
/// reach (so every band reads at least one input row).
pub(super) fn fits(p: &Conv2dParams) -> bool {
    let span = |k: usize, d: usize| (k - 1) * d;
    let [pt, pb, pl, pr] = p.padding;
    super::taps_fit(p)
        && !p.strides.contains(&0)
        && pt.max(pb) <= span(p.kernel_h, p.dilations[0])
        && pl.max(pr) <= span(p.kernel_w, p.dilations[1])
}

/// A 1x1 stage: its packed filter and panels, bias, bounds and channels.
pub(super) struct Pw<'a> {
    pub w: &'a [f32],
    pub panels: &'a [Panel],
    pub bias: Option<&'a [f32]>,
    pub bounds: (f32, f32),
    pub ic: usize,
    pub oc: usize,
}

/// The depthwise stage.
pub(super) struct Dw<'a> {
    pub w: &'a [f32],
    pub p: &'a Conv2dParams,
    pub bias: Option<&'a [f32]>,
    pub bounds: (f32, f32),
}

thread_local! {
    /// A task's expanded rows and depthwise output rows.
    static BANDS: std::cell::RefCell<(Vec<f32>, Vec<f32>)> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// `v` with at least `n` elements.
fn room(v: &mut Vec<f32>, n: usize) {
    if v.len() < n {
        v.resize(n, 0.0);
    }
}

/// Runs a chain on blocked `x` (the expansion's input, or the depthwise
/// convolution's) into blocked `res`, adding `sum` (blocked, the
/// output's shape) after the projection when given. The 1x1 stages run
/// on `V` and `N` as the direct kernel does, the depthwise one on `D`
/// and `N` as its node would.
///
/// # Safety
/// - The CPU has `V`'s, `N`'s and `D`'s features (`N` of 8 lanes).
/// - `d.p` is a depthwise convolution of `c` channels in whole blocks
///   that [`fits`], `d.w` holds `c * kh * kw` floats, `d.bias` (if any)
///   `c`.
/// - The expansion (if any) has `oc` = `c` and `ic` in whole blocks,
///   the projection (if any) `ic` = `c` and `oc` in whole blocks; each
///   one's `w` is `ic * oc` floats packed for its `panels`, its bias (if
///   any) `oc`.
/// - `x` holds `batch * ic * in_h * in_w` floats (`ic`: the expansion's,
///   or `c`), `sum` (if any) and `res` `batch * oc * out_h * out_w`
///   (`oc`: the projection's, or `c`).
///
/// `Plan::run_chain` checks all of these.
pub(super) unsafe fn chain<V: Vf, N: Vf, D: Vf>(
    e: Option<&Pw>,
    d: &Dw,
    pj: Option<&Pw>,
    x: &[f32],
    sum: Option<&[f32]>,
    half: bool,
    res: &mut [f32],
) {
    let p = d.p;
    let (n, c) = (p.batch, p.in_channels);
    let cb = c / L;
    let (h, w, oh, ow) = (p.in_h, p.in_w, p.out_h, p.out_w);
    let (s, pt) = (p.strides[0], p.padding[0]);
    let span = (p.kernel_h - 1) * p.dilations[0];
    let khw = p.kernel_h * p.kernel_w;
    // Input rows [a, b) that output rows [y0, y1) read (padding aside).
    let rows_in = |y0: usize, y1: usize| {
        let a = (y0 * s).saturating_sub(pt);
        let b = ((y1 - 1) * s + span + 1).saturating_sub(pt).min(h);
        (a, b)
    };
    // Rows per band: both buffers within BAND_BYTES.
    let per_row = |r: usize| {
        let expanded = if e.is_some() {
            (r - 1) * s + span + 1
        } else {
            0
        };
        let out = if pj.is_some() { r * ow } else { 0 };
        4 * c * (expanded * w + out)
    };
    let mut rows = 1;
    while rows < oh && per_row(rows + 1) <= BAND_BYTES {
        rows += 1;
    }
    let cap = (rows - 1) * s + span + 1;
    // Tasks: each image's rows in one part per thread.
    let work = n * oh * ow * c * (khw + e.map_or(0, |e| e.ic) + pj.map_or(0, |q| q.oc));
    let par = work >= PAR_WORK;
    let parts = match par {
        true => rayon::current_num_threads().div_ceil(n).clamp(1, oh),
        false => 1,
    };
    let per_part = oh.div_ceil(parts);
    let ocb = pj.map_or(cb, |q| q.oc / L);
    let o = Out(res.as_mut_ptr());
    let ss = sum.map(|r| r.as_ptr() as usize);
    for_units(n * parts, par, move |u| {
        let _ = &o;
        let (img, part) = (u / parts, u % parts);
        let (ya, yb) = (part * per_part, ((part + 1) * per_part).min(oh));
        BANDS.with_borrow_mut(|(ex, dw)| {
            room(ex, e.map_or(0, |_| cb * cap * w * L));
            room(dw, pj.map_or(0, |_| cb * rows * ow * L));
            // Expanded rows [h0, h1) are held at the buffer's start.
            let (mut h0, mut h1) = (0, 0);
            let mut y0 = ya;
            while y0 < yb {
                let y1 = (y0 + rows).min(yb);
                let (a, b) = rows_in(y0, y1);
                let xi = x.as_ptr();
                if let Some(e) = e {
                    // Rows this band shares with the last one move
                    // to the front; the rest are computed.
                    let kept = if a >= h0 && a < h1 { h1 - a } else { 0 };
                    if kept > 0 && a > h0 {
                        for k in 0..cb {
                            let at = k * cap * w * L;
                            ex.copy_within(at + (a - h0) * w * L..at + (h1 - h0) * w * L, at);
                        }
                    }
                    let g = Geometry {
                        px: L,
                        taps: &[0],
                        ibs: h * w * L,
                        icb: e.ic / L,
                        cl: L,
                        cs: 1,
                        obs: cap * w * L,
                        lo: e.bounds.0,
                        hi: e.bounds.1,
                    };
                    // SAFETY: the caller's features. `pointwise`'s
                    // contract: `g` is 1x1 at unit stride, `e.w` the
                    // filter packed for `e.panels` (`ic * oc` floats).
                    // It reads pixels `(a + kept) * w ..  b * w` of the
                    // `e.ic / 8` blocks of image `img` of `x` (`b <= h`;
                    // `x` holds `batch * e.ic * h * w`), and writes rows
                    // `kept .. b - a` of each of the `cb` blocks of `ex`,
                    // `cap` rows apart: `b - a <= cap` since a band has at
                    // most `rows` output rows, so `ex`'s `cb * cap * w *
                    // 8` floats hold them. `ex` is this thread's own
                    // buffer (`BANDS`), and the bias has `e.oc` floats.
                    unsafe {
                        pointwise::<V, N>(
                            e.w.as_ptr(),
                            e.panels,
                            &g,
                            xi.add(img * e.ic * h * w + (a + kept) * w * L),
                            e.bias.map_or(std::ptr::null(), |b| b.as_ptr()),
                            std::ptr::null(),
                            ex.as_mut_ptr().add(kept * w * L),
                            (b - a - kept) * w,
                        )
                    };
                    // Float16: the new rows rounded, as the expanding
                    // node's output is.
                    if half {
                        for k in 0..cb {
                            let at = k * cap * w * L;
                            crate::f16::round_in_place(
                                &mut ex[at + kept * w * L..at + (b - a) * w * L],
                            );
                        }
                    }
                    (h0, h1) = (a, b);
                }
                // Input rows [a, b) of depthwise plane `k`: in the buffer,
                // or in `x` where there is no expansion.
                let ex = &*ex;
                let plane = |k: usize| match e {
                    Some(_) => &ex[k * cap * w * L..(k * cap + b - a) * w * L],
                    None => {
                        let at = ((img * cb + k) * h + a) * w * L;
                        &x[at..at + (b - a) * w * L]
                    }
                };
                // This band as a convolution of its own: its input rows,
                // the padding above them that it reads.
                let pb = Conv2dParams {
                    batch: 1,
                    in_h: b - a,
                    out_h: y1 - y0,
                    padding: [a + pt - y0 * s, 0, p.padding[2], p.padding[3]],
                    ..p.clone()
                };
                for k in 0..cb {
                    let band = (y1 - y0) * ow * L;
                    let dst = match pj {
                        // SAFETY: rows `y0..y1` of plane `k` of image
                        // `img` of the output: `res` holds `batch * cb *
                        // oh * ow * 8` floats without a projection, and
                        // these rows lie in this unit's `ya..yb` of
                        // image `img`, which no other unit writes; `res`
                        // stays borrowed until `for_units` returns.
                        None => unsafe {
                            std::slice::from_raw_parts_mut(
                                o.0.add(((img * cb + k) * oh + y0) * ow * L),
                                band,
                            )
                        },
                        Some(_) => &mut dw[k * rows * ow * L..][..band],
                    };
                    let bias = d.bias.map(|b| &b[k * L..(k + 1) * L]);
                    let wk = &d.w[k * khw * L..(k + 1) * khw * L];
                    // SAFETY: the caller's features (`D`'s, which
                    // include `N`'s), all that `plane_rows` asks.
                    unsafe {
                        super::depthwise::plane_rows::<D, N>(
                            plane(k),
                            wk,
                            bias,
                            d.bounds,
                            &pb,
                            0..y1 - y0,
                            dst,
                            false,
                        )
                    };
                    // Float16: rounded as the depthwise node's output is
                    // (the chain's output, without a projection, is
                    // rounded again after the chain, which changes
                    // nothing).
                    if half {
                        crate::f16::round_in_place(dst);
                    }
                }
                if let Some(q) = pj {
                    let g = Geometry {
                        px: L,
                        taps: &[0],
                        ibs: rows * ow * L,
                        icb: cb,
                        cl: L,
                        cs: 1,
                        obs: oh * ow * L,
                        lo: q.bounds.0,
                        hi: q.bounds.1,
                    };
                    let at = (img * ocb * oh + y0) * ow * L;
                    // SAFETY: the caller's features. `pointwise`'s
                    // contract: `g` is 1x1 at unit stride, `q.w` the
                    // filter packed for `q.panels` (`ic * oc` floats). It
                    // reads the band's `(y1 - y0) * ow <= rows * ow`
                    // pixels of the `cb` blocks of `dw` (`rows * ow * 8`
                    // apart, `cb * rows * ow * 8` floats, which the
                    // depthwise rows above wrote), and writes those
                    // pixels, rows `y0..y1` of image `img`, of each of
                    // the `ocb` output blocks (`oh * ow * 8` apart) at
                    // `at`: inside `res` (`batch * ocb * oh * ow * 8`)
                    // and this unit's alone (units split the images and
                    // their rows; `res` stays borrowed until `for_units`
                    // returns). The residual, of the output's shape, is
                    // read at the same offsets; the bias has `q.oc`
                    // floats.
                    unsafe {
                        pointwise::<V, N>(
                            q.w.as_ptr(),
                            q.panels,
                            &g,
                            dw.as_ptr(),
                            q.bias.map_or(std::ptr::null(), |b| b.as_ptr()),
                            ss.map_or(std::ptr::null(), |r| (r as *const f32).add(at)),
                            o.0.add(at),
                            (y1 - y0) * ow,
                        )
                    };
                }
                y0 = y1;
            }
        });
    });
}

//! Products over quantized constant weights, kept quantized on the GPU.
//!
//! A graph multiplying by constant quantized weights writes them with
//! standard operators (see `cpu/fuse.rs`, which does the same for the CPU
//! backend): `dequantizeLinear` of a constant `int4`/`uint4`/`int8`/`uint8`
//! tensor with a constant scale and zero point (per tensor, per axis or
//! blockwise), perhaps one constant offset added after it (GGUF Q4_1's
//! minimum), reshapes between, and a `[1, 0]` transpose or `gemm`'s
//! `bTranspose`. Run node by node, every dispatch dequantizes every weight
//! into a float32 intermediate as large as the weights times four (eight
//! for 4-bit codes) before the product reads it.
//!
//! [`recognize`] finds each `matmul` (B of rank 2) and `gemm` whose B is
//! such an expression and resolves it into a [`QMatmul`]; the compiled
//! graph then uploads the codes' own bytes and one small table of
//! (scale, zero point, offset) per block of weights along K, and
//! [`build`] makes one step whose shader (`shaders/qgemv.wgsl`, 32
//! invocations to an output column, each over a share of K; or
//! `shaders/qmatmul.wgsl`, one invocation walking all of K) reads the
//! codes and dequantizes them in registers. The nodes that only computed
//! B ([`live_nodes`]) get no steps and no buffers.
//!
//! The weights' element (n, k) of the product's `[K, N]` operand is
//! element `n * K + k` of the codes (in their row-major order, which
//! reshapes keep) when the codes are laid out `[N, K]` ("rows": B reached
//! through a transpose or `bTranspose`), element `k * N + n` otherwise.
//! Every scale, zero point and offset must be constant over aligned
//! blocks of `block` elements along K (per row n), `block` dividing K:
//! that holds for per-tensor, per-output-channel and blockwise-along-K
//! forms, whatever reshapes sit between, and the analysis below proves
//! it from the shapes alone. What it cannot prove is left to the node by
//! node path, as is everything else this file does not recognise exactly:
//! a transposed A, more than one added offset, casts other than float16
//! to float32 constants, intermediates of B that anything else reads or
//! that are graph outputs, a product whose operands differ in type.
//!
//! A float16 product (A, B's chain and the output all float16, as
//! onnxruntime-web writes a float16 model's `MatMulNBits`) runs the same
//! way: the backend holds float16 values widened to float32, and the
//! shader rounds each weight to float16 where the graph's nodes would
//! (after the dequantization, and again after the offset is added), so
//! the weights it multiplies are the node-by-node path's exactly; the
//! sums run in float32 and the output is rounded after the step, as
//! every float16 node's is.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use super::{word, Gpu, Step};
use crate::backend::BytesId;
use crate::error::{Error, Result};
use crate::graph::ops::elementwise::BinaryKind;
use crate::graph::ops::quantize::QuantizeOp;
use crate::graph::ops::shape::TransposeParams;
use crate::graph::{Graph, Node, Op, OperandId, Source};
use crate::tensor::Buf;
use crate::types::DataType;

// Both start with the bindings, parameters and substitutions of
// qmatmul_common.wgsl, joined at compile time.
const QMATMUL: &str = concat!(
    include_str!("shaders/qmatmul_common.wgsl"),
    "\n",
    include_str!("shaders/qmatmul.wgsl")
);
const QGEMV: &str = concat!(
    include_str!("shaders/qmatmul_common.wgsl"),
    "\n",
    include_str!("shaders/qgemv.wgsl")
);
/// Output columns of a workgroup of `QGEMV`.
const GEMV_COLS: u64 = 8;

/// Output columns per workgroup (one invocation each) and rows of A per
/// workgroup: the shader's `TN` and `TM`.
const TN: u64 = 64;
const TM: u64 = 8;

/// Blocks along K shorter than this (unless they span K) are left to the
/// node-by-node path: the block table (three floats a block) would grow
/// toward the float32 weights it replaces.
const MIN_BLOCK: usize = 8;

/// How deep a chain of reshapes and casts is followed.
const MAX_DEPTH: usize = 16;

/// A scale, zero point or offset: the operand holding its values (a
/// constant, or reshapes and float16 to float32 casts of one) and how it
/// is broadcast over the elements it applies to (`over`, `block[d]`
/// elements of dimension `d` per element of the operand; `block[d]`
/// divides `over[d]`).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Quantity {
    pub id: OperandId,
    pub over: Vec<usize>,
    pub block: Vec<usize>,
}

/// `gemm`'s scalars and whether it adds C (input 2).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct GemmTerms {
    pub alpha: f32,
    pub beta: f32,
    pub has_c: bool,
}

/// A product whose B is quantized constant weights, resolved.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct QMatmul {
    /// The product node; its input 1 (B) is not read.
    pub node: usize,
    /// The constant codes and their type (int4, uint4, int8 or uint8).
    pub codes: OperandId,
    pub dt: DataType,
    pub scale: Quantity,
    pub zero: Quantity,
    pub offset: Option<Quantity>,
    /// Rows of A (its leading dimensions flattened), output columns, and
    /// the reduction length.
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Elements along K that share a scale, zero point and offset (a
    /// divisor of K).
    pub block: usize,
    /// Codes laid out `[N, K]` (else `[K, N]`).
    pub rows: bool,
    /// `None` for matmul.
    pub gemm: Option<GemmTerms>,
    /// Float16 operands (else float32).
    pub half: bool,
}

/// How many readers each operand has, graph outputs counting as many (so
/// that "read once" never holds for one).
fn readers(g: &Graph) -> Vec<usize> {
    let mut r = vec![0usize; g.operands.len()];
    for node in &g.nodes {
        for &i in &node.inputs {
            r[i] = r[i].saturating_add(1);
        }
    }
    for (_, o) in &g.outputs {
        r[*o] = usize::MAX;
    }
    r
}

/// The node computing operand `id` as its only output.
fn producer(g: &Graph, id: OperandId) -> Option<&Node> {
    match g.sources.get(id)? {
        Source::Node { node, .. } => g.nodes.get(*node).filter(|n| n.outputs[..] == [id]),
        _ => None,
    }
}

/// The constant that operand `id` is, through reshapes and (when `casts`)
/// float16 to float32 casts (exact): its bytes and type.
fn constant_root(
    g: &Graph,
    id: OperandId,
    casts: bool,
    depth: usize,
) -> Option<(&Arc<Vec<u8>>, DataType)> {
    if depth > MAX_DEPTH {
        return None;
    }
    match g.sources.get(id)? {
        Source::Constant(bytes) => Some((bytes, g.operands[id].data_type)),
        Source::Node { .. } => {
            let n = producer(g, id)?;
            let [x] = n.inputs[..] else { return None };
            match &n.op {
                Op::Reshape => constant_root(g, x, casts, depth + 1),
                Op::Cast(_)
                    if casts
                        && g.operands[id].data_type == DataType::Float32
                        && g.operands[x].data_type == DataType::Float16 =>
                {
                    constant_root(g, x, casts, depth + 1)
                }
                _ => None,
            }
        }
        Source::Input(_) => None,
    }
}

/// An operand of type `dt` whose values are a constant's (see
/// [`constant_root`]).
fn typed_constant(g: &Graph, id: OperandId, dt: DataType) -> bool {
    g.operands[id].data_type == dt && constant_root(g, id, true, 0).is_some()
}

/// The numpy broadcast of `shape` to `out` as blocks: `out[d]` elements
/// per element where `shape` (trailing-aligned) has 1, else 1.
fn broadcast_block(shape: &[usize], out: &[usize]) -> Option<Vec<usize>> {
    let off = out.len().checked_sub(shape.len())?;
    out.iter()
        .enumerate()
        .map(|(d, &t)| match d.checked_sub(off).map(|i| shape[i]) {
            None | Some(1) => Some(t),
            Some(s) if s == t => Some(1),
            _ => None,
        })
        .collect()
}

/// B's weights traced back to their constants.
struct Traced {
    codes: OperandId,
    scale: Quantity,
    zero: Quantity,
    offset: Option<Quantity>,
    /// The operands between the dequantization and B (both included),
    /// which only the chain may read.
    path: Vec<OperandId>,
}

/// Traces operand `id` (of float type `dt`, as every operand on the way
/// must be) back through reshapes and at most one addition of a constant
/// to a `dequantizeLinear` of constants.
fn trace(g: &Graph, id: OperandId, dt: DataType) -> Option<Traced> {
    let mut at = id;
    let mut path = Vec::new();
    let mut offset = None;
    for _ in 0..MAX_DEPTH {
        path.push(at);
        let out = &g.operands[at];
        if out.data_type != dt {
            return None;
        }
        let n = producer(g, at)?;
        match &n.op {
            Op::Reshape => at = *n.inputs.first()?,
            Op::Binary(BinaryKind::Add) => {
                let [x, y] = n.inputs[..] else { return None };
                let (on, c) = if typed_constant(g, y, dt) {
                    (x, y)
                } else if typed_constant(g, x, dt) {
                    (y, x)
                } else {
                    return None;
                };
                // One offset: a second would round twice, in an order
                // the table of one offset per block cannot keep.
                if offset.is_some() || on == c || g.operands[on].shape != out.shape {
                    return None;
                }
                offset = Some(Quantity {
                    id: c,
                    over: out.shape.clone(),
                    block: broadcast_block(&g.operands[c].shape, &out.shape)?,
                });
                at = on;
            }
            Op::Quantize(QuantizeOp::Dequantize { block }) => {
                let [q, s, z] = n.inputs[..] else { return None };
                let qd = &g.operands[q];
                let codes = matches!(
                    qd.data_type,
                    DataType::Int4 | DataType::Uint4 | DataType::Int8 | DataType::Uint8
                );
                let fits = block.len() == qd.rank()
                    && block
                        .iter()
                        .zip(&qd.shape)
                        .all(|(&b, &t)| b > 0 && t.is_multiple_of(b));
                let zero_root = constant_root(g, z, false, 0);
                if !codes
                    || !fits
                    || !matches!(g.sources[q], Source::Constant(_))
                    || !typed_constant(g, s, dt)
                    || zero_root.is_none_or(|(_, dt)| dt != qd.data_type)
                    || g.operands[z].shape != g.operands[s].shape
                {
                    return None;
                }
                let quantity = |id| Quantity {
                    id,
                    over: qd.shape.clone(),
                    block: block.clone(),
                };
                return Some(Traced {
                    codes: q,
                    scale: quantity(s),
                    zero: quantity(z),
                    offset,
                    path,
                });
            }
            _ => return None,
        }
    }
    None
}

/// Runs of a blockwise broadcast seen as a matrix `[R, C]` (C the trailing
/// `c` elements): `(rr, rc)` such that the operand's element is the same
/// over every aligned `rr x rc` block, or None when `c` does not fall on
/// a boundary of the dimensions, even after splitting one of them.
fn runs(over: &[usize], block: &[usize], c: usize) -> Option<(usize, usize)> {
    if block.len() != over.len() || c == 0 {
        return None;
    }
    // Dimensions (size, block), innermost first, on either side of C.
    let mut cols: Vec<(usize, usize)> = Vec::new();
    let mut rows: Vec<(usize, usize)> = Vec::new();
    let mut acc = 1usize;
    let mut d = over.len();
    while acc < c {
        d = d.checked_sub(1)?;
        let (t, b) = (over[d], block[d]);
        if acc.checked_mul(t)? <= c {
            cols.push((t, b));
            acc *= t;
        } else {
            // Split dimension d into (t / x, x) with x the part in C. Its
            // block splits evenly when one of b and x divides the other.
            if !c.is_multiple_of(acc) {
                return None;
            }
            let x = c / acc;
            if !t.is_multiple_of(x) {
                return None;
            }
            let (outer, inner) = if b.is_multiple_of(x) {
                (b / x, x)
            } else if b > 0 && x.is_multiple_of(b) {
                (1, b)
            } else {
                return None;
            };
            cols.push((x, inner));
            rows.push((t / x, outer));
            acc = c;
        }
    }
    if acc != c {
        return None;
    }
    rows.extend(
        over[..d]
            .iter()
            .copied()
            .zip(block[..d].iter().copied())
            .rev(),
    );
    // Consecutive elements read one element while whole dimensions are
    // covered by a block; the first dimension that is not ends the run at
    // its block.
    let run = |dims: &[(usize, usize)]| {
        let mut r = 1usize;
        for &(t, b) in dims {
            if b >= t {
                r = r.saturating_mul(t);
            } else {
                return r.saturating_mul(b);
            }
        }
        r
    };
    Some((run(&rows), run(&cols)))
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The product node `index` resolved, when its B is quantized constant
/// weights this file handles (see the module comment).
fn recognize_node(g: &Graph, index: usize, readers: &[usize]) -> Option<QMatmul> {
    let node = &g.nodes[index];
    let (&a, &b, &o) = (
        node.inputs.first()?,
        node.inputs.get(1)?,
        node.outputs.first()?,
    );
    let (da, db, dout) = (&g.operands[a], &g.operands[b], &g.operands[o]);
    let dt = da.data_type;
    let same = [db, dout].iter().all(|d| d.data_type == dt);
    let float = matches!(dt, DataType::Float32 | DataType::Float16);
    if !float || !same || db.rank() != 2 || node.outputs.len() != 1 {
        return None;
    }
    let (mut rows, gemm, (m, k, n)) = match &node.op {
        Op::Matmul if node.inputs.len() == 2 && da.rank() >= 2 => {
            let (k, n) = (db.shape[0], db.shape[1]);
            (false, None, (da.element_count() / k.max(1), k, n))
        }
        Op::Gemm(p) if !p.a_transpose && node.inputs.len() == 2 + usize::from(p.has_c) => {
            let terms = GemmTerms {
                alpha: p.alpha as f32,
                beta: p.beta as f32,
                has_c: p.has_c,
            };
            (p.b_transpose, Some(terms), (p.m, p.k, p.n))
        }
        _ => return None,
    };
    let sizes = m.checked_mul(n) == Some(dout.element_count());
    if m == 0 || n == 0 || k == 0 || da.shape.last() != Some(&k) || !sizes {
        return None;
    }
    let expect = |rows: bool| if rows { [n, k] } else { [k, n] };
    if db.shape[..] != expect(rows) {
        return None;
    }
    // B, or the [N, K] operand that B transposes.
    let mut weights = b;
    let mut path = vec![];
    if let Some(t) = producer(g, b) {
        if let Op::Transpose(TransposeParams { permutation }) = &t.op {
            if permutation[..] != [1, 0] {
                return None;
            }
            path.push(b);
            weights = *t.inputs.first()?;
            rows = !rows;
        }
    }
    let t = trace(g, weights, dt)?;
    path.extend(&t.path);
    // Every operand from the dequantization to B must be the chain's
    // alone: one reader, not a graph output.
    if path.iter().any(|&p| readers[p] != 1) {
        return None;
    }
    // The block along K that every quantity is constant over.
    let (c, along_rows) = if rows { (k, false) } else { (n, true) };
    let mut block = k;
    for q in [Some(&t.scale), Some(&t.zero), t.offset.as_ref()]
        .into_iter()
        .flatten()
    {
        let (rr, rc) = runs(&q.over, &q.block, c)?;
        let along_k = if along_rows { rr } else { rc };
        // A run longer than K (per tensor, or blocks of whole rows) is
        // constant along all of it.
        block = gcd(block, along_k.min(k));
    }
    if block == 0 || !k.is_multiple_of(block) || (block < MIN_BLOCK && block != k) {
        return None;
    }
    Some(QMatmul {
        node: index,
        codes: t.codes,
        dt: g.operands[t.codes].data_type,
        scale: t.scale,
        zero: t.zero,
        offset: t.offset,
        m,
        n,
        k,
        block,
        rows,
        gemm,
        half: dt == DataType::Float16,
    })
}

/// Every product of `g` over quantized constant weights, by node index.
pub(super) fn recognize(g: &Graph) -> HashMap<usize, QMatmul> {
    let readers = readers(g);
    (0..g.nodes.len())
        .filter_map(|i| recognize_node(g, i, &readers))
        .map(|q| (q.node, q))
        .collect()
}

/// Which nodes still have to run once the `fused` products no longer
/// read their B: those whose outputs a graph output needs through some
/// other path.
pub(super) fn live_nodes(g: &Graph, fused: &HashMap<usize, QMatmul>) -> Vec<bool> {
    let mut needed = vec![false; g.operands.len()];
    for (_, o) in &g.outputs {
        needed[*o] = true;
    }
    let mut live = vec![false; g.nodes.len()];
    // Nodes are in topological order: a node is live when a live node
    // (or an output) reads one of its outputs.
    for (i, node) in g.nodes.iter().enumerate().rev() {
        if node.outputs.iter().any(|&o| needed[o]) {
            live[i] = true;
            let skip_b = fused.contains_key(&i);
            for (k, &x) in node.inputs.iter().enumerate() {
                if !(skip_b && k == 1) {
                    needed[x] = true;
                }
            }
        }
    }
    live
}

/// Row-major element of a blockwise broadcast operand that element `i`
/// of `over` reads.
fn source_index(over: &[usize], block: &[usize], mut i: usize) -> usize {
    let (mut at, mut stride) = (0usize, 1usize);
    for d in (0..over.len()).rev() {
        let (t, b) = (over[d].max(1), block.get(d).map_or(1, |&b| b.max(1)));
        at += (i % t) / b * stride;
        stride *= t / b;
        i /= t;
    }
    at
}

/// The values of a quantity's operand, as f32 (exact for the types the
/// recogniser lets through: float32, float16 and 4- and 8-bit integers).
fn values(g: &Graph, id: OperandId) -> Result<Buf> {
    let (bytes, dt) = constant_root(g, id, true, 0)
        .ok_or_else(|| Error::operation("a quantized product's parameter is not a constant"))?;
    Buf::from_bytes(dt, bytes.as_slice(), g.operands[id].element_count())
}

/// The block table: per output column n and block kb along K, the scale,
/// zero point and offset as three f32 (row-major over [N, K / block]).
fn table(g: &Graph, q: &QMatmul) -> Result<Vec<u8>> {
    let nkb = q.k / q.block;
    let floats =
        q.n.checked_mul(nkb)
            .and_then(|b| b.checked_mul(3))
            .ok_or_else(|| Error::operation("too many quantized blocks"))?;
    let mut out = Vec::new();
    out.try_reserve_exact(floats.saturating_mul(4))
        .map_err(|_| {
            Error::operation(format!(
                "cannot allocate {} bytes for quantized weights' scales",
                floats.saturating_mul(4)
            ))
        })?;
    let s = values(g, q.scale.id)?;
    let z = values(g, q.zero.id)?;
    let m = q.offset.as_ref().map(|o| values(g, o.id)).transpose()?;
    let get = |b: &Buf, quantity: &Quantity, i: usize| -> Result<f32> {
        let at = source_index(&quantity.over, &quantity.block, i);
        if at < b.len() {
            Ok(b.get_f64(at) as f32)
        } else {
            Err(Error::operation(
                "a quantized product's parameter does not match its weights",
            ))
        }
    };
    for col in 0..q.n {
        for kb in 0..nkb {
            let k0 = kb * q.block;
            let i = if q.rows {
                col * q.k + k0
            } else {
                k0 * q.n + col
            };
            let offset = match (&m, &q.offset) {
                (Some(m), Some(o)) => get(m, o, i)?,
                _ => 0.0,
            };
            for v in [get(&s, &q.scale, i)?, get(&z, &q.zero, i)?, offset] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }
    Ok(out)
}

/// The WGSL expression of code `e` (a u32 element index) in `q`, the
/// packed codes (4-bit ones two a byte, the first in the low half).
fn code_expr(dt: DataType) -> Result<&'static str> {
    Ok(match dt {
        DataType::Int4 => "bitcast<i32>(q[e / 8u] << (28u - 4u * (e % 8u))) >> 28u",
        DataType::Uint4 => "(q[e / 8u] >> (4u * (e % 8u))) & 0xfu",
        DataType::Int8 => "bitcast<i32>(q[e / 4u] << (24u - 8u * (e % 4u))) >> 24u",
        DataType::Uint8 => "(q[e / 4u] >> (8u * (e % 4u))) & 0xffu",
        _ => {
            return Err(Error::operation(format!(
                "quantized products take 4- and 8-bit codes, not {}",
                dt.name()
            )))
        }
    })
}

/// The WGSL expression of the weight the product multiplies, from
/// `code(e)` and its block's `scale`, `zero` and `minimum`: computed as
/// `dequantizeLinear` and the add after it compute it (the difference is
/// exact, then one product, then the offset), each result rounded to
/// float16 where the graph's is (`half`). A float16 product without an
/// offset adds none (the float32 one adds its 0), so that a weight of
/// -0 stays -0 as the node-by-node path has it.
fn weight_expr(half: bool, offset: bool) -> &'static str {
    match (half, offset) {
        (false, _) => "(code(e) - zero) * scale + minimum",
        (true, false) => "half_value(half_bits((code(e) - zero) * scale))",
        (true, true) => {
            "half_value(half_bits(half_value(half_bits((code(e) - zero) * scale)) + minimum))"
        }
    }
}

/// A product's codes and block table on the device, shared by the
/// graphs of one context whose products read the same constants (a
/// prefill and a decode graph over a model's weight tensors upload them
/// once). Each graph that uses them holds them; the context's
/// [`Uploads`] only finds them.
pub(super) struct Uploaded {
    codes: wgpu::Buffer,
    blocks: wgpu::Buffer,
}

/// The uploads of a context's graphs, found by what they were made from.
#[derive(Default)]
pub(super) struct Uploads {
    entries: Vec<(UploadKey, Weak<Uploaded>)>,
}

impl Uploads {
    /// Forgets what no graph holds any more.
    pub(super) fn forget_unused(&mut self) {
        self.entries.retain(|(_, w)| w.strong_count() > 0);
    }
}

/// A constant operand's values as a key: the bytes of the constant they
/// come from (through reshapes and exact float16 to float32 casts, by
/// identity: [`BytesId`]), its type and the operand's element count.
#[derive(PartialEq)]
struct Root {
    bytes: BytesId,
    dt: DataType,
    count: usize,
}

fn root(g: &Graph, id: OperandId) -> Option<Root> {
    let (bytes, dt) = constant_root(g, id, true, 0)?;
    Some(Root {
        bytes: BytesId::of(bytes),
        dt,
        count: g.operands[id].element_count(),
    })
}

/// What a product's uploads are made of: equal keys, equal buffers.
#[derive(PartialEq)]
struct UploadKey {
    codes: Root,
    dt: DataType,
    n: usize,
    k: usize,
    block: usize,
    rows: bool,
    scale: (Root, Vec<usize>, Vec<usize>),
    zero: (Root, Vec<usize>, Vec<usize>),
    offset: Option<(Root, Vec<usize>, Vec<usize>)>,
}

fn upload_key(g: &Graph, q: &QMatmul) -> Option<UploadKey> {
    let quantity = |x: &Quantity| Some((root(g, x.id)?, x.over.clone(), x.block.clone()));
    let Source::Constant(codes) = &g.sources[q.codes] else {
        return None;
    };
    Some(UploadKey {
        codes: Root {
            bytes: BytesId::of(codes),
            dt: q.dt,
            count: g.operands[q.codes].element_count(),
        },
        dt: q.dt,
        n: q.n,
        k: q.k,
        block: q.block,
        rows: q.rows,
        scale: quantity(&q.scale)?,
        zero: quantity(&q.zero)?,
        offset: match &q.offset {
            Some(o) => Some(quantity(o)?),
            None => None,
        },
    })
}

/// The uploads of product `q`: found in `uploads`, or made (the codes'
/// bytes as they are, and the block table) and recorded there.
fn uploaded(gpu: &Gpu, g: &Graph, q: &QMatmul, uploads: &mut Uploads) -> Result<Arc<Uploaded>> {
    let key = upload_key(g, q);
    if let Some(found) = key.as_ref().and_then(|key| {
        uploads
            .entries
            .iter()
            .filter(|(k, _)| k == key)
            .find_map(|(_, w)| w.upgrade())
    }) {
        return Ok(found);
    }
    let Source::Constant(bytes) = &g.sources[q.codes] else {
        return Err(Error::operation("quantized weights are not a constant"));
    };
    let made = Arc::new(Uploaded {
        codes: gpu.upload(bytes, "quantized weights")?,
        blocks: gpu.upload(&table(g, q)?, "quantized weights' scales")?,
    });
    if let Some(key) = key {
        uploads.entries.push((key, Arc::downgrade(&made)));
    }
    Ok(made)
}

/// The step of product `q`: `a` ([M, K] float32), `c` (gemm's C, when it
/// has one, broadcast to [M, N]), `out` ([M, N] float32). Its uploads
/// ([`uploaded`]) are returned for the graph to hold. `gemv`: the
/// product takes `shaders/qgemv.wgsl`, whose lanes split K, where its
/// grid fits (the tests turn it off to compare the weights bit for bit
/// through `shaders/qmatmul.wgsl`, which sums in order).
#[allow(clippy::too_many_arguments)]
pub(super) fn build(
    gpu: &mut Gpu,
    uploads: &mut Uploads,
    g: &Graph,
    q: &QMatmul,
    a: &wgpu::Buffer,
    c: Option<&wgpu::Buffer>,
    out: &wgpu::Buffer,
    gemv: bool,
) -> Result<(Step, Arc<Uploaded>)> {
    let (m, n, k) = (q.m as u64, q.n as u64, q.k as u64);
    if q.block == 0 || !q.k.is_multiple_of(q.block) {
        return Err(Error::operation(
            "a quantized product's blocks do not divide its weights",
        ));
    }
    // Every index the shader forms stays below one of these.
    word(n * k)?;
    word(m * k)?;
    word(m * n)?;
    let nkb = k / q.block as u64;
    word(n * nkb * 3)?;
    let up = uploaded(gpu, g, q, uploads)?;
    let (store, extra, cstrides) = match (q.gemm, c) {
        (None, _) => ("acc[i]".to_string(), "", (0, 0)),
        (Some(t), None) if !t.has_c => ("bitcast<f32>(p[6]) * acc[i]".to_string(), "", (0, 0)),
        (Some(t), Some(_)) if t.has_c => {
            // C broadcasts to [M, N] (validated when the graph was built;
            // checked again here, since the strides trust it).
            let cshape = g
                .nodes
                .get(q.node)
                .and_then(|node| node.inputs.get(2))
                .map(|&c| g.operands[c].shape.clone())
                .unwrap_or_default();
            let out = [q.m, q.n];
            let fits = cshape.len() <= 2
                && cshape
                    .iter()
                    .rev()
                    .zip(out.iter().rev())
                    .all(|(&c, &o)| c == 1 || c == o);
            if !fits || g.nodes.get(q.node).is_none_or(|node| node.inputs.len() < 3) {
                return Err(Error::operation("gemm's C does not match its output"));
            }
            let s = super::broadcast_strides(&cshape, &out);
            (
                "bitcast<f32>(p[6]) * acc[i] + bitcast<f32>(p[7]) * cm[r * p[8] + col * p[9]]"
                    .to_string(),
                "@group(0) @binding(5) var<storage, read> cm: array<f32>;\n",
                (word(s[0])?, word(s[1])?),
            )
        }
        _ => return Err(Error::operation("gemm's C does not match its parameters")),
    };
    let (alpha, beta) = q.gemm.map_or((1.0, 0.0), |t| (t.alpha, t.beta));
    let p = [
        word(m)?,
        word(n)?,
        word(k)?,
        word(q.block as u64)?,
        word(nkb)?,
        u32::from(q.rows),
        alpha.to_bits(),
        beta.to_bits(),
        cstrides.0,
        cstrides.1,
    ];
    let params = gpu.params(&p)?;
    let most = u64::from(gpu.limits.max_compute_workgroups_per_dimension);
    let gemv = gemv && n.div_ceil(GEMV_COLS) <= most && m.div_ceil(TM) <= most;
    let source = if gemv { QGEMV } else { QMATMUL }
        .replace("{{CODE}}", code_expr(q.dt)?)
        .replace("{{WEIGHT}}", weight_expr(q.half, q.offset.is_some()))
        .replace("{{STORE}}", &store)
        .replace(
            "{{EXTRA}}",
            &format!("{extra}{}", if q.half { super::convert::HALF } else { "" }),
        );
    let groups = if gemv {
        [word(n.div_ceil(GEMV_COLS))?, word(m.div_ceil(TM))?, 1]
    } else {
        [word(n.div_ceil(TN))?, word(m.div_ceil(TM))?, 1]
    };
    let mut buffers = vec![&params, a, &up.codes, &up.blocks, out];
    buffers.extend(c);
    let step = gpu.step(source, "main", &buffers, groups)?;
    Ok((step, up))
}

#[cfg(test)]
mod tests;

//! Quantized weights kept quantized: a compile-time rewrite.
//!
//! A graph that multiplies by a constant quantized weight matrix writes it
//! with standard operators: `dequantizeLinear` of a constant
//! `int4`/`uint4`/`int8`/`uint8` tensor (scale and zero point per tensor,
//! per axis or per block), perhaps an offset per block added after it
//! (GGUF's Q4_1 minimum), reshapes between, and a transpose or `gemm`'s
//! `bTranspose` to put the reduction axis where the product wants it. Run
//! as written, every dispatch dequantizes every weight into float32.
//!
//! [`quantized_products`] finds each `matmul` (B of rank 2) and `gemm`
//! whose B is such an expression of constants, packs the weights once
//! into [`QMatrix`] blocks (`qgemm`; `uint4` and `int8` codes are read
//! from the constant's own bytes, so the weights are held once), and
//! takes B off the node's inputs;
//! the nodes that only computed B are then dead and dropped, so their
//! constants are never widened either. The node runs as `qgemm::product`.
//!
//! What qualifies, element by element in the row-major order of the
//! weights as the product reads them (`[N, K]`, K the reduction axis):
//! the scale, the zero point and each added offset must be constant over
//! aligned runs of `QK` (32) elements, which holds for any blockwise
//! scale whose block along K is a multiple of 32 and for per-tensor and
//! per-row ones when K is. Anything else is left as it is.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use super::qgemm::{BlockSums, QMatrix, QK};
use super::sgemm::PackedB;
use crate::backend::BytesId;
use crate::error::{Error, Result};
use crate::graph::ops::elementwise::BinaryKind;
use crate::graph::ops::gather::GatherOp;
use crate::graph::ops::quantize::QuantizeOp;
use crate::graph::ops::reduce::{ReduceKind, ReduceOp};
use crate::graph::ops::shape::TransposeParams;
use crate::graph::{Graph, Op, OperandId, Source};
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

/// Packed weights shared between the graphs of one context (a prefill
/// and a decode graph over the same constant tensors pack them once).
///
/// An entry is found by what it was made from ([`ConstRef`]s and the
/// maps that spread them), not by comparing values: a language model's
/// graphs hold millions of blocks, and converting and comparing their
/// scales took most of the time of each graph's `build()`.
#[derive(Default)]
pub struct WeightCache {
    entries: Vec<(QKey, Weak<QMatrix>)>,
    /// Block-sum products ([`block_sum_products`]): the constant matrix
    /// they were made from, its shape and the rounding.
    sums: Vec<(SumsKey, Weak<BlockSums>)>,
}

/// What a packed matrix was made from: its codes and shape, and each
/// constant of its scales, zero points and offsets with the way it is
/// spread over the codes. Equal keys mean equal packed matrices.
#[derive(PartialEq)]
struct QKey {
    codes: ConstRef,
    n: usize,
    k: usize,
    scale: (ConstRef, BlockMap),
    zero: (ConstRef, BlockMap),
    offsets: Vec<(ConstRef, BlockMap)>,
}

/// What block sums were made from: the `[n, nb]` constant matrix and
/// whether the sums are rounded to float16.
#[derive(PartialEq)]
struct SumsKey {
    m: ConstRef,
    n: usize,
    nb: usize,
    round16: bool,
}

/// A constant operand as the bytes it is computed from: the root
/// constant's bytes (by identity, see [`BytesId`]), the data types that
/// the casts between take it through (root first), and its shape.
/// Reshapes keep the order of the elements and casts work element by
/// element, so equal `ConstRef`s are equal values.
#[derive(PartialEq)]
struct ConstRef {
    root: BytesId,
    types: Vec<DataType>,
    shape: Vec<usize>,
}

/// Operand `id` as a [`ConstRef`], when [`constant`] can compute it: a
/// constant, or a cast or reshape of one (each node's result at most
/// [`MAX_FOLDED`] elements).
fn const_ref(g: &Graph, id: OperandId) -> Option<ConstRef> {
    let mut types = Vec::new();
    let mut at = id;
    loop {
        let d = &g.operands[at];
        types.push(d.data_type);
        match &g.sources[at] {
            Source::Constant(bytes) => {
                types.reverse();
                return Some(ConstRef {
                    root: BytesId::of(bytes),
                    types,
                    shape: g.operands[id].shape.clone(),
                });
            }
            Source::Node { node, .. } => {
                let n = &g.nodes[*node];
                if !folds(d, n) {
                    return None;
                }
                at = *n.inputs.first()?;
            }
            Source::Input(_) => return None,
        }
    }
}

impl WeightCache {
    /// Forgets what no graph holds any more.
    pub fn forget_unused(&mut self) {
        self.entries.retain(|(_, w)| w.strong_count() > 0);
        self.sums.retain(|(_, w)| w.strong_count() > 0);
    }

    fn find(&self, key: &QKey) -> Option<Arc<QMatrix>> {
        self.entries
            .iter()
            .filter(|(k, _)| k == key)
            .find_map(|(_, w)| w.upgrade())
    }

    fn find_sums(&self, key: &SumsKey) -> Option<Arc<BlockSums>> {
        self.sums
            .iter()
            .filter(|(k, _)| k == key)
            .find_map(|(_, w)| w.upgrade())
    }
}

/// Constants converted to element buffers, and casts of constants
/// computed at compile, shared between the graphs of one context: a
/// prefill and a decode graph built over the same constant tensors hold
/// one copy. Keyed by the bytes they were made from ([`BytesId`]).
#[derive(Default)]
pub struct ConstantCache {
    converted: HashMap<(BytesId, DataType, usize), Weak<Buf>>,
    casts: HashMap<(BytesId, DataType), Weak<Vec<u8>>>,
}

impl ConstantCache {
    /// Forgets what no graph holds any more.
    pub fn forget_unused(&mut self) {
        self.converted.retain(|_, w| w.strong_count() > 0);
        self.casts.retain(|_, w| w.strong_count() > 0);
    }

    /// `bytes` (a constant of `d`) as an element buffer.
    pub fn buf(&mut self, bytes: &Arc<Vec<u8>>, d: &OperandDescriptor) -> Result<Arc<Buf>> {
        let key = (BytesId::of(bytes), d.data_type, d.element_count());
        if let Some(b) = self.converted.get(&key).and_then(Weak::upgrade) {
            return Ok(b);
        }
        let b = Arc::new(Buf::from_bytes(d.data_type, bytes, d.element_count())?);
        self.converted.insert(key, Arc::downgrade(&b));
        Ok(b)
    }
}

/// Constant B operands packed for the float32 GEMM, shared between the
/// graphs of one context, keyed by the converted buffer's address (alive
/// while any graph holding the packed copy is, as above) and the way it
/// is packed.
#[derive(Default)]
pub struct PackedCache {
    entries: HashMap<(usize, usize, usize, bool), Weak<PackedB>>,
}

impl PackedCache {
    /// Forgets what no graph holds any more.
    pub fn forget_unused(&mut self) {
        self.entries.retain(|_, w| w.strong_count() > 0);
    }

    /// The packed form of `b` ([k, n], or [n, k] when `transposed`): the
    /// one packed before, or `pack`'s.
    pub fn get_or_pack(
        &mut self,
        b: &Arc<Buf>,
        k: usize,
        n: usize,
        transposed: bool,
        pack: impl FnOnce() -> Result<PackedB>,
    ) -> Result<Arc<PackedB>> {
        let key = (Arc::as_ptr(b) as usize, k, n, transposed);
        if let Some(p) = self.entries.get(&key).and_then(Weak::upgrade) {
            return Ok(p);
        }
        let p = Arc::new(pack()?);
        self.entries.insert(key, Arc::downgrade(&p));
        Ok(p)
    }
}

/// Constants whose value a scale or offset may be computed from at
/// compile time (casts and reshapes of them), at most this many elements.
const MAX_FOLDED: usize = 1 << 24;

/// Whether node `n`, whose output is `d`, is one that [`constant`]
/// computes from its input: a reshape or a cast, of at most
/// [`MAX_FOLDED`] elements.
fn folds(d: &OperandDescriptor, n: &crate::graph::Node) -> bool {
    d.element_count() <= MAX_FOLDED
        && n.outputs.len() == 1
        && matches!(n.op, Op::Reshape | Op::Cast(_))
}

/// The value of operand `id` when it is a constant, or a cast or reshape
/// of one (small enough to compute here).
fn constant(g: &Graph, id: OperandId) -> Option<Buf> {
    let d = &g.operands[id];
    match &g.sources[id] {
        Source::Constant(bytes) => Buf::from_bytes(d.data_type, bytes, d.element_count()).ok(),
        Source::Node { node, .. } => {
            let n = &g.nodes[*node];
            // Asked first, so that no other node's input (an embedding
            // table behind a gather, say) is converted to find that out.
            if !folds(d, n) {
                return None;
            }
            let x = constant(g, *n.inputs.first()?)?;
            match &n.op {
                Op::Reshape => Some(x),
                Op::Cast(_) => {
                    let ins = [&x];
                    let descs = [&g.operands[n.inputs[0]]];
                    super::run_op(&n.op, &ins, &descs, std::slice::from_ref(d), None)
                        .ok()?
                        .pop()
                }
                _ => None,
            }
        }
        Source::Input(_) => None,
    }
}

/// Which element of a (small) operand each element of a larger one
/// reads, in row-major order: blockwise broadcasting, `block[i]` elements
/// of the larger along dimension `i` per element of the smaller.
#[derive(Clone, PartialEq)]
struct BlockMap {
    dst: Vec<usize>,
    block: Vec<usize>,
    /// Row-major strides of the smaller operand, aligned to `dst`.
    strides: Vec<usize>,
}

impl BlockMap {
    /// `src` (trailing-aligned, missing leading dimensions count as 1)
    /// spread over `dst` in blocks of `block` (`None`: each dimension of
    /// `src` is 1 or equals `dst`'s, as for ordinary broadcasting).
    fn new(dst: &[usize], src: &[usize], block: Option<&[usize]>) -> Option<BlockMap> {
        if src.len() > dst.len() {
            return None;
        }
        let off = dst.len() - src.len();
        let aligned: Vec<usize> = (0..dst.len())
            .map(|i| if i < off { 1 } else { src[i - off] })
            .collect();
        let block: Vec<usize> = match block {
            Some(b) if b.len() == dst.len() => b.to_vec(),
            Some(_) => return None,
            None => dst
                .iter()
                .zip(&aligned)
                .map(|(&t, &s)| match s {
                    1 => Some(t.max(1)),
                    _ if s == t => Some(1),
                    _ => None,
                })
                .collect::<Option<_>>()?,
        };
        if dst
            .iter()
            .zip(&block)
            .zip(&aligned)
            .any(|((&t, &b), &s)| b == 0 || t.div_ceil(b) != s)
        {
            return None;
        }
        let mut strides = vec![0; dst.len()];
        let mut acc = 1;
        for i in (0..dst.len()).rev() {
            strides[i] = acc;
            acc *= aligned[i];
        }
        Some(BlockMap {
            dst: dst.to_vec(),
            block,
            strides,
        })
    }

    /// The length of the aligned runs of consecutive elements that read
    /// one element.
    fn run(&self) -> usize {
        let mut run = 1usize;
        for (&t, &b) in self.dst.iter().zip(&self.block).rev() {
            if b >= t {
                run = run.saturating_mul(t);
            } else {
                return run.saturating_mul(b);
            }
        }
        run
    }

    /// The element of the smaller operand that element `i` reads.
    fn index(&self, mut i: usize) -> usize {
        let mut at = 0;
        for d in (0..self.dst.len()).rev() {
            let c = i % self.dst[d];
            i /= self.dst[d];
            at += c / self.block[d] * self.strides[d];
        }
        at
    }
}

/// A weight expression traced to its constants: element `i` (row-major)
/// is `(q[i] - zero[zero_map(i)]) * scale[scale_map(i)]` plus each
/// offset's element. The scale, the zero point and the offsets are
/// operands that [`constant`] computes (of the product's float type but
/// for the zero point), converted only when the weights are not found
/// packed.
struct Traced {
    q: OperandId,
    scale: (OperandId, BlockMap),
    zero: (OperandId, BlockMap),
    offsets: Vec<(OperandId, BlockMap)>,
}

/// Traces operand `id` (of float type `dt`, as every operand on the way
/// must be) back through reshapes and constant additions to a
/// `dequantizeLinear` of a constant.
fn trace(g: &Graph, id: OperandId, dt: DataType, depth: usize) -> Option<Traced> {
    let Source::Node { node, .. } = &g.sources[id] else {
        return None;
    };
    let n = &g.nodes[*node];
    let out = &g.operands[id];
    if out.data_type != dt || depth > 16 {
        return None;
    }
    match &n.op {
        Op::Reshape => trace(g, n.inputs[0], dt, depth + 1),
        Op::Binary(BinaryKind::Add) => {
            let [x, y] = n.inputs[..] else { return None };
            // The constant side, of the chain's type.
            let fits = |c: OperandId| g.operands[c].data_type == dt && const_ref(g, c).is_some();
            let (path, other_id) = match (fits(y), fits(x)) {
                (true, _) => (x, y),
                (false, true) => (y, x),
                (false, false) => return None,
            };
            if g.operands[path].shape != out.shape {
                return None;
            }
            let map = BlockMap::new(&out.shape, &g.operands[other_id].shape, None)?;
            let mut t = trace(g, path, dt, depth + 1)?;
            t.offsets.push((other_id, map));
            Some(t)
        }
        Op::Quantize(QuantizeOp::Dequantize { block }) => {
            let [q, s, z] = n.inputs[..] else { return None };
            let qd = &g.operands[q];
            let quantized = matches!(
                qd.data_type,
                DataType::Int4 | DataType::Uint4 | DataType::Int8 | DataType::Uint8
            );
            if !quantized || !matches!(g.sources[q], Source::Constant(_)) {
                return None;
            }
            if g.operands[s].data_type != dt
                || const_ref(g, s).is_none()
                || const_ref(g, z).is_none()
            {
                return None;
            }
            let smap = BlockMap::new(&qd.shape, &g.operands[s].shape, Some(block))?;
            let zmap = BlockMap::new(&qd.shape, &g.operands[z].shape, Some(block))?;
            Some(Traced {
                q,
                scale: (s, smap),
                zero: (z, zmap),
                offsets: Vec::new(),
            })
        }
        _ => None,
    }
}

/// The weights of B of node `n` as `[N, K]` rows, traced: B itself when
/// the product reads it transposed (`gemm`'s `bTranspose`), else the
/// operand that a `[1, 0]` transpose made B from.
///
/// A float16 product (A, the output and B's chain all float16, as a
/// float16 model's `MatMulNBits` is written) qualifies too: the product
/// widens A, multiplies the weights as float32 computes them and rounds
/// its output to float16. The graph as written rounds each weight to
/// float16 after the dequantization (and after an offset's add), so the
/// two differ by at most those roundings of the weights, a part in 2^11
/// of each product term: well inside the float16 product's own error.
fn weights_of(g: &Graph, n: usize) -> Option<(Traced, usize, usize)> {
    let node = &g.nodes[n];
    let (&a, &b) = (node.inputs.first()?, node.inputs.get(1)?);
    let (db, out) = (&g.operands[b], &g.operands[*node.outputs.first()?]);
    let dt = out.data_type;
    if !matches!(dt, DataType::Float32 | DataType::Float16)
        || g.operands[a].data_type != dt
        || db.rank() != 2
    {
        return None;
    }
    let transposed = match &node.op {
        Op::Gemm(p) if !p.a_transpose => p.b_transpose,
        Op::Matmul if node.inputs.len() == 2 => false,
        _ => return None,
    };
    let rows = if transposed {
        b
    } else {
        let Source::Node { node: t, .. } = &g.sources[b] else {
            return None;
        };
        let tn = &g.nodes[*t];
        match &tn.op {
            Op::Transpose(TransposeParams { permutation }) if permutation[..] == [1, 0] => {
                tn.inputs[0]
            }
            _ => return None,
        }
    };
    let (nn, k) = (g.operands[rows].shape[0], g.operands[rows].shape[1]);
    Some((trace(g, rows, dt, 0)?, nn, k))
}

/// Packs traced weights (`n` rows of `k`), or finds them packed.
fn pack(
    g: &Graph,
    t: &Traced,
    n: usize,
    k: usize,
    cache: &mut WeightCache,
) -> Result<Option<Arc<QMatrix>>> {
    let runs = [&t.scale.1, &t.zero.1]
        .into_iter()
        .chain(t.offsets.iter().map(|(_, m)| m))
        .all(|m| m.run() % QK == 0);
    if !runs || !k.is_multiple_of(QK) || k == 0 || n == 0 {
        return Ok(None);
    }
    let qd = &g.operands[t.q];
    let Source::Constant(bytes) = &g.sources[t.q] else {
        return Ok(None);
    };
    // The stored code and the zero point it is relative to: 4-bit codes
    // are kept as 0..=15 and 8-bit ones as -128..=127, so int4 moves up
    // by 8 and uint8 down by 128 (the zero point with them).
    let (wide, shift) = match qd.data_type {
        DataType::Uint4 => (false, 0),
        DataType::Int4 => (false, 8),
        DataType::Int8 => (true, 0),
        DataType::Uint8 => (true, -128),
        _ => return Ok(None),
    };
    let keyed = |(id, map): &(OperandId, BlockMap)| Some((const_ref(g, *id)?, map.clone()));
    let key = (|| {
        Some(QKey {
            codes: const_ref(g, t.q)?,
            n,
            k,
            scale: keyed(&t.scale)?,
            zero: keyed(&t.zero)?,
            offsets: t.offsets.iter().map(keyed).collect::<Option<_>>()?,
        })
    })();
    let Some(key) = key else {
        return Ok(None);
    };
    if let Some(q) = cache.find(&key) {
        return Ok(Some(q));
    }
    // Not packed before: the constants' values (float16 ones widened,
    // exactly).
    let float = |b: Buf| match b {
        Buf::F32(v) => Some(v),
        Buf::F16(_) => b.try_to_f32_vec().ok(),
        _ => None,
    };
    let (Some(scale), Some(zero)) = (
        constant(g, t.scale.0).and_then(float),
        constant(g, t.zero.0),
    ) else {
        return Ok(None);
    };
    let mut offsets = Vec::new();
    for (id, map) in &t.offsets {
        let Some(v) = constant(g, *id).and_then(float) else {
            return Ok(None);
        };
        offsets.push((v, map));
    }
    let blocks = n * k / QK;
    let (mut d, mut m) = (Vec::new(), Vec::new());
    let room = |v: &mut Vec<f32>| {
        v.try_reserve_exact(blocks).map_err(|_| {
            Error::operation(format!(
                "cannot allocate {} bytes for quantized weights' scales",
                blocks * 4
            ))
        })
    };
    room(&mut d)?;
    room(&mut m)?;
    for b in 0..blocks {
        let i = b * QK;
        let scale = scale[t.scale.1.index(i)];
        let zero = zero.get_f64(t.zero.1.index(i)) + shift as f64;
        let offset: f64 = offsets.iter().map(|(v, map)| v[map.index(i)] as f64).sum();
        d.push(scale);
        m.push((offset - zero * scale as f64) as f32);
    }
    // `uint4` and `int8` codes are read where the constant holds them
    // (its bytes are already the kernels' layout); the others are
    // repacked, moved to 0..=15 or -128..=127.
    let mut q = if shift == 0 {
        QMatrix::share(n, k, wide, bytes.clone(), d, m)?
    } else {
        let codes = Buf::from_bytes(qd.data_type, bytes, qd.element_count())?;
        let code = |i: usize| -> i32 {
            let raw = match &codes {
                Buf::I8(v) => v[i] as i32,
                Buf::U8(v) => v[i] as i32,
                _ => 0,
            };
            raw + shift
        };
        QMatrix::pack(n, k, wide, code, d, m)?
    };
    // Float16 scales (a GGUF file's, cast to float32 by the graph, or a
    // float16 product's) are read where their constant holds them when
    // it holds exactly the matrix's scales, not copied.
    let (scale, _) = &key.scale;
    if scale.types.first() == Some(&DataType::Float16) {
        if let Some(root) = scale.root.bytes() {
            q.read_scales_from(root);
        }
    }
    let q = Arc::new(q);
    cache.entries.push((key, Arc::downgrade(&q)));
    Ok(Some(q))
}

/// The graph with each cast or reshape of a constant (at most
/// [`MAX_FOLDED`] elements, not a graph output) made a constant, computed
/// once here by the same kernel; `None` when there is none. A float16
/// scale or offset that a graph casts to float32 is then a constant that
/// the products can pack, not a cast at every dispatch.
pub(super) fn fold_constant_casts(
    graph: &Graph,
    cache: &mut ConstantCache,
) -> Result<Option<Graph>> {
    let mut g = graph.clone();
    let outputs: Vec<OperandId> = graph.outputs.iter().map(|(_, o)| *o).collect();
    let mut folded = false;
    for n in 0..graph.nodes.len() {
        let node = &graph.nodes[n];
        let (Op::Cast(_) | Op::Reshape, [x], [o]) = (&node.op, &node.inputs[..], &node.outputs[..])
        else {
            continue;
        };
        let d = &g.operands[*o];
        if outputs.contains(o) || d.element_count() > MAX_FOLDED {
            continue;
        }
        let bytes = match (&node.op, &g.sources[*x]) {
            // The same bytes in another shape.
            (Op::Reshape, Source::Constant(b)) => b.clone(),
            (Op::Cast(_), Source::Constant(b)) => {
                let key = (BytesId::of(b), d.data_type);
                match cache.casts.get(&key).and_then(Weak::upgrade) {
                    Some(done) => done,
                    None => match constant(&g, *o) {
                        Some(v) => {
                            let done = Arc::new(v.to_bytes(d.data_type));
                            cache.casts.insert(key, Arc::downgrade(&done));
                            done
                        }
                        None => continue,
                    },
                }
            }
            _ => continue,
        };
        g.sources[*o] = Source::Constant(bytes);
        folded = true;
    }
    Ok(folded.then(|| prune(g)))
}

/// The graph with each `matmul` or `gemm` whose B is a cast of a float16
/// operand to float32 (and which is that cast's only reader) reading the
/// float16 operand itself; `None` when there is none. The product widens
/// it as it goes (`sgemm::sgemm_f16b`, or `gemm`'s own widening), with the
/// same bits, so the cast's float32 copy is never made: a language
/// model's float16 cache blocks are read in half the bytes, with no pass
/// over them before the product. A float16 constant read so is packed
/// from its float16 form at build (`prepack`), so the graph holds no
/// float32 copy of it beside the packed one: this runs before
/// [`fold_constant_casts`], which would otherwise make one (Q4_1's
/// minimums, which a language model's graphs multiply in a product of
/// their own, took 13 MB three times over: folded, converted, packed).
pub(super) fn widen_into_products(graph: &Graph) -> Option<Graph> {
    let mut readers = vec![0usize; graph.operands.len()];
    for node in &graph.nodes {
        for &i in &node.inputs {
            readers[i] += 1;
        }
    }
    for (_, o) in &graph.outputs {
        readers[*o] += 1;
    }
    let mut g = graph.clone();
    let mut changed = false;
    for node in g.nodes.iter_mut() {
        let (Op::Matmul | Op::Gemm(_), Some(&b)) = (&node.op, node.inputs.get(1)) else {
            continue;
        };
        let Source::Node { node: c, .. } = graph.sources[b] else {
            continue;
        };
        let cast = &graph.nodes[c];
        let (Op::Cast(_), [x]) = (&cast.op, &cast.inputs[..]) else {
            continue;
        };
        let widened = graph.operands[b].data_type == DataType::Float32
            && graph.operands[*x].data_type == DataType::Float16
            && graph.operands[*x].shape == graph.operands[b].shape;
        // The A operand must be float32 too: the product then reads one
        // float16 operand and writes float32, as the cast and it did.
        let a_f32 = node
            .inputs
            .first()
            .is_some_and(|&a| graph.operands[a].data_type == DataType::Float32);
        if widened && a_f32 && readers[b] == 1 {
            node.inputs[1] = *x;
            changed = true;
        }
    }
    changed.then(|| prune(g))
}

/// Constants of at least this many bytes that a `gather` reads are read
/// where they lie ([`gathers_from_constants`]); smaller ones are
/// converted as every constant is, which costs little.
const TABLE_MIN_BYTES: usize = 1 << 20;

/// Large constants that gathers read in place, by the gather's output
/// operand: the constant's bytes and descriptor.
pub(super) type Tables = HashMap<OperandId, (Arc<Vec<u8>>, OperandDescriptor)>;

/// The graph with each `gather` of a large constant (a language model's
/// token embedding: 28 MB of int8 for SmolLM2) reading the constant's
/// bytes where they lie (`gather::gather_table`), with the table taken
/// off the node's inputs so that it is never converted to an element
/// buffer, which would hold the table twice for the few rows a step
/// reads; `None` when there is none. 4-bit tables are left as they are
/// (their elements are not whole bytes).
pub(super) fn gathers_from_constants(graph: &Graph) -> Option<(Graph, Tables)> {
    let mut g = graph.clone();
    let mut tables = HashMap::new();
    for node in g.nodes.iter_mut() {
        let (Op::Gather(GatherOp::Gather { .. }), [x, _], [o]) =
            (&node.op, &node.inputs[..], &node.outputs[..])
        else {
            continue;
        };
        let (Source::Constant(bytes), d) = (&graph.sources[*x], &graph.operands[*x]) else {
            continue;
        };
        let whole = d.data_type.bits().is_multiple_of(8);
        if whole && bytes.len() >= TABLE_MIN_BYTES {
            tables.insert(*o, (bytes.clone(), d.clone()));
            node.inputs.remove(0);
        }
    }
    (!tables.is_empty()).then_some((g, tables))
}

/// Packed weights by the output operand of the product that reads them.
pub(super) type Packed = HashMap<OperandId, Arc<QMatrix>>;

/// The graph with every product over quantized constant weights made a
/// quantized product (see the module comment), and the packed weights by
/// the product's output operand (which later rewrites keep); `None` when
/// there is none. A fused node's inputs are its others with B taken out:
/// `[a]` for matmul, `[a, c]` (c if given) for gemm.
pub(super) fn quantized_products(
    graph: &Graph,
    cache: &mut WeightCache,
) -> Result<Option<(Graph, Packed)>> {
    // `WEBNN_CPU_QGEMM=off` runs the graphs as written (for comparisons).
    if std::env::var("WEBNN_CPU_QGEMM").is_ok_and(|v| v == "off") {
        return Ok(None);
    }
    let mut weights = HashMap::new();
    let mut g = graph.clone();
    for n in 0..graph.nodes.len() {
        let Some((t, rows, k)) = weights_of(graph, n) else {
            continue;
        };
        if let Some(q) = pack(graph, &t, rows, k, cache)? {
            weights.insert(graph.nodes[n].outputs[0], q);
            g.nodes[n].inputs.remove(1);
        }
    }
    if weights.is_empty() {
        return Ok(None);
    }
    Ok(Some((prune(g), weights)))
}

/// Block-sum products folded into quantized ones, by the fused node's
/// output operand (see [`block_sum_products`]).
pub(super) type Sums = HashMap<OperandId, Arc<BlockSums>>;

/// The graph with each quantized product whose only reader adds a
/// block-sum product of the same activations folded into one node (see
/// `qgemm::BlockSums`), `packed` following the rewritten outputs; `None`
/// when there is none. The form recognised, as a graph with llama.cpp's
/// numerics writes Q4_1's minimum:
///
/// ```text
/// add(Q(x), gemm(S, M, {bTranspose: true}))
///   Q  a quantized product of x ([rows, K]; gemm with alpha 1 and no C,
///      or matmul)
///   S  reduceSum(reshape(x, [rows, K/32, 32]), {axes: [2]}), or that
///      rounded to float16: cast(cast(.., float16), float32)
///   M  a constant [N, K/32] (or a cast or reshape of one)
/// ```
///
/// The second gemm and the add are read by nothing else.
pub(super) fn block_sum_products(
    graph: &Graph,
    packed: &mut Packed,
    cache: &mut WeightCache,
) -> Result<Option<(Graph, Sums)>> {
    // Graph outputs count usize::MAX readers: never the one reader asked.
    let (readers, reader) = super::readers(graph);
    let mut g = graph.clone();
    let mut sums = HashMap::new();
    for (qn, node) in graph.nodes.iter().enumerate() {
        let (Some(&o1), Some(&x)) = (node.outputs.first(), node.inputs.first()) else {
            continue;
        };
        let Some(w) = packed.get(&o1).cloned() else {
            continue;
        };
        let plain = match &node.op {
            Op::Gemm(p) => p.alpha == 1.0 && !p.has_c && !p.a_transpose,
            Op::Matmul => true,
            _ => false,
        };
        let dx = &graph.operands[x];
        if !plain || dx.rank() != 2 || readers[o1] != 1 || !w.k().is_multiple_of(QK) {
            continue;
        }
        let (rows, nb) = (dx.shape[0], w.k() / QK);
        let an = &graph.nodes[reader[o1]];
        let [l, r] = an.inputs[..] else { continue };
        let o2 = if l == o1 { r } else { l };
        let (Op::Binary(BinaryKind::Add), Some(&o3)) = (&an.op, an.outputs.first()) else {
            continue;
        };
        let same = |id: OperandId| {
            graph.operands[id].shape == graph.operands[o1].shape
                && graph.operands[id].data_type == DataType::Float32
        };
        if o2 == o1 || !same(o2) || !same(o3) || readers[o2] != 1 {
            continue;
        }
        let Some(gn) = producer(graph, o2) else {
            continue;
        };
        let (Op::Gemm(p), [sid, mid]) = (&gn.op, &gn.inputs[..]) else {
            continue;
        };
        if !p.b_transpose || p.a_transpose || p.has_c || p.alpha != 1.0 || p.k != nb {
            continue;
        }
        let Some((round16, sum_of)) = block_sums_of(graph, *sid, rows, nb) else {
            continue;
        };
        if sum_of != x {
            continue;
        }
        let Some(mref) = const_ref(graph, *mid) else {
            continue;
        };
        if graph.operands[*mid].element_count() != w.n() * nb {
            continue;
        }
        let key = SumsKey {
            m: mref,
            n: w.n(),
            nb,
            round16,
        };
        let bs = match cache.find_sums(&key) {
            Some(bs) => bs,
            None => {
                let Some(Buf::F32(m)) = constant(graph, *mid) else {
                    continue;
                };
                let bs = Arc::new(BlockSums::new(&m, w.n(), nb, round16)?);
                cache.sums.push((key, Arc::downgrade(&bs)));
                bs
            }
        };
        // The product now writes the sum: the add and the second gemm
        // are read by nothing and go.
        g.nodes[qn].outputs = vec![o3];
        g.sources[o3] = Source::Node { node: qn, index: 0 };
        packed.remove(&o1);
        packed.insert(o3, w);
        sums.insert(o3, bs);
    }
    if sums.is_empty() {
        return Ok(None);
    }
    Ok(Some((prune(g), sums)))
}

/// What `s` ([rows, nb], float32) sums per block of 32, when it is
/// `reduceSum(reshape(x, [rows, nb, 32]), {axes: [2]})`, possibly rounded
/// to float16 and back: whether rounded, and x.
fn block_sums_of(g: &Graph, s: OperandId, rows: usize, nb: usize) -> Option<(bool, OperandId)> {
    let node_of = |id: OperandId| producer(g, id);
    let dt = |id: OperandId| g.operands[id].data_type;
    let mut at = s;
    let mut round16 = false;
    let n = node_of(at)?;
    if let (Op::Cast(_), [h]) = (&n.op, &n.inputs[..]) {
        let inner = node_of(*h)?;
        let (Op::Cast(_), [r]) = (&inner.op, &inner.inputs[..]) else {
            return None;
        };
        if dt(s) != DataType::Float32 || dt(*h) != DataType::Float16 || dt(*r) != DataType::Float32
        {
            return None;
        }
        round16 = true;
        at = *r;
    }
    let n = node_of(at)?;
    let (
        Op::Reduce(ReduceOp::Reduce {
            kind: ReduceKind::Sum,
            axes,
            ..
        }),
        [x3],
    ) = (&n.op, &n.inputs[..])
    else {
        return None;
    };
    if axes[..] != [2] || g.operands[at].shape != [rows, nb] || dt(at) != DataType::Float32 {
        return None;
    }
    let n = node_of(*x3)?;
    let (Op::Reshape, [x]) = (&n.op, &n.inputs[..]) else {
        return None;
    };
    (g.operands[*x3].shape == [rows, nb, QK]).then_some((round16, *x))
}

/// The node that computes operand `id` (none for an input or a
/// constant).
fn producer(g: &Graph, id: OperandId) -> Option<&crate::graph::Node> {
    match g.sources[id] {
        Source::Node { node, .. } => g.nodes.get(node),
        _ => None,
    }
}

/// The graph without the nodes whose outputs nothing reads (after a
/// rewrite took their reader's input away); the sources that name nodes
/// follow the renumbering.
fn prune(mut g: Graph) -> Graph {
    let mut needed = vec![false; g.operands.len()];
    for (_, o) in &g.outputs {
        needed[*o] = true;
    }
    let mut keep = vec![false; g.nodes.len()];
    // Nodes are in topological order: a node is kept when a kept node
    // (or an output) reads one of its outputs.
    for n in (0..g.nodes.len()).rev() {
        // An output that a fold made a constant is no longer this node's.
        let makes = |o: usize| matches!(g.sources[o], Source::Node { node, .. } if node == n);
        if g.nodes[n].outputs.iter().any(|&o| needed[o] && makes(o)) {
            keep[n] = true;
            for &i in &g.nodes[n].inputs {
                needed[i] = true;
            }
        }
    }
    let nodes = std::mem::take(&mut g.nodes);
    g.nodes = nodes
        .into_iter()
        .zip(&keep)
        .filter_map(|(node, &k)| k.then_some(node))
        .collect();
    for (ni, node) in g.nodes.iter().enumerate() {
        for (index, &o) in node.outputs.iter().enumerate() {
            g.sources[o] = Source::Node { node: ni, index };
        }
    }
    // The dropped nodes' outputs: no node makes them and none reads them;
    // they point at node 0 so that no index is out of range.
    for (o, src) in g.sources.iter_mut().enumerate() {
        if let Source::Node { node, index } = src {
            let fine = g
                .nodes
                .get(*node)
                .is_some_and(|n| n.outputs.get(*index) == Some(&o));
            if !fine {
                *src = Source::Node { node: 0, index: 0 };
            }
        }
    }
    g
}

/// The graph with each node that `matched` recognises (as the last node
/// of a pattern it computes whole) reading the inputs `matched` names,
/// and what each such node computes, by its output operand; the nodes
/// only the patterns read are pruned. `None` when no node matched. An
/// entry whose node was pruned (a pattern inside another that matched
/// too) is dropped.
fn rewired<S>(
    graph: &Graph,
    matched: impl Fn(&Graph, &crate::graph::Node) -> Option<(S, Vec<OperandId>)>,
) -> Option<(Graph, HashMap<OperandId, S>)> {
    let mut g = graph.clone();
    let mut found = HashMap::new();
    for (n, node) in graph.nodes.iter().enumerate() {
        if let (Some((spec, inputs)), Some(&y)) = (matched(graph, node), node.outputs.first()) {
            g.nodes[n].inputs = inputs;
            found.insert(y, spec);
        }
    }
    if found.is_empty() {
        return None;
    }
    let g = prune(g);
    let made: std::collections::HashSet<OperandId> = g
        .nodes
        .iter()
        .flat_map(|n| n.outputs.iter().copied())
        .collect();
    found.retain(|o, _| made.contains(o));
    Some((g, found))
}

/// Where a float32 operand's rows (its last axis, `n` wide) lie when a
/// slice took whole rows of another but part of their last axis: that
/// operand, the offset of x's rows in its rows, and their width. `None`
/// where `x` is no such slice. The fused nodes (SwiGLU, RoPE) then read
/// the rows where they lie instead of a copy.
fn row_slice(g: &Graph, x: OperandId, n: usize) -> Option<(OperandId, usize, usize)> {
    let s = producer(g, x)?;
    let (
        Op::Slice(crate::graph::ops::shape::SliceParams {
            starts,
            sizes,
            strides,
        }),
        [from],
    ) = (&s.op, &s.inputs[..])
    else {
        return None;
    };
    let df = &g.operands[*from];
    let rank = df.rank();
    let whole_rows = rank >= 1
        && df.data_type == DataType::Float32
        && strides.iter().all(|&s| s == 1)
        && starts[..rank - 1].iter().all(|&s| s == 0)
        && sizes[..rank - 1] == df.shape[..rank - 1]
        && sizes[rank - 1] == n
        && starts[rank - 1] + n <= df.shape[rank - 1];
    whole_rows.then(|| (*from, starts[rank - 1], df.shape[rank - 1]))
}

mod rounding;
pub(super) use rounding::{rounded_blocks, Rounds};
mod softmax;
pub(super) use softmax::{fused_softmaxes, Softmaxes};
mod swiglu;
pub(super) use swiglu::{fused_swiglus, SwiGlus};
mod rope;
pub(super) use rope::{fused_ropes, Ropes};

#[cfg(test)]
mod tests;

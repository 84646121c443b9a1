//! The CPU backend: kernels over typed `Vec`s, parallelised with rayon.
//!
//! `compile()` converts constants to element buffers once and computes, for
//! every operand, the last node that reads it, so `dispatch()` frees each
//! intermediate as soon as it is dead. Kernels live in one file per operator
//! family and receive the resolved parameters of the graph IR as they are.

mod activation;
mod conv;
mod elementwise;
mod execute;
mod fuse;
mod gather;
mod logical;
mod matmul;
mod memory;
mod movement;
mod norm;

mod qgemm;
mod quantize;
mod recurrent;
mod reduce;
mod resample;
mod sgemm;
mod shape;
mod simd;
pub mod util;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::{profile, Backend, GraphId, TensorId};
use crate::error::{Error, Result};
use crate::graph::ops::elementwise::{ClampParams, SoftmaxParams};
use crate::graph::ops::gather::GatherOp;
use crate::graph::ops::shape::{CastParams, ConcatParams, SliceParams, TransposeParams};
use crate::graph::{Graph, Op, Source};
use crate::tensor::Buf;
use crate::types::OperandDescriptor;

use conv::nchwc;
use execute::execute;

/// A compiled graph's constants as element buffers, by operand id; shared
/// with the context's other graphs that hold the same bytes.
pub(crate) type Constants = HashMap<usize, Arc<Buf>>;

struct CpuTensor {
    desc: OperandDescriptor,
    /// Shared with a `readTensor(tensor, view)` in flight, which copies
    /// it on the JS thread: never changed in place, only replaced.
    data: Arc<Buf>,
}

struct CompiledGraph {
    graph: Arc<Graph>,
    /// Converted constants, by operand id.
    constants: Constants,
    /// For each operand, the index of the last node reading it (graph
    /// outputs: `usize::MAX`, never freed during the run).
    last_use: Vec<usize>,
    /// Constant right-hand sides of matmul/gemm nodes, packed once for the
    /// sgemm micro-kernel, by node index.
    packed: HashMap<usize, Arc<sgemm::PackedB>>,
    /// Matmul and gemm nodes whose B is constant quantized weights, kept
    /// quantized (see `fuse`), by the node's output operand; such a node
    /// has B taken off its inputs.
    quantized: HashMap<usize, Arc<qgemm::QMatrix>>,
    /// Block-sum products folded into those quantized products, by the
    /// same output operand (see `fuse::block_sum_products`).
    sums: fuse::Sums,
    /// Gather nodes that read a large constant where it lies (see
    /// `fuse::gathers_from_constants`), by the node's output operand: the
    /// constant's bytes and descriptor; such a node has the table taken off
    /// its inputs.
    tables: fuse::Tables,
    /// dequantizeLinear nodes that compute a whole rounding of their
    /// input to int8 blocks (see `fuse::rounded_blocks`), by the node's
    /// output operand.
    rounds: fuse::Rounds,
    /// Softmax nodes (or the casts that round their results) that add a
    /// mask and round to float16 in the same pass (see
    /// `fuse::fused_softmaxes`), by the node's output operand.
    softmaxes: fuse::Softmaxes,
    /// `mul` nodes that compute a whole SwiGLU, reading its gate and up
    /// values where they lie (see `fuse::fused_swiglus`), by the node's
    /// output operand.
    swiglus: fuse::SwiGlus,
    /// `add` nodes that compute a whole rotation of adjacent pairs
    /// (RoPE), reading x's rows where they lie (see `fuse::fused_ropes`),
    /// by the node's output operand.
    ropes: fuse::Ropes,
    /// Constant filters of conv2d nodes that run as products, packed once
    /// per group for the sgemm micro-kernel, by node index.
    conv_packed: HashMap<usize, conv::PackedFilter>,
    /// The weights of gru/lstm nodes whose weights and recurrent weights
    /// are constants, in the form their steps read, by node index.
    recurrent: HashMap<usize, recurrent::Weights>,
    /// The operands stored in the channel-blocked layout and the
    /// convolutions that run in it (`None`: every operand is plain).
    nchwc: Option<nchwc::Plan>,
    /// The bytes each operand holds while computed ([`operand_bytes`]),
    /// worked out once: the executor asks for them at every node of every
    /// dispatch, and reading each operand's shape then (a heap allocation
    /// of its own, thousands of them in a language model's step graph)
    /// missed the cache at every node.
    ///
    /// [`operand_bytes`]: CompiledGraph::operand_bytes
    bytes: Vec<usize>,
    /// Enough work that keeping the pool's other threads awake through a
    /// dispatch pays (see `CpuBackend::run_hot`); a tiny graph runs on the
    /// calling thread without waking anyone.
    hot: bool,
}

/// Output elements (summed over the nodes) from which a graph is `hot`.
const HOT_ELEMENTS: usize = 1 << 16;

/// Multiply-adds of its products (matmul, gemm, convolutions) from which a
/// graph is `hot` whatever its output size: as much as one product that
/// `sgemm` splits between threads, so a small-output product that forks
/// (a 128x384 by 384x384 matmul has 49,152 outputs but 19M multiply-adds)
/// finds the other threads awake instead of paying a wake-up per fork.
const HOT_MACS: usize = 1 << 19;

/// The multiply-adds behind each output element of node `n` (1 for the
/// operators that are not products).
fn reduced_per_output(graph: &Graph, n: &crate::graph::Node) -> usize {
    match &n.op {
        Op::Matmul => n
            .inputs
            .first()
            .and_then(|&a| graph.operands[a].shape.last().copied())
            .unwrap_or(1),
        Op::Gemm(p) => p.k,
        Op::Conv2d(p) => p.taps(),
        Op::ConvTranspose2d(p) => p.taps(),
        _ => 1,
    }
    .max(1)
}

/// Runs `f` on `pool` (the context's own), or here for the global one. A
/// function of the pool, not of the backend, so that `f` may borrow the
/// backend's other fields mutably.
fn on_pool<T: Send>(pool: &Option<Arc<rayon::ThreadPool>>, f: impl FnOnce() -> T + Send) -> T {
    match pool {
        Some(p) => p.install(f),
        None => f(),
    }
}

/// The CPU backend.
#[derive(Default)]
pub struct CpuBackend {
    tensors: HashMap<TensorId, CpuTensor>,
    graphs: HashMap<GraphId, CompiledGraph>,
    /// A pool of the requested size; `None` uses rayon's global pool, which
    /// all contexts share so that several contexts do not oversubscribe the
    /// cores. A context's timeline runs on a thread of its own pool (see
    /// [`pool`]), which `run_hot` needs to keep the others busy without
    /// deadlock.
    pool: Option<Arc<rayon::ThreadPool>>,
    /// The most bytes of tensors and intermediates this context may hold
    /// at once (the `memoryLimit` context option); `None`: no limit.
    memory_limit: Option<usize>,
    /// Bytes held by tensors.
    tensor_bytes: usize,
    /// How long a thread of the pool keeps spinning after a hot dispatch
    /// (see `CpuBackend::linger`).
    spin: std::time::Duration,
    /// Whether a thread of the pool is spinning now.
    spinning: Arc<AtomicBool>,
    /// Quantized weights packed for this context's graphs, shared by
    /// the graphs that multiply by the same constants.
    weights: fuse::WeightCache,
    /// Converted constants and folded casts, shared likewise.
    constants: fuse::ConstantCache,
    /// Constant B operands packed for the float32 GEMM, shared likewise.
    packed: fuse::PackedCache,
}

impl Drop for CpuBackend {
    fn drop(&mut self) {
        if profile::CPU.enabled() {
            profile::CPU.report();
        }
    }
}

/// The graph with each `(node, follower, extra)` of `merges` made one
/// node: `node` gets the extra input `extra` and `follower`'s output, and
/// `follower` goes (the fusions of [`conv::fuse_activations`] and
/// [`matmul::fuse_bias`]). `follower` must be the only reader of `node`'s
/// single output, which no graph output names. Nodes are renumbered and
/// the sources that name them follow.
fn absorb(graph: &Graph, merges: &[(usize, usize, usize)]) -> Graph {
    let mut g = graph.clone();
    let mut drop = vec![false; g.nodes.len()];
    for &(ni, a, extra) in merges {
        let out = g.nodes[a].outputs[0];
        g.nodes[ni].inputs.push(extra);
        g.nodes[ni].outputs = vec![out];
        drop[a] = true;
    }
    let mut new_index = vec![usize::MAX; g.nodes.len()];
    let mut kept = Vec::with_capacity(g.nodes.len());
    for (ni, node) in std::mem::take(&mut g.nodes).into_iter().enumerate() {
        if !drop[ni] {
            new_index[ni] = kept.len();
            kept.push(node);
        }
    }
    g.nodes = kept;
    for (ni, node) in g.nodes.iter().enumerate() {
        for (index, &o) in node.outputs.iter().enumerate() {
            g.sources[o] = Source::Node { node: ni, index };
        }
    }
    // The merged nodes' own outputs are no longer produced by any node;
    // point them at their node (nothing reads them).
    for &(ni, ..) in merges {
        for &o in &graph.nodes[ni].outputs {
            g.sources[o] = Source::Node {
                node: new_index[ni],
                index: 0,
            };
        }
    }
    g
}

/// For each operand, how many nodes read it (`usize::MAX` for graph
/// outputs) and the last node that does.
fn readers(graph: &Graph) -> (Vec<usize>, Vec<usize>) {
    let mut count = vec![0usize; graph.operands.len()];
    let mut reader = vec![usize::MAX; graph.operands.len()];
    for (ni, node) in graph.nodes.iter().enumerate() {
        for &i in &node.inputs {
            count[i] += 1;
            reader[i] = ni;
        }
    }
    for (_, o) in &graph.outputs {
        count[*o] = usize::MAX;
    }
    (count, reader)
}

/// Bytes a CPU buffer of `d` occupies (4-bit types are stored unpacked).
fn held_bytes(d: &OperandDescriptor) -> usize {
    d.element_count() * d.data_type.bits().max(8) / 8
}

impl CompiledGraph {
    /// The bytes operand `i` holds while computed: its type's, or
    /// float32's for a float16 operand held blocked in float32.
    fn operand_bytes(&self, i: usize) -> usize {
        self.bytes[i]
    }

    /// [`CompiledGraph::operand_bytes`] of every operand, from the
    /// descriptors and the blocked plan.
    fn bytes_of(graph: &Graph, nchwc: Option<&nchwc::Plan>) -> Vec<usize> {
        let half = |i: usize| nchwc.is_some_and(|pl| pl.is_half(i));
        (graph.operands.iter().enumerate())
            .map(|(i, d)| match half(i) {
                true => d.element_count() * 4,
                false => held_bytes(d),
            })
            .collect()
    }
}

impl CpuBackend {
    /// Who copies a read's contents: large reads come to the worker from
    /// `exportToGPU` (`readTensor` lends them to the JS thread instead),
    /// and the pool's threads copy them together, the worker's among them.
    fn read_help(&self) -> crate::copy::CopyHelp {
        crate::copy::CopyHelp {
            pool: match &self.pool {
                Some(p) => crate::copy::HelperPool::Pool(Arc::downgrade(p)),
                None => crate::copy::HelperPool::Global,
            },
            desk: None,
        }
    }

    pub fn new() -> Self {
        Self::default()
    }

    /// A backend whose kernels use `threads` threads (`None`: the shared
    /// pool, sized to the machine), in a pool of their own that the caller
    /// is not part of (a context's timeline instead runs on a thread of the
    /// pool: [`pool`] and [`CpuBackend::with_pool`]).
    pub fn with_threads(threads: Option<usize>) -> Result<Self> {
        Ok(Self::with_pool(threads.map(pool).transpose()?))
    }

    /// A backend whose kernels run on `pool` (`None`: the shared pool).
    pub fn with_pool(pool: Option<Arc<rayon::ThreadPool>>) -> Self {
        let mut backend = Self::default();
        backend.pool = pool;
        backend.spin = spin_time();
        backend
    }

    /// Holds tensor `id` of `desc` with `data`'s buffer, counted against
    /// `memoryLimit` (an OperationError, before `data` runs, when it does
    /// not fit).
    fn hold(
        &mut self,
        id: TensorId,
        desc: &OperandDescriptor,
        data: impl FnOnce() -> Result<Buf>,
    ) -> Result<()> {
        let bytes = held_bytes(desc);
        if let Some(limit) = self.memory_limit {
            if self.tensor_bytes.saturating_add(bytes) > limit {
                return Err(Error::operation(format!(
                    "cannot allocate {bytes} bytes: the context's memoryLimit of {limit} bytes has {} left",
                    limit.saturating_sub(self.tensor_bytes)
                )));
            }
        }
        let data = data()?;
        self.tensor_bytes += bytes;
        let desc = desc.clone();
        self.tensors.insert(
            id,
            CpuTensor {
                desc,
                data: Arc::new(data),
            },
        );
        Ok(())
    }

    /// Caps the memory this backend holds: an allocation beyond it fails
    /// (createTensor rejects, a dispatch errors its outputs) instead of
    /// exhausting the machine.
    pub fn with_memory_limit(mut self, limit: Option<usize>) -> Self {
        self.memory_limit = limit;
        self
    }

    /// What a run may allocate for intermediates.
    fn budget(&self) -> Option<usize> {
        self.memory_limit
            .map(|l| l.saturating_sub(self.tensor_bytes))
    }

    /// Runs a whole graph: like `run`, but the pool's other threads stay
    /// awake until it ends. A graph is a sequence of short parallel
    /// sections (a few per node); a rayon worker that finds no work goes
    /// to sleep within microseconds, and waking it again costs tens of
    /// microseconds on a loaded or virtual machine, so every section
    /// started with the second half late and its fork-join waited
    /// (MobileNetV2 at 2 threads: 12 ms of nodes whose fastest runs sum
    /// to 7.6). Another thread of the pool runs one job for the graph's
    /// duration that takes work from the pool as it appears
    /// (`rayon::yield_now`) and spins between (`take_work_while`). Only for
    /// a pool the caller belongs to. With `hot` false (a graph too small to
    /// be worth a wake-up), the same as `run`.
    fn run_hot<T: Send>(&self, hot: bool, f: impl FnOnce() -> T + Send) -> T {
        let Some(p) = &self.pool else { return f() };
        // The worker job is only safe from a thread of the pool: queued
        // from outside, it could start on a thread that later has to
        // wait for it.
        let inside = p.current_thread_index().is_some();
        if !hot || !inside || p.current_num_threads() < 2 {
            return p.install(f);
        }
        let busy = AtomicBool::new(true);
        let caller = std::thread::current().id();
        let r = p.install(|| {
            // `join` queues the worker job before the graph makes any work
            // of its own, and other threads steal oldest first: the job is
            // the first thing another thread takes from this one, so it
            // runs at the bottom of that thread's stack, never on top of a
            // piece of this graph (which it would then block: it returns
            // only when the graph is done). If this thread takes it back
            // itself, it returns at once.
            let (r, ()) = rayon::join(
                || {
                    // Released however `f` ends (a panic unwinds through
                    // here too), so the job always ends.
                    let _done = Release(&busy);
                    f()
                },
                || take_work_while(&busy, caller),
            );
            r
        });
        self.linger(p, caller);
        r
    }

    /// Keeps one other thread of the pool spinning for `self.spin` after
    /// a hot dispatch, taking the next dispatch's work as it comes. The
    /// threads of a pool that sleep between dispatches wake slowly: on a
    /// virtual machine, a sleeping thread's virtual CPU halts and its
    /// core clocks down, and the first milliseconds after it wakes run
    /// slow. Measured on a 2-vCPU VM, conv2d b at 2 threads, dispatches
    /// in blocks of ten after 100 ms pauses: median 2.9-3.1 ms without,
    /// 1.4-1.9 spinning 5 ms, 1.3-1.4 spinning 20 ms, 1.2 spinning 50 ms
    /// (one thread: 2.3). onnxruntime's threads spin after a run too,
    /// about 40 ms by default. `WEBNN_CPU_SPIN_MS` sets the time; 0
    /// turns spinning off.
    fn linger(&self, p: &rayon::ThreadPool, caller: std::thread::ThreadId) {
        if self.spin.is_zero() || self.spinning.swap(true, Ordering::AcqRel) {
            return;
        }
        let (spinning, spin) = (self.spinning.clone(), self.spin);
        // Queued on this thread, taken by another; if this thread takes
        // it back itself (while it waits in a later dispatch), it ends at
        // once, as `take_work_while` does.
        p.spawn(move || {
            if std::thread::current().id() != caller {
                spin_for_work(spin);
            }
            spinning.store(false, Ordering::Release);
        });
    }
}

/// The most threads a context's pool gets: the cores this process may run
/// on (`available_parallelism`: affinity and cgroup quotas included).
/// The kernels are compute-bound, so threads beyond the cores only take
/// turns on them, and a count from an options object must not be able to
/// start thousands of threads; `numThreads` above it is clamped to it.
pub fn max_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// A pool of `n` threads (at most [`max_threads`]) for one context's
/// kernels (`numThreads`).
///
/// The context's timeline runs as a job on one of these threads
/// ([`crate::timeline::Timeline::start`]), so a dispatch starts on it
/// directly: no hand-over to another thread and back (two wake-ups, tens
/// of microseconds), and n threads means n, not n + 1. (rayon's
/// `use_current_thread` would give the same with the timeline's own thread,
/// but it leaks that thread's worker record, and the pool's registry with
/// it, about 9 KB per context.) When the timeline ends, the backend drops
/// the pool from inside it; the threads then end on their own.
pub fn pool(n: usize) -> Result<Arc<rayon::ThreadPool>> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(n.clamp(1, max_threads()))
        .thread_name(|i| format!("webnn-cpu-{i}"))
        // A spawned job that panics (the timeline itself, or a spinning
        // thread) must not abort the process, which is rayon's default;
        // the timeline turns every panic inside a command into an error,
        // and one outside ends the context.
        .panic_handler(|_| {})
        .build()
        .map(Arc::new)
        .map_err(|e| Error::not_supported(format!("cannot start {n} threads: {e}")))
}

/// The time a pool thread spins after a hot dispatch: `WEBNN_CPU_SPIN_MS`
/// milliseconds, 40 when unset or unreadable.
pub(crate) fn spin_time() -> std::time::Duration {
    let ms = std::env::var("WEBNN_CPU_SPIN_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(40);
    std::time::Duration::from_millis(ms.min(10_000))
}

/// Takes pool work as it appears (a later dispatch's worker job among
/// it), spinning between, until `spin` passes without any. Yields the
/// core between checks, so that a runnable thread (the JS thread, which
/// issues the next dispatch) is not kept from it.
fn spin_for_work(spin: std::time::Duration) {
    let mut last = std::time::Instant::now();
    let mut idle = 0u32;
    loop {
        if rayon::yield_now() == Some(rayon::Yield::Executed) {
            last = std::time::Instant::now();
            idle = 0;
            continue;
        }
        idle += 1;
        std::hint::spin_loop();
        if idle.is_multiple_of(64) {
            std::thread::yield_now();
            if last.elapsed() >= spin {
                return;
            }
        }
    }
}

/// Sets the flag to false when dropped.
struct Release<'a>(&'a AtomicBool);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// The worker job of `CpuBackend::run_hot`: takes pool work as it
/// appears while `busy` holds, spinning between. After a while without
/// work it yields the core between checks (several contexts at once), and
/// after longer it returns: a long serial stretch of the graph then costs
/// a wake-up later instead of a core now. Returns at once on `caller`.
fn take_work_while(busy: &AtomicBool, caller: std::thread::ThreadId) {
    if std::thread::current().id() == caller {
        return;
    }
    let mut idle = 0u32;
    while busy.load(Ordering::Acquire) {
        if rayon::yield_now() == Some(rayon::Yield::Executed) {
            idle = 0;
        } else if idle < 20_000 {
            idle += 1;
            std::hint::spin_loop();
        } else if idle < 22_000 {
            idle += 1;
            std::thread::yield_now();
        } else {
            return;
        }
    }
}

/// Whether `WEBNN_CPU_ISA=avx2` asks an AVX-512 machine to run its
/// convolutions and element-wise loops on AVX2 (for comparisons).
fn avx2_requested() -> bool {
    std::env::var("WEBNN_CPU_ISA").is_ok_and(|v| v == "avx2")
}

pub use qgemm::{measure_gemv, GemvRate};
pub use sgemm::{measure_peak, peak_isas, Peak};

/// The instruction set of the GEMM kernel this process uses.
pub fn gemm_isa() -> &'static str {
    sgemm::best_kernel().name()
}

/// The vectors each kind of CPU kernel runs on in this process, as the
/// bench prints them: the matrix products, the products over quantized
/// weights, the blocked convolutions and the element-wise loops.
pub fn isa_report() -> String {
    let conv = nchwc::isa_name();
    format!(
        "gemm {} ({}), quantized products {}, blocked convolutions {}, element-wise {}",
        sgemm::best_kernel().name(),
        sgemm::best_kernel().blocking_report(),
        qgemm::isa_name(),
        conv,
        elementwise::simd_level().name()
    )
}

/// Runs one operator on the CPU. `inputs` are the node's input operands in
/// the order the variant documents; returns one buffer per output.
/// `prepacked`: the node's constant B operand packed at compile
/// (matmul, gemm).
pub fn run_op(
    op: &Op,
    inputs: &[&Buf],
    in_descs: &[&OperandDescriptor],
    out_descs: &[OperandDescriptor],
    prepacked: Option<&sgemm::PackedB>,
) -> Result<Vec<Buf>> {
    let out = &out_descs[0];
    let one = |b: Result<Buf>| b.map(|b| vec![b]);
    match op {
        Op::Binary(kind) => one(elementwise::binary(
            *kind,
            inputs[0],
            in_descs[0],
            inputs[1],
            in_descs[1],
            out,
        )),
        Op::Unary(kind) => one(elementwise::unary(*kind, inputs[0], out)),
        Op::Clamp(ClampParams { min, max }) => one(elementwise::clamp(inputs[0], *min, *max, out)),
        Op::Softmax(SoftmaxParams { axis }) => one(elementwise::softmax(inputs[0], *axis, out)),
        Op::Cast(CastParams { to }) => one(elementwise::cast(inputs[0], *to, out)),
        Op::Matmul => one(matmul::matmul(
            inputs[0],
            in_descs[0],
            inputs[1],
            in_descs[1],
            out,
            prepacked,
            inputs.get(2).copied(),
        )),
        Op::Gemm(p) => one(matmul::gemm(p, inputs, in_descs, out, prepacked)),
        Op::Conv2d(p) => one(conv::conv2d(p, inputs, out)),
        Op::Pool2d(p) => one(conv::pool2d(p, inputs[0], out)),
        Op::Reshape => Ok(vec![inputs[0].pooled_clone()]),
        Op::Transpose(TransposeParams { permutation }) => {
            one(shape::transpose(inputs[0], in_descs[0], permutation, out))
        }
        Op::Concat(ConcatParams { axis }) => one(shape::concat(inputs, in_descs, *axis, out)),
        Op::Slice(SliceParams {
            starts, strides, ..
        }) => one(shape::slice(inputs[0], in_descs[0], starts, strides, out)),
        Op::Logical(o) => logical::run(o, inputs, in_descs, out_descs),
        Op::Activation(o) => activation::run(o, inputs, in_descs, out_descs),
        Op::Reduce(o) => reduce::run(o, inputs, in_descs, out_descs),
        Op::Gather(o) => gather::run(o, inputs, in_descs, out_descs),
        Op::Movement(o) => movement::run(o, inputs, in_descs, out_descs),
        Op::Quantize(o) => quantize::run(o, inputs, in_descs, out_descs),
        Op::ConvTranspose2d(p) => conv::conv_transpose2d(p, inputs, in_descs, out_descs),
        Op::Norm(o) => norm::run(o, inputs, in_descs, out_descs),
        Op::Recurrent(o) => recurrent::run(o, inputs, in_descs, out_descs, None),
    }
}

/// Packs the constant B operand of every matmul (rank-2 B) and gemm node
/// once, so that runs skip packing it; by node index. A B that another
/// graph of the context packed the same way is shared (`cache`).
fn prepack(
    graph: &Graph,
    constants: &Constants,
    cache: &mut fuse::PackedCache,
) -> Result<HashMap<usize, Arc<sgemm::PackedB>>> {
    let mut packed = HashMap::new();
    for (n, node) in graph.nodes.iter().enumerate() {
        let Some(&b_id) = node.inputs.get(1) else {
            continue;
        };
        let Some(b) = constants.get(&b_id) else {
            continue;
        };
        let db = &graph.operands[b_id];
        let (k, cols, transposed) = match &node.op {
            Op::Matmul if db.rank() == 2 => (db.shape[0], db.shape[1], false),
            Op::Gemm(p) => (p.k, p.n, p.b_transpose),
            _ => continue,
        };
        // Float data only (validation guarantees it; skip anything else).
        let Ok(bv) = util::floats(b) else { continue };
        if bv.len() != k * cols {
            continue;
        }
        let pb = cache.get_or_pack(b, k, cols, transposed, || {
            sgemm::PackedB::new(&bv, k, cols, transposed)
        })?;
        packed.insert(n, pb);
    }
    Ok(packed)
}

impl Backend for CpuBackend {
    fn device_type(&self) -> &'static str {
        "cpu"
    }

    fn accelerated(&self) -> bool {
        false
    }

    /// No more than the machine holds: a tensor is one allocation in its
    /// memory.
    fn max_tensor_byte_length(&self) -> usize {
        let max = crate::types::MAX_TENSOR_BYTE_LENGTH;
        memory::physical_memory().map_or(max, |m| m.min(max))
    }

    fn create_tensor(&mut self, id: TensorId, desc: &OperandDescriptor) -> Result<()> {
        self.hold(id, desc, || {
            Buf::zeros(desc.data_type, desc.element_count())
        })
    }

    /// No storage: graphs read the constant's bytes where the binding keeps
    /// them, so a buffer here would only hold a second copy of a model's
    /// weights (zeros that nothing reads). The constant still counts
    /// against `memoryLimit`, as the memory it stands for.
    fn create_constant_tensor(&mut self, id: TensorId, desc: &OperandDescriptor) -> Result<()> {
        self.hold(id, desc, || Ok(Buf::empty(desc.data_type)))
    }

    fn destroy_tensor(&mut self, id: TensorId) {
        if let Some(t) = self.tensors.remove(&id) {
            self.tensor_bytes -= held_bytes(&t.desc);
            Buf::recycle_shared(t.data);
        }
    }

    fn write_tensor(&mut self, id: TensorId, data: Buf) -> Result<()> {
        let t = self
            .tensors
            .get_mut(&id)
            .ok_or_else(|| Error::invalid_state("the tensor is destroyed"))?;
        if data.len() != t.desc.element_count() {
            return Err(Error::type_error("the data does not fit the tensor"));
        }
        Buf::recycle_shared(std::mem::replace(&mut t.data, Arc::new(data)));
        Ok(())
    }

    fn read_tensor(&mut self, id: TensorId) -> Result<Buf> {
        let t = self
            .tensors
            .get(&id)
            .ok_or_else(|| Error::invalid_state("the tensor is destroyed"))?;
        t.data.helped_clone(&self.read_help())
    }

    fn read_tensor_into_async(
        &mut self,
        id: TensorId,
        mut into: Buf,
        done: crate::backend::ReadDone,
    ) {
        let copied = match self.tensors.get(&id) {
            Some(t) => into.copy_from(&t.data, &self.read_help()),
            None => false,
        };
        if copied {
            return done(Ok(into));
        }
        into.recycle();
        done(self.read_tensor(id))
    }

    fn read_tensor_shared_async(&mut self, id: TensorId, done: crate::backend::SharedReadDone) {
        done(
            self.tensors
                .get(&id)
                .map(|t| Arc::clone(&t.data))
                .ok_or_else(|| Error::invalid_state("the tensor is destroyed")),
        )
    }

    fn compile(&mut self, id: GraphId, graph: Arc<Graph>) -> Result<()> {
        // The caches shared between graphs drop what destroyed graphs
        // held, once per compile rather than at every lookup.
        self.weights.forget_unused();
        self.constants.forget_unused();
        self.packed.forget_unused();
        // Products over constant quantized weights keep them quantized;
        // what only computed those weights is gone from the graph.
        let weights = &mut self.weights;
        let fused = on_pool(&self.pool, || fuse::quantized_products(&graph, weights))?;
        let (graph, mut quantized) = match fused {
            Some((g, q)) => (Arc::new(g), q),
            None => (graph, HashMap::new()),
        };
        // A product of the activations' block sums added to a quantized
        // product (Q4_1's minimum, as llama.cpp takes it) joins it.
        let weights = &mut self.weights;
        let (graph, sums) = match fuse::block_sum_products(&graph, &mut quantized, weights)? {
            Some((g, s)) => (Arc::new(g), s),
            None => (graph, HashMap::new()),
        };
        // Activations rounded to int8 blocks and back (llama.cpp's
        // numerics) are one node each.
        let (graph, rounds) = match fuse::rounded_blocks(&graph) {
            Some((g, r)) => (Arc::new(g), r),
            None => (graph, HashMap::new()),
        };
        // Products read float16 operands that the graph widens only for
        // them (a float16 cache, a float16 constant) as they are.
        let graph = match fuse::widen_into_products(&graph) {
            Some(g) => Arc::new(g),
            None => graph,
        };
        // Casts and reshapes of the constants left are computed once, here
        // (after the products took theirs, so that no cast that only fed
        // quantized weights or a product is kept).
        let graph = match fuse::fold_constant_casts(&graph, &mut self.constants)? {
            Some(g) => Arc::new(g),
            None => graph,
        };
        // A softmax with its mask and its rounding to float16 is one pass
        // (after the products took the casts that only widened their
        // operands).
        let (graph, softmaxes) = match fuse::fused_softmaxes(&graph) {
            Some((g, s)) => (Arc::new(g), s),
            None => (graph, HashMap::new()),
        };
        // SwiGLU reads the gate and up halves where the product wrote them,
        // in one pass.
        let (graph, swiglus) = match fuse::fused_swiglus(&graph) {
            Some((g, s)) => (Arc::new(g), s),
            None => (graph, HashMap::new()),
        };
        // RoPE reads the rows where the product wrote them, in one pass.
        let (graph, ropes) = match fuse::fused_ropes(&graph) {
            Some((g, r)) => (Arc::new(g), r),
            None => (graph, HashMap::new()),
        };
        // Gathers read large constants (embedding tables) where they lie.
        let (graph, tables) = match fuse::gathers_from_constants(&graph) {
            Some((g, t)) => (Arc::new(g), t),
            None => (graph, HashMap::new()),
        };
        // The constants that a node reads (or an output names), converted.
        let mut read = vec![false; graph.operands.len()];
        for node in &graph.nodes {
            for &i in &node.inputs {
                read[i] = true;
            }
        }
        for (_, o) in &graph.outputs {
            read[*o] = true;
        }
        let mut constants = Constants::new();
        for (op, src) in graph.sources.iter().enumerate() {
            if let (Source::Constant(bytes), true) = (src, read[op]) {
                constants.insert(op, self.constants.buf(bytes, &graph.operands[op])?);
            }
        }
        // Each conv2d that only a clamp or relu reads runs with that
        // activation in its epilogue (a rewritten copy of the graph).
        let graph = match conv::fuse_activations(&graph, &mut constants) {
            Some(g) => Arc::new(g),
            None => graph,
        };
        // Each float32 matmul whose only reader adds a constant bias
        // vector adds it in the product's epilogue.
        let graph = match matmul::fuse_bias(&graph, &constants) {
            Some(g) => Arc::new(g),
            None => graph,
        };
        let mut last_use = vec![0usize; graph.operands.len()];
        for (n, node) in graph.nodes.iter().enumerate() {
            for &i in &node.inputs {
                last_use[i] = n;
            }
        }
        for (_, o) in &graph.outputs {
            last_use[*o] = usize::MAX;
        }
        let packed_cache = &mut self.packed;
        let packed = on_pool(&self.pool, || prepack(&graph, &constants, packed_cache))?;
        // Chains of convolutions run in the channel-blocked layout.
        let nchwc = nchwc::plan(&graph, &constants);
        let mut conv_packed = HashMap::new();
        for (n, node) in graph.nodes.iter().enumerate() {
            let Op::Conv2d(p) = &node.op else { continue };
            if nchwc.as_ref().is_some_and(|pl| pl.conv(n).is_some()) {
                continue;
            }
            let Some(f) = node.inputs.get(1).and_then(|i| constants.get(i)) else {
                continue;
            };
            if let Some(v) = conv::pack_filter(p, f)? {
                conv_packed.insert(n, v);
            }
        }
        let mut recurrent = HashMap::new();
        for (n, node) in graph.nodes.iter().enumerate() {
            let Op::Recurrent(o) = &node.op else { continue };
            let constant = |k: usize| node.inputs.get(k).and_then(|i| constants.get(i));
            if let (Some(w), Some(r)) = (constant(1), constant(2)) {
                recurrent.insert(n, recurrent::Weights::new(o, w, r)?);
            }
        }
        // Inputs and constants are borrowed, never freed; mark them too.
        for (op, src) in graph.sources.iter().enumerate() {
            if !matches!(src, Source::Node { .. }) {
                last_use[op] = usize::MAX;
            }
        }
        let (elements, macs) = graph.nodes.iter().fold((0usize, 0usize), |(e, m), n| {
            let out: usize = n
                .outputs
                .iter()
                .map(|&o| graph.operands[o].element_count())
                .fold(0, usize::saturating_add);
            (
                e.saturating_add(out),
                m.saturating_add(out.saturating_mul(reduced_per_output(&graph, n))),
            )
        });
        let bytes = CompiledGraph::bytes_of(&graph, nchwc.as_ref());
        let cg = CompiledGraph {
            bytes,
            graph,
            constants,
            last_use,
            packed,
            quantized,
            sums,
            tables,
            rounds,
            softmaxes,
            swiglus,
            ropes,
            conv_packed,
            recurrent,
            nchwc,
            hot: elements >= HOT_ELEMENTS || macs >= HOT_MACS,
        };
        // A graph that cannot fit is refused here, once, with the operand
        // that tips it over, not at each dispatch.
        let plan = memory::plan(&cg);
        if profile::CPU.enabled() {
            eprintln!(
                "webnn-node cpu: graph {id} needs {} bytes of intermediates at its peak",
                plan.peak
            );
            if !cg.quantized.is_empty() {
                let bytes: usize = cg.quantized.values().map(|q| q.bytes()).sum();
                let shared = cg.quantized.values().filter(|q| q.shares_codes()).count();
                eprintln!(
                    "webnn-node cpu: graph {id} multiplies by {} quantized weight matrices ({bytes} bytes, shared with the context's other graphs; the codes of {shared} read from their constants' bytes)",
                    cg.quantized.len()
                );
                let sums: usize = cg.sums.values().map(|s| s.bytes()).sum();
                eprintln!(
                    "webnn-node cpu: graph {id} folds {} block-sum products into them ({sums} bytes, shared likewise)",
                    cg.sums.len()
                );
            }
        }
        if let Some(limit) = self.memory_limit {
            memory::check(&cg, &plan, limit, "the context's memoryLimit")?;
        }
        if let Some(have) = memory::physical_memory() {
            memory::check(&cg, &plan, have, "the memory this process can have")?;
        }
        // The recycling pool may keep as much idle as this graph can reuse.
        let input = (cg.graph.inputs.iter())
            .map(|&(_, i)| cg.operand_bytes(i))
            .max()
            .unwrap_or(0);
        crate::tensor::pool::keep_room_for(plan.peak, input);
        self.graphs.insert(id, cg);
        Ok(())
    }

    fn destroy_graph(&mut self, id: GraphId) {
        self.graphs.remove(&id);
    }

    fn dispatch(
        &mut self,
        graph: GraphId,
        inputs: &[TensorId],
        outputs: &[TensorId],
    ) -> Result<()> {
        let cg = self
            .graphs
            .get(&graph)
            .ok_or_else(|| Error::invalid_state("the graph is destroyed"))?;
        // The inputs, looked up before any output is emptied below: a
        // dispatch that fails here leaves every tensor as it was.
        let held: Vec<Arc<Buf>> = inputs
            .iter()
            .map(|id| {
                self.tensors
                    .get(id)
                    .map(|t| Arc::clone(&t.data))
                    .ok_or_else(|| Error::invalid_state("an input tensor is destroyed"))
            })
            .collect::<Result<_>>()?;
        // The outputs' contents are replaced by this run: where nothing
        // else holds them (no read in flight), their memory goes to the
        // pool first, for the run's results to take. Else every run of a
        // graph with a large output allocates it afresh (zero-filled, or
        // page by page): the buffer that the tensor gave back after the
        // last run has gone to the copy that read it.
        let mut emptied = Vec::new();
        for id in outputs {
            if inputs.contains(id) {
                continue;
            }
            let Some(t) = self.tensors.get_mut(id) else {
                continue;
            };
            if let Some(b) = Arc::get_mut(&mut t.data).filter(|b| b.recyclable()) {
                std::mem::replace(b, Buf::empty(t.desc.data_type)).recycle();
                emptied.push(*id);
            }
        }
        let ins: Vec<&Buf> = held.iter().map(|b| &**b).collect();
        let budget = self.budget();
        let results = self.run_hot(cg.hot, || execute(cg, &ins, budget));
        // Held no longer: an output's old contents below go to the pool
        // when nothing else holds them.
        drop(ins);
        drop(held);
        let results = match results {
            Ok(r) => r,
            Err(e) => {
                // The outputs are errored now (the timeline marks them) and
                // their contents never read; still, each keeps a buffer of
                // its size, as every tensor does.
                for id in emptied {
                    if let Some(t) = self.tensors.get_mut(&id) {
                        if let Ok(z) = Buf::zeros(t.desc.data_type, t.desc.element_count()) {
                            t.data = Arc::new(z);
                        }
                    }
                }
                return Err(e);
            }
        };
        for (id, r) in outputs.iter().zip(results) {
            if let Some(t) = self.tensors.get_mut(id) {
                Buf::recycle_shared(std::mem::replace(&mut t.data, Arc::new(r)));
            }
        }
        Ok(())
    }

    fn compute(&mut self, graph: GraphId, g: &Graph, inputs: Vec<Buf>) -> Result<Vec<Buf>> {
        let r = self.compute_borrowed(graph, g, &inputs);
        inputs.into_iter().for_each(Buf::recycle);
        r
    }

    fn compute_borrowed(&mut self, graph: GraphId, _g: &Graph, inputs: &[Buf]) -> Result<Vec<Buf>> {
        let cg = self
            .graphs
            .get(&graph)
            .ok_or_else(|| Error::invalid_state("the graph is destroyed"))?;
        let refs: Vec<&Buf> = inputs.iter().collect();
        let budget = self.budget();
        self.run_hot(cg.hot, || execute(cg, &refs, budget))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::ops::elementwise::BinaryKind;
    use crate::graph::ops::matmul::GemmParams;
    use crate::graph::Node;
    use crate::types::DataType;

    /// A read's copy is the tensor's bytes, whether one thread makes it
    /// or the pool's threads together, for sizes around the threshold
    /// from which they share it, on the context's own pool and on rayon's.
    #[test]
    fn reads_copy_the_tensor_whole() {
        let p = pool(2).unwrap();
        for own in [false, true] {
            let mut b = CpuBackend::with_pool(own.then(|| p.clone()));
            for (id, n) in [3, (1 << 20) / 4 - 1, (1 << 20) / 4, 3 * (1 << 18) + 5]
                .into_iter()
                .enumerate()
            {
                let id = id as TensorId;
                let data = Buf::F32((0..n).map(|i| i as f32 * 0.5 - 7.0).collect());
                b.create_tensor(id, &f32_desc(&[n])).unwrap();
                b.write_tensor(id, data.clone()).unwrap();
                // Twice: fresh memory, then what the first read gave back.
                for _ in 0..2 {
                    let copy = b.read_tensor(id).unwrap();
                    assert!(copy == data, "{n} elements");
                    copy.recycle();
                }
            }
        }
    }

    fn f32_desc(shape: &[usize]) -> OperandDescriptor {
        OperandDescriptor {
            data_type: DataType::Float32,
            shape: shape.to_vec(),
        }
    }

    fn bytes(v: &[f32]) -> Arc<Vec<u8>> {
        Arc::new(v.iter().flat_map(|x| x.to_le_bytes()).collect())
    }

    /// A dispatch-long worker job: parallel work inside `run_hot` is done
    /// (by both threads), a panic inside it unwinds to the caller, and the
    /// pool keeps working afterwards.
    #[test]
    fn run_hot_shares_work_and_ends_on_panic() {
        use rayon::prelude::*;
        // From a thread of the pool, as a context's timeline runs.
        let p = pool(2).unwrap();
        p.install(|| {
            let b = CpuBackend::with_pool(Some(p.clone()));
            let sum: u64 = b.run_hot(true, || (0..1000u64).into_par_iter().sum());
            assert_eq!(sum, 499_500);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                b.run_hot(true, || -> u64 { panic!("inside a dispatch") })
            }));
            assert!(r.is_err());
            let sum: u64 = b.run_hot(true, || (0..1000u64).into_par_iter().sum());
            assert_eq!(sum, 499_500);
            // Two threads did the sleeping work of some run.
            let both = (0..20).any(|_| {
                let ids: std::collections::HashSet<_> = b.run_hot(true, || {
                    (0..16)
                        .into_par_iter()
                        .map(|_| {
                            std::thread::sleep(std::time::Duration::from_millis(1));
                            std::thread::current().id()
                        })
                        .collect()
                });
                ids.len() == 2
            });
            assert!(both, "the second thread never took work");
        });
    }

    /// After a hot dispatch one thread spins for the set time, dispatches
    /// that come meanwhile get their results (its spinning takes pool
    /// work, so it never holds theirs up), and then it stops; after a
    /// small graph or with no time set, none spins.
    #[test]
    fn a_thread_spins_after_a_hot_dispatch_then_stops() {
        use rayon::prelude::*;
        use std::time::{Duration, Instant};
        let p = pool(2).unwrap();
        p.install(|| {
            let mut b = CpuBackend::with_pool(Some(p.clone()));
            b.spin = Duration::from_millis(30);
            let sum =
                |b: &CpuBackend| b.run_hot(true, || (0..1000u64).into_par_iter().sum::<u64>());
            assert_eq!(sum(&b), 499_500);
            assert!(b.spinning.load(Ordering::Acquire));
            // Dispatches while it spins: right results, and it goes on.
            for _ in 0..50 {
                assert_eq!(sum(&b), 499_500);
            }
            assert!(b.spinning.load(Ordering::Acquire));
            let t = Instant::now();
            while b.spinning.load(Ordering::Acquire) {
                assert!(t.elapsed() < Duration::from_secs(5), "still spinning");
                std::thread::sleep(Duration::from_millis(1));
            }
            assert!(t.elapsed() >= Duration::from_millis(10), "stopped early");
            // A cold dispatch (a small graph) sets none spinning.
            assert_eq!(
                b.run_hot(false, || (0..10u64).into_par_iter().sum::<u64>()),
                45
            );
            assert!(!b.spinning.load(Ordering::Acquire));
            b.spin = Duration::ZERO;
            assert_eq!(sum(&b), 499_500);
            assert!(!b.spinning.load(Ordering::Acquire));
        });
    }

    /// The worker job never deadlocks a graph: thousands of dispatches of
    /// nested parallel work (joins inside parallel chunks inside parallel
    /// iterators, as conv2d's units, padding and products nest), each
    /// finishing with the right result, within a watchdog's time. (Queued
    /// as a broadcast instead, the job could start on top of a stolen piece
    /// of the graph and wait for the graph forever.)
    #[test]
    fn run_hot_never_blocks_nested_work() {
        use rayon::prelude::*;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let p = pool(2).unwrap();
            let b = CpuBackend::with_pool(Some(p.clone()));
            p.install(|| {
                let mut v = vec![0u64; 4096];
                for round in 0..3000u64 {
                    let total: u64 = b.run_hot(true, || {
                        v.par_chunks_mut(256).enumerate().for_each(|(i, c)| {
                            let (x, y) = rayon::join(
                                || (0..64u64).into_par_iter().sum::<u64>(),
                                || i as u64 + round,
                            );
                            c.iter_mut().for_each(|e| *e = x + y);
                        });
                        v.par_iter().sum()
                    });
                    let want: u64 = (0..16u64).map(|i| 256 * (2016 + i + round)).sum();
                    assert_eq!(total, want, "round {round}");
                }
            });
            tx.send(()).unwrap();
        });
        rx.recv_timeout(std::time::Duration::from_secs(120))
            .expect("3000 dispatches did not finish in 120 s: a deadlock");
    }

    /// One operand bound to two output names: both get its values, through
    /// compute and through dispatch (twice: the first run must not use the
    /// result up).
    #[test]
    fn one_operand_under_two_output_names() {
        use crate::graph::args::Val;
        let mut b = crate::graph::GraphBuilder::new();
        let x = b.input("x", f32_desc(&[4])).unwrap();
        let builder = b.id;
        let op = |id| Val::Operand { builder, id };
        let y = b.call("relu", &[op(x)]).unwrap()[0];
        let z = b.call("neg", &[op(y)]).unwrap()[0];
        let g = Arc::new(
            b.build(vec![("a".into(), y), ("b".into(), y), ("c".into(), z)])
                .unwrap(),
        );
        let mut cpu = CpuBackend::new();
        cpu.compile(1, g.clone()).unwrap();
        let input = Buf::F32(vec![-1.0, 2.0, -3.0, 4.0]);
        let relu = Buf::F32(vec![0.0, 2.0, 0.0, 4.0]);
        let neg = Buf::F32(vec![-0.0, -2.0, -0.0, -4.0]);
        let out = cpu.compute(1, &g, vec![input.clone()]).unwrap();
        assert_eq!(out, vec![relu.clone(), relu.clone(), neg.clone()]);
        cpu.create_tensor(10, &f32_desc(&[4])).unwrap();
        cpu.write_tensor(10, input).unwrap();
        for t in 11..14 {
            cpu.create_tensor(t, &f32_desc(&[4])).unwrap();
        }
        for _ in 0..2 {
            cpu.dispatch(1, &[10], &[11, 12, 13]).unwrap();
            let read: Vec<Buf> = (11..14).map(|t| cpu.read_tensor(t).unwrap()).collect();
            assert_eq!(read, vec![relu.clone(), relu.clone(), neg.clone()]);
        }
    }

    /// A read into readied memory copies the tensor's contents into that
    /// very memory; readied memory of another length is given back and
    /// the read copies as before.
    #[test]
    fn a_read_fills_the_memory_readied_for_it() {
        let n = 30_011;
        let mut cpu = CpuBackend::new();
        cpu.create_tensor(5, &f32_desc(&[n])).unwrap();
        let contents = Buf::F32((0..n).map(|i| i as f32 * 0.5).collect());
        cpu.write_tensor(5, contents.clone()).unwrap();
        let read = |cpu: &mut CpuBackend, into: Buf| {
            let got = Arc::new(std::sync::Mutex::new(None));
            let g = got.clone();
            cpu.read_tensor_into_async(5, into, Box::new(move |r| *g.lock().unwrap() = Some(r)));
            let r = got.lock().unwrap().take().expect("done at once");
            r.unwrap()
        };
        let into = Buf::readied(DataType::Float32, n).expect("large enough to ready");
        let at = into.raw_bytes().as_ptr();
        let got = read(&mut cpu, into);
        assert!(got == contents);
        assert_eq!(
            got.raw_bytes().as_ptr(),
            at,
            "copied into the readied memory"
        );
        let got = read(&mut cpu, Buf::F32(vec![0.0; n - 1]));
        assert!(got == contents);
        let got = read(&mut cpu, Buf::I32(vec![0; n]));
        assert!(got == contents);
        // A destroyed tensor's read fails as before.
        cpu.destroy_tensor(5);
        let failed = Arc::new(std::sync::Mutex::new(None));
        let f = failed.clone();
        cpu.read_tensor_into_async(
            5,
            Buf::F32(vec![0.0; n]),
            Box::new(move |r| *f.lock().unwrap() = Some(r.is_err())),
        );
        assert_eq!(failed.lock().unwrap().take(), Some(true));
    }

    /// A dispatch writes a large output into the memory its tensor held
    /// (given to the pool just before the run), rather than into new
    /// memory, unless a read still holds that memory: then the read keeps
    /// the old contents, and the result goes elsewhere.
    #[test]
    fn dispatch_reuses_the_output_tensors_memory() {
        use crate::graph::args::Val;
        // An odd size, which no other test running beside this one asks
        // the shared pool for.
        let n = 70_001;
        let mut b = crate::graph::GraphBuilder::new();
        let x = b.input("x", f32_desc(&[n])).unwrap();
        let builder = b.id;
        let y = b.call("neg", &[Val::Operand { builder, id: x }]).unwrap()[0];
        let g = Arc::new(b.build(vec![("y".into(), y)]).unwrap());
        let mut cpu = CpuBackend::new();
        cpu.compile(1, g).unwrap();
        cpu.create_tensor(10, &f32_desc(&[n])).unwrap();
        cpu.create_tensor(11, &f32_desc(&[n])).unwrap();
        let at = |cpu: &CpuBackend| cpu.tensors[&11].data.raw_bytes().as_ptr();
        let neg = |k: f32| Buf::F32((0..n).map(|i| -(i as f32 + k)).collect());
        for k in 0..3 {
            cpu.write_tensor(10, Buf::F32((0..n).map(|i| i as f32 + k as f32).collect()))
                .unwrap();
            let before = at(&cpu);
            cpu.dispatch(1, &[10], &[11]).unwrap();
            assert_eq!(
                at(&cpu),
                before,
                "run {k}: the result is in the same memory"
            );
            assert!(*cpu.tensors[&11].data == neg(k as f32), "run {k}");
        }
        // A read in flight holds the contents: they stay as they were.
        let held = Arc::new(std::sync::Mutex::new(None));
        let h = held.clone();
        cpu.read_tensor_shared_async(11, Box::new(move |r| *h.lock().unwrap() = Some(r.unwrap())));
        let held = held.lock().unwrap().take().unwrap();
        cpu.write_tensor(10, Buf::F32((0..n).map(|i| i as f32 + 7.0).collect()))
            .unwrap();
        cpu.dispatch(1, &[10], &[11]).unwrap();
        assert!(*held == neg(2.0), "the read's contents are unchanged");
        assert!(*cpu.tensors[&11].data == neg(7.0));
        assert_ne!(at(&cpu), held.raw_bytes().as_ptr());
        // A run that fails (here for want of memory, a third tensor having
        // taken what the limit left) still leaves the output a buffer of
        // its size.
        let mut cpu = CpuBackend::new().with_memory_limit(Some(900_000));
        let mut b = crate::graph::GraphBuilder::new();
        let x = b.input("x", f32_desc(&[n])).unwrap();
        let builder = b.id;
        let y = b.call("neg", &[Val::Operand { builder, id: x }]).unwrap()[0];
        cpu.compile(1, Arc::new(b.build(vec![("y".into(), y)]).unwrap()))
            .unwrap();
        for t in 10..13 {
            cpu.create_tensor(t, &f32_desc(&[n])).unwrap();
        }
        assert!(cpu.dispatch(1, &[10], &[11]).is_err());
        assert_eq!(cpu.tensors[&11].data.len(), n);
    }

    /// matmul and gemm (B transposed) with constant B: compile packs B,
    /// dispatch uses the packed copy, and the results match a plain loop.
    #[test]
    fn constant_b_is_prepacked() {
        let (m, k, n) = (3, 5, 4);
        let a: Vec<f32> = (0..m * k).map(|i| i as f32 * 0.5 - 3.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i % 7) as f32 - 2.0).collect();
        // b^T, for gemm's bTranspose.
        let bt: Vec<f32> = (0..n * k).map(|t| b[(t % k) * n + t / k]).collect();
        let g = Graph {
            operands: vec![
                f32_desc(&[m, k]),
                f32_desc(&[k, n]),
                f32_desc(&[n, k]),
                f32_desc(&[m, n]),
                f32_desc(&[m, n]),
            ],
            sources: vec![
                Source::Input("a".into()),
                Source::Constant(bytes(&b)),
                Source::Constant(bytes(&bt)),
                Source::Node { node: 0, index: 0 },
                Source::Node { node: 1, index: 0 },
            ],
            nodes: vec![
                Node {
                    op: Op::Matmul,
                    inputs: vec![0, 1],
                    outputs: vec![3],
                    label: String::new(),
                },
                Node {
                    op: Op::Gemm(GemmParams {
                        alpha: 2.0,
                        beta: 1.0,
                        a_transpose: false,
                        b_transpose: true,
                        has_c: false,
                        m,
                        n,
                        k,
                    }),
                    inputs: vec![0, 2],
                    outputs: vec![4],
                    label: String::new(),
                },
            ],
            inputs: vec![("a".into(), 0)],
            outputs: vec![("mm".into(), 3), ("gemm".into(), 4)],
        };
        let g = Arc::new(g);
        let mut cpu = CpuBackend::new();
        cpu.compile(1, g.clone()).unwrap();
        assert_eq!(cpu.graphs[&1].packed.len(), 2);
        let out = cpu.compute(1, &g, vec![Buf::F32(a.clone())]).unwrap();
        let expect: Vec<f32> = (0..m * n)
            .map(|t| (0..k).map(|p| a[t / n * k + p] * b[p * n + t % n]).sum())
            .collect();
        assert_eq!(out[0], Buf::F32(expect.clone()));
        let twice: Vec<f32> = expect.iter().map(|x| 2.0 * x).collect();
        assert_eq!(out[1], Buf::F32(twice));
    }

    /// matmul + add of a constant vector runs as one node, and gives the
    /// bits of the two nodes, for a bias of shape [N] and [1, N], either
    /// operand order, a batched product, and a product the fusion must
    /// leave alone (its output is also a graph output).
    #[test]
    fn matmul_bias_is_fused_bitwise() {
        let (m, k, n) = (7, 300, 37);
        let a: Vec<f32> = (0..2 * m * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
            .collect();
        let b: Vec<f32> = (0..k * n)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) * 0.021)
            .collect();
        let bias: Vec<f32> = (0..n).map(|i| (i as f32 - 18.0) * 0.37).collect();
        for (bias_shape, swap) in [(vec![n], false), (vec![1, n], true)] {
            let g = Graph {
                operands: vec![
                    f32_desc(&[2, m, k]),
                    f32_desc(&[k, n]),
                    f32_desc(&bias_shape),
                    f32_desc(&[2, m, n]),
                    f32_desc(&[2, m, n]),
                    f32_desc(&[2, m, n]),
                    f32_desc(&[2, m, n]),
                ],
                sources: vec![
                    Source::Input("a".into()),
                    Source::Constant(bytes(&b)),
                    Source::Constant(bytes(&bias)),
                    Source::Node { node: 0, index: 0 },
                    Source::Node { node: 1, index: 0 },
                    Source::Node { node: 2, index: 0 },
                    Source::Node { node: 3, index: 0 },
                ],
                nodes: vec![
                    Node {
                        op: Op::Matmul,
                        inputs: vec![0, 1],
                        outputs: vec![3],
                        label: String::new(),
                    },
                    Node {
                        op: Op::Binary(BinaryKind::Add),
                        inputs: if swap { vec![2, 3] } else { vec![3, 2] },
                        outputs: vec![4],
                        label: String::new(),
                    },
                    // The same product, read by a graph output too.
                    Node {
                        op: Op::Matmul,
                        inputs: vec![0, 1],
                        outputs: vec![5],
                        label: String::new(),
                    },
                    Node {
                        op: Op::Binary(BinaryKind::Add),
                        inputs: vec![5, 2],
                        outputs: vec![6],
                        label: String::new(),
                    },
                ],
                inputs: vec![("a".into(), 0)],
                outputs: vec![("fused".into(), 4), ("mm".into(), 5), ("plain".into(), 6)],
            };
            let g = Arc::new(g);
            let mut cpu = CpuBackend::new();
            cpu.compile(1, g.clone()).unwrap();
            assert_eq!(cpu.graphs[&1].graph.nodes.len(), 3, "one add absorbed");
            let out = cpu.compute(1, &g, vec![Buf::F32(a.clone())]).unwrap();
            let (Buf::F32(fused), Buf::F32(plain)) = (&out[0], &out[2]) else {
                panic!("float32 outputs")
            };
            assert!(fused
                .iter()
                .zip(plain)
                .all(|(x, y)| x.to_bits() == y.to_bits()));
            let Buf::F32(mm) = &out[1] else { panic!() };
            let want: Vec<f32> = mm
                .iter()
                .enumerate()
                .map(|(t, x)| x + bias[t % n])
                .collect();
            assert_eq!(fused, &want);
        }
    }
}

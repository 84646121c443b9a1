//! The GPU backend on wgpu (Vulkan).
//!
//! Tensors are storage buffers holding the external byte layout of their
//! elements (rounded up to whole words). `compile()` turns a graph into a
//! flat list of [`Step`]s (pipeline, bind group, workgroup grid) once: it
//! uploads the constants, allocates one buffer per graph input and per
//! intermediate, and creates every bind group, so `dispatch()` only records
//! copies and dispatches into one command encoder and submits it without
//! waiting. Reads wait on the queue, which keeps them after the dispatches
//! submitted before them.
//!
//! wgpu reports most misuse through error callbacks, and panics when none
//! is set; every failure here becomes an [`Error`] instead: sizes are
//! checked against the device limits before wgpu sees them, device calls
//! that may fail run inside error scopes, and an uncaptured-error handler
//! collects whatever escapes them.
//!
//! Operator families live in their own files ([`elementwise`], [`matmul`])
//! and only build steps; this file owns the device, tensors and graphs.
//! Before the steps are built, [`qmatmul`] finds the products whose B is
//! dequantized constant weights: they read the packed codes themselves,
//! and the nodes that only computed B get no steps and no buffers.
//! `device.rs` chooses the adapter and keeps devices between contexts;
//! `read.rs` finishes reads.

mod constants;
mod conv;
mod convert;
mod device;
mod elementwise;
mod gather;
mod logical;
mod matmul;
mod movement;
mod norm;
mod qmatmul;
mod quantize;
mod read;
mod recurrent;
mod reduce;
mod shape;
#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::{profile, Backend, GraphId, TensorId};
use crate::error::{Error, Result};
use crate::graph::ops::activation::ActivationOp;
use crate::graph::ops::elementwise::{ClampParams, SoftmaxParams};
use crate::graph::ops::reduce::ReduceOp;
use crate::graph::ops::shape::{ConcatParams, SliceParams, TransposeParams};
use crate::graph::{Graph, Op, Source};
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

pub use device::AdapterHint;
use device::{block_on, open_device, AdapterKey, OpenDevice, DEVICES};
use read::{finish_read, MapResult, ReadJob, Reader};

/// Creates the GPU backend on the calling thread.
///
/// `power_preference` is the WebNN context option (`"default"`,
/// `"high-performance"` or `"low-power"`). Fails with NotSupportedError when
/// no Vulkan adapter exists or no device can be had from it.
pub fn create(power_preference: &str) -> Result<Box<dyn Backend>> {
    // A driver that panics while being probed must not take the context's
    // thread down with it.
    let pref = power_preference.to_string();
    std::panic::catch_unwind(move || GpuBackend::new(&pref))
        .unwrap_or_else(|_| Err(Error::not_supported("the GPU adapter failed to initialise")))
        .map(|b| Box::new(b) as Box<dyn Backend>)
}

/// Creates the GPU backend on the Vulkan adapter that `hint` names when
/// one matches it (see [`AdapterHint::matches`]), else on the default
/// adapter; also returns which of the two it took, in words.
pub fn create_matching(hint: &AdapterHint) -> Result<(Box<dyn Backend>, String)> {
    let hint = hint.clone();
    std::panic::catch_unwind(move || GpuBackend::matching(&hint))
        .unwrap_or_else(|_| Err(Error::not_supported("the GPU adapter failed to initialise")))
        .map(|(b, choice)| (Box::new(b) as Box<dyn Backend>, choice))
}

/// Whether this backend compiles operator `op` (a builder method name) with
/// data type `dt` for its operand `operand` (the IDL name that
/// `opSupportLimits()` uses: `input`, `indices`, `output`, ...; `""` for
/// any of them); `op == ""` asks whether tensors of `dt` can exist at all.
/// This is the one table behind both `compile()`'s refusals and what
/// `opSupportLimits()` reports for GPU contexts; each family answers for
/// its own operators.
pub fn supports(op: &str, operand: &str, dt: DataType) -> bool {
    match op {
        // Storage and reshape only move bytes, whatever their type.
        "" | "reshape" => true,
        _ => {
            elementwise::supports(op, operand, dt)
                || logical::supports(op, operand, dt)
                || shape::supports(op, operand, dt)
                || matmul::supports(op, operand, dt)
                || conv::supports(op, operand, dt)
                || reduce::supports(op, operand, dt)
                || movement::supports(op, operand, dt)
                || gather::supports(op, operand, dt)
                || norm::supports(op, operand, dt)
                || quantize::supports(op, operand, dt)
                || recurrent::supports(op, operand, dt)
        }
    }
}

/// Float32 and float16 (computed in f32): the types of float-only kernels.
pub(crate) fn is_float(dt: DataType) -> bool {
    matches!(dt, DataType::Float32 | DataType::Float16)
}

/// The types computed in one 32-bit word (every type but int64/uint64).
pub(crate) fn is_word(dt: DataType) -> bool {
    convert::words(dt) == 1
}

/// Buffers and descriptors of one node, for the operator families that
/// take several outputs or options: inputs in the node's order, outputs
/// likewise. Buffers hold the working representation ([`convert`]).
pub(crate) struct NodeIo<'a> {
    pub ins: &'a [&'a wgpu::Buffer],
    pub in_descs: &'a [&'a OperandDescriptor],
    pub outs: &'a [&'a wgpu::Buffer],
    pub out_descs: &'a [&'a OperandDescriptor],
}

/// A node's first input and first output, each with its descriptor.
type FirstIo<'a> = (
    &'a wgpu::Buffer,
    &'a OperandDescriptor,
    &'a wgpu::Buffer,
    &'a OperandDescriptor,
);

impl<'a> NodeIo<'a> {
    /// The first input and first output, or an OperationError naming `op`
    /// when the node lacks one (validation never builds such a node).
    pub fn first(&self, op: &str) -> Result<FirstIo<'a>> {
        match (
            self.ins.first(),
            self.in_descs.first(),
            self.outs.first(),
            self.out_descs.first(),
        ) {
            (Some(&i), Some(&id), Some(&o), Some(&od)) => Ok((i, id, o, od)),
            _ => Err(Error::operation(format!(
                "{op} needs an input and an output"
            ))),
        }
    }
}

/// Rounds a byte length up to a whole, non-zero number of 4-byte words:
/// wgpu requires copy and binding sizes to be multiples of 4, and zero-sized
/// bindings are invalid.
fn padded(bytes: u64) -> u64 {
    bytes.div_ceil(4).max(1) * 4
}

/// The WGSL scalar type elements of `dt` are computed in, for the types
/// held in one word (see [`convert`]); None for int64/uint64.
fn wgsl_type(dt: DataType) -> Option<&'static str> {
    is_word(dt).then(|| convert::compute_type(dt))
}

/// Bytes of an operand of `desc` in a graph's working representation.
fn working_bytes(desc: &OperandDescriptor) -> u64 {
    desc.element_count() as u64 * 4 * convert::words(desc.data_type)
}

/// The builder name of an operator, for messages.
fn op_name(op: &Op) -> &'static str {
    op.name()
}

/// The element strides of `shape` broadcast to `out` (numpy rules: `shape`
/// aligned to the right of `out`, size-1 and missing dimensions repeat with
/// stride 0). One stride per dimension of `out`.
fn broadcast_strides(shape: &[usize], out: &[usize]) -> Vec<u64> {
    let mut strides = vec![0u64; out.len()];
    let offset = out.len() - shape.len();
    let mut stride = 1u64;
    for (d, &size) in shape.iter().enumerate().rev() {
        if size != 1 {
            strides[offset + d] = stride;
        }
        stride *= size as u64;
    }
    strides
}

/// Converts a size or offset to a shader word, or fails when a tensor is
/// too large for 32-bit indexing.
fn word(v: u64) -> Result<u32> {
    u32::try_from(v)
        .map_err(|_| Error::operation(format!("{v} is too large for 32-bit GPU indexing")))
}

/// One compute dispatch of a compiled graph.
pub(crate) struct Step {
    pipeline: wgpu::ComputePipeline,
    bind_group: wgpu::BindGroup,
    /// Workgroup counts in x, y, z.
    groups: [u32; 3],
    /// The node it belongs to, as the profile names it (empty unless
    /// `WEBNN_GPU_PROFILE` is set).
    what: Arc<str>,
}

/// The device and what is shared by every graph: the pipeline cache and
/// the sink of uncaptured errors. Operator families build steps through it.
pub(crate) struct Gpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    limits: wgpu::Limits,
    /// Pipelines by shader source and entry point.
    pipelines: HashMap<(String, &'static str), wgpu::ComputePipeline>,
    /// Errors that no error scope caught (reported by wgpu's callback,
    /// possibly from another thread).
    uncaptured: Arc<Mutex<Vec<String>>>,
}

impl Gpu {
    /// Runs `f` inside error scopes and turns any error they catch, or any
    /// uncaptured error reported meanwhile, into an OperationError.
    fn scoped<T>(&self, what: &str, f: impl FnOnce() -> T) -> Result<T> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let internal = self.device.push_error_scope(wgpu::ErrorFilter::Internal);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let v = f();
        // Scopes pop in reverse order of their pushes.
        let errors = [
            block_on(validation.pop()),
            block_on(internal.pop()),
            block_on(oom.pop()),
        ];
        if let Some(e) = errors.into_iter().flatten().next() {
            return Err(Error::operation(format!("{what} failed on the GPU: {e}")));
        }
        self.check_uncaptured(what)?;
        Ok(v)
    }

    /// Reports the first error that escaped the scopes, if any.
    fn check_uncaptured(&self, what: &str) -> Result<()> {
        let mut errs = self.uncaptured.lock().unwrap_or_else(|p| p.into_inner());
        if errs.is_empty() {
            return Ok(());
        }
        let first = errs.remove(0);
        errs.clear();
        Err(Error::operation(format!(
            "{what} failed on the GPU: {first}"
        )))
    }

    /// A zero-filled buffer of at least `bytes` bytes (padded to words).
    fn buffer(&self, bytes: u64, usage: wgpu::BufferUsages, label: &str) -> Result<wgpu::Buffer> {
        let size = padded(bytes);
        if size > self.limits.max_buffer_size {
            return Err(Error::operation(format!(
                "{label}: {bytes} bytes exceed the GPU's largest buffer ({} bytes)",
                self.limits.max_buffer_size
            )));
        }
        self.scoped(label, || {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage,
                mapped_at_creation: false,
            })
        })
    }

    /// A storage buffer for tensors and intermediates.
    fn storage(&self, bytes: u64, label: &str) -> Result<wgpu::Buffer> {
        self.buffer(
            bytes,
            wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            label,
        )
    }

    /// A storage buffer holding `data` (padded with zero bytes).
    fn upload(&self, data: &[u8], label: &str) -> Result<wgpu::Buffer> {
        let buf = self.storage(data.len() as u64, label)?;
        self.write(&buf, data);
        Ok(buf)
    }

    /// A read-only parameter buffer of u32 words.
    fn params(&self, words: &[u32]) -> Result<wgpu::Buffer> {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        self.upload(&bytes, "parameters")
    }

    /// Queues a write of `data` at the start of `buf`, padding the tail to
    /// a whole word as wgpu requires.
    fn write(&self, buf: &wgpu::Buffer, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let whole = data.len() / 4 * 4;
        if whole > 0 {
            self.queue.write_buffer(buf, 0, &data[..whole]);
        }
        if whole < data.len() {
            let mut tail = [0u8; 4];
            tail[..data.len() - whole].copy_from_slice(&data[whole..]);
            self.queue.write_buffer(buf, whole as u64, &tail);
        }
    }

    /// The pipeline of `entry` in `source`, compiled once per device.
    fn pipeline(&mut self, source: String, entry: &'static str) -> Result<wgpu::ComputePipeline> {
        if let Some(p) = self.pipelines.get(&(source.clone(), entry)) {
            return Ok(p.clone());
        }
        let device = &self.device;
        let pipeline = self.scoped("compiling a shader", || {
            let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: None,
                source: wgpu::ShaderSource::Wgsl(source.as_str().into()),
            });
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: None,
                layout: None,
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
        })?;
        self.pipelines.insert((source, entry), pipeline.clone());
        Ok(pipeline)
    }

    /// A step running `entry` of `source` with `buffers` bound in order to
    /// bindings 0, 1, ... of group 0.
    fn step(
        &mut self,
        source: String,
        entry: &'static str,
        buffers: &[&wgpu::Buffer],
        groups: [u32; 3],
    ) -> Result<Step> {
        let max_binding = self.limits.max_storage_buffer_binding_size;
        if let Some(b) = buffers.iter().find(|b| b.size() > max_binding) {
            return Err(Error::operation(format!(
                "a tensor of {} bytes exceeds the GPU's largest storage binding ({max_binding} bytes)",
                b.size()
            )));
        }
        let max_groups = self.limits.max_compute_workgroups_per_dimension;
        if groups.iter().any(|&g| g > max_groups) {
            return Err(Error::operation(format!(
                "the work grid {groups:?} exceeds the GPU's limit of {max_groups} workgroups per dimension"
            )));
        }
        let pipeline = self.pipeline(source, entry)?;
        let device = &self.device;
        let bind_group = self.scoped("binding buffers", || {
            let layout = pipeline.get_bind_group_layout(0);
            let entries: Vec<wgpu::BindGroupEntry> = buffers
                .iter()
                .enumerate()
                .map(|(i, b)| wgpu::BindGroupEntry {
                    binding: i as u32,
                    resource: b.as_entire_binding(),
                })
                .collect();
            device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &layout,
                entries: &entries,
            })
        })?;
        Ok(Step {
            pipeline,
            bind_group,
            groups,
            what: Arc::from(""),
        })
    }

    /// The grid for `n` invocations of a 256-wide one-dimensional kernel:
    /// x up to the per-dimension limit, the rest spread over y (kernels
    /// index with `gid.y * nwg.x * 256 + gid.x`).
    fn grid_1d(&self, n: u64) -> Result<[u32; 3]> {
        let groups = n.div_ceil(256).max(1);
        let max = u64::from(self.limits.max_compute_workgroups_per_dimension.max(1));
        let x = groups.min(max);
        let y = groups.div_ceil(x);
        if y > max || n > u64::from(u32::MAX) {
            return Err(Error::operation(format!(
                "{n} elements are too many for one GPU dispatch"
            )));
        }
        Ok([x as u32, y as u32, 1])
    }
}

/// A tensor: its descriptor and its storage buffer.
struct GpuTensor {
    desc: OperandDescriptor,
    buffer: wgpu::Buffer,
}

/// A compiled graph.
struct CompiledGraph {
    /// Buffers owned by the graph: inputs, constants, intermediates.
    buffers: Vec<wgpu::Buffer>,
    /// The buffer (index into `buffers`) of each graph input, in
    /// `graph.inputs` order.
    inputs: Vec<usize>,
    /// The buffer of each graph output, in `graph.outputs` order.
    outputs: Vec<usize>,
    steps: Vec<Step>,
    /// The quantized weights its products read and its constants, shared
    /// with the context's other graphs (`qmatmul::Uploads`,
    /// `constants::Constants`). Held, not read: while a graph holds them,
    /// the context's next graphs find them.
    #[cfg_attr(not(test), allow(dead_code))]
    uploads: Vec<Arc<qmatmul::Uploaded>>,
    #[cfg_attr(not(test), allow(dead_code))]
    constants: Vec<Arc<wgpu::Buffer>>,
    /// How many products run on quantized weights (`qmatmul`), for tests.
    #[cfg(test)]
    quantized: usize,
}

/// The GPU backend.
pub struct GpuBackend {
    /// Set by wgpu's device-lost callback; the timeline then loses the
    /// context with this reason.
    lost: Arc<Mutex<Option<String>>>,
    gpu: Gpu,
    accelerated: bool,
    /// What the device was opened for (it goes back to the pool as such).
    power_preference: wgpu::PowerPreference,
    matched: Option<AdapterKey>,
    /// The adapter's name.
    adapter: String,
    tensors: HashMap<TensorId, GpuTensor>,
    graphs: HashMap<GraphId, CompiledGraph>,
    /// Whether products over quantized constant weights read the codes
    /// where they lie (`qmatmul`); `WEBNN_GPU_QMATMUL=off` runs them node
    /// by node, for comparisons.
    qmatmul: bool,
    /// Whether such products split K between lanes (`qmatmul::build`);
    /// the tests turn it off to compare with the node-by-node path bit
    /// for bit.
    qgemv: bool,
    /// Quantized weights uploaded by this context's graphs, found again
    /// by the next graph over the same constants.
    uploads: qmatmul::Uploads,
    /// Constants uploaded by this context's graphs, likewise.
    constants: constants::Constants,
    /// Finishes asynchronous reads (declared last: dropped, and joined,
    /// after everything else is released).
    reader: Reader,
}

impl Drop for GpuBackend {
    fn drop(&mut self) {
        if profile::GPU.enabled() {
            profile::GPU.report();
        }
        // Release this context's resources, let the GPU finish, and pool
        // the device unless it was lost.
        self.tensors.clear();
        self.graphs.clear();
        self.gpu.pipelines.clear();
        let _ = self.gpu.device.poll(wgpu::PollType::wait_indefinitely());
        if self
            .lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
        {
            DEVICES
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(OpenDevice {
                    power_preference: self.power_preference,
                    matched: self.matched.take(),
                    adapter: std::mem::take(&mut self.adapter),
                    accelerated: self.accelerated,
                    device: self.gpu.device.clone(),
                    queue: self.gpu.queue.clone(),
                });
        }
    }
}

impl GpuBackend {
    fn new(power_preference: &str) -> Result<Self> {
        let power_preference = match power_preference {
            "high-performance" => wgpu::PowerPreference::HighPerformance,
            "low-power" => wgpu::PowerPreference::LowPower,
            _ => wgpu::PowerPreference::None,
        };
        Self::on(open_device(power_preference, None)?)
    }

    /// On the adapter `hint` names, else the default one (see
    /// [`create_matching`]).
    fn matching(hint: &AdapterHint) -> Result<(Self, String)> {
        let backend = Self::on(open_device(wgpu::PowerPreference::None, Some(hint))?)?;
        let choice = match backend.matched {
            Some(_) => format!("the matching adapter {:?}", backend.adapter),
            None => format!(
                "the default adapter {:?} (none matched vendor {:?}, device {:?})",
                backend.adapter, hint.vendor, hint.device
            ),
        };
        Ok((backend, choice))
    }

    fn on(open: OpenDevice) -> Result<Self> {
        let OpenDevice {
            power_preference,
            matched,
            adapter,
            accelerated,
            device,
            queue,
        } = open;
        let uncaptured = Arc::new(Mutex::new(Vec::new()));
        let sink = uncaptured.clone();
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            sink.lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(e.to_string());
        }));
        let errors = uncaptured.clone();
        let lost = Arc::new(Mutex::new(None));
        let lost_slot = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            let why = format!("the GPU device was lost ({reason:?}): {message}");
            errors
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(why.clone());
            *lost_slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
        });
        let reader = Reader::start(device.clone())?;
        Ok(GpuBackend {
            gpu: Gpu {
                limits: device.limits(),
                device,
                queue,
                pipelines: HashMap::new(),
                uncaptured,
            },
            accelerated,
            power_preference,
            matched,
            adapter,
            lost,
            tensors: HashMap::new(),
            graphs: HashMap::new(),
            qmatmul: std::env::var("WEBNN_GPU_QMATMUL").map_or(true, |v| v != "off"),
            qgemv: true,
            uploads: qmatmul::Uploads::default(),
            constants: constants::Constants::default(),
            reader,
        })
    }

    /// Queues the copy of tensor `id` into a staging buffer and its
    /// mapping; the returned job completes once its submission is done
    /// (on failure, `done` comes back with the error).
    #[allow(clippy::result_large_err)]
    fn submit_read(
        &mut self,
        id: TensorId,
        done: super::ReadDone,
    ) -> std::result::Result<ReadJob, (Error, super::ReadDone)> {
        let Some(t) = self.tensors.get(&id) else {
            return Err((Error::invalid_state("the tensor is destroyed"), done));
        };
        let gpu = &self.gpu;
        let size = t.buffer.size();
        let staging = match gpu.buffer(
            size,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            "read staging",
        ) {
            Ok(b) => b,
            Err(e) => return Err((e, done)),
        };
        let mapped: MapResult = Arc::default();
        let slot = mapped.clone();
        let submitted = gpu.scoped("reading a tensor", || {
            let mut enc = gpu.device.create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(&t.buffer, 0, &staging, 0, size);
            let index = gpu.queue.submit([enc.finish()]);
            staging.map_async(wgpu::MapMode::Read, .., move |r| slot.put(r));
            index
        });
        match submitted {
            Ok(index) => Ok(ReadJob {
                index,
                staging,
                desc: t.desc.clone(),
                mapped,
                done,
            }),
            Err(e) => Err((e, done)),
        }
    }

    /// Submits the writes queued so far and lets wgpu free what finished
    /// work no longer needs (staging memory, dropped buffers), without
    /// waiting for the device.
    fn release_staged(&self) {
        self.gpu.queue.submit([]);
        let _ = self.gpu.device.poll(wgpu::PollType::Poll);
    }

    /// Checks that every node is supported before anything is allocated
    /// (each family refuses finer combinations when it builds its steps).
    fn check_supported(graph: &Graph) -> Result<()> {
        for node in &graph.nodes {
            let name = op_name(&node.op);
            if !crate::graph::ops::ALL_TYPES
                .iter()
                .any(|&t| supports(name, "", t))
            {
                return Err(Error::not_supported(format!(
                    "{name} is not supported on the GPU backend yet"
                )));
            }
            for &o in node.inputs.iter().chain(&node.outputs) {
                let dt = graph.operands[o].data_type;
                if !supports(name, "", dt) {
                    return Err(Error::not_supported(format!(
                        "{name} on {} is not supported on the GPU backend yet",
                        dt.name()
                    )));
                }
            }
        }
        Ok(())
    }

    fn build(&mut self, graph: &Graph) -> Result<CompiledGraph> {
        Self::check_supported(graph)?;
        // Products over quantized constant weights read the codes; the
        // nodes that only computed their B get no steps and no buffers,
        // and the constants only those nodes read are not uploaded.
        let fused = if self.qmatmul {
            qmatmul::recognize(graph)
        } else {
            HashMap::new()
        };
        let live = qmatmul::live_nodes(graph, &fused);
        // Whether node `n` reads its input `k` (a fused product does not
        // read B).
        let reads = |n: usize, k: usize| live[n] && !(k == 1 && fused.contains_key(&n));
        let qgemv = self.qgemv;
        let gpu = &mut self.gpu;
        let uploads = &mut self.uploads;
        uploads.forget_unused();
        let mut held = Vec::new();
        let mut buffers: Vec<wgpu::Buffer> = Vec::new();
        // The buffer of each operand (in the working representation), once
        // it has one.
        let mut slot: Vec<Option<usize>> = vec![None; graph.operands.len()];
        let mut steps = Vec::new();

        // Inputs arrive packed in their own slot; widened types get a
        // working copy through an unpack step.
        let mut inputs = Vec::with_capacity(graph.inputs.len());
        for (name, id) in &graph.inputs {
            let desc = &graph.operands[*id];
            let bytes = desc.byte_length() as u64;
            buffers.push(gpu.storage(bytes, &format!("input {name:?}"))?);
            inputs.push(buffers.len() - 1);
            if convert::widened(desc.data_type) {
                buffers.push(gpu.storage(working_bytes(desc), "widened input")?);
                let n = buffers.len();
                steps.extend(convert::unpack(
                    gpu,
                    desc.data_type,
                    desc.element_count() as u64,
                    &buffers[n - 2],
                    &buffers[n - 1],
                )?);
            }
            slot[*id] = Some(buffers.len() - 1);
        }
        if profile::GPU.enabled() {
            name_steps(&mut steps, "    (inputs widened)".into());
        }
        // Constants that some node reads, uploaded once, already widened
        // (once per context: the graphs over the same constants share them).
        let constants = &mut self.constants;
        constants.forget_unused();
        let mut shared = Vec::new();
        for (n, node) in graph.nodes.iter().enumerate() {
            for (k, &i) in node.inputs.iter().enumerate() {
                if slot[i].is_none() && reads(n, k) {
                    if let Source::Constant(bytes) = &graph.sources[i] {
                        let buf = constants.get(gpu, bytes, &graph.operands[i])?;
                        buffers.push((*buf).clone());
                        shared.push(buf);
                        slot[i] = Some(buffers.len() - 1);
                    }
                }
            }
        }

        // Intermediates share buffers: once the last node reading an
        // operand has its steps, the operand's buffer returns to a pool
        // that later outputs draw from, so a graph holds about as many
        // intermediate buffers as are alive at once, and a dispatch
        // allocates nothing. A node's outputs never share a buffer with
        // its own inputs (kernels read the inputs while writing them).
        let plan = Liveness::of(graph, &reads);
        let mut free: Vec<usize> = Vec::new();
        for (index, node) in graph.nodes.iter().enumerate() {
            if !live[index] {
                continue;
            }
            let fused_b = fused.get(&index);
            let out = node.outputs[0];
            // Reshape keeps the bytes: its output shares the input's buffer.
            if node.op == Op::Reshape {
                slot[out] = slot[node.inputs[0]];
                continue;
            }
            for &o in &node.outputs {
                let bytes = padded(working_bytes(&graph.operands[o]));
                // The smallest free buffer that fits, within twice the size.
                let reuse = free
                    .iter()
                    .enumerate()
                    .filter(|(_, &b)| {
                        let size = buffers[b].size();
                        size >= bytes && size <= bytes.saturating_mul(2)
                    })
                    .min_by_key(|(_, &b)| buffers[b].size())
                    .map(|(k, _)| k);
                slot[o] = Some(match reuse {
                    Some(k) => free.swap_remove(k),
                    None => {
                        buffers.push(gpu.storage(bytes, "intermediate")?);
                        buffers.len() - 1
                    }
                });
            }
            let buf = |id: usize| {
                slot[id]
                    .map(|s| &buffers[s])
                    .ok_or_else(|| Error::operation("an operand is used before it is computed"))
            };
            // A fused product's inputs without B (never computed).
            let read: Vec<usize> = node
                .inputs
                .iter()
                .enumerate()
                .filter(|&(k, _)| reads(index, k))
                .map(|(_, &i)| i)
                .collect();
            let ins: Vec<&wgpu::Buffer> = read.iter().map(|&i| buf(i)).collect::<Result<_>>()?;
            let in_descs: Vec<&OperandDescriptor> =
                read.iter().map(|&i| &graph.operands[i]).collect();
            let outs: Vec<&wgpu::Buffer> = node
                .outputs
                .iter()
                .map(|&o| buf(o))
                .collect::<Result<_>>()?;
            let out_descs: Vec<&OperandDescriptor> =
                node.outputs.iter().map(|&o| &graph.operands[o]).collect();
            let io = NodeIo {
                ins: &ins,
                in_descs: &in_descs,
                outs: &outs,
                out_descs: &out_descs,
            };
            let out_buf = outs[0];
            let out_desc = out_descs[0];
            let one = |s: Result<Option<Step>>| s.map(|s| s.into_iter().collect::<Vec<_>>());
            let step = match &node.op {
                _ if fused_b.is_some() => match (fused_b, ins.first()) {
                    (Some(q), Some(&a)) => qmatmul::build(
                        gpu,
                        uploads,
                        graph,
                        q,
                        a,
                        ins.get(1).copied(),
                        out_buf,
                        qgemv,
                    )
                    .map(|(s, up)| {
                        held.push(up);
                        vec![s]
                    }),
                    _ => Err(Error::operation("a quantized product lacks its input")),
                },
                Op::Binary(kind) => one(elementwise::binary(
                    gpu, *kind, &ins, &in_descs, out_buf, out_desc,
                )),
                Op::Unary(kind) => one(elementwise::unary(gpu, *kind, ins[0], out_buf, out_desc)),
                Op::Clamp(ClampParams { min, max }) => one(elementwise::clamp(
                    gpu, *min, *max, ins[0], out_buf, out_desc,
                )),
                Op::Matmul => one(matmul::matmul(gpu, &ins, &in_descs, out_buf, out_desc)),
                Op::Softmax(SoftmaxParams { axis }) => {
                    one(shape::softmax(gpu, *axis, ins[0], out_buf, out_desc))
                }
                Op::Transpose(TransposeParams { permutation }) => one(shape::transpose(
                    gpu,
                    permutation,
                    ins[0],
                    in_descs[0],
                    out_buf,
                    out_desc,
                )),
                Op::Slice(SliceParams {
                    starts, strides, ..
                }) => one(shape::slice(
                    gpu,
                    starts,
                    strides,
                    ins[0],
                    in_descs[0],
                    out_buf,
                    out_desc,
                )),
                Op::Concat(ConcatParams { axis }) => {
                    shape::concat(gpu, *axis, &ins, &in_descs, out_buf, out_desc)
                }
                Op::Cast(_) => one(shape::cast(gpu, ins[0], in_descs[0], out_buf, out_desc)),
                Op::Gemm(g) => one(matmul::gemm(gpu, g, &ins, &in_descs, out_buf, out_desc)),
                Op::Conv2d(c) => one(conv::conv2d(gpu, c, &ins, &in_descs, out_buf, out_desc)),
                Op::Pool2d(q) => one(conv::pool2d(gpu, q, ins[0], out_buf, out_desc)),
                Op::ConvTranspose2d(c) => conv::conv_transpose2d(gpu, c, &io),
                Op::Logical(o) => one(logical::logical(
                    gpu, *o, &ins, &in_descs, out_buf, out_desc,
                )),
                Op::Activation(a @ (ActivationOp::Prelu | ActivationOp::Where)) => one(
                    logical::activation(gpu, a, &ins, &in_descs, out_buf, out_desc),
                ),
                Op::Activation(a) => {
                    one(elementwise::activation(gpu, a, ins[0], out_buf, out_desc))
                }
                Op::Reduce(ReduceOp::Reduce { kind, axes, .. }) => one(reduce::reduce(
                    gpu,
                    *kind,
                    axes,
                    ins[0],
                    in_descs[0],
                    out_buf,
                    out_desc,
                )),
                Op::Reduce(r) => reduce::other(gpu, r, &io),
                Op::Gather(g) => gather::build(gpu, g, &io),
                Op::Movement(m) => movement::build(gpu, m, &io),
                Op::Quantize(q) => quantize::build(gpu, q, &io),
                Op::Norm(n) => norm::build(gpu, n, &io),
                Op::Recurrent(r) => recurrent::build(gpu, r, &io),
                Op::Reshape => Err(Error::operation("reshape has no steps")),
            }
            .map_err(|e| {
                if node.label.is_empty() {
                    e
                } else {
                    Error::new(
                        e.kind,
                        format!("{} (operator labelled {:?})", e.message, node.label),
                    )
                }
            })?;
            let first = steps.len();
            steps.extend(step);
            for &i in &read {
                if plan.frees_after(i, index) {
                    if let Some(b) = slot[i] {
                        if !free.contains(&b) {
                            free.push(b);
                        }
                    }
                }
            }
            // Operators that compute new values of a narrow type get them
            // rounded or wrapped back into the type; operators that only
            // move or select elements cannot leave it.
            if !moves_only(&node.op) {
                for (o, d) in outs.iter().zip(&out_descs) {
                    steps.extend(convert::fix_up(
                        gpu,
                        d.data_type,
                        d.element_count() as u64,
                        o,
                    )?);
                }
            }
            if profile::GPU.enabled() {
                // The node's steps, its rounding into a narrow type
                // included, are one row of the profile.
                name_steps(
                    &mut steps[first..],
                    format!(
                        "{index:3} {}{} {:?} -> {:?}",
                        node.op.name(),
                        if fused_b.is_some() {
                            " (quantized B)"
                        } else {
                            ""
                        },
                        in_descs.iter().map(|d| &d.shape).collect::<Vec<_>>(),
                        out_desc.shape
                    ),
                );
            }
        }

        // Outputs leave through their own packed slot.
        let converted = steps.len();
        let mut outputs = Vec::with_capacity(graph.outputs.len());
        for (name, id) in &graph.outputs {
            let s = slot[*id].ok_or_else(|| {
                Error::operation(format!("the output {name:?} is never computed"))
            })?;
            let desc = &graph.operands[*id];
            if convert::widened(desc.data_type) {
                buffers.push(gpu.storage(desc.byte_length() as u64, &format!("output {name:?}"))?);
                let n = buffers.len();
                steps.extend(convert::pack(
                    gpu,
                    desc.data_type,
                    desc.element_count() as u64,
                    &buffers[s],
                    &buffers[n - 1],
                )?);
                outputs.push(n - 1);
            } else {
                outputs.push(s);
            }
        }
        if profile::GPU.enabled() {
            name_steps(&mut steps[converted..], "    (outputs packed)".into());
        }
        Ok(CompiledGraph {
            buffers,
            inputs,
            outputs,
            steps,
            uploads: held,
            constants: shared,
            #[cfg(test)]
            quantized: fused.len(),
        })
    }
}

/// When each intermediate buffer's contents are last needed.
struct Liveness {
    /// The operand whose buffer each operand uses (reshape shares its
    /// input's).
    root: Vec<usize>,
    /// Per root operand: the index of the last node reading it, or None
    /// when it must live for the whole dispatch (graph inputs, constants,
    /// and whatever a graph output shares).
    last: Vec<Option<usize>>,
    /// Whether the root operand's buffer is an intermediate at all.
    intermediate: Vec<bool>,
}

impl Liveness {
    /// `reads(n, k)`: whether node `n` reads its input `k` when the graph
    /// runs (nodes that do not run, and fused products' B, read nothing).
    fn of(graph: &Graph, reads: &dyn Fn(usize, usize) -> bool) -> Liveness {
        let n = graph.operands.len();
        let mut root: Vec<usize> = (0..n).collect();
        let mut intermediate = vec![false; n];
        for node in &graph.nodes {
            for &o in &node.outputs {
                if node.op == Op::Reshape {
                    root[o] = root[node.inputs[0]];
                } else {
                    intermediate[o] = true;
                }
            }
        }
        let mut last: Vec<Option<usize>> = vec![None; n];
        for (index, node) in graph.nodes.iter().enumerate() {
            for (k, &i) in node.inputs.iter().enumerate() {
                if reads(index, k) {
                    last[root[i]] = Some(index);
                }
            }
        }
        for (_, id) in &graph.outputs {
            intermediate[root[*id]] = false;
        }
        Liveness {
            root,
            last,
            intermediate,
        }
    }

    /// Whether operand `id`'s buffer is free once node `index` has run.
    fn frees_after(&self, id: usize, index: usize) -> bool {
        let r = self.root[id];
        self.intermediate[r] && self.last[r] == Some(index)
    }
}

/// Operators whose outputs are elements of their inputs (moved, selected
/// or repeated), so a narrow type needs no fix-up after them.
fn moves_only(op: &Op) -> bool {
    match op {
        Op::Reshape | Op::Transpose(_) | Op::Concat(_) | Op::Slice(_) => true,
        Op::Movement(crate::graph::ops::movement::MovementOp::Resample2d { .. }) => false,
        Op::Movement(_) | Op::Gather(_) | Op::Logical(_) => true,
        Op::Activation(ActivationOp::Where) => true,
        Op::Binary(
            crate::graph::ops::elementwise::BinaryKind::Max
            | crate::graph::ops::elementwise::BinaryKind::Min,
        ) => true,
        // cast computes new values: to float16 they still need rounding,
        // to a narrow integer type wrapping (see `shape::cast`).
        Op::Cast(_) => false,
        _ => false,
    }
}

impl Backend for GpuBackend {
    fn device_type(&self) -> &'static str {
        "gpu"
    }

    fn accelerated(&self) -> bool {
        self.accelerated
    }

    fn lost_reason(&mut self) -> Option<String> {
        self.lost.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// A tensor must fit one storage binding, since kernels bind whole
    /// tensors.
    fn max_tensor_byte_length(&self) -> usize {
        let l = &self.gpu.limits;
        l.max_storage_buffer_binding_size.min(l.max_buffer_size) as usize
    }

    fn create_tensor(&mut self, id: TensorId, desc: &OperandDescriptor) -> Result<()> {
        let buffer = self.gpu.storage(desc.byte_length() as u64, "tensor")?;
        self.tensors.insert(
            id,
            GpuTensor {
                desc: desc.clone(),
                buffer,
            },
        );
        Ok(())
    }

    fn destroy_tensor(&mut self, id: TensorId) {
        // Dropping the buffer frees it once the queued work using it ends.
        self.tensors.remove(&id);
    }

    fn write_tensor(&mut self, id: TensorId, data: Buf) -> Result<()> {
        let t = self
            .tensors
            .get(&id)
            .ok_or_else(|| Error::invalid_state("the tensor is destroyed"))?;
        let bytes = data.to_bytes(t.desc.data_type);
        if data.len() != t.desc.element_count() || bytes.len() != t.desc.byte_length() {
            return Err(Error::type_error("the data does not fit the tensor"));
        }
        let gpu = &self.gpu;
        gpu.scoped("writing a tensor", || gpu.write(&t.buffer, &bytes))
    }

    fn read_tensor(&mut self, id: TensorId) -> Result<Buf> {
        let job = self.submit_read(id, Box::new(|_| {})).map_err(|(e, _)| e)?;
        let waited = self.gpu.device.poll(wgpu::PollType::Wait {
            submission_index: Some(job.index.clone()),
            timeout: None,
        });
        finish_read(&job.staging, &job.desc, &job.mapped, waited.err())
    }

    fn read_tensor_async(&mut self, id: TensorId, done: super::ReadDone) {
        let job = match self.submit_read(id, done) {
            Ok(job) => job,
            Err((e, done)) => return done(Err(e)),
        };
        match &self.reader.jobs {
            Some(jobs) => {
                if let Err(crossbeam_channel::SendError(job)) = jobs.send(job) {
                    (job.done)(Err(Error::unknown("the GPU reader has stopped")));
                }
            }
            None => (job.done)(Err(Error::unknown("the GPU reader has stopped"))),
        }
    }

    fn compile(&mut self, id: GraphId, graph: Arc<Graph>) -> Result<()> {
        let compiled = self.build(&graph);
        // The constant and parameter uploads wait in wgpu's queue for the
        // next submission, holding their staging memory (and the buffers
        // they write) until then: with no dispatch between builds, every
        // graph built, even destroyed, stayed in memory. Submit them now.
        self.release_staged();
        self.graphs.insert(id, compiled?);
        Ok(())
    }

    fn destroy_graph(&mut self, id: GraphId) {
        self.graphs.remove(&id);
        // wgpu frees dropped resources when the device is maintained.
        self.release_staged();
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
        let tensor = |id: &TensorId| {
            self.tensors
                .get(id)
                .map(|t| &t.buffer)
                .ok_or_else(|| Error::invalid_state("a tensor of the dispatch is destroyed"))
        };
        let ins: Vec<&wgpu::Buffer> = inputs.iter().map(tensor).collect::<Result<_>>()?;
        let outs: Vec<&wgpu::Buffer> = outputs.iter().map(tensor).collect::<Result<_>>()?;
        if ins.len() != cg.inputs.len() || outs.len() != cg.outputs.len() {
            return Err(Error::type_error(
                "the dispatch does not match the graph's inputs and outputs",
            ));
        }
        let gpu = &self.gpu;
        if profile::GPU.enabled() {
            return gpu.scoped("dispatching a graph", || profiled(gpu, cg, &ins, &outs));
        }
        gpu.scoped("dispatching a graph", || {
            let mut enc = gpu.device.create_command_encoder(&Default::default());
            cg.record(&mut enc, &ins, &outs);
            gpu.queue.submit([enc.finish()]);
        })
    }
}

impl CompiledGraph {
    /// A dispatch's commands: the inputs copied into the graph's own
    /// buffers, every step in one compute pass, the outputs copied out.
    fn record(
        &self,
        enc: &mut wgpu::CommandEncoder,
        ins: &[&wgpu::Buffer],
        outs: &[&wgpu::Buffer],
    ) {
        self.copy_in(enc, ins);
        run_steps(enc, &self.steps);
        self.copy_out(enc, outs);
    }

    fn copy_in(&self, enc: &mut wgpu::CommandEncoder, ins: &[&wgpu::Buffer]) {
        for (t, &s) in ins.iter().zip(&self.inputs) {
            let slot = &self.buffers[s];
            enc.copy_buffer_to_buffer(t, 0, slot, 0, t.size().min(slot.size()));
        }
    }

    fn copy_out(&self, enc: &mut wgpu::CommandEncoder, outs: &[&wgpu::Buffer]) {
        for (t, &s) in outs.iter().zip(&self.outputs) {
            let slot = &self.buffers[s];
            enc.copy_buffer_to_buffer(slot, 0, t, 0, t.size().min(slot.size()));
        }
    }
}

/// `steps` in one compute pass.
fn run_steps(enc: &mut wgpu::CommandEncoder, steps: &[Step]) {
    let mut pass = enc.begin_compute_pass(&Default::default());
    for step in steps {
        pass.set_pipeline(&step.pipeline);
        pass.set_bind_group(0, &step.bind_group, &[]);
        let [x, y, z] = step.groups;
        pass.dispatch_workgroups(x, y, z);
    }
}

/// Names `steps` as one row of the GPU profile.
fn name_steps(steps: &mut [Step], what: String) {
    let what: Arc<str> = what.into();
    for s in steps {
        s.what = what.clone();
    }
}

/// [`Backend::dispatch`] timed for `WEBNN_GPU_PROFILE`: first the whole
/// graph as a dispatch runs it, its recording and submission (the CPU's
/// time) apart from the wait for its end (the GPU's, less what overlapped
/// the recording); then again with each node's steps submitted alone and
/// waited for: the copies in, the steps of one node at a time, the copies
/// out, each timed into [`profile::GPU`]. The first run copies nothing
/// out, so the second reads the same inputs even where an output tensor
/// is also an input: the outputs are one dispatch's.
fn profiled(gpu: &Gpu, cg: &CompiledGraph, ins: &[&wgpu::Buffer], outs: &[&wgpu::Buffer]) {
    let t = std::time::Instant::now();
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    cg.copy_in(&mut enc, ins);
    run_steps(&mut enc, &cg.steps);
    gpu.queue.submit([enc.finish()]);
    let recorded = t.elapsed();
    let _ = gpu.device.poll(wgpu::PollType::wait_indefinitely());
    let steps = cg.steps.len();
    profile::GPU.record(
        || format!("    (whole graph, {steps} steps: recorded and submitted)"),
        recorded.as_nanos() as u64,
    );
    profile::GPU.record(
        || format!("    (whole graph, {steps} steps: waited for)"),
        (t.elapsed() - recorded).as_nanos() as u64,
    );
    let timed = |what: &dyn Fn() -> String, record: &dyn Fn(&mut wgpu::CommandEncoder)| {
        let t = std::time::Instant::now();
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        record(&mut enc);
        gpu.queue.submit([enc.finish()]);
        let _ = gpu.device.poll(wgpu::PollType::wait_indefinitely());
        profile::GPU.record(what, t.elapsed().as_nanos() as u64);
    };
    timed(&|| "    (copies of the inputs)".into(), &|enc| {
        cg.copy_in(enc, ins)
    });
    for run in cg.steps.chunk_by(|a, b| Arc::ptr_eq(&a.what, &b.what)) {
        timed(&|| run[0].what.to_string(), &|enc| run_steps(enc, run));
    }
    timed(&|| "    (copies of the outputs)".into(), &|enc| {
        cg.copy_out(enc, outs)
    });
}

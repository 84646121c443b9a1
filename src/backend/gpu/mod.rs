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

mod conv;
mod convert;
mod elementwise;
mod gather;
mod logical;
mod matmul;
mod movement;
mod norm;
mod quantize;
mod recurrent;
mod reduce;
mod shape;
#[cfg(test)]
pub(crate) mod testing;

use std::collections::HashMap;
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::Duration;

use super::{Backend, GraphId, TensorId};
use crate::error::{Error, Result};
use crate::graph::ops::activation::ActivationOp;
use crate::graph::ops::reduce::ReduceOp;
use crate::graph::{Graph, Op, Source};
use crate::tensor::Buf;
use crate::types::{DataType, OperandDescriptor};

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

/// The WebGPU adapter a context was created for: `GPUAdapterInfo`'s
/// `vendor` and `device` of the `GPUDevice` given to `createContext()`.
#[derive(Debug, Clone, Default)]
pub struct AdapterHint {
    pub vendor: String,
    pub device: String,
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

impl AdapterHint {
    /// Whether `info` is this adapter. WebGPU names the vendor (`"nvidia"`,
    /// or a PCI id in hex) where Vulkan numbers it, and the device either by
    /// id or by its name reduced to lowercase words joined by hyphens
    /// (Dawn: `"llvmpipe-llvm-15-0-6-256-bits-"` for Vulkan's
    /// `"llvmpipe (LLVM 15.0.6, 256 bits)"`); an empty device (browsers
    /// may hide it) leaves the vendor to decide.
    fn matches(&self, info: &wgpu::AdapterInfo) -> bool {
        let vendor = self.vendor.trim().to_ascii_lowercase();
        let vendor_ok =
            parse_id(&vendor) == Some(info.vendor) || vendor_ids(&vendor).contains(&info.vendor);
        let device = self.device.trim();
        let device_ok = device.is_empty()
            || parse_id(device) == Some(info.device)
            || (!slug(device).is_empty() && slug(device) == slug(&info.name));
        vendor_ok && device_ok
    }
}

/// The PCI (or Khronos) vendor ids of a WebGPU vendor name.
fn vendor_ids(name: &str) -> &'static [u32] {
    match name {
        "nvidia" => &[0x10de],
        "amd" | "ati" => &[0x1002, 0x1022],
        "intel" => &[0x8086],
        "apple" => &[0x106b],
        "arm" => &[0x13b5],
        "qualcomm" => &[0x5143],
        "imagination" | "img-tec" => &[0x1010],
        "microsoft" => &[0x1414],
        "samsung" => &[0x144d],
        "broadcom" => &[0x14e4],
        "google" => &[0x1ae0],
        // VK_VENDOR_ID_MESA: lavapipe and other Mesa software devices.
        "mesa" => &[0x10005],
        _ => &[],
    }
}

/// An id written as `0x10de` or `4318`.
fn parse_id(s: &str) -> Option<u32> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => s.parse().ok(),
        None => None,
    }
}

/// Lowercase letters and digits, each other run of characters one hyphen,
/// none at either end.
fn slug(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    while out.ends_with('-') {
        out.pop();
    }
    out
}

/// Which Vulkan adapter a pooled device was opened on, when it was chosen
/// by an [`AdapterHint`] rather than by power preference.
#[derive(Debug, Clone, PartialEq)]
struct AdapterKey {
    name: String,
    vendor: u32,
    device: u32,
}

impl AdapterKey {
    fn of(info: &wgpu::AdapterInfo) -> AdapterKey {
        AdapterKey {
            name: info.name.clone(),
            vendor: info.vendor,
            device: info.device,
        }
    }
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

/// Wakes the thread that runs [`block_on`].
struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Drives a future to completion on this thread. wgpu's native futures
/// (adapter and device requests, error scopes) are ready at once or soon
/// after; the timed park guards against a future that completes without
/// waking anyone.
fn block_on<F: Future>(f: F) -> F::Output {
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(1));
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
    /// Finishes asynchronous reads (declared last: dropped, and joined,
    /// after everything else is released).
    reader: Reader,
}

/// A read whose copy is submitted: the staging buffer being mapped.
struct ReadJob {
    index: wgpu::SubmissionIndex,
    staging: wgpu::Buffer,
    desc: OperandDescriptor,
    mapped: MapResult,
    done: super::ReadDone,
}

type MapResult = Arc<Mutex<Option<std::result::Result<(), wgpu::BufferAsyncError>>>>;

/// The thread that waits for submitted reads, so that the timeline thread
/// goes on with later commands (further dispatches are recorded and
/// submitted while a read is in flight). It waits for each read's own
/// submission, in order, then copies the mapped bytes out.
struct Reader {
    jobs: Option<crossbeam_channel::Sender<ReadJob>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reader {
    fn start(device: wgpu::Device) -> Result<Reader> {
        let (jobs, receiver) = crossbeam_channel::unbounded::<ReadJob>();
        let thread = std::thread::Builder::new()
            .name("webnn-gpu-reads".into())
            .spawn(move || {
                for job in receiver {
                    let waited = device.poll(wgpu::PollType::Wait {
                        submission_index: Some(job.index.clone()),
                        timeout: None,
                    });
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        finish_read(&job.staging, &job.desc, &job.mapped, waited.err())
                    }))
                    .unwrap_or_else(|_| Err(Error::unknown("reading a tensor failed on the GPU")));
                    (job.done)(result);
                }
            })
            .map_err(|e| Error::not_supported(format!("cannot start the GPU reader: {e}")))?;
        Ok(Reader {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        // Closing the channel ends the thread once queued reads are done.
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Copies a mapped staging buffer out into a tensor's elements.
fn finish_read(
    staging: &wgpu::Buffer,
    desc: &OperandDescriptor,
    mapped: &MapResult,
    poll_error: Option<wgpu::PollError>,
) -> Result<Buf> {
    if let Some(e) = poll_error {
        return Err(Error::unknown(format!(
            "reading a tensor failed on the GPU: {e}"
        )));
    }
    let result = mapped.lock().unwrap_or_else(|p| p.into_inner()).take();
    match result {
        Some(Ok(())) => {}
        Some(Err(e)) => {
            return Err(Error::unknown(format!(
                "reading a tensor failed on the GPU: {e}"
            )))
        }
        None => {
            return Err(Error::unknown(
                "reading a tensor did not complete on the GPU",
            ))
        }
    }
    let out = {
        let view = staging
            .get_mapped_range(..)
            .map_err(|e| Error::unknown(format!("reading a tensor failed on the GPU: {e:?}")))?;
        Buf::from_bytes(
            desc.data_type,
            &view[..desc.byte_length()],
            desc.element_count(),
        )
    };
    staging.unmap();
    out
}

/// An opened GPU: what [`DEVICES`] keeps between contexts.
struct OpenDevice {
    power_preference: wgpu::PowerPreference,
    /// Set when an [`AdapterHint`] chose the adapter: only contexts for
    /// that adapter take the device back.
    matched: Option<AdapterKey>,
    adapter: String,
    accelerated: bool,
    device: wgpu::Device,
    queue: wgpu::Queue,
}

/// Devices of destroyed contexts, reused by later ones and never destroyed.
/// NVIDIA's Vulkan driver (580, H100) crashes the process in the teardown
/// of a device (a destroyed context, or the exit hook's release of a live
/// one), while a device still open at exit is harmless; reusing also
/// saves the seconds that opening a device takes.
static DEVICES: Mutex<Vec<OpenDevice>> = Mutex::new(Vec::new());

/// Opens a device for `power_preference`, or on the adapter that `hint`
/// matches when one does, or takes back a pooled one.
fn open_device(
    power_preference: wgpu::PowerPreference,
    hint: Option<&AdapterHint>,
) -> Result<OpenDevice> {
    let instance = || {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::VULKAN;
        wgpu::Instance::new(desc)
    };
    // Only a hint needs the adapters listed before the pool is asked.
    let hinted = hint.map(|h| {
        let instance = instance();
        let found = block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN))
            .into_iter()
            .find(|a| h.matches(&a.get_info()));
        (instance, found)
    });
    let matched = hinted
        .as_ref()
        .and_then(|(_, a)| a.as_ref())
        .map(|a| AdapterKey::of(&a.get_info()));
    {
        let mut pool = DEVICES.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = pool
            .iter()
            .position(|d| d.power_preference == power_preference && d.matched == matched)
        {
            return Ok(pool.swap_remove(i));
        }
    }
    let adapter = match hinted {
        Some((_, Some(adapter))) => adapter,
        other => {
            let instance = other.map(|(i, _)| i).unwrap_or_else(instance);
            block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
                power_preference,
                ..Default::default()
            }))
            .map_err(|e| Error::not_supported(format!("no GPU adapter is available ({e})")))?
        }
    };
    let info = adapter.get_info();
    // The adapter's own limits: WebNN tensors easily exceed WebGPU's
    // conservative defaults (128 MiB storage bindings).
    let limits = adapter.limits();
    let (device, queue) = block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("webnn"),
        required_limits: limits,
        ..Default::default()
    }))
    .map_err(|e| Error::not_supported(format!("cannot open the GPU {:?}: {e}", info.name)))?;
    Ok(OpenDevice {
        power_preference,
        matched,
        adapter: info.name.clone(),
        accelerated: info.device_type != wgpu::DeviceType::Cpu,
        device,
        queue,
    })
}

impl Drop for GpuBackend {
    fn drop(&mut self) {
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
        let mapped: MapResult = Arc::new(Mutex::new(None));
        let slot = mapped.clone();
        let submitted = gpu.scoped("reading a tensor", || {
            let mut enc = gpu.device.create_command_encoder(&Default::default());
            enc.copy_buffer_to_buffer(&t.buffer, 0, &staging, 0, size);
            let index = gpu.queue.submit([enc.finish()]);
            staging.map_async(wgpu::MapMode::Read, .., move |r| {
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            });
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
        let gpu = &mut self.gpu;
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
        // Constants that some node reads, uploaded once, already widened.
        for node in &graph.nodes {
            for &i in &node.inputs {
                if slot[i].is_none() {
                    if let Source::Constant(bytes) = &graph.sources[i] {
                        let desc = &graph.operands[i];
                        let data =
                            convert::widen_constant(desc.data_type, bytes, desc.element_count())?;
                        buffers.push(gpu.upload(&data, "constant")?);
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
        let plan = Liveness::of(graph);
        let mut free: Vec<usize> = Vec::new();
        for (index, node) in graph.nodes.iter().enumerate() {
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
            let ins: Vec<&wgpu::Buffer> =
                node.inputs.iter().map(|&i| buf(i)).collect::<Result<_>>()?;
            let in_descs: Vec<&OperandDescriptor> =
                node.inputs.iter().map(|&i| &graph.operands[i]).collect();
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
                Op::Binary(kind) => one(elementwise::binary(
                    gpu, *kind, &ins, &in_descs, out_buf, out_desc,
                )),
                Op::Unary(kind) => one(elementwise::unary(gpu, *kind, ins[0], out_buf, out_desc)),
                Op::Clamp { min, max } => one(elementwise::clamp(
                    gpu, *min, *max, ins[0], out_buf, out_desc,
                )),
                Op::Matmul => one(matmul::matmul(gpu, &ins, &in_descs, out_buf, out_desc)),
                Op::Softmax { axis } => one(shape::softmax(gpu, *axis, ins[0], out_buf, out_desc)),
                Op::Transpose { permutation } => one(shape::transpose(
                    gpu,
                    permutation,
                    ins[0],
                    in_descs[0],
                    out_buf,
                    out_desc,
                )),
                Op::Slice {
                    starts, strides, ..
                } => one(shape::slice(
                    gpu,
                    starts,
                    strides,
                    ins[0],
                    in_descs[0],
                    out_buf,
                    out_desc,
                )),
                Op::Concat { axis } => {
                    shape::concat(gpu, *axis, &ins, &in_descs, out_buf, out_desc)
                }
                Op::Cast { .. } => one(shape::cast(gpu, ins[0], in_descs[0], out_buf, out_desc)),
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
            steps.extend(step);
            for &i in &node.inputs {
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
        }

        // Outputs leave through their own packed slot.
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
        Ok(CompiledGraph {
            buffers,
            inputs,
            outputs,
            steps,
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
    fn of(graph: &Graph) -> Liveness {
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
            for &i in &node.inputs {
                last[root[i]] = Some(index);
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
        Op::Reshape | Op::Transpose { .. } | Op::Concat { .. } | Op::Slice { .. } => true,
        Op::Movement(crate::graph::ops::movement::MovementOp::Resample2d { .. }) => false,
        Op::Movement(_) | Op::Gather(_) | Op::Logical(_) => true,
        Op::Activation(ActivationOp::Where) => true,
        Op::Binary(crate::graph::op::BinaryKind::Max | crate::graph::op::BinaryKind::Min) => true,
        // cast computes new values: to float16 they still need rounding,
        // to a narrow integer type wrapping (see `shape::cast`).
        Op::Cast { .. } => false,
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
        gpu.scoped("dispatching a graph", || {
            let mut enc = gpu.device.create_command_encoder(&Default::default());
            for (t, &s) in ins.iter().zip(&cg.inputs) {
                let slot = &cg.buffers[s];
                enc.copy_buffer_to_buffer(t, 0, slot, 0, t.size().min(slot.size()));
            }
            {
                let mut pass = enc.begin_compute_pass(&Default::default());
                for step in &cg.steps {
                    pass.set_pipeline(&step.pipeline);
                    pass.set_bind_group(0, &step.bind_group, &[]);
                    let [x, y, z] = step.groups;
                    pass.dispatch_workgroups(x, y, z);
                }
            }
            for (t, &s) in outs.iter().zip(&cg.outputs) {
                let slot = &cg.buffers[s];
                enc.copy_buffer_to_buffer(slot, 0, t, 0, t.size().min(slot.size()));
            }
            gpu.queue.submit([enc.finish()]);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;
    use crate::error::ErrorKind;
    use crate::graph::args::Val;
    use crate::graph::GraphBuilder;

    /// A destroyed context's device goes to the next context instead of
    /// being torn down (which crashes NVIDIA's driver, see `DEVICES`).
    /// "low-power": no other test opens devices for it, so the pool's
    /// low-power entries are this test's own.
    #[test]
    fn a_dropped_backend_leaves_its_device_to_the_next() {
        let first = match GpuBackend::new("low-power") {
            Ok(b) => b,
            Err(e) => {
                eprintln!("skipping the GPU test: {}", e.message);
                return;
            }
        };
        let device = first.gpu.device.clone();
        drop(first);
        let second = GpuBackend::new("low-power").expect("the pooled device");
        assert!(second.gpu.device == device);
        assert!(DEVICES
            .lock()
            .unwrap()
            .iter()
            .all(|d| d.power_preference != wgpu::PowerPreference::LowPower));
    }

    /// WebGPU's names of an adapter against Vulkan's numbers.
    #[test]
    fn adapter_hints_match_by_vendor_and_device() {
        let info = |name: &str, vendor, device| wgpu::AdapterInfo {
            name: name.into(),
            vendor,
            device,
            ..wgpu::AdapterInfo::new(wgpu::DeviceType::Cpu, wgpu::Backend::Vulkan)
        };
        let hint = |vendor: &str, device: &str| AdapterHint {
            vendor: vendor.into(),
            device: device.into(),
        };
        let lavapipe = info("llvmpipe (LLVM 15.0.6, 256 bits)", 0x10005, 0);
        let h100 = info("NVIDIA H100 80GB HBM3", 0x10de, 0x2330);
        assert!(hint("mesa", "llvmpipe-llvm-15-0-6-256-bits-").matches(&lavapipe));
        assert!(!hint("mesa", "llvmpipe-llvm-16-0-6-256-bits-").matches(&lavapipe));
        assert!(!hint("nvidia", "llvmpipe-llvm-15-0-6-256-bits-").matches(&lavapipe));
        assert!(hint("nvidia", "0x2330").matches(&h100));
        assert!(hint("0x10de", "").matches(&h100));
        assert!(hint("NVIDIA", "nvidia-h100-80gb-hbm3").matches(&h100));
        assert!(!hint("nvidia", "0x2331").matches(&h100));
        assert!(!hint("", "").matches(&h100));
        assert!(!hint("unknown", "---").matches(&h100));
    }

    #[test]
    fn device_identity() {
        let Some(be) = backend() else { return };
        assert_eq!(be.device_type(), "gpu");
        eprintln!("GPU backend, accelerated: {}", be.accelerated());
    }

    #[test]
    fn binary_broadcasting() {
        let Some(mut be) = backend() else { return };
        let cases: &[(&[usize], &[usize])] = &[
            (&[7, 9], &[7, 9]),
            (&[2, 3, 4], &[3, 1]),
            (&[4, 1, 5], &[1, 3, 1]),
            (&[], &[2, 2]),
            (&[1, 5], &[1, 1]),
            (&[1], &[1]),
            (&[3, 1, 1, 300], &[2, 300]),
        ];
        let kinds: &[(&str, BinaryFn)] = &[
            ("add", |x, y| x + y),
            ("sub", |x, y| x - y),
            ("mul", |x, y| x * y),
            ("div", |x, y| x / y),
            ("max", f32::max),
            ("min", f32::min),
        ];
        for (n, (sa, sb)) in cases.iter().enumerate() {
            let out_shape = crate::graph::ops::broadcast_shapes(sa, sb).unwrap();
            let count: usize = out_shape.iter().product();
            let a = random(sa.iter().product(), n as u64 * 2 + 1);
            let b = random(sb.iter().product(), n as u64 * 2 + 2);
            for (name, f) in kinds {
                let g = op_graph(name, DataType::Float32, &[sa, sb], &[]).unwrap();
                let out = run(&mut be, g, vec![Buf::F32(a.clone()), Buf::F32(b.clone())]).unwrap();
                let want: Vec<f32> = (0..count)
                    .map(|i| {
                        f(
                            a[broadcast_index(&out_shape, sa, i)],
                            b[broadcast_index(&out_shape, sb, i)],
                        )
                    })
                    .collect();
                assert_close(
                    &f32s(&out[0]),
                    &want,
                    1e-6,
                    &format!("{name} {sa:?} {sb:?}"),
                );
            }
        }
    }

    #[test]
    fn pow_float_and_int() {
        let Some(mut be) = backend() else { return };
        let x = vec![2.0f32, -2.0, -2.0, 0.0, 0.0, 4.0, -8.0, 1.5];
        let y = vec![3.0f32, 2.0, 3.0, 2.0, 0.0, 0.5, 0.5, -1.0];
        let g = op_graph("pow", DataType::Float32, &[&[8], &[8]], &[]).unwrap();
        let out = run(&mut be, g, vec![Buf::F32(x.clone()), Buf::F32(y.clone())]).unwrap();
        let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a.powf(*b)).collect();
        assert_close(&f32s(&out[0]), &want, 1e-5, "pow float32");

        let x = vec![2i32, -3, 5, 1, -1, 7];
        let y = vec![10i32, 3, 0, -4, -3, 2];
        let g = op_graph("pow", DataType::Int32, &[&[6], &[6]], &[]).unwrap();
        let out = run(&mut be, g, vec![Buf::I32(x), Buf::I32(y)]).unwrap();
        assert_eq!(out[0], Buf::I32(vec![1024, -27, 1, 1, -1, 49]));
    }

    #[test]
    fn integer_binary() {
        let Some(mut be) = backend() else { return };
        let g = op_graph("add", DataType::Int32, &[&[2, 3], &[3]], &[]).unwrap();
        let out = run(
            &mut be,
            g,
            vec![
                Buf::I32(vec![1, 2, 3, 4, 5, 6]),
                Buf::I32(vec![10, -20, 30]),
            ],
        )
        .unwrap();
        assert_eq!(out[0], Buf::I32(vec![11, -18, 33, 14, -15, 36]));
        let g = op_graph("mul", DataType::Uint32, &[&[3], &[1]], &[]).unwrap();
        let out = run(
            &mut be,
            g,
            vec![Buf::U32(vec![1, 2, 4_000_000_000]), Buf::U32(vec![1])],
        )
        .unwrap();
        assert_eq!(out[0], Buf::U32(vec![1, 2, 4_000_000_000]));
    }

    #[test]
    fn unary_ops() {
        let Some(mut be) = backend() else { return };
        let mut x = random(1000, 7);
        x.extend([0.0, -0.0, 30.0, -30.0, 100.0, -100.0]);
        let kinds: &[(&str, UnaryFn)] = &[
            ("abs", f32::abs),
            ("neg", |v| -v),
            ("exp", f32::exp),
            ("relu", |v| v.max(0.0)),
            ("sigmoid", |v| 1.0 / (1.0 + (-v).exp())),
            ("tanh", f32::tanh),
        ];
        for (name, f) in kinds {
            let g = op_graph(name, DataType::Float32, &[&[x.len()]], &[]).unwrap();
            let out = run(&mut be, g, vec![Buf::F32(x.clone())]).unwrap();
            let want: Vec<f32> = x.iter().map(|&v| f(v)).collect();
            assert_close(&f32s(&out[0]), &want, 1e-5, name);
        }
        let pos: Vec<f32> = x.iter().map(|v| v.abs() + 0.01).collect();
        for (name, f) in [("log", f32::ln as UnaryFn), ("sqrt", f32::sqrt)] {
            let g = op_graph(name, DataType::Float32, &[&[pos.len()]], &[]).unwrap();
            let out = run(&mut be, g, vec![Buf::F32(pos.clone())]).unwrap();
            let want: Vec<f32> = pos.iter().map(|&v| f(v)).collect();
            assert_close(&f32s(&out[0]), &want, 1e-5, name);
        }
        let g = op_graph("relu", DataType::Int32, &[&[4]], &[]).unwrap();
        let out = run(&mut be, g, vec![Buf::I32(vec![-5, 0, 3, i32::MIN])]).unwrap();
        assert_eq!(out[0], Buf::I32(vec![0, 0, 3, 0]));
    }

    /// More elements than one grid dimension holds: the rest go to y.
    #[test]
    fn large_elementwise_grid() {
        let Some(mut be) = backend() else { return };
        let n = be.gpu.limits.max_compute_workgroups_per_dimension as usize * 256 + 1000;
        let x: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let g = op_graph("neg", DataType::Float32, &[&[n]], &[]).unwrap();
        let out = run(&mut be, g, vec![Buf::F32(x)]).unwrap();
        let got = f32s(&out[0]);
        assert_eq!(got.len(), n);
        if let Some(i) = (0..n).find(|&i| got[i] != -(i as f32)) {
            panic!("element {i} is {}, expected {}", got[i], -(i as f32));
        }
    }

    #[test]
    fn clamp_float_and_int() {
        let Some(mut be) = backend() else { return };
        let x = random(777, 3);
        let opts = Val::Dict(vec![
            ("minValue".into(), Val::Number(-0.5)),
            ("maxValue".into(), Val::Number(1.25)),
        ]);
        let g = op_graph("clamp", DataType::Float32, &[&[777]], &[opts]).unwrap();
        let out = run(&mut be, g, vec![Buf::F32(x.clone())]).unwrap();
        let want: Vec<f32> = x.iter().map(|v| v.clamp(-0.5, 1.25)).collect();
        assert_close(&f32s(&out[0]), &want, 0.0, "clamp");

        // Only a lower bound: the upper one is +infinity.
        let opts = Val::Dict(vec![("minValue".into(), Val::Number(0.0))]);
        let g = op_graph("clamp", DataType::Float32, &[&[777]], &[opts]).unwrap();
        let out = run(&mut be, g, vec![Buf::F32(x.clone())]).unwrap();
        let want: Vec<f32> = x.iter().map(|v| v.max(0.0)).collect();
        assert_close(&f32s(&out[0]), &want, 0.0, "clamp min only");

        let opts = Val::Dict(vec![
            ("minValue".into(), Val::Number(-3.0)),
            ("maxValue".into(), Val::Number(2.0)),
        ]);
        let g = op_graph("clamp", DataType::Int32, &[&[5]], &[opts]).unwrap();
        let out = run(&mut be, g, vec![Buf::I32(vec![-10, -3, 0, 2, 99])]).unwrap();
        assert_eq!(out[0], Buf::I32(vec![-3, -3, 0, 2, 2]));
    }

    /// A plain reference product with numpy batch broadcasting.
    fn matmul_ref(a: &[f32], sa: &[usize], b: &[f32], sb: &[usize], so: &[usize]) -> Vec<f32> {
        let (ra, rb, ro) = (sa.len(), sb.len(), so.len());
        let (m, k, n) = (sa[ra - 2], sa[ra - 1], sb[rb - 1]);
        let batch = &so[..ro - 2];
        let batches: usize = batch.iter().product();
        let mut out = vec![0f32; batches * m * n];
        for z in 0..batches {
            let za = broadcast_index(batch, &sa[..ra - 2], z);
            let zb = broadcast_index(batch, &sb[..rb - 2], z);
            for i in 0..m {
                for j in 0..n {
                    let mut s = 0f64;
                    for t in 0..k {
                        s += a[za * m * k + i * k + t] as f64 * b[zb * k * n + t * n + j] as f64;
                    }
                    out[z * m * n + i * n + j] = s as f32;
                }
            }
        }
        out
    }

    #[test]
    fn matmul_shapes() {
        let Some(mut be) = backend() else { return };
        let cases: &[(&[usize], &[usize])] = &[
            (&[3, 5], &[5, 7]),
            (&[2, 33, 17], &[17, 65]),
            (&[1, 1], &[1, 1]),
            (&[2, 1, 4, 3], &[3, 3, 2]),
            (&[130, 70], &[70, 129]),
            (&[1, 64, 16], &[2, 16, 64]),
            (&[5, 1], &[1, 6]),
        ];
        for (n, (sa, sb)) in cases.iter().enumerate() {
            let a = random(sa.iter().product(), 100 + n as u64);
            let b = random(sb.iter().product(), 200 + n as u64);
            let g = op_graph("matmul", DataType::Float32, &[sa, sb], &[]).unwrap();
            let so = g.operands[g.outputs[0].1].shape.clone();
            let out = run(&mut be, g, vec![Buf::F32(a.clone()), Buf::F32(b.clone())]).unwrap();
            let want = matmul_ref(&a, sa, &b, sb, &so);
            assert_close(
                &f32s(&out[0]),
                &want,
                1e-4,
                &format!("matmul {sa:?} x {sb:?}"),
            );
        }
    }

    /// relu(matmul(reshape(x + c1), w)): constants, intermediates and a
    /// reshape alias in one graph.
    #[test]
    fn chained_graph_with_constants() {
        let Some(mut be) = backend() else { return };
        let mut b = GraphBuilder::new();
        let x = b.input("x", desc(DataType::Float32, &[2, 6])).unwrap();
        let c1v = random(6, 11);
        let wv = random(12, 12);
        let bytes =
            |v: &[f32]| Arc::new(v.iter().flat_map(|f| f.to_le_bytes()).collect::<Vec<u8>>());
        let c1 = b
            .constant(desc(DataType::Float32, &[6]), bytes(&c1v))
            .unwrap();
        let w = b
            .constant(desc(DataType::Float32, &[3, 4]), bytes(&wv))
            .unwrap();
        let s = b.call("add", &[operand(&b, x), operand(&b, c1)]).unwrap()[0];
        let shape = Val::List(vec![Val::Number(4.0), Val::Number(3.0)]);
        let r = b.call("reshape", &[operand(&b, s), shape]).unwrap()[0];
        let m = b.call("matmul", &[operand(&b, r), operand(&b, w)]).unwrap()[0];
        let out = b.call("relu", &[operand(&b, m)]).unwrap()[0];
        let g = b
            .build(vec![("out".into(), out), ("sum".into(), r)])
            .unwrap();
        let xv = random(12, 13);
        let sum: Vec<f32> = (0..12).map(|i| xv[i] + c1v[i % 6]).collect();
        let want: Vec<f32> = matmul_ref(&sum, &[4, 3], &wv, &[3, 4], &[4, 4])
            .into_iter()
            .map(|v| v.max(0.0))
            .collect();
        let g = Arc::new(g);
        be.compile(5, g.clone()).unwrap();
        // Twice: a compiled graph is reusable.
        for _ in 0..2 {
            let out = be.compute(5, &g, vec![Buf::F32(xv.clone())]).unwrap();
            assert_close(&f32s(&out[0]), &want, 1e-5, "chained output");
            assert_close(&f32s(&out[1]), &sum, 0.0, "reshaped sum");
        }
    }

    #[test]
    fn tensors_round_trip() {
        let Some(mut be) = backend() else { return };
        be.create_tensor(1, &desc(DataType::Float32, &[3])).unwrap();
        assert_eq!(be.read_tensor(1).unwrap(), Buf::F32(vec![0.0; 3]));
        be.write_tensor(1, Buf::F32(vec![1.0, -2.0, 3.5])).unwrap();
        assert_eq!(be.read_tensor(1).unwrap(), Buf::F32(vec![1.0, -2.0, 3.5]));
        // Zero elements, and a type whose byte length is not whole words.
        be.create_tensor(2, &desc(DataType::Float32, &[0, 4]))
            .unwrap();
        assert_eq!(be.read_tensor(2).unwrap(), Buf::F32(vec![]));
        be.create_tensor(3, &desc(DataType::Int8, &[3])).unwrap();
        be.write_tensor(3, Buf::I8(vec![-1, 2, -3])).unwrap();
        assert_eq!(be.read_tensor(3).unwrap(), Buf::I8(vec![-1, 2, -3]));
        assert_eq!(
            be.write_tensor(1, Buf::F32(vec![1.0])).unwrap_err().kind,
            ErrorKind::Type
        );
        be.destroy_tensor(1);
        assert_eq!(be.read_tensor(1).unwrap_err().kind, ErrorKind::InvalidState);
    }

    /// An asynchronous read returns at once, sees the contents as of its
    /// place in the queue (not later writes), and completes on the reader
    /// thread; a read of a destroyed tensor completes with the error.
    #[test]
    fn asynchronous_reads() {
        let Some(mut be) = backend() else { return };
        be.create_tensor(1, &desc(DataType::Float16, &[5])).unwrap();
        let first = Buf::f16_from_f32(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        be.write_tensor(1, first.clone()).unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        for k in 0..3 {
            let tx = tx.clone();
            be.read_tensor_async(1, Box::new(move |r| tx.send((k, r)).unwrap()));
        }
        be.write_tensor(1, Buf::f16_from_f32(&[0.5; 5])).unwrap();
        let tx2 = tx.clone();
        be.read_tensor_async(1, Box::new(move |r| tx2.send((3, r)).unwrap()));
        be.read_tensor_async(99, Box::new(move |r| tx.send((4, r)).unwrap()));
        let mut got: Vec<(i32, Result<Buf>)> = (0..5)
            .map(|_| rx.recv_timeout(Duration::from_secs(60)).unwrap())
            .collect();
        got.sort_by_key(|(k, _)| *k);
        for (k, r) in &got[..3] {
            assert_eq!(r.as_ref().unwrap(), &first, "read {k}");
        }
        assert_eq!(got[3].1.as_ref().unwrap(), &Buf::f16_from_f32(&[0.5; 5]));
        assert_eq!(got[4].1.as_ref().unwrap_err().kind, ErrorKind::InvalidState);
    }

    /// Dispatch on tensors, then read: the queue keeps the order.
    #[test]
    fn dispatch_on_tensors() {
        let Some(mut be) = backend() else { return };
        let g = Arc::new(op_graph("sub", DataType::Float32, &[&[2, 2], &[2]], &[]).unwrap());
        be.compile(9, g.clone()).unwrap();
        be.create_tensor(10, &desc(DataType::Float32, &[2, 2]))
            .unwrap();
        be.create_tensor(11, &desc(DataType::Float32, &[2]))
            .unwrap();
        be.create_tensor(12, &desc(DataType::Float32, &[2, 2]))
            .unwrap();
        be.write_tensor(10, Buf::F32(vec![1.0, 2.0, 3.0, 4.0]))
            .unwrap();
        be.write_tensor(11, Buf::F32(vec![0.5, 1.0])).unwrap();
        be.dispatch(9, &[10, 11], &[12]).unwrap();
        assert_eq!(
            be.read_tensor(12).unwrap(),
            Buf::F32(vec![0.5, 1.0, 2.5, 3.0])
        );
        // The output fed back as an input, written in the same dispatch.
        be.dispatch(9, &[12, 11], &[12]).unwrap();
        assert_eq!(
            be.read_tensor(12).unwrap(),
            Buf::F32(vec![0.0, 0.0, 2.0, 2.0])
        );
        assert_eq!(
            be.dispatch(9, &[10, 99], &[12]).unwrap_err().kind,
            ErrorKind::InvalidState
        );
    }

    /// Random data of `dt`: floats in [-2, 2), integers in [-50, 50) (or
    /// [0, 100) unsigned), uint8 booleans 0/1.
    /// float16, the 8- and 4-bit integers and int64 go through the
    /// unpack, fix-up and pack steps around ordinary kernels.
    #[test]
    fn narrow_types_match_the_cpu() {
        use DataType::*;
        let Some(mut be) = backend() else { return };
        for dt in [Float16, Int8, Uint8] {
            for op in ["add", "sub", "mul", "max"] {
                check_vs_cpu(&mut be, op, &[dt, dt], &[&[3, 5], &[5]], &[], 0.0);
            }
        }
        for dt in [Float16, Int8] {
            check_vs_cpu(&mut be, "relu", &[dt], &[&[7, 3]], &[], 0.0);
        }
        check_vs_cpu(&mut be, "reduceSum", &[Float16], &[&[4, 9]], &[], 1e-3);
        for dt in [
            Float16, Int8, Uint8, Int4, Uint4, Int64, Uint64, Float32, Int32, Uint32,
        ] {
            check_vs_cpu(&mut be, "transpose", &[dt], &[&[3, 1, 5]], &[], 0.0);
            check_vs_cpu(
                &mut be,
                "slice",
                &[dt],
                &[&[4, 6]],
                &[list(&[1.0, 2.0]), list(&[2.0, 3.0])],
                0.0,
            );
            for to in [
                "float32", "float16", "int32", "uint32", "int64", "uint64", "int8", "uint8",
                "int4", "uint4",
            ] {
                check_vs_cpu(&mut be, "cast", &[dt], &[&[33]], &[s(to)], 0.0);
            }
        }
        check_vs_cpu(
            &mut be,
            "matmul",
            &[Float16, Float16],
            &[&[5, 7], &[7, 3]],
            &[],
            1e-3,
        );
        check_vs_cpu(&mut be, "exp", &[Float16], &[&[61]], &[], 1e-3);
        check_vs_cpu(&mut be, "div", &[Int8, Int8], &[&[4, 4], &[4]], &[], 0.0);
    }

    /// A long chain keeps a few intermediate buffers alive, not one per
    /// node, and still computes what the CPU computes.
    #[test]
    fn intermediates_share_buffers() {
        let Some(mut be) = backend() else { return };
        let mut b = GraphBuilder::new();
        let x = b.input("x", desc(F, &[3, 67])).unwrap();
        let mut y = x;
        for k in 0..24 {
            let op = if k % 3 == 0 { "relu" } else { "exp" };
            let t = b.call(op, &[operand(&b, y)]).unwrap()[0];
            let t = b
                .call("reshape", &[operand(&b, t), list(&[67.0, 3.0])])
                .unwrap()[0];
            let t = b
                .call("reshape", &[operand(&b, t), list(&[3.0, 67.0])])
                .unwrap()[0];
            y = b.call("mul", &[operand(&b, t), operand(&b, x)]).unwrap()[0];
        }
        let g = b.build(vec![("y".into(), y)]).unwrap();
        let compiled = be.build(&g).unwrap();
        // One input slot plus a handful of intermediates (48 nodes compute).
        assert!(
            compiled.buffers.len() <= 5,
            "{} buffers",
            compiled.buffers.len()
        );
        let input = random_buf(F, 3 * 67, 7);
        let mut cpu = crate::backend::cpu::CpuBackend::new();
        let g = Arc::new(g);
        cpu.compile(1, g.clone()).unwrap();
        let want = cpu.compute(1, &g, vec![input.clone()]).unwrap();
        be.compile(1, g.clone()).unwrap();
        let got = be.compute(1, &g, vec![input]).unwrap();
        assert_close(&f32s(&got[0]), &f32s(&want[0]), 1e-4, "chain");
    }

    #[test]
    fn softmax_axes() {
        let Some(mut be) = backend() else { return };
        for (shape, axis) in [
            (&[3usize, 7][..], 1.0),
            (&[3, 7], 0.0),
            (&[2, 5, 1, 9], 1.0),
            (&[2, 5, 1, 9], 2.0),
            (&[300, 3], 1.0),
            (&[1], 0.0),
        ] {
            check_vs_cpu(&mut be, "softmax", &[F], &[shape], &[n(axis)], 1e-5);
        }
    }

    #[test]
    fn movement_ops() {
        let Some(mut be) = backend() else { return };
        for dt in [F, I, U] {
            check_vs_cpu(&mut be, "transpose", &[dt], &[&[3, 5, 7]], &[], 0.0);
            let perm = dict(&[("permutation", list(&[1.0, 3.0, 0.0, 2.0]))]);
            check_vs_cpu(&mut be, "transpose", &[dt], &[&[2, 1, 17, 3]], &[perm], 0.0);
            check_vs_cpu(&mut be, "transpose", &[dt], &[&[]], &[], 0.0);
            check_vs_cpu(
                &mut be,
                "slice",
                &[dt],
                &[&[7, 9, 5]],
                &[list(&[1.0, 0.0, 2.0]), list(&[3.0, 9.0, 3.0])],
                0.0,
            );
            check_vs_cpu(
                &mut be,
                "slice",
                &[dt],
                &[&[7, 9, 5]],
                &[
                    list(&[1.0, 2.0, 0.0]),
                    list(&[5.0, 7.0, 5.0]),
                    dict(&[("strides", list(&[2.0, 3.0, 4.0]))]),
                ],
                0.0,
            );
            for axis in [0.0, 1.0, 2.0] {
                let mut b = GraphBuilder::new();
                let shapes: Vec<Vec<usize>> = (0..3)
                    .map(|i| {
                        let mut s = vec![2, 3, 5];
                        s[axis as usize] = i + 1;
                        s
                    })
                    .collect();
                let ids: Vec<Val> = shapes
                    .iter()
                    .enumerate()
                    .map(|(i, sh)| {
                        let id = b.input(&format!("in{i}"), desc(dt, sh)).unwrap();
                        operand(&b, id)
                    })
                    .collect();
                let out = b.call("concat", &[Val::List(ids), n(axis)]).unwrap()[0];
                let g = b.build(vec![("out".into(), out)]).unwrap();
                let node = &g.nodes[0];
                let inputs: Vec<Buf> = shapes
                    .iter()
                    .enumerate()
                    .map(|(i, sh)| random_buf(dt, sh.iter().product(), 50 + i as u64))
                    .collect();
                let in_descs: Vec<&OperandDescriptor> =
                    node.inputs.iter().map(|&i| &g.operands[i]).collect();
                let out_descs = vec![g.operands[node.outputs[0]].clone()];
                let refs: Vec<&Buf> = inputs.iter().collect();
                let want =
                    crate::backend::cpu::run_op(&node.op, &refs, &in_descs, &out_descs, None)
                        .unwrap();
                let got = run(&mut be, g, inputs).unwrap();
                assert_eq!(got[0], want[0], "concat axis {axis}");
            }
        }
    }

    #[test]
    fn casts() {
        let Some(mut be) = backend() else { return };
        for from in [F, I, U] {
            for to in [F, I, U] {
                check_vs_cpu(&mut be, "cast", &[from], &[&[5, 67]], &[s(to.name())], 0.0);
            }
        }
        // Saturation and NaN from float32.
        let x = vec![f32::NAN, 3e9, -3e9, -0.7, 2.9, f32::INFINITY, -1.5, 4.3e9];
        for to in [I, U] {
            let g = op_graph("cast", F, &[&[8]], &[s(to.name())]).unwrap();
            let node = g.nodes[0].clone();
            let xin = Buf::F32(x.clone());
            let want = crate::backend::cpu::run_op(
                &node.op,
                &[&xin],
                &[&g.operands[node.inputs[0]]],
                &[g.operands[node.outputs[0]].clone()],
                None,
            )
            .unwrap();
            let got = run(&mut be, g, vec![xin]).unwrap();
            assert_eq!(got[0], want[0], "cast to {}", to.name());
        }
    }

    /// The six comparison operators, which several tests run alike.
    const COMPARISONS: [&str; 6] = [
        "equal",
        "notEqual",
        "greater",
        "greaterOrEqual",
        "lesser",
        "lesserOrEqual",
    ];

    /// Runs `g` on the GPU and on the CPU backend with the same inputs and
    /// asserts the outputs are identical.
    fn same_as_cpu(be: &mut GpuBackend, g: Graph, inputs: Vec<Buf>, what: &str) {
        let mut cpu = crate::backend::cpu::CpuBackend::new();
        let g = Arc::new(g);
        cpu.compile(1, g.clone()).unwrap();
        let want = cpu.compute(1, &g, inputs.clone()).unwrap();
        let got = run(be, (*g).clone(), inputs).unwrap();
        assert_eq!(got, want, "{what}");
    }

    /// A cast to a narrower type inside a graph (its result read by another
    /// operator, not a graph output) holds values of that type: float16
    /// rounded to the nearest half, small integers wrapped to their bits.
    /// The GPU used to keep the wide value until an output packed it.
    #[test]
    fn casts_inside_a_graph_hold_values_of_the_target_type() {
        let Some(mut be) = backend() else { return };
        let floats = vec![
            1.0001, 65519.0, 65520.0, 1e-8, 3e-5, -2.0009766, 0.1, 1e6, -0.0, 2049.0,
        ];
        let ints = vec![300, -129, 128, 255, 256, -1, 70000, 7, -8, 9];
        for (from, to, data) in [
            (F, "float16", Buf::F32(floats.clone())),
            (I, "int8", Buf::I32(ints.clone())),
            (I, "uint8", Buf::I32(ints.clone())),
            (I, "int4", Buf::I32(ints.clone())),
            (I, "uint4", Buf::I32(ints.clone())),
            (
                U,
                "uint8",
                Buf::U32(ints.iter().map(|&v| v as u32).collect()),
            ),
        ] {
            let mut b = GraphBuilder::new();
            let x = b.input("x", desc(from, &[10])).unwrap();
            let narrow = b.call("cast", &[operand(&b, x), s(to)]).unwrap()[0];
            let back = b
                .call("cast", &[operand(&b, narrow), s(from.name())])
                .unwrap()[0];
            let g = b.build(vec![("y".into(), back)]).unwrap();
            same_as_cpu(
                &mut be,
                g,
                vec![data],
                &format!("{} -> {to} -> back", from.name()),
            );
        }
    }

    /// Comparisons with NaN operands: false, but notEqual true (IEEE 754),
    /// whatever a shader compiler assumes about NaN.
    #[test]
    fn comparisons_of_nan_operands() {
        let Some(mut be) = backend() else { return };
        let a = vec![
            f32::NAN,
            f32::NAN,
            1.0,
            -f32::NAN,
            f32::INFINITY,
            2.0,
            0.0,
            -0.0,
        ];
        let b = vec![f32::NAN, 1.0, f32::NAN, 3.0, f32::NAN, 2.0, -0.0, 1.0];
        for name in COMPARISONS {
            for dt in [F, DataType::Float16] {
                let mut gb = GraphBuilder::new();
                let x = gb.input("a", desc(dt, &[8])).unwrap();
                let y = gb.input("b", desc(dt, &[8])).unwrap();
                let out = gb.call(name, &[operand(&gb, x), operand(&gb, y)]).unwrap()[0];
                let g = gb.build(vec![("out".into(), out)]).unwrap();
                let data = |v: &Vec<f32>| {
                    if dt == F {
                        Buf::F32(v.clone())
                    } else {
                        Buf::f16_from_f32(v)
                    }
                };
                same_as_cpu(
                    &mut be,
                    g,
                    vec![data(&a), data(&b)],
                    &format!("{name} on {}", dt.name()),
                );
            }
        }
    }

    #[test]
    fn gemm_options() {
        let Some(mut be) = backend() else { return };
        for (at, bt) in [(false, false), (true, false), (false, true), (true, true)] {
            let (m, k, nn) = (37usize, 19usize, 70usize);
            let sa = if at { [k, m] } else { [m, k] };
            let sb = if bt { [nn, k] } else { [k, nn] };
            let opts = dict(&[
                ("aTranspose", Val::Bool(at)),
                ("bTranspose", Val::Bool(bt)),
                ("alpha", n(0.75)),
            ]);
            check_vs_cpu(&mut be, "gemm", &[F, F], &[&sa, &sb], &[opts], 1e-4);
        }
        for sc in [&[37usize, 70][..], &[70], &[37, 1], &[1, 70], &[], &[1]] {
            let args = [Arg::T(F, &[37, 19]), Arg::T(F, &[19, 70])];
            let opts = [("c", Arg::T(F, sc)), ("beta", Arg::V(n(-1.5)))];
            check_call_vs_cpu(&mut be, "gemm", &args, Some(&opts), 1, 1e-4, 1e-4);
        }
    }

    #[test]
    fn pool2d_options() {
        let Some(mut be) = backend() else { return };
        for name in ["averagePool2d", "maxPool2d", "l2Pool2d"] {
            for layout in ["nchw", "nhwc"] {
                let opts = [
                    vec![],
                    vec![("windowDimensions", list(&[3.0, 2.0]))],
                    vec![
                        ("windowDimensions", list(&[3.0, 3.0])),
                        ("padding", list(&[1.0, 2.0, 2.0, 0.0])),
                        ("strides", list(&[2.0, 3.0])),
                        ("dilations", list(&[1.0, 2.0])),
                        ("roundingType", s("ceil")),
                    ],
                ];
                for o in opts {
                    let mut o = o;
                    o.push(("layout", s(layout)));
                    check_vs_cpu(&mut be, name, &[F], &[&[2, 3, 9, 11]], &[dict(&o)], 1e-5);
                }
            }
        }
    }

    /// maxPool2d takes any data type: the integer kernel against the CPU
    /// backend, windows in the padding included.
    #[test]
    fn max_pool2d_every_type() {
        let Some(mut be) = backend() else { return };
        for dt in DataType::ALL {
            for layout in ["nchw", "nhwc"] {
                let o = [
                    ("windowDimensions", list(&[3.0, 3.0])),
                    ("padding", list(&[1.0, 3.0, 2.0, 0.0])),
                    ("strides", list(&[2.0, 3.0])),
                    ("outputShapeRounding", s("ceil")),
                    ("layout", s(layout)),
                ];
                check_vs_cpu(
                    &mut be,
                    "maxPool2d",
                    &[dt],
                    &[&[2, 3, 7, 8]],
                    &[dict(&o)],
                    0.0,
                );
            }
        }
    }

    #[test]
    fn logical_ops() {
        let Some(mut be) = backend() else { return };
        let u8t = DataType::Uint8;
        let shapes: &[(&[usize], &[usize])] =
            &[(&[7, 9], &[9]), (&[3, 1, 5], &[1, 4, 1]), (&[], &[])];
        for name in COMPARISONS {
            for dt in [F, I, U, u8t] {
                for (sa, sb) in shapes {
                    check_vs_cpu(&mut be, name, &[dt, dt], &[sa, sb], &[], 0.0);
                }
            }
        }
        for name in ["logicalAnd", "logicalOr", "logicalXor"] {
            for (sa, sb) in shapes {
                check_vs_cpu(&mut be, name, &[u8t, u8t], &[sa, sb], &[], 0.0);
            }
        }
        check_vs_cpu(&mut be, "logicalNot", &[u8t], &[&[13]], &[], 0.0);
        let x = vec![
            f32::NAN,
            f32::INFINITY,
            -f32::INFINITY,
            0.0,
            1.0,
            -f32::NAN,
            3.0,
        ];
        for name in ["isNaN", "isInfinite"] {
            let g = op_graph(name, F, &[&[7]], &[]).unwrap();
            let out = run(&mut be, g, vec![Buf::F32(x.clone())]).unwrap();
            let want: Vec<u8> = x
                .iter()
                .map(|v| {
                    u8::from(if name == "isNaN" {
                        v.is_nan()
                    } else {
                        v.is_infinite()
                    })
                })
                .collect();
            assert_eq!(out[0], Buf::U8(want), "{name}");
        }
    }

    #[test]
    fn where_and_prelu() {
        let Some(mut be) = backend() else { return };
        for dt in [F, I, U, DataType::Uint8] {
            check_vs_cpu(
                &mut be,
                "where",
                &[DataType::Uint8, dt, dt],
                &[&[2, 1, 5], &[3, 1], &[5]],
                &[],
                0.0,
            );
            check_vs_cpu(
                &mut be,
                "where",
                &[DataType::Uint8, dt, dt],
                &[&[7], &[7], &[7]],
                &[],
                0.0,
            );
        }
        for dt in [F, I] {
            check_vs_cpu(
                &mut be,
                "prelu",
                &[dt, dt],
                &[&[3, 4, 5], &[4, 1]],
                &[],
                0.0,
            );
            check_vs_cpu(&mut be, "prelu", &[dt, dt], &[&[301], &[1]], &[], 0.0);
        }
    }

    #[test]
    fn float_activations() {
        let Some(mut be) = backend() else { return };
        let ab = dict(&[("alpha", n(0.3)), ("beta", n(-0.2))]);
        let a = dict(&[("alpha", n(0.7))]);
        for (name, opts) in [
            ("elu", vec![]),
            ("elu", vec![a.clone()]),
            ("gelu", vec![]),
            ("hardSigmoid", vec![]),
            ("hardSigmoid", vec![ab.clone()]),
            ("hardSwish", vec![]),
            ("leakyRelu", vec![]),
            ("leakyRelu", vec![a.clone()]),
            ("linear", vec![]),
            ("linear", vec![ab.clone()]),
            ("softplus", vec![]),
            ("softsign", vec![]),
        ] {
            check_vs_cpu(&mut be, name, &[F], &[&[3, 97]], &opts, 1e-5);
        }
    }

    #[test]
    fn reductions() {
        let Some(mut be) = backend() else { return };
        let all = [
            "reduceSum",
            "reduceL1",
            "reduceSumSquare",
            "reduceProduct",
            "reduceMax",
            "reduceMin",
            "reduceMean",
            "reduceL2",
            "reduceLogSum",
            "reduceLogSumExp",
        ];
        let axes_cases: Vec<Vec<(&str, Val)>> = vec![
            vec![],
            vec![("axes", list(&[1.0]))],
            vec![
                ("axes", list(&[0.0, 2.0])),
                ("keepDimensions", Val::Bool(true)),
            ],
            vec![("axes", list(&[]))],
            vec![("axes", list(&[2.0]))],
        ];
        for name in all {
            let types: &[DataType] = if all[..6].contains(&name) {
                &[F, I, U]
            } else {
                &[F]
            };
            for &dt in types {
                for o in &axes_cases {
                    // Products and logs need tame inputs: [0.5, 1.5) and [1, 2) below.
                    let shape = [3usize, 5, 7];
                    let mut b = GraphBuilder::new();
                    let x = b.input("x", desc(dt, &shape)).unwrap();
                    let out = b.call(name, &[operand(&b, x), dict(o)]).unwrap()[0];
                    let g = b.build(vec![("out".into(), out)]).unwrap();
                    let node = g.nodes[0].clone();
                    let xin = match random_buf(dt, 105, 9) {
                        Buf::F32(v) => Buf::F32(v.iter().map(|x| x.abs() / 2.0 + 0.5).collect()),
                        Buf::I32(v) if name == "reduceProduct" => {
                            Buf::I32(v.iter().map(|x| x % 3).collect())
                        }
                        other => other,
                    };
                    let want = crate::backend::cpu::run_op(
                        &node.op,
                        &[&xin],
                        &[&g.operands[x]],
                        &[g.operands[node.outputs[0]].clone()],
                        None,
                    )
                    .unwrap();
                    let got = run(&mut be, g, vec![xin]).unwrap();
                    let what = format!("{name} {} {o:?}", dt.name());
                    match (&got[0], &want[0]) {
                        (Buf::F32(g), Buf::F32(w)) => assert_close(g, w, 1e-5, &what),
                        (g, w) => assert_eq!(g, w, "{what}"),
                    }
                }
            }
        }
    }

    #[test]
    fn takes_every_cpu_type_and_refuses_only_oversized_tensors() {
        // The GPU takes every operator with every data type the CPU takes
        // (the registry's, which the CPU context's opSupportLimits()
        // lists), so what it refuses is size: here an int64 intermediate
        // of [n, n] larger than one storage binding, from small inputs.
        for def in crate::graph::ops::all() {
            for l in def.operands {
                for &t in l.types {
                    assert!(
                        supports(def.name, l.name, t),
                        "{}.{} on {}",
                        def.name,
                        l.name,
                        t.name()
                    );
                }
            }
        }
        let Some(mut be) = backend() else { return };
        let max = be.max_tensor_byte_length();
        let n = ((max / 8) as f64).sqrt() as usize + 1;
        let i = DataType::Int64;
        let mut b = GraphBuilder::new();
        let col = b.input("col", desc(i, &[n, 1])).unwrap();
        let row = b.input("row", desc(i, &[1, n])).unwrap();
        let product = b
            .call("mul", &[operand(&b, col), operand(&b, row)])
            .unwrap()[0];
        let y = b.call("reduceMax", &[operand(&b, product)]).unwrap()[0];
        let g = b.build(vec![("y".into(), y)]).unwrap();
        let e = be.compile(2, Arc::new(g)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Operation);
        // The smaller of the two limits is the one a tensor meets first.
        let bytes = 8 * n * n;
        let want = if max as u64 == be.gpu.limits.max_buffer_size {
            format!("intermediate: {bytes} bytes exceed the GPU's largest buffer ({max} bytes)")
        } else {
            format!(
                "a tensor of {bytes} bytes exceeds the GPU's largest storage binding ({max} bytes)"
            )
        };
        assert_eq!(e.message, want);
    }
}

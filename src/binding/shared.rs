//! What a context's objects share on the JS thread: the context's state
//! ([`CtxShared`]) and the `MLContext` that holds it (its methods are in
//! `context`), what a tensor is ([`TensorInfo`]), the promises pending on
//! a context, and the handles through which their completions arrive (the
//! threadsafe function's and the [`Inbox`]; `completion` delivers and
//! settles them). Below the JS classes and `completion`, which all use it.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use napi::sys::{self, napi_env, napi_value};
use napi_derive::napi;

use super::errors::js_error;
use super::raw::{self, StrongRef};
use super::views::OutView;
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::timeline::{Command, Completion, Timeline};
use crate::types::{DataType, OperandDescriptor};

/// The JS-thread state of one context, shared by its MLContext, builders,
/// tensors and graphs.
pub struct CtxShared {
    pub id: u64,
    pub(super) timeline: RefCell<Option<Timeline>>,
    pub(super) tsfn: SharedTsfn,
    /// Where the worker leaves completions.
    pub(super) inbox: Arc<Inbox>,
    pub(super) pending: Cell<usize>,
    pub(super) lost: Cell<bool>,
    pub(super) device_type: Cell<&'static str>,
    pub(super) accelerated: Cell<bool>,
    pub(super) max_tensor_bytes: Cell<usize>,
    pub(super) next_id: Cell<u64>,
    /// The `lost` promise, created on first access, and its deferred until
    /// settled.
    pub(super) lost_promise: RefCell<Option<(StrongRef, Option<sys::napi_deferred>)>>,
    /// Why the context was lost, once it is.
    pub(super) lost_message: RefCell<Option<String>>,
    /// The `label` option of `createContext`.
    pub label: String,
    /// A context created from a GPUDevice (`createContext(gpuDevice)`):
    /// which wgpu adapter it runs on and why, once its backend exists.
    pub(super) webgpu: Option<Arc<std::sync::Mutex<String>>>,
    /// Tensors on their way back from WebGPU whose contents the worker
    /// still waits for (see `MLExportReturn`).
    pub(super) returning: Rc<Cell<usize>>,
    /// The threads that may take part in the large copies this context's
    /// calls make on the JS thread (see [`crate::copy`]).
    pub(super) copy_help: crate::copy::CopyHelp,
    /// Whether the context's threads leave the JS thread a core: then
    /// `readTensor(tensor)` readies memory for the worker's copy (see
    /// `MLContext::read_tensor`), and the event loop may poll for a read
    /// due soon (`completion::poll_for`).
    pub(super) spare_core: bool,
}

impl CtxShared {
    pub fn is_lost(&self) -> bool {
        self.lost.get()
    }

    pub fn next_id(&self) -> u64 {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        id
    }

    pub fn set_ready(&self, device_type: &'static str, accelerated: bool, max_bytes: usize) {
        self.device_type.set(device_type);
        // A context of a GPUDevice is accelerated by definition, whatever
        // the adapter (a software one in CI).
        self.accelerated.set(accelerated || self.webgpu.is_some());
        self.max_tensor_bytes.set(max_bytes);
    }

    pub fn max_tensor_bytes(&self) -> usize {
        self.max_tensor_bytes.get()
    }

    /// TypeError when a tensor of `d` is larger than this context holds
    /// ("checking dimensions": a byte length the implementation does not
    /// support).
    pub fn check_size(&self, d: &crate::types::OperandDescriptor, what: &str) -> Result<()> {
        if d.byte_length() > self.max_tensor_bytes() {
            return Err(Error::type_error(format!(
                "{what}: {} bytes exceed this context's maxTensorByteLength ({})",
                d.byte_length(),
                self.max_tensor_bytes()
            )));
        }
        Ok(())
    }

    pub fn device_type(&self) -> &'static str {
        self.device_type.get()
    }

    /// Counts pending promises; the threadsafe function keeps the event
    /// loop alive only while something is pending.
    pub fn add_pending(&self, env: napi_env, delta: isize) {
        let old = self.pending.get();
        let new = (old as isize + delta).max(0) as usize;
        self.pending.set(new);
        if (old == 0) == (new == 0) {
            return; // No change of state: leave the worker the lock.
        }
        let guard = self.tsfn.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tsfn) = *guard else {
            return;
        };
        // SAFETY: ref and unref must run on the JS thread with its env:
        // this is a method of the JS-thread state, called with the env of
        // the current callback (raw.rs's rules). The handle is alive while
        // it is Some under the lock (see `SharedTsfn`).
        unsafe {
            if new > 0 {
                sys::napi_ref_threadsafe_function(env, tsfn.0);
            } else {
                sys::napi_unref_threadsafe_function(env, tsfn.0);
            }
        }
    }

    pub(super) fn settle_lost(&self, env: napi_env, message: &str) {
        if let Some((_, d)) = &mut *self.lost_promise.borrow_mut() {
            if let Some(d) = d.take() {
                if let (Ok(info), Ok(m)) = (raw::object(env), raw::string(env, message)) {
                    let _ = raw::set(env, info, "message", m);
                    let _ = raw::resolve(env, d, info);
                }
            }
        }
    }

    /// Loses the context (destroyed, or its backend failed): rejects every
    /// pending promise with InvalidStateError, resolves `lost` with
    /// `message`, and lets the timeline thread end.
    pub fn lose(&self, env: napi_env, message: &str) {
        if self.lost.replace(true) {
            return;
        }
        *self.lost_message.borrow_mut() = Some(message.to_string());
        reject_all(env, self.id, None, &Error::invalid_state(message));
        self.settle_lost(env, message);
        if let Some(mut t) = self.timeline.borrow_mut().take() {
            t.close();
        }
    }

    /// Ends this context's worker as its JS environment goes away (see
    /// [`Timeline::close_and_wait`]).
    pub fn release_at_exit(&self) {
        if let Some(mut t) = self.timeline.borrow_mut().take() {
            t.close_and_wait(std::time::Duration::from_secs(5));
        }
        // The `lost` promise's reference goes with the environment (the
        // cleanup hook sweeps it right after).
        self.lost_promise.borrow_mut().take();
    }

    pub fn send(&self, c: Command) -> Result<()> {
        match &*self.timeline.borrow() {
            Some(t) if !self.lost.get() => t.send(c),
            _ => Err(Error::invalid_state("the MLContext is lost")),
        }
    }

    /// Sends a command whose promise is registered as `req`; rejects that
    /// promise if the timeline is gone.
    pub fn send_or_reject(&self, env: napi_env, req: u64, c: Command) {
        if let Err(e) = self.send(c) {
            if let Some((d, _)) = take(env, req) {
                if let Ok(v) = js_error(env, &e) {
                    let _ = raw::reject(env, d, v);
                }
            }
        }
    }
}

/// `MLContext`.
#[napi(js_name = "MLContext")]
pub struct MLContext {
    pub(super) shared: Rc<CtxShared>,
}

impl MLContext {
    pub fn wrap(shared: Rc<CtxShared>) -> Self {
        MLContext { shared }
    }

    pub fn shared(&self) -> Rc<CtxShared> {
        self.shared.clone()
    }
}

/// What a tensor is, fixed at creation.
#[derive(Clone)]
pub struct TensorInfo {
    pub ctx: Rc<CtxShared>,
    pub id: u64,
    pub desc: OperandDescriptor,
    pub readable: bool,
    pub writable: bool,
    /// The bytes of a constant tensor (`createConstantTensor`), which graphs
    /// built with `constant(tensor)` embed.
    pub constant: Option<Arc<Vec<u8>>>,
    /// The descriptor's `label` (extension), named in timeline errors.
    pub label: String,
    /// Made by `createExportableTensor()`: `exportToGPU()` takes it.
    pub exportable: bool,
}

/// What a pending promise resolves with.
pub enum PendingKind {
    /// `createContext`: a new MLContext.
    Context,
    /// `createTensor`: a new MLTensor.
    Tensor(TensorInfo),
    /// `build`: a new MLGraph.
    Graph { id: u64, graph: Arc<Graph> },
    /// `readTensor(tensor)`: a new ArrayBuffer.
    Read { data_type: DataType, tensor: u64 },
    /// `readTensor(tensor, view)`: fills the caller's view.
    ReadInto {
        data_type: DataType,
        tensor: u64,
        view: StrongRef,
    },
    /// `compute`: `{inputs, outputs}` of new views, rebuilt over the
    /// returned buffers (in the graph's order, with their element types).
    Compute {
        inputs: Vec<(String, OutView, DataType)>,
        outputs: Vec<(String, OutView, DataType)>,
    },
}

pub struct Pending {
    pub(super) deferred: sys::napi_deferred,
    pub(super) ctx: Rc<CtxShared>,
    pub(super) kind: PendingKind,
}

thread_local! {
    /// Pending promises of this JS thread (each worker_thread has its own).
    pub(super) static PENDING: RefCell<HashMap<u64, Pending>> = RefCell::new(HashMap::new());
}

static NEXT_REQUEST: AtomicU64 = AtomicU64::new(1);

/// Registers a pending promise; returns its request id and the promise.
pub fn register(
    env: napi_env,
    ctx: &Rc<CtxShared>,
    kind: PendingKind,
) -> napi::Result<(u64, napi_value)> {
    raw::sweep(env);
    let (deferred, promise) = raw::create_promise(env)?;
    let id = NEXT_REQUEST.fetch_add(1, Ordering::Relaxed);
    ctx.add_pending(env, 1);
    PENDING.with(|p| {
        p.borrow_mut().insert(
            id,
            Pending {
                deferred,
                ctx: ctx.clone(),
                kind,
            },
        )
    });
    Ok((id, promise))
}

/// Removes a pending entry without settling it (the command could not be
/// sent); the caller rejects it.
pub fn take(env: napi_env, id: u64) -> Option<(sys::napi_deferred, PendingKind)> {
    take_entry(env, id).map(|p| (p.deferred, p.kind))
}

pub(super) fn take_entry(env: napi_env, id: u64) -> Option<Pending> {
    let p = PENDING.with(|p| p.borrow_mut().remove(&id))?;
    p.ctx.add_pending(env, -1);
    Some(p)
}

/// Rejects every pending promise of a context (it was destroyed), or only
/// the reads of one tensor when `tensor` is given.
pub fn reject_all(env: napi_env, ctx_id: u64, tensor: Option<u64>, e: &Error) {
    let ids: Vec<u64> = PENDING.with(|p| {
        p.borrow()
            .iter()
            .filter(|(_, v)| v.ctx.id == ctx_id)
            .filter(|(_, v)| match (tensor, &v.kind) {
                (None, _) => true,
                (Some(t), PendingKind::Read { tensor, .. }) => *tensor == t,
                (Some(t), PendingKind::ReadInto { tensor, .. }) => *tensor == t,
                _ => false,
            })
            .map(|(k, _)| *k)
            .collect()
    });
    for id in ids {
        if let Some((d, kind)) = take(env, id) {
            drop_kind(env, kind);
            if let Ok(err) = js_error(env, e) {
                let _ = raw::reject(env, d, err);
            }
        }
    }
}

pub(super) fn drop_kind(env: napi_env, kind: PendingKind) {
    if let PendingKind::ReadInto { view, .. } = kind {
        view.delete(env);
    }
}

/// A raw threadsafe function handle that may move to the worker thread.
#[derive(Clone, Copy)]
pub struct Tsfn(pub sys::napi_threadsafe_function);
// SAFETY: N-API's threadsafe function calls (`napi_call_...`,
// `napi_release_...`) may be made from any thread; the calls that must be
// made on the JS thread (ref, unref) are made there, with its env; and a
// handle is only used while it is known alive (see `SharedTsfn`).
unsafe impl Send for Tsfn {}

/// The handle, cleared when N-API finalizes the function (at environment
/// teardown, possibly while the worker still runs). Every use holds the
/// lock, so a call never races with the finalizer that frees the function.
pub type SharedTsfn = Arc<Mutex<Option<Tsfn>>>;

/// [`Inbox::state`]: nobody waits inline; completions go through the
/// threadsafe function.
pub(super) const IDLE: u8 = 0;
/// The JS thread is waiting inline for the next completion.
pub(super) const WAITING: u8 = 1;
/// The worker handed a completion to the waiting JS thread (in the queue,
/// with no threadsafe function call).
pub(super) const DELIVERED: u8 = 2;

/// The completions of one context, on their way to the JS thread.
#[derive(Default)]
pub struct Inbox {
    /// In the order the worker produced them.
    pub(super) queue: Mutex<VecDeque<Completion>>,
    /// IDLE, WAITING or DELIVERED.
    pub(super) state: AtomicU8,
    /// How long (ns) the latest read waited, from the JS call to its
    /// completion on the worker: the guess of whether the next read is
    /// quick enough to wait for inline.
    pub(super) last_read_wait: AtomicU64,
    /// Where the JS thread and the worker last ran (see `settle_soon`).
    pub(super) whereabouts: crate::timeline::Whereabouts,
    /// The JS thread's large copy that the worker may help with while it
    /// waits for a command (see [`crate::copy`]).
    pub(super) desk: Arc<crate::copy::HelpDesk>,
}

impl Inbox {
    pub(super) fn take_all(&self) -> VecDeque<Completion> {
        std::mem::take(&mut *self.queue.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

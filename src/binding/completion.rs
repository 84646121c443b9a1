//! Pending promises and the one threadsafe function per context that
//! settles them.
//!
//! A promise-returning method registers a [`Pending`] entry (a raw
//! `napi_deferred` plus what to resolve it with) in a per-JS-thread table
//! and sends its command with the entry's request id. The worker reports a
//! [`Completion`] through the context's threadsafe function; on the JS
//! thread `call_js` looks the entry up and settles it. Raw deferreds are
//! used because napi-rs's own deferreds each create a threadsafe function,
//! which costs tens of microseconds per call.
//!
//! The threadsafe function is unreferenced whenever its context has nothing
//! pending, so an idle context never keeps the process alive.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr;
use std::rc::{Rc, Weak};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use napi::bindgen_prelude::JavaScriptClassExt;
use napi::sys::{self, napi_env, napi_value};
use napi::Env;

use super::context::{CtxShared, MLContext};
use super::errors::js_error;
use super::raw::{self, StrongRef};
use super::tensor::{MLGraph, MLTensor, TensorInfo};
use super::views::{self, OutView};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::timeline::{Completion, CompletionSink, Payload, CONTEXT_LOST};
use crate::types::DataType;

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
    /// `compute`: `{inputs, outputs}` of new views.
    Compute {
        inputs: Vec<(String, OutView, Vec<u8>)>,
        outputs: Vec<(String, OutView, DataType)>,
    },
}

pub struct Pending {
    deferred: sys::napi_deferred,
    ctx: Rc<CtxShared>,
    kind: PendingKind,
}

thread_local! {
    /// Pending promises of this JS thread (each worker_thread has its own).
    static PENDING: RefCell<HashMap<u64, Pending>> = RefCell::new(HashMap::new());
    /// Live contexts of this JS thread, for completions that concern the
    /// context itself (it was lost).
    static CONTEXTS: RefCell<HashMap<u64, Weak<CtxShared>>> = RefCell::new(HashMap::new());
}

/// Makes a context findable by its completions.
pub fn register_context(ctx: &Rc<CtxShared>) {
    CONTEXTS.with(|c| {
        let mut c = c.borrow_mut();
        c.retain(|_, w| w.strong_count() > 0);
        c.insert(ctx.id, Rc::downgrade(ctx));
    });
}

static NEXT_REQUEST: AtomicU64 = AtomicU64::new(1);

/// Registers a pending promise; returns its request id and the promise.
pub fn register(
    env: napi_env,
    ctx: &Rc<CtxShared>,
    kind: PendingKind,
) -> napi::Result<(u64, napi_value)> {
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

fn take_entry(env: napi_env, id: u64) -> Option<Pending> {
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

fn drop_kind(env: napi_env, kind: PendingKind) {
    if let PendingKind::ReadInto { view, .. } = kind {
        view.delete(env);
    }
}

/// Settles one completion on the JS thread.
fn settle(env: napi_env, ctx_id: u64, c: Completion) {
    if c.request == CONTEXT_LOST {
        let ctx = CONTEXTS.with(|m| m.borrow().get(&ctx_id).and_then(|w| w.upgrade()));
        if let (Some(ctx), Err(e)) = (ctx, &c.result) {
            ctx.lose(env, &e.message);
        }
        return;
    }
    let Some(Pending {
        deferred,
        ctx,
        kind,
    }) = take_entry(env, c.request)
    else {
        // Already rejected (context or tensor destroyed): drop the result.
        return;
    };
    let value = match c.result {
        Ok(payload) => resolve_value(env, &ctx, kind, payload),
        Err(e) => {
            drop_kind(env, kind);
            Err(e)
        }
    };
    let _ = match value {
        Ok(v) => raw::resolve(env, deferred, v),
        Err(e) => match js_error(env, &e) {
            Ok(err) => raw::reject(env, deferred, err),
            Err(_) => Ok(()),
        },
    };
}

fn resolve_value(
    env: napi_env,
    ctx: &Rc<CtxShared>,
    kind: PendingKind,
    payload: Payload,
) -> Result<napi_value> {
    let n = super::errors::from_napi;
    let e = Env::from_raw(env);
    match (kind, payload) {
        (
            PendingKind::Context,
            Payload::Ready {
                device_type,
                accelerated,
                max_tensor_byte_length,
            },
        ) => {
            ctx.set_ready(device_type, accelerated, max_tensor_byte_length);
            let inst = MLContext::wrap(ctx.clone()).into_instance(&e).map_err(n)?;
            Ok(inst.value)
        }
        (PendingKind::Tensor(info), Payload::Done) => {
            let t = MLTensor::new(info);
            t.report_memory(&e);
            let inst = t.into_instance(&e).map_err(n)?;
            Ok(inst.value)
        }
        (PendingKind::Graph { id, graph }, Payload::Done) => {
            let inst = MLGraph::new(ctx.clone(), id, graph)
                .into_instance(&e)
                .map_err(n)?;
            Ok(inst.value)
        }
        (PendingKind::Read { data_type, .. }, Payload::Tensor(buf)) => {
            views::arraybuffer_from_buf(env, buf, data_type).map_err(n)
        }
        (
            PendingKind::ReadInto {
                data_type, view, ..
            },
            Payload::Tensor(buf),
        ) => {
            let r = views::copy_into_view(env, &view, &buf, data_type);
            view.delete(env);
            r?;
            raw::undefined(env).map_err(n)
        }
        (PendingKind::Compute { inputs, outputs }, Payload::Outputs(bufs)) => {
            let (outs, types): (Vec<_>, Vec<_>) =
                outputs.into_iter().map(|(n, v, t)| ((n, v), t)).unzip();
            let results = bufs.into_iter().zip(types).collect();
            views::compute_result(env, inputs, outs, results).map_err(n)
        }
        (kind, _) => {
            drop_kind(env, kind);
            Err(Error::unknown("unexpected completion"))
        }
    }
}

/// A raw threadsafe function handle that may move to the worker thread.
#[derive(Clone, Copy)]
pub struct Tsfn(pub sys::napi_threadsafe_function);
// SAFETY: threadsafe functions are made to be called from any thread.
unsafe impl Send for Tsfn {}

/// The handle, cleared when N-API finalizes the function (at environment
/// teardown, possibly while the worker still runs). Every use holds the
/// lock, so a call never races with the finalizer that frees the function.
pub type SharedTsfn = Arc<Mutex<Option<Tsfn>>>;

/// The worker side: posts completions to the JS thread.
pub struct JsSink {
    tsfn: SharedTsfn,
    /// The context whose completions this sink posts.
    ctx_id: u64,
}

impl CompletionSink for JsSink {
    fn complete(&self, completion: Completion) {
        let guard = self.tsfn.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tsfn) = *guard else {
            return; // The environment is gone: nobody is left to tell.
        };
        let data = Box::into_raw(Box::new((self.ctx_id, completion))) as *mut c_void;
        let status = unsafe {
            sys::napi_call_threadsafe_function(
                tsfn.0,
                data,
                sys::ThreadsafeFunctionCallMode::nonblocking,
            )
        };
        if status != sys::Status::napi_ok {
            drop(unsafe { Box::from_raw(data as *mut (u64, Completion)) });
        }
    }
}

impl Drop for JsSink {
    fn drop(&mut self) {
        let mut guard = self.tsfn.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tsfn) = guard.take() {
            unsafe {
                sys::napi_release_threadsafe_function(
                    tsfn.0,
                    sys::ThreadsafeFunctionReleaseMode::release,
                )
            };
        }
    }
}

unsafe extern "C" fn call_js(env: napi_env, _f: napi_value, _ctx: *mut c_void, data: *mut c_void) {
    let c = Box::from_raw(data as *mut (u64, Completion));
    if env.is_null() {
        return;
    }
    let (ctx_id, c) = *c;
    // Never unwind into N-API.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| settle(env, ctx_id, c)));
}

unsafe extern "C" fn finalize_tsfn(_env: napi_env, data: *mut c_void, _hint: *mut c_void) {
    let shared = Box::from_raw(data as *mut SharedTsfn);
    shared.lock().unwrap_or_else(|p| p.into_inner()).take();
}

/// Creates the threadsafe function of a new context. It starts
/// unreferenced.
pub fn create_sink(env: napi_env, ctx_id: u64) -> napi::Result<(SharedTsfn, JsSink)> {
    let name = raw::string(env, "webnn-node context")?;
    let mut tsfn = ptr::null_mut();
    let shared: SharedTsfn = Arc::new(Mutex::new(None));
    let fin = Box::into_raw(Box::new(shared.clone())) as *mut c_void;
    let status = unsafe {
        sys::napi_create_threadsafe_function(
            env,
            ptr::null_mut(),
            ptr::null_mut(),
            name,
            0,
            1,
            fin,
            Some(finalize_tsfn),
            ptr::null_mut(),
            Some(call_js),
            &mut tsfn,
        )
    };
    if status != sys::Status::napi_ok {
        drop(unsafe { Box::from_raw(fin as *mut SharedTsfn) });
        return Err(napi::Error::from_reason(
            "cannot create the context's threadsafe function",
        ));
    }
    unsafe { sys::napi_unref_threadsafe_function(env, tsfn) };
    *shared.lock().unwrap_or_else(|p| p.into_inner()) = Some(Tsfn(tsfn));
    Ok((
        shared.clone(),
        JsSink {
            tsfn: shared,
            ctx_id,
        },
    ))
}

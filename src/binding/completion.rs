//! Pending promises and the one threadsafe function per context that
//! settles them.
//!
//! A promise-returning method registers a [`Pending`] entry (a raw
//! `napi_deferred` plus what to resolve it with) in a per-JS-thread table
//! (`shared::PENDING`) and sends its command with the entry's request id. The worker reports a
//! [`Completion`] through the context's threadsafe function; on the JS
//! thread `call_js` looks the entry up and settles it. Raw deferreds are
//! used because napi-rs's own deferreds each create a threadsafe function,
//! which costs tens of microseconds per call.
//!
//! The threadsafe function is unreferenced whenever its context has nothing
//! pending, so an idle context never keeps the process alive.
//!
//! Completions travel through a per-context [`Inbox`] queue; the
//! threadsafe function only says "look at the inbox". A call to the
//! threadsafe function costs a wake-up of the event loop (tens of
//! microseconds), which dominates short requests, so `readTensor` may
//! instead wait for its completion briefly on the JS thread
//! ([`settle_soon`]) when this context's reads have recently been that
//! quick; the worker then hands the completion over without the
//! threadsafe function, and a microtask settles it. A read expected a
//! little later (up to [`POLL_HORIZON`]) keeps the event loop polling
//! instead of sleeping until it settles ([`poll_for`]), where the
//! context's threads leave the JS thread a core: the JS thread stays free,
//! and the completion is not delayed by the wake-up of an idle core.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr;
use std::rc::{Rc, Weak};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use napi::bindgen_prelude::JavaScriptClassExt;
use napi::sys::{self, napi_env, napi_value};
use napi::Env;

use super::errors::js_error;
use super::raw::{self, StrongRef};
use super::shared::{
    drop_kind, take_entry, CtxShared, Inbox, MLContext, Pending, PendingKind, SharedTsfn, Tsfn,
    DELIVERED, IDLE, PENDING, WAITING,
};
use super::tensor::{MLGraph, MLTensor};
use super::views;
use crate::error::{Error, Result};
use crate::tensor::Buf;
use crate::timeline::{Completion, CompletionSink, Payload, CONTEXT_LOST};

thread_local! {
    /// Live contexts of this JS thread, for completions that concern the
    /// context itself (it was lost).
    static CONTEXTS: RefCell<HashMap<u64, Weak<CtxShared>>> = RefCell::new(HashMap::new());
}

/// Tears this JS thread's part down with its environment (at the
/// process's exit, or a worker_thread's end): ends the workers of its live
/// contexts, so that no backend outlives it, and deletes every reference
/// it still holds (Node frees none of them itself).
///
/// # Safety
/// An environment cleanup hook whose argument is the `napi_env` it was
/// added with ([`hook_teardown`]). Node runs cleanup hooks in the reverse
/// order of their addition, and the env's own teardown was added when the
/// addon loaded, before this hook: the env is still alive here.
unsafe extern "C" fn teardown(arg: *mut c_void) {
    let env = arg as napi_env;
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let live: Vec<Rc<CtxShared>> = CONTEXTS
            .try_with(|c| c.borrow().values().filter_map(|w| w.upgrade()).collect())
            .unwrap_or_default();
        for ctx in live {
            ctx.release_at_exit();
        }
        // Promises that will never settle: their held views go.
        let _ = PENDING.try_with(|p| p.borrow_mut().clear());
        let _ = MICROTASK.try_with(|m| m.borrow_mut().take());
        let _ = POLL.try_with(|p| *p.borrow_mut() = Poll::IDLE);
        raw::release_intrinsics();
        raw::sweep(env);
    }));
}

thread_local! {
    /// Whether this JS thread's environment has [`teardown`].
    static TEARDOWN_HOOKED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Adds [`teardown`] to this JS thread's environment, once.
pub fn hook_teardown(env: napi_env) {
    if !TEARDOWN_HOOKED.with(|h| h.replace(true)) {
        // SAFETY: `env` is the environment of the callback now running on
        // this JS thread (raw.rs's rules), alive until its teardown, when
        // the hook runs with it as its argument (see `teardown`); the
        // (hook, argument) pair is added once per thread (TEARDOWN_HOOKED),
        // as N-API requires.
        unsafe {
            sys::napi_add_env_cleanup_hook(env, Some(teardown), env.cast());
        }
    }
}

/// Makes a context findable by its completions.
pub fn register_context(env: napi_env, ctx: &Rc<CtxShared>) {
    hook_teardown(env);
    raw::sweep(env);
    CONTEXTS.with(|c| {
        let mut c = c.borrow_mut();
        c.retain(|_, w| w.strong_count() > 0);
        c.insert(ctx.id, Rc::downgrade(ctx));
    });
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
    POLL.with(|p| p.borrow_mut().settled(c.request));
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
            let g = MLGraph::new(ctx.clone(), id, &graph);
            g.report_memory(&e);
            let inst = g.into_instance(&e).map_err(n)?;
            Ok(inst.value)
        }
        (PendingKind::Read { data_type, .. }, Payload::Tensor(buf)) => {
            // A copy made for this read (see `Command::ReadTensor`), which
            // this holds alone, or the tensor's own buffer.
            views::arraybuffer_from_shared(env, buf, data_type, &ctx.copy_help)
        }
        (
            PendingKind::ReadInto {
                data_type, view, ..
            },
            Payload::Tensor(buf),
        ) => {
            let r = views::copy_into_view(env, &view, &buf, data_type, &ctx.copy_help);
            // A copy made for this read goes back to the pool for the
            // next read of this size; the tensor's own buffer, shared,
            // stays the tensor's.
            Buf::recycle_shared(buf);
            view.delete(env);
            r?;
            raw::undefined(env).map_err(n)
        }
        (
            PendingKind::Compute {
                inputs: in_views,
                outputs: out_views,
            },
            Payload::Outputs { outputs, inputs },
        ) => views::compute_result(env, in_views, inputs, out_views, outputs).map_err(n),
        (kind, _) => {
            drop_kind(env, kind);
            Err(Error::unknown("unexpected completion"))
        }
    }
}

/// How long the JS thread may wait inline for a read: a few times the
/// cost of a round trip through the event loop, so that a read that is
/// about to finish is not delayed by one, while a mistaken guess costs
/// the JS thread little.
const INLINE_WAIT: Duration = Duration::from_micros(50);

/// Settles every completion in the inbox, in order.
fn drain(env: napi_env, ctx_id: u64, inbox: &Inbox) {
    for c in inbox.take_all() {
        settle(env, ctx_id, c);
    }
}

thread_local! {
    /// Inboxes holding completions that a read waited for inline, to be
    /// settled by the microtask [`drain_due`].
    static DUE: RefCell<Vec<(u64, Arc<Inbox>)>> = const { RefCell::new(Vec::new()) };
    /// `queueMicrotask` and the [`drain_due`] function, made once per JS
    /// thread.
    static MICROTASK: RefCell<Option<(StrongRef, StrongRef)>> = const { RefCell::new(None) };
}

/// The microtask that settles what reads waited for inline.
///
/// # Safety
/// Called by N-API as a JS function: `env` is then the environment of
/// that call, on this thread.
unsafe extern "C" fn drain_due(env: napi_env, _info: sys::napi_callback_info) -> napi_value {
    let due = DUE.with(|d| std::mem::take(&mut *d.borrow_mut()));
    // Never unwind into N-API.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for (ctx_id, inbox) in due {
            drain(env, ctx_id, &inbox);
        }
    }));
    ptr::null_mut()
}

/// Queues [`drain_due`] as a microtask.
fn queue_drain(env: napi_env) -> napi::Result<()> {
    let made = MICROTASK.with(|m| m.borrow().is_some());
    if !made {
        let refs = global_and_function(env, "queueMicrotask", "webnnDrain", drain_due)?;
        MICROTASK.with(|m| *m.borrow_mut() = Some(refs));
    }
    let pair = MICROTASK.with(|m| locals(env, m.borrow().as_ref()))?;
    call_with_function(env, pair, "queueMicrotask")
}

/// The global function `global` (`queueMicrotask`, `setImmediate`) and a
/// new JS function `name` that runs `cb`, kept for this JS thread.
fn global_and_function(
    env: napi_env,
    global: &str,
    name: &str,
    cb: unsafe extern "C" fn(napi_env, sys::napi_callback_info) -> napi_value,
) -> napi::Result<(StrongRef, StrongRef)> {
    let g = raw::get(env, raw::global(env)?, global)?;
    let mut f = ptr::null_mut();
    raw::check(
        // SAFETY: the current callback's env; `name` is a live string of
        // `name.len()` bytes (UTF-8, not NUL-terminated, so its length is
        // given); `cb` has the callback signature and uses no data (null);
        // `f` is a live local.
        unsafe {
            sys::napi_create_function(
                env,
                name.as_ptr().cast(),
                name.len() as isize,
                Some(cb),
                ptr::null_mut(),
                &mut f,
            )
        },
        "napi_create_function",
    )?;
    Ok((StrongRef::new(env, g)?, StrongRef::new(env, f)?))
}

/// The values of a [`global_and_function`] pair, as locals: taken out of
/// the thread-local before the call, so that JS code the call runs (a
/// global replaced by the caller's own) finds it free to borrow again.
fn locals(
    env: napi_env,
    refs: Option<&(StrongRef, StrongRef)>,
) -> napi::Result<(napi_value, napi_value)> {
    let (g, f) = refs.ok_or_else(|| napi::Error::from_reason("not made"))?;
    Ok((g.get(env)?, f.get(env)?))
}

/// Calls the global function of a [`global_and_function`] pair with its
/// function as the one argument.
fn call_with_function(
    env: napi_env,
    (g, f): (napi_value, napi_value),
    what: &str,
) -> napi::Result<()> {
    let mut out = ptr::null_mut();
    raw::check(
        // SAFETY: the current callback's env and handles (`g` and `f` from
        // StrongRefs of this thread, the global); argv is the one live
        // local `f` (argc 1), `out` a live local.
        unsafe { sys::napi_call_function(env, raw::global(env)?, g, 1, &f, &mut out) },
        what,
    )
}

/// Reads expected to complete within this long keep the event loop
/// polling while they are pending ([`poll_for`]). Waking an idle core
/// costs tens of microseconds on a virtual machine (its virtual CPU halts
/// and must be woken through the host): measured on a 2-vCPU Zen 5, a
/// matmul of 128 x 384 by 384 x 384 at one thread, write, dispatch and
/// read, 188.6 us with the event loop asleep and 166.3 polling. For
/// longer reads that saving is a smaller share, and polling would keep a
/// core busy longer for it.
const POLL_HORIZON: Duration = Duration::from_millis(1);

/// The reads this JS thread's event loop polls for.
struct Poll {
    /// Their requests and their contexts' inboxes, until settled.
    reads: Vec<(u64, Arc<Inbox>)>,
    /// When polling ends, whatever is still pending: twice the longest
    /// wait expected, and a little more.
    until: Option<Instant>,
    /// Whether a [`poll_tick`] is queued.
    armed: bool,
    /// `setImmediate` and [`poll_tick`] as a JS function, made once.
    refs: Option<(StrongRef, StrongRef)>,
}

impl Poll {
    const IDLE: Poll = Poll {
        reads: Vec::new(),
        until: None,
        armed: false,
        refs: None,
    };

    fn settled(&mut self, request: u64) {
        if let Some(i) = self.reads.iter().position(|(r, _)| *r == request) {
            self.reads.swap_remove(i);
        }
    }

    /// Stops polling (the refs are kept for the next time).
    fn disarm(&mut self) {
        self.reads.clear();
        self.until = None;
        self.armed = false;
    }
}

thread_local! {
    static POLL: RefCell<Poll> = const { RefCell::new(Poll::IDLE) };
}

/// Whether polling is allowed at all: not when `WEBNN_CPU_SPIN_MS` is 0,
/// which asks for no spinning of any kind.
fn polling_allowed() -> bool {
    static ALLOWED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALLOWED.get_or_init(|| !crate::backend::cpu::spin_time().is_zero())
}

/// Called after queuing a read that did not settle inline (it did not
/// wait, or waited in vain: it is then due soon), on a context
/// whose threads leave the JS thread a core: when this context's reads
/// have lately completed within [`POLL_HORIZON`], keeps the event loop
/// turning (`setImmediate`, so every other callback runs as usual) until
/// the read settles, or for at most twice the expected wait. The
/// completion then finds the JS thread awake. Nothing is settled here,
/// and a failure only means the loop sleeps as it would have.
pub fn poll_for(env: napi_env, inbox: &Arc<Inbox>, request: u64) {
    let expected = Duration::from_nanos(inbox.last_read_wait.load(Ordering::Relaxed));
    if expected > POLL_HORIZON || !polling_allowed() {
        return;
    }
    let until = Instant::now() + expected * 2 + INLINE_WAIT;
    let arm = POLL.with(|p| {
        let mut p = p.borrow_mut();
        p.reads.push((request, inbox.clone()));
        p.until = Some(p.until.map_or(until, |u| u.max(until)));
        !std::mem::replace(&mut p.armed, true)
    });
    if arm {
        queue_tick(env);
    }
}

/// Queues [`poll_tick`] with `setImmediate`; where that fails, stops
/// polling (the loop then sleeps as it would have).
fn queue_tick(env: napi_env) {
    let queued = || -> napi::Result<()> {
        let made = POLL.with(|p| p.borrow().refs.is_some());
        if !made {
            let refs = global_and_function(env, "setImmediate", "webnnPoll", poll_tick)?;
            POLL.with(|p| p.borrow_mut().refs = Some(refs));
        }
        let pair = POLL.with(|p| locals(env, p.borrow().refs.as_ref()))?;
        call_with_function(env, pair, "setImmediate")
    };
    if queued().is_err() {
        POLL.with(|p| p.borrow_mut().disarm());
        // The call may have left an exception (an embedder without
        // `setImmediate`, or one that throws): the read must still return
        // its promise.
        let _ = super::errors::take_exception(env);
    }
}

/// What one turn of polling found.
#[derive(Debug, PartialEq, Eq)]
struct Turn {
    /// Reads are still pending and their time is not up.
    again: bool,
    /// A polled read's worker last ran on this thread's CPU.
    beside_worker: bool,
}

/// The decision of one polling turn: stops polling when the reads have
/// settled or the time is up, and notes this thread's CPU for each polled
/// read's worker (at every turn, so that a worker spinning for its next
/// command sees where this thread is, and steps aside).
fn poll_turn(p: &mut Poll, now: Instant) -> Turn {
    let again = !p.reads.is_empty() && p.until.is_some_and(|u| now < u);
    if !again {
        p.disarm();
    }
    let beside_worker = again
        && p.reads.iter().fold(false, |any, (_, inbox)| {
            inbox.whereabouts.js_shares_cpu() | any
        });
    Turn {
        again,
        beside_worker,
    }
}

/// One turn of the event loop while polled reads are pending: queues the
/// next turn, or stops when they have settled or the time is up.
///
/// # Safety
/// Called by N-API as a JS function: `env` is then the environment of
/// that call, on this thread.
unsafe extern "C" fn poll_tick(env: napi_env, _info: sys::napi_callback_info) -> napi_value {
    // Never unwind into N-API.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let turn = POLL.with(|p| poll_turn(&mut p.borrow_mut(), Instant::now()));
        if turn.beside_worker {
            // This thread never sleeps while it polls, so a worker that
            // the scheduler has put on its CPU would wait for the end of
            // its time slice (seen on a 2-vCPU VM: 0.5 to 3 ms per read,
            // the other CPU idle, for the life of the process). Give the
            // worker the CPU: it finishes the read, then finds itself
            // beside this thread and moves away (`timeline::step_aside`).
            std::thread::yield_now();
        }
        if turn.again {
            queue_tick(env);
        }
    }));
    ptr::null_mut()
}

/// Called right before queuing a read: when this context's reads have
/// lately completed within [`INLINE_WAIT`], announces to the worker that
/// the JS thread will wait for the next completion (so that the worker
/// hands it over without the threadsafe function) and returns true; then
/// [`settle_soon`] must follow. Announced before the read is sent, so the
/// worker cannot complete it unannounced.
pub fn expect_soon(inbox: &Inbox) -> bool {
    inbox.last_read_wait.load(Ordering::Relaxed) <= INLINE_WAIT.as_nanos() as u64
        && inbox
            .state
            .compare_exchange(IDLE, WAITING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
}

/// After [`expect_soon`] and queuing the read: waits (spinning) up to
/// [`INLINE_WAIT`] for the next completion, which then settles in a
/// microtask rather than after a wake-up of the event loop. Not settled
/// here: the promise must stay pending until the caller's synchronous code
/// is done (a `destroy()` right after `readTensor()` still rejects the
/// read). When nothing comes in time, returns false and the threadsafe
/// function delivers as usual.
pub fn settle_soon(env: napi_env, ctx_id: u64, inbox: &Arc<Inbox>, tsfn: &SharedTsfn) -> bool {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if inbox.state.load(Ordering::Acquire) == DELIVERED {
            break;
        }
        spins = spins.wrapping_add(1);
        // Reading the clock costs more than a pause; check it now and
        // then, and more often while the worker is on this thread's CPU
        // (where it cannot run until this thread yields).
        if spins.is_multiple_of(64)
            || (spins.is_multiple_of(8) && inbox.whereabouts.js_shares_cpu())
        {
            if start.elapsed() > INLINE_WAIT {
                if inbox
                    .state
                    .compare_exchange(WAITING, IDLE, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    // Given up; the worker calls the threadsafe function.
                    return false;
                }
                break; // Delivered just now.
            }
            // When the machine is busier than its cores, the worker may be
            // waiting for this very core: spinning on would only delay it.
            // With a core to itself this returns at once.
            std::thread::yield_now();
        }
        std::hint::spin_loop();
    }
    inbox.state.store(IDLE, Ordering::Release);
    let first = DUE.with(|d| {
        let mut d = d.borrow_mut();
        let first = d.is_empty();
        if !d.iter().any(|(id, _)| *id == ctx_id) {
            d.push((ctx_id, inbox.clone()));
        }
        first
    });
    if first && queue_drain(env).is_err() {
        // No microtask (an exception is pending, say): let the threadsafe
        // function deliver, as it would have.
        DUE.with(|d| d.borrow_mut().retain(|(id, _)| *id != ctx_id));
        let guard = tsfn.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = *guard {
            // SAFETY: the handle is set only while the threadsafe function
            // is alive: `finalize_tsfn` clears it (under this lock) before
            // N-API frees the function, and `JsSink::drop` clears it as it
            // releases its one use, so holding the lock with Some(t) means
            // `t` is valid throughout the call; any thread may call it.
            unsafe {
                sys::napi_call_threadsafe_function(
                    t.0,
                    ptr::null_mut(),
                    sys::ThreadsafeFunctionCallMode::nonblocking,
                )
            };
        }
    }
    true
}

/// What the threadsafe function carries: the context whose inbox to
/// drain, and the handle to clear when N-API finalizes the function.
struct TsfnData {
    ctx_id: u64,
    inbox: Arc<Inbox>,
    shared: SharedTsfn,
}

/// The worker side: posts completions to the JS thread.
pub struct JsSink {
    tsfn: SharedTsfn,
    inbox: Arc<Inbox>,
}

impl CompletionSink for JsSink {
    fn complete(&self, completion: Completion) {
        self.inbox
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push_back(completion);
        // A JS thread waiting inline takes it from the queue itself.
        if self
            .inbox
            .state
            .compare_exchange(WAITING, DELIVERED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            return;
        }
        let guard = self.tsfn.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tsfn) = *guard else {
            return; // The environment is gone: nobody is left to tell.
        };
        // The call only wakes the JS thread; it drains the inbox. If the
        // queue is full the completion stays queued for the next drain.
        // SAFETY: a handle is Some only while the function is alive (see
        // `settle_soon`), and the lock is held over the call, so the
        // finalizer cannot free it meanwhile; calls are allowed from any
        // thread, and nonblocking mode never waits for the JS thread.
        unsafe {
            sys::napi_call_threadsafe_function(
                tsfn.0,
                ptr::null_mut(),
                sys::ThreadsafeFunctionCallMode::nonblocking,
            )
        };
    }

    fn read_waited(&self, waited: Duration) {
        self.inbox.last_read_wait.store(
            waited.as_nanos().min(u64::MAX as u128) as u64,
            Ordering::Relaxed,
        );
    }

    fn whereabouts(&self) -> Option<&crate::timeline::Whereabouts> {
        Some(&self.inbox.whereabouts)
    }

    fn help_desk(&self) -> Option<&crate::copy::HelpDesk> {
        Some(&self.inbox.desk)
    }
}

impl Drop for JsSink {
    fn drop(&mut self) {
        let mut guard = self.tsfn.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tsfn) = guard.take() {
            // SAFETY: the handle is alive (Some under the lock, see
            // `settle_soon`), and this is the one release of the one
            // acquisition made at its creation (initial count 1): `take`
            // leaves None, so no call on it follows; release is allowed on
            // any thread.
            unsafe {
                sys::napi_release_threadsafe_function(
                    tsfn.0,
                    sys::ThreadsafeFunctionReleaseMode::release,
                )
            };
        }
    }
}

/// The threadsafe function's JS-thread callback.
///
/// # Safety
/// Called by N-API with the function's context, the `TsfnData` box of
/// [`create_sink`], and the env of the JS thread (null when the
/// environment is going away).
unsafe extern "C" fn call_js(env: napi_env, _f: napi_value, ctx: *mut c_void, _data: *mut c_void) {
    if env.is_null() || ctx.is_null() {
        return;
    }
    // SAFETY: `ctx` is the TsfnData box given as the function's context;
    // N-API frees it (through `finalize_tsfn`) only after the last call of
    // this callback, and nothing writes it meanwhile (the shared parts
    // are behind a Mutex and an Arc), so a shared reference for this call
    // is valid.
    let data = unsafe { &*(ctx as *const TsfnData) };
    // Never unwind into N-API.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        drain(env, data.ctx_id, &data.inbox)
    }));
}

/// The threadsafe function's finalizer.
///
/// # Safety
/// Called by N-API once, after the last `call_js`, with the finalize data
/// of [`create_sink`]: the `TsfnData` box.
unsafe extern "C" fn finalize_tsfn(_env: napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` came from `Box::into_raw` in `create_sink`, and N-API
    // calls this once, when no call can follow: the box is owned here.
    let data = unsafe { Box::from_raw(data as *mut TsfnData) };
    data.shared.lock().unwrap_or_else(|p| p.into_inner()).take();
}

/// Creates the threadsafe function of a new context (it starts
/// unreferenced) and its inbox.
pub fn create_sink(env: napi_env, ctx_id: u64) -> napi::Result<(SharedTsfn, Arc<Inbox>, JsSink)> {
    let name = raw::string(env, "webnn-node context")?;
    let mut tsfn = ptr::null_mut();
    let shared: SharedTsfn = Arc::new(Mutex::new(None));
    let inbox = Arc::new(Inbox::default());
    let data = Box::into_raw(Box::new(TsfnData {
        ctx_id,
        inbox: inbox.clone(),
        shared: shared.clone(),
    })) as *mut c_void;
    // The queue of calls is unbounded (0): a call never fails for being
    // full, so no wake-up is lost.
    // SAFETY: the current callback's env and handle (`name`); no JS
    // function or resource (null); one initial thread (the worker's
    // JsSink releases it); `data` is the live TsfnData box, both the
    // finalize data (freed by `finalize_tsfn`) and the context `call_js`
    // reads; both callbacks have N-API's signatures; `tsfn` a live local.
    let status = unsafe {
        sys::napi_create_threadsafe_function(
            env,
            ptr::null_mut(),
            ptr::null_mut(),
            name,
            0,
            1,
            data,
            Some(finalize_tsfn),
            data,
            Some(call_js),
            &mut tsfn,
        )
    };
    if status != sys::Status::napi_ok {
        // SAFETY: creation failed, so N-API holds no function that could
        // call `call_js` or `finalize_tsfn` with `data`: the box is still
        // ours alone, taken back once.
        drop(unsafe { Box::from_raw(data as *mut TsfnData) });
        return Err(napi::Error::from_reason(
            "cannot create the context's threadsafe function",
        ));
    }
    // SAFETY: on the JS thread that made `tsfn` just above, with its env;
    // the function is alive (nothing has released it yet).
    unsafe { sys::napi_unref_threadsafe_function(env, tsfn) };
    *shared.lock().unwrap_or_else(|p| p.into_inner()) = Some(Tsfn(tsfn));
    Ok((
        shared.clone(),
        inbox.clone(),
        JsSink {
            tsfn: shared,
            inbox,
        },
    ))
}

/// What runs without a live N-API environment, as Miri runs it
/// (`scripts/miri.sh`): the inbox's hand-over between the worker and a
/// JS thread waiting inline, and the threadsafe function's data through
/// `call_js` and its finalizer. The pending table itself does not run
/// here: every entry holds a `napi_deferred` from `napi_create_promise`
/// and a context made by N-API calls, and taking one out calls
/// `napi_(un)ref_threadsafe_function` and settles the promise through
/// N-API, functions that Node provides at load time and that neither a
/// test binary nor Miri has.
#[cfg(test)]
mod tests {
    use super::*;

    /// An environment pointer for the paths that pass it along without
    /// calling N-API: never dereferenced.
    fn no_env() -> napi_env {
        ptr::NonNull::dangling().as_ptr()
    }

    fn done(request: u64) -> Completion {
        Completion {
            request,
            result: Ok(Payload::Done),
        }
    }

    /// Marks this thread's microtask as queued already (an entry of
    /// another context is due), so that `settle_soon` queues none: that
    /// would call N-API.
    fn microtask_queued() {
        DUE.with(|d| d.borrow_mut().push((u64::MAX, Arc::new(Inbox::default()))));
    }

    /// Empties the due list; returns the contexts it named (the one of
    /// [`microtask_queued`] left out).
    fn due_contexts() -> Vec<u64> {
        let due = DUE.with(|d| std::mem::take(&mut *d.borrow_mut()));
        due.into_iter()
            .map(|(id, _)| id)
            .filter(|&id| id != u64::MAX)
            .collect()
    }

    /// A polling turn notes where the JS thread runs for each polled
    /// read's worker, and says when the worker last ran on its CPU (the
    /// JS thread then yields it); once the reads have settled or the time
    /// is up, it stops and notes nothing.
    #[test]
    fn polling_notes_the_js_thread_beside_its_worker() {
        // Where the platform tells a thread's CPU; elsewhere nothing is
        // ever beside anything.
        let tells = cfg!(all(
            any(target_os = "linux", target_os = "android"),
            not(miri)
        ));
        let inbox = Arc::new(Inbox::default());
        let now = Instant::now();
        let mut p = Poll::IDLE;
        p.reads.push((7, inbox.clone()));
        p.until = Some(now + Duration::from_millis(1));
        // This thread stands in for both. The scheduler may move it
        // between two calls, so each pair is tried until it falls on one
        // CPU (a move between two adjacent calls is rare).
        let on_one_cpu = |pair: &mut dyn FnMut() -> bool| (0..1000).any(|_| pair());
        // The turn notes the JS thread's CPU: the worker sees it there.
        assert_eq!(
            on_one_cpu(&mut || {
                assert!(poll_turn(&mut p, now).again);
                inbox.whereabouts.worker_shares_cpu()
            }),
            tells
        );
        // The worker last ran on this CPU: the turn says so.
        assert_eq!(
            on_one_cpu(&mut || {
                inbox.whereabouts.worker_shares_cpu();
                let turn = poll_turn(&mut p, now);
                assert!(turn.again);
                turn.beside_worker
            }),
            tells
        );
        // Settled: polling stops, and the turn compares nothing.
        p.settled(7);
        assert_eq!(
            poll_turn(&mut p, now),
            Turn {
                again: false,
                beside_worker: false,
            }
        );
        assert!(p.until.is_none());
        // Time up with a read still pending: polling stops too.
        p.reads.push((8, inbox.clone()));
        p.until = Some(now);
        assert!(!poll_turn(&mut p, now).again);
        assert!(p.reads.is_empty());
    }

    /// A completion that arrives while the JS thread waits inline is
    /// handed over without the threadsafe function (there is none
    /// here: a call would be a crash) and becomes due for the
    /// microtask; draining settles nothing unknown and empties the
    /// inbox.
    #[test]
    fn a_waiting_js_thread_takes_the_completion_from_the_inbox() {
        let inbox = Arc::new(Inbox::default());
        let tsfn: SharedTsfn = Arc::new(Mutex::new(None));
        let sink = JsSink {
            tsfn: tsfn.clone(),
            inbox: inbox.clone(),
        };
        assert!(expect_soon(&inbox));
        // A second read cannot wait too: one waiter at a time.
        assert!(!expect_soon(&inbox));
        std::thread::spawn(move || sink.complete(done(7)))
            .join()
            .unwrap();
        assert_eq!(inbox.state.load(Ordering::Acquire), DELIVERED);
        microtask_queued();
        assert!(settle_soon(no_env(), 3, &inbox, &tsfn));
        assert_eq!(inbox.state.load(Ordering::Acquire), IDLE);
        assert_eq!(due_contexts(), [3]);
        drain(no_env(), 3, &inbox);
        assert!(inbox.queue.lock().unwrap().is_empty());
    }

    /// The worker completes while the JS thread spins: whichever wins,
    /// the completion is in the inbox once, the state is idle again,
    /// and the context is due exactly when the hand-over happened.
    #[test]
    fn a_completion_racing_the_inline_wait_is_delivered_once() {
        for _ in 0..4 {
            let inbox = Arc::new(Inbox::default());
            let tsfn: SharedTsfn = Arc::new(Mutex::new(None));
            let sink = JsSink {
                tsfn: tsfn.clone(),
                inbox: inbox.clone(),
            };
            assert!(expect_soon(&inbox));
            let worker = std::thread::spawn(move || {
                sink.complete(done(1));
                sink.read_waited(Duration::from_micros(10));
            });
            microtask_queued();
            let inline = settle_soon(no_env(), 5, &inbox, &tsfn);
            worker.join().unwrap();
            let due = due_contexts();
            assert!(due.is_empty() || due == [5], "{due:?}");
            // True exactly when it was handed over inline (then the
            // caller does not poll for it).
            assert_eq!(inline, due == [5]);
            assert_eq!(inbox.state.load(Ordering::Acquire), IDLE);
            assert_eq!(inbox.queue.lock().unwrap().len(), 1);
            assert_eq!(inbox.last_read_wait.load(Ordering::Relaxed), 10_000);
            drain(no_env(), 5, &inbox);
            assert!(inbox.queue.lock().unwrap().is_empty());
        }
    }

    /// With nobody waiting, a completion stays queued for the
    /// threadsafe function's call (none once it is finalized), and the
    /// sink releases nothing it does not hold.
    #[test]
    fn a_completion_nobody_waits_for_stays_queued() {
        let inbox = Arc::new(Inbox::default());
        let sink = JsSink {
            tsfn: Arc::new(Mutex::new(None)),
            inbox: inbox.clone(),
        };
        sink.complete(done(2));
        sink.complete(done(3));
        drop(sink);
        assert_eq!(inbox.state.load(Ordering::Acquire), IDLE);
        let ids: Vec<u64> = inbox.take_all().iter().map(|c| c.request).collect();
        assert_eq!(ids, [2, 3]);
    }

    /// The threadsafe function's data, as `create_sink` makes it: the
    /// calls borrow it (a null environment, at teardown, does nothing;
    /// completions of no pending promise, and a lost context nobody
    /// knows, are dropped) and the finalizer frees it and clears the
    /// shared handle.
    #[test]
    fn call_js_and_the_finalizer_share_the_data() {
        let inbox = Arc::new(Inbox::default());
        let shared: SharedTsfn = Arc::new(Mutex::new(Some(Tsfn(ptr::null_mut()))));
        let data = Box::into_raw(Box::new(TsfnData {
            ctx_id: 9,
            inbox: inbox.clone(),
            shared: shared.clone(),
        })) as *mut c_void;
        inbox.queue.lock().unwrap().extend([
            done(u64::MAX - 1),
            Completion {
                request: CONTEXT_LOST,
                result: Err(Error::unknown("lost")),
            },
        ]);
        // SAFETY: `data` is the live TsfnData box; the null environment
        // returns at once, and the other is passed along unused (no
        // completion has a pending promise or a known context).
        unsafe {
            call_js(ptr::null_mut(), ptr::null_mut(), data, ptr::null_mut());
            assert_eq!(inbox.queue.lock().unwrap().len(), 2);
            call_js(no_env(), ptr::null_mut(), data, ptr::null_mut());
            assert!(inbox.queue.lock().unwrap().is_empty());
            call_js(no_env(), ptr::null_mut(), data, ptr::null_mut());
            finalize_tsfn(no_env(), data, ptr::null_mut());
        }
        assert!(shared.lock().unwrap().is_none());
        assert_eq!(Arc::strong_count(&inbox), 1);
    }
}

//! The per-context timeline: one worker thread that owns the backend and
//! runs commands strictly in submission order.
//!
//! The JS thread only sends [`Command`]s over a channel and never waits for
//! the worker (except `computeSync`). Results travel back through a
//! [`Completion`] sink that the binding layer implements with one
//! threadsafe function per context.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use crate::backend::{Backend, GraphId, TensorId};
use crate::error::{Error, Result};
use crate::graph::Graph;
use crate::tensor::Buf;
use crate::types::OperandDescriptor;

/// Where a command's result goes.
pub enum Responder {
    /// A pending JS promise, by request id.
    Js(u64),
    /// A thread blocked in `computeSync`.
    Sync(Sender<Result<Payload>>),
}

/// A successful result.
#[derive(Debug)]
pub enum Payload {
    Done,
    /// The context was created: its device type and whether it is
    /// accelerated.
    Ready {
        device_type: &'static str,
        accelerated: bool,
        max_tensor_byte_length: usize,
    },
    /// A read's contents: a copy made for the reader, or the tensor's own
    /// buffer shared with it (see [`Command::ReadTensor`]'s `shared`).
    Tensor(Arc<Buf>),
    /// A `compute()`'s results, and its inputs handed back when asked
    /// (the caller's transferred buffers return as these, with no copy).
    Outputs {
        outputs: Vec<Buf>,
        inputs: Vec<Buf>,
    },
}

/// A finished JS request.
pub struct Completion {
    pub request: u64,
    pub result: Result<Payload>,
}

/// The request id of the completion that reports a lost context (its
/// result is the reason); real requests are numbered from 1.
pub const CONTEXT_LOST: u64 = 0;

/// Receives completions on the worker thread and forwards them to JS.
pub trait CompletionSink: Send + Sync + 'static {
    fn complete(&self, completion: Completion);

    /// How long a read took from its request (on the JS thread) to its
    /// completion, reported just before the completion: lets the sink
    /// guess whether the next read is quick enough to wait for.
    fn read_waited(&self, _waited: std::time::Duration) {}

    /// Where the JS thread that this sink reports to last ran, if it
    /// says: the worker then yields more often in its wait while the JS
    /// thread is on its CPU ([`Whereabouts`]).
    fn whereabouts(&self) -> Option<&Whereabouts> {
        None
    }

    /// Where the JS thread offers its large copies, if it does: the
    /// worker takes pieces of them while it waits for a command.
    fn help_desk(&self) -> Option<&crate::copy::HelpDesk> {
        None
    }
}

/// Where the JS thread and a context's worker last ran.
///
/// Each waits for the other by spinning (the JS thread for a read's
/// result, the worker for the next command), yielding its CPU every 64th
/// turn. When the scheduler has put both threads on one CPU (it wakes a
/// sleeping thread beside the one that woke it, and moves it away only
/// later), the spinner holds the very CPU that the other needs; each then
/// yields every eighth turn instead, and the worker moves to another CPU
/// for a while where it has one ([`step_aside`]). Measured on a 2-vCPU
/// VM, the round trip of a 1,000-element add (write, dispatch, read) with
/// both threads pinned to one CPU: 14.4 us yielding every 64th turn,
/// 9.4-9.9 us every eighth. Yielding every eighth turn on separate CPUs
/// made it 10-12 us instead of 5.7-6.0, hence the check of where they
/// are.
#[derive(Default)]
pub struct Whereabouts {
    /// The CPU number plus one; 0 while unknown.
    js: AtomicU32,
    worker: AtomicU32,
}

impl Whereabouts {
    /// Notes the JS thread's CPU; true when the worker last ran on it.
    pub fn js_shares_cpu(&self) -> bool {
        Self::shares(&self.js, &self.worker)
    }

    /// Notes the worker's CPU; true when the JS thread last ran on it.
    pub fn worker_shares_cpu(&self) -> bool {
        Self::shares(&self.worker, &self.js)
    }

    fn shares(mine: &AtomicU32, other: &AtomicU32) -> bool {
        let cpu = current_cpu();
        // Written only when it changes: the other thread reads it at every
        // turn of its own wait.
        if mine.load(Ordering::Relaxed) != cpu {
            mine.store(cpu, Ordering::Relaxed);
        }
        cpu != 0 && other.load(Ordering::Relaxed) == cpu
    }
}

/// How long the worker keeps off the JS thread's CPU once it has found
/// itself there ([`step_aside`]): each time it or the JS thread sleeps and
/// is woken by the other, the scheduler may put it back beside the thread
/// that woke it (seen within a millisecond when the worker only moved).
#[cfg(all(target_os = "linux", not(miri)))]
const ASIDE_FOR: std::time::Duration = std::time::Duration::from_millis(20);

#[cfg(all(target_os = "linux", not(miri)))]
thread_local! {
    /// While this thread keeps off a CPU: the CPUs it was allowed before,
    /// and until when.
    static ASIDE: std::cell::Cell<Option<(libc::cpu_set_t, std::time::Instant)>> =
        const { std::cell::Cell::new(None) };
}

/// Moves the calling thread (the worker, when it finds itself on the JS
/// thread's CPU) to another CPU that its affinity allows, and keeps it off
/// this one for [`ASIDE_FOR`] (renewed if it steps aside again meanwhile),
/// until [`end_aside`]. The scheduler wakes a sleeping thread beside the
/// one that woke it, and two threads that spin and yield by turns there
/// are not moved apart while another CPU idles: their caches are always
/// warm, which the load balancer counts against moving them (seen on a
/// 2-vCPU VM: a 1,000-element add's round trip at 10-14 us for whole
/// seconds, against 6 us on two CPUs). False where the thread may run on
/// one CPU only, where the platform cannot say, or where the affinity
/// could not be changed.
fn step_aside() -> bool {
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        let cpu = current_cpu();
        if cpu == 0 {
            return false;
        }
        let size = std::mem::size_of::<libc::cpu_set_t>();
        // What it was allowed before any step aside.
        let allowed = match ASIDE.get() {
            Some((allowed, _)) => allowed,
            None => {
                // SAFETY: cpu_set_t is plain bits, for which all zeros is
                // a valid (empty) set.
                let mut allowed: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                // SAFETY: `allowed` is a live cpu_set_t of `size` bytes
                // that the call fills; pid 0 is the calling thread.
                if unsafe { libc::sched_getaffinity(0, size, &mut allowed) } != 0 {
                    return false;
                }
                allowed
            }
        };
        let here = (cpu - 1) as usize;
        let mut others = allowed;
        // SAFETY: CPU_ISSET, CPU_CLR and CPU_COUNT read or change only the
        // set given, at a CPU below its capacity in bits (checked first).
        let left = here < 8 * size
            && unsafe {
                libc::CPU_ISSET(here, &allowed) && {
                    libc::CPU_CLR(here, &mut others);
                    libc::CPU_COUNT(&others) > 0
                }
            };
        if !left {
            return false;
        }
        // SAFETY: `others` is a live cpu_set_t of `size` bytes; pid 0 is
        // the calling thread, which runs on a CPU of `others` (not empty)
        // when the call returns.
        if unsafe { libc::sched_setaffinity(0, size, &others) } != 0 {
            return false;
        }
        ASIDE.set(Some((allowed, std::time::Instant::now() + ASIDE_FOR)));
        true
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    {
        false
    }
}

/// Gives the calling thread back every CPU it was allowed before
/// [`step_aside`], once the time is up (`due`) or at once (before the
/// worker sleeps, and as it ends: a context's worker runs on a thread of
/// its pool, which outlives it).
fn end_aside(due: bool) {
    #[cfg(all(target_os = "linux", not(miri)))]
    if let Some((allowed, until)) = ASIDE.get() {
        if due && std::time::Instant::now() < until {
            return;
        }
        ASIDE.set(None);
        // SAFETY: `allowed` is a live cpu_set_t of its size, the set this
        // thread had; pid 0 is the calling thread. Should it fail, the
        // thread keeps the smaller set (it still has a CPU).
        unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &allowed) };
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    let _ = due;
}

/// The CPU this thread runs on, plus one; 0 where the platform does not
/// say (the threads then yield as on separate CPUs), and under Miri,
/// which cannot call C.
fn current_cpu() -> u32 {
    #[cfg(all(any(target_os = "linux", target_os = "android"), not(miri)))]
    {
        // SAFETY: sched_getcpu takes nothing and touches no memory of
        // ours; it returns a CPU number, or -1 on failure.
        let cpu = unsafe { libc::sched_getcpu() };
        u32::try_from(cpu).map_or(0, |c| c.saturating_add(1))
    }
    #[cfg(not(all(any(target_os = "linux", target_os = "android"), not(miri))))]
    {
        0
    }
}

/// Commands, executed in order.
pub enum Command {
    CreateTensor {
        id: TensorId,
        desc: OperandDescriptor,
        label: String,
        /// `createConstantTensor`'s: graphs read the constant's bytes.
        constant: bool,
        respond: Option<Responder>,
    },
    WriteTensor {
        id: TensorId,
        data: Buf,
        label: String,
    },
    ReadTensor {
        id: TensorId,
        respond: Responder,
        /// When the request was made.
        sent: std::time::Instant,
        /// The reader copies the contents out at once (into the caller's
        /// view, or a new ArrayBuffer of a size that
        /// `views::read_shares` picks), so the backend may share the
        /// tensor's buffer rather than copy it
        /// ([`Backend::read_tensor_shared_async`]).
        shared: bool,
        /// Memory the reader readied for a copy of the contents
        /// (`Buf::readied`), for a read that is not `shared`: the backend
        /// copies into it where it can
        /// ([`Backend::read_tensor_into_async`]).
        into: Option<Buf>,
    },
    DestroyTensor {
        id: TensorId,
    },
    Build {
        id: GraphId,
        graph: Arc<Graph>,
        label: String,
        respond: Responder,
    },
    DestroyGraph {
        id: GraphId,
    },
    Dispatch {
        graph: GraphId,
        inputs: Vec<TensorId>,
        outputs: Vec<TensorId>,
        label: String,
    },
    /// A tensor comes back from WebGPU (`exportToGPU`): its new contents,
    /// or why there are none, arrive on `data` from the JS thread once the
    /// GPU has copied them out. The worker waits for them here, so that
    /// every command sent after this one sees the returned contents.
    ReturnTensor {
        id: TensorId,
        data: Receiver<std::result::Result<Buf, String>>,
        label: String,
    },
    /// Completes once every command before it has run.
    Barrier {
        respond: Responder,
    },
    Compute {
        id: GraphId,
        graph: Arc<Graph>,
        inputs: Vec<Buf>,
        /// The inputs come back with the outputs (`compute()` hands them
        /// to JS again); else the backend may consume them.
        hand_back: bool,
        respond: Responder,
    },
}

/// A factory that creates the backend on the worker thread (a wgpu device
/// is best created on the thread that will own it).
pub type BackendFactory = Box<dyn FnOnce() -> Result<Box<dyn Backend>> + Send>;

/// The JS-thread handle of a timeline.
pub struct Timeline {
    sender: Option<Sender<Command>>,
    /// Disconnected once the worker has ended and dropped its backend.
    ended: Option<Receiver<()>>,
}

impl Timeline {
    /// Starts the worker. `ready` (a JS request id) completes with
    /// [`Payload::Ready`] once the backend exists, or with its error (after
    /// which the worker ends). With `host`, the worker runs as a job on one
    /// of that pool's threads (a CPU context with its own threads, whose
    /// kernels run on that pool: see [`crate::backend::cpu::pool`]);
    /// without, on a thread of its own named `name`.
    pub fn start(
        name: String,
        host: Option<Arc<rayon::ThreadPool>>,
        factory: BackendFactory,
        sink: Box<dyn CompletionSink>,
        ready: u64,
    ) -> Result<Timeline> {
        let (sender, receiver) = crossbeam_channel::unbounded();
        let (ended_tx, ended) = crossbeam_channel::bounded::<()>(0);
        let work = move || {
            // Dropped last, after the backend: whoever waits for the end
            // knows the device has been released.
            let _ended = ended_tx;
            run(factory, sink, ready, receiver)
        };
        match host {
            Some(pool) => pool.spawn(work),
            None => {
                std::thread::Builder::new()
                    .name(name)
                    .spawn(work)
                    .map_err(|e| {
                        Error::not_supported(format!("cannot start the context's thread: {e}"))
                    })?;
            }
        }
        Ok(Timeline {
            sender: Some(sender),
            ended: Some(ended),
        })
    }

    /// Queues a command; fails only when the worker has ended.
    pub fn send(&self, command: Command) -> Result<()> {
        self.sender
            .as_ref()
            .and_then(|s| s.send(command).ok())
            .ok_or_else(|| Error::invalid_state("the context is lost"))
    }

    /// Ends the worker after the commands already queued and waits up to
    /// `limit` for it. For environment teardown: a GPU device must be
    /// released before the process exits, or the Vulkan driver's own
    /// teardown may run while its threads still serve the device.
    pub fn close_and_wait(&mut self, limit: Duration) {
        self.sender = None;
        if let Some(ended) = self.ended.take() {
            // Nothing is ever sent: this returns when the worker drops its
            // end (it has ended) or at the limit.
            let _ = ended.recv_timeout(limit);
        }
    }

    /// Ends the worker after the commands already queued, without waiting.
    pub fn close(&mut self) {
        self.sender = None;
        self.ended = None;
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        self.close();
    }
}

fn respond(sink: &dyn CompletionSink, to: Responder, result: Result<Payload>) {
    match to {
        Responder::Js(request) => sink.complete(Completion { request, result }),
        Responder::Sync(s) => {
            // The waiting thread may be gone; nothing to do then.
            let _ = s.send(result);
        }
    }
}

/// Runs one command, turning a panic inside the backend into an error so
/// that no panic ever unwinds out of the worker.
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(Error::operation(format!(
                "{what} failed inside the backend: {msg}"
            )))
        }
    }
}

/// Why a tensor holds no valid contents: the non-fatal error state of the
/// timeline. A dispatch that reads an errored tensor does not run and errors
/// its outputs, keeping the original cause.
#[derive(Debug, Clone)]
struct Errored {
    /// The operation that failed first (`dispatch 'foo'`).
    origin: String,
    /// Why it failed.
    cause: String,
    /// The operation that propagated the error into this tensor, when it is
    /// not the origin.
    via: Option<String>,
}

impl Errored {
    fn to_error(&self) -> Error {
        let via = match &self.via {
            Some(v) => format!("{v} did not run because an input was errored by "),
            None => "errored by ".to_string(),
        };
        Error::operation(format!(
            "readTensor: the tensor is in an errored state: {via}{}: {}",
            self.origin, self.cause
        ))
    }
}

/// Names an operation for error messages: `dispatch 'foo'` or `dispatch`.
fn describe(what: &str, label: &str) -> String {
    if label.is_empty() {
        format!("an unlabelled {what}")
    } else {
        format!("{what} '{label}'")
    }
}

/// The worker's state: the backend and the errored tensors.
struct Worker {
    backend: Box<dyn Backend>,
    /// Shared with reads that a backend finishes on another thread.
    sink: Arc<dyn CompletionSink>,
    errored: HashMap<TensorId, Errored>,
}

/// A read's promise, settled exactly once: by [`PendingRead::finish`], or
/// with an error if the backend drops the read without finishing it (a
/// panic on its way), so no promise is ever left hanging.
struct PendingRead {
    to: Option<(Arc<dyn CompletionSink>, Responder, std::time::Instant)>,
}

impl PendingRead {
    /// Settles with what the backend read (its failures are UnknownErrors).
    fn finish(self, result: Result<Arc<Buf>>) {
        self.settle(result.map_err(|e| Error::unknown(format!("readTensor: {}", e.message))));
    }

    fn settle(mut self, result: Result<Arc<Buf>>) {
        if let Some((sink, r, sent)) = self.to.take() {
            sink.read_waited(sent.elapsed());
            respond(&*sink, r, result.map(Payload::Tensor));
        }
    }
}

impl Drop for PendingRead {
    fn drop(&mut self) {
        if let Some((sink, r, _)) = self.to.take() {
            respond(
                &*sink,
                r,
                Err(Error::unknown(
                    "readTensor: the read was abandoned by the backend",
                )),
            );
        }
    }
}

impl Worker {
    fn execute(&mut self, command: Command) {
        let b = &mut *self.backend;
        let sink = &*self.sink;
        match command {
            Command::CreateTensor {
                id,
                desc,
                label,
                constant,
                respond: r,
            } => {
                let create = || match constant {
                    true => b.create_constant_tensor(id, &desc),
                    false => b.create_tensor(id, &desc),
                };
                let result = guarded("createTensor", create).map_err(|e| {
                    // The spec reports a failed allocation as UnknownError.
                    Error::unknown(format!(
                        "{}: {}",
                        describe("createTensor", &label),
                        e.message
                    ))
                });
                match (r, result) {
                    (Some(r), result) => respond(sink, r, result.map(|_| Payload::Done)),
                    (None, Err(e)) => {
                        // createConstantTensor: its barrier reports it.
                        self.errored.insert(
                            id,
                            Errored {
                                origin: describe("createTensor", &label),
                                cause: e.message,
                                via: None,
                            },
                        );
                    }
                    (None, Ok(())) => {}
                }
            }
            Command::WriteTensor { id, data, label } => {
                match guarded("writeTensor", || b.write_tensor(id, data)) {
                    Ok(()) => {
                        self.errored.remove(&id);
                    }
                    Err(e) => {
                        self.errored.insert(
                            id,
                            Errored {
                                origin: describe("writeTensor", &label),
                                cause: e.message,
                                via: None,
                            },
                        );
                    }
                }
            }
            Command::ReadTensor {
                id,
                respond: r,
                sent,
                shared,
                into,
            } => {
                let pending = PendingRead {
                    to: Some((self.sink.clone(), r, sent)),
                };
                match self.errored.get(&id) {
                    Some(e) => {
                        if let Some(buf) = into {
                            buf.recycle();
                        }
                        pending.settle(Err(e.to_error()))
                    }
                    // The backend may finish the read later, on another
                    // thread (the GPU's reads wait for the device), while
                    // this thread goes on with the next commands.
                    None => {
                        let _ = guarded("readTensor", || {
                            match (shared, into) {
                                // The reader readies no memory for a shared read.
                                (true, _) => b.read_tensor_shared_async(
                                    id,
                                    Box::new(move |r| pending.finish(r)),
                                ),
                                (false, Some(into)) => b.read_tensor_into_async(
                                    id,
                                    into,
                                    Box::new(move |r| pending.finish(r.map(Arc::new))),
                                ),
                                (false, None) => b.read_tensor_async(
                                    id,
                                    Box::new(move |r| pending.finish(r.map(Arc::new))),
                                ),
                            }
                            Ok(())
                        });
                    }
                }
            }
            Command::DestroyTensor { id } => {
                self.errored.remove(&id);
                b.destroy_tensor(id);
            }
            Command::Build {
                id,
                graph,
                label,
                respond: r,
            } => {
                // Whatever stops a backend from compiling is a failed build.
                let result = guarded("build", || b.compile(id, graph)).map_err(|e| {
                    Error::operation(format!("{}: {}", describe("build", &label), e.message))
                });
                respond(sink, r, result.map(|_| Payload::Done));
            }
            Command::DestroyGraph { id } => b.destroy_graph(id),
            Command::Dispatch {
                graph,
                inputs,
                outputs,
                label,
            } => {
                // Named only when something went wrong (a dispatch runs
                // thousands of times a second).
                let me = || describe("dispatch", &label);
                let upstream = inputs.iter().find_map(|t| self.errored.get(t)).cloned();
                let state = match upstream {
                    Some(e) => Some(Errored {
                        via: Some(me()),
                        ..e
                    }),
                    None => match guarded("dispatch", || b.dispatch(graph, &inputs, &outputs)) {
                        Ok(()) => None,
                        Err(e) => Some(Errored {
                            origin: me(),
                            cause: e.message,
                            via: None,
                        }),
                    },
                };
                for t in outputs {
                    match &state {
                        Some(e) => self.errored.insert(t, e.clone()),
                        None => self.errored.remove(&t),
                    };
                }
            }
            Command::ReturnTensor { id, data, label } => {
                // A sender dropped without an answer (its JS object was
                // collected, or its environment ended) still ends the wait.
                let returned = data
                    .recv()
                    .unwrap_or_else(|_| Err("its contents never came back from WebGPU".into()))
                    .and_then(|buf| {
                        guarded("exportToGPU", || b.write_tensor(id, buf)).map_err(|e| e.message)
                    });
                match returned {
                    Ok(()) => {
                        self.errored.remove(&id);
                    }
                    Err(cause) => {
                        self.errored.insert(
                            id,
                            Errored {
                                origin: describe("exportToGPU", &label),
                                cause,
                                via: None,
                            },
                        );
                    }
                }
            }
            Command::Barrier { respond: r } => respond(sink, r, Ok(Payload::Done)),
            Command::Compute {
                id,
                graph,
                inputs,
                hand_back,
                respond: r,
            } => {
                let result = guarded("compute", || match hand_back {
                    true => b
                        .compute_borrowed(id, &graph, &inputs)
                        .map(|outputs| Payload::Outputs { outputs, inputs }),
                    false => b
                        .compute(id, &graph, inputs)
                        .map(|outputs| Payload::Outputs {
                            outputs,
                            inputs: Vec::new(),
                        }),
                })
                .map_err(|e| Error::operation(format!("compute: {}", e.message)));
                respond(sink, r, result);
            }
        }
    }
}

/// How long the worker polls for the next command before it sleeps.
/// Commands come in bursts (write, dispatch, read); catching the next one
/// without a sleep and a wake-up saves tens of microseconds per inference,
/// for a little spinning when the burst is over. Long enough to span the
/// gap between one inference's result reaching JS (through the event loop:
/// some 30 to 50 microseconds) and the next inference's first command.
const SPIN: std::time::Duration = std::time::Duration::from_micros(100);

/// The next command, or `None` once every sender is gone.
fn next_command(
    receiver: &Receiver<Command>,
    js: Option<&Whereabouts>,
    desk: Option<&crate::copy::HelpDesk>,
) -> Option<Command> {
    let mut start = std::time::Instant::now();
    let mut polls = 0u32;
    loop {
        match receiver.try_recv() {
            Ok(c) => return Some(c),
            Err(crossbeam_channel::TryRecvError::Disconnected) => return None,
            Err(crossbeam_channel::TryRecvError::Empty) if start.elapsed() < SPIN => {
                // The JS thread's copy (a write's) is what the next
                // command waits for: help with it rather than spin, and
                // wait the whole time again once it is done.
                if desk.is_some_and(crate::copy::HelpDesk::help) {
                    start = std::time::Instant::now();
                    continue;
                }
                polls = polls.wrapping_add(1);
                let sharing =
                    polls.is_multiple_of(8) && js.is_some_and(Whereabouts::worker_shares_cpu);
                if sharing && step_aside() {
                    continue;
                }
                if polls.is_multiple_of(64) {
                    end_aside(true);
                }
                if polls.is_multiple_of(64) || sharing {
                    // When the machine is busier than its cores, the JS
                    // thread may be waiting for this very core to send the
                    // next command. With a core to itself this returns at
                    // once.
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            Err(crossbeam_channel::TryRecvError::Empty) => {
                end_aside(false);
                return receiver.recv().ok();
            }
        }
    }
}

fn run(
    factory: BackendFactory,
    sink: Box<dyn CompletionSink>,
    ready: u64,
    receiver: Receiver<Command>,
) {
    let shared: Arc<dyn CompletionSink> = Arc::from(sink);
    let sink = &*shared;
    let backend = match guarded("creating the context", factory) {
        Ok(b) => {
            let payload = Payload::Ready {
                device_type: b.device_type(),
                accelerated: b.accelerated(),
                max_tensor_byte_length: b.max_tensor_byte_length(),
            };
            respond(sink, Responder::Js(ready), Ok(payload));
            b
        }
        Err(e) => {
            respond(sink, Responder::Js(ready), Err(e));
            return;
        }
    };
    let mut worker = Worker {
        backend,
        sink: shared.clone(),
        errored: HashMap::new(),
    };
    // Ends when every sender is gone (the context was destroyed or
    // collected) or when the backend can no longer work.
    // However the loop ends, the thread (one of a pool's, which goes on)
    // gets back every CPU it was allowed.
    struct EndAside;
    impl Drop for EndAside {
        fn drop(&mut self) {
            end_aside(false);
        }
    }
    let _aside = EndAside;
    while let Some(command) = next_command(&receiver, sink.whereabouts(), sink.help_desk()) {
        worker.execute(command);
        if let Some(reason) = worker.backend.lost_reason() {
            sink.complete(Completion {
                request: CONTEXT_LOST,
                result: Err(Error::invalid_state(reason)),
            });
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_that_never_noted_its_cpu_shares_none() {
        let w = Whereabouts::default();
        assert!(!w.js_shares_cpu());
        assert!(!Whereabouts::default().worker_shares_cpu());
    }

    #[test]
    fn two_notes_from_one_thread_share_its_cpu_where_the_platform_tells() {
        let w = Whereabouts::default();
        // The thread may move between the two notes; it stays put for
        // most pairs.
        let shared = (0..1000).any(|_| {
            w.worker_shares_cpu();
            w.js_shares_cpu()
        });
        assert_eq!(shared, current_cpu() != 0);
        if cfg!(all(
            any(target_os = "linux", target_os = "android"),
            not(miri)
        )) {
            assert_ne!(current_cpu(), 0);
        }
    }

    /// A thread that steps aside runs on a CPU it was allowed, with the
    /// one it was on taken from its set; it gets the whole set back when
    /// the time is up or at once, not before. Where it may run on one CPU
    /// only (or the platform cannot say), it stays.
    #[test]
    fn a_worker_steps_aside_and_gets_its_cpus_back() {
        #[cfg(all(target_os = "linux", not(miri)))]
        std::thread::spawn(|| {
            let size = std::mem::size_of::<libc::cpu_set_t>();
            let affinity = || {
                // SAFETY: as in `step_aside`: all zeros is a valid (empty)
                // set of plain bits.
                let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
                // SAFETY: a live set of `size` bytes, filled by the call
                // for the calling thread.
                let r = unsafe { libc::sched_getaffinity(0, size, &mut set) };
                assert_eq!(r, 0);
                set
            };
            // SAFETY: CPU_COUNT only reads the set.
            let count = |set: &libc::cpu_set_t| unsafe { libc::CPU_COUNT(set) };
            let before = affinity();
            let stepped = step_aside();
            assert_eq!(stepped, count(&before) > 1 && current_cpu() != 0);
            if stepped {
                let aside = affinity();
                assert_eq!(count(&aside), count(&before) - 1);
                let cpu = (current_cpu() - 1) as usize;
                // SAFETY: a CPU the thread runs on is below the set's size.
                assert!(unsafe { libc::CPU_ISSET(cpu, &aside) });
                // Not yet due: it stays aside.
                end_aside(true);
                assert_eq!(count(&affinity()), count(&before) - 1);
            }
            end_aside(false);
            let after = affinity();
            assert_eq!(count(&after), count(&before));
            // SAFETY: both sets are plain bits of `size` bytes.
            let bytes = |s: &libc::cpu_set_t| unsafe {
                std::slice::from_raw_parts((s as *const libc::cpu_set_t).cast::<u8>(), size)
                    .to_vec()
            };
            assert_eq!(bytes(&after), bytes(&before));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn threads_on_different_cpus_do_not_share() {
        let w = Whereabouts::default();
        // A note that no CPU of this thread can match.
        w.worker.store(u32::MAX, Ordering::Relaxed);
        assert!(!w.js_shares_cpu());
        assert_eq!(w.worker.load(Ordering::Relaxed), u32::MAX);
    }
}

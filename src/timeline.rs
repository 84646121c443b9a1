//! The per-context timeline: one worker thread that owns the backend and
//! runs commands strictly in submission order.
//!
//! The JS thread only sends [`Command`]s over a channel and never waits for
//! the worker (except `computeSync`). Results travel back through a
//! [`Completion`] sink that the binding layer implements with one
//! threadsafe function per context.

use std::sync::Arc;
use std::thread::JoinHandle;

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
    Tensor(Buf),
    Outputs(Vec<Buf>),
}

/// A finished JS request.
pub struct Completion {
    pub request: u64,
    pub result: Result<Payload>,
}

/// Receives completions on the worker thread and forwards them to JS.
pub trait CompletionSink: Send + 'static {
    fn complete(&self, completion: Completion);
}

/// Commands, executed in order.
pub enum Command {
    CreateTensor {
        id: TensorId,
        desc: OperandDescriptor,
        respond: Option<Responder>,
    },
    WriteTensor {
        id: TensorId,
        data: Buf,
    },
    ReadTensor {
        id: TensorId,
        respond: Responder,
    },
    DestroyTensor {
        id: TensorId,
    },
    Build {
        id: GraphId,
        graph: Arc<Graph>,
        respond: Responder,
    },
    DestroyGraph {
        id: GraphId,
    },
    Dispatch {
        graph: GraphId,
        inputs: Vec<TensorId>,
        outputs: Vec<TensorId>,
    },
    /// Completes once every command before it has run.
    Barrier {
        respond: Responder,
    },
    Compute {
        id: GraphId,
        graph: Arc<Graph>,
        inputs: Vec<Buf>,
        respond: Responder,
    },
}

/// A factory that creates the backend on the worker thread (a wgpu device
/// is best created on the thread that will own it).
pub type BackendFactory = Box<dyn FnOnce() -> Result<Box<dyn Backend>> + Send>;

/// The JS-thread handle of a timeline.
pub struct Timeline {
    sender: Option<Sender<Command>>,
    thread: Option<JoinHandle<()>>,
}

impl Timeline {
    /// Starts the worker. `ready` (a JS request id) completes with
    /// [`Payload::Ready`] once the backend exists, or with its error (after
    /// which the worker ends).
    pub fn start(
        name: String,
        factory: BackendFactory,
        sink: Box<dyn CompletionSink>,
        ready: u64,
    ) -> Result<Timeline> {
        let (sender, receiver) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new()
            .name(name)
            .spawn(move || run(factory, sink, ready, receiver))
            .map_err(|e| Error::not_supported(format!("cannot start the context's thread: {e}")))?;
        Ok(Timeline {
            sender: Some(sender),
            thread: Some(thread),
        })
    }

    /// Queues a command; fails only when the worker has ended.
    pub fn send(&self, command: Command) -> Result<()> {
        self.sender
            .as_ref()
            .and_then(|s| s.send(command).ok())
            .ok_or_else(|| Error::invalid_state("the context is lost"))
    }

    /// Ends the worker after the commands already queued, without waiting.
    pub fn close(&mut self) {
        self.sender = None;
        self.thread = None;
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

fn run(
    factory: BackendFactory,
    sink: Box<dyn CompletionSink>,
    ready: u64,
    receiver: Receiver<Command>,
) {
    let sink = &*sink;
    let mut backend = match guarded("creating the context", factory) {
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
    // Ends when every sender is gone: the context was destroyed or collected.
    for command in receiver {
        let b = &mut *backend;
        match command {
            Command::CreateTensor {
                id,
                desc,
                respond: r,
            } => {
                let result = guarded("createTensor", || b.create_tensor(id, &desc));
                if let Some(r) = r {
                    respond(sink, r, result.map(|_| Payload::Done));
                }
            }
            Command::WriteTensor { id, data } => {
                // A failed write has nobody to tell yet; the errored-tensor
                // state of a later issue records it.
                let _ = guarded("writeTensor", || b.write_tensor(id, data));
            }
            Command::ReadTensor { id, respond: r } => {
                let result = guarded("readTensor", || b.read_tensor(id));
                respond(sink, r, result.map(Payload::Tensor));
            }
            Command::DestroyTensor { id } => b.destroy_tensor(id),
            Command::Build {
                id,
                graph,
                respond: r,
            } => {
                // Whatever stops a backend from compiling is a failed build.
                let result = guarded("build", || b.compile(id, graph))
                    .map_err(|e| Error::operation(format!("build: {}", e.message)));
                respond(sink, r, result.map(|_| Payload::Done));
            }
            Command::DestroyGraph { id } => b.destroy_graph(id),
            Command::Dispatch {
                graph,
                inputs,
                outputs,
            } => {
                let _ = guarded("dispatch", || b.dispatch(graph, &inputs, &outputs));
            }
            Command::Barrier { respond: r } => respond(sink, r, Ok(Payload::Done)),
            Command::Compute {
                id,
                graph,
                inputs,
                respond: r,
            } => {
                let result = guarded("compute", || b.compute(id, &graph, inputs));
                respond(sink, r, result.map(Payload::Outputs));
            }
        }
    }
}

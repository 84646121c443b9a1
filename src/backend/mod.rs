//! The backend trait and its two implementations.
//!
//! A backend is owned by its context's timeline thread and only ever sees
//! validated graphs and tensors whose descriptors were checked on the JS
//! thread. It keeps its own tables of tensors and compiled graphs, keyed by
//! ids that the binding layer hands out.

mod bytes_id;
pub mod cpu;
pub mod gpu;
mod profile;
#[cfg(test)]
pub(crate) mod testing;

use std::sync::Arc;

use crate::error::Result;
use crate::graph::Graph;
use crate::tensor::Buf;
use crate::types::OperandDescriptor;
pub(crate) use bytes_id::BytesId;

pub type TensorId = u64;
pub type GraphId = u64;

/// Receives the result of [`Backend::read_tensor_async`], on any thread.
pub type ReadDone = Box<dyn FnOnce(Result<Buf>) + Send>;

/// Receives the result of [`Backend::read_tensor_shared_async`], on any
/// thread.
pub type SharedReadDone = Box<dyn FnOnce(Result<Arc<Buf>>) + Send>;

/// The operations a timeline runs, in submission order.
pub trait Backend {
    /// `"cpu"` or `"gpu"`.
    fn device_type(&self) -> &'static str;
    /// Whether work runs on an accelerator (false for a software adapter).
    fn accelerated(&self) -> bool;
    /// The largest tensor this backend can hold, in bytes
    /// (`opSupportLimits().maxTensorByteLength`).
    fn max_tensor_byte_length(&self) -> usize {
        crate::types::MAX_TENSOR_BYTE_LENGTH
    }
    /// Why the backend can no longer work (a lost device), checked after
    /// every command; the context is then lost with this reason.
    fn lost_reason(&mut self) -> Option<String> {
        None
    }
    /// Allocates a zero-filled tensor.
    fn create_tensor(&mut self, id: TensorId, desc: &OperandDescriptor) -> Result<()>;
    /// The backend's side of a constant tensor (`createConstantTensor`):
    /// graphs embed the constant's bytes, which the binding keeps, and the
    /// tensor is never dispatched, written or read, so it stands only for
    /// the constant's lifetime and memory. A backend that needs no storage
    /// of its own for that overrides this; the default allocates as
    /// `create_tensor` does.
    fn create_constant_tensor(&mut self, id: TensorId, desc: &OperandDescriptor) -> Result<()> {
        self.create_tensor(id, desc)
    }
    fn destroy_tensor(&mut self, id: TensorId);
    /// Replaces a tensor's contents (`data` has its element count and type).
    fn write_tensor(&mut self, id: TensorId, data: Buf) -> Result<()>;
    fn read_tensor(&mut self, id: TensorId) -> Result<Buf>;
    /// Reads a tensor once the work queued before has finished and hands
    /// the contents to `done`. A backend whose reads wait on a device
    /// overrides this so that the commands after a read need not wait for
    /// it; the default reads at once.
    fn read_tensor_async(&mut self, id: TensorId, done: ReadDone) {
        done(self.read_tensor(id))
    }
    /// [`Backend::read_tensor_async`] into `into`, memory the reader
    /// readied for the contents (`Buf::readied`: the tensor's type and
    /// element count). A backend whose tensors live in host memory
    /// copies into it; the default reads as `read_tensor_async` does and
    /// gives `into` to the pool.
    fn read_tensor_into_async(&mut self, id: TensorId, into: Buf, done: ReadDone) {
        into.recycle();
        self.read_tensor_async(id, done)
    }
    /// [`Backend::read_tensor_async`] for a reader that copies the
    /// contents once more anyway (`readTensor(tensor, view)` into the
    /// caller's view): a backend whose tensors live in host memory hands
    /// over the tensor's own buffer, which it never changes in place, so
    /// the contents are copied once instead of twice. The default copies.
    fn read_tensor_shared_async(&mut self, id: TensorId, done: SharedReadDone) {
        self.read_tensor_async(id, Box::new(move |r| done(r.map(Arc::new))))
    }
    /// Compiles a graph once: constants are converted and uploaded here.
    fn compile(&mut self, id: GraphId, graph: Arc<Graph>) -> Result<()>;
    fn destroy_graph(&mut self, id: GraphId);
    /// Runs a compiled graph. `inputs` and `outputs` follow the order of
    /// `graph.inputs` and `graph.outputs`.
    fn dispatch(&mut self, graph: GraphId, inputs: &[TensorId], outputs: &[TensorId])
        -> Result<()>;

    /// [`Backend::compute`] on borrowed inputs, which the caller keeps
    /// (`compute()` hands the very buffers back to JS). This form copies
    /// them for [`Backend::compute`]; backends that can read them where
    /// they are override it.
    fn compute_borrowed(&mut self, graph: GraphId, g: &Graph, inputs: &[Buf]) -> Result<Vec<Buf>> {
        self.compute(graph, g, inputs.iter().map(Buf::pooled_clone).collect())
    }

    /// Runs a graph on host data: inputs in `graph.inputs` order, outputs
    /// returned in `graph.outputs` order. Backends may override this to
    /// avoid the temporary tensors.
    fn compute(&mut self, graph: GraphId, g: &Graph, inputs: Vec<Buf>) -> Result<Vec<Buf>> {
        // Temporary ids from the top of the id space, which the binding never
        // hands out.
        let mut next = u64::MAX;
        let mut ids = |n: usize| -> Vec<TensorId> {
            (0..n)
                .map(|_| {
                    next -= 1;
                    next
                })
                .collect()
        };
        let in_ids = ids(g.inputs.len());
        let out_ids = ids(g.outputs.len());
        let result = (|| {
            for ((&id, (_, operand)), data) in in_ids.iter().zip(&g.inputs).zip(inputs) {
                self.create_tensor(id, &g.operands[*operand])?;
                self.write_tensor(id, data)?;
            }
            for (&id, (_, operand)) in out_ids.iter().zip(&g.outputs) {
                self.create_tensor(id, &g.operands[*operand])?;
            }
            self.dispatch(graph, &in_ids, &out_ids)?;
            out_ids.iter().map(|&id| self.read_tensor(id)).collect()
        })();
        for id in in_ids.into_iter().chain(out_ids) {
            self.destroy_tensor(id);
        }
        result
    }
}

/// Whether a backend of `device` type runs operator `op` (empty: tensors in
/// general) with data type `dt` for its operand named `operand` (the
/// `opSupportLimits()` member name; empty: any); `opSupportLimits()`
/// reports this.
pub fn supports(device: &str, op: &str, operand: &str, dt: crate::types::DataType) -> bool {
    match device {
        "gpu" => gpu::supports(op, operand, dt),
        _ => true,
    }
}

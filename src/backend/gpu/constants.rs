//! Constants on the device, uploaded once per context: the graphs of one
//! context built over the same constant tensors (a language model's
//! prefill and decode graphs over its weights, a model rebuilt for
//! another input shape) share one buffer of each, in the working
//! representation (`convert::widen_constant`). Steps never write a
//! constant's buffer (only intermediates are reused, see `Liveness`),
//! so sharing it is safe.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use super::{convert, Gpu};
use crate::backend::BytesId;
use crate::error::Result;
use crate::types::{DataType, OperandDescriptor};

/// The uploads of a context's graphs, by the constant bytes they were
/// made from ([`BytesId`]); each graph holds the buffers it uses (`Arc`),
/// the cache only finds them.
#[derive(Default)]
pub(super) struct Constants {
    entries: HashMap<Key, Weak<wgpu::Buffer>>,
}

/// A constant's bytes, type and element count.
type Key = (BytesId, DataType, usize);

impl Constants {
    /// Forgets what no graph holds any more.
    pub(super) fn forget_unused(&mut self) {
        self.entries.retain(|_, b| b.strong_count() > 0);
    }

    /// The device buffer of constant `bytes` (of `desc`): the one
    /// uploaded before, or a new upload.
    pub(super) fn get(
        &mut self,
        gpu: &Gpu,
        bytes: &Arc<Vec<u8>>,
        desc: &OperandDescriptor,
    ) -> Result<Arc<wgpu::Buffer>> {
        let key = (BytesId::of(bytes), desc.data_type, desc.element_count());
        if let Some(buf) = self.entries.get(&key).and_then(Weak::upgrade) {
            return Ok(buf);
        }
        let data = convert::widen_constant(desc.data_type, bytes, desc.element_count())?;
        let buf = Arc::new(gpu.upload(&data, "constant")?);
        self.entries.insert(key, Arc::downgrade(&buf));
        Ok(buf)
    }
}

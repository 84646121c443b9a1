//! Reading tensors back: a submitted read ([`ReadJob`]) is a staging
//! buffer being mapped; [`finish_read`] copies its bytes out, inline for
//! a synchronous read or on the [`Reader`] thread for an asynchronous one.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::tensor::Buf;
use crate::types::OperandDescriptor;

/// A read whose copy is submitted: the staging buffer being mapped.
pub(super) struct ReadJob {
    pub(super) index: wgpu::SubmissionIndex,
    pub(super) staging: wgpu::Buffer,
    pub(super) desc: OperandDescriptor,
    pub(super) mapped: MapResult,
    pub(super) done: crate::backend::ReadDone,
}

/// Where a staging buffer's map callback leaves its result.
///
/// wgpu runs map callbacks inside whichever `poll` finds the submission
/// done. When the device is shared (the contexts of one adapter, or the
/// tests of one process, share it) another thread's poll can be running
/// the callbacks while this thread's own wait returns, so the result is
/// waited for here rather than assumed present once the submission is.
pub(super) type MapResult = Arc<MapSlot>;

#[derive(Default)]
pub(super) struct MapSlot {
    result: Mutex<Option<std::result::Result<(), wgpu::BufferAsyncError>>>,
    set: Condvar,
}

impl MapSlot {
    /// The map callback's part.
    pub(super) fn put(&self, r: std::result::Result<(), wgpu::BufferAsyncError>) {
        *self.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
        self.set.notify_all();
    }

    /// The result, once the callback has left it (the submission is
    /// complete, so that is at most another poll's callbacks away); None
    /// if it has not within `patience`.
    fn take(&self, patience: Duration) -> Option<std::result::Result<(), wgpu::BufferAsyncError>> {
        let guard = self.result.lock().unwrap_or_else(|p| p.into_inner());
        let (mut guard, _) = self
            .set
            .wait_timeout_while(guard, patience, |r| r.is_none())
            .unwrap_or_else(|p| p.into_inner());
        guard.take()
    }
}

/// How long a read waits for its map callback once its submission is
/// done: long enough for another thread's poll to run it, short of a hang.
const CALLBACK_PATIENCE: Duration = Duration::from_secs(10);

/// The thread that waits for submitted reads, so that the timeline thread
/// goes on with later commands (further dispatches are recorded and
/// submitted while a read is in flight). It waits for each read's own
/// submission, in order, then copies the mapped bytes out.
pub(super) struct Reader {
    pub(super) jobs: Option<crossbeam_channel::Sender<ReadJob>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Reader {
    pub(super) fn start(device: wgpu::Device) -> Result<Reader> {
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
pub(super) fn finish_read(
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
    let result = mapped.take(CALLBACK_PATIENCE);
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

//! The turns of a GPU task's declared data accesses (`data.rs`): when the
//! accesses after it may start.
//!
//! A GPU access has two: *enqueued*, what the same device's later GPU
//! accesses wait for on the host (then their stream waits for the task's
//! event on the device), and *done*, what every other access waits for
//! (the task's work is complete). A task that ran ends them when its work
//! is enqueued and when it is complete. One that failed once it started
//! (its closure returned an error or panicked, or its completion could not
//! be enqueued) records no event and ends both once what it did enqueue is
//! complete, so the accesses after it need not wait on the device. One
//! that never ran passes them on, as a CPU access does (`dataflow/turn.rs`).

use super::device::DeviceInner;
use super::finish::{finish_work, Record};
use super::GpuStream;
use crate::core::sync::{lock, Mutex};
use crate::dataflow::turn::Turn;
use std::sync::Arc;

/// A declared GPU access's turns.
pub(super) struct GpuTurns {
    enqueued: Option<Turn>,
    done: Option<Turn>,
}

impl GpuTurns {
    /// Both turns, waiting for nothing yet.
    pub(super) fn new() -> Self {
        Self {
            enqueued: Some(Turn::new()),
            done: Some(Turn::new()),
        }
    }

    /// The enqueued turn (for the same device's later accesses).
    pub(super) fn enqueued(&mut self) -> &mut Turn {
        self.enqueued.as_mut().expect("a turn not over")
    }

    /// The done turn (for every other later access).
    pub(super) fn done(&mut self) -> &mut Turn {
        self.done.as_mut().expect("a turn not over")
    }

    /// Takes what is left of them, to end outside any lock.
    fn take(&mut self) -> GpuTurns {
        GpuTurns {
            enqueued: self.enqueued.take(),
            done: self.done.take(),
        }
    }

    /// Ends what is left of them.
    fn end(mut self) {
        if let Some(t) = self.enqueued.take() {
            t.end();
        }
        if let Some(t) = self.done.take() {
            t.end();
        }
    }
}

/// The turns of a task that started running: shared with its completion,
/// and ended after its own work if it fails (when dropped before
/// [`RanTurns::enqueued`]).
pub(super) struct RanTurns<'a> {
    turns: Option<Arc<Mutex<GpuTurns>>>,
    inner: &'a Arc<DeviceInner>,
    lane: &'a GpuStream,
    succeeded: bool,
}

impl<'a> RanTurns<'a> {
    pub(super) fn new(
        turns: Option<GpuTurns>,
        inner: &'a Arc<DeviceInner>,
        lane: &'a GpuStream,
    ) -> Self {
        Self {
            turns: turns.map(|t| Arc::new(Mutex::new(t))),
            inner,
            lane,
            succeeded: false,
        }
    }

    /// What the task's completion runs once its work is complete: ends the
    /// done turn.
    pub(super) fn completion(&self) -> impl FnOnce() + Send + 'static {
        let turns = self.turns.clone();
        move || {
            if let Some(turns) = turns {
                // Taken out first: the lock is not held while it ends.
                let done = lock(&turns).done.take();
                if let Some(t) = done {
                    t.end();
                }
            }
        }
    }

    /// The task's work and event are enqueued and its completion is
    /// registered: ends the enqueued turn (the done turn is the
    /// completion's).
    pub(super) fn enqueued(mut self) {
        self.succeeded = true;
        if let Some(turns) = &self.turns {
            let enqueued = lock(turns).enqueued.take();
            if let Some(t) = enqueued {
                t.end();
            }
        }
    }
}

impl Drop for RanTurns<'_> {
    /// The task failed after it started: its turns end once what it
    /// enqueued is complete.
    fn drop(&mut self) {
        if self.succeeded {
            return;
        }
        let Some(turns) = self.turns.take() else {
            return;
        };
        let in_completion = Arc::clone(&turns);
        let queued = finish_work(self.inner, self.lane, Vec::new(), Record::Lane, move || {
            // Taken out first: the lock is not held while they end.
            let left = lock(&in_completion).take();
            left.end();
        });
        if queued.is_err() {
            // No completion will come: wait for the stream here (a lost
            // context returns at once: nothing runs on it any more).
            // SAFETY: the stream is live (the lane holds it).
            let _ =
                unsafe { cudarc::driver::sys::cuStreamSynchronize(self.lane.stream.cu_stream()) };
            let left = lock(&turns).take();
            left.end();
        }
    }
}

//! What happens after a GPU task's closure returns: an event recorded after
//! the work it enqueued, and a completion that a worker runs once that work
//! is complete (dropping what the task kept alive first); on a failure,
//! what was kept is still kept until the work is complete.

use super::capture::end_left_capture;
use super::device::DeviceInner;
use super::error::is_sticky;
use super::raw::RawEvent;
use super::stream::KeptAlive;
use super::{GpuError, GpuStream};
use crate::core::sync::{lock, Mutex};
use std::sync::Arc;

/// What a running task hands to [`GpuStream::keep_alive`]: taken for its
/// completion when it returns, or, if it panics, kept until the work it
/// enqueued is complete all the same.
pub(super) struct KeptSince<'a> {
    inner: &'a Arc<DeviceInner>,
    lane: &'a GpuStream,
    mark: usize,
    taken: bool,
}

impl<'a> KeptSince<'a> {
    pub(super) fn mark(inner: &'a Arc<DeviceInner>, lane: &'a GpuStream) -> Self {
        KeptSince {
            inner,
            lane,
            mark: lane.kept_mark(),
            taken: false,
        }
    }

    pub(super) fn take(mut self) -> KeptAlive {
        self.taken = true;
        self.lane.take_kept(self.mark)
    }
}

impl Drop for KeptSince<'_> {
    fn drop(&mut self) {
        if !self.taken {
            let kept = self.lane.take_kept(self.mark);
            after_failure(self.inner, self.lane, kept);
        }
    }
}

/// Which event [`finish_work`] records after a task's work.
#[derive(Clone, Copy)]
pub(super) enum Record {
    /// One of the task's own, returned: GPU tasks behind it wait on it.
    Own,
    /// The lane's `iteration_done`, recorded anew for each completion.
    Lane,
}

/// After a task's closure returned: records an event after the work it
/// enqueued and has a worker drop `kept` and run `then` once that work is
/// complete. On `Err` nothing will run `then` (it is dropped), and `kept`
/// was still kept until the work was complete.
pub(super) fn finish_work(
    inner: &Arc<DeviceInner>,
    lane: &GpuStream,
    kept: KeptAlive,
    record: Record,
    then: impl FnOnce() + Send + 'static,
) -> Result<Option<Arc<RawEvent>>, GpuError> {
    let stream = lane.stream.cu_stream();
    let recorded = (|| -> Result<Option<Arc<RawEvent>>, GpuError> {
        // The closure may have left another context current (a call on
        // another device's buffer binds that one).
        inner.make_current()?;
        end_left_capture(stream)?;
        Ok(match record {
            Record::Own => {
                let own = RawEvent::new(&inner.ctx)?;
                own.record(stream)?;
                Some(Arc::new(own))
            }
            Record::Lane => {
                lane.iteration_done.record(stream)?;
                None
            }
        })
    })();
    let recorded = match recorded {
        Ok(recorded) => recorded,
        Err(e) => {
            inner.fail_if_sticky(&e);
            wait_then_drop(lane, kept);
            return Err(e);
        }
    };
    complete_after(inner, lane, recorded.as_ref(), kept, then)?;
    Ok(recorded)
}

/// Has a worker drop `kept` and then run `then` once the work before the
/// most recent record of `own` (the task's own event), or else of the
/// lane's `iteration_done`, is complete. If that cannot be enqueued, `kept`
/// still outlives the work: the stream is waited for first.
fn complete_after(
    inner: &Arc<DeviceInner>,
    lane: &GpuStream,
    own: Option<&Arc<RawEvent>>,
    kept: KeptAlive,
    then: impl FnOnce() + Send + 'static,
) -> Result<(), GpuError> {
    let after = own.unwrap_or(&lane.iteration_done);
    if kept.is_empty() {
        return inner.enqueue_completion(lane, after, then);
    }
    // An event recorded after the work, never again, for the host to wait
    // on before the kept values go: the task's own, or else one of their
    // own (the lane may record `iteration_done` again before the completion
    // runs). The completion already means the work is complete, so the wait
    // returns at once; it is there for tools that check stream order
    // (compute-sanitizer's stream-ordered race tracking sees a host wait on
    // an event, not a host function), so that a buffer freed when its last
    // holder goes is not reported as freed under the other streams' reads.
    let kept_done = match own {
        Some(own) => Arc::clone(own),
        None => match RawEvent::new(&inner.ctx).and_then(|e| {
            e.record(lane.stream.cu_stream())?;
            Ok(Arc::new(e))
        }) {
            Ok(e) => e,
            Err(e) => {
                let e = GpuError::from(e);
                inner.fail_if_sticky(&e);
                wait_then_drop(lane, kept);
                return Err(e);
            }
        },
    };
    // Shared with the action, so that an action dropped unrun (the enqueue
    // failed) does not take the values with it.
    let slot = Arc::new(Mutex::new(Some(kept)));
    let in_action = Arc::clone(&slot);
    let enqueued = inner.enqueue_completion(lane, after, move || {
        // Complete (the completion came): a failed wait changes nothing.
        let _ = kept_done.synchronize_in_context();
        // What the task kept alive goes first: its work is complete.
        drop(lock(&in_action).take());
        then();
    });
    if enqueued.is_err() {
        if let Some(kept) = lock(&slot).take() {
            wait_then_drop(lane, kept);
        }
    }
    enqueued
}

/// Drops `kept` once the work enqueued on `lane`'s stream so far is
/// complete, waiting for it on this thread: only where no completion could
/// be enqueued (an error path). If the stream says its context is lost, no
/// work of it will run any more and the values are dropped now; if it
/// cannot be waited for otherwise (a capture that could not be ended), the
/// values are leaked rather than freed under work that may still read them.
fn wait_then_drop(lane: &GpuStream, kept: KeptAlive) {
    if kept.is_empty() {
        return;
    }
    // SAFETY: the stream is live (the lane holds it).
    let waited = unsafe { cudarc::driver::sys::cuStreamSynchronize(lane.stream.cu_stream()) };
    if waited == cudarc::driver::sys::CUresult::CUDA_SUCCESS || is_sticky(waited) {
        drop(kept);
    } else {
        std::mem::forget(kept);
    }
}

/// After a task's closure failed (returned an error or panicked): a
/// capture it left open is ended, what it kept alive is kept until the work
/// it did enqueue is complete, and the device checks whether its context
/// was lost (the closure's error may be another device's, so it is not
/// taken as this one's).
pub(super) fn after_failure(inner: &Arc<DeviceInner>, lane: &GpuStream, kept: KeptAlive) {
    let ended = inner
        .make_current()
        .map_err(GpuError::from)
        .and_then(|()| end_left_capture(lane.stream.cu_stream()));
    if let Err(e) = &ended {
        inner.fail_if_sticky(e);
    }
    if !kept.is_empty() {
        let _ = finish_work(inner, lane, kept, Record::Lane, || ());
    }
    inner.check_lost();
}

//! One running loop (`LoopJob`): the state its parts share, the count of
//! unfinished parts, the first panic, the merged result.

use super::body::Body;
use super::cancelled::{cancelled_message, CancelledParts};
use crate::core::latch::CountLatch;
use crate::core::registry::Registry;
use crate::core::sync::{AtomicUsize, Ordering, UnsafeCell};
use crate::core::trace::names::SpanName;
use crate::core::unwind::FirstPanic;
use crate::core::worker::Worker;
use crate::dataflow::loop_promise::LoopDeps;
use crate::dataflow::promise::Promise;
use crate::loops::merge::{self, Out};
use std::any::Any;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

/// What every part of one loop shares.
pub(super) struct LoopJob<B: Body> {
    pub(super) body: B,
    /// Iteration `k` runs index `start + k * stride`.
    pub(super) start: usize,
    pub(super) stride: usize,
    pub(super) each: Option<LoopDeps>,
    /// The first panic of any iteration, merge or cancelled part.
    pub(super) panic: FirstPanic,
    /// The merged accumulator, written once by the last merge (`None`
    /// inside when a merge panicked).
    pub(super) result: UnsafeCell<Option<Option<B::Acc>>>,
    pub(super) finish: Finish,
    /// The name of the loop's parts in a trace.
    pub(super) name: SpanName,
}

/// The parts not yet finished (the first part counts from the start), and
/// who learns that the last one finished.
pub(super) enum Finish {
    /// A caller blocked in `for_each`/`reduce`, waiting on the latch.
    Wake(CountLatch<Registry>),
    /// A spawned loop's handle, parked on the promise `done` (taken by the
    /// last part). The handle task keeps the job alive until then, so the
    /// count needs no latch.
    Fulfill {
        pending: AtomicUsize,
        done: UnsafeCell<Option<Promise>>,
    },
}

impl Finish {
    /// Counts a part split off a running one (which holds a count).
    #[inline]
    pub(super) fn add_part(&self) {
        match self {
            Finish::Wake(latch) => latch.increment(),
            Finish::Fulfill { pending, .. } => {
                pending.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

// SAFETY: a job is shared by its parts on several workers. The body is
// Sync; `result` is written once by the last merge and read by the owner
// after the count of parts reaches zero (acquire/release on the count);
// the promise in `Finish::Fulfill` is taken only by the part that brings
// the count to zero.
unsafe impl<B: Body> Sync for LoopJob<B> {}
// SAFETY: as above; a spawned loop's body is also Send.
unsafe impl<B: Body + Send> Send for LoopJob<B> {}

impl<B: Body> LoopJob<B> {
    pub(super) fn record_panic(&self, payload: Box<dyn Any + Send>) {
        self.panic
            .keep(payload, "the payload of a later panic in a loop");
    }

    /// Records that the unstarted iterations `ks` of a cancelled part will
    /// never run. The first cancelled part holds the panic slot for them
    /// all (unless a panic came first): the loop's message names every
    /// cancelled iteration, not just the first part's.
    pub(super) fn record_cancelled(&self, ks: Range<usize>) {
        self.panic.record_with(|slot| match slot.as_mut() {
            None => *slot = Some(Box::new(CancelledParts(vec![ks]))),
            Some(p) => {
                if let Some(parts) = p.downcast_mut::<CancelledParts>() {
                    parts.0.push(ks);
                }
            }
        });
    }

    /// The first panic; call after every part finished (the parts' ends
    /// order their records before this).
    pub(super) fn take_panic(&self) -> Option<Box<dyn Any + Send>> {
        let payload = self.panic.take()?;
        match payload.downcast::<CancelledParts>() {
            Ok(parts) => Some(Box::new(cancelled_message(
                self.start,
                self.stride,
                parts.0,
            ))),
            Err(p) => Some(p),
        }
    }

    /// Counts one part finished (after its deposit); the last one tells
    /// the owner or fulfills the handle's promise.
    ///
    /// # Safety
    /// `job` is live and the calling part has not finished before. The job
    /// may be freed as soon as the count reaches zero, so nothing of it is
    /// touched after that but what was copied out first.
    pub(super) unsafe fn finish_part(job: *const Self) {
        // SAFETY: the caller's unfinished part keeps the job alive until
        // the decrement below.
        let finish = unsafe { &(*job).finish };
        match finish {
            Finish::Wake(latch) => {
                let current = Worker::current().map(|w| &w.shared);
                // SAFETY: our part holds a count; the latch touches nothing
                // of the job after its decrement (the owner may return and
                // free the job at once, see `crate::core::latch`).
                unsafe { CountLatch::decrement(latch, current) };
            }
            Finish::Fulfill { pending, done } => {
                if pending.fetch_sub(1, Ordering::AcqRel) == 1 {
                    // SAFETY: only the part that brought the count to zero
                    // gets here, and the parts' reference keeps the job
                    // alive until it is released below.
                    let promise = done.with_mut(|p| unsafe { (*p).take() });
                    if let Some(p) = promise {
                        p.fulfill();
                    }
                    // SAFETY: a spawned loop's job is in an `Arc` whose
                    // reference the parts hold together (`spawn`); the last
                    // part releases it, and touches nothing of the job after.
                    unsafe { Arc::decrement_strong_count(job) };
                }
            }
        }
    }
}

/// Hands a finished part's accumulator to `out` (see [`crate::loops::merge`]); a
/// merge that panics is recorded and passes `None` up; the value that
/// reaches the root is the loop's result.
pub(super) fn deposit<B: Body>(job: &LoopJob<B>, out: Out<B::Acc>, value: Option<B::Acc>) {
    if !B::MERGES {
        return;
    }
    let merge = |l, r| match catch_unwind(AssertUnwindSafe(|| job.body.merge(l, r))) {
        Ok(v) => Some(v),
        Err(p) => {
            job.record_panic(p);
            None
        }
    };
    // SAFETY: every `Out` of a loop is deposited once: by the part it was
    // given to when it finishes, or by `park_bucket` when it closes a
    // segment.
    if let Some(result) = unsafe { merge::deposit(out, value, merge) } {
        // SAFETY: the root is reached once, by the last merge; the owner
        // reads it after every part finished.
        job.result.with_mut(|r| unsafe { *r = Some(result) });
    }
}

//! `StackJob`: a fork-join task that lives in its joiner's stack frame
//! (the second closure of a `join`).

use crate::core::error::{Cancellation, Cancelled};
use crate::core::latch::CountLatch;
use crate::core::registry::Registry;
use crate::core::task::{Header, TaskRef, VTable};
use crate::core::unwind::{drop_or_report, AbortIfPanic};
use crate::core::worker::Worker;
use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::Arc;

/// A fork-join task that lives in its joiner's stack frame: no allocation,
/// and when no thief took it the joiner calls the closure directly.
#[repr(C)]
pub(crate) struct StackJob<F, R> {
    header: Header,
    /// One count, released by whoever runs or cancels the job (not used
    /// when the joiner takes the job back): the joiner waits on it.
    latch: CountLatch<Registry>,
    f: UnsafeCell<MaybeUninit<F>>,
    result: UnsafeCell<MaybeUninit<std::thread::Result<R>>>,
}

impl<F: FnOnce() -> R, R> StackJob<F, R> {
    const VTABLE: VTable = VTable {
        run: Self::run,
        run_inline: None,
        run_value: None,
        cancel: Self::cancel,
        type_name: std::any::type_name::<F>,
    };

    /// A job joined by worker `owner` of `runtime`.
    pub(crate) fn new(f: F, owner: usize, runtime: &Arc<Registry>) -> Self {
        Self {
            header: Header::new(&Self::VTABLE),
            latch: CountLatch::new(owner, runtime),
            f: UnsafeCell::new(MaybeUninit::new(f)),
            result: UnsafeCell::new(MaybeUninit::uninit()),
        }
    }

    /// The job's header, as a pointer to the whole job (`run` and
    /// `cancel` cast it back to `StackJob`): `#[repr(C)]` puts the header
    /// first, and deriving the pointer from `self`, not from the header
    /// field, keeps the provenance of the whole job.
    pub(crate) fn header(&self) -> NonNull<Header> {
        NonNull::from(self).cast::<Header>()
    }

    /// The job as a queueable task.
    ///
    /// # Safety
    /// The job must neither move nor be dropped before the task was taken
    /// back, or its latch is set (the runner touches nothing of the job
    /// after releasing it).
    pub(crate) unsafe fn as_task(&self) -> TaskRef {
        // SAFETY: the header heads this `#[repr(C)]` job, which its vtable's
        // `run` and `cancel` expect, stays in place until run or taken back
        // (caller), and is queued once.
        unsafe { TaskRef::resident(self.header()) }
    }

    /// Runs the closure in place, after the task was taken back.
    ///
    /// # Safety
    /// The task must have been taken back (so nobody else runs it).
    #[inline]
    pub(crate) unsafe fn run_here(&self) -> std::thread::Result<R> {
        // SAFETY: the closure was initialized by `new` and is read once:
        // the task was taken back, so no runner reads it (caller).
        let f = unsafe { (*self.f.get()).assume_init_read() };
        catch_unwind(AssertUnwindSafe(f))
    }

    /// The result published by the runner.
    ///
    /// # Safety
    /// The latch must be set (see [`StackJob::latch`]).
    pub(crate) unsafe fn take_result(&self) -> std::thread::Result<R> {
        // SAFETY: the runner wrote the result before releasing the latch,
        // which the caller saw set (acquire); the joiner reads it once.
        unsafe { (*self.result.get()).assume_init_read() }
    }

    /// # Safety
    /// `header` came from [`StackJob::header`] of a job of this type that
    /// is still in place (`as_task`'s contract), and the caller owns the
    /// task (it was not taken back).
    unsafe fn run(header: NonNull<Header>) {
        // A raw pointer, not a reference: the joiner may free the job as
        // soon as the latch is released below, while this frame still runs.
        let job = header.cast::<Self>().as_ptr().cast_const();
        // SAFETY: the closure was initialized by `new` and is read once:
        // the owner of the task runs it, and `run_here` is not called for a
        // task that was not taken back; the job is live (caller).
        let f = unsafe { (*(*job).f.get()).assume_init_read() };
        let result = catch_unwind(AssertUnwindSafe(f));
        // The job lives in the joiner's frame, and the joiner waits for
        // the latch: unwinding from here would leave it waiting forever.
        let guard = AbortIfPanic::new();
        // SAFETY: the runner alone writes the result, once, before it
        // releases the latch; the joiner reads it only after.
        unsafe { (*(*job).result.get()).write(result) };
        // SAFETY: the runner holds the latch's one count, and runs on a
        // worker of the joiner's runtime (stack jobs are only ever pushed
        // on a worker's deque and taken by its runtime's workers); nothing
        // of the job is touched after the release.
        unsafe { CountLatch::decrement_on_worker(&raw const (*job).latch) };
        guard.disarm();
    }

    /// # Safety
    /// As for `run`.
    unsafe fn cancel(header: NonNull<Header>, why: Cancellation) {
        // A raw pointer, as in `run`: the job may be freed at the release.
        let job = header.cast::<Self>().as_ptr().cast_const();
        // SAFETY: the closure was initialized by `new` and is read once,
        // by the task's owner (a task taken back is not cancelled); the
        // job is live (caller).
        let f = unsafe { (*(*job).f.get()).assume_init_read() };
        drop_or_report("the destructor of a cancelled task's closure", f);
        let guard = AbortIfPanic::new();
        // SAFETY: the task's owner alone writes the result, once, before
        // it releases the latch; the joiner reads it only after.
        unsafe { (*(*job).result.get()).write(Err(Box::new(Cancelled(why)))) };
        let current = Worker::current().map(|w| &w.shared);
        // SAFETY: the canceller holds the latch's one count, as the runner
        // would; nothing of the job is touched afterwards. (It may run on
        // any thread, hence the general decrement.)
        unsafe { CountLatch::decrement(&raw const (*job).latch, current) };
        guard.disarm();
    }
}

impl<F, R> StackJob<F, R> {
    /// Set once the job ran (or was cancelled) on another thread.
    pub(crate) fn latch(&self) -> &CountLatch<Registry> {
        &self.latch
    }
}

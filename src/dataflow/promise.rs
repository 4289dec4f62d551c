//! `Promise`: a one-shot event any thread can fulfill, which delayed
//! tasks wait on (the protocol underneath is `event.rs`, loom-checked),
//! or that the workers fulfill themselves once a test says so (tested with
//! the runtime's other completions, `core/completions.rs`).

use crate::core::polled::{Polled, Tested as TestedOp};
use crate::core::pool::current_registry;
use crate::core::unwind::report;
use crate::dataflow::event::{Dep, Group};
use crate::dataflow::settle::settle;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;

/// A one-shot dataflow event that tasks can wait for: an ephemeral channel
/// from whoever fulfills it to the tasks delayed on it.
///
/// Cloning gives another handle to the same promise. Any handle may
/// [`fulfill`](Promise::fulfill) it, from any thread. When the last handle
/// is dropped while the promise is unfulfilled, the promise is *broken*:
/// the tasks waiting on it are cancelled and their handles report
/// [`crate::JoinError`] cancellation, rather than waiting forever.
///
/// A handle kept inside the closure of a task that waits on the same
/// promise, directly or through other tasks, forms a *cycle*, which is a
/// user error: see [`spawn_delayed`](crate::spawn_delayed) for what happens and how to avoid it.
///
/// ```
/// use selvedge::{spawn_delayed, Promise, Runtime};
///
/// let rt = Runtime::builder().num_threads(2).build()?;
/// let ready = Promise::new();
/// let consumer = rt.spawn_delayed([ready.dep()], || "ran after fulfill");
/// assert!(!consumer.is_finished());
/// ready.fulfill();
/// assert_eq!(consumer.join(), "ran after fulfill");
/// # Ok::<(), selvedge::BuildError>(())
/// ```
pub struct Promise {
    group: NonNull<Group>,
}

// SAFETY: the group is shared through atomics only; the handle's counts keep
// it alive on whichever thread holds the handle.
unsafe impl Send for Promise {}
// SAFETY: as above; every `&self` method only uses atomics.
unsafe impl Sync for Promise {}

impl Promise {
    /// A new, unfulfilled promise.
    ///
    /// ```
    /// let p = selvedge::Promise::new();
    /// assert!(!p.is_fulfilled());
    /// ```
    pub fn new() -> Self {
        Self {
            group: Group::new(1),
        }
    }

    /// Fulfills the promise and schedules the tasks that were waiting only
    /// for it. Returns `true` for the call that fulfilled it, `false` when
    /// it already was (fulfilling is idempotent). Any thread may call it.
    ///
    /// ```
    /// let p = selvedge::Promise::new();
    /// assert!(p.fulfill());
    /// assert!(!p.fulfill());
    /// assert!(p.is_fulfilled());
    /// ```
    pub fn fulfill(&self) -> bool {
        // SAFETY: our handle keeps the group alive; it has one event.
        unsafe { Group::fulfill(self.group, 0, settle) }
    }

    /// Whether the promise was fulfilled.
    ///
    /// ```
    /// let p = selvedge::Promise::new();
    /// let q = p.clone();
    /// q.fulfill();
    /// assert!(p.is_fulfilled());
    /// ```
    pub fn is_fulfilled(&self) -> bool {
        // SAFETY: our handle keeps the group alive.
        unsafe { self.group.as_ref() }.event(0).is_fulfilled()
    }

    /// This promise as a dependency for [`spawn_delayed`](crate::spawn_delayed). A `Dep` keeps the
    /// promise's memory alive but cannot fulfill it, so it does not keep the
    /// promise from breaking.
    ///
    /// ```
    /// let p = selvedge::Promise::new();
    /// let h = selvedge::spawn_delayed([p.dep()], || 42);
    /// p.fulfill();
    /// assert_eq!(h.join(), 42);
    /// ```
    pub fn dep(&self) -> Dep {
        // SAFETY: our handle keeps the group alive; it has one event.
        unsafe { Group::dep(self.group, 0) }
    }

    /// Has the runtime's workers fulfill the promise themselves once
    /// `has_ended` returns `true`: for an operation that ends outside the
    /// pool (a device, a network card, a library with its own threads) and
    /// that can be asked whether it ended without waiting. No thread blocks
    /// on the operation, and its end reaches the tasks waiting on the
    /// promise without a hop through another thread.
    ///
    /// The workers of the current runtime (the calling worker's, or the
    /// global runtime from any other thread) call `has_ended` while they
    /// look for work and between two tasks (every ten microseconds or so
    /// at most), one call at a time; while they have nothing else to do,
    /// one of them keeps calling it (yielding its CPU between calls to any
    /// thread that wants it) instead of going to sleep, until no operation
    /// began or ended for a millisecond or so; then it calls it every
    /// 100 µs or so. It is called until
    /// it returns `true` or the promise is fulfilled by any handle,
    /// whichever comes first, and dropped then. So an operation with a
    /// callback of its own may also [`fulfill`](Promise::fulfill) the
    /// promise from there: the first of the two counts. A promise being
    /// tested is not work: [`Runtime::sync_root`](crate::Runtime::sync_root)
    /// and the runtime's drop do not wait for it, and one made from outside
    /// once the runtime's drop began is dropped untested.
    ///
    /// `has_ended` must return quickly and never wait: every call holds up
    /// the thread that tests the runtime's operations (a worker, mostly).
    /// It holds a handle to the promise, so the promise does not break
    /// while it is being tested. Should it panic, the panic is
    /// reported on stderr and testing stops: the promise then breaks once
    /// its other handles are dropped unfulfilled.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    ///
    /// let rt = selvedge::Runtime::builder().num_threads(2).build()?;
    /// // An operation that a thread outside the pool ends.
    /// let ended = Arc::new(AtomicBool::new(false));
    /// let done = selvedge::Promise::new();
    /// rt.run(|| {
    ///     let ended = Arc::clone(&ended);
    ///     done.fulfill_when(move || ended.load(Ordering::Acquire));
    /// });
    /// let after = rt.spawn_delayed([done.dep()], || "ran after the operation");
    /// let device = std::thread::spawn(move || ended.store(true, Ordering::Release));
    /// assert_eq!(after.join(), "ran after the operation");
    /// device.join().unwrap();
    /// # Ok::<(), selvedge::BuildError>(())
    /// ```
    pub fn fulfill_when(&self, has_ended: impl FnMut() -> bool + Send + 'static) {
        current_registry().watch(Box::new(Tested {
            promise: self.clone(),
            has_ended,
        }));
    }

    /// The promise's group and this handle's count on it, for a relay
    /// (`settle::relay`), which gives the handle up when it fires.
    pub(crate) fn into_group(self) -> NonNull<Group> {
        let group = self.group;
        std::mem::forget(self);
        group
    }
}

/// A promise that workers fulfill once a test says so
/// ([`Promise::fulfill_when`]).
struct Tested<F> {
    promise: Promise,
    has_ended: F,
}

impl<F: FnMut() -> bool + Send> Polled for Tested<F> {
    fn test(&mut self) -> TestedOp {
        if self.promise.is_fulfilled() {
            return TestedOp::Over;
        }
        match catch_unwind(AssertUnwindSafe(|| (self.has_ended)())) {
            Ok(true) => {
                self.promise.fulfill();
                TestedOp::Over
            }
            Ok(false) => TestedOp::Pending,
            Err(payload) => {
                report(
                    "the test given to Promise::fulfill_when (it is tested no more)",
                    payload,
                );
                TestedOp::Over
            }
        }
    }

    fn has_callback(&self) -> bool {
        false
    }
}

impl Default for Promise {
    fn default() -> Self {
        Self::new()
    }
}

impl Clone for Promise {
    fn clone(&self) -> Self {
        // SAFETY: we hold a handle.
        unsafe { Group::acquire_handle(self.group) };
        Self { group: self.group }
    }
}

impl Drop for Promise {
    fn drop(&mut self) {
        // SAFETY: we give up our handle.
        unsafe { Group::release_handle(self.group, settle) };
    }
}

impl std::fmt::Debug for Promise {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Promise")
            .field("fulfilled", &self.is_fulfilled())
            .finish()
    }
}

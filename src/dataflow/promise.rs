//! `Promise`: a one-shot event any thread can fulfill, which delayed
//! tasks wait on (the protocol underneath is `event.rs`, loom-checked).

use crate::dataflow::event::{Dep, Group};
use crate::dataflow::settle::settle;
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
/// let consumer = rt.submit_delayed([ready.dep()], || "ran after fulfill");
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

    /// The promise's group and this handle's count on it, for a relay
    /// (`settle::relay`), which gives the handle up when it fires.
    pub(crate) fn into_group(self) -> NonNull<Group> {
        let group = self.group;
        std::mem::forget(self);
        group
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

//! Work answered to a thief that stopped waiting for it.
//!
//! A worker out of work sends a steal request, which may travel a while:
//! victims answer at their task boundaries. Meanwhile the worker may find
//! work elsewhere (a task in the injector, such as the root task of
//! `Runtime::run`) or its wait may end, and it goes back to running code
//! that may take long, or even wait for tasks that only other workers can
//! run. Work answered to it then would sit in its reply slot, where no
//! other worker reaches it, until it came back to its scheduler: a task
//! its own code waits for would not run before that code gave up.
//!
//! So a worker that stops waiting withdraws its request
//! ([`Worker::withdraw_request`]), and an answer with work that finds the
//! request withdrawn goes to the injector instead
//! ([`Worker::requeue_refused`]), where any worker finds it and a parked
//! one is woken for it. The slot's side is in `steal.rs`; the protocol
//! is in `docs/PROTOCOLS.md`, section 2.

use super::hooks::NO_WORKER;
use super::Worker;
use crate::core::steal::Reply;
use crate::core::task::Header;

impl Worker {
    /// Withdraws this worker's request in flight. Returns whether the
    /// request has ended: an answer came first, and its work, if any, went
    /// to the injector. Otherwise the request is still in flight and ends
    /// declined (see `steal.rs`).
    #[cold]
    #[inline(never)]
    pub(super) fn withdraw_request(&self) -> bool {
        match self.shared.replies[self.index].withdraw() {
            None => false,
            Some(Reply::Work(list)) => {
                // SAFETY: the list came through our reply slot: it is ours.
                let n = unsafe { self.requeue(list) };
                // Received (its victim counted it given), then passed on.
                self.shared.counters[self.index].tasks_stolen.add(n as u64);
                true
            }
            Some(Reply::Declined | Reply::Pending) => true,
        }
    }

    /// The answering side: `list`, the work this worker took for `thief`,
    /// found its request withdrawn. The work goes to the injector, and the
    /// request ends declined (and is counted so; a trace shows its tasks
    /// given to the thief, then to the injector).
    ///
    /// # Safety
    /// `list` is a non-null list made by `TaskRef::into_list`, owned by the
    /// caller.
    #[cold]
    #[inline(never)]
    pub(super) unsafe fn requeue_refused(&self, thief: usize, list: *mut Header) {
        let shared = &*self.shared;
        // The thief got no work: declined, as its answer says.
        shared.counters[self.index].requests_declined.bump();
        // SAFETY: the caller's promise.
        unsafe { self.requeue(list) };
        shared.replies[thief].send_declined();
        shared.sleep.wake(thief);
    }

    /// Queues the tasks of `list` in the injector and wakes parked workers
    /// for them; returns how many.
    ///
    /// # Safety
    /// As for [`Worker::requeue_refused`].
    unsafe fn requeue(&self, list: *mut Header) -> usize {
        // SAFETY: the list is ours (caller).
        unsafe { self.trace_list_given(list, NO_WORKER) };
        // SAFETY: the caller's promise.
        unsafe { self.shared.inject_list(list) }
    }
}

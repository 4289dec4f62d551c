//! A worker's loop: running tasks, then work from outside its deque,
//! stolen work, backing off and parking, until what it waits for holds
//! (the runtime's shutdown, a join, a latch, quiescence).

use super::{Until, Worker};
use crate::core::deque::Popped;
use crate::core::sync::Ordering;
use crate::core::task::TaskRef;
use crate::core::unwind::AbortIfPanic;
use std::time::{Duration, Instant};

/// Failed rounds spent spinning before yielding the CPU.
const SPIN_ROUNDS: u32 = 32;
/// Failed rounds before an idle or waiting worker parks.
const PARK_AFTER: u32 = 256;
/// The longest a worker yields before it parks, however few rounds that
/// was: on a CPU shared with busy threads a yield can last a time slice,
/// and a parking worker is the one that rescues requests stranded behind
/// a worker stuck in user code.
const YIELD_FOR: Duration = Duration::from_millis(1);

impl Worker {
    /// `sync_root` on a worker: waits, working, until every other worker is
    /// idle and nothing is queued anywhere.
    ///
    /// Only a root task may wait so: a task taken from a queue may be
    /// awaited by a task on another worker, which would then never be idle,
    /// and two root tasks waiting at once would wait for each other. Both
    /// are programmer errors that panic, every time, rather than hang some
    /// of the time.
    pub(crate) fn sync_root(&self) {
        assert!(
            self.in_root.get(),
            "selvedge: sync_root called inside a task: it waits until every other task \
             finished, including any task waiting for this one, so it could wait forever. \
             Call it outside the runtime or in the closure of Runtime::run; inside a task, \
             wait for the work it started with a scope or with join handles"
        );
        let waiting = &self.shared.root_syncs;
        if waiting.fetch_add(1, Ordering::AcqRel) != 0 {
            waiting.fetch_sub(1, Ordering::AcqRel);
            panic!(
                "selvedge: sync_root called by two root tasks at once: each would wait \
                 for the other to finish. Call it from one of them, or from outside the runtime"
            );
        }
        struct Leave<'a>(&'a crate::core::sync::AtomicUsize);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let _leave = Leave(waiting);
        self.wait_until(Until::Quiescent);
    }

    /// Runs one task as a new frame (its children start at the deque's
    /// top), then answers pending steal requests.
    #[inline]
    fn execute(&self, task: TaskRef) {
        // Counted before running, so whoever joins the task sees it counted.
        self.count_task_run();
        let saved = self.frame_base.replace(self.top());
        let root = self.in_root.replace(false);
        self.traced(task, TaskRef::run);
        self.in_root.set(root);
        self.frame_base.set(saved);
        if self.shared.completions.any_in_flight() {
            // What it fires leaves the inbox non-empty: drained below.
            self.poll_between_tasks();
        }
        if !self.own_mailbox.is_empty()
            || self.ready_surplus.get()
            || !self.shared.inbox.looks_empty()
        {
            self.after_task();
        }
    }

    /// The end of a task that left requests, ready surplus or fired signals
    /// (its own, or found by `poll_between_tasks`) to deal with.
    #[cold]
    fn after_task(&self) {
        self.drain_fired_signals();
        let d = self.owner.enter();
        // A lone task left here is what this worker runs next: thieves
        // wait for surplus (or for our next spawn) rather than take it and
        // leave us idle.
        if !self.own_mailbox.is_empty() && !d.has_one() {
            self.answer_with(&d);
        }
        if self.ready_surplus.replace(false) && !d.is_empty() && !d.has_one() {
            self.share_oldest(&d);
        }
    }

    /// Work that arrives from outside the deque: fired signals (whose
    /// actions queue their ready tasks here), the injector, then our reply.
    fn find_outside_work(&self) -> Option<TaskRef> {
        if !self.own_mailbox.is_empty() {
            self.answer_requests();
        }
        if !self.shared.inbox.is_empty() {
            self.drain_inbox();
            if let Some(found) = self.pop_above(self.frame_base.get()) {
                return Some(found);
            }
        }
        if let Some(task) = self.shared.injector.pop() {
            return Some(task);
        }
        self.take_reply()
    }

    /// Pops the newest task at or above `base`.
    #[inline(always)]
    pub(super) fn pop_above(&self, base: u64) -> Option<TaskRef> {
        match self.owner.pop_above(base) {
            Popped::Task(t) => Some(t),
            Popped::Nothing => None,
            Popped::Unsure => self.pop_above_exclusive(base),
        }
    }

    /// `pop_above` when the fast path could not tell: an empty deque, or a
    /// rescuer taking from it.
    #[cold]
    #[inline(never)]
    fn pop_above_exclusive(&self, base: u64) -> Option<TaskRef> {
        self.owner.enter().pop_above(base)
    }

    /// Runs the actions of fired signals (device work that finished).
    #[cold]
    fn drain_inbox(&self) {
        self.shared.inbox.drain();
    }

    /// At a task boundary: runs the actions of signals fired meanwhile, so
    /// that what waits on a device or a message is queued as soon as it can
    /// run, not when this worker runs out of its own tasks (with one worker,
    /// or every worker busy, that could be the end of a whole phase; the
    /// work a completion starts, a message sent on, would wait that long).
    #[inline]
    pub(crate) fn drain_fired_signals(&self) {
        if !self.shared.inbox.looks_empty() {
            self.drain_inbox();
        }
    }

    pub(super) fn done(&self, until: &Until<'_>) -> bool {
        match until {
            Until::Shutdown => {
                self.shared.shutdown.load(Ordering::Acquire) && self.owner.enter().is_empty()
            }
            Until::Complete(c, _) => c.is_complete(),
            Until::Latch(latch) => latch.is_set(),
            // Checked only when out of work: it takes a lock.
            Until::Quiescent => false,
        }
    }

    pub(super) fn quiescent(&self) -> bool {
        self.owner.enter().is_empty()
            && !self.in_flight.get()
            && self
                .shared
                .sleep
                .quiescent_except(self.index, || self.shared.outside_idle())
    }

    /// Runs work until `until` holds: first the children of the current
    /// frame, then outside work and stolen work. Backs off and parks when
    /// nothing is found, but never stops answering steal requests for long.
    pub(crate) fn wait_until(&self, until: Until<'_>) {
        // Tasks catch their own panics, so a panic here is a scheduler bug;
        // unwinding would free frames that other threads may still point
        // to (a join's stack job, a scope, `run`'s borrowed closure).
        let guard = AbortIfPanic::new();
        self.wait_loop(until);
        guard.disarm();
    }

    #[inline(always)]
    fn wait_loop(&self, until: Until<'_>) {
        let base = self.frame_base.get();
        let mut rounds = 0u32;
        let mut yielding_since = None;
        loop {
            if self.done(&until) {
                self.stop_waiting();
                return;
            }
            if let Some(task) = self.pop_above(base) {
                self.stop_waiting();
                self.execute(task);
                rounds = 0;
                continue;
            }
            if let Some(task) = self.find_outside_work() {
                self.stop_waiting();
                self.execute(task);
                rounds = 0;
                continue;
            }
            // Messages in flight: test them here rather than wait for
            // their own thread to find them (`completions.rs`). What this
            // fired (waking nobody) runs here now, before a wait that may
            // be over returns to user code.
            if self.shared.completions.poll() {
                self.drain_fired_signals();
                continue;
            }
            if matches!(until, Until::Quiescent) && self.quiescent() {
                return;
            }
            if !self.in_flight.get() {
                if rounds < PARK_AFTER {
                    self.send_request();
                } else {
                    self.send_request_where_queued();
                }
            }
            rounds = rounds.saturating_add(1);
            if rounds < SPIN_ROUNDS {
                yielding_since = None;
                std::hint::spin_loop();
            } else if rounds < PARK_AFTER {
                if yielding_since.get_or_insert_with(Instant::now).elapsed() < YIELD_FOR {
                    std::thread::yield_now();
                } else {
                    rounds = PARK_AFTER;
                }
            } else if let Some(task) = self.older_work(&until) {
                self.stop_waiting();
                self.execute(task);
                rounds = SPIN_ROUNDS;
                yielding_since = None;
            } else if self.keeps_polling() {
                // Operations in flight: this worker tests them instead of
                // parking (`polling.rs`), and rescues what waits behind a
                // worker stuck in user code, as a parking worker would.
                self.rescue_scan();
                std::thread::yield_now();
            } else {
                self.park(&until);
                yielding_since = None;
                if !matches!(until, Until::Shutdown) {
                    // A waiter goes back to asking for work after a park; an
                    // idle worker waits to be handed some.
                    rounds = SPIN_ROUNDS;
                }
            }
        }
    }

    /// This worker stops waiting for work (it runs a task not from its reply,
    /// or its wait is over): a request of its still out is withdrawn.
    #[inline(always)]
    fn stop_waiting(&self) {
        if self.in_flight.get() && self.withdraw_request() {
            self.in_flight.set(false);
        }
    }

    /// Last resort of a join or scope about to park: a task queued on this
    /// worker *below* the waiting frame. A waiter normally runs only its own
    /// frame's children and leaves older tasks to thieves, but when no
    /// thief came for them in all this time (one worker, or all busy), the
    /// older task may be the very one that fulfills the promise the waiter
    /// needs. Running it here nests it on the waiter's stack, as rayon's
    /// joins do with any local task.
    #[cold]
    fn older_work(&self, until: &Until<'_>) -> Option<TaskRef> {
        match until {
            Until::Complete(..) | Until::Latch(_) => self.pop_above(0),
            Until::Shutdown | Until::Quiescent => None,
        }
    }
}

//! A worker thread: its private state and its loop.
//!
//! A worker runs tasks from its own deque, newest first. At every task
//! boundary (and at every spawn) it looks at its mailbox and answers steal
//! requests from the oldest end of its deque. Out of work, it takes from the
//! injector, then asks a random victim for work, backs off, and finally parks.
//! A worker waiting for a join or a scope runs the same loop (restricted to
//! its own frame's children, then stealing) until the wait is over.

use crate::completion::Completion;
use crate::deque::Deque;
use crate::handle::thread_waker;
use crate::latch::CountLatch;
use crate::loops::{self, LoopFrame};
use crate::runtime::Shared;
use crate::steal::{Mailbox, Reply, StealPolicy, StealRequest, VictimSet};
use crate::sync::Ordering;
use crate::task::{Header, TaskRef};
use rand::rngs::SmallRng;
use rand::{RngExt, SeedableRng};
use std::cell::{Cell, UnsafeCell};
use std::ptr::NonNull;
use std::sync::Arc;
use std::task::Waker;
use std::time::Duration;

/// Failed rounds spent spinning before yielding the CPU.
const SPIN_ROUNDS: u32 = 32;
/// Failed rounds before an idle or waiting worker parks.
const PARK_AFTER: u32 = 256;
/// How often a worker waiting in `sync_root` re-checks quiescence while parked.
const SYNC_ROOT_POLL: Duration = Duration::from_micros(500);

thread_local! {
    static CURRENT: Cell<*const Worker> = const { Cell::new(std::ptr::null()) };
}

/// What a worker waits for in [`Worker::wait_until`].
pub(crate) enum Until<'a> {
    /// The runtime shuts down (the worker's main loop).
    Shutdown,
    /// A joined task completes.
    Complete(&'a Completion),
    /// A count latch (a scope's unfinished tasks, a loop's parts) is set.
    Latch(&'a CountLatch<Shared>),
    /// The whole runtime is quiescent (`sync_root`).
    Quiescent,
}

/// State only the worker's own thread touches.
struct Local {
    deque: Deque,
    rng: SmallRng,
    policy: StealPolicy,
    /// A steal request of ours is travelling.
    in_flight: bool,
    /// Deque position where the running task's children start.
    frame_base: u64,
    tasks_run: u64,
    /// A fulfill queued ready tasks beyond the one this worker runs next;
    /// shared at the end of the current task (see `push_ready`).
    ready_surplus: bool,
    /// The newest parallel-loop part running on this worker's stack (each
    /// links to the one it runs inside): what a steal request can split
    /// when the deque is empty.
    loop_top: *const LoopFrame,
}

/// One worker of a runtime.
pub(crate) struct Worker {
    pub(crate) index: usize,
    pub(crate) shared: Arc<Shared>,
    waker: Waker,
    local: UnsafeCell<Local>,
}

impl Worker {
    /// The worker running on this thread, if any.
    #[inline]
    pub(crate) fn current<'a>() -> Option<&'a Worker> {
        let p = CURRENT.with(Cell::get);
        // SAFETY: CURRENT points to the worker on this thread's stack while
        // its loop runs, and is reset before that frame ends; every caller
        // runs inside that loop.
        unsafe { p.as_ref() }
    }

    /// Runs worker `index` of `shared` on this thread until shutdown.
    pub(crate) fn run(index: usize, shared: Arc<Shared>) {
        let seed = 0x9E37_79B9_7F4A_7C15u64 ^ ((index as u64 + 1) << 17);
        let worker = Worker {
            index,
            shared,
            waker: thread_waker(std::thread::current()),
            local: UnsafeCell::new(Local {
                deque: Deque::new(),
                rng: SmallRng::seed_from_u64(seed),
                policy: StealPolicy::new(),
                in_flight: false,
                frame_base: 0,
                tasks_run: 0,
                ready_surplus: false,
                loop_top: std::ptr::null(),
            }),
        };
        CURRENT.with(|c| c.set(&worker));
        worker.wait_until(Until::Shutdown);
        CURRENT.with(|c| c.set(std::ptr::null()));
    }

    /// Identity of this worker, stored in handles to find their task again.
    #[inline]
    pub(crate) fn id(&self) -> usize {
        self as *const Worker as usize
    }

    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    fn local(&self) -> &mut Local {
        // SAFETY: only this worker's thread calls this (the worker is reached
        // through the thread-local CURRENT), and no caller keeps the
        // reference across a call that could reach `local` again (user code,
        // running a task).
        unsafe { &mut *self.local.get() }
    }

    /// Pushes a task spawned on this worker; returns its deque position.
    #[inline]
    pub(crate) fn push(&self, task: TaskRef) -> u64 {
        let pos = self.local().deque.push(task);
        if !self.shared.mailboxes[self.index].is_empty() {
            self.answer_requests();
        } else if self.shared.sleep.has_sleepers() {
            // Parked workers send no requests: without this a task spawned
            // before a long leaf would wait for it.
            self.share_oldest();
        }
        pos
    }

    /// Pushes a delayed task made ready by a fulfill on this worker.
    ///
    /// Unlike a spawn, a fulfill usually ends its task (a task fulfills
    /// when its output is ready), so this worker is about to run the ready
    /// task itself: its data is hot here, and handing a lone task to a
    /// waiting thief would only bounce a chain of tasks between cores. Only
    /// surplus is shared: at once to a pending steal request, else, when
    /// the current task ends, through the injector, where a worker that
    /// goes idle finds it at once instead of waiting for this one's next
    /// task boundary (tiles of a wavefront can take milliseconds). Sharing
    /// at the end of the task, not at the push, keeps a task that readies
    /// many small tasks in a loop from feeding them one by one to another
    /// core.
    pub(crate) fn push_ready(&self, task: TaskRef) -> u64 {
        // Recorded before the push: once queued the task may be stolen.
        task.note_queued_at(self.id(), self.local().deque.top());
        let pos = self.local().deque.push(task);
        if !self.local().deque.has_one() {
            if !self.shared.mailboxes[self.index].is_empty() {
                self.answer_requests();
            } else {
                self.local().ready_surplus = true;
            }
        }
        pos
    }

    /// This worker's mailbox, which a running loop checks between iterations.
    #[inline]
    pub(crate) fn mailbox(&self) -> &Mailbox {
        &self.shared.mailboxes[self.index]
    }

    /// Registers a loop part that starts running on this worker, so steal
    /// requests can split it.
    #[inline]
    pub(crate) fn enter_loop(&self, frame: &LoopFrame) {
        let l = self.local();
        frame.start(l.loop_top, l.deque.top());
        l.loop_top = frame;
    }

    /// Unregisters the newest loop part (`frame`), which stopped running.
    #[inline]
    pub(crate) fn leave_loop(&self, frame: &LoopFrame) {
        let l = self.local();
        debug_assert!(std::ptr::eq(l.loop_top, frame), "loop parts leave in order");
        l.loop_top = frame.older();
    }

    /// A loop part starting while workers sleep: sleeping workers send no
    /// requests, so hand one of them half of the oldest loop here that has
    /// iterations to give, through the injector (as `push` does with
    /// tasks).
    #[cold]
    pub(crate) fn share_loop(&self, frame: &LoopFrame) {
        if !self.shared.injector.is_empty() {
            return; // the previous share is not taken yet
        }
        if let Some(task) = loops::split_for_sleeper(frame) {
            self.shared.counters[self.index].loop_splits.bump();
            self.shared.injector.push(task);
            self.shared.sleep.wake_any();
        }
    }

    /// Takes back a task this worker pushed at `pos`, if no thief took it.
    #[inline]
    pub(crate) fn take_back(&self, pos: u64, block: NonNull<Header>) -> Option<TaskRef> {
        self.local().deque.take_at(pos, block)
    }

    /// Counts a task about to run (from a queue, or in place by a join).
    #[inline]
    pub(crate) fn count_task_run(&self) {
        let l = self.local();
        l.tasks_run += 1;
        self.shared.counters[self.index].tasks_run.set(l.tasks_run);
    }

    /// Runs one task as a new frame, then answers pending steal requests.
    #[inline]
    fn execute(&self, task: TaskRef) {
        // Counted before running, so whoever joins the task sees it counted.
        self.count_task_run();
        let saved = {
            let l = self.local();
            std::mem::replace(&mut l.frame_base, l.deque.top())
        };
        task.run();
        self.local().frame_base = saved;
        // A lone task left here is what this worker runs next: thieves
        // wait for surplus (or for our next spawn) rather than take it and
        // leave us idle.
        if !self.shared.mailboxes[self.index].is_empty() && !self.local().deque.has_one() {
            self.answer_requests();
        }
        let l = self.local();
        if l.ready_surplus {
            l.ready_surplus = false;
            if !l.deque.is_empty() && !l.deque.has_one() {
                self.share_oldest();
            }
        }
    }

    /// Moves the oldest task to the injector, unless the last one shared is
    /// still there, and wakes a parked worker for it if there is one.
    #[cold]
    fn share_oldest(&self) {
        if !self.shared.injector.is_empty() {
            return; // the previous share is not taken yet
        }
        if let Some(task) = self.local().deque.steal_one() {
            self.shared.injector.push(task);
            if self.shared.sleep.has_sleepers() {
                self.shared.sleep.wake_any();
            }
        }
    }

    /// Answers every waiting steal request: with the back of the oldest
    /// loop running here or a task from the old end of the deque,
    /// whichever is older, else by forwarding the request.
    #[cold]
    pub(crate) fn answer_requests(&self) {
        let shared = &*self.shared;
        let mailbox = &shared.mailboxes[self.index];
        while let Some(req) = mailbox.take() {
            let l = self.local();
            let c = &shared.counters[self.index];
            // The oldest work goes first: a running loop's iterations
            // before the tasks queued since it started (ready tasks its
            // iterations fulfilled, say), but after older tasks. This
            // thief and the others still waiting share the loop.
            let thieves = 1 + mailbox.waiting().min(shared.num_threads());
            let from_loop = loops::pick_for_thieves(l.loop_top, thieves)
                .filter(|(f, _)| l.deque.oldest().is_none_or(|pos| !f.is_younger_than(pos)));
            let work = if let Some((frame, give)) = from_loop {
                c.loop_splits.bump();
                Some((frame.split_back(give).into_list(std::ptr::null_mut()), 1))
            } else if req.half {
                l.deque.steal_half()
            } else {
                l.deque
                    .steal_one()
                    .map(|t| (t.into_list(std::ptr::null_mut()), 1))
            };
            match work {
                Some((list, n)) => {
                    c.requests_answered.bump();
                    c.tasks_given.add(n as u64);
                    shared.replies[req.thief].send_work(list);
                    shared.sleep.wake(req.thief);
                }
                None => {
                    c.requests_declined.bump();
                    self.forward(req);
                }
            }
        }
    }

    fn forward(&self, mut req: StealRequest) {
        req.tried.insert(self.index);
        match self.pick_victim(&req.tried) {
            Some(v) => {
                self.shared.mailboxes[v].post(req);
                self.shared.sleep.wake(v);
            }
            None => {
                self.shared.replies[req.thief].send_declined();
                self.shared.sleep.wake(req.thief);
            }
        }
    }

    /// A random worker not in `tried` and not idle-parked.
    fn pick_victim(&self, tried: &VictimSet) -> Option<usize> {
        let n = self.shared.num_threads();
        let sleep = &self.shared.sleep;
        let eligible = |i: &usize| !tried.contains(*i) && !sleep.is_sleeping(*i);
        let count = (0..n).filter(eligible).count();
        if count == 0 {
            return None;
        }
        let k = self.local().rng.random_range(0..count);
        (0..n).filter(eligible).nth(k)
    }

    fn send_request(&self) {
        let tried = VictimSet::only(self.index);
        if let Some(v) = self.pick_victim(&tried) {
            let half = {
                let l = self.local();
                l.in_flight = true;
                l.policy.steal_half()
            };
            self.shared.counters[self.index].requests_sent.bump();
            self.shared.mailboxes[v].post(StealRequest {
                thief: self.index,
                tried,
                half,
            });
            self.shared.sleep.wake(v);
        }
    }

    /// Collects the answer to our request: stolen tasks go on our deque and
    /// the newest is returned to run.
    fn take_reply(&self) -> Option<TaskRef> {
        match self.shared.replies[self.index].take() {
            Reply::Pending => None,
            Reply::Declined => {
                self.local().in_flight = false;
                None
            }
            Reply::Work(mut list) => {
                let l = self.local();
                l.in_flight = false;
                let mut n = 0u64;
                while !list.is_null() {
                    // SAFETY: the list came through our reply slot.
                    let (task, rest) = unsafe { TaskRef::pop_list(list) };
                    l.deque.push(task);
                    list = rest;
                    n += 1;
                }
                l.policy.record_theft(n, l.tasks_run);
                self.shared.counters[self.index].tasks_stolen.add(n);
                l.deque.pop_above(0)
            }
        }
    }

    /// Work that arrives from outside the deque: fired signals (whose
    /// actions queue their ready tasks here), the injector, then our reply.
    fn find_outside_work(&self) -> Option<TaskRef> {
        self.answer_requests();
        if !self.shared.inbox.is_empty() {
            self.drain_inbox();
            let l = self.local();
            if let Some(task) = l.deque.pop_above(l.frame_base) {
                return Some(task);
            }
        }
        if let Some(task) = self.shared.injector.pop() {
            return Some(task);
        }
        self.take_reply()
    }

    /// Runs the actions of fired signals (device work that finished).
    #[cold]
    fn drain_inbox(&self) {
        self.shared.inbox.drain();
    }

    fn done(&self, until: &Until<'_>) -> bool {
        match until {
            Until::Shutdown => {
                self.shared.shutdown.load(Ordering::Acquire) && self.local().deque.is_empty()
            }
            Until::Complete(c) => c.is_complete(),
            Until::Latch(latch) => latch.is_set(),
            // Checked only when out of work: it takes a lock.
            Until::Quiescent => false,
        }
    }

    fn quiescent(&self) -> bool {
        let l = self.local();
        l.deque.is_empty()
            && !l.in_flight
            && self
                .shared
                .sleep
                .quiescent_except(self.index, || self.shared.outside_idle())
    }

    /// Runs work until `until` holds: first the children of the current
    /// frame, then outside work and stolen work. Backs off and parks when
    /// nothing is found, but never stops answering steal requests for long.
    pub(crate) fn wait_until(&self, until: Until<'_>) {
        let base = self.local().frame_base;
        let mut rounds = 0u32;
        loop {
            if self.done(&until) {
                return;
            }
            if let Some(task) = self.local().deque.pop_above(base) {
                self.execute(task);
                rounds = 0;
                continue;
            }
            if let Some(task) = self.find_outside_work() {
                self.execute(task);
                rounds = 0;
                continue;
            }
            if matches!(until, Until::Quiescent) && self.quiescent() {
                return;
            }
            if rounds < PARK_AFTER && !self.local().in_flight {
                self.send_request();
            }
            rounds = rounds.saturating_add(1);
            if rounds < SPIN_ROUNDS {
                std::hint::spin_loop();
            } else if rounds < PARK_AFTER {
                std::thread::yield_now();
            } else if let Some(task) = self.older_work(&until) {
                self.execute(task);
                rounds = SPIN_ROUNDS;
            } else {
                self.park(&until);
                if !matches!(until, Until::Shutdown) {
                    // A waiter goes back to asking for work after a park; an
                    // idle worker waits to be handed some.
                    rounds = SPIN_ROUNDS;
                }
            }
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
            Until::Complete(_) | Until::Latch(_) => self.local().deque.pop_above(0),
            Until::Shutdown | Until::Quiescent => None,
        }
    }

    #[cold]
    fn park(&self, until: &Until<'_>) {
        let shared = &*self.shared;
        let me = self.index;
        let incoming = || !shared.mailboxes[me].is_empty() || shared.replies[me].has_reply();
        shared.counters[me].parks.bump();
        match until {
            Until::Shutdown => {
                shared.sleep.idle_park(me, || {
                    incoming() || !shared.outside_empty() || shared.shutdown.load(Ordering::SeqCst)
                });
            }
            Until::Complete(c) => {
                if c.register(&self.waker) {
                    return;
                }
                shared.sleep.join_park(me, || {
                    incoming() || !shared.outside_empty() || c.is_complete()
                });
            }
            Until::Latch(latch) => {
                // The task that brings the count to zero unparks us.
                shared.sleep.join_park(me, || {
                    incoming() || !shared.outside_empty() || latch.is_set()
                });
            }
            Until::Quiescent => {
                // Nobody signals quiescence to a worker: poll, slowly.
                std::thread::park_timeout(SYNC_ROOT_POLL);
            }
        }
    }
}

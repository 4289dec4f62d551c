//! A worker thread: its private state and its loop.
//!
//! A worker runs tasks from its own deque, newest first. At every task
//! boundary (and at every spawn) it looks at its mailbox and answers steal
//! requests from the oldest end of its deque. Out of work, it takes from the
//! injector, then asks a random victim for work, backs off, and finally parks.
//! A worker waiting for a join or a scope runs the same loop (restricted to
//! its own frame's children, then stealing) until the wait is over.
//!
//! This file holds the worker's state and its own deque's operations; its
//! roles are in the files beside it: the loop (`run_loop.rs`), the victim
//! side (`victims.rs`: answering steal requests, sharing, hand-off), the
//! thief side (`thieves.rs`: choosing a victim, sending requests, taking
//! replies; `withdraw.rs`: withdrawing a request), rescue (`rescuer.rs`:
//! acting for a worker stuck in user code), parking (`parking.rs`), and
//! what it records in a trace (`hooks.rs`, or its no-op twin
//! `hooks_off.rs` without the feature; the state it keeps for that is in
//! `trace_state.rs`, or `trace_state_off.rs`). Testing operations in flight
//! between tasks is `core/polling.rs`'s.

#[cfg(feature = "trace")]
pub(crate) mod hooks;
#[cfg(not(feature = "trace"))]
#[path = "hooks_off.rs"]
pub(crate) mod hooks;
mod parking;
mod rescuer;
mod run_loop;
mod thieves;
#[cfg(feature = "trace")]
mod trace_state;
#[cfg(not(feature = "trace"))]
#[path = "trace_state_off.rs"]
mod trace_state;
mod victims;
mod withdraw;

use crate::core::clock::ticks;
use crate::core::deque::Deque;
use crate::core::join_slot::JoinSlot;
use crate::core::latch::CountLatch;
use crate::core::registry::Registry;
use crate::core::rescue::{Guarded, Owner};
use crate::core::split::LoopFrame;
use crate::core::stats::WorkerCounters;
use crate::core::steal::{Mailbox, StealPolicy};
use crate::core::task::{Header, OwnPool, TaskRef};
use crate::core::thread_waker::thread_waker;
use crate::core::worker_address::WorkerAddress;
use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};
use trace_state::TraceState;

/// How many tasks must already be queued on a worker's deque before a
/// `join` on it stops offering its second closure (see
/// `Worker::may_inline_join`).
const INLINE_JOIN_QUEUED: usize = 2;
/// How long a worker remembers that a thief asked it for work (see
/// `Worker::thieves_asked_lately`): about 100 µs at 3 GHz, several times
/// the gap between two requests of a thief that keeps asking.
const THIEVES_LATELY_TICKS: u64 = 1 << 18;
/// How long a worker must stay out of its scheduler code, with tasks
/// queued or requests waiting, before an idle worker rescues them; also how
/// long an idle worker parks while it sees such a worker.
const RESCUE_AFTER: Duration = Duration::from_millis(1);

thread_local! {
    static CURRENT: Cell<*const Worker> = const { Cell::new(std::ptr::null()) };
}

/// What a worker waits for in [`Worker::wait_until`].
pub(crate) enum Until<'a> {
    /// The runtime shuts down (the worker's main loop).
    Shutdown,
    /// A joined task completes; the task's name, for a stall warning
    /// (noted when the wait parks).
    Complete(&'a JoinSlot, &'static str),
    /// A count latch (a scope's unfinished tasks, a loop's parts) is set.
    Latch(&'a CountLatch<Registry>),
    /// The whole runtime is quiescent (`sync_root`).
    Quiescent,
}

/// One worker of a runtime.
///
/// Its deque lives in `Registry` (so an idle worker can rescue its tasks while
/// this one is stuck in user code, see `rescue.rs` and `deque.rs`): pushes
/// and pops take the deque's fast path through `owner`, everything else
/// its exclusive section (`owner.enter()`). The rest of its private
/// state is in `Cell`s: only this thread reaches the worker (through
/// `CURRENT`), and a `Cell` cannot hand out a reference that user code
/// could alias.
pub(crate) struct Worker {
    pub(crate) index: usize,
    /// This worker's side of the rescue protocol on its deque.
    owner: Owner<'static, Deque<TaskRef>>,
    /// This worker's mailbox and counters in `shared`, reached without
    /// going through the `Arc` and an index on every spawn and join.
    own_mailbox: &'static Mailbox,
    own_counters: &'static WorkerCounters,
    /// This thread's block pool, reached without the thread-local.
    pool: OwnPool,
    pub(crate) shared: Arc<Registry>,
    waker: Waker,
    /// xorshift64 state, for picking victims.
    rng: Cell<u64>,
    policy: Cell<StealPolicy>,
    /// A steal request of ours is travelling.
    pub(super) in_flight: Cell<bool>,
    /// Deque position where the running task's children start.
    frame_base: Cell<u64>,
    /// The code running is a root task's own (`Runtime::run`'s closure),
    /// not a task, a `join` closure or a loop body nested in it: the only
    /// code that may wait for the whole runtime (`sync_root`).
    in_root: Cell<bool>,
    tasks_run: Cell<u64>,
    /// A fulfill queued ready tasks beyond the one this worker runs next;
    /// shared at the end of the current task (see `push_ready`).
    ready_surplus: Cell<bool>,
    /// The newest parallel-loop part running on this worker's stack (each
    /// links to the one it runs inside): what a steal request can split
    /// when the deque is empty.
    loop_top: Cell<*const LoopFrame>,
    /// When (`clock::ticks`) this worker last took a steal request from
    /// its mailbox or handed work to a sleeping worker: other workers were
    /// short of work lately, so a span loop starting now keeps its spans
    /// short (see `thieves_asked_lately`).
    last_demand: Cell<u64>,
    /// When this worker last polled the runtime's completion sources
    /// between two tasks (`clock::ticks`).
    pub(super) last_poll: Cell<u64>,
    /// For rescue: each worker's count of tasks run and of tasks queued as
    /// this one last saw them, and since when they read so.
    pub(super) seen: Box<[Cell<(u64, usize, Instant)>]>,
    /// What it keeps for the trace (nothing without the `trace` feature,
    /// when no hook reads it).
    #[allow(dead_code)]
    trace: TraceState,
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
    pub(crate) fn run(index: usize, shared: Arc<Registry>, pool: OwnPool) {
        let seed = 0x9E37_79B9_7F4A_7C15u64 ^ ((index as u64 + 1) << 17);
        let guarded: *const Guarded<Deque<TaskRef>> = &*shared.deques[index];
        // SAFETY: the worker holds `shared`, which owns the deque's slot, for
        // as long as the owner exists (the owner has no drop glue that
        // reaches it, and `Registry` is never moved out of its `Arc`).
        let guarded: &'static Guarded<Deque<TaskRef>> = unsafe { &*guarded };
        let own_mailbox: *const Mailbox = &*shared.mailboxes[index];
        // SAFETY: as for the deque: `shared` owns the mailbox and outlives
        // every use of the worker.
        let own_mailbox: &'static Mailbox = unsafe { &*own_mailbox };
        let own_counters: *const WorkerCounters = &*shared.counters[index];
        // SAFETY: as for the mailbox.
        let own_counters: &'static WorkerCounters = unsafe { &*own_counters };
        let now = Instant::now();
        let worker = Worker {
            index,
            owner: guarded.claim(),
            own_mailbox,
            own_counters,
            pool,
            waker: thread_waker(std::thread::current()),
            rng: Cell::new(seed),
            policy: Cell::new(StealPolicy::new()),
            in_flight: Cell::new(false),
            frame_base: Cell::new(0),
            in_root: Cell::new(false),
            tasks_run: Cell::new(0),
            ready_surplus: Cell::new(false),
            loop_top: Cell::new(std::ptr::null()),
            last_demand: Cell::new(0),
            last_poll: Cell::new(0),
            seen: shared
                .deques
                .iter()
                .map(|_| Cell::new((0, 0, now)))
                .collect(),
            trace: TraceState::new(&shared, index),
            shared,
        };
        /// Clears `CURRENT` when the worker's frame ends, however it ends.
        struct Current;
        impl Drop for Current {
            fn drop(&mut self) {
                CURRENT.with(|c| c.set(std::ptr::null()));
            }
        }
        CURRENT.with(|c| c.set(&worker));
        let _current = Current;
        worker.wait_until(Until::Shutdown);
    }

    /// Marks the running task as a root task (see `in_root`); the mark ends
    /// with the task.
    pub(crate) fn enter_root_task(&self) {
        self.in_root.set(true);
    }

    /// Runs `f`, a task or a part of one that this worker runs in place
    /// (a joined handle's task, a `join` closure, loop iterations), as
    /// nested code: not the root task's own, even inside it, so that
    /// `sync_root` in `f` panics wherever `f` happens to run.
    #[inline(always)]
    pub(crate) fn nested<R>(&self, f: impl FnOnce() -> R) -> R {
        /// Marks the code as the root's own again, however `f` ends.
        struct Restore<'a>(&'a Cell<bool>);
        impl Drop for Restore<'_> {
            #[inline(always)]
            fn drop(&mut self) {
                self.0.set(true);
            }
        }
        if !self.in_root.get() {
            return f(); // the common case: nothing to clear or restore
        }
        self.in_root.set(false);
        let _restore = Restore(&self.in_root);
        f()
    }

    /// This worker's address, which handles and task blocks keep to find a
    /// task this worker queued.
    #[inline(always)]
    pub(crate) fn address(&self) -> WorkerAddress {
        WorkerAddress::of(self)
    }

    /// The deque's current top position.
    #[inline]
    fn top(&self) -> u64 {
        self.owner.top()
    }

    /// Whether a `join` may run both closures here, one after the other,
    /// without offering the second to thieves: this worker's deque already
    /// holds at least [`INLINE_JOIN_QUEUED`] tasks for them (older, so
    /// larger, than anything this join could offer), no thief is waiting
    /// for an answer, and no worker sleeps for want of work. A request that
    /// arrives meanwhile is answered at the next join that does push.
    #[inline(always)]
    pub(crate) fn may_inline_join(&self) -> bool {
        self.owner.data().queued_estimate() >= INLINE_JOIN_QUEUED
            && self.own_mailbox.is_empty()
            && !self.shared.sleep.has_sleepers()
    }

    /// Counts a `join` whose second closure ran in place without being
    /// offered (see `may_inline_join`).
    #[inline(always)]
    pub(crate) fn count_inlined_join(&self) {
        self.own_counters.joins_inlined.bump();
    }

    /// This worker's own block pool (see [`OwnPool`]).
    #[inline(always)]
    pub(crate) fn own_pool(&self) -> OwnPool {
        self.pool
    }

    /// Pushes a task spawned on this worker; returns its deque position.
    #[inline(always)]
    pub(crate) fn push(&self, task: TaskRef) -> u64 {
        let pos = match self.owner.push(task) {
            Ok(pos) => pos,
            Err(task) => self.push_growing(task),
        };
        if !self.own_mailbox.is_empty() {
            self.answer_requests();
        } else if self.shared.sleep.sleepers_after_queueing() {
            // Parked workers send no requests: without this a task spawned
            // before a long leaf would wait for it.
            self.share_with_sleepers();
        }
        pos
    }

    /// Pushes a delayed task that was ready when it was made, as a spawn,
    /// noting in its block where it went so its handle's `join` can take
    /// it back (see `Header::ready_worker`).
    pub(crate) fn push_delayed(&self, task: TaskRef) {
        // Recorded before the push: once queued the task may be stolen.
        task.note_queued_at(self.address(), self.top());
        self.push(task);
    }

    /// `push` when the deque's array is full.
    #[cold]
    #[inline(never)]
    fn push_growing(&self, task: TaskRef) -> u64 {
        self.owner.enter().push(task)
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
    pub(crate) fn push_ready(&self, task: TaskRef) {
        let d = self.owner.enter();
        // Recorded before the push: once queued the task may be stolen.
        task.note_queued_at(self.address(), d.top());
        d.push(task);
        if !d.has_one() {
            if !self.own_mailbox.is_empty() {
                self.answer_with(&d);
            } else {
                self.ready_surplus.set(true);
            }
        }
    }

    /// This worker's mailbox, which a running loop checks between iterations.
    #[inline]
    pub(crate) fn mailbox(&self) -> &Mailbox {
        self.own_mailbox
    }

    /// Whether this worker took a steal request from its mailbox, or woke
    /// a sleeping worker with work, within the last
    /// [`THIEVES_LATELY_TICKS`]: some worker was short of work a moment
    /// ago and may ask (again) while this one runs a long uninterruptible
    /// call.
    #[inline]
    pub(crate) fn thieves_asked_lately(&self) -> bool {
        ticks().wrapping_sub(self.last_demand.get()) < THIEVES_LATELY_TICKS
    }

    /// Registers a loop part that starts running on this worker, so steal
    /// requests can split it.
    #[inline]
    pub(crate) fn enter_loop(&self, frame: &LoopFrame) {
        frame.start(self.loop_top.get(), self.top());
        self.loop_top.set(frame);
    }

    /// Unregisters the newest loop part (`frame`), which stopped running.
    #[inline]
    pub(crate) fn leave_loop(&self, frame: &LoopFrame) {
        debug_assert!(
            std::ptr::eq(self.loop_top.get(), frame),
            "loop parts leave in order"
        );
        self.loop_top.set(frame.older());
    }

    /// Takes back a task this worker pushed at `pos`, if no thief took it.
    #[inline]
    pub(crate) fn take_back(&self, pos: u64, block: NonNull<Header>) -> Option<TaskRef> {
        match self.owner.take_newest(pos, |t| t.ptr() == block) {
            Some(task) => Some(task),
            None => self.take_back_buried(pos, block),
        }
    }

    /// `take_back` for a task that is not the newest (or was stolen).
    #[cold]
    #[inline(never)]
    fn take_back_buried(&self, pos: u64, block: NonNull<Header>) -> Option<TaskRef> {
        self.owner.enter().take_at(pos, |t| t.ptr() == block)
    }

    /// Counts a task about to run (from a queue, or in place by a join).
    #[inline]
    pub(crate) fn count_task_run(&self) {
        let n = self.tasks_run.get() + 1;
        self.tasks_run.set(n);
        self.own_counters.tasks_run.set(n);
    }
}

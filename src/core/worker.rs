//! A worker thread: its private state and its loop.
//!
//! A worker runs tasks from its own deque, newest first. At every task
//! boundary (and at every spawn) it looks at its mailbox and answers steal
//! requests from the oldest end of its deque. Out of work, it takes from the
//! injector, then asks a random victim for work, backs off, and finally parks.
//! A worker waiting for a join or a scope runs the same loop (restricted to
//! its own frame's children, then stealing) until the wait is over.

use crate::core::block_alloc;
use crate::core::block_pool;
use crate::core::clock::ticks;
use crate::core::deque::{Deque, Popped};
use crate::core::join_slot::JoinSlot;
use crate::core::latch::CountLatch;
use crate::core::registry::Registry;
use crate::core::rescue::{Guarded, Owner, OwnerGuard};
use crate::core::split::{self, LoopFrame};
use crate::core::stats::WorkerCounters;
use crate::core::steal::{Mailbox, Reply, StealPolicy, StealRequest, VictimSet};
use crate::core::sync::Ordering;
use crate::core::task::{Header, OwnPool, TaskRef};
use crate::core::thread_waker::thread_waker;
#[cfg(feature = "trace")]
use crate::core::trace::record::{event, Kind, Track, NO_WORKER};
use crate::core::unwind::AbortIfPanic;
use crate::core::worker_address::WorkerAddress;
use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::Arc;
use std::task::Waker;
use std::time::{Duration, Instant};

/// How many tasks must already be queued on a worker's deque before a
/// `join` on it stops offering its second closure (see
/// `Worker::may_inline_join`).
const INLINE_JOIN_QUEUED: usize = 2;
/// How long a worker remembers that a thief asked it for work (see
/// `Worker::thieves_asked_lately`): about 100 µs at 3 GHz, several times
/// the gap between two requests of a thief that keeps asking.
const THIEVES_LATELY_TICKS: u64 = 1 << 18;
/// Failed rounds spent spinning before yielding the CPU.
const SPIN_ROUNDS: u32 = 32;
/// Failed rounds before an idle or waiting worker parks.
const PARK_AFTER: u32 = 256;
/// The longest a worker yields before it parks, however few rounds that
/// was: on a CPU shared with busy threads a yield can last a time slice,
/// and a parking worker is the one that rescues requests stranded behind
/// a worker stuck in user code.
const YIELD_FOR: Duration = Duration::from_millis(1);
/// How often a worker waiting in `sync_root` re-checks quiescence while parked.
const SYNC_ROOT_POLL: Duration = Duration::from_micros(500);
/// How long a worker must stay out of its scheduler code, with tasks
/// queued or requests waiting, before an idle worker rescues them; also how
/// long an idle worker parks while it sees such a worker.
pub(super) const RESCUE_AFTER: Duration = Duration::from_millis(1);

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
    /// This worker's track of the runtime's trace, when it is traced.
    #[cfg(feature = "trace")]
    trace: Option<&'static Track>,
    /// How many `named` calls are running on this thread: while any is,
    /// `spawn` looks up the name (see `TaskRef::name_if_naming`).
    #[cfg(feature = "trace")]
    naming: Cell<u32>,
}

/// Which workers a steal request may go to (see `Worker::pick_victim_among`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Candidates {
    /// Only workers whose deque holds tasks.
    Queued,
    /// Those, and any other worker when none seems to hold tasks.
    AnyIfNoneQueued,
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
        #[cfg(feature = "trace")]
        let trace = shared.tracer.as_ref().map(|t| {
            let track: *const Track = &*t.tracks[index];
            // SAFETY: as for the mailbox: `shared` owns the tracer.
            unsafe { &*track }
        });
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
            #[cfg(feature = "trace")]
            trace,
            #[cfg(feature = "trace")]
            naming: Cell::new(0),
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

    /// Shares the oldest task with a parked worker (see `share_oldest`).
    #[cold]
    #[inline(never)]
    fn share_with_sleepers(&self) {
        self.share_oldest(&self.owner.enter());
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

    /// A loop part starting while workers sleep: sleeping workers send no
    /// requests, so hand one of them half of the oldest loop here that has
    /// iterations to give, through the injector (as `push` does with
    /// tasks).
    #[cold]
    pub(crate) fn share_loop(&self, frame: &LoopFrame) {
        if !self.shared.injector.is_empty() {
            return; // the previous share is not taken yet
        }
        self.give_sleeper_a_share(frame);
    }

    /// A span loop about to run a span (which nothing interrupts) while
    /// workers sleep: hands each sleeper not yet served a share now, half
    /// of what is left each time (of the oldest loop here with iterations
    /// to give), and wakes them. Each woken worker does the same with its
    /// share as it starts, so one large loop reaches every worker within a
    /// few wake-ups instead of a few spans; one share at a time, as
    /// [`Worker::share_loop`] gives, would reach a new worker only when a
    /// span ends. A share still in the injector counts as served.
    #[cold]
    pub(crate) fn share_loop_with_sleepers(&self, frame: &LoopFrame) {
        let sleepers = self.shared.sleep.sleepers();
        let mut pending = self.shared.injector.len();
        while pending < sleepers && self.give_sleeper_a_share(frame) {
            pending += 1;
        }
    }

    /// Splits a share off the oldest loop here with iterations to give,
    /// puts it in the injector and wakes a sleeper for it; `false` if no
    /// loop had any to give.
    fn give_sleeper_a_share(&self, frame: &LoopFrame) -> bool {
        let Some((task, _iterations)) = split::split_for_sleeper(frame) else {
            return false;
        };
        self.last_demand.set(ticks());
        self.own_counters.loop_splits.bump();
        #[cfg(feature = "trace")]
        self.trace_loop_split(&task, NO_WORKER, _iterations as u64);
        self.shared.injector.push(task);
        self.shared.sleep.wake_any();
        true
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

    /// Runs `run` on `task`, as the task's slice in the trace (with
    /// the `trace` feature, when the runtime is traced; else just runs it).
    #[inline(always)]
    pub(crate) fn traced<R>(&self, task: TaskRef, run: impl FnOnce(TaskRef) -> R) -> R {
        #[cfg(feature = "trace")]
        {
            // A task run while a `named` waits on this thread is not made
            // by that `named`'s closure: what it makes keeps its own names.
            let _outside = (self.naming.get() != 0).then(|| self.suspend_naming());
            if let Some(t) = self.trace {
                let (name, flow, t0) = (task.trace_name(), task.trace_flow(), ticks());
                if flow != 0 {
                    // Its arrow ends here. (A graph node's header serves
                    // every run: the next run's arrows are new ones.)
                    task.set_trace_flow(0);
                }
                let r = run(task);
                t.record(event(Kind::Task, 0, t0, ticks(), flow, name));
                return r;
            }
        }
        run(task)
    }

    /// [`traced`](Worker::traced) for a task its own handle's `join` runs
    /// in place: a slice of its own only when something sent it here (a
    /// fulfill made it ready), else it runs inside its joiner's slice as a
    /// call would, as a spawned task that `join` takes back does.
    #[inline(always)]
    pub(crate) fn traced_in_place<R>(&self, task: TaskRef, run: impl FnOnce(TaskRef) -> R) -> R {
        #[cfg(feature = "trace")]
        if task.trace_flow() != 0 {
            return self.traced(task, run);
        }
        run(task)
    }

    /// Clears this thread's `named` name until the guard drops (see
    /// `traced`).
    #[cfg(feature = "trace")]
    #[cold]
    fn suspend_naming(&self) -> impl Drop + '_ {
        struct Resume<'w>(&'w Worker, u32, Option<&'static str>);
        impl Drop for Resume<'_> {
            fn drop(&mut self) {
                self.0.naming.set(self.1);
                crate::core::trace::names::set_pending(self.2);
            }
        }
        let outer = crate::core::trace::names::set_pending(None);
        Resume(self, self.naming.replace(0), outer)
    }

    /// Runs `f`, code that is not a task of its own (the share of a loop its
    /// caller runs), as a slice named `name` in the trace, when traced.
    #[inline(always)]
    pub(crate) fn traced_span<R>(
        &self,
        #[cfg(feature = "trace")] name: &'static str,
        f: impl FnOnce() -> R,
    ) -> R {
        #[cfg(feature = "trace")]
        if let Some(t) = self.trace {
            let t0 = ticks();
            let r = f();
            let name = crate::core::trace::record::name_words(name);
            t.record(event(Kind::Task, 0, t0, ticks(), 0, name));
            return r;
        }
        f()
    }

    /// Records that `task` leaves this worker for worker `to` (`NO_WORKER`:
    /// the injector): the arrow to its run starts here, or passes through
    /// when a fulfill or a split started it.
    #[cfg(feature = "trace")]
    pub(super) fn trace_given(&self, task: &TaskRef, to: u64) {
        if let Some(t) = self.trace {
            let mut flow = task.trace_flow();
            let starts = flow == 0;
            if starts {
                flow = t.new_flow();
                task.set_trace_flow(flow);
            }
            t.record(event(
                Kind::Given,
                to,
                ticks(),
                0,
                flow,
                (0, u64::from(starts)),
            ));
        }
    }

    /// Records that device work was enqueued here with a completion to
    /// come: returns the flow that the completion ends (0: not traced).
    #[cfg(feature = "trace")]
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // GPU tasks only
    pub(crate) fn trace_device_enqueued(&self) -> u64 {
        self.trace.map_or(0, |t| {
            let flow = t.new_flow();
            let name = crate::core::trace::record::name_words("device work");
            t.record(event(Kind::DeviceEnqueued, 0, ticks(), 0, flow, name));
            flow
        })
    }

    /// Records that this worker handles the completion of device work
    /// enqueued with `flow`, whose callback fired at `fired_at`.
    #[cfg(feature = "trace")]
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))] // GPU tasks only
    pub(crate) fn trace_device_done(&self, flow: u64, fired_at: u64) {
        if let (Some(t), true) = (self.trace, flow != 0) {
            t.record(event(Kind::DeviceDone, 0, fired_at, ticks(), flow, (0, 0)));
        }
    }

    /// Whether a `named` runs on this thread now.
    #[cfg(feature = "trace")]
    #[inline(always)]
    pub(crate) fn naming_tasks(&self) -> bool {
        self.naming.get() != 0
    }

    /// A `named` starts on this thread.
    #[cfg(feature = "trace")]
    pub(crate) fn enter_naming(&self) {
        self.naming.set(self.naming.get() + 1);
    }

    /// A `named` ends on this thread.
    #[cfg(feature = "trace")]
    pub(crate) fn leave_naming(&self) {
        self.naming.set(self.naming.get() - 1);
    }

    /// Records that a fulfill on this worker made `task` ready.
    #[cfg(feature = "trace")]
    pub(crate) fn trace_ready(&self, task: &TaskRef) {
        if let Some(t) = self.trace {
            let flow = t.new_flow();
            task.set_trace_flow(flow);
            t.record(event(Kind::Ready, 0, ticks(), 0, flow, task.trace_name()));
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

    /// Moves the oldest task to the injector and wakes a parked worker for
    /// it, unless as many shares as there are sleepers (one at least) are
    /// still there: each sleeper gets a task of its own, as this worker may
    /// next block where nobody sees it. Returns whether it shared one.
    #[cold]
    fn share_oldest(&self, d: &OwnerGuard<'_, Deque<TaskRef>>) -> bool {
        let pending = self.shared.injector.len();
        if pending != 0 && pending >= self.shared.sleep.sleepers() {
            return false;
        }
        let Some(task) = d.steal_one() else {
            return false;
        };
        self.last_demand.set(ticks());
        #[cfg(feature = "trace")]
        self.trace_given(&task, NO_WORKER);
        self.shared.injector.push(task);
        // Unconditional: `wake_any`'s fence is the Dekker pair of the
        // sleeper's re-check of the injector.
        self.shared.sleep.wake_any();
        true
    }

    /// Answers every waiting steal request (see `answer_with`).
    #[cold]
    pub(crate) fn answer_requests(&self) {
        self.answer_with(&self.owner.enter());
    }

    /// Answers every waiting steal request: with the back of the oldest
    /// loop running here or a task from the old end of the deque,
    /// whichever is older, else by forwarding the request.
    #[cold]
    fn answer_with(&self, d: &OwnerGuard<'_, Deque<TaskRef>>) {
        let shared = &*self.shared;
        let mailbox = &shared.mailboxes[self.index];
        while let Some(req) = mailbox.take() {
            self.last_demand.set(ticks());
            // The oldest work goes first: a running loop's iterations
            // before the tasks queued since it started (ready tasks its
            // iterations fulfilled, say), but after older tasks. This
            // thief and the others still waiting share the loop.
            let thieves = 1 + mailbox.waiting().min(shared.num_threads());
            let from_loop = split::pick_for_thieves(self.loop_top.get(), thieves)
                .filter(|(f, _)| d.oldest().is_none_or(|pos| !f.is_younger_than(pos)));
            let work = if let Some((frame, give)) = from_loop {
                shared.counters[self.index].loop_splits.bump();
                let part = frame.split_back(give);
                #[cfg(feature = "trace")]
                self.trace_loop_split(&part, req.thief as u64, give as u64);
                Some((part.into_list(std::ptr::null_mut()), 1))
            } else {
                take_for(d, req.half)
            };
            self.reply(req, work, self.index);
        }
    }

    /// Sends `work` to the thief of `req`, or, without work, forwards the
    /// request on behalf of `victim` (this worker, or the one it rescues).
    pub(super) fn reply(
        &self,
        req: StealRequest,
        work: Option<(*mut Header, usize)>,
        victim: usize,
    ) {
        let shared = &*self.shared;
        let c = &shared.counters[self.index];
        match work {
            Some((list, n)) => {
                #[cfg(feature = "trace")]
                if self.trace.is_some() {
                    let thief = req.thief as u64;
                    // SAFETY: the list is ours until the send below.
                    unsafe {
                        crate::core::task::for_each_listed(list, |task| {
                            self.trace_given(task, thief)
                        })
                    };
                }
                if !shared.replies[req.thief].send_work(list) {
                    // SAFETY: the thief refused the list: it is still ours.
                    unsafe { self.requeue_refused(req.thief, list) };
                    return;
                }
                c.requests_answered.bump();
                c.tasks_given.add(n as u64);
                #[cfg(feature = "trace")]
                if let Some(t) = self.trace {
                    let (thief, flow) = (req.thief as u64, req.flow);
                    t.record(event(
                        Kind::StealAnswered,
                        thief,
                        ticks(),
                        n as u64,
                        flow,
                        (0, 0),
                    ));
                }
                shared.sleep.wake(req.thief);
            }
            None => {
                c.requests_declined.bump();
                self.forward(req, victim);
            }
        }
    }

    fn forward(&self, mut req: StealRequest, declined_by: usize) {
        req.tried.insert(declined_by);
        let next = self.pick_victim(&req.tried);
        #[cfg(feature = "trace")]
        if let Some(t) = self.trace {
            let to = next.map_or(0, |v| v as u64 + 1);
            let thief = req.thief as u64;
            t.record(event(
                Kind::StealDeclined,
                thief,
                ticks(),
                to,
                req.flow,
                (0, 0),
            ));
        }
        match next {
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

    /// A uniform random number below `n` (xorshift64, multiply-shift).
    fn random_below(&self, n: usize) -> usize {
        let mut x = self.rng.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng.set(x);
        ((u128::from(x) * n as u128) >> 64) as usize
    }

    /// A random worker not in `tried` and not idle-parked, one whose deque
    /// holds tasks if any seems to. A request waits in a victim's mailbox
    /// until that victim's next task boundary; sent to a worker with
    /// nothing queued it only waits there to be forwarded, and on many
    /// cores it could wait at several such workers before it reached the
    /// one with work (the chain of producers in a producer-consumer
    /// program, on 16 cores). Queue lengths are hints, read without
    /// ordering; a request that finds the queue empty after all is
    /// forwarded as before.
    fn pick_victim(&self, tried: &VictimSet) -> Option<usize> {
        self.pick_victim_among(tried, Candidates::AnyIfNoneQueued)
    }

    /// `pick_victim`, limited to workers whose deque holds tasks unless
    /// `candidates` lets it fall back on any worker.
    fn pick_victim_among(&self, tried: &VictimSet, candidates: Candidates) -> Option<usize> {
        let shared = &*self.shared;
        let fallback = candidates == Candidates::AnyIfNoneQueued;
        let (mut any, mut any_seen) = (None, 0);
        let (mut busy, mut busy_seen) = (None, 0);
        // One pass, one uniform choice per class (reservoir sampling).
        for i in 0..shared.num_threads() {
            if tried.contains(i) || shared.sleep.is_sleeping(i) {
                continue;
            }
            if fallback {
                any_seen += 1;
                if self.random_below(any_seen) == 0 {
                    any = Some(i);
                }
            }
            if shared.deques[i].peek().queued_estimate() > 0 {
                busy_seen += 1;
                if self.random_below(busy_seen) == 0 {
                    busy = Some(i);
                }
            }
        }
        busy.or(any)
    }

    fn send_request(&self) {
        let tried = VictimSet::only(self.index);
        if let Some(v) = self.pick_victim(&tried) {
            self.post_request(v, tried);
        }
    }

    /// The request of an idle worker that has parked (and woke): only to
    /// a worker whose deque holds tasks. Its earlier requests may all have
    /// been declined before any worker had tasks to give, and a worker
    /// that only runs the tasks it queued (a scope's owner) shares none
    /// unasked. Idle workers do not ask each other, so a runtime with
    /// nothing queued stays asleep.
    #[cold]
    fn send_request_where_queued(&self) {
        let tried = VictimSet::only(self.index);
        if let Some(v) = self.pick_victim_among(&tried, Candidates::Queued) {
            self.post_request(v, tried);
        }
    }

    pub(super) fn post_request(&self, v: usize, tried: VictimSet) {
        self.in_flight.set(true);
        let half = self.policy.get().steal_half();
        self.own_counters.requests_sent.bump();
        #[cfg(feature = "trace")]
        let flow = self.trace.map_or(0, |t| {
            let flow = t.new_flow();
            t.record(event(Kind::StealSent, v as u64, ticks(), 0, flow, (0, 0)));
            flow
        });
        self.shared.mailboxes[v].post(StealRequest {
            thief: self.index,
            tried,
            half,
            #[cfg(feature = "trace")]
            flow,
        });
        self.shared.sleep.wake(v);
    }

    /// Collects the answer to our request: stolen tasks go on our deque and
    /// the newest is returned to run.
    fn take_reply(&self) -> Option<TaskRef> {
        match self.shared.replies[self.index].take() {
            Reply::Pending => None,
            Reply::Declined => {
                self.in_flight.set(false);
                None
            }
            Reply::Work(mut list) => {
                self.in_flight.set(false);
                let d = self.owner.enter();
                let mut n = 0u64;
                while !list.is_null() {
                    // SAFETY: the list came through our reply slot.
                    let (task, rest) = unsafe { TaskRef::pop_list(list) };
                    d.push(task);
                    list = rest;
                    n += 1;
                }
                let mut policy = self.policy.get();
                policy.record_theft(n, self.tasks_run.get());
                self.policy.set(policy);
                self.own_counters.tasks_stolen.add(n);
                let newest = d.pop_above(0);
                // As after a spawn (`push`): a sleeper sends no request.
                while !d.is_empty() && self.shared.sleep.sleepers_after_queueing() {
                    if !self.share_oldest(&d) {
                        break;
                    }
                }
                newest
            }
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
    fn pop_above(&self, base: u64) -> Option<TaskRef> {
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

    fn done(&self, until: &Until<'_>) -> bool {
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

    fn quiescent(&self) -> bool {
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

    /// Hands every task queued here and every waiting steal request to
    /// other workers, before the caller blocks (`block_in_place`).
    /// Requests are answered (or forwarded) first; the tasks left go to the
    /// injector, and a parked worker is woken for each, up to one per
    /// worker. Loop parts running here are not split.
    pub(crate) fn hand_off(&self) {
        let shared = &*self.shared;
        let mut moved = 0usize;
        {
            let d = self.owner.enter();
            self.answer_with(&d);
            while let Some(task) = d.steal_one() {
                #[cfg(feature = "trace")]
                self.trace_given(&task, NO_WORKER);
                shared.injector.push(task);
                moved += 1;
            }
        }
        for _ in 0..moved.min(shared.num_threads()) {
            if !shared.sleep.wake_any() {
                break;
            }
        }
    }

    /// Parks (see `park_untraced`), as a slice of the trace when traced.
    #[cold]
    fn park(&self, until: &Until<'_>) {
        #[cfg(feature = "trace")]
        if let Some(t) = self.trace {
            let (parks, t0) = (self.own_counters.parks.load(), ticks());
            self.park_untraced(until);
            if self.own_counters.parks.load() != parks {
                t.record(event(Kind::Parked, 0, t0, ticks(), 0, (0, 0)));
            }
            return;
        }
        self.park_untraced(until);
    }

    /// Records a loop split that gave `part`, `iterations` iterations, to
    /// worker `to` (`NO_WORKER`: the injector).
    #[cfg(feature = "trace")]
    fn trace_loop_split(&self, part: &TaskRef, to: u64, iterations: u64) {
        if let Some(t) = self.trace {
            let flow = t.new_flow();
            part.set_trace_flow(flow);
            t.record(event(
                Kind::LoopSplit,
                to,
                ticks(),
                iterations,
                flow,
                (0, 0),
            ));
        }
    }

    #[cold]
    fn park_untraced(&self, until: &Until<'_>) {
        let shared = &*self.shared;
        let me = self.index;
        if matches!(until, Until::Quiescent) {
            // Nobody signals quiescence to a worker: poll, slowly.
            shared.counters[me].parks.bump();
            std::thread::park_timeout(SYNC_ROOT_POLL);
            return;
        }
        let scan = self.rescue_scan();
        if scan.rescued {
            return; // our reply, or work for others, is on its way
        }
        // Someone's tasks may be stranded: come back to rescue them. An
        // operation without a callback is in flight: come back to test it.
        let timeout = [
            scan.stranded.then_some(RESCUE_AFTER),
            self.parked_poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        let incoming = || !shared.mailboxes[me].is_empty() || shared.replies[me].has_reply();
        crate::core::stall::note_park(shared, me, until);
        shared.counters[me].parks.bump();
        match until {
            Until::Shutdown => {
                // A pool holding a busy spell's blocks is trimmed once the
                // worker has stayed idle a while, not at once: the next
                // round of an iterative program would need them again.
                let trim =
                    block_alloc::pool_over_idle_capacity() || shared.outside_blocks.has_surplus();
                let timeout = match (trim, timeout) {
                    (true, Some(t)) => Some(t.min(block_pool::POOL_TRIM_AFTER)),
                    (true, None) => Some(block_pool::POOL_TRIM_AFTER),
                    (false, t) => t,
                };
                let parked_at = Instant::now();
                // Tasks queued on a deque whose pusher saw no sleeper: ask
                // for them (unless a request of ours is out, whose answer
                // wakes us).
                let queued = || !self.in_flight.get() && shared.queued_beside(me);
                shared.sleep.idle_park_for(
                    me,
                    || {
                        incoming()
                            || !shared.outside_empty()
                            || shared.shutdown.load(Ordering::SeqCst)
                            || queued()
                    },
                    timeout,
                );
                if trim && parked_at.elapsed() >= block_pool::POOL_TRIM_AFTER {
                    // The exchange and the pool for threads outside the
                    // workers only when no other worker is busy: one that
                    // makes tasks takes its blocks back from there.
                    let everyone_idle = shared.sleep.quiescent_except(me, || true);
                    block_alloc::trim_pool(everyone_idle);
                    if everyone_idle {
                        shared.outside_blocks.trim();
                    }
                }
            }
            Until::Complete(c, _) => {
                if c.register(&self.waker) {
                    return;
                }
                shared.sleep.join_park_for(
                    me,
                    || incoming() || !shared.outside_empty() || c.is_complete(),
                    timeout,
                );
            }
            Until::Latch(latch) => {
                // The task that brings the count to zero unparks us, once
                // our own counts are in it.
                if latch.flush_local() {
                    return;
                }
                shared.sleep.join_park_for(
                    me,
                    || incoming() || !shared.outside_empty() || latch.is_set(),
                    timeout,
                );
            }
            Until::Quiescent => {}
        }
    }
}

/// One task or half the deque, as a thief asked, linked oldest first.
fn take_for(d: &OwnerGuard<'_, Deque<TaskRef>>, half: bool) -> Option<(*mut Header, usize)> {
    if half {
        let mut list = std::ptr::null_mut();
        // Newest first, each prepended: the list runs oldest first, and the
        // thief, pushing in list order, keeps the victim's order.
        let n = d.steal_half(|t| list = t.into_list(list));
        (n > 0).then_some((list, n))
    } else {
        d.steal_one()
            .map(|t| (t.into_list(std::ptr::null_mut()), 1))
    }
}

impl TaskRef {
    /// [`name_after`](TaskRef::name_after) for a task made on `worker` (if
    /// on one): unless the worker is inside `named`, the type's name is
    /// taken without looking up the thread's `named` name (a scope's
    /// spawn, a hot path, pays two stores).
    #[inline(always)]
    #[cfg_attr(not(feature = "trace"), allow(clippy::extra_unused_type_parameters))]
    pub(crate) fn name_after_on<F>(&self, worker: Option<&Worker>) {
        #[cfg(feature = "trace")]
        match worker {
            Some(w) if !w.naming_tasks() => self.set_trace_name(std::any::type_name::<F>()),
            _ => self.name_after::<F>(),
        }
        #[cfg(not(feature = "trace"))]
        let _ = worker;
    }

    /// The name `named` gives to tasks made on worker `w` now, if any: the
    /// hot path of `spawn`, where only a flag of the worker's is read
    /// unless it is inside `named` (a task unnamed shows its vtable's type
    /// name). Nothing without the `trace` feature.
    #[inline(always)]
    pub(crate) fn name_if_naming(&self, w: &Worker) {
        #[cfg(feature = "trace")]
        if w.naming_tasks() {
            if let Some(name) = crate::core::trace::names::pending() {
                self.set_trace_name(name);
            }
        }
        #[cfg(not(feature = "trace"))]
        let _ = w;
    }
}

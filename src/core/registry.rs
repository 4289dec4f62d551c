//! A runtime's registry: what its workers share (deques, mailboxes, the
//! injector, signals, parked tasks), and the ways a task gets in.

use crate::core::block_pool::BlockExchange;
use crate::core::completions::Completions;
use crate::core::deque::Deque;
use crate::core::error::Cancellation;
use crate::core::gate::Gate;
use crate::core::injector::Injector;
use crate::core::outside_pool::OutsidePool;
use crate::core::park::Sleep;
use crate::core::parked::Parked;
use crate::core::polled::Polled;
use crate::core::rescue::Guarded;
use crate::core::signal::{Action, SignalInbox, SignalRef};
use crate::core::stats::{tasks_waiting, Counters, WorkerCounters};
use crate::core::steal::{Mailbox, ReplySlot};
use crate::core::sync::{AtomicBool, AtomicUsize, Ordering};
use crate::core::task::{Header, TaskRef};
use crate::core::unwind::drop_or_report;
use crate::core::wait_notes::WaitNotes;
use crossbeam_utils::CachePadded;
use std::sync::Arc;

/// What a runtime's workers share.
pub(crate) struct Registry {
    pub(crate) sleep: Sleep,
    pub(crate) mailboxes: Box<[CachePadded<Mailbox>]>,
    pub(crate) replies: Box<[CachePadded<ReplySlot<Header>>]>,
    pub(crate) counters: Counters,
    /// Each worker's deque, with the rescue protocol through which an idle worker
    /// rescues its tasks while it is stuck in user code (`rescue.rs`).
    pub(crate) deques: Box<
        [CachePadded<
            crate::core::rescue::Guarded<crate::core::deque::Deque<crate::core::task::TaskRef>>,
        >],
    >,
    /// Tasks from outside the workers (and shared with parked workers).
    pub(crate) injector: Injector,
    /// Signals fired where nothing else may be done (device callbacks).
    pub(crate) inbox: SignalInbox,
    /// What workers test while operations are in flight (MPI messages,
    /// GPU work, a user's tested promises): idle ones in every search for
    /// work, busy ones between tasks.
    pub(crate) completions: Completions,
    pub(crate) shutdown: AtomicBool,
    /// Shut when the runtime's drop begins: from then on, delayed tasks made
    /// ready outside the workers are cancelled rather than queued.
    pub(super) ready_gate: Gate,
    /// Delayed tasks parked on promises: counted, and cancelled by the
    /// runtime's drop once its workers left.
    pub(crate) parked: Parked,
    /// What each worker waits for, for the stall warning (`stall.rs`).
    pub(crate) waits: WaitNotes,
    /// Root tasks waiting in `sync_root` (at most one may).
    pub(crate) root_syncs: AtomicUsize,
    /// Threads outside the workers waiting for the runtime to be quiescent
    /// (`sync_root`, the drop): the worker holding the polling duty parks
    /// meanwhile (`polling.rs`).
    outside_quiescence_waits: AtomicUsize,
    /// Free task blocks passed from the workers that run tasks to the
    /// workers that make them (`spare_blocks.rs`).
    pub(crate) block_exchange: Arc<BlockExchange>,
    /// Blocks for tasks made outside the workers (`outside_pool.rs`).
    pub(crate) outside_blocks: OutsidePool,
    /// The runtime's trace, when it is traced.
    #[cfg(feature = "trace")]
    pub(crate) tracer: Option<crate::core::trace::record::Tracer>,
}

impl Registry {
    /// The shared state of a runtime whose workers run on `threads`, one
    /// per worker, in order.
    pub(crate) fn new(
        threads: Vec<std::thread::Thread>,
        #[cfg(feature = "trace")] tracer: Option<crate::core::trace::record::Tracer>,
    ) -> Self {
        let n = threads.len();
        let block_exchange = Arc::new(BlockExchange::new());
        Self {
            sleep: Sleep::new(threads),
            mailboxes: (0..n).map(|_| CachePadded::new(Mailbox::new(n))).collect(),
            replies: (0..n).map(|_| CachePadded::new(ReplySlot::new())).collect(),
            counters: (0..n)
                .map(|_| CachePadded::new(WorkerCounters::default()))
                .collect(),
            deques: (0..n)
                .map(|_| CachePadded::new(Guarded::new(Deque::default())))
                .collect(),
            injector: Injector::new(),
            inbox: SignalInbox::new(),
            completions: Completions::default(),
            shutdown: AtomicBool::new(false),
            ready_gate: Gate::new(),
            parked: Parked::new(n),
            waits: WaitNotes::new(n),
            root_syncs: AtomicUsize::new(0),
            outside_quiescence_waits: AtomicUsize::new(0),
            block_exchange: Arc::clone(&block_exchange),
            outside_blocks: OutsidePool::new(block_exchange),
            #[cfg(feature = "trace")]
            tracer,
        }
    }

    /// Shuts the gate of `inject_ready`: the runtime's drop has begun.
    pub(crate) fn close_ready_gate(&self) {
        self.ready_gate.close();
    }

    /// Delayed tasks of this runtime parked on promises now (what
    /// `RuntimeStats::tasks_waiting_on_dependencies` says, read without
    /// allocating).
    pub(crate) fn tasks_parked(&self) -> u64 {
        tasks_waiting(&self.counters, self.parked.foreign_balance())
    }

    pub(crate) fn num_threads(&self) -> usize {
        self.sleep.workers()
    }

    /// No task or fired signal waits outside the workers' deques.
    /// SeqCst loads: part of the parking protocol.
    #[inline]
    pub(crate) fn outside_empty(&self) -> bool {
        self.injector.is_empty() && self.inbox.is_empty()
    }

    /// Nothing waits outside the deques and no device work is in flight:
    /// with every worker asleep, the runtime is quiescent.
    pub(crate) fn outside_idle(&self) -> bool {
        self.outside_empty() && !self.inbox.has_pending()
    }

    /// Whether a worker other than `me` has tasks queued on its deque: an
    /// idle worker's last re-check before it parks (see `park.rs`).
    pub(crate) fn queued_beside(&self, me: usize) -> bool {
        self.deques
            .iter()
            .enumerate()
            .any(|(i, d)| i != me && d.peek().queued_estimate() > 0)
    }

    /// Makes a signal whose action runs on a worker of this runtime once
    /// [`fire_signal`] is called (see `signal.rs`).
    pub(crate) fn signal(&self, action: Action) -> SignalRef {
        self.inbox.signal(action, (self as *const Registry).cast())
    }

    /// Blocks a thread outside the workers until the runtime is quiescent:
    /// every worker asleep, nothing queued outside them, no signal pending.
    pub(crate) fn wait_quiescent(&self) {
        self.outside_quiescence_waits
            .fetch_add(1, Ordering::Relaxed);
        self.sleep.wait_quiescent(|| self.outside_idle());
        self.outside_quiescence_waits
            .fetch_sub(1, Ordering::Relaxed);
    }

    /// Whether a thread waits for the runtime to be quiescent (a hint:
    /// Relaxed; the worker holding the polling duty reads it every round).
    pub(crate) fn quiescence_wanted(&self) -> bool {
        self.outside_quiescence_waits.load(Ordering::Relaxed) != 0
            || self.root_syncs.load(Ordering::Relaxed) != 0
    }

    /// Workers test `op` from now on (`completions.rs`). An operation
    /// without a callback also wakes a worker, through the inbox (a no-op
    /// signal fired): every other worker may have parked without a timeout
    /// before the operation was counted, and the inbox's protocol has no
    /// lost wake-up. The woken worker tests it, and keeps testing or parks
    /// with a timeout afterwards. From a thread outside the workers once the
    /// runtime's drop has begun, `op` is dropped untested: no worker may be
    /// left to test it.
    pub(crate) fn watch(&self, op: Box<dyn Polled>) {
        if op.has_callback() {
            self.completions.watch(op);
            return;
        }
        match self.signal_unless_shut_down(Box::new(|| ())) {
            Ok(signal) => {
                self.completions.watch(op);
                // SAFETY: just made, fired once; we hold the registry.
                unsafe { fire_signal(signal) };
            }
            Err(_) => drop_or_report("the drop of a test given to Promise::fulfill_when", op),
        }
    }

    /// Queues a task from anywhere and wakes a parked worker for it.
    pub(crate) fn inject(&self, task: TaskRef) {
        self.injector.push(task);
        self.sleep.wake_any();
    }

    /// Queues the tasks of `list` and wakes a parked worker for each, up to
    /// one per worker: stolen work whose thief withdrew its request (see
    /// `worker/withdraw.rs`). Returns how many tasks it queued.
    ///
    /// # Safety
    /// `list` is a non-null list made by `TaskRef::into_list`, owned by the
    /// caller.
    pub(crate) unsafe fn inject_list(&self, mut list: *mut Header) -> usize {
        let mut queued = 0;
        while !list.is_null() {
            // SAFETY: a non-null list of the caller's (its promise).
            let (task, rest) = unsafe { TaskRef::pop_list(list) };
            self.injector.push(task);
            list = rest;
            queued += 1;
        }
        for _ in 0..queued.min(self.num_threads()) {
            if !self.sleep.wake_any() {
                break;
            }
        }
        queued
    }

    /// Queues a delayed task that just became ready. Unlike other ways in,
    /// this one needs no handle on the runtime, so it may race the
    /// runtime's drop: the gate decides (see `gate.rs`). Either shutdown
    /// waits for this push and then, in its quiescence check, for the task
    /// to run; or the task is cancelled here. It is never queued to workers
    /// that are leaving.
    pub(crate) fn inject_ready(&self, task: TaskRef) {
        if self.ready_gate.enter() {
            self.inject(task);
            self.ready_gate.leave();
        } else {
            task.cancel(Cancellation::RuntimeShutDown);
        }
    }
}

#[cfg(feature = "trace")]
impl Registry {
    /// Records, on the calling thread's outside track, that a fulfill there
    /// made `task` ready.
    pub(super) fn trace_ready_outside(&self, task: &TaskRef) {
        use crate::core::trace::record::{event, Kind};
        if let Some(t) = &self.tracer {
            let name = task.trace_name();
            let flow = t.record_outside(true, |flow| {
                event(Kind::Ready, 0, crate::core::clock::ticks(), 0, flow, name)
            });
            task.set_trace_flow(flow);
        }
    }

    /// Writes the trace so far to its file (see `Runtime::flush_trace`).
    pub(crate) fn write_trace(&self) -> std::io::Result<()> {
        match &self.tracer {
            Some(t) => crate::core::trace::write(t, &self.counters),
            None => Ok(()),
        }
    }
}

#[cfg(not(feature = "trace"))]
impl Registry {
    /// Records nothing: a fulfill outside the workers made `task` ready.
    #[inline(always)]
    pub(super) fn trace_ready_outside(&self, _task: &TaskRef) {}
}

impl crate::core::latch::Unpark for Registry {
    fn unpark(&self, worker: usize) {
        self.sleep.unpark(worker);
    }
}

impl Drop for Registry {
    /// The gate keeps tasks out of a shut-down runtime; should one be left
    /// anyway, its handle learns so instead of waiting forever.
    fn drop(&mut self) {
        // Signals fired after the workers left: their promises are
        // fulfilled now (dependents are cancelled, the runtime being gone).
        self.inbox.drain();
        while let Some(task) = self.injector.pop() {
            task.cancel(Cancellation::RuntimeShutDown);
        }
    }
}

/// Fires `signal` (made by [`Registry::signal`]) and wakes a worker of its
/// runtime to run its action: no allocation, no lock, no user code, so it
/// may be called from a CUDA host callback.
///
/// # Safety
/// `signal` is live and not fired before, and its runtime's `Registry` stays
/// alive until this returns (whoever makes signals holds a reference to it
/// until every signal it made has fired or been abandoned).
pub(crate) unsafe fn fire_signal(signal: SignalRef) {
    // SAFETY: read before firing: the signal may be freed right after.
    let shared = unsafe { &*signal.context().cast::<Registry>() };
    // SAFETY: per the caller.
    unsafe { shared.inbox.fire(signal) };
    shared.sleep.wake_any();
}

/// Signals made on behalf of something that holds the registry but not the
/// runtime (an MPI cluster), against the runtime's drop.
#[cfg(all(test, not(loom)))]
mod tests {
    use super::fire_signal;
    use crate::Runtime;
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    /// Once the runtime was dropped no worker is left to run an action: a
    /// signal made from outside is refused (the action comes back), and
    /// nothing counts as pending.
    #[test]
    fn a_signal_is_refused_once_its_runtime_was_dropped() {
        let rt = Runtime::builder().num_threads(2).build().unwrap();
        let registry = Arc::clone(rt.registry());
        // While the runtime lives: made, fired, run.
        let ran = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ran);
        let signal = registry
            .signal_unless_shut_down(Box::new(move || flag.store(true, SeqCst)))
            .unwrap_or_else(|_| panic!("refused while the runtime runs"));
        assert!(!registry.is_shut_down_for_caller());
        // SAFETY: fired once; the runtime outlives the call.
        unsafe { fire_signal(signal) };
        rt.sync_root();
        assert!(ran.load(SeqCst));
        drop(rt);
        assert!(registry.is_shut_down_for_caller());
        let refused = registry.signal_unless_shut_down(Box::new(|| ()));
        assert!(
            refused.is_err(),
            "a signal made after the runtime was dropped: its action would never run"
        );
        assert!(!registry.inbox.has_pending());
    }

    /// A task still running while its runtime's drop waits makes its
    /// signal all the same (a worker holds quiescence off), and the drop
    /// waits until the signal fired and its action ran.
    #[test]
    fn a_worker_makes_its_signal_while_its_runtime_drops_and_the_drop_waits_for_it() {
        let rt = Runtime::builder().num_threads(1).build().unwrap();
        let registry = Arc::clone(rt.registry());
        let ran = Arc::new(AtomicBool::new(false));
        let (made_tx, made_rx) = mpsc::channel();
        let flag = Arc::clone(&ran);
        let in_task = Arc::clone(&registry);
        drop(rt.spawn(move || {
            // Until the drop (on the main thread) shut the gate.
            while !in_task.ready_gate.is_closed() {
                std::thread::yield_now();
            }
            let made = in_task.signal_unless_shut_down(Box::new(move || flag.store(true, SeqCst)));
            made_tx.send(made.ok()).unwrap();
        }));
        // Fires the signal a while after it was made, from a thread of its
        // own (as the MPI progress thread would).
        let firer = std::thread::spawn(move || {
            let signal = made_rx.recv().unwrap();
            std::thread::sleep(Duration::from_millis(50));
            if let Some(signal) = signal {
                // SAFETY: fired once; the registry is held by the test
                // until this thread is joined.
                unsafe { fire_signal(signal) };
                true
            } else {
                false
            }
        });
        drop(rt);
        let made = firer.join().unwrap();
        assert!(
            made,
            "a worker's signal was refused while its runtime's drop waited"
        );
        assert!(
            ran.load(SeqCst),
            "the runtime's drop returned before the signal made on its worker ran"
        );
    }
}

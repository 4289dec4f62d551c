//! A runtime's registry: what its workers share (deques, mailboxes, the
//! injector, signals, parked tasks), and the ways a task gets in.

use crate::core::deque::Deque;
use crate::core::error::Cancellation;
use crate::core::gate::Gate;
use crate::core::injector::Injector;
use crate::core::park::Sleep;
use crate::core::parked::Parked;
use crate::core::rescue::Guarded;
use crate::core::signal::{Action, SignalInbox, SignalRef};
use crate::core::stats::{Counters, WorkerCounters};
use crate::core::steal::{Mailbox, ReplySlot};
use crate::core::sync::{AtomicBool, AtomicUsize};
use crate::core::task::{BlockExchange, Header, TaskRef};
use crate::core::worker::Worker;
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
    pub(crate) shutdown: AtomicBool,
    /// Shut when the runtime's drop begins: from then on, delayed tasks made
    /// ready outside the workers are cancelled rather than queued.
    ready_gate: Gate,
    /// Delayed tasks parked on promises: counted, and cancelled by the
    /// runtime's drop once its workers left.
    pub(crate) parked: Parked,
    /// Root tasks waiting in `sync_root` (at most one may).
    pub(crate) root_syncs: AtomicUsize,
    /// Free task blocks passed from the workers that run tasks to the
    /// workers that make them (`spare_blocks.rs`).
    pub(crate) block_exchange: Arc<BlockExchange>,
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
            shutdown: AtomicBool::new(false),
            ready_gate: Gate::new(),
            parked: Parked::new(n),
            root_syncs: AtomicUsize::new(0),
            block_exchange: Arc::new(BlockExchange::new()),
            #[cfg(feature = "trace")]
            tracer,
        }
    }

    /// Shuts the gate of `inject_ready`: the runtime's drop has begun.
    pub(crate) fn close_ready_gate(&self) {
        self.ready_gate.close();
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
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn signal(&self, action: Action) -> SignalRef {
        self.inbox.signal(action, (self as *const Registry).cast())
    }

    /// Queues a task from anywhere and wakes a parked worker for it.
    pub(crate) fn inject(&self, task: TaskRef) {
        self.injector.push(task);
        self.sleep.wake_any();
    }

    /// Queues the tasks of `list` and wakes a parked worker for each, up to
    /// one per worker: stolen work whose thief withdrew its request (see
    /// `withdraw.rs`). Returns how many tasks it queued.
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

/// How a task reaches the scheduler, for [`Registry::schedule`].
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Arrival {
    /// A new task whose spawner keeps the runtime running (a scope's task:
    /// the scope's owner waits on one of its workers): pushed on the
    /// calling worker (offered to sleepers at once), or injected. Always
    /// queued, never cancelled: the scope counts on it.
    Spawned,
    /// A delayed task whose dependencies were all fulfilled when it was
    /// made: pushed on the calling worker as `Spawned`; from elsewhere it
    /// goes through the gate (see `inject_ready`), since its maker may hold
    /// only the registry (a GPU device does), not the runtime, whose drop
    /// may have begun.
    Delayed,
    /// A task a fulfill just made ready: pushed on the calling worker as a
    /// ready task (shared at the end of the running task, see
    /// `Worker::push_ready`), or, from elsewhere, through the gate, since
    /// whoever fulfills may not hold the runtime.
    Ready,
}

impl Registry {
    /// Schedules `task` of this runtime from the calling thread: on its
    /// deque when it is a worker of this runtime, else through the
    /// injector. The one way in for tasks made outside `spawn`'s fast path.
    #[inline]
    pub(crate) fn schedule(&self, task: TaskRef, arrival: Arrival) {
        match Worker::current() {
            Some(w) if std::ptr::eq(&*w.shared, self) => match arrival {
                Arrival::Spawned => {
                    w.push(task);
                }
                Arrival::Delayed => w.push_delayed(task),
                Arrival::Ready => {
                    #[cfg(feature = "trace")]
                    w.trace_ready(&task);
                    w.push_ready(task)
                }
            },
            _ => match arrival {
                Arrival::Spawned => self.inject(task),
                Arrival::Delayed => self.inject_ready(task),
                Arrival::Ready => {
                    #[cfg(feature = "trace")]
                    self.trace_ready_outside(&task);
                    self.inject_ready(task)
                }
            },
        }
    }
}

#[cfg(feature = "trace")]
impl Registry {
    /// Records, on the calling thread's outside track, that a fulfill there
    /// made `task` ready.
    fn trace_ready_outside(&self, task: &TaskRef) {
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
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) unsafe fn fire_signal(signal: SignalRef) {
    // SAFETY: read before firing: the signal may be freed right after.
    let shared = unsafe { &*signal.context().cast::<Registry>() };
    // SAFETY: per the caller.
    unsafe { shared.inbox.fire(signal) };
    shared.sleep.wake_any();
}

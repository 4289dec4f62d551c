//! Per-worker counters, written only by their worker and read by anyone.
//!
//! Each counter is an atomic that its worker updates with a plain load and
//! store (no read-modify-write), on a cache line of its own, so counting
//! costs a task nothing shared.

use crate::core::sync::{AtomicU64, Ordering};
use crossbeam_utils::CachePadded;

/// A counter with one writer.
#[derive(Debug, Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    #[inline]
    pub(crate) fn add(&self, n: u64) {
        self.0
            .store(self.0.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    #[inline]
    pub(crate) fn bump(&self) {
        self.add(1);
    }

    #[inline]
    pub(crate) fn set(&self, n: u64) {
        self.0.store(n, Ordering::Relaxed);
    }

    /// The count now (any thread).
    #[inline]
    pub(crate) fn load(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The live counters of one worker.
#[derive(Debug, Default)]
pub(crate) struct WorkerCounters {
    pub(crate) tasks_run: Counter,
    pub(crate) requests_sent: Counter,
    pub(crate) requests_answered: Counter,
    pub(crate) requests_declined: Counter,
    pub(crate) tasks_given: Counter,
    pub(crate) tasks_stolen: Counter,
    pub(crate) parks: Counter,
    pub(crate) loop_splits: Counter,
    /// Delayed tasks this worker parked on a promise.
    pub(crate) dependency_parks: Counter,
    /// Parked delayed tasks this worker released (made ready, cancelled,
    /// or reclaimed), whichever worker parked them.
    pub(crate) dependency_releases: Counter,
    pub(crate) rescues: Counter,
    pub(crate) joins_inlined: Counter,
}

pub(crate) type Counters = Box<[CachePadded<WorkerCounters>]>;

/// A snapshot of one worker's counters, from [`crate::Runtime::stats`].
///
/// ```
/// let rt = selvedge::Runtime::builder().num_threads(2).build().unwrap();
/// rt.run(|| (0..100).map(|i| selvedge::spawn(move || i)).for_each(|h| { h.join(); }));
/// let stats = rt.stats();
/// assert!(stats.total().tasks_run >= 101);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Tasks this worker ran: those it took from a queue (its deque, the
    /// injector or a theft), and those a join took back from its own deque
    /// and ran in place ([`crate::JoinHandle::join`], the second closure of
    /// [`crate::join`] once offered). Code run directly by its caller is
    /// not a task and is not counted: the first closure of `join`, the
    /// second one of a join that never offered it (see `joins_inlined`),
    /// the share of a parallel loop its caller runs itself,
    /// [`crate::Runtime::run`] called on one of the runtime's own workers.
    ///
    /// ```
    /// let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
    /// // The root task, and the spawned task its join runs in place.
    /// rt.run(|| selvedge::spawn(|| 1).join());
    /// assert_eq!(rt.stats().total().tasks_run, 2);
    /// ```
    pub tasks_run: u64,
    /// Steal requests this worker sent as a thief.
    pub steal_requests_sent: u64,
    /// Requests this worker answered with work, as a victim.
    pub steal_requests_answered: u64,
    /// Requests this worker had no work for and forwarded or returned.
    pub steal_requests_declined: u64,
    /// Tasks this worker gave to thieves.
    pub tasks_given: u64,
    /// Tasks this worker received from victims.
    pub tasks_stolen: u64,
    /// Times this worker parked (idle, or waiting in a join).
    pub parks: u64,
    /// Parallel loops this worker split to answer a thief or wake an idle
    /// worker.
    pub loop_splits: u64,
    /// Times this worker, idle, took queued tasks from a worker stuck in
    /// user code (a blocking call) and handed them out. (It also answers
    /// the steal requests waiting for such a worker; a rescue that found
    /// no task to hand out is not counted.)
    pub rescues: u64,
    /// Calls of [`crate::join`] on this worker that ran both closures in
    /// place without offering the second one to thieves, because this
    /// worker's deque already held tasks enough for them and no thief was
    /// asking. The second closure of such a join is not a task and is not
    /// counted in `tasks_run`.
    ///
    /// ```
    /// fn fib(n: u64) -> u64 {
    ///     if n < 2 { return n; }
    ///     let (a, b) = selvedge::join(|| fib(n - 1), || fib(n - 2));
    ///     a + b
    /// }
    /// let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
    /// assert_eq!(rt.run(|| fib(20)), 6765);
    /// // On one worker, once a few joins are queued, the rest run inline.
    /// assert!(rt.stats().total().joins_inlined > 0);
    /// ```
    pub joins_inlined: u64,
}

impl WorkerStats {
    pub(crate) fn read(c: &WorkerCounters) -> Self {
        Self {
            tasks_run: c.tasks_run.load(),
            steal_requests_sent: c.requests_sent.load(),
            steal_requests_answered: c.requests_answered.load(),
            steal_requests_declined: c.requests_declined.load(),
            tasks_given: c.tasks_given.load(),
            tasks_stolen: c.tasks_stolen.load(),
            parks: c.parks.load(),
            loop_splits: c.loop_splits.load(),
            rescues: c.rescues.load(),
            joins_inlined: c.joins_inlined.load(),
        }
    }

    fn plus(self, o: Self) -> Self {
        Self {
            tasks_run: self.tasks_run + o.tasks_run,
            steal_requests_sent: self.steal_requests_sent + o.steal_requests_sent,
            steal_requests_answered: self.steal_requests_answered + o.steal_requests_answered,
            steal_requests_declined: self.steal_requests_declined + o.steal_requests_declined,
            tasks_given: self.tasks_given + o.tasks_given,
            tasks_stolen: self.tasks_stolen + o.tasks_stolen,
            parks: self.parks + o.parks,
            loop_splits: self.loop_splits + o.loop_splits,
            rescues: self.rescues + o.rescues,
            joins_inlined: self.joins_inlined + o.joins_inlined,
        }
    }
}

/// A snapshot of every worker's counters.
///
/// ```
/// let rt = selvedge::Runtime::builder().num_threads(3).build().unwrap();
/// assert_eq!(rt.stats().workers.len(), 3);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RuntimeStats {
    /// One entry per worker, by index.
    pub workers: Vec<WorkerStats>,
    /// Delayed tasks of this runtime parked on a promise (or loop promise
    /// bucket) that was not fulfilled yet: they run once it is, and are
    /// cancelled if it is dropped unfulfilled or when the runtime is
    /// dropped. Exact once the runtime is quiescent (after
    /// [`crate::Runtime::sync_root`]); while tasks park and wake it is a
    /// close estimate.
    ///
    /// A program that hangs in a `join` with this above zero and nothing
    /// else running is waiting for a promise nobody fulfills, often a
    /// cycle: tasks waiting on promises that only they can fulfill (see
    /// [`crate::spawn_delayed`]). The runtime says so on standard error
    /// after a while (see [`crate::Builder::stall_warning`]).
    ///
    /// ```
    /// use selvedge::{Promise, Runtime};
    ///
    /// let rt = Runtime::builder().num_threads(2).build()?;
    /// let p = Promise::new();
    /// let h = rt.spawn_delayed([p.dep()], || 1);
    /// rt.sync_root();
    /// assert_eq!(rt.stats().tasks_waiting_on_dependencies, 1);
    /// p.fulfill();
    /// assert_eq!(h.join(), 1);
    /// rt.sync_root();
    /// assert_eq!(rt.stats().tasks_waiting_on_dependencies, 0);
    /// # Ok::<(), selvedge::BuildError>(())
    /// ```
    pub tasks_waiting_on_dependencies: u64,
}

/// Delayed tasks parked on a promise: the parks minus the releases in
/// every worker's counters and in `foreign` (those counted on threads that
/// are not workers, wrapping).
pub(crate) fn tasks_waiting(counters: &Counters, foreign: u64) -> u64 {
    let mut waiting = foreign;
    for c in counters.iter() {
        waiting = waiting
            .wrapping_add(c.dependency_parks.load())
            .wrapping_sub(c.dependency_releases.load());
    }
    // Counters read one after another may catch a release without its
    // park: never report a negative count.
    (waiting as i64).max(0) as u64
}

impl RuntimeStats {
    /// Reads every worker's counters; `foreign` is the parks minus releases
    /// (wrapping) counted on threads that are not workers.
    pub(crate) fn read(counters: &Counters, foreign: u64) -> Self {
        Self {
            workers: counters.iter().map(|c| WorkerStats::read(c)).collect(),
            tasks_waiting_on_dependencies: tasks_waiting(counters, foreign),
        }
    }

    /// The sum over all workers.
    ///
    /// ```
    /// let rt = selvedge::Runtime::builder().num_threads(2).build().unwrap();
    /// assert_eq!(rt.stats().total().tasks_stolen, 0);
    /// ```
    pub fn total(&self) -> WorkerStats {
        self.workers
            .iter()
            .copied()
            .fold(WorkerStats::default(), WorkerStats::plus)
    }
}

//! The runtime: its threads, what they share, and the ways in.

use crate::core::affinity;
use crate::core::error::{BuildError, Cancellation, JoinError};
use crate::core::gate::Gate;
use crate::core::handle::JoinHandle;
use crate::core::park::Sleep;
use crate::core::signal::{Action, SignalInbox, SignalRef};
use crate::core::stats::{Counters, RuntimeStats, WorkerCounters};
use crate::core::steal::{Mailbox, ReplySlot, MAX_WORKERS};
use crate::core::sync::{AtomicBool, AtomicUsize, Ordering};
use crate::core::task::{self, BlockPool, Header, TaskRef};
use crate::core::worker::Worker;
use crate::dataflow::event::Dep;
use crate::dataflow::promise;
use crossbeam_queue::SegQueue;
use crossbeam_utils::CachePadded;
use std::sync::{mpsc, Arc, OnceLock};

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
    pub(crate) injector: SegQueue<TaskRef>,
    /// Signals fired where nothing else may be done (device callbacks).
    pub(crate) inbox: SignalInbox,
    pub(crate) shutdown: AtomicBool,
    /// Shut when the runtime's drop begins: from then on, delayed tasks made
    /// ready outside the workers are cancelled rather than queued.
    ready_gate: Gate,
    /// Delayed tasks parked on promises: counted, and cancelled by the
    /// runtime's drop once its workers left.
    pub(crate) parked: promise::Parked,
    /// Root tasks waiting in `sync_root` (at most one may).
    pub(crate) root_syncs: AtomicUsize,
}

impl Registry {
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

    /// Makes a signal whose action runs on a worker of this runtime once
    /// [`fire_signal`] is called (see `inbox.rs`).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn signal(&self, action: Action) -> SignalRef {
        self.inbox.signal(action, (self as *const Registry).cast())
    }

    /// Queues a task from anywhere and wakes a parked worker for it.
    pub(crate) fn inject(&self, task: TaskRef) {
        self.injector.push(task);
        self.sleep.wake_any();
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

/// Configures and starts a [`Runtime`].
///
/// ```
/// let rt = selvedge::Runtime::builder()
///     .num_threads(2)
///     .thread_name("solver")
///     .stack_size(4 << 20)
///     .build()?;
/// assert_eq!(rt.num_threads(), 2);
/// # Ok::<(), selvedge::BuildError>(())
/// ```
#[derive(Debug, Clone, Default)]
pub struct Builder {
    num_threads: Option<usize>,
    thread_name: Option<String>,
    stack_size: Option<usize>,
    pin_threads: Option<bool>,
}

impl Builder {
    /// The number of worker threads. Default: the `SELVEDGE_NUM_THREADS`
    /// environment variable (unset, empty or only whitespace: not used),
    /// else the available parallelism (1 where it cannot be read), capped
    /// at the most workers a runtime supports, 256.
    ///
    /// A count of 0, or above 256, from here or from
    /// `SELVEDGE_NUM_THREADS`, makes [`build`](Builder::build) fail: only
    /// the default is capped, since a count asked for is taken as meant.
    ///
    /// ```
    /// let rt = selvedge::Runtime::builder().num_threads(3).build().unwrap();
    /// assert_eq!(rt.num_threads(), 3);
    /// ```
    pub fn num_threads(mut self, n: usize) -> Self {
        self.num_threads = Some(n);
        self
    }

    /// Worker threads are named `"{name}-{index}"`. Default: `"selvedge"`.
    /// A name with a NUL byte makes [`build`](Builder::build) fail with
    /// [`BuildError::InvalidThreadName`].
    ///
    /// ```
    /// let rt = selvedge::Runtime::builder().num_threads(1).thread_name("io").build().unwrap();
    /// let name = rt.run(|| std::thread::current().name().map(str::to_owned));
    /// assert_eq!(name.as_deref(), Some("io-0"));
    /// ```
    pub fn thread_name(mut self, name: impl Into<String>) -> Self {
        self.thread_name = Some(name.into());
        self
    }

    /// Stack size of each worker thread in bytes. Default: std's.
    ///
    /// ```
    /// let rt = selvedge::Runtime::builder().num_threads(1).stack_size(16 << 20).build().unwrap();
    /// assert_eq!(rt.run(|| 7), 7);
    /// ```
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = Some(bytes);
        self
    }

    /// Pins each worker thread to one CPU (Linux only). Default: the
    /// `SELVEDGE_PIN_THREADS` environment variable (`1` or `true`, `0` or
    /// `false`), else off.
    ///
    /// Workers are spread over the CPUs the building thread may run on,
    /// round-robin, continuing from where the previous pinned runtime of
    /// the process stopped. Pinning helps where the kernel wakes a parked
    /// worker onto a busy CPU while another idles (seen on 2-vCPU virtual
    /// machines: a pool starting from parked workers ran its first
    /// milliseconds on one CPU in about half the runs). It hurts where
    /// other busy programs share the CPUs: a pinned worker cannot move
    /// away from them. `build` fails with [`BuildError::Pin`] when a
    /// worker cannot be pinned, and on platforms other than Linux.
    ///
    /// ```
    /// # #[cfg(target_os = "linux")] {
    /// let rt = selvedge::Runtime::builder().num_threads(2).pin_threads(true).build().unwrap();
    /// assert_eq!(rt.run(|| 6 * 7), 42);
    /// # }
    /// ```
    pub fn pin_threads(mut self, pin: bool) -> Self {
        self.pin_threads = Some(pin);
        self
    }

    fn resolve_pin_threads(&self) -> Result<bool, BuildError> {
        if let Some(pin) = self.pin_threads {
            return Ok(pin);
        }
        match std::env::var("SELVEDGE_PIN_THREADS") {
            Ok(v) => match v.trim() {
                "1" | "true" => Ok(true),
                "0" | "false" => Ok(false),
                _ => Err(BuildError::InvalidPinVar { value: v }),
            },
            Err(_) => Ok(false),
        }
    }

    fn resolve_num_threads(&self) -> Result<usize, BuildError> {
        resolve_num_threads(
            self.num_threads,
            std::env::var("SELVEDGE_NUM_THREADS").ok(),
            || std::thread::available_parallelism().ok().map(|n| n.get()),
        )
    }

    /// Starts the worker threads.
    ///
    /// Fails when the thread count is 0, above the maximum, or unreadable
    /// from `SELVEDGE_NUM_THREADS`, when `SELVEDGE_PIN_THREADS` is
    /// unreadable, when the thread name contains a NUL byte, or when the OS
    /// refuses a thread or (with
    /// [`pin_threads`](Builder::pin_threads)) an affinity (then the threads
    /// already started are stopped and joined).
    ///
    /// ```
    /// let err = selvedge::Runtime::builder().num_threads(0).build().unwrap_err();
    /// assert_eq!(err, selvedge::BuildError::ZeroThreads);
    /// ```
    pub fn build(self) -> Result<Runtime, BuildError> {
        let n = self.resolve_num_threads()?;
        let pin = self.resolve_pin_threads()?;
        let name = self.thread_name.as_deref().unwrap_or("selvedge");
        // std panics on a thread name with a NUL byte: refuse it first.
        if name.contains('\0') {
            return Err(BuildError::InvalidThreadName { name: name.into() });
        }
        let mut threads = Vec::with_capacity(n);
        let mut senders = Vec::with_capacity(n);
        for index in 0..n {
            let (tx, rx) = mpsc::channel::<Arc<Registry>>();
            let mut b = std::thread::Builder::new().name(format!("{name}-{index}"));
            if let Some(size) = self.stack_size {
                b = b.stack_size(size);
            }
            let spawned = b.spawn(move || {
                // Without a runtime (a sibling failed to start) just exit.
                let Ok(shared) = rx.recv() else { return };
                let mut pool = BlockPool::new();
                let _installed = task::install_pool(&mut pool);
                Worker::run(index, shared);
            });
            match spawned {
                Ok(t) => {
                    threads.push(t);
                    senders.push(tx);
                }
                Err(source) => {
                    stop_unstarted(senders, threads);
                    return Err(BuildError::ThreadSpawn {
                        index,
                        message: source.to_string(),
                    });
                }
            }
        }
        if pin {
            if let Err((index, cpu, e)) = affinity::pin_all(&threads) {
                stop_unstarted(senders, threads);
                return Err(BuildError::Pin {
                    index,
                    cpu,
                    message: e.to_string(),
                });
            }
        }
        let shared = Arc::new(Registry {
            sleep: Sleep::new(threads.iter().map(|t| t.thread().clone()).collect()),
            mailboxes: (0..n).map(|_| CachePadded::new(Mailbox::new(n))).collect(),
            replies: (0..n).map(|_| CachePadded::new(ReplySlot::new())).collect(),
            counters: (0..n)
                .map(|_| CachePadded::new(WorkerCounters::default()))
                .collect(),
            deques: (0..n)
                .map(|_| {
                    CachePadded::new(crate::core::rescue::Guarded::new(
                        crate::core::deque::Deque::default(),
                    ))
                })
                .collect(),
            injector: SegQueue::new(),
            inbox: SignalInbox::new(),
            shutdown: AtomicBool::new(false),
            ready_gate: Gate::new(),
            parked: promise::Parked::new(n),
            root_syncs: AtomicUsize::new(0),
        });
        for tx in senders {
            // A worker that died before receiving cannot exist: it only
            // waits on this channel.
            let _ = tx.send(shared.clone());
        }
        Ok(Runtime { shared, threads })
    }
}

/// The worker count from, in order: the builder's `explicit` count, the
/// `SELVEDGE_NUM_THREADS` variable's value `var` (empty or only whitespace:
/// unset), the available `parallelism` (1 when unknown). Only the last is
/// capped at [`MAX_WORKERS`]: a machine with more CPUs still gets a
/// runtime, while a count someone asked for is checked.
fn resolve_num_threads(
    explicit: Option<usize>,
    var: Option<String>,
    parallelism: impl FnOnce() -> Option<usize>,
) -> Result<usize, BuildError> {
    let n = match (explicit, var) {
        (Some(n), _) => {
            if n == 0 {
                return Err(BuildError::ZeroThreads);
            }
            n
        }
        (None, Some(v)) if !v.trim().is_empty() => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => return Err(BuildError::InvalidThreadCountVar { value: v }),
        },
        (None, _) => return Ok(parallelism().unwrap_or(1).clamp(1, MAX_WORKERS)),
    };
    if n > MAX_WORKERS {
        return Err(BuildError::TooManyThreads {
            requested: n,
            max: MAX_WORKERS,
        });
    }
    Ok(n)
}

/// Stops worker threads that are still waiting for their runtime (the
/// build failed): closing their channels makes them exit.
fn stop_unstarted(
    senders: Vec<mpsc::Sender<Arc<Registry>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
) {
    drop(senders);
    for t in threads {
        let _ = t.join();
    }
}

/// A pool of worker threads running a work-requesting scheduler.
///
/// Dropping a runtime waits until every queued task has finished (delayed
/// tasks still waiting for a dependency are not waited for), then stops
/// and joins its threads before the drop returns. Dropped on one of its own
/// workers (by a task that held the last `Arc<Runtime>`, say), it cannot
/// wait for itself: the drop returns at once, and a helper thread named
/// `selvedge-shutdown` waits for the tasks and stops and joins the workers
/// in the background.
///
/// ```
/// let rt = selvedge::Runtime::builder().num_threads(2).build()?;
/// let sum = rt.run(|| {
///     let a = selvedge::spawn(|| (0..1000u64).sum::<u64>());
///     let b = selvedge::spawn(|| (1000..2000u64).sum::<u64>());
///     a.join() + b.join()
/// });
/// assert_eq!(sum, (0..2000u64).sum());
/// # Ok::<(), selvedge::BuildError>(())
/// ```
pub struct Runtime {
    shared: Arc<Registry>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("num_threads", &self.num_threads())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// A [`Builder`] with default settings.
    ///
    /// ```
    /// let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
    /// assert_eq!(rt.run(|| 1 + 1), 2);
    /// ```
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// A runtime with default settings (see [`Builder::num_threads`]).
    ///
    /// ```
    /// let rt = selvedge::Runtime::new()?;
    /// assert!(rt.num_threads() >= 1);
    /// # Ok::<(), selvedge::BuildError>(())
    /// ```
    pub fn new() -> Result<Self, BuildError> {
        Builder::default().build()
    }

    /// Number of worker threads.
    ///
    /// ```
    /// let rt = selvedge::Runtime::builder().num_threads(2).build().unwrap();
    /// assert_eq!(rt.num_threads(), 2);
    /// ```
    pub fn num_threads(&self) -> usize {
        self.shared.num_threads()
    }

    fn is_current(&self) -> bool {
        Worker::current().is_some_and(|w| Arc::ptr_eq(&w.shared, &self.shared))
    }

    /// Runs `f` as the root task on the pool, blocks the caller until it
    /// returns, and returns its value (or resumes its panic). `f` may borrow
    /// from the caller. Called from one of this runtime's workers, it runs
    /// `f` in place; from a worker of another runtime, that worker keeps
    /// working while it waits.
    ///
    /// ```
    /// let rt = selvedge::Runtime::builder().num_threads(2).build().unwrap();
    /// let data = vec![1, 2, 3];
    /// let total: i32 = rt.run(|| data.iter().sum());
    /// assert_eq!(total, 6);
    /// ```
    pub fn run<F, R>(&self, f: F) -> R
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        if self.is_current() {
            return run_in_place(f);
        }
        let task = task::new_handled(move || {
            if let Some(w) = Worker::current() {
                w.enter_root_task();
            }
            f()
        });
        // SAFETY: the handle is joined before this function returns, so the
        // borrows in `f` and a non-'static `R` outlive the task.
        let handle = unsafe { JoinHandle::<R>::new(&task) };
        self.shared.inject(task);
        // A panic out of the wait itself (not `f`'s, which comes back as a
        // result) would free what `f` borrows while a worker runs it.
        let result = crate::core::unwind::abort_on_unwind(|| handle.join_result());
        match result {
            Ok(value) => value,
            Err(payload) => JoinError::from_payload(payload).resume(),
        }
    }

    /// Queues `f` from any thread without blocking and returns its handle.
    ///
    /// ```
    /// let rt = selvedge::Runtime::builder().num_threads(2).build().unwrap();
    /// let handles: Vec<_> = (0..4).map(|i| rt.submit(move || i * 10)).collect();
    /// let out: Vec<i32> = handles.into_iter().map(|h| h.join()).collect();
    /// assert_eq!(out, [0, 10, 20, 30]);
    /// ```
    pub fn submit<F, T>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let task = task::new_handled(f);
        // SAFETY: `F` and `T` are 'static.
        let handle = unsafe { JoinHandle::new(&task) };
        self.shared.inject(task);
        handle
    }

    /// The runtime's shared state (for loops spawned from outside it).
    pub(crate) fn shared(&self) -> &Arc<Registry> {
        &self.shared
    }

    /// Queues `f` from any thread, to run on this runtime once every
    /// dependency in `deps` is fulfilled, and returns its handle. See
    /// [`crate::spawn_delayed`] for the rules; this one never blocks and
    /// always uses this runtime.
    ///
    /// A delayed task still waiting does not keep [`Runtime::sync_root`] or
    /// the runtime's drop waiting (it is not runnable yet). If it becomes
    /// ready outside the workers once the runtime's drop has begun, it is
    /// cancelled and its handle reports that.
    ///
    /// ```
    /// use selvedge::{Promise, Runtime};
    ///
    /// let rt = Runtime::builder().num_threads(2).build()?;
    /// let input = Promise::new();
    /// let h = rt.submit_delayed([input.dep()], || 6 * 7);
    /// std::thread::spawn(move || input.fulfill()); // any thread may fulfill
    /// assert_eq!(h.join(), 42);
    /// # Ok::<(), selvedge::BuildError>(())
    /// ```
    pub fn submit_delayed<D, F, T>(&self, deps: D, f: F) -> JoinHandle<T>
    where
        D: IntoIterator<Item = Dep>,
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        promise::submit_delayed(&self.shared, deps, f)
    }

    /// Waits until the whole runtime is quiescent: every task spawned so far
    /// (and every task those spawned) has finished. Weave's `syncRoot`.
    ///
    /// Call it from outside the runtime (it blocks without spinning) or in
    /// the closure of [`Runtime::run`], the root task (it works while it
    /// waits). Inside any other task it panics with a message saying why:
    /// a task's caller may be waiting for it on another worker, which then
    /// never goes idle, so the wait could never end. Two root tasks in
    /// `sync_root` at once would wait for each other: the second one
    /// panics. Inside a task, wait for the work it started with a
    /// [`crate::scope`] or with join handles instead.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// static DONE: AtomicUsize = AtomicUsize::new(0);
    /// let rt = selvedge::Runtime::builder().num_threads(2).build().unwrap();
    /// for _ in 0..10 {
    ///     drop(rt.submit(|| DONE.fetch_add(1, Ordering::Relaxed)));
    /// }
    /// rt.sync_root();
    /// assert_eq!(DONE.load(Ordering::Relaxed), 10);
    /// ```
    pub fn sync_root(&self) {
        match Worker::current() {
            Some(w) if Arc::ptr_eq(&w.shared, &self.shared) => w.sync_root(),
            _ => {
                let shared = &*self.shared;
                shared.sleep.wait_quiescent(|| shared.outside_idle());
            }
        }
    }

    /// Per-worker counters (tasks run, steal requests, thefts, parks) and
    /// the delayed tasks parked on promises.
    ///
    /// ```
    /// let rt = selvedge::Runtime::builder().num_threads(2).build().unwrap();
    /// rt.run(|| selvedge::spawn(|| 1).join());
    /// assert!(rt.stats().total().tasks_run >= 2);
    /// ```
    pub fn stats(&self) -> RuntimeStats {
        RuntimeStats::read(&self.shared.counters, self.shared.parked.foreign_balance())
    }
}

fn shut_down(shared: Arc<Registry>, threads: Vec<std::thread::JoinHandle<()>>) {
    shared.ready_gate.close();
    shared.sleep.wait_quiescent(|| shared.outside_idle());
    shared.shutdown.store(true, Ordering::SeqCst);
    shared.sleep.wake_all();
    for t in threads {
        // Workers catch every task panic, so a join error is impossible; if
        // one happened anyway there is nothing left to clean up.
        let _ = t.join();
    }
    // Delayed tasks still parked can never run here: cancel them, which
    // also breaks the promises their closures held (cycles included).
    shared.parked.reclaim();
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let shared = self.shared.clone();
        let threads = std::mem::take(&mut self.threads);
        if self.is_current() {
            // A worker cannot wait for its own runtime to go quiet: the
            // task dropping us is still running. Let another thread do it.
            let _ = std::thread::Builder::new()
                .name("selvedge-shutdown".into())
                .spawn(move || shut_down(shared, threads));
        } else {
            shut_down(shared, threads);
        }
    }
}

static GLOBAL: OnceLock<Runtime> = OnceLock::new();

/// The global runtime, built on first use with default settings. `spawn`,
/// `scope`, `join` and `sync_root` called outside any runtime use it.
///
/// # Panics
/// If the global runtime cannot start (see [`Builder::build`]); the message
/// says why.
///
/// ```
/// let rt = selvedge::global_runtime();
/// assert_eq!(rt.run(|| 5), 5);
/// ```
pub fn global_runtime() -> &'static Runtime {
    GLOBAL.get_or_init(|| {
        Runtime::new().unwrap_or_else(|e| panic!("selvedge: cannot start the global runtime: {e}"))
    })
}

/// Spawns `f` as a task and returns its handle. On a worker the task goes on
/// that worker's own deque; elsewhere it is submitted to the global runtime.
///
/// ```
/// fn fib(n: u64) -> u64 {
///     if n < 2 {
///         return n;
///     }
///     let a = selvedge::spawn(move || fib(n - 1));
///     let b = fib(n - 2);
///     a.join() + b
/// }
/// let rt = selvedge::Runtime::builder().num_threads(2).build().unwrap();
/// assert_eq!(rt.run(|| fib(20)), 6765);
/// ```
#[inline]
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    match Worker::current() {
        Some(w) => {
            let task = task::new_handled(f);
            // SAFETY: `F` and `T` are 'static.
            let handle = unsafe { JoinHandle::new(&task) };
            let pos = w.push(task);
            handle.at(w, pos)
        }
        None => global_runtime().submit(f),
    }
}

/// Waits until the runtime of the calling worker (or the global runtime,
/// from any other thread) is quiescent. See [`Runtime::sync_root`] for
/// where it may be called: inside a task other than a root task it panics.
///
/// ```
/// selvedge::sync_root();
/// ```
pub fn sync_root() {
    match Worker::current() {
        Some(w) => w.sync_root(),
        None => global_runtime().sync_root(),
    }
}

/// The number of worker threads of the current runtime (the global one from
/// outside any runtime).
///
/// ```
/// let rt = selvedge::Runtime::builder().num_threads(3).build().unwrap();
/// assert_eq!(rt.run(selvedge::current_num_threads), 3);
/// ```
pub fn current_num_threads() -> usize {
    match Worker::current() {
        Some(w) => w.shared.num_threads(),
        None => global_runtime().num_threads(),
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

/// Calls `f` in a frame of its own: inlined into `run`, `f`'s locals would
/// be in `run`'s frame, which is entered on the calling thread even when
/// `f` is sent to a worker, so a worker-sized stack (see
/// `Builder::stack_size`) would be needed by the caller too.
#[inline(never)]
fn run_in_place<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// Runs `f` on the current worker, or on the global runtime from any other
/// thread (blocking until it returns).
pub(crate) fn on_worker<R: Send>(f: impl FnOnce(&Worker) -> R + Send) -> R {
    match Worker::current() {
        Some(w) => f(w),
        None => global_runtime().run(|| {
            let w = Worker::current().expect("the root task runs on a worker");
            f(w)
        }),
    }
}

// The docs of `Builder::num_threads` and `BuildError` name this maximum.
const _: () = assert!(MAX_WORKERS == 256);

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(
        explicit: Option<usize>,
        var: Option<&str>,
        cpus: Option<usize>,
    ) -> Result<usize, BuildError> {
        resolve_num_threads(explicit, var.map(str::to_owned), || cpus)
    }

    #[test]
    fn the_default_count_is_capped_at_the_maximum() {
        assert_eq!(resolve(None, None, Some(300)), Ok(MAX_WORKERS));
        assert_eq!(resolve(None, None, Some(MAX_WORKERS + 1)), Ok(MAX_WORKERS));
        assert_eq!(resolve(None, None, Some(MAX_WORKERS)), Ok(MAX_WORKERS));
        assert_eq!(resolve(None, None, Some(3)), Ok(3));
        // Unknown parallelism: one worker. An empty variable is unset.
        assert_eq!(resolve(None, None, None), Ok(1));
        assert_eq!(resolve(None, Some(""), Some(300)), Ok(MAX_WORKERS));
    }

    #[test]
    fn an_explicit_count_above_the_maximum_is_an_error() {
        let too_many = BuildError::TooManyThreads {
            requested: 300,
            max: MAX_WORKERS,
        };
        assert_eq!(resolve(Some(300), None, Some(4)), Err(too_many.clone()));
        assert_eq!(resolve(None, Some("300"), Some(4)), Err(too_many));
        assert_eq!(resolve(Some(MAX_WORKERS), None, Some(4)), Ok(MAX_WORKERS));
        // The builder's count wins over the variable, even a bad one.
        assert_eq!(resolve(Some(2), Some("lots"), Some(4)), Ok(2));
    }

    #[test]
    fn an_empty_thread_count_variable_counts_as_unset() {
        for v in ["", " ", "\t\n "] {
            assert_eq!(resolve(None, Some(v), Some(5)), Ok(5), "{v:?}");
        }
        assert_eq!(resolve(None, Some(" 3 "), Some(5)), Ok(3));
    }

    #[test]
    fn a_zero_from_the_variable_names_the_variable() {
        let err = resolve(None, Some("0"), Some(5)).unwrap_err();
        assert_eq!(err, BuildError::InvalidThreadCountVar { value: "0".into() });
        let msg = err.to_string();
        assert!(
            msg.contains("SELVEDGE_NUM_THREADS") && msg.contains("\"0\""),
            "{msg}"
        );
        assert!(!msg.contains("num_threads was 0"), "{msg}");
        assert_eq!(
            resolve(Some(0), None, Some(5)),
            Err(BuildError::ZeroThreads)
        );
    }
}

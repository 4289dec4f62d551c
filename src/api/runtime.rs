//! The public methods of [`Runtime`]: running, submitting and waiting for
//! work on one runtime.

use crate::api::builder::Builder;
use crate::core::error::BuildError;
use crate::core::handle::JoinHandle;
use crate::core::pool::Runtime;
use crate::core::stats::RuntimeStats;
use crate::core::task;
use crate::core::worker::Worker;
use crate::dataflow::access::Accesses;
use crate::dataflow::declared;
use crate::dataflow::delayed;
use crate::dataflow::event::Dep;
use std::sync::Arc;

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
        self.registry().num_threads()
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
        self.run_root(f)
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
        self.registry().inject(task);
        handle
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
        delayed::submit_delayed(self.registry(), deps, f)
    }

    /// Queues `f` from any thread as a task of this runtime that declares
    /// the accesses `accesses`, and returns its handle: see
    /// [`crate::spawn_with`] for the rules; this one never blocks (beyond
    /// a short lock on each declared handle) and always uses this runtime.
    ///
    /// ```
    /// use selvedge::{Data, Runtime};
    ///
    /// let rt = Runtime::builder().num_threads(2).build()?;
    /// let total = Data::new(0u64);
    /// for i in 1..=100 {
    ///     rt.submit_with(total.write(), move |t| *t += i);
    /// }
    /// assert_eq!(rt.submit_with(total.read(), |t| *t).join(), 5050);
    /// # Ok::<(), selvedge::BuildError>(())
    /// ```
    pub fn submit_with<A, F, R>(&self, accesses: A, f: F) -> JoinHandle<R>
    where
        A: Accesses + 'static,
        F: for<'a> FnOnce(A::Refs<'a>) -> R + Send + 'static,
        R: Send + 'static,
    {
        declared::submit_with(self.registry(), accesses, f)
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
            Some(w) if Arc::ptr_eq(&w.shared, self.registry()) => w.sync_root(),
            _ => {
                let shared = &**self.registry();
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
        RuntimeStats::read(
            &self.registry().counters,
            self.registry().parked.foreign_balance(),
        )
    }
}

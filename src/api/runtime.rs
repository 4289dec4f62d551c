//! The public methods of [`Runtime`]: running, submitting and waiting for
//! work on one runtime.

use crate::api::builder::Builder;
use crate::core::error::BuildError;
use crate::core::handle::JoinHandle;
use crate::core::pool::Runtime;
use crate::core::runtime_task;
use crate::core::stats::RuntimeStats;
use crate::core::worker::Worker;
use crate::dataflow::access::Accesses;
use crate::dataflow::declared;
use crate::dataflow::delayed;
use crate::dataflow::event::Dep;
use crate::graph::build::Graph;
use crate::graph::error::GraphError;
use std::sync::Arc;

impl Runtime {
    /// Writes the trace recorded so far to its file, replacing what an
    /// earlier flush wrote (feature `trace`; see
    /// [`Builder::trace_to`]). Does nothing on a runtime that is not
    /// traced ([`trace_path`](Runtime::trace_path) is `None`). The runtime
    /// writes its trace again when dropped; the global runtime is never
    /// dropped, so a program tracing it calls this.
    ///
    /// ```
    /// let path = std::env::temp_dir().join("selvedge-doc-flush.json");
    /// let rt = selvedge::Runtime::builder().num_threads(2).trace_to(&path).build().unwrap();
    /// rt.run(|| selvedge::spawn(|| 1).join());
    /// rt.flush_trace()?;
    /// assert!(std::fs::read_to_string(&path)?.contains("worker 1"));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[cfg(feature = "trace")]
    pub fn flush_trace(&self) -> std::io::Result<()> {
        self.registry().write_trace()
    }

    /// Where this runtime's trace goes, if it is traced (feature `trace`).
    ///
    /// ```
    /// let path = std::env::temp_dir().join("selvedge-doc-trace-path.json");
    /// let rt = selvedge::Runtime::builder().num_threads(1).trace_to(&path).build().unwrap();
    /// assert_eq!(rt.trace_path(), Some(path.as_path()));
    /// let untraced = selvedge::Runtime::builder().num_threads(1).build().unwrap();
    /// assert_eq!(untraced.trace_path(), None);
    /// ```
    #[cfg(feature = "trace")]
    pub fn trace_path(&self) -> Option<&std::path::Path> {
        self.registry().tracer.as_ref().map(|t| t.path.as_path())
    }

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

    /// Runs `graph` once on this runtime and blocks the caller until every
    /// node ran (see [`Graph`]). Called from one of this runtime's workers,
    /// it runs in place, and the worker keeps working while it waits.
    ///
    /// # Errors
    /// [`GraphError::Cycle`] when the graph's edges form a cycle (nothing
    /// runs); [`GraphError::Failed`] when nodes panicked: the nodes after
    /// them were skipped, every other node ran, and the graph may be run
    /// again.
    ///
    /// ```
    /// use selvedge::{Graph, Runtime};
    ///
    /// let rt = Runtime::builder().num_threads(2).build()?;
    /// let mut field = vec![1.0f64; 1024];
    /// let mut steps = 0;
    /// {
    ///     let mut g = Graph::new();
    ///     let field = &mut field;
    ///     let halve = g.node(move || field.iter_mut().for_each(|x| *x *= 0.5));
    ///     let count = g.node(|| steps += 1);
    ///     g.precede(halve, count);
    ///     for _ in 0..3 {
    ///         rt.run_graph(&mut g)?;
    ///     }
    /// }
    /// assert_eq!((field[0], steps), (0.125, 3));
    /// # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    /// ```
    pub fn run_graph(&self, graph: &mut Graph<'_>) -> Result<(), GraphError> {
        self.run(|| graph.run())
    }

    /// Queues one run of `graph` from any thread without blocking, and
    /// returns a handle that gives the graph back with the run's result
    /// (the handle is also a [`Future`](std::future::Future)). The graph
    /// owns what its nodes use (`'static`).
    ///
    /// ```
    /// use selvedge::{Graph, Runtime};
    /// use std::sync::atomic::{AtomicU32, Ordering};
    /// use std::sync::Arc;
    ///
    /// let rt = Runtime::builder().num_threads(2).build()?;
    /// let runs = Arc::new(AtomicU32::new(0));
    /// let mut g = Graph::new();
    /// let counter = Arc::clone(&runs);
    /// g.node(move || { counter.fetch_add(1, Ordering::Relaxed); });
    /// for _ in 0..2 {
    ///     let (graph, result) = rt.spawn_graph(g).join();
    ///     result?;
    ///     g = graph;
    /// }
    /// assert_eq!(runs.load(Ordering::Relaxed), 2);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spawn_graph(
        &self,
        mut graph: Graph<'static>,
    ) -> JoinHandle<(Graph<'static>, Result<(), GraphError>)> {
        self.spawn(move || {
            let result = graph.run();
            (graph, result)
        })
    }

    /// Queues `f` from any thread without blocking and returns its handle.
    ///
    /// ```
    /// let rt = selvedge::Runtime::builder().num_threads(2).build().unwrap();
    /// let handles: Vec<_> = (0..4).map(|i| rt.spawn(move || i * 10)).collect();
    /// let out: Vec<i32> = handles.into_iter().map(|h| h.join()).collect();
    /// assert_eq!(out, [0, 10, 20, 30]);
    /// ```
    pub fn spawn<F, T>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let task = runtime_task::new_handled_for(self.registry(), f);
        task.name_after::<F>();
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
    /// let h = rt.spawn_delayed([input.dep()], || 6 * 7);
    /// std::thread::spawn(move || input.fulfill()); // any thread may fulfill
    /// assert_eq!(h.join(), 42);
    /// # Ok::<(), selvedge::BuildError>(())
    /// ```
    pub fn spawn_delayed<D, F, T>(&self, deps: D, f: F) -> JoinHandle<T>
    where
        D: IntoIterator<Item = Dep>,
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        delayed::spawn_delayed_on(self.registry(), deps, f)
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
    ///     rt.spawn_with(total.write(), move |t| *t += i).detach();
    /// }
    /// assert_eq!(rt.spawn_with(total.read(), |t| *t).join(), 5050);
    /// # Ok::<(), selvedge::BuildError>(())
    /// ```
    pub fn spawn_with<A, F, R>(&self, accesses: A, f: F) -> JoinHandle<R>
    where
        A: Accesses + 'static,
        F: for<'a> FnOnce(A::Refs<'a>) -> R + Send + 'static,
        R: Send + 'static,
    {
        declared::spawn_with_on(self.registry(), accesses, f)
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
    ///     drop(rt.spawn(|| DONE.fetch_add(1, Ordering::Relaxed)));
    /// }
    /// rt.sync_root();
    /// assert_eq!(DONE.load(Ordering::Relaxed), 10);
    /// ```
    pub fn sync_root(&self) {
        match Worker::current() {
            Some(w) if Arc::ptr_eq(&w.shared, self.registry()) => w.sync_root(),
            _ => {
                self.registry().wait_quiescent();
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

//! `Builder`: how a user configures and starts a runtime.

use crate::core::config::RuntimeConfig;
use crate::core::error::BuildError;
use crate::core::pool::Runtime;

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
    config: RuntimeConfig,
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
        self.config.num_threads = Some(n);
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
        self.config.thread_name = Some(name.into());
        self
    }

    /// Stack size of each worker thread in bytes. Default: std's.
    ///
    /// ```
    /// let rt = selvedge::Runtime::builder().num_threads(1).stack_size(16 << 20).build().unwrap();
    /// assert_eq!(rt.run(|| 7), 7);
    /// ```
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.config.stack_size = Some(bytes);
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
        self.config.pin_threads = Some(pin);
        self
    }

    /// How long no task may run, while a join or a scope waits and tasks sit
    /// parked on promises nobody has fulfilled, before the runtime says so
    /// on standard error; `None` (or zero) never. Default: the
    /// `SELVEDGE_STALL_WARN` environment variable, in seconds (fractions
    /// allowed, `0` for never), else 10 seconds.
    ///
    /// Such a program may never finish: a promise cycle, a task waiting on
    /// a promise whose last handle it holds itself, a scope waiting on a
    /// task whose promise is fulfilled only after the scope, a producer
    /// that panicked while another handle of its promise lives on. The
    /// runtime cannot tell this from a promise that a thread outside it
    /// will fulfil later, so it warns and changes nothing: the message
    /// (once per stall, until a task runs again) counts the parked tasks,
    /// names a few (after their closure's type, or the name
    /// [`named`](crate::named) gave them with the `trace` feature), and says
    /// what each waiting thread waits for. A wait counts when it blocks in
    /// `join`, `try_join`, `Runtime::run`, a scope, a blocking loop or a
    /// graph run; an `.await` on a handle does not. While any worker runs
    /// code, or device work is in flight, nothing is reported.
    ///
    /// One thread, `selvedge-watch`, watches every runtime of the process:
    /// it starts with the first runtime that warns, reads a few counters a
    /// few times per delay, and stays for the rest of the process. A
    /// runtime stops being watched when its drop has waited for its tasks.
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// let rt = selvedge::Runtime::builder()
    ///     .num_threads(2)
    ///     .stall_warning(Some(Duration::from_secs(30)))
    ///     .build()?;
    /// assert_eq!(rt.run(|| 1 + 1), 2);
    /// let quiet = selvedge::Runtime::builder().stall_warning(None).build()?;
    /// # Ok::<(), selvedge::BuildError>(())
    /// ```
    pub fn stall_warning(mut self, after: Option<std::time::Duration>) -> Self {
        self.config.stall_warning = Some(after);
        self
    }

    /// Records a timeline of the runtime's schedule and writes it to `path`
    /// as Chrome trace-event JSON, which [Perfetto](https://ui.perfetto.dev)
    /// and `chrome://tracing` open (feature `trace`). Written when the
    /// runtime is dropped, and on [`Runtime::flush_trace`]; a failure to
    /// write at the drop is printed to standard error, naming the path.
    /// Default: the `SELVEDGE_TRACE` environment variable's path (every
    /// runtime built without `trace_to` is traced then; the second one
    /// writes `name-2.json` beside it, and so on), else no trace.
    ///
    /// Each worker has a track: the tasks it ran (slices named by
    /// [`named`](crate::named), else
    /// by their closure's type), the time it spent parked, the steal
    /// requests it sent, answered and declined, the loops it split and
    /// the tasks its fulfills made ready, with arrows from a fulfill, a
    /// split or a steal to the run of the task it sent on. A task that its
    /// own `join` runs in place (the usual case in recursive fork-join)
    /// runs inside its parent's slice, as a call would: a slice each would
    /// cost more than such a task does.
    ///
    /// ```
    /// let path = std::env::temp_dir().join("selvedge-doc-trace.json");
    /// let rt = selvedge::Runtime::builder().num_threads(2).trace_to(&path).build()?;
    /// rt.run(|| selvedge::named("leaf", || selvedge::spawn(|| 1)).join());
    /// drop(rt); // writes the trace
    /// let json = std::fs::read_to_string(&path).unwrap();
    /// assert!(json.contains("\"traceEvents\""));
    /// # Ok::<(), selvedge::BuildError>(())
    /// ```
    #[cfg(feature = "trace")]
    pub fn trace_to(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.config.trace_path = Some(path.into());
        self
    }

    /// How many events each worker keeps for a trace (see
    /// [`trace_to`](Builder::trace_to)); older events are overwritten, and
    /// the trace's `otherData.lost_events` counts them. Default: 65,536
    /// (48 bytes each: 3 MiB a worker). A capacity of 0 is taken as 1.
    ///
    /// ```
    /// let path = std::env::temp_dir().join("selvedge-doc-trace-capacity.json");
    /// let rt = selvedge::Runtime::builder()
    ///     .num_threads(1)
    ///     .trace_to(&path)
    ///     .trace_capacity(1 << 20)
    ///     .build()?;
    /// # Ok::<(), selvedge::BuildError>(())
    /// ```
    #[cfg(feature = "trace")]
    pub fn trace_capacity(mut self, events_per_worker: usize) -> Self {
        self.config.trace_capacity = Some(events_per_worker);
        self
    }

    /// Starts the worker threads.
    ///
    /// Fails when the thread count is 0, above the maximum, or unreadable
    /// from `SELVEDGE_NUM_THREADS`, when `SELVEDGE_PIN_THREADS` or
    /// `SELVEDGE_STALL_WARN` is unreadable, when the thread name contains
    /// a NUL byte, or when the OS refuses a thread or (with
    /// [`pin_threads`](Builder::pin_threads)) an affinity (then the threads
    /// already started are stopped and joined).
    ///
    /// ```
    /// let err = selvedge::Runtime::builder().num_threads(0).build().unwrap_err();
    /// assert_eq!(err, selvedge::BuildError::ZeroThreads);
    /// ```
    pub fn build(self) -> Result<Runtime, BuildError> {
        Runtime::start(&self.config)
    }
}

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
        Runtime::start(&self.config)
    }
}

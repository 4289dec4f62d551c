//! A runtime's life: starting its worker threads, the global runtime, and
//! shutting down (waiting for quiescence, then stopping the workers and
//! cancelling the tasks still parked).

use crate::core::affinity;
use crate::core::block_alloc::install_pool;
use crate::core::block_pool::BlockPool;
use crate::core::closure_task;
use crate::core::config::RuntimeConfig;
use crate::core::error::{BuildError, JoinError};
use crate::core::handle::JoinHandle;
use crate::core::registry::Registry;
use crate::core::stall;
use crate::core::sync::Ordering;
use crate::core::worker::Worker;
use std::sync::{mpsc, Arc, OnceLock};

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
    /// Starts a runtime's worker threads (see `Builder::build`).
    pub(crate) fn start(config: &RuntimeConfig) -> Result<Runtime, BuildError> {
        let n = config.resolve_num_threads()?;
        let pin = config.resolve_pin_threads()?;
        let stall_after = config.resolve_stall_warning()?;
        let name = config.thread_name.as_deref().unwrap_or("selvedge");
        // std panics on a thread name with a NUL byte: refuse it first.
        if name.contains('\0') {
            return Err(BuildError::InvalidThreadName { name: name.into() });
        }
        if stall_after.is_some() {
            stall::start_watchdog()?;
        }
        let mut threads = Vec::with_capacity(n);
        let mut senders = Vec::with_capacity(n);
        for index in 0..n {
            let (tx, rx) = mpsc::channel::<Arc<Registry>>();
            let mut b = std::thread::Builder::new().name(format!("{name}-{index}"));
            if let Some(size) = config.stack_size {
                b = b.stack_size(size);
            }
            let spawned = b.spawn(move || {
                // Without a runtime (a sibling failed to start) just exit.
                let Ok(shared) = rx.recv() else { return };
                let mut pool = BlockPool::new(Some(shared.block_exchange.clone()), parked_here);
                let installed = install_pool(&mut pool);
                Worker::run(index, shared, installed.own_pool());
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
        #[cfg(feature = "trace")]
        let tracer = config.resolve_trace_path().map(|path| {
            let names = (0..n).map(|i| format!("{name}-{i}")).collect();
            let capacity = config
                .trace_capacity
                .unwrap_or(crate::core::trace::record::DEFAULT_CAPACITY);
            crate::core::trace::record::Tracer::new(path, capacity, names)
        });
        #[cfg(not(feature = "trace"))]
        config.warn_if_trace_requested();
        let shared = Arc::new(Registry::new(
            threads.iter().map(|t| t.thread().clone()).collect(),
            #[cfg(feature = "trace")]
            tracer,
        ));
        for tx in senders {
            // A worker that died before receiving cannot exist: it only
            // waits on this channel.
            let _ = tx.send(shared.clone());
        }
        if let Some(after) = stall_after {
            stall::watch(&shared, after, name);
        }
        Ok(Runtime { shared, threads })
    }

    /// The runtime's registry, what its workers share.
    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.shared
    }

    /// The calling thread is one of this runtime's workers.
    pub(crate) fn is_current(&self) -> bool {
        Worker::current().is_some_and(|w| Arc::ptr_eq(&w.shared, &self.shared))
    }

    /// `Runtime::run`: runs `f` as a root task and waits for it.
    pub(crate) fn run_root<F, R>(&self, f: F) -> R
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        if self.is_current() {
            return run_in_place(f);
        }
        let task = closure_task::new_handled(move || {
            if let Some(w) = Worker::current() {
                w.enter_root_task();
            }
            f()
        });
        task.name_after::<F>();
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

fn shut_down(shared: Arc<Registry>, threads: Vec<std::thread::JoinHandle<()>>) {
    shared.close_ready_gate();
    shared.wait_quiescent();
    // Watched until here: a drop waiting forever on a stalled scope says so.
    stall::unwatch(&shared);
    shared.shutdown.store(true, Ordering::SeqCst);
    shared.sleep.wake_all();
    for t in threads {
        // Workers catch every task panic, so a join error is impossible; if
        // one happened anyway there is nothing left to clean up.
        let _ = t.join();
    }
    // Delayed tasks still parked can never run here: cancel them, which
    // also breaks the promises their closures held (cycles included).
    // SAFETY: every worker thread was joined above.
    unsafe { shared.parked.reclaim() };
    #[cfg(feature = "trace")]
    if let Err(e) = shared.write_trace() {
        // A drop cannot return the error: say what happened.
        let path = shared.tracer.as_ref().map(|t| t.path.display().to_string());
        eprintln!(
            "selvedge: cannot write the runtime's trace to {}: {e}",
            path.unwrap_or_default()
        );
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let shared = self.shared.clone();
        let threads = std::mem::take(&mut self.threads);
        if self.is_current() {
            // A worker cannot wait for its own runtime to go quiet: the
            // task dropping us is still running. Let another thread do it.
            let spawned = std::thread::Builder::new()
                .name("selvedge-shutdown".into())
                .spawn(move || shut_down(shared, threads));
            if let Err(e) = spawned {
                // Nothing else can stop the workers from here: say so
                // rather than leave them parked without a word.
                eprintln!(
                    "selvedge: a runtime dropped on one of its own workers cannot start the \
                     thread that shuts it down ({e}); its workers stay parked, and its parked \
                     tasks are not cancelled, until the process exits"
                );
            }
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
/// If the global runtime cannot start (see [`Builder::build`](crate::Builder::build)); the message
/// says why.
///
/// ```
/// let rt = selvedge::global_runtime();
/// assert_eq!(rt.run(|| 5), 5);
/// ```
pub fn global_runtime() -> &'static Runtime {
    GLOBAL.get_or_init(|| {
        Runtime::start(&RuntimeConfig::default())
            .unwrap_or_else(|e| panic!("selvedge: cannot start the global runtime: {e}"))
    })
}

/// The global runtime's registry if it was started (never starts it): for
/// GPU devices, which must not start a runtime just to compare with it.
#[cfg(feature = "cuda")]
pub(crate) fn started_global_registry() -> Option<&'static Arc<Registry>> {
    GLOBAL.get().map(Runtime::registry)
}

/// The registry new work goes to from the calling thread: its worker's
/// runtime's on a worker, else the global runtime's. The one "current or
/// global" accessor (rayon's `Registry::current`).
///
/// The reference lives as long as the calling worker's loop, or forever
/// for the global runtime; callers use it within the current task.
#[inline]
pub(crate) fn current_registry<'a>() -> &'a Arc<Registry> {
    match Worker::current() {
        Some(w) => &w.shared,
        None => global_runtime().registry(),
    }
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
        None => global_runtime().run_root(|| {
            let w = Worker::current().expect("the root task runs on a worker");
            f(w)
        }),
    }
}

// The docs of `Builder::num_threads` and `BuildError` name this maximum.

/// The tasks of the calling worker's runtime parked on promises (none
/// off the workers): what a worker's pool orders its takes by.
fn parked_here() -> u64 {
    Worker::current().map_or(0, |w| w.shared.tasks_parked())
}

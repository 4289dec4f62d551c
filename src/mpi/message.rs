//! The handle an operation returns: its dependency, and the slot its
//! outcome is set in.

use super::{Element, MpiError};
use crate::core::registry::Registry;
use crate::core::sync::{lock, AtomicBool, Condvar, Mutex, Ordering};
use crate::core::worker::Worker;
use crate::dataflow::delayed::spawn_delayed_on;
use crate::dataflow::event::Dep;
use crate::dataflow::promise::Promise;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a thread outside the pool that joins a message tests the
/// messages in flight before it blocks until another thread finds it
/// ended.
const TEST_WHILE_JOINING: Duration = Duration::from_millis(1);

/// A posted operation: its dependency for tasks, and its value once it
/// completed (the received message, the send's buffer back, a
/// collective's result).
///
/// ```no_run
/// # let cluster = selvedge::mpi::Cluster::start()?;
/// # let _ = cluster.isend(vec![1u8], 0, 0);
/// let m = cluster.irecv::<u8>(1, 0, 0);
/// let after = selvedge::spawn_delayed([m.dep()], || "arrived");
/// assert_eq!(after.join(), "arrived");
/// assert_eq!(m.join()?, [1]);
/// # Ok::<(), selvedge::mpi::MpiError>(())
/// ```
pub struct Message<T> {
    pub(super) dep: Dep,
    pub(super) slot: Slot<T>,
    pub(super) registry: Arc<Registry>,
}

impl<T: Element> Message<T> {
    /// A handle for an operation refused before it was posted: finished
    /// with `error`, its dependency broken.
    pub(super) fn refused(registry: &Arc<Registry>, error: MpiError) -> Self {
        let promise = Promise::new();
        let dep = promise.dep();
        // Dropped unfulfilled: broken.
        drop(promise);
        let slot: Slot<T> = Arc::new(Outcome::new());
        slot.set(Err(error));
        Message {
            dep,
            slot,
            registry: Arc::clone(registry),
        }
    }

    /// Fulfilled when the operation completed; broken if it failed or was
    /// abandoned (the tasks waiting on it are cancelled).
    ///
    /// ```no_run
    /// // Under `mpirun -n 2`: rank 0 sends, rank 1 receives.
    /// let cluster = selvedge::mpi::Cluster::start()?;
    /// if cluster.rank() == 1 {
    ///     let m = cluster.irecv::<f64>(3, 0, 7);
    ///     // Runs once the message is in, with no thread blocked meanwhile.
    ///     let sum = selvedge::spawn_delayed([m.dep()], move || m.join().map(|v| v.iter().sum::<f64>()));
    ///     assert_eq!(sum.join()?, 6.0);
    /// } else if cluster.rank() == 0 {
    ///     cluster.isend(vec![1.0, 2.0, 3.0], 1, 7).join()?;
    /// }
    /// # Ok::<(), selvedge::mpi::MpiError>(())
    /// ```
    pub fn dep(&self) -> Dep {
        self.dep.clone()
    }

    /// Whether the operation ended (completed, failed or was abandoned).
    ///
    /// ```no_run
    /// // Under `mpirun -n 2`: rank 0 sends, rank 1 receives.
    /// let cluster = selvedge::mpi::Cluster::start()?;
    /// if cluster.rank() == 1 {
    ///     let m = cluster.irecv::<u8>(1, 0, 0);
    ///     while !m.is_finished() {
    ///         // Other work meanwhile.
    ///         std::thread::yield_now();
    ///     }
    ///     assert_eq!(m.join()?, [42]);
    /// } else if cluster.rank() == 0 {
    ///     cluster.isend(vec![42u8], 1, 0).join()?;
    /// }
    /// # Ok::<(), selvedge::mpi::MpiError>(())
    /// ```
    pub fn is_finished(&self) -> bool {
        lock(&self.slot.value).is_some()
    }

    /// Waits until the operation ended (working meanwhile, on a worker)
    /// and returns its value or its error.
    ///
    /// # Errors
    /// What MPI reported; a message of the wrong length;
    /// [`MpiError::Abandoned`] for a receive the cluster's drop cancelled,
    /// or an operation posted after it; [`MpiError::RuntimeShutDown`] for
    /// one posted once the cluster's runtime was being dropped;
    /// [`MpiError::Cancelled`] for a
    /// [`send_after`](super::Cluster::send_after) whose dependency broke.
    ///
    /// ```no_run
    /// // Under `mpirun -n 2`: rank 0 sends, rank 1 receives.
    /// let cluster = selvedge::mpi::Cluster::start()?;
    /// match cluster.rank() {
    ///     0 => assert_eq!(cluster.isend(vec![5u32, 6], 1, 0).join()?, [5, 6]), // the buffer back
    ///     1 => assert_eq!(cluster.irecv::<u32>(2, 0, 0).join()?, [5, 6]),
    ///     _ => {}
    /// }
    /// # Ok::<(), selvedge::mpi::MpiError>(())
    /// ```
    pub fn join(self) -> Result<Vec<T>, MpiError> {
        if Worker::current().is_some() {
            // A task behind the dependency: the worker runs other tasks
            // until it ran (or was cancelled: the dependency broke).
            let _ = spawn_delayed_on(&self.registry, [self.dep.clone()], || ()).try_join();
        } else {
            // Outside the pool: this thread tests the messages in flight
            // itself for a while (a reply often comes within microseconds),
            // then is woken as soon as whoever tests them set the outcome,
            // not after a worker passed the completion on.
            let began = Instant::now();
            let completions = &self.registry.completions;
            while completions.has_sources()
                && !self.is_finished()
                && began.elapsed() < TEST_WHILE_JOINING
            {
                if !completions.poll() {
                    // Yielding, not spinning: the workers that would run
                    // what the message starts may share this core.
                    std::thread::yield_now();
                }
            }
            let mut value = lock(&self.slot.value);
            while value.is_none() {
                value = self
                    .slot
                    .set
                    .wait(value)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
        }
        lock(&self.slot.value)
            .take()
            .unwrap_or(Err(MpiError::Abandoned))
    }
}

/// Where an operation's outcome goes: set once, by its `finish` (or, for a
/// `send_after` whose task never ran, when the task is dropped).
pub(super) type Slot<T> = Arc<Outcome<T>>;

/// An operation's outcome, and a condition variable for a thread outside
/// the pool waiting for it.
pub(super) struct Outcome<T> {
    pub(super) value: Mutex<Option<Result<Vec<T>, MpiError>>>,
    set: Condvar,
    /// Whether the operation succeeded: kept apart from `value`, which a
    /// `join` may take before the completion reads it.
    succeeded: AtomicBool,
}

impl<T> Outcome<T> {
    pub(super) fn new() -> Self {
        Self {
            value: Mutex::new(None),
            set: Condvar::new(),
            succeeded: AtomicBool::new(false),
        }
    }

    /// Sets the outcome (once: a later call changes nothing) and wakes the
    /// waiters.
    pub(super) fn set(&self, result: Result<Vec<T>, MpiError>) {
        let mut value = lock(&self.value);
        if value.is_none() {
            // Relaxed: the signal's fire (after this) releases it to the
            // completion.
            self.succeeded.store(result.is_ok(), Ordering::Relaxed);
            *value = Some(result);
        }
        drop(value);
        self.set.notify_all();
    }

    pub(super) fn is_ok(&self) -> bool {
        self.succeeded.load(Ordering::Relaxed)
    }
}

/// A `send_after`'s promise and outcome, until its task runs: dropped
/// unrun (a dependency broke), the outcome says cancelled and then the
/// promise breaks.
pub(super) struct Unsent<T> {
    pub(super) slot: Option<Slot<T>>,
    pub(super) promise: Option<Promise>,
}

impl<T> Unsent<T> {
    pub(super) fn take(&mut self) -> (Slot<T>, Promise) {
        let slot = self.slot.take().expect("a task runs once");
        let promise = self.promise.take().expect("a task runs once");
        (slot, promise)
    }
}

impl<T> Drop for Unsent<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.set(Err(MpiError::Cancelled));
        }
        drop(self.promise.take());
    }
}

#[cfg(test)]
mod tests {
    use super::Outcome;
    use crate::mpi::MpiError;

    /// A `join` may take the value before the completion asks whether the
    /// operation succeeded: the answer must not depend on the value still
    /// being there.
    #[test]
    fn success_is_known_after_the_value_was_taken() {
        let ok: Outcome<u8> = Outcome::new();
        ok.set(Ok(vec![1]));
        assert_eq!(crate::core::sync::lock(&ok.value).take(), Some(Ok(vec![1])));
        assert!(ok.is_ok());
        let failed: Outcome<u8> = Outcome::new();
        failed.set(Err(MpiError::Abandoned));
        drop(crate::core::sync::lock(&failed.value).take());
        assert!(!failed.is_ok());
    }
}

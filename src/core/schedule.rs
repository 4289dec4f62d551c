//! How a task gets into a runtime from the calling thread: on the
//! thread's worker when it is one of the runtime's, else through the
//! injector ([`Registry::schedule`]). Apart from `registry.rs`, which the
//! worker holds, because it asks for the thread's worker.

use crate::core::registry::Registry;
use crate::core::signal::{Action, SignalRef};
use crate::core::task::TaskRef;
use crate::core::worker::Worker;

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
                    w.trace_ready(&task);
                    w.push_ready(task)
                }
            },
            _ => match arrival {
                Arrival::Spawned => self.inject(task),
                Arrival::Delayed => self.inject_ready(task),
                Arrival::Ready => {
                    self.trace_ready_outside(&task);
                    self.inject_ready(task)
                }
            },
        }
    }

    /// Whether the runtime's drop has begun and the calling thread is not
    /// one of its workers: new work from here would be refused (see
    /// [`Registry::signal_unless_shut_down`]). A hint for a clear error
    /// up front; the gate alone decides.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub(crate) fn is_shut_down_for_caller(&self) -> bool {
        self.ready_gate.is_closed() && !self.is_current_worker()
    }

    /// Whether the calling thread is one of this runtime's workers.
    fn is_current_worker(&self) -> bool {
        Worker::current().is_some_and(|w| std::ptr::eq(&*w.shared, self))
    }

    /// [`Registry::signal`] for a maker that holds the registry but not
    /// the runtime (an MPI cluster posting from any thread): `Err` gives the
    /// action back, unmade, once the runtime's drop has begun, when no
    /// worker may be left to run it. On one of this runtime's workers the
    /// signal is always made: a worker running a task holds quiescence
    /// off, so the drop waits for the signal. From elsewhere the gate
    /// decides, as for `inject_ready`: either the drop's `close` waits for
    /// this `pending` increment (and its quiescence check then waits for
    /// the signal to run), or the gate is seen shut and nothing is made.
    pub(crate) fn signal_unless_shut_down(&self, action: Action) -> Result<SignalRef, Action> {
        if self.is_current_worker() {
            return Ok(self.signal(action));
        }
        if !self.ready_gate.enter() {
            return Err(action);
        }
        let signal = self.signal(action);
        self.ready_gate.leave();
        Ok(signal)
    }
}

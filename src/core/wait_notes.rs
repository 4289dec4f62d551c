//! What each worker of a runtime waits for when it parks in a wait, as
//! the stall warning (`stall.rs`) reports it; kept by the runtime's
//! registry.

use crate::core::sync::{lock, AtomicU8, Mutex, Ordering};
use crossbeam_utils::CachePadded;
use std::fmt;

/// What a waiting thread waits for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Awaited {
    /// A task, by name (`JoinHandle::join`, `try_join`, `Runtime::run`),
    /// or unnamed.
    Task(Option<&'static str>),
    /// The tasks it started and waits for in a latch: a scope's, a blocking
    /// loop's parts, a stolen `join`'s second closure, a graph run's nodes.
    Started,
}

impl fmt::Display for Awaited {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Task(Some(name)) => write!(f, "joins `{name}`"),
            Self::Task(None) => f.write_str("joins a task"),
            Self::Started => f.write_str(
                "waits for tasks it started (a scope's, a parallel loop's, the second \
                 closure of a `join`, or a graph run's nodes)",
            ),
        }
    }
}

/// What each worker of a runtime waits for when it parks in a wait.
pub(crate) struct WaitNotes(pub(super) Box<[CachePadded<WaitNote>]>);

/// What one worker waits for.
pub(super) struct WaitNote {
    /// What its last park in a wait waited on ([`TASK`] or [`STARTED`]),
    /// written by `stall::note_park` only, before the worker parks.
    pub(super) kind: AtomicU8,
    /// The task its last park in a join waited for (written by
    /// `stall::note_park` only; read by a report). A lock, taken only by a
    /// worker about to park (or to find its wait over) and by a report.
    pub(super) task: Mutex<Option<&'static str>>,
}

/// [`WaitNote::kind`]: nothing yet, a join of a task, a latch.
const NONE: u8 = 0;
pub(super) const TASK: u8 = 1;
pub(super) const STARTED: u8 = 2;

impl WaitNotes {
    pub(crate) fn new(workers: usize) -> Self {
        Self(
            (0..workers)
                .map(|_| {
                    CachePadded::new(WaitNote {
                        kind: AtomicU8::new(NONE),
                        task: Mutex::new(None),
                    })
                })
                .collect(),
        )
    }

    /// What worker `worker` waited for when it last parked in a wait.
    pub(super) fn awaited(&self, worker: usize) -> Option<Awaited> {
        let note = &self.0[worker];
        match note.kind.load(Ordering::Relaxed) {
            TASK => Some(Awaited::Task(*lock(&note.task))),
            STARTED => Some(Awaited::Started),
            _ => None,
        }
    }
}

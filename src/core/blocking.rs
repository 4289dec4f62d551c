//! Telling the runtime that a task is about to block.

use crate::core::worker::Worker;

/// Runs `f`, which may block (a channel, a lock, a sleep, I/O, another
/// runtime's `block_on`), after handing the calling worker's queued tasks
/// and waiting steal requests to other workers.
///
/// A worker answers other workers' requests for its queued tasks only
/// between tasks, so a task that blocks would hold on to the tasks it
/// spawned. The runtime notices such a worker by itself: after about a
/// millisecond without news from it, an idle worker takes its place for a
/// moment and hands its tasks out (on Linux, where `membarrier(2)` makes
/// that cheap for the blocked worker; elsewhere this does not happen).
/// `block_in_place` saves that millisecond and works everywhere: it
/// answers the requests waiting for this worker, moves every task queued
/// on it to the runtime's shared queue and wakes parked workers for them,
/// then runs `f` on the calling thread. Parallel loops running on this
/// worker (a `block_in_place` inside a loop's body) keep their remaining
/// iterations, which other workers can still ask for once `f` returns.
///
/// Called outside a worker, it just runs `f`.
///
/// ```
/// use selvedge::{block_in_place, spawn, Runtime};
/// use std::sync::mpsc;
///
/// let rt = Runtime::builder().num_threads(2).build()?;
/// let sum = rt.run(|| {
///     let handles: Vec<_> = (0..4u64).map(|i| spawn(move || i * i)).collect();
///     let (tx, rx) = mpsc::channel();
///     std::thread::spawn(move || {
///         // A foreign thread waits for the tasks, then reports.
///         let s: u64 = handles.into_iter().map(|h| h.join()).sum();
///         tx.send(s).unwrap();
///     });
///     // The tasks above run on the other worker while this one blocks.
///     block_in_place(|| rx.recv().unwrap())
/// });
/// assert_eq!(sum, 14);
/// # Ok::<(), selvedge::BuildError>(())
/// ```
pub fn block_in_place<R>(f: impl FnOnce() -> R) -> R {
    if let Some(w) = Worker::current() {
        w.hand_off();
    }
    f()
}

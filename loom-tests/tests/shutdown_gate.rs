//! The shutdown gate (`Gate`): a thread queuing a ready task from outside
//! the runtime races the runtime's drop. Either the drop waits for the push
//! and sees the task, or the queuer sees the gate shut and cancels the
//! task: never a task queued where nobody will look.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::model;
use selvedge::protocols::Gate;

#[test]
fn a_ready_task_is_seen_by_shutdown_or_cancelled() {
    model(|| {
        let gate = Arc::new(Gate::new());
        // Stand-in for the injector: tasks queued; and tasks cancelled.
        let queued = Arc::new(AtomicUsize::new(0));
        let cancelled = Arc::new(AtomicUsize::new(0));
        let queuers: Vec<_> = (0..2)
            .map(|_| {
                let (gate, queued, cancelled) = (gate.clone(), queued.clone(), cancelled.clone());
                thread::spawn(move || {
                    if gate.enter() {
                        // Relaxed: the gate's leave must be what publishes it.
                        queued.fetch_add(1, Ordering::Relaxed);
                        gate.leave();
                    } else {
                        cancelled.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        gate.close();
        // What shutdown's quiescence check sees: every task that got in.
        let seen = queued.load(Ordering::Relaxed);
        for q in queuers {
            q.join().unwrap();
        }
        assert_eq!(
            seen,
            queued.load(Ordering::Relaxed),
            "a task was queued after the gate closed and shutdown looked"
        );
        assert_eq!(seen + cancelled.load(Ordering::Relaxed), 2);
    });
}

//! The shutdown gate (`Gate`): a thread queuing a ready task from outside
//! the runtime races the runtime's drop. Either the drop waits for the push
//! and sees the task, or the queuer sees the gate shut and cancels the
//! task: never a task queued where nobody will look.
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

/// The same gate in front of the signal inbox (`Registry::
/// signal_unless_shut_down`, what an MPI cluster posts through from
/// outside the workers): a signal made inside the gate is counted pending
/// before `close` returns, so the drop's quiescence check (which waits
/// while `has_pending`) waits for it; a poster that finds the gate shut
/// makes none.
#[test]
fn a_signal_made_through_the_gate_is_seen_by_shutdown_or_refused() {
    use selvedge::protocols::SignalInbox;
    model(|| {
        let gate = Arc::new(Gate::new());
        let inbox = Arc::new(SignalInbox::new());
        let posters: Vec<_> = (0..2)
            .map(|_| {
                let (gate, inbox) = (gate.clone(), inbox.clone());
                thread::spawn(move || {
                    if gate.enter() {
                        let signal = inbox.signal(Box::new(|| ()), std::ptr::null());
                        gate.leave();
                        Some(signal)
                    } else {
                        None
                    }
                })
            })
            .collect();
        gate.close();
        // What the quiescence check reads once the gate is shut.
        let seen_pending = inbox.has_pending();
        let made: Vec<_> = posters
            .into_iter()
            .filter_map(|p| p.join().unwrap())
            .collect();
        assert!(
            made.is_empty() || seen_pending,
            "a signal was made through the gate after shutdown looked: its runtime would not wait for it"
        );
        for signal in made {
            // SAFETY: made by this inbox, never fired.
            drop(unsafe { inbox.discard(signal) });
        }
        assert!(!inbox.has_pending());
    });
}

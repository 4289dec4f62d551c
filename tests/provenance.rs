//! Paths where a task is reached through a type-erased header pointer: a
//! fork-join job run by a thief, a handled task joined from another
//! thread, a delayed task cancelled. Natively they check results; their
//! main use is under Miri, which checks that every such pointer carries the
//! provenance of the whole task, not of its header field alone:
//!
//! ```text
//! MIRIFLAGS=-Zmiri-disable-isolation cargo +nightly miri test --test provenance
//! ```

mod support;

use selvedge::{Promise, Runtime};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::Watchdog;

#[test]
fn a_join_whose_second_closure_is_stolen() {
    let _watchdog = Watchdog::new("stolen join", Duration::from_secs(60));
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let stolen = AtomicBool::new(false);
    let (_, b) = rt.run(|| {
        selvedge::join(
            // Waits until the other closure ran elsewhere. Its scopes are
            // task boundaries, where this worker answers the idle worker's
            // steal request with the oldest task of its deque: the other
            // closure's job, which lives in this frame.
            || {
                while !stolen.load(Ordering::SeqCst) {
                    selvedge::scope(|s| {
                        s.spawn(|_| ());
                    });
                    std::thread::yield_now();
                }
            },
            || {
                stolen.store(true, Ordering::SeqCst);
                7
            },
        )
    });
    assert_eq!(b, 7);
}

#[test]
fn handled_tasks_joined_elsewhere_and_cancelled() {
    let _watchdog = Watchdog::new("handled tasks", Duration::from_secs(60));
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let handles: Vec<_> = (0..8u64).map(|i| rt.spawn(move || [i; 40])).collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join(), [i as u64; 40]);
    }
    let p = Promise::new();
    let h = rt.spawn_delayed([p.dep()], || 1);
    drop(p);
    assert!(h.try_join().unwrap_err().is_cancelled());
}

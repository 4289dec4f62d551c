//! A version's reads as one completion (`selvedge::protocols::Group`'s
//! shares, what `dataflow/readers.rs` builds on): two read tasks drop their
//! shares while the log closes the version (drops the rest of the head
//! start) and a write waits for the completion. In every interleaving the
//! write runs exactly once, only after both reads (loom checks the reads
//! and the write of the value as a data race), and the group is freed
//! once.
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::model;
use selvedge::protocols::{Group, Outcome, Waiter};
use std::ptr::NonNull;

/// A raw pointer that may cross to a model thread.
#[derive(Clone, Copy)]
struct Shared<T>(NonNull<T>);
// SAFETY: the protocol under test synchronises every access.
unsafe impl<T> Send for Shared<T> {}

/// The value the reads read and the write writes.
struct Value(UnsafeCell<u64>);

/// More shares than the model hands out, as the real head start is.
const HEAD_START: usize = 1000;

#[test]
fn the_write_after_a_versions_reads_runs_once_after_all_of_them() {
    model(|| {
        let value = Arc::new(Value(UnsafeCell::new(7)));
        let writes = Arc::new(AtomicUsize::new(0));
        let g = Group::new(1);
        // SAFETY: the new group's one handle is ours: the head start.
        unsafe { Group::add_shares(g, HEAD_START - 1) };
        // The write waiting for the reads' completion.
        let settle = {
            let (value, writes) = (value.clone(), writes.clone());
            move |outcome: Outcome| match outcome {
                Outcome::Ready(w) => {
                    // SAFETY: loom checks this write against the reads.
                    value.0.with_mut(|v| unsafe { *v = 8 });
                    writes.fetch_add(1, Ordering::SeqCst);
                    // SAFETY: the outcome hands the waiter over.
                    drop(unsafe { Box::from_raw(w.as_ptr()) });
                }
                Outcome::Cancelled(_) => panic!("a version's reads are never broken"),
            }
        };
        // SAFETY: the head start keeps the group alive.
        let w = NonNull::from(Box::leak(Box::new(Waiter::new(vec![unsafe {
            Group::dep(g, 0)
        }]))));
        // SAFETY: we own the fresh waiter.
        if let Some(outcome) = unsafe { Waiter::start(w) } {
            settle.clone()(outcome);
        }
        // Two shares handed out (counted ahead: nothing to do), each to a
        // read task on its own thread.
        let reader = || {
            let (g, value, settle) = (Shared(g), value.clone(), settle.clone());
            thread::spawn(move || {
                // SAFETY: loom checks this read against the write.
                assert_eq!(value.0.with(|v| unsafe { *v }), 7, "read after the write");
                // SAFETY: this thread's share.
                unsafe { Group::release_shares(g.0, 1, settle) };
            })
        };
        let (r1, r2) = (reader(), reader());
        // The log closes the version: the rest of the head start.
        // SAFETY: the head start less the two shares is the log's.
        unsafe { Group::release_shares(g, HEAD_START - 2, settle) };
        r1.join().unwrap();
        r2.join().unwrap();
        assert_eq!(writes.load(Ordering::SeqCst), 1);
        assert!(Group::is_freed(g), "the reads' group not freed");
    });
}

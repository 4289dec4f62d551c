//! A graph's runs registered once (`selvedge::protocols::RunSlot`, what
//! `graph/data.rs` builds on): a run starts without registering while an
//! access from outside the graph is recorded in the log of a handle the
//! graph writes. In every interleaving the two are ordered: the access
//! either waits for the run (it saw the run's completion in the slot) or
//! the run registers and waits for the access (the access was noted before
//! the run looked). Loom checks the writes of the value as a data race.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::{Arc, Mutex};
use loom::thread;
use loom_tests::support::model;
use selvedge::protocols::{Dep, Group, Outcome, RunSlot};
use std::ptr::NonNull;

/// A raw pointer that may cross to a model thread.
#[derive(Clone, Copy)]
struct Shared<T>(NonNull<T>);
// SAFETY: the protocol under test synchronises every access.
unsafe impl<T> Send for Shared<T> {}

/// The handle's value, written by the run and by the access from outside.
struct Value(UnsafeCell<u64>);

/// A promise of one event: the group and a dependency on it.
fn promise() -> (Shared<Group>, Dep) {
    let g = Group::new(1);
    // SAFETY: the new group's handle is ours.
    (Shared(g), unsafe { Group::dep(g, 0) })
}

/// Keeps the promise of `g` (nothing parks on it in this model).
fn fulfill(g: Shared<Group>) {
    // SAFETY: we hold the group's handle, kept until here.
    unsafe {
        Group::fulfill(g.0, 0, |_: Outcome| unreachable!("nothing parks"));
    }
}

/// Waits, yielding, until `d` is fulfilled.
fn wait(d: &Dep) {
    while !d.is_fulfilled() {
        thread::yield_now();
    }
}

#[test]
fn a_run_that_registers_nothing_is_ordered_with_an_access_from_outside() {
    model(|| {
        let value = Arc::new(Value(UnsafeCell::new(0)));
        let slot = Arc::new(RunSlot::new());
        // The handle's log: the entry an access from outside recorded
        // after the graph's (its completion), if any.
        let log: Arc<Mutex<Option<Dep>>> = Arc::new(Mutex::new(None));
        // The first run registered and ended.
        let (first, first_done) = promise();
        {
            let _log = log.lock().unwrap();
            slot.registered(first_done);
        }
        fulfill(first);

        // The access from outside: recorded after the graph's entry.
        let outside = {
            let (value, slot, log) = (value.clone(), slot.clone(), log.clone());
            thread::spawn(move || {
                let (mine, mine_done) = promise();
                let after = {
                    let mut log = log.lock().unwrap();
                    let after = slot.seen();
                    *log = Some(mine_done);
                    after
                };
                if let Some(run) = after {
                    wait(&run);
                }
                // SAFETY: loom checks this write against the run's.
                value.0.with_mut(|v| unsafe { *v = 1 });
                fulfill(mine);
            })
        };

        // The next run.
        let (run, run_done) = promise();
        let waits: Option<Dep> = match slot.begin_unchanged(&run_done) {
            Ok(previous) => {
                assert!(previous.is_none(), "the first run is over");
                None
            }
            Err(()) => {
                // Registers: records its entry with the log locked, and
                // comes after what the log holds.
                let log = log.lock().unwrap();
                let before = log.clone();
                slot.registered(run_done.clone());
                before
            }
        };
        if let Some(before) = waits {
            wait(&before);
        }
        // SAFETY: loom checks this write against the outside access's.
        value.0.with_mut(|v| unsafe { *v = 2 });
        fulfill(run);
        outside.join().unwrap();
    });
}

//! A graph's runs registered once (`selvedge::protocols::RunSlot`, what
//! `graph/data.rs` builds on): a run that records only the handles noted
//! since the last registration (none, or some) races accesses from outside
//! the graph being recorded in the logs of handles the graph writes. In
//! every interleaving each access and the run are ordered: the access
//! either waits for the run (it saw the run's completion in the slot) or
//! the run records that handle again and waits for the access (the access
//! was noted before the run put its completion in the slot). Loom checks
//! the writes of each handle's value as a data race.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use loom_tests::support::model;
use selvedge::protocols::{Begin, Dep, Group, Noted, Outcome, RunSlot};
use std::ptr::NonNull;

/// A raw pointer that may cross to a model thread.
#[derive(Clone, Copy)]
struct Shared<T>(NonNull<T>);
// SAFETY: the protocol under test synchronises every access.
unsafe impl<T> Send for Shared<T> {}

/// One handle: its value, and its log: the entry an access from outside
/// recorded after the graph's (its completion), if any.
struct Handle {
    value: UnsafeCell<u64>,
    log: Mutex<Option<Dep>>,
}

/// A promise of one event, and a flag under a condition variable raised
/// when it is kept: what stands for a delayed task's wait in the model
/// (a spin would have loom explore too many branches).
struct Promise {
    group: Shared<Group>,
    done: Dep,
    kept: (Mutex<bool>, Condvar),
}

impl Promise {
    fn new() -> Arc<Self> {
        let g = Group::new(1);
        Arc::new(Self {
            group: Shared(g),
            // SAFETY: the new group's handle is ours.
            done: unsafe { Group::dep(g, 0) },
            kept: (Mutex::new(false), Condvar::new()),
        })
    }

    /// Keeps it (nothing parks on the group in this model).
    fn keep(&self) {
        // SAFETY: we hold the group's handle, kept until here.
        unsafe {
            Group::fulfill(self.group.0, 0, |_: Outcome| unreachable!("nothing parks"));
        }
        *self.kept.0.lock().unwrap() = true;
        self.kept.1.notify_all();
    }

    /// Waits until it is kept.
    fn wait(&self) {
        let mut kept = self.kept.0.lock().unwrap();
        while !*kept {
            kept = self.kept.1.wait(kept).unwrap();
        }
    }
}

/// Which of `promises` `d` is a dependency on.
fn which<'a>(d: &Dep, promises: &'a [Arc<Promise>]) -> &'a Promise {
    promises
        .iter()
        .find(|p| p.done.same_as(d))
        .expect("a dependency on a promise of the model")
}

/// The graph's `n` handles, and a slot whose first run registered them
/// all and ended.
fn registered(n: usize) -> (Arc<Vec<Handle>>, Arc<RunSlot>) {
    let handles: Arc<Vec<Handle>> = Arc::new(
        (0..n)
            .map(|_| Handle {
                value: UnsafeCell::new(0),
                log: Mutex::new(None),
            })
            .collect(),
    );
    let slot = Arc::new(RunSlot::new());
    let first = Promise::new();
    let Begin::Register(noted) = slot.begin(&first.done) else {
        panic!("a first run records every handle");
    };
    assert_eq!(noted, Noted::All);
    {
        let _logs: Vec<_> = handles.iter().map(|h| h.log.lock().unwrap()).collect();
        assert!(slot.registering(&first.done, &noted).unwrap().is_none());
    }
    first.keep();
    (handles, slot)
}

/// An access from outside the graph to handle `i`, on its own thread,
/// completed by `mine`: recorded after the graph's entry, it writes the
/// value once the run it saw in the slot (`run`), if any, ended.
fn outside(
    handles: &Arc<Vec<Handle>>,
    slot: &Arc<RunSlot>,
    i: usize,
    mine: &Arc<Promise>,
    run: &Arc<Promise>,
) -> thread::JoinHandle<()> {
    let (handles, slot, mine, run) = (handles.clone(), slot.clone(), mine.clone(), run.clone());
    thread::spawn(move || {
        let after = {
            let mut log = handles[i].log.lock().unwrap();
            let after = slot.seen(i);
            *log = Some(mine.done.clone());
            after
        };
        if let Some(d) = after {
            which(&d, std::slice::from_ref(&run)).wait();
        }
        // SAFETY: loom checks this write against the run's.
        handles[i].value.with_mut(|v| unsafe { *v = 1 });
        mine.keep();
    })
}

/// The next run, completed by `run`, as `DataUses::begin_run` makes it:
/// records again the handles noted (waiting for the entries after the
/// graph's in their logs, the accesses `outside`), then writes every
/// handle's value.
fn run(handles: &[Handle], slot: &RunSlot, run: &Promise, outside: &[Arc<Promise>]) {
    let mut waits: Vec<Dep> = Vec::new();
    let mut noted = match slot.begin(&run.done) {
        Begin::Unchanged(previous) => {
            assert!(previous.is_none(), "the first run is over");
            None
        }
        Begin::Register(noted) => Some(noted),
    };
    while let Some(these) = noted.take() {
        let mut indices: Vec<usize> = match &these {
            Noted::All => (0..handles.len()).collect(),
            Noted::Handles(h) => h.clone(),
        };
        indices.sort_unstable();
        indices.dedup();
        // Locked in order, as `lock_logs` does.
        let logs: Vec<_> = indices
            .iter()
            .map(|&i| handles[i].log.lock().unwrap())
            .collect();
        match slot.registering(&run.done, &these) {
            Err(now) => noted = Some(now),
            Ok(previous) => {
                assert!(previous.is_none(), "the first run is over");
                waits.extend(logs.iter().filter_map(|log| (**log).clone()));
            }
        }
    }
    for d in &waits {
        which(d, outside).wait();
    }
    for h in handles {
        // SAFETY: loom checks this write against the outside accesses'.
        h.value.with_mut(|v| unsafe { *v = 2 });
    }
    run.keep();
}

#[test]
fn a_run_that_registers_nothing_is_ordered_with_an_access_from_outside() {
    model(|| {
        let (handles, slot) = registered(1);
        let (next, mine) = (Promise::new(), Promise::new());
        let access = outside(&handles, &slot, 0, &mine, &next);
        run(&handles, &slot, &next, &[mine]);
        access.join().unwrap();
    });
}

#[test]
fn a_run_that_registers_some_handles_is_ordered_with_accesses_to_each() {
    model(|| {
        let (handles, slot) = registered(2);
        let next = Promise::new();
        let mine = [Promise::new(), Promise::new()];
        let a = outside(&handles, &slot, 0, &mine[0], &next);
        let b = outside(&handles, &slot, 1, &mine[1], &next);
        run(&handles, &slot, &next, &mine);
        a.join().unwrap();
        b.join().unwrap();
    });
}

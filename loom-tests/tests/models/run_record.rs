//! A graph's runs registered once (`selvedge::protocols::RunRecord`, what
//! `graph/data.rs` builds on): a run that records only the handles noted
//! since the last registration (none, or some) races accesses from outside
//! the graph being recorded in the logs of handles the graph writes. In
//! every interleaving each access and the run are ordered: the access
//! either waits for the run (it saw the run's completion in the record) or
//! the run records that handle again and waits for the access (the access
//! was noted before the run put its completion in the record). Loom checks
//! the writes of each handle's value as a data race.
//!
//! Then two graphs sharing a handle, each with a run that records some
//! handles again, and a task on a handle of each: no interleaving leaves
//! them waiting for each other (loom reports a deadlock).
use loom::cell::UnsafeCell;
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use loom_tests::support::model;
use selvedge::protocols::{Dep, Group, Noted, Outcome, RunRecord};
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

/// The graph's `n` handles, and a record whose first run registered them
/// all and ended.
fn registered(n: usize) -> (Arc<Vec<Handle>>, Arc<RunRecord>) {
    let handles: Arc<Vec<Handle>> = Arc::new(
        (0..n)
            .map(|_| Handle {
                value: UnsafeCell::new(0),
                log: Mutex::new(None),
            })
            .collect(),
    );
    let slot = Arc::new(RunRecord::new());
    let first = Promise::new();
    let mut noted = Noted::default();
    assert!(
        slot.begin(&first.done, &mut noted).is_none(),
        "a first run records every handle"
    );
    assert!(noted.all);
    {
        let _logs: Vec<_> = handles.iter().map(|h| h.log.lock().unwrap()).collect();
        assert!(slot.registering(&first.done, &mut noted).unwrap().is_none());
    }
    first.keep();
    (handles, slot)
}

/// An access from outside the graph to handle `i`, on its own thread,
/// completed by `mine`: recorded after the graph's entry, it writes the
/// value once the run it saw in the record (`run`), if any, ended.
fn outside(
    handles: &Arc<Vec<Handle>>,
    slot: &Arc<RunRecord>,
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
fn run(handles: &[Handle], slot: &RunRecord, run: &Promise, outside: &[Arc<Promise>]) {
    let mut waits: Vec<Dep> = Vec::new();
    let mut noted = Noted::default();
    let mut register = match slot.begin(&run.done, &mut noted) {
        Some(previous) => {
            assert!(previous.is_none(), "the first run is over");
            false
        }
        None => true,
    };
    while register {
        let mut indices: Vec<usize> = if noted.all {
            (0..handles.len()).collect()
        } else {
            noted.handles.clone()
        };
        indices.sort_unstable();
        indices.dedup();
        // Locked in order, as `lock_logs` does; looked at before the record
        // names the run.
        let logs: Vec<_> = indices
            .iter()
            .map(|&i| handles[i].log.lock().unwrap())
            .collect();
        let before: Vec<Dep> = logs.iter().filter_map(|log| (**log).clone()).collect();
        if let Ok(previous) = slot.registering(&run.done, &mut noted) {
            assert!(previous.is_none(), "the first run is over");
            waits.extend(before);
            register = false;
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

/// An entry of a log in the model of two graphs: a graph's (by its
/// index), or a task's completion.
#[derive(Clone)]
enum Entry {
    Graph(usize),
    Task(Dep),
}

/// Handles (their logs, by index: locked in index order) and two graphs'
/// run records; every access writes.
struct World {
    logs: Vec<Mutex<Vec<Entry>>>,
    slots: [RunRecord; 2],
}

impl World {
    /// What an access (graph `own`'s run, or a task) recorded after the
    /// entries of log `at` waits for, as `Log::before_run` / `before`.
    fn look(&self, at: usize, entries: &[Entry], own: Option<usize>) -> Vec<Dep> {
        entries
            .iter()
            .filter_map(|e| match e {
                Entry::Graph(g) if Some(*g) == own => None,
                Entry::Graph(g) => self.slots[*g].seen(at),
                Entry::Task(d) => (!d.is_fulfilled()).then(|| d.clone()),
            })
            .collect()
    }

    /// A run of graph `g` on `handles` completed by `done`, as
    /// `DataUses::begin_run` makes it; waits (`promises` has each
    /// completion it may wait for) and ends.
    fn run(&self, g: usize, handles: &[usize], done: &Promise, promises: &[Arc<Promise>]) {
        let mut waits: Vec<Dep> = Vec::new();
        let mut noted = Noted::default();
        let mut register = match self.slots[g].begin(&done.done, &mut noted) {
            Some(previous) => {
                waits.extend(previous);
                false
            }
            None => true,
        };
        while register {
            let mut at: Vec<usize> = if noted.all {
                handles.to_vec()
            } else {
                noted.handles.clone()
            };
            at.sort_unstable();
            at.dedup();
            let mut logs: Vec<_> = at.iter().map(|&i| self.logs[i].lock().unwrap()).collect();
            // Looked at before the record names the run (graph/data.rs).
            let mut before = Vec::new();
            for (&i, log) in at.iter().zip(&logs) {
                before.extend(self.look(i, log, Some(g)));
            }
            if let Ok(previous) = self.slots[g].registering(&done.done, &mut noted) {
                waits.extend(previous);
                waits.extend(before);
                for log in &mut logs {
                    **log = vec![Entry::Graph(g)];
                }
                register = false;
            }
        }
        for d in &waits {
            which(d, promises).wait();
        }
        done.keep();
    }

    /// A task writing `handles`, completed by `done`.
    fn task(&self, handles: &[usize], done: &Promise, promises: &[Arc<Promise>]) {
        let mut waits = Vec::new();
        {
            let mut logs: Vec<_> = handles
                .iter()
                .map(|&i| self.logs[i].lock().unwrap())
                .collect();
            for (&i, log) in handles.iter().zip(&logs) {
                waits.extend(self.look(i, log, None));
            }
            for log in &mut logs {
                **log = vec![Entry::Task(done.done.clone())];
            }
        }
        for d in &waits {
            which(d, promises).wait();
        }
        done.keep();
    }
}

#[test]
fn two_graphs_sharing_a_handle_and_a_task_between_them_never_wait_for_each_other() {
    model(|| {
        // Handles b, c, d; graph 0 writes b and c, graph 1 writes c and d.
        const B: usize = 0;
        const C: usize = 1;
        const D: usize = 2;
        let world = Arc::new(World {
            logs: (0..3).map(|_| Mutex::new(Vec::new())).collect(),
            slots: [RunRecord::new(), RunRecord::new()],
        });
        // One after another: graph 0 registers b and c; graph 1 registers
        // c and d (noting c in graph 0's record); graph 0 records c again
        // (noting c in graph 1's record).
        for (g, handles) in [(0, [B, C]), (1, [C, D]), (0, [B, C])] {
            let done = Promise::new();
            world.run(g, &handles, &done, &[]);
        }
        // Then at once: graph 1 records c again, a task writes b and d,
        // and graph 0 runs.
        let promises = [Promise::new(), Promise::new(), Promise::new()];
        let graph_1 = {
            let (world, promises) = (world.clone(), promises.clone());
            thread::spawn(move || world.run(1, &[C, D], &promises[0], &promises))
        };
        let task = {
            let (world, promises) = (world.clone(), promises.clone());
            thread::spawn(move || world.task(&[B, D], &promises[1], &promises))
        };
        world.run(0, &[B, C], &promises[2], &promises);
        graph_1.join().unwrap();
        task.join().unwrap();
    });
}

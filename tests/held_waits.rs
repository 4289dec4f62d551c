//! Waits that could never end because the waiter holds the access the
//! awaited task is ordered after: each panics with a message naming the
//! handle instead of hanging, and waits that can end are left alone.

mod support;

use selvedge::{scope, spawn_with, Data, Graph, GraphError, Promise, Runtime};
use std::time::Duration;
use support::Watchdog;

fn runtime(n: usize) -> Runtime {
    Runtime::builder().num_threads(n).build().unwrap()
}

/// (a) A task holding a write joins a read of the same handle, which is
/// ordered after it.
#[test]
fn a_join_behind_a_write_the_joiner_holds_panics() {
    let _watchdog = Watchdog::new("join behind a held write", Duration::from_secs(60));
    let rt = runtime(2);
    let d = Data::named("d", 0u64);
    let d2 = d.clone();
    let err = rt
        .spawn_with(d.write(), move |x: &mut u64| {
            *x += 1;
            spawn_with(d2.read(), |x: &u64| *x).join()
        })
        .try_join()
        .unwrap_err();
    let message = err.to_string();
    assert!(err.is_panic(), "{message}");
    assert!(
        message.contains("join of a task that declares Data \"d\" (Read)")
            && message.contains("holds Data \"d\" (Write"),
        "{message}"
    );
    // The holder panicked while it held the write: the handle is poisoned,
    // and recovers as usual.
    rt.spawn_with(d.recover(), |x| *x = 7).join();
    assert_eq!(d.into_inner(), 7);
}

/// `try_join` cannot return an error for a wait that never ends: it
/// panics the same way.
#[test]
fn a_try_join_behind_a_held_access_panics_too() {
    let _watchdog = Watchdog::new("try_join behind a held read", Duration::from_secs(60));
    let rt = runtime(2);
    let d = Data::named("r", 0u64);
    let d2 = d.clone();
    // A read held, a write awaited: the write waits for the read.
    let err = rt
        .spawn_with(d.read(), move |_: &u64| {
            let _ = spawn_with(d2.write(), |x: &mut u64| *x = 1).try_join();
        })
        .try_join()
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("Data \"r\" (Write)") && message.contains("holds Data \"r\" (Read"),
        "{message}"
    );
    assert_eq!(d.into_inner(), 1, "the write still ran, after the read");
}

/// A read under a held read waits for it only through a write submitted
/// in between: then the join could never end, and is refused; without
/// such a write, it runs (see `waits_that_can_end_are_left_alone`).
#[test]
fn a_read_behind_a_write_behind_the_held_read_is_refused() {
    let _watchdog = Watchdog::new("read behind a write", Duration::from_secs(60));
    let rt = runtime(2);
    let x = Data::named("x", 1u64);
    let (x2, x3) = (x.clone(), x.clone());
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let writer = std::thread::spawn(move || {
        go_rx.recv().unwrap();
        // From outside the pool, while the read below holds `x`.
        selvedge::global_runtime().spawn_with(x3.write(), |x: &mut u64| *x += 1)
    });
    let err = rt
        .spawn_with(x.read(), move |_: &u64| {
            go_tx.send(()).unwrap();
            let write = writer.join().unwrap();
            // This read comes after that write, which waits for this task.
            let read = spawn_with(x2.read(), |x: &u64| *x);
            write.detach();
            read.join()
        })
        .try_join()
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("join of a task that declares Data \"x\" (Read)")
            && message.contains("holds Data \"x\" (Read"),
        "{message}"
    );
    assert_eq!(
        x.into_inner(),
        2,
        "the write ran after the read that held it"
    );
}

/// (b) A scope inside a task holding a write spawns a read of the same
/// handle: the scope would wait for it forever. Refused at submission.
#[test]
fn a_scope_spawn_behind_an_access_its_maker_holds_panics_at_submission() {
    let _watchdog = Watchdog::new("scope behind a held write", Duration::from_secs(60));
    let rt = runtime(2);
    let d = Data::named("s", 0u64);
    let d3 = d.clone();
    let err = rt
        .spawn_with(d.write(), move |_x: &mut u64| {
            scope(|s| {
                s.spawn_with(d3.read(), |_, x: &u64| {
                    let _ = *x;
                });
            });
        })
        .try_join()
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("Scope::spawn_with of a task that declares Data \"s\" (Read)"),
        "{message}"
    );
    // Nothing was submitted: the only access after the holder is this one.
    rt.spawn_with(d.recover(), |x| *x = 3).join();
    assert_eq!(d.into_inner(), 3);
}

/// The check follows the scope's maker, not the thread a submission
/// comes from: a scope's task on another worker is refused too.
#[test]
fn a_scope_spawn_from_a_nested_task_is_refused_as_well() {
    let _watchdog = Watchdog::new("nested scope spawn", Duration::from_secs(60));
    let rt = runtime(3);
    let d = Data::named("n", 0u64);
    let d3 = d.clone();
    let err = rt
        .spawn_with(d.write(), move |_x: &mut u64| {
            scope(|s| {
                s.spawn(|s| {
                    std::thread::sleep(Duration::from_millis(5));
                    s.spawn_with(d3.read(), |_, _| ());
                });
            });
        })
        .try_join()
        .unwrap_err();
    assert!(err.to_string().contains("Scope::spawn_with"), "{err}");
}

/// (c) A plain node of a graph run joins a read of a handle a node of the
/// same run writes: the run holds the write until it ends.
#[test]
fn a_join_in_a_graph_node_behind_its_runs_write_panics() {
    let _watchdog = Watchdog::new("graph node join", Duration::from_secs(60));
    let rt = runtime(2);
    let d = Data::named("g", 0u64);
    let mut g = Graph::new();
    g.node_with(d.write(), |x: &mut u64| *x += 1);
    let d4 = d.clone();
    g.node(move || {
        spawn_with(d4.read(), |x: &u64| *x).join();
    });
    match rt.run_graph(&mut g) {
        Err(GraphError::Failed { panicked, .. }) => {
            let message = panicked[0].message().unwrap_or_default().to_string();
            assert!(
                message.contains("join of a task that declares Data \"g\" (Read)"),
                "{message}"
            );
        }
        other => panic!("expected the node to fail, got {other:?}"),
    }
}

/// Waits that end are not refused: reads joined under a read, a task on
/// another handle, a join after the holder returned, and a task whose
/// block was reused after a refused one was cancelled.
#[test]
fn waits_that_can_end_are_left_alone() {
    let _watchdog = Watchdog::new("waits that end", Duration::from_secs(60));
    let rt = runtime(2);
    let (d, other) = (Data::named("d", 1u64), Data::new(2u64));
    let (d2, o2) = (d.clone(), other.clone());
    let (behind_tx, behind_rx) = std::sync::mpsc::channel();
    let sum = rt
        .spawn_with(d.read(), move |x: &u64| {
            // A read under a read: ordered after nothing held.
            let again = spawn_with(d2.read(), |x: &u64| *x).join();
            // Another handle altogether.
            let o = spawn_with(o2.write(), |o: &mut u64| {
                *o += 1;
                *o
            })
            .join();
            // Behind the held read, and cancelled: its handle dropped, its
            // block free for the next task on this worker.
            let never = Promise::new();
            drop(spawn_with((d2.write(), never.dep()), |(x, ())| *x = 0));
            drop(never);
            // Joined on the slow path (readied by another thread, so not
            // taken back from this worker's deque), where joins are checked.
            let reuse: u64 = (0..64)
                .map(|i| {
                    let p = Promise::new();
                    let h = selvedge::spawn_delayed([p.dep()], move || i);
                    std::thread::spawn(move || p.fulfill()).join().unwrap();
                    h.join()
                })
                .sum();
            // Behind the held read, joined only after the holder returned.
            behind_tx
                .send(spawn_with(d2.write(), |x: &mut u64| *x * 100))
                .unwrap();
            x + again + o + reuse
        })
        .join();
    assert_eq!(sum, 1 + 1 + 3 + 2016);
    assert_eq!(behind_rx.recv().unwrap().join(), 100);
    assert_eq!(other.into_inner(), 3);
}

//! `JoinHandle::dep`: a task's completion as a dependency, fulfilled when
//! the task returns, broken when it panics or is cancelled, whichever way
//! the task ran (stolen, run in place by its joiner, from the injector).

use selvedge::{spawn, spawn_delayed, Promise, Runtime};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn runtime(n: usize) -> Runtime {
    Runtime::builder().num_threads(n).build().unwrap()
}

#[test]
fn dependents_run_after_the_task_returns() {
    let rt = runtime(2);
    let order = Arc::new(AtomicUsize::new(0));
    let o = order.clone();
    let first = rt.spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(20));
        o.fetch_add(1, Ordering::SeqCst)
    });
    let o = order.clone();
    let second = rt.spawn_delayed([first.dep()], move || o.fetch_add(1, Ordering::SeqCst));
    assert_eq!(second.join(), 1, "the dependent ran before the task");
    assert_eq!(first.join(), 0);
}

#[test]
fn a_task_joined_in_place_fulfills_its_dependency() {
    let rt = runtime(1);
    // One worker: the task stays in the deque and `join` runs it in place.
    let out = rt.run(|| {
        let task = spawn(|| 5);
        let after = spawn_delayed([task.dep()], || 7);
        assert!(!after.is_finished());
        let v = task.join();
        v + after.join()
    });
    assert_eq!(out, 12);
}

#[test]
fn a_task_that_panics_breaks_its_dependency() {
    let rt = runtime(2);
    for in_place in [false, true] {
        let (after, failing) = rt.run(|| {
            let failing = spawn(|| -> u8 { panic!("task failed") });
            let after = spawn_delayed([failing.dep()], || ());
            if in_place {
                assert!(failing.try_join().unwrap_err().is_panic());
                (after, None)
            } else {
                (after, Some(failing))
            }
        });
        let err = after.try_join().unwrap_err();
        assert!(err.is_cancelled(), "{err}");
        if let Some(failing) = failing {
            assert!(failing.try_join().unwrap_err().is_panic());
        }
    }
}

#[test]
fn a_cancelled_task_breaks_its_dependency() {
    let rt = runtime(2);
    let p = Promise::new();
    let never = rt.spawn_delayed([p.dep()], || 1);
    let after = rt.spawn_delayed([never.dep()], || 2);
    drop(p);
    assert!(after.try_join().unwrap_err().is_cancelled());
    assert!(never.try_join().unwrap_err().is_cancelled());
}

#[test]
fn dep_of_a_finished_task_is_already_closed() {
    let rt = runtime(2);
    let ok = rt.spawn(|| 1);
    let failed = rt.spawn(|| -> u8 { panic!("failed") });
    rt.sync_root();
    assert!(ok.dep().is_fulfilled());
    assert!(rt.spawn_delayed([ok.dep()], || 3).join() == 3);
    assert!(!failed.dep().is_fulfilled());
    let after = rt.spawn_delayed([failed.dep()], || 3);
    assert!(after.try_join().unwrap_err().is_cancelled());
    assert_eq!(ok.join(), 1);
}

#[test]
fn the_dependency_outlives_the_handle() {
    let rt = runtime(2);
    let gate = Promise::new();
    let task = rt.spawn_delayed([gate.dep()], || 1);
    let dep = task.dep();
    drop(task); // detached: the dependency still fires
    let after = rt.spawn_delayed([dep], || 2);
    gate.fulfill();
    assert_eq!(after.join(), 2);
}

/// Many threads ask for the dependency while the task completes: every
/// dependent runs exactly once (none hangs), more threads than cores.
#[test]
fn dep_races_completion() {
    let rt = runtime(3);
    for round in 0..300 {
        let ran = Arc::new(AtomicUsize::new(0));
        let task = rt.spawn(move || round);
        let deps: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..3).map(|_| s.spawn(|| task.dep())).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let dependents: Vec<_> = deps
            .into_iter()
            .map(|d| {
                let ran = ran.clone();
                rt.spawn_delayed([d], move || ran.fetch_add(1, Ordering::SeqCst))
            })
            .collect();
        for d in dependents {
            d.join();
        }
        assert_eq!(ran.load(Ordering::SeqCst), 3);
        assert_eq!(task.join(), round);
    }
}

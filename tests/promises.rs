//! Dataflow promises: delayed tasks, loop promises, broken promises,
//! scopes and reclamation.

use selvedge::{scope, spawn_delayed, LoopPromise, Promise, Runtime};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn runtime(n: usize) -> Runtime {
    Runtime::builder().num_threads(n).build().unwrap()
}

#[test]
fn waits_for_every_dependency() {
    let rt = runtime(4);
    let ps: Vec<Promise> = (0..4).map(|_| Promise::new()).collect();
    let h = rt.spawn_delayed(ps.iter().map(Promise::dep), || 7);
    for p in &ps[..3] {
        p.fulfill();
        std::thread::sleep(Duration::from_millis(5));
        assert!(!h.is_finished(), "ran before its last dependency");
    }
    ps[3].fulfill();
    assert_eq!(h.join(), 7);
}

#[test]
fn empty_and_fulfilled_dependencies_run_at_once() {
    let rt = runtime(2);
    assert_eq!(rt.spawn_delayed([], || 1).join(), 1);
    let p = Promise::new();
    p.fulfill();
    assert_eq!(rt.spawn_delayed([p.dep(), p.dep()], || 2).join(), 2);
    assert_eq!(rt.run(|| spawn_delayed([p.dep()], || 3).join()), 3);
}

#[test]
fn duplicate_dependencies_wait_once() {
    let rt = runtime(2);
    let p = Promise::new();
    let q = Promise::new();
    let deps = [p.dep(), q.dep(), p.dep(), q.dep(), p.dep(), p.dep()];
    let h = rt.spawn_delayed(deps, || 5);
    p.fulfill();
    q.fulfill();
    assert_eq!(h.join(), 5);
}

#[test]
fn many_dependencies_spill_past_the_inline_list() {
    let rt = runtime(4);
    let lp = LoopPromise::new(0..100);
    let h = rt.spawn_delayed((0..100).rev().map(|i| lp.at(i)), || "all");
    for i in 0..99 {
        lp.fulfill(i);
    }
    std::thread::sleep(Duration::from_millis(5));
    assert!(!h.is_finished());
    lp.fulfill(99);
    assert_eq!(h.join(), "all");
}

#[test]
fn fulfill_is_idempotent_and_reports_the_first_call() {
    let p = Promise::new();
    let q = p.clone();
    assert!(!p.is_fulfilled());
    assert!(q.fulfill());
    assert!(!p.fulfill());
    assert!(p.is_fulfilled() && q.is_fulfilled());
    for bucket in [1, 3] {
        let lp = LoopPromise::with_bucket_size(0..10, bucket);
        assert!(lp.fulfill(4));
        assert!(!lp.fulfill(4));
        assert!(lp.is_fulfilled(4) && !lp.is_fulfilled(5));
    }
}

#[test]
fn fulfilled_by_foreign_threads() {
    let rt = runtime(4);
    let ps: Vec<Promise> = (0..64).map(|_| Promise::new()).collect();
    let handles: Vec<_> = (0..64)
        .map(|i| rt.spawn_delayed([ps[i].dep(), ps[(i + 1) % 64].dep()], move || i))
        .collect();
    let threads: Vec<_> = ps
        .chunks(16)
        .map(|c| {
            let c = c.to_vec();
            std::thread::spawn(move || c.iter().for_each(|p| assert!(p.fulfill())))
        })
        .collect();
    threads.into_iter().for_each(|t| t.join().unwrap());
    let out: Vec<usize> = handles.into_iter().map(|h| h.join()).collect();
    assert_eq!(out, (0..64).collect::<Vec<_>>());
}

#[test]
fn chain_runs_in_order_on_workers() {
    let rt = runtime(4);
    let n = 10_000;
    let order = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let first = Promise::new();
    let last = rt.run(|| {
        let mut prev = first.clone();
        let mut handles = Vec::with_capacity(n);
        for i in 0..n {
            let next = Promise::new();
            let (order, next2) = (order.clone(), next.clone());
            handles.push(spawn_delayed([prev.dep()], move || {
                order.lock().unwrap().push(i);
                next2.fulfill();
            }));
            prev = next;
        }
        first.fulfill();
        handles.into_iter().for_each(|h| h.join());
        prev
    });
    assert!(last.is_fulfilled());
    assert_eq!(*order.lock().unwrap(), (0..n).collect::<Vec<_>>());
}

#[test]
fn loop_promise_buckets_fire_when_whole() {
    let lp = LoopPromise::with_bucket_size(3..13, 4); // buckets 3..7, 7..11, 11..13
    let (a, b, c) = (lp.at(3), lp.at(8), lp.at(12));
    for i in [3, 4, 5] {
        lp.fulfill(i);
    }
    assert!(!a.is_fulfilled());
    lp.fulfill(6);
    assert!(a.is_fulfilled() && !b.is_fulfilled());
    lp.fulfill(11);
    assert!(!c.is_fulfilled());
    lp.fulfill(12);
    assert!(c.is_fulfilled());
    assert!(lp.is_fulfilled(12) && !lp.is_fulfilled(7));
}

#[test]
#[should_panic(expected = "LoopPromise index 20 is out of range 10..20")]
fn loop_promise_index_out_of_range_names_it() {
    LoopPromise::new(10..20).fulfill(20);
}

#[test]
#[should_panic(expected = "bucket size must be at least 1, got 0")]
fn loop_promise_zero_bucket_panics() {
    let _ = LoopPromise::with_bucket_size(0..4, 0);
}

#[test]
fn broken_promise_cancels_with_a_clear_error() {
    let rt = runtime(2);
    let p = Promise::new();
    let q = Promise::new();
    q.fulfill();
    let h = rt.spawn_delayed([q.dep(), p.dep()], || 1);
    let h2 = rt.spawn_delayed([p.dep()], || 2);
    drop(p);
    let err = h.try_join().unwrap_err();
    assert!(err.is_cancelled() && !err.is_panic());
    assert!(err.to_string().contains("dropped unfulfilled"), "{err}");
    let msg = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h2.join()))
        .unwrap_err()
        .downcast::<String>()
        .unwrap();
    assert!(
        msg.contains("cancelled") && msg.contains("dropped unfulfilled"),
        "{msg}"
    );
}

#[test]
fn spawning_on_a_broken_promise_cancels_at_once() {
    let rt = runtime(2);
    let p = Promise::new();
    let d = p.dep();
    drop(p);
    assert!(!d.is_fulfilled());
    assert!(rt
        .spawn_delayed([d], || ())
        .try_join()
        .unwrap_err()
        .is_cancelled());
}

#[test]
fn broken_loop_promise_cancels_only_unfulfilled_iterations() {
    let rt = runtime(2);
    let lp = LoopPromise::new(0..4);
    let hs: Vec<_> = (0..4)
        .map(|i| rt.spawn_delayed([lp.at(i)], move || i))
        .collect();
    lp.fulfill(1);
    lp.fulfill(2);
    drop(lp);
    let out: Vec<_> = hs.into_iter().map(|h| h.try_join().ok()).collect();
    assert_eq!(out, [None, Some(1), Some(2), None]);
}

#[test]
fn a_clone_keeps_the_promise_alive() {
    let rt = runtime(2);
    let p = Promise::new();
    let h = rt.spawn_delayed([p.dep()], || 9);
    let keeper = p.clone();
    drop(p);
    std::thread::sleep(Duration::from_millis(5));
    assert!(!h.is_finished());
    std::thread::spawn(move || keeper.fulfill()).join().unwrap();
    assert_eq!(h.join(), 9);
}

#[test]
fn long_chain_of_broken_promises_does_not_recurse() {
    // Each task holds the promise the next one waits on: dropping the first
    // cancels them all, one after the other.
    let rt = runtime(2);
    let n = 200_000;
    let first = Promise::new();
    let mut prev = first.clone();
    let mut handles = Vec::with_capacity(n);
    for _ in 0..n {
        let next = Promise::new();
        let hold = next.clone();
        handles.push(rt.spawn_delayed([prev.dep()], move || drop(hold)));
        prev = next;
    }
    drop(prev);
    drop(first);
    assert!(handles
        .into_iter()
        .all(|h| h.try_join().unwrap_err().is_cancelled()));
}

#[test]
fn scope_waits_for_delayed_tasks() {
    let rt = runtime(4);
    let sum = AtomicUsize::new(0);
    rt.run(|| {
        scope(|s| {
            let lp = LoopPromise::new(0..100);
            for i in 0..100 {
                let sum = &sum;
                s.spawn_delayed([lp.at(i)], move |_| {
                    sum.fetch_add(i, Ordering::Relaxed);
                });
            }
            s.spawn(move |s| {
                for i in 0..100 {
                    let lp = lp.clone();
                    s.spawn(move |_| {
                        lp.fulfill(i);
                    });
                }
            });
        })
    });
    assert_eq!(sum.into_inner(), 4950);
}

#[test]
fn scope_with_a_broken_promise_finishes_and_reports_it() {
    let rt = runtime(2);
    let ran = AtomicUsize::new(0);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.run(|| {
            scope(|s| {
                let p = Promise::new();
                s.spawn_delayed([p.dep()], |_| {
                    ran.fetch_add(1, Ordering::Relaxed);
                });
                s.spawn(move |_| drop(p));
            })
        })
    }));
    let msg = r.unwrap_err().downcast::<String>().unwrap();
    assert!(
        msg.contains("cancelled") && msg.contains("dropped unfulfilled"),
        "{msg}"
    );
    assert_eq!(ran.into_inner(), 0);
}

/// Counts drops, to prove every closure was run or dropped exactly once.
struct Counted(Arc<AtomicUsize>);
impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn closures_and_promises_are_freed_exactly_once() {
    let rt = runtime(4);
    let drops = Arc::new(AtomicUsize::new(0));
    let n = 2000;
    let mut kept = Vec::new();
    let mut handles = Vec::new();
    for i in 0..n {
        let p = Promise::new();
        let c = Counted(drops.clone());
        handles.push(rt.spawn_delayed([p.dep()], move || drop(c)));
        if i % 2 == 0 {
            kept.push(p);
        } // odd ones are dropped: broken
    }
    std::thread::spawn(move || kept.iter().for_each(|p| assert!(p.fulfill())))
        .join()
        .unwrap();
    let (mut ran, mut cancelled) = (0, 0);
    for h in handles {
        match h.try_join() {
            Ok(()) => ran += 1,
            Err(e) if e.is_cancelled() => cancelled += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!((ran, cancelled), (n / 2, n / 2));
    assert_eq!(drops.load(Ordering::Relaxed), n);
}

#[test]
fn delayed_task_ready_after_shutdown_is_cancelled() {
    let rt = runtime(2);
    let p = Promise::new();
    let h = rt.spawn_delayed([p.dep()], || 1);
    drop(rt);
    p.fulfill();
    let err = h.try_join().unwrap_err();
    assert!(err.is_cancelled());
    assert!(err.to_string().contains("shut down"), "{err}");
}

#[test]
fn awaiting_a_delayed_task() {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};
    let rt = runtime(2);
    let p = Promise::new();
    let mut h = pin!(rt.spawn_delayed([p.dep()], || 3));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(h.as_mut().poll(&mut cx).is_pending());
    p.fulfill();
    rt.sync_root();
    assert_eq!(h.as_mut().poll(&mut cx), Poll::Ready(3));
}

#[test]
fn one_worker_join_runs_the_older_task_that_fulfills() {
    // The scope runs the joiner first (newest task); the fulfiller is older,
    // below the joiner's frame, and no other worker can take it. The join
    // must still get to it instead of parking forever.
    let rt = runtime(1);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let out = rt.run(|| {
            let p = Promise::new();
            let got = AtomicUsize::new(0);
            scope(|s| {
                let fulfiller = p.clone();
                s.spawn(move |_| {
                    fulfiller.fulfill();
                });
                s.spawn(|_| {
                    let h = spawn_delayed([p.dep()], || 1);
                    got.store(h.join(), Ordering::Relaxed);
                });
            });
            got.into_inner()
        });
        tx.send(out).unwrap();
    });
    let out = rx.recv_timeout(Duration::from_secs(60));
    assert_eq!(out, Ok(1), "the join never ran the fulfilling task");
}

#[test]
fn fulfill_racing_runtime_drop_runs_or_cancels_never_strands() {
    // A foreign thread readies a task (which spawns and joins children)
    // while the runtime is being dropped: the task either runs completely
    // or is cancelled with "shut down"; its handle never waits forever.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let (mut ran, mut cancelled) = (0, 0);
        for _ in 0..300 {
            let rt = runtime(2);
            let p = Promise::new();
            let h = rt.spawn_delayed([p.dep()], || {
                let kids: Vec<_> = (0..4u64).map(|i| selvedge::spawn(move || i)).collect();
                kids.into_iter().map(|k| k.join()).sum::<u64>()
            });
            let fulfiller = std::thread::spawn(move || p.fulfill());
            drop(rt);
            fulfiller.join().unwrap();
            match h.try_join() {
                Ok(sum) => {
                    assert_eq!(sum, 6);
                    ran += 1;
                }
                Err(e) => {
                    assert!(
                        e.is_cancelled() && e.to_string().contains("shut down"),
                        "{e}"
                    );
                    cancelled += 1;
                }
            }
        }
        tx.send(ran + cancelled).unwrap();
    });
    assert_eq!(rx.recv_timeout(Duration::from_secs(120)), Ok(300));
}

#[test]
fn a_broken_loop_iteration_cancels_what_waits_on_it_and_stays_broken() {
    let rt = runtime(2);
    let produced = LoopPromise::new(0..4);
    for i in [0, 1, 3] {
        assert!(produced.fulfill(i));
    }
    assert!(produced.break_iteration(2));
    assert!(!produced.break_iteration(2), "broken twice");
    assert!(!produced.fulfill(2), "a broken iteration was fulfilled");
    assert!(!produced.is_fulfilled(2));
    assert!(
        !produced.break_iteration(0),
        "a fulfilled iteration was broken"
    );
    assert!(produced.is_fulfilled(0));
    let ran = AtomicUsize::new(0);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.run(|| {
            selvedge::parallel_for(0..4)
                .depends_on_each(&produced)
                .for_each(|_| {
                    ran.fetch_add(1, Ordering::Relaxed);
                })
        })
    }));
    let payload = outcome.expect_err("a loop behind a broken iteration returned");
    let message = payload
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(
        message.contains("iteration 2 ") && message.contains("cancelled"),
        "{message}"
    );
    assert_eq!(ran.load(Ordering::Relaxed), 3);
}

#[test]
fn tasks_parked_on_a_promise_kept_outside_are_cancelled_at_shutdown_and_a_later_fulfill_is_safe() {
    // The runtime's drop cancels the tasks at once: their handles report
    // it while the promise they wait on is still open. The handles, joined
    // or dropped, must not free a task's block while the promise's stack
    // still holds its waiting record: the memory allocated next would
    // overwrite it, and the fulfill after the shutdown walks every record.
    let p = Promise::new();
    let mut handles: Vec<_> = {
        let rt = runtime(2);
        let handles = (0..256u64)
            .map(|i| rt.spawn_delayed([p.dep()], move || i))
            .collect();
        drop(rt);
        handles
    };
    let detached = handles.split_off(128);
    drop(detached);
    for h in handles {
        let err = h.try_join().unwrap_err();
        assert!(err.to_string().contains("shut down"), "{err}");
    }
    let reused: Vec<Box<[u8; 256]>> = (0..1024).map(|_| Box::new([0xA5; 256])).collect();
    p.fulfill();
    drop(reused);
}

#[test]
fn tasks_with_large_closures_parked_at_shutdown_are_cancelled_and_a_later_fulfill_is_safe() {
    // Closures too large to share their task's block: each task's waiting
    // record has a block of its own, which whichever of the shutdown and
    // the promise lets go last frees; the other must not read it after.
    let p = Promise::new();
    let big = [7u64; 16];
    let mut handles: Vec<_> = {
        let rt = runtime(2);
        let handles = (0..64usize)
            .map(|i| rt.spawn_delayed([p.dep()], move || std::hint::black_box(big)[i % 16]))
            .collect();
        drop(rt);
        handles
    };
    drop(handles.split_off(32));
    for h in handles {
        let err = h.try_join().unwrap_err();
        assert!(err.to_string().contains("shut down"), "{err}");
    }
    p.fulfill();
}

#[test]
fn a_cycle_of_tasks_with_large_closures_is_cancelled_at_shutdown() {
    // As the cycle in `spawn_delayed`'s documentation, with closures that
    // do not fit their task's block: cancelling the first drops the
    // promise the second waits on, which settles the second's record
    // while the shutdown still holds it.
    for _ in 0..50 {
        let rt = runtime(2);
        let (p1, p2) = (Promise::new(), Promise::new());
        let pad = [1u64; 16];
        let q1 = p1.clone();
        let a = rt.spawn_delayed([p2.dep()], move || {
            std::hint::black_box(pad);
            q1.fulfill();
        });
        let b = rt.spawn_delayed([p1.dep()], move || {
            std::hint::black_box(pad);
            p2.fulfill();
        });
        drop(p1);
        drop(rt);
        assert!(a.try_join().unwrap_err().to_string().contains("shut down"));
        assert!(b.try_join().unwrap_err().is_cancelled());
    }
}

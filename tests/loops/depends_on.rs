//! depends_on, and broken promises.

use super::*;

#[test]
fn depends_on_delays_a_spawned_loop_until_every_dependency() {
    let _w = Watchdog::new("loops: depends_on spawn (a loop hangs)", HANG);
    let rt = runtime(4);
    for from_worker in [false, true] {
        let a = Promise::new();
        let b = Promise::new();
        let lp = LoopPromise::new(0..10);
        let deps = [a.dep(), b.dep(), lp.at(3)];
        let ran = Arc::new(AtomicUsize::new(0));
        let early = Arc::new(AtomicUsize::new(0));
        let start = || {
            let (ran, early, deps) = (ran.clone(), early.clone(), deps.clone());
            let mut l = parallel_for(0..1000).stride(3);
            for d in deps.iter().cloned() {
                l = l.depends_on(d);
            }
            l.spawn(move |_| {
                if !deps.iter().all(selvedge::Dep::is_fulfilled) {
                    early.fetch_add(1, Relaxed);
                }
                ran.fetch_add(1, Relaxed);
            })
        };
        let h = if from_worker { rt.run(start) } else { start() };
        for step in 0..3 {
            // Give the loop a chance to start early (it must not).
            std::thread::sleep(Duration::from_millis(5));
            assert!(!h.is_finished(), "step {step}: finished before its deps");
            assert_eq!(ran.load(Relaxed), 0, "step {step}: started before its deps");
            match step {
                0 => assert!(a.fulfill()),
                1 => assert!(lp.fulfill(3)),
                _ => {}
            }
        }
        // Fulfilled from a foreign thread.
        std::thread::spawn(move || b.fulfill()).join().unwrap();
        h.join();
        assert_eq!(ran.load(Relaxed), 334);
        assert_eq!(early.load(Relaxed), 0);
    }
}

#[test]
fn depends_on_delays_blocking_loops() {
    let _w = Watchdog::new("loops: depends_on blocking (a loop hangs)", HANG);
    let rt = runtime(4);
    for rep in 0..10 {
        let p = Promise::new();
        let q = Promise::new();
        let flag = AtomicBool::new(false);
        let early = AtomicUsize::new(0);
        let counts = counters(10_000);
        let sum = std::thread::scope(|s| {
            s.spawn(|| {
                if rep % 2 == 0 {
                    std::thread::sleep(Duration::from_millis(2));
                }
                q.fulfill();
                flag.store(true, Relaxed);
                p.fulfill();
            });
            rt.run(|| {
                parallel_for(0..10_000).depends_on(p.dep()).for_each(|i| {
                    if !flag.load(Relaxed) {
                        early.fetch_add(1, Relaxed);
                    }
                    counts[i].fetch_add(1, Relaxed);
                });
                // Already fulfilled dependencies: the loop runs in place.
                parallel_for(0..10_000)
                    .depends_on(q.dep())
                    .depends_on(p.dep())
                    .reduce(|| 0usize, |a, i| a + i, |a, b| a + b)
            })
        });
        assert_eq!(early.load(Relaxed), 0, "rep {rep}: ran before the promise");
        assert_counts(&counts, |_| 1, &format!("rep {rep}"));
        assert_eq!(sum, 10_000 * 9_999 / 2);
    }
    // A reduction waiting for a promise fulfilled from a foreign thread.
    let p = Promise::new();
    let flag = AtomicBool::new(false);
    let got = std::thread::scope(|s| {
        s.spawn(|| {
            flag.store(true, Relaxed);
            p.fulfill();
        });
        rt.run(|| {
            parallel_for(0..100).depends_on(p.dep()).reduce(
                Vec::new,
                |mut v, i| {
                    assert!(flag.load(Relaxed));
                    v.push(i);
                    v
                },
                |mut a, b| {
                    a.extend(b);
                    a
                },
            )
        })
    });
    assert_eq!(got, serial(0..100, 1));
}

/// Guards against a hang (src/core/park.rs `Sleep::wake_any` / `join_park`,
/// src/core/worker/parking.rs, a worker's park; not specific to loops): on a runtime with one worker, a
/// caller blocked in `for_each` / `reduce` (or in `join` on a
/// `spawn_delayed` task) whose dependency is fulfilled by a foreign thread
/// after the worker parked never wakes. The ready part goes to the
/// injector and `wake_any` wakes only `SLEEPING` workers, while the
/// blocked worker parks as `JOIN_WAITING` and re-checks only its mailbox,
/// its reply slot and its own count, not the injector. With two or more
/// workers it does not show: the waiters' steal requests wake each other.
/// It does show with `num_threads(1)`, and with the global runtime on a
/// one-CPU machine (or `SELVEDGE_NUM_THREADS=1`). Expected: the loop runs
/// once the promise is fulfilled.
#[test]
fn one_worker_blocking_loop_waiting_for_a_foreign_fulfill() {
    if !is_child() {
        return in_child_process(
            "depends_on::one_worker_blocking_loop_waiting_for_a_foreign_fulfill",
            HANG_LIMIT,
        );
    }
    let r = {
        let rt = runtime(1);
        let lp = LoopPromise::new(0..4);
        let p = Promise::new();
        let calls = AtomicUsize::new(0);
        // The worker's park count when a phase began (u64::MAX: not yet).
        let phase = [AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX)];
        let parks = || rt.stats().workers[0].parks;
        std::thread::scope(|s| {
            s.spawn(|| {
                // Once the worker has begun the phase and then parked (a
                // state, polled; the deadline only bounds the poll),
                // fulfill from this foreign thread.
                let wait_for_park = |ph: &AtomicU64| {
                    let deadline = std::time::Instant::now() + Duration::from_secs(5);
                    while std::time::Instant::now() < deadline {
                        let base = ph.load(Relaxed);
                        if base != u64::MAX && parks() > base {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                };
                wait_for_park(&phase[0]);
                for i in 1..4 {
                    lp.fulfill(i);
                }
                wait_for_park(&phase[1]);
                p.fulfill();
            });
            rt.run(|| {
                lp.fulfill(0);
                // Phase 0: iterations 1..4 are parked on their promises.
                parallel_for(0..4).depends_on_each(&lp).for_each(|i| {
                    if i == 0 {
                        phase[0].store(parks(), Relaxed);
                    }
                    calls.fetch_add(1, Relaxed);
                });
                // Phase 1: the whole loop waits for `p`.
                phase[1].store(parks(), Relaxed);
                parallel_for(0..4).depends_on(p.dep()).for_each(|_| {
                    calls.fetch_add(1, Relaxed);
                });
            });
        });
        calls.into_inner()
    };
    assert_eq!(r, 8);
}

#[test]
fn a_broken_dependency_cancels_a_spawned_loop() {
    let _w = Watchdog::new("loops: broken depends_on spawn (a loop hangs)", HANG);
    let rt = runtime(2);
    for from_worker in [false, true] {
        let p = Promise::new();
        let ran = Arc::new(AtomicUsize::new(0));
        let r2 = ran.clone();
        let start = || {
            parallel_for(0..100).depends_on(p.dep()).spawn(move |_| {
                r2.fetch_add(1, Relaxed);
            })
        };
        let h = if from_worker { rt.run(start) } else { start() };
        drop(p);
        let msg = panic_message(|| h.join());
        assert!(msg.contains("cancelled"), "{msg}");
        assert_eq!(ran.load(Relaxed), 0);
        // try_join reports it as an error that says so.
        let p = Promise::new();
        let h = rt.run(|| parallel_for(0..100).depends_on(p.dep()).spawn(|_| ()));
        std::thread::spawn(move || drop(p)).join().unwrap();
        let err = h.try_join().unwrap_err();
        assert!(err.to_string().contains("cancelled"), "{err}");
    }
}

#[test]
fn a_broken_dependency_cancels_a_blocking_loop() {
    let _w = Watchdog::new("loops: broken depends_on blocking (a loop hangs)", HANG);
    let rt = runtime(2);
    // Broken before the loop starts.
    let p = Promise::new();
    let d = p.dep();
    drop(p);
    let msg = panic_message(|| {
        rt.run(|| {
            parallel_for(0..100)
                .depends_on(d.clone())
                .for_each(|_| panic!("ran"))
        })
    });
    assert!(msg.contains("cancelled"), "{msg}");
    // Broken while the loop waits, by a foreign thread.
    let p = Promise::new();
    let d = p.dep();
    let msg = std::thread::scope(|s| {
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            drop(p);
        });
        panic_message(|| {
            rt.run(|| {
                parallel_for(0..100).depends_on(d).reduce(
                    || 0,
                    |_, i| -> usize { panic!("ran {i}") },
                    |a, b| a + b,
                )
            })
        })
    });
    assert!(msg.contains("cancelled"), "{msg}");
    // The runtime keeps working.
    assert_eq!(
        rt.run(|| parallel_for(0..4).reduce(|| 0, |a, i| a + i, |a, b| a + b)),
        6
    );
}

#[test]
fn a_dropped_loop_promise_cancels_only_the_unfulfilled_iterations_of_a_spawned_loop() {
    let _w = Watchdog::new("loops: dropped loop promise (a loop hangs)", HANG);
    let rt = runtime(4);
    let n = 1000;
    for bucket in [1, 3, 64] {
        for when in ["before", "during"] {
            let ctx = format!("bucket {bucket}, dropped {when}");
            let lp = LoopPromise::with_bucket_size(0..n, bucket);
            // Iterations fulfilled: all but every 10th.
            let fulfilled = |i: usize| i % 10 != 7;
            let counts = Arc::new(counters(n));
            let c = counts.clone();
            let h = rt.run(|| {
                parallel_for(0..n).depends_on_each(&lp).spawn(move |i| {
                    c[i].fetch_add(1, Relaxed);
                })
            });
            let producer = {
                let lp = lp.clone();
                std::thread::spawn(move || {
                    for i in (0..n).filter(|&i| fulfilled(i)) {
                        lp.fulfill(i);
                    }
                })
            };
            if when == "before" {
                producer.join().unwrap();
                drop(lp);
            } else {
                drop(lp);
                producer.join().unwrap();
            }
            let msg = panic_message(|| h.join());
            assert!(msg.contains("cancelled"), "{ctx}: {msg}");
            // An iteration runs iff every iteration of its bucket was
            // fulfilled.
            let ran = |i: usize| {
                let first = i / bucket * bucket;
                (first..(first + bucket).min(n)).all(fulfilled)
            };
            assert_counts(&counts, |i| u32::from(ran(i)), &ctx);
        }
    }
    // Dropped at once, nothing fulfilled: nothing runs, join reports it.
    let lp = LoopPromise::new(0..50);
    let h = parallel_for(0..50)
        .stride(7)
        .depends_on_each(&lp)
        .spawn(|i| panic!("{i} ran"));
    drop(lp);
    let err = h.try_join().unwrap_err();
    assert!(err.to_string().contains("cancelled"), "{err}");
}

/// The message of a spawned loop over `0..n` (stride `stride`), each
/// iteration depending on its own index of a promise of which only the
/// indices where `fulfilled` holds are fulfilled before it is dropped.
fn cancelled_loop_message(n: usize, stride: usize, fulfilled: impl Fn(usize) -> bool) -> String {
    let rt = runtime(2);
    let lp = LoopPromise::with_bucket_size(0..n, 1);
    let h = rt.run(|| {
        parallel_for(0..n)
            .stride(stride)
            .depends_on_each(&lp)
            .spawn(|_| ())
    });
    for i in (0..n).filter(|&i| fulfilled(i)) {
        lp.fulfill(i);
    }
    drop(lp);
    h.try_join().unwrap_err().to_string()
}

#[test]
fn a_cancelled_loop_names_every_cancelled_iteration() {
    let _w = Watchdog::new("loops: cancelled iterations message (a loop hangs)", HANG);
    let cancelled = |i: usize| matches!(i, 3..=5 | 9 | 12..=20);
    let msg = cancelled_loop_message(30, 1, |i| !cancelled(i));
    assert!(
        msg.contains("parallel loop iterations 3..=5, 9, 12..=20 were cancelled"),
        "{msg}"
    );
    // One iteration.
    let msg = cancelled_loop_message(30, 1, |i| i != 17);
    assert!(
        msg.contains("parallel loop iteration 17 was cancelled"),
        "{msg}"
    );
    // Strided: the indices, and the stride.
    let msg = cancelled_loop_message(50, 7, |i| i == 21);
    assert!(
        msg.contains("iterations 0..=14, 28..=49 (stride 7) were cancelled"),
        "{msg}"
    );
    // Many ranges: the first few, then a count of the rest, in one line.
    let msg = cancelled_loop_message(20_000, 1, |i| i % 2 == 0);
    assert!(
        msg.contains(
            "iterations 1, 3, 5, 7, 9, 11, 13, 15 and 9992 more iterations in 9992 ranges were cancelled"
        ),
        "{msg}"
    );
    assert!(msg.len() < 300, "{} bytes: {msg}", msg.len());
}

#[test]
fn a_spawned_loop_whose_dependency_is_fulfilled_after_its_runtime_dropped_ends() {
    let _w = Watchdog::new("loops: loop after runtime drop (a loop hangs)", HANG);
    let rt = runtime(2);
    let p = Promise::new();
    let ran = Arc::new(AtomicUsize::new(0));
    let r2 = ran.clone();
    let h = rt.run(|| {
        parallel_for(0..100).depends_on(p.dep()).spawn(move |_| {
            r2.fetch_add(1, Relaxed);
        })
    });
    drop(rt);
    p.fulfill();
    // Either it ran (in full) or it reports why not; it does not hang.
    match h.try_join() {
        Ok(()) => assert_eq!(ran.load(Relaxed), 100),
        Err(e) => {
            assert!(e.to_string().contains("cancelled"), "{e}");
            assert_eq!(ran.load(Relaxed), 0);
        }
    }
}

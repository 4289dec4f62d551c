//! Panics.

use super::*;

/// The indices whose iterations panic.
fn fails(i: usize) -> bool {
    i % 10_007 == 5
}

#[test]
fn panics_in_loops_not_starting_at_zero_lose_no_iteration() {
    // After a panic a part resumes from its count of iterations started,
    // whatever the loop counts in: indices or iteration numbers.
    let (start, end) = (7_000, 57_000);
    for threads in [1, 4] {
        let rt = runtime(threads);
        for stride in [1, 3] {
            let ctx = format!("{threads} threads, stride {stride}");
            let counts = counters(end);
            let r = catch_unwind(AssertUnwindSafe(|| {
                rt.run(|| {
                    parallel_for(start..end).stride(stride).for_each(|i| {
                        uneven_work(i, end);
                        counts[i].fetch_add(1, Relaxed);
                        if fails(i) {
                            panic!("iteration {i} failed");
                        }
                    })
                })
            }));
            assert!(r.is_err(), "{ctx}: the panic reached the caller");
            assert_counts(
                &counts,
                |i| u32::from(i >= start && (i - start) % stride == 0),
                &ctx,
            );
        }
    }
}

#[test]
fn a_panicking_body_reaches_the_caller_and_every_other_iteration_runs_once() {
    let n = 100_000;
    for threads in [1, 2, 4, 8] {
        let rt = runtime(threads);
        let counts = counters(n);
        let msg = panic_message(|| {
            rt.run(|| {
                parallel_for(0..n).for_each(|i| {
                    uneven_work(i, n);
                    counts[i].fetch_add(1, Relaxed);
                    if fails(i) {
                        panic!("iteration {i} failed");
                    }
                })
            })
        });
        let i: usize = msg
            .strip_prefix("iteration ")
            .and_then(|m| m.strip_suffix(" failed"))
            .and_then(|m| m.parse().ok())
            .unwrap_or_else(|| panic!("unexpected payload {msg:?}"));
        assert!(fails(i), "payload names {i}, which did not panic");
        assert_counts(&counts, |_| 1, &format!("{threads} threads"));
        // A non-string payload comes through as it is.
        let r = catch_unwind(AssertUnwindSafe(|| {
            rt.run(|| {
                parallel_for(0..1000).stride(3).for_each(|i| {
                    if i == 999 {
                        std::panic::panic_any(i as u32);
                    }
                })
            })
        }));
        assert_eq!(r.unwrap_err().downcast_ref::<u32>(), Some(&999));
        // From a foreign thread (global runtime) as well.
        let msg = panic_message(|| {
            parallel_for(0..100).for_each(|i| {
                if i == 50 {
                    panic!("foreign {i}");
                }
            })
        });
        assert_eq!(msg, "foreign 50");
        // The runtime still works.
        let s = rt.run(|| parallel_for(0..n).reduce(|| 0usize, |a, i| a + i, |a, b| a + b));
        assert_eq!(s, n * (n - 1) / 2);
    }
}

#[test]
fn a_panicking_inner_loop_reaches_the_outer_caller() {
    let rt = runtime(4);
    let counts = counters(NI * NJ * NK);
    let msg = panic_message(|| {
        rt.run(|| {
            parallel_for(0..NI).for_each(|i| {
                parallel_for(0..NJ).for_each(|j| {
                    parallel_for(0..NK).for_each(|k| {
                        counts[triple(i, j, k)].fetch_add(1, Relaxed);
                        if (i, j, k) == (7, 3, 9) {
                            panic!("deep");
                        }
                    })
                })
            })
        })
    });
    assert_eq!(msg, "deep");
    assert_counts(&counts, |_| 1, "nested panic");
}

#[test]
fn a_panicking_fold_reaches_the_caller_and_nothing_leaks() {
    let n = 100_000;
    for threads in [1, 2, 4] {
        let rt = runtime(threads);
        let counts = counters(n);
        let ledger = Arc::new(Ledger::default());
        let msg = panic_message(|| {
            rt.run(|| {
                parallel_for(0..n).reduce(
                    || Tracked::new(&ledger),
                    |mut t, i| {
                        uneven_work(i, n);
                        counts[i].fetch_add(1, Relaxed);
                        if fails(i) {
                            panic!("fold failed at {i}");
                        }
                        t.items.push(i);
                        t
                    },
                    |mut a, mut b| {
                        a.items.append(&mut b.items);
                        a
                    },
                )
            })
        });
        assert!(msg.starts_with("fold failed at "), "{msg}");
        assert_counts(&counts, |_| 1, &format!("{threads} threads"));
        assert_eq!(
            ledger.made.load(Relaxed),
            ledger.dropped.load(Relaxed),
            "{threads} threads: an accumulator leaked or was dropped twice"
        );
        let s = rt.run(|| parallel_for(0..10).reduce(|| 0, |a, i| a + i, |a, b| a + b));
        assert_eq!(s, 45);
    }
}

#[test]
fn a_panicking_merge_reaches_the_caller_and_nothing_leaks() {
    // Deterministic merges: on one worker, a loop with dependencies that
    // are not ready parks those buckets, which puts join nodes around them.
    let rt = runtime(1);
    let n = 100;
    let run = |merge_panics: bool| {
        let lp = LoopPromise::new(0..n);
        for i in (0..n).step_by(2) {
            lp.fulfill(i);
        }
        let counts = counters(n);
        let ledger = Arc::new(Ledger::default());
        let merges = AtomicUsize::new(0);
        let r = catch_unwind(AssertUnwindSafe(|| {
            rt.run(|| {
                parallel_for(0..n).depends_on_each(&lp).reduce(
                    || Tracked::new(&ledger),
                    |mut t, i| {
                        counts[i].fetch_add(1, Relaxed);
                        if i == n - 2 {
                            // The last even iteration releases the odd ones,
                            // all parked by now (one worker, in order).
                            for j in (1..n).step_by(2) {
                                lp.fulfill(j);
                            }
                        }
                        t.items.push(i);
                        t
                    },
                    |mut a, mut b| {
                        merges.fetch_add(1, Relaxed);
                        if merge_panics {
                            panic!("merge failed");
                        }
                        a.items.append(&mut b.items);
                        a
                    },
                )
            })
        }));
        assert_counts(&counts, |_| 1, &format!("merge_panics={merge_panics}"));
        let r = r.map(|t| std::mem::take(&mut { t }.items));
        assert_eq!(ledger.made.load(Relaxed), ledger.dropped.load(Relaxed));
        (r, merges.into_inner())
    };
    let (ok, merges) = run(false);
    assert!(merges > 0, "the parked buckets were merged");
    assert!(ok.unwrap().into_iter().eq(0..n));
    let (err, merges) = run(true);
    assert!(merges > 0);
    assert_eq!(panic_text(&*err.unwrap_err()), "merge failed");
    // On several workers merges depend on splits: run until a merge
    // panicked (up to a number of runs no healthy scheduler needs); every
    // run loses no iteration.
    let rt = runtime(4);
    let mut panicked = 0;
    let mut run = 0;
    while run < 300 && panicked == 0 {
        run += 1;
        let n = 100_000;
        let counts = counters(n);
        let ledger = Arc::new(Ledger::default());
        let r = catch_unwind(AssertUnwindSafe(|| {
            rt.run(|| {
                parallel_for(0..n).reduce(
                    || Tracked::new(&ledger),
                    |t, i| {
                        spin(20);
                        counts[i].fetch_add(1, Relaxed);
                        t
                    },
                    |_, _| panic!("merge {run} failed"),
                )
            })
        }));
        match r {
            Ok(t) => drop(t),
            Err(p) => {
                assert_eq!(panic_text(&*p), format!("merge {run} failed"));
                panicked += 1;
            }
        }
        assert_counts(&counts, |_| 1, &format!("run {run}"));
        assert_eq!(ledger.made.load(Relaxed), ledger.dropped.load(Relaxed));
    }
    assert!(panicked > 0, "no loop of {run} was split, so no merge ran");
    assert_eq!(
        rt.run(|| parallel_for(0..3).reduce(|| 1, |a, _| a * 2, |a, b| a * b)),
        8
    );
}

#[test]
fn a_panicking_identity_reaches_the_caller() {
    let rt = runtime(4);
    let msg = panic_message(|| {
        rt.run(|| {
            parallel_for(0..1000).reduce(
                || -> usize { panic!("no identity") },
                |a, i| a + i,
                |a, b| a + b,
            )
        })
    });
    assert_eq!(msg, "no identity");
    // An identity that fails only after the first part started.
    let calls = AtomicUsize::new(0);
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.run(|| {
            parallel_for(0..100_000).reduce(
                || {
                    if calls.fetch_add(1, Relaxed) > 0 {
                        panic!("second identity");
                    }
                    0usize
                },
                |a, i| {
                    spin(20);
                    a + i
                },
                |a, b| a + b,
            )
        })
    }));
    if let Err(p) = r {
        assert_eq!(panic_text(&*p), "second identity");
    }
    assert_eq!(
        rt.run(|| parallel_for(0..10).reduce(|| 0, |a, i| a + i, |a, b| a + b)),
        45
    );
}

/// Guards against a hang (`park_bucket`, src/loops/each.rs): a `depends_on_each` reduction whose
/// `identity` panics while the loop parks an unready bucket never returns.
/// `park_bucket` counts the parked part in `pending` and splits a join node
/// for it, then calls `identity()` for the rest of the current part; when
/// that panics, the parked part is never made, so `pending` never reaches
/// zero and the join node's side never arrives: the caller waits forever
/// (the iterations of the bucket are lost too). Expected: the loop ends and
/// `reduce` resumes the identity's panic, as the docs promise for "a panic
/// in any of the three closures".
#[test]
fn a_panicking_identity_while_parking_a_bucket_reaches_the_caller() {
    if !is_child() {
        return in_child_process(
            "panics::a_panicking_identity_while_parking_a_bucket_reaches_the_caller",
            HANG_LIMIT,
        );
    }
    let rt = runtime(1);
    let lp = LoopPromise::new(0..4);
    for i in [0, 2, 3] {
        lp.fulfill(i);
    }
    let calls = AtomicUsize::new(0);
    let msg = panic_message(|| {
        rt.run(|| {
            parallel_for(0..4).depends_on_each(&lp).reduce(
                || {
                    // The first part's identity works; the one made when
                    // bucket 1 is parked panics.
                    if calls.fetch_add(1, Relaxed) > 0 {
                        panic!("identity failed");
                    }
                    Vec::new()
                },
                |mut v, i| {
                    if i == 3 {
                        lp.fulfill(1);
                    }
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
    assert_eq!(msg, "identity failed");
}

#[test]
fn a_spawned_loop_that_panics_reports_it_through_its_handle() {
    let rt = runtime(4);
    let n = 50_000;
    for rep in 0..3 {
        let counts = Arc::new(counters(n));
        let make = |counts: Arc<Vec<AtomicU32>>| {
            move |i: usize| {
                uneven_work(i, n);
                counts[i].fetch_add(1, Relaxed);
                if fails(i) {
                    panic!("spawned iteration {i} failed");
                }
            }
        };
        // join() resumes the panic.
        let h = rt.run(|| parallel_for(0..n).spawn(make(counts.clone())));
        let msg = panic_message(|| h.join());
        assert!(msg.starts_with("spawned iteration "), "{msg}");
        assert_counts(&counts, |_| 1, &format!("rep {rep}, join"));
        // try_join() gives the panic as an error, payload included.
        let h = parallel_for(0..n).spawn(make(counts.clone()));
        let err = h.try_join().unwrap_err();
        assert!(err.is_panic() && !err.is_cancelled(), "{err}");
        assert!(err.to_string().contains("spawned iteration"), "{err}");
        let payload = err.try_into_panic().ok().unwrap();
        assert!(panic_text(&*payload).ends_with(" failed"));
        assert_counts(&counts, |_| 2, &format!("rep {rep}, try_join"));
    }
    // The runtime keeps working.
    let c = Arc::new(counters(n));
    let c2 = c.clone();
    rt.run(|| {
        parallel_for(0..n).spawn(move |i| {
            c2[i].fetch_add(1, Relaxed);
        })
    })
    .join();
    assert_counts(&c, |_| 1, "after the panics");
}

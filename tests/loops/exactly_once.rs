//! Every index exactly once; splits happen; Reductions.

use super::*;

#[test]
fn a_million_iterations_each_run_exactly_once() {
    let n = 1_000_000;
    let mut splits = 0;
    for threads in [2, 4, 8] {
        let rt = runtime(threads);
        let counts = counters(n);
        rt.run(|| {
            parallel_for(0..n).for_each(|i| {
                uneven_work(i, n);
                counts[i].fetch_add(1, Relaxed);
            })
        });
        assert_counts(&counts, |_| 1, &format!("for_each, {threads} threads"));
        // The same through a reduction: the sum of the indices and the count.
        let (sum, count) = rt.run(|| {
            parallel_for(0..n).reduce(
                || (0u64, 0usize),
                |(s, c), i| {
                    uneven_work(i, n);
                    counts[i].fetch_add(1, Relaxed);
                    (s + i as u64, c + 1)
                },
                |(s1, c1), (s2, c2)| (s1 + s2, c1 + c2),
            )
        });
        assert_eq!(count, n, "{threads} threads");
        assert_eq!(sum, (n as u64) * (n as u64 - 1) / 2, "{threads} threads");
        assert_counts(&counts, |_| 2, &format!("reduce, {threads} threads"));
        splits += rt.stats().total().loop_splits;
    }
    // Six loops of a million iterations with idle workers around: some were
    // split (for thieves, or for sleeping workers).
    assert!(
        splits > 0,
        "six loops of a million iterations were never split"
    );
}

#[test]
fn loops_with_work_are_split_and_spread_over_workers() {
    // Whether a given loop is split depends on when the idle workers get a
    // core, so this runs loops until one was split and one ran on several
    // threads, up to a number of runs no healthy scheduler needs.
    let rt = runtime(4);
    let n = 100_000;
    let (mut split, mut spread) = (false, false);
    let mut runs = 0;
    while runs < 300 && !(split && spread) {
        runs += 1;
        let before = rt.stats().total().loop_splits;
        let counts = counters(n);
        let threads = Mutex::new(HashSet::new());
        rt.run(|| {
            parallel_for(0..n).for_each(|i| {
                spin(20);
                if i % 1000 == 0 {
                    threads.lock().unwrap().insert(std::thread::current().id());
                }
                counts[i].fetch_add(1, Relaxed);
            })
        });
        assert_counts(&counts, |_| 1, &format!("run {runs}"));
        split |= rt.stats().total().loop_splits > before;
        spread |= threads.into_inner().unwrap().len() > 1;
    }
    assert!(split, "{runs} loops of 100k iterations were never split");
    assert!(
        spread,
        "{runs} loops of 100k iterations all ran on one thread"
    );
}

#[test]
fn spawned_loop_runs_every_index_once_even_when_detached() {
    let n = 200_000;
    for threads in [2, 8] {
        let rt = runtime(threads);
        let counts = Arc::new(counters(n));
        let c = counts.clone();
        let h = rt.run(|| {
            parallel_for(0..n).spawn(move |i| {
                uneven_work(i, n);
                c[i].fetch_add(1, Relaxed);
            })
        });
        h.join();
        assert_counts(&counts, |_| 1, "joined");
        // Detached: dropping the handle does not stop the loop; the runtime
        // goes quiescent only once every part has run.
        let c = counts.clone();
        drop(parallel_for(0..n).stride(2).spawn(move |i| {
            c[i].fetch_add(1, Relaxed);
        }));
        drop(rt.spawn(move || {}));
        // From inside the runtime, so the loop belongs to `rt`.
        let c = counts.clone();
        drop(rt.run(move || {
            parallel_for(1..n).stride(2).spawn(move |i| {
                c[i].fetch_add(1, Relaxed);
            })
        }));
        rt.sync_root();
        // The even half ran on the global runtime: wait for it too.
        selvedge::global_runtime().sync_root();
        assert_counts(&counts, |_| 2, "detached");
    }
}

// ---------------------------------------------------------------------
// Reductions
// ---------------------------------------------------------------------

#[test]
fn sums_equal_the_serial_sums() {
    let n = 300_000;
    let data: Vec<u64> = (0..n as u64)
        .map(|x| x.wrapping_mul(0x9E37_79B9) % 1013)
        .collect();
    for threads in [2, 4, 8] {
        let rt = runtime(threads);
        for stride in [1, 2, 3, 1000, n + 1] {
            let want: u64 = data.iter().step_by(stride).sum();
            let got = rt.run(|| {
                parallel_for(0..n).stride(stride).reduce(
                    || 0u64,
                    |acc, i| {
                        uneven_work(i, n);
                        acc + data[i]
                    },
                    |a, b| a + b,
                )
            });
            assert_eq!(got, want, "{threads} threads, stride {stride}");
        }
    }
}

#[test]
fn non_commutative_merges_keep_index_order() {
    for threads in [4, 8] {
        let rt = runtime(threads);
        for rep in 0..30 {
            let stride = [1, 2, 3, 7, 13][rep % 5];
            let n = 20_000 + rep * 997;
            let range = (rep % 4)..n;
            let want = serial(range.clone(), stride);
            let got = rt.run(|| {
                parallel_for(range.clone()).stride(stride).reduce(
                    Vec::new,
                    |mut v, i| {
                        uneven_work(i, n);
                        v.push(i);
                        v
                    },
                    |mut a, b| {
                        a.extend(b);
                        a
                    },
                )
            });
            assert_eq!(
                got.len(),
                want.len(),
                "{threads} threads, rep {rep}: lengths"
            );
            assert!(got == want, "{threads} threads, rep {rep}: out of order");
            // A String built by concatenation: `merge(a, b)` is not `merge(b, a)`.
            let words: Vec<String> = (0..500).map(|i| format!("<{i}>")).collect();
            let s = rt.run(|| {
                parallel_for(0..words.len()).stride(stride).reduce(
                    String::new,
                    |mut s, i| {
                        spin(200);
                        s.push_str(&words[i]);
                        s
                    },
                    |a, b| a + &b,
                )
            });
            let serial_s: String = words.iter().step_by(stride).map(String::as_str).collect();
            assert_eq!(s, serial_s, "{threads} threads, rep {rep}");
        }
    }
}

#[test]
fn merges_do_happen_and_see_left_before_right() {
    // Each part's accumulator is its range of indices; a merge checks that
    // its left side ends just before its right side starts.
    let rt = runtime(4);
    let merges = AtomicUsize::new(0);
    let bad = AtomicUsize::new(0);
    // Until a merge happened (splits depend on when idle workers get a
    // core), up to a number of runs no healthy scheduler needs.
    let mut runs = 0;
    while runs < 300 && merges.load(Relaxed) == 0 {
        runs += 1;
        let n = 100_000;
        let r = rt.run(|| {
            parallel_for(0..n).stride(3).reduce(
                || None::<(usize, usize)>,
                |acc, i| {
                    spin(20);
                    match acc {
                        None => Some((i, i)),
                        Some((a, b)) => {
                            if b + 3 != i {
                                bad.fetch_add(1, Relaxed);
                            }
                            Some((a, i))
                        }
                    }
                },
                |l, r| match (l, r) {
                    (None, x) | (x, None) => x,
                    (Some((a, b)), Some((c, d))) => {
                        merges.fetch_add(1, Relaxed);
                        if b + 3 != c {
                            bad.fetch_add(1, Relaxed);
                        }
                        Some((a, d))
                    }
                },
            )
        });
        assert_eq!(r, Some((0, 99_999)));
    }
    assert_eq!(
        bad.load(Relaxed),
        0,
        "a fold or merge saw indices out of order"
    );
    assert!(merges.load(Relaxed) > 0, "no merge in {runs} loops");
}

#[test]
fn non_copy_accumulators_are_dropped_exactly_once() {
    for threads in [1, 2, 8] {
        let rt = runtime(threads);
        let ledger = Arc::new(Ledger::default());
        for rep in 0..10 {
            let n = 50_000 + rep;
            let out = rt.run(|| {
                parallel_for(0..n).reduce(
                    || Tracked::new(&ledger),
                    |mut t, i| {
                        uneven_work(i, n);
                        t.items.push(i);
                        t
                    },
                    |mut a, mut b| {
                        a.items.append(&mut b.items);
                        a
                    },
                )
            });
            assert!(out.items.iter().copied().eq(0..n), "{threads} threads");
            drop(out);
            let (made, dropped) = (ledger.made.load(Relaxed), ledger.dropped.load(Relaxed));
            assert_eq!(
                made, dropped,
                "{threads} threads, rep {rep}: leaked or double-dropped"
            );
        }
        // With a dependency per iteration: every parked bucket adds parts.
        let lp = LoopPromise::with_bucket_size(0..5000, 7);
        let written: Vec<AtomicUsize> = (0..5000).map(|_| AtomicUsize::new(0)).collect();
        let out = std::thread::scope(|s| {
            spawn_fulfillers(s, &lp, &written, threads as u64, 3);
            rt.run(|| {
                parallel_for(0..5000).depends_on_each(&lp).reduce(
                    || Tracked::new(&ledger),
                    |mut t, i| {
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
        assert!(out.items.iter().copied().eq(0..5000));
        drop(out);
        assert_eq!(ledger.made.load(Relaxed), ledger.dropped.load(Relaxed));
    }
}

//! depends_on_each with foreign fulfillers.

use super::*;

/// Bucket sizes to try, for a promise of `len` iterations.
fn buckets(len: usize) -> [usize; 6] {
    [1, 2, 7, 64, len - 1, len + 10]
}

#[test]
fn depends_on_each_for_each_runs_each_iteration_once_after_its_promise() {
    let _w = Watchdog::new("loops: depends_on_each for_each (a loop hangs)", HANG);
    let rt = runtime(4);
    let len = 3001;
    let base = 100;
    let mut seed = 1;
    for bucket in buckets(len) {
        for (range, stride) in [
            (base..base + len, 1),
            (base..base + len, 3),
            (base + 5..base + len - 7, 4),
        ] {
            for in_scope in [false, true] {
                seed += 1;
                let ctx =
                    format!("bucket {bucket}, {range:?} stride {stride}, in_scope {in_scope}");
                let lp = LoopPromise::with_bucket_size(base..base + len, bucket);
                let written: Vec<AtomicUsize> = (0..len).map(|_| AtomicUsize::new(0)).collect();
                let counts = counters(base + len);
                let early = AtomicUsize::new(0);
                let body = |i: usize| {
                    if !bucket_written(&lp, &written, i) {
                        early.fetch_add(1, Relaxed);
                    }
                    uneven_work(i - base, len);
                    counts[i].fetch_add(1, Relaxed);
                };
                std::thread::scope(|s| {
                    spawn_fulfillers(s, &lp, &written, seed, 4);
                    rt.run(|| {
                        let lp_loop = parallel_for(range.clone())
                            .stride(stride)
                            .depends_on_each(&lp);
                        if in_scope {
                            scope(|sc| sc.spawn(|_| lp_loop.for_each(body)));
                        } else {
                            lp_loop.for_each(body);
                        }
                    });
                });
                assert_eq!(early.load(Relaxed), 0, "{ctx}: ran before its promise");
                let want = serial(range.clone(), stride);
                assert_counts(&counts, |i| u32::from(want.contains(&i)), &ctx);
            }
        }
    }
}

/// What a spawned `depends_on_each` loop shares with its fulfillers.
struct Shared {
    lp: LoopPromise,
    written: Vec<AtomicUsize>,
    counts: Vec<AtomicU32>,
    early: AtomicUsize,
}

#[test]
fn depends_on_each_spawn_runs_each_iteration_once_after_its_promise() {
    let _w = Watchdog::new("loops: depends_on_each spawn (a loop hangs)", HANG);
    let rt = runtime(4);
    let len = 2500;
    let mut seed = 100;
    for bucket in buckets(len) {
        for stride in [1, 3] {
            for from_worker in [false, true] {
                seed += 1;
                let ctx = format!("bucket {bucket}, stride {stride}, from_worker {from_worker}");
                let sh = Arc::new(Shared {
                    lp: LoopPromise::with_bucket_size(0..len, bucket),
                    written: (0..len).map(|_| AtomicUsize::new(0)).collect(),
                    counts: counters(len),
                    early: AtomicUsize::new(0),
                });
                let start = || {
                    let s2 = sh.clone();
                    parallel_for(0..len)
                        .stride(stride)
                        .depends_on_each(&sh.lp)
                        .spawn(move |i| {
                            if !bucket_written(&s2.lp, &s2.written, i) {
                                s2.early.fetch_add(1, Relaxed);
                            }
                            uneven_work(i, len);
                            s2.counts[i].fetch_add(1, Relaxed);
                        })
                };
                let h = if from_worker { rt.run(start) } else { start() };
                // Foreign fulfillers, in random order.
                let mut order: Vec<usize> = (0..len).collect();
                order.shuffle(&mut SmallRng::seed_from_u64(seed));
                let threads: Vec<_> = order
                    .chunks(len.div_ceil(3))
                    .map(|part| {
                        let (part, sh) = (part.to_vec(), sh.clone());
                        std::thread::spawn(move || {
                            for i in part {
                                sh.written[i].store(stamp(i), Relaxed);
                                sh.lp.fulfill(i);
                            }
                        })
                    })
                    .collect();
                h.join();
                threads.into_iter().for_each(|t| t.join().unwrap());
                assert_eq!(sh.early.load(Relaxed), 0, "{ctx}: ran before its promise");
                let want = serial(0..len, stride);
                assert_counts(&sh.counts, |i| u32::from(want.contains(&i)), &ctx);
            }
        }
    }
}

#[test]
fn depends_on_each_reduce_concatenates_in_index_order() {
    let _w = Watchdog::new("loops: depends_on_each reduce (a loop hangs)", HANG);
    let len = 2000;
    let mut seed = 1000;
    for threads in [2, 4, 8] {
        let rt = runtime(threads);
        for bucket in [1, 3, 64, 333] {
            for stride in [1, 2, 7] {
                seed += 1;
                let ctx = format!("{threads} threads, bucket {bucket}, stride {stride}");
                let lp = LoopPromise::with_bucket_size(0..len, bucket);
                let written: Vec<AtomicUsize> = (0..len).map(|_| AtomicUsize::new(0)).collect();
                let early = AtomicUsize::new(0);
                let got = std::thread::scope(|s| {
                    spawn_fulfillers(s, &lp, &written, seed, 3);
                    rt.run(|| {
                        parallel_for(1..len)
                            .stride(stride)
                            .depends_on_each(&lp)
                            .reduce(
                                Vec::new,
                                |mut v, i| {
                                    if !bucket_written(&lp, &written, i) {
                                        early.fetch_add(1, Relaxed);
                                    }
                                    uneven_work(i, len);
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
                assert_eq!(early.load(Relaxed), 0, "{ctx}: ran before its promise");
                assert_eq!(got, serial(1..len, stride), "{ctx}");
            }
        }
    }
}

#[test]
fn depends_on_each_with_everything_already_fulfilled_runs_like_a_plain_loop() {
    let rt = runtime(4);
    let n = 100_000;
    for bucket in [1, 16, 1000] {
        let lp = LoopPromise::with_bucket_size(0..n, bucket);
        for i in 0..n {
            lp.fulfill(i);
        }
        let counts = counters(n);
        rt.run(|| {
            parallel_for(0..n).depends_on_each(&lp).for_each(|i| {
                uneven_work(i, n);
                counts[i].fetch_add(1, Relaxed);
            })
        });
        assert_counts(&counts, |_| 1, &format!("bucket {bucket}"));
    }
}

/// A reduction's `identity` runs when a part starts and when an
/// unfulfilled bucket is parked. If it runs a loop of its own, that loop
/// answers thieves: they must get the inner loop's iterations, not the
/// starting part's. Were the part split meanwhile, the iterations given
/// away could be parked as well and run twice, and every part split off
/// would start with the same long `identity` and be split in turn, down
/// to single iterations: this loop once called `identity` up to 936 times
/// on 4 workers (a minute in all), where it now calls it a few times.
#[test]
fn iterations_given_away_while_identity_runs_a_loop_are_not_parked_too() {
    let _w = Watchdog::new("loops: identity running a loop (a loop hangs)", HANG);
    let n = 4000;
    for threads in [2, 4] {
        let rt = runtime(threads);
        for rep in 0..5 {
            let ctx = format!("{threads} threads, rep {rep}");
            // One bucket: every part of the loop parks on it.
            let lp = LoopPromise::with_bucket_size(0..n, n);
            let counts = counters(n);
            let identities = AtomicUsize::new(0);
            let got = std::thread::scope(|s| {
                s.spawn(|| {
                    while identities.load(Relaxed) == 0 {
                        std::thread::yield_now();
                    }
                    std::thread::sleep(Duration::from_millis(20));
                    for i in 0..n {
                        lp.fulfill(i);
                    }
                });
                rt.run(|| {
                    parallel_for(0..n).depends_on_each(&lp).reduce(
                        || {
                            identities.fetch_add(1, Relaxed);
                            // Long enough for idle workers to ask.
                            parallel_for(0..200).for_each(|_| spin(20_000));
                            Vec::new()
                        },
                        |mut v, i| {
                            counts[i].fetch_add(1, Relaxed);
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
            assert_counts(&counts, |_| 1, &ctx);
            assert!(got.iter().copied().eq(0..n), "{ctx}");
            // Seen: at most 17 on 4 workers; up to 936 when starting
            // parts could be split.
            let calls = identities.load(Relaxed);
            assert!(
                calls <= 16 * threads,
                "{ctx}: identity ran {calls} times: starting parts were split"
            );
        }
    }
}

#[test]
fn dropping_another_handle_does_not_cancel_a_borrowed_loop_promise() {
    // A blocking loop borrows the promise, and that handle lives: dropping
    // every other handle does not break it, so the loop still gets every
    // iteration once the borrowed handle is fulfilled.
    let _w = Watchdog::new("loops: borrowed loop promise (a loop hangs)", HANG);
    let rt = runtime(2);
    let n = 500;
    let lp = LoopPromise::with_bucket_size(0..n, 4);
    let other = lp.clone();
    let counts = counters(n);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in (0..n).step_by(2) {
                other.fulfill(i);
            }
            drop(other);
            for i in (1..n).step_by(2) {
                lp.fulfill(i);
            }
        });
        rt.run(|| {
            parallel_for(0..n).depends_on_each(&lp).for_each(|i| {
                counts[i].fetch_add(1, Relaxed);
            })
        });
    });
    assert_counts(&counts, |_| 1, "borrowed promise");
}

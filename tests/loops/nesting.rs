//! Nesting, scopes, tasks, foreign threads.

use super::*;

#[test]
fn loops_nested_three_deep_run_every_triple_once() {
    for threads in [2, 4, 8] {
        let rt = runtime(threads);
        let counts = counters(NI * NJ * NK);
        // for_each at every level.
        rt.run(|| {
            parallel_for(0..NI).for_each(|i| {
                parallel_for(0..NJ).for_each(|j| {
                    parallel_for(0..NK).for_each(|k| {
                        uneven_work(k, NK);
                        counts[triple(i, j, k)].fetch_add(1, Relaxed);
                    })
                })
            })
        });
        assert_counts(&counts, |_| 1, &format!("for_each^3, {threads} threads"));
        // reduce at every level: the triples in lexicographic order.
        let got = rt.run(|| {
            parallel_for(0..NI).reduce(
                Vec::new,
                |mut v, i| {
                    v.extend(parallel_for(0..NJ).reduce(
                        Vec::new,
                        |mut v, j| {
                            v.extend(parallel_for(0..NK).reduce(
                                Vec::new,
                                |mut v, k| {
                                    uneven_work(k, NK);
                                    counts[triple(i, j, k)].fetch_add(1, Relaxed);
                                    v.push((i, j, k));
                                    v
                                },
                                |mut a, b| {
                                    a.extend(b);
                                    a
                                },
                            ));
                            v
                        },
                        |mut a, b| {
                            a.extend(b);
                            a
                        },
                    ));
                    v
                },
                |mut a, b| {
                    a.extend(b);
                    a
                },
            )
        });
        let want: Vec<_> = (0..NI)
            .flat_map(|i| (0..NJ).flat_map(move |j| (0..NK).map(move |k| (i, j, k))))
            .collect();
        assert!(
            got == want,
            "reduce^3, {threads} threads: wrong triples or order"
        );
        assert_counts(&counts, |_| 2, &format!("reduce^3, {threads} threads"));
        // Mixed, with strides: for_each over reduce over spawned loops.
        let shared = Arc::new(counters(NI * NJ * NK));
        let sums = rt.run(|| {
            let sums: Vec<AtomicUsize> = (0..NI).map(|_| AtomicUsize::new(0)).collect();
            parallel_for(0..NI).stride(2).for_each(|i| {
                let s = parallel_for(1..NJ).stride(3).reduce(
                    || 0,
                    |acc, j| {
                        let c = shared.clone();
                        parallel_for(0..NK)
                            .stride(5)
                            .spawn(move |k| {
                                c[triple(i, j, k)].fetch_add(1, Relaxed);
                            })
                            .join();
                        acc + j
                    },
                    |a, b| a + b,
                );
                sums[i].store(s, Relaxed);
            });
            sums
        });
        let want_sum: usize = (1..NJ).step_by(3).sum();
        for (i, s) in sums.iter().enumerate() {
            let want = if i % 2 == 0 { want_sum } else { 0 };
            assert_eq!(s.load(Relaxed), want, "mixed: row {i}");
        }
        assert_counts(
            &shared,
            |t| {
                let (i, j, k) = (t / (NJ * NK), t / NK % NJ, t % NK);
                u32::from(i % 2 == 0 && j % 3 == 1 && k % 5 == 0)
            },
            &format!("mixed, {threads} threads"),
        );
    }
}

#[test]
fn loops_inside_scopes_and_spawned_tasks() {
    let rt = runtime(4);
    let n = 20_000;
    let counts = counters(8 * n);
    rt.run(|| {
        scope(|s| {
            for part in 0..4 {
                let counts = &counts;
                s.spawn(move |_| {
                    parallel_for(part * n..(part + 1) * n).for_each(|i| {
                        uneven_work(i, 8 * n);
                        counts[i].fetch_add(1, Relaxed);
                    })
                });
            }
            // The scope's own body runs a loop too, with nested scopes.
            parallel_for(4..8).for_each(|part| {
                scope(|s| {
                    s.spawn(|_| {
                        parallel_for(part * n..(part + 1) * n).for_each(|i| {
                            counts[i].fetch_add(1, Relaxed);
                        })
                    });
                })
            });
        })
    });
    assert_counts(&counts, |_| 1, "in scopes");
    // Loops in spawned ('static) tasks, joined, with reductions.
    let data: Arc<Vec<u64>> = Arc::new((0..n as u64).collect());
    let handles: Vec<JoinHandle<u64>> = rt.run(|| {
        (1..=6)
            .map(|stride| {
                let data = data.clone();
                spawn(move || {
                    parallel_for(0..data.len()).stride(stride).reduce(
                        || 0,
                        |a, i| a + data[i],
                        |a, b| a + b,
                    )
                })
            })
            .collect()
    });
    for (s, h) in handles.into_iter().enumerate() {
        let want: u64 = data.iter().step_by(s + 1).sum();
        assert_eq!(h.join(), want, "stride {}", s + 1);
    }
    // A task that spawns a loop and returns its handle un-joined.
    let c = Arc::new(counters(n));
    let c2 = c.clone();
    let h = rt.run(|| {
        spawn(move || {
            parallel_for(0..n).spawn(move |i| {
                c2[i].fetch_add(1, Relaxed);
            })
        })
        .join()
    });
    h.join();
    assert_counts(&c, |_| 1, "spawned from a task");
}

#[test]
fn loops_from_a_foreign_thread_use_the_global_runtime() {
    let caller = std::thread::current().id();
    let global_threads = global_runtime().num_threads();
    let n = 50_000;
    let counts = counters(n);
    let wrong = AtomicUsize::new(0);
    // From this (non-worker) thread: the iterations run on the global
    // runtime's workers, never on the calling thread.
    parallel_for(0..n).for_each(|i| {
        if std::thread::current().id() == caller
            || selvedge::current_num_threads() != global_threads
        {
            wrong.fetch_add(1, Relaxed);
        }
        counts[i].fetch_add(1, Relaxed);
    });
    assert_eq!(wrong.load(Relaxed), 0);
    assert_counts(&counts, |_| 1, "foreign for_each");
    let sum = parallel_for(0..n)
        .stride(4)
        .reduce(|| 0, |a, i| a + i, |a, b| a + b);
    assert_eq!(sum, (0..n).step_by(4).sum::<usize>());
    let mut v = vec![0usize; n];
    par_iter_mut(&mut v).for_each(|i, x| *x = i * 2);
    assert!(v.iter().enumerate().all(|(i, &x)| x == i * 2));
    // From another foreign thread at the same time as this one.
    let t = std::thread::spawn(move || {
        parallel_for(0..n).reduce(|| 0u64, |a, i| a + i as u64, |a, b| a + b)
    });
    let here = parallel_for(0..n).reduce(|| 0u64, |a, i| a + i as u64, |a, b| a + b);
    assert_eq!(t.join().unwrap(), here);
    // Inside `rt.run`: on that runtime's workers (3 of them), not the
    // global runtime's.
    let rt = runtime(3);
    let on_rt = AtomicUsize::new(0);
    rt.run(|| {
        parallel_for(0..n).for_each(|i| {
            if selvedge::current_num_threads() == 3 && std::thread::current().id() != caller {
                on_rt.fetch_add(1, Relaxed);
            }
            counts[i].fetch_add(1, Relaxed);
        })
    });
    assert_eq!(on_rt.load(Relaxed), n);
    assert_counts(&counts, |_| 2, "in rt.run");
}

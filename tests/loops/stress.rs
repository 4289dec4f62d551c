//! Stress.

use super::*;

#[test]
fn stress_many_loops_on_eight_workers() {
    let _w = Watchdog::new(
        "loops: loop stress (a loop hangs)",
        Duration::from_secs(300),
    );
    let rt = runtime(8);
    let n = 500_000;
    let rounds = 12;
    let counts = counters(n);
    let mut total_iterations = 0usize;
    let mut strides = Vec::new();
    for round in 0..rounds {
        // Flat for_each, strided.
        let stride = 1 + round % 3;
        strides.push(stride);
        rt.run(|| {
            parallel_for(0..n).stride(stride).for_each(|i| {
                uneven_work(i, n);
                counts[i].fetch_add(1, Relaxed);
            })
        });
        total_iterations += n.div_ceil(stride);
        // Nested reductions, three deep.
        let s = rt.run(|| {
            parallel_for(0..30).reduce(
                || 0u64,
                |acc, i| {
                    acc + parallel_for(0..40).reduce(
                        || 0u64,
                        |acc, j| {
                            acc + parallel_for(0..100).stride(1 + i % 2).reduce(
                                || 0u64,
                                |acc, k| acc + (i * j + k) as u64,
                                |a, b| a + b,
                            )
                        },
                        |a, b| a + b,
                    )
                },
                |a, b| a + b,
            )
        });
        let want: u64 = (0..30)
            .flat_map(|i| {
                (0..40)
                    .flat_map(move |j| (0..100).step_by(1 + i % 2).map(move |k| (i * j + k) as u64))
            })
            .sum();
        assert_eq!(s, want, "round {round}");
        total_iterations += 30 * 40 * 75;
        // Nested for_each over disjoint index blocks of the counters.
        rt.run(|| {
            parallel_for(0..n / 1000).for_each(|i| {
                parallel_for(0..1000).for_each(|k| {
                    counts[i * 1000 + k].fetch_add(1, Relaxed);
                })
            })
        });
        total_iterations += n;
        // A pipeline of spawned loops, consumer first, and a reduce over
        // the last stage from inside a scope. Every other round the
        // consumer is spawned from this thread, so it runs on the global
        // runtime: a pipeline across two runtimes.
        let m = 100_000;
        let bucket = [1, 16, 100][round % 3];
        let stage1 = Arc::new(LoopPromise::with_bucket_size(0..m, bucket));
        let stage2 = Arc::new(LoopPromise::with_bucket_size(0..m, bucket));
        let vals: Arc<Vec<AtomicUsize>> = Arc::new((0..m).map(|_| AtomicUsize::new(0)).collect());
        let consumer = {
            let (vals, st2) = (vals.clone(), stage2.clone());
            let start = || {
                parallel_for(0..m).depends_on_each(&stage1).spawn(move |i| {
                    vals[i].fetch_add(1, Relaxed);
                    st2.fulfill(i);
                })
            };
            if round % 2 == 0 {
                rt.run(start)
            } else {
                start()
            }
        };
        let got = rt.run(|| {
            scope(|s| {
                s.spawn(|_| {
                    parallel_for(0..m).for_each(|i| {
                        vals[i].fetch_add(i, Relaxed);
                        stage1.fulfill(i);
                    })
                });
                parallel_for(0..m).depends_on_each(&stage2).reduce(
                    || 0usize,
                    |a, i| a + vals[i].load(Relaxed),
                    |a, b| a + b,
                )
            })
        });
        consumer.join();
        assert_eq!(got, m * (m - 1) / 2 + m, "round {round}: pipeline");
        total_iterations += 3 * m;
    }
    // One strided pass and one nested pass per round.
    assert_counts(
        &counts,
        |i| (strides.iter().filter(|&&s| i % s == 0).count() + rounds) as u32,
        "stress",
    );
    assert!(total_iterations > 10_000_000, "{total_iterations}");
    assert!(rt.stats().total().loop_splits > 0);
}

/// An empty loop with a dependency completes only after the dependency:
/// a spawned one's handle stays unfinished until the promise is fulfilled,
/// a broken one reports the cancellation, and a blocking one returns once
/// another thread fulfills it.
#[test]
fn an_empty_loop_still_waits_for_its_dependencies() {
    let rt = runtime(2);
    let ready = Promise::new();
    let h = rt.run(|| {
        parallel_for(5..5)
            .depends_on(ready.dep())
            .spawn(|_| unreachable!())
    });
    std::thread::sleep(Duration::from_millis(20));
    assert!(!h.is_finished(), "an empty loop ran before its dependency");
    ready.fulfill();
    h.join();

    let broken = Promise::new();
    let h = rt.run(|| {
        parallel_for(0..0)
            .depends_on(broken.dep())
            .spawn(|_| unreachable!())
    });
    drop(broken);
    let err = h
        .try_join()
        .expect_err("a broken dependency must be reported");
    let message = err
        .try_into_panic()
        .ok()
        .and_then(|p| p.downcast::<String>().ok())
        .expect("a message");
    assert!(message.contains("cancelled"), "{message}");

    let later = Promise::new();
    let fulfiller = {
        let later = later.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            later.fulfill();
        })
    };
    let (high, low) = (3, 1);
    let sum = rt.run(|| {
        parallel_for(high..low)
            .depends_on(later.dep())
            .reduce(|| 7, |a, i| a + i, |a, b| a + b)
    });
    assert_eq!(sum, 7);
    assert!(
        later.is_fulfilled(),
        "the blocking loop returned before its dependency"
    );
    fulfiller.join().unwrap();
}

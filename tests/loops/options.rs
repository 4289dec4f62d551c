//! Builder options; Bad input.

use super::*;

#[test]
#[allow(clippy::reversed_empty_ranges)] // reversed on purpose
fn len_and_is_empty_match_a_serial_step_by() {
    let cases: &[(Range<usize>, usize)] = &[
        (0..0, 1),
        (3..3, 5),
        (5..2, 1),
        (5..2, 3),
        (0..1, 1),
        (0..10, 1),
        (0..10, 3),
        (0..10, 4),
        (0..10, 5),
        (0..10, 10),
        (0..10, 11),
        (0..10, 100),
        (7..8, 1000),
        (1..10, 3),
        (2..1_000_003, 7),
        (usize::MAX - 10..usize::MAX, 7),
    ];
    for (range, stride) in cases.iter().cloned() {
        let want = range.clone().step_by(stride).count();
        let lp = parallel_for(range.clone()).stride(stride);
        assert_eq!(lp.len(), want, "{range:?} stride {stride}");
        assert_eq!(lp.is_empty(), want == 0, "{range:?} stride {stride}");
    }
    assert_eq!(parallel_for(0..10).len(), 10);
    assert!(!parallel_for(0..1).is_empty());
    assert_eq!(parallel_for(0..usize::MAX).stride(usize::MAX).len(), 1);
    assert_eq!(parallel_for(0..usize::MAX).len(), usize::MAX);
    // The builder methods keep the length: dependencies do not change it.
    let p = Promise::new();
    assert_eq!(parallel_for(0..9).stride(2).depends_on(p.dep()).len(), 5);
    let lp = LoopPromise::new(0..9);
    assert_eq!(parallel_for(1..9).stride(2).depends_on_each(&lp).len(), 4);
    let dbg = format!("{:?}", parallel_for(0..9).stride(2).depends_on(p.dep()));
    assert!(dbg.contains("stride: 2") && dbg.contains("0..9"), "{dbg}");
}

#[test]
fn strided_loops_visit_exactly_the_stepped_indices() {
    let rt = runtime(4);
    let n = 1000;
    let counts = counters(n);
    let cases: &[(Range<usize>, usize)] = &[
        (0..n, 1),
        (0..n, 2),
        (1..n, 3),     // 999 iterations: not a multiple of the stride
        (5..n - 1, 7), // neither end on the grid
        (0..n, 999),
        (0..n, 1000),
        (0..n, 5000), // larger than the range: only the start
        (n - 1..n, 3),
        (17..18, 1),
        (300..700, 64),
    ];
    for (range, stride) in cases.iter().cloned() {
        let want = serial(range.clone(), stride);
        let ctx = format!("{range:?} stride {stride}");
        // for_each
        for c in &counts {
            c.store(0, Relaxed);
        }
        rt.run(|| {
            parallel_for(range.clone()).stride(stride).for_each(|i| {
                uneven_work(i, n);
                counts[i].fetch_add(1, Relaxed);
            })
        });
        assert_counts(&counts, |i| u32::from(want.contains(&i)), &ctx);
        // reduce, concatenating: the indices, in order
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
        assert_eq!(got, want, "{ctx}");
        // spawn, from a worker and from this (foreign) thread
        let shared = Arc::new(counters(n));
        let on_worker = {
            let shared = shared.clone();
            rt.run(|| {
                parallel_for(range.clone()).stride(stride).spawn(move |i| {
                    shared[i].fetch_add(1, Relaxed);
                })
            })
        };
        on_worker.join();
        assert_counts(&shared, |i| u32::from(want.contains(&i)), &ctx);
        let from_here = {
            let shared = shared.clone();
            parallel_for(range.clone()).stride(stride).spawn(move |i| {
                shared[i].fetch_add(1, Relaxed);
            })
        };
        from_here.join();
        assert_counts(&shared, |i| 2 * u32::from(want.contains(&i)), &ctx);
    }
}

#[test]
fn empty_and_reversed_ranges_run_nothing() {
    let rt = runtime(2);
    fn never_t<T>(i: usize) -> T {
        panic!("iteration {i} of an empty loop ran")
    }
    let never = never_t::<()>;
    #[allow(clippy::reversed_empty_ranges)]
    let ranges = [0..0, 3..3, 5..2, usize::MAX..0, 10..9];
    for range in ranges {
        for stride in [1, 2, 100] {
            let ctx = format!("{range:?} stride {stride}");
            // On a worker and from a foreign thread.
            rt.run(|| parallel_for(range.clone()).stride(stride).for_each(never));
            parallel_for(range.clone()).stride(stride).for_each(never);
            let r = rt.run(|| {
                parallel_for(range.clone()).stride(stride).reduce(
                    || 42u64,
                    |_, i| never_t(i),
                    |_, _| panic!("merge ran"),
                )
            });
            assert_eq!(r, 42, "{ctx}: reduce of an empty loop returns the identity");
            let r = parallel_for(range.clone()).stride(stride).reduce(
                || String::from("identity"),
                |_, i| never_t(i),
                |_, _| panic!("merge ran"),
            );
            assert_eq!(r, "identity", "{ctx}");
            let h = rt.run(|| parallel_for(range.clone()).stride(stride).spawn(never));
            h.join();
            parallel_for(range.clone())
                .stride(stride)
                .spawn(never)
                .try_join()
                .unwrap();
            // An empty loop names no index, so any loop promise covers it.
            let lp = LoopPromise::new(100..101);
            rt.run(|| {
                parallel_for(range.clone())
                    .stride(stride)
                    .depends_on_each(&lp)
                    .for_each(never)
            });
            let empty_lp = LoopPromise::new(0..0);
            rt.run(|| {
                parallel_for(range.clone())
                    .stride(stride)
                    .depends_on_each(&empty_lp)
                    .for_each(never)
            });
        }
    }
    let mut none: Vec<u8> = Vec::new();
    assert!(par_chunks_mut(&mut none, 3).is_empty());
    assert_eq!(par_chunks_mut(&mut none, 3).len(), 0);
    par_chunks_mut(&mut none, 3).for_each(|c, _| panic!("chunk {c} of an empty slice"));
    par_iter_mut(&mut none).for_each(|i, _| panic!("element {i} of an empty slice"));
}

#[test]
fn indices_near_usize_max_do_not_overflow() {
    let rt = runtime(3);
    let top = usize::MAX;
    for (range, stride) in [
        (top - 100..top, 1),
        (top - 100..top, 7),
        (top - 1000..top, 999),
        (top - 1..top, 1),
        (0..top, top),
        (0..top, top - 1), // 0 and usize::MAX - 1
    ] {
        let want = serial(range.clone(), stride);
        let got = rt.run(|| {
            parallel_for(range.clone()).stride(stride).reduce(
                Vec::new,
                |mut v, i| {
                    v.push(i);
                    v
                },
                |mut a, b| {
                    a.extend(b);
                    a
                },
            )
        });
        assert_eq!(got, want, "{range:?} stride {stride}");
    }
    // With a loop promise at the top of the index space whose buckets end
    // inside it (see the next test for one whose last bucket does not).
    let lp = LoopPromise::with_bucket_size(top - 48..top, 8);
    for i in lp.range() {
        lp.fulfill(i);
    }
    let seen = Mutex::new(Vec::new());
    rt.run(|| {
        parallel_for(top - 48..top)
            .stride(3)
            .depends_on_each(&lp)
            .for_each(|i| seen.lock().unwrap().push(i))
    });
    let mut seen = seen.into_inner().unwrap();
    seen.sort_unstable();
    assert_eq!(seen, serial(top - 48..top, 3));
}

/// Guards against a hang (`LoopPromise::bucket_end` in src/dataflow/loop_promise.rs, used by
/// `run_iterations_when_ready` in src/loops/each.rs): `range.start + (b + 1) *
/// bucket` overflows when a bucket would end past `usize::MAX`: with
/// `LoopPromise::with_bucket_size(1..10, usize::MAX)` (one bucket for the
/// whole range), or a range near `usize::MAX` whose last bucket is short.
/// In a debug build that is an overflow panic inside the loop's own bucket
/// check, before `next` moves past the iteration, so `iterate` catches it
/// and retries the same iteration forever (thousands of panics a second):
/// the loop never returns. (Release builds wrap, and the difference taken
/// right after comes out right, so there it works.) Expected: every
/// iteration runs once.
#[test]
fn depends_on_each_with_a_bucket_ending_past_usize_max() {
    if !is_child() {
        return in_child_process(
            "options::depends_on_each_with_a_bucket_ending_past_usize_max",
            HANG_LIMIT,
        );
    }
    let r = {
        let rt = runtime(2);
        let mut out = Vec::new();
        for (range, bucket) in [(1..10, usize::MAX), (usize::MAX - 50..usize::MAX, 8)] {
            let lp = LoopPromise::with_bucket_size(range.clone(), bucket);
            for i in lp.range() {
                lp.fulfill(i);
            }
            let calls = AtomicUsize::new(0);
            rt.run(|| {
                parallel_for(range.clone())
                    .depends_on_each(&lp)
                    .for_each(|_| {
                        calls.fetch_add(1, Relaxed);
                    })
            });
            out.push(calls.into_inner());
        }
        out
    };
    assert_eq!(r, [9, 50]);
}

// ---------------------------------------------------------------------
// Bad input
// ---------------------------------------------------------------------

#[test]
#[should_panic(expected = "parallel_for stride must be at least 1, got 0")]
fn stride_zero_panics() {
    let _ = parallel_for(0..10).stride(0);
}

#[test]
#[allow(clippy::reversed_empty_ranges)] // reversed on purpose
fn stride_zero_panics_even_on_an_empty_loop_and_names_zero() {
    let msg = panic_message(|| parallel_for(5..2).stride(0));
    assert_eq!(msg, "parallel_for stride must be at least 1, got 0");
}

#[test]
#[should_panic(expected = "par_chunks_mut chunk length must be at least 1, got 0")]
fn chunk_length_zero_panics() {
    let mut v = vec![0u8; 10];
    let _ = par_chunks_mut(&mut v, 0);
}

#[test]
fn chunk_length_zero_panics_on_an_empty_slice_too() {
    let mut v: Vec<u8> = Vec::new();
    let msg = panic_message(|| par_chunks_mut(&mut v, 0).len());
    assert_eq!(msg, "par_chunks_mut chunk length must be at least 1, got 0");
}

#[test]
#[should_panic(expected = "depends_on_each: loop index 9 is outside the loop promise's range 0..9")]
fn depends_on_each_with_a_short_promise_panics() {
    let lp = LoopPromise::new(0..9);
    let _ = parallel_for(0..10).depends_on_each(&lp);
}

#[test]
fn depends_on_each_range_checks_name_the_index_and_the_range() {
    let check = |range: Range<usize>, stride: usize, lp: Range<usize>| {
        let lp = LoopPromise::with_bucket_size(lp, 3);
        catch_unwind(AssertUnwindSafe(|| {
            let _ = parallel_for(range).stride(stride).depends_on_each(&lp);
        }))
        .err()
        .map(|p| panic_text(&*p))
    };
    let outside = |i: usize, r: &str| {
        Some(format!(
            "depends_on_each: loop index {i} is outside the loop promise's range {r}"
        ))
    };
    // The first index outside.
    assert_eq!(check(0..10, 1, 1..10), outside(0, "1..10"));
    assert_eq!(check(4..10, 2, 5..20), outside(4, "5..20"));
    // The last index outside (with a stride, the last one the loop visits).
    assert_eq!(check(0..10, 1, 0..9), outside(9, "0..9"));
    assert_eq!(check(0..11, 5, 0..10), outside(10, "0..10"));
    assert_eq!(check(0..100, 1, 200..300), outside(0, "200..300"));
    // A loop whose range ends past the promise but whose last visited index
    // is inside it is covered.
    assert_eq!(check(0..12, 5, 0..11), None);
    assert_eq!(check(0..10, 3, 0..10), None);
    assert_eq!(check(0..10, 100, 0..1), None);
    assert_eq!(check(20..40, 1, 0..100), None);
    // An empty promise covers no index.
    let empty = LoopPromise::new(0..0);
    let msg = panic_message(|| parallel_for(0..1).depends_on_each(&empty));
    assert_eq!(
        msg,
        "depends_on_each: loop index 0 is outside the loop promise's range 0..0"
    );
}

/// Guards against a hang (`ParallelFor::stride` / `depends_on_each`, src/loops/run.rs): the range
/// check of `depends_on_each` uses the stride set so far, and `.stride()`
/// may still be called after it: `parallel_for(0..12).stride(5)` visits 0,
/// 5 and 10, which `LoopPromise::new(0..11)` covers, and a `.stride(1)`
/// after `.depends_on_each` makes it visit 11, outside the promise, with
/// no panic. The loop then panics inside its own bucket check (a
/// `debug_assert` in `LoopDeps::bucket_of`, or the bounds check of the
/// promise's event array), before the iteration counts as started, so
/// `iterate` retries it forever: the loop hangs (with buckets of more than
/// one iteration, a release build instead waits silently on the last
/// bucket). Expected: a panic naming the index and the range, as for a
/// loop that is out of range from the start.
#[test]
fn stride_after_depends_on_each_is_range_checked_too() {
    if !is_child() {
        return in_child_process(
            "options::stride_after_depends_on_each_is_range_checked_too",
            HANG_LIMIT,
        );
    }
    let rt = runtime(2);
    let lp = LoopPromise::new(0..11);
    for i in lp.range() {
        lp.fulfill(i);
    }
    let msg = panic_message(|| {
        rt.run(|| {
            parallel_for(0..12)
                .stride(5)
                .depends_on_each(&lp)
                .stride(1)
                .for_each(|_| ())
        })
    });
    assert!(msg.contains("11") && msg.contains("0..11"), "{msg}");
}

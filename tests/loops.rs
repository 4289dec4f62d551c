//! Parallel loops: `parallel_for` with strides, reductions, nesting, panics,
//! `depends_on` / `depends_on_each` (with promises fulfilled from foreign
//! threads, and broken ones), pipelines, `par_chunks_mut` / `par_iter_mut`,
//! and a stress run on more workers than cores.
//!
//! Every loop counts its iterations per index (an `AtomicU32` each), so a
//! lost or repeated iteration fails the test with its index. Work per
//! iteration is uneven (a few iterations spin much longer) so that the lazy
//! splitting really happens; where a split cannot be guaranteed the tests
//! assert it only over many repetitions. Nothing is timed.

mod support;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use selvedge::{
    global_runtime, par_chunks_mut, par_iter_mut, parallel_for, scope, spawn, JoinHandle,
    LoopPromise, Promise, Runtime,
};
use std::collections::HashSet;
use std::ops::Range;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{panic_text, Watchdog};

// ---------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------

fn runtime(n: usize) -> Runtime {
    Runtime::builder().num_threads(n).build().unwrap()
}

/// One counter per index.
fn counters(n: usize) -> Vec<AtomicU32> {
    (0..n).map(|_| AtomicU32::new(0)).collect()
}

/// Fails with the first index whose count is not `expected(index)`.
#[track_caller]
fn assert_counts(counts: &[AtomicU32], expected: impl Fn(usize) -> u32, ctx: &str) {
    for (i, c) in counts.iter().enumerate() {
        let (got, want) = (c.load(Relaxed), expected(i));
        assert_eq!(
            got, want,
            "{ctx}: index {i} ran {got} times, expected {want}"
        );
    }
}

/// Busy work the optimiser cannot remove.
fn spin(n: u32) {
    let mut x = 0u64;
    for k in 0..n {
        x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(u64::from(k)));
    }
    std::hint::black_box(x);
}

/// Uneven work: most iterations are almost free, a few are long, and a
/// stretch near the end is heavier, so that the worker holding the back
/// of a loop has something worth splitting off.
fn uneven_work(i: usize, n: usize) {
    if i % 4096 < 3 {
        spin(4000);
    } else if i % 61 == 0 || i >= n - n / 16 {
        spin(60);
    }
}

/// The indices a serial strided loop visits.
fn serial(range: Range<usize>, stride: usize) -> Vec<usize> {
    range.step_by(stride).collect()
}

/// The panic message of `f`, which must panic.
#[track_caller]
fn panic_message<R>(f: impl FnOnce() -> R) -> String {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(_) => panic!("expected a panic"),
        Err(p) => panic_text(&*p),
    }
}

const HANG: Duration = Duration::from_secs(60);

/// How long the tests of known hangs wait (their loops are tiny).
const HANG_LIMIT: Duration = Duration::from_secs(20);

/// Runs the test `name` of this binary again, alone, in a child process
/// (with `LOOPS_CHILD` set, so that it runs its body instead of coming
/// back here), and fails when the child fails or is still running after
/// `limit`, killing it: for the tests of known hangs, so that a hung
/// runtime (one of them spins, panicking, forever) does not stay behind
/// slowing the other tests.
fn in_child_process(name: &str, limit: Duration) {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--test-threads=1", "--quiet"])
        .env("LOOPS_CHILD", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(
                status.success(),
                "{name} (in a child process) failed: {status}"
            );
            return;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name} (in a child process) did not finish within {limit:?}: it hangs");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether this process is the child of [`in_child_process`].
fn is_child() -> bool {
    std::env::var_os("LOOPS_CHILD").is_some()
}

/// What a fulfiller writes for index `i` before fulfilling it.
fn stamp(i: usize) -> usize {
    i.wrapping_mul(2_654_435_761) | 1
}

/// Whether every iteration of `i`'s bucket in `lp` has its stamp written
/// (the producer's writes for the whole bucket are visible).
fn bucket_written(lp: &LoopPromise, written: &[AtomicUsize], i: usize) -> bool {
    let r = lp.range();
    let b = lp.bucket_size();
    let first = (i - r.start) / b * b;
    let last = (first + b).min(r.len());
    (first..last).all(|o| written[o].load(Relaxed) == stamp(r.start + o))
}

/// Fulfills every index of `lp`, in a seeded random order, from `threads`
/// foreign threads of scope `s`, each writing the index's stamp into
/// `written` (indexed from the promise's start) before fulfilling it.
fn spawn_fulfillers<'scope>(
    s: &'scope std::thread::Scope<'scope, '_>,
    lp: &'scope LoopPromise,
    written: &'scope [AtomicUsize],
    seed: u64,
    threads: usize,
) {
    let mut order: Vec<usize> = lp.range().collect();
    order.shuffle(&mut SmallRng::seed_from_u64(seed));
    let per = order.len().div_ceil(threads).max(1);
    for part in order.chunks(per) {
        let part = part.to_vec();
        s.spawn(move || {
            let start = lp.range().start;
            for (n, i) in part.into_iter().enumerate() {
                written[i - start].store(stamp(i), Relaxed);
                assert!(lp.fulfill(i));
                if n % 32 == 0 {
                    std::thread::yield_now();
                }
            }
        });
    }
}

/// Counts how many values it made and how many it dropped.
#[derive(Default)]
struct Ledger {
    made: AtomicUsize,
    dropped: AtomicUsize,
}

/// A non-Copy accumulator that reports its drops to a ledger.
struct Tracked {
    items: Vec<usize>,
    ledger: Arc<Ledger>,
}

impl Tracked {
    fn new(ledger: &Arc<Ledger>) -> Tracked {
        ledger.made.fetch_add(1, Relaxed);
        Tracked {
            items: Vec::new(),
            ledger: ledger.clone(),
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.ledger.dropped.fetch_add(1, Relaxed);
    }
}

// ---------------------------------------------------------------------
// 1. Builder options
// ---------------------------------------------------------------------

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

/// Regression test for a hang, fixed since (src/promise.rs `LoopDeps::bucket_end`, used by
/// `run_iterations_when_ready` in src/loops.rs): `range.start + (b + 1) *
/// bucket` overflows when a bucket would end past `usize::MAX`: with
/// `LoopPromise::with_bucket_size(1..10, usize::MAX)` (one bucket for the
/// whole range), or a range near `usize::MAX` whose last bucket is short.
/// In a debug build that is an overflow panic inside the loop's own bucket
/// check, before `next` moves past the iteration, so `iterate` catches it
/// and retries the same iteration forever (thousands of panics a second):
/// the loop never returns. (Release builds wrap, and the difference taken
/// right after comes out right, so there it works.) Expected: every
/// iteration runs once. Left failing on purpose (debug builds only).
#[test]
fn depends_on_each_with_a_bucket_ending_past_usize_max() {
    if !is_child() {
        return in_child_process(
            "depends_on_each_with_a_bucket_ending_past_usize_max",
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
// 2. Bad input
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

/// Regression test for a hang, fixed since (src/loops.rs `ParallelFor::stride` / `depends_on_each`): the range
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
/// loop that is out of range from the start. Left failing on purpose.
#[test]
fn stride_after_depends_on_each_is_range_checked_too() {
    if !is_child() {
        return in_child_process(
            "stride_after_depends_on_each_is_range_checked_too",
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

// ---------------------------------------------------------------------
// 3. Every index exactly once; splits happen
// ---------------------------------------------------------------------

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
// 4. Reductions
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

// ---------------------------------------------------------------------
// 5. Nesting, scopes, tasks, foreign threads
// ---------------------------------------------------------------------

const NI: usize = 12;
const NJ: usize = 20;
const NK: usize = 64;

fn triple(i: usize, j: usize, k: usize) -> usize {
    (i * NJ + j) * NK + k
}

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

// ---------------------------------------------------------------------
// 6. Panics
// ---------------------------------------------------------------------

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

/// Regression test for a hang, fixed since (src/loops.rs, `park_bucket`): a `depends_on_each` reduction whose
/// `identity` panics while the loop parks an unready bucket never returns.
/// `park_bucket` counts the parked part in `pending` and splits a join node
/// for it, then calls `identity()` for the rest of the current part; when
/// that panics, the parked part is never made, so `pending` never reaches
/// zero and the join node's side never arrives: the caller waits forever
/// (the iterations of the bucket are lost too). Expected: the loop ends and
/// `reduce` resumes the identity's panic, as the docs promise for "a panic
/// in any of the three closures". Left failing on purpose.
#[test]
fn a_panicking_identity_while_parking_a_bucket_reaches_the_caller() {
    if !is_child() {
        return in_child_process(
            "a_panicking_identity_while_parking_a_bucket_reaches_the_caller",
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

// ---------------------------------------------------------------------
// 7. depends_on_each with foreign fulfillers
// ---------------------------------------------------------------------

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

// ---------------------------------------------------------------------
// 8. depends_on, and broken promises
// ---------------------------------------------------------------------

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

/// Regression test for a hang, fixed since (src/core/park.rs `Sleep::wake_any` / `join_park`,
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
/// once the promise is fulfilled. Left failing on purpose.
#[test]
fn one_worker_blocking_loop_waiting_for_a_foreign_fulfill() {
    if !is_child() {
        return in_child_process(
            "one_worker_blocking_loop_waiting_for_a_foreign_fulfill",
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

// ---------------------------------------------------------------------
// 9. Pipelines
// ---------------------------------------------------------------------

#[test]
fn pipelined_loops_with_the_consumer_spawned_first() {
    let _w = Watchdog::new("loops: pipeline (a loop hangs)", HANG);
    let n = 20_000;
    for threads in [2, 4, 8] {
        let rt = runtime(threads);
        for bucket in [1, 5, 256] {
            let ctx = format!("{threads} threads, bucket {bucket}");
            let input: Arc<Vec<AtomicUsize>> =
                Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect());
            let output: Arc<Vec<AtomicUsize>> =
                Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect());
            let stage1 = Arc::new(LoopPromise::with_bucket_size(0..n, bucket));
            let stage2 = Arc::new(LoopPromise::with_bucket_size(0..n, bucket));
            // Stage 3 first, then stage 2, then the producer.
            let total = Arc::new(AtomicUsize::new(0));
            let consumer3 = {
                let (output, total) = (output.clone(), total.clone());
                parallel_for(0..n).depends_on_each(&stage2).spawn(move |i| {
                    total.fetch_add(output[i].load(Relaxed), Relaxed);
                })
            };
            let consumer2 = {
                let (input, output, st2) = (input.clone(), output.clone(), stage2.clone());
                rt.run(|| {
                    parallel_for(0..n).depends_on_each(&stage1).spawn(move |i| {
                        let x = input[i].load(Relaxed);
                        assert_eq!(x, i + 1, "stage 2 read {i} before stage 1 wrote it");
                        output[i].store(x * 2, Relaxed);
                        st2.fulfill(i);
                    })
                })
            };
            // The producer: a blocking loop inside the runtime.
            rt.run(|| {
                parallel_for(0..n).for_each(|i| {
                    uneven_work(i, n);
                    input[i].store(i + 1, Relaxed);
                    stage1.fulfill(i);
                })
            });
            consumer2.join();
            consumer3.join();
            assert_eq!(total.load(Relaxed), n * (n + 1), "{ctx}");
            for (i, o) in output.iter().enumerate() {
                assert_eq!(o.load(Relaxed), 2 * (i + 1), "{ctx}: output {i}");
            }
        }
    }
}

#[test]
fn pipelined_loops_in_a_scope_with_a_reduction() {
    let _w = Watchdog::new("loops: scoped pipeline (a loop hangs)", HANG);
    let rt = runtime(4);
    let n = 10_000;
    for stride in [1, 3] {
        let lp = LoopPromise::with_bucket_size(0..n, 10);
        let squares: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        let (collected, ()) = rt.run(|| {
            selvedge::join(
                || {
                    parallel_for(0..n)
                        .stride(stride)
                        .depends_on_each(&lp)
                        .reduce(
                            Vec::new,
                            |mut v, i| {
                                v.push(squares[i].load(Relaxed));
                                v
                            },
                            |mut a, b| {
                                a.extend(b);
                                a
                            },
                        )
                },
                || {
                    // Produced backwards, so the consumer parks a lot.
                    parallel_for(0..n).for_each(|k| {
                        let i = n - 1 - k;
                        squares[i].store(i * i, Relaxed);
                        lp.fulfill(i);
                    })
                },
            )
        });
        let want: Vec<usize> = (0..n).step_by(stride).map(|i| i * i).collect();
        assert!(collected == want, "stride {stride}");
    }
}

// ---------------------------------------------------------------------
// 10. Slices
// ---------------------------------------------------------------------

#[test]
fn par_chunks_mut_gives_every_chunk_once_with_its_index() {
    let rt = runtime(4);
    for len in [0, 1, 9, 10, 11, 1000, 100_003] {
        for chunk_len in [1, 3, 10, 64, 1000, 200_000] {
            let ctx = format!("len {len}, chunk {chunk_len}");
            let mut v: Vec<(usize, usize)> = vec![(usize::MAX, usize::MAX); len];
            let chunks = len.div_ceil(chunk_len);
            assert_eq!(par_chunks_mut(&mut v, chunk_len).len(), chunks, "{ctx}");
            assert_eq!(par_chunks_mut(&mut v, chunk_len).is_empty(), len == 0);
            let counts = counters(chunks);
            let bad_len = AtomicUsize::new(0);
            rt.run(|| {
                par_chunks_mut(&mut v, chunk_len).for_each(|c, chunk| {
                    counts[c].fetch_add(1, Relaxed);
                    let want = chunk_len.min(len - c * chunk_len);
                    if chunk.len() != want {
                        bad_len.fetch_add(1, Relaxed);
                    }
                    for (k, x) in chunk.iter_mut().enumerate() {
                        uneven_work(c * chunk_len + k, len);
                        *x = (c, k);
                    }
                })
            });
            assert_eq!(
                bad_len.load(Relaxed),
                0,
                "{ctx}: a chunk had the wrong length"
            );
            assert_counts(&counts, |_| 1, &ctx);
            let mut want = vec![(0, 0); len];
            for (c, chunk) in want.chunks_mut(chunk_len).enumerate() {
                for (k, x) in chunk.iter_mut().enumerate() {
                    *x = (c, k);
                }
            }
            assert!(v == want, "{ctx}");
        }
    }
    // From a foreign thread, with non-Copy elements.
    let mut words: Vec<String> = (0..1001).map(|i| i.to_string()).collect();
    par_chunks_mut(&mut words, 100).for_each(|c, chunk| {
        for w in chunk {
            w.push_str(&format!("@{c}"));
        }
    });
    assert!(words
        .iter()
        .enumerate()
        .all(|(i, w)| *w == format!("{i}@{}", i / 100)));
}

#[test]
fn par_iter_mut_matches_a_serial_loop() {
    for threads in [2, 8] {
        let rt = runtime(threads);
        for len in [0, 1, 17, 1_000_000] {
            let mut v: Vec<u64> = (0..len as u64).map(|x| x ^ 0x5555).collect();
            let mut want = v.clone();
            for (i, x) in want.iter_mut().enumerate() {
                *x = x.wrapping_mul(3).wrapping_add(i as u64);
            }
            let counts = counters(len);
            rt.run(|| {
                par_iter_mut(&mut v).for_each(|i, x| {
                    uneven_work(i, len);
                    counts[i].fetch_add(1, Relaxed);
                    *x = x.wrapping_mul(3).wrapping_add(i as u64);
                })
            });
            assert!(v == want, "{threads} threads, len {len}");
            assert_counts(&counts, |_| 1, &format!("{threads} threads, len {len}"));
        }
    }
    // Non-Copy elements, from a foreign thread.
    let mut v: Vec<Vec<usize>> = vec![Vec::new(); 1000];
    par_iter_mut(&mut v).for_each(|i, x| x.extend(0..i % 7));
    assert!(v.iter().enumerate().all(|(i, x)| x.len() == i % 7));
}

#[test]
fn a_panic_in_par_chunks_mut_reaches_the_caller() {
    let rt = runtime(4);
    let mut v = vec![0u32; 10_000];
    let msg = panic_message(|| {
        rt.run(|| {
            par_chunks_mut(&mut v, 10).for_each(|c, chunk| {
                chunk.fill(1);
                if c == 500 {
                    panic!("chunk {c}");
                }
            })
        })
    });
    assert_eq!(msg, "chunk 500");
    assert!(v.iter().all(|&x| x == 1), "every other chunk still ran");
    let msg = panic_message(|| {
        par_iter_mut(&mut v).for_each(|i, x| {
            *x = 2;
            if i == 9_999 {
                panic!("element {i}");
            }
        })
    });
    assert_eq!(msg, "element 9999");
    assert!(v.iter().all(|&x| x == 2));
}

/// Checks the spans one `for_each_span` loop over `len` elements in chunks
/// of `chunk_len` was called with (`(first chunk, offset of the span in the
/// slice, span length)`): each starts where its first chunk starts, holds
/// whole chunks (but for one ending the slice), and together they cover
/// every chunk exactly once.
#[track_caller]
fn assert_spans_tile(spans: &[(usize, usize, usize)], len: usize, chunk_len: usize, ctx: &str) {
    let chunks = len.div_ceil(chunk_len);
    let mut seen = vec![0u32; chunks];
    for &(first, offset, span_len) in spans {
        assert_eq!(offset, first * chunk_len, "{ctx}: span at chunk {first}");
        assert!(span_len > 0, "{ctx}: empty span at chunk {first}");
        let end = offset + span_len;
        assert!(
            span_len % chunk_len == 0 || end == len,
            "{ctx}: span at chunk {first} of {span_len} elements is not whole chunks"
        );
        for n in &mut seen[first..end.div_ceil(chunk_len)] {
            *n += 1;
        }
    }
    assert_counts(
        &seen.iter().map(|&n| AtomicU32::new(n)).collect::<Vec<_>>(),
        |_| 1,
        ctx,
    );
}

#[test]
fn for_each_span_covers_every_chunk_once_in_whole_chunk_spans() {
    let rt = runtime(4);
    for len in [0, 1, 9, 10, 11, 1000, 100_003] {
        for chunk_len in [1, 3, 10, 64, 1000, 200_000] {
            let ctx = format!("len {len}, chunk {chunk_len}");
            let mut v = vec![usize::MAX; len];
            let base = v.as_ptr() as usize;
            let spans = Mutex::new(Vec::new());
            rt.run(|| {
                par_chunks_mut(&mut v, chunk_len).for_each_span(|first, span| {
                    let offset = (span.as_ptr() as usize - base) / std::mem::size_of::<usize>();
                    spans.lock().unwrap().push((first, offset, span.len()));
                    for (k, x) in span.iter_mut().enumerate() {
                        uneven_work(offset + k, len);
                        *x = offset + k;
                    }
                })
            });
            assert_spans_tile(&spans.into_inner().unwrap(), len, chunk_len, &ctx);
            assert!(
                v.iter().copied().eq(0..len),
                "{ctx}: every element written once, in place"
            );
        }
    }
}

#[test]
fn for_each_span_on_one_worker_is_one_call_for_the_whole_slice() {
    // No thief ever asks, so nothing is split: the span is everything.
    let rt = runtime(1);
    let mut v = vec![0u8; 10_000];
    let calls = Mutex::new(Vec::new());
    rt.run(|| {
        par_chunks_mut(&mut v, 7).for_each_span(|first, span| {
            calls.lock().unwrap().push((first, span.len()));
            span.fill(1);
        })
    });
    assert_eq!(calls.into_inner().unwrap(), [(0, 10_000)]);
    assert!(v.iter().all(|&x| x == 1));
}

#[test]
fn for_each_span_in_an_outer_loop_splits_only_when_the_outer_loop_cannot_feed_thieves() {
    // An outer loop of long iterations, each an inner span loop: thieves
    // take outer iterations, so inner loops stay whole while the outer one
    // has iterations to spare. Over many repetitions most inner loops run
    // as one span (counted over all of them: with more workers than cores,
    // how many of one repetition's last rows are split depends on when
    // the OS lets sleepers run); every element is still written exactly
    // once.
    let rt = runtime(4);
    let (outer, inner, chunk, reps) = (64, 4096, 256, 5);
    let mut rows = vec![0u32; outer * inner];
    let spans_per_row: Vec<AtomicU32> = counters(outer);
    let mut whole = Vec::new();
    for rep in 0..reps {
        rows.fill(0);
        for c in &spans_per_row {
            c.store(0, Relaxed);
        }
        rt.run(|| {
            par_chunks_mut(&mut rows, inner).for_each(|r, row| {
                par_chunks_mut(row, chunk).for_each_span(|_, span| {
                    spans_per_row[r].fetch_add(1, Relaxed);
                    for x in span.iter_mut() {
                        spin(20);
                        *x += 1;
                    }
                })
            })
        });
        assert!(
            rows.iter().all(|&x| x == 1),
            "rep {rep}: an element was lost or written twice"
        );
        whole.push(
            spans_per_row
                .iter()
                .filter(|c| c.load(Relaxed) == 1)
                .count(),
        );
    }
    assert!(
        whole.iter().sum::<usize>() * 2 > outer * reps,
        "of {outer} inner loops in each repetition, so many ran as one span: {whole:?}"
    );
}

#[test]
fn a_lone_span_loop_still_feeds_a_worker_that_asks_after_it_began() {
    // As in a batched GEMM of one matrix: the scope's first task (which
    // the idle worker takes at once, and which ends at once) is all the
    // other work there is, and the idle worker asks again only after the
    // span loop started. It must still get a share of the loop: spans
    // stay short while workers are asking.
    let rt = runtime(2);
    let mut v = vec![0u8; 16];
    for rep in 0..5 {
        let threads = Mutex::new(HashSet::new());
        rt.run(|| {
            scope(|s| {
                s.spawn(|_| {});
                par_chunks_mut(&mut v, 1).for_each_span(|_, span| {
                    threads.lock().unwrap().insert(std::thread::current().id());
                    // A kernel call: uninterruptible, 5 ms per chunk.
                    std::thread::sleep(Duration::from_millis(5) * span.len() as u32);
                    span.fill(1);
                })
            })
        });
        assert!(v.iter().all(|&x| x == 1));
        v.fill(0);
        let threads = threads.into_inner().unwrap().len();
        assert_eq!(threads, 2, "rep {rep}: the loop ran on {threads} worker(s)");
    }
}

#[test]
fn a_lone_span_loop_reaches_every_sleeping_worker_before_its_first_span_ends() {
    // One large kernel loop (a GEMM of one matrix) while the other workers
    // sleep: sleepers send no requests, so the loop hands them shares
    // before it runs a span, and each woken worker does the same with its
    // share before its own first span. Handing one share at a time, only
    // as a part starts and when a span ends, reaches a new worker only
    // when a 200 ms span ends: before that, the chain of halves (8, 4, 2,
    // 1 of 16 chunks) wakes only 4 of the 7 sleepers.
    let workers = 8;
    let rt = runtime(workers);
    let mut v = vec![0u8; 16];
    for rep in 0..3 {
        // Long enough idle for every worker to be asleep.
        std::thread::sleep(Duration::from_millis(300));
        let starts = Mutex::new(Vec::new());
        let first_end = Mutex::new(None::<Instant>);
        rt.run(|| {
            par_chunks_mut(&mut v, 1).for_each_span(|_, span| {
                starts
                    .lock()
                    .unwrap()
                    .push((std::thread::current().id(), Instant::now()));
                // A kernel call: uninterruptible, 200 ms per chunk.
                std::thread::sleep(Duration::from_millis(200) * span.len() as u32);
                span.fill(1);
                first_end.lock().unwrap().get_or_insert_with(Instant::now);
            })
        });
        assert!(v.iter().all(|&x| x == 1), "rep {rep}: a chunk did not run");
        v.fill(0);
        let first_end = first_end.into_inner().unwrap().expect("a span ran");
        let early: HashSet<_> = starts
            .into_inner()
            .unwrap()
            .into_iter()
            .filter(|&(_, t)| t < first_end)
            .map(|(id, _)| id)
            .collect();
        assert_eq!(
            early.len(),
            workers,
            "rep {rep}: only {} of {workers} workers started a span before the first span ended",
            early.len()
        );
    }
}

#[test]
fn chunks_of_zero_sized_elements_near_usize_max() {
    // A slice of `()` may be as long as usize::MAX: the last span's end
    // must not overflow.
    let rt = runtime(2);
    let mut units = vec![(); usize::MAX];
    let chunk = usize::MAX / 3 + 1;
    let seen = Mutex::new(Vec::new());
    rt.run(|| {
        par_chunks_mut(&mut units, chunk).for_each_span(|first, span| {
            seen.lock().unwrap().push((first, span.len()));
        })
    });
    let mut seen = seen.into_inner().unwrap();
    seen.sort();
    let total: u128 = seen.iter().map(|&(_, n)| n as u128).sum();
    assert_eq!(total, usize::MAX as u128, "{seen:?}");
    assert_eq!(seen[0].0, 0);
    // And chunk by chunk.
    let lens = Mutex::new(Vec::new());
    rt.run(|| {
        par_chunks_mut(&mut units, chunk)
            .for_each(|c, chunk| lens.lock().unwrap().push((c, chunk.len())))
    });
    let mut lens = lens.into_inner().unwrap();
    lens.sort();
    assert_eq!(lens, [(0, chunk), (1, chunk), (2, usize::MAX - 2 * chunk)]);
}

#[test]
fn a_panicking_span_is_not_run_again_and_the_other_spans_run_once() {
    let rt = runtime(4);
    for rep in 0..20 {
        let ctx = format!("rep {rep}");
        let (len, chunk_len) = (20_000, 10);
        let mut v = vec![0u32; len];
        let base = v.as_ptr() as usize;
        let panicked_span = Mutex::new(None);
        let msg = panic_message(|| {
            rt.run(|| {
                par_chunks_mut(&mut v, chunk_len).for_each_span(|first, span| {
                    let offset = (span.as_ptr() as usize - base) / std::mem::size_of::<u32>();
                    for (k, x) in span.iter_mut().enumerate() {
                        uneven_work(offset + k, len);
                        *x += 1;
                    }
                    let chunks = first..(offset + span.len()).div_ceil(chunk_len);
                    if chunks.contains(&1000) {
                        *panicked_span.lock().unwrap() = Some(chunks);
                        panic!("span with chunk 1000");
                    }
                })
            })
        });
        assert_eq!(msg, "span with chunk 1000", "{ctx}");
        let lost = panicked_span.into_inner().unwrap().expect("the span ran");
        for (c, chunk) in v.chunks(chunk_len).enumerate() {
            // The panicking span wrote its elements before panicking; no
            // chunk, its own included, ran twice.
            assert!(
                chunk.iter().all(|&x| x == 1),
                "{ctx}: chunk {c} (panicking span {lost:?})"
            );
        }
    }
}

// ---------------------------------------------------------------------
// 11. Stress
// ---------------------------------------------------------------------

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

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

#[path = "../support/mod.rs"]
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

/// Runs the test `name` (its path, `module::test`) of this binary again,
/// alone, in a child process
/// (with `LOOPS_CHILD` set, so that it runs its body instead of coming
/// back here), and fails when the child fails or is still running after
/// `limit`, killing it: for the tests of known hangs, so that a hung
/// runtime (one of them spins, panicking, forever) does not stay behind
/// slowing the other tests.
fn in_child_process(name: &str, limit: Duration) {
    // A name that matches no test would make the child run nothing and
    // pass: check that it names exactly one (a test's path in this binary
    // includes its module).
    let listed = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--list", "--format", "terse"])
        .env("LOOPS_CHILD", "1")
        .output()
        .unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(
        listed.lines().filter(|l| l.ends_with(": test")).count(),
        1,
        "in_child_process({name:?}): no test of that path in this binary (listed: {listed:?})"
    );
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

mod exactly_once;
mod foreign_fulfillers;
mod nesting;
mod options;
mod panics;
/// The sizes of the three-deep nests (nesting and panics).
const NI: usize = 12;
const NJ: usize = 20;
const NK: usize = 64;

/// The counter index of the iteration `(i, j, k)` of a three-deep nest.
fn triple(i: usize, j: usize, k: usize) -> usize {
    (i * NJ + j) * NK + k
}

mod depends_on;
mod pipelines_and_slices;
mod stress;

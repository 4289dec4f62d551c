//! How long an operation that ends outside the pool takes to reach the task
//! waiting for it: a fake device whose operations a thread outside the pool
//! ends (it stores a flag, as a GPU finishes the work before an event).
//!
//! Two ways for the end to reach the task, measured in the same run:
//!
//! - **polled**: `Promise::fulfill_when` with a test of the flag; the
//!   workers test it while they look for work and between tasks, and
//!   fulfill the promise themselves (no thread woken);
//! - **callback**: the thread that ended the operation fulfills the
//!   promise itself, as an operation's callback would (a CUDA host
//!   function, MPI's progress thread): the task is queued from outside and
//!   a worker is woken for it.
//!
//! Each in three situations: the workers idle, with each operation ending
//! 100 µs after it began; idle for 5 ms before it ends (by then a worker
//! woken for the callback's task has slept for long); and busy with a
//! stream of tasks of about 1 µs on every worker. Prints the median and the 90th
//! percentile, in µs, from the end of the operation to the start of the
//! task waiting for it.
//!
//! ```text
//! cargo run --release -p selvedge-tools --bin completion_latency -- [rounds] [threads]
//! ```

use selvedge::{Promise, Runtime};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How the end of an operation reaches the task waiting for it.
#[derive(Clone, Copy, PartialEq)]
enum Path {
    Polled,
    Callback,
}

fn main() {
    let numbers: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse()
                .unwrap_or_else(|_| panic!("expected [rounds] [threads], got `{a}`"))
        })
        .collect();
    let rounds = numbers.first().copied().unwrap_or(2000).max(10);
    let threads = numbers
        .get(1)
        .copied()
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let rt = Runtime::builder()
        .num_threads(threads)
        .build()
        .expect("the runtime starts");
    println!(
        "completion_latency: {rounds} operations per row ({} in the 5 ms row), {threads} workers; \
         from the end of an operation to the start of the task waiting for it, in us",
        (rounds / 10).max(10) / 4 * 4
    );
    println!("| workers, operation | polled p50 | polled p90 | callback p50 | callback p90 | polled / callback (p50) |");
    println!("|---|---:|---:|---:|---:|---:|");
    let cases = [
        (
            "idle, the operation ending 100 us after it began",
            Duration::from_micros(100),
            false,
            rounds,
        ),
        (
            "idle, the operation ending 5 ms after it began",
            Duration::from_millis(5),
            false,
            (rounds / 10).max(10),
        ),
        (
            "busy with 1 us tasks",
            Duration::from_micros(100),
            true,
            rounds,
        ),
    ];
    for (name, gap, busy, n) in cases {
        // Alternated in blocks, so that a slow spell of the machine falls on
        // both paths.
        let (mut polled, mut callback) = (Vec::new(), Vec::new());
        for _ in 0..4 {
            polled.extend(measure(&rt, Path::Polled, gap, busy, n / 4));
            callback.extend(measure(&rt, Path::Callback, gap, busy, n / 4));
        }
        let (p50, p90) = percentiles(&mut polled);
        let (c50, c90) = percentiles(&mut callback);
        println!(
            "| {name} | {p50:.2} | {p90:.2} | {c50:.2} | {c90:.2} | {:.2}x |",
            p50 / c50
        );
    }
}

/// `n` operations `gap` apart, each ended by this thread and reaching its
/// waiting task by `path`; the latencies in µs.
fn measure(rt: &Runtime, path: Path, gap: Duration, busy: bool, n: usize) -> Vec<f64> {
    let origin = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let stream = busy.then(|| {
        let stop = Arc::clone(&stop);
        let workers = rt.num_threads();
        // Rounds of short tasks: between two rounds the workers take the
        // tasks queued from outside (the test's promise is made in one).
        rt.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                selvedge::scope(|sc| {
                    for _ in 0..workers * 16 {
                        sc.spawn(|_| spin(Duration::from_micros(1)));
                    }
                });
            }
        })
    });
    let mut latencies = Vec::with_capacity(n);
    for _ in 0..n {
        let ended = Arc::new(AtomicBool::new(false));
        let promise = Promise::new();
        if path == Path::Polled {
            let ended = Arc::clone(&ended);
            rt.run(|| promise.fulfill_when(move || ended.load(Ordering::Acquire)));
        }
        // When the waiting task started, in ns since `origin` (0: not yet).
        let started = Arc::new(AtomicU64::new(0));
        let s = Arc::clone(&started);
        rt.spawn_delayed([promise.dep()], move || {
            s.store(origin.elapsed().as_nanos() as u64, Ordering::Release);
        })
        .detach();
        std::thread::sleep(gap);
        let end = origin.elapsed().as_nanos() as u64;
        ended.store(true, Ordering::Release);
        if path == Path::Callback {
            promise.fulfill();
        }
        let mut ran = started.load(Ordering::Acquire);
        while ran == 0 {
            std::hint::spin_loop();
            ran = started.load(Ordering::Acquire);
        }
        latencies.push(ran.saturating_sub(end) as f64 / 1000.0);
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(stream) = stream {
        stream.join();
    }
    latencies
}

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// The median and the 90th percentile.
fn percentiles(times: &mut [f64]) -> (f64, f64) {
    times.sort_unstable_by(f64::total_cmp);
    (times[times.len() / 2], times[times.len() * 9 / 10])
}

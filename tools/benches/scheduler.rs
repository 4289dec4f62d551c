//! Criterion benchmarks: Weave's suite (fib, DFS, N-Queens, bouncing
//! producer-consumer, single producer / many consumers) on selvedge, rayon,
//! chili (fork-join only) and a serial baseline.
//!
//! One group per workload, with every implementation in the same group so
//! their ratios can be read off directly. Every pool has the same number of
//! threads: `SELVEDGE_BENCH_THREADS`, or 2. The pools are built once; each
//! iteration is one whole workload (`rt.run(..)` / `pool.install(..)`).
//!
//! ```text
//! SELVEDGE_BENCH_THREADS=2 cargo bench -p selvedge-tools --bench scheduler [-- <filter>]
//! ```
//!
//! For a one-shot markdown table, see `tools/src/bin/bench_report/main.rs`.

use selvedge_tools::workloads;

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};

fn scheduler(c: &mut Criterion) {
    let pools = workloads::Pools::new(workloads::threads_from_env());
    eprintln!(
        "selvedge benches: {} threads per pool, available_parallelism {}",
        pools.threads,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for w in workloads::all() {
        // Outside the timed loop: every implementation must agree with the
        // serial one (and the known answer).
        let result = w.verify(&pools);
        eprintln!(
            "{}: {} = {result}, all implementations agree",
            w.group, w.title
        );
        let mut group = c.benchmark_group(w.group);
        // Each iteration is a whole workload (milliseconds to hundreds of
        // milliseconds): few samples, one or a few iterations each.
        group
            .sampling_mode(SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3));
        for imp in &w.impls {
            group.bench_function(imp.name, |b| b.iter(|| black_box((imp.run)(&pools))));
        }
        group.finish();
    }
}

criterion_group!(benches, scheduler);
criterion_main!(benches);

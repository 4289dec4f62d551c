//! Criterion benchmarks of the parallel loops: loop overhead
//! (an empty loop, a sum, a loop nested in a loop), four kernels from
//! Weave's benchmark suite (histogram, log-sum-exp, Black-Scholes, matrix
//! transposition) and two loops pipelined with `depends_on_each` against
//! the same loops behind a barrier. The workloads, and why each is shaped
//! the way it is, are documented in `tools/src/loops.rs`, which
//! `bench_report --only loops` times too.
//!
//! One group per workload, with the serial, selvedge and rayon versions in
//! the same group, so their ratios can be read off directly; each group's
//! throughput is its iterations, elements, options or items per run. Every
//! implementation is first checked against the serial one outside the
//! timed loop, and times only its computation (`iter_custom`): inputs are
//! built once, outputs reused, checksums taken after the clock stops. The
//! pools are built once, each with `SELVEDGE_BENCH_THREADS` threads
//! (default 2).
//!
//! ```text
//! SELVEDGE_BENCH_THREADS=2 cargo bench -p selvedge-tools --bench loops [-- <filter>]
//! ```

use selvedge_tools::{loops, workloads};

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};

fn loops(c: &mut Criterion) {
    let pools = workloads::Pools::new(workloads::threads_from_env());
    eprintln!(
        "selvedge loop benches: {} threads per pool, available_parallelism {}",
        pools.threads,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for w in loops::all() {
        let result = w.verify(&pools);
        eprintln!(
            "{}: {} = {result:#x}, all implementations agree",
            w.group, w.title
        );
        let mut group = c.benchmark_group(w.group);
        // Each iteration is a whole workload (a few to tens of ms).
        group
            .throughput(Throughput::Elements(w.units))
            .sampling_mode(SamplingMode::Flat)
            .sample_size(20)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3));
        for imp in &w.impls {
            group.bench_function(imp.name, |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| black_box((imp.run)(&pools)).1)
                        .sum::<Duration>()
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, loops);
criterion_main!(benches);

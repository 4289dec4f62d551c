//! Criterion benchmarks of the dataflow promises (issue #3): the cost of a
//! promise on top of a spawn, the latency of a chain of promises, a tiled
//! wavefront (Smith-Waterman-like) run with promises against the same
//! computation behind anti-diagonal barriers, and a fine-grained wavefront
//! (256 × 256 tiles of about 1 µs, 64 × 64 of about 5 µs: groups
//! `wavefront_fine_256` and `wavefront_fine_64`) where the per-tile cost of
//! a promise shows. The workloads, and why each is shaped the way it is,
//! are documented in `benches/workloads/dataflow.rs` (the fine-grained one
//! in `benches/workloads/fine_wavefront.rs`), which
//! `examples/bench_report.rs` times too.
//!
//! One group per workload, with every implementation (selvedge's, the rayon
//! peers and the serial baseline) in the same group, so their ratios can be
//! read off directly; each group's throughput is its tasks, links or tiles
//! per run. Every implementation is first checked against the serial one
//! outside the timed loop. The promise chains are also timed from their
//! first fulfill on (`iter_custom`), without the up-front spawns. The pools are built once, each with
//! `SELVEDGE_BENCH_THREADS` threads (default 2).
//!
//! ```text
//! SELVEDGE_BENCH_THREADS=2 cargo bench --bench dataflow [-- <filter>]
//! ```

#[path = "workloads/dataflow.rs"]
mod dataflow;
#[allow(dead_code)] // Weave's suite in it is `benches/scheduler.rs`'s; we use the pools and table
mod workloads;

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};

fn dataflow(c: &mut Criterion) {
    let pools = workloads::Pools::new(workloads::threads_from_env());
    eprintln!(
        "selvedge dataflow benches: {} threads per pool, available_parallelism {}",
        pools.threads,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for d in dataflow::all() {
        let w = &d.workload;
        let result = d.verify(&pools);
        eprintln!(
            "{}: {} = {result:#x}, all implementations agree",
            w.group, w.title
        );
        let mut group = c.benchmark_group(w.group);
        // Each iteration is a whole workload (about a millisecond to tens
        // of milliseconds).
        group
            .throughput(Throughput::Elements(d.units))
            .sampling_mode(SamplingMode::Flat)
            .sample_size(20)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3));
        for imp in &w.impls {
            group.bench_function(imp.name, |b| b.iter(|| black_box((imp.run)(&pools))));
        }
        // Implementations that time part of their run themselves.
        for phase in &d.phases {
            group.bench_function(phase.name, |b| {
                b.iter_custom(|iters| {
                    (0..iters)
                        .map(|_| black_box((phase.run)(&pools)).1)
                        .sum::<Duration>()
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, dataflow);
criterion_main!(benches);

//! Criterion benchmarks of the dataflow promises: the cost of a
//! promise on top of a spawn, the latency of a chain of promises, a tiled
//! wavefront (Smith-Waterman-like) run with promises against the same
//! computation behind anti-diagonal barriers, and a fine-grained wavefront
//! (256 × 256 tiles of about 1 µs, 64 × 64 of about 5 µs: groups
//! `wavefront_fine_256` and `wavefront_fine_64`) where the per-tile cost of
//! a promise shows. The workloads, and why each is shaped the way it is,
//! are documented in `tools/src/dataflow.rs` (the fine-grained one
//! in `tools/src/dataflow/fine_wavefront.rs`), which
//! `tools/src/bin/bench_report/main.rs` times too.
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
//! SELVEDGE_BENCH_THREADS=2 cargo bench -p selvedge-tools --bench dataflow [-- <filter>]
//! ```

use selvedge_tools::{dataflow, dataflow_group, workloads};

use criterion::{criterion_group, criterion_main, Criterion};

fn dataflow(c: &mut Criterion) {
    let pools = workloads::Pools::new(workloads::threads_from_env());
    eprintln!(
        "selvedge dataflow benches: {} threads per pool, available_parallelism {}",
        pools.threads,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for d in dataflow::all() {
        dataflow_group::bench(c, &pools, &d);
    }
}

criterion_group!(benches, dataflow);
criterion_main!(benches);

//! Criterion benchmarks of graphs built once and replayed: the
//! fine-grained wavefront (256 × 256 tiles of about 1 µs, 64 × 64 of about
//! 5 µs, and 256 × 256 empty tiles, where the time is the runtime's per
//! node) as a replayed `selvedge::Graph`, the same graph built every run,
//! promises and delayed tasks, rayon with a barrier per anti-diagonal, and
//! serial code. The workloads are in `tools/src/dataflow/graph_replay.rs`,
//! which `tools/src/bin/bench_report/main.rs` times too (`--only graph`).
//!
//! One group per grid, every implementation in it, throughput in nodes;
//! each implementation is first checked against the serial checksum. The
//! pools are built once, each with `SELVEDGE_BENCH_THREADS` threads
//! (default 2).
//!
//! ```text
//! SELVEDGE_BENCH_THREADS=2 cargo bench -p selvedge-tools --bench graph [-- <filter>]
//! ```

use selvedge_tools::{dataflow, dataflow_group, workloads};

use criterion::{criterion_group, criterion_main, Criterion};

fn graphs(c: &mut Criterion) {
    let pools = workloads::Pools::new(workloads::threads_from_env());
    for d in dataflow::graph_replay::all() {
        dataflow_group::bench(c, &pools, &d);
    }
}

criterion_group!(benches, graphs);
criterion_main!(benches);

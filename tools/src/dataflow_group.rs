//! One criterion group for one dataflow workload, shared by
//! `tools/benches/dataflow.rs` and `tools/benches/graph.rs`: every implementation, and every
//! implementation that times part of its run itself, checked against the
//! serial result first.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, SamplingMode, Throughput};

use crate::dataflow::Dataflow;
use crate::workloads::Pools;

/// Verifies `d`'s implementations, then benchmarks them as one group,
/// throughput in `d`'s units.
pub fn bench(c: &mut Criterion, pools: &Pools, d: &Dataflow) {
    let w = &d.workload;
    let result = d.verify(pools);
    eprintln!(
        "{}: {} = {result:#x}, all implementations agree",
        w.group, w.title
    );
    let mut group = c.benchmark_group(w.group);
    // Each iteration is a whole workload (about a millisecond to tens of
    // milliseconds).
    group
        .throughput(Throughput::Elements(d.units))
        .sampling_mode(SamplingMode::Flat)
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for imp in &w.impls {
        group.bench_function(imp.name, |b| b.iter(|| black_box((imp.run)(pools))));
    }
    // Implementations that time part of their run themselves.
    for phase in &d.phases {
        group.bench_function(phase.name, |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| black_box((phase.run)(pools)).1)
                    .sum::<Duration>()
            })
        });
    }
    group.finish();
}

//! Criterion benchmark of the README's main demonstration: a
//! nested, dataflow batched GEMM, 64 pairs of 256 x 256 f32 matrices, with
//! a second stage per matrix (ReLU and row sums). The workload and its
//! implementations are in `tools/src/gemm.rs`, which
//! `tools/src/bin/batched_gemm.rs` runs too.
//!
//! One group, `nested_gemm`, holds selvedge's nested dataflow version (a
//! loop nest per product, `tools/src/blis.rs`), rayon's nested
//! `par_chunks_mut` version (stage 2 after a barrier), rayon running
//! selvedge's loop nest, rayon with one task per matrix (not nested),
//! scheduler-free references (one OS thread per share of the batch, with
//! `matrixmultiply` or the loop nest) and the serial program (with either),
//! each checked against the serial result first. Throughput
//! is stage 1's flops. The pools are built once with
//! `SELVEDGE_BENCH_THREADS` threads (default 2).
//!
//! ```text
//! SELVEDGE_BENCH_THREADS=2 cargo bench -p selvedge-tools --bench gemm
//! ```

use selvedge_tools::{gemm, workloads};

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};

const BATCH: usize = 64;
const SIZE: usize = 256;
const BLOCK_ROWS: usize = 64;

fn nested_gemm(c: &mut Criterion) {
    let pools = workloads::Pools::new(workloads::threads_from_env());
    let input = gemm::Batch::new(BATCH, SIZE, 0x5e1_7ed6e);
    let mut expected = input.output();
    gemm::serial(&input, &mut expected);
    let mut out = input.output();
    let check = |name: &str, out: &gemm::Output| {
        let err = gemm::max_relative_error(&expected, out);
        assert!(
            err <= 1e-4,
            "{name} differs from the serial result by {err}"
        );
    };
    pools.selvedge.run(|| gemm::selvedge(&input, &mut out));
    check("selvedge", &out);
    pools
        .rayon
        .install(|| gemm::rayon(&input, &mut out, BLOCK_ROWS));
    check("rayon", &out);
    pools.rayon.install(|| gemm::rayon_nest(&input, &mut out));
    check("rayon, same nest", &out);
    pools
        .rayon
        .install(|| gemm::rayon_per_matrix(&input, &mut out));
    check("rayon per matrix", &out);
    gemm::static_threads(&input, &mut out, pools.threads);
    check("static threads", &out);
    gemm::static_threads_nest(&input, &mut out, pools.threads);
    check("static threads, same nest", &out);
    gemm::serial_nest(&input, &mut out);
    check("serial, same nest", &out);
    eprintln!(
        "nested_gemm: {BATCH} x {SIZE}^3, {} threads, all implementations agree",
        pools.threads
    );

    let mut group = c.benchmark_group("nested_gemm");
    group
        .throughput(Throughput::Elements(input.flops() as u64))
        .sampling_mode(SamplingMode::Flat)
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    group.bench_function("selvedge nested dataflow", |b| {
        b.iter(|| pools.selvedge.run(|| gemm::selvedge(&input, &mut out)))
    });
    group.bench_function("rayon nested par_chunks_mut", |b| {
        b.iter(|| {
            pools
                .rayon
                .install(|| gemm::rayon(&input, &mut out, BLOCK_ROWS))
        })
    });
    group.bench_function("rayon, selvedge's loop nest", |b| {
        b.iter(|| pools.rayon.install(|| gemm::rayon_nest(&input, &mut out)))
    });
    group.bench_function("rayon one task per matrix", |b| {
        b.iter(|| {
            pools
                .rayon
                .install(|| gemm::rayon_per_matrix(&input, &mut out))
        })
    });
    group.bench_function("static threads", |b| {
        b.iter(|| gemm::static_threads(&input, &mut out, pools.threads))
    });
    group.bench_function("static threads, selvedge's loop nest", |b| {
        b.iter(|| gemm::static_threads_nest(&input, &mut out, pools.threads))
    });
    group.bench_function("serial", |b| b.iter(|| gemm::serial(&input, &mut out)));
    group.bench_function("serial, selvedge's loop nest", |b| {
        b.iter(|| gemm::serial_nest(&input, &mut out))
    });
    group.bench_function("serial kernel only", |b| {
        b.iter(|| gemm::serial_products(&input, &mut out))
    });
    group.finish();
}

criterion_group!(benches, nested_gemm);
criterion_main!(benches);

//! Criterion benchmarks of declared data access (`Data`, `spawn_with`):
//!
//! - `declared_access`: what a declared access costs over a plain `spawn`
//!   and over the promise chains it replaces (`tools/src/access.rs`
//!   says what each version does);
//! - `cholesky_2048_tile_128` and `_64`: the tiled Cholesky factorisation
//!   (`tools/src/cholesky.rs`, also `tools/src/bin/cholesky.rs`) as
//!   selvedge dataflow with declared access, as the same tasks in a
//!   `Graph` built once and replayed, as rayon with a barrier per
//!   half-step, and serially (the tile loop), each checked against the
//!   serial factor first. Throughput is n³/3 flops.
//!
//! The pools are built once with `SELVEDGE_BENCH_THREADS` threads (default
//! 2).
//!
//! ```text
//! SELVEDGE_BENCH_THREADS=2 cargo bench -p selvedge-tools --bench data
//! ```

use selvedge_tools::{access, cholesky, workloads};

use cholesky::Tiles;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, SamplingMode, Throughput};
use std::time::Duration;

const N: usize = 2048;

fn declared_access(c: &mut Criterion) {
    let pools = workloads::Pools::new(workloads::threads_from_env());
    let k = access::TASKS;
    let handles = access::read_handles();
    let rt = &pools.selvedge;
    let reads_1 = access::serial_reads::<1>(k);
    let reads_3 = access::serial_reads::<3>(k);
    let writes = access::serial_writes(k);
    assert_eq!(rt.run(|| access::spawn(k)), reads_1);
    assert_eq!(rt.run(|| access::reads::<1>(&handles, k)), reads_1);
    assert_eq!(rt.run(|| access::reads::<3>(&handles, k)), reads_3);
    assert_eq!(rt.run(|| access::writes(k)), writes);
    assert_eq!(rt.run(|| access::promise_chains(k)), writes);
    assert_eq!(pools.rayon.install(|| access::rayon_unordered(k)), reads_1);

    let mut g = c.benchmark_group("declared_access");
    g.throughput(Throughput::Elements(k));
    g.bench_function(access::SERIAL, |b| b.iter(|| access::serial_writes(k)));
    g.bench_function(access::SPAWN, |b| b.iter(|| rt.run(|| access::spawn(k))));
    g.bench_function(access::READ_1, |b| {
        b.iter(|| rt.run(|| access::reads::<1>(&handles, k)))
    });
    g.bench_function(access::READ_3, |b| {
        b.iter(|| rt.run(|| access::reads::<3>(&handles, k)))
    });
    g.bench_function(access::WRITE_1, |b| b.iter(|| rt.run(|| access::writes(k))));
    g.bench_function(access::PROMISES, |b| {
        b.iter(|| rt.run(|| access::promise_chains(k)))
    });
    g.bench_function(access::RAYON, |b| {
        b.iter(|| pools.rayon.install(|| access::rayon_unordered(k)))
    });
    g.finish();
}

fn tiled_cholesky(c: &mut Criterion) {
    let pools = workloads::Pools::new(workloads::threads_from_env());
    let a = cholesky::spd_matrix(N, 1);
    for t in [128, 64] {
        let mut reference = Tiles::from_matrix(&a, t);
        cholesky::factor_serial(&mut reference);
        let l_ref = reference.to_lower();
        let check = |name: &str, tiles: &Tiles| {
            let diff = cholesky::max_difference(&tiles.to_lower(), &l_ref);
            assert!(
                diff < 1e-8 * N as f64,
                "{name} differs from the serial factor by {diff:e}"
            );
        };
        let mut tiles = Tiles::from_matrix(&a, t);
        cholesky::factor_selvedge(&pools.selvedge, &mut tiles);
        check("selvedge", &tiles);
        let mut tiles = Tiles::from_matrix(&a, t);
        cholesky::FactorGraph::new(N / t).factor(&pools.selvedge, &mut tiles);
        check("selvedge graph", &tiles);
        let mut tiles = Tiles::from_matrix(&a, t);
        cholesky::factor_rayon_barrier(&pools.rayon, &mut tiles);
        check("rayon", &tiles);
        let mut tiles = Tiles::from_matrix(&a, t);
        cholesky::factor_promises(&pools.selvedge, &mut tiles);
        check("selvedge promises by hand", &tiles);
        eprintln!(
            "cholesky: n = {N}, tiles of {t}, {} threads, all versions agree",
            pools.threads
        );

        let mut g = c.benchmark_group(format!("cholesky_{N}_tile_{t}"));
        g.sampling_mode(SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(8))
            .throughput(Throughput::Elements((N * N * N / 3) as u64));
        g.bench_function("selvedge declared access", |b| {
            b.iter_batched_ref(
                || Tiles::from_matrix(&a, t),
                |tiles| cholesky::factor_selvedge(&pools.selvedge, tiles),
                BatchSize::LargeInput,
            )
        });
        let mut graph = cholesky::FactorGraph::new(N / t);
        g.bench_function("selvedge graph of declared accesses (replayed)", |b| {
            b.iter_batched_ref(
                || Tiles::from_matrix(&a, t),
                |tiles| graph.factor(&pools.selvedge, tiles),
                BatchSize::LargeInput,
            )
        });
        g.bench_function("selvedge promises by hand", |b| {
            b.iter_batched_ref(
                || Tiles::from_matrix(&a, t),
                |tiles| cholesky::factor_promises(&pools.selvedge, tiles),
                BatchSize::LargeInput,
            )
        });
        g.bench_function("rayon barrier", |b| {
            b.iter_batched_ref(
                || Tiles::from_matrix(&a, t),
                |tiles| cholesky::factor_rayon_barrier(&pools.rayon, tiles),
                BatchSize::LargeInput,
            )
        });
        g.bench_function("serial", |b| {
            b.iter_batched_ref(
                || Tiles::from_matrix(&a, t),
                cholesky::factor_serial,
                BatchSize::LargeInput,
            )
        });
        g.finish();
    }
}

criterion_group!(benches, declared_access, tiled_cholesky);
criterion_main!(benches);

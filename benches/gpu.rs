//! Criterion benchmarks of GPU tasks (feature `cuda`; without a GPU they
//! print that they skipped and measure nothing, or, with
//! `SELVEDGE_REQUIRE_GPU=1`, fail saying why).
//!
//! - `gpu_batched_gemm/<batch>x<size>`: the demonstration's two stages
//!   through selvedge (groups of the batch as GPU tasks on the workers'
//!   streams, stage 2 pipelined behind the callbacks) against the same
//!   GEMMs issued straight to cuBLAS on one stream, then stage 2 with rayon.
//! - `gpu_round_trip`: an empty GPU task, from `spawn` to a dependent CPU
//!   task starting (the callback's latency plus the enqueue).
//! - `gpu_chain_1000`: 1000 dependent tiny device copies: GPU-to-GPU
//!   dependencies (`gpu_dep`, the stream waits on events) against
//!   dependencies through the host (`dep`, each link after the previous
//!   callback) and against the same copies issued to one stream directly.
//!
//! ```text
//! cargo bench --features cuda --bench gpu
//! SELVEDGE_REQUIRE_GPU=1 cargo bench --features cuda --bench gpu   # fail without a GPU
//! ```

#[path = "workloads/gemm.rs"]
#[allow(dead_code)] // the CPU implementations are `benches/gemm.rs`'s
mod gemm;
#[path = "workloads/gpu.rs"]
mod gpu_workload;
#[path = "workloads/pinning.rs"]
mod pinning;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use selvedge::gpu::cudarc::cublas::CudaBlas;
use selvedge::gpu::{Device, GpuHandle};
use selvedge::Runtime;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn threads() -> usize {
    std::env::var("SELVEDGE_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
}

/// Whether `SELVEDGE_REQUIRE_GPU` asks that a run without a GPU fail
/// (set, and neither empty nor `0`).
fn gpu_required() -> bool {
    std::env::var_os("SELVEDGE_REQUIRE_GPU").is_some_and(|v| !v.is_empty() && v != "0")
}

/// The device, or `None` (skipped) when there is none; exits with status
/// 1 instead under `SELVEDGE_REQUIRE_GPU=1`.
fn open(rt: &Runtime) -> Option<Device> {
    match Device::open_in(rt, 0) {
        Ok(dev) => Some(dev),
        Err(e) => {
            let why = gpu_workload::unavailable_reason(&e);
            if gpu_required() {
                eprintln!(
                    "gpu benchmarks: SELVEDGE_REQUIRE_GPU is set, but no GPU was used: {why} ({e})"
                );
                std::process::exit(1);
            }
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| eprintln!("gpu benchmarks: skipped: {why} ({e})"));
            None
        }
    }
}

fn batched_gemm(c: &mut Criterion) {
    let rt = Runtime::builder().num_threads(threads()).build().unwrap();
    let Some(dev) = open(&rt) else { return };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads())
        .build()
        .unwrap();
    let stream = dev.context().new_stream().unwrap();
    let blas = CudaBlas::new(stream.clone()).unwrap();
    let mut group = c.benchmark_group("gpu_batched_gemm");
    group.measurement_time(Duration::from_secs(3));
    for (batch, size) in [(64, 64), (256, 128), (64, 256), (1024, 64), (64, 512)] {
        let input = gemm::Batch::new(batch, size, 0x5e1_7ed6e);
        let mut expected = input.output();
        gemm::serial(&input, &mut expected);
        let group_size = (batch / (4 * threads())).max(1);
        let d = gpu_workload::DeviceBatch::upload(&dev, &input, group_size).unwrap();
        let mut out = input.output();
        rt.run(|| gpu_workload::selvedge(&dev, &d, &mut out, None))
            .unwrap();
        assert!(gemm::max_relative_error(&expected, &out) < 1e-3);
        pool.install(|| gpu_workload::direct(&d, &stream, &blas, &mut out))
            .unwrap();
        assert!(gemm::max_relative_error(&expected, &out) < 1e-3);
        group.throughput(Throughput::Elements(input.flops() as u64));
        let id = format!("{batch}x{size}");
        group.bench_function(BenchmarkId::new("selvedge", &id), |bench| {
            bench.iter(|| {
                rt.run(|| gpu_workload::selvedge(&dev, &d, &mut out, None))
                    .unwrap()
            })
        });
        group.bench_function(BenchmarkId::new("cuBLAS one stream", &id), |bench| {
            bench.iter(|| {
                pool.install(|| gpu_workload::direct(&d, &stream, &blas, &mut out))
                    .unwrap()
            })
        });
    }
    group.finish();
}

fn round_trip(c: &mut Criterion) {
    let rt = Runtime::builder().num_threads(threads()).build().unwrap();
    let Some(dev) = open(&rt) else { return };
    c.bench_function("gpu_round_trip", |bench| {
        bench.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let h = dev.spawn(|_| Ok(()));
                // On the device's runtime: the global one would add a
                // second runtime's injection to the figure.
                let started = rt.submit_delayed([h.dep()], Instant::now).join();
                total += started - start;
                h.join().unwrap();
            }
            total
        })
    });
}

fn chain(c: &mut Criterion) {
    const LINKS: usize = 1000;
    let rt = Runtime::builder().num_threads(threads()).build().unwrap();
    let Some(dev) = open(&rt) else { return };
    let buffers: Arc<Vec<Mutex<_>>> = Arc::new(
        dev.spawn(|s| {
            (0..=LINKS)
                .map(|_| Ok(Mutex::new(s.stream().alloc_zeros::<u32>(1)?)))
                .collect::<Result<Vec<_>, selvedge::gpu::GpuError>>()
        })
        .join()
        .unwrap(),
    );
    let mut group = c.benchmark_group("gpu_chain_1000");
    let run_chain = |on_device: bool| {
        let link = |i: usize, bufs: Arc<Vec<Mutex<_>>>| {
            move |s: &selvedge::gpu::GpuStream| {
                let from = bufs[i - 1].lock().unwrap();
                s.stream()
                    .memcpy_dtod(&*from, &mut *bufs[i].lock().unwrap())?;
                Ok(())
            }
        };
        let mut last: GpuHandle<()> = dev.spawn(|_| Ok(()));
        for i in 1..=LINKS {
            let f = link(i, buffers.clone());
            last = if on_device {
                dev.spawn_delayed([last.gpu_dep()], f)
            } else {
                dev.spawn_delayed([last.dep()], f)
            };
        }
        last.join().unwrap();
    };
    group.bench_function("selvedge gpu_dep (events on the device)", |bench| {
        bench.iter(|| run_chain(true))
    });
    group.bench_function("selvedge dep (through the host)", |bench| {
        bench.iter(|| run_chain(false))
    });
    let stream = dev.context().new_stream().unwrap();
    group.bench_function("one stream directly", |bench| {
        bench.iter(|| {
            for i in 1..=LINKS {
                let from = buffers[i - 1].lock().unwrap();
                stream
                    .memcpy_dtod(&*from, &mut *buffers[i].lock().unwrap())
                    .unwrap();
            }
            stream.synchronize().unwrap();
        })
    });
    group.finish();
}

criterion_group!(benches, batched_gemm, round_trip, chain);
criterion_main!(benches);

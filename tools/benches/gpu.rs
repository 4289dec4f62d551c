//! Criterion benchmarks of GPU tasks (feature `cuda`; without a GPU they
//! print that they skipped and measure nothing, or, with
//! `SELVEDGE_REQUIRE_GPU=1`, fail saying why).
//!
//! - `gpu_batched_gemm/<version>/<batch>x<size>`: the demonstration's two stages
//!   through selvedge (groups of the batch as GPU tasks on the workers'
//!   streams, stage 2 pipelined behind the callbacks) against the same
//!   GEMMs issued straight to cuBLAS on one stream, then stage 2 with rayon.
//! - `gpu_gemm/<version>/<type>/<batch>x<size>`: one strided-batched GEMM
//!   (f32, and bf16 with f32 accumulation) as a selvedge GPU task, spawned
//!   and joined (`dev.spawn(|s| gemm(s.blas(), ..)).join()`), against the same
//!   cuBLAS call on a stream of one's own followed by a stream
//!   synchronize: what a GPU task adds to a GEMM.
//! - `gpu_round_trip`: an empty GPU task, from `spawn` to a dependent CPU
//!   task starting (the callback's latency plus the enqueue); criterion's
//!   figures are means over its samples, so afterwards 10,000 more round
//!   trips are timed one by one and their percentiles (p50, p90, p99)
//!   printed.
//! - `gpu_chain_1000`: 1000 dependent tiny device copies: GPU-to-GPU
//!   dependencies (`gpu_dep`, the stream waits on events) against
//!   dependencies through the host (`dep`, each link after the previous
//!   callback), against the copies as GPU nodes of a graph (one chain,
//!   captured into a CUDA graph once, replayed with one launch a run), and
//!   against the same copies issued to one stream directly.
//!
//! Warm-ups of 1 s and measurements of 2 s, few sizes: the whole run is
//! meant to fit in a few minutes. Timings are host timestamps only (no
//! CUDA event timing).
//!
//! ```text
//! cargo bench -p selvedge-tools --features cuda --bench gpu
//! SELVEDGE_REQUIRE_GPU=1 cargo bench -p selvedge-tools --features cuda --bench gpu   # fail without a GPU
//! ```

use selvedge_tools::{gemm, gpu as gpu_workload};

use criterion::measurement::WallTime;
use criterion::{
    criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode,
    Throughput,
};
use selvedge::gpu::cudarc::cublas::{CudaBlas, Gemm};
use selvedge::gpu::cudarc::driver::{sys, DevicePtr};
use selvedge::gpu::cudarc::driver::{CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};
use selvedge::gpu::half::bf16;
use selvedge::gpu::{gemm, BatchedGemm, Device, GemmElement, GpuError, GpuHandle};
use selvedge::{Graph, GraphError, Runtime};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn threads() -> usize {
    std::env::var("SELVEDGE_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()))
}

/// Whether `SELVEDGE_REQUIRE_GPU=1` asks that a run without a GPU fail (as
/// in `tests/gpu/`).
fn gpu_required() -> bool {
    std::env::var_os("SELVEDGE_REQUIRE_GPU").is_some_and(|v| v == "1")
}

/// The device, or `None` (skipped) when there is none; exits with status
/// 1 instead under `SELVEDGE_REQUIRE_GPU=1`.
fn open(rt: &Runtime) -> Option<Device> {
    match Device::open_in(rt, 0) {
        Ok(dev) => Some(dev),
        Err(e) => {
            let why = gpu_workload::why_no_gpu(&e);
            if gpu_required() {
                eprintln!(
                    "gpu benchmarks: SELVEDGE_REQUIRE_GPU is set, but no GPU was used: {why}"
                );
                std::process::exit(1);
            }
            static SAID: std::sync::Once = std::sync::Once::new();
            SAID.call_once(|| eprintln!("gpu benchmarks: skipped: {why}"));
            None
        }
    }
}

/// The value, or a message naming `what` failed and exit status 1.
fn or_exit<T>(result: Result<T, GpuError>, what: &str) -> T {
    result.unwrap_or_else(|e| {
        eprintln!("gpu benchmarks: {what} failed: {e}");
        std::process::exit(1)
    })
}

fn graph_or_exit(result: Result<(), GraphError>, what: &str) {
    if let Err(e) = result {
        eprintln!("gpu benchmarks: {what} failed: {e}");
        std::process::exit(1)
    }
}

fn batched_gemm(c: &mut Criterion) {
    let rt = Runtime::builder().num_threads(threads()).build().unwrap();
    let Some(dev) = open(&rt) else { return };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads())
        .build()
        .unwrap();
    let stream = or_exit(dev.context().new_stream().map_err(Into::into), "a stream");
    let blas = or_exit(CudaBlas::new(stream.clone()).map_err(Into::into), "cuBLAS");
    let mut group = c.benchmark_group("gpu_batched_gemm");
    group.sample_size(30);
    for (batch, size) in [(64, 256), (256, 128), (64, 512)] {
        let input = gemm::Batch::new(batch, size, 0x5e1_7ed6e);
        let mut expected = input.output();
        gemm::serial(&input, &mut expected);
        let group_size = (batch / (4 * threads())).max(1);
        let d = or_exit(
            gpu_workload::DeviceBatch::upload(&dev, &input, group_size),
            "the upload",
        );
        let mut out = input.output();
        or_exit(
            rt.run(|| gpu_workload::selvedge(&dev, &d, &mut out, None)),
            "selvedge's batched GEMM",
        );
        assert!(gemm::max_relative_error(&expected, &out) < 1e-3);
        let mut out = input.output();
        or_exit(
            pool.install(|| gpu_workload::direct(&d, &stream, &blas, &mut out)),
            "the direct batched GEMM",
        );
        assert!(gemm::max_relative_error(&expected, &out) < 1e-3);
        group.throughput(Throughput::Elements(input.flops() as u64));
        let id = format!("{batch}x{size}");
        group.bench_function(BenchmarkId::new("selvedge", &id), |bench| {
            bench.iter(|| {
                or_exit(
                    rt.run(|| gpu_workload::selvedge(&dev, &d, &mut out, None)),
                    "selvedge's batched GEMM",
                )
            })
        });
        group.bench_function(BenchmarkId::new("cuBLAS one stream", &id), |bench| {
            bench.iter(|| {
                or_exit(
                    pool.install(|| gpu_workload::direct(&d, &stream, &blas, &mut out)),
                    "the direct batched GEMM",
                )
            })
        });
    }
    group.finish();
}

/// An element type of the GEMM benchmarks.
trait Element: GemmElement + DeviceRepr + ValidAsZeroBits + Send + Sync + 'static {
    const NAME: &'static str;
    fn from_f32(x: f32) -> Self;
    fn to_f32(self) -> f32;
    /// The largest error, relative to `max(|x|, 1)`, allowed against an
    /// f32 product of the same (rounded) inputs.
    const TOLERANCE: f32;
}

impl Element for f32 {
    const NAME: &'static str = "f32";
    fn from_f32(x: f32) -> Self {
        x
    }
    fn to_f32(self) -> f32 {
        self
    }
    const TOLERANCE: f32 = 1e-3;
}

impl Element for bf16 {
    const NAME: &'static str = "bf16";
    fn from_f32(x: f32) -> Self {
        bf16::from_f32(x)
    }
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    // The product is rounded to bf16 (8 significant bits: 2^-8 relative).
    const TOLERANCE: f32 = 1e-2;
}

/// `gpu_gemm/<version>/<type>/<batch>x<size>`: a GPU task doing one GEMM, spawned
/// and joined, against the same call on a stream of one's own and a
/// synchronize.
fn gemm_pair<T: Element>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    dev: &Device,
    stream: &Arc<CudaStream>,
    blas: &CudaBlas,
    batch: usize,
    size: usize,
) where
    CudaBlas: Gemm<T>,
{
    let g = BatchedGemm {
        batch,
        m: size,
        n: size,
        k: size,
    };
    let input = gemm::Batch::new(batch, size, 0x5e1_7ed6e);
    let a: Vec<T> = input.a.iter().map(|&x| T::from_f32(x)).collect();
    let b: Vec<T> = input.b.iter().map(|&x| T::from_f32(x)).collect();
    let upload = |host: &[T]| -> Result<CudaSlice<T>, GpuError> { Ok(stream.clone_htod(host)?) };
    let a = Arc::new(or_exit(upload(&a), "the upload"));
    let b = Arc::new(or_exit(upload(&b), "the upload"));
    let c = Arc::new(Mutex::new(or_exit(
        stream.alloc_zeros::<T>(g.c_len()).map_err(Into::into),
        "an allocation",
    )));
    or_exit(stream.synchronize().map_err(Into::into), "the upload");

    let on_task = || -> Result<(), GpuError> {
        // The task's clones go when it returns, before its GEMM is done;
        // these handles outlive every task (each is joined), so none is
        // the last (no `keep_alive` needed).
        let (a, b, c) = (a.clone(), b.clone(), c.clone());
        dev.spawn(move |s| {
            gemm(s.blas(), g, &*a, &*b, &mut *c.lock().unwrap())?;
            Ok(())
        })
        .join()
    };
    let direct = || -> Result<(), GpuError> {
        gemm(blas, g, &*a, &*b, &mut *c.lock().unwrap())?;
        stream.synchronize()?;
        Ok(())
    };

    // Both give the product (checked on the first and the last matrix
    // against the CPU kernel, from the same rounded inputs).
    let nn = size * size;
    let check = |who: &str| {
        let got = or_exit(
            stream.clone_dtoh(&*c.lock().unwrap()).map_err(Into::into),
            "the download",
        );
        for m in [0, batch - 1] {
            let rounded = |all: &[f32]| -> Vec<f32> {
                all[m * nn..][..nn]
                    .iter()
                    .map(|&x| T::from_f32(x).to_f32())
                    .collect()
            };
            let mut want = vec![0.0f32; nn];
            gemm::gemm_rows(&rounded(&input.a), &rounded(&input.b), &mut want, size);
            let err = got[m * nn..][..nn]
                .iter()
                .zip(&want)
                .map(|(&x, &y)| (x.to_f32() - y).abs() / y.abs().max(1.0))
                .fold(0.0, f32::max);
            assert!(
                err <= T::TOLERANCE,
                "gpu_gemm {} {batch}x{size} ({who}): matrix {m} is off by {err} (relative)",
                T::NAME
            );
        }
    };
    or_exit(
        stream
            .memset_zeros(&mut *c.lock().unwrap())
            .map_err(Into::into),
        "a memset",
    );
    or_exit(on_task(), "the GEMM task");
    check("GPU task");
    or_exit(
        stream
            .memset_zeros(&mut *c.lock().unwrap())
            .map_err(Into::into),
        "a memset",
    );
    or_exit(direct(), "the direct GEMM");
    check("direct");

    group.throughput(Throughput::Elements(g.flops() as u64));
    let id = format!("{}/{batch}x{size}", T::NAME);
    group.bench_function(BenchmarkId::new("selvedge GPU task", &id), |bench| {
        bench.iter(|| or_exit(on_task(), "the GEMM task"))
    });
    group.bench_function(BenchmarkId::new("cuBLAS own stream", &id), |bench| {
        bench.iter(|| or_exit(direct(), "the direct GEMM"))
    });
}

fn gemm_task(c: &mut Criterion) {
    let rt = Runtime::builder().num_threads(threads()).build().unwrap();
    let Some(dev) = open(&rt) else { return };
    let stream = or_exit(dev.context().new_stream().map_err(Into::into), "a stream");
    let blas = or_exit(CudaBlas::new(stream.clone()).map_err(Into::into), "cuBLAS");
    let mut group = c.benchmark_group("gpu_gemm");
    group.sample_size(30);
    for (batch, size) in [(64, 256), (256, 128), (16, 1024)] {
        gemm_pair::<f32>(&mut group, &dev, &stream, &blas, batch, size);
        gemm_pair::<bf16>(&mut group, &dev, &stream, &blas, batch, size);
    }
    group.finish();
}

fn round_trip(c: &mut Criterion) {
    let rt = Runtime::builder().num_threads(threads()).build().unwrap();
    let Some(dev) = open(&rt) else { return };
    // From `spawn` to the dependent CPU task starting.
    let one = || -> Duration {
        let start = Instant::now();
        let h = dev.spawn(|_| Ok(()));
        // On the device's runtime: the global one would add a second
        // runtime's injection to the figure.
        let started = rt.spawn_delayed([h.dep()], Instant::now).join();
        or_exit(h.join(), "an empty GPU task");
        started - start
    };
    c.bench_function("gpu_round_trip", |bench| {
        bench.iter_custom(|iters| (0..iters).map(|_| one()).sum())
    });
    const ROUND_TRIPS: usize = 10_000;
    let mut each: Vec<Duration> = (0..ROUND_TRIPS).map(|_| one()).collect();
    each.sort();
    let at = |q: f64| each[((ROUND_TRIPS - 1) as f64 * q).round() as usize].as_secs_f64() * 1e6;
    println!(
        "gpu_round_trip: {ROUND_TRIPS} more round trips, one at a time: p50 {:.1} us, p90 {:.1} us, p99 {:.1} us, max {:.1} us",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    );
}

fn chain(c: &mut Criterion) {
    const LINKS: usize = 1000;
    let rt = Runtime::builder().num_threads(threads()).build().unwrap();
    let Some(dev) = open(&rt) else { return };
    let buffers: Arc<Vec<Mutex<_>>> = Arc::new(or_exit(
        dev.spawn(|s| {
            (0..=LINKS)
                .map(|_| Ok(Mutex::new(s.stream().alloc_zeros::<u32>(1)?)))
                .collect::<Result<Vec<_>, GpuError>>()
        })
        .join(),
        "the chain's allocations",
    ));
    let mut group = c.benchmark_group("gpu_chain_1000");
    group.sample_size(10);
    group.sampling_mode(SamplingMode::Flat);
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
        or_exit(last.join(), "the chain");
    };
    group.bench_function("selvedge gpu_dep (events on the device)", |bench| {
        bench.iter(|| run_chain(true))
    });
    group.bench_function("selvedge dep (through the host)", |bench| {
        bench.iter(|| run_chain(false))
    });
    // The same copies as GPU nodes of a graph: one chain, captured into a
    // CUDA graph on the first run and replayed with one launch a run. Raw
    // copies between raw addresses: cudarc's event tracking would make the
    // captured stream wait on events recorded outside the capture.
    let addresses: Vec<u64> = or_exit(
        dev.spawn({
            let buffers = buffers.clone();
            move |s| {
                Ok(buffers
                    .iter()
                    .map(|b| b.lock().unwrap().device_ptr(s.stream()).0)
                    .collect())
            }
        })
        .join(),
        "the buffers' addresses",
    );
    let mut graph = Graph::new();
    let mut previous = None;
    for i in 1..=LINKS {
        let (from, to) = (addresses[i - 1], addresses[i]);
        let node = graph.gpu_node(&dev, move |s| {
            // SAFETY: both buffers hold one u32 and outlive the graph.
            unsafe { sys::cuMemcpyDtoDAsync_v2(to, from, 4, s.stream().cu_stream()) }.result()?;
            Ok(())
        });
        if let Some(p) = previous {
            graph.precede(p, node);
        }
        previous = Some(node);
    }
    graph_or_exit(
        rt.run_graph(&mut graph),
        "the graph's first run (its capture)",
    );
    group.bench_function("selvedge graph (one chain, replayed)", |bench| {
        bench.iter(|| graph_or_exit(rt.run_graph(&mut graph), "a run of the graph"))
    });
    drop(graph);
    let stream = or_exit(dev.context().new_stream().map_err(Into::into), "a stream");
    group.bench_function("one stream directly", |bench| {
        bench.iter(|| {
            for i in 1..=LINKS {
                let from = buffers[i - 1].lock().unwrap();
                or_exit(
                    stream
                        .memcpy_dtod(&*from, &mut *buffers[i].lock().unwrap())
                        .map_err(Into::into),
                    "a copy",
                );
            }
            or_exit(stream.synchronize().map_err(Into::into), "a synchronize");
        })
    });
    group.finish();
}

/// Short warm-ups and measurements: the whole run fits in a few minutes.
fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = batched_gemm, gemm_task, round_trip, chain
}
criterion_main!(benches);

//! The main demonstration: a nested, dataflow batched GEMM.
//!
//! A batch of `--batch` pairs of `--size` x `--size` single-precision
//! matrices. Stage 1 multiplies each pair: an outer parallel loop over the
//! batch, and in each product a BLIS-style loop nest
//! (`tools/src/blis.rs`): `B` packed once and shared by every
//! task, a parallel loop over blocks of rows of `C` and, nested in it, a
//! parallel loop over groups of its columns, down to a SIMD microkernel.
//! The loops split only when an idle worker asks, so a large batch is
//! shared out matrix by matrix and one large matrix (`--batch 1`) block
//! by block. Stage 2 (ReLU and row sums) starts on each matrix the moment
//! its product is done, through a `LoopPromise`: no barrier between the
//! stages. The code is in `tools/src/gemm.rs`, shared with `cargo
//! bench --bench gemm`.
//!
//! The program checks selvedge's and rayon's versions (each in a pool of
//! `--threads` threads: rayon nested, one `matrixmultiply` call per block
//! of `--block` rows, as a rayon user writes it; rayon running the same
//! loop nest as selvedge; and rayon with one task per matrix) and a
//! scheduler-free reference (`--threads` OS threads, each with an equal
//! contiguous share of the batch's rows, calling `matrixmultiply` or
//! running selvedge's loop nest on them) against the serial result, then
//! times them, the serial program (with `matrixmultiply`, and with the
//! loop nest) and the kernel alone (stage 1 on one thread with
//! `matrixmultiply`), taking turns sample by sample. It prints GFLOP/s (of
//! stage 1's flops, over the time of both stages), the medians, the share
//! of the parallel limit (the faster serial program's rate times
//! `--threads`), and the ratios.
//!
//! ```text
//! cargo run --release -p selvedge-tools --bin batched_gemm -- [--batch 64] [--size 256] [--block 64] [--threads 2] [--samples 7]
//! ```
//!
//! `--threads` defaults to `SELVEDGE_NUM_THREADS`, or 2. With
//! `SELVEDGE_PIN_THREADS=1` every pool's threads are pinned to CPUs
//! (selvedge's through `Builder::pin_threads`, rayon's and the plain
//! threads' the same way), which on virtual machines that wake a parked
//! thread onto a busy CPU takes most of the noise out of the figures.
//!
//! Built with `--features cuda` on a machine with a GPU, it runs the GPU
//! version instead (`tools/src/gpu.rs`): `Device::parallel_for`
//! over groups of the batch, each a strided-batched SGEMM on its worker's
//! stream whose callback fulfills the group's iteration of a
//! `LoopPromise`, and stage 2 pipelined behind it (`depends_on_each`); the
//! peer is the same GEMMs issued straight to cuBLAS on one stream. It says
//! which device it ran on, and why not the GPU. After the timed runs, one
//! more untimed run of selvedge's version records when each group's stage
//! 2 started and finished (host clock) and prints how far stage 2 ran
//! behind stage 1.
//!
//! ```text
//! cargo run --release -p selvedge-tools --features cuda --bin batched_gemm -- --batch 256 --size 256
//! ```
//!
//! With `--trace PATH` (built with `--features trace`) it also writes a
//! timeline of one run of selvedge's version to `PATH`, as Chrome trace
//! JSON that <https://ui.perfetto.dev> opens (stage 1's parts, stage 2's
//! iterations starting behind them, steals, parking, and arrows from each
//! fulfill to the iteration it releases), and measures what tracing costs:
//! the same version on a traced runtime, taking turns with the untraced
//! one. `scripts/trace-picture.sh` renders such a trace as an SVG picture.
//! On a GPU, `--trace` traces the GPU version's runtime (its figures are
//! then those of a traced runtime).
//!
//! ```text
//! cargo run --release -p selvedge-tools --features trace --bin batched_gemm -- --trace target/trace/gemm.json
//! ```
//!
//! With `SELVEDGE_REQUIRE_GPU=1`, a run that cannot use a GPU (no driver,
//! no cuBLAS, no device, or built without the `cuda` feature) fails with
//! exit status 1 and says why, instead of falling back to the CPU.

#[cfg(feature = "cuda")]
use selvedge_tools::gpu as gpu_workload;
use selvedge_tools::turns::interleaved_medians;
use selvedge_tools::{gemm, microkernel, pinning};

struct Args {
    batch: usize,
    size: usize,
    block: usize,
    threads: usize,
    samples: usize,
    /// `--trace PATH`: where to write a trace of one run.
    trace: Option<std::path::PathBuf>,
}

fn usage() -> ! {
    eprintln!(
        "usage: batched_gemm [--batch B] [--size N] [--block ROWS] [--threads T] [--samples S] [--trace PATH]"
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let threads = std::env::var("SELVEDGE_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let mut args = Args {
        batch: 64,
        size: 256,
        block: 64,
        threads,
        samples: 7,
        trace: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = |it: &mut std::iter::Skip<std::env::Args>| -> usize {
            match it.next().map(|v| v.parse::<usize>()) {
                Some(Ok(v)) if v > 0 => v,
                Some(_) => {
                    eprintln!("batched_gemm: {flag} needs a positive integer");
                    usage()
                }
                None => {
                    eprintln!("batched_gemm: {flag} needs a value");
                    usage()
                }
            }
        };
        match flag.as_str() {
            "--batch" => args.batch = value(&mut it),
            "--size" => args.size = value(&mut it),
            "--block" => args.block = value(&mut it),
            "--threads" => args.threads = value(&mut it),
            "--samples" => args.samples = value(&mut it),
            "--trace" => match it.next() {
                Some(path) => args.trace = Some(path.into()),
                None => {
                    eprintln!("batched_gemm: --trace needs a file name");
                    usage()
                }
            },
            "-h" | "--help" => usage(),
            other => {
                eprintln!("batched_gemm: unknown argument {other:?}");
                usage()
            }
        }
    }
    if args.trace.is_some() && cfg!(not(feature = "trace")) {
        eprintln!(
            "batched_gemm: --trace needs selvedge's `trace` feature: \
             cargo run --release -p selvedge-tools --features trace --bin batched_gemm -- --trace PATH"
        );
        std::process::exit(2);
    }
    args
}

/// Whether `SELVEDGE_REQUIRE_GPU=1` asks that a run without a GPU fail (as
/// in `tests/gpu/`).
fn gpu_required() -> bool {
    std::env::var_os("SELVEDGE_REQUIRE_GPU").is_some_and(|v| v == "1")
}

fn main() {
    let args = parse_args();
    let input = gemm::Batch::new(args.batch, args.size, 0x5e1_7ed6e);
    let gflops = |secs: f64| input.flops() / secs / 1e9;
    println!(
        "batched GEMM: {} x {}^3 f32, rayon's row blocks of {}, {} threads{}, median of {} runs",
        args.batch,
        args.size,
        args.block,
        args.threads,
        if pinning::requested() {
            " (every pool's pinned: SELVEDGE_PIN_THREADS=1)"
        } else {
            ""
        },
        args.samples
    );

    let mut expected = input.output();
    gemm::serial(&input, &mut expected);

    let builder = selvedge::Runtime::builder().num_threads(args.threads);
    // On a GPU the demonstration's own runtime is the traced one.
    #[cfg(all(feature = "cuda", feature = "trace"))]
    let builder = match &args.trace {
        Some(path) => builder.trace_to(path),
        None => builder,
    };
    let runtime = builder.build().unwrap_or_else(|e| {
        eprintln!("batched_gemm: cannot start the runtime: {e}");
        std::process::exit(1)
    });
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads)
        .start_handler(pinning::pin_current_thread)
        .build()
        .expect("rayon pool");

    #[cfg(feature = "cuda")]
    match selvedge::gpu::Device::open_in(&runtime, 0) {
        Ok(dev) => {
            if let Err(e) = on_gpu(&args, &input, &expected, &runtime, &pool, &dev) {
                eprintln!("batched_gemm: the GPU run failed: {e}");
                std::process::exit(1);
            }
            return;
        }
        Err(e) => {
            let why = gpu_workload::why_no_gpu(&e);
            if gpu_required() {
                eprintln!("batched_gemm: SELVEDGE_REQUIRE_GPU is set, but no GPU was used: {why}");
                std::process::exit(1);
            }
            println!("device: CPU (no GPU: {why})");
        }
    }
    #[cfg(not(feature = "cuda"))]
    {
        if gpu_required() {
            eprintln!(
                "batched_gemm: SELVEDGE_REQUIRE_GPU is set, but no GPU was used: built without the `cuda` feature"
            );
            std::process::exit(1);
        }
        println!("device: CPU (built without the `cuda` feature)");
    }

    println!(
        "microkernel of selvedge's loop nest: {}",
        microkernel::kernel().name
    );
    let mut out = input.output();
    runtime.run(|| gemm::selvedge(&input, &mut out));
    check("selvedge", &expected, &out);
    let mut out_rayon = input.output();
    pool.install(|| gemm::rayon(&input, &mut out_rayon, args.block));
    check("rayon", &expected, &out_rayon);

    let mut out_nest = input.output();
    pool.install(|| gemm::rayon_nest(&input, &mut out_nest));
    check("rayon, same nest", &expected, &out_nest);
    let mut out_flat = input.output();
    pool.install(|| gemm::rayon_per_matrix(&input, &mut out_flat));
    check("rayon per matrix", &expected, &out_flat);
    let mut out_static = input.output();
    gemm::static_threads(&input, &mut out_static, args.threads);
    check("static threads", &expected, &out_static);
    let mut out_static_nest = input.output();
    gemm::static_threads_nest(&input, &mut out_static_nest, args.threads);
    check("static threads, same nest", &expected, &out_static_nest);

    let [mut scratch, mut scratch2, mut scratch3] = std::array::from_fn(|_| input.output());
    let [kernel, serial, serial_nest, ours, theirs, theirs_nest, theirs_flat, ceiling, ceiling_nest] =
        interleaved_medians(
            args.samples,
            [
                &mut || gemm::serial_products(&input, &mut scratch),
                &mut || gemm::serial(&input, &mut scratch2),
                &mut || gemm::serial_nest(&input, &mut scratch3),
                &mut || runtime.run(|| gemm::selvedge(&input, &mut out)),
                &mut || pool.install(|| gemm::rayon(&input, &mut out_rayon, args.block)),
                &mut || pool.install(|| gemm::rayon_nest(&input, &mut out_nest)),
                &mut || pool.install(|| gemm::rayon_per_matrix(&input, &mut out_flat)),
                &mut || gemm::static_threads(&input, &mut out_static, args.threads),
                &mut || gemm::static_threads_nest(&input, &mut out_static_nest, args.threads),
            ],
        );
    // The faster serial program (both stages), times the threads.
    let limit = gflops(serial.min(serial_nest)) * args.threads as f64;

    println!(
        "{:<38} {:>8.2} ms  {:>6.1} GFLOP/s",
        "kernel, one thread (stage 1 only)",
        kernel * 1e3,
        gflops(kernel)
    );
    println!(
        "{:<38} {:>8}     {:>6.1} GFLOP/s",
        format!(
            "{}-thread limit (faster serial x {})",
            args.threads, args.threads
        ),
        "",
        limit
    );
    println!(
        "{:<38} {:>8.2} ms  {:>6.1} GFLOP/s",
        "serial, both stages",
        serial * 1e3,
        gflops(serial)
    );
    println!(
        "{:<38} {:>8.2} ms  {:>6.1} GFLOP/s",
        "serial, same nest as selvedge",
        serial_nest * 1e3,
        gflops(serial_nest)
    );
    for (name, secs) in [
        ("selvedge (nested, dataflow)", ours),
        ("rayon (nested, barrier)", theirs),
        ("rayon (same nest as selvedge)", theirs_nest),
        ("rayon (one task per matrix)", theirs_flat),
        ("static threads (no scheduler)", ceiling),
        ("static threads, same nest as selvedge", ceiling_nest),
    ] {
        println!(
            "{name:<38} {:>8.2} ms  {:>6.1} GFLOP/s  {:>5.1}% of the limit",
            secs * 1e3,
            gflops(secs),
            100.0 * gflops(secs) / limit
        );
    }
    println!(
        "selvedge / rayon time: {:.3} (nested), {:.3} (same nest), {:.3} (per matrix)   selvedge / static threads: {:.3} ({:.3} with the same nest)   selvedge's speedup over the same nest serially: {:.2}x   ideal (faster serial / {}): {:.2} ms",
        ours / theirs,
        ours / theirs_nest,
        ours / theirs_flat,
        ours / ceiling,
        ours / ceiling_nest,
        serial_nest / ours,
        args.threads,
        serial.min(serial_nest) / args.threads as f64 * 1e3
    );
    #[cfg(feature = "trace")]
    if let Some(path) = &args.trace {
        trace_run(&args, &input, &expected, &runtime, path);
    }
}

/// `--trace`: times selvedge's version on a traced runtime against the
/// untraced one (taking turns), then traces one more run on a fresh
/// runtime and writes it to `path`.
#[cfg(feature = "trace")]
fn trace_run(
    args: &Args,
    input: &gemm::Batch,
    expected: &gemm::Output,
    runtime: &selvedge::Runtime,
    path: &std::path::Path,
) {
    let traced = |to: &std::path::Path| {
        selvedge::Runtime::builder()
            .num_threads(args.threads)
            .trace_to(to)
            .build()
            .unwrap_or_else(|e| {
                eprintln!("batched_gemm: cannot start a traced runtime: {e}");
                std::process::exit(1)
            })
    };
    // The timed runtime's own trace (every sample) is not kept.
    let scratch_trace =
        std::env::temp_dir().join(format!("batched_gemm-overhead-{}.json", std::process::id()));
    let timed = traced(&scratch_trace);
    let (mut out, mut out_traced) = (input.output(), input.output());
    let [plain, with_trace] = interleaved_medians(
        args.samples,
        [
            &mut || runtime.run(|| gemm::selvedge(input, &mut out)),
            &mut || timed.run(|| gemm::selvedge(input, &mut out_traced)),
        ],
    );
    check("selvedge, traced", expected, &out_traced);
    drop(timed);
    let _ = std::fs::remove_file(&scratch_trace);
    println!(
        "tracing: selvedge {:.2} ms untraced, {:.2} ms traced: traced / untraced {:.3}",
        plain * 1e3,
        with_trace * 1e3,
        with_trace / plain
    );
    let rt = traced(path);
    let mut out = input.output();
    rt.run(|| gemm::selvedge(input, &mut out));
    check("selvedge, traced", expected, &out);
    if let Err(e) = rt.flush_trace() {
        eprintln!(
            "batched_gemm: cannot write the trace to {}: {e}",
            path.display()
        );
        std::process::exit(1);
    }
    std::mem::drop(rt);
    println!(
        "trace of one run written to {} (open it in https://ui.perfetto.dev)",
        path.display()
    );
}

/// The GPU version against the same GEMMs issued straight to cuBLAS.
#[cfg(feature = "cuda")]
fn on_gpu(
    args: &Args,
    input: &gemm::Batch,
    expected: &gemm::Output,
    runtime: &selvedge::Runtime,
    pool: &rayon::ThreadPool,
    dev: &selvedge::gpu::Device,
) -> Result<(), selvedge::gpu::GpuError> {
    use selvedge::gpu::cudarc::cublas::CudaBlas;
    println!("device: GPU {} ({})", dev.ordinal(), dev.name()?);
    let group_size = (args.batch / (4 * args.threads)).max(1);
    let batch = gpu_workload::DeviceBatch::upload(dev, input, group_size)?;
    let stream = dev.context().new_stream()?;
    let blas = CudaBlas::new(stream.clone())?;
    let (mut ours, mut theirs) = (input.output(), input.output());
    runtime.run(|| gpu_workload::selvedge(dev, &batch, &mut ours, None))?;
    check_with("selvedge on the GPU", expected, &ours, 1e-3);
    pool.install(|| gpu_workload::direct(&batch, &stream, &blas, &mut theirs))?;
    check_with("cuBLAS on one stream", expected, &theirs, 1e-3);
    let failure = std::cell::RefCell::new(None);
    let [mine, peer] = interleaved_medians(
        args.samples,
        [
            &mut || {
                if let Err(e) = runtime.run(|| gpu_workload::selvedge(dev, &batch, &mut ours, None))
                {
                    *failure.borrow_mut() = Some(e);
                }
            },
            &mut || {
                if let Err(e) =
                    pool.install(|| gpu_workload::direct(&batch, &stream, &blas, &mut theirs))
                {
                    *failure.borrow_mut() = Some(e);
                }
            },
        ],
    );
    if let Some(e) = failure.into_inner() {
        return Err(e);
    }
    let tflops = |secs: f64| input.flops() / secs / 1e12;
    println!(
        "groups of {group_size} matrices, one GPU task each, on {} streams",
        dev.num_streams()
    );
    for (name, secs) in [
        ("selvedge (nested, dataflow, callbacks)", mine),
        ("cuBLAS, one stream, then rayon", peer),
    ] {
        println!(
            "{name:<40} {:>8.3} ms  {:>6.2} TFLOP/s",
            secs * 1e3,
            tflops(secs)
        );
    }
    println!("selvedge / direct cuBLAS time: {:.3}", mine / peer);
    // One more run, untimed, that records when each group's stages ran.
    let timeline = gpu_workload::Timeline::new(batch.groups.len());
    runtime.run(|| gpu_workload::selvedge(dev, &batch, &mut ours, Some(&timeline)))?;
    check_with(
        "selvedge on the GPU (the timeline's run)",
        expected,
        &ours,
        1e-3,
    );
    match timeline.summary() {
        Some(summary) => println!("{summary}"),
        None => println!("timeline: not every group was recorded"),
    }
    Ok(())
}

fn check(name: &str, expected: &gemm::Output, got: &gemm::Output) {
    check_with(name, expected, got, 1e-4);
}

fn check_with(name: &str, expected: &gemm::Output, got: &gemm::Output, tolerance: f32) {
    let err = gemm::max_relative_error(expected, got);
    if err > tolerance {
        eprintln!("batched_gemm: {name} differs from the serial result (max relative error {err})");
        std::process::exit(1);
    }
    println!("{name}: matches the serial result (max relative error {err:.1e})");
}

//! `bench_report`'s GEMM section: the main demonstration's workload
//! (`tools/src/bin/batched_gemm.rs`, `tools/src/gemm.rs`) at a large
//! batch of small matrices and at one large matrix, each against rayon,
//! plain threads and the kernel alone, with the section's goals.

use std::time::Instant;

use selvedge_tools::workloads::Pools;

use crate::plot::Chart;

use crate::common::{median_min_max, met, progress, WARMUPS};
use selvedge_tools::{gemm, microkernel};

/// The shapes timed, as (batch, matrix size): the demonstration's default
/// and one large matrix at two sizes.
const SHAPES: [(usize, usize); 3] = [(64, 256), (1, 1920), (1, 1024)];
/// Rows per kernel call in rayon's nested version.
const BLOCK: usize = 64;

/// The implementations, in the order their samples are taken.
const NAMES: [&str; 10] = [
    "kernel alone, one thread (stage 1 only)",
    "serial",
    "serial, the same loop nest as selvedge",
    "selvedge, nested and dataflow",
    "selvedge on one worker",
    "rayon, nested with a barrier",
    "rayon, the same loop nest as selvedge",
    "rayon, one task per matrix",
    "plain threads, static split",
    "plain threads, static split, the same loop nest",
];
const KERNEL: usize = 0;
const SERIAL: usize = 1;
const SERIAL_NEST: usize = 2;
const SELVEDGE: usize = 3;
const ONE_WORKER: usize = 4;
const RAYON_NESTED: usize = 5;
const RAYON_NEST: usize = 6;
const STATIC_NEST: usize = 9;

/// One shape's medians (ms, by implementation), for the goals.
struct ShapeTimes {
    batch: usize,
    size: usize,
    medians: Vec<f64>,
}

/// Times every shape and prints a table per shape, then the goals.
pub fn gemm_section(pools: &Pools, samples: usize, md: bool, charts: &mut Vec<Chart>) {
    let one_worker = selvedge::Runtime::builder()
        .num_threads(1)
        .build()
        .expect("a runtime of one worker");
    println!("## Nested batched GEMM");
    println!();
    if md {
        println!(
            "The main demonstration's workload (`cargo run --release -p selvedge-tools \
             --bin batched_gemm`): a batch of products of f32 matrices, then a second stage \
             per matrix (ReLU and row sums). selvedge runs an outer loop over the batch \
             and, in each product, a BLIS-style loop nest (`tools/src/blis.rs`: \
             `B` packed once and shared, a loop over blocks of rows with a loop over \
             groups of columns nested in it; microkernel: {}), and starts each matrix's \
             second stage through a loop promise the moment its product is done. rayon \
             nested calls `matrixmultiply` on blocks of {BLOCK} rows (each call packs `B` \
             again) and runs the stages with a barrier between them; rayon with the same \
             nest runs selvedge's loops on rayon's scheduler. The kernel alone is \
             `matrixmultiply`'s stage 1 on one thread. The implementations' samples are taken in turn. `selvedge / it` is \
             selvedge's median time over this one's; every output is checked against \
             the serial result. The limit is {threads} times the rate of the faster \
             serial program (with `matrixmultiply` or with the loop nest, both stages). \
             The nest's own speedup (one worker over {threads}) and plain threads \
             running it are what its scaling is read against. Unpinned threads \
             that the system wakes onto a busy CPU start late: `SELVEDGE_PIN_THREADS=1` \
             takes that out.",
            microkernel::kernel().name,
            threads = pools.threads,
        );
        println!();
    }
    let shapes: Vec<ShapeTimes> = SHAPES
        .iter()
        .map(|&(batch, size)| shape(pools, &one_worker, (batch, size), samples, md, charts))
        .collect();
    goals(&shapes, pools.threads);
}

/// Times one shape and prints its table.
fn shape(
    pools: &Pools,
    one_worker: &selvedge::Runtime,
    (batch, size): (usize, usize),
    samples: usize,
    md: bool,
    charts: &mut Vec<Chart>,
) -> ShapeTimes {
    progress(
        md,
        &format!("timing the nested batched GEMM, {batch} x {size}^3"),
    );
    let input = gemm::Batch::new(batch, size, 0x5e1_7ed6e);
    let mut expected = input.output();
    gemm::serial(&input, &mut expected);
    let threads = pools.threads;
    let mut outs: [gemm::Output; 10] = std::array::from_fn(|_| input.output());
    let [kernel, serial, serial_nest, ours, ours_one, nested, same_nest, flat, fixed, fixed_nest] =
        &mut outs;
    let mut runs: [&mut dyn FnMut(); 10] = [
        &mut || gemm::serial_products(&input, kernel),
        &mut || gemm::serial(&input, serial),
        &mut || gemm::serial_nest(&input, serial_nest),
        &mut || pools.selvedge.run(|| gemm::selvedge(&input, ours)),
        &mut || one_worker.run(|| gemm::selvedge(&input, ours_one)),
        &mut || pools.rayon.install(|| gemm::rayon(&input, nested, BLOCK)),
        &mut || pools.rayon.install(|| gemm::rayon_nest(&input, same_nest)),
        &mut || pools.rayon.install(|| gemm::rayon_per_matrix(&input, flat)),
        &mut || gemm::static_threads(&input, fixed, threads),
        &mut || gemm::static_threads_nest(&input, fixed_nest, threads),
    ];
    for run in runs.iter_mut() {
        for _ in 0..WARMUPS {
            run();
        }
    }
    let mut ms: Vec<Vec<f64>> = vec![Vec::with_capacity(samples); runs.len()];
    for _ in 0..samples {
        for (k, run) in runs.iter_mut().enumerate() {
            let t = Instant::now();
            run();
            ms[k].push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    // The kernel alone computes stage 1 only: no row sums to compare.
    for (name, out) in NAMES.iter().zip(&outs).skip(1) {
        let err = gemm::max_relative_error(&expected, out);
        assert!(
            err < 1e-4,
            "{name}: relative error {err} against the serial result"
        );
    }
    let medians: Vec<(f64, f64, f64)> = ms.into_iter().map(median_min_max).collect();
    let gflops = |ms: f64| input.flops() / (ms / 1e3) / 1e9;
    // The faster serial program (both stages), times the threads.
    let limit = gflops(medians[SERIAL].0.min(medians[SERIAL_NEST].0)) * threads as f64;
    let ours_ms = medians[SELVEDGE].0;
    println!("### {batch} x {size}^3 f32");
    println!();
    println!(
        "| implementation | median ms | min | max | GFLOP/s | of the {threads}-thread limit | selvedge / it |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let title = format!("Nested batched GEMM, {batch} x {size}^3");
    let mut chart = Chart::new(&title, "ms");
    for (k, (name, &(median, min, max))) in NAMES.iter().zip(&medians).enumerate() {
        println!(
            "| {name} | {median:.2} | {min:.2} | {max:.2} | {:.1} | {:.0}% | {:.2}x |",
            gflops(median),
            100.0 * gflops(median) / limit,
            ours_ms / median
        );
        let note = if k == SELVEDGE {
            String::new()
        } else {
            format!("selvedge / it = {:.2}x", ours_ms / median)
        };
        chart.row(name, Some(median), note);
    }
    println!();
    charts.push(chart);
    ShapeTimes {
        batch,
        size,
        medians: medians.iter().map(|m| m.0).collect(),
    }
}

/// The section's goals. On one large matrix: selvedge at 95% of the
/// linear speedup over its own time on one worker, and on one worker
/// within 3% of the same loop nest run serially (what the scheduler costs
/// there). At every shape: no slower than rayon nested (a rayon user's
/// version) nor than rayon running the same loop nest (the same kernel
/// and packing, so the schedulers alone differ).
fn goals(shapes: &[ShapeTimes], threads: usize) {
    println!("| target | measured | goal | |");
    println!("|---|---:|---:|---|");
    for s in shapes {
        let (batch, size, m) = (s.batch, s.size, &s.medians);
        let shape = format!("{batch} x {size}^3");
        if batch == 1 {
            let speedup = m[ONE_WORKER] / m[SELVEDGE];
            let goal = 0.95 * threads as f64;
            println!(
                "| {shape}: selvedge on one worker / selvedge on {threads} | {speedup:.2}x | ≥ {goal:.2}x | {} |",
                met(speedup >= goal)
            );
            println!(
                "| {shape}: plain threads with the same nest, static split / selvedge | {:.2}x | (reported) | |",
                m[STATIC_NEST] / m[SELVEDGE]
            );
            println!(
                "| {shape}: kernel alone on one thread (stage 1 only) / selvedge on {threads} (both stages) | {:.2}x | (reported) | |",
                m[KERNEL] / m[SELVEDGE]
            );
            let one = m[ONE_WORKER] / m[SERIAL_NEST];
            println!(
                "| {shape}: selvedge on one worker / the same nest serially | {one:.3} | ≤ 1.03 | {} |",
                met(one <= 1.03)
            );
            println!(
                "| {shape}: selvedge on one worker / serial with `matrixmultiply` | {:.3} | (reported) | |",
                m[ONE_WORKER] / m[SERIAL]
            );
        }
        let vs_rayon = m[SELVEDGE] / m[RAYON_NESTED];
        println!(
            "| {shape}: selvedge / rayon nested | {vs_rayon:.2}x | ≤ 1.00x | {} |",
            met(vs_rayon <= 1.0)
        );
        let vs_same = m[SELVEDGE] / m[RAYON_NEST];
        println!(
            "| {shape}: selvedge / rayon with the same loop nest | {vs_same:.2}x | ≤ 1.00x | {} |",
            met(vs_same <= 1.0)
        );
    }
    println!();
}

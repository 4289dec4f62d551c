//! Benchmark report: selvedge against rayon, chili and a serial baseline.
//!
//! Runs every workload of Weave's suite used in `benches/scheduler.rs` (fib,
//! DFS, N-Queens, bouncing producer-consumer, single producer / many
//! consumers) with every implementation, each in a pool of the same number of
//! threads built once up front. Each implementation is first checked against
//! the serial result, run twice to warm up, then timed `--samples` times
//! (one full workload per sample); the median is reported, in milliseconds.
//!
//! ```text
//! cargo run --release --example bench_report -- [--samples N] [--threads N]
//! ```
//!
//! The thread count defaults to `SELVEDGE_BENCH_THREADS`, or 2. For the
//! producer-consumer workloads the efficiency column is
//! `serial / (threads * parallel)`: 100% means perfect use of every thread.

#[path = "../benches/workloads/mod.rs"]
mod workloads;

use std::hint::black_box;
use std::time::{Duration, Instant};

use workloads::{Kind, Pools, Workload};

const WARMUPS: usize = 2;

struct Args {
    samples: usize,
    threads: usize,
}

fn parse_args() -> Args {
    let mut args = Args {
        samples: 11,
        threads: workloads::threads_from_env(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let (key, inline) = match arg.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        let mut value = |name: &str| -> usize {
            inline
                .clone()
                .or_else(|| it.next())
                .and_then(|v| v.parse().ok())
                .filter(|&n| n > 0)
                .unwrap_or_else(|| usage(&format!("{name} needs a positive integer")))
        };
        match key.as_str() {
            "--samples" => args.samples = value("--samples"),
            "--threads" => args.threads = value("--threads"),
            "--bench" => {} // passed by `cargo bench`-style runners; ignore
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument `{other}`")),
        }
    }
    args
}

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("error: {msg}");
    }
    eprintln!("usage: bench_report [--samples N] [--threads N]");
    std::process::exit(if msg.is_empty() { 0 } else { 2 })
}

/// Timings of one implementation, in milliseconds.
struct Timing {
    name: &'static str,
    kind: Kind,
    median: f64,
    min: f64,
    max: f64,
}

fn measure(pools: &Pools, run: fn(&Pools) -> u64, samples: usize) -> (f64, f64, f64) {
    for _ in 0..WARMUPS {
        black_box(run(pools));
    }
    let mut ms: Vec<f64> = (0..samples)
        .map(|_| {
            let start = Instant::now();
            black_box(run(pools));
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    ms.sort_by(f64::total_cmp);
    let median = if ms.len() % 2 == 1 {
        ms[ms.len() / 2]
    } else {
        (ms[ms.len() / 2 - 1] + ms[ms.len() / 2]) / 2.0
    };
    (median, ms[0], ms[ms.len() - 1])
}

fn ms(t: Option<f64>) -> String {
    t.map_or_else(|| "—".to_string(), |t| format!("{t:.2}"))
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}x", a / b),
        _ => "—".to_string(),
    }
}

fn efficiency(serial: Option<f64>, parallel: Option<f64>, threads: usize) -> String {
    match (serial, parallel) {
        (Some(s), Some(p)) => format!("{:.0}%", 100.0 * s / (threads as f64 * p)),
        _ => "—".to_string(),
    }
}

/// Median time of the first implementation of `kind`.
fn of(timings: &[Timing], kind: Kind) -> Option<f64> {
    timings.iter().find(|t| t.kind == kind).map(|t| t.median)
}

/// Microseconds per call of the consumers' busy work, measured serially.
fn consumer_us() -> f64 {
    const CALLS: u32 = 20_000;
    black_box(workloads::consume(workloads::CONSUMER_ROUNDS));
    let start = Instant::now();
    for _ in 0..CALLS {
        black_box(workloads::consume(black_box(workloads::CONSUMER_ROUNDS)));
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(CALLS)
}

fn main() {
    let args = parse_args();
    let started = Instant::now();
    let pools = Pools::new(args.threads);
    let threads = pools.threads;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());

    println!("# selvedge benchmark report");
    println!();
    println!("- threads per pool: {threads} (selvedge, rayon and chili each)");
    println!("- available_parallelism: {cores}");
    println!(
        "- samples: {} per implementation after {WARMUPS} warm-ups; median shown, in ms",
        args.samples
    );
    println!(
        "- consumer task (bpc, spc): {} rounds of iterative fib(30) = {:.2} µs each, serially",
        workloads::CONSUMER_ROUNDS,
        consumer_us()
    );
    println!();

    let all: Vec<Workload> = workloads::all();
    let mut results: Vec<(&Workload, Vec<Timing>)> = Vec::new();
    for w in &all {
        w.verify(&pools);
        let timings = w
            .impls
            .iter()
            .map(|imp| {
                let (median, min, max) = measure(&pools, imp.run, args.samples);
                Timing {
                    name: imp.name,
                    kind: imp.kind,
                    median,
                    min,
                    max,
                }
            })
            .collect();
        results.push((w, timings));
    }

    println!("## Summary");
    println!();
    println!(
        "| workload | serial | selvedge spawn | selvedge join/scope | rayon | chili \
         | spawn / rayon | join/scope / rayon | spawn / serial | join/scope / serial \
         | efficiency (spawn, join/scope) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (w, t) in &results {
        let serial = of(t, Kind::Serial);
        let spawn = of(t, Kind::SelvedgeSpawn);
        let structured = of(t, Kind::SelvedgeStructured);
        let rayon = of(t, Kind::Rayon);
        let eff = if w.producer_consumer {
            format!(
                "{}, {}",
                efficiency(serial, spawn, threads),
                efficiency(serial, structured, threads)
            )
        } else {
            "—".to_string()
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            w.title,
            ms(serial),
            ms(spawn),
            ms(structured),
            ms(rayon),
            ms(of(t, Kind::Chili)),
            ratio(spawn, rayon),
            ratio(structured, rayon),
            ratio(spawn, serial),
            ratio(structured, serial),
            eff,
        );
    }
    println!();
    println!(
        "Ratios are time over time: below 1.00x the first is faster. \"rayon\" is the \
         reference rayon version (join for fib, scope elsewhere). Efficiency = \
         serial / ({threads} × parallel)."
    );
    println!();

    println!("## Every implementation");
    println!();
    println!(
        "| workload | implementation | median | min | max | vs serial | vs rayon | efficiency |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for (w, t) in &results {
        let serial = of(t, Kind::Serial);
        let rayon = of(t, Kind::Rayon);
        for x in t {
            let parallel = x.kind != Kind::Serial;
            println!(
                "| {} | {} | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
                w.group,
                x.name,
                x.median,
                x.min,
                x.max,
                ratio(Some(x.median), serial),
                ratio(Some(x.median), rayon),
                if parallel {
                    efficiency(serial, Some(x.median), threads)
                } else {
                    "—".into()
                },
            );
        }
    }
    println!();
    let total: Duration = started.elapsed();
    println!("(report took {:.1} s)", total.as_secs_f64());
}

//! What the sections of `bench_report` share: timing an implementation,
//! the cells of its row, medians, goal verdicts and the progress lines of
//! `--markdown` mode.

use std::hint::black_box;
use std::time::{Duration, Instant};

use selvedge_tools::workloads;
use selvedge_tools::workloads::{Kind, Pools, Workload};

/// Untimed runs of each implementation before its samples.
pub const WARMUPS: usize = 2;

/// The median, minimum and maximum of `ms` (not empty).
pub fn median_min_max(mut ms: Vec<f64>) -> (f64, f64, f64) {
    ms.sort_by(f64::total_cmp);
    let median = if ms.len() % 2 == 1 {
        ms[ms.len() / 2]
    } else {
        (ms[ms.len() / 2 - 1] + ms[ms.len() / 2]) / 2.0
    };
    (median, ms[0], ms[ms.len() - 1])
}

/// How a goal's row ends: met or missed.
pub fn met(ok: bool) -> &'static str {
    if ok {
        "**met**"
    } else {
        "**missed**"
    }
}

/// In `--markdown` mode, says on stderr what is being timed (stdout is the
/// document); in the normal mode, nothing.
pub fn progress(md: bool, what: &str) {
    if md {
        eprintln!("bench_report: {what}");
    }
}

/// Timings of one implementation, in milliseconds.
pub struct Timing {
    pub name: &'static str,
    pub kind: Kind,
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// Warms up, then takes `samples` samples of `once` (one run of a
/// workload, returning its time in ms). A sample is the mean of as many
/// back-to-back runs as last `min_sample_ms` (judged from the last warm-up;
/// one run when 0), so that short workloads are not timed one noisy
/// millisecond at a time. Returns the median, min and max per run.
pub fn sample(
    samples: usize,
    min_sample_ms: f64,
    mut once: impl FnMut() -> f64,
) -> (f64, f64, f64) {
    let mut last = 0.0;
    for _ in 0..WARMUPS {
        last = once();
    }
    let reps = if last > 0.0 {
        ((min_sample_ms / last).ceil() as usize).max(1)
    } else {
        1
    };
    let ms: Vec<f64> = (0..samples)
        .map(|_| (0..reps).map(|_| once()).sum::<f64>() / reps as f64)
        .collect();
    median_min_max(ms)
}

pub fn measure(
    pools: &Pools,
    run: fn(&Pools) -> u64,
    samples: usize,
    min_sample_ms: f64,
) -> (f64, f64, f64) {
    sample(samples, min_sample_ms, || {
        let start = Instant::now();
        black_box(run(pools));
        start.elapsed().as_secs_f64() * 1e3
    })
}

/// Like [`measure`], for an implementation that times part of its run.
pub fn measure_phase(
    pools: &Pools,
    run: fn(&Pools) -> (u64, Duration),
    samples: usize,
    min_sample_ms: f64,
) -> (f64, f64, f64) {
    sample(samples, min_sample_ms, || {
        black_box(run(pools)).1.as_secs_f64() * 1e3
    })
}

pub fn ms(t: Option<f64>) -> String {
    t.map_or_else(|| "—".to_string(), |t| format!("{t:.2}"))
}

pub fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}x", a / b),
        _ => "—".to_string(),
    }
}

/// A wavefront table row's first cells, up to its efficiency: `| name |
/// median | min | max | vs serial | efficiency |`.
pub fn timing_cells(x: &Timing, serial: Option<f64>, threads: usize) -> String {
    let efficiency = if x.kind == Kind::Serial {
        "—".into()
    } else {
        efficiency(serial, Some(x.median), threads)
    };
    format!(
        "| {} | {:.2} | {:.2} | {:.2} | {} | {efficiency} |",
        x.name,
        x.median,
        x.min,
        x.max,
        ratio(Some(x.median), serial),
    )
}

pub fn efficiency(serial: Option<f64>, parallel: Option<f64>, threads: usize) -> String {
    match (serial, parallel) {
        (Some(s), Some(p)) => format!("{:.0}%", 100.0 * s / (threads as f64 * p)),
        _ => "—".to_string(),
    }
}

/// Median time of the first implementation of `kind`.
pub fn of(timings: &[Timing], kind: Kind) -> Option<f64> {
    timings.iter().find(|t| t.kind == kind).map(|t| t.median)
}

/// Microseconds per call of the consumers' busy work, measured serially.
pub fn consumer_us() -> f64 {
    const CALLS: u32 = 20_000;
    black_box(workloads::consume(workloads::CONSUMER_ROUNDS));
    let start = Instant::now();
    for _ in 0..CALLS {
        black_box(workloads::consume(black_box(workloads::CONSUMER_ROUNDS)));
    }
    start.elapsed().as_secs_f64() * 1e6 / f64::from(CALLS)
}

/// Times every implementation of `w` (after checking them against serial).
pub fn time_workload(pools: &Pools, w: &Workload, samples: usize) -> Vec<Timing> {
    w.verify(pools);
    time_impls(pools, w, samples, 0.0)
}

pub fn time_impls(pools: &Pools, w: &Workload, samples: usize, min_sample_ms: f64) -> Vec<Timing> {
    w.impls
        .iter()
        .map(|imp| {
            let (median, min, max) = measure(pools, imp.run, samples, min_sample_ms);
            Timing {
                name: imp.name,
                kind: imp.kind,
                median,
                min,
                max,
            }
        })
        .collect()
}

/// Median time of the implementation called `name`.
pub fn named(timings: &[Timing], name: &str) -> Option<f64> {
    timings.iter().find(|t| t.name == name).map(|t| t.median)
}

/// A chart's reference for a ratio of `x`: `label` and the median of the
/// implementation called `reference`, none where `x` is that one.
pub fn vs<'a>(x: &Timing, t: &[Timing], label: &'a str, reference: &str) -> (&'a str, Option<f64>) {
    (label, named(t, reference).filter(|_| x.name != reference))
}

/// Milliseconds per run to nanoseconds per unit.
pub fn ns_per(ms: Option<f64>, units: u64) -> Option<f64> {
    ms.map(|ms| ms * 1e6 / units as f64)
}

pub fn ns(t: Option<f64>) -> String {
    t.map_or_else(|| "—".to_string(), |t| format!("{t:.0}"))
}

/// Nanoseconds with two decimals (per-iteration times are around 1 ns).
pub fn ns_f(t: Option<f64>) -> String {
    t.map_or_else(|| "—".to_string(), |t| format!("{t:.2}"))
}

//! Samples taken in turn: each implementation of a workload timed one
//! sample after another, after a pause, so that a slow spell of the machine
//! hits them all alike; and the probe of how much of the CPUs the process gets.

use std::hint::black_box;
use std::time::{Duration, Instant};

use selvedge_tools::loops;
use selvedge_tools::workloads::{Kind, Pools};

use crate::common::{median_min_max, Timing, WARMUPS};
use crate::STATS_RUNS;

/// A run of a workload on the pools: its checksum and the time of its computation.
pub type TimedRun = fn(&Pools) -> (u64, Duration);

/// The pause before each sample of the loops section.
pub const SETTLE: Duration = Duration::from_millis(5);

/// Units of `loops::pipe_work` per share of the capacity probe (about 2 ms).
pub const CAPACITY_UNITS: u32 = 50;
/// Solo/parallel pairs per capacity probe.
pub const CAPACITY_PAIRS: usize = 7;

/// How many CPUs' worth this process gets right now, without any
/// scheduler: the median speedup of `threads` shares of a compute-only
/// kernel run on `threads` plain threads over the same shares run one
/// after the other on this thread. On a quiet machine it is close to
/// `threads`; on this 2-vCPU VM it drops towards 1 for seconds at a time.
pub fn capacity(threads: usize) -> f64 {
    let share = || {
        black_box(loops::pipe_work(black_box(1), CAPACITY_UNITS));
    };
    let ratios: Vec<f64> = (0..CAPACITY_PAIRS)
        .map(|_| {
            let start = Instant::now();
            (0..threads).for_each(|_| share());
            let solo = start.elapsed().as_secs_f64();
            let start = Instant::now();
            std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(share);
                }
            });
            solo / start.elapsed().as_secs_f64()
        })
        .collect();
    median_min_max(ratios).0
}

/// Like [`measure_phase`](crate::common::measure_phase) for several implementations at once, their
/// samples interleaved (sample 1 of each, then sample 2 of each, ...), so
/// that a slow spell of the machine (this VM's speed varies up to 2x for
/// tens of milliseconds at a time) hits every implementation alike instead
/// of skewing one of them. Each is warmed up first; a sample is the mean
/// of as many back-to-back runs as last `min_sample_ms`. Before each sample
/// the thread sleeps [`SETTLE`], so that the pool used just before has
/// finished spinning down (its idle workers would otherwise compete for
/// the 2 CPUs with the next implementation's) and every sample starts from
/// parked workers.
pub fn measure_interleaved(
    pools: &Pools,
    runs: &[TimedRun],
    samples: usize,
    min_sample_ms: f64,
) -> Vec<(f64, f64, f64)> {
    let mut once: Vec<Box<dyn FnMut() -> f64 + '_>> = runs
        .iter()
        .map(|&run| {
            Box::new(move || black_box(run(pools)).1.as_secs_f64() * 1e3)
                as Box<dyn FnMut() -> f64 + '_>
        })
        .collect();
    interleaved(&mut once, samples, min_sample_ms)
}

/// Each implementation's timing, from its name and kind and its (median,
/// min, max), in the same order.
pub fn timings_of(
    impls: impl IntoIterator<Item = (&'static str, Kind)>,
    measured: Vec<(f64, f64, f64)>,
) -> Vec<Timing> {
    impls
        .into_iter()
        .zip(measured)
        .map(|((name, kind), (median, min, max))| Timing {
            name,
            kind,
            median,
            min,
            max,
        })
        .collect()
}

/// The interleaving of [`measure_interleaved`] for any runs, each returning
/// its own time in ms: warm-ups, then `samples` rounds of one sample of
/// each (after [`SETTLE`]), a sample being the mean of as many back-to-back
/// runs as last `min_sample_ms`. Returns each one's median, min and max.
pub fn interleaved(
    runs: &mut [Box<dyn FnMut() -> f64 + '_>],
    samples: usize,
    min_sample_ms: f64,
) -> Vec<(f64, f64, f64)> {
    let reps: Vec<usize> = runs
        .iter_mut()
        .map(|run| {
            let mut last = 0.0;
            for _ in 0..WARMUPS {
                last = run();
            }
            if last > 0.0 {
                ((min_sample_ms / last).ceil() as usize).max(1)
            } else {
                1
            }
        })
        .collect();
    let mut ms: Vec<Vec<f64>> = vec![Vec::with_capacity(samples); runs.len()];
    for _ in 0..samples {
        for (k, run) in runs.iter_mut().enumerate() {
            std::thread::sleep(SETTLE);
            let t = (0..reps[k]).map(|_| run()).sum::<f64>() / reps[k] as f64;
            ms[k].push(t);
        }
    }
    ms.into_iter().map(median_min_max).collect()
}

/// The scheduler counters selvedge's runtime gained per run of `run`
/// (averaged over [`STATS_RUNS`] runs), as
/// (loop splits, steal requests sent, answered, declined, tasks stolen,
/// tasks run, parks).
pub fn selvedge_counters(pools: &Pools, run: TimedRun) -> [f64; 7] {
    let total = |pools: &Pools| {
        let t = pools.selvedge.stats().total();
        [
            t.loop_splits,
            t.steal_requests_sent,
            t.steal_requests_answered,
            t.steal_requests_declined,
            t.tasks_stolen,
            t.tasks_run,
            t.parks,
        ]
    };
    let before = total(pools);
    for _ in 0..STATS_RUNS {
        black_box(run(pools));
    }
    let after = total(pools);
    std::array::from_fn(|k| (after[k] - before[k]) as f64 / f64::from(STATS_RUNS))
}

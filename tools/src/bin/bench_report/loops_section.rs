//! The report's parallel-loop section.

use selvedge_tools::loops;
use selvedge_tools::workloads::{Kind, Pools};

use crate::common::{efficiency, met, ms, named, ns_f, ns_per, progress, ratio, vs, Timing};
use crate::interleaved::{
    capacity, measure_interleaved, selvedge_counters, timings_of, CAPACITY_PAIRS, CAPACITY_UNITS,
    SETTLE,
};
use crate::plot::{ratios, Chart};
use crate::{LOOPS_MIN_SAMPLE_MS, STATS_RUNS};

/// The parallel-loop workloads: every implementation, the
/// selvedge / rayon ratios against the targets, and selvedge's counters.
pub fn loops_section(pools: &Pools, samples: usize, md: bool, charts: &mut Vec<Chart>) {
    use loops::Target;

    let threads = pools.threads;
    let all = loops::all();
    let mut probes = Vec::new();
    let results: Vec<(&loops::LoopWorkload, Vec<Timing>)> = all
        .iter()
        .map(|w| {
            progress(md, &format!("timing {}", w.title));
            w.verify(pools);
            probes.push(capacity(threads));
            let runs: Vec<_> = w.impls.iter().map(|imp| imp.run).collect();
            let timings = timings_of(
                w.impls.iter().map(|imp| (imp.name, imp.kind)),
                measure_interleaved(pools, &runs, samples, LOOPS_MIN_SAMPLE_MS),
            );
            (w, timings)
        })
        .collect();

    println!("## Parallel loops");
    println!();
    if md {
        println!(
            "The cost of a loop iteration (an empty loop, a sum, a loop nested in a loop), \
             four data-parallel kernels of Weave's suite (histogram, log-sum-exp, \
             Black-Scholes, transposition), and a two-loop pipeline (`depends_on_each`) \
             against the same two loops with a barrier between them."
        );
        println!();
    }
    println!(
        "Each run is one whole workload; only its computation is timed (the whole \
         `rt.run` / `pool.install` call; inputs built once, outputs reused, checksums \
         taken after the clock). A sample is one run, or for runs under \
         {LOOPS_MIN_SAMPLE_MS} ms the mean of back-to-back runs lasting at least that; \
         the samples of a workload's implementations are interleaved (one of each in \
         turn, after a {} ms pause so that every sample starts from parked workers). Median, min and max over the samples in ms per run, per-unit times \
         from the median. Every implementation was checked against the serial one.",
        SETTLE.as_millis()
    );
    println!();
    let end_probe = capacity(threads);
    for ((w, _), probe) in results.iter().zip(&probes) {
        println!(
            "- `{}`: {} (capacity probe before it: {probe:.2}x)",
            w.group, w.title
        );
    }
    println!(
        "- capacity probe after the last workload: {end_probe:.2}x. The probe runs a \
         compute-only kernel ({CAPACITY_UNITS} units of `pipe_work`) {threads} times on one \
         thread, then once on each of {threads} plain threads, and gives the median \
         speedup of {CAPACITY_PAIRS} such pairs: {threads}.00x when this process gets \
         {threads} whole CPUs, less when the machine (or its host) is busy."
    );
    println!();
    if md {
        println!(
            "Every implementation of every loop workload: the median, fastest and slowest \
             sample in ms, the median per unit of work in ns (an iteration, a matrix cell or \
             element, an option, a pipeline item), and the median over the serial and the \
             rayon peer's medians (for the pipeline the rayon barrier version). Efficiency \
             is serial / ({threads} × parallel)."
        );
        println!();
    }
    println!(
        "| workload | implementation | median | min | max | ns per unit | vs serial \
         | vs rayon | efficiency |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut chart = Chart::new("Parallel loops: every implementation", "ms");
    for (w, t) in &results {
        let serial = named(t, loops::SERIAL);
        let rayon = named(t, w.rayon);
        let row = chart.group(w.group);
        for x in t {
            let refs = [
                vs(x, t, "serial", loops::SERIAL),
                vs(x, t, "rayon", w.rayon),
            ];
            row.bar(x.name, Some(x.median), ratios(Some(x.median), &refs));
            let parallel = x.kind != Kind::Serial;
            println!(
                "| {} | {} | {:.2} | {:.2} | {:.2} | {} {} | {} | {} | {} |",
                w.group,
                x.name,
                x.median,
                x.min,
                x.max,
                ns_f(ns_per(Some(x.median), w.units)),
                w.unit,
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
    println!("Efficiency = serial / ({threads} × parallel).");
    println!();
    charts.push(chart);

    let title = format!("Targets (loops, {threads} threads)");
    println!("### {title}");
    println!();
    if md {
        println!(
            "The project's goal for each loop workload and whether this run met it: \
             selvedge's version no slower than rayon's (per iteration for the overhead \
             workloads), and the pipelined loops faster than the same loops with a \
             barrier. *selvedge / rayon* divides the two medians."
        );
        println!();
    }
    println!(
        "| workload | serial | selvedge | rayon | selvedge ns/iter | rayon ns/iter \
         | selvedge / rayon | goal | target met? |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|---|");
    let mut chart = Chart::new(title, "ms");
    // A row of the chart: serial, the selvedge version and its peer, with
    // the ratio of the two on selvedge's bar.
    let mut target_row =
        |group: &str, serial: Option<f64>, ours: (&str, Option<f64>), peer: (&str, Option<f64>)| {
            chart
                .group(group)
                .bar("serial", serial, String::new())
                .bar(ours.0, ours.1, ratios(ours.1, &[peer]))
                .bar(peer.0, peer.1, String::new());
        };
    for (w, t) in &results {
        let serial = named(t, loops::SERIAL);
        let selvedge = named(t, w.selvedge);
        let rayon = named(t, w.rayon);
        target_row(w.group, serial, (w.selvedge, selvedge), (w.rayon, rayon));
        let r = selvedge.zip(rayon).map(|(s, r)| s / r);
        let per_iter = w.target == Target::PerIteration;
        let iter_ns = |ms: Option<f64>| {
            if per_iter {
                ns_f(ns_per(ms, w.units))
            } else {
                "—".into()
            }
        };
        let (goal, ok) = match w.target {
            Target::PerIteration => ("≤ rayon per iteration", r.is_some_and(|r| r <= 1.0)),
            Target::AsFastAsRayon => ("≤ 1.00x", r.is_some_and(|r| r <= 1.0)),
            Target::FasterThanBarrier => ("< 1.00x", r.is_some_and(|r| r < 1.0)),
        };
        println!(
            "| {} ({} vs {}) | {} | {} | {} | {} | {} | {} | {goal} | {} |",
            w.group,
            w.selvedge,
            w.rayon,
            ms(serial),
            ms(selvedge),
            ms(rayon),
            iter_ns(selvedge),
            iter_ns(rayon),
            r.map_or("—".into(), |r| format!("{r:.2}x")),
            met(ok),
        );
        if w.target == Target::FasterThanBarrier {
            // The pipeline against selvedge's own barrier version too, and
            // the bucketed pipeline against both.
            let barrier = named(t, loops::PIPE_SELVEDGE_BARRIER);
            for (pipe, against, peer) in [
                (loops::PIPE_SELVEDGE, loops::PIPE_SELVEDGE_BARRIER, barrier),
                (
                    loops::PIPE_SELVEDGE_BUCKETS,
                    loops::PIPE_SELVEDGE_BARRIER,
                    barrier,
                ),
                (
                    loops::PIPE_SELVEDGE_BUCKETS,
                    loops::PIPE_RAYON_BARRIER,
                    rayon,
                ),
            ] {
                let p = named(t, pipe);
                target_row(w.group, serial, (pipe, p), (against, peer));
                let r = p.zip(peer).map(|(p, b)| p / b);
                println!(
                    "| {} ({} vs {}) | {} | {} | {} | — | — | {} | < 1.00x | {} |",
                    w.group,
                    pipe,
                    against,
                    ms(serial),
                    ms(p),
                    ms(peer),
                    r.map_or("—".into(), |r| format!("{r:.2}x")),
                    met(r.is_some_and(|r| r < 1.0)),
                );
            }
        }
    }
    println!();
    println!(
        "For the pipeline the \"rayon\" column is the peer named in the first column \
         (a barrier version). Ratios are time over time: below 1.00x selvedge is faster."
    );
    println!();
    charts.push(chart);

    println!("### selvedge scheduler counters per run (mean of {STATS_RUNS} runs)");
    println!();
    if md {
        println!(
            "What selvedge's scheduler did during one run of each of its loop \
             implementations, averaged over {STATS_RUNS} runs after the timings: loops split \
             for a thief, steal requests sent by idle workers and how many were answered \
             with work or declined, tasks stolen, tasks run, and how often a worker parked."
        );
        println!();
    }
    println!(
        "| workload | implementation | loop splits | steal requests sent | answered \
         | declined | tasks stolen | tasks run | parks |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for (w, _) in &results {
        for imp in w.impls.iter().filter(|i| i.name.starts_with("selvedge")) {
            let c = selvedge_counters(pools, imp.run);
            println!(
                "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
                w.group, imp.name, c[0], c[1], c[2], c[3], c[4], c[5], c[6]
            );
        }
    }
    println!();
}

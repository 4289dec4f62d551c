//! Benchmark report: selvedge against rayon, chili and a serial baseline.
//!
//! Runs every workload of Weave's suite used in `tools/benches/scheduler.rs` (fib,
//! DFS, N-Queens, bouncing producer-consumer, single producer / many
//! consumers), then the dataflow workloads of `tools/benches/dataflow.rs` (promise
//! overhead, chain latency, tiled wavefront, fine-grained wavefront), then
//! the parallel loop workloads of `tools/benches/loops.rs` (loop overhead,
//! histogram, log-sum-exp, Black-Scholes, transposition, pipelined loops),
//! with every implementation, each in a pool of the same number of threads
//! built once up front. Each implementation is first checked against the
//! serial result, run twice to warm up, then timed `--samples` times (one
//! full workload per sample; in the dataflow and loops sections, workloads
//! shorter than 20 ms are run back to back for at least 20 ms per sample;
//! in the loops section the samples of a workload's implementations are
//! taken in turn, each after a 5 ms pause, so a slow spell of the machine
//! hits them all alike and no pool's idle threads compete with the next);
//! the median is reported, in milliseconds.
//!
//! ```text
//! cargo run --release -p selvedge-tools --bin bench_report -- [--samples N] [--threads N] [--only weave|dataflow|data|loops|gemm|graph] [--markdown] [--plot DIR]
//! ```
//!
//! The thread count defaults to `SELVEDGE_BENCH_THREADS`, or 2. For the
//! producer-consumer workloads the efficiency column is
//! `serial / (threads * parallel)`: 100% means perfect use of every thread.
//! The dataflow section adds per-task and per-link times, the cost of a
//! promise dependency over a plain spawn, the wavefront's speedup over the
//! barrier version and its distance from half the serial time, the
//! fine-grained wavefront's measured tile time and per-tile time over
//! serial / threads, and whether each of the dataflow targets is met. The loops section adds per-iteration
//! times for the loop-overhead workloads, the ratio of each selvedge version
//! to its rayon peer, whether each of the loop targets is met, and
//! selvedge's scheduler counters per run (loop splits, steal requests,
//! parks), and a probe of how much of the CPUs the process was getting
//! before each workload (plain threads, no scheduler): on a shared VM the
//! second CPU comes and goes, and every parallel figure with it. Before
//! each section, before each fine-grained wavefront and at the end, the
//! report measures how long a cache line takes to go from one CPU to
//! another (`tools/src/handoff.rs`): on a VM that moves with the
//! host's placement of the virtual CPUs, and the fine-grained figures with
//! it. `--only` runs one of the sections.
//!
//! `--markdown` prints a complete Markdown document instead, to be saved as
//! `BENCHMARKS.md`: a title, the command line, the date (UTC), the commit
//! (where `git` can tell), the machine, the thread count and samples, then
//! the same tables, each with a paragraph saying what its columns and
//! ratios mean. Progress lines (which workload is being timed, how long the
//! report took) go to stderr in that mode, so that stdout is the document
//! alone:
//!
//! ```text
//! cargo run --release -p selvedge-tools --bin bench_report -- --markdown > BENCHMARKS.md
//! ```
//!
//! `--plot DIR` also draws each table of median times as an SVG bar chart
//! in `DIR` (created where missing; the report stops before timing
//! anything if it cannot write there), named after a slug of the table's
//! title (`DIR/nested-batched-gemm.svg`): a group of bars per row of the
//! table, a bar per implementation (selvedge and each peer) showing its
//! median, with the median and the ratios the table prints written after
//! each bar; the time axis is logarithmic where the times span more than
//! 25x (`tools/src/bin/bench_report/plot.rs`). The tables that are not times of
//! implementations get no chart: the dataflow, data-access and graph
//! targets, the scheduler counters and the hand-off table. The charts of a
//! section are written once it is done, and listed on stderr.

// What every section uses: medians, goal verdicts, progress lines.
mod common;
// The nested batched GEMM section.
mod gemm_section;
// `--plot DIR`: the tables as SVG charts.
mod plot;

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use dataflow::fine_wavefront as fine;
use dataflow::graph_replay as graph;

use common::{median_min_max, met, progress, WARMUPS};
use gemm_section::gemm_section;
use plot::{ratios, Chart};
use selvedge_tools::workloads::{Kind, Pools, Workload};
use selvedge_tools::{access, cholesky, dataflow, handoff, loops, pinning, workloads};

/// In the dataflow section, a sample of a workload shorter than this is the
/// mean of back-to-back runs lasting at least this long (ms).
const DATAFLOW_MIN_SAMPLE_MS: f64 = 20.0;
/// The same for the loops section.
const LOOPS_MIN_SAMPLE_MS: f64 = 20.0;
/// Runs of each selvedge loop implementation whose scheduler counters are
/// averaged (after the timings).
const STATS_RUNS: u32 = 5;

struct Args {
    samples: usize,
    threads: usize,
    weave: bool,
    dataflow: bool,
    loops: bool,
    gemm: bool,
    /// Declared data access: its overhead and the tiled Cholesky.
    data: bool,
    /// Graphs built once and replayed.
    graph: bool,
    /// `--markdown`: a whole document for `BENCHMARKS.md`.
    markdown: bool,
    /// `--plot DIR`: where to write a chart of each table.
    plot: Option<PathBuf>,
}

fn parse_args() -> Args {
    let mut args = Args {
        samples: 11,
        threads: workloads::threads_from_env(),
        weave: true,
        dataflow: true,
        loops: true,
        gemm: true,
        data: true,
        graph: true,
        markdown: false,
        plot: None,
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
            "--only" => {
                let section = inline.clone().or_else(|| it.next()).unwrap_or_default();
                (
                    args.weave,
                    args.dataflow,
                    args.loops,
                    args.gemm,
                    args.data,
                    args.graph,
                ) = match section.as_str() {
                    "weave" => (true, false, false, false, false, false),
                    "dataflow" => (false, true, false, false, false, false),
                    "data" => (false, false, false, false, true, false),
                    "loops" => (false, false, true, false, false, false),
                    "gemm" => (false, false, false, true, false, false),
                    "graph" => (false, false, false, false, false, true),
                    _ => usage(
                        "--only needs `weave`, `dataflow`, `data`, `loops`, `gemm` or `graph`",
                    ),
                };
            }
            "--markdown" => {
                if inline.is_some() {
                    usage("--markdown takes no value");
                }
                args.markdown = true;
            }
            "--plot" => {
                let dir = inline.clone().or_else(|| it.next()).unwrap_or_default();
                if dir.is_empty() {
                    usage("--plot needs a directory");
                }
                args.plot = Some(PathBuf::from(dir));
            }
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
    eprintln!(
        "usage: bench_report [--samples N] [--threads N] [--only weave|dataflow|data|loops|gemm|graph] [--markdown] [--plot DIR]"
    );
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

/// Warms up, then takes `samples` samples of `once` (one run of a
/// workload, returning its time in ms). A sample is the mean of as many
/// back-to-back runs as last `min_sample_ms` (judged from the last warm-up;
/// one run when 0), so that short workloads are not timed one noisy
/// millisecond at a time. Returns the median, min and max per run.
fn sample(samples: usize, min_sample_ms: f64, mut once: impl FnMut() -> f64) -> (f64, f64, f64) {
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

fn measure(
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
fn measure_phase(
    pools: &Pools,
    run: fn(&Pools) -> (u64, Duration),
    samples: usize,
    min_sample_ms: f64,
) -> (f64, f64, f64) {
    sample(samples, min_sample_ms, || {
        black_box(run(pools)).1.as_secs_f64() * 1e3
    })
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

/// A wavefront table row's first cells, up to its efficiency: `| name |
/// median | min | max | vs serial | efficiency |`.
fn timing_cells(x: &Timing, serial: Option<f64>, threads: usize) -> String {
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

/// Says what went wrong with the machine's environment (not with the
/// command line) and exits.
fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(1)
}

fn main() {
    let args = parse_args();
    // The chart folder is checked before anything is timed.
    let mut plots = args
        .plot
        .as_deref()
        .map(|dir| plot::Plots::open(dir).unwrap_or_else(|e| fail(&e)));
    let started = Instant::now();
    let pools = Pools::new(args.threads);
    let threads = pools.threads;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let md = args.markdown;

    if md {
        markdown_header(&args, threads, cores);
    } else {
        println!("# selvedge benchmark report");
        println!();
        println!("- threads per pool: {threads} (selvedge, rayon and chili each)");
        println!("- available_parallelism: {cores}");
        println!(
            "- samples: {} per implementation after {WARMUPS} warm-ups; median shown, in ms",
            args.samples
        );
        if args.weave {
            println!(
                "- consumer task (bpc, spc): {} rounds of iterative fib(30) = {:.2} µs each, serially",
                workloads::CONSUMER_ROUNDS,
                consumer_us()
            );
        }
        println!();
    }

    let mut handoffs = Vec::new();
    let sections: [(bool, &str, Section); 6] = [
        (args.weave, "before Weave's suite", weave_section),
        (
            args.dataflow,
            "before the dataflow section",
            dataflow_section,
        ),
        (args.loops, "before the loops section", loops_section),
        (args.gemm, "before the GEMM section", gemm_section),
        (args.data, "before the data-access section", data_section),
        (args.graph, "before the graph section", graph_section),
    ];
    for (on, when, section) in sections {
        if on {
            handoffs.push(note_handoff(when, md));
            let mut charts = Vec::new();
            section(&pools, args.samples, md, &mut charts);
            if let Some(plots) = plots.as_mut() {
                let mut drawn = Vec::new();
                for chart in &charts {
                    match plots.write(chart) {
                        Ok(Some(path)) => {
                            eprintln!("bench_report: chart {}", path.display());
                            drawn.push((chart.title.clone(), path));
                        }
                        Ok(None) => {}
                        Err(e) => fail(&e),
                    }
                }
                // In the document, the section's charts after its tables.
                if md && !drawn.is_empty() {
                    println!("**Charts** (median times; ratios beside the bars):\n");
                    for (title, path) in drawn {
                        println!("![{title}]({})\n", path.display());
                    }
                }
            }
        }
    }
    if let (Some(plots), Some(dir)) = (&plots, &args.plot) {
        eprintln!(
            "bench_report: {} charts written into {}",
            plots.written().len(),
            dir.display()
        );
    }
    handoffs.push(note_handoff("after the last section", md));
    if md {
        handoff_section(&handoffs);
    }
    let total: Duration = started.elapsed();
    if md {
        eprintln!("bench_report: the report took {:.1} s", total.as_secs_f64());
    } else {
        println!("(report took {:.1} s)", total.as_secs_f64());
    }
}

/// A section of the report: the pools, the samples, whether to print
/// Markdown, and where to put a chart of each table it prints.
type Section = fn(&Pools, usize, bool, &mut Vec<Chart>);

/// Probes of the core-to-core hand-off per measurement (the median is
/// kept; each takes a few milliseconds).
const HANDOFF_PROBES: usize = 5;

/// The median of [`HANDOFF_PROBES`] probes of the core-to-core hand-off,
/// in ns one way (see `handoff.rs`).
fn handoff_now() -> f64 {
    median_min_max((0..HANDOFF_PROBES).map(|_| handoff::one_way_ns()).collect()).0
}

/// Measures the core-to-core hand-off now (see `handoff.rs`); in the
/// normal mode prints it, saying `when`. Returns both for the document's
/// summary.
fn note_handoff(when: &'static str, md: bool) -> (&'static str, f64) {
    let ns = handoff_now();
    if md {
        eprintln!("bench_report: core-to-core hand-off {when}: {ns:.0} ns one way");
    } else {
        println!("core-to-core hand-off {when}: {ns:.0} ns one way");
        println!();
    }
    (when, ns)
}

/// The document's last section: the core-to-core hand-off measured before
/// each section and at the end, and what it means for the figures.
fn handoff_section(handoffs: &[(&str, f64)]) {
    println!("## The machine during this run: core-to-core hand-off");
    println!();
    println!(
        "How long one cache line took to go from one CPU to another, measured with two \
         plain threads passing a word back and forth (the median of {HANDOFF_PROBES} probes \
         of 20,000 round trips; half a round trip is shown). Fine-grained work moves lines \
         between cores all the time, so its figures depend on this number. On a VM the \
         host places the virtual CPUs and moves them: on the 2-vCPU machine this project \
         is developed on, it usually measured 30-45 ns, but about 15 ns or 110-250 ns for \
         seconds at a time. There it explained little of the spread of the fine-grained \
         figures (the 256x256 wavefront of 1 µs tiles took 55-84 ms in runs next to a slow \
         probe and 55-80 ms between two usual ones), but a run taken in a slow regime can \
         be told apart. The fine-grained wavefront tables give the value measured just \
         before their own runs."
    );
    println!();
    println!("| when | one-way hand-off, ns |");
    println!("|---|---:|");
    for (when, ns) in handoffs {
        println!("| {when} | {ns:.0} |");
    }
    println!();
}

/// The document's title, what it measures, and the run's setup: the
/// command line, the date, the commit, the machine, threads and samples.
fn markdown_header(args: &Args, threads: usize, cores: usize) {
    let sections: Vec<&str> = [
        (args.weave, "Weave's benchmark suite"),
        (args.dataflow, "dataflow"),
        (args.loops, "parallel loops"),
        (args.gemm, "nested batched GEMM"),
        (args.data, "declared data access"),
        (args.graph, "graphs"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|&(_, name)| name)
    .collect();

    println!("# selvedge benchmarks");
    println!();
    println!(
        "selvedge against rayon, chili and serial code, as measured by the \
         `bench_report` program of this repository (`tools/`). Every implementation of a \
         workload runs in a pool of the same number of threads, built once up front; \
         it is first checked against the serial result, run {WARMUPS} times to warm \
         up, then timed. Times are medians over the samples, in milliseconds per run \
         unless a column says otherwise. Ratios are time over time: below 1.00x the \
         first-named implementation is the faster. The implementations of a workload \
         are timed in the same run, so compare them within a table; absolute times \
         move with the machine's load from one run to the next."
    );
    println!();
    println!("| | |");
    println!("|---|---|");
    println!("| command | `{}` |", command_line());
    println!("| date | {} |", utc_now());
    if let Some(commit) = git_commit() {
        println!("| commit | {commit} |");
    }
    println!("| machine | {} |", machine(cores));
    println!(
        "| threads per pool | {threads} (selvedge, rayon and chili each); pinned to CPUs: {} \
         (`SELVEDGE_PIN_THREADS`; chili's threads are never pinned) |",
        if pinning::requested() { "yes" } else { "no" }
    );
    println!(
        "| samples | {} per implementation, after {WARMUPS} warm-up runs |",
        args.samples
    );
    println!("| sections | {} |", sections.join(", "));
    if args.weave {
        println!(
            "| consumer task (bpc, spc) | {} rounds of iterative fib(30) = {:.2} µs each, \
             measured serially |",
            workloads::CONSUMER_ROUNDS,
            consumer_us()
        );
    }
    println!();
}

/// The command that produced this report, as one would type it.
fn command_line() -> String {
    let mut line = String::from("cargo run --release -p selvedge-tools --bin bench_report");
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.is_empty() {
        line.push_str(" --");
        for arg in args {
            line.push(' ');
            let plain = arg
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_=.,/:".contains(c));
            if plain && !arg.is_empty() {
                line.push_str(&arg);
            } else {
                line.push('\'');
                line.push_str(&arg.replace('\'', r"'\''"));
                line.push('\'');
            }
        }
    }
    line
}

/// The current time, as `YYYY-MM-DD HH:MM UTC` (from `date -u`).
fn utc_now() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown (no `date` command)".into())
}

/// The commit the report was built from, where `git` can tell, and
/// whether the work tree had changes to tracked files.
fn git_commit() -> Option<String> {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .arg("-C")
            .arg(env!("CARGO_MANIFEST_DIR"))
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).filter(|c| !c.is_empty())?;
    let dirty =
        git(&["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(if dirty {
        format!("`{commit}`, with uncommitted changes")
    } else {
        format!("`{commit}`")
    })
}

/// The CPU model (from `/proc/cpuinfo`, where readable), the logical CPUs
/// it lists, how many this process may use, and the OS and architecture.
fn machine(cores: usize) -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |name: &str| {
        cpuinfo.lines().find_map(|l| {
            let (key, value) = l.split_once(':')?;
            (key.trim() == name && !value.trim().is_empty()).then(|| value.trim().to_string())
        })
    };
    let model = field("model name")
        .or_else(|| field("Hardware"))
        .or_else(|| field("Model"))
        .unwrap_or_else(|| "CPU model unknown".to_string());
    let listed = cpuinfo
        .lines()
        .filter(|l| l.split(':').next().is_some_and(|k| k.trim() == "processor"))
        .count();
    let listed = if listed > 0 {
        format!("{listed} logical CPUs, ")
    } else {
        String::new()
    };
    format!(
        "{model}; {listed}{cores} available to this process (`available_parallelism`); {} {}",
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

/// Times every implementation of `w` (after checking them against serial).
fn time_workload(pools: &Pools, w: &Workload, samples: usize) -> Vec<Timing> {
    w.verify(pools);
    time_impls(pools, w, samples, 0.0)
}

fn time_impls(pools: &Pools, w: &Workload, samples: usize, min_sample_ms: f64) -> Vec<Timing> {
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

/// What a workload of Weave's suite does, for the document.
fn weave_description(group: &str) -> &'static str {
    match group {
        "fib" => {
            "naive recursive Fibonacci, a task at every level and no cutoff: nearly pure \
                  task-creation overhead"
        }
        "dfs" => "a complete tree, a task per node, the leaves counted",
        "nqueens" => {
            "every valid placement of a queen in the next row a task; counts the solutions"
        }
        "bpc" => {
            "bouncing producer-consumer: a chain of producers, each spawning the next \
                  producer and a few consumers that do about a microsecond of work"
        }
        "spc" => {
            "single producer: one task spawns every consumer, which the other threads \
                  must steal"
        }
        _ => "",
    }
}

/// Weave's suite: the summary and every implementation.
fn weave_section(pools: &Pools, samples: usize, md: bool, charts: &mut Vec<Chart>) {
    let threads = pools.threads;
    let all: Vec<Workload> = workloads::all();
    let results: Vec<(&Workload, Vec<Timing>)> = all
        .iter()
        .map(|w| {
            progress(md, &format!("timing {}", w.title));
            (w, time_workload(pools, w, samples))
        })
        .collect();

    // In the document the suite is one section and its tables are
    // subsections; the plain report keeps its flat headings.
    let h = if md { "###" } else { "##" };
    if md {
        println!("## Task parallelism: Weave's benchmark suite");
        println!();
        println!(
            "Five workloads of the benchmark suite of [Weave](https://github.com/mratsim/weave), \
             each written once per scheduler with the same task structure (what is spawned, \
             what is waited for) plus a serial version. One sample is one whole run of the \
             workload."
        );
        println!();
        for w in &all {
            println!(
                "- `{}`: {}: {}",
                w.group,
                w.title,
                weave_description(w.group)
            );
        }
        println!();
    }
    println!("{h} Summary");
    println!();
    if md {
        println!(
            "One row per workload, times in ms. *serial* is the program without a scheduler. \
             *selvedge spawn* makes every task with `spawn` and waits on its `JoinHandle` \
             (bpc: detached spawns, then `sync_root`); *selvedge join/scope* uses `join` for \
             fib and a `scope` elsewhere. *rayon* is the reference rayon version (`join` for \
             fib, `scope` elsewhere), *chili* chili's `join` (fib only: chili has no \
             scope). The ratio columns divide a selvedge version's median by rayon's or \
             by serial's. The efficiency of the producer-consumer workloads is \
             serial / ({threads} × parallel): 100% would be every thread busy with useful \
             work all the time."
        );
        println!();
    }
    println!(
        "| workload | serial | selvedge spawn | selvedge join/scope | rayon | chili \
         | spawn / rayon | join/scope / rayon | spawn / serial | join/scope / serial \
         | efficiency (spawn, join/scope) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut chart = Chart::new("Weave's benchmark suite: summary", "ms");
    for (w, t) in &results {
        let serial = of(t, Kind::Serial);
        let spawn = of(t, Kind::SelvedgeSpawn);
        let structured = of(t, Kind::SelvedgeStructured);
        let rayon = of(t, Kind::Rayon);
        let refs = [("rayon", rayon), ("serial", serial)];
        chart
            .group(w.title.clone())
            .bar("serial", serial, String::new())
            .bar("selvedge spawn", spawn, ratios(spawn, &refs))
            .bar("selvedge join/scope", structured, ratios(structured, &refs))
            .bar("rayon", rayon, String::new())
            .bar("chili", of(t, Kind::Chili), String::new());
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
    charts.push(chart);
    if !md {
        // The document says this before the table.
        println!(
            "Ratios are time over time: below 1.00x the first is faster. \"rayon\" is the \
             reference rayon version (join for fib, scope elsewhere). Efficiency = \
             serial / ({threads} × parallel)."
        );
        println!();
    }

    println!("{h} Every implementation");
    println!();
    if md {
        println!(
            "Every implementation of every workload, alternative rayon formulations \
             (`rayon par_iter`) included: the median, fastest and slowest sample in ms, the \
             median over the serial and the rayon reference medians, and the efficiency \
             serial / ({threads} × parallel) of every parallel implementation."
        );
        println!();
    }
    println!(
        "| workload | implementation | median | min | max | vs serial | vs rayon | efficiency |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    let mut chart = Chart::new("Weave's benchmark suite: every implementation", "ms");
    for (w, t) in &results {
        let serial = of(t, Kind::Serial);
        let rayon = of(t, Kind::Rayon);
        let row = chart.group(w.group);
        for x in t {
            // Not against itself: the serial row by serial, the rayon
            // reference by rayon.
            let refs = [
                ("serial", serial.filter(|_| x.kind != Kind::Serial)),
                ("rayon", rayon.filter(|_| x.kind != Kind::Rayon)),
            ];
            row.bar(x.name, Some(x.median), ratios(Some(x.median), &refs));
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
    charts.push(chart);
}

/// Median time of the implementation called `name`.
fn named(timings: &[Timing], name: &str) -> Option<f64> {
    timings.iter().find(|t| t.name == name).map(|t| t.median)
}

/// A chart's reference for a ratio of `x`: `label` and the median of the
/// implementation called `reference`, none where `x` is that one.
fn vs<'a>(x: &Timing, t: &[Timing], label: &'a str, reference: &str) -> (&'a str, Option<f64>) {
    (label, named(t, reference).filter(|_| x.name != reference))
}

/// Milliseconds per run to nanoseconds per unit.
fn ns_per(ms: Option<f64>, units: u64) -> Option<f64> {
    ms.map(|ms| ms * 1e6 / units as f64)
}

fn ns(t: Option<f64>) -> String {
    t.map_or_else(|| "—".to_string(), |t| format!("{t:.0}"))
}

/// The heaviest monotone path through the wavefront grid, in cost units:
/// no schedule can finish before it.
fn critical_path_units() -> u32 {
    use dataflow::GRID;
    let units = dataflow::tile_units();
    let mut path = [0u32; dataflow::TILES];
    for idx in 0..dataflow::TILES {
        let (i, j) = (idx / GRID, idx % GRID);
        let up = if i > 0 { path[idx - GRID] } else { 0 };
        let left = if j > 0 { path[idx - 1] } else { 0 };
        path[idx] = units[idx] + up.max(left);
    }
    path[dataflow::TILES - 1]
}

/// The dataflow workloads: per-unit tables, derived ratios, and
/// the targets.
fn dataflow_section(pools: &Pools, samples: usize, md: bool, charts: &mut Vec<Chart>) {
    let threads = pools.threads;
    let all = dataflow::all();
    // The core-to-core hand-off just before each fine-grained wavefront's
    // runs, which it sways most.
    let mut handoffs: Vec<(&str, f64)> = Vec::new();
    let results: Vec<(&dataflow::Dataflow, Vec<Timing>)> = all
        .iter()
        .map(|d| {
            progress(md, &format!("timing {}", d.workload.title));
            d.verify(pools);
            if [fine::LARGE_GROUP, fine::SMALL_GROUP].contains(&d.workload.group) {
                handoffs.push((d.workload.group, handoff_now()));
            }
            let mut timings = time_impls(pools, &d.workload, samples, DATAFLOW_MIN_SAMPLE_MS);
            for phase in &d.phases {
                let (median, min, max) =
                    measure_phase(pools, phase.run, samples, DATAFLOW_MIN_SAMPLE_MS);
                timings.push(Timing {
                    name: phase.name,
                    kind: Kind::SelvedgeSpawn,
                    median,
                    min,
                    max,
                });
            }
            (d, timings)
        })
        .collect();
    let find = |group: &str| {
        results
            .iter()
            .find(|(d, _)| d.workload.group == group)
            .expect("dataflow workload")
    };

    println!("## Dataflow");
    println!();
    println!(
        "Each run is one whole workload (tasks and promises created inside the timed \
         region). A sample is one run, or for runs under {DATAFLOW_MIN_SAMPLE_MS} ms the \
         mean of back-to-back runs lasting at least that; median, min and max over the \
         samples in ms per run, per-unit times from the median."
    );
    println!();
    if md {
        println!(
            "Four workloads: what a promise dependency costs on top of a plain `spawn`, how \
             fast control passes along a chain of dependent tasks, what dataflow gains \
             over a barrier on a 2-D dynamic program, and the same dependency pattern on \
             many small tiles (1 µs and 5 µs), where what each promise costs shows."
        );
        println!();
    }

    // Promise overhead.
    let (d, t) = find("promise_overhead");
    let per_task = |name| ns_per(named(t, name), d.units);
    // Each delayed row, its dependencies per task, and the spawn row it is
    // compared with (the one timed on as many workers).
    let delayed = [
        (dataflow::OVERHEAD_DELAYED_1, 1.0, dataflow::OVERHEAD_SPAWN),
        (dataflow::OVERHEAD_DELAYED_4, 4.0, dataflow::OVERHEAD_SPAWN),
        (
            dataflow::OVERHEAD_DELAYED_1_ONE,
            1.0,
            dataflow::OVERHEAD_SPAWN_ONE,
        ),
    ];
    // A delayed row's ns per task over its spawn row's, divided by `per`.
    let over = |&(name, _, base): &(&'static str, f64, &'static str), per: f64| {
        per_task(name)
            .zip(per_task(base))
            .map(|(a, b)| (a - b) / per)
    };
    println!("### {}", d.workload.title);
    println!();
    if md {
        println!(
            "{} tasks whose work is a multiply and a rotate, so that the time is the \
             scheduling: created with `spawn` and joined in order; with `spawn_delayed` on 1 \
             or 4 fresh promises each, fulfilled only after the spawn (so that every task \
             parks and is woken by the fulfill); and rayon's `scope.spawn` as the external \
             reference. *ns per {}* is the median divided by the task count. *over spawn* is \
             the difference to selvedge `spawn` in ns per task, and per dependency that \
             difference divided by the promises each task waits on. The *making only* row \
             times the making of tasks delayed on two iterations of a loop promise, none \
             fulfilled yet, with nothing running: what one thread pays to make each. The \
             *one worker* rows time `spawn` and the 1-promise tasks on a runtime of one \
             worker: on two, the delayed tasks are made slowly enough for the other worker \
             to ask for them and most are stolen, while the spawns are all made before it \
             asks, so the difference between those rows also holds the stealing.",
            d.units, d.unit
        );
        println!();
    }
    println!(
        "| implementation | median | min | max | ns per {} | over spawn, ns per task \
         | over spawn, ns per dependency |",
        d.unit
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut chart = Chart::new(d.workload.title.clone(), "ms");
    for x in t {
        let row = delayed.iter().find(|(n, _, _)| *n == x.name);
        let mut note = ratios(
            Some(x.median),
            &[vs(x, t, "selvedge spawn", dataflow::OVERHEAD_SPAWN)],
        );
        if let Some(over) = row.and_then(|r| over(r, r.1)) {
            note.push_str(&format!(", +{over:.0} ns per dependency"));
        }
        chart.row(x.name, Some(x.median), note);
        println!(
            "| {} | {:.3} | {:.3} | {:.3} | {} | {} | {} |",
            x.name,
            x.median,
            x.min,
            x.max,
            ns(ns_per(Some(x.median), d.units)),
            ns(row.and_then(|r| over(r, 1.0))),
            ns(row.and_then(|r| over(r, r.1))),
        );
    }
    println!();
    charts.push(chart);
    let [overhead_1, overhead_4, overhead_one_worker] = delayed.map(|r| over(&r, r.1));
    let making_2 = per_task(dataflow::OVERHEAD_MAKE_2);
    // How the trivial tasks reached the other worker, which the one-worker
    // row never pays for: (share of the tasks run that came through answered
    // steal requests, tasks per answered request).
    let stolen_share = |run: TimedRun| {
        let [_, _, answered, _, stolen, tasks_run, _] = selvedge_counters(pools, run);
        (
            (tasks_run > 0.0).then(|| 100.0 * stolen / tasks_run),
            (answered > 0.0).then(|| stolen / answered),
        )
    };
    let stolen_spawn = stolen_share(|p| {
        let start = Instant::now();
        let sum = p
            .selvedge
            .run(|| dataflow::overhead_spawn(black_box(dataflow::OVERHEAD_TASKS)));
        (sum, start.elapsed())
    });
    let stolen_delayed_1 = stolen_share(|p| {
        let start = Instant::now();
        let sum = p
            .selvedge
            .run(|| dataflow::overhead_delayed::<1>(black_box(dataflow::OVERHEAD_TASKS)));
        (sum, start.elapsed())
    });

    // Chain latency.
    let (d, t) = find("promise_chain");
    let promise_chain = named(t, dataflow::CHAIN_DELAYED);
    println!("### {}", d.workload.title);
    println!();
    if md {
        println!(
            "A chain of {} tasks in which link i may start only once link i − 1 finished, so \
             there is no parallel slack: the time is the latency of handing control from one \
             task to the next. *spawn_delayed chain*: every link spawned up front, each \
             delayed on its predecessor's promise; *from the first fulfill* times the same \
             run from the first fulfill on, with every link already parked. *scope chain*: \
             each link spawns the next into a scope as its last act (rayon's row is the same \
             code on rayon). *spawn+join round trips*: each link spawned and joined at once \
             from the root task. *ns per {}* is the median over the link count; the last \
             column divides each median by the `spawn_delayed` chain's.",
            d.units, d.unit
        );
        println!();
    }
    println!(
        "| implementation | median | min | max | ns per {} | vs spawn_delayed chain |",
        d.unit
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let mut chart = Chart::new(d.workload.title.clone(), "ms");
    for x in t {
        println!(
            "| {} | {:.3} | {:.3} | {:.3} | {} | {} |",
            x.name,
            x.median,
            x.min,
            x.max,
            ns(ns_per(Some(x.median), d.units)),
            ratio(Some(x.median), promise_chain),
        );
        let refs = [vs(x, t, "spawn_delayed chain", dataflow::CHAIN_DELAYED)];
        chart.row(x.name, Some(x.median), ratios(Some(x.median), &refs));
    }
    println!();
    charts.push(chart);

    // Tiled wavefront.
    let (d, t) = find("wavefront");
    let units = dataflow::tile_units();
    let total: u32 = units.iter().sum();
    let heavy = units.iter().filter(|&&u| u >= 40).count();
    let path = critical_path_units();
    let serial = named(t, dataflow::SERIAL);
    let selvedge = named(t, dataflow::WAVE_DELAYED);
    let barrier = named(t, dataflow::WAVE_RAYON_BARRIER);
    println!("### {}", d.workload.title);
    println!();
    if md {
        println!(
            "A tiled Smith-Waterman-like dynamic program: tile (i, j) needs tiles (i − 1, j) \
             and (i, j − 1). Tile costs are heavy-tailed, so a barrier between \
             anti-diagonals keeps every thread waiting for the diagonal's heaviest tile. \
             *spawn_delayed*: every tile spawned up front, delayed on its two neighbours' \
             iterations of a `LoopPromise`, no barrier. The barrier versions run one \
             anti-diagonal at a time (a selvedge `scope` per diagonal, rayon `par_iter` per \
             diagonal); *rayon scope + dependency counters* is dataflow written by hand on \
             rayon. *vs serial* and *vs selvedge spawn_delayed* divide each median by \
             those; efficiency is serial / ({threads} × parallel), which the critical path given \
             below limits."
        );
        println!();
    }
    println!(
        "- {} tiles, {total} units of {} DP rows × {} columns; {heavy} heavy tiles (× 20)",
        dataflow::TILES,
        dataflow::ROWS_PER_UNIT,
        dataflow::TILE_COLS
    );
    println!(
        "- critical path: {path} units ({:.0}% of the work); with {threads} threads no \
         schedule beats max(serial / {threads}, critical path) = {:.0}% of serial",
        100.0 * f64::from(path) / f64::from(total),
        100.0 * (1.0 / threads as f64).max(f64::from(path) / f64::from(total))
    );
    println!();
    println!(
        "| implementation | median | min | max | vs serial | efficiency | vs selvedge \
         spawn_delayed |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut chart = Chart::new(d.workload.title.clone(), "ms");
    for x in t {
        println!(
            "{} {} |",
            timing_cells(x, serial, threads),
            ratio(Some(x.median), selvedge),
        );
        let refs = [
            vs(x, t, "serial", dataflow::SERIAL),
            vs(x, t, "selvedge spawn_delayed", dataflow::WAVE_DELAYED),
        ];
        chart.row(x.name, Some(x.median), ratios(Some(x.median), &refs));
    }
    println!();
    charts.push(chart);
    println!("Efficiency = serial / ({threads} × parallel).");
    println!();
    let speedup = barrier.zip(selvedge).map(|(b, s)| b / s);
    let to_ideal = selvedge
        .zip(serial)
        .map(|(s, serial)| s / (serial / threads as f64));

    // Fine-grained wavefront, both grids.
    let handoff_before = |group: &str| {
        handoffs
            .iter()
            .find(|(g, _)| *g == group)
            .map(|&(_, ns)| ns)
    };
    let large = fine_wavefront_table(
        find(fine::LARGE_GROUP),
        handoff_before(fine::LARGE_GROUP),
        fine::LARGE_GRID,
        fine::LARGE_ROUNDS,
        threads,
        md,
        charts,
    );
    let small = fine_wavefront_table(
        find(fine::SMALL_GROUP),
        handoff_before(fine::SMALL_GROUP),
        fine::SMALL_GRID,
        fine::SMALL_ROUNDS,
        threads,
        md,
        charts,
    );

    println!("### Targets (dataflow)");
    println!();
    if md {
        println!(
            "The project's goals for the dataflow workloads (set for 2 threads), and whether this \
             run met them: a dependency costs at most 50 ns on top of a `spawn` (derived \
             from the promise-overhead table as (delayed − spawn) / dependencies), making a \
             delayed task with two dependencies costs at most 60 ns, the \
             wavefront runs at least 1.2 times as fast as rayon's barrier version, and it \
             comes within 10% of half the serial time; on the fine-grained wavefront, \
             `spawn_delayed` from inside `rt.run` comes within 25% of serial / threads on \
             256 × 256 tiles of 1 µs and is no slower than rayon's barrier version there, \
             and comes within 15% of serial / threads on 64 × 64 tiles of 5 µs (the \
             measured column adds the time over that ideal per tile). The two steal rows \
             come from five more runs of the `spawn` and 1-promise workloads, untimed: the \
             tasks the other worker received through answered steal requests, as a share of \
             the tasks run, and how many tasks each answered request carried. A task that \
             goes to the other worker moves its block between the cores, a cost the \
             one-worker row never pays; few tasks per request mean that cost is paid task by \
             task."
        );
        println!();
    }
    println!("| target | measured | goal | |");
    println!("|---|---:|---:|---|");
    for (label, value) in [("1 promise", overhead_1), ("4 promises", overhead_4)] {
        println!(
            "| promise overhead per dependency on top of `spawn`, {label} | {} ns | ≤ 50 ns | {} |",
            ns(value),
            met(value.is_some_and(|v| v <= 50.0))
        );
    }
    println!(
        "| promise overhead per dependency on top of `spawn`, 1 promise, on a runtime of \
         one worker (nothing stolen) | {} ns | (reported) | |",
        ns(overhead_one_worker)
    );
    let percent = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.0}%"));
    let one_digit = |v: Option<f64>| v.map_or("—".into(), |v| format!("{v:.1}"));
    println!(
        "| tasks received through answered steal requests, as a share of the tasks run: \
         `spawn` row / 1-promise row | {} / {} | (reported) | |",
        percent(stolen_spawn.0),
        percent(stolen_delayed_1.0)
    );
    println!(
        "| tasks carried by each answered steal request: `spawn` row / 1-promise row \
         | {} / {} | (reported) | |",
        one_digit(stolen_spawn.1),
        one_digit(stolen_delayed_1.1)
    );
    println!(
        "| making a delayed task with 2 open dependencies (one thread, nothing running) \
         | {} ns | ≤ 60 ns | {} |",
        ns(making_2),
        met(making_2.is_some_and(|v| v <= 60.0))
    );
    println!(
        "| wavefront: rayon barrier / selvedge `spawn_delayed` | {} | ≥ 1.20x | {} |",
        speedup.map_or("—".into(), |v| format!("{v:.2}x")),
        met(speedup.is_some_and(|v| v >= 1.2))
    );
    println!(
        "| wavefront: selvedge `spawn_delayed` / (serial / {threads}) | {} | ≤ 1.10 | {} |",
        to_ideal.map_or("—".into(), |v| format!("{v:.2}")),
        met(to_ideal.is_some_and(|v| v <= 1.1))
    );
    let over_ideal = |f: &FineWavefront| {
        format!(
            "{}; {} ns per tile over ideal",
            f.to_ideal.map_or("—".into(), |v| format!("{v:.2}")),
            ns(f.over_ideal_ns)
        )
    };
    println!(
        "| {0}x{0} 1 µs wavefront: selvedge `spawn_delayed` inside `rt.run` / (serial / \
         {threads}) | {1} | ≤ 1.25 | {2} |",
        fine::LARGE_GRID,
        over_ideal(&large),
        met(large.to_ideal.is_some_and(|v| v <= 1.25))
    );
    println!(
        "| {}x{} 1 µs wavefront: selvedge `spawn_delayed` inside `rt.run` / rayon barrier \
         | {} | ≤ 1.00 | {} |",
        fine::LARGE_GRID,
        fine::LARGE_GRID,
        large.to_barrier.map_or("—".into(), |v| format!("{v:.2}")),
        met(large.to_barrier.is_some_and(|v| v <= 1.0))
    );
    println!(
        "| {0}x{0} 5 µs wavefront: selvedge `spawn_delayed` inside `rt.run` / (serial / \
         {threads}) | {1} | ≤ 1.15 | {2} |",
        fine::SMALL_GRID,
        over_ideal(&small),
        met(small.to_ideal.is_some_and(|v| v <= 1.15))
    );
    println!();
}

/// What the targets need of one fine-grained wavefront grid.
struct FineWavefront {
    /// selvedge `spawn_delayed` (inside `rt.run`) / (serial / threads).
    to_ideal: Option<f64>,
    /// (selvedge `spawn_delayed` − serial / threads) / tiles, in ns.
    over_ideal_ns: Option<f64>,
    /// selvedge `spawn_delayed` / rayon barrier.
    to_barrier: Option<f64>,
}

/// One grid of the fine-grained wavefront: the measured tile time, the
/// table (with each parallel row's time over serial / threads per tile),
/// and the figures its targets need.
fn fine_wavefront_table(
    (d, t): &(&dataflow::Dataflow, Vec<Timing>),
    handoff_ns: Option<f64>,
    grid: usize,
    rounds: u32,
    threads: usize,
    md: bool,
    charts: &mut Vec<Chart>,
) -> FineWavefront {
    let tiles = grid * grid;
    let serial = named(t, dataflow::SERIAL);
    let selvedge = named(t, fine::DELAYED);
    let barrier = named(t, fine::RAYON_BARRIER);
    let ideal = serial.map(|s| s / threads as f64);
    // (t − serial / threads) / tiles, in ns.
    let over = |t: Option<f64>| t.zip(ideal).map(|(t, i)| (t - i) * 1e6 / tiles as f64);
    let tile_us = fine::tile_us(rounds, tiles);
    println!("### {}", d.workload.title);
    println!();
    if md {
        println!(
            "The wavefront's dependency pattern (tile (i, j) needs (i − 1, j) and (i, j − 1)) \
             on {tiles} equal tiles of {rounds} rounds of a mixing loop seeded from the two \
             neighbours' results, so that the per-tile cost of scheduling shows next to the \
             work. *spawn_delayed (inside rt.run)*: every tile spawned up front from the \
             root task with `selvedge::spawn_delayed` on its two neighbours' iterations of a \
             `LoopPromise`, the bottom-right tile's handle joined; *submit_delayed (from the \
             main thread)*: the same tasks queued with `Runtime::submit_delayed` from the \
             calling thread, which is no worker; *a maker task per row*: the same tasks, \
             each row's made by a task of its own, the rows' makers running in parallel; \
             *made up front, 8 rows ahead*: as the first, but before each row the making \
             task joins a delayed task on the last tile 8 rows up, so that it never runs \
             more than 8 rows ahead of the finished work; *each tile makes the one below*: \
             no graph made up front, each tile's task making the task of the tile below it \
             (and, on the first row, of the tile to its right) once done; \
             *scope.spawn_delayed*: the first, in a scope; \
             *rayon barrier*: `par_iter` over each anti-diagonal. *over ideal* is \
             (median − serial / {threads}) / tiles in ns: what each tile costs beyond a \
             perfect split of the serial work."
        );
        println!();
    }
    println!(
        "- {tiles} tiles of {rounds} rounds: one tile takes {tile_us:.2} µs (measured serially \
         in this run, {tiles} tiles back to back); the serial run takes {} µs per tile",
        serial.map_or("—".into(), |s| format!("{:.2}", s * 1e3 / tiles as f64))
    );
    println!(
        "- critical path: {} tiles ({:.1}% of the work); ideal with {threads} threads: \
         serial / {threads} = {} ms",
        2 * grid - 1,
        100.0 * (2 * grid - 1) as f64 / tiles as f64,
        ms(ideal)
    );
    if let Some(ns) = handoff_ns {
        let see = if md {
            " (the last section says what it means)"
        } else {
            ""
        };
        println!("- core-to-core hand-off just before these runs: {ns:.0} ns one way{see}");
    }
    println!();
    println!(
        "| implementation | median | min | max | vs serial | efficiency | over ideal, ns per \
         tile | vs rayon barrier |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut chart = Chart::new(d.workload.title.clone(), "ms");
    for x in t {
        let refs = [
            vs(x, t, "serial", dataflow::SERIAL),
            vs(x, t, "rayon barrier", fine::RAYON_BARRIER),
        ];
        chart.row(x.name, Some(x.median), ratios(Some(x.median), &refs));
        let over_ideal = if x.kind == Kind::Serial {
            "—".into()
        } else {
            ns(over(Some(x.median)))
        };
        println!(
            "{} {} | {} |",
            timing_cells(x, serial, threads),
            over_ideal,
            ratio(Some(x.median), barrier),
        );
    }
    println!();
    charts.push(chart);
    FineWavefront {
        to_ideal: selvedge.zip(ideal).map(|(s, i)| s / i),
        over_ideal_ns: over(selvedge),
        to_barrier: selvedge.zip(barrier).map(|(s, b)| s / b),
    }
}

/// A run of a workload on the pools: its checksum and the time of its computation.
type TimedRun = fn(&Pools) -> (u64, Duration);

/// The pause before each sample of the loops section.
const SETTLE: Duration = Duration::from_millis(5);

/// Units of `loops::pipe_work` per share of the capacity probe (about 2 ms).
const CAPACITY_UNITS: u32 = 50;
/// Solo/parallel pairs per capacity probe.
const CAPACITY_PAIRS: usize = 7;

/// How many CPUs' worth this process gets right now, without any
/// scheduler: the median speedup of `threads` shares of a compute-only
/// kernel run on `threads` plain threads over the same shares run one
/// after the other on this thread. On a quiet machine it is close to
/// `threads`; on this 2-vCPU VM it drops towards 1 for seconds at a time.
fn capacity(threads: usize) -> f64 {
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

/// Like [`measure_phase`] for several implementations at once, their
/// samples interleaved (sample 1 of each, then sample 2 of each, ...), so
/// that a slow spell of the machine (this VM's speed varies up to 2x for
/// tens of milliseconds at a time) hits every implementation alike instead
/// of skewing one of them. Each is warmed up first; a sample is the mean
/// of as many back-to-back runs as last `min_sample_ms`. Before each sample
/// the thread sleeps [`SETTLE`], so that the pool used just before has
/// finished spinning down (its idle workers would otherwise compete for
/// the 2 CPUs with the next implementation's) and every sample starts from
/// parked workers.
fn measure_interleaved(
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
fn timings_of(
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
fn interleaved(
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
fn selvedge_counters(pools: &Pools, run: TimedRun) -> [f64; 7] {
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

/// The parallel-loop workloads: every implementation, the
/// selvedge / rayon ratios against the targets, and selvedge's counters.
fn loops_section(pools: &Pools, samples: usize, md: bool, charts: &mut Vec<Chart>) {
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

/// Nanoseconds with two decimals (per-iteration times are around 1 ns).
fn ns_f(t: Option<f64>) -> String {
    t.map_or_else(|| "—".to_string(), |t| format!("{t:.2}"))
}

fn data_section(pools: &Pools, samples: usize, md: bool, charts: &mut Vec<Chart>) {
    let threads = pools.threads;
    let rt = &pools.selvedge;

    // What a declared access costs.
    progress(md, "timing declared access overhead");
    let k = access::TASKS;
    let handles = access::read_handles();
    let reads_1 = access::serial_reads::<1>(k);
    let writes = access::serial_writes(k);
    assert_eq!(rt.run(|| access::spawn(k)), reads_1);
    assert_eq!(rt.run(|| access::reads::<1>(&handles, k)), reads_1);
    assert_eq!(
        rt.run(|| access::reads::<3>(&handles, k)),
        access::serial_reads::<3>(k)
    );
    assert_eq!(rt.run(|| access::writes(k)), writes);
    assert_eq!(rt.run(|| access::promise_chains(k)), writes);
    assert_eq!(pools.rayon.install(|| access::rayon_unordered(k)), reads_1);
    // Each run timed by itself, in ms.
    fn timed(mut f: impl FnMut()) -> impl FnMut() -> f64 {
        move || {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e3
        }
    }
    let names = [
        access::SERIAL,
        access::SPAWN,
        access::READ_1,
        access::READ_3,
        access::WRITE_1,
        access::PROMISES,
        access::RAYON,
    ];
    let mut runs: Vec<Box<dyn FnMut() -> f64 + '_>> = vec![
        Box::new(timed(|| {
            black_box(access::serial_writes(black_box(k)));
        })),
        Box::new(timed(|| {
            black_box(rt.run(|| access::spawn(k)));
        })),
        Box::new(timed(|| {
            black_box(rt.run(|| access::reads::<1>(&handles, k)));
        })),
        Box::new(timed(|| {
            black_box(rt.run(|| access::reads::<3>(&handles, k)));
        })),
        Box::new(timed(|| {
            black_box(rt.run(|| access::writes(k)));
        })),
        Box::new(timed(|| {
            black_box(rt.run(|| access::promise_chains(k)));
        })),
        Box::new(timed(|| {
            black_box(pools.rayon.install(|| access::rayon_unordered(k)));
        })),
    ];
    let access_ms = interleaved(&mut runs, samples, DATAFLOW_MIN_SAMPLE_MS);
    let per_task = |i: usize| access_ms[i].0 * 1e6 / k as f64;
    let spawn_ns = per_task(1);
    println!("## Declared data access");
    println!();
    let title = if md {
        format!(
            "What a declared access costs ({k} trivial tasks over {} handles)",
            access::HANDLES
        )
    } else {
        format!("declared access overhead ({k} trivial tasks)")
    };
    println!("### {title}");
    println!();
    if md {
        println!(
            "Each run creates and joins {k} tasks inside `rt.run`. The read rows read \
             handles nothing writes, so no task waits: their time over `selvedge spawn` \
             is the declaration (the handle's lock, the task's completion promise, its \
             record in the handle's log). The write rows chain the tasks of each handle \
             (task i updates handle i mod {}): `spawn_with` against the same chains \
             written by hand with a promise per task and a `Mutex` per value. Samples \
             taken in turns; a sample is the mean of runs lasting at least \
             {DATAFLOW_MIN_SAMPLE_MS} ms.",
            access::HANDLES
        );
        println!();
    }
    println!(
        "| implementation | median ms | min | max | ns per task | over spawn, ns per access |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let mut chart = Chart::new(title, "ms");
    for (i, (name, (median, min, max))) in names.iter().zip(&access_ms).enumerate() {
        let over = match *name {
            access::READ_1 | access::WRITE_1 => format!("{:.0}", per_task(i) - spawn_ns),
            access::READ_3 => format!("{:.0}", (per_task(i) - spawn_ns) / 3.0),
            _ => "—".to_string(),
        };
        let spawn = Some(access_ms[1].0).filter(|_| i != 1);
        let mut note = ratios(Some(*median), &[("selvedge spawn", spawn)]);
        if over != "—" {
            note.push_str(&format!(", +{over} ns per access"));
        }
        chart.row(name, Some(*median), note);
        println!(
            "| {name} | {median:.3} | {min:.3} | {max:.3} | {:.0} | {over} |",
            per_task(i)
        );
    }
    println!();
    charts.push(chart);
    let read_1_over = per_task(2) - spawn_ns;
    let read_3_over = (per_task(3) - spawn_ns) / 3.0;
    let write_vs_promises = access_ms[4].0 / access_ms[5].0;

    // The tiled Cholesky.
    const N: usize = 2048;
    let a = cholesky::spd_matrix(N, 1);
    let mut cholesky_ratios = Vec::new();
    for t in [128, 64] {
        progress(md, &format!("timing the tiled Cholesky, tiles of {t}"));
        let mut reference = cholesky::Tiles::from_matrix(&a, t);
        cholesky::factor_serial(&mut reference);
        let l_ref = reference.to_lower();
        type Factor<'a> = Box<dyn FnMut(&mut cholesky::Tiles) + 'a>;
        let mut factors: Vec<(&str, Factor)> = vec![
            ("serial (tile loop)", Box::new(cholesky::factor_serial)),
            (
                "rayon, barrier per half-step",
                Box::new(|tiles: &mut cholesky::Tiles| {
                    cholesky::factor_rayon_barrier(&pools.rayon, tiles)
                }),
            ),
            (
                "selvedge, declared access",
                Box::new(|tiles: &mut cholesky::Tiles| cholesky::factor_selvedge(rt, tiles)),
            ),
            (
                "selvedge, a Graph of declared accesses, replayed",
                Box::new({
                    let mut graph = cholesky::FactorGraph::new(N / t);
                    move |tiles: &mut cholesky::Tiles| graph.factor(rt, tiles)
                }),
            ),
            (
                "selvedge, promises by hand (spawn_delayed, a Mutex per tile)",
                Box::new(|tiles: &mut cholesky::Tiles| cholesky::factor_promises(rt, tiles)),
            ),
        ];
        for (name, factor) in factors.iter_mut() {
            let mut tiles = cholesky::Tiles::from_matrix(&a, t);
            factor(&mut tiles);
            let diff = cholesky::max_difference(&tiles.to_lower(), &l_ref);
            assert!(
                diff < 1e-8 * N as f64,
                "{name}: differs from the serial factor by {diff:e}"
            );
        }
        // The tiles are copied out of A before each timed factorisation
        // (one factorisation per sample).
        let a = &a;
        let mut runs: Vec<Box<dyn FnMut() -> f64 + '_>> = factors
            .iter_mut()
            .map(|(_, factor)| {
                Box::new(move || {
                    let mut tiles = cholesky::Tiles::from_matrix(a, t);
                    let start = Instant::now();
                    factor(&mut tiles);
                    let elapsed = start.elapsed().as_secs_f64() * 1e3;
                    drop(black_box(tiles));
                    elapsed
                }) as Box<dyn FnMut() -> f64 + '_>
            })
            .collect();
        let medians = interleaved(&mut runs, samples, 0.0);
        drop(runs);
        let nt = N / t;
        let title = format!(
            "Tiled Cholesky, n = {N}, tiles of {t} ({} kernel calls)",
            nt + nt * (nt - 1) + nt * (nt - 1) * (nt - 2) / 6
        );
        println!("### {title}");
        println!();
        if md && t == 128 {
            println!(
                "`tools/src/bin/cholesky.rs`'s workload: A = L·Lᵀ by tiles (potrf, trsm, \
                 syrk, gemm on tiles, faer's single-threaded kernels). selvedge submits \
                 the serial loop's kernel calls as tasks declaring the tiles they read \
                 and write; the graph row builds those tasks once as nodes of a \
                 `Graph` (edges from the declarations alone) and replays it for each \
                 matrix, swapping the tiles in and out by nodes of its own; the \
                 promises row makes the same tasks with `spawn_delayed`, tracking by \
                 hand the promises each one waits for, as the declarations do; rayon \
                 runs each step's solves in one `par_iter` and its updates in another, \
                 with a barrier after each. Every factor is checked against the serial \
                 one; samples taken in turns."
            );
            println!();
        }
        println!("| implementation | median ms | min | max | GFLOP/s | vs serial/{threads} | selvedge / it |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
        let serial = medians[0].0;
        let ours = medians[2].0;
        let flops = (N as f64).powi(3) / 3.0;
        let mut chart = Chart::new(title, "ms");
        for (k, ((name, _), (median, min, max))) in factors.iter().zip(&medians).enumerate() {
            println!(
                "| {name} | {median:.1} | {min:.1} | {max:.1} | {:.1} | {:.2} | {:.2}x |",
                flops / (median / 1e3) / 1e9,
                median / (serial / threads as f64),
                ours / median
            );
            let mut note = format!(
                "{:.2}x serial/{threads}",
                median / (serial / threads as f64)
            );
            if k != 2 {
                note.push_str(&format!(", selvedge / it = {:.2}x", ours / median));
            }
            chart.row(name, Some(*median), note);
        }
        println!();
        charts.push(chart);
        cholesky_ratios.push((
            t,
            ours / (serial / threads as f64),
            ours / medians[1].0,
            ours / medians[4].0,
        ));
    }

    println!("| target | measured | goal | |");
    println!("|---|---:|---:|---|");
    for (t, vs_half_serial, vs_rayon, vs_promises) in &cholesky_ratios {
        println!(
            "| Cholesky {N}/{t}: selvedge (declared) / (serial / {threads}) | {vs_half_serial:.2} | (reported) | |"
        );
        println!(
            "| Cholesky {N}/{t}: selvedge (declared) / rayon barrier | {vs_rayon:.2}x | ≤ 0.90x | {} |",
            met(*vs_rayon <= 0.90)
        );
        println!(
            "| Cholesky {N}/{t}: selvedge (declared) / promises by hand | {vs_promises:.2}x | ≤ 1.05x | {} |",
            met(*vs_promises <= 1.05)
        );
    }
    println!(
        "| declared access over `spawn`, 1 read | {read_1_over:.0} ns | ≤ 80 ns | {} |",
        met(read_1_over <= 80.0)
    );
    println!(
        "| declared access over `spawn`, per access of 3 reads | {read_3_over:.0} ns | ≤ 50 ns | {} |",
        met(read_3_over <= 50.0)
    );
    println!(
        "| declared write chains / hand-written promise chains | {write_vs_promises:.2}x | (reported) | |"
    );
    println!();
}

/// Graphs built once and replayed, against the same wavefront made with
/// promises every run, rayon's barriers and serial code; the samples of a
/// grid's implementations are taken in turn (see [`interleaved`]).
fn graph_section(pools: &Pools, samples: usize, md: bool, charts: &mut Vec<Chart>) {
    let threads = pools.threads;
    println!("## Graphs");
    println!();
    if md {
        println!(
            "The fine-grained wavefront's tiles (tile (i, j) after (i − 1, j) and (i, j − 1)) \
             as a `selvedge::Graph`: *replayed* is one graph per grid, built once and run \
             again with `Runtime::run_graph` for every sample; *built every run* builds, runs \
             and drops it each time; *spawn_delayed (made up front)* makes a promise and a \
             delayed task per tile from the root task every run; *each tile makes the one \
             below* is the promise version made close to its work; *rayon barrier* runs one \
             anti-diagonal at a time. The third grid's tiles do no rounds (a load, a few \
             instructions, a store), so its time is the runtime's cost per node; the last \
             table replays that grid with its tiles as `Data` (*graph of Data tiles*: each \
             node declares its tile's write and its neighbours' reads, no edge by hand) \
             against the same graph with its edges by hand, apart from the other rows, whose \
             data its 65,536 handles would push out of the caches. The samples \
             of a grid's implementations are taken in turn, each the mean of back-to-back \
             runs lasting at least {DATAFLOW_MIN_SAMPLE_MS} ms. *vs ideal* divides the \
             median by serial / {threads}; *ns per node* is the median over the nodes."
        );
        println!();
    }
    let mut found: Vec<(&'static str, Vec<Timing>)> = Vec::new();
    for d in graph::all() {
        let w = &d.workload;
        progress(md, &format!("timing {}", w.title));
        d.verify(pools);
        let handoff = handoff_now();
        let mut runs: Vec<Box<dyn FnMut() -> f64 + '_>> = w
            .impls
            .iter()
            .map(|imp| {
                let run = imp.run;
                Box::new(move || {
                    let start = Instant::now();
                    black_box(run(pools));
                    start.elapsed().as_secs_f64() * 1e3
                }) as Box<dyn FnMut() -> f64 + '_>
            })
            .collect();
        let t = timings_of(
            w.impls.iter().map(|imp| (imp.name, imp.kind)),
            interleaved(&mut runs, samples, DATAFLOW_MIN_SAMPLE_MS),
        );
        let serial = named(&t, dataflow::SERIAL);
        let ideal = serial.map(|s| s / threads as f64);
        let barrier = named(&t, graph::RAYON_BARRIER);
        let replayed = named(&t, graph::REPLAYED);
        println!("### {}", w.title);
        println!();
        println!(
            "- {} nodes, {} edges; ideal with {threads} threads: serial / {threads} = {} ms; \
             core-to-core hand-off just before: {handoff:.0} ns one way",
            d.units,
            2 * d.units - 2 * (d.units as f64).sqrt() as u64,
            ms(ideal)
        );
        println!();
        println!(
            "| implementation | median | min | max | vs ideal | ns per node | vs rayon barrier \
             | vs replayed |"
        );
        println!("|---|---:|---:|---:|---:|---:|---:|---:|");
        let mut chart = Chart::new(w.title.clone(), "ms");
        for x in &t {
            let refs = [
                ("ideal", ideal),
                vs(x, &t, "rayon barrier", graph::RAYON_BARRIER),
                vs(x, &t, "replayed", graph::REPLAYED),
            ];
            chart.row(x.name, Some(x.median), ratios(Some(x.median), &refs));
            println!(
                "| {} | {:.3} | {:.3} | {:.3} | {} | {} | {} | {} |",
                x.name,
                x.median,
                x.min,
                x.max,
                ratio(Some(x.median), ideal),
                ns(ns_per(Some(x.median), d.units)),
                ratio(Some(x.median), barrier),
                ratio(Some(x.median), replayed),
            );
        }
        println!();
        charts.push(chart);
        found.push((w.group, t));
    }
    let of_group = |group: &str, name: &str| {
        found
            .iter()
            .find(|(g, _)| *g == group)
            .and_then(|(_, t)| named(t, name))
    };
    let to_ideal = |group: &str| {
        of_group(group, graph::REPLAYED)
            .zip(of_group(group, dataflow::SERIAL))
            .map(|(r, s)| r / (s / threads as f64))
    };
    let empty_ns = ns_per(
        of_group(graph::EMPTY_GROUP, graph::REPLAYED),
        (fine::LARGE_GRID * fine::LARGE_GRID) as u64,
    );
    let declared_empty_ns = ns_per(
        of_group(graph::EMPTY_DATA_GROUP, graph::DECLARED),
        (fine::LARGE_GRID * fine::LARGE_GRID) as u64,
    );
    let large_to_ideal = to_ideal(graph::LARGE_GROUP);
    let small_to_ideal = to_ideal(graph::SMALL_GROUP);
    let to_promises = of_group(graph::LARGE_GROUP, graph::REPLAYED)
        .zip(of_group(graph::LARGE_GROUP, graph::DELAYED))
        .map(|(r, p)| r / p);
    println!("### Targets ({threads} threads)");
    println!();
    println!("| target | measured | met |");
    println!("|---|---:|:---:|");
    println!(
        "| replay per empty node ≤ 50 ns | {} | {} |",
        ns(empty_ns),
        met(empty_ns.is_some_and(|n| n <= 50.0))
    );
    println!(
        "| replay per empty node with Data tiles ≤ 50 ns | {} | {} |",
        ns(declared_empty_ns),
        met(declared_empty_ns.is_some_and(|n| n <= 50.0))
    );
    println!(
        "| 1 µs wavefront replayed ≤ 1.1x serial / {threads} | {} | {} |",
        large_to_ideal.map_or("—".into(), |r| format!("{r:.2}x")),
        met(large_to_ideal.is_some_and(|r| r <= 1.1))
    );
    println!(
        "| 1 µs wavefront replayed faster than made with promises every run | {} | {} |",
        to_promises.map_or("—".into(), |r| format!("{r:.2}x")),
        met(to_promises.is_some_and(|r| r < 1.0))
    );
    println!(
        "| 5 µs wavefront replayed ≤ 1.05x serial / {threads} | {} | {} |",
        small_to_ideal.map_or("—".into(), |r| format!("{r:.2}x")),
        met(small_to_ideal.is_some_and(|r| r <= 1.05))
    );
    println!();
}

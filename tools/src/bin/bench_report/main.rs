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
//! cargo run --release -p selvedge-tools --bin bench_report -- [--samples N] [--threads N] [--only weave|dataflow|data|loops|gemm|graph] [--markdown [--gpu-machine PATH]...] [--plot DIR]
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
//! The document ends with the GPU machine's section: with
//! `--gpu-machine PATH` (repeatable), the reports of runs of the GPU
//! bundle, copied back from the GPU machine: a call's report
//! (`summary-<UTC time>.md`), or an output folder (`.gpu-bundle/out`) for
//! its last call's `summary.md` (their checks, the GPU benchmarks and the
//! CPU table from 1 to 16 threads: `tools/src/gpu_machine.rs`); without
//! it, a paragraph saying where those figures come from. The reports are
//! read before anything is timed.
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
// The sections.
mod data_section;
mod dataflow_section;
mod graph_section;
mod loops_section;
mod weave_section;
// Samples taken in turn, and the CPU capacity probe.
mod interleaved;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use selvedge_tools::workloads::Pools;
use selvedge_tools::{gpu_machine, handoff, pinning, workloads};

use common::{consumer_us, median_min_max, WARMUPS};
use data_section::data_section;
use dataflow_section::dataflow_section;
use gemm_section::gemm_section;
use graph_section::graph_section;
use loops_section::loops_section;
use plot::Chart;
use weave_section::weave_section;

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
    /// `--gpu-machine PATH`, repeatable: the GPU bundle's reports (a
    /// call's report, or an output folder for its last call's), which the
    /// document ends with.
    gpu_machine: Vec<PathBuf>,
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
        gpu_machine: Vec::new(),
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
            "--gpu-machine" => {
                let path = inline.clone().or_else(|| it.next()).unwrap_or_default();
                if path.is_empty() {
                    usage("--gpu-machine needs a GPU bundle's report or output folder");
                }
                args.gpu_machine.push(PathBuf::from(path));
            }
            "--bench" => {} // passed by `cargo bench`-style runners; ignore
            "-h" | "--help" => usage(""),
            other => usage(&format!("unknown argument `{other}`")),
        }
    }
    if !args.gpu_machine.is_empty() && !args.markdown {
        usage("--gpu-machine adds a section to the --markdown document: give both");
    }
    args
}

fn usage(msg: &str) -> ! {
    if !msg.is_empty() {
        eprintln!("error: {msg}");
    }
    eprintln!(
        "usage: bench_report [--samples N] [--threads N] [--only weave|dataflow|data|loops|gemm|graph] [--markdown [--gpu-machine PATH]...] [--plot DIR]"
    );
    std::process::exit(if msg.is_empty() { 0 } else { 2 })
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
    // So are the GPU bundle's reports.
    let gpu_section = gpu_machine::read_section(&args.gpu_machine).unwrap_or_else(|e| fail(&e));
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
        print!("{gpu_section}");
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
    println!(
        "| sections | {}; a GPU machine ({}) |",
        sections.join(", "),
        match args.gpu_machine.len() {
            0 => "not included".to_string(),
            1 => "one run of the GPU bundle".to_string(),
            n => format!("{n} runs of the GPU bundle"),
        }
    );
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

//! The report's dataflow section: per-unit tables, derived ratios, the
//! fine-grained wavefronts and the targets.

use std::hint::black_box;
use std::time::Instant;

use selvedge_tools::dataflow;
use selvedge_tools::dataflow::fine_wavefront as fine;
use selvedge_tools::workloads::{Kind, Pools};

use crate::common::{
    measure_phase, met, ms, named, ns, ns_per, progress, ratio, time_impls, timing_cells, vs,
    Timing,
};
use crate::interleaved::{selvedge_counters, TimedRun};
use crate::plot::{ratios, Chart};
use crate::{handoff_now, DATAFLOW_MIN_SAMPLE_MS};

/// The heaviest monotone path through the wavefront grid, in cost units:
/// no schedule can finish before it.
pub fn critical_path_units() -> u32 {
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
pub fn dataflow_section(pools: &Pools, samples: usize, md: bool, charts: &mut Vec<Chart>) {
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
pub struct FineWavefront {
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
pub fn fine_wavefront_table(
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
             `LoopPromise`, the bottom-right tile's handle joined; *Runtime::spawn_delayed (from the \
             main thread)*: the same tasks queued with `Runtime::spawn_delayed` from the \
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

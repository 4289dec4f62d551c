//! The report's section on Weave's suite: the summary table and every
//! implementation.

use selvedge_tools::workloads;
use selvedge_tools::workloads::{Kind, Pools, Workload};

use crate::common::{efficiency, ms, of, progress, ratio, time_workload, Timing};
use crate::plot::{ratios, Chart};

/// What a workload of Weave's suite does, for the document.
pub fn weave_description(group: &str) -> &'static str {
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
pub fn weave_section(pools: &Pools, samples: usize, md: bool, charts: &mut Vec<Chart>) {
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

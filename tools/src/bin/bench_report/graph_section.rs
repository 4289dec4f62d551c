//! The report's section on graphs built once and replayed.

use std::hint::black_box;
use std::time::Instant;

use selvedge_tools::dataflow;
use selvedge_tools::dataflow::{fine_wavefront as fine, graph_replay as graph};
use selvedge_tools::workloads::Pools;

use crate::common::{met, ms, named, ns, ns_per, progress, ratio, vs, Timing};
use crate::interleaved::{interleaved, timings_of};
use crate::plot::{ratios, Chart};
use crate::{handoff_now, DATAFLOW_MIN_SAMPLE_MS};

/// Graphs built once and replayed, against the same wavefront made with
/// promises every run, rayon's barriers and serial code; the samples of a
/// grid's implementations are taken in turn (see [`interleaved`]).
pub fn graph_section(pools: &Pools, samples: usize, md: bool, charts: &mut Vec<Chart>) {
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

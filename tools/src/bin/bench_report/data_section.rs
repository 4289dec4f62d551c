//! The report's section on declared data access: its overhead and the
//! tiled Cholesky.

use std::hint::black_box;
use std::time::Instant;

use selvedge_tools::workloads::Pools;
use selvedge_tools::{access, cholesky};

use crate::common::{met, progress};
use crate::interleaved::interleaved;
use crate::plot::{ratios, Chart};
use crate::DATAFLOW_MIN_SAMPLE_MS;

pub fn data_section(pools: &Pools, samples: usize, md: bool, charts: &mut Vec<Chart>) {
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

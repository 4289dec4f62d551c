//! Tiled Cholesky factorisation (A = L·Lᵀ) written with declared data
//! access: every tile is a `selvedge::Data`, every kernel call a task that
//! says which tiles it reads and which it writes, submitted in the order of
//! the serial loop. The runtime orders the tasks of each tile, so the next
//! step starts on the tiles that are ready instead of waiting at a barrier.
//!
//! In the same run it times the serial tile loop, faer's own (untiled,
//! single-threaded) Cholesky, the same tasks made with `spawn_delayed` and
//! promises tracked by hand (what the declarations replace), the same
//! tasks as a `selvedge::Graph` built once and replayed for each matrix,
//! and the same tile algorithm with
//! rayon and a barrier after each half-step, taking turns sample by sample; it checks
//! every factor against the serial one and prints the residual
//! ‖A − L·Lᵀ‖/‖A‖.
//!
//! ```text
//! cargo run --release -p selvedge-tools --bin cholesky -- [--size 2048] [--tile 128] [--threads 2] [--samples 5]
//! ```
//!
//! The tile kernels (potrf, trsm, gemm) are faer's, single-threaded; the
//! algorithm and the shared code are in `tools/src/cholesky.rs`.

use selvedge_tools::cholesky;

use cholesky::Tiles;
use std::time::Instant;

struct Args {
    size: usize,
    tile: usize,
    threads: usize,
    samples: usize,
}

fn usage() -> ! {
    eprintln!("usage: cholesky [--size N] [--tile T] [--threads P] [--samples S]  (T divides N)");
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut args = Args {
        size: 2048,
        tile: 128,
        threads: 2,
        samples: 5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = match it.next().map(|v| v.parse::<usize>()) {
            Some(Ok(v)) if v > 0 => v,
            Some(_) => {
                eprintln!("cholesky: {flag} needs a positive integer");
                usage()
            }
            None => {
                eprintln!("cholesky: {flag} needs a value");
                usage()
            }
        };
        match flag.as_str() {
            "--size" => args.size = value,
            "--tile" => args.tile = value,
            "--threads" => args.threads = value,
            "--samples" => args.samples = value,
            other => {
                eprintln!("cholesky: unknown argument {other:?}");
                usage()
            }
        }
    }
    if args.size % args.tile != 0 {
        eprintln!(
            "cholesky: the tile size {} does not divide the size {}",
            args.tile, args.size
        );
        usage()
    }
    args
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args = parse_args();
    let (n, t, p) = (args.size, args.tile, args.threads);
    let a = cholesky::spd_matrix(n, 1);
    let rt = selvedge::Runtime::builder()
        .num_threads(p)
        .build()
        .unwrap_or_else(|e| {
            eprintln!("cholesky: cannot start the selvedge runtime: {e}");
            std::process::exit(1)
        });
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(p)
        .build()
        .unwrap_or_else(|e| {
            eprintln!("cholesky: cannot start the rayon pool: {e}");
            std::process::exit(1)
        });
    let nt = n / t;
    let tasks = nt + nt * (nt - 1) / 2 * 2 + nt * (nt - 1) * (nt - 2) / 6;
    println!(
        "Cholesky of a {n}x{n} SPD matrix, tiles of {t} ({nt}x{nt} tiles, {tasks} kernel calls), {p} threads, median of {} samples",
        args.samples
    );

    // The serial factor: what the others are checked against.
    let mut reference = Tiles::from_matrix(&a, t);
    cholesky::factor_serial(&mut reference);
    let l_ref = reference.to_lower();

    // Each version factors the tiles it is given in place (faer's, which
    // is not tiled, factors A and tiles its L, inside the timing).
    type Run<'a> = Box<dyn FnMut(&mut Tiles) + 'a>;
    let mut runs: Vec<(&str, Run)> = vec![
        ("serial (tile loop)", Box::new(cholesky::factor_serial)),
        (
            "faer llt (untiled, 1 thread)",
            Box::new(|tiles: &mut Tiles| {
                let l = a.llt(faer::Side::Lower).expect("SPD").L().to_owned();
                *tiles = Tiles::from_matrix(&l, t);
            }),
        ),
        (
            "rayon, barrier per half-step",
            Box::new(|tiles: &mut Tiles| cholesky::factor_rayon_barrier(&pool, tiles)),
        ),
        (
            "selvedge, declared access",
            Box::new(|tiles: &mut Tiles| cholesky::factor_selvedge(&rt, tiles)),
        ),
        (
            "selvedge, the same with promises by hand",
            Box::new(|tiles: &mut Tiles| cholesky::factor_promises(&rt, tiles)),
        ),
        (
            "selvedge, the same as a Graph, replayed",
            Box::new({
                let (mut graph, rt) = (cholesky::FactorGraph::new(n / t), &rt);
                move |tiles: &mut Tiles| graph.factor(rt, tiles)
            }),
        ),
    ];
    // One warm-up each, checked; then the samples, taking turns. The tiles
    // are copied out of A before the clock starts.
    for (name, run) in runs.iter_mut() {
        let mut tiles = Tiles::from_matrix(&a, t);
        run(&mut tiles);
        let diff = cholesky::max_difference(&tiles.to_lower(), &l_ref);
        assert!(
            diff < 1e-8 * n as f64,
            "{name}: differs from the serial factor by {diff:e}"
        );
    }
    let mut times = vec![Vec::new(); runs.len()];
    for _ in 0..args.samples {
        for (i, (_, run)) in runs.iter_mut().enumerate() {
            let mut tiles = Tiles::from_matrix(&a, t);
            let start = Instant::now();
            run(&mut tiles);
            times[i].push(start.elapsed().as_secs_f64());
            drop(std::hint::black_box(tiles));
        }
    }
    let medians: Vec<f64> = times.into_iter().map(median).collect();
    let serial = medians[0];
    let flops = (n as f64).powi(3) / 3.0;
    println!();
    println!("| version | median ms | GFLOP/s | vs serial/{p} | vs rayon barrier |");
    println!("|---|---:|---:|---:|---:|");
    for ((name, _), m) in runs.iter().zip(&medians) {
        println!(
            "| {name} | {:.1} | {:.1} | {:.2} | {:.2} |",
            m * 1e3,
            flops / m / 1e9,
            m / (serial / p as f64),
            m / medians[2]
        );
    }
    let mut tiles = Tiles::from_matrix(&a, t);
    cholesky::factor_selvedge(&rt, &mut tiles);
    let l = tiles.to_lower();
    println!();
    println!(
        "selvedge factor: residual ‖A − L·Lᵀ‖/‖A‖ = {:.2e}, largest difference from the serial factor {:.2e}",
        cholesky::residual(&a, &l),
        cholesky::max_difference(&l, &l_ref)
    );
}

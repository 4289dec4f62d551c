//! The tiled Cholesky of `tools/src/bin/cholesky.rs` and `tools/benches/data.rs`, at a
//! small size: the declared-access version, its graph replayed, the rayon
//! version and the serial tile loop all produce the serial factor, L·Lᵀ gives A back, and
//! a task that panics inside the factorisation poisons what depends on it
//! instead of hanging it.

use selvedge_tools::cholesky;

use cholesky::Tiles;
use selvedge::{Data, Runtime};

#[test]
fn every_version_gives_the_serial_factor() {
    let rt = Runtime::builder().num_threads(3).build().unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    for (n, t) in [(96, 16), (128, 32), (64, 64)] {
        let a = cholesky::spd_matrix(n, 7);
        let mut serial = Tiles::from_matrix(&a, t);
        cholesky::factor_serial(&mut serial);
        let l = serial.to_lower();
        assert!(
            cholesky::residual(&a, &l) < 1e-12,
            "serial factor wrong at {n}/{t}"
        );
        let mut ours = Tiles::from_matrix(&a, t);
        cholesky::factor_selvedge(&rt, &mut ours);
        assert_eq!(
            cholesky::max_difference(&ours.to_lower(), &l),
            0.0,
            "{n}/{t}"
        );
        // The graph, built once and run for two matrices.
        let mut graph = cholesky::FactorGraph::new(n / t);
        for seed in [7, 8] {
            let b = cholesky::spd_matrix(n, seed);
            let mut expected = Tiles::from_matrix(&b, t);
            cholesky::factor_serial(&mut expected);
            let mut replayed = Tiles::from_matrix(&b, t);
            graph.factor(&rt, &mut replayed);
            assert_eq!(
                cholesky::max_difference(&replayed.to_lower(), &expected.to_lower()),
                0.0,
                "graph, {n}/{t}, matrix {seed}"
            );
        }
        let mut theirs = Tiles::from_matrix(&a, t);
        cholesky::factor_rayon_barrier(&pool, &mut theirs);
        assert_eq!(
            cholesky::max_difference(&theirs.to_lower(), &l),
            0.0,
            "{n}/{t}"
        );
    }
}

#[test]
fn a_failing_kernel_cancels_what_depends_on_it() {
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    // Not positive definite: potrf panics on the first diagonal tile.
    let mut a = cholesky::spd_matrix(64, 3);
    a[(0, 0)] = -1.0;
    let tiles = Tiles::from_matrix(&a, 32);
    let nt = tiles.nt;
    let data: Vec<Data<faer::Mat<f64>>> = tiles
        .tiles
        .into_iter()
        .enumerate()
        .map(|(i, m)| Data::named(format!("tile {i}"), m))
        .collect();
    let at = |i: usize, j: usize| &data[cholesky::index(nt, i, j)];
    let potrf = rt.spawn_with(at(0, 0).write(), cholesky::potrf);
    let trsm = rt.spawn_with((at(0, 0).read(), at(1, 0).write()), |(l, b)| {
        cholesky::trsm(l, b)
    });
    let syrk = rt.spawn_with((at(1, 0).read(), at(1, 1).write()), |(a, c)| {
        cholesky::syrk(a, c)
    });
    assert!(potrf.try_join().unwrap_err().is_panic());
    let e = trsm.try_join().unwrap_err();
    assert!(
        e.is_cancelled() && e.to_string().contains("\"tile 0\" is poisoned"),
        "{e}"
    );
    let e = syrk.try_join().unwrap_err();
    assert!(
        e.is_cancelled() && e.to_string().contains("\"tile 1\" is poisoned"),
        "{e}"
    );
    assert!(e.to_string().contains("not positive definite"), "{e}");
}

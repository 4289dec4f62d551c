//! Tiled Cholesky factorisation (A = L·Lᵀ, lower), the same tile algorithm
//! five ways, shared by `tools/src/bin/cholesky.rs` and `tools/benches/data.rs`:
//!
//! - **serial**: the tile loop on the calling thread;
//! - **selvedge dataflow**: every tile a [`Data`], every kernel call a task
//!   declaring what it reads and writes, submitted in the serial loop's
//!   order; the runtime orders them per tile, so step k+1's work starts as
//!   soon as its own tiles are ready (no barrier);
//! - **selvedge graph**: the same tasks as nodes of a `selvedge::Graph`
//!   built once per tile grid, each declaring the tiles it reads and
//!   writes (the edges come from the declarations alone), replayed on
//!   every factorisation: a first node per tile swaps the input tile in,
//!   a last node per tile swaps the factor out;
//! - **selvedge promises by hand**: the same tasks with `spawn_delayed`,
//!   every tile behind a `Mutex`, each task waiting for the promises of
//!   the tasks before it that touch its tiles (the last write of each
//!   tile it reads; the last write and the reads since of the tile it
//!   writes), tracked by hand: what the declared version replaces;
//! - **rayon with barriers**: each step's triangular solves in one
//!   `par_iter`, then its updates in another, then the next step: the
//!   bulk-synchronous way to write it with fork-join.
//!
//! Step k of the tile algorithm, for an `nt × nt` grid of `t × t` tiles:
//!
//! ```text
//! potrf  A[k][k] ← chol(A[k][k])
//! trsm   A[i][k] ← A[i][k] · L[k][k]⁻ᵀ            (i > k)
//! syrk   A[i][i] ← A[i][i] − A[i][k] · A[i][k]ᵀ   (i > k)
//! gemm   A[i][j] ← A[i][j] − A[i][k] · A[j][k]ᵀ   (k < j < i)
//! ```
//!
//! The kernels are faer's (single-threaded): blocked and vectorized, so
//! the comparison is between schedules, not between kernels.

use faer::dyn_stack::{MemBuffer, MemStack};
use faer::linalg::cholesky::llt::factor::{cholesky_in_place, cholesky_in_place_scratch};
use faer::linalg::matmul::matmul;
use faer::linalg::triangular_solve::solve_lower_triangular_in_place;
use faer::{Accum, Mat, Par};
use rayon::prelude::*;
use selvedge::{Data, Graph};
use std::sync::{Arc, Mutex};

/// The lower tiles of a matrix, column by column: tile (i, j), i ≥ j, is
/// at `index(nt, i, j)`.
pub struct Tiles {
    pub nt: usize,
    pub t: usize,
    pub tiles: Vec<Mat<f64>>,
}

/// Where tile (i, j) (i ≥ j) sits: column c holds the nt − c tiles
/// (c, c) … (nt−1, c), and the columns are stored one after another.
pub fn index(nt: usize, i: usize, j: usize) -> usize {
    debug_assert!(
        j <= i && i < nt,
        "tile ({i}, {j}) is not in the lower triangle"
    );
    j * nt - j * j.saturating_sub(1) / 2 + (i - j)
}

/// A symmetric positive definite `n × n` matrix (symmetric, entries in
/// [0, 1), and `n` added to the diagonal: diagonally dominant).
pub fn spd_matrix(n: usize, seed: u64) -> Mat<f64> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut a = Mat::<f64>::zeros(n, n);
    for j in 0..n {
        for i in j..n {
            let v = next();
            a[(i, j)] = v;
            a[(j, i)] = v;
        }
        a[(j, j)] += n as f64;
    }
    a
}

impl Tiles {
    /// The lower tiles of `a` (`t` must divide its order).
    pub fn from_matrix(a: &Mat<f64>, t: usize) -> Self {
        let n = a.nrows();
        assert!(
            t > 0 && n % t == 0,
            "tile size {t} does not divide the order {n}"
        );
        let nt = n / t;
        let mut tiles = Vec::with_capacity(nt * (nt + 1) / 2);
        for j in 0..nt {
            for i in j..nt {
                tiles.push(a.submatrix(i * t, j * t, t, t).to_owned());
            }
        }
        Self { nt, t, tiles }
    }

    /// The factor L as a matrix: the lower triangle of the diagonal tiles,
    /// the tiles below, zeros above.
    pub fn to_lower(&self) -> Mat<f64> {
        let (nt, t) = (self.nt, self.t);
        let mut l = Mat::<f64>::zeros(nt * t, nt * t);
        for j in 0..nt {
            for i in j..nt {
                let tile = &self.tiles[index(nt, i, j)];
                for c in 0..t {
                    for r in 0..t {
                        if i > j || r >= c {
                            l[(i * t + r, j * t + c)] = tile[(r, c)];
                        }
                    }
                }
            }
        }
        l
    }
}

/// potrf: the tile's own Cholesky factor, in its lower triangle (the
/// upper triangle is left as it was and never read).
pub fn potrf(a: &mut Mat<f64>) {
    let n = a.nrows();
    let mut buf = MemBuffer::new(cholesky_in_place_scratch::<f64>(
        n,
        Par::Seq,
        Default::default(),
    ));
    cholesky_in_place(
        a.as_mut(),
        Default::default(),
        Par::Seq,
        MemStack::new(&mut buf),
        Default::default(),
    )
    .expect("the matrix is not positive definite");
}

/// trsm: `b ← b · L⁻ᵀ` for the lower-triangular factor `l` (solved as
/// `L · bᵀ = bᵀ`).
pub fn trsm(l: &Mat<f64>, b: &mut Mat<f64>) {
    solve_lower_triangular_in_place(l.as_ref(), b.as_mut().transpose_mut(), Par::Seq);
}

/// syrk: `c ← c − a · aᵀ` (the whole tile: the upper half is not read
/// later, and a full product is as fast as a triangular one at these sizes).
pub fn syrk(a: &Mat<f64>, c: &mut Mat<f64>) {
    matmul(
        c.as_mut(),
        Accum::Add,
        a.as_ref(),
        a.as_ref().transpose(),
        -1.0,
        Par::Seq,
    );
}

/// gemm: `c ← c − a · bᵀ`.
pub fn gemm(a: &Mat<f64>, b: &Mat<f64>, c: &mut Mat<f64>) {
    matmul(
        c.as_mut(),
        Accum::Add,
        a.as_ref(),
        b.as_ref().transpose(),
        -1.0,
        Par::Seq,
    );
}

/// Step k's update of tile (i, j) of the trailing matrix, from the
/// solved tiles of column k (in `left`, the tiles before column k + 1).
fn update(left: &[Mat<f64>], nt: usize, k: usize, i: usize, j: usize, c: &mut Mat<f64>) {
    let aik = &left[index(nt, i, k)];
    if i == j {
        syrk(aik, c);
    } else {
        gemm(aik, &left[index(nt, j, k)], c);
    }
}

/// The tile algorithm on the calling thread.
pub fn factor_serial(tiles: &mut Tiles) {
    let nt = tiles.nt;
    let a = &mut tiles.tiles;
    for k in 0..nt {
        potrf(&mut a[index(nt, k, k)]);
        let (done, rest) = a.split_at_mut(index(nt, k, k) + 1);
        let lkk = &done[index(nt, k, k)];
        for b in &mut rest[..nt - k - 1] {
            trsm(lkk, b);
        }
        if k + 1 == nt {
            break;
        }
        let (left, right) = a.split_at_mut(index(nt, k + 1, k + 1));
        for i in k + 1..nt {
            for j in k + 1..=i {
                let c = &mut right[index(nt, i, j) - index(nt, k + 1, k + 1)];
                update(left, nt, k, i, j, c);
            }
        }
    }
}

/// The tile algorithm with rayon: each step's solves in one parallel
/// loop, its updates in another, a barrier after each (`pool` runs them).
pub fn factor_rayon_barrier(pool: &rayon::ThreadPool, tiles: &mut Tiles) {
    let nt = tiles.nt;
    let a = &mut tiles.tiles;
    pool.install(|| {
        for k in 0..nt {
            potrf(&mut a[index(nt, k, k)]);
            let (done, rest) = a.split_at_mut(index(nt, k, k) + 1);
            let lkk = &done[index(nt, k, k)];
            rest[..nt - k - 1].par_iter_mut().for_each(|b| trsm(lkk, b));
            if k + 1 == nt {
                break;
            }
            let first = index(nt, k + 1, k + 1);
            let (left, right) = a.split_at_mut(first);
            let left = &*left;
            // Every tile (i, j) of the trailing matrix, with its position.
            let mut targets: Vec<(usize, usize, &mut Mat<f64>)> = Vec::new();
            let mut rest = right;
            for j in k + 1..nt {
                let (col, tail) = rest.split_at_mut(nt - j);
                for (off, c) in col.iter_mut().enumerate() {
                    targets.push((j + off, j, c));
                }
                rest = tail;
            }
            targets
                .into_par_iter()
                .for_each(|(i, j, c)| update(left, nt, k, i, j, c));
        }
    });
}

/// The tile algorithm as dataflow on `rt`: the serial loop, with each
/// kernel call a task that declares the tiles it reads and writes, all
/// inside one root task. Returns once every task finished.
pub fn factor_selvedge(rt: &selvedge::Runtime, tiles: &mut Tiles) {
    let nt = tiles.nt;
    let data: Vec<Data<Mat<f64>>> = std::mem::take(&mut tiles.tiles)
        .into_iter()
        .map(Data::new)
        .collect();
    tiles.tiles = rt.run(|| {
        let at = |i: usize, j: usize| &data[index(nt, i, j)];
        for k in 0..nt {
            selvedge::spawn_with(at(k, k).write(), potrf).detach();
            for i in k + 1..nt {
                selvedge::spawn_with((at(k, k).read(), at(i, k).write()), |(l, b)| trsm(l, b))
                    .detach();
            }
            for i in k + 1..nt {
                selvedge::spawn_with((at(i, k).read(), at(i, i).write()), |(a, c)| syrk(a, c))
                    .detach();
                for j in k + 1..i {
                    selvedge::spawn_with(
                        (at(i, k).read(), at(j, k).read(), at(i, j).write()),
                        |(a, b, c)| gemm(a, b, c),
                    )
                    .detach();
                }
            }
        }
        // Taking the tiles back waits for their last accesses; on a worker
        // the wait runs tasks meanwhile.
        data.into_iter().map(Data::into_inner).collect()
    });
}

/// The tile algorithm as dataflow on `rt` with promises written by hand:
/// each kernel call a `spawn_delayed` task on the promises of the calls
/// before it that touch its tiles, tracked per tile as `Data` would (the
/// last write; the reads since), each tile behind a `Mutex` (never
/// contended: the promises order the tasks). Returns once every task
/// finished.
pub fn factor_promises(rt: &selvedge::Runtime, tiles: &mut Tiles) {
    use selvedge::Promise;
    /// A tile, and the promises of the last task that wrote it and of the
    /// tasks that read it since.
    struct Tracked {
        tile: Arc<Mutex<Mat<f64>>>,
        last_write: Option<Promise>,
        reads: Vec<Promise>,
    }
    let nt = tiles.nt;
    let mut tracked: Vec<Tracked> = std::mem::take(&mut tiles.tiles)
        .into_iter()
        .map(|m| Tracked {
            tile: Arc::new(Mutex::new(m)),
            last_write: None,
            reads: Vec::new(),
        })
        .collect();
    rt.run(|| {
        // Submits `kernel` on the tiles at `reads` (read) and `write`.
        let mut submit = |reads: &[usize], write: usize, kernel: Kernel| {
            let done = Promise::new();
            let mut deps = Vec::with_capacity(4);
            for &r in reads {
                deps.extend(tracked[r].last_write.as_ref().map(Promise::dep));
            }
            let w = &mut tracked[write];
            deps.extend(w.last_write.as_ref().map(Promise::dep));
            deps.extend(w.reads.drain(..).map(|p| p.dep()));
            let inputs: Vec<_> = reads.iter().map(|&r| tracked[r].tile.clone()).collect();
            let output = tracked[write].tile.clone();
            let fulfil = done.clone();
            selvedge::spawn_delayed(deps, move || {
                let inputs_held = inputs;
                let inputs: Vec<_> = inputs_held.iter().map(|t| t.lock().unwrap()).collect();
                let mut c = output.lock().unwrap();
                match (kernel, &inputs[..]) {
                    (Kernel::Potrf, []) => potrf(&mut c),
                    (Kernel::Trsm, [l]) => trsm(l, &mut c),
                    (Kernel::Syrk, [a]) => syrk(a, &mut c),
                    (Kernel::Gemm, [a, b]) => gemm(a, b, &mut c),
                    _ => unreachable!("a kernel with the wrong tiles"),
                }
                drop((inputs, c));
                // The tiles let go before the promise is kept: whoever
                // waits for the last tasks takes the tiles back.
                drop((inputs_held, output));
                fulfil.fulfill();
            })
            .detach();
            for &r in reads {
                tracked[r].reads.push(done.clone());
            }
            tracked[write].last_write = Some(done);
        };
        let at = |i: usize, j: usize| index(nt, i, j);
        for k in 0..nt {
            submit(&[], at(k, k), Kernel::Potrf);
            for i in k + 1..nt {
                submit(&[at(k, k)], at(i, k), Kernel::Trsm);
            }
            for i in k + 1..nt {
                submit(&[at(i, k)], at(i, i), Kernel::Syrk);
                for j in k + 1..i {
                    submit(&[at(i, k), at(j, k)], at(i, j), Kernel::Gemm);
                }
            }
        }
    });
    // Every tile's last task (its last write) and the reads since.
    for t in &tracked {
        let deps: Vec<_> = t
            .last_write
            .iter()
            .chain(&t.reads)
            .map(Promise::dep)
            .collect();
        rt.spawn_delayed(deps, || ()).join();
    }
    tiles.tiles = tracked
        .into_iter()
        .map(|t| {
            Arc::try_unwrap(t.tile)
                .unwrap_or_else(|_| panic!("a task still holds a tile after they all finished"))
                .into_inner()
                .unwrap()
        })
        .collect();
}

/// Which kernel a hand-ordered task runs.
#[derive(Clone, Copy)]
enum Kernel {
    Potrf,
    Trsm,
    Syrk,
    Gemm,
}

/// The tile algorithm as a graph, built once for an `nt × nt` grid and
/// run again for every matrix: each kernel call is a node declaring the
/// tiles it reads and writes, in the serial loop's order, so the graph's
/// edges are those the declarations imply. A run swaps the input tiles in
/// through `stage` (a first node per tile) and the factor out (a last
/// node per tile, ordered after the tile's last kernel by its write).
pub struct FactorGraph {
    graph: Graph<'static>,
    stage: Arc<Vec<Mutex<Mat<f64>>>>,
}

impl FactorGraph {
    pub fn new(nt: usize) -> Self {
        let len = nt * (nt + 1) / 2;
        let data: Vec<Data<Mat<f64>>> = (0..len).map(|_| Data::new(Mat::zeros(0, 0))).collect();
        let stage: Arc<Vec<Mutex<Mat<f64>>>> =
            Arc::new((0..len).map(|_| Mutex::new(Mat::zeros(0, 0))).collect());
        let mut g = Graph::new();
        let swap = |g: &mut Graph<'static>, k: usize| {
            let stage = stage.clone();
            g.node_with(data[k].write(), move |tile| {
                std::mem::swap(tile, &mut *stage[k].lock().unwrap())
            });
        };
        for k in 0..len {
            swap(&mut g, k);
        }
        let at = |i: usize, j: usize| &data[index(nt, i, j)];
        for k in 0..nt {
            g.node_with(at(k, k).write(), potrf);
            for i in k + 1..nt {
                g.node_with((at(k, k).read(), at(i, k).write()), |(l, b)| trsm(l, b));
            }
            for i in k + 1..nt {
                g.node_with((at(i, k).read(), at(i, i).write()), |(a, c)| syrk(a, c));
                for j in k + 1..i {
                    g.node_with(
                        (at(i, k).read(), at(j, k).read(), at(i, j).write()),
                        |(a, b, c)| gemm(a, b, c),
                    );
                }
            }
        }
        for k in 0..len {
            swap(&mut g, k);
        }
        Self { graph: g, stage }
    }

    /// Factors `tiles` in place with one run of the graph on `rt`.
    pub fn factor(&mut self, rt: &selvedge::Runtime, tiles: &mut Tiles) {
        let exchange = |tiles: &mut Tiles| {
            for (slot, tile) in self.stage.iter().zip(&mut tiles.tiles) {
                std::mem::swap(&mut *slot.lock().unwrap(), tile);
            }
        };
        exchange(tiles);
        rt.run_graph(&mut self.graph)
            .expect("the factorisation's graph runs");
        exchange(tiles);
    }
}

/// ‖A − L·Lᵀ‖_F / ‖A‖_F.
pub fn residual(a: &Mat<f64>, l: &Mat<f64>) -> f64 {
    let mut r = a.clone();
    matmul(
        r.as_mut(),
        Accum::Add,
        l.as_ref(),
        l.as_ref().transpose(),
        -1.0,
        Par::Seq,
    );
    r.norm_l2() / a.norm_l2()
}

/// The largest difference between two factors, entry by entry.
pub fn max_difference(x: &Mat<f64>, y: &Mat<f64>) -> f64 {
    let mut d = 0.0f64;
    for j in 0..x.ncols() {
        for i in 0..x.nrows() {
            d = d.max((x[(i, j)] - y[(i, j)]).abs());
        }
    }
    d
}

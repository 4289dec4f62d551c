//! Fine-grained tiled wavefront: the coarse wavefront's dependency pattern
//! (tile `(i, j)` needs tiles `(i − 1, j)` and `(i, j − 1)`) with many
//! small, equal tiles, so that what a promise, a spawn and a wake-up cost
//! per tile shows next to the work instead of vanishing under it. A child
//! module of `dataflow.rs` (it builds [`Dataflow`] entries, which
//! `dataflow::all()` appends), so `tools/benches/dataflow.rs` and
//! `tools/src/bin/bench_report/main.rs` both pick it up.
//!
//! Two sizes:
//!
//! - [`LARGE_GRID`] × [`LARGE_GRID`] (65,536) tiles of [`LARGE_ROUNDS`]
//!   mixing rounds, about 1 µs each;
//! - [`SMALL_GRID`] × [`SMALL_GRID`] (4,096) tiles of [`SMALL_ROUNDS`]
//!   rounds, about 5 µs each.
//!
//! A round is one step of a two-lane mixing loop ([`tile_kernel`]) seeded
//! from the tile's up and left neighbours' digests, each step depending on
//! the previous one (so its time is latency, about 4.5 ns per round on the
//! 2-core development machine, an AMD EPYC VM: 220 rounds measured 0.98 to
//! 1.02 µs and 1,120 rounds 4.9 to 5.0 µs serially when the machine was
//! quiet, up to 1.4x more when it was not; the report prints the value
//! measured in its own run). A tile's digest is the loop's result, so every
//! tile's result depends on its neighbours' finished digests and every
//! implementation must reproduce the serial checksum (checked outside the
//! timed region by [`Dataflow::verify`]).
//!
//! - `serial`: row-major.
//! - `selvedge spawn_delayed (inside rt.run)`: one `LoopPromise` over the
//!   tiles (a promise per tile); from the root task of `rt.run`, every tile
//!   spawned up front (row-major) with `selvedge::spawn_delayed` on its up
//!   and left tiles' promises, fulfilling its own when done; the
//!   bottom-right tile depends on every other, so joining its handle waits
//!   for all (the other handles are dropped, detaching their tasks).
//! - `selvedge Runtime::spawn_delayed (from the main thread)`: the same tasks
//!   queued with `Runtime::spawn_delayed` from the calling thread, which
//!   is not one of the runtime's workers, then the last handle joined from
//!   there: both workers run tiles while the caller submits.
//! - `selvedge spawn_delayed (a maker task per row)`: the same tasks, each
//!   row's made by a task of its own (the rows' makers spawned into a
//!   scope inside `rt.run`, so several workers make tiles at once); then
//!   the bottom-right tile's promise is waited for. Making the graph is
//!   no longer one thread's work.
//! - `selvedge spawn_delayed (made up front, 8 rows ahead)`: as the first,
//!   but before each row the making task waits (running tiles meanwhile)
//!   for the last tile of the row 8 above, so it never runs more than 8
//!   rows ahead of the finished work: the tasks waiting on promises stay
//!   few, and their memory is still in the cores' caches when they run.
//! - `selvedge spawn_delayed (each tile makes the one below)`: no graph
//!   made up front: each tile's task, once done, makes the task of the
//!   tile below it (and the first row's, the one to its right), on the
//!   worker that just readied half of it.
//! - `selvedge scope.spawn_delayed`: the same in a `selvedge::scope` inside
//!   `rt.run`, the tasks borrowing the digests and the loop promise.
//! - `rayon barrier (par_iter per diagonal)`: `into_par_iter` over each
//!   anti-diagonal, with the implicit barrier between them (2G − 1
//!   barriers).
//!
//! Targets (2 threads): on the 256 × 256 grid, selvedge `spawn_delayed`
//! inside `rt.run` within 1.25 × serial / threads and no slower than the
//! rayon barrier version; on the 64 × 64 grid, within 1.15 × serial /
//! threads.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;
use selvedge::LoopPromise;

use super::{diagonal, mix, tile_deps, Dataflow, SERIAL, WAVE_RAYON_BARRIER, WAVE_SCOPE_DELAYED};
use crate::workloads::{Impl, Kind, Workload};

// ---------------------------------------------------------------------------
// Sizes
// ---------------------------------------------------------------------------

/// Tiles per side of the large grid (tiles of about 1 µs).
pub const LARGE_GRID: usize = 256;
/// Mixing rounds per tile of the large grid: about 1 µs (see the module
/// docs).
pub const LARGE_ROUNDS: u32 = 220;
/// Tiles per side of the small grid (tiles of about 5 µs).
pub const SMALL_GRID: usize = 64;
/// Mixing rounds per tile of the small grid: about 5 µs.
pub const SMALL_ROUNDS: u32 = 1_120;

/// Criterion group of the large grid (and what the report finds it by).
pub const LARGE_GROUP: &str = "wavefront_fine_256";
/// Criterion group of the small grid.
pub const SMALL_GROUP: &str = "wavefront_fine_64";

// Implementation names (serial, the scope version and the rayon barrier
// share the coarse wavefront's).
pub const DELAYED: &str = "selvedge spawn_delayed (inside rt.run)";
pub const FROM_MAIN: &str = "selvedge Runtime::spawn_delayed (from the main thread)";
pub const ROWS: &str = "selvedge spawn_delayed (a maker task per row)";
pub const AHEAD: &str = "selvedge spawn_delayed (made up front, 8 rows ahead)";
pub const SUCCESSORS: &str = "selvedge spawn_delayed (each tile makes the one below)";
pub const SCOPE_DELAYED: &str = WAVE_SCOPE_DELAYED;
pub const RAYON_BARRIER: &str = WAVE_RAYON_BARRIER;

/// Both grids, large first.
pub fn all() -> [Dataflow; 2] {
    [
        workload::<LARGE_GRID, LARGE_ROUNDS>(LARGE_GROUP, 1),
        workload::<SMALL_GRID, SMALL_ROUNDS>(SMALL_GROUP, 5),
    ]
}

/// One grid's entry: `G` × `G` tiles of `R` rounds, about `nominal_us`
/// each.
fn workload<const G: usize, const R: u32>(group: &'static str, nominal_us: u32) -> Dataflow {
    Dataflow {
        units: (G * G) as u64,
        unit: "tile",
        phases: Vec::new(),
        workload: Workload {
            group,
            title: format!("fine wavefront ({G}x{G} tiles of ~{nominal_us} µs, {R} rounds)"),
            producer_consumer: false,
            expected: None,
            impls: impls::<G, R>(),
        },
    }
}

/// Every implementation of one grid, in the report's order (the graph
/// benchmarks take some of them as their peers).
pub(super) fn impls<const G: usize, const R: u32>() -> Vec<Impl> {
    vec![
        Impl {
            name: SERIAL,
            kind: Kind::Serial,
            run: |_| serial::<G, R>(),
        },
        Impl {
            name: DELAYED,
            kind: Kind::SelvedgeSpawn,
            run: |p| p.selvedge.run(delayed::<G, R>),
        },
        Impl {
            name: FROM_MAIN,
            kind: Kind::SelvedgeSpawn,
            run: |p| submitted::<G, R>(&p.selvedge),
        },
        Impl {
            name: ROWS,
            kind: Kind::SelvedgeSpawn,
            run: |p| p.selvedge.run(rows_delayed::<G, R>),
        },
        Impl {
            name: AHEAD,
            kind: Kind::SelvedgeSpawn,
            run: |p| p.selvedge.run(ahead_delayed::<G, R>),
        },
        Impl {
            name: SUCCESSORS,
            kind: Kind::SelvedgeSpawn,
            run: |p| p.selvedge.run(successors_delayed::<G, R>),
        },
        Impl {
            name: SCOPE_DELAYED,
            kind: Kind::SelvedgeStructured,
            run: |p| p.selvedge.run(scope_delayed::<G, R>),
        },
        Impl {
            name: RAYON_BARRIER,
            kind: Kind::Rayon,
            run: |p| p.rayon.install(rayon_barrier::<G, R>),
        },
    ]
}

// ---------------------------------------------------------------------------
// The tile
// ---------------------------------------------------------------------------

/// `rounds` steps of a two-lane mixing loop seeded from the up and left
/// digests (and the tile's index); each step needs the one before, so the
/// loop cannot be shortened or overlapped. Returns the tile's digest.
#[inline(never)]
pub fn tile_kernel(idx: usize, up: u64, left: u64, rounds: u32) -> u64 {
    let mut x = up ^ (idx as u64).wrapping_mul(0xA24B_AED4_963E_E407);
    let mut y = left.rotate_left(29);
    for _ in 0..rounds {
        x = mix(x.wrapping_add(y));
        y = y.rotate_left(5) ^ x;
    }
    x ^ y
}

/// Microseconds per tile of `rounds` rounds, measured serially: `tiles`
/// calls back to back, each fed the previous one's digest.
#[allow(dead_code)] // only the report calls it
pub fn tile_us(rounds: u32, tiles: usize) -> f64 {
    let mut h = black_box(tile_kernel(0, 1, 2, rounds));
    let start = Instant::now();
    for idx in 0..tiles {
        h = tile_kernel(idx, h, black_box(idx as u64), black_box(rounds));
    }
    let elapsed = start.elapsed();
    black_box(h);
    elapsed.as_secs_f64() * 1e6 / tiles as f64
}

/// The tiles' digests, row-major. Relaxed accesses: a tile reads its
/// neighbours only after a promise or a barrier ordered their writes before
/// it.
pub(super) type Digests = [AtomicU64];

pub(super) fn new_digests<const G: usize>() -> Box<Digests> {
    (0..G * G).map(|_| AtomicU64::new(0)).collect()
}

pub(super) fn checksum(digests: &Digests) -> u64 {
    digests
        .iter()
        .fold(0, |h, d| mix(h ^ d.load(Ordering::Relaxed)))
}

/// Runs tile `idx` from its neighbours' digests (the grid's edges are
/// seeded by position) and stores its own.
#[inline]
pub(super) fn run_tile<const G: usize, const R: u32>(digests: &Digests, idx: usize) {
    let (i, j) = (idx / G, idx % G);
    let up = if i > 0 {
        digests[idx - G].load(Ordering::Relaxed)
    } else {
        0x0E06_E000 ^ j as u64
    };
    let left = if j > 0 {
        digests[idx - 1].load(Ordering::Relaxed)
    } else {
        0x1EF7_0000 ^ i as u64
    };
    digests[idx].store(tile_kernel(idx, up, left, R), Ordering::Relaxed);
}

// ---------------------------------------------------------------------------
// Implementations
// ---------------------------------------------------------------------------

pub fn serial<const G: usize, const R: u32>() -> u64 {
    let digests = new_digests::<G>();
    for idx in 0..G * G {
        run_tile::<G, R>(&digests, idx);
    }
    checksum(&digests)
}

/// What the `'static` tasks share: one reference count per task instead of
/// two. Aligned to 128 bytes so that the `Arc`'s reference count, which
/// the maker raises and every tile's task lowers (on whichever core ran
/// it), has its cache lines to itself: next to it, the digests' pointer
/// and the loop promise that every tile reads moved between the cores
/// with it, and the 1 µs wavefront took about 15% longer (a probe on 2
/// threads; in `bench_report` the difference was within its noise).
#[repr(align(128))]
struct Shared {
    digests: Box<Digests>,
    done: LoopPromise,
}

impl Shared {
    fn new<const G: usize>() -> Arc<Self> {
        Arc::new(Shared {
            digests: new_digests::<G>(),
            done: LoopPromise::new(0..G * G),
        })
    }

    /// Tile `idx`'s task: the tile, then its promise.
    fn tile<const G: usize, const R: u32>(self: Arc<Self>, idx: usize) -> impl FnOnce() + Send {
        move || {
            run_tile::<G, R>(&self.digests, idx);
            self.done.fulfill(idx);
        }
    }

    /// Tile `idx`'s task when each tile makes the next ones: the tile, its
    /// promise, then the task of the tile below it (and, on the first row,
    /// of the tile to its right), each of which has its other dependency
    /// still to wait for, or not.
    fn tile_making_next<const G: usize, const R: u32>(
        self: Arc<Self>,
        idx: usize,
    ) -> impl FnOnce() + Send {
        move || {
            run_tile::<G, R>(&self.digests, idx);
            self.done.fulfill(idx);
            let (i, j) = (idx / G, idx % G);
            if i + 1 < G {
                self.make_next::<G, R>(idx + G);
            }
            if i == 0 && j + 1 < G {
                self.make_next::<G, R>(idx + 1);
            }
        }
    }

    /// Waits for the bottom-right tile, which depends on every other one,
    /// through its promise (when no handle of it is kept); the checksum.
    fn wait_for_last<const G: usize>(&self) -> u64 {
        selvedge::spawn_delayed([self.done.at(G * G - 1)], || ()).join();
        checksum(&self.digests)
    }

    fn make_next<const G: usize, const R: u32>(self: &Arc<Self>, idx: usize) {
        let deps = tile_deps::<G>(&self.done, idx);
        drop(selvedge::spawn_delayed(
            deps,
            Arc::clone(self).tile_making_next::<G, R>(idx),
        ));
    }
}

/// How many rows the making task of [`ahead_delayed`] may run ahead of the
/// finished work.
const AHEAD_ROWS: usize = 8;

/// From inside `rt.run`: every tile `spawn_delayed` on its two neighbours.
pub fn delayed<const G: usize, const R: u32>() -> u64 {
    made_up_front::<G>(|shared, idx| {
        selvedge::spawn_delayed(tile_deps::<G>(&shared.done, idx), shared.tile::<G, R>(idx))
    })
}

/// As [`delayed`], but before making each row the making task waits for
/// the last tile of the row `AHEAD_ROWS` above (its worker runs tiles
/// meanwhile), so that it stays within that many rows of the finished
/// work.
pub fn ahead_delayed<const G: usize, const R: u32>() -> u64 {
    made_up_front::<G>(|shared, idx| {
        if idx % G == 0 && idx / G >= AHEAD_ROWS {
            let last_of_row_above = idx - (AHEAD_ROWS - 1) * G - 1;
            selvedge::spawn_delayed([shared.done.at(last_of_row_above)], || ()).join();
        }
        selvedge::spawn_delayed(tile_deps::<G>(&shared.done, idx), shared.tile::<G, R>(idx))
    })
}

/// From inside `rt.run`: the first tile's task only; each tile's task
/// makes the next ones (see `Shared::tile_making_next`), and the
/// bottom-right tile is waited for through its promise.
pub fn successors_delayed<const G: usize, const R: u32>() -> u64 {
    let shared = Shared::new::<G>();
    drop(selvedge::spawn(
        Arc::clone(&shared).tile_making_next::<G, R>(0),
    ));
    shared.wait_for_last::<G>()
}

/// From the calling thread (not a worker): every tile `Runtime::spawn_delayed`.
pub fn submitted<const G: usize, const R: u32>(rt: &selvedge::Runtime) -> u64 {
    made_up_front::<G>(|shared, idx| {
        rt.spawn_delayed(tile_deps::<G>(&shared.done, idx), shared.tile::<G, R>(idx))
    })
}

/// From inside `rt.run`: a task per row makes that row's tiles, the rows'
/// makers spawned into a scope so that they run in parallel; then the
/// bottom-right tile, which depends on every other one, is waited for
/// through its promise (every tile's handle is dropped).
pub fn rows_delayed<const G: usize, const R: u32>() -> u64 {
    let shared = Shared::new::<G>();
    selvedge::scope(|s| {
        for i in 0..G {
            let shared = &shared;
            s.spawn(move |_| {
                for idx in i * G..(i + 1) * G {
                    let deps = tile_deps::<G>(&shared.done, idx);
                    drop(selvedge::spawn_delayed(
                        deps,
                        Arc::clone(shared).tile::<G, R>(idx),
                    ));
                }
            });
        }
    });
    shared.wait_for_last::<G>()
}

/// Every tile made up front, row-major, by `make` (which gives it the
/// shared state and its index); then the bottom-right tile, which depends
/// on every other one, is joined.
fn made_up_front<const G: usize>(
    mut make: impl FnMut(Arc<Shared>, usize) -> selvedge::JoinHandle<()>,
) -> u64 {
    let shared = Shared::new::<G>();
    let mut last = None;
    for idx in 0..G * G {
        let handle = make(Arc::clone(&shared), idx);
        if idx == G * G - 1 {
            last = Some(handle);
        }
    }
    last.expect("at least one tile").join();
    checksum(&shared.digests)
}

pub fn scope_delayed<const G: usize, const R: u32>() -> u64 {
    let digests = new_digests::<G>();
    let done = LoopPromise::new(0..G * G);
    selvedge::scope(|s| {
        let (digests, done) = (&*digests, &done);
        for idx in 0..G * G {
            s.spawn_delayed(tile_deps::<G>(done, idx), move |_| {
                run_tile::<G, R>(digests, idx);
                done.fulfill(idx);
            });
        }
    });
    checksum(&digests)
}

pub fn rayon_barrier<const G: usize, const R: u32>() -> u64 {
    let digests = new_digests::<G>();
    for d in 0..2 * G - 1 {
        diagonal::<G>(d)
            .into_par_iter()
            .for_each(|i| run_tile::<G, R>(&digests, i * G + d - i));
    }
    checksum(&digests)
}

//! Dataflow workloads: what a promise costs, how fast a chain of
//! promises runs, and what dataflow buys over a barrier. Shared by
//! `tools/benches/dataflow.rs` (criterion) and `tools/src/bin/bench_report/main.rs` (the
//! markdown report), which both use its `Pools` and `Workload` table.
//!
//! Every implementation returns a checksum that must equal the serial one
//! (checked by [`Dataflow::verify`] outside the timed loop), and each run is
//! one whole workload, its tasks and promises created inside the timed
//! region, in a pool built once.
//!
//! # Promise overhead ([`OVERHEAD_TASKS`] trivial tasks per run)
//!
//! Inside one `rt.run`, K tasks whose work is a multiply and a rotate, so
//! the time is the scheduling:
//!
//! - `selvedge spawn`: K × `selvedge::spawn`, then every handle joined in
//!   spawn order. The baseline the promise figures are measured against.
//! - `selvedge spawn_delayed, 1 promise`: per task a fresh `Promise`,
//!   `spawn_delayed([p.dep()], ..)`, *then* `p.fulfill()`. Fulfilling after
//!   the spawn makes every task take the slow path the feature exists for:
//!   the task parks on the promise's event and the fulfill drains it and
//!   schedules it (a task whose dependencies are already fulfilled at spawn
//!   time would skip parking). The promise is dropped fulfilled.
//! - `selvedge spawn_delayed, 4 promises`: the same with four promises per
//!   task, fulfilled in creation order. A task waits on its lowest-addressed
//!   unfulfilled promise only: depending on where the allocator put the
//!   four (glibc hands them out in ascending and descending order by
//!   turns here), it either re-parks on each in turn or stays on one until
//!   the last fulfill and then walks past the other three; a run mixes both.
//! - `rayon scope.spawn`: the same K tasks in a `rayon::scope`, each
//!   writing its result to its own slot (rayon has no handles); the
//!   external reference for what one task costs.
//! - `serial`: the K calls inline, for the checksum and the work's own cost.
//!
//! - `selvedge spawn_delayed on 2 open iterations, making only`: per task
//!   `spawn_delayed([lp.at(2i), lp.at(2i + 1)], ..)` on a loop promise
//!   none of whose iterations is fulfilled yet, timed over the making
//!   alone (nothing runs meanwhile: every task parks); the iterations are
//!   fulfilled and the handles joined after the clock stops. What one
//!   thread pays to make a delayed task with two dependencies.
//!
//! The report derives the cost of a dependency as
//! `(delayed_k − spawn) / k` ns per task (target: at most 50 ns), and
//! takes the making cost from its own row (target: at most 60 ns).
//!
//! # Chain latency ([`CHAIN_LINKS`] links per run)
//!
//! A chain where link `i` may only start once link `i − 1` finished, each
//! link folding its index into a running value (so a link that ran out of
//! order changes the checksum). No link has parallel slack: the time is the
//! latency of handing control from one task to the next.
//!
//! - `selvedge spawn_delayed chain`: all N tasks spawned up front, task `i`
//!   delayed on promise `i` and fulfilling promise `i + 1` when done; then
//!   promise 0 is fulfilled and the last task's handle joined. The run's
//!   time covers the up-front spawns too (as the peers' times cover creating
//!   their tasks); the same run also times itself from the fulfill of
//!   promise 0 to the end of the last link, reported as its own row
//!   (`.., from the first fulfill`): the pure hand-off latency, with every
//!   task already parked. The running value sits in an `Arc` the tasks
//!   share (`spawn_delayed` tasks are `'static`).
//! - `selvedge scope.spawn_delayed chain`: the same chain in a scope, the
//!   tasks borrowing the value and the scope waiting for them (also timed
//!   from the first fulfill to the scope's end).
//! - `selvedge spawn+join round trips`: N × `selvedge::spawn(link).join()`
//!   from the root task: each task is created when the previous one
//!   returned, and the join normally takes it back and runs it in place.
//! - `selvedge scope chain` and `rayon scope chain`: each link, as its last
//!   act, spawns the next into the scope (`s.spawn`); the scope returns
//!   once the last link ran. This is the fair rayon equivalent: as in the
//!   promise chain, every link is a separate task that becomes runnable
//!   only when its predecessor's body is done, and one wait covers the
//!   whole chain (rayon has no dataflow to express it otherwise).
//! - `serial`: the fold as a loop.
//!
//! # Tiled wavefront ([`GRID`] × [`GRID`] tiles, Smith-Waterman-like)
//!
//! Tile `(i, j)` needs tiles `(i − 1, j)` and `(i, j − 1)`: the dependency
//! pattern of a blocked Smith-Waterman (or any 2-D dynamic program). Each
//! tile runs a real local-alignment DP, [`TILE_COLS`] columns by
//! `units × ROWS_PER_UNIT` rows, over two random DNA strings seeded from its
//! up and left neighbours' digests; its digest (score, last row) feeds its
//! own neighbours. So the result depends on every tile having seen its
//! neighbours' finished digests, and every implementation must reproduce
//! the serial checksum.
//!
//! Costs are heavy-tailed (seeded [`SplitMix64`], [`WAVEFRONT_SEED`]): most
//! tiles cost 2 to 12 units, one in ten 20 times that. With a barrier
//! between anti-diagonals, a diagonal holding a heavy tile keeps every
//! thread waiting for it, and the short diagonals at both ends leave
//! threads idle; with promises, a tile starts the moment its two
//! neighbours are done, so work from later diagonals fills those gaps.
//!
//! - `serial`: row-major.
//! - `selvedge spawn_delayed`: one `LoopPromise` over the tiles; every tile
//!   spawned up front (row-major) as `spawn_delayed` on its up and left
//!   tiles, fulfilling its own iteration when done; the bottom-right tile
//!   depends on every other, so joining its handle waits for all. No
//!   barrier.
//! - `selvedge scope.spawn_delayed`: the same in a scope, borrowing the
//!   tiles instead of sharing them through an `Arc`.
//! - `selvedge barrier (scope per diagonal)`: the barrier algorithm on
//!   selvedge, separating the scheduler's share from the algorithm's.
//! - `rayon barrier (par_iter per diagonal)`: the reference, `par_iter` over
//!   each anti-diagonal with the implicit barrier between them.
//! - `rayon scope + dependency counters`: dataflow done by hand on rayon,
//!   a per-tile countdown of unfinished neighbours, the task that brings it
//!   to zero spawning the tile: what promises replace.
//!
//! Targets (2 threads): selvedge at least 1.2x faster than the rayon
//! barrier version, and at most 10% over half the serial time.
//!
//! # Fine-grained wavefront
//!
//! The same dependency pattern with many small, equal tiles (256 × 256 of
//! about 1 µs, 64 × 64 of about 5 µs), where the per-tile cost of the
//! promises shows: see [`fine_wavefront`], whose two entries [`all`]
//! appends.

use std::hint::black_box;
use std::time::Duration;

use crate::workloads::{Impl, Kind, Pools, Workload};

mod kernels;
pub use kernels::{
    chain_delayed, chain_rayon_scope, chain_scope_delayed, chain_selvedge_scope, chain_serial,
    chain_spawn_join, overhead_delayed, overhead_make_2, overhead_rayon, overhead_serial,
    overhead_spawn, tile_units, wavefront_delayed, wavefront_rayon_barrier,
    wavefront_rayon_counters, wavefront_scope_delayed, wavefront_selvedge_barrier,
    wavefront_serial, SplitMix64,
};
// The tiled wavefront's grid walk and mix, which fine_wavefront shares.
use kernels::{diagonal, mix, tile_deps};

pub mod fine_wavefront;
pub mod graph_replay;
mod one_worker;

// ---------------------------------------------------------------------------
// Sizes
// ---------------------------------------------------------------------------

/// Tasks per promise-overhead run.
pub const OVERHEAD_TASKS: u64 = 10_000;
/// Links per chain run.
pub const CHAIN_LINKS: u64 = 10_000;
/// Tiles per side of the wavefront grid.
pub const GRID: usize = 16;
/// Tiles in the wavefront grid.
pub const TILES: usize = GRID * GRID;
/// DP columns per tile.
pub const TILE_COLS: usize = 64;
/// DP rows per unit of tile cost: a unit is one 64 × 64 block of DP cells,
/// about 6 µs on the 2-core development machine, where the serial
/// wavefront takes about 36 ms (the report prints the measured value).
pub const ROWS_PER_UNIT: u32 = 64;
/// Seed of the tile costs.
pub const WAVEFRONT_SEED: u64 = 0x5EED_0000_0000_0003;

// Implementation names: criterion function ids, and what the report looks
// the timings up by.
pub const SERIAL: &str = "serial";
pub const OVERHEAD_SPAWN: &str = "selvedge spawn";
pub const OVERHEAD_DELAYED_1: &str = "selvedge spawn_delayed, 1 promise";
pub const OVERHEAD_DELAYED_4: &str = "selvedge spawn_delayed, 4 promises";
pub const OVERHEAD_RAYON: &str = "rayon scope.spawn";
pub const OVERHEAD_MAKE_2: &str = "selvedge spawn_delayed on 2 open iterations, making only";
pub const OVERHEAD_SPAWN_ONE: &str = "selvedge spawn, one worker";
pub const OVERHEAD_DELAYED_1_ONE: &str = "selvedge spawn_delayed, 1 promise, one worker";
pub const CHAIN_DELAYED: &str = "selvedge spawn_delayed chain";
pub const CHAIN_SCOPE_DELAYED: &str = "selvedge scope.spawn_delayed chain";
pub const CHAIN_JOIN: &str = "selvedge spawn+join round trips";
pub const CHAIN_SCOPE: &str = "selvedge scope chain";
pub const CHAIN_RAYON: &str = "rayon scope chain";
pub const CHAIN_DELAYED_PHASE: &str = "selvedge spawn_delayed chain, from the first fulfill";
pub const CHAIN_SCOPE_DELAYED_PHASE: &str =
    "selvedge scope.spawn_delayed chain, from the first fulfill";
pub const WAVE_DELAYED: &str = "selvedge spawn_delayed";
pub const WAVE_SCOPE_DELAYED: &str = "selvedge scope.spawn_delayed";
pub const WAVE_SELVEDGE_BARRIER: &str = "selvedge barrier (scope per diagonal)";
pub const WAVE_RAYON_BARRIER: &str = "rayon barrier (par_iter per diagonal)";
pub const WAVE_RAYON_COUNTERS: &str = "rayon scope + dependency counters";

/// A dataflow workload: the table entry, and what one run is made of.
pub struct Dataflow {
    pub workload: Workload,
    /// Tasks, links or tiles per run (criterion's throughput, the report's
    /// per-unit figures).
    pub units: u64,
    /// What a unit is.
    #[allow(dead_code)] // only the report reads it
    pub unit: &'static str,
    /// Implementations that also time a part of their own run.
    pub phases: Vec<Phase>,
}

/// An implementation timed by itself over part of its run (say, from the
/// moment all its tasks are in place): returns the checksum and that time.
/// Criterion times it with `iter_custom`; the report gives it its own row.
pub struct Phase {
    pub name: &'static str,
    pub run: fn(&Pools) -> (u64, Duration),
}

impl Dataflow {
    /// Checks every implementation, phases included, against the serial one
    /// (outside any timed region). Returns the serial result.
    pub fn verify(&self, pools: &Pools) -> u64 {
        let want = self.workload.verify(pools);
        for phase in &self.phases {
            let (got, _) = (phase.run)(pools);
            assert_eq!(
                got, want,
                "{}/{}: result differs from serial",
                self.workload.group, phase.name
            );
        }
        want
    }
}

/// The dataflow workloads, each with all its implementations: promise
/// overhead, chain latency, the coarse wavefront, then the fine wavefront's
/// two grids.
pub fn all() -> Vec<Dataflow> {
    let mut all = vec![
        Dataflow {
            units: OVERHEAD_TASKS,
            unit: "task",
            phases: vec![
                Phase {
                    name: OVERHEAD_MAKE_2,
                    run: |p| {
                        p.selvedge
                            .run(|| overhead_make_2(black_box(OVERHEAD_TASKS)))
                    },
                },
                Phase {
                    name: OVERHEAD_SPAWN_ONE,
                    run: |_| one_worker::timed(|| overhead_spawn(black_box(OVERHEAD_TASKS))),
                },
                Phase {
                    name: OVERHEAD_DELAYED_1_ONE,
                    run: |_| one_worker::timed(|| overhead_delayed::<1>(black_box(OVERHEAD_TASKS))),
                },
            ],
            workload: Workload {
                group: "promise_overhead",
                title: format!("promise overhead ({OVERHEAD_TASKS} trivial tasks)"),
                producer_consumer: false,
                expected: None,
                impls: vec![
                    Impl {
                        name: SERIAL,
                        kind: Kind::Serial,
                        run: |_| overhead_serial(black_box(OVERHEAD_TASKS)),
                    },
                    Impl {
                        name: OVERHEAD_SPAWN,
                        kind: Kind::SelvedgeSpawn,
                        run: |p| p.selvedge.run(|| overhead_spawn(black_box(OVERHEAD_TASKS))),
                    },
                    Impl {
                        name: OVERHEAD_DELAYED_1,
                        kind: Kind::SelvedgeSpawn,
                        run: |p| {
                            p.selvedge
                                .run(|| overhead_delayed::<1>(black_box(OVERHEAD_TASKS)))
                        },
                    },
                    Impl {
                        name: OVERHEAD_DELAYED_4,
                        kind: Kind::SelvedgeSpawn,
                        run: |p| {
                            p.selvedge
                                .run(|| overhead_delayed::<4>(black_box(OVERHEAD_TASKS)))
                        },
                    },
                    Impl {
                        name: OVERHEAD_RAYON,
                        kind: Kind::Rayon,
                        run: |p| {
                            p.rayon
                                .install(|| overhead_rayon(black_box(OVERHEAD_TASKS)))
                        },
                    },
                ],
            },
        },
        Dataflow {
            units: CHAIN_LINKS,
            unit: "link",
            phases: vec![
                Phase {
                    name: CHAIN_DELAYED_PHASE,
                    run: |p| p.selvedge.run(|| chain_delayed(black_box(CHAIN_LINKS))),
                },
                Phase {
                    name: CHAIN_SCOPE_DELAYED_PHASE,
                    run: |p| {
                        p.selvedge
                            .run(|| chain_scope_delayed(black_box(CHAIN_LINKS)))
                    },
                },
            ],
            workload: Workload {
                group: "promise_chain",
                title: format!("chain latency ({CHAIN_LINKS} links)"),
                producer_consumer: false,
                expected: None,
                impls: vec![
                    Impl {
                        name: SERIAL,
                        kind: Kind::Serial,
                        run: |_| chain_serial(black_box(CHAIN_LINKS)),
                    },
                    Impl {
                        name: CHAIN_DELAYED,
                        kind: Kind::SelvedgeSpawn,
                        run: |p| p.selvedge.run(|| chain_delayed(black_box(CHAIN_LINKS)).0),
                    },
                    Impl {
                        name: CHAIN_SCOPE_DELAYED,
                        kind: Kind::SelvedgeStructured,
                        run: |p| {
                            p.selvedge
                                .run(|| chain_scope_delayed(black_box(CHAIN_LINKS)).0)
                        },
                    },
                    Impl {
                        name: CHAIN_JOIN,
                        kind: Kind::SelvedgeSpawn,
                        run: |p| p.selvedge.run(|| chain_spawn_join(black_box(CHAIN_LINKS))),
                    },
                    Impl {
                        name: CHAIN_SCOPE,
                        kind: Kind::SelvedgeStructured,
                        run: |p| {
                            p.selvedge
                                .run(|| chain_selvedge_scope(black_box(CHAIN_LINKS)))
                        },
                    },
                    Impl {
                        name: CHAIN_RAYON,
                        kind: Kind::Rayon,
                        run: |p| {
                            p.rayon
                                .install(|| chain_rayon_scope(black_box(CHAIN_LINKS)))
                        },
                    },
                ],
            },
        },
        Dataflow {
            units: TILES as u64,
            unit: "tile",
            phases: Vec::new(),
            workload: Workload {
                group: "wavefront",
                title: format!(
                    "tiled wavefront ({GRID}x{GRID} tiles, {} units)",
                    tile_units().iter().sum::<u32>()
                ),
                producer_consumer: false,
                expected: None,
                impls: vec![
                    Impl {
                        name: SERIAL,
                        kind: Kind::Serial,
                        run: |_| wavefront_serial(),
                    },
                    Impl {
                        name: WAVE_DELAYED,
                        kind: Kind::SelvedgeSpawn,
                        run: |p| p.selvedge.run(wavefront_delayed),
                    },
                    Impl {
                        name: WAVE_SCOPE_DELAYED,
                        kind: Kind::SelvedgeStructured,
                        run: |p| p.selvedge.run(wavefront_scope_delayed),
                    },
                    Impl {
                        name: WAVE_SELVEDGE_BARRIER,
                        kind: Kind::SelvedgeStructured,
                        run: |p| p.selvedge.run(wavefront_selvedge_barrier),
                    },
                    Impl {
                        name: WAVE_RAYON_BARRIER,
                        kind: Kind::Rayon,
                        run: |p| p.rayon.install(wavefront_rayon_barrier),
                    },
                    Impl {
                        name: WAVE_RAYON_COUNTERS,
                        kind: Kind::RayonAlt,
                        run: |p| p.rayon.install(wavefront_rayon_counters),
                    },
                ],
            },
        },
    ];
    all.extend(fine_wavefront::all());
    all
}

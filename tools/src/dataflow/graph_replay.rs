//! Graphs built once and replayed, on the fine-grained wavefront's tiles
//! (see [`super::fine_wavefront`]): tile `(i, j)` after `(i − 1, j)` and
//! `(i, j − 1)`, each tile a chain of mixing rounds seeded from its
//! neighbours' digests, every implementation checked against the serial
//! checksum. A child module of `dataflow.rs`, used by `tools/benches/graph.rs`
//! (criterion) and `tools/src/bin/bench_report/main.rs` (`--only graph`).
//!
//! Three grids: 256 × 256 tiles of about 1 µs, 64 × 64 of about 5 µs, and
//! 256 × 256 tiles with no rounds at all (a load, a few arithmetic
//! instructions, a store), where the time is what a node costs the
//! runtime.
//!
//! - `serial`: row-major.
//! - `selvedge graph (replayed)`: one `selvedge::Graph` per grid, a node
//!   per tile and an edge per dependency, built the first time and run
//!   again on every call with `Runtime::run_graph`.
//! - `selvedge graph (built every run)`: the same graph built, run once and
//!   dropped on every call.
//! - `selvedge graph of Data tiles (replayed)`: every tile a
//!   `selvedge::Data<u64>`, every node declaring its tile's write and its
//!   neighbours' reads, no edge added by hand: the edges come from the
//!   declarations, and each run is ordered with outside tasks on all the
//!   tiles (one access to each, recorded in the tiles' logs by the first
//!   run and standing for the later ones while no task outside the graph
//!   uses the tiles). The node
//!   also stores its digest where the checksum reads it. On the 64 × 64
//!   grid, and on the empty 256 × 256 grid in a group of its own, last,
//!   with the hand-edged graph as its only peer: among the other rows its
//!   65,536 handles pushed their data out of the caches, so the samples
//!   taken after it were slower (a replayed empty node went from 14 to 23
//!   ns to 30 to 36 ns, while a probe without it saw no change).
//! - `selvedge spawn_delayed (made up front)`: a promise per tile and
//!   every tile's task made by the root task, as the fine wavefront's
//!   `spawn_delayed (inside rt.run)` row.
//! - `selvedge spawn_delayed (each tile makes the one below)`: as the fine
//!   wavefront's row of that name.
//! - `rayon barrier (par_iter per diagonal)`.
//!
//! Targets (2 threads): a replayed empty node at most 50 ns; the 1 µs grid
//! replayed within 1.1 × serial / threads and faster than the graph made
//! with promises every run; the 5 µs grid within 1.05 × serial / threads.

// `tools/benches/dataflow.rs` includes this module's parent but times none of it.
#![allow(dead_code)]

use std::sync::Mutex;

use selvedge::{Data, Graph, Node, Runtime};
use std::sync::atomic::Ordering;

use super::fine_wavefront::{self as fine, checksum, new_digests, run_tile, tile_kernel, Digests};
use super::{Dataflow, SERIAL, WAVE_RAYON_BARRIER};
use crate::workloads::{Impl, Kind, Workload};

/// Criterion groups (and what the report finds them by).
pub const LARGE_GROUP: &str = "graph_wavefront_256";
pub const SMALL_GROUP: &str = "graph_wavefront_64";
pub const EMPTY_GROUP: &str = "graph_wavefront_empty_256";
pub const EMPTY_DATA_GROUP: &str = "graph_wavefront_empty_256_data";

pub const REPLAYED: &str = "selvedge graph (replayed)";
pub const BUILT: &str = "selvedge graph (built every run)";
pub const DECLARED: &str = "selvedge graph of Data tiles (replayed)";
pub const DELAYED: &str = "selvedge spawn_delayed (made up front)";
pub const SUCCESSORS: &str = fine::SUCCESSORS;
pub const RAYON_BARRIER: &str = WAVE_RAYON_BARRIER;

/// The three grids: 1 µs tiles, 5 µs tiles, empty tiles; then the empty
/// grid again with its tiles as `Data`.
pub fn all() -> [Dataflow; 4] {
    [
        workload::<{ fine::LARGE_GRID }, { fine::LARGE_ROUNDS }>(LARGE_GROUP, "~1 µs"),
        workload::<{ fine::SMALL_GRID }, { fine::SMALL_ROUNDS }>(SMALL_GROUP, "~5 µs"),
        workload::<{ fine::LARGE_GRID }, 0>(EMPTY_GROUP, "no work"),
        empty_declared(),
    ]
}

/// The empty grid replayed with its tiles as `Data` (no edge by hand)
/// against the same graph with its edges by hand, in a group of their
/// own, last: the declared graph's 65,536 handles push the data of the
/// implementations sampled in turn with it out of the caches, its peer's
/// too, so this group's hand-edged row is not the empty grid's figure.
fn empty_declared() -> Dataflow {
    const G: usize = fine::LARGE_GRID;
    grid::<G>(
        EMPTY_DATA_GROUP,
        format!("graph wavefront ({G}x{G} tiles, no work, 0 rounds), tiles as Data"),
        vec![
            peer::<G, 0>(SERIAL),
            replayed_impl::<G, 0>(),
            declared_impl::<G, 0>(),
        ],
    )
}

fn workload<const G: usize, const R: u32>(group: &'static str, size: &str) -> Dataflow {
    let impls = vec![
        peer::<G, R>(SERIAL),
        replayed_impl::<G, R>(),
        Impl {
            name: BUILT,
            kind: Kind::SelvedgeSpawn,
            run: |p| built_every_run::<G, R>(&p.selvedge),
        },
        Impl {
            name: DELAYED,
            ..peer::<G, R>(fine::DELAYED)
        },
        peer::<G, R>(SUCCESSORS),
        peer::<G, R>(RAYON_BARRIER),
    ]
    .into_iter()
    .chain((G == fine::SMALL_GRID).then(declared_impl::<G, R>))
    .collect();
    grid::<G>(
        group,
        format!("graph wavefront ({G}x{G} tiles, {size}, {R} rounds)"),
        impls,
    )
}

/// A `G × G` grid's workload: its group, its title and what it times.
fn grid<const G: usize>(group: &'static str, title: String, impls: Vec<Impl>) -> Dataflow {
    Dataflow {
        units: (G * G) as u64,
        unit: "node",
        phases: Vec::new(),
        workload: Workload {
            group,
            title,
            producer_consumer: false,
            expected: None,
            impls,
        },
    }
}

/// The grid's graph with its edges by hand, replayed.
fn replayed_impl<const G: usize, const R: u32>() -> Impl {
    Impl {
        name: REPLAYED,
        kind: Kind::SelvedgeSpawn,
        run: |p| replayed::<G, R>(&p.selvedge),
    }
}

/// The grid's graph of `Data` tiles, replayed.
fn declared_impl<const G: usize, const R: u32>() -> Impl {
    Impl {
        name: DECLARED,
        kind: Kind::SelvedgeSpawn,
        run: |p| replayed_declared::<G, R>(&p.selvedge),
    }
}

/// The fine wavefront's implementation called `name`, on the same grid.
fn peer<const G: usize, const R: u32>(name: &str) -> Impl {
    fine::impls::<G, R>()
        .into_iter()
        .find(|imp| imp.name == name)
        .unwrap_or_else(|| panic!("the fine wavefront has no implementation `{name}`"))
}

/// Adds the wavefront's nodes and edges to `g`: node `idx` runs tile
/// `idx` of `digests`.
fn build<'g, const G: usize, const R: u32>(g: &mut Graph<'g>, digests: impl Fn() -> &'g Digests) {
    let mut nodes: Vec<Node> = Vec::with_capacity(G * G);
    for idx in 0..G * G {
        let d = digests();
        let node = g.node(move || run_tile::<G, R>(d, idx));
        if idx >= G {
            g.precede(nodes[idx - G], node);
        }
        if idx % G > 0 {
            g.precede(nodes[idx - 1], node);
        }
        nodes.push(node);
    }
}

/// Adds the wavefront to `g` with a `Data` per tile and no edge by hand:
/// node `idx` declares its tile's write and its neighbours' reads, and
/// stores its digest in `digests` too (for the checksum).
fn build_declared<'g, const G: usize, const R: u32>(g: &mut Graph<'g>, digests: &'g Digests) {
    let tiles: Vec<Data<u64>> = (0..G * G).map(|_| Data::new(0)).collect();
    for idx in 0..G * G {
        let (i, j) = (idx / G, idx % G);
        let finish = move |me: &mut u64, up: u64, left: u64| {
            *me = tile_kernel(idx, up, left, R);
            digests[idx].store(*me, Ordering::Relaxed);
        };
        let (edge_up, edge_left) = (0x0E06_E000 ^ j as u64, 0x1EF7_0000 ^ i as u64);
        let me = tiles[idx].write();
        match (i > 0, j > 0) {
            (true, true) => g.node_with(
                (me, tiles[idx - G].read(), tiles[idx - 1].read()),
                move |(me, up, left)| finish(me, *up, *left),
            ),
            (true, false) => g.node_with((me, tiles[idx - G].read()), move |(me, up)| {
                finish(me, *up, edge_left)
            }),
            (false, true) => g.node_with((me, tiles[idx - 1].read()), move |(me, left)| {
                finish(me, edge_up, *left)
            }),
            (false, false) => g.node_with(me, move |me| finish(me, edge_up, edge_left)),
        };
    }
}

/// A built graph kept for the next call, with the digests it writes.
struct Kept {
    grid: (usize, u32, bool),
    graph: Graph<'static>,
    digests: &'static Digests,
}

/// One graph per grid, built on first use. (The digests are leaked: they
/// live as long as the graph that writes them, which lives as long as the
/// process.)
static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

/// The grid's graph, built the first time, run once more.
pub fn replayed<const G: usize, const R: u32>(rt: &Runtime) -> u64 {
    replay::<G, R>(rt, false)
}

/// The grid's graph of `Data` tiles, built the first time, run once more.
pub fn replayed_declared<const G: usize, const R: u32>(rt: &Runtime) -> u64 {
    replay::<G, R>(rt, true)
}

fn replay<const G: usize, const R: u32>(rt: &Runtime, declared: bool) -> u64 {
    let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
    let at = match kept.iter().position(|k| k.grid == (G, R, declared)) {
        Some(at) => at,
        None => {
            let digests: &'static Digests = Box::leak(new_digests::<G>());
            let mut graph = Graph::new();
            if declared {
                build_declared::<G, R>(&mut graph, digests);
            } else {
                build::<G, R>(&mut graph, || digests);
            }
            kept.push(Kept {
                grid: (G, R, declared),
                graph,
                digests,
            });
            kept.len() - 1
        }
    };
    let k = &mut kept[at];
    rt.run_graph(&mut k.graph)
        .expect("the wavefront graph runs");
    checksum(k.digests)
}

/// The grid's graph built, run once and dropped.
pub fn built_every_run<const G: usize, const R: u32>(rt: &Runtime) -> u64 {
    let digests = new_digests::<G>();
    {
        let mut graph = Graph::new();
        build::<G, R>(&mut graph, || &*digests);
        rt.run_graph(&mut graph).expect("the wavefront graph runs");
    }
    checksum(&digests)
}

//! Parallel-loop workloads: what a loop iteration costs, four
//! data-parallel kernels from Weave's benchmark suite, and a two-loop
//! pipeline against the same loops behind a barrier. Shared by
//! `tools/benches/loops.rs` (criterion) and `tools/src/bin/bench_report/main.rs` (the
//! markdown report, `--only loops`), which both use its `Pools`.
//!
//! Every workload is written once per scheduler with the same loop
//! structure (what is parallel, what is nested in what, what is reduced),
//! plus a serial version. Every implementation returns a checksum that must
//! equal the serial one ([`LoopWorkload::verify`], outside any timed
//! region) and the time of its computation: inputs are built once
//! (`LazyLock`), output buffers are allocated once and reused (so no run
//! pays for fresh pages), and what a run writes is poisoned before the
//! clock starts and hashed after it stops. The timed region is the whole
//! `rt.run(..)` / `pool.install(..)` call, entry into the pool included.
//!
//! # Loop overhead (per-iteration ns)
//!
//! - `loop_empty`: [`EMPTY_N`] iterations whose body is `black_box(i)`:
//!   the cost of an iteration and nothing else. There is no result to
//!   check beyond the loop returning; the checksum is the length.
//! - `loop_sum`: [`SUM_N`] iterations folded into a `u64` (wrapping adds
//!   of [`term`]`(i)`, a multiply, a shift and a xor): `parallel_for(..)
//!   .reduce` against rayon's `into_par_iter().map(term).reduce(..)`.
//! - `loop_nested`: an outer parallel loop of [`NESTED_N`] rows, each an
//!   inner parallel reduce over [`NESTED_N`] columns of [`term`]`(i * n +
//!   j)`, the row's sum stored in its slot. Both schedulers split the inner
//!   loops only when a thread is idle.
//!
//! The sizes are the (so the nested loop takes well under a
//! millisecond). The report divides each median by the iteration count
//! (10^7, 10^7 and 10^6). Target (2 threads): selvedge's per-iteration
//! time at most rayon's.
//!
//! # Weave's suite (`benchmarks/` of mratsim/weave)
//!
//! - `histogram`: Weave's `histogram_2D`: for every interior cell of a
//!   [`HIST_N`]² `f32` matrix (seeded, uniform in [0, 1)), the sum of its
//!   absolute differences with its four neighbours, binned into
//!   [`HIST_BINS`] bins, and the largest such sum. A reduction over rows
//!   whose accumulator is the histogram (and the max): each part of the
//!   loop fills its own and parts merge by adding bins. Rayon: `fold` +
//!   `reduce` with the same accumulator.
//! - `logsumexp`: Weave's `logsumexp`: [`LSE_BATCHES`] batches of
//!   [`LSE_BATCH`] rows × [`LSE_LABELS`] labels (seeded), each batch's
//!   log-sum-exp in two parallel reductions over its rows: the max, then
//!   the sum of `exp(x - max)`. A row is folded serially (in `f64`), and
//!   rows are summed in 32.32 fixed point, so every merge order gives the
//!   same bits as the serial loop. Two short loops per batch, 2 ×
//!   [`LSE_BATCHES`] per run: this one also measures how fast a loop gets
//!   going when the other threads have just gone idle.
//! - `black_scholes`: PARSEC's Black-Scholes as in Weave's
//!   `black_scholes`: [`BS_OPTIONS`] European options (seeded), each priced
//!   into its own output slot. Selvedge `par_iter_mut` against rayon
//!   `par_iter_mut().enumerate()`; also `par_chunks_mut` with chunks of
//!   [`BS_CHUNK`] options.
//! - `transpose`: Weave's `matrix_transposition`, nested variant: a
//!   [`TR_M`] × [`TR_N`] `f32` matrix transposed, then transposed back,
//!   [`TR_ROUNDS`] times per run. Each transposition is an outer parallel
//!   loop over the rows of the output (`par_chunks_mut`) with an inner
//!   parallel loop over its columns (`par_iter_mut`); rayon the same
//!   nesting. The inner body is one strided load and one store, so this is
//!   the loop-overhead workload with real memory traffic.
//!
//! Target (2 threads): each selvedge version at least as fast as rayon's.
//!
//! # Pipelined loops (`loop_pipeline`)
//!
//! Loop A computes an item (a digest, from a chain of [`mix`] rounds) and
//! loop B consumes it (more rounds, seeded from A's digest), over
//! [`PIPE_ITEMS`] items. The costs are seeded and uneven: in A most items
//! cost 1 to 3 units and one in eight 16 times that; in B 2 to 4 units
//! ([`pipe_units`]). That is what makes a barrier between the loops cost
//! something: both schedulers split loop A until every iteration has
//! started, but the last iterations to finish are often heavy ones, and
//! with a barrier the other threads can only wait for them. With
//! `depends_on_each`, B's iteration `i` starts as soon as A fulfilled
//! `lp.at(i)`, so the idle threads run B for the items that are done.
//! (Uniform costs would leave the barrier almost free: lazy splitting
//! balances A to within one light iteration.)
//!
//! - `selvedge pipelined (depends_on_each)`: in a scope, B is spawned as a
//!   `parallel_for(..).depends_on_each(&lp).for_each(..)` task and A runs
//!   in place, `lp.fulfill(i)` after each item.
//! - `selvedge pipelined, buckets of 8`: the same with
//!   `LoopPromise::with_bucket_size(.., 8)`: B waits for whole buckets, so
//!   its parked parts are 8 times fewer and coarser, and while loop A runs
//!   a worker's deque holds fewer ready B parts (a steal request is
//!   answered from the deque before any loop is split).
//! - `selvedge barrier (for_each, for_each)` and `rayon barrier (for_each,
//!   for_each)`: loop A, then loop B.
//!
//! Target (2 threads): the pipelined version faster than the barrier ones.

use std::hint::black_box;
use std::time::{Duration, Instant};

use crate::workloads::{Kind, Pools};

mod kernels;
pub use kernels::{
    black_scholes_price, black_scholes_rayon, black_scholes_selvedge,
    black_scholes_selvedge_chunks, black_scholes_serial, empty_rayon, empty_selvedge, empty_serial,
    histogram_rayon, histogram_selvedge, histogram_serial, logsumexp_rayon, logsumexp_selvedge,
    logsumexp_serial, mix, nested_rayon, nested_selvedge, nested_serial, pipe_units, pipe_work,
    pipeline_rayon_barrier, pipeline_selvedge, pipeline_selvedge_barrier, pipeline_serial,
    sum_rayon, sum_selvedge, sum_serial, term, transpose_rayon, transpose_selvedge,
    transpose_serial, Hist, OptionData, PipeSlots,
};
use kernels::{
    bs_run, hist_run, lse_run, nested_run, pipe_run, transpose_rounds, transpose_run, with_result,
};

// ---------------------------------------------------------------------------
// Sizes
// ---------------------------------------------------------------------------

/// Iterations of the empty loop.
pub const EMPTY_N: usize = 10_000_000;
/// Iterations of the sum loop.
pub const SUM_N: usize = 10_000_000;
/// Rows and columns of the nested loop (`NESTED_N`² iterations).
pub const NESTED_N: usize = 1_000;
/// Side of the histogram's matrix.
pub const HIST_N: usize = 2_048;
/// Histogram bins (Weave's default).
pub const HIST_BINS: usize = 1_000;
/// Log-sum-exp: labels per row (Weave's image-classification shape), rows
/// per batch, batches per run.
pub const LSE_LABELS: usize = 1_000;
pub const LSE_BATCH: usize = 256;
pub const LSE_BATCHES: usize = 16;
/// Options priced per Black-Scholes run.
pub const BS_OPTIONS: usize = 1 << 19;
/// Options per chunk of the `par_chunks_mut` variant.
pub const BS_CHUNK: usize = 64;
/// Transposition: a `TR_M × TR_N` matrix (Weave's default shape), there
/// and back `TR_ROUNDS` times per run.
pub const TR_M: usize = 400;
pub const TR_N: usize = 4_000;
pub const TR_ROUNDS: usize = 2;
/// Items of the pipelined loops.
pub const PIPE_ITEMS: usize = 64;
/// Rounds of [`mix`] per unit of pipeline work (about 40 µs).
pub const PIPE_UNIT_ROUNDS: u32 = 10_000;
/// Bucket size of the bucketed pipeline.
pub const PIPE_BUCKET: usize = 8;
/// Seed of the inputs.
pub const SEED: u64 = 0x5EED_0000_0000_0004;

// Implementation names: criterion function ids, and what the report looks
// the timings up by.
pub const SERIAL: &str = "serial";
pub const SELVEDGE_FOR: &str = "selvedge parallel_for";
pub const RAYON_FOR: &str = "rayon into_par_iter";
pub const SELVEDGE_REDUCE: &str = "selvedge reduce";
pub const RAYON_FOLD: &str = "rayon fold+reduce";
pub const RAYON_REDUCE: &str = "rayon map+reduce";
pub const SELVEDGE_ITER_MUT: &str = "selvedge par_iter_mut";
pub const SELVEDGE_CHUNKS: &str = "selvedge par_chunks_mut (64 per chunk)";
pub const RAYON_ITER_MUT: &str = "rayon par_iter_mut";
pub const SELVEDGE_NESTED: &str = "selvedge par_chunks_mut > par_iter_mut";
pub const RAYON_NESTED: &str = "rayon par_chunks_mut > par_iter_mut";
pub const PIPE_SELVEDGE: &str = "selvedge pipelined (depends_on_each)";
pub const PIPE_SELVEDGE_BUCKETS: &str = "selvedge pipelined, buckets of 8";
pub const PIPE_SELVEDGE_BARRIER: &str = "selvedge barrier (for_each, for_each)";
pub const PIPE_RAYON_BARRIER: &str = "rayon barrier (for_each, for_each)";

// ---------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------

/// One implementation: returns the checksum and the time of its
/// computation (setup and checksum excluded).
pub struct LoopImpl {
    pub name: &'static str,
    pub kind: Kind,
    pub run: fn(&Pools) -> (u64, Duration),
}

/// What a workload's target compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Selvedge's time per iteration at most rayon's.
    PerIteration,
    /// Selvedge at least as fast as rayon.
    AsFastAsRayon,
    /// The pipelined version faster than the barrier versions.
    FasterThanBarrier,
}

pub struct LoopWorkload {
    /// Criterion group name.
    pub group: &'static str,
    /// Human-readable name with its size.
    pub title: String,
    /// Iterations, elements, options or items per run (criterion's
    /// throughput; the report's per-unit figures).
    pub units: u64,
    /// What a unit is.
    #[allow(dead_code)] // only the report reads it
    pub unit: &'static str,
    /// The selvedge implementation the target is about, and the rayon one
    /// it is compared with.
    #[allow(dead_code)] // only the report reads it
    pub selvedge: &'static str,
    #[allow(dead_code)] // only the report reads it
    pub rayon: &'static str,
    #[allow(dead_code)] // only the report reads it
    pub target: Target,
    pub impls: Vec<LoopImpl>,
}

impl LoopWorkload {
    /// Runs every implementation once and checks it against the serial
    /// one. Returns the serial checksum.
    pub fn verify(&self, pools: &Pools) -> u64 {
        let serial = self
            .impls
            .iter()
            .find(|i| i.kind == Kind::Serial)
            .expect("every workload has a serial implementation");
        let (want, _) = (serial.run)(pools);
        for imp in &self.impls {
            let (got, _) = (imp.run)(pools);
            assert_eq!(
                got, want,
                "{}/{}: result differs from serial",
                self.group, imp.name
            );
        }
        want
    }
}

/// Times `f` (the whole pool call).
#[inline]
fn timed(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

/// Every loop workload, each with all its implementations.
pub fn all() -> Vec<LoopWorkload> {
    vec![
        LoopWorkload {
            group: "loop_empty",
            title: format!("empty loop ({EMPTY_N} iterations, body `black_box(i)`)"),
            units: EMPTY_N as u64,
            unit: "iteration",
            selvedge: SELVEDGE_FOR,
            rayon: RAYON_FOR,
            target: Target::PerIteration,
            impls: vec![
                LoopImpl {
                    name: SERIAL,
                    kind: Kind::Serial,
                    run: |_| {
                        let n = black_box(EMPTY_N);
                        (n as u64, timed(|| empty_serial(n)))
                    },
                },
                LoopImpl {
                    name: SELVEDGE_FOR,
                    kind: Kind::SelvedgeStructured,
                    run: |p| {
                        let n = black_box(EMPTY_N);
                        (n as u64, timed(|| p.selvedge.run(|| empty_selvedge(n))))
                    },
                },
                LoopImpl {
                    name: RAYON_FOR,
                    kind: Kind::Rayon,
                    run: |p| {
                        let n = black_box(EMPTY_N);
                        (n as u64, timed(|| p.rayon.install(|| empty_rayon(n))))
                    },
                },
            ],
        },
        LoopWorkload {
            group: "loop_sum",
            title: format!("sum loop ({SUM_N} iterations, wrapping sum of `term(i)`)"),
            units: SUM_N as u64,
            unit: "iteration",
            selvedge: SELVEDGE_REDUCE,
            rayon: RAYON_REDUCE,
            target: Target::PerIteration,
            impls: vec![
                LoopImpl {
                    name: SERIAL,
                    kind: Kind::Serial,
                    run: |_| with_result(|| sum_serial(black_box(SUM_N))),
                },
                LoopImpl {
                    name: SELVEDGE_REDUCE,
                    kind: Kind::SelvedgeStructured,
                    run: |p| with_result(|| p.selvedge.run(|| sum_selvedge(black_box(SUM_N)))),
                },
                LoopImpl {
                    name: RAYON_REDUCE,
                    kind: Kind::Rayon,
                    run: |p| with_result(|| p.rayon.install(|| sum_rayon(black_box(SUM_N)))),
                },
            ],
        },
        LoopWorkload {
            group: "loop_nested",
            title: format!(
                "nested loops ({NESTED_N} x {NESTED_N}, inner reduce of `term`, outer stores)"
            ),
            units: (NESTED_N * NESTED_N) as u64,
            unit: "iteration",
            selvedge: SELVEDGE_FOR,
            rayon: RAYON_FOR,
            target: Target::PerIteration,
            impls: vec![
                LoopImpl {
                    name: SERIAL,
                    kind: Kind::Serial,
                    run: |_| nested_run(nested_serial),
                },
                LoopImpl {
                    name: SELVEDGE_FOR,
                    kind: Kind::SelvedgeStructured,
                    run: |p| nested_run(|rows| p.selvedge.run(|| nested_selvedge(rows))),
                },
                LoopImpl {
                    name: RAYON_FOR,
                    kind: Kind::Rayon,
                    run: |p| nested_run(|rows| p.rayon.install(|| nested_rayon(rows))),
                },
            ],
        },
        LoopWorkload {
            group: "histogram",
            title: format!("histogram ({HIST_N}x{HIST_N} f32, {HIST_BINS} bins)"),
            units: ((HIST_N - 2) * (HIST_N - 2)) as u64,
            unit: "cell",
            selvedge: SELVEDGE_REDUCE,
            rayon: RAYON_FOLD,
            target: Target::AsFastAsRayon,
            impls: vec![
                LoopImpl {
                    name: SERIAL,
                    kind: Kind::Serial,
                    run: |_| hist_run(histogram_serial),
                },
                LoopImpl {
                    name: SELVEDGE_REDUCE,
                    kind: Kind::SelvedgeStructured,
                    run: |p| hist_run(|m| p.selvedge.run(|| histogram_selvedge(m))),
                },
                LoopImpl {
                    name: RAYON_FOLD,
                    kind: Kind::Rayon,
                    run: |p| hist_run(|m| p.rayon.install(|| histogram_rayon(m))),
                },
            ],
        },
        LoopWorkload {
            group: "logsumexp",
            title: format!(
                "log-sum-exp ({LSE_BATCHES} batches of {LSE_BATCH}x{LSE_LABELS} f32, \
                 2 loops per batch)"
            ),
            units: (LSE_BATCHES * LSE_BATCH * LSE_LABELS) as u64,
            unit: "element",
            selvedge: SELVEDGE_REDUCE,
            rayon: RAYON_REDUCE,
            target: Target::AsFastAsRayon,
            impls: vec![
                LoopImpl {
                    name: SERIAL,
                    kind: Kind::Serial,
                    run: |_| lse_run(logsumexp_serial),
                },
                LoopImpl {
                    name: SELVEDGE_REDUCE,
                    kind: Kind::SelvedgeStructured,
                    run: |p| lse_run(|x| p.selvedge.run(|| logsumexp_selvedge(x))),
                },
                LoopImpl {
                    name: RAYON_REDUCE,
                    kind: Kind::Rayon,
                    run: |p| lse_run(|x| p.rayon.install(|| logsumexp_rayon(x))),
                },
            ],
        },
        LoopWorkload {
            group: "black_scholes",
            title: format!("Black-Scholes ({BS_OPTIONS} options, f32)"),
            units: BS_OPTIONS as u64,
            unit: "option",
            selvedge: SELVEDGE_ITER_MUT,
            rayon: RAYON_ITER_MUT,
            target: Target::AsFastAsRayon,
            impls: vec![
                LoopImpl {
                    name: SERIAL,
                    kind: Kind::Serial,
                    run: |_| bs_run(black_scholes_serial),
                },
                LoopImpl {
                    name: SELVEDGE_ITER_MUT,
                    kind: Kind::SelvedgeStructured,
                    run: |p| bs_run(|o, out| p.selvedge.run(|| black_scholes_selvedge(o, out))),
                },
                LoopImpl {
                    name: SELVEDGE_CHUNKS,
                    kind: Kind::SelvedgeSpawn,
                    run: |p| {
                        bs_run(|o, out| p.selvedge.run(|| black_scholes_selvedge_chunks(o, out)))
                    },
                },
                LoopImpl {
                    name: RAYON_ITER_MUT,
                    kind: Kind::Rayon,
                    run: |p| bs_run(|o, out| p.rayon.install(|| black_scholes_rayon(o, out))),
                },
            ],
        },
        LoopWorkload {
            group: "transpose",
            title: format!("transposition ({TR_M}x{TR_N} f32, there and back x {TR_ROUNDS})"),
            units: (2 * TR_ROUNDS * TR_M * TR_N) as u64,
            unit: "element",
            selvedge: SELVEDGE_NESTED,
            rayon: RAYON_NESTED,
            target: Target::AsFastAsRayon,
            impls: vec![
                LoopImpl {
                    name: SERIAL,
                    kind: Kind::Serial,
                    run: |_| transpose_run(|a, t, b| transpose_rounds(a, t, b, transpose_serial)),
                },
                LoopImpl {
                    name: SELVEDGE_NESTED,
                    kind: Kind::SelvedgeStructured,
                    run: |p| {
                        transpose_run(|a, t, b| {
                            p.selvedge
                                .run(|| transpose_rounds(a, t, b, transpose_selvedge))
                        })
                    },
                },
                LoopImpl {
                    name: RAYON_NESTED,
                    kind: Kind::Rayon,
                    run: |p| {
                        transpose_run(|a, t, b| {
                            p.rayon
                                .install(|| transpose_rounds(a, t, b, transpose_rayon))
                        })
                    },
                },
            ],
        },
        LoopWorkload {
            group: "loop_pipeline",
            title: format!(
                "pipelined loops ({PIPE_ITEMS} items, {} units in loop A, {} in loop B)",
                pipe_units().0.iter().sum::<u32>(),
                pipe_units().1.iter().sum::<u32>()
            ),
            units: PIPE_ITEMS as u64,
            unit: "item",
            selvedge: PIPE_SELVEDGE,
            rayon: PIPE_RAYON_BARRIER,
            target: Target::FasterThanBarrier,
            impls: vec![
                LoopImpl {
                    name: SERIAL,
                    kind: Kind::Serial,
                    run: |_| pipe_run(pipeline_serial),
                },
                LoopImpl {
                    name: PIPE_SELVEDGE,
                    kind: Kind::SelvedgeStructured,
                    run: |p| pipe_run(|s| p.selvedge.run(|| pipeline_selvedge(s, 1))),
                },
                LoopImpl {
                    name: PIPE_SELVEDGE_BUCKETS,
                    kind: Kind::SelvedgeStructured,
                    run: |p| pipe_run(|s| p.selvedge.run(|| pipeline_selvedge(s, PIPE_BUCKET))),
                },
                LoopImpl {
                    name: PIPE_SELVEDGE_BARRIER,
                    kind: Kind::SelvedgeSpawn,
                    run: |p| pipe_run(|s| p.selvedge.run(|| pipeline_selvedge_barrier(s))),
                },
                LoopImpl {
                    name: PIPE_RAYON_BARRIER,
                    kind: Kind::Rayon,
                    run: |p| pipe_run(|s| p.rayon.install(|| pipeline_rayon_barrier(s))),
                },
            ],
        },
    ]
}

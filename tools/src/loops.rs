//! Parallel-loop workloads (issue #4): what a loop iteration costs, four
//! data-parallel kernels from Weave's benchmark suite, and a two-loop
//! pipeline against the same loops behind a barrier. Shared by
//! `tools/benches/loops.rs` (criterion) and `tools/src/bin/bench_report/main.rs` (the
//! markdown report, `--only loops`), which both include this file next to
//! `mod.rs` and use its `Pools`.
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rayon::prelude::*;
use selvedge::{par_chunks_mut, par_iter_mut, parallel_for, LoopPromise};

use crate::workloads::{Kind, Pools};

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

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// SplitMix64's finalizer: a bijective 64-bit mix.
#[inline]
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A seeded generator (SplitMix64) for the inputs.
struct Rng(u64);

impl Rng {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }

    /// Uniform in [0, 1).
    fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in [lo, hi).
    fn range_f32(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.next_f32()
    }
}

/// An order-sensitive hash of a slice of floats' bits (computed outside
/// the timed region).
fn hash_f32(values: &[f32]) -> u64 {
    values.iter().fold(values.len() as u64, |h, v| {
        (h ^ u64::from(v.to_bits())).wrapping_mul(0x100_0000_01B3)
    })
}

/// Runs `f`, timing it, and returns its result with the time.
fn with_result(f: impl FnOnce() -> u64) -> (u64, Duration) {
    let start = Instant::now();
    let r = f();
    (r, start.elapsed())
}

/// A reusable output buffer: allocated and touched once, so no run pays
/// for page faults, and poisoned (NaN) before each run, so a run that
/// skips an element cannot pass on a previous run's output.
fn buffer(slot: &'static Mutex<Vec<f32>>, len: usize) -> MutexGuard<'static, Vec<f32>> {
    let mut buf = slot.lock().unwrap_or_else(|e| e.into_inner());
    buf.resize(len, f32::NAN);
    buf.fill(f32::NAN);
    buf
}

// ---------------------------------------------------------------------------
// Loop overhead
// ---------------------------------------------------------------------------

/// The sum loops' body: a multiply, a shift and a xor.
#[inline(always)]
pub fn term(i: usize) -> u64 {
    let x = i as u64;
    x.wrapping_mul(x) ^ (x >> 3)
}

pub fn empty_serial(n: usize) {
    for i in 0..n {
        black_box(i);
    }
}

pub fn empty_selvedge(n: usize) {
    parallel_for(0..n).for_each(|i| {
        black_box(i);
    });
}

pub fn empty_rayon(n: usize) {
    (0..n).into_par_iter().for_each(|i| {
        black_box(i);
    });
}

pub fn sum_serial(n: usize) -> u64 {
    (0..n).map(term).fold(0, u64::wrapping_add)
}

pub fn sum_selvedge(n: usize) -> u64 {
    parallel_for(0..n).reduce(|| 0, |acc, i| acc.wrapping_add(term(i)), u64::wrapping_add)
}

pub fn sum_rayon(n: usize) -> u64 {
    (0..n)
        .into_par_iter()
        .map(term)
        .reduce(|| 0, u64::wrapping_add)
}

/// Runs a nested-loop implementation on fresh row slots (`NESTED_N`, not
/// timed) and hashes them.
fn nested_run(f: impl FnOnce(&[AtomicU64])) -> (u64, Duration) {
    let rows: Vec<AtomicU64> = (0..NESTED_N).map(|_| AtomicU64::new(0)).collect();
    let elapsed = timed(|| f(&rows));
    let h = rows
        .iter()
        .fold(0, |h, r| mix(h ^ r.load(Ordering::Relaxed)));
    (h, elapsed)
}

#[inline(always)]
fn nested_row(i: usize, j: usize) -> u64 {
    term(i * NESTED_N + j)
}

pub fn nested_serial(rows: &[AtomicU64]) {
    for (i, row) in rows.iter().enumerate() {
        let sum = (0..NESTED_N)
            .map(|j| nested_row(i, j))
            .fold(0, u64::wrapping_add);
        row.store(sum, Ordering::Relaxed);
    }
}

pub fn nested_selvedge(rows: &[AtomicU64]) {
    parallel_for(0..rows.len()).for_each(|i| {
        let sum = parallel_for(0..NESTED_N).reduce(
            || 0,
            |acc, j| acc.wrapping_add(nested_row(i, j)),
            u64::wrapping_add,
        );
        rows[i].store(sum, Ordering::Relaxed);
    });
}

pub fn nested_rayon(rows: &[AtomicU64]) {
    (0..rows.len()).into_par_iter().for_each(|i| {
        let sum = (0..NESTED_N)
            .into_par_iter()
            .map(|j| nested_row(i, j))
            .reduce(|| 0, u64::wrapping_add);
        rows[i].store(sum, Ordering::Relaxed);
    });
}

// ---------------------------------------------------------------------------
// Histogram (Weave's histogram_2D)
// ---------------------------------------------------------------------------

/// The matrix, row-major, uniform in [0, 1).
fn hist_matrix() -> &'static [f32] {
    static M: LazyLock<Vec<f32>> = LazyLock::new(|| {
        let mut rng = Rng(SEED ^ 0x4157);
        (0..HIST_N * HIST_N).map(|_| rng.next_f32()).collect()
    });
    &M
}

/// A histogram and the largest value binned: the reduction's accumulator.
pub struct Hist {
    bins: Vec<u32>,
    max: f32,
}

impl Hist {
    fn new() -> Self {
        Hist {
            bins: vec![0; HIST_BINS],
            max: 0.0,
        }
    }

    fn merge(mut self, other: Hist) -> Hist {
        for (a, b) in self.bins.iter_mut().zip(&other.bins) {
            *a += b;
        }
        self.max = self.max.max(other.max);
        self
    }

    fn checksum(&self) -> u64 {
        self.bins
            .iter()
            .fold(u64::from(self.max.to_bits()), |h, &b| mix(h ^ u64::from(b)))
    }

    /// Bins the interior cells of row `i` (1 ≤ i < n − 1).
    #[inline]
    fn add_row(&mut self, m: &[f32], i: usize) {
        const N: usize = HIST_N;
        let (up, row, down) = (
            &m[(i - 1) * N..i * N],
            &m[i * N..(i + 1) * N],
            &m[(i + 1) * N..(i + 2) * N],
        );
        let scale = HIST_BINS as f32 / 4.0;
        for j in 1..N - 1 {
            let c = row[j];
            let sum = (c - up[j]).abs()
                + (c - down[j]).abs()
                + (c - row[j - 1]).abs()
                + (c - row[j + 1]).abs();
            let k = ((sum * scale) as usize).min(HIST_BINS - 1);
            self.bins[k] += 1;
            self.max = self.max.max(sum);
        }
    }
}

fn hist_run(f: impl FnOnce(&[f32]) -> Hist) -> (u64, Duration) {
    let m = hist_matrix();
    let start = Instant::now();
    let h = f(m);
    let elapsed = start.elapsed();
    (h.checksum(), elapsed)
}

pub fn histogram_serial(m: &[f32]) -> Hist {
    let mut h = Hist::new();
    for i in 1..HIST_N - 1 {
        h.add_row(m, i);
    }
    h
}

pub fn histogram_selvedge(m: &[f32]) -> Hist {
    parallel_for(1..HIST_N - 1).reduce(
        Hist::new,
        |mut h, i| {
            h.add_row(m, i);
            h
        },
        Hist::merge,
    )
}

pub fn histogram_rayon(m: &[f32]) -> Hist {
    (1..HIST_N - 1)
        .into_par_iter()
        .fold(Hist::new, |mut h, i| {
            h.add_row(m, i);
            h
        })
        .reduce(Hist::new, Hist::merge)
}

// ---------------------------------------------------------------------------
// Log-sum-exp (Weave's logsumexp)
// ---------------------------------------------------------------------------

/// The data, `LSE_BATCHES * LSE_BATCH` rows of `LSE_LABELS`, uniform in
/// [0, 1) as in Weave.
fn lse_data() -> &'static [f32] {
    static X: LazyLock<Vec<f32>> = LazyLock::new(|| {
        let mut rng = Rng(SEED ^ 0x15E);
        (0..LSE_BATCHES * LSE_BATCH * LSE_LABELS)
            .map(|_| rng.next_f32())
            .collect()
    });
    &X
}

/// One in fixed point (32.32): row sums are added in it, so the sum of a
/// batch's rows has the same bits in every merge order.
const FIXED_ONE: f64 = (1u64 << 32) as f64;

/// Row `r` of the data.
#[inline]
fn lse_row(x: &[f32], r: usize) -> &[f32] {
    &x[r * LSE_LABELS..(r + 1) * LSE_LABELS]
}

#[inline]
fn row_max(x: &[f32], r: usize) -> f32 {
    lse_row(x, r)
        .iter()
        .fold(f32::NEG_INFINITY, |m, &v| m.max(v))
}

/// `Σ exp(x - max)` over row `r`, in fixed point.
#[inline]
fn row_sum_exp(x: &[f32], r: usize, max: f32) -> u64 {
    let s: f64 = lse_row(x, r)
        .iter()
        .map(|&v| f64::from((v - max).exp()))
        .sum();
    (s * FIXED_ONE) as u64
}

/// A batch's max and fixed-point sum, hashed into the run's checksum; the
/// log-sum-exp itself is `max + ln(sum / 2^32)`.
#[inline]
fn lse_fold(h: u64, max: f32, sum: u64) -> u64 {
    let lse = f64::from(max) + (sum as f64 / FIXED_ONE).ln();
    mix(h ^ sum ^ (u64::from(max.to_bits()) << 32) ^ lse.to_bits())
}

fn lse_run(f: impl FnOnce(&[f32]) -> u64) -> (u64, Duration) {
    with_result(|| f(lse_data()))
}

fn batch_rows(b: usize) -> std::ops::Range<usize> {
    b * LSE_BATCH..(b + 1) * LSE_BATCH
}

pub fn logsumexp_serial(x: &[f32]) -> u64 {
    (0..LSE_BATCHES).fold(0, |h, b| {
        let max = batch_rows(b)
            .map(|r| row_max(x, r))
            .fold(f32::NEG_INFINITY, f32::max);
        let sum = batch_rows(b)
            .map(|r| row_sum_exp(x, r, max))
            .fold(0, u64::wrapping_add);
        lse_fold(h, max, sum)
    })
}

pub fn logsumexp_selvedge(x: &[f32]) -> u64 {
    (0..LSE_BATCHES).fold(0, |h, b| {
        let max = parallel_for(batch_rows(b)).reduce(
            || f32::NEG_INFINITY,
            |m, r| m.max(row_max(x, r)),
            f32::max,
        );
        let sum = parallel_for(batch_rows(b)).reduce(
            || 0,
            |s, r| s.wrapping_add(row_sum_exp(x, r, max)),
            u64::wrapping_add,
        );
        lse_fold(h, max, sum)
    })
}

pub fn logsumexp_rayon(x: &[f32]) -> u64 {
    (0..LSE_BATCHES).fold(0, |h, b| {
        let max = batch_rows(b)
            .into_par_iter()
            .map(|r| row_max(x, r))
            .reduce(|| f32::NEG_INFINITY, f32::max);
        let sum = batch_rows(b)
            .into_par_iter()
            .map(|r| row_sum_exp(x, r, max))
            .reduce(|| 0, u64::wrapping_add);
        lse_fold(h, max, sum)
    })
}

// ---------------------------------------------------------------------------
// Black-Scholes (PARSEC, as in Weave's black_scholes)
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
pub struct OptionData {
    spot: f32,
    strike: f32,
    rate: f32,
    volatility: f32,
    /// Years.
    expiry: f32,
    call: bool,
}

/// The options, in PARSEC's ranges (seeded).
fn bs_options() -> &'static [OptionData] {
    static O: LazyLock<Vec<OptionData>> = LazyLock::new(|| {
        let mut rng = Rng(SEED ^ 0xB5);
        (0..BS_OPTIONS)
            .map(|_| OptionData {
                spot: rng.range_f32(10.0, 200.0),
                strike: rng.range_f32(10.0, 200.0),
                rate: rng.range_f32(0.0, 0.1),
                volatility: rng.range_f32(0.05, 0.65),
                expiry: rng.range_f32(0.05, 2.0),
                call: rng.next_u64() & 1 == 0,
            })
            .collect()
    });
    &O
}

/// The cumulative normal distribution (Hull, section 11.8; PARSEC's
/// `CNDF`).
#[inline(always)]
fn cndf(x: f32) -> f32 {
    const INV_SQRT_2PI: f32 = 0.398_942_3;
    let (neg, x) = if x < 0.0 { (true, -x) } else { (false, x) };
    let n_prime = (-0.5 * x * x).exp() * INV_SQRT_2PI;
    let k = 1.0 / (1.0 + 0.231_641_9 * x);
    let (k2, k3) = (k * k, k * k * k);
    let (k4, k5) = (k3 * k, k3 * k * k);
    let poly = k * 0.319_381_53
        + k2 * -0.356_563_78
        + k3 * 1.781_477_9
        + k4 * -1.821_256
        + k5 * 1.330_274_5;
    let n = 1.0 - poly * n_prime;
    if neg {
        1.0 - n
    } else {
        n
    }
}

/// PARSEC's `BlkSchlsEqEuroNoDiv`. Always inlined: left to the
/// optimiser, it was inlined into some implementations and not others
/// depending on what else the binary held, and the priced loop ran 1.5x
/// slower where it was not (17.5 against 11.5 ms on one thread), which
/// measured the compiler instead of the schedulers.
#[inline(always)]
pub fn black_scholes_price(o: &OptionData) -> f32 {
    let sqrt_t = o.expiry.sqrt();
    let d1 = ((o.spot / o.strike).ln() + (o.rate + 0.5 * o.volatility * o.volatility) * o.expiry)
        / (o.volatility * sqrt_t);
    let d2 = d1 - o.volatility * sqrt_t;
    let (n1, n2) = (cndf(d1), cndf(d2));
    let discounted = o.strike * (-o.rate * o.expiry).exp();
    if o.call {
        o.spot * n1 - discounted * n2
    } else {
        discounted * (1.0 - n2) - o.spot * (1.0 - n1)
    }
}

static BS_OUT: Mutex<Vec<f32>> = Mutex::new(Vec::new());

fn bs_run(f: impl FnOnce(&[OptionData], &mut [f32])) -> (u64, Duration) {
    let options = bs_options();
    let mut out = buffer(&BS_OUT, BS_OPTIONS);
    let elapsed = timed(|| f(options, &mut out));
    (hash_f32(&out), elapsed)
}

pub fn black_scholes_serial(options: &[OptionData], out: &mut [f32]) {
    for (o, p) in options.iter().zip(out) {
        *p = black_scholes_price(o);
    }
}

pub fn black_scholes_selvedge(options: &[OptionData], out: &mut [f32]) {
    par_iter_mut(out).for_each(|i, p| *p = black_scholes_price(&options[i]));
}

pub fn black_scholes_selvedge_chunks(options: &[OptionData], out: &mut [f32]) {
    par_chunks_mut(out, BS_CHUNK).for_each(|c, chunk| {
        let options = &options[c * BS_CHUNK..][..chunk.len()];
        for (o, p) in options.iter().zip(chunk) {
            *p = black_scholes_price(o);
        }
    });
}

pub fn black_scholes_rayon(options: &[OptionData], out: &mut [f32]) {
    out.par_iter_mut()
        .enumerate()
        .for_each(|(i, p)| *p = black_scholes_price(&options[i]));
}

// ---------------------------------------------------------------------------
// Matrix transposition (Weave's matrix_transposition, nested)
// ---------------------------------------------------------------------------

/// The `TR_M × TR_N` input: element `k` is `k` (exact in `f32`).
fn tr_input() -> &'static [f32] {
    static A: LazyLock<Vec<f32>> = LazyLock::new(|| (0..TR_M * TR_N).map(|k| k as f32).collect());
    &A
}

static TR_T: Mutex<Vec<f32>> = Mutex::new(Vec::new());
static TR_BACK: Mutex<Vec<f32>> = Mutex::new(Vec::new());

/// A transposition: `input` is `rows × cols`, `out` is `cols × rows`.
type Transpose = fn(&[f32], &mut [f32], usize, usize);

fn transpose_run(f: impl FnOnce(&[f32], &mut [f32], &mut [f32])) -> (u64, Duration) {
    let input = tr_input();
    let mut t = buffer(&TR_T, TR_M * TR_N);
    let mut back = buffer(&TR_BACK, TR_M * TR_N);
    let elapsed = timed(|| f(input, &mut t, &mut back));
    assert!(
        back.iter().zip(input).all(|(a, b)| a == b),
        "transposing back did not give the input"
    );
    (hash_f32(&t) ^ mix(hash_f32(&back)), elapsed)
}

/// `TR_ROUNDS` times: `a` (M × N) into `t` (N × M), then `t` into `back`.
fn transpose_rounds(a: &[f32], t: &mut [f32], back: &mut [f32], transpose: Transpose) {
    for _ in 0..TR_ROUNDS {
        transpose(a, t, TR_M, TR_N);
        transpose(t, back, TR_N, TR_M);
    }
}

pub fn transpose_serial(input: &[f32], out: &mut [f32], rows: usize, cols: usize) {
    for (j, row) in out.chunks_mut(rows).enumerate() {
        for (i, x) in row.iter_mut().enumerate() {
            *x = input[i * cols + j];
        }
    }
}

pub fn transpose_selvedge(input: &[f32], out: &mut [f32], rows: usize, cols: usize) {
    par_chunks_mut(out, rows).for_each(|j, row| {
        par_iter_mut(row).for_each(|i, x| *x = input[i * cols + j]);
    });
}

pub fn transpose_rayon(input: &[f32], out: &mut [f32], rows: usize, cols: usize) {
    out.par_chunks_mut(rows).enumerate().for_each(|(j, row)| {
        row.par_iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = input[i * cols + j]);
    });
}

// ---------------------------------------------------------------------------
// Pipelined loops
// ---------------------------------------------------------------------------

/// Per item, the units of work of loop A and of loop B (seeded): A 1 to 3,
/// one in eight × 16; B 2 to 4.
pub fn pipe_units() -> &'static ([u32; PIPE_ITEMS], [u32; PIPE_ITEMS]) {
    static UNITS: LazyLock<([u32; PIPE_ITEMS], [u32; PIPE_ITEMS])> = LazyLock::new(|| {
        let mut rng = Rng(SEED ^ 0x919E);
        let a = std::array::from_fn(|_| {
            let base = 1 + (rng.next_u64() % 3) as u32;
            if rng.next_u64() % 8 == 0 {
                base * 16
            } else {
                base
            }
        });
        let b = std::array::from_fn(|_| 2 + (rng.next_u64() % 3) as u32);
        (a, b)
    });
    &UNITS
}

/// `units` units of busy work seeded with `seed`: a dependent chain of
/// mixes, so it cannot be skipped or vectorized.
#[inline(never)]
pub fn pipe_work(seed: u64, units: u32) -> u64 {
    let mut x = seed;
    for _ in 0..units * PIPE_UNIT_ROUNDS {
        x = mix(x);
    }
    x
}

/// Loop A's item `i`.
#[inline]
fn stage_a(i: usize) -> u64 {
    pipe_work(SEED ^ i as u64, pipe_units().0[i])
}

/// Loop B's item `i`, from A's digest.
#[inline]
fn stage_b(i: usize, a: u64) -> u64 {
    pipe_work(a.rotate_left(7) ^ i as u64, pipe_units().1[i])
}

/// What both loops share: A's digests and B's results. Relaxed accesses:
/// a promise or a barrier orders A's store before B's load.
pub struct PipeSlots {
    mid: Vec<AtomicU64>,
    out: Vec<AtomicU64>,
}

fn pipe_run(f: impl FnOnce(&PipeSlots)) -> (u64, Duration) {
    let slots = PipeSlots {
        mid: (0..PIPE_ITEMS).map(|_| AtomicU64::new(0)).collect(),
        out: (0..PIPE_ITEMS).map(|_| AtomicU64::new(0)).collect(),
    };
    let elapsed = timed(|| f(&slots));
    let h = slots
        .out
        .iter()
        .fold(0, |h, r| mix(h ^ r.load(Ordering::Relaxed)));
    (h, elapsed)
}

impl PipeSlots {
    #[inline]
    fn a(&self, i: usize) {
        self.mid[i].store(stage_a(i), Ordering::Relaxed);
    }

    #[inline]
    fn b(&self, i: usize) {
        let a = self.mid[i].load(Ordering::Relaxed);
        self.out[i].store(stage_b(i, a), Ordering::Relaxed);
    }
}

pub fn pipeline_serial(s: &PipeSlots) {
    for i in 0..PIPE_ITEMS {
        s.a(i);
    }
    for i in 0..PIPE_ITEMS {
        s.b(i);
    }
}

/// Loop B waits for each item of loop A, not for all of it.
pub fn pipeline_selvedge(s: &PipeSlots, bucket: usize) {
    let lp = LoopPromise::with_bucket_size(0..PIPE_ITEMS, bucket);
    let lp = &lp;
    selvedge::scope(|sc| {
        sc.spawn(move |_| {
            parallel_for(0..PIPE_ITEMS)
                .depends_on_each(lp)
                .for_each(|i| s.b(i));
        });
        parallel_for(0..PIPE_ITEMS).for_each(|i| {
            s.a(i);
            lp.fulfill(i);
        });
    });
}

pub fn pipeline_selvedge_barrier(s: &PipeSlots) {
    parallel_for(0..PIPE_ITEMS).for_each(|i| s.a(i));
    parallel_for(0..PIPE_ITEMS).for_each(|i| s.b(i));
}

pub fn pipeline_rayon_barrier(s: &PipeSlots) {
    (0..PIPE_ITEMS).into_par_iter().for_each(|i| s.a(i));
    (0..PIPE_ITEMS).into_par_iter().for_each(|i| s.b(i));
}

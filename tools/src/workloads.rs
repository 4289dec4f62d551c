//! Workloads from Weave's benchmark suite, shared by `tools/benches/scheduler.rs`
//! (criterion) and `tools/src/bin/bench_report/main.rs` (a markdown report).
//!
//! Every workload is written once per scheduler with the same task structure
//! (what is spawned, and what is waited for), plus a serial elision. Each
//! implementation returns a checksum that must equal the serial one; the
//! [`Workload`] table wraps them so both drivers time exactly the same code,
//! with the pools built once outside the timed region.

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;
use selvedge::JoinHandle;

use crate::pinning;

// ---------------------------------------------------------------------------
// Sizes (Weave's suite)
// ---------------------------------------------------------------------------

/// fib(n), a task at every level, no cutoff.
pub const FIB_N: u64 = 32;
/// DFS tree: depth and breadth.
pub const DFS_DEPTH: u32 = 9;
pub const DFS_BREADTH: usize = 6;
/// N-Queens board size (2680 solutions).
pub const NQUEENS_N: usize = 11;
/// Bouncing producer-consumer: `BPC_DEPTH` producers in a chain, each
/// spawning `BPC_CONSUMERS` consumers (Weave: `bpc 10000 9 1`).
pub const BPC_DEPTH: u32 = 10_000;
pub const BPC_CONSUMERS: u32 = 9;
/// Single producer, many consumers: one task spawns this many consumers.
pub const SPC_TASKS: u32 = 100_000;
/// Busy work per consumer: rounds of Weave's `dummy_cpt` (an iterative
/// fib(30)). About 1 µs on a ~3 GHz core; the report prints the measured
/// value.
pub const CONSUMER_ROUNDS: u32 = 50;

const MAX_BREADTH: usize = 8;
const MAX_QUEENS: usize = 16;

// ---------------------------------------------------------------------------
// Pools
// ---------------------------------------------------------------------------

/// One pool per scheduler, all with the same number of threads (selvedge's
/// and rayon's pinned when `SELVEDGE_PIN_THREADS=1`; chili's never).
pub struct Pools {
    pub threads: usize,
    pub selvedge: selvedge::Runtime,
    pub rayon: rayon::ThreadPool,
    pub chili: chili::ThreadPool,
}

impl Pools {
    pub fn new(threads: usize) -> Self {
        let threads = threads.max(1);
        Pools {
            threads,
            selvedge: selvedge::Runtime::builder()
                .num_threads(threads)
                .build()
                .expect("selvedge runtime"),
            rayon: rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .start_handler(pinning::pin_current_thread)
                .build()
                .expect("rayon pool"),
            // chili counts the calling thread as one of its threads.
            chili: chili::ThreadPool::with_config(chili::Config {
                thread_count: NonZeroUsize::new(threads),
                ..chili::Config::default()
            }),
        }
    }
}

/// `SELVEDGE_BENCH_THREADS`, or 2.
pub fn threads_from_env() -> usize {
    std::env::var("SELVEDGE_BENCH_THREADS")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|&n: &usize| n > 0)
        .unwrap_or(2)
}

// ---------------------------------------------------------------------------
// Workload table
// ---------------------------------------------------------------------------

/// Which scheduler (and which of its APIs) an implementation uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Serial,
    /// `selvedge::spawn` + `JoinHandle::join` (or detached spawns + `sync_root`).
    SelvedgeSpawn,
    /// `selvedge::join` or `selvedge::scope`.
    SelvedgeStructured,
    /// The rayon version the selvedge numbers are compared with.
    Rayon,
    /// Another rayon formulation, for reference.
    RayonAlt,
    Chili,
}

pub struct Impl {
    /// Criterion function id and report label.
    pub name: &'static str,
    pub kind: Kind,
    pub run: fn(&Pools) -> u64,
}

pub struct Workload {
    /// Criterion group name.
    pub group: &'static str,
    /// Human-readable name with its size.
    pub title: String,
    /// Producer-consumer workloads get an efficiency column.
    #[allow(dead_code)] // only the report reads it
    pub producer_consumer: bool,
    /// Known answer, where there is one independent of the serial run.
    pub expected: Option<u64>,
    pub impls: Vec<Impl>,
}

impl Workload {
    /// Runs every implementation once and checks that it agrees with the
    /// serial one (and with the known answer). Returns the serial result.
    pub fn verify(&self, pools: &Pools) -> u64 {
        let serial = self
            .impls
            .iter()
            .find(|i| i.kind == Kind::Serial)
            .expect("every workload has a serial implementation");
        let want = (serial.run)(pools);
        if let Some(expected) = self.expected {
            assert_eq!(want, expected, "{}: serial result", self.group);
        }
        for imp in &self.impls {
            let got = (imp.run)(pools);
            assert_eq!(
                got, want,
                "{}/{}: result differs from serial",
                self.group, imp.name
            );
        }
        want
    }
}

/// Every workload, each with all its implementations.
pub fn all() -> Vec<Workload> {
    vec![
        Workload {
            group: "fib",
            title: format!("fib({FIB_N})"),
            producer_consumer: false,
            expected: Some(fib_serial(FIB_N)),
            impls: vec![
                Impl {
                    name: "serial",
                    kind: Kind::Serial,
                    run: |_| fib_serial(black_box(FIB_N)),
                },
                Impl {
                    name: "selvedge spawn",
                    kind: Kind::SelvedgeSpawn,
                    run: |p| p.selvedge.run(|| fib_selvedge_spawn(black_box(FIB_N))),
                },
                Impl {
                    name: "selvedge join",
                    kind: Kind::SelvedgeStructured,
                    run: |p| p.selvedge.run(|| fib_selvedge_join(black_box(FIB_N))),
                },
                Impl {
                    name: "rayon join",
                    kind: Kind::Rayon,
                    run: |p| p.rayon.install(|| fib_rayon(black_box(FIB_N))),
                },
                Impl {
                    name: "chili join",
                    kind: Kind::Chili,
                    run: |p| fib_chili(black_box(FIB_N), &mut p.chili.scope()),
                },
            ],
        },
        Workload {
            group: "dfs",
            title: format!("dfs(depth {DFS_DEPTH}, breadth {DFS_BREADTH})"),
            producer_consumer: false,
            expected: Some((DFS_BREADTH as u64).pow(DFS_DEPTH)),
            impls: vec![
                Impl {
                    name: "serial",
                    kind: Kind::Serial,
                    run: |_| dfs_serial(black_box(DFS_DEPTH), black_box(DFS_BREADTH)),
                },
                Impl {
                    name: "selvedge spawn",
                    kind: Kind::SelvedgeSpawn,
                    run: |p| {
                        p.selvedge.run(|| {
                            dfs_selvedge_spawn(black_box(DFS_DEPTH), black_box(DFS_BREADTH))
                        })
                    },
                },
                Impl {
                    name: "selvedge scope",
                    kind: Kind::SelvedgeStructured,
                    run: |p| {
                        p.selvedge.run(|| {
                            dfs_selvedge_scope(black_box(DFS_DEPTH), black_box(DFS_BREADTH))
                        })
                    },
                },
                Impl {
                    name: "rayon scope",
                    kind: Kind::Rayon,
                    run: |p| {
                        p.rayon.install(|| {
                            dfs_rayon_scope(black_box(DFS_DEPTH), black_box(DFS_BREADTH))
                        })
                    },
                },
                Impl {
                    name: "rayon par_iter",
                    kind: Kind::RayonAlt,
                    run: |p| {
                        p.rayon.install(|| {
                            dfs_rayon_par_iter(black_box(DFS_DEPTH), black_box(DFS_BREADTH))
                        })
                    },
                },
            ],
        },
        Workload {
            group: "nqueens",
            title: format!("nqueens({NQUEENS_N})"),
            producer_consumer: false,
            expected: Some(2680),
            impls: vec![
                Impl {
                    name: "serial",
                    kind: Kind::Serial,
                    run: |_| nqueens_serial(black_box(NQUEENS_N), 0, [0; MAX_QUEENS]),
                },
                Impl {
                    name: "selvedge spawn",
                    kind: Kind::SelvedgeSpawn,
                    run: |p| {
                        p.selvedge.run(|| {
                            nqueens_selvedge_spawn(black_box(NQUEENS_N), 0, [0; MAX_QUEENS])
                        })
                    },
                },
                Impl {
                    name: "selvedge scope",
                    kind: Kind::SelvedgeStructured,
                    run: |p| {
                        p.selvedge.run(|| {
                            nqueens_selvedge_scope(black_box(NQUEENS_N), 0, [0; MAX_QUEENS])
                        })
                    },
                },
                Impl {
                    name: "rayon scope",
                    kind: Kind::Rayon,
                    run: |p| {
                        p.rayon.install(|| {
                            nqueens_rayon_scope(black_box(NQUEENS_N), 0, [0; MAX_QUEENS])
                        })
                    },
                },
                Impl {
                    name: "rayon par_iter",
                    kind: Kind::RayonAlt,
                    run: |p| {
                        p.rayon.install(|| {
                            nqueens_rayon_par_iter(black_box(NQUEENS_N), 0, [0; MAX_QUEENS])
                        })
                    },
                },
            ],
        },
        Workload {
            group: "bpc",
            title: format!(
                "bpc(depth {BPC_DEPTH}, {BPC_CONSUMERS} consumers, {CONSUMER_ROUNDS} rounds)"
            ),
            producer_consumer: true,
            expected: Some(u64::from(BPC_DEPTH) * u64::from(BPC_CONSUMERS)),
            impls: vec![
                Impl {
                    name: "serial",
                    kind: Kind::Serial,
                    run: |_| bpc_serial(black_box(BPC_CONSUMERS), BPC_DEPTH),
                },
                Impl {
                    name: "selvedge spawn+sync_root",
                    kind: Kind::SelvedgeSpawn,
                    run: |p| bpc_selvedge_spawn(&p.selvedge, black_box(BPC_CONSUMERS), BPC_DEPTH),
                },
                Impl {
                    name: "selvedge scope",
                    kind: Kind::SelvedgeStructured,
                    run: |p| {
                        let done = AtomicU64::new(0);
                        p.selvedge.run(|| {
                            selvedge::scope(|s| {
                                bpc_selvedge_scope(s, &done, black_box(BPC_CONSUMERS), BPC_DEPTH)
                            })
                        });
                        done.into_inner()
                    },
                },
                Impl {
                    name: "rayon scope",
                    kind: Kind::Rayon,
                    run: |p| {
                        let done = AtomicU64::new(0);
                        p.rayon.install(|| {
                            rayon::scope(|s| {
                                bpc_rayon_scope(s, &done, black_box(BPC_CONSUMERS), BPC_DEPTH)
                            })
                        });
                        done.into_inner()
                    },
                },
            ],
        },
        Workload {
            group: "spc",
            title: format!("spc({SPC_TASKS} consumers, {CONSUMER_ROUNDS} rounds)"),
            producer_consumer: true,
            expected: Some(u64::from(SPC_TASKS)),
            impls: vec![
                Impl {
                    name: "serial",
                    kind: Kind::Serial,
                    run: |_| spc_serial(black_box(SPC_TASKS)),
                },
                Impl {
                    name: "selvedge spawn",
                    kind: Kind::SelvedgeSpawn,
                    run: |p| p.selvedge.run(|| spc_selvedge_spawn(black_box(SPC_TASKS))),
                },
                Impl {
                    name: "selvedge scope",
                    kind: Kind::SelvedgeStructured,
                    run: |p| p.selvedge.run(|| spc_selvedge_scope(black_box(SPC_TASKS))),
                },
                Impl {
                    name: "rayon scope",
                    kind: Kind::Rayon,
                    run: |p| p.rayon.install(|| spc_rayon_scope(black_box(SPC_TASKS))),
                },
            ],
        },
    ]
}

// ---------------------------------------------------------------------------
// fib
// ---------------------------------------------------------------------------

pub fn fib_serial(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    fib_serial(n - 1) + fib_serial(n - 2)
}

pub fn fib_selvedge_spawn(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let a = selvedge::spawn(move || fib_selvedge_spawn(n - 1));
    let b = fib_selvedge_spawn(n - 2);
    a.join() + b
}

pub fn fib_selvedge_join(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = selvedge::join(|| fib_selvedge_join(n - 1), || fib_selvedge_join(n - 2));
    a + b
}

pub fn fib_rayon(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = rayon::join(|| fib_rayon(n - 1), || fib_rayon(n - 2));
    a + b
}

pub fn fib_chili(n: u64, s: &mut chili::Scope<'_>) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = s.join(|s| fib_chili(n - 1, s), |s| fib_chili(n - 2, s));
    a + b
}

// ---------------------------------------------------------------------------
// DFS: every node spawns `breadth` children; leaves count 1.
// ---------------------------------------------------------------------------

pub fn dfs_serial(depth: u32, breadth: usize) -> u64 {
    if depth == 0 {
        return 1;
    }
    // `black_box` keeps LLVM from hoisting the (pure, loop-invariant) call
    // out of the loop, which would turn the tree walk into `breadth * dfs(..)`
    // and make the serial baseline do O(depth) work instead of visiting
    // every node. The parallel versions cannot be hoisted: they spawn.
    (0..breadth)
        .map(|_| dfs_serial(black_box(depth - 1), breadth))
        .sum()
}

pub fn dfs_selvedge_spawn(depth: u32, breadth: usize) -> u64 {
    if depth == 0 {
        return 1;
    }
    assert!(breadth <= MAX_BREADTH);
    let handles: [Option<JoinHandle<u64>>; MAX_BREADTH] = std::array::from_fn(|i| {
        (i < breadth).then(|| selvedge::spawn(move || dfs_selvedge_spawn(depth - 1, breadth)))
    });
    handles.into_iter().flatten().map(JoinHandle::join).sum()
}

pub fn dfs_selvedge_scope(depth: u32, breadth: usize) -> u64 {
    if depth == 0 {
        return 1;
    }
    let mut sums = [0u64; MAX_BREADTH];
    selvedge::scope(|s| {
        for slot in &mut sums[..breadth] {
            s.spawn(move |_| *slot = dfs_selvedge_scope(depth - 1, breadth));
        }
    });
    sums.iter().sum()
}

pub fn dfs_rayon_scope(depth: u32, breadth: usize) -> u64 {
    if depth == 0 {
        return 1;
    }
    let mut sums = [0u64; MAX_BREADTH];
    rayon::scope(|s| {
        for slot in &mut sums[..breadth] {
            s.spawn(move |_| *slot = dfs_rayon_scope(depth - 1, breadth));
        }
    });
    sums.iter().sum()
}

pub fn dfs_rayon_par_iter(depth: u32, breadth: usize) -> u64 {
    if depth == 0 {
        return 1;
    }
    (0..breadth)
        .into_par_iter()
        .map(|_| dfs_rayon_par_iter(depth - 1, breadth))
        .sum()
}

// ---------------------------------------------------------------------------
// N-Queens (BOTS): a task per valid placement in each row; each task gets
// its own copy of the board.
// ---------------------------------------------------------------------------

type Board = [u8; MAX_QUEENS];

/// Whether the first `n` queens of `a` are pairwise non-attacking (BOTS
/// `ok`).
fn queens_ok(n: usize, a: &Board) -> bool {
    for i in 0..n {
        let p = a[i] as i32;
        for (d, &q) in a[i + 1..n].iter().enumerate() {
            let (q, d) = (q as i32, d as i32 + 1);
            if q == p || q == p - d || q == p + d {
                return false;
            }
        }
    }
    true
}

/// The board with a queen on column `col` of row `row`, if that is valid.
#[inline]
fn place(a: &Board, row: usize, col: usize) -> Option<Board> {
    let mut b = *a;
    b[row] = col as u8;
    queens_ok(row + 1, &b).then_some(b)
}

pub fn nqueens_serial(n: usize, row: usize, a: Board) -> u64 {
    if row == n {
        return 1;
    }
    (0..n)
        .filter_map(|col| place(&a, row, col))
        .map(|b| nqueens_serial(n, row + 1, b))
        .sum()
}

pub fn nqueens_selvedge_spawn(n: usize, row: usize, a: Board) -> u64 {
    if row == n {
        return 1;
    }
    let handles: [Option<JoinHandle<u64>>; MAX_QUEENS] = std::array::from_fn(|col| {
        let b = if col < n { place(&a, row, col) } else { None }?;
        Some(selvedge::spawn(move || {
            nqueens_selvedge_spawn(n, row + 1, b)
        }))
    });
    handles.into_iter().flatten().map(JoinHandle::join).sum()
}

pub fn nqueens_selvedge_scope(n: usize, row: usize, a: Board) -> u64 {
    if row == n {
        return 1;
    }
    let mut counts = [0u64; MAX_QUEENS];
    selvedge::scope(|s| {
        for (col, slot) in counts[..n].iter_mut().enumerate() {
            if let Some(b) = place(&a, row, col) {
                s.spawn(move |_| *slot = nqueens_selvedge_scope(n, row + 1, b));
            }
        }
    });
    counts.iter().sum()
}

pub fn nqueens_rayon_scope(n: usize, row: usize, a: Board) -> u64 {
    if row == n {
        return 1;
    }
    let mut counts = [0u64; MAX_QUEENS];
    rayon::scope(|s| {
        for (col, slot) in counts[..n].iter_mut().enumerate() {
            if let Some(b) = place(&a, row, col) {
                s.spawn(move |_| *slot = nqueens_rayon_scope(n, row + 1, b));
            }
        }
    });
    counts.iter().sum()
}

pub fn nqueens_rayon_par_iter(n: usize, row: usize, a: Board) -> u64 {
    if row == n {
        return 1;
    }
    (0..n)
        .into_par_iter()
        .filter_map(|col| place(&a, row, col))
        .map(|b| nqueens_rayon_par_iter(n, row + 1, b))
        .sum()
}

// ---------------------------------------------------------------------------
// Consumers: fixed, deterministic busy work.
// ---------------------------------------------------------------------------

/// `rounds` iterations of Weave's `dummy_cpt` (fib(30), iteratively).
#[inline(never)]
pub fn consume(rounds: u32) -> u64 {
    let mut acc = 0u64;
    for _ in 0..rounds {
        let (mut f1, mut f2) = (black_box(1u64), black_box(0u64));
        for _ in 2..=30 {
            let fib = f1.wrapping_add(f2);
            f2 = f1;
            f1 = fib;
        }
        acc = acc.wrapping_add(black_box(f1));
    }
    acc
}

/// One consumer task: the busy work, then 1 (consumers are counted).
#[inline]
fn consumer() -> u64 {
    black_box(consume(CONSUMER_ROUNDS));
    1
}

// ---------------------------------------------------------------------------
// Bouncing producer-consumer: each producer spawns the next producer, then
// `n` consumers; `d` producers in all. Tasks are fire-and-forget.
// ---------------------------------------------------------------------------

/// Serial elision (the producer recursion unrolled into a loop).
pub fn bpc_serial(n: u32, d: u32) -> u64 {
    let mut done = 0;
    for _ in 0..d {
        for _ in 0..n {
            done += consumer();
        }
    }
    done
}

static BPC_DONE: AtomicU64 = AtomicU64::new(0);

fn bpc_selvedge_produce(n: u32, d: u32) {
    if d == 0 {
        return;
    }
    drop(selvedge::spawn(move || bpc_selvedge_produce(n, d - 1)));
    for _ in 0..n {
        drop(selvedge::spawn(|| {
            BPC_DONE.fetch_add(consumer(), Ordering::Relaxed);
        }));
    }
}

/// Detached `spawn`s, then `sync_root` (Weave's structure).
pub fn bpc_selvedge_spawn(rt: &selvedge::Runtime, n: u32, d: u32) -> u64 {
    BPC_DONE.store(0, Ordering::Relaxed);
    rt.run(|| bpc_selvedge_produce(n, d));
    rt.sync_root();
    BPC_DONE.load(Ordering::Relaxed)
}

pub fn bpc_selvedge_scope<'s>(s: &selvedge::Scope<'s>, done: &'s AtomicU64, n: u32, d: u32) {
    if d == 0 {
        return;
    }
    s.spawn(move |s| bpc_selvedge_scope(s, done, n, d - 1));
    for _ in 0..n {
        s.spawn(move |_| {
            done.fetch_add(consumer(), Ordering::Relaxed);
        });
    }
}

pub fn bpc_rayon_scope<'s>(s: &rayon::Scope<'s>, done: &'s AtomicU64, n: u32, d: u32) {
    if d == 0 {
        return;
    }
    s.spawn(move |s| bpc_rayon_scope(s, done, n, d - 1));
    for _ in 0..n {
        s.spawn(move |_| {
            done.fetch_add(consumer(), Ordering::Relaxed);
        });
    }
}

// ---------------------------------------------------------------------------
// Single producer, many consumers: one task spawns `n` consumers, then waits
// for all of them.
// ---------------------------------------------------------------------------

pub fn spc_serial(n: u32) -> u64 {
    (0..n).map(|_| consumer()).sum()
}

pub fn spc_selvedge_spawn(n: u32) -> u64 {
    let handles: Vec<JoinHandle<u64>> = (0..n).map(|_| selvedge::spawn(consumer)).collect();
    handles.into_iter().map(JoinHandle::join).sum()
}

pub fn spc_selvedge_scope(n: u32) -> u64 {
    let done = AtomicU64::new(0);
    selvedge::scope(|s| {
        for _ in 0..n {
            s.spawn(|_| {
                done.fetch_add(consumer(), Ordering::Relaxed);
            });
        }
    });
    done.into_inner()
}

pub fn spc_rayon_scope(n: u32) -> u64 {
    let done = AtomicU64::new(0);
    rayon::scope(|s| {
        for _ in 0..n {
            s.spawn(|_| {
                done.fetch_add(consumer(), Ordering::Relaxed);
            });
        }
    });
    done.into_inner()
}

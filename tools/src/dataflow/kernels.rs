//! The dataflow workloads themselves: the seeded generator, then per
//! workload (promise overhead, chain latency, tiled wavefront) one function
//! per implementation; the table in the parent module lists them.

use std::hint::black_box;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use rayon::prelude::*;
use selvedge::{JoinHandle, LoopPromise, Promise};

use super::{GRID, ROWS_PER_UNIT, TILES, TILE_COLS, WAVEFRONT_SEED};

/// A seeded generator (Vigna's SplitMix64): deterministic across runs and
/// platforms, and cheap enough to call in the tile kernel.
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }
}

/// SplitMix64's finalizer: a bijective 64-bit mix.
#[inline]
pub(super) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

// ---------------------------------------------------------------------------
// Promise overhead
// ---------------------------------------------------------------------------

/// The trivial task.
#[inline]
fn trivial(i: u64) -> u64 {
    black_box(i)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(23)
}

pub fn overhead_serial(k: u64) -> u64 {
    (0..k).map(trivial).fold(0, u64::wrapping_add)
}

pub fn overhead_spawn(k: u64) -> u64 {
    let handles: Vec<JoinHandle<u64>> = (0..k)
        .map(|i| selvedge::spawn(move || trivial(i)))
        .collect();
    handles
        .into_iter()
        .map(JoinHandle::join)
        .fold(0, u64::wrapping_add)
}

/// Every task delayed on `D` fresh promises, fulfilled right after the spawn.
pub fn overhead_delayed<const D: usize>(k: u64) -> u64 {
    let handles: Vec<JoinHandle<u64>> = (0..k)
        .map(|i| {
            let promises: [Promise; D] = std::array::from_fn(|_| Promise::new());
            let handle =
                selvedge::spawn_delayed(promises.each_ref().map(Promise::dep), move || trivial(i));
            for p in &promises {
                p.fulfill();
            }
            handle
        })
        .collect();
    handles
        .into_iter()
        .map(JoinHandle::join)
        .fold(0, u64::wrapping_add)
}

/// Making only: `k` tasks, each `spawn_delayed` on two open iterations of
/// a loop promise, timed while nothing runs (every task parks: the cost of
/// making a delayed task). Then, untimed, the iterations are fulfilled and
/// the handles joined.
pub fn overhead_make_2(k: u64) -> (u64, Duration) {
    let lp = LoopPromise::new(0..2 * k as usize);
    let mut handles: Vec<JoinHandle<u64>> = Vec::with_capacity(k as usize);
    let start = Instant::now();
    for i in 0..k {
        let at = 2 * i as usize;
        handles.push(selvedge::spawn_delayed(
            [lp.at(at), lp.at(at + 1)],
            move || trivial(i),
        ));
    }
    let made = start.elapsed();
    for i in 0..2 * k as usize {
        lp.fulfill(i);
    }
    let sum = handles
        .into_iter()
        .map(JoinHandle::join)
        .fold(0, u64::wrapping_add);
    (sum, made)
}

pub fn overhead_rayon(k: u64) -> u64 {
    let mut out = vec![0u64; k as usize];
    rayon::scope(|s| {
        for (i, slot) in out.iter_mut().enumerate() {
            s.spawn(move |_| *slot = trivial(i as u64));
        }
    });
    out.into_iter().fold(0, u64::wrapping_add)
}

// ---------------------------------------------------------------------------
// Chain latency
// ---------------------------------------------------------------------------

const CHAIN_SEED: u64 = 0xC4A1_0000_0000_0003;

/// One link: folds its index into the running value (order-sensitive).
#[inline]
fn link(acc: u64, i: u64) -> u64 {
    (acc ^ black_box(i))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(17)
}

/// One link on a shared value. Relaxed is enough: the promise (or the
/// spawn) between two links orders them.
#[inline]
fn link_shared(acc: &AtomicU64, i: u64) {
    acc.store(link(acc.load(Ordering::Relaxed), i), Ordering::Relaxed);
}

pub fn chain_serial(n: u64) -> u64 {
    (0..n).fold(CHAIN_SEED, link)
}

/// Returns the checksum and the time from the first fulfill to the end of
/// the last link.
pub fn chain_delayed(n: u64) -> (u64, Duration) {
    let acc = Arc::new(AtomicU64::new(CHAIN_SEED));
    let first = Promise::new();
    let mut prev = first.dep();
    let mut last = None;
    for i in 0..n {
        let next = Promise::new();
        let next_dep = next.dep();
        let acc = Arc::clone(&acc);
        let handle = selvedge::spawn_delayed([prev], move || {
            link_shared(&acc, i);
            next.fulfill();
        });
        // Every other handle is dropped (detached): the last link finishing
        // means every link finished.
        if i + 1 == n {
            last = Some(handle);
        }
        prev = next_dep;
    }
    drop(prev);
    let start = Instant::now();
    first.fulfill();
    if let Some(h) = last {
        h.join();
    }
    let elapsed = start.elapsed();
    (acc.load(Ordering::Relaxed), elapsed)
}

/// Returns the checksum and the time from the first fulfill to the end of
/// the scope.
pub fn chain_scope_delayed(n: u64) -> (u64, Duration) {
    let acc = AtomicU64::new(CHAIN_SEED);
    let mut start = None;
    selvedge::scope(|s| {
        let acc = &acc;
        let first = Promise::new();
        let mut prev = first.dep();
        for i in 0..n {
            let next = Promise::new();
            let next_dep = next.dep();
            s.spawn_delayed([prev], move |_| {
                link_shared(acc, i);
                next.fulfill();
            });
            prev = next_dep;
        }
        start = Some(Instant::now());
        first.fulfill();
    });
    let elapsed = start.map_or(Duration::ZERO, |t| t.elapsed());
    (acc.into_inner(), elapsed)
}

pub fn chain_spawn_join(n: u64) -> u64 {
    let mut acc = CHAIN_SEED;
    for i in 0..n {
        acc = selvedge::spawn(move || link(acc, i)).join();
    }
    acc
}

fn chain_selvedge_link<'s>(s: &selvedge::Scope<'s>, acc: &'s AtomicU64, i: u64, n: u64) {
    link_shared(acc, i);
    if i + 1 < n {
        s.spawn(move |s| chain_selvedge_link(s, acc, i + 1, n));
    }
}

pub fn chain_selvedge_scope(n: u64) -> u64 {
    let acc = AtomicU64::new(CHAIN_SEED);
    if n > 0 {
        selvedge::scope(|s| s.spawn(|s| chain_selvedge_link(s, &acc, 0, n)));
    }
    acc.into_inner()
}

fn chain_rayon_link<'s>(s: &rayon::Scope<'s>, acc: &'s AtomicU64, i: u64, n: u64) {
    link_shared(acc, i);
    if i + 1 < n {
        s.spawn(move |s| chain_rayon_link(s, acc, i + 1, n));
    }
}

pub fn chain_rayon_scope(n: u64) -> u64 {
    let acc = AtomicU64::new(CHAIN_SEED);
    if n > 0 {
        rayon::scope(|s| s.spawn(|s| chain_rayon_link(s, &acc, 0, n)));
    }
    acc.into_inner()
}

// ---------------------------------------------------------------------------
// Tiled wavefront
// ---------------------------------------------------------------------------

/// Each tile's cost in units, row-major: 2 to 12, one in ten × 20.
pub fn tile_units() -> &'static [u32; TILES] {
    static UNITS: LazyLock<[u32; TILES]> = LazyLock::new(|| {
        let mut rng = SplitMix64(WAVEFRONT_SEED);
        std::array::from_fn(|_| {
            let base = 2 + (rng.next_u64() % 11) as u32;
            if rng.next_u64() % 10 == 0 {
                base * 20
            } else {
                base
            }
        })
    });
    &UNITS
}

/// The tiles' digests, row-major. Relaxed accesses: a tile reads its
/// neighbours only after a promise, a barrier or a counter ordered their
/// writes before it.
type Digests = [AtomicU64; TILES];

fn new_digests() -> Digests {
    std::array::from_fn(|_| AtomicU64::new(0))
}

fn checksum(digests: &Digests) -> u64 {
    digests
        .iter()
        .fold(0, |h, d| mix(h ^ d.load(Ordering::Relaxed)))
}

/// Smith-Waterman local alignment (match +2, mismatch −1, gap −1) of a
/// `TILE_COLS`-long string seeded from the up digest against a
/// `rows`-long one seeded from the left digest, one DP row at a time.
/// Returns a digest of the best score and the last row.
#[inline(never)]
fn tile_kernel(idx: usize, up: u64, left: u64, rows: u32) -> u64 {
    const MATCH: u32 = 2;
    const MISMATCH: u32 = 1;
    const GAP: u32 = 1;
    let mut rng_a = SplitMix64(up ^ (idx as u64).wrapping_mul(0xA24B_AED4_963E_E407));
    let a: [u8; TILE_COLS] = std::array::from_fn(|_| (rng_a.next_u64() & 3) as u8);
    let mut rng_b = SplitMix64(left.rotate_left(29) ^ idx as u64);
    let mut row = [0u32; TILE_COLS + 1];
    let mut best = 0u32;
    for _ in 0..rows {
        let b = (rng_b.next_u64() & 3) as u8;
        let (mut diag, mut west) = (0u32, 0u32);
        for c in 0..TILE_COLS {
            let north = row[c + 1];
            let m = if a[c] == b {
                diag + MATCH
            } else {
                diag.saturating_sub(MISMATCH)
            };
            let h = m
                .max(north.saturating_sub(GAP))
                .max(west.saturating_sub(GAP));
            diag = north;
            row[c + 1] = h;
            west = h;
            best = best.max(h);
        }
    }
    row.iter()
        .fold(mix(up ^ left.rotate_left(1) ^ u64::from(best)), |h, &v| {
            mix(h ^ u64::from(v))
        })
}

/// Runs tile `idx` from its neighbours' digests (the grid's edges are
/// seeded by position) and stores its own.
fn run_tile(digests: &Digests, idx: usize) {
    let (i, j) = (idx / GRID, idx % GRID);
    let up = if i > 0 {
        digests[idx - GRID].load(Ordering::Relaxed)
    } else {
        0x0E06_E000 ^ j as u64
    };
    let left = if j > 0 {
        digests[idx - 1].load(Ordering::Relaxed)
    } else {
        0x1EF7_0000 ^ i as u64
    };
    let rows = tile_units()[idx] * ROWS_PER_UNIT;
    digests[idx].store(tile_kernel(idx, up, left, rows), Ordering::Relaxed);
}

/// The rows `i` of anti-diagonal `d` of a `G` × `G` grid, whose tiles are
/// `(i, d − i)` (this wavefront and the fine-grained one).
pub(super) fn diagonal<const G: usize>(d: usize) -> RangeInclusive<usize> {
    d.saturating_sub(G - 1)..=d.min(G - 1)
}

pub fn wavefront_serial() -> u64 {
    let digests = new_digests();
    for idx in 0..TILES {
        run_tile(&digests, idx);
    }
    checksum(&digests)
}

/// The promises tile `idx` of a `G` × `G` grid waits for: its up and left
/// neighbours' (this wavefront and the fine-grained one).
pub(super) fn tile_deps<const G: usize>(
    done: &LoopPromise,
    idx: usize,
) -> impl Iterator<Item = selvedge::Dep> {
    let (i, j) = (idx / G, idx % G);
    [
        (i > 0).then(|| done.at(idx - G)),
        (j > 0).then(|| done.at(idx - 1)),
    ]
    .into_iter()
    .flatten()
}

pub fn wavefront_delayed() -> u64 {
    let digests = Arc::new(new_digests());
    let done = LoopPromise::new(0..TILES);
    let mut last = None;
    for idx in 0..TILES {
        let (digests, done_here) = (Arc::clone(&digests), done.clone());
        let handle = selvedge::spawn_delayed(tile_deps::<GRID>(&done, idx), move || {
            run_tile(&digests, idx);
            done_here.fulfill(idx);
        });
        // The bottom-right tile depends on every other one.
        if idx == TILES - 1 {
            last = Some(handle);
        }
    }
    last.expect("at least one tile").join();
    checksum(&digests)
}

pub fn wavefront_scope_delayed() -> u64 {
    let digests = new_digests();
    let done = LoopPromise::new(0..TILES);
    selvedge::scope(|s| {
        let (digests, done) = (&digests, &done);
        for idx in 0..TILES {
            s.spawn_delayed(tile_deps::<GRID>(done, idx), move |_| {
                run_tile(digests, idx);
                done.fulfill(idx);
            });
        }
    });
    checksum(&digests)
}

pub fn wavefront_selvedge_barrier() -> u64 {
    let digests = new_digests();
    for d in 0..2 * GRID - 1 {
        selvedge::scope(|s| {
            for i in diagonal::<GRID>(d) {
                let digests = &digests;
                s.spawn(move |_| run_tile(digests, i * GRID + d - i));
            }
        });
    }
    checksum(&digests)
}

pub fn wavefront_rayon_barrier() -> u64 {
    let digests = new_digests();
    for d in 0..2 * GRID - 1 {
        diagonal::<GRID>(d)
            .into_par_iter()
            .for_each(|i| run_tile(&digests, i * GRID + d - i));
    }
    checksum(&digests)
}

fn rayon_counted_tile<'s>(
    s: &rayon::Scope<'s>,
    digests: &'s Digests,
    pending: &'s [AtomicU8; TILES],
    idx: usize,
) {
    run_tile(digests, idx);
    let (i, j) = (idx / GRID, idx % GRID);
    // AcqRel: the decrement publishes this tile's digest; the one that
    // reaches zero sees both neighbours' (a release sequence).
    if j + 1 < GRID && pending[idx + 1].fetch_sub(1, Ordering::AcqRel) == 1 {
        s.spawn(move |s| rayon_counted_tile(s, digests, pending, idx + 1));
    }
    if i + 1 < GRID && pending[idx + GRID].fetch_sub(1, Ordering::AcqRel) == 1 {
        s.spawn(move |s| rayon_counted_tile(s, digests, pending, idx + GRID));
    }
}

pub fn wavefront_rayon_counters() -> u64 {
    let digests = new_digests();
    let pending: [AtomicU8; TILES] =
        std::array::from_fn(|idx| AtomicU8::new(u8::from(idx >= GRID) + u8::from(idx % GRID > 0)));
    rayon::scope(|s| rayon_counted_tile(s, &digests, &pending, 0));
    checksum(&digests)
}

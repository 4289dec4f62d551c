//! The loop workloads themselves: per workload, its input, one function per
//! implementation (serial, selvedge, rayon) and the run that times one and
//! digests its output; the table in the parent module lists them.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rayon::prelude::*;
use selvedge::{par_chunks_mut, par_iter_mut, parallel_for, LoopPromise};

use super::{
    timed, BS_CHUNK, BS_OPTIONS, HIST_BINS, HIST_N, LSE_BATCH, LSE_BATCHES, LSE_LABELS, NESTED_N,
    PIPE_ITEMS, PIPE_UNIT_ROUNDS, SEED, TR_M, TR_N, TR_ROUNDS,
};

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
pub(super) fn with_result(f: impl FnOnce() -> u64) -> (u64, Duration) {
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
pub(super) fn nested_run(f: impl FnOnce(&[AtomicU64])) -> (u64, Duration) {
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

pub(super) fn hist_run(f: impl FnOnce(&[f32]) -> Hist) -> (u64, Duration) {
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

pub(super) fn lse_run(f: impl FnOnce(&[f32]) -> u64) -> (u64, Duration) {
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

pub(super) fn bs_run(f: impl FnOnce(&[OptionData], &mut [f32])) -> (u64, Duration) {
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

pub(super) fn transpose_run(f: impl FnOnce(&[f32], &mut [f32], &mut [f32])) -> (u64, Duration) {
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
pub(super) fn transpose_rounds(a: &[f32], t: &mut [f32], back: &mut [f32], transpose: Transpose) {
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

pub(super) fn pipe_run(f: impl FnOnce(&PipeSlots)) -> (u64, Duration) {
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

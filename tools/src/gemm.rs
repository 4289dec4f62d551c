//! Batched single-precision GEMM with a second stage per matrix: the
//! workload of the README's main demonstration (`tools/src/bin/batched_gemm.rs`)
//! and of the `gemm` criterion benchmark.
//!
//! For each of `batch` pairs of `n x n` matrices, stage 1 computes
//! `C = A B`, and stage 2 applies an activation (ReLU) to `C` in place and
//! sums each of its rows. The implementations of the same computation:
//!
//! - [`serial`]: one thread, one kernel call per matrix; [`serial_nest`]
//!   the same with `blis.rs`'s loop nest.
//! - [`selvedge`](fn@selvedge): an outer `parallel_for` over the batch whose body
//!   multiplies its matrix with the loop nest of `blis.rs` on selvedge's
//!   loops: `B` packed once and shared, a loop over blocks of rows (each
//!   packs its rows of `A`) with a loop over groups of columns nested in
//!   it. Every matrix fulfills its iteration of a `LoopPromise` when its
//!   product is done, and stage 2 is a `depends_on_each` loop that starts
//!   on a matrix the moment it is ready (with a loop over blocks of rows
//!   nested in it for a large matrix), with no barrier between the
//!   stages. The loops split only when a worker asks for work, so with
//!   idle workers the thief takes whole outer iterations first, and parts
//!   of one matrix when the batch has too few (one large matrix).
//! - [`rayon`](fn@rayon): the nesting a rayon user writes with a kernel crate:
//!   `par_chunks_mut` over the batch and over blocks of rows, one
//!   `matrixmultiply` call per block (which packs all of `B` again), and
//!   stage 2 after the stage-1 loop returns (rayon has no per-iteration
//!   dependency).
//! - [`rayon_nest`]: `blis.rs`'s nest on rayon's loops, then stage 2 after
//!   a barrier (with the same inner loop over blocks of rows): the same
//!   kernel, packing and loops as [`selvedge`](fn@selvedge), so that the two differ in
//!   their scheduler and the barrier.
//! - [`rayon_per_matrix`]: rayon without the inner loop: one task per
//!   matrix doing both stages, one kernel call each. Not nested, but what a
//!   rayon user would write to avoid the cost of splitting every matrix
//!   into row blocks (each kernel call packs its operands again: a batch
//!   in blocks of 64 rows takes about 12% longer on one thread than in
//!   whole matrices).
//! - [`static_threads`]: no scheduler at all, the machine's own limit.
//! - [`static_threads_nest`]: the same with `blis.rs`'s nest on each
//!   thread's rows: the machine's limit for [`selvedge`](fn@selvedge)'s kernel.
//!
//! [`serial`], [`rayon`](fn@rayon), [`rayon_per_matrix`] and [`static_threads`]
//! call `matrixmultiply::sgemm`, single-threaded: a packed, cache-blocked,
//! SIMD-dispatched GEMM in a small, well-kept crate with no threading of
//! its own, so all parallelism comes from the scheduler under test. Its
//! one-thread rate of stage 1 alone is [`serial_products`]'s. The
//! parallel versions are read against the faster of the two serial
//! programs ([`serial`], [`serial_nest`]). [`selvedge`](fn@selvedge), [`rayon_nest`] and
//! [`static_threads_nest`] run `blis.rs`'s nest, whose results equal
//! `matrixmultiply`'s only where its kernels happen to sum in the same
//! order: the checks allow single precision's rounding.

use selvedge::{named, par_chunks_mut, parallel_for, LoopPromise};
use std::sync::Mutex;

use crate::{blis, pinning};

/// The inputs and outputs of one batch.
pub struct Batch {
    pub batch: usize,
    pub n: usize,
    /// `batch` matrices `A`, row-major, one after the other.
    pub a: Vec<f32>,
    /// `batch` matrices `B`.
    pub b: Vec<f32>,
}

/// What a run produces: the activated products and their row sums.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// `batch` matrices `relu(A B)`.
    pub c: Vec<f32>,
    /// `batch * n` row sums of those.
    pub row_sums: Vec<f32>,
}

impl Batch {
    /// A batch of pseudo-random matrices with entries in [-1, 1).
    pub fn new(batch: usize, n: usize, seed: u64) -> Self {
        let mut state = seed | 1;
        let mut next = || {
            // xorshift64*: deterministic and fast enough for inputs.
            state ^= state >> 12;
            state ^= state << 25;
            state ^= state >> 27;
            let x = state.wrapping_mul(0x2545_F491_4F6C_DD1D);
            (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        };
        let len = batch * n * n;
        Batch {
            batch,
            n,
            a: (0..len).map(|_| next()).collect(),
            b: (0..len).map(|_| next()).collect(),
        }
    }

    /// Floating-point operations of stage 1 (the GEMMs).
    pub fn flops(&self) -> f64 {
        2.0 * (self.n as f64).powi(3) * self.batch as f64
    }

    fn matrix<'a>(&self, all: &'a [f32], m: usize) -> &'a [f32] {
        let nn = self.n * self.n;
        &all[m * nn..(m + 1) * nn]
    }

    /// A fresh output buffer (zeroed).
    pub fn output(&self) -> Output {
        Output {
            c: vec![0.0; self.batch * self.n * self.n],
            row_sums: vec![0.0; self.batch * self.n],
        }
    }
}

/// `c_rows = a_rows * b` for `c_rows.len() / n` rows: one single-threaded
/// kernel call.
pub fn gemm_rows(a_rows: &[f32], b: &[f32], c_rows: &mut [f32], n: usize) {
    let rows = c_rows.len() / n;
    assert_eq!(c_rows.len(), rows * n, "whole rows of C");
    assert_eq!(a_rows.len(), rows * n, "as many rows of A as of C");
    assert_eq!(b.len(), n * n, "B is n x n");
    // SAFETY: the asserts above make every access in bounds: A is
    // rows x n, B is n x n and C is rows x n, all row-major and contiguous
    // (row stride n, column stride 1), and C is a unique borrow.
    unsafe {
        matrixmultiply::sgemm(
            rows,
            n,
            n,
            1.0,
            a_rows.as_ptr(),
            n as isize,
            1,
            b.as_ptr(),
            n as isize,
            1,
            0.0,
            c_rows.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

/// Partial sums a row is summed in (two AVX registers of `f32`).
const SUM_LANES: usize = 16;

/// Stage 2 on one matrix: ReLU in place, then each row's sum.
///
/// A row is summed in `SUM_LANES` interleaved partial sums, added up at
/// the end. Summed one element after another, each addition would wait for
/// the previous one (the compiler may not reorder float additions), and
/// stage 2 took a ninth of the serial run's time (4 ms of 36 for 64 x
/// 256^2); the partial sums vectorize, and take about a third of that.
/// Every implementation calls this same function, so their results stay
/// identical.
pub fn activate_and_sum(c: &mut [f32], row_sums: &mut [f32], n: usize) {
    for (row, sum) in c.chunks_mut(n).zip(row_sums) {
        let mut lanes = [0.0f32; SUM_LANES];
        let mut blocks = row.chunks_exact_mut(SUM_LANES);
        for block in &mut blocks {
            for (x, lane) in block.iter_mut().zip(&mut lanes) {
                *x = x.max(0.0);
                *lane += *x;
            }
        }
        let mut tail = 0.0;
        for x in blocks.into_remainder() {
            *x = x.max(0.0);
            tail += *x;
        }
        *sum = lanes.iter().sum::<f32>() + tail;
    }
}

/// One thread, one kernel call per matrix.
pub fn serial(input: &Batch, out: &mut Output) {
    serial_with(input, out, gemm_rows);
}

/// One thread, `blis.rs`'s loop nest per matrix: [`selvedge`](fn@selvedge)'s work with
/// no scheduler.
pub fn serial_nest(input: &Batch, out: &mut Output) {
    serial_with(input, out, blis::product_serial);
}

/// One thread, both stages per matrix, the product by `product`.
fn serial_with(input: &Batch, out: &mut Output, product: RowsProduct) {
    let (n, nn) = (input.n, input.n * input.n);
    for (m, (c, sums)) in out
        .c
        .chunks_mut(nn)
        .zip(out.row_sums.chunks_mut(n))
        .enumerate()
    {
        product(input.matrix(&input.a, m), input.matrix(&input.b, m), c, n);
        activate_and_sum(c, sums, n);
    }
}

/// Only stage 1 on one thread, with `matrixmultiply`: the kernel's
/// single-thread rate.
pub fn serial_products(input: &Batch, out: &mut Output) {
    let (n, nn) = (input.n, input.n * input.n);
    for (m, c) in out.c.chunks_mut(nn).enumerate() {
        gemm_rows(input.matrix(&input.a, m), input.matrix(&input.b, m), c, n);
    }
}

/// Nested dataflow version; call it on a worker of the runtime to use (for
/// example inside `Runtime::run`).
pub fn selvedge(input: &Batch, out: &mut Output) {
    let (n, nn) = (input.n, input.n * input.n);
    // Each matrix's output behind its own lock: stage 1 holds it while its
    // loop nest writes the product, stage 2 takes it once the promise
    // says the product is done, so the lock is never contended; it is what
    // lets two loops hand a buffer over without `unsafe`.
    let matrices: Vec<Mutex<(&mut [f32], &mut [f32])>> = out
        .c
        .chunks_mut(nn)
        .zip(out.row_sums.chunks_mut(n))
        .map(Mutex::new)
        .collect();
    let products_done = LoopPromise::new(0..input.batch);
    selvedge::scope(|s| {
        // Stage 2, started first: each iteration waits only for its own
        // matrix's product.
        // (`named`: how the stages' tasks show in a trace; nothing without
        // selvedge's `trace` feature.)
        named(STAGE_2, || {
            s.spawn(|_| {
                named(STAGE_2, || {
                    parallel_for(0..input.batch)
                        .depends_on_each(&products_done)
                        .for_each(|m| {
                            let mut guard = matrices[m].lock().unwrap();
                            let (c, sums) = &mut *guard;
                            activate_and_sum_in_blocks(c, sums, n);
                        })
                });
            })
        });
        // Stage 1: the batch, and in each product the nest's loops.
        named(STAGE_1, || {
            parallel_for(0..input.batch).for_each(|m| {
                {
                    let mut guard = matrices[m].lock().unwrap();
                    let (a, b) = (input.matrix(&input.a, m), input.matrix(&input.b, m));
                    named(STAGE_1, || {
                        blis::product_selvedge(a, b, &mut guard.0[..], n)
                    });
                }
                products_done.fulfill(m);
            })
        });
    });
}

/// The names of the stages' tasks in a trace.
const STAGE_1: &str = "stage 1: GEMM";
const STAGE_2: &str = "stage 2: ReLU + row sums";

/// Rayon's nested version: stage 1 as nested `par_chunks_mut`, then stage
/// 2 behind the barrier of the first loop's return. Call it inside the
/// rayon pool to use (`ThreadPool::install`).
pub fn rayon(input: &Batch, out: &mut Output, block_rows: usize) {
    use rayon::prelude::*;
    let (n, nn) = (input.n, input.n * input.n);
    out.c.par_chunks_mut(nn).enumerate().for_each(|(m, c)| {
        let (a, b) = (input.matrix(&input.a, m), input.matrix(&input.b, m));
        c.par_chunks_mut(block_rows * n)
            .enumerate()
            .for_each(|(blk, c_rows)| {
                let a_rows = &a[blk * block_rows * n..][..c_rows.len()];
                gemm_rows(a_rows, b, c_rows, n);
            });
    });
    out.c
        .par_chunks_mut(nn)
        .zip(out.row_sums.par_chunks_mut(n))
        .for_each(|(c, sums)| activate_and_sum(c, sums, n));
}

/// `blis.rs`'s nest on rayon's loops inside rayon's loop over the batch,
/// then stage 2 after the barrier of that loop's return: [`selvedge`](fn@selvedge)'s
/// kernel and packing with rayon's scheduling. Call it inside the rayon
/// pool to use.
pub fn rayon_nest(input: &Batch, out: &mut Output) {
    use rayon::prelude::*;
    let (n, nn) = (input.n, input.n * input.n);
    out.c.par_chunks_mut(nn).enumerate().for_each(|(m, c)| {
        let (a, b) = (input.matrix(&input.a, m), input.matrix(&input.b, m));
        blis::product_rayon(a, b, c, n);
    });
    out.c
        .par_chunks_mut(nn)
        .zip(out.row_sums.par_chunks_mut(n))
        .for_each(|(c, sums)| {
            if c.len() < STAGE_2_SPLIT_FROM {
                activate_and_sum(c, sums, n);
                return;
            }
            c.par_chunks_mut(STAGE_2_ROWS * n)
                .zip(sums.par_chunks_mut(STAGE_2_ROWS))
                .for_each(|(c, sums)| activate_and_sum(c, sums, n))
        });
}

/// Rows per iteration of the inner loop of stage 2 in [`selvedge`](fn@selvedge) and
/// [`rayon_nest`]: on one large matrix, stage 2 alone would otherwise run
/// on one thread while the others wait (2-4% of a run at batch 1).
const STAGE_2_ROWS: usize = 64;
/// Matrices of fewer elements run stage 2 in one call: at 256 x 256 (a
/// few tens of microseconds) a loop per matrix cost a batch of 256 about
/// 3% (pinned, three alternated pairs).
const STAGE_2_SPLIT_FROM: usize = 512 * 512;

/// Stage 2 on one matrix: on a large one, as selvedge's loop over blocks
/// of [`STAGE_2_ROWS`] rows (split only if a worker is idle).
fn activate_and_sum_in_blocks(c: &mut [f32], sums: &mut [f32], n: usize) {
    if c.len() < STAGE_2_SPLIT_FROM {
        activate_and_sum(c, sums, n);
        return;
    }
    // The sums of a block go in under a lock: one short lock per block,
    // and no `unsafe` to write two slices from one loop.
    let sums = Mutex::new(sums);
    par_chunks_mut(c, STAGE_2_ROWS * n).for_each(|blk, rows| {
        let mut block_sums = [0.0f32; STAGE_2_ROWS];
        let k = rows.len() / n;
        activate_and_sum(rows, &mut block_sums[..k], n);
        let mut sums = sums.lock().unwrap_or_else(|e| e.into_inner());
        sums[blk * STAGE_2_ROWS..][..k].copy_from_slice(&block_sums[..k]);
    });
}

/// Rayon, flat: one task per matrix, both stages in it, one kernel call
/// per matrix (no inner loop). Call it inside the rayon pool to use.
pub fn rayon_per_matrix(input: &Batch, out: &mut Output) {
    use rayon::prelude::*;
    let (n, nn) = (input.n, input.n * input.n);
    out.c
        .par_chunks_mut(nn)
        .zip(out.row_sums.par_chunks_mut(n))
        .enumerate()
        .for_each(|(m, (c, sums))| {
            gemm_rows(input.matrix(&input.a, m), input.matrix(&input.b, m), c, n);
            activate_and_sum(c, sums, n);
        });
}

/// No scheduler: `threads` OS threads, each doing both stages on an equal
/// contiguous share of the batch's rows (whole matrices when the batch
/// divides evenly among the threads, a part of each matrix otherwise: at
/// batch 1 every thread takes its slice of the one product). What the
/// machine itself allows for this work at this thread count (the shares
/// are equal to a row, so static partitioning is ideal here), against
/// which the schedulers' figures are read; it spawns its threads inside
/// the timed region, as each run of a scheduler wakes its pool's. Pinned
/// like the pools' threads under `SELVEDGE_PIN_THREADS=1`.
pub fn static_threads(input: &Batch, out: &mut Output, threads: usize) {
    static_split(input, out, threads, gemm_rows);
}

/// [`static_threads`] with the loop nest of `blis.rs` on each thread's
/// rows: what the machine allows for [`selvedge`](fn@selvedge)'s kernel, with no
/// scheduler. Each thread packs all of each `B` it needs, so where threads
/// share a matrix (a batch smaller than the threads) it packs `B` once per
/// thread where [`selvedge`](fn@selvedge) packs it once: a little under the limit.
pub fn static_threads_nest(input: &Batch, out: &mut Output, threads: usize) {
    static_split(input, out, threads, blis::product_serial);
}

/// The product of rows of `A` (`c_rows.len() / n` of them) with an
/// `n x n` `B`, on the calling thread.
type RowsProduct = fn(&[f32], &[f32], &mut [f32], usize);

/// `threads` OS threads, each doing both stages on an equal contiguous
/// share of the batch's rows with `product`.
fn static_split(input: &Batch, out: &mut Output, threads: usize, product: RowsProduct) {
    let n = input.n;
    let rows = input.batch * n;
    let threads = threads.clamp(1, rows.max(1));
    std::thread::scope(|s| {
        let (mut c_left, mut sums_left) = (&mut out.c[..], &mut out.row_sums[..]);
        let mut first = 0;
        for t in 0..threads {
            let end = rows * (t + 1) / threads;
            let (c, c_rest) = std::mem::take(&mut c_left).split_at_mut((end - first) * n);
            let (sums, sums_rest) = std::mem::take(&mut sums_left).split_at_mut(end - first);
            (c_left, sums_left) = (c_rest, sums_rest);
            let share_start = first;
            s.spawn(move || {
                pinning::pin_current_thread(t);
                rows_of_batch(input, c, sums, share_start, product);
            });
            first = end;
        }
    });
}

/// Both stages on the batch's rows `first_row..` (counted across the
/// matrices, one after the other), whose outputs are `c` and `sums`: one
/// call of `product` per matrix the rows touch.
fn rows_of_batch(
    input: &Batch,
    mut c: &mut [f32],
    mut sums: &mut [f32],
    first_row: usize,
    product: RowsProduct,
) {
    let n = input.n;
    let mut row = first_row;
    while !sums.is_empty() {
        let (m, row_in_matrix) = (row / n, row % n);
        let take = (n - row_in_matrix).min(sums.len());
        let (c_here, c_rest) = std::mem::take(&mut c).split_at_mut(take * n);
        let (sums_here, sums_rest) = std::mem::take(&mut sums).split_at_mut(take);
        let a_rows = &input.matrix(&input.a, m)[row_in_matrix * n..][..take * n];
        product(a_rows, input.matrix(&input.b, m), c_here, n);
        activate_and_sum(c_here, sums_here, n);
        (c, sums, row) = (c_rest, sums_rest, row + take);
    }
}

/// The largest relative difference between two outputs (kernels may sum
/// in different orders, so bitwise equality is not promised); infinite
/// where either holds a NaN (an element never written, say).
pub fn max_relative_error(expected: &Output, got: &Output) -> f32 {
    max_relative_difference(&expected.c, &got.c)
        .max(max_relative_difference(&expected.row_sums, &got.row_sums))
}

/// The largest difference between two slices' elements, relative to the
/// larger of the expected element's magnitude and 1; infinite where
/// either holds a NaN.
pub fn max_relative_difference(expected: &[f32], got: &[f32]) -> f32 {
    assert_eq!(expected.len(), got.len(), "slices of the same length");
    expected
        .iter()
        .zip(got)
        .map(|(x, y)| {
            let d = (x - y).abs() / x.abs().max(1.0);
            if d.is_nan() {
                f32::INFINITY
            } else {
                d
            }
        })
        .fold(0.0, f32::max)
}

//! One large single-precision product `C = A B` split the way BLIS and
//! Weave's GEMM benchmark split it, with the parallel loops left to the
//! scheduler under test.
//!
//! A kernel called once per block of rows packs all of `B` again on each
//! call, so the finer a loop splits a matrix, the more it copies; and a
//! call on a large block cannot be split at all once it started. Here `B`
//! is packed once, in slivers of `nr` columns, and shared by every task;
//! each block of [`MC`] rows of `A` is packed once by the task that owns
//! it; and the parallel loops run over blocks of rows and, nested inside
//! each, over groups of column slivers, so that a thief can take work
//! from a block that is being computed, at the grain of one group.
//!
//! Inside a group the loops are BLIS's: for each [`KC`]-deep slice of the
//! inner dimension, for each sliver of `B` (kept in L1), for each sliver of
//! `mr` rows of the packed `A` block (kept in L2), one microkernel call on
//! an `mr x nr` tile of `C`. The microkernel (`microkernel.rs`) uses
//! AVX-512 or AVX2 and FMA where the CPU has them, plain loops elsewhere;
//! its tile's shape (`mr x nr`) comes with it.
//!
//! The same nest runs on one thread ([`product_serial`]), on selvedge's
//! loops ([`product_selvedge`]) and on rayon's ([`product_rayon`]), so the
//! three differ only in who runs the loops.
//!
//! Results: every element of `C` is summed in the same order by all three,
//! whatever the kernel (each tile's sums run over `k` in [`KC`] slices, in
//! order, one rounding per product), so they are equal bit for bit.
//! `matrixmultiply` 0.3's x86 kernels happen to sum in that order too, but
//! nothing promises it: comparisons with it allow single precision's
//! rounding.

#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

use std::ops::Range;
use std::sync::Mutex;

use selvedge::{par_chunks_mut, parallel_for};

// The crate including this file provides `microkernel`
// (tools/src/microkernel.rs).
use crate::microkernel::{kernel, Kernel};

/// Rows of `A` packed together, and the grain of the outer loop (a
/// multiple of every kernel's `mr`). A packed block of `MC x KC` (96 KiB)
/// stays in L2 while the slivers of `B` go past it.
pub const MC: usize = 96;
/// Depth of one slice of the inner dimension: one sliver of `B`
/// (`KC x nr`, 16 or 32 KiB) stays in L1 while the microkernel runs down
/// the rows of the packed `A` block.
pub const KC: usize = 256;
/// Columns of `C` per iteration of the inner loop: about
/// `2 * MC * 64 * k` flops (0.3 ms at `k = 1920` on an AVX2 core), fine
/// enough for the last iterations to balance the threads, coarse enough
/// that an iteration's bookkeeping is noise.
pub const GROUP_COLUMNS: usize = 64;

/// `B` (`k x n`, row-major) packed in slivers of `nr` columns: sliver
/// `j` holds, for each row `p` of `B`, its columns `j * nr ..` (padded
/// with zeros past `n`), `k * nr` values in all.
pub struct PackedB {
    data: PackBuffer,
    k: usize,
    n: usize,
    nr: usize,
}

impl PackedB {
    /// The number of column slivers.
    pub fn slivers(&self) -> usize {
        self.n.div_ceil(self.nr)
    }

    /// Sliver `j`, rows `ps` (a slice of the inner dimension).
    fn sliver(&self, j: usize, ps: Range<usize>) -> &[f32] {
        let nr = self.nr;
        &self.data[j * self.k * nr..][ps.start * nr..ps.end * nr]
    }

    /// The slivers of group `g` of the inner loop ([`GROUP_COLUMNS`]
    /// columns of `C`).
    fn group(&self, g: usize) -> Range<usize> {
        let per_group = GROUP_COLUMNS.div_ceil(self.nr);
        let first = g * per_group;
        first..(first + per_group).min(self.slivers())
    }

    /// How many groups the inner loop runs over.
    fn groups(&self) -> usize {
        self.slivers().div_ceil(GROUP_COLUMNS.div_ceil(self.nr))
    }
}

/// Packed values on whole cache lines: a step of a `B` sliver (`nr`
/// values, 64 or 128 bytes) starts a line, so the microkernel's loads of
/// it never straddle two (with a plain `Vec`'s 16-byte alignment, one load
/// in two did).
///
/// Taken from a pool (`PackBuffer::take`) and given back when dropped, as
/// BLIS keeps its packing buffers: a fresh 15 MB buffer for each product
/// of 1920 x 1920 matrices costs a page fault per 4 KiB page on its first
/// writes, about 10 ms on the development machine, more than a tenth of
/// the product itself on two threads.
pub struct PackBuffer(Vec<Line>);

#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; 16]);

/// The buffers not in use: one for each `B` and each block of `A` that
/// were packed at the same time, which is more than one per worker when a
/// worker waiting for a block's inner loop to finish runs an iteration of
/// another block. They are kept until the process ends (a benchmark's
/// process: a library would trim them when idle).
static POOL: Mutex<Vec<Vec<Line>>> = Mutex::new(Vec::new());

impl PackBuffer {
    /// A buffer of at least `len` values, whatever they are: the packing
    /// writes every value the microkernel reads for the tiles it keeps
    /// (the padding past a partial tile's edge may hold old values, which
    /// only reach the rows and columns of the tile that are dropped).
    fn take(len: usize) -> Self {
        let lines = len.div_ceil(16);
        let pool = &mut *POOL.lock().unwrap_or_else(|e| e.into_inner());
        // The smallest that is large enough, so a block of `A` does not
        // take `B`'s.
        let best = (0..pool.len())
            .filter(|&i| pool[i].len() >= lines)
            .min_by_key(|&i| pool[i].len());
        let mut buf = match best {
            Some(i) => pool.swap_remove(i),
            None => pool.pop().unwrap_or_default(),
        };
        if buf.len() < lines {
            buf.resize(lines, Line([0.0; 16]));
        }
        PackBuffer(buf)
    }
}

impl Drop for PackBuffer {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.0);
        POOL.lock().unwrap_or_else(|e| e.into_inner()).push(buf);
    }
}

impl std::ops::Deref for PackBuffer {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        // SAFETY: a `Line` is 16 `f32`s and nothing else (`repr(C)`, its
        // alignment a multiple of theirs), so the lines are that many
        // initialized `f32`s in a row.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast(), self.0.len() * 16) }
    }
}

impl std::ops::DerefMut for PackBuffer {
    fn deref_mut(&mut self) -> &mut [f32] {
        // SAFETY: as in `deref`, borrowed uniquely.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast(), self.0.len() * 16) }
    }
}

/// Packs columns `j * nr ..` of `b` (`k x n`, row-major) into `out`
/// (`k * nr` values).
fn pack_b_sliver(b: &[f32], (k, n, nr): (usize, usize, usize), j: usize, out: &mut [f32]) {
    let c0 = j * nr;
    let width = nr.min(n - c0);
    for (p, dst) in out.chunks_exact_mut(nr).enumerate().take(k) {
        dst[..width].copy_from_slice(&b[p * n + c0..][..width]);
        dst[width..].fill(0.0);
    }
}

/// Packs `b` (`k x n`, row-major) for kernel `kr`; `each_sliver` runs the
/// packing of every sliver (`k * nr` values each, in parallel or not)
/// through `pack_b_sliver`.
fn pack_b_with(
    b: &[f32],
    (k, n): (usize, usize),
    kr: &Kernel,
    each_sliver: impl FnOnce(&mut [f32], usize, &(dyn Fn(usize, &mut [f32]) + Sync)),
) -> PackedB {
    assert_eq!(b.len(), k * n, "B is k x n");
    let nr = kr.nr;
    let mut data = PackBuffer::take(n.div_ceil(nr) * k * nr);
    each_sliver(&mut data[..n.div_ceil(nr) * k * nr], k * nr, &|j, out| {
        pack_b_sliver(b, (k, n, nr), j, out)
    });
    PackedB { data, k, n, nr }
}

/// Rows `rows` of `a` (`m x k`, row-major) packed for kernel `kr` in
/// slivers of `mr` rows: for each sliver, for each `p`, its rows'
/// `a[., p]`. Past the last row the sliver keeps whatever the buffer held
/// (see [`PackBuffer::take`]).
fn pack_a_block(a: &[f32], k: usize, rows: Range<usize>, kr: &Kernel) -> PackBuffer {
    let mr = kr.mr;
    let slivers = rows.len().div_ceil(mr);
    let mut out = PackBuffer::take(slivers * mr * k);
    for (s, dst) in out.chunks_exact_mut(mr * k).take(slivers).enumerate() {
        let first = rows.start + s * mr;
        let height = mr.min(rows.end - first);
        for r in 0..height {
            let src = &a[(first + r) * k..][..k];
            for (p, &x) in src.iter().enumerate() {
                dst[p * mr + r] = x;
            }
        }
    }
    out
}

/// Computes column slivers `js` of rows `rows` of `C` (the block whose
/// `A` rows are `packed_a`), writing through `c` (`m x n`, row-major,
/// row stride `n`): for each `KC` slice, for each sliver, for each row
/// sliver, one microkernel call.
///
/// # Safety
/// `c` points to `C`, and no other thread reads or writes the tiles of rows
/// `rows` and column slivers `js` during the call.
unsafe fn compute_slivers(
    (packed_a, b, kr): (&[f32], &PackedB, &Kernel),
    c: SharedC,
    rows: Range<usize>,
    js: Range<usize>,
) {
    let (k, n, mr, nr) = (b.k, b.n, kr.mr, kr.nr);
    for p0 in (0..k).step_by(KC) {
        let ps = p0..(p0 + KC).min(k);
        let kc = ps.len();
        for j in js.clone() {
            let b_sliver = b.sliver(j, ps.clone());
            let c0 = j * nr;
            let width = nr.min(n - c0);
            for (s, first) in rows.clone().step_by(mr).enumerate() {
                let height = mr.min(rows.end - first);
                let a_sliver = &packed_a[s * mr * k + ps.start * mr..][..kc * mr];
                // SAFETY: the tile's first element (row `first`, column
                // `c0`) lies in `C`: `rows` and `js` are rows and slivers
                // of it.
                let tile = unsafe { c.0.add(first * n + c0) };
                // SAFETY: the tile (rows `first..first + height`, columns
                // `c0..c0 + width`) lies in `C` and is this call's alone
                // (caller).
                unsafe { kr.tile(kc, a_sliver, b_sliver, tile, n, (height, width), p0 > 0) };
            }
        }
    }
}

/// `C`'s base pointer, shared by the tasks that write disjoint tiles of it.
#[derive(Clone, Copy)]
struct SharedC(*mut f32);

// SAFETY: the tasks that share it write disjoint tiles (each group of
// slivers of each block of rows is computed by one loop iteration), and
// the loops return before `C`'s borrow ends.
unsafe impl Send for SharedC {}
// SAFETY: as above.
unsafe impl Sync for SharedC {}

/// Checks the shapes of one product; returns the rows of `A`.
fn rows_of_product(a: &[f32], b: &[f32], c: &[f32], n: usize) -> usize {
    assert!(n > 0, "an empty matrix has no product to compute");
    assert_eq!(b.len(), n * n, "B is n x n");
    assert_eq!(a.len() % n, 0, "whole rows of A");
    assert_eq!(c.len(), a.len(), "as many rows of C as of A");
    a.len() / n
}

/// The rows of block `blk` of the outer loop, of `m` rows in all.
fn block_rows(blk: usize, m: usize) -> Range<usize> {
    blk * MC..((blk + 1) * MC).min(m)
}

/// `c = a b` for `n x n` `b` and whole rows of `a` and `c`, on this
/// thread only: the nest's own one-thread time.
pub fn product_serial(a: &[f32], b: &[f32], c: &mut [f32], n: usize) {
    product_serial_with(kernel(), a, b, c, n);
}

/// [`product_serial`] with microkernel `kr` (which must run on this CPU:
/// one of `microkernel::available()`).
pub fn product_serial_with(kr: &Kernel, a: &[f32], b: &[f32], c: &mut [f32], n: usize) {
    let m = rows_of_product(a, b, c, n);
    let packed_b = pack_b_with(b, (n, n), kr, |data, len, pack| {
        for (j, out) in data.chunks_exact_mut(len).enumerate() {
            pack(j, out);
        }
    });
    let c = SharedC(c.as_mut_ptr());
    for blk in 0..m.div_ceil(MC) {
        let rows = block_rows(blk, m);
        let packed_a = pack_a_block(a, n, rows.clone(), kr);
        // SAFETY: one thread computes every tile once; `c` is `C`, borrowed
        // for the call.
        unsafe { compute_slivers((&packed_a, &packed_b, kr), c, rows, 0..packed_b.slivers()) };
    }
}

/// `c = a b` on selvedge's loops: `B` packed by a parallel loop over its
/// slivers, then a loop over blocks of [`MC`] rows whose iterations pack
/// their rows of `A` and run a nested loop over groups of
/// [`GROUP_COLUMNS`] columns. Call it on a worker (inside `Runtime::run`,
/// or a task).
pub fn product_selvedge(a: &[f32], b: &[f32], c: &mut [f32], n: usize) {
    let m = rows_of_product(a, b, c, n);
    let kr = kernel();
    let packed_b = pack_b_with(b, (n, n), kr, |data, len, pack| {
        par_chunks_mut(data, len).for_each(pack);
    });
    let packed_b = &packed_b;
    let c = SharedC(c.as_mut_ptr());
    parallel_for(0..m.div_ceil(MC)).for_each(|blk| {
        let rows = block_rows(blk, m);
        let packed_a = pack_a_block(a, n, rows.clone(), kr);
        let packed_a = &packed_a;
        parallel_for(0..packed_b.groups()).for_each(|g| {
            // SAFETY: iteration (blk, g) is the only one that computes the
            // tiles of rows `rows` and slivers `group(g)`, and both loops
            // return before `c`'s borrow ends.
            unsafe {
                compute_slivers((packed_a, packed_b, kr), c, rows.clone(), packed_b.group(g))
            };
        });
    });
}

/// [`product_selvedge`]'s nest on rayon's loops (call it inside the rayon
/// pool: `ThreadPool::install`).
pub fn product_rayon(a: &[f32], b: &[f32], c: &mut [f32], n: usize) {
    use rayon::prelude::*;
    let m = rows_of_product(a, b, c, n);
    let kr = kernel();
    let packed_b = pack_b_with(b, (n, n), kr, |data, len, pack| {
        data.par_chunks_mut(len)
            .enumerate()
            .for_each(|(j, out)| pack(j, out));
    });
    let packed_b = &packed_b;
    let c = SharedC(c.as_mut_ptr());
    (0..m.div_ceil(MC)).into_par_iter().for_each(|blk| {
        let rows = block_rows(blk, m);
        let packed_a = pack_a_block(a, n, rows.clone(), kr);
        let packed_a = &packed_a;
        (0..packed_b.groups()).into_par_iter().for_each(|g| {
            // SAFETY: as in `product_selvedge`.
            unsafe {
                compute_slivers((packed_a, packed_b, kr), c, rows.clone(), packed_b.group(g))
            };
        });
    });
}

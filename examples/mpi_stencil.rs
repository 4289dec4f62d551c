//! A 1-D heat equation split over MPI ranks, checked exactly against a
//! serial run: each rank owns a slice of the rod; every step it sends its
//! end cells to its neighbours and posts receives for theirs, updates its
//! interior in parallel while the halos travel, and its two end cells once
//! the halo messages arrived. Every rank then runs the whole rod serially
//! (timed: the peer) and compares its slice, bit for bit.
//!
//! ```text
//! cargo build --release --features mpi --example mpi_stencil
//! mpirun -n 2 target/release/examples/mpi_stencil [cells] [steps]
//! ```
//!
//! `SELVEDGE_NUM_THREADS` sets each rank's workers: `SELVEDGE_NUM_THREADS=1
//! mpirun -n 2 ...` against `SELVEDGE_NUM_THREADS=2 mpirun -n 1 ...` compares
//! two ranks of one thread with one rank of two.

use selvedge::mpi::Cluster;
use selvedge::par_chunks_mut;
use std::time::Instant;

/// The update of cell `i` from its neighbours (insulated ends: a missing
/// neighbour is the cell itself).
#[inline]
fn update(left: f64, me: f64, right: f64) -> f64 {
    me + 0.25 * (left - 2.0 * me + right)
}

/// The initial temperature of cell `i` of `cells`.
fn initial(i: usize, cells: usize) -> f64 {
    let x = i as f64 / cells as f64;
    (x * 37.0).sin()
        + if (cells / 3..cells / 2).contains(&i) {
            5.0
        } else {
            0.0
        }
}

/// The whole rod on this thread: the same updates, in the same loop shape
/// as a rank's interior (the peer of the distributed run).
fn serial(cells: usize, steps: usize) -> Vec<f64> {
    let mut u: Vec<f64> = (0..cells).map(|i| initial(i, cells)).collect();
    let mut next = u.clone();
    for _ in 0..steps {
        for i in 1..cells - 1 {
            next[i] = update(u[i - 1], u[i], u[i + 1]);
        }
        next[0] = update(u[0], u[0], u[1]);
        next[cells - 1] = update(u[cells - 2], u[cells - 1], u[cells - 1]);
        std::mem::swap(&mut u, &mut next);
    }
    u
}

fn main() {
    let numbers: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let cells = numbers.first().copied().unwrap_or(1 << 20);
    let steps = numbers.get(1).copied().unwrap_or(200);
    let cluster = Cluster::start().expect("MPI starts (run under mpirun)");
    let (rank, ranks) = (cluster.rank(), cluster.size());
    assert!(
        cells >= 2 * ranks,
        "{cells} cells for {ranks} ranks: at least two each"
    );
    // This rank's slice: [lo, hi).
    let lo = rank * cells / ranks;
    let hi = (rank + 1) * cells / ranks;
    let n = hi - lo;
    let mut u: Vec<f64> = (lo..hi).map(|i| initial(i, cells)).collect();
    let mut next = u.clone();
    let tags = cluster.tag_ub() as usize / 2;
    let start = Instant::now();
    for step in 0..steps {
        // Tags: 2 * step for rightward messages, 2 * step + 1 for leftward.
        let right_tag = ((2 * step) % tags) as i32;
        let left_tag = right_tag + 1;
        let to_left = (rank > 0).then(|| cluster.isend(vec![u[0]], rank - 1, left_tag));
        let to_right =
            (rank + 1 < ranks).then(|| cluster.isend(vec![u[n - 1]], rank + 1, right_tag));
        let from_left = (rank > 0).then(|| cluster.irecv::<f64>(1, rank - 1, right_tag));
        let from_right = (rank + 1 < ranks).then(|| cluster.irecv::<f64>(1, rank + 1, left_tag));
        // The interior while the halos travel.
        {
            let u = &u;
            par_chunks_mut(&mut next[1..n - 1], 4096).for_each(|k, chunk| {
                let first = 1 + k * 4096;
                for (j, cell) in chunk.iter_mut().enumerate() {
                    let i = first + j;
                    *cell = update(u[i - 1], u[i], u[i + 1]);
                }
            });
        }
        let left = from_left.map_or(u[0], |m| m.join().expect("the left halo")[0]);
        let right = from_right.map_or(u[n - 1], |m| m.join().expect("the right halo")[0]);
        next[0] = update(left, u[0], u[1]);
        next[n - 1] = update(u[n - 2], u[n - 1], right);
        for sent in to_left.into_iter().chain(to_right) {
            sent.join().expect("a halo sent");
        }
        std::mem::swap(&mut u, &mut next);
    }
    let took = start.elapsed();
    let serial_start = Instant::now();
    let expected = serial(cells, steps);
    let serial_took = serial_start.elapsed();
    let wrong = (lo..hi)
        .filter(|&i| expected[i].to_bits() != u[i - lo].to_bits())
        .count();
    assert_eq!(
        wrong, 0,
        "rank {rank}: {wrong} cells differ from the serial run"
    );
    println!(
        "mpi_stencil: rank {rank} of {ranks} ({} threads): {cells} cells, {steps} steps in {:.1} ms (the serial run here: {:.1} ms, {:.2}x); its {n} cells match the serial run exactly",
        selvedge::current_num_threads(),
        took.as_secs_f64() * 1e3,
        serial_took.as_secs_f64() * 1e3,
        took.as_secs_f64() / serial_took.as_secs_f64()
    );
}

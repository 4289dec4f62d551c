//! A distributed batched GEMM, owner computes, as a graph split by rank:
//! rank 0 makes each pair of matrices, matrix `i`'s product is computed by
//! rank `i % ranks` (its rows split over that rank's workers), and rank 0
//! gathers the products and checks each, bit for bit, against the same
//! product computed there on one thread. Every rank builds the same
//! `RankGraph`; the pairs and the products travel as messages, which the
//! graph's split inserts. The graph is run several times (replayed).
//!
//! ```text
//! cargo build --release --features mpi --example mpi_gemm
//! mpirun -n 2 target/release/examples/mpi_gemm [batch] [size] [runs]
//! ```

use selvedge::mpi::{Cluster, RankGraph};
use selvedge::par_chunks_mut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// C = A B for `n` x `n` row-major matrices, rows `first..first + rows`
/// of C (the slice `c`).
fn gemm_rows(n: usize, a: &[f32], b: &[f32], first: usize, c: &mut [f32]) {
    let rows = c.len() / n;
    // SAFETY: `a` holds n x n values and its rows `first..first + rows`
    // exist; `b` is n x n; `c` is rows x n and a unique borrow. All
    // row-major with row stride n and column stride 1.
    unsafe {
        matrixmultiply::sgemm(
            rows,
            n,
            n,
            1.0,
            a[first * n..].as_ptr(),
            n as isize,
            1,
            b.as_ptr(),
            n as isize,
            1,
            0.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

/// Matrix pair `i` of run `run`: A then B, each n x n.
fn pair(i: usize, run: usize, n: usize) -> Vec<f32> {
    (0..2 * n * n)
        .map(|k| ((k * 7 + i * 13 + run * 3) % 17) as f32 / 17.0 - 0.5)
        .collect()
}

fn main() {
    let numbers: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let batch = numbers.first().copied().unwrap_or(16);
    let n = numbers.get(1).copied().unwrap_or(256);
    let runs = numbers.get(2).copied().unwrap_or(5);
    let cluster = Cluster::start().expect("MPI starts (run under mpirun)");
    let ranks = cluster.size();
    let run = Arc::new(AtomicUsize::new(0));
    let mut g = RankGraph::<f32>::new(&cluster);
    let mut gathered = Vec::new();
    for i in 0..batch {
        let run = Arc::clone(&run);
        let make = g.node_named(format!("pair {i}"), 0, move |_| {
            pair(i, run.load(Ordering::Relaxed), n)
        });
        let multiply = g.node_named(format!("product {i}"), i % ranks, move |inputs| {
            let (a, b) = inputs[0].split_at(n * n);
            let mut c = vec![0.0f32; n * n];
            // Rows in blocks of 16 over this rank's workers.
            par_chunks_mut(&mut c, 16 * n)
                .for_each(|block, rows| gemm_rows(n, a, b, block * 16, rows));
            c
        });
        // Back on rank 0 (a message from the owner, where it is not 0).
        let back = g.node_named(format!("gathered {i}"), 0, |inputs| inputs[0].to_vec());
        g.precede(make, multiply);
        g.precede(multiply, back);
        gathered.push(back);
    }
    let (mut distributed, mut serial) = (Vec::new(), Vec::new());
    for r in 0..runs {
        run.store(r, Ordering::Relaxed);
        let start = Instant::now();
        g.run().expect("a run of the graph");
        distributed.push(start.elapsed().as_secs_f64() * 1e3);
        if cluster.rank() == 0 {
            // The peer and the check: the whole batch on this one thread.
            let start = Instant::now();
            let expected: Vec<Vec<f32>> = (0..batch)
                .map(|i| {
                    let inputs = pair(i, r, n);
                    let (a, b) = inputs.split_at(n * n);
                    let mut c = vec![0.0f32; n * n];
                    for (block, rows) in c.chunks_mut(16 * n).enumerate() {
                        gemm_rows(n, a, b, block * 16, rows);
                    }
                    c
                })
                .collect();
            serial.push(start.elapsed().as_secs_f64() * 1e3);
            for (i, c) in expected.into_iter().enumerate() {
                assert!(
                    g.value(gathered[i]) == Some(c),
                    "run {r}: product {i} differs from the serial one"
                );
            }
        }
    }
    if cluster.rank() == 0 {
        let median = |v: &mut Vec<f64>| {
            v.sort_unstable_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (d, s) = (median(&mut distributed), median(&mut serial));
        println!(
            "mpi_gemm: {batch} products of {n}x{n} f32 on {ranks} ranks x {} threads: median {d:.2} ms a run, one thread here {s:.2} ms ({:.2}x); every product matches bit for bit",
            selvedge::current_num_threads(),
            s / d
        );
    }
}

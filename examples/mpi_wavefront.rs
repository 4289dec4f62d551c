//! A distributed 2-D wavefront: the edit distance of two sequences of
//! length `n`, its `(n + 1) x (n + 1)` table cut into tiles of `tile` x
//! `tile` cells, as a graph split by rank. Cell (x, y) needs (x - 1, y),
//! (x, y - 1) and (x - 1, y - 1), so tile (i, j) needs the bottom row of
//! tile (i - 1, j) and the right column of tile (i, j - 1). Tile column `j`
//! belongs to rank `j % ranks`: a column's tiles pass their rows down on
//! their own rank, and each tile's right column travels to the next rank
//! as a message, which the graph's split inserts. Tiles of one rank on
//! the same anti-diagonal run on its workers at once; the ranks work as a
//! pipeline, each a tile column behind the one before.
//!
//! Each run uses new sequences (the graph is built once and replayed).
//! After each run every rank computes the whole table on one thread (the
//! same recurrence, row by row: the peer, timed on rank 0) and compares
//! every value its tiles produced, bit for bit: each tile's bottom row,
//! right column and a checksum of all its cells.
//!
//! ```text
//! cargo build --release --features mpi --example mpi_wavefront
//! mpirun -n 2 target/release/examples/mpi_wavefront [n] [tile] [runs]
//! ```
//!
//! `SELVEDGE_NUM_THREADS` sets each rank's workers: `SELVEDGE_NUM_THREADS=1
//! mpirun -n 2 ...` against `SELVEDGE_NUM_THREADS=2 mpirun -n 1 ...` compares
//! two ranks of one thread with one rank of two.

use selvedge::mpi::{Cluster, RankGraph, RankNode, Reduce};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Letter `x` (from 0) of sequence `which` (0 or 1) in run `run`: four
/// letters, from a hash, so that any tile can make its own part.
fn letter(which: u64, run: usize, x: usize) -> u8 {
    let mut h = (x as u64) ^ (run as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (which << 62);
    h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((h ^ (h >> 31)) & 3) as u8
}

/// One cell of the table from its three neighbours.
#[inline]
fn cell(up: u32, left: u32, diagonal: u32, same: bool) -> u32 {
    (up + 1).min(left + 1).min(diagonal + u32::from(!same))
}

/// What a tile gives its neighbours, and the check: its bottom row with
/// the cell before it (`tile + 1` values: table row `x1`, columns `y0` to
/// `y1`), its right column (`tile` values: rows `x0 + 1` to `x1`, column
/// `y1`) and a checksum of all its cells.
fn output_len(tile: usize) -> usize {
    2 * tile + 2
}

/// Mixes cell (x, y)'s value into a tile's checksum.
#[inline]
fn mix(sum: u32, value: u32, x: usize, y: usize) -> u32 {
    sum.wrapping_mul(31)
        .wrapping_add(value ^ (x as u32).wrapping_mul(0x9E37_79B9) ^ y as u32)
}

/// Tile (i, j) of run `run`: `top` is table row `i * tile` from column
/// `j * tile` (`tile + 1` values), `left` is column `j * tile` from row
/// `i * tile + 1` (`tile` values).
fn compute_tile(
    run: usize,
    tile: usize,
    i: usize,
    j: usize,
    top: &[u32],
    left: &[u32],
) -> Vec<u32> {
    let (x0, y0) = (i * tile, j * tile);
    let a: Vec<u8> = (0..tile).map(|k| letter(0, run, x0 + k)).collect();
    let b: Vec<u8> = (0..tile).map(|k| letter(1, run, y0 + k)).collect();
    let mut above = top.to_vec();
    let mut row = vec![0u32; tile + 1];
    let mut right = Vec::with_capacity(tile);
    let mut sum = 0u32;
    for (r, &letter_a) in a.iter().enumerate() {
        let x = x0 + r + 1;
        row[0] = left[r];
        for (c, &letter_b) in b.iter().enumerate() {
            let value = cell(above[c + 1], row[c], above[c], letter_a == letter_b);
            row[c + 1] = value;
            sum = mix(sum, value, x, y0 + c + 1);
        }
        right.push(row[tile]);
        std::mem::swap(&mut above, &mut row);
    }
    // `above` is now the tile's bottom row, with the cell before it.
    let mut out = above;
    out.extend_from_slice(&right);
    out.push(sum);
    out
}

/// The whole table on this thread, row by row, with every tile's output
/// as `compute_tile` makes it (the peer, and the check): `out[i][j]`.
fn serial(run: usize, n: usize, tile: usize) -> Vec<Vec<Vec<u32>>> {
    let tiles = n / tile;
    let a: Vec<u8> = (0..n).map(|k| letter(0, run, k)).collect();
    let b: Vec<u8> = (0..n).map(|k| letter(1, run, k)).collect();
    let mut out = vec![vec![vec![0u32; output_len(tile)]; tiles]; tiles];
    let mut above: Vec<u32> = (0..=n as u32).collect();
    let mut row = vec![0u32; n + 1];
    let mut sums = vec![0u32; tiles];
    for (r, &letter_a) in a.iter().enumerate() {
        let x = r + 1;
        row[0] = x as u32;
        for (j, sum) in sums.iter_mut().enumerate() {
            for c in j * tile..(j + 1) * tile {
                let value = cell(above[c + 1], row[c], above[c], letter_a == b[c]);
                row[c + 1] = value;
                *sum = mix(*sum, value, x, c + 1);
            }
        }
        let i = r / tile;
        for (j, tile_out) in out[i].iter_mut().enumerate() {
            tile_out[tile + 1 + r % tile] = row[(j + 1) * tile];
        }
        if x % tile == 0 {
            for (j, tile_out) in out[i].iter_mut().enumerate() {
                tile_out[..=tile].copy_from_slice(&row[j * tile..=(j + 1) * tile]);
                tile_out[2 * tile + 1] = std::mem::take(&mut sums[j]);
            }
        }
        std::mem::swap(&mut above, &mut row);
    }
    out
}

fn main() {
    let numbers: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let n = numbers.first().copied().unwrap_or(8192);
    let tile = numbers.get(1).copied().unwrap_or(256);
    let runs = numbers.get(2).copied().unwrap_or(5).max(1);
    assert!(
        tile > 0 && n % tile == 0,
        "mpi_wavefront: the length {n} must be a multiple of the tile {tile}"
    );
    let tiles = n / tile;
    let cluster = Cluster::start().expect("MPI starts (run under mpirun)");
    let (rank, ranks) = (cluster.rank(), cluster.size());
    let run = Arc::new(AtomicUsize::new(0));
    let mut g = RankGraph::<u32>::new(&cluster);
    let mut nodes: Vec<Vec<RankNode>> = Vec::with_capacity(tiles);
    for i in 0..tiles {
        let mut row = Vec::with_capacity(tiles);
        for j in 0..tiles {
            let run = Arc::clone(&run);
            // Its inputs come in the order of its edges: up, then left.
            let node = g.node_named(format!("tile ({i}, {j})"), j % ranks, move |inputs| {
                let run = run.load(Ordering::Relaxed);
                let (x0, y0) = (i * tile, j * tile);
                let mut inputs = inputs.iter();
                let border_top: Vec<u32>;
                let top = if i > 0 {
                    &inputs.next().expect("the tile above")[..=tile]
                } else {
                    border_top = (y0 as u32..=(y0 + tile) as u32).collect();
                    &border_top
                };
                let border_left: Vec<u32>;
                let left = if j > 0 {
                    &inputs.next().expect("the tile to the left")[tile + 1..2 * tile + 1]
                } else {
                    border_left = (x0 as u32 + 1..=(x0 + tile) as u32).collect();
                    &border_left
                };
                compute_tile(run, tile, i, j, top, left)
            });
            if i > 0 {
                g.precede(nodes[i - 1][j], node);
            }
            if j > 0 {
                g.precede(row[j - 1], node);
            }
            row.push(node);
        }
        nodes.push(row);
    }
    let barrier = || {
        cluster
            .iallreduce(vec![0u32], Reduce::Max)
            .join()
            .expect("a barrier");
    };
    let (mut distributed, mut serial_ms) = (Vec::new(), Vec::new());
    let mut wrong = 0u32;
    let mut distance = None;
    for r in 0..runs {
        run.store(r, Ordering::Relaxed);
        barrier();
        let start = Instant::now();
        g.run().expect("a run of the graph");
        distributed.push(start.elapsed().as_secs_f64() * 1e3);
        barrier();
        let start = Instant::now();
        let expected = serial(r, n, tile);
        serial_ms.push(start.elapsed().as_secs_f64() * 1e3);
        for (i, row) in nodes.iter().enumerate() {
            for (j, &node) in row.iter().enumerate() {
                if j % ranks == rank && g.value(node).as_ref() != Some(&expected[i][j]) {
                    wrong += 1;
                }
            }
        }
        distance = Some(expected[tiles - 1][tiles - 1][tile]);
    }
    // Every rank's count of wrong tiles, summed on every rank.
    let wrong = cluster
        .iallreduce(vec![wrong], Reduce::Sum)
        .join()
        .expect("summing the wrong tiles")[0];
    assert_eq!(
        wrong, 0,
        "mpi_wavefront: {wrong} tile results (of {tiles}^2 tiles x {runs} runs) differ from the serial run"
    );
    if rank == 0 {
        let median = |v: &mut Vec<f64>| {
            v.sort_unstable_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (d, s) = (median(&mut distributed), median(&mut serial_ms));
        println!(
            "mpi_wavefront: edit distance of two sequences of {n}, {tiles}x{tiles} tiles of {tile}x{tile}, on {ranks} ranks x {} threads: median {d:.2} ms a run, one thread here {s:.2} ms ({:.2}x the serial time); every tile of {runs} runs matches the serial run bit for bit (last distance {})",
            selvedge::current_num_threads(),
            d / s,
            distance.expect("at least one run")
        );
    }
}

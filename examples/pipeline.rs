//! A two-stage pipeline over a `LoopPromise`: stage 2 of item `i` waits for
//! `lp.at(i)` only, so it starts as soon as stage 1 finished item `i`, not
//! after a barrier behind the slowest item of stage 1.
//!
//! `cargo run --release --example pipeline` times it against the same two
//! stages separated by a barrier, and against a serial loop.

use selvedge::{scope, LoopPromise, Runtime};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const ITEMS: usize = 48;
const RUNS: usize = 3;

/// Stage 1: item `i`'s data. Lengths vary eightfold between items, so items
/// take varied time and the last one to finish is not the last one started.
fn produce(i: usize) -> Vec<u64> {
    let len = 40_000 * (1 + (i * 5 + i / 7) % 8) as u64;
    let seed = (i as u64) << 32;
    (seed..seed + len).map(splitmix).collect()
}

/// splitmix64's mixer: a few real instructions per element, not a sleep.
fn splitmix(x: u64) -> u64 {
    let z = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Stage 2: sorts the item and folds it into an order-sensitive checksum.
fn consume(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    let mix = |acc: u64, (k, &x): (usize, &u64)| acc.rotate_left(5) ^ x.wrapping_mul(k as u64 | 1);
    v.iter().enumerate().fold(0, mix)
}

/// What one run saw: per item, when (ms after the run's start) stage 1
/// finished it and stage 2 started it; the results; the most items made
/// and not yet consumed at once (memory held between the stages).
struct Trace {
    times: [Vec<f64>; 2],
    sums: Vec<u64>,
    peak_held: usize,
    wall: Duration,
}

fn run(rt: &Runtime, pipelined: bool) -> Trace {
    let start = Instant::now();
    // Stage 1 of item i hands it to stage 2 through slot i (the promise
    // orders the two; the lock is never contended).
    let slots: Vec<Mutex<Option<Vec<u64>>>> = (0..ITEMS).map(|_| Mutex::new(None)).collect();
    let cells = || (0..ITEMS).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
    let (done1, start2, sums) = (cells(), cells(), cells());
    let (held, peak) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let now = || start.elapsed().as_micros() as u64;
    let stage1 = |i: usize| {
        *slots[i].lock().unwrap() = Some(produce(i));
        done1[i].store(now(), Relaxed);
        peak.fetch_max(held.fetch_add(1, Relaxed) + 1, Relaxed);
    };
    let stage2 = |i: usize| {
        start2[i].store(now(), Relaxed);
        let item = slots[i].lock().unwrap().take().expect("stage 1 ran first");
        held.fetch_sub(1, Relaxed);
        sums[i].store(consume(item), Relaxed);
    };
    rt.run(|| {
        // Spawned in reverse because a worker runs its newest task first:
        // item 0 starts first and thieves take the old end (the last items).
        if pipelined {
            let lp = LoopPromise::new(0..ITEMS);
            let lp = &lp;
            scope(|s| {
                // Parked until their item is ready; a parked task costs no worker time.
                for i in 0..ITEMS {
                    s.spawn_delayed([lp.at(i)], move |_| stage2(i));
                }
                for i in (0..ITEMS).rev() {
                    s.spawn(move |_| {
                        stage1(i);
                        lp.fulfill(i); // stage 2 of item i runs next, here, on hot data
                    });
                }
            });
        } else {
            scope(|s| (0..ITEMS).rev().for_each(|i| s.spawn(move |_| stage1(i))));
            scope(|s| (0..ITEMS).rev().for_each(|i| s.spawn(move |_| stage2(i))));
        }
    });
    let wall = start.elapsed(); // before the bookkeeping below
    let ms = |v: Vec<AtomicU64>| v.into_iter().map(|t| t.into_inner() as f64 / 1e3).collect();
    let sums = sums.into_iter().map(AtomicU64::into_inner).collect();
    let (times, peak_held) = ([ms(done1), ms(start2)], peak.into_inner());
    Trace {
        times,
        sums,
        peak_held,
        wall,
    }
}

fn main() -> Result<(), selvedge::BuildError> {
    let rt = Runtime::new()?;
    let serial = || (0..ITEMS).map(|i| consume(produce(i))).collect::<Vec<_>>();
    let expected = serial();
    // Alternate the versions so drift on a shared machine hits all three.
    let (mut serial_times, mut piped, mut barrier) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let start = Instant::now();
        assert_eq!(serial(), expected);
        serial_times.push(start.elapsed());
        piped.push(run(&rt, true));
        barrier.push(run(&rt, false));
    }
    for t in piped.iter().chain(&barrier) {
        assert_eq!(t.sums, expected, "parallel != serial");
    }
    serial_times.sort();
    piped.sort_by_key(|t| t.wall);
    barrier.sort_by_key(|t| t.wall);
    let (p, b) = (&piped[RUNS / 2], &barrier[RUNS / 2]); // the median runs

    let n = rt.num_threads();
    println!("{ITEMS} items on {n} workers; stage 1 makes 40k to 320k numbers per item,");
    println!("stage 2 sorts them. Median runs, in ms from each run's start:\n");
    println!(
        "item | pipelined: stage 1 done, stage 2 start | barrier: stage 1 done, stage 2 start"
    );
    for i in (0..ITEMS).step_by(ITEMS / 8) {
        let [pd, ps, bd, bs] = [&p.times[0], &p.times[1], &b.times[0], &b.times[1]].map(|v| v[i]);
        println!("{i:>4} | {pd:>22.1} {ps:>14.1} | {bd:>20.1} {bs:>14.1}");
    }
    println!();
    for (name, t) in [("pipelined", p), ("barrier", b)] {
        let [done, start2] = &t.times;
        let first2 = start2.iter().copied().fold(f64::MAX, f64::min);
        let last1 = done.iter().copied().fold(0.0, f64::max);
        let wait = start2.iter().zip(done).map(|(s, d)| s - d).sum::<f64>() / ITEMS as f64;
        println!(
            "{name:>9}: first stage 2 starts at {first2:5.1}, last stage 1 ends at {last1:5.1},"
        );
        println!(
            "{:11}items wait {wait:4.1} between stages; at most {} held at once",
            "", t.peak_held
        );
    }
    let [s, bw, pw] = [serial_times[RUNS / 2], b.wall, p.wall].map(|d| d.as_secs_f64() * 1e3);
    println!("\nwall ms, median of {RUNS}: serial {s:.1}, barrier {bw:.1}, pipelined {pw:.1}");
    let ratio = pw / bw;
    println!("(pipelined / barrier = {ratio:.2}); every run's checksums match the serial loop");
    Ok(())
}

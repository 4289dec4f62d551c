//! Every task block goes back to the allocator when its runtime is
//! dropped, wherever it was at the time: in a worker's own pool, on its
//! way between workers (a worker's outbox, the runtime's block exchange, a
//! worker's reserve), or in a batch that a worker was partway through
//! handing out. Alone in its binary, with a counting allocator that sees
//! every thread.

mod support;

use selvedge::LoopPromise;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;
use support::Watchdog;

#[path = "support/block_counting.rs"]
mod block_counting;

#[global_allocator]
static GLOBAL: block_counting::Counting = block_counting::Counting;

/// Tiles per side of each round's wavefront: 16,384 delayed tasks, each a
/// task block and a node block, so the workers that run them free far more
/// blocks than their own pools keep and pass the rest on.
const SIDE: usize = 128;

/// A wavefront of `SIDE` x `SIDE` delayed tasks, all made by the calling
/// task: tile (i, j) waits for (i - 1, j) and (i, j - 1).
fn wavefront() -> u64 {
    let done = Arc::new(LoopPromise::new(0..SIDE * SIDE));
    let values: Arc<Vec<AtomicU64>> =
        Arc::new((0..SIDE * SIDE).map(|_| AtomicU64::new(0)).collect());
    for idx in 0..SIDE * SIDE {
        let (i, j) = (idx / SIDE, idx % SIDE);
        let deps = [
            (i > 0).then(|| done.at(idx - SIDE)),
            (j > 0).then(|| done.at(idx - 1)),
        ];
        let (done, values) = (done.clone(), values.clone());
        drop(selvedge::spawn_delayed(
            deps.into_iter().flatten(),
            move || {
                let up = if i > 0 {
                    values[idx - SIDE].load(Relaxed)
                } else {
                    1
                };
                let left = if j > 0 {
                    values[idx - 1].load(Relaxed)
                } else {
                    1
                };
                // A little work, so that the other workers take part.
                let v = (0..50u64).fold(up ^ left.rotate_left(7), |a, x| {
                    std::hint::black_box(a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ x)
                });
                values[idx].store(v, Relaxed);
                done.fulfill(idx);
            },
        ));
    }
    selvedge::spawn_delayed([done.at(SIDE * SIDE - 1)], || ()).join();
    values[SIDE * SIDE - 1].load(Relaxed)
}

#[test]
fn every_task_block_goes_back_to_the_allocator_with_its_runtime() {
    let _watchdog = Watchdog::new("block leaks", Duration::from_secs(120));
    let allocated_before = block_counting::block_sized();
    let freed_before = block_counting::BLOCK_SIZED_FREED.load(Relaxed);
    // More workers than this machine's cores.
    let rt = selvedge::Runtime::builder().num_threads(4).build().unwrap();
    let expected = rt.run(wavefront);
    for _ in 0..5 {
        // Rounds made on whichever worker runs the root task, each round's
        // blocks reaching the next round's maker through the exchange.
        assert_eq!(rt.run(wavefront), expected);
    }
    let ran_elsewhere = {
        let ran: Vec<u64> = rt.stats().workers.iter().map(|w| w.tasks_run).collect();
        ran.iter().sum::<u64>() - ran.iter().max().unwrap()
    };
    drop(rt);
    let allocated = block_counting::block_sized() - allocated_before;
    let freed = block_counting::BLOCK_SIZED_FREED.load(Relaxed) - freed_before;
    assert!(
        ran_elsewhere >= (SIDE * SIDE) as u64,
        "only {ran_elsewhere} tasks ran off the busiest worker: the test did not move blocks between workers"
    );
    // A worker's own pool keeps 4,096 free blocks; beyond three pools'
    // worth, blocks went between workers.
    assert!(
        allocated >= 3 * 4096,
        "only {allocated} block-sized allocations: the test made too few blocks to fill the exchange"
    );
    // Nothing else in this binary allocates 256 bytes while the runtime
    // lives: every block-sized allocation is a task block.
    assert!(
        allocated == freed,
        "{allocated} task blocks allocated while the runtime lived, {freed} freed by the time it was dropped"
    );
}

//! Every task block goes back to the allocator when its runtime is
//! dropped, wherever it was at the time: in a worker's own pool, on its
//! way between workers (a worker's outbox, the runtime's block exchange, a
//! worker's reserve), or in a batch that a worker was partway through
//! handing out. Alone in its binary, with a counting allocator that sees
//! every thread.

mod support;

use std::sync::atomic::Ordering::Relaxed;
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
/// task (see `support::wavefront_made_up_front`).
fn wavefront() -> u64 {
    support::wavefront_made_up_front(SIDE, 50)
}

#[test]
fn every_task_block_goes_back_to_the_allocator_with_its_runtime() {
    let _watchdog = Watchdog::new("block leaks", Duration::from_secs(120));
    let allocated_before = block_counting::block_sized();
    let freed_before = block_counting::BLOCK_SIZED_FREED.load(Relaxed);
    // On a thread of its own: a thread outside the pool keeps one free
    // block for its next root task, and gives it back when it ends.
    let ran_elsewhere = std::thread::spawn(|| {
        // More workers than this machine's cores.
        let rt = selvedge::Runtime::builder().num_threads(4).build().unwrap();
        let expected = rt.run(wavefront);
        for _ in 0..5 {
            // Rounds made on whichever worker runs the root task, each
            // round's blocks reaching the next round's maker through the
            // exchange.
            assert_eq!(rt.run(wavefront), expected);
        }
        let ran: Vec<u64> = rt.stats().workers.iter().map(|w| w.tasks_run).collect();
        ran.iter().sum::<u64>() - ran.iter().max().unwrap()
    })
    .join()
    .unwrap();
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
    // lives (nor does starting its thread): every block-sized allocation
    // is a task block.
    assert!(
        allocated == freed,
        "{allocated} task blocks allocated while the runtime lived, {freed} freed by the time it was dropped"
    );
}

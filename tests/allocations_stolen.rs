//! Spawning allocates (almost) nothing once the workers' block pools are
//! warm, also while thieves take tasks: a stolen task's block comes back to
//! the pool of the worker that joins it, so no pool runs dry while another
//! fills. Alone in its binary, with a counting allocator that sees every
//! thread.
//!
//! "Almost": a block goes to the pool of whichever side lets go of it
//! last, usually the joiner, but now and then the thief that ran the task,
//! when it finishes its release after the joiner took the result. A few
//! blocks so move between pools, and a pool that runs dry takes one from
//! the allocator: 0 to 11 in 819,000 spawns with about 600 steals, where
//! a pool that lost every stolen task's block would take one per steal.

mod support;

use std::time::Duration;
use support::Watchdog;

#[path = "support/block_counting.rs"]
mod block_counting;

#[global_allocator]
static GLOBAL: block_counting::Counting = block_counting::Counting;

/// Depth of the tree each round spawns: `2^DEPTH - 1` spawns.
const DEPTH: u32 = 12;

/// A binary tree of spawned tasks, each joined by its parent, with a little
/// work per leaf so that idle workers find tasks to steal.
fn tree(depth: u32) -> u64 {
    if depth == 0 {
        return (0..200u64).fold(1, |a, x| std::hint::black_box(a.wrapping_mul(31) ^ x));
    }
    let left = selvedge::spawn(move || tree(depth - 1));
    let right = tree(depth - 1);
    left.join().wrapping_add(right)
}

#[test]
fn spawns_allocate_no_blocks_once_warm_while_tasks_are_stolen() {
    let _watchdog = Watchdog::new("spawns with steals", Duration::from_secs(120));
    // More workers than this machine's cores, so thieves interrupt
    // spawners at every point of the tree.
    let rt = selvedge::Runtime::builder().num_threads(4).build().unwrap();
    let stolen = || -> u64 { rt.stats().workers.iter().map(|w| w.tasks_stolen).sum() };
    const WARM_UP: u64 = 200;
    const ROUNDS: u64 = 200;
    // One root task for the whole test: a root task made on a thread
    // outside the runtime comes from the allocator.
    let (steals_before, blocks_before) = rt.run(|| {
        let expected = tree(DEPTH);
        for _ in 0..WARM_UP {
            assert_eq!(tree(DEPTH), expected); // warm-up
        }
        let before = (stolen(), block_counting::block_sized());
        for _ in 0..ROUNDS {
            assert_eq!(tree(DEPTH), expected);
        }
        before
    });
    let blocks = block_counting::block_sized() - blocks_before;
    let steals = stolen() - steals_before;
    let spawns = ROUNDS * ((1 << DEPTH) - 1);
    assert!(
        steals >= 100,
        "only {steals} tasks stolen in {ROUNDS} rounds: too few for the test to show anything"
    );
    assert!(
        (blocks as u64) * 10_000 <= spawns,
        "{blocks} task blocks allocated for {spawns} spawns with {steals} tasks stolen \
         (at most one per 10,000 spawns expected)"
    );
}

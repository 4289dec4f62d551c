//! Unit tests of `block_pool.rs`.

use super::{
    dealloc_block, BlockExchange, BlockPool, COUNT_PARKED_EVERY, ORDER_AT, POOL_IDLE_CAPACITY,
    POOL_TRIM_AFTER,
};
use crate::core::block_alloc::{alloc_fresh, alloc_raw, free_raw};
use crate::core::outside_pool::OutsidePool;
use crate::core::task::Header;
use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Instant;

/// `count` fresh blocks, lowest address first.
fn fresh_blocks(count: usize) -> Vec<NonNull<Header>> {
    let mut blocks: Vec<NonNull<Header>> = (0..count).map(|_| alloc_fresh()).collect();
    blocks.sort_unstable();
    blocks
}

/// Frees `blocks` through a pool of `exchange` that then goes away, as
/// a worker's frees past its own pool's capacity reach the exchange.
fn pass_through_a_pool(exchange: &Arc<BlockExchange>, blocks: Vec<NonNull<Header>>) {
    let mut giver = BlockPool::new(Some(Arc::clone(exchange)), || 0);
    for block in blocks {
        if let Err(refused) = giver.push(block) {
            // SAFETY: fresh from `alloc_fresh`, and unused.
            unsafe { dealloc_block(refused.as_ptr()) };
        }
    }
    giver.flush_outbox();
}

/// Everything a pool whose own list is empty hands out from what it
/// takes from its exchange, in order, until it has nothing left, with
/// `parked` tasks of its runtime parked on promises all along.
fn drain(pool: &mut BlockPool, parked: u64) -> Vec<NonNull<Header>> {
    std::iter::from_fn(|| pool.pop_reserve(|| parked)).collect()
}

/// Takes `count` blocks freed lowest address first through the
/// exchange, twice (the first round's take grows the exchange's limit,
/// which refuses what is over it at first, so that the second round's
/// fits), and returns what `taker` hands out in the second round, with
/// `parked[round]` tasks of its runtime parked on promises.
fn second_round(taker: &mut BlockPool, parked: [u64; 2]) -> Vec<NonNull<Header>> {
    let exchange = Arc::clone(taker.exchange.as_ref().expect("an exchange"));
    let count = POOL_IDLE_CAPACITY + ORDER_AT + 1000;
    let mut out = Vec::new();
    for parked_now in parked {
        free_all(std::mem::take(&mut out));
        pass_through_a_pool(&exchange, fresh_blocks(count));
        out = drain(taker, parked_now);
    }
    assert!(out.len() >= ORDER_AT, "the exchange kept {}", out.len());
    out
}

fn free_all(blocks: Vec<NonNull<Header>>) {
    for block in blocks {
        // SAFETY: handed out by a pool, and unused.
        unsafe { dealloc_block(block.as_ptr()) };
    }
}

fn descents(blocks: &[NonNull<Header>]) -> usize {
    blocks.windows(2).filter(|w| w[1] < w[0]).count()
}

/// While many tasks are parked, a batch taken from the exchange of at
/// least `ORDER_AT` blocks is handed out lowest address first, however
/// it was freed.
#[test]
fn a_large_batch_is_handed_out_in_address_order_while_many_tasks_are_parked() {
    let mut taker = BlockPool::new(Some(Arc::new(BlockExchange::new())), || 0);
    let out = second_round(&mut taker, [0, ORDER_AT as u64]);
    assert_eq!(descents(&out), 0, "handed out in address order");
    free_all(out);
}

/// Many tasks parked at the pool's last count of them count too: a
/// program making its graph again takes the last round's blocks before
/// it has parked many tasks of the new round. (The first round's take
/// is counted because it is at least `COUNT_PARKED_EVERY` blocks: the
/// exchange accepts chains until it holds 4,096.)
#[test]
fn a_large_batch_is_handed_out_in_address_order_after_a_take_while_many_were_parked() {
    let mut taker = BlockPool::new(Some(Arc::new(BlockExchange::new())), || 0);
    let out = second_round(&mut taker, [ORDER_AT as u64, 0]);
    assert_eq!(descents(&out), 0, "handed out in address order");
    free_all(out);
}

/// With few tasks parked, the same batch comes back as it came: the
/// most recently freed first (the exchange's carriers are taken
/// newest first, and each is emptied from its end).
#[test]
fn a_large_batch_is_handed_out_most_recently_freed_first_while_few_tasks_are_parked() {
    let mut taker = BlockPool::new(Some(Arc::new(BlockExchange::new())), || 0);
    let out = second_round(&mut taker, [0, 0]);
    assert_eq!(descents(&out), out.len() - 1, "most recently freed first");
    free_all(out);
}

/// Small takes from the exchange count the parked tasks (which reads
/// every worker's counters) once every `COUNT_PARKED_EVERY` blocks,
/// not once each.
#[test]
fn small_takes_count_the_parked_tasks_once_every_few_thousand_blocks() {
    let exchange = Arc::new(BlockExchange::new());
    let mut taker = BlockPool::new(Some(Arc::clone(&exchange)), || 0);
    let counts = Cell::new(0);
    let parked = || {
        counts.set(counts.get() + 1);
        0
    };
    let mut taken = 0;
    while taken < 3 * COUNT_PARKED_EVERY {
        // The giver keeps `POOL_IDLE_CAPACITY` blocks: 100 reach the
        // exchange each time.
        pass_through_a_pool(&exchange, fresh_blocks(POOL_IDLE_CAPACITY + 100));
        let out: Vec<_> = std::iter::from_fn(|| taker.pop_reserve(parked)).collect();
        assert!(!out.is_empty() && out.len() < ORDER_AT, "a small take");
        taken += out.len();
        free_all(out);
    }
    let counted = counts.get();
    assert!(
        (1..=taken / COUNT_PARKED_EVERY).contains(&counted),
        "{counted} counts for {taken} blocks taken"
    );
}

/// The pool for threads outside the workers keeps what it took while
/// it was used within `POOL_TRIM_AFTER`, however many idle workers try
/// to trim it one after the other, and gives it back after.
#[test]
fn the_outside_pool_keeps_its_blocks_through_the_trim_delay() {
    let exchange = Arc::new(BlockExchange::new());
    pass_through_a_pool(&exchange, fresh_blocks(POOL_IDLE_CAPACITY + 100));
    let pool = OutsidePool::new(Arc::clone(&exchange));
    let block = pool.pop(&|| 0).expect("a block from the exchange");
    assert!(pool.has_surplus(), "the rest of the take is held");
    // Two workers going idle one after the other (asserted only when
    // the test itself was not held up for the whole delay between).
    let first = Instant::now();
    pool.trim();
    pool.trim();
    if first.elapsed() < POOL_TRIM_AFTER {
        assert!(pool.has_surplus(), "given back before the delay");
    }
    std::thread::sleep(POOL_TRIM_AFTER + POOL_TRIM_AFTER / 10);
    pool.trim();
    assert!(!pool.has_surplus(), "kept past the delay");
    free_all(vec![block]);
}

/// On a thread outside every pool, a freed block is kept as the
/// thread's spare and handed out again; a second one, with the spare
/// taken, goes back to the allocator.
#[test]
fn a_foreign_thread_keeps_one_spare_block() {
    std::thread::spawn(|| {
        let first = alloc_raw::<Header>();
        let second = alloc_raw::<Header>();
        // SAFETY: both came from `alloc_raw` and are unused.
        unsafe {
            free_raw(first);
            free_raw(second);
        }
        let again = alloc_raw::<Header>();
        assert_eq!(again, first, "the spare block comes back");
        let fresh = alloc_raw::<Header>();
        // SAFETY: as above.
        unsafe {
            free_raw(again);
            free_raw(fresh);
        }
    })
    .join()
    .unwrap();
}

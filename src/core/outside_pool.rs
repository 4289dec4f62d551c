//! A runtime's block pool for the threads that make its tasks without
//! being one of its workers.

use crate::core::block_pool::{BlockExchange, BlockPool, POOL_TRIM_AFTER};
use crate::core::sync::{AtomicBool, Mutex, Ordering};
use crate::core::task::Header;
use crossbeam_utils::CachePadded;
use std::ptr::NonNull;
use std::sync::{Arc, TryLockError};
use std::time::Instant;

/// A runtime's block pool for the threads that make its tasks without
/// being one of its workers (a main thread submitting a graph): they take
/// from the runtime's exchange the blocks its workers freed, as a worker
/// does, instead of allocating each block while the workers free as many
/// into the allocator. Behind a lock, since any thread may submit; a
/// thread that finds it taken uses its spare block or allocates instead of waiting. The blocks it
/// holds go with the runtime.
pub(crate) struct OutsidePool {
    pool: Mutex<SharedPool>,
    /// Whether the pool held blocks after its last use, for idle workers
    /// deciding whether to trim (see [`OutsidePool::has_surplus`]), and
    /// for a thread about to take one. A line of its own: the lock's is
    /// written by each taker.
    holds_blocks: CachePadded<AtomicBool>,
    /// The exchange the pool takes from, looked at before the lock.
    exchange: Arc<BlockExchange>,
}

/// The pool behind an [`OutsidePool`]'s lock, whether a block was taken
/// from it since the last idle trim looked, and when the delay before the
/// next trim may give its blocks back started (see [`OutsidePool::trim`]).
struct SharedPool {
    pool: BlockPool,
    used: bool,
    unused_since: Option<Instant>,
}

// SAFETY: a pool's blocks are unused memory it owns alone, reached only
// through the pool, so moving it to another thread moves that ownership.
// Only this wrapper is sent: a worker's installed pool never moves (its
// thread's `POOL` points at it).
unsafe impl Send for SharedPool {}

impl OutsidePool {
    pub(crate) fn new(exchange: Arc<BlockExchange>) -> Self {
        Self {
            pool: Mutex::new(SharedPool {
                // Its takes go through `pop_reserve`, given the count.
                pool: BlockPool::new(Some(Arc::clone(&exchange)), || 0),
                used: false,
                unused_since: None,
            }),
            holds_blocks: CachePadded::new(AtomicBool::new(false)),
            exchange,
        }
    }

    /// A block for a task of the pool's runtime (`parked` counts its tasks
    /// parked on promises); `None` if the pool is empty or another thread
    /// is taking from it. Out of line, so that `new_handled_for`, inlined
    /// where tasks are made, costs a worker no more than `new_handled`.
    #[inline(never)]
    pub(super) fn pop(&self, parked: &dyn Fn() -> u64) -> Option<NonNull<Header>> {
        if !self.holds_blocks.load(Ordering::Relaxed) && self.exchange.0.held() == 0 {
            // Nothing to take, as far as the hints say, so no lock. They
            // may lag: blocks freed meanwhile, or a chain pushed while a
            // worker was taking (which the exchange's count misses until
            // its next push), are found by a later task.
            return None;
        }
        let mut shared = match self.pool.try_lock() {
            Ok(shared) => shared,
            // No user code runs under the lock, and the pool is whole
            // whatever panicked: poison changes nothing (as `sync::lock`).
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        shared.used = true;
        // Nothing is ever freed into this pool, so its own list is empty:
        // straight to what it took from the exchange.
        let block = shared.pool.pop_reserve(parked);
        let holds = shared.pool.holds_taken_blocks();
        if holds != self.holds_blocks.load(Ordering::Relaxed) {
            self.holds_blocks.store(holds, Ordering::Relaxed);
        }
        block
    }

    /// Whether the pool holds blocks an idle trim would give back. Read by
    /// a worker about to park, without the lock: Relaxed, since it only
    /// decides whether to trim later (a stale answer trims once more, or
    /// once fewer).
    pub(crate) fn has_surplus(&self) -> bool {
        self.holds_blocks.load(Ordering::Relaxed)
    }

    /// Gives every block the pool holds back to the allocator, once no
    /// thread took one for [`POOL_TRIM_AFTER`]: every worker of its runtime
    /// has been idle a while (see `trim_pool`), but a thread outside them
    /// may be making a graph whose tasks all wait, and will want more. The
    /// delay starts at the first call after the pool's last take (or after
    /// it last gave its blocks back): the workers, going idle one after the
    /// other, do not give the blocks back at the second call.
    #[cold]
    pub(crate) fn trim(&self) {
        let mut shared = match self.pool.try_lock() {
            Ok(shared) => shared,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return, // in use
        };
        let now = Instant::now();
        let used = std::mem::take(&mut shared.used);
        match shared.unused_since {
            Some(since) if !used && now.duration_since(since) >= POOL_TRIM_AFTER => {}
            Some(_) if !used => return,
            _ => {
                shared.unused_since = Some(now);
                return;
            }
        }
        shared.unused_since = None;
        shared.pool.trim_to(0, false);
        self.holds_blocks.store(false, Ordering::Relaxed);
    }
}

//! Where a thread takes task blocks from and gives them back to: the
//! pool of the worker running on it (`block_pool.rs`), installed for the
//! worker's life; on other threads, one free block each keeps for the
//! next, then the global allocator.
//!
//! Blocks come from a per-thread free list on worker threads and go back
//! to the free list of whichever worker frees them, up to 4096; beyond
//! that they go to the runtime's block exchange, from which a worker whose
//! list is empty takes them all (`spare_blocks.rs`). Other threads take
//! the blocks of the tasks they submit to a runtime from its pool for
//! them (`outside_pool.rs`, through `runtime_task.rs`).

use crate::core::block_pool::{dealloc_block, BlockPool, POOL_IDLE_CAPACITY};
use crate::core::task::{Header, OwnPool, TaskBlock};
use std::alloc::{alloc, handle_alloc_error, Layout};
use std::cell::Cell;
use std::mem::{align_of, size_of};
use std::ptr::{self, NonNull};

/// A free block from the calling thread's installed pool, or on a thread
/// without one from `outside`, else from the allocator.
#[inline(always)]
pub(super) fn pooled_block(outside: impl FnOnce() -> Option<NonNull<Header>>) -> NonNull<Header> {
    let own = POOL.with(Cell::get);
    let block = if own.is_null() {
        outside()
    } else {
        // SAFETY: a non-null `POOL` points to the pool installed by
        // `install_pool`, which outlives its guard; only this thread uses
        // it, and not reentrantly.
        unsafe { (*own).pop() }
    };
    block.unwrap_or_else(alloc_fresh::<Header>)
}

/// A free block as raw memory for a `T`, which a block must hold.
#[inline(always)]
pub(super) fn as_raw<T>(block: NonNull<Header>) -> NonNull<T> {
    const {
        assert!(size_of::<T>() <= size_of::<TaskBlock>());
        assert!(align_of::<T>() <= align_of::<TaskBlock>());
    }
    block.cast()
}

/// Whether this thread's block pool, or its runtime's exchange, holds
/// spare blocks that an idle trim would give back.
pub(crate) fn pool_over_idle_capacity() -> bool {
    POOL.with(|p| {
        let pool = p.get();
        // SAFETY: as in `trim_pool`; only reads.
        !pool.is_null() && unsafe { (*pool).has_surplus() }
    })
}

/// Returns the spare blocks of this thread's pool (beyond its
/// [`POOL_IDLE_CAPACITY`]) to the allocator, and those of its runtime's
/// exchange if `everyone_idle` (every other worker idle-parked too): its
/// worker has been idle a while, so the blocks kept for a busy spell go
/// back to the rest of the program.
#[cold]
pub(crate) fn trim_pool(everyone_idle: bool) {
    POOL.with(|p| {
        let pool = p.get();
        if !pool.is_null() {
            // SAFETY: a non-null `POOL` points to the pool installed by
            // `install_pool`, used by this thread alone, and not reentrantly
            // (trimming calls nothing that allocates a block).
            unsafe { (*pool).trim_to(POOL_IDLE_CAPACITY, everyone_idle) };
        }
    });
}

thread_local! {
    /// The pool of the worker running on this thread; null elsewhere.
    static POOL: Cell<*mut BlockPool> = const { Cell::new(ptr::null_mut()) };
}

/// Installs `pool` as this thread's block pool until the guard drops;
/// the guard also hands out the [`OwnPool`] through which the thread's
/// worker reaches it directly.
pub(crate) fn install_pool(pool: &mut BlockPool) -> PoolGuard {
    let own = OwnPool(NonNull::from(&mut *pool).cast());
    POOL.with(|p| p.set(pool));
    PoolGuard(own)
}

/// Keeps a pool installed (see [`install_pool`]).
pub(crate) struct PoolGuard(OwnPool);

impl PoolGuard {
    /// The installed pool, for the worker of this thread.
    pub(crate) fn own_pool(&self) -> OwnPool {
        self.0
    }
}

impl OwnPool {
    #[inline(always)]
    pub(super) fn pop(self) -> Option<NonNull<Header>> {
        // SAFETY: this thread's installed pool (a `BlockPool`, made so by
        // `install_pool`), alive while its worker is, used by this thread
        // alone and not reentrantly (type docs).
        unsafe { (*self.0.cast::<BlockPool>().as_ptr()).pop() }
    }

    #[inline(always)]
    pub(super) fn push(self, block: NonNull<Header>) -> Result<(), NonNull<Header>> {
        // SAFETY: as in `pop`.
        unsafe { (*self.0.cast::<BlockPool>().as_ptr()).push(block) }
    }
}

impl Drop for PoolGuard {
    fn drop(&mut self) {
        POOL.with(|p| p.set(ptr::null_mut()));
    }
}

/// A pooled block used as raw memory for a `T` (a task's header, a parked
/// task's node), so neither costs a trip to the allocator on a worker.
#[inline]
pub(crate) fn alloc_raw<T>() -> NonNull<T> {
    as_raw(pooled_block(take_foreign_spare))
}

/// A block from the allocator, for when the pool has none.
#[cold]
pub(super) fn alloc_fresh<T>() -> NonNull<T> {
    let layout = Layout::new::<TaskBlock>();
    // SAFETY: the layout has non-zero size.
    let p = unsafe { alloc(layout) }.cast::<T>();
    NonNull::new(p).unwrap_or_else(|| handle_alloc_error(layout))
}

/// Returns a block from [`alloc_raw`] whose `T` was moved out or dropped.
///
/// # Safety
/// `p` must come from `alloc_raw`, and no one may use it afterwards.
#[inline]
pub(crate) unsafe fn free_raw<T>(p: NonNull<T>) {
    let block = p.cast::<Header>();
    let refused = POOL.with(|pool| {
        let pool = pool.get();
        if pool.is_null() {
            keep_foreign_spare(block)
        } else {
            // SAFETY: a non-null `POOL` points to the installed pool, used
            // by this thread alone; the block is unused (caller).
            unsafe { (*pool).push(block) }
        }
    });
    if let Err(block) = refused {
        // SAFETY: every block comes from `alloc_raw`, which allocates with
        // this layout (or pools such blocks); nobody uses it (caller).
        unsafe { dealloc_block(block.as_ptr()) };
    }
}

thread_local! {
    /// A thread outside every pool keeps one free block: the root task of
    /// `Runtime::run` (and of `run_graph`) called from it again and again,
    /// or a task it submits and joins once finished, is freed by it (the
    /// joiner frees the block it waited on) and comes back from here, with
    /// no trip to the allocator.
    static FOREIGN_SPARE: ForeignSpare = const { ForeignSpare(Cell::new(ptr::null_mut())) };
}

/// See [`FOREIGN_SPARE`]: its block, or null; freed with the thread.
struct ForeignSpare(Cell<*mut Header>);

impl Drop for ForeignSpare {
    fn drop(&mut self) {
        let block = self.0.replace(ptr::null_mut());
        if !block.is_null() {
            // SAFETY: a free block of `alloc_raw`'s layout, which only this
            // thread's spare held.
            unsafe { dealloc_block(block) };
        }
    }
}

/// This foreign thread's spare block, if it keeps one (never during its
/// thread-locals' teardown).
#[cold]
pub(super) fn take_foreign_spare() -> Option<NonNull<Header>> {
    FOREIGN_SPARE
        .try_with(|s| NonNull::new(s.0.replace(ptr::null_mut())))
        .ok()
        .flatten()
}

/// Keeps `block` as this foreign thread's spare if it has none; gives it
/// back otherwise.
#[cold]
fn keep_foreign_spare(block: NonNull<Header>) -> Result<(), NonNull<Header>> {
    FOREIGN_SPARE
        .try_with(|s| {
            if s.0.get().is_null() {
                s.0.set(block.as_ptr());
                Ok(())
            } else {
                Err(block)
            }
        })
        .unwrap_or(Err(block))
}

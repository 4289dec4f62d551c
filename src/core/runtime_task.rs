//! Tasks and blocks for a given runtime: on a thread that is none of its
//! workers, the block comes from the runtime's pool for such threads
//! (`outside_pool.rs`) rather than the allocator.

use crate::core::block_alloc::{as_raw, pooled_block, take_foreign_spare};
use crate::core::closure_task::handled_in_block;
use crate::core::registry::Registry;
use crate::core::task::{Header, TaskRef};
use std::ptr::NonNull;

/// [`new_handled`](crate::core::closure_task::new_handled) for a task of `runtime`: on a thread that is no
/// runtime's worker, the block comes from the runtime's pool for such
/// threads rather than the allocator (see [`OutsidePool`](crate::core::outside_pool::OutsidePool)).
#[inline]
pub(crate) fn new_handled_for<F, T>(runtime: &Registry, f: F) -> TaskRef
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    handled_in_block(block_for(runtime), f)
}

/// [`alloc_raw`](crate::core::block_alloc::alloc_raw) for a task of `runtime` (its parked node, say): on a
/// thread that is no runtime's worker, from the runtime's [`OutsidePool`](crate::core::outside_pool::OutsidePool).
#[inline]
pub(crate) fn alloc_raw_for<T>(runtime: &Registry) -> NonNull<T> {
    as_raw(block_for(runtime))
}

/// A free block for a task of `runtime`: from the calling worker's pool,
/// else from the runtime's pool for other threads or this thread's spare,
/// else the allocator.
#[inline]
fn block_for(runtime: &Registry) -> NonNull<Header> {
    pooled_block(|| {
        runtime
            .outside_blocks
            .pop(&|| runtime.tasks_parked())
            .or_else(take_foreign_spare)
    })
}

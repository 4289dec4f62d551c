//! A global allocator that counts allocations the size of a task block
//! (256 bytes) on every thread, and their deallocations, for the tests that bound how many blocks
//! the runtime takes from the allocator. Each such test is alone in its
//! binary and installs it:
//!
//! ```ignore
//! #[path = "support/block_counting.rs"]
//! mod block_counting;
//! #[global_allocator]
//! static GLOBAL: block_counting::Counting = block_counting::Counting;
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Forwards to the system allocator, counting block-sized allocations.
pub struct Counting;

/// Allocations the size of a task block (256 bytes), on any thread.
pub static BLOCK_SIZED: AtomicUsize = AtomicUsize::new(0);

/// Deallocations the size of a task block, on any thread.
pub static BLOCK_SIZED_FREED: AtomicUsize = AtomicUsize::new(0);

/// How many block-sized allocations were made so far.
pub fn block_sized() -> usize {
    BLOCK_SIZED.load(Relaxed)
}

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() == 256 {
            BLOCK_SIZED.fetch_add(1, Relaxed);
        }
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() == 256 {
            BLOCK_SIZED_FREED.fetch_add(1, Relaxed);
        }
        System.dealloc(ptr, layout)
    }
}

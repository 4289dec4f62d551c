//! A thread outside the workers that submits tasks takes their blocks from
//! its runtime (those the workers freed), and the blocks it took but did
//! not use are given back once the workers have stayed idle: a counting
//! global allocator sees them freed while the runtime sits idle. Alone in
//! its binary, so no other test's runtime frees blocks meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Counting;

/// Deallocations of at least 128 bytes (a task block is larger), any thread.
static LARGE_FREES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if layout.size() >= 128 {
            LARGE_FREES.fetch_add(1, Relaxed);
        }
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn blocks_taken_for_a_thread_outside_the_workers_are_given_back_once_idle() {
    const LARGE: u64 = 20_000;
    const SMALL: u64 = 1_000;
    let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
    let sum = Arc::new(AtomicU64::new(0));
    // Tasks delayed on one promise, their handles dropped before it is
    // fulfilled: the worker runs them and frees their blocks.
    let round = |tasks: u64| {
        let go = selvedge::Promise::new();
        for i in 0..tasks {
            let sum = Arc::clone(&sum);
            drop(rt.submit_delayed([go.dep()], move || {
                sum.fetch_add(i, Relaxed);
            }));
        }
        go.fulfill();
        rt.sync_root();
    };
    // Large rounds: the runtime learns to keep their blocks. Then a small
    // one takes them all back for this thread and uses a few.
    for _ in 0..4 {
        round(LARGE);
    }
    round(SMALL);
    assert_eq!(
        sum.load(Relaxed),
        4 * (LARGE * (LARGE - 1) / 2) + SMALL * (SMALL - 1) / 2
    );
    let before = LARGE_FREES.load(Relaxed);
    let deadline = Instant::now() + Duration::from_secs(10);
    while LARGE_FREES.load(Relaxed) - before < 15_000 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let freed = LARGE_FREES.load(Relaxed) - before;
    assert!(
        freed >= 15_000,
        "only {freed} blocks given back in 10 s by an idle runtime"
    );
    drop(rt);
}

//! A worker keeps the task blocks of a busy spell (so the next round of
//! tasks made up front costs no allocation: its pool keeps 4096, the
//! runtime's block exchange the rest once a round has shown it how many)
//! and gives them back once it has stayed idle: a counting global allocator
//! sees them freed while the runtime sits idle. Alone in its binary, so no
//! other test's runtime frees blocks meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
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
fn an_idle_worker_gives_back_the_blocks_of_its_busy_spell() {
    const TASKS: u64 = 20_000;
    let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
    let round = || {
        let handles: Vec<_> = (0..TASKS).map(|i| selvedge::spawn(move || i)).collect();
        handles.into_iter().map(|h| h.join()).sum::<u64>()
    };
    // Two rounds: the first shows the exchange how many blocks to hold.
    let sum = rt.run(|| round() + round());
    assert_eq!(sum, TASKS * (TASKS - 1));
    // The worker and the exchange now hold about 20,000 free blocks, and
    // the worker goes idle.
    let before = LARGE_FREES.load(Relaxed);
    let deadline = Instant::now() + Duration::from_secs(10);
    while LARGE_FREES.load(Relaxed) - before < 15_000 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let freed = LARGE_FREES.load(Relaxed) - before;
    assert!(
        freed >= 15_000,
        "an idle worker gave back only {freed} blocks in 10 s"
    );
    drop(rt);
}

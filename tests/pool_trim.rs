//! A worker keeps the task blocks of a busy spell (so the next round of
//! tasks made up front costs no allocation: its pool keeps 4096, the
//! runtime's block exchange the rest once a round has shown it how many)
//! and gives them back once it has stayed idle: a counting global allocator
//! sees them freed while the runtime sits idle. So do the blocks a thread
//! outside the workers took from its runtime for the tasks it submits. The
//! tests take turns (`ONE_AT_A_TIME`), and no other test binary shares
//! this allocator, so no other runtime frees blocks meanwhile.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
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

/// Held by each test while it counts.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Waits up to 10 s for at least `want` blocks to be freed since `before`,
/// and returns how many were.
fn freed_since(before: usize, want: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    while LARGE_FREES.load(Relaxed) - before < want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    LARGE_FREES.load(Relaxed) - before
}

#[test]
fn an_idle_worker_gives_back_the_blocks_of_its_busy_spell() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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
    let freed = freed_since(LARGE_FREES.load(Relaxed), 15_000);
    assert!(
        freed >= 15_000,
        "an idle worker gave back only {freed} blocks in 10 s"
    );
    drop(rt);
}

#[test]
fn blocks_taken_for_a_thread_outside_the_workers_are_given_back_once_idle() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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
            drop(rt.spawn_delayed([go.dep()], move || {
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
    let freed = freed_since(LARGE_FREES.load(Relaxed), 15_000);
    assert!(
        freed >= 15_000,
        "only {freed} blocks given back in 10 s by an idle runtime"
    );
    drop(rt);
}

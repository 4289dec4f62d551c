//! What a `LoopPromise` takes: per bucket, not per iteration, while its
//! buckets are fulfilled in order; one bit per iteration only for a bucket
//! fulfilled out of order; and a range too large to track is a panic with
//! a message, never an abort of the process.

use selvedge::{LoopPromise, Promise, Runtime};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::panic::catch_unwind;
use std::sync::atomic::Ordering;

struct Counting;

thread_local! {
    /// Bytes this thread allocated and freed, net (other tests and the
    /// harness allocate on other threads meanwhile).
    static LIVE_BYTES: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // `try_with`: the allocator may run while thread-locals are torn down.
    let _ = LIVE_BYTES.try_with(|c| c.set(c.get() + delta));
}

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `System.alloc`'s.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: the caller's contract is `System.dealloc`'s.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> isize {
    LIVE_BYTES.with(Cell::get)
}

fn panic_message(r: std::thread::Result<LoopPromise>) -> String {
    let payload = r.expect_err("construction should panic");
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(p) => p
            .downcast::<&str>()
            .map(|s| s.to_string())
            .unwrap_or_default(),
    }
}

#[test]
fn ranges_too_large_to_track_panic_with_a_message() {
    // Two buckets over the whole of usize: 2^63 iterations per bucket.
    let msg = panic_message(catch_unwind(|| {
        LoopPromise::with_bucket_size(0..usize::MAX, usize::MAX / 2 + 1)
    }));
    assert!(
        msg.contains(&format!("0..{}", usize::MAX))
            && msg.contains("bucket size 9223372036854775808"),
        "{msg}"
    );
    // One promise per iteration of the whole of usize.
    let msg = panic_message(catch_unwind(|| LoopPromise::new(0..usize::MAX)));
    assert!(
        msg.contains(&format!("0..{}", usize::MAX)) && msg.contains("bucket size 1"),
        "{msg}"
    );
    // The limits themselves are fine.
    let lp = LoopPromise::with_bucket_size(
        0..2 * LoopPromise::MAX_BUCKET_SIZE,
        LoopPromise::MAX_BUCKET_SIZE,
    );
    assert!(lp.fulfill(0) && !lp.fulfill(0));
    let msg = panic_message(catch_unwind(|| {
        LoopPromise::with_bucket_size(0..LoopPromise::MAX_BUCKETS + 1, 1)
    }));
    assert!(msg.contains("268435457 buckets"), "{msg}");
}

#[test]
fn large_ranges_take_memory_per_bucket() {
    const N: usize = 1_000_000_000;
    const BUCKET: usize = 1_000_000; // 1,000 buckets
                                     // A thread outside the pool keeps one freed task block for its next
                                     // one: kept before counting, so that the count ends where it started.
    drop(LoopPromise::with_bucket_size(0..N, BUCKET));
    let before = live();
    let lp = LoopPromise::with_bucket_size(0..N, BUCKET);
    let made = live() - before;
    // The docs: 16 bytes per bucket (event and progress), plus the
    // handle's fixed part.
    assert!(made <= 16 * 1000 + 1024, "{made} bytes for 1,000 buckets");
    // A whole bucket fulfilled in order allocates nothing more.
    for i in 0..BUCKET {
        assert!(lp.fulfill(i));
    }
    assert!(lp.at(0).is_fulfilled() && !lp.at(BUCKET).is_fulfilled());
    let in_order = live() - before - made;
    assert_eq!(in_order, 0, "in-order fulfils allocated {in_order} bytes");
    // A bucket fulfilled out of order takes one bit per iteration.
    assert!(lp.fulfill(2 * BUCKET + 1));
    let bits = live() - before - made - in_order;
    assert!(
        bits <= (BUCKET / 8 + 64) as isize,
        "{bits} bytes for an out-of-order bucket of {BUCKET}"
    );
    drop(lp);
    assert_eq!(live(), before, "a dropped loop promise frees everything");
    println!(
        "1,000 buckets over 10^9 iterations: {made} bytes; an out-of-order bucket: {bits} more"
    );
}

#[test]
fn repeated_fulfils_are_idempotent_and_never_fire_a_bucket_early() {
    let lp = LoopPromise::with_bucket_size(10..30, 8); // 10..18, 18..26, 26..30
                                                       // In order, repeated.
    for i in 10..17 {
        assert!(lp.fulfill(i));
        assert!(!lp.fulfill(i), "iteration {i} fulfilled twice");
        assert!(lp.is_fulfilled(i));
    }
    assert!(!lp.at(10).is_fulfilled(), "bucket 10..18 fired early");
    assert!(!lp.is_fulfilled(17));
    assert!(lp.fulfill(17));
    assert!(lp.at(10).is_fulfilled());
    // In order, then out of order, with repeats on both sides.
    assert!(lp.fulfill(18) && lp.fulfill(19));
    assert!(lp.fulfill(23));
    for i in [18, 19, 23, 18, 23] {
        assert!(!lp.fulfill(i), "iteration {i} fulfilled twice");
    }
    for i in [25, 24, 22, 21] {
        assert!(lp.fulfill(i));
        assert!(!lp.fulfill(i));
    }
    assert!(!lp.at(18).is_fulfilled(), "bucket 18..26 fired early");
    assert!(!lp.is_fulfilled(20) && lp.is_fulfilled(19) && lp.is_fulfilled(24));
    assert!(lp.fulfill(20));
    assert!(lp.at(18).is_fulfilled());
    // A shorter last bucket, backwards.
    for i in (26..30).rev() {
        assert!(!lp.at(26).is_fulfilled());
        assert!(lp.fulfill(i) && !lp.fulfill(i));
    }
    assert!(lp.at(26).is_fulfilled());
}

#[test]
fn concurrent_fulfils_fire_each_bucket_once_after_all_its_iterations() {
    let rt = Runtime::builder().num_threads(4).build().unwrap();
    for round in 0..20 {
        let lp = LoopPromise::with_bucket_size(0..4096, 64);
        let fired = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let handles: Vec<_> = (0..64)
            .map(|b| {
                let (lp2, fired) = (lp.clone(), fired.clone());
                rt.spawn_delayed([lp.at(b * 64)], move || {
                    // Every iteration of the bucket was fulfilled first.
                    for i in b * 64..(b + 1) * 64 {
                        assert!(
                            lp2.is_fulfilled(i),
                            "round {round}: bucket {b} fired before {i}"
                        );
                    }
                    fired.fetch_add(1, Ordering::SeqCst);
                })
            })
            .collect();
        // Six threads, each fulfilling every iteration: in order, backwards
        // and strided, so buckets switch to bits while others move on.
        let stop = Promise::new();
        let workers: Vec<_> = (0..6)
            .map(|t| {
                let lp = lp.clone();
                std::thread::spawn(move || {
                    let mut wins = 0;
                    for k in 0..4096 {
                        let i = match t % 3 {
                            0 => k,
                            1 => 4095 - k,
                            _ => (k * 67) % 4096,
                        };
                        wins += lp.fulfill(i) as usize;
                    }
                    wins
                })
            })
            .collect();
        let wins: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
        assert_eq!(wins, 4096, "round {round}: each iteration fulfilled once");
        drop(stop);
        handles.into_iter().for_each(|h| h.join());
        assert_eq!(fired.load(Ordering::SeqCst), 64);
    }
}

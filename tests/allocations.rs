//! Spawning a small closure allocates nothing once the worker's block pool
//! is warm: a counting global allocator proves it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    /// Allocations made by this thread (other tests run in parallel).
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
    /// Of those, the ones the size of a task block (256 bytes).
    static BLOCK_SIZED: Cell<usize> = const { Cell::new(0) };
}

fn block_sized_allocations() -> usize {
    BLOCK_SIZED.with(Cell::get)
}

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

fn count() {
    // `try_with`: the allocator may run while thread-locals are torn down.
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
}

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        if layout.size() == 256 {
            let _ = BLOCK_SIZED.try_with(|c| c.set(c.get() + 1));
        }
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn burst(n: u64) -> u64 {
    // Small closures: one u64 captured, a u64 result.
    let hs: [selvedge::JoinHandle<u64>; 8] = std::array::from_fn(|i| {
        let x = n + i as u64;
        selvedge::spawn(move || x * 2)
    });
    let mut sum = 0;
    for h in hs {
        sum += h.join();
    }
    let (a, b) = selvedge::join(|| n, || n + 1);
    sum + a + b
}

#[test]
fn small_spawns_do_not_allocate_after_warm_up() {
    let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
    let (allocs, sum) = rt.run(|| {
        let mut sum = 0;
        for i in 0..1000 {
            sum += burst(i); // warm-up: fills the pool and sizes the deque
        }
        let before = allocations();
        for i in 0..100_000 {
            sum += burst(i);
        }
        (allocations() - before, sum)
    });
    assert!(sum > 0);
    assert_eq!(allocs, 0, "{allocs} allocations for 900,000 spawns");
}

#[test]
fn tasks_made_up_front_come_from_the_pool_in_the_next_round() {
    // A task graph spawned up front, then run, round after round: 20,000
    // tasks alive at once. Once two rounds have run, the next rounds'
    // blocks come from the worker's pool and, beyond the 4096 blocks it
    // keeps, from the runtime's exchange, not from the allocator. (The
    // exchange learns how much to hold in the second round: what it had to
    // refuse in the first is allocated again once.)
    const TASKS: usize = 20_000;
    let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
    let (allocs, sum) = rt.run(|| {
        let mut handles = Vec::with_capacity(TASKS);
        let round = |handles: &mut Vec<selvedge::JoinHandle<u64>>| {
            for i in 0..TASKS as u64 {
                handles.push(selvedge::spawn(move || i));
            }
            handles.drain(..).map(|h| h.join()).sum::<u64>()
        };
        let mut sum = round(&mut handles) + round(&mut handles); // warm-up
        let before = allocations();
        for _ in 0..3 {
            sum += round(&mut handles);
        }
        (allocations() - before, sum)
    });
    assert_eq!(sum, 5 * (TASKS as u64 * (TASKS as u64 - 1) / 2));
    assert_eq!(
        allocs, 0,
        "{allocs} allocations for 3 rounds of {TASKS} live tasks"
    );
}

#[test]
fn oversized_closures_still_work() {
    let rt = selvedge::Runtime::builder().num_threads(2).build().unwrap();
    let big = [7u8; 4096];
    let h = rt.run(|| selvedge::spawn(move || big.iter().map(|&b| b as u64).sum::<u64>()));
    assert_eq!(h.join(), 7 * 4096);
    let big_result = rt.run(|| selvedge::spawn(|| [3u64; 512]).join());
    assert_eq!(big_result.iter().sum::<u64>(), 3 * 512);
}

#[test]
fn a_task_joined_in_place_that_panics_gives_its_block_back() {
    // On one worker every spawned task is joined in place, where its panic
    // unwinds straight out of `join`. Its block must go back to the pool
    // all the same: a lost block shows as one more block-sized allocation
    // per panic (the panics' own allocations are of other sizes).
    const PANICS: usize = 2_000;
    let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
    let (block_allocs, caught) = rt.run(|| {
        for i in 0..1000 {
            burst(i); // warm-up: fills the pool
        }
        let before = block_sized_allocations();
        let mut caught = 0;
        for i in 0..PANICS {
            let h = selvedge::spawn(move || -> u64 {
                if i < PANICS {
                    std::panic::resume_unwind(Box::new(i)); // no panic hook
                }
                0
            });
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h.join()));
            let payload = r.expect_err("the task panicked");
            assert_eq!(
                payload.downcast_ref::<usize>(),
                Some(&i),
                "the original payload"
            );
            caught += 1;
        }
        (block_sized_allocations() - before, caught)
    });
    assert_eq!(caught, PANICS);
    assert!(
        block_allocs < PANICS / 10,
        "{block_allocs} block-sized allocations for {PANICS} panicking tasks joined in place"
    );
}

#[test]
fn tasks_submitted_from_outside_the_workers_reuse_the_blocks_the_workers_free() {
    // A thread that is not a worker submits rounds of tasks delayed on one
    // promise, drops their handles, then fulfills it: the worker runs them
    // and frees their blocks (beyond the 4096 its own pool keeps) to the
    // runtime, and from the fourth round on the submitting thread takes
    // them back from there instead of allocating one per task. (The
    // promise is a block of its own, and a few blocks wait in the worker's
    // outbox between rounds: those are allocated again.)
    const TASKS: usize = 20_000;
    let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
    let sum = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let round = |pause: std::time::Duration| {
        let go = selvedge::Promise::new();
        for i in 0..TASKS as u64 {
            let sum = std::sync::Arc::clone(&sum);
            drop(rt.spawn_delayed([go.dep()], move || {
                sum.fetch_add(i, std::sync::atomic::Ordering::Relaxed);
            }));
            if i == 0 {
                std::thread::sleep(pause);
            }
        }
        go.fulfill();
        rt.sync_root();
    };
    // Warm-up: the worker's pool fills, and the runtime learns to hold
    // what it had to refuse (it doubles, at least, each round).
    for _ in 0..3 {
        round(std::time::Duration::ZERO);
    }
    let before = block_sized_allocations();
    // Each round pauses after its first task, as a slow round would (a
    // loaded machine, a sanitizer): the worker, idle past the trim delay,
    // gives back what it holds, but what it learned to hold stays.
    for _ in 0..3 {
        // Longer than the 100 ms an idle worker waits before it trims.
        round(std::time::Duration::from_millis(150));
    }
    let blocks = block_sized_allocations() - before;
    let want = 6 * (TASKS as u64 * (TASKS as u64 - 1) / 2);
    assert_eq!(sum.load(std::sync::atomic::Ordering::Relaxed), want);
    assert!(
        blocks < 200,
        "{blocks} blocks allocated for 3 rounds of {TASKS} tasks submitted from outside"
    );
}

#[test]
fn a_thread_outside_the_workers_that_joins_each_task_reuses_its_block() {
    // Submitted and joined one at a time from a thread that is not a
    // worker, each joined once finished: the join frees the block on this
    // thread, which keeps it as its spare, and the next submission takes it
    // back.
    let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
    let submit_and_join = |i: u64| {
        let h = rt.spawn(move || i);
        while !h.is_finished() {
            std::thread::yield_now();
        }
        h.join()
    };
    assert_eq!(submit_and_join(1), 1);
    let before = block_sized_allocations();
    let mut sum = 0;
    for i in 0..1_000u64 {
        sum += submit_and_join(i);
    }
    let blocks = block_sized_allocations() - before;
    assert_eq!(sum, 1_000 * 999 / 2);
    assert!(
        blocks < 100,
        "{blocks} blocks allocated for 1000 tasks submitted and joined one at a time"
    );
}

#[test]
fn delayed_tasks_and_promises_do_not_allocate_after_warm_up() {
    // Per task: a fresh promise, a task delayed on it (parked: its node
    // goes in the task's block) and on an iteration of a loop promise, the
    // fulfills that ready it, the join. Promises, nodes and tasks come from
    // the worker's block pool; the loop promise's events are one
    // allocation per loop promise, made before the count.
    const TASKS: usize = 2_000;
    let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
    let (allocs, sum) = rt.run(|| {
        let mut handles = Vec::with_capacity(TASKS);
        let mut promises = Vec::with_capacity(TASKS);
        let mut round = |lp: &selvedge::LoopPromise| {
            for i in 0..TASKS {
                let p = selvedge::Promise::new();
                let x = i as u64;
                handles.push(selvedge::spawn_delayed([p.dep(), lp.at(i)], move || x));
                promises.push(p);
            }
            for (i, p) in promises.drain(..).enumerate() {
                p.fulfill();
                lp.fulfill(i);
            }
            handles.drain(..).map(|h| h.join()).sum::<u64>()
        };
        let loops: Vec<_> = (0..5)
            .map(|_| selvedge::LoopPromise::new(0..TASKS))
            .collect();
        let mut sum = round(&loops[0]) + round(&loops[1]); // warm-up
        let before = allocations();
        for lp in &loops[2..] {
            sum += round(lp);
        }
        (allocations() - before, sum)
    });
    assert_eq!(sum, 5 * (TASKS as u64 * (TASKS as u64 - 1) / 2));
    assert_eq!(
        allocs, 0,
        "{allocs} allocations for 3 rounds of {TASKS} delayed tasks"
    );
}

#[test]
fn declared_accesses_do_not_allocate_after_warm_up() {
    // Per round, all made before any runs: a chain of writes to one handle
    // (each after the write before it); reads of another after its one
    // write of the round (each after that write); and updates of a third
    // that read the first two, as a tiled kernel does (each after three
    // pending accesses). A task's completion and its node come from the
    // worker's block pool, what it waits for is kept on the stack, its
    // reads share their version's completion, and the handles' logs keep
    // the room they grew in the warm-up.
    const TASKS: usize = 1_000;
    let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
    let (allocs, sum) = rt.run(|| {
        let (chain, read) = (selvedge::Data::new(0u64), selvedge::Data::new(0u64));
        let update = selvedge::Data::new(0u64);
        let mut handles = Vec::with_capacity(TASKS);
        let mut round = || {
            selvedge::spawn_with(read.write(), |v| *v += 1).detach();
            for _ in 0..TASKS {
                selvedge::spawn_with(chain.write(), |v| *v += 1).detach();
                handles.push(selvedge::spawn_with(read.read(), |v| *v));
                selvedge::spawn_with((chain.read(), read.read(), update.write()), |(c, r, u)| {
                    *u = c + r
                })
                .detach();
            }
            handles.drain(..).map(|h| h.join()).sum::<u64>()
        };
        let mut sum = round() + round(); // warm-up
        let before = allocations();
        for _ in 0..3 {
            sum += round();
        }
        let allocs = allocations() - before;
        (allocs, sum + chain.into_inner() + update.into_inner())
    });
    // Round r's reads each see r; the chain ends at 5 * TASKS, and the
    // last update saw it and 5.
    assert_eq!(
        sum,
        TASKS as u64 * (1 + 2 + 3 + 4 + 5 + 5) + 5 * TASKS as u64 + 5
    );
    assert_eq!(
        allocs,
        0,
        "{allocs} allocations for 3 rounds of {} declared tasks",
        3 * TASKS + 1
    );
}

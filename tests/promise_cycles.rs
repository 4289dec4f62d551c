//! Promise cycles: tasks waiting on promises that only they can fulfill.
//! They never run; the runtime's stats count them, and dropping the runtime
//! cancels them, which frees their memory and makes every handle report
//! the shutdown instead of waiting forever.

use selvedge::{JoinHandle, Promise, Runtime};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Mutex;

struct Counting;

/// Allocations made and not yet freed, process-wide.
static LIVE: AtomicIsize = AtomicIsize::new(0);
/// Bytes allocated and not yet freed, process-wide.
static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator, only counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(1, Ordering::Relaxed);
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is `System.alloc`'s.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract is `System.dealloc`'s.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The tests here measure process-wide counts: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Two tasks, each waiting on the promise the other one fulfills. Returns
/// their handles; the promises' only handles are in the tasks' closures.
fn cycle(rt: &Runtime) -> [JoinHandle<()>; 2] {
    let (p1, p2) = (Promise::new(), Promise::new());
    let a = {
        let p1 = p1.clone();
        rt.spawn_delayed([p2.dep()], move || {
            p1.fulfill();
        })
    };
    let b = rt.spawn_delayed([p1.dep()], move || {
        p2.fulfill();
    });
    [a, b]
}

const CYCLES: usize = 10_000;

#[test]
fn dropped_runtime_cancels_and_frees_promise_cycles() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // Warm-up: thread-locals and lazily sized buffers of this thread.
    {
        let rt = Runtime::builder().num_threads(4).build().unwrap();
        drop(cycle(&rt));
    }
    let (before, before_bytes) = (
        LIVE.load(Ordering::SeqCst),
        LIVE_BYTES.load(Ordering::SeqCst),
    );
    let rt = Runtime::builder().num_threads(4).build().unwrap();
    let handles: Vec<JoinHandle<()>> = (0..CYCLES).flat_map(|_| cycle(&rt)).collect();
    rt.sync_root();
    assert_eq!(
        rt.stats().tasks_waiting_on_dependencies,
        2 * CYCLES as u64,
        "every task of every cycle is parked"
    );
    let parked_bytes = LIVE_BYTES.load(Ordering::SeqCst) - before_bytes;
    drop(rt);
    for (i, h) in handles.into_iter().enumerate() {
        // Without the runtime's reclaim the task never finishes and
        // `try_join` would wait forever: fail instead.
        assert!(
            h.is_finished(),
            "task {i} of a cycle still waits after its runtime was dropped"
        );
        let err = h.try_join().unwrap_err();
        assert!(err.is_cancelled(), "task {i}: {err}");
        assert!(
            err.to_string().contains("runtime shut down"),
            "task {i}: {err}"
        );
    }
    let growth = LIVE.load(Ordering::SeqCst) - before;
    let growth_bytes = LIVE_BYTES.load(Ordering::SeqCst) - before_bytes;
    println!(
        "{CYCLES} cycles: {parked_bytes} bytes while parked, {growth} allocations / \
         {growth_bytes} bytes left after the runtime's drop"
    );
    // Leaking a node, closure or promise per task would leave at least
    // 20,000 allocations; a few buffers of this thread may stay.
    assert!(
        growth < 100,
        "{growth} allocations ({growth_bytes} bytes) still live after the runtime's drop"
    );
}

#[test]
fn stats_count_parked_tasks_exactly_when_quiescent() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let rt = Runtime::builder().num_threads(3).build().unwrap();
    let ps: Vec<Promise> = (0..1000).map(|_| Promise::new()).collect();
    // Parked from a foreign thread and from workers (several at once).
    let mut handles: Vec<_> = ps[..500]
        .iter()
        .map(|p| rt.spawn_delayed([p.dep()], || 1))
        .collect();
    let deps: Vec<_> = ps[500..].iter().map(Promise::dep).collect();
    handles.extend(rt.run(move || {
        let hs: Vec<_> = deps
            .into_iter()
            .map(|d| selvedge::spawn(move || selvedge::spawn_delayed([d], || 1)))
            .collect();
        hs.into_iter().map(JoinHandle::join).collect::<Vec<_>>()
    }));
    rt.sync_root();
    assert_eq!(rt.stats().tasks_waiting_on_dependencies, 1000);
    // Released by workers and by this thread; 200 broken.
    let (keep, broken) = ps.split_at(800);
    let (mine, theirs) = keep.split_at(400);
    for p in mine {
        p.fulfill();
    }
    let theirs: Vec<Promise> = theirs.to_vec();
    rt.run(move || {
        for p in theirs {
            drop(selvedge::spawn(move || p.fulfill()));
        }
    });
    drop(broken.to_vec());
    let mut ps = ps;
    ps.truncate(0);
    let (ok, cancelled): (Vec<_>, Vec<_>) = handles
        .into_iter()
        .map(JoinHandle::try_join)
        .partition(Result::is_ok);
    assert_eq!((ok.len(), cancelled.len()), (800, 200));
    rt.sync_root();
    assert_eq!(rt.stats().tasks_waiting_on_dependencies, 0);
}

/// Delayed tasks that parked and then ran give their memory back while the
/// runtime lives: the registry that lets the runtime's drop reclaim parked
/// tasks lets go of each one as it settles, not only when more tasks park
/// (it once kept all of them, 20,000 here, until then).
#[test]
fn settled_delayed_tasks_do_not_stay_registered() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const TASKS: usize = 20_000;
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    // Warm up the workers (a few tasks only).
    let warm = Promise::new();
    let hs: Vec<_> = (0..64)
        .map(|_| rt.spawn_delayed([warm.dep()], || ()))
        .collect();
    warm.fulfill();
    hs.into_iter().for_each(JoinHandle::join);
    rt.sync_root();
    let before = LIVE_BYTES.load(Ordering::SeqCst);
    let gate = Promise::new();
    let hs: Vec<_> = (0..TASKS)
        .map(|_| rt.spawn_delayed([gate.dep()], || ()))
        .collect();
    gate.fulfill();
    hs.into_iter().for_each(JoinHandle::join);
    rt.sync_root();
    // The registry's slots and free list keep their capacity: about 16
    // bytes a task.
    let grown = LIVE_BYTES.load(Ordering::SeqCst) - before;
    // Each parked task's node is a 256-byte block: keeping them all would
    // be about 5 MB.
    assert!(
        grown < (TASKS * 256 / 4) as isize,
        "{grown} bytes still held after {TASKS} delayed tasks ran"
    );
    drop(rt);
}

/// Tasks of one runtime fulfilled by the workers of another, after the
/// first one shut down (which cancelled them) and while it shuts down:
/// each task runs or reports the shutdown, once. A worker settles a task
/// without contest only on its own runtime, whose shutdown cannot run
/// meanwhile; the task's own runtime may have reclaimed it, or be
/// reclaiming it, when another runtime's worker fulfills its promise.
#[test]
fn tasks_fulfilled_on_another_runtimes_workers_after_their_shutdown_settle_once() {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    const TASKS: usize = 400;
    let other = Runtime::builder().num_threads(2).build().unwrap();
    for round in 0..20 {
        let rt = Runtime::builder().num_threads(2).build().unwrap();
        let ran = Arc::new(AtomicUsize::new(0));
        let promises: Vec<Promise> = (0..TASKS).map(|_| Promise::new()).collect();
        let handles: Vec<JoinHandle<()>> = promises
            .iter()
            .map(|p| {
                let ran = ran.clone();
                rt.spawn_delayed([p.dep()], move || {
                    ran.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        let mut first = promises;
        let second = first.split_off(TASKS / 2);
        let fulfill_on_other = |half: Vec<Promise>| {
            other.spawn(move || {
                for p in half {
                    p.fulfill();
                }
            })
        };
        // Even rounds: all fulfilled after the shutdown. Odd rounds: half
        // fulfilled during it.
        let during = (round % 2 == 1).then(|| fulfill_on_other(first.split_off(0)));
        drop(rt);
        let after = [fulfill_on_other(first), fulfill_on_other(second)];
        during.into_iter().chain(after).for_each(JoinHandle::join);
        let ok = handles
            .into_iter()
            .map(JoinHandle::try_join)
            .filter(Result::is_ok)
            .count();
        assert_eq!(
            ran.load(Ordering::Relaxed),
            ok,
            "a task ran without its handle saying so, or the reverse"
        );
        if round % 2 == 0 {
            assert_eq!(ok, 0, "a task ran after its runtime shut down");
        }
    }
}

/// A task parked on a promise that outlives its runtime: the runtime's
/// shutdown cancels it, and its promise, fulfilled or dropped later on a
/// worker of another runtime (often built in the same memory as the
/// first), reaches only the cancelled task's remains: nothing runs, and
/// nothing is cancelled twice.
#[test]
fn a_promise_fulfilled_after_its_tasks_runtime_was_dropped_settles_nothing_twice() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for round in 0..50 {
        let first = Runtime::builder().num_threads(2).build().unwrap();
        let p = Promise::new();
        let handles: Vec<JoinHandle<u32>> = (0..8)
            .map(|i| first.spawn_delayed([p.dep()], move || i))
            .collect();
        drop(first);
        for h in handles {
            let e = h.try_join().expect_err("a task of a dropped runtime ran");
            assert!(e.to_string().contains("runtime shut down"), "{e}");
        }
        let second = Runtime::builder().num_threads(2).build().unwrap();
        if round % 2 == 0 {
            second.run(move || p.fulfill());
        } else {
            second.run(move || drop(p));
        }
        drop(second);
    }
}

//! The count latch (`CountLatch`): the last task of a scope or loop
//! decrements it while its owner returns, frees the latch with its frame
//! and drops the runtime. The decrement must read what it needs before it
//! releases the owner, and the runtime must outlive the owner's wake-up:
//! kept alive by the decrementing worker's own reference, or, on a foreign
//! thread (one dropping a promise's last handle cancels a scope's delayed
//! task), by a reference the decrement takes before its decrement.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::model;
use selvedge::protocols::{CountLatch, Unpark};

/// Survives the runtime: says whether the runtime was dropped.
struct Probe {
    runtime_dropped: AtomicBool,
}

/// A stand-in for a runtime: what a latch wakes its owner through.
struct Runtime {
    owner: thread::Thread,
    probe: Arc<Probe>,
}

impl Unpark for Runtime {
    fn unpark(&self, worker: usize) {
        assert_eq!(worker, 0, "the latch woke the wrong worker");
        assert!(
            !self.probe.runtime_dropped.load(Ordering::SeqCst),
            "a decrement woke its owner through a runtime already dropped"
        );
        self.owner.unpark();
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.probe.runtime_dropped.store(true, Ordering::SeqCst);
    }
}

/// The owner waits for one task whose decrement comes from another thread
/// (a worker of the same runtime when `worker` is true, else a foreign
/// thread), then returns at once: it frees the latch and drops its
/// runtime, which is the last reference unless someone keeps it alive.
fn owner_returns_as_the_last_decrement_lands(worker: bool) {
    model(move || {
        let probe = Arc::new(Probe {
            runtime_dropped: AtomicBool::new(false),
        });
        let runtime = Arc::new(Runtime {
            owner: thread::current(),
            probe: probe.clone(),
        });
        // Boxed, so freeing it is a real event in the model.
        let latch = Box::new(CountLatch::new(0, &runtime));
        latch.increment(); // the task's count
        let address = &*latch as *const CountLatch<Runtime> as usize;
        let own = worker.then(|| runtime.clone());
        let task = thread::spawn(move || {
            let latch = address as *const CountLatch<Runtime>;
            // SAFETY: the task holds a count, released once, here.
            unsafe { CountLatch::decrement(latch, own.as_ref()) };
            // A worker keeps its runtime until it leaves.
            drop(own);
        });
        if !latch.release_own() {
            // A waiting worker polls the latch between other work, so it
            // may see it set before the wake-up lands.
            while !latch.is_set() {
                thread::yield_now();
            }
        }
        // The owner returns: its frame (and the latch) is gone, and the
        // runtime with it.
        latch.poison();
        drop(latch);
        drop(runtime);
        task.join().unwrap();
        assert!(
            probe.runtime_dropped.load(Ordering::SeqCst),
            "runtime leaked"
        );
    });
}

#[test]
fn a_foreign_last_decrement_keeps_the_runtime_alive_for_its_wake_up() {
    owner_returns_as_the_last_decrement_lands(false);
}

#[test]
fn a_workers_last_decrement_wakes_through_its_own_runtime() {
    owner_returns_as_the_last_decrement_lands(true);
}

/// Several tasks finish at once: exactly the last wakes the owner, and the
/// owner sees every task's write.
#[test]
fn the_owner_sees_every_tasks_writes() {
    model(|| {
        let probe = Arc::new(Probe {
            runtime_dropped: AtomicBool::new(false),
        });
        let runtime = Arc::new(Runtime {
            owner: thread::current(),
            probe,
        });
        let latch = Box::new(CountLatch::new(0, &runtime));
        let results: Arc<[loom::cell::UnsafeCell<u32>; 2]> = Arc::new([
            loom::cell::UnsafeCell::new(0),
            loom::cell::UnsafeCell::new(0),
        ]);
        let address = &*latch as *const CountLatch<Runtime> as usize;
        let tasks: Vec<_> = (0..2)
            .map(|i| {
                latch.increment();
                let results = results.clone();
                thread::spawn(move || {
                    results[i].with_mut(|r| unsafe { *r = i as u32 + 1 });
                    let latch = address as *const CountLatch<Runtime>;
                    // SAFETY: the task holds a count, released once, here.
                    unsafe { CountLatch::decrement(latch, None) };
                })
            })
            .collect();
        if !latch.release_own() {
            // A waiting worker polls the latch between other work, so it
            // may see it set before the wake-up lands.
            while !latch.is_set() {
                thread::yield_now();
            }
        }
        let sum: u32 = results.iter().map(|r| r.with(|v| unsafe { *v })).sum();
        assert_eq!(sum, 3);
        latch.poison();
        drop(latch);
        drop(runtime);
        for t in tasks {
            t.join().unwrap();
        }
    });
}

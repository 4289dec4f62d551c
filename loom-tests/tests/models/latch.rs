//! The count latch (`CountLatch`): the last task of a scope or loop
//! decrements it while its owner returns, frees the latch with its frame
//! and drops the runtime. The decrement must read what it needs before it
//! releases the owner, and the runtime must outlive the owner's wake-up:
//! kept alive by the decrementing worker's own reference, or, on a foreign
//! thread (one dropping a promise's last handle cancels a scope's delayed
//! task), by a reference the decrement takes before its decrement.
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::{join_after, model};
use selvedge::protocols::{CountLatch, Sleep, Unpark};

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
        let results: Arc<[UnsafeCell<u32>; 2]> = Arc::new([UnsafeCell::new(0), UnsafeCell::new(0)]);
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

// The models below wait as a worker really does (parking in the real
// `Sleep`), with the last decrement from a thread that is not a worker of
// the latch's runtime.

/// How the owner waits for its latch.
#[derive(Clone, Copy)]
enum Owner {
    /// As `Worker::wait_until(Until::Latch(..))` does once out of work:
    /// checks the latch, else parks with `Sleep::join_park` (which
    /// announces `JOIN_WAITING` and re-checks the latch before it parks),
    /// and loops. The wake-up is the real `Sleep::unpark`, so a missed one
    /// is a loom deadlock.
    Parks,
    /// As the same loop does while it still finds work: polls the latch
    /// between other work and never parks; the runtime only counts the
    /// wake-ups. Needed besides `Parks` because loom's `unpark` hands the
    /// unparker's whole history to the target at once (more than std
    /// promises: only a park that consumes the token synchronizes), which
    /// hides a missing `Acquire` on the owner's side whenever the wake-up
    /// is sent before the owner looks.
    Polls,
}

/// Survives the runtime: whether it was dropped, and how often the latch
/// woke the owner through it.
struct Witness {
    runtime_dropped: AtomicBool,
    wakes: AtomicUsize,
}

/// A runtime whose latches wake their owner through the real `Sleep`
/// (`Sleep::unpark`, as the runtime's `Unpark` does).
struct Parking {
    sleep: Sleep,
    owner: Owner,
    /// False for a runtime the latch does not belong to (a finisher that is
    /// a worker of another runtime): waking through it is a bug.
    owners: bool,
    witness: Arc<Witness>,
}

impl Parking {
    fn new(owner: Owner, owners: bool) -> Arc<Self> {
        Arc::new(Parking {
            sleep: Sleep::new(vec![thread::current()]),
            owner,
            owners,
            witness: Arc::new(Witness {
                runtime_dropped: AtomicBool::new(false),
                wakes: AtomicUsize::new(0),
            }),
        })
    }
}

impl Unpark for Parking {
    fn unpark(&self, worker: usize) {
        assert_eq!(worker, 0, "the latch woke the wrong worker");
        assert!(
            self.owners,
            "the latch woke its owner through another runtime"
        );
        assert!(
            !self.witness.runtime_dropped.load(Ordering::SeqCst),
            "a decrement woke its owner through a runtime already dropped"
        );
        // Relaxed: counting must not order anything for the owner.
        self.witness.wakes.fetch_add(1, Ordering::Relaxed);
        if let Owner::Parks = self.owner {
            self.sleep.unpark(worker);
        }
    }
}

impl Drop for Parking {
    fn drop(&mut self) {
        self.witness.runtime_dropped.store(true, Ordering::SeqCst);
    }
}

/// What the owner's frame holds: the latch and what each task writes for
/// the owner (a stack job's result, a scope's recorded panic).
struct Frame {
    latch: CountLatch<Parking>,
    results: [UnsafeCell<u32>; 2],
}

impl Frame {
    fn new(runtime: &Arc<Parking>) -> Box<Self> {
        // Boxed, so freeing it is a real event in the model.
        Box::new(Frame {
            latch: CountLatch::new(0, runtime),
            results: [UnsafeCell::new(0), UnsafeCell::new(0)],
        })
    }
}

/// The owner releases its own count and waits (see [`Owner`]). Returns the
/// number of wake-ups the tasks owe it: none if its own release was last.
fn owner_waits(frame: &Frame, runtime: &Parking) -> usize {
    if frame.latch.release_own() {
        return 0;
    }
    wait_until_set(frame, runtime);
    1
}

/// The owner's wait once its own count is released (see [`Owner`]).
fn wait_until_set(frame: &Frame, runtime: &Parking) {
    while !frame.latch.is_set() {
        match runtime.owner {
            Owner::Parks => {
                // As `Worker::park`: its own counts go into the shared
                // count first, so the last decrement sees zero.
                if frame.latch.flush_local() {
                    break;
                }
                runtime.sleep.join_park(0, || frame.latch.is_set())
            }
            Owner::Polls => thread::yield_now(),
        }
    }
}

/// The owner returns once it saw the latch set: its frame, latch included,
/// is freed (the poison makes a read of the latch that is not ordered
/// before the owner's check a loom race), and its runtime is dropped.
fn owner_returns(frame: Box<Frame>, runtime: Arc<Parking>) -> Arc<Witness> {
    frame.latch.poison();
    drop(frame);
    let witness = runtime.witness.clone();
    drop(runtime);
    witness
}

/// After every task left: the runtime was dropped (by whoever let go of it
/// last), and the owner was woken exactly as often as it was owed.
fn check_witness(witness: &Witness, owed_wakes: usize) {
    assert!(
        witness.runtime_dropped.load(Ordering::SeqCst),
        "runtime leaked"
    );
    assert_eq!(
        witness.wakes.load(Ordering::Relaxed),
        owed_wakes,
        "the last decrement must wake the owner exactly once (none if the owner's own release was last)"
    );
}

/// The last decrement comes from a thread that is not a worker of the
/// latch's runtime, taking `CountLatch::decrement`'s general path (the
/// keep-alive): a foreign thread (`current` is `None`: a thread dropping a
/// promise's last handle cancels a scope's delayed task or a stack job) or,
/// with `other_runtime`, a worker of another runtime (`current` is that
/// runtime, which must not be mistaken for the latch's).
///
/// Checks: the owner is always woken (a deadlock otherwise, with
/// `Owner::Parks`) or sees the latch set before it parks; it reads the
/// task's write only after it (a loom race otherwise); the runtime outlives
/// the wake-up and is dropped once, by whoever lets go last; the owner is
/// woken exactly once.
///
/// Catches: the decrement's `AcqRel` weakened to `Acquire` or `Relaxed`
/// (no Release: the owner's read of the result races with the task's
/// write); `is_set`'s `Acquire` weakened to `Relaxed` (with
/// `Owner::Polls`, see there); the keep-alive taken out, or dropped before
/// the unpark (the owner drops the runtime first: the witness's
/// assertion); the unpark taken out (deadlock); and, with `other_runtime`,
/// a decrement that takes any worker's runtime for the latch's (woken
/// through the wrong runtime).
///
/// Does not catch the latch's target read *after* the `fetch_sub` instead
/// of before: loom's clocks advance only at its scheduling points, so a
/// plain read right after the `fetch_sub` counts as ordered before the
/// owner's acquire of it, and the poison does not race with it.
fn a_foreign_finisher_wakes_the_owner(owner: Owner, other_runtime: bool) {
    model(move || {
        let runtime = Parking::new(owner, true);
        let other = other_runtime.then(|| Parking::new(owner, false));
        let frame = Frame::new(&runtime);
        frame.latch.increment(); // the task's count
        let address = &*frame as *const Frame as usize;
        let finished = Arc::new(AtomicBool::new(false));
        let task = {
            let finished = finished.clone();
            thread::spawn(move || {
                let frame = address as *const Frame;
                // SAFETY: the task's count keeps the frame alive until its
                // decrement, and the owner reads the result only after it.
                unsafe { (*frame).results[0].with_mut(|r| *r = 42) };
                // SAFETY: the task holds a count, released once, here.
                unsafe { CountLatch::decrement(&raw const (*frame).latch, other.as_ref()) };
                drop(other);
                finished.store(true, Ordering::SeqCst);
            })
        };
        let owed_wakes = owner_waits(&frame, &runtime);
        assert_eq!(frame.results[0].with(|r| unsafe { *r }), 42);
        let witness = owner_returns(frame, runtime);
        join_after(task, &finished);
        check_witness(&witness, owed_wakes);
    });
}

#[test]
fn a_foreign_finisher_wakes_the_parked_owner_and_keeps_its_runtime_alive() {
    a_foreign_finisher_wakes_the_owner(Owner::Parks, false);
}

#[test]
fn a_polling_owner_sees_a_foreign_finishers_write() {
    a_foreign_finisher_wakes_the_owner(Owner::Polls, false);
}

#[test]
fn a_finisher_from_another_runtime_takes_the_foreign_path() {
    a_foreign_finisher_wakes_the_owner(Owner::Parks, true);
}

/// A worker of the latch's runtime (`decrement_on_worker`, as a stolen
/// stack job or a plain scope task releases its count) and a foreign
/// thread (`decrement` with no runtime, as a cancelled delayed task does)
/// finish at the same time while the owner waits: whichever is last wakes
/// the owner, exactly once, through its own reference (the worker) or the
/// keep-alive (the foreign thread), and the owner sees both writes.
///
/// Catches the same mistakes as above on either path; in particular the
/// worker path's `fetch_sub` weakened to `Acquire` or `Relaxed` (the
/// owner's read of the worker's result races) and its unpark taken out
/// (deadlock when the worker is last).
fn a_worker_and_a_foreign_finisher_race(owner: Owner) {
    model(move || {
        let runtime = Parking::new(owner, true);
        let frame = Frame::new(&runtime);
        let address = &*frame as *const Frame as usize;
        let finished: Arc<[AtomicBool; 2]> =
            Arc::new([AtomicBool::new(false), AtomicBool::new(false)]);
        let tasks: Vec<_> = (0..2)
            .map(|k| {
                frame.latch.increment();
                let finished = finished.clone();
                // Task 0 runs on a worker, which keeps its runtime until
                // it leaves; task 1 on a foreign thread.
                let own = (k == 0).then(|| runtime.clone());
                thread::spawn(move || {
                    let frame = address as *const Frame;
                    // SAFETY: as above (each task has its own result).
                    unsafe { (*frame).results[k].with_mut(|r| *r = k as u32 + 1) };
                    // SAFETY: the count keeps the frame alive.
                    let latch = unsafe { &raw const (*frame).latch };
                    if own.is_some() {
                        // SAFETY: this thread is a worker of the latch's
                        // runtime (`own`), holding a count.
                        unsafe { CountLatch::decrement_on_worker(latch) };
                    } else {
                        // SAFETY: holds a count, released once, here.
                        unsafe { CountLatch::decrement(latch, None) };
                    }
                    drop(own);
                    finished[k].store(true, Ordering::SeqCst);
                })
            })
            .collect();
        let owed_wakes = owner_waits(&frame, &runtime);
        let sum: u32 = frame
            .results
            .iter()
            .map(|r| r.with(|v| unsafe { *v }))
            .sum();
        assert_eq!(sum, 3);
        let witness = owner_returns(frame, runtime);
        for (k, t) in tasks.into_iter().enumerate() {
            join_after(t, &finished[k]);
        }
        check_witness(&witness, owed_wakes);
    });
}

#[test]
fn a_worker_and_a_foreign_finisher_race_to_wake_the_parked_owner() {
    a_worker_and_a_foreign_finisher_race(Owner::Parks);
}

#[test]
fn a_worker_and_a_foreign_finisher_race_to_finish_a_polling_owner() {
    a_worker_and_a_foreign_finisher_race(Owner::Polls);
}

/// A scope's owner counts the two tasks it spawns on its own thread
/// (`increment_local`, no atomic). A thief takes the first and finishes it
/// on its thread (`decrement_on_worker`, taking one off a shared count that
/// never held it); the owner runs the second itself after its body
/// (`decrement_local`), then waits as a worker does, moving its own counts
/// into the shared one before it parks (`flush_local`).
///
/// Checks: the owner is always woken when it parks (a deadlock otherwise);
/// it reads each task's write only after the task's count is gone (a loom
/// race otherwise); the runtime outlives the wake-up.
///
/// Catches: the flush before parking taken out (the owner parks with its
/// `-1` unflushed, the thief's decrement never reaches zero: deadlock);
/// `flush_local`'s `AcqRel` weakened to `Release` (the owner, seeing zero
/// through it, reads the thief's result unordered). `release_own`'s
/// weakened the same way is caught by every model above.
fn owner_counted_tasks(owner: Owner) {
    model(move || {
        let runtime = Parking::new(owner, true);
        let frame = Frame::new(&runtime);
        // SAFETY: this thread is the owner's.
        unsafe {
            frame.latch.increment_local();
            frame.latch.increment_local();
        }
        let address = &*frame as *const Frame as usize;
        let finished = Arc::new(AtomicBool::new(false));
        let own = runtime.clone();
        let thief = {
            let finished = finished.clone();
            thread::spawn(move || {
                let frame = address as *const Frame;
                // SAFETY: the task's count keeps the frame alive until its
                // decrement, and the owner reads the result only after it.
                unsafe { (*frame).results[0].with_mut(|r| *r = 1) };
                // SAFETY: a worker of the latch's runtime (`own`), holding
                // a count, released once, here.
                unsafe { CountLatch::decrement_on_worker(&raw const (*frame).latch) };
                drop(own);
                finished.store(true, Ordering::SeqCst);
            })
        };
        // The body ends; the owner runs its second task in its wait loop.
        let body_was_last = frame.latch.release_own();
        frame.results[1].with_mut(|r| unsafe { *r = 2 });
        // SAFETY: the owner's thread, and the task holds a count.
        unsafe { frame.latch.decrement_local() };
        if !body_was_last {
            wait_until_set(&frame, &runtime);
        }
        let sum: u32 = frame
            .results
            .iter()
            .map(|r| r.with(|v| unsafe { *v }))
            .sum();
        assert_eq!(sum, 3);
        let witness = owner_returns(frame, runtime);
        join_after(thief, &finished);
        assert!(
            witness.runtime_dropped.load(Ordering::SeqCst),
            "runtime leaked"
        );
    });
}

#[test]
fn owner_counted_tasks_finished_by_a_thief_wake_the_parked_owner() {
    owner_counted_tasks(Owner::Parks);
}

#[test]
fn owner_counted_tasks_finished_by_a_thief_are_seen_by_a_polling_owner() {
    owner_counted_tasks(Owner::Polls);
}

//! Completions that workers poll: operations that end outside the pool
//! (MPI messages, GPU work, a user's operation behind
//! `Promise::fulfill_when`) and that a thread finds ended only by testing.
//!
//! Such an operation has a thread of its own that reports its end (MPI's
//! progress thread, the fallback that guarantees progress when every
//! worker runs one long task; CUDA's callback thread), but that report
//! reaches a task through a hop: it fires a signal, wakes a parked worker,
//! and the worker runs the signal's action. Each hop costs microseconds,
//! and a fallback sleeps between tests. So a worker that runs out of work
//! tests the operations itself, in every round of its search for work,
//! while any is in flight, and a busy worker tests them between two tasks,
//! every ten microseconds or so: what it finds ended fires its signal on
//! this worker, which drains it at once, with no thread woken.
//!
//! Two kinds are tested: *sources*, which test a whole set at once
//! (`MPI_Testsome`), and operations tested one by one, which share the
//! runtime's `PolledList` (`polled.rs`). Each is tested under a try-lock,
//! so one thread tests at a time and a worker that finds it taken goes on
//! looking for work. With nothing in flight nobody polls: the workers park
//! as before, and a task's end costs one load more.

// Counted and polled by MPI clusters (and the unit tests and loom models).
#![cfg_attr(not(feature = "mpi"), allow(dead_code))]

use crate::core::clock::ticks;
use crate::core::polled::{Polled, PolledList};
use crate::core::signal::Action;
use crate::core::sync::{lock, AtomicBool, AtomicU64, AtomicUsize, Mutex, Ordering};
use crossbeam_utils::CachePadded;
use std::sync::{Arc, TryLockError};

/// How long after its holder's last round the polling duty may be taken
/// over (`polling.rs`), in `clock::ticks` (about 10 µs at 3 GHz): many
/// rounds of a holder that still tests.
const DUTY_LAPSES_AFTER_TICKS: u64 = 1 << 15;

/// How long the polling duty's holder keeps testing after an operation
/// last began or completed, in `clock::ticks` (about 1.4 ms at 3 GHz, 4.2
/// ms where they are nanoseconds): an
/// operation in flight for longer is left to its callback, or to parked
/// workers' timeouts, so that no worker spins for it forever.
const DUTY_SPINS_FOR_TICKS: u64 = 1 << 22;

/// Something whose operations end outside the pool, tested by polling.
pub(crate) trait CompletionSource: Send + Sync {
    /// Tests the operations in flight once, unless another thread is
    /// testing them: those that ended complete here (their signals fire)
    /// and those posted meanwhile start. Whether anything started or
    /// completed. Called with the runtime's list of sources locked: it must
    /// not add or remove a source, nor run user code; actions it gives up
    /// (signals discarded) go to `discarded`, dropped once the list is
    /// unlocked (dropping one may run user destructors, which may drop the
    /// source's last handle and wait for it to remove itself).
    fn poll(&self, discarded: &mut Vec<Action>) -> bool;
}

/// A runtime's completion sources (see the module docs).
#[derive(Default)]
pub(crate) struct Completions {
    /// Operations in flight over every source, as they count them
    /// ([`Completions::began`], [`Completions::ended`]): workers poll only
    /// while it is not zero. Read in every idle round and after every task:
    /// a line of its own.
    in_flight: CachePadded<AtomicUsize>,
    /// Held strongly, so that a poll takes no reference count (a line every
    /// polling worker would write): a source holds the runtime in turn, and
    /// removes itself when it stops.
    sources: Mutex<Vec<Arc<dyn CompletionSource>>>,
    /// Whether `sources` is not empty, read without the lock.
    any: AtomicBool,
    /// Operations tested one by one (GPU work, a user's promises).
    polled: PolledList,
    /// The worker (its index + 1; 0: none) that holds the polling duty
    /// (`polling.rs`), and when (`clock::ticks`) it last renewed it. Read
    /// and written only by workers about to park.
    duty: AtomicUsize,
    duty_renewed: AtomicU64,
    /// When (`clock::ticks`) an operation last began, or a poll last
    /// completed one or found one awaiting its callback.
    last_activity: AtomicU64,
}

impl Completions {
    /// Workers poll `source` from now on (while operations are in flight),
    /// until it is removed.
    pub(crate) fn add(&self, source: Arc<dyn CompletionSource>) {
        let mut sources = lock(&self.sources);
        sources.push(source);
        self.any.store(true, Ordering::Relaxed);
    }

    /// Workers stop polling the source at `source` (its address).
    pub(crate) fn remove(&self, source: *const ()) {
        let mut sources = lock(&self.sources);
        sources.retain(|s| Arc::as_ptr(s).cast::<()>() != source);
        self.any.store(!sources.is_empty(), Ordering::Relaxed);
    }

    /// Whether any source is polled (for a thread outside the pool about
    /// to wait for one of its operations: testing helps only then).
    pub(crate) fn has_sources(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    /// Workers test `op` from now on, until its test says it is over.
    pub(crate) fn watch(&self, op: Box<dyn Polled>) {
        self.began();
        self.polled.add(op);
    }

    /// Whether a parked worker must come back to poll (an operation in
    /// flight has no callback to wake one).
    pub(crate) fn needs_parked_polls(&self) -> bool {
        self.any_in_flight() && self.polled.needs_parked_polls()
    }

    /// Polls once more, for a worker about to stop testing for lack of
    /// activity: whether the poll found some (or another thread's did
    /// meanwhile). Asked at the decision, so that a worker that was not
    /// running for a while (a loaded machine) does not take that time for
    /// a lack of activity. What the poll fires the caller drains next.
    pub(crate) fn active_now(&self) -> bool {
        let before = ticks();
        self.poll();
        self.last_activity.load(Ordering::Relaxed) >= before
    }

    /// Whether a worker should go on testing instead of parking: an
    /// operation is in flight (see `polling.rs`).
    pub(crate) fn needs_awake_poller(&self) -> bool {
        self.any_in_flight()
    }

    /// Whether worker `me` holds the polling duty at `now`
    /// (`clock::ticks`): it held it, or nobody did, or its holder's last
    /// round is older than `DUTY_LAPSES_AFTER_TICKS` (see `polling.rs`).
    /// Renews it if so.
    pub(crate) fn take_polling_duty(&self, me: usize, now: u64) -> bool {
        let mine = me + 1;
        let holder = self.duty.load(Ordering::Relaxed);
        let taken = holder == mine
            || ((holder == 0
                // Saturating: renewed after `now` was read is not lapsed.
                || now.saturating_sub(self.duty_renewed.load(Ordering::Relaxed))
                    > DUTY_LAPSES_AFTER_TICKS)
                && self
                    .duty
                    .compare_exchange(holder, mine, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok());
        if taken {
            self.duty_renewed.store(now, Ordering::Relaxed);
        }
        taken
    }

    /// For a worker about to park: whether `me` holds the polling duty at
    /// `now`, or takes it because nobody holds it; never one that lapsed
    /// (its holder may be parked for a while, and the workers would take
    /// it from each other in turn, each parking for a short while only).
    /// Renews it if so.
    pub(crate) fn keep_or_take_free_duty(&self, me: usize, now: u64) -> bool {
        let mine = me + 1;
        let holder = self.duty.load(Ordering::Relaxed);
        let kept = holder == mine
            || (holder == 0
                && self
                    .duty
                    .compare_exchange(0, mine, Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok());
        if kept {
            self.duty_renewed.store(now, Ordering::Relaxed);
        }
        kept
    }

    /// Worker `me` gives the polling duty up, if it holds it.
    pub(crate) fn leave_polling_duty(&self, me: usize) {
        if self.duty.load(Ordering::Relaxed) == me + 1 {
            let _ = self
                .duty
                .compare_exchange(me + 1, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// An operation of a source began: workers poll until it ended.
    pub(crate) fn began(&self) {
        // Relaxed: a hint for pollers, who find what ended by testing.
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.last_activity.store(ticks(), Ordering::Relaxed);
    }

    /// Whether an operation began or completed less than
    /// [`DUTY_SPINS_FOR_TICKS`] before `now` (`clock::ticks`): the polling
    /// duty's holder keeps testing only then (see `polling.rs`).
    pub(crate) fn recently_active(&self, now: u64) -> bool {
        now.saturating_sub(self.last_activity.load(Ordering::Relaxed)) < DUTY_SPINS_FOR_TICKS
    }

    /// An operation counted by [`Completions::began`] ended.
    pub(crate) fn ended(&self) {
        let before = self.in_flight.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "an operation ended that never began");
    }

    /// Whether operations are in flight (a hint: Relaxed; read by busy
    /// workers after every task).
    #[inline]
    pub(crate) fn any_in_flight(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) != 0
    }

    /// Polls every source once if operations are in flight; whether one of
    /// them started or completed anything. One load when none is.
    #[inline]
    pub(crate) fn poll(&self) -> bool {
        if !self.any_in_flight() {
            return false;
        }
        self.poll_sources()
    }

    #[cold]
    fn poll_sources(&self) -> bool {
        let (progressed, awaiting) = self.poll_each();
        // An operation a poll completed whose callback has yet to let go
        // counts as activity: the worker holding the duty goes on testing
        // until it may count the operation out (the callback wakes nobody).
        if progressed || awaiting {
            self.last_activity.store(ticks(), Ordering::Relaxed);
        }
        progressed
    }

    /// Polls the list and the sources once: whether anything progressed,
    /// and whether an operation of the list awaits its callback.
    fn poll_each(&self) -> (bool, bool) {
        let (mut progressed, awaiting) = if self.polled.is_empty() {
            (false, false)
        } else {
            self.polled.poll(|| self.ended())
        };
        if !self.has_sources() {
            return (progressed, awaiting);
        }
        // A thread that finds the list taken goes on: another is polling,
        // and a source tests on one thread at a time anyway. Poison changes
        // nothing (no user code runs under this lock).
        let sources = match self.sources.try_lock() {
            Ok(sources) => sources,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return (progressed, awaiting),
        };
        let mut discarded = Vec::new();
        for source in sources.iter() {
            progressed |= source.poll(&mut discarded);
        }
        drop(sources);
        drop(discarded);
        (progressed, awaiting)
    }
}

#[cfg(test)]
mod tests {
    use super::CompletionSource;
    use crate::core::registry::{fire_signal, Registry};
    use crate::core::signal::SignalRef;
    use crate::core::sync::{lock, Mutex};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    /// An operation that a timer thread ends, and that only polling finds
    /// ended: it has no thread of its own to fire its signal.
    struct Fake {
        ended: AtomicBool,
        signal: Mutex<Option<SignalRef>>,
        registry: Arc<Registry>,
        polls: AtomicUsize,
    }

    impl CompletionSource for Fake {
        fn poll(&self, _: &mut Vec<crate::core::signal::Action>) -> bool {
            self.polls.fetch_add(1, Ordering::Relaxed);
            if !self.ended.load(Ordering::Acquire) {
                return false;
            }
            let Some(signal) = lock(&self.signal).take() else {
                return false;
            };
            self.registry.completions.ended();
            // SAFETY: fired once (taken from the slot); the registry lives.
            unsafe { fire_signal(signal) };
            true
        }
    }

    /// A fake source added to `registry`, with one operation in flight
    /// whose end fulfills the promise of the returned dependency.
    fn one_operation_in_flight(registry: &Arc<Registry>) -> (Arc<Fake>, crate::Dep) {
        let promise = crate::Promise::new();
        let dep = promise.dep();
        let signal = registry.signal(Box::new(move || {
            promise.fulfill();
        }));
        let fake = Arc::new(Fake {
            ended: AtomicBool::new(false),
            signal: Mutex::new(Some(signal)),
            registry: Arc::clone(registry),
            polls: AtomicUsize::new(0),
        });
        registry
            .completions
            .add(Arc::clone(&fake) as Arc<dyn CompletionSource>);
        registry.completions.began();
        (fake, dep)
    }

    /// A worker that runs out of work finds an operation ended that nothing
    /// else reports, and runs the task that waits for it.
    #[test]
    fn idle_workers_find_what_ended_and_run_what_waits_for_it() {
        let rt = crate::Runtime::builder().num_threads(2).build().unwrap();
        let registry = Arc::clone(rt.registry());
        let (fake, dep) = one_operation_in_flight(&registry);
        let (ran_tx, ran) = mpsc::channel();
        drop(rt.spawn_delayed([dep], move || ran_tx.send(()).unwrap()));
        // Ended by a task: the worker that ran it goes idle next (a real
        // source's own thread would find it too; this one has none).
        let f = Arc::clone(&fake);
        drop(rt.spawn(move || f.ended.store(true, Ordering::Release)));
        let found = ran.recv_timeout(Duration::from_secs(10));
        registry.completions.remove(Arc::as_ptr(&fake).cast());
        if found.is_err() {
            // Nobody polled: discard the signal, or the runtime's drop
            // would wait for it forever.
            let signal = lock(&fake.signal).take().expect("never fired");
            // SAFETY: never fired, and now never will be.
            drop(unsafe { registry.inbox.discard(signal) });
            panic!(
                "the task waiting on an ended operation never ran ({} polls)",
                fake.polls.load(Ordering::Relaxed)
            );
        }
        assert!(fake.polls.load(Ordering::Relaxed) > 0);
    }

    /// A worker kept busy by a stream of short tasks tests between them:
    /// what waits on an operation that ended runs before the stream ends.
    #[test]
    fn a_busy_worker_finds_what_ended_between_its_tasks() {
        const STREAM: usize = 20_000;
        let rt = crate::Runtime::builder().num_threads(1).build().unwrap();
        let registry = Arc::clone(rt.registry());
        let (fake, dep) = one_operation_in_flight(&registry);
        let done = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(AtomicUsize::new(usize::MAX));
        let (d, s) = (Arc::clone(&done), Arc::clone(&seen));
        drop(rt.spawn_delayed([dep], move || {
            s.store(d.load(Ordering::Relaxed), Ordering::Relaxed);
        }));
        rt.run(|| {
            crate::scope(|sc| {
                for _ in 0..STREAM {
                    let (done, fake) = (&done, &fake);
                    sc.spawn(move |_| {
                        let t = std::time::Instant::now();
                        while t.elapsed() < Duration::from_micros(2) {}
                        // The operation ends during the stream, whatever
                        // the machine's load.
                        if done.fetch_add(1, Ordering::Relaxed) + 1 == 100 {
                            fake.ended.store(true, Ordering::Release);
                        }
                    });
                }
            })
        });
        rt.sync_root();
        registry.completions.remove(Arc::as_ptr(&fake).cast());
        let seen = seen.load(Ordering::Relaxed);
        assert!(
            seen < STREAM / 2,
            "the task waiting on the operation, ended after task 100, ran after {seen} of {STREAM} tasks"
        );
    }

    /// With nothing in flight nobody polls: idle workers park.
    #[test]
    fn nothing_in_flight_means_no_polls() {
        let rt = crate::Runtime::builder().num_threads(2).build().unwrap();
        let registry = Arc::clone(rt.registry());
        let fake = Arc::new(Fake {
            ended: AtomicBool::new(false),
            signal: Mutex::new(None),
            registry: Arc::clone(&registry),
            polls: AtomicUsize::new(0),
        });
        registry
            .completions
            .add(Arc::clone(&fake) as Arc<dyn CompletionSource>);
        rt.run(|| crate::join(|| (), || ()));
        std::thread::sleep(Duration::from_millis(20));
        registry.completions.remove(Arc::as_ptr(&fake).cast());
        assert_eq!(fake.polls.load(Ordering::Relaxed), 0);
    }
}

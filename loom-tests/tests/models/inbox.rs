//! The signal inbox (`selvedge::protocols::SignalInbox`): device callbacks fire
//! pre-allocated signals by pushing them onto an intrusive stack, and
//! workers drain it and run the signals' actions. In every interleaving
//! each action must run exactly once, on the draining thread, after
//! everything its firer wrote (loom checks the cell as a data race); a
//! signal abandoned while it fires must have its action either run or
//! handed to the abandoner, never both, never neither; and the pending
//! count must come back to zero.
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use loom_tests::support::{join_after, model};
use selvedge::protocols::{SignalInbox, SignalRef, Sleep};

/// What a device writes before its callback fires (its output).
struct Output(UnsafeCell<u32>);
// SAFETY: the protocol under test orders the write before the read.
unsafe impl Sync for Output {}

/// Counts its drops: an action is dropped once whether it ran or not.
struct Dropped(Arc<AtomicUsize>);
impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn every_fired_signal_runs_once_after_its_firers_writes() {
    model(|| {
        let inbox = Arc::new(SignalInbox::new());
        let ran = Arc::new(AtomicUsize::new(0));
        let outputs: Vec<Arc<Output>> = (0..2)
            .map(|_| Arc::new(Output(UnsafeCell::new(0))))
            .collect();
        let firers: Vec<_> = outputs
            .iter()
            .enumerate()
            .map(|(k, out)| {
                let action = {
                    let (out, ran) = (out.clone(), ran.clone());
                    Box::new(move || {
                        // The firer's write must be visible here.
                        assert_eq!(out.0.with(|v| unsafe { *v }), k as u32 + 1);
                        ran.fetch_add(1, Ordering::Relaxed);
                    })
                };
                let signal = inbox.signal(action, std::ptr::null());
                let (inbox, out) = (inbox.clone(), out.clone());
                thread::spawn(move || {
                    out.0.with_mut(|v| unsafe { *v = k as u32 + 1 });
                    // SAFETY: fired once.
                    unsafe { inbox.fire(signal) };
                })
            })
            .collect();
        // The worker: drains until both actions ran.
        let mut total = 0;
        while total < 2 {
            assert!(inbox.has_pending());
            total += inbox.drain();
            if total < 2 {
                thread::yield_now();
            }
        }
        for f in firers {
            f.join().unwrap();
        }
        assert_eq!(ran.load(Ordering::Relaxed), 2);
        assert!(!inbox.has_pending() && inbox.is_empty());
        assert_eq!(inbox.drain(), 0, "an action ran twice");
    });
}

#[test]
fn a_signal_abandoned_while_it_fires_runs_or_is_handed_back_once() {
    model(|| {
        let inbox = Arc::new(SignalInbox::new());
        let ran = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicUsize::new(0));
        let action = {
            let (ran, guard) = (ran.clone(), Dropped(dropped.clone()));
            Box::new(move || {
                let _guard = guard;
                ran.fetch_add(1, Ordering::Relaxed);
            })
        };
        let signal: SignalRef = inbox.signal(action, std::ptr::null());
        let firer = {
            let inbox = inbox.clone();
            thread::spawn(move || {
                // SAFETY: fired once.
                unsafe { inbox.fire(signal) };
            })
        };
        // The watchdog, racing the callback: the signal is live (nobody
        // drains before the firer is joined).
        // SAFETY: not drained yet.
        let handed_back = unsafe { inbox.abandon(signal) };
        let abandoned = handed_back.is_some();
        drop(handed_back);
        firer.join().unwrap();
        // The worker frees the node either way.
        let ran_here = inbox.drain();
        assert_eq!(ran_here, ran.load(Ordering::Relaxed));
        assert_eq!(
            usize::from(abandoned) + ran.load(Ordering::Relaxed),
            1,
            "the action ran and was handed back, or neither"
        );
        assert_eq!(dropped.load(Ordering::Relaxed), 1);
        assert!(!inbox.has_pending() && inbox.is_empty());
    });
}

/// A device callback fires a signal (as `runtime::fire_signal` does:
/// `SignalInbox::fire`, then `Sleep::wake_any`) while the only worker, out of
/// work, goes to park: idle (`Sleep::idle_park`), or waiting in a join
/// (`Sleep::join_park`, which `wake_any` falls back to when nobody is
/// idle). Either way its re-check includes `!inbox.is_empty()`, as
/// `Worker::park` has it through `Registry::outside_empty`. The worker stops
/// once it ran the signal's action, and nothing else wakes it (no
/// shutdown, no other work), so a lost wake-up is a loom deadlock.
///
/// This is the Dekker pair `core/signal.rs` and `core/park.rs` describe: the firer
/// pushes onto the inbox, fences (`SeqCst`, in `wake_any`) and reads the
/// worker's state; the worker stores its state, fences (`SeqCst`, in
/// `idle_park`/`join_park`) and reads the inbox's head. Catches either
/// side's fence taken out together with its accesses weakened (`fire`'s
/// push `AcqRel` and `wake_any`'s state load `Acquire`; or the sleeper's
/// state store `Release` and `is_empty` `Acquire`), a real lost wake-up.
/// It also fails with a fence alone taken out, which C11 would allow (the
/// `SeqCst` accesses left would still order the pair) but loom does not,
/// since it treats `SeqCst` accesses as `AcqRel`. With both fences in
/// place, weakening `fire`'s push or `is_empty` alone passes, rightly: the
/// fences carry the pair. Also catches `wake_any` not unparking and the
/// sleeper's re-check taken out, and checks, as the first model does,
/// that the action sees the callback's write.
fn a_signal_fired_while_the_worker_parks_runs(in_a_join: bool) {
    model(move || {
        let inbox = Arc::new(SignalInbox::new());
        let sleep = Arc::new(Sleep::new(vec![thread::current()]));
        let finished = Arc::new(AtomicBool::new(false));
        let out = Arc::new(Output(UnsafeCell::new(0)));
        let action = {
            let out = out.clone();
            Box::new(move || {
                assert_eq!(out.0.with(|v| unsafe { *v }), 7);
            })
        };
        let signal = inbox.signal(action, std::ptr::null());
        let callback = {
            let (inbox, sleep, finished) = (inbox.clone(), sleep.clone(), finished.clone());
            thread::spawn(move || {
                out.0.with_mut(|v| unsafe { *v = 7 });
                // SAFETY: fired once.
                unsafe { inbox.fire(signal) };
                sleep.wake_any();
                finished.store(true, Ordering::SeqCst);
            })
        };
        // The worker: runs fired signals (`find_outside_work`), else parks.
        let mut ran = 0;
        while ran == 0 {
            if !inbox.is_empty() {
                ran += inbox.drain();
                continue;
            }
            if in_a_join {
                sleep.join_park(0, || !inbox.is_empty());
            } else {
                sleep.idle_park(0, || !inbox.is_empty());
            }
        }
        join_after(callback, &finished);
        assert_eq!(ran, 1);
        assert!(!inbox.has_pending() && inbox.is_empty());
    });
}

#[test]
fn a_signal_fired_while_the_worker_idle_parks_wakes_it() {
    a_signal_fired_while_the_worker_parks_runs(false);
}

#[test]
fn a_signal_fired_while_the_worker_waits_in_a_join_wakes_it() {
    a_signal_fired_while_the_worker_parks_runs(true);
}

/// An action's guard: counts the action dropped (once, whether it ran or
/// was handed back), and fails the model at once if the draining worker
/// drops it without running it. By the protocol that never happens: a
/// fired signal's action runs, and an abandoned one's action was taken out
/// by `abandon`. A drain that frees a node still holding its action means
/// it freed the node while `abandon`, having won the state, had yet to take
/// the action out of it: `abandon` then reads freed memory (the model
/// fails here, before that happens).
struct Guard {
    dropped: Arc<AtomicUsize>,
    ran: bool,
    drainer: thread::ThreadId,
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, Ordering::Relaxed);
        assert!(
            self.ran || thread::current().id() != self.drainer,
            "the drain freed a signal whose action was neither run nor taken by its abandoner \
             (abandon won the state, and is about to take the action out of freed memory)"
        );
    }
}

/// The watchdog abandons a signal while the callback fires it and a worker
/// drains the inbox, with the registry the device keeps
/// (`gpu::device::DeviceInner::enqueue_completion` and
/// `abandon_in_flight`): the signal is registered before it can fire; its
/// action first takes it out of the registry, under the registry's lock;
/// the watchdog abandons, under that lock, what is still registered, and
/// drops the actions it got outside the lock. That is how `abandon`'s
/// contract ("live: not yet drained") is kept for a signal that fired.
///
/// Checks that the action runs (on the worker, after everything the
/// callback wrote) or is handed to the watchdog, exactly one of the two;
/// that it is dropped exactly once; that the pending count comes back to
/// zero and the inbox is empty; and that no signal is freed while
/// `abandon` still touches it (see `Guard`).
///
/// Catches: `abandon`'s compare-and-swap on the state replaced by a load
/// and a store (both sides take the action: the pending count drops
/// twice), and a drain that runs or counts a signal without checking it
/// was fired (the pending count drops twice). What it guards is ownership
/// (the compare-and-swap's atomicity), not an ordering: the action is
/// written before the signal is shared and the node is published by the
/// push and the drain's swap, whose `Release`/`Acquire` pair the first
/// model of this file checks.
///
/// The race this model is for: a signal abandoned and then fired is pushed
/// all the same, and a drain may reach it while `abandon`, having won the
/// state, has not yet taken the action out. `abandon` has a scheduling
/// point in that window under loom. The second of the abandoner and the
/// drainer to let go of the node frees it (`released`); with the drain
/// freeing an abandoned node at once instead, this model fails on
/// `Guard`'s assertion (`abandon` would read freed memory).
#[test]
fn a_signal_abandoned_while_it_fires_and_drains_runs_or_is_handed_back_once() {
    model(|| {
        let inbox = Arc::new(SignalInbox::new());
        let registry: Arc<Mutex<Option<SignalRef>>> = Arc::new(Mutex::new(None));
        let ran = Arc::new(AtomicUsize::new(0));
        let dropped = Arc::new(AtomicUsize::new(0));
        let out = Arc::new(Output(UnsafeCell::new(0)));
        let action = {
            let (registry, ran, out) = (registry.clone(), ran.clone(), out.clone());
            let guard = Guard {
                dropped: dropped.clone(),
                ran: false,
                drainer: thread::current().id(),
            };
            Box::new(move || {
                // Moves the whole guard in (not just the field set below).
                let mut guard = guard;
                // Out of the registry first: the signal is freed after this
                // returns, and the watchdog must not find it then.
                registry.lock().unwrap().take();
                assert_eq!(out.0.with(|v| unsafe { *v }), 7);
                ran.fetch_add(1, Ordering::Relaxed);
                guard.ran = true;
            })
        };
        let signal = inbox.signal(action, std::ptr::null());
        // Registered before it can fire.
        *registry.lock().unwrap() = Some(signal);
        // How many of the callback and the watchdog are done.
        let done = Arc::new(AtomicUsize::new(0));
        let callback = {
            let (inbox, out, done) = (inbox.clone(), out.clone(), done.clone());
            thread::spawn(move || {
                out.0.with_mut(|v| unsafe { *v = 7 });
                // SAFETY: fired once.
                unsafe { inbox.fire(signal) };
                done.fetch_add(1, Ordering::SeqCst);
            })
        };
        let watchdog = {
            let (inbox, registry, done) = (inbox.clone(), registry.clone(), done.clone());
            thread::spawn(move || {
                let handed_back = {
                    let mut registered = registry.lock().unwrap();
                    // SAFETY: registered, so not drained: its action takes
                    // the lock held here before its signal can be freed.
                    registered.take().and_then(|s| unsafe { inbox.abandon(s) })
                };
                // Dropped outside the lock.
                let abandoned = handed_back.is_some();
                drop(handed_back);
                done.fetch_add(1, Ordering::SeqCst);
                abandoned
            })
        };
        // The worker drains while the others run (a worker looking for
        // work between tasks), and once more when they are done (as the
        // runtime's drop does).
        let mut ran_here = 0;
        while done.load(Ordering::SeqCst) < 2 {
            ran_here += inbox.drain();
            thread::yield_now();
        }
        callback.join().unwrap();
        let abandoned = watchdog.join().unwrap();
        ran_here += inbox.drain();
        assert_eq!(ran_here, ran.load(Ordering::Relaxed));
        assert_eq!(
            usize::from(abandoned) + ran_here,
            1,
            "the action ran and was handed back, or neither"
        );
        assert_eq!(dropped.load(Ordering::Relaxed), 1);
        assert!(!inbox.has_pending() && inbox.is_empty());
    });
}

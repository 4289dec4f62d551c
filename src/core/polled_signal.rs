//! An operation that workers test and whose own callback is the fallback:
//! its signal is fired by whichever finds it ended first (`fire_once.rs`).
//!
//! GPU work is the case in point: a worker queries the event recorded
//! after a task's work, and the host function enqueued behind that work
//! fires the signal if no worker found it ended first, and wakes a parked
//! worker. A worker that finds it ended fires the signal on itself, waking
//! nobody, and runs its action right after the poll.

// Made for GPU completions (and the unit tests).
#![cfg_attr(not(feature = "cuda"), allow(dead_code))]

use crate::core::fire_once::{Disposal, FireOnce};
use crate::core::polled::{Polled, Tested};
use crate::core::registry::{fire_signal, Registry};
use crate::core::signal::SignalRef;
use crate::core::worker::Worker;
use std::sync::Arc;

/// Whether an operation ended, asked without waiting.
pub(crate) trait Query: Send {
    /// `true` once the operation ended; `false` while it runs, and when
    /// the answer is an error (the callback, or whoever watches for
    /// errors, deals with those).
    fn has_ended(&self) -> bool;

    /// Called once, when the operation leaves the list: its callback let
    /// go of the claim, or the claim was given up.
    fn released(&self) {}
}

/// An operation in a runtime's `PolledList` (see the module docs).
pub(crate) struct PolledSignal<Q> {
    query: Q,
    claim: Arc<FireOnce>,
}

impl<Q: Query> PolledSignal<Q> {
    /// `signal` fired once `query` says the operation ended, or once the
    /// callback given [`FireOnce::as_callback_arg`] of `claim` ran,
    /// whichever comes first. `claim` must be kept for that callback.
    pub(crate) fn new(query: Q, claim: Arc<FireOnce>) -> Self {
        Self { query, claim }
    }
}

impl<Q: Query> Polled for PolledSignal<Q> {
    fn test(&mut self) -> Tested {
        match self.claim.may_be_freed() {
            Disposal::Free => {
                self.query.released();
                return Tested::Over;
            }
            Disposal::Leak => {
                // The callback may still hold the pointer, and never let go.
                std::mem::forget(Arc::clone(&self.claim));
                self.query.released();
                return Tested::Over;
            }
            // Fired (by a test): the callback has yet to let go of it.
            Disposal::Keep if self.claim.is_claimed() => return Tested::AwaitingCallback,
            Disposal::Keep => {}
        }
        if !self.query.has_ended() {
            return Tested::Pending;
        }
        match self.claim.claim() {
            Some(signal) => {
                fire(signal);
                Tested::Fired
            }
            None => Tested::Pending,
        }
    }

    fn has_callback(&self) -> bool {
        true
    }
}

/// Fires `signal`, which this thread claimed: on one of its runtime's
/// workers without waking anyone (the worker drains its inbox right after
/// the poll), elsewhere with a wake-up.
fn fire(signal: SignalRef) {
    // SAFETY: claimed, so live and unfired; its maker holds the registry
    // until every signal it made fired or was given up.
    let registry = unsafe { &*signal.context().cast::<Registry>() };
    if Worker::current().is_some_and(|w| std::ptr::eq(&*w.shared, registry)) {
        // SAFETY: claimed: fired once, here.
        unsafe { registry.inbox.fire(signal) };
    } else {
        // SAFETY: as above.
        unsafe { fire_signal(signal) };
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{PolledSignal, Query};
    use crate::core::fire_once::FireOnce;
    use crate::core::registry::fire_signal;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc};
    use std::time::{Duration, Instant};

    /// A fake device event, ended by a store.
    /// With `busy_device`, every test that finds it running counts another
    /// operation begun and ended meanwhile (as a device kept busy by other
    /// work would), so that the worker testing it never stops for lack of
    /// activity.
    struct Flag {
        ended: Arc<AtomicBool>,
        busy_device: Option<Arc<crate::core::registry::Registry>>,
        /// How many times it was asked.
        asked: Arc<AtomicUsize>,
    }

    impl Query for Flag {
        fn has_ended(&self) -> bool {
            self.asked.fetch_add(1, Ordering::Relaxed);
            let ended = self.ended.load(Ordering::Acquire);
            if let (false, Some(registry)) = (ended, &self.busy_device) {
                registry.completions.began();
                registry.completions.ended();
            }
            ended
        }
    }

    /// A fake operation (see `Flag`) that `rt`'s workers test: its claim,
    /// for the callback, the flag that ends it, and how many times it was
    /// asked. `action` runs once it is fired. A worker is woken after
    /// (the workers may all have gone to sleep before it began, and a
    /// GPU operation's beginning wakes nobody: its work's launch is what
    /// keeps the workers up).
    fn watched_flag(
        rt: &crate::Runtime,
        action: crate::core::signal::Action,
        busy_device: bool,
    ) -> (Arc<FireOnce>, Arc<AtomicBool>, Arc<AtomicUsize>) {
        let registry = rt.registry();
        let signal = registry.signal(action);
        let claim = Arc::new(FireOnce::kept_for_callback(signal));
        let ended = Arc::new(AtomicBool::new(false));
        let asked = Arc::new(AtomicUsize::new(0));
        registry.watch(Box::new(PolledSignal::new(
            Flag {
                ended: Arc::clone(&ended),
                busy_device: busy_device.then(|| Arc::clone(registry)),
                asked: Arc::clone(&asked),
            },
            Arc::clone(&claim),
        )));
        rt.run(|| ());
        (claim, ended, asked)
    }

    /// Who ends the fake operation.
    #[derive(Clone, Copy)]
    enum Ender {
        /// A task: the worker that ran it goes idle next.
        Task,
        /// A thread outside while every worker runs a stream of short tasks.
        TimerWhileBusy,
        /// A thread outside, after the workers ran out of work long ago,
        /// while the device stays busy.
        TimerWhileIdle,
        /// A thread outside, whose callback comes at once.
        TimerWithPromptCallback,
    }

    /// Ends a fake operation (see `Ender`); its callback comes once the
    /// task waiting on it ran, or 10 s after the end. Whether the callback
    /// fired the signal (no worker found the operation ended first). The
    /// signal's action runs once whoever fires it.
    fn end_and_wait(workers: usize, ender: Ender) -> bool {
        let rt = crate::Runtime::builder()
            .num_threads(workers)
            .build()
            .unwrap();
        let registry = Arc::clone(rt.registry());
        let promise = crate::Promise::new();
        let dep = promise.dep();
        let actions = Arc::new(AtomicUsize::new(0));
        let a = Arc::clone(&actions);
        let (claim, ended, _) = watched_flag(
            &rt,
            Box::new(move || {
                a.fetch_add(1, Ordering::SeqCst);
                promise.fulfill();
            }),
            matches!(ender, Ender::TimerWhileIdle),
        );
        let (ran_tx, ran) = mpsc::channel();
        drop(rt.spawn_delayed([dep], move || ran_tx.send(()).unwrap()));
        let stop = Arc::new(AtomicBool::new(false));
        // Rounds of short tasks on every worker; the task that waits runs
        // in one of the rounds once it is ready.
        let stream = matches!(ender, Ender::TimerWhileBusy).then(|| {
            let stop = Arc::clone(&stop);
            rt.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    crate::scope(|sc| {
                        for _ in 0..workers * 8 {
                            sc.spawn(|_| {
                                let t = Instant::now();
                                while t.elapsed() < Duration::from_micros(2) {}
                            });
                        }
                    });
                }
            })
        });
        let arg = claim.as_callback_arg() as usize;
        let callback = move |wait: Duration| {
            // The task ran (nothing left to fire), or the callback is due.
            let _ = ran.recv_timeout(wait);
            // SAFETY: the one callback call; the claim is kept until it.
            let fired = unsafe { FireOnce::claim_from_callback(arg as *mut _) };
            if let Some(signal) = fired {
                // SAFETY: claimed: fired once; the registry lives.
                unsafe { fire_signal(signal) };
            }
            fired.is_some()
        };
        let by_callback = match ender {
            Ender::Task => {
                let ended = Arc::clone(&ended);
                drop(rt.spawn(move || ended.store(true, Ordering::Release)));
                callback(Duration::from_secs(10))
            }
            Ender::TimerWhileBusy => {
                std::thread::sleep(Duration::from_millis(2));
                ended.store(true, Ordering::Release);
                callback(Duration::from_secs(10))
            }
            Ender::TimerWhileIdle => {
                std::thread::sleep(Duration::from_millis(50));
                ended.store(true, Ordering::Release);
                callback(Duration::from_secs(10))
            }
            Ender::TimerWithPromptCallback => {
                ended.store(true, Ordering::Release);
                callback(Duration::ZERO)
            }
        };
        stop.store(true, Ordering::Relaxed);
        if let Some(stream) = stream {
            stream.join();
        }
        rt.sync_root();
        assert_eq!(
            actions.load(Ordering::SeqCst),
            1,
            "the action ran more than once, or never"
        );
        // Counted out once a poll sees the callback gone.
        let t = Instant::now();
        while registry.completions.any_in_flight() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "still counted in flight"
            );
            std::thread::yield_now();
        }
        by_callback
    }

    /// The worker whose task ended the operation finds it ended (after
    /// that task, or idle) long before its callback comes.
    #[test]
    fn the_worker_that_ends_it_fires_it_before_its_callback() {
        found_by_a_worker(Ender::Task, "no worker found it ended");
    }

    /// Workers that ran out of work long ago find it, while the device is
    /// busy: one of them keeps testing instead of going to sleep (its
    /// callback would wake one, but comes 10 s late here).
    #[test]
    fn a_worker_keeps_testing_while_the_others_sleep() {
        found_by_a_worker(Ender::TimerWhileIdle, "every worker had gone to sleep");
    }

    /// Busy workers find it between tasks.
    #[test]
    fn busy_workers_fire_it_before_its_callback() {
        found_by_a_worker(Ender::TimerWhileBusy, "no busy worker found it ended");
    }

    /// Asserts that a worker of two, not the callback, fired the signal.
    fn found_by_a_worker(ender: Ender, why_not: &str) {
        assert!(
            !end_and_wait(2, ender),
            "the callback fired it, 10 s after the end: {why_not}"
        );
    }

    /// An operation that does not end, and nothing else beginning or
    /// ending: the worker that kept testing goes to sleep too, after a
    /// while (no worker spins for ever).
    #[test]
    fn no_worker_keeps_testing_for_ever() {
        let rt = crate::Runtime::builder().num_threads(2).build().unwrap();
        let registry = Arc::clone(rt.registry());
        let promise = crate::Promise::new();
        let (claim, ended, asked) = watched_flag(
            &rt,
            Box::new(move || {
                promise.fulfill();
            }),
            false,
        );
        let t = Instant::now();
        while asked.load(Ordering::Relaxed) == 0 {
            assert!(t.elapsed() < Duration::from_secs(10), "never tested");
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut all_asleep = false;
        while !all_asleep && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
            all_asleep = registry.sleep.all_parked();
        }
        // The callback ends it (the runtime's drop waits for it).
        ended.store(true, Ordering::Release);
        // SAFETY: the one callback call; the claim is kept until it.
        if let Some(signal) = unsafe { FireOnce::claim_from_callback(claim.as_callback_arg()) } {
            // SAFETY: claimed: fired once; the registry lives.
            unsafe { fire_signal(signal) };
        }
        assert!(
            all_asleep,
            "a worker still tested, 5 s after the operation began"
        );
    }

    /// Fired by a worker, then let go of by a callback that comes late:
    /// a worker still counts it out (nothing else will wake one).
    #[test]
    fn a_late_callback_lets_a_worker_count_it_out() {
        let rt = crate::Runtime::builder().num_threads(2).build().unwrap();
        let registry = Arc::clone(rt.registry());
        let (ran_tx, ran) = mpsc::channel();
        let (claim, ended, _) =
            watched_flag(&rt, Box::new(move || ran_tx.send(()).unwrap()), false);
        drop(rt.spawn(move || ended.store(true, Ordering::Release)));
        ran.recv_timeout(Duration::from_secs(10))
            .expect("no worker fired it");
        // Later than a worker keeps testing without activity.
        std::thread::sleep(Duration::from_millis(20));
        // SAFETY: the one callback call; the claim is kept until it.
        let fired = unsafe { FireOnce::claim_from_callback(claim.as_callback_arg()) };
        assert!(
            fired.is_none(),
            "a worker fired it: the callback only lets go"
        );
        let t = Instant::now();
        while registry.completions.any_in_flight() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "never counted out once its callback let go"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// With a callback that comes at once, one of the two fires it, once
    /// (a second firing would corrupt the inbox), and the task runs.
    #[test]
    fn a_prompt_callback_and_the_workers_fire_it_once() {
        for _ in 0..50 {
            end_and_wait(3, Ender::TimerWithPromptCallback);
        }
    }
}

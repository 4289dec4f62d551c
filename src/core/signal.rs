//! Signals from threads that may do almost nothing: a CUDA host callback
//! must not call CUDA, allocate, lock or unwind, yet its stream's work
//! finishing has to fulfill a promise, which may allocate (ready tasks are
//! queued), free memory (the last reference to a promise) and take locks.
//!
//! So the work is split. Before the work is enqueued, a worker allocates a
//! [`Signal`] holding the action to run (fulfilling the promise). The
//! callback only *fires* it: one compare-and-swap on its state and a
//! lock-free push onto the runtime's [`SignalInbox`], an intrusive stack (the
//! signal is its own node, so nothing is allocated). A worker drains the
//! inbox and runs the actions, when it looks for work and at each task
//! boundary where it sees a signal waiting; the caller of `fire` wakes a
//! sleeping one. A signal whose callback will never come (the device failed) is
//! *abandoned* by whoever noticed: its action is dropped instead (which
//! breaks the promise, so dependents are cancelled rather than left
//! waiting).
//!
//! Each signal is counted pending from its creation until its action ran or
//! was dropped, so that waiting for the runtime to be quiescent waits for
//! device work in flight too.
//!
//! The protocol is modelled under loom in `loom-tests/tests/models/inbox.rs`.

// Its `pub` items are the loom models' API (`selvedge::protocols`, built
// with `--cfg loom`); elsewhere they are the crate's own.
#![cfg_attr(not(loom), allow(unreachable_pub))]
// Fired only by device callbacks (and the loom models).
#![cfg_attr(not(any(loom, feature = "cuda")), allow(dead_code))]

use crate::core::stack_list::oldest_first;
use crate::core::sync::{AtomicBool, AtomicPtr, AtomicU8, AtomicUsize, Ordering, UnsafeCell};
use crossbeam_utils::CachePadded;
use std::ptr;

/// What a fired signal runs on a worker.
pub(crate) type Action = Box<dyn FnOnce() + Send>;

const PENDING: u8 = 0;
const FIRED: u8 = 1;
const ABANDONED: u8 = 2;

/// A pre-allocated, one-shot notification (see the module docs).
pub(crate) struct Signal {
    /// The next signal in the inbox; written by the firing thread before
    /// the push publishes it.
    next: UnsafeCell<*mut Signal>,
    /// `PENDING`, then `FIRED` or `ABANDONED` (whoever moves it first owns
    /// the action).
    state: AtomicU8,
    action: UnsafeCell<Option<Action>>,
    /// For an abandoned signal that fires after all: set by the first of
    /// its abandoner (once it took the action) and the worker that drains
    /// it; the second frees the node. Without it a drain could free the
    /// node between `abandon` winning the state and taking the action.
    released: AtomicBool,
    /// Opaque context for whoever fires it (the runtime the signal belongs
    /// to), read before firing: the signal may be freed right after.
    context: *const (),
    /// When it fired (`clock::ticks`), for a trace: written before the
    /// push that publishes the node to its drainer.
    #[cfg(all(feature = "trace", not(loom)))]
    fired_at: crate::core::sync::AtomicU64,
}

#[cfg(all(feature = "trace", not(loom)))]
thread_local! {
    /// When the signal whose action runs on this thread now fired.
    static FIRED_AT: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// When the signal whose action is running on this thread fired
/// (`clock::ticks`; 0 outside an action): for the trace's device
/// completions.
#[cfg(all(feature = "trace", not(loom)))]
pub(crate) fn fired_at_of_running_action() -> u64 {
    FIRED_AT.with(std::cell::Cell::get)
}

/// A handle to a live [`Signal`]; plain data (a C callback reaches it
/// through its claim, `fire_once.rs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignalRef(*mut Signal);

// SAFETY: a signal is reached from several threads only through the
// protocol in this module: the state decides who owns the action, and the
// inbox's release/acquire pair publishes the node to the worker that frees
// it.
unsafe impl Send for SignalRef {}
// SAFETY: as above.
unsafe impl Sync for SignalRef {}

impl SignalRef {
    /// The context given at creation.
    ///
    /// # Safety
    /// The signal is live: not yet fired, or fired but not yet drained.
    pub unsafe fn context(self) -> *const () {
        // SAFETY: live, per the caller; `context` is never written after
        // creation.
        unsafe { (*self.0).context }
    }
}

/// The runtime's stack of fired signals, drained by workers.
pub struct SignalInbox {
    /// On a line of its own: workers read it after every task, and
    /// `pending` changes with every signal made.
    head: CachePadded<AtomicPtr<Signal>>,
    /// Signals made and not yet run or abandoned.
    pending: AtomicUsize,
}

impl Default for SignalInbox {
    fn default() -> Self {
        Self::new()
    }
}

impl SignalInbox {
    /// An empty inbox.
    pub fn new() -> Self {
        Self {
            head: CachePadded::new(AtomicPtr::new(ptr::null_mut())),
            pending: AtomicUsize::new(0),
        }
    }

    /// Makes a signal that runs `action` once fired and drained; it counts
    /// as pending work until then (or until abandoned). The signal must be
    /// fired exactly once, or abandoned (and then fired at most once).
    pub fn signal(&self, action: Action, context: *const ()) -> SignalRef {
        self.pending.fetch_add(1, Ordering::SeqCst);
        SignalRef(Box::into_raw(Box::new(Signal {
            next: UnsafeCell::new(ptr::null_mut()),
            state: AtomicU8::new(PENDING),
            action: UnsafeCell::new(Some(action)),
            released: AtomicBool::new(false),
            context,
            #[cfg(all(feature = "trace", not(loom)))]
            fired_at: crate::core::sync::AtomicU64::new(0),
        })))
    }

    /// Fires `signal`: no allocation, no lock, no user code. The caller then
    /// wakes a worker. The signal may be freed as soon as this returns.
    ///
    /// # Safety
    /// `signal` came from this inbox's [`SignalInbox::signal`] and was not fired
    /// before.
    pub unsafe fn fire(&self, signal: SignalRef) {
        let s = signal.0;
        // SAFETY: not fired before, so not freed (the worker that drains it
        // is the only one that frees it).
        let node = unsafe { &*s };
        // Losing to `abandon` is fine: the node is pushed all the same, so
        // that a worker frees it (this thread may not).
        let _ = node
            .state
            .compare_exchange(PENDING, FIRED, Ordering::AcqRel, Ordering::Acquire);
        #[cfg(all(feature = "trace", not(loom)))]
        node.fired_at
            .store(crate::core::clock::ticks(), Ordering::Relaxed);
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: the node is unpublished until the exchange below
            // succeeds: only this thread touches `next`.
            node.next.with_mut(|n| unsafe { *n = head });
            // SeqCst: a worker about to park re-checks `is_empty` after
            // announcing itself (see `park.rs`); with the waker's fence this
            // is the Dekker pair that rules out a lost wake-up.
            match self
                .head
                .compare_exchange_weak(head, s, Ordering::SeqCst, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }

    /// Gives up on `signal`, whose firing may never come: if it has not
    /// fired, its action is returned (for the caller to drop, not run,
    /// outside any lock of its own: dropping may cancel tasks) and it stops
    /// counting as pending. `None`: it had fired, and its action runs or
    /// ran on a worker. The memory of an abandoned signal is freed only if
    /// it is fired after all (by the second of this call and the drain to
    /// let go of it), and leaks otherwise (only after a device failure).
    ///
    /// # Safety
    /// `signal` came from this inbox and is live: not yet drained. (A
    /// registry of signals in flight keeps that promise if each action
    /// takes its own signal out of the registry, under the lock the
    /// abandoner holds: a signal is drained only after its action ran.)
    pub unsafe fn abandon(&self, signal: SignalRef) -> Option<Action> {
        // SAFETY: live, per the caller.
        let node = unsafe { &*signal.0 };
        node.state
            .compare_exchange(PENDING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        // The window in which the signal may fire and be drained: a
        // scheduling point for the loom model.
        #[cfg(loom)]
        crate::core::sync::thread::yield_now();
        // SAFETY: winning the exchange gave this thread the action, and
        // the node stays allocated until this thread lets go of it below
        // (a drain of the fired node does not free it before).
        let action = node.action.with_mut(|a| unsafe { (*a).take() });
        self.pending.fetch_sub(1, Ordering::SeqCst);
        // AcqRel: whichever of this and the drain comes second frees the
        // node, after everything the first did with it.
        if node.released.swap(true, Ordering::AcqRel) {
            // SAFETY: fired and drained: the drainer let go first and
            // nobody else holds the node.
            drop(unsafe { Box::from_raw(signal.0) });
        }
        action
    }

    /// Takes back a signal that was never handed to anyone who could fire
    /// it (enqueuing its callback failed): its action is returned and its
    /// memory freed.
    ///
    /// # Safety
    /// `signal` came from this inbox, was never fired, and never will be.
    pub unsafe fn discard(&self, signal: SignalRef) -> Option<Action> {
        // SAFETY: live and unfired, per the caller.
        let action = unsafe { self.abandon(signal) };
        // SAFETY: made by `Box::into_raw` in `signal`; never fired, so
        // never drained, and `abandon` left it to us.
        drop(unsafe { Box::from_raw(signal.0) });
        action
    }

    /// Whether no fired signal waits. SeqCst: part of the parking protocol.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.head.load(Ordering::SeqCst).is_null()
    }

    /// A hint that no fired signal waits, for a worker between tasks:
    /// Relaxed, so it may miss a signal fired this instant, which the next
    /// task boundary, or the SeqCst [`SignalInbox::is_empty`] of the idle
    /// path, sees.
    #[inline]
    pub fn looks_empty(&self) -> bool {
        self.head.load(Ordering::Relaxed).is_null()
    }

    /// Whether signals are made but not yet run or abandoned (device work
    /// in flight).
    pub fn has_pending(&self) -> bool {
        self.pending.load(Ordering::SeqCst) != 0
    }

    /// Runs the actions of every fired signal, in firing order, and frees
    /// the signals. Returns how many actions ran.
    pub fn drain(&self) -> usize {
        if self.is_empty() {
            return 0;
        }
        // Acquire: pairs with the push, publishing each node's fields.
        let list = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        // The stack is newest first: reverse it.
        // SAFETY: the swap took the whole list, so this thread owns its
        // signals (only the drainer frees them), and its Acquire made
        // every `next` written before a push visible.
        let mut fifo = unsafe { oldest_first(list, |node: &Signal| &node.next) };
        let mut ran = 0;
        // Actions fulfill promises; dropping what they hold may run user
        // destructors. Nobody waits for an action, and the caller is a
        // worker between tasks (or a runtime being dropped), so a panic
        // is reported, not raised: the worker lives, and the signals
        // drained with it still run and are freed.
        while !fifo.is_null() {
            // SAFETY: a drained, live signal owned by this thread.
            let node = unsafe { &*fifo };
            // SAFETY: this thread wrote `next` in the reversal above.
            let next = node.next.with(|n| unsafe { *n });
            if node.state.load(Ordering::Acquire) == FIRED {
                // SAFETY: the firing thread won the state, so the action is
                // this thread's to take.
                if let Some(action) = node.action.with_mut(|a| unsafe { (*a).take() }) {
                    #[cfg(all(feature = "trace", not(loom)))]
                    FIRED_AT.with(|f| f.set(node.fired_at.load(Ordering::Relaxed)));
                    crate::core::unwind::catch_and_report("a signal's action", action);
                    ran += 1;
                }
                self.pending.fetch_sub(1, Ordering::SeqCst);
                // SAFETY: made by `Box::into_raw` in `signal` and drained
                // once (a node is pushed once); nobody else holds a fired
                // node.
                drop(unsafe { Box::from_raw(fifo) });
            } else if node.released.swap(true, Ordering::AcqRel) {
                // Abandoned, and its abandoner let go first (see `abandon`).
                // SAFETY: as above, and the abandoner is done with it.
                drop(unsafe { Box::from_raw(fifo) });
            }
            // Else abandoned and its abandoner still busy: it frees the
            // node when it lets go.
            fifo = next;
        }
        ran
    }
}

impl Drop for SignalInbox {
    /// Signals fired after the workers left still run their actions here.
    fn drop(&mut self) {
        self.drain();
    }
}

/// The path a device callback takes, without a device: signals fired from
/// foreign threads while the workers park and wake.
#[cfg(all(test, not(loom)))]
mod tests {
    use crate::core::registry::fire_signal;
    use crate::{Promise, Runtime};
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    use std::sync::{mpsc, Arc};
    use std::time::Duration;

    #[test]
    fn signals_fired_from_foreign_threads_fulfill_promises_exactly_once() {
        let rounds = if cfg!(debug_assertions) { 20 } else { 200 };
        let per_round = 1000;
        let rt = Runtime::builder().num_threads(8).build().unwrap();
        let ran: Arc<Vec<AtomicUsize>> =
            Arc::new((0..per_round).map(|_| AtomicUsize::new(0)).collect());
        for round in 0..rounds {
            let (tx, rx) = mpsc::channel();
            let handles: Vec<_> = (0..per_round)
                .map(|i| {
                    let p = Promise::new();
                    let ran = ran.clone();
                    let h = rt.spawn_delayed([p.dep()], move || {
                        ran[i].fetch_add(1, Relaxed);
                    });
                    tx.send(rt.registry().signal(Box::new(move || {
                        p.fulfill();
                    })))
                    .unwrap();
                    h
                })
                .collect();
            drop(tx);
            let signals: Vec<_> = rx.into_iter().collect();
            // Four firing threads; every few rounds they pause first, so
            // that the workers have parked.
            std::thread::scope(|s| {
                for part in signals.chunks(per_round / 4) {
                    s.spawn(move || {
                        if round % 8 == 0 {
                            std::thread::sleep(Duration::from_millis(2));
                        }
                        for (k, &signal) in part.iter().enumerate() {
                            // SAFETY: each signal is fired once, and the
                            // runtime outlives the scope.
                            unsafe { fire_signal(signal) };
                            if k % 64 == 0 {
                                std::thread::yield_now();
                            }
                        }
                    });
                }
            });
            for h in handles {
                h.join();
            }
            for (i, c) in ran.iter().enumerate() {
                assert_eq!(c.swap(0, Relaxed), 1, "round {round}: task {i}");
            }
        }
    }

    #[test]
    fn a_signal_fired_while_a_worker_runs_its_own_tasks_runs_at_its_next_task_boundary() {
        // One worker with 50 queued tasks of 2 ms: a signal fired meanwhile
        // from another thread runs between two of them, not when the
        // worker's deque is empty (what waits on a device or a message
        // would otherwise wait for all of this worker's tasks).
        let rt = Runtime::builder().num_threads(1).build().unwrap();
        let log = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let in_action = Arc::clone(&log);
        let signal = rt.registry().signal(Box::new(move || {
            in_action.lock().unwrap().push("signal".into());
        }));
        let firing = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(5));
            // SAFETY: fired once; the runtime outlives this thread, which
            // is joined before the runtime goes.
            unsafe { fire_signal(signal) };
        });
        rt.run(|| {
            crate::scope(|s| {
                for i in 0..50 {
                    let log = &log;
                    s.spawn(move |_| {
                        std::thread::sleep(Duration::from_millis(2));
                        log.lock().unwrap().push(format!("task {i}"));
                    });
                }
            });
        });
        firing.join().unwrap();
        let log = log.lock().unwrap().clone();
        let at = log
            .iter()
            .position(|l| l == "signal")
            .expect("the signal ran");
        assert!(
            at < 45,
            "the signal's action ran only after {at} of the worker's 50 queued tasks: {log:?}"
        );
    }

    /// A panic payload whose destructor panics too.
    struct BadPayload;

    impl Drop for BadPayload {
        fn drop(&mut self) {
            panic!("BadPayload dropped");
        }
    }

    #[test]
    fn a_panicking_action_neither_unwinds_out_of_the_drain_nor_strands_the_others() {
        use crate::core::signal::SignalInbox;
        // The drain itself: the middle action panics, with a payload whose
        // destructor panics.
        let inbox = SignalInbox::new();
        let ran = Arc::new(AtomicUsize::new(0));
        let make = |panics: bool| {
            let ran = ran.clone();
            inbox.signal(
                Box::new(move || {
                    ran.fetch_add(1, Relaxed);
                    if panics {
                        std::panic::panic_any(BadPayload);
                    }
                }),
                std::ptr::null(),
            )
        };
        let signals = [make(false), make(true), make(false)];
        for signal in signals {
            // SAFETY: made by this inbox, fired once.
            unsafe { inbox.fire(signal) };
        }
        assert_eq!(inbox.drain(), 3);
        assert_eq!(ran.load(Relaxed), 3);
        assert!(inbox.is_empty() && !inbox.has_pending());

        // On workers: they drain the inbox while looking for work, and
        // must live on. A watchdog fails the test instead of hanging.
        for n in [2, 4] {
            let (done, watch) = mpsc::channel::<()>();
            std::thread::spawn(move || {
                if let Err(mpsc::RecvTimeoutError::Timeout) =
                    watch.recv_timeout(Duration::from_secs(60))
                {
                    eprintln!("a panicking signal action hung a {n}-worker runtime; aborting");
                    std::process::abort();
                }
            });
            let rt = Runtime::builder().num_threads(n).build().unwrap();
            let ran = Arc::new(AtomicUsize::new(0));
            for round in 0..8 {
                let signals: Vec<_> = (0..4 * n)
                    .map(|i| {
                        let ran = ran.clone();
                        rt.registry().signal(Box::new(move || {
                            ran.fetch_add(1, Relaxed);
                            if i % 2 == 0 {
                                std::panic::panic_any(BadPayload);
                            }
                        }))
                    })
                    .collect();
                for signal in signals {
                    // SAFETY: fired once; the runtime outlives it.
                    unsafe { fire_signal(signal) };
                }
                rt.sync_root();
                assert_eq!(ran.load(Relaxed), (round + 1) * 4 * n);
            }
            let sum = rt.run(|| {
                let hs: Vec<_> = (0..64u64).map(|i| crate::spawn(move || i)).collect();
                hs.into_iter().map(crate::JoinHandle::join).sum::<u64>()
            });
            assert_eq!(sum, 64 * 63 / 2);
            drop(rt);
            drop(done);
        }
    }

    #[test]
    fn sync_root_waits_for_signals_in_flight() {
        let rt = Runtime::builder().num_threads(3).build().unwrap();
        let done = Arc::new(AtomicUsize::new(0));
        let mut signals = Vec::new();
        for _ in 0..100 {
            let p = Promise::new();
            let done = done.clone();
            drop(rt.spawn_delayed([p.dep()], move || {
                done.fetch_add(1, Relaxed);
            }));
            signals.push(rt.registry().signal(Box::new(move || {
                p.fulfill();
            })));
        }
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(30));
                for signal in signals {
                    // SAFETY: fired once; the runtime outlives the scope.
                    unsafe { fire_signal(signal) };
                }
            });
            rt.sync_root();
            assert_eq!(done.load(Relaxed), 100, "sync_root returned early");
        });
        // An unfired signal dropped by its abandoner breaks its promise.
        let p = Promise::new();
        let h = rt.spawn_delayed([p.dep()], || ());
        let signal = rt.registry().signal(Box::new(move || {
            p.fulfill();
        }));
        // SAFETY: never fired, so live.
        let action = unsafe { rt.registry().inbox.abandon(signal) };
        assert!(action.is_some());
        drop(action);
        assert!(h.try_join().unwrap_err().is_cancelled());
        rt.sync_root();
    }
}

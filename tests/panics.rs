//! User code that panics where nobody waits for it: a detached task's
//! result whose destructor panics, a panic payload whose destructor
//! panics, a waker whose `wake` (or destructor) panics. None of them may
//! kill a worker: afterwards the runtime still runs new work and drops
//! without hanging. (A signal's action that panics is tested with the
//! inbox, in `src/core/signal.rs`: signals are not reachable from outside the
//! crate.)
//!
//! Each test runs on a 2- and a 4-worker runtime, under a watchdog that
//! aborts the test binary after 60 s instead of letting it hang: a dead
//! worker used to make `run`, `sync_root` and the runtime's drop wait
//! forever.

mod support;

use selvedge::{JoinHandle, Promise, Runtime};
use std::future::Future;
use std::panic::panic_any;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use support::Watchdog;

/// Builds a runtime of `n` workers, runs `f` on it, then checks that the
/// runtime still runs new work, is quiescent, and drops, all within the
/// watchdog's time.
fn on_runtimes(test: &'static str, f: impl Fn(&Runtime)) {
    for n in [2, 4] {
        let watchdog = Watchdog::new(format!("{test} (a worker died?)"), Duration::from_secs(60));
        let rt = Runtime::builder().num_threads(n).build().unwrap();
        f(&rt);
        rt.sync_root();
        // Work for every worker, so a dead one would be noticed.
        let sum = rt.run(|| {
            let hs: Vec<_> = (0..64u64).map(|i| selvedge::spawn(move || i * 2)).collect();
            hs.into_iter().map(JoinHandle::join).sum::<u64>()
        });
        assert_eq!(sum, 64 * 63, "{test}: {n} workers");
        drop(rt);
        drop(watchdog);
    }
}

/// A value whose destructor panics.
struct PanicOnDrop;

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        panic!("PanicOnDrop dropped");
    }
}

/// A panic payload whose destructor panics.
struct BadPayload;

impl Drop for BadPayload {
    fn drop(&mut self) {
        panic!("BadPayload dropped");
    }
}

/// Makes every task wait for `go`, so that the handles are dropped (or
/// the wakers registered) before the tasks finish.
fn gate() -> (Arc<AtomicBool>, impl Fn() + Send + Clone + 'static) {
    let go = Arc::new(AtomicBool::new(false));
    let wait = {
        let go = go.clone();
        move || {
            while !go.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
        }
    };
    (go, wait)
}

#[test]
fn a_detached_result_whose_drop_panics_does_not_kill_a_worker() {
    on_runtimes("detached result", |rt| {
        // The handle goes first: the runner drops the result.
        let (go, wait) = gate();
        for _ in 0..32 {
            let wait = wait.clone();
            drop(rt.spawn(move || {
                wait();
                PanicOnDrop
            }));
        }
        go.store(true, Ordering::Release);
        rt.sync_root();
        // The runner goes first: the handle's drop drops the result, the
        // same way (reported, not raised), here and on a worker.
        let h = rt.spawn(|| PanicOnDrop);
        while !h.is_finished() {
            std::thread::yield_now();
        }
        drop(h);
        rt.run(|| {
            for _ in 0..32 {
                drop(selvedge::spawn(|| PanicOnDrop));
            }
        });
    });
}

#[test]
fn a_panic_payload_whose_drop_panics_does_not_kill_a_worker() {
    on_runtimes("payload", |rt| {
        // A detached task that panics with it.
        let (go, wait) = gate();
        for _ in 0..32 {
            let wait = wait.clone();
            drop(rt.spawn(move || {
                wait();
                panic_any(BadPayload)
            }));
        }
        go.store(true, Ordering::Release);
        rt.sync_root();
        rt.run(|| {
            for _ in 0..32 {
                drop(selvedge::spawn(|| panic_any(BadPayload)));
            }
        });
        // A cancelled delayed task whose closure's destructor panics with
        // it, cancelled on a worker and on this thread.
        struct DropPanicsWithBadPayload;
        impl Drop for DropPanicsWithBadPayload {
            fn drop(&mut self) {
                panic_any(BadPayload);
            }
        }
        for on_worker in [true, false] {
            let p = Promise::new();
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let guard = DropPanicsWithBadPayload;
                    rt.spawn_delayed([p.dep()], move || drop(guard))
                })
                .collect();
            if on_worker {
                rt.run(move || drop(p));
            } else {
                drop(p);
            }
            for h in handles {
                assert!(h.try_join().unwrap_err().is_cancelled());
            }
        }
    });
}

/// A waker that panics when woken, or when its last clone is dropped.
struct BadWaker {
    panic_on_wake: bool,
    woken: AtomicUsize,
}

impl Wake for BadWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.fetch_add(1, Ordering::SeqCst);
        if self.panic_on_wake {
            panic_any(BadPayload);
        }
    }
}

impl Drop for BadWaker {
    fn drop(&mut self) {
        if !self.panic_on_wake {
            panic!("BadWaker dropped");
        }
    }
}

#[test]
fn a_waker_that_panics_does_not_kill_a_worker() {
    on_runtimes("waker", |rt| {
        // Wakes panic: the handle still gets its result once the task
        // finished, and can be polled to the end.
        let (go, wait) = gate();
        let waker = Arc::new(BadWaker {
            panic_on_wake: true,
            woken: AtomicUsize::new(0),
        });
        let mut handles: Vec<_> = (0..16)
            .map(|i| {
                let wait = wait.clone();
                rt.spawn(move || {
                    wait();
                    i
                })
            })
            .collect();
        {
            let waker = Waker::from(waker.clone());
            let mut cx = Context::from_waker(&waker);
            for h in &mut handles {
                assert!(Pin::new(h).poll(&mut cx).is_pending());
            }
        }
        go.store(true, Ordering::Release);
        rt.sync_root();
        assert_eq!(waker.woken.load(Ordering::SeqCst), 16);
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        for (i, h) in handles.iter_mut().enumerate() {
            assert_eq!(Pin::new(h).poll(&mut cx), Poll::Ready(i));
        }

        // A waker whose destructor panics, dropped by the runner that
        // frees the block (the handle was dropped before the task ended).
        let (go, wait) = gate();
        for _ in 0..16 {
            let wait = wait.clone();
            let mut h = rt.spawn(wait);
            let waker = Waker::from(Arc::new(BadWaker {
                panic_on_wake: false,
                woken: AtomicUsize::new(0),
            }));
            assert!(Pin::new(&mut h)
                .poll(&mut Context::from_waker(&waker))
                .is_pending());
            drop(h);
            // The block now holds the last clone.
            drop(waker);
        }
        go.store(true, Ordering::Release);
    });
}

/// A reduction's accumulator whose destructor panics (when armed).
struct Acc(u64, bool);

impl Drop for Acc {
    fn drop(&mut self) {
        if self.1 && !std::thread::panicking() {
            panic!("Acc dropped");
        }
    }
}

#[test]
fn an_accumulator_whose_drop_panics_after_a_failed_merge_does_not_hang_a_loop() {
    on_runtimes("accumulator", |rt| {
        for _ in 0..20 {
            // One merge panics; the value beside it, higher up the merge
            // tree, is then dropped unmerged.
            let merges = AtomicUsize::new(0);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                rt.run(|| {
                    selvedge::parallel_for(0..2_000).reduce(
                        || Acc(0, true),
                        |mut a, i| {
                            // Long enough iterations that idle workers
                            // ask for some.
                            for _ in 0..2_000 {
                                a.0 = std::hint::black_box(a.0 + i as u64);
                            }
                            a
                        },
                        |mut a, mut b| {
                            let sum = a.0 + b.0;
                            // Consumed without running their destructors.
                            a.1 = false;
                            b.1 = false;
                            if merges.fetch_add(1, Ordering::Relaxed) == 0 {
                                panic!("first merge");
                            }
                            Acc(sum, true)
                        },
                    )
                })
            }));
            match r {
                // A loop that was never split merges nothing.
                Ok(mut acc) => acc.1 = false,
                Err(p) => assert_eq!(p.downcast_ref::<&str>(), Some(&"first merge")),
            }
        }
    });
}

/// Runs `f` and expects it to resume a `BadPayload` panic, which it
/// forgets (dropping it would panic in this test).
fn expect_bad_payload(what: &str, f: impl FnOnce()) {
    let payload = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err(what);
    assert!(payload.is::<BadPayload>(), "{what}: another panic came out");
    std::mem::forget(payload);
}

/// Several tasks of a scope panic with payloads whose destructors panic:
/// the scope resumes the first and drops the others, whose destructors'
/// panics are reported; each task still counts itself finished (it used
/// to unwind past that, and the scope waited forever).
#[test]
fn a_scope_drops_later_bad_payloads_and_still_finishes() {
    on_runtimes("scope bad payloads", |rt| {
        expect_bad_payload("the scope resumes a task's panic", || {
            rt.run(|| {
                selvedge::scope(|s| {
                    for _ in 0..4 {
                        s.spawn(|_| panic_any(BadPayload));
                    }
                })
            })
        });
        // The body panics too: the body's panic wins, the task's payload is
        // dropped first (not while unwinding, which would abort).
        let body = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rt.run(|| {
                selvedge::scope(|s| {
                    s.spawn(|_| panic_any(BadPayload));
                    panic!("the body");
                })
            })
        }));
        let payload = body.expect_err("the body's panic");
        assert_eq!(payload.downcast_ref::<&str>(), Some(&"the body"));
    });
}

/// Both closures of a `join` panic with payloads whose destructors panic:
/// `a`'s is resumed, `b`'s dropped first (it used to be dropped while
/// `a`'s unwound, which aborts).
#[test]
fn a_join_whose_sides_both_panic_with_bad_payloads_resumes_one() {
    on_runtimes("join bad payloads", |rt| {
        expect_bad_payload("join resumes a's panic", || {
            rt.run(|| selvedge::join(|| panic_any(BadPayload), || panic_any(BadPayload)));
        });
    });
}

/// Many iterations of a loop panic with payloads whose destructors panic:
/// the loop resumes one and its parts still finish.
#[test]
fn a_loop_drops_later_bad_payloads_and_still_finishes() {
    on_runtimes("loop bad payloads", |rt| {
        expect_bad_payload("the loop resumes an iteration's panic", || {
            rt.run(|| selvedge::parallel_for(0..64).for_each(|_| panic_any(BadPayload)));
        });
    });
}

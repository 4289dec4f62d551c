//! spawn / join / JoinHandle behaviour, run with more workers than cores.

mod support;

use selvedge::{join, spawn, Runtime};
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;
use support::Watchdog;

fn runtimes() -> impl Iterator<Item = Runtime> {
    [1, 2, 4, 8]
        .into_iter()
        .map(|n| Runtime::builder().num_threads(n).build().unwrap())
}

fn fib_spawn(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let a = spawn(move || fib_spawn(n - 1));
    let b = fib_spawn(n - 2);
    a.join() + b
}

fn fib_join(n: u64) -> u64 {
    if n < 2 {
        return n;
    }
    let (a, b) = join(|| fib_join(n - 1), || fib_join(n - 2));
    a + b
}

#[test]
fn deep_recursion_without_cutoff() {
    for rt in runtimes() {
        assert_eq!(rt.run(|| fib_spawn(25)), 75025, "{rt:?}");
        assert_eq!(rt.run(|| fib_join(25)), 75025, "{rt:?}");
    }
}

#[test]
fn a_million_tiny_tasks() {
    let rt = Runtime::builder().num_threads(8).build().unwrap();
    let counter = Arc::new(AtomicUsize::new(0));
    let total = rt.run(|| {
        let mut handles = Vec::with_capacity(1_000_000);
        for i in 0..1_000_000u64 {
            let c = counter.clone();
            handles.push(spawn(move || {
                c.fetch_add(1, Ordering::Relaxed);
                i
            }));
        }
        handles.into_iter().map(|h| h.join()).sum::<u64>()
    });
    assert_eq!(total, 999_999 * 1_000_000 / 2);
    assert_eq!(counter.load(Ordering::Relaxed), 1_000_000);
}

#[test]
fn handles_join_in_any_order_and_on_other_threads() {
    let rt = Runtime::builder().num_threads(4).build().unwrap();
    rt.run(|| {
        let hs: Vec<_> = (0..1000u64).map(|i| spawn(move || i * 2)).collect();
        // Join every other one first (FIFO order), then the rest backwards.
        let mut sum = 0;
        let (evens, odds): (Vec<_>, Vec<_>) =
            hs.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
        for (_, h) in evens {
            sum += h.join();
        }
        for (_, h) in odds.into_iter().rev() {
            sum += h.join();
        }
        assert_eq!(sum, 999 * 1000);
    });
    // A handle created on a worker, joined from a foreign thread.
    let h = rt.run(|| spawn(|| 42));
    assert_eq!(std::thread::spawn(move || h.join()).join().unwrap(), 42);
    // A handle passed into a child task and joined there (possibly while the
    // task is still buried in the spawning worker's deque).
    for rt in runtimes() {
        let v = rt.run(|| {
            let h = spawn(|| 5);
            spawn(move || h.join() + 1).join()
        });
        assert_eq!(v, 6);
    }
}

#[test]
fn a_handle_joined_on_another_runtimes_worker_waits_for_its_own_task() {
    // Taking the wrong task back would leave `mine` never run: fail with a
    // message instead of hanging the test run.
    let _watchdog = Watchdog::new(
        "a handle joined on another runtime's worker",
        Duration::from_secs(60),
    );
    // The joiner's deque holds a task of its own at the position the
    // handle's task has in its spawner's deque: that task is not the
    // handle's, and must not be taken back in its place.
    let spawner = Runtime::builder().num_threads(1).build().unwrap();
    let joiner = Runtime::builder().num_threads(1).build().unwrap();
    for _ in 0..100 {
        let h = spawner.run(|| spawn(|| 7));
        let v = joiner.run(move || {
            let mine = spawn(|| 1);
            let theirs = h.join();
            theirs * 10 + mine.join()
        });
        assert_eq!(v, 71);
    }
}

#[test]
fn panics_in_leaves_are_resumed_with_their_payload() {
    for rt in runtimes() {
        let r = catch_unwind(AssertUnwindSafe(|| {
            rt.run(|| {
                let ok = spawn(|| 1);
                let bad = spawn(|| -> u32 { std::panic::panic_any(17u32) });
                ok.join() + bad.join()
            })
        }));
        assert_eq!(*r.unwrap_err().downcast::<u32>().unwrap(), 17);
        // The runtime still works afterwards.
        assert_eq!(rt.run(|| fib_spawn(15)), 610);
    }
}

#[test]
fn panic_in_root_is_resumed_and_runtime_survives() {
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let r = catch_unwind(AssertUnwindSafe(|| rt.run(|| panic!("root failed"))));
    assert_eq!(r.unwrap_err().downcast_ref::<&str>(), Some(&"root failed"));
    assert_eq!(rt.run(|| 3), 3);
}

#[test]
fn join_waits_for_b_when_a_panics() {
    let rt = Runtime::builder().num_threads(4).build().unwrap();
    let b_done = AtomicUsize::new(0);
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.run(|| {
            join(
                || panic!("a"),
                || {
                    std::thread::sleep(Duration::from_millis(20));
                    b_done.store(1, Ordering::SeqCst);
                },
            )
        })
    }));
    assert!(r.is_err());
    assert_eq!(
        b_done.load(Ordering::SeqCst),
        1,
        "join returned before b finished"
    );
    // b panics, a does not: b's panic is resumed.
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.run(|| join(|| 1, || -> i32 { panic!("b") }))
    }));
    assert_eq!(r.unwrap_err().downcast_ref::<&str>(), Some(&"b"));
}

/// Three nested joins on one worker: the outer two offer their second
/// closures (queued, not yet run), so the innermost one runs both of its
/// closures inline. Its panics must behave as any join's.
#[test]
fn an_inlined_join_runs_b_after_a_panics_and_resumes_the_first_panic() {
    let rt = Runtime::builder().num_threads(1).build().unwrap();
    let nested = |inner: &(dyn Fn() + Sync)| {
        join(|| join(inner, || ()), || ());
    };
    let before = rt.stats().total().joins_inlined;
    let b_ran = AtomicUsize::new(0);
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.run(|| {
            nested(&|| {
                join(
                    || panic!("a"),
                    || {
                        b_ran.fetch_add(1, Ordering::SeqCst);
                    },
                );
            })
        })
    }));
    assert_eq!(r.unwrap_err().downcast_ref::<&str>(), Some(&"a"));
    assert_eq!(
        b_ran.load(Ordering::SeqCst),
        1,
        "b did not run after a panicked"
    );
    assert_eq!(
        rt.stats().total().joins_inlined - before,
        1,
        "the innermost join was not the inlined one"
    );
    // Both panic: a's payload wins, b's is dropped.
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.run(|| {
            nested(&|| {
                let _ = join(|| -> i32 { panic!("a") }, || -> i32 { panic!("b") });
            })
        })
    }));
    assert_eq!(r.unwrap_err().downcast_ref::<&str>(), Some(&"a"));
    // Only b panics: b's payload.
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.run(|| {
            nested(&|| {
                let _ = join(|| 1, || -> i32 { panic!("b") });
            })
        })
    }));
    assert_eq!(r.unwrap_err().downcast_ref::<&str>(), Some(&"b"));
    assert_eq!(rt.stats().total().joins_inlined - before, 3);
    // The worker survived all three.
    assert_eq!(rt.run(|| fib_join(20)), 6765);
}

#[test]
fn dropped_handles_detach_and_tasks_still_run() {
    let rt = Runtime::builder().num_threads(4).build().unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    rt.run(|| {
        for _ in 0..10_000 {
            let r = ran.clone();
            drop(spawn(move || {
                r.fetch_add(1, Ordering::Relaxed);
            }));
        }
    });
    rt.sync_root();
    assert_eq!(ran.load(Ordering::Relaxed), 10_000);
}

#[test]
fn is_finished_reports_completion() {
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let gate = Arc::new(Mutex::new(()));
    let guard = gate.lock().unwrap();
    let g = gate.clone();
    let h = rt.spawn(move || {
        drop(g.lock().unwrap());
        9
    });
    std::thread::sleep(Duration::from_millis(10));
    assert!(!h.is_finished());
    drop(guard);
    rt.sync_root();
    assert!(h.is_finished());
    assert_eq!(h.join(), 9);
}

/// Counts polls and wakes, so the test can tell a woken future from one
/// polled in a loop.
struct CountingWaker {
    wakes: AtomicUsize,
    thread: std::thread::Thread,
}

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

fn block_on_counting<F: Future>(mut fut: F) -> (F::Output, usize, usize) {
    let cw = Arc::new(CountingWaker {
        wakes: AtomicUsize::new(0),
        thread: std::thread::current(),
    });
    let waker = Waker::from(cw.clone());
    let mut cx = Context::from_waker(&waker);
    // SAFETY: `fut` is not moved after being pinned here.
    let mut fut = unsafe { Pin::new_unchecked(&mut fut) };
    let mut polls = 0;
    loop {
        polls += 1;
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return (v, polls, cw.wakes.load(Ordering::SeqCst));
        }
        // Only poll again once woken.
        while cw.wakes.load(Ordering::SeqCst) < polls {
            std::thread::park();
        }
    }
}

#[test]
fn join_handle_is_a_future_that_wakes_its_caller() {
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let h = rt.spawn(|| {
        std::thread::sleep(Duration::from_millis(30));
        "value"
    });
    let (v, polls, wakes) = block_on_counting(h);
    assert_eq!(v, "value");
    assert!(
        polls <= 2,
        "polled {polls} times: woken, not polled in a loop"
    );
    assert_eq!(wakes, polls - 1);
    // A finished task is ready on first poll.
    let h = rt.spawn(|| 1);
    rt.sync_root();
    assert_eq!(block_on_counting(h), (1, 1, 0));
}

#[test]
fn future_changing_wakers_is_woken_on_the_last_one() {
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let gate = Arc::new(Mutex::new(()));
    let guard = gate.lock().unwrap();
    let g = gate.clone();
    let mut h = rt.spawn(move || {
        drop(g.lock().unwrap());
        5
    });
    let first = Arc::new(CountingWaker {
        wakes: AtomicUsize::new(0),
        thread: std::thread::current(),
    });
    let w1 = Waker::from(first.clone());
    assert!(Pin::new(&mut h)
        .poll(&mut Context::from_waker(&w1))
        .is_pending());
    let (v, _, _) = {
        drop(guard);
        block_on_counting(h)
    };
    assert_eq!(v, 5);
}

#[test]
fn a_future_panic_is_resumed_from_poll() {
    let rt = Runtime::builder().num_threads(1).build().unwrap();
    let h = rt.spawn(|| -> u8 { panic!("in a future") });
    let r = catch_unwind(AssertUnwindSafe(|| block_on_counting(h)));
    assert_eq!(r.unwrap_err().downcast_ref::<&str>(), Some(&"in a future"));
}

#[test]
fn foreign_threads_spawn_onto_the_global_runtime() {
    let hs: Vec<_> = (0..100u64).map(|i| spawn(move || i + 1)).collect();
    assert_eq!(hs.into_iter().map(|h| h.join()).sum::<u64>(), 5050);
    let (a, b) = join(|| 1, || 2);
    assert_eq!(a + b, 3);
    assert!(selvedge::current_num_threads() >= 1);
}

#[test]
fn try_join_async_reports_a_cancelled_task_after_waking_its_caller() {
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let p = selvedge::Promise::new();
    let h = rt.spawn_delayed([p.dep()], || 7);
    let mut fut = h.try_join_async();
    let cw = Arc::new(CountingWaker {
        wakes: AtomicUsize::new(0),
        thread: std::thread::current(),
    });
    let waker = Waker::from(cw.clone());
    // The dependency is still open: pending, and not woken yet.
    assert!(Pin::new(&mut fut)
        .poll(&mut Context::from_waker(&waker))
        .is_pending());
    assert_eq!(cw.wakes.load(Ordering::SeqCst), 0);
    // Broken promise, from another thread: the task is cancelled, and the
    // cancellation wakes the future.
    std::thread::spawn(move || drop(p)).join().unwrap();
    assert_eq!(cw.wakes.load(Ordering::SeqCst), 1);
    let (r, polls, wakes) = block_on_counting(fut);
    assert_eq!((polls, wakes), (1, 0));
    let err = r.unwrap_err();
    assert!(err.is_cancelled() && !err.is_panic(), "{err}");
    assert!(err.to_string().contains("dropped unfulfilled"), "{err}");
}

#[test]
fn try_join_async_reports_a_panicked_task_with_its_payload() {
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let h = rt.spawn(move || -> u8 {
        let _ = wait.recv();
        panic!("in a try future")
    });
    let fut = h.try_join_async();
    let unlock = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(20));
        drop(go);
    });
    let (r, polls, wakes) = block_on_counting(fut);
    unlock.join().unwrap();
    assert!(
        polls <= 2,
        "polled {polls} times: woken, not polled in a loop"
    );
    assert_eq!(wakes, polls - 1);
    let err = r.unwrap_err();
    assert!(err.is_panic() && !err.is_cancelled(), "{err}");
    let payload = err.try_into_panic().ok().unwrap();
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"in a try future"));
    // And a value comes through as Ok.
    assert_eq!(
        block_on_counting(rt.spawn(|| 3).try_join_async())
            .0
            .unwrap(),
        3
    );
}

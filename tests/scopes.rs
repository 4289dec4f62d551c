//! Scopes: borrowing, nesting, descendants, panics.

use selvedge::{scope, Runtime};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

#[test]
fn tasks_borrow_and_mutate_the_callers_stack() {
    for threads in [1, 2, 4, 8] {
        let rt = Runtime::builder().num_threads(threads).build().unwrap();
        let input: Vec<u64> = (0..10_000).collect();
        let mut out = vec![0u64; input.len()];
        rt.run(|| {
            scope(|s| {
                for (o, chunk) in out.chunks_mut(100).zip(input.chunks(100)) {
                    s.spawn(move |_| {
                        for (o, i) in o.iter_mut().zip(chunk) {
                            *o = i * 3;
                        }
                    });
                }
            })
        });
        assert!(out.iter().zip(&input).all(|(o, i)| *o == i * 3));
    }
}

#[test]
fn scopes_nest_and_wait_for_every_descendant() {
    let rt = Runtime::builder().num_threads(4).build().unwrap();
    let count = AtomicUsize::new(0);
    fn grow<'a>(s: &selvedge::Scope<'a>, depth: u32, count: &'a AtomicUsize) {
        count.fetch_add(1, Ordering::Relaxed);
        if depth > 0 {
            for _ in 0..4 {
                s.spawn(move |s| grow(s, depth - 1, count));
            }
        }
    }
    rt.run(|| {
        scope(|s| {
            s.spawn(|s| grow(s, 6, &count));
            // A nested scope inside a task of the outer one.
            s.spawn(|_| {
                let inner = AtomicUsize::new(0);
                scope(|s2| {
                    for _ in 0..100 {
                        s2.spawn(|_| {
                            inner.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                });
                assert_eq!(inner.load(Ordering::Relaxed), 100);
            });
        })
    });
    assert_eq!(count.load(Ordering::Relaxed), (4usize.pow(7) - 1) / 3);
}

#[test]
fn the_first_panic_is_resumed_after_all_tasks_finished() {
    let rt = Runtime::builder().num_threads(4).build().unwrap();
    let finished = AtomicUsize::new(0);
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.run(|| {
            scope(|s| {
                s.spawn(|_| std::panic::panic_any(1u8));
                for _ in 0..50 {
                    s.spawn(|_| {
                        std::thread::sleep(Duration::from_millis(1));
                        finished.fetch_add(1, Ordering::SeqCst);
                    });
                }
            })
        })
    }));
    assert_eq!(*r.unwrap_err().downcast::<u8>().unwrap(), 1);
    assert_eq!(finished.load(Ordering::SeqCst), 50);
    // A panicking body still waits for its tasks.
    let finished = AtomicUsize::new(0);
    let r = catch_unwind(AssertUnwindSafe(|| {
        rt.run(|| {
            scope(|s| {
                s.spawn(|_| {
                    std::thread::sleep(Duration::from_millis(20));
                    finished.fetch_add(1, Ordering::SeqCst);
                });
                panic!("body");
            })
        })
    }));
    assert_eq!(r.unwrap_err().downcast_ref::<&str>(), Some(&"body"));
    assert_eq!(finished.load(Ordering::SeqCst), 1);
}

#[test]
fn scope_outside_a_runtime_uses_the_global_one() {
    let mut v = [0; 8];
    scope(|s| {
        for (i, x) in v.iter_mut().enumerate() {
            s.spawn(move |_| *x = i);
        }
    });
    assert_eq!(v, [0, 1, 2, 3, 4, 5, 6, 7]);
}

#[test]
fn scope_returns_the_body_value() {
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let n = rt.run(|| {
        scope(|s| {
            s.spawn(|_| ());
            7
        })
    });
    assert_eq!(n, 7);
}

/// The last task of a scope is a delayed one, cancelled on a foreign thread
/// that drops the promise's last handle: its decrement releases the owner,
/// which returns at once, and the runtime is dropped right after. The
/// cancelling thread must not touch the scope or the runtime after its
/// decrement (run under AddressSanitizer in CI; the latch's loom model
/// checks the same race exhaustively).
#[test]
fn a_scope_released_by_a_foreign_cancellation_outlives_nothing() {
    use selvedge::Promise;
    use std::sync::mpsc;
    for round in 0..300 {
        let rt = Runtime::builder().num_threads(2).build().unwrap();
        let (tx, rx) = mpsc::channel::<Promise>();
        let dropper = std::thread::spawn(move || drop(rx.recv().unwrap()));
        let result = catch_unwind(AssertUnwindSafe(|| {
            rt.run(|| {
                scope(|s| {
                    let p = Promise::new();
                    s.spawn_delayed([p.dep()], |_| {
                        unreachable!("its promise is never fulfilled")
                    });
                    tx.send(p).unwrap();
                })
            })
        }));
        let payload = result.expect_err("the cancelled task is reported by the scope");
        let message = payload.downcast_ref::<String>().expect("a message");
        assert!(message.contains("cancelled"), "round {round}: {message}");
        drop(rt);
        dropper.join().unwrap();
    }
}

/// A scope's delayed task made ready after its runtime's drop began is
/// cancelled because the runtime shut down, and the scope says so (it
/// used to blame a dropped dependency, whatever the reason).
#[test]
fn a_scope_task_cancelled_by_shutdown_says_so() {
    use selvedge::Promise;
    use std::sync::mpsc;
    let mut shutdowns = 0;
    for _ in 0..5 {
        let rt = Runtime::builder().num_threads(2).build().unwrap();
        let p = Promise::new();
        let dep = p.dep();
        let (tx, rx) = mpsc::channel();
        drop(rt.spawn(move || {
            let r = catch_unwind(AssertUnwindSafe(|| {
                scope(|s| s.spawn_delayed([dep], |_| {}));
            }));
            let message = r.err().and_then(|p| p.downcast_ref::<String>().cloned());
            tx.send(message).unwrap();
        }));
        // The drop waits for the scope, which waits for the promise,
        // fulfilled once the drop has (almost surely) begun.
        let fulfiller = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            p.fulfill();
        });
        drop(rt);
        fulfiller.join().unwrap();
        match rx.recv().unwrap() {
            // The fulfill came first: the task ran; try again.
            None => continue,
            Some(message) => {
                assert!(message.contains("shut down"), "{message}");
                shutdowns += 1;
            }
        }
    }
    assert!(shutdowns > 0, "the fulfill always beat the runtime's drop");
}

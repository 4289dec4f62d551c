//! `Promise::fulfill_when`: workers fulfill a promise themselves once a
//! test says the operation behind it ended, whether they are idle, busy or
//! asleep, and whoever fulfills it first (the test or another handle)
//! ends the testing.

use selvedge::{Promise, Runtime};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// A promise tested by `rt`'s workers, and the flag that ends its
/// operation; `then` runs once it is fulfilled.
fn tested_promise(
    rt: &Runtime,
    then: impl FnOnce() + Send + 'static,
) -> (Promise, Arc<AtomicBool>) {
    let ended = Arc::new(AtomicBool::new(false));
    let promise = Promise::new();
    rt.run(|| {
        let ended = Arc::clone(&ended);
        promise.fulfill_when(move || ended.load(Ordering::Acquire));
    });
    drop(rt.spawn_delayed([promise.dep()], then));
    (promise, ended)
}

/// An operation that ends long after the workers ran out of work is found.
#[test]
fn an_operation_ending_after_the_workers_went_idle_is_found() {
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let (ran_tx, ran) = mpsc::channel();
    let (_promise, ended) = tested_promise(&rt, move || ran_tx.send(()).unwrap());
    // Longer than a worker's spin before it parks.
    std::thread::sleep(Duration::from_millis(50));
    ended.store(true, Ordering::Release);
    ran.recv_timeout(Duration::from_secs(10))
        .expect("the operation ended while the workers were idle, and nothing ran");
}

/// Made from a thread outside the pool while every worker sleeps, for an
/// operation already over: a worker is woken to test it.
#[test]
fn a_promise_tested_from_outside_wakes_a_sleeping_worker() {
    let promise = Promise::new();
    let (ran_tx, ran) = mpsc::channel();
    // The global runtime's workers test it (made outside every runtime).
    drop(selvedge::spawn_delayed([promise.dep()], move || {
        ran_tx.send(()).unwrap()
    }));
    std::thread::sleep(Duration::from_millis(50));
    promise.fulfill_when(|| true);
    ran.recv_timeout(Duration::from_secs(10))
        .expect("made from outside while the workers slept: nobody tested it");
}

/// A worker kept busy by a stream of short tasks (the only one, so never
/// idle) tests between them.
#[test]
fn a_busy_worker_tests_between_tasks() {
    const STREAM: usize = 100_000;
    let rt = Runtime::builder().num_threads(1).build().unwrap();
    let done = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(AtomicUsize::new(usize::MAX));
    let (d, s) = (Arc::clone(&done), Arc::clone(&seen));
    let (_promise, ended) = tested_promise(&rt, move || {
        s.store(d.load(Ordering::Relaxed), Ordering::Relaxed)
    });
    rt.run(|| {
        selvedge::scope(|sc| {
            for _ in 0..STREAM {
                let (done, ended) = (&done, &ended);
                sc.spawn(move |_| {
                    let t = Instant::now();
                    while t.elapsed() < Duration::from_micros(1) {}
                    if done.fetch_add(1, Ordering::Relaxed) + 1 == 100 {
                        ended.store(true, Ordering::Release);
                    }
                });
            }
        })
    });
    let seen = seen.load(Ordering::Relaxed);
    assert!(
        seen < STREAM / 2,
        "the task waiting on the operation, ended after task 100, ran after {seen} of {STREAM} tasks"
    );
}

/// Fulfilled by another handle (an operation's own callback): the test is
/// called no more.
#[test]
fn a_promise_fulfilled_elsewhere_is_tested_no_more() {
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let tests = Arc::new(AtomicUsize::new(0));
    let promise = Promise::new();
    rt.run(|| {
        let tests = Arc::clone(&tests);
        promise.fulfill_when(move || {
            tests.fetch_add(1, Ordering::Relaxed);
            false
        });
    });
    std::thread::sleep(Duration::from_millis(20));
    assert!(tests.load(Ordering::Relaxed) > 0, "never tested");
    assert!(promise.fulfill());
    // One more test at most finds it fulfilled and drops it.
    std::thread::sleep(Duration::from_millis(20));
    let after = tests.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(tests.load(Ordering::Relaxed), after, "still tested");
}

/// A test that panics is reported and tested no more; the promise breaks
/// once its last handle goes, and what waits on it is cancelled.
#[test]
fn a_panicking_test_is_reported_and_its_promise_breaks() {
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let tests = Arc::new(AtomicUsize::new(0));
    let promise = Promise::new();
    let waiting = rt.spawn_delayed([promise.dep()], || ());
    rt.run(|| {
        let tests = Arc::clone(&tests);
        promise.fulfill_when(move || {
            tests.fetch_add(1, Ordering::Relaxed);
            panic!("a test that panics");
        });
    });
    drop(promise);
    let e = waiting.try_join().expect_err("ran without its promise");
    assert!(e.is_cancelled(), "{e}");
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(tests.load(Ordering::Relaxed), 1);
    // The workers survived it.
    assert_eq!(rt.run(|| selvedge::join(|| 1, || 2)), (1, 2));
}

/// A promise being tested does not count as work: `sync_root` and the
/// runtime's drop return while it is, and while other operations keep
/// beginning and ending (the worker that keeps testing parks while they
/// wait).
#[test]
fn sync_root_and_the_drop_do_not_wait_for_a_tested_promise() {
    let (done_tx, done) = mpsc::channel();
    std::thread::spawn(move || {
        let rt = Arc::new(Runtime::builder().num_threads(2).build().unwrap());
        let promise = Promise::new();
        rt.run(|| promise.fulfill_when(|| false));
        // Operations that begin and end every millisecond, so that a
        // worker keeps testing (between them the runtime is quiescent).
        let stop = Arc::new(AtomicBool::new(false));
        let activity = {
            let (rt, stop) = (Arc::clone(&rt), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    rt.run(|| Promise::new().fulfill_when(|| true));
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        };
        // Several times: each wait must find the worker that keeps testing
        // parked.
        for _ in 0..10 {
            std::thread::sleep(Duration::from_millis(5));
            rt.sync_root();
        }
        done_tx.send("sync_root").unwrap();
        stop.store(true, Ordering::Relaxed);
        activity.join().unwrap();
        drop(rt);
        done_tx.send("drop").unwrap();
    });
    // Each returns within milliseconds (between two of the operations);
    // without the worker that keeps testing parking, never.
    for what in ["sync_root", "drop"] {
        assert_eq!(
            done.recv_timeout(Duration::from_secs(30)),
            Ok(what),
            "{what} waited for a promise still being tested"
        );
    }
}

/// While a thread waits for the runtime to be quiescent, the workers park,
/// but come back to test: an operation that ends then is found before the
/// task keeping the runtime busy ends.
#[test]
fn workers_parked_while_quiescence_is_awaited_still_test() {
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let long_done = Arc::new(AtomicBool::new(false));
    let ran_before_long_task_ended = Arc::new(AtomicUsize::new(0));
    let (l, r) = (
        Arc::clone(&long_done),
        Arc::clone(&ran_before_long_task_ended),
    );
    let (_promise, ended) = tested_promise(&rt, move || {
        r.store(
            if l.load(Ordering::SeqCst) { 1 } else { 2 },
            Ordering::SeqCst,
        )
    });
    let l = Arc::clone(&long_done);
    drop(rt.spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        l.store(true, Ordering::SeqCst);
    }));
    let ender = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        ended.store(true, Ordering::Release);
    });
    rt.sync_root();
    ender.join().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while ran_before_long_task_ended.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "never ran");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        ran_before_long_task_ended.load(Ordering::SeqCst),
        2,
        "the operation ended 400 ms before the long task, and was found only after it"
    );
}

/// Made by a task that stays busy, while the other workers sleep: one of
/// them is woken to test it.
#[test]
fn a_promise_tested_from_a_busy_worker_wakes_a_sleeping_one() {
    let rt = Runtime::builder().num_threads(4).build().unwrap();
    rt.run(|| ());
    // Every worker asleep.
    std::thread::sleep(Duration::from_millis(50));
    let ran = Arc::new(AtomicBool::new(false));
    let r = Arc::clone(&ran);
    let waited = rt.run(move || {
        let promise = Promise::new();
        // The waiting task first: the worker that fulfills the promise
        // then runs it. (Made after, it could be readied here, by this
        // worker, and wait for it.)
        drop(selvedge::spawn_delayed([promise.dep()], move || {
            r.store(true, Ordering::SeqCst)
        }));
        promise.fulfill_when(|| true);
        // Busy: this worker tests nothing until it returns.
        let t = Instant::now();
        while !ran.load(Ordering::SeqCst) && t.elapsed() < Duration::from_secs(10) {
            std::hint::spin_loop();
        }
        t.elapsed()
    });
    assert!(
        waited < Duration::from_secs(10),
        "nobody tested the promise while the worker that made it was busy"
    );
}

/// The test's closure dropping with a panic is reported; nothing else
/// happens (the worker that dropped it goes on).
#[test]
fn a_test_whose_drop_panics_is_reported() {
    struct PanicsOnDrop;
    impl Drop for PanicsOnDrop {
        fn drop(&mut self) {
            panic!("a test's capture that panics when dropped");
        }
    }
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let promise = Promise::new();
    let held = PanicsOnDrop;
    rt.run(|| {
        promise.fulfill_when(move || {
            let _ = &held;
            true
        })
    });
    let after = rt.spawn_delayed([promise.dep()], || "ran");
    assert_eq!(after.join(), "ran");
    assert_eq!(rt.run(|| selvedge::join(|| 1, || 2)), (1, 2));
}

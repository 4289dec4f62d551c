//! The fallback poller's sleep (`FallbackWatch`): a thread posts an
//! operation while the fallback decides whether to sleep until one is
//! posted. Either the fallback sees the operation in flight and stays
//! awake, or the poster sees it asleep and unparks it: never an operation
//! in flight with its fallback asleep for good (loom reports that as a
//! deadlock: its park has no timeout).
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use loom_tests::support::model;
use selvedge::protocols::FallbackWatch;

#[test]
fn an_operation_posted_while_the_fallback_sleeps_wakes_it() {
    model(|| {
        let watch = Arc::new(FallbackWatch::new());
        // The engine's command queue: the posted operation.
        let queue = Arc::new(Mutex::new(false));
        let started = Arc::new(AtomicBool::new(false));
        let fallback = {
            let (watch, queue, started) = (watch.clone(), queue.clone(), started.clone());
            thread::spawn(move || loop {
                // A round: takes what was posted.
                if std::mem::take(&mut *queue.lock().unwrap()) {
                    started.store(true, Ordering::Relaxed);
                    watch.end();
                    return;
                }
                if watch.sleep_if_idle() {
                    thread::park();
                    watch.woke();
                } else {
                    // Counted but not queued yet: the next round takes it.
                    thread::yield_now();
                }
            })
        };
        // `Engine::post`: counted, queued, then the fallback woken if it
        // sleeps for good.
        let wake = watch.begin();
        *queue.lock().unwrap() = true;
        if wake {
            fallback.thread().unpark();
        }
        fallback.join().unwrap();
        assert!(started.load(Ordering::Relaxed));
    });
}

#[test]
fn a_fallback_with_nothing_posted_sleeps_and_a_later_post_wakes_it() {
    model(|| {
        let watch = Arc::new(FallbackWatch::new());
        let queue = Arc::new(Mutex::new(0u32));
        let fallback = {
            let (watch, queue) = (watch.clone(), queue.clone());
            thread::spawn(move || {
                let mut taken = 0;
                while taken < 2 {
                    let now = std::mem::take(&mut *queue.lock().unwrap());
                    for _ in 0..now {
                        watch.end();
                    }
                    taken += now;
                    if now == 0 {
                        if watch.sleep_if_idle() {
                            thread::park();
                            watch.woke();
                        } else {
                            thread::yield_now();
                        }
                    }
                }
            })
        };
        for _ in 0..2 {
            let wake = watch.begin();
            *queue.lock().unwrap() += 1;
            if wake {
                fallback.thread().unpark();
            }
        }
        fallback.join().unwrap();
    });
}

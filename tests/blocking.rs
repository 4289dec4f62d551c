//! A task that blocks where the runtime cannot see it (a channel, a lock, a
//! sleep) must not strand the tasks queued behind it: idle workers rescue
//! them. Each test runs under a watchdog that fails it instead of hanging.
//!
//! A blocked task still needs one free worker: when every worker blocks on
//! work only the pool could do, nothing can run it (as in any fixed pool).

use selvedge::{block_in_place, spawn, Runtime};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// Runs `f` on another thread and fails if it has not finished in 60 s.
fn watchdog<T: Send + 'static>(name: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => {
            panic!("{name}: still running after 60 s (tasks stranded behind a blocked worker)")
        }
    }
}

fn runtime(n: usize) -> Runtime {
    Runtime::builder().num_threads(n).build().unwrap()
}

#[test]
fn children_of_a_task_blocked_on_a_channel_run() {
    let sum = watchdog("mpsc", || {
        let rt = runtime(4);
        rt.run(|| {
            let hs: Vec<_> = (0..4).map(|i| spawn(move || i)).collect();
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                tx.send(hs.into_iter().map(|h| h.join()).sum::<usize>())
                    .unwrap()
            });
            rx.recv().unwrap()
        })
    });
    assert_eq!(sum, 6);
}

#[test]
fn a_child_starts_while_its_parent_sleeps() {
    let started_in_time = watchdog("sleep", || {
        let rt = runtime(4);
        rt.run(|| {
            let woke = Arc::new(AtomicBool::new(false));
            // Each child records whether its parent was still asleep. More
            // than one: a spawn hands only the oldest task straight to a
            // parked worker, so the later ones wait for a rescue.
            let hs: Vec<_> = (0..8)
                .map(|_| {
                    let w = woke.clone();
                    spawn(move || !w.load(Ordering::SeqCst))
                })
                .collect();
            std::thread::sleep(Duration::from_secs(2));
            woke.store(true, Ordering::SeqCst);
            hs.into_iter().map(|h| h.join()).collect::<Vec<_>>()
        })
    });
    assert!(
        started_in_time.iter().all(|&b| b),
        "children waited for their parent's sleep: {started_in_time:?}"
    );
}

#[test]
fn a_task_blocked_on_a_mutex_held_by_a_thread_waiting_for_its_children() {
    let total = watchdog("mutex", || {
        let rt = runtime(3);
        rt.run(|| {
            let lock = Arc::new(Mutex::new(0usize));
            let guard_taken = Arc::new(AtomicBool::new(false));
            let hs: Vec<_> = (0..8).map(|i| spawn(move || i + 1)).collect();
            let (l, g) = (lock.clone(), guard_taken.clone());
            let holder = std::thread::spawn(move || {
                let mut guard = l.lock().unwrap();
                g.store(true, Ordering::SeqCst);
                *guard = hs.into_iter().map(|h| h.join()).sum();
            });
            while !guard_taken.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            let v = *lock.lock().unwrap();
            holder.join().unwrap();
            v
        })
    });
    assert_eq!(total, 36);
}

#[test]
fn block_in_place_hands_queued_work_away() {
    let (sum, handed) = watchdog("block_in_place", || {
        let rt = runtime(2);
        rt.run(|| {
            let hs: Vec<_> = (0..16u64).map(|i| spawn(move || i)).collect();
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(hs.into_iter().map(|h| h.join()).sum::<u64>());
            });
            block_in_place(|| {
                // Counted from the hand-off on (a rescue before it, while
                // this task was still spawning, is not block_in_place's):
                // no task had to be rescued while it blocked. (An idle
                // worker may still answer, for the blocked one, a steal
                // request that came later: that moves no task.)
                let rescues = rt.stats().total().rescues;
                let sum = rx.recv().unwrap();
                (sum, rt.stats().total().rescues == rescues)
            })
        })
    });
    assert_eq!(sum, 120);
    assert!(handed, "block_in_place left work to be rescued");
}

#[test]
fn block_in_place_outside_a_worker_runs_the_closure() {
    assert_eq!(block_in_place(|| 7), 7);
}

#[test]
fn many_tasks_that_spawn_then_block_all_finish() {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) * 2 + 1;
    let done = watchdog("stress", move || {
        let rt = runtime(threads);
        let done = Arc::new(AtomicUsize::new(0));
        for round in 0..4u64 {
            let d = done.clone();
            let got = rt.run(move || {
                let hs: Vec<_> = (0..64u64)
                    .map(|i| {
                        let d = d.clone();
                        spawn(move || {
                            let kids: Vec<_> =
                                (0..4u64).map(|k| spawn(move || i * 4 + k)).collect();
                            let s = match (i + round) % 3 {
                                0 => {
                                    std::thread::sleep(Duration::from_micros((i % 3) * 1000));
                                    kids.into_iter().map(|h| h.join()).sum::<u64>()
                                }
                                1 => {
                                    // Blocks on a channel fed by a foreign thread
                                    // (not by the pool: with every worker blocked
                                    // on the pool's own work, nothing could run it).
                                    let (tx, rx) = mpsc::channel();
                                    std::thread::spawn(move || {
                                        std::thread::sleep(Duration::from_micros((i % 3) * 1000));
                                        tx.send(0u64).unwrap()
                                    });
                                    rx.recv().unwrap()
                                        + kids.into_iter().map(|h| h.join()).sum::<u64>()
                                }
                                _ => kids.into_iter().map(|h| h.join()).sum::<u64>(),
                            };
                            d.fetch_add(1, Ordering::Relaxed);
                            s
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join()).sum::<u64>()
            });
            // Sum over i < 64, k < 4 of 4i + k.
            assert_eq!(got, (0..256u64).sum::<u64>(), "round {round}");
        }
        done.load(Ordering::Relaxed)
    });
    assert_eq!(done, 4 * 64);
}

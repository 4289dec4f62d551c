//! What the test binaries share. Not a test target of its own (a
//! directory without `main.rs`); a test file that needs it says
//! `mod support;`.
#![allow(dead_code)]

use selvedge::LoopPromise;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Aborts the test binary, naming what hung, unless dropped within its
/// limit: a hang fails the test run instead of stalling it. Dropping it
/// (also by unwinding out of a failed assertion) lets its thread go.
pub struct Watchdog(mpsc::Sender<()>);

impl Watchdog {
    /// Starts the clock for `what` (said in the abort message).
    pub fn new(what: impl Into<String>, limit: Duration) -> Self {
        let what = what.into();
        let (tx, rx) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                eprintln!("{what}: still not finished after {limit:?}; aborting");
                std::process::abort();
            }
        });
        Watchdog(tx)
    }
}

/// A wavefront of `side` x `side` delayed tasks, all made by the calling
/// task: tile (i, j) waits for (i - 1, j) and (i, j - 1) and does `rounds`
/// steps of a little work, so that other workers take part. Joins the
/// last tile and returns its value (the same every call with the same
/// arguments).
pub fn wavefront_made_up_front(side: usize, rounds: u64) -> u64 {
    let done = Arc::new(LoopPromise::new(0..side * side));
    let values: Arc<Vec<AtomicU64>> =
        Arc::new((0..side * side).map(|_| AtomicU64::new(0)).collect());
    for idx in 0..side * side {
        let (i, j) = (idx / side, idx % side);
        let deps = [
            (i > 0).then(|| done.at(idx - side)),
            (j > 0).then(|| done.at(idx - 1)),
        ];
        let (done, values) = (done.clone(), values.clone());
        drop(selvedge::spawn_delayed(
            deps.into_iter().flatten(),
            move || {
                let up = if i > 0 {
                    values[idx - side].load(Ordering::Relaxed)
                } else {
                    1
                };
                let left = if j > 0 {
                    values[idx - 1].load(Ordering::Relaxed)
                } else {
                    1
                };
                let v = (0..rounds).fold(up ^ left.rotate_left(7), |a, x| {
                    std::hint::black_box(a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ x)
                });
                values[idx].store(v, Ordering::Relaxed);
                done.fulfill(idx);
            },
        ));
    }
    selvedge::spawn_delayed([done.at(side * side - 1)], || ()).join();
    values[side * side - 1].load(Ordering::Relaxed)
}

/// From a task of a runtime with more than `n` workers: spawns `n` tasks
/// that each sit in a call of `hold` (a sleep), and returns once all of
/// them started, so that `n` workers are busy elsewhere while the caller
/// goes on. Join the handles before the calls end.
pub fn occupy_workers(n: usize, hold: Duration) -> Vec<selvedge::JoinHandle<()>> {
    let started = Arc::new(AtomicUsize::new(0));
    let blockers: Vec<_> = (0..n)
        .map(|_| {
            let started = started.clone();
            selvedge::spawn(move || {
                started.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(hold);
            })
        })
        .collect();
    // The caller sits in user code here: idle workers take the blockers
    // from its deque on its behalf.
    let deadline = Instant::now() + Duration::from_secs(10);
    while started.load(Ordering::Relaxed) < n {
        assert!(Instant::now() < deadline, "the blockers never started");
        std::thread::yield_now();
    }
    blockers
}

/// The message of a panic payload (a `&str` or a `String`), or a
/// placeholder.
pub fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "<not a string>".to_string()
    }
}

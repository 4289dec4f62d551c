//! The signal inbox (`selvedge::protocols::SignalInbox`): device callbacks fire
//! pre-allocated signals by pushing them onto an intrusive stack, and
//! workers drain it and run the signals' actions. In every interleaving
//! each action must run exactly once, on the draining thread, after
//! everything its firer wrote (loom checks the cell as a data race); a
//! signal abandoned while it fires must have its action either run or
//! handed to the abandoner, never both, never neither; and the pending
//! count must come back to zero.
#![cfg(loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::model;
use selvedge::protocols::{SignalInbox, SignalRef};

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

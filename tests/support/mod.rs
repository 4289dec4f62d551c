//! What the test binaries share. Not a test target of its own (a
//! directory without `main.rs`); a test file that needs it says
//! `mod support;`.
#![allow(dead_code)]

use std::sync::mpsc;
use std::time::Duration;

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

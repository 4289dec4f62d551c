//! The shutdown gate: how a runtime's drop and the threads that queue ready
//! tasks from outside its workers agree on whether a task still gets in.
//!
//! A delayed task made ready by a fulfill on a foreign thread is queued
//! without any handle on the runtime, so it can race the runtime's drop. The
//! gate is a Dekker pair: a queuer announces itself (`enter`), then checks
//! that the gate is open; the closer shuts it (`close`), then waits until no
//! queuer is inside. Both sides put a SeqCst fence between their write and
//! their read, so either the closer waits for
//! the queuer's push to finish (and its quiescence check then sees the task),
//! or the queuer sees the gate shut and cancels its task. Never neither.

// Its `pub` items are the loom models' API (`selvedge::protocols`, built
// with `--cfg loom`); elsewhere they are the crate's own.
#![cfg_attr(not(loom), allow(unreachable_pub))]

use crate::core::sync::{fence, AtomicBool, AtomicUsize, Ordering};

/// See the module documentation.
#[derive(Debug, Default)]
pub struct Gate {
    closed: AtomicBool,
    inside: AtomicUsize,
}

impl Gate {
    /// An open gate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Enters the gate if it is open: then the caller must queue its task
    /// and call [`Gate::leave`]. Returns `false` when the gate is shut.
    pub fn enter(&self) -> bool {
        self.inside.fetch_add(1, Ordering::SeqCst);
        // The fences make the pair a Dekker handshake (loom checks SeqCst
        // fences; it treats SeqCst accesses alone as acquire/release).
        fence(Ordering::SeqCst);
        if self.closed.load(Ordering::SeqCst) {
            self.inside.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Leaves the gate after queuing (release: the push is visible to the
    /// closer that sees us gone).
    pub fn leave(&self) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }

    /// Whether the gate was shut (a hint: it may shut right after a
    /// `false`; only [`Gate::enter`] decides whether something gets in).
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Shuts the gate and waits until every queuer inside has left.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        while self.inside.load(Ordering::SeqCst) != 0 {
            // A queuer inside is a few instructions from leaving.
            crate::core::sync::thread::yield_now();
        }
    }
}

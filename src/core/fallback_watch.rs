//! When the fallback poller of a completion source may sleep for good.
//!
//! A completion source (an MPI cluster's operations) is tested by idle
//! workers, and by a thread of its own that guarantees progress when every
//! worker is busy. That fallback tests at intervals while operations are
//! in flight; with none it sleeps until one begins, so that an idle source
//! costs no core. Waking it costs a system call and a thread competing for
//! a core, so a thread that begins an operation wakes it only when it
//! sleeps for good: not at every operation.
//!
//! A Dekker pair: the fallback stores `sleeping`, then reads the count in
//! flight, and sleeps only if it is zero; a beginner adds to the count,
//! then reads `sleeping`, and wakes the fallback if it is set. A SeqCst
//! fence between the write and the read on each side: either the fallback
//! sees the operation, or the beginner sees the fallback asleep (and its
//! unpark, which `std::thread::park` keeps as a token, cannot land too
//! early). Modelled under loom in `loom-tests/tests/models/fallback_watch.rs`,
//! which fails with either fence weakened.

// Its `pub` items are the loom models' API (`selvedge::protocols`, built
// with `--cfg loom`); elsewhere they are the crate's own.
#![cfg_attr(not(loom), allow(unreachable_pub))]
// Counted and polled by MPI clusters (and the unit tests and loom models).
#![cfg_attr(not(feature = "mpi"), allow(dead_code))]

use crate::core::sync::{fence, AtomicBool, AtomicUsize, Ordering};
use crossbeam_utils::CachePadded;

/// Operations in flight, and whether the fallback sleeps until one begins.
#[derive(Debug, Default)]
pub struct FallbackWatch {
    /// Read by idle workers in every round without work: a line of its own.
    in_flight: CachePadded<AtomicUsize>,
    sleeping: AtomicBool,
}

impl FallbackWatch {
    /// Nothing in flight, the fallback awake.
    pub fn new() -> Self {
        Self::default()
    }

    /// An operation begins; whether the fallback sleeps for good and must be
    /// woken (unparked) by the caller.
    pub fn begin(&self) -> bool {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        // The pair with `sleep_if_idle`'s fence (see the module docs).
        fence(Ordering::SeqCst);
        self.sleeping.load(Ordering::Relaxed)
    }

    /// An operation that began has ended (completed, failed or was
    /// abandoned).
    pub fn end(&self) {
        // Relaxed: only a hint for pollers and the fallback; what the
        // operation produced is handed over by its signal.
        let before = self.in_flight.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "an operation ended that never began");
    }

    /// The fallback is about to sleep until woken: whether it may (nothing
    /// in flight). If it may, it must park and then call
    /// [`FallbackWatch::woke`]; a beginner that sees it asleep unparks it.
    pub fn sleep_if_idle(&self) -> bool {
        self.sleeping.store(true, Ordering::Relaxed);
        // The pair with `begin`'s fence (see the module docs).
        fence(Ordering::SeqCst);
        if self.in_flight.load(Ordering::Relaxed) != 0 {
            self.sleeping.store(false, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// The fallback woke (unparked, or spuriously): beginners need not wake
    /// it until it sleeps again.
    pub fn woke(&self) {
        self.sleeping.store(false, Ordering::Relaxed);
    }
}

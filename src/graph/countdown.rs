//! A graph node's count of unfinished predecessors, used run after run.
//!
//! Each predecessor that finishes counts the node down once; the one that
//! brings the count to zero readies the node and, in the same step, sets
//! the count back to the number of predecessors for the next run (all of
//! them have counted down by then, and the next count-down belongs to the
//! next run, which starts only after this one ended). A predecessor that
//! failed (panicked, or was skipped) marks the node cancelled before it
//! counts down; whoever readies the node reads the mark when it settles the
//! node, and clears it for the next run.
//!
//! Orderings: the count-down is AcqRel. Its release half publishes the
//! predecessor's effects (its node's writes) and its cancellation mark; all
//! the count-downs of one run form one release sequence on the count, so
//! the acquire half of the last one sees every predecessor's. A node with a
//! single predecessor has no count to update: that predecessor readies it
//! in program order, and whatever hands the node to another thread (a
//! deque) orders it.
//!
//! The loom model is `loom-tests/tests/models/graph_countdown.rs`.

// Its `pub` items are the loom models' API (`selvedge::protocols`, built
// with `--cfg loom`); elsewhere they are the crate's own.
#![cfg_attr(not(loom), allow(unreachable_pub))]

use crate::core::sync::{AtomicBool, AtomicU32, Ordering};

/// See the module docs.
#[derive(Debug)]
pub struct Countdown {
    predecessors: u32,
    pending: AtomicU32,
    cancelled: AtomicBool,
}

impl Countdown {
    /// The count of a node with `predecessors` predecessors, ready for a
    /// run.
    pub fn new(predecessors: u32) -> Self {
        Self {
            predecessors,
            pending: AtomicU32::new(predecessors),
            cancelled: AtomicBool::new(false),
        }
    }

    /// Counts the node down for a finished predecessor (`failed`: it
    /// panicked or was skipped, so the node is to be skipped); returns
    /// whether this made the node ready. Called once per edge per run, by
    /// the thread that ran (or skipped) the predecessor.
    #[inline]
    pub fn count_down(&self, failed: bool) -> bool {
        if failed {
            // Relaxed: the count-down below releases it to whoever readies
            // the node.
            self.cancelled.store(true, Ordering::Relaxed);
        }
        if self.predecessors == 1 {
            return true;
        }
        if self.pending.fetch_sub(1, Ordering::AcqRel) != 1 {
            return false;
        }
        // Every predecessor has counted down; the next count-down is the
        // next run's, ordered after this by the end of this run.
        self.pending.store(self.predecessors, Ordering::Relaxed);
        true
    }

    /// Whether the ready node is to be skipped in this run; clears the mark
    /// for the next. Called once per run by whoever owns the ready node.
    #[inline]
    pub fn settle(&self) -> bool {
        // Relaxed: the count-down that readied the node acquired the mark
        // (or this thread set it, or a deque hand-off ordered it).
        let cancelled = self.cancelled.load(Ordering::Relaxed);
        if cancelled {
            self.cancelled.store(false, Ordering::Relaxed);
        }
        cancelled
    }
}

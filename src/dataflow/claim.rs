//! `Claim`: which of two parties finishes with a parked task's node (the
//! protocol side, settling its waiter, and its runtime's registry of
//! parked tasks, at shutdown), and when the node's memory is freed.

// Its `pub` items are the loom models' API (`selvedge::protocols`, built
// with `--cfg loom`); elsewhere they are the crate's own.
#![cfg_attr(not(loom), allow(unreachable_pub))]

use crate::core::sync::{AtomicUsize, Ordering};

/// One reference on a [`Claim`]'s node.
const CLAIM_REF: usize = 2;
/// The claim bit of a [`Claim`].
const CLAIMED: usize = 1;

/// Who finishes with a parked task's node, when two parties may.
///
/// A delayed task that parked is known to two parties: the protocol (whoever
/// drains its waiter and settles an [`Outcome`] for it) and its runtime's
/// registry of parked tasks (which, when the runtime is dropped, takes back
/// the tasks that can never run there). Either may try to take the task:
/// [`Claim::claim`] lets exactly one of them win, and the winner alone runs
/// or cancels the task. (On a worker of the node's runtime, where the
/// registry's reclaim cannot run, the protocol side that finds the claim
/// open takes the task without claiming it: see `delayed.rs`.) The node's
/// memory holds one reference per party and is freed by whichever
/// [`Claim::release`]s last (or, for a node inside its task's block, left
/// to that party to act on the task), so a party that lost the claim (or
/// never tried) may still read the node until it lets go.
///
/// The protocol side never learns of a claim by the registry until the
/// waiter's events close: the waiter stays linked, is advanced like any
/// other, and its outcome, once settled, finds the claim taken.
#[derive(Debug)]
pub struct Claim {
    /// `CLAIMED`, plus `CLAIM_REF` per party still holding the node.
    state: AtomicUsize,
}

impl Claim {
    /// Unclaimed, with both parties' references.
    pub fn new() -> Self {
        Self {
            state: AtomicUsize::new(2 * CLAIM_REF),
        }
    }

    /// Takes the claim; `true` for the one caller that wins it.
    ///
    /// What the winner then reads of the node was written before the node
    /// was handed to either party (through an event's release or the
    /// registry's lock), so the claim needs no ordering of its own for
    /// that; Acquire costs nothing more on the platforms we run on and
    /// keeps the winner after everything the loser did before its claim.
    pub fn claim(&self) -> bool {
        self.state.fetch_or(CLAIMED, Ordering::Acquire) & CLAIMED == 0
    }

    /// Whether a party took the claim. Acquire: a claim taken before the
    /// caller's thread was told of the node in any way (the runtime that
    /// took it was dropped, say, before the caller's runtime was made) is
    /// seen.
    pub fn is_claimed(&self) -> bool {
        self.state.load(Ordering::Acquire) & CLAIMED != 0
    }

    /// Gives up the caller's reference; `true` for the last one, whose
    /// caller must free the node (or act on the task whose block holds it).
    ///
    /// Release, then Acquire for the last, as `Arc`'s drop: everything the
    /// other party did with the node (the winner taking the task out of
    /// it) happens before the free.
    pub fn release(&self) -> bool {
        let old = self.state.fetch_sub(CLAIM_REF, Ordering::Release);
        debug_assert!(old >= CLAIM_REF, "claim released more than twice");
        if old & !CLAIMED != CLAIM_REF {
            return false;
        }
        crate::core::sync::fence(Ordering::Acquire);
        true
    }
}

impl Default for Claim {
    fn default() -> Self {
        Self::new()
    }
}

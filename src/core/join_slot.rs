//! The join-slot protocol: how a task's runner and its handle agree on when
//! the result is ready, who wakes whom, and who frees the task block.
//!
//! Two parties share a block: the *runner* (whoever executes the task) and the
//! *handle* (a `JoinHandle`, which may be joined, awaited, polled with changing
//! wakers, or dropped). Everything they need to agree on lives in one state
//! word:
//!
//! - `COMPLETE`: the result is written (release) and may be read (acquire).
//! - `WAITER`: the waker cell holds a waker that the runner must wake. While
//!   it is set the handle only reads the cell; while it is clear and the task
//!   is not complete, the handle alone owns the cell.
//! - `HANDLE_GONE` / `RUNNER_GONE`: that party will not touch the block again.
//!   Whoever sets the second of the two frees the block.
//! - `RESULT_TAKEN`: set together with `HANDLE_GONE` when the handle moved the
//!   result out, so a runner that frees the block does not drop it twice.
//!
//! The common case costs one CAS on the runner's side (`COMPLETE |
//! RUNNER_GONE` when nobody is waiting) and one load on the handle's side (it
//! sees `RUNNER_GONE` and frees without a read-modify-write). A task joined
//! while still in its owner's deque never touches this state at all.

use crate::core::sync::{AtomicUsize, Ordering, UnsafeCell};
use std::task::Waker;

const COMPLETE: usize = 1;
const WAITER: usize = 2;
const HANDLE_GONE: usize = 4;
const RUNNER_GONE: usize = 8;
const RESULT_TAKEN: usize = 16;
/// Set by [`JoinSlot::poison`] in the loom models: the block was freed.
#[cfg(loom)]
const POISONED: usize = 1 << 31;

/// In the loom models, fails when a party touches a freed block.
#[inline(always)]
fn check_live(_state: usize) {
    #[cfg(loom)]
    assert!(_state & POISONED == 0, "join slot used after it was freed");
}

/// What the caller of [`JoinSlot::complete`] or
/// [`JoinSlot::release_handle`] must do with the block afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The other party still uses the block: leave it alone.
    Keep,
    /// The caller was the last party: free the block, and drop the stored
    /// result first when `drop_result` is true.
    Free {
        /// The result is still in the block and must be dropped.
        drop_result: bool,
    },
}

/// The shared state of one task between its runner and its handle.
#[derive(Debug)]
pub struct JoinSlot {
    state: AtomicUsize,
    waker: UnsafeCell<Option<Waker>>,
}

impl Default for JoinSlot {
    fn default() -> Self {
        Self::new()
    }
}

impl JoinSlot {
    /// A completion with a live handle and a runner to come.
    pub fn new() -> Self {
        Self {
            state: AtomicUsize::new(0),
            waker: UnsafeCell::new(None),
        }
    }

    /// Whether the result has been published.
    #[inline]
    pub fn is_complete(&self) -> bool {
        self.state.load(Ordering::Acquire) & COMPLETE != 0
    }

    /// Runner side: the result is written; publish it and wake a waiter.
    pub fn complete(&self) -> Release {
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            check_live(s);
            debug_assert_eq!(s & (COMPLETE | RUNNER_GONE), 0, "completed twice");
            if s & WAITER == 0 {
                // Nobody to wake: publish and leave in one step.
                match self.state.compare_exchange_weak(
                    s,
                    s | COMPLETE | RUNNER_GONE,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) if s & HANDLE_GONE != 0 => return Release::Free { drop_result: true },
                    Ok(_) => return Release::Keep,
                    Err(actual) => s = actual,
                }
            } else {
                match self.state.compare_exchange_weak(
                    s,
                    s | COMPLETE,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break,
                    Err(actual) => s = actual,
                }
            }
        }
        // WAITER was set when we completed, so the handle only reads the cell
        // from now on and cannot free the block before RUNNER_GONE.
        self.waker.with(|w| {
            // SAFETY: shared read; the handle writes the cell only while
            // WAITER is clear and COMPLETE is not set, and both were
            // excluded above.
            if let Some(w) = unsafe { &*w } {
                // The waker is user code. A panic must neither kill the
                // runner nor skip RUNNER_GONE below (the block would leak):
                // it is reported, and the handle finds the result complete
                // when it looks again.
                crate::core::unwind::catch_and_report("a waker's wake", || w.wake_by_ref());
            }
        });
        let prev = self.state.fetch_or(RUNNER_GONE, Ordering::AcqRel);
        check_live(prev);
        if prev & HANDLE_GONE != 0 {
            Release::Free {
                drop_result: prev & RESULT_TAKEN == 0,
            }
        } else {
            Release::Keep
        }
    }

    /// Handle side: arrange for `waker` to be woken on completion. Returns
    /// true when the task is already complete (then nothing is registered).
    pub fn register(&self, waker: &Waker) -> bool {
        let mut s = self.state.load(Ordering::Acquire);
        if s & COMPLETE != 0 {
            return true;
        }
        if s & WAITER != 0 {
            // SAFETY: shared read while WAITER is set; the runner only reads.
            let same = self
                .waker
                .with(|w| unsafe { &*w }.as_ref().is_some_and(|w| w.will_wake(waker)));
            if same {
                return false;
            }
            // Take the cell back before replacing the waker.
            loop {
                if s & COMPLETE != 0 {
                    return true;
                }
                match self.state.compare_exchange_weak(
                    s,
                    s & !WAITER,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break,
                    Err(actual) => s = actual,
                }
            }
        }
        // SAFETY: WAITER is clear and the task not complete, so the runner
        // will not read the cell until we set WAITER again.
        self.waker.with_mut(|w| unsafe { *w = Some(waker.clone()) });
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            if s & COMPLETE != 0 {
                return true;
            }
            match self.state.compare_exchange_weak(
                s,
                s | WAITER,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return false,
                Err(actual) => s = actual,
            }
        }
    }

    /// Handle side: the handle is done with the block. `result_taken` says
    /// whether it moved the result out (only possible after completion).
    pub fn release_handle(&self, result_taken: bool) -> Release {
        let s = self.state.load(Ordering::Acquire);
        if s & RUNNER_GONE != 0 {
            // The runner left already: nobody else can touch the block.
            return Release::Free {
                drop_result: !result_taken,
            };
        }
        let flags = if result_taken {
            HANDLE_GONE | RESULT_TAKEN
        } else {
            HANDLE_GONE
        };
        let prev = self.state.fetch_or(flags, Ordering::AcqRel);
        check_live(prev);
        if prev & RUNNER_GONE != 0 {
            Release::Free {
                drop_result: !result_taken,
            }
        } else {
            Release::Keep
        }
    }

    /// Marks the slot freed (loom models only): a later touch by either
    /// party fails, and loom reports a waker read racing with this write.
    #[cfg(loom)]
    pub fn poison(&self) {
        // SAFETY: loom checks this access for races; that is the point.
        self.waker.with_mut(|w| unsafe { *w = None });
        self.state.store(POISONED, Ordering::Release);
    }
}

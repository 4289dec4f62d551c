//! The count latch: how a worker waiting for a scope, a loop or a `join`
//! learns that the last of the things it waits for finished.
//!
//! The owner (a worker, waiting in [`crate::core::worker::Until::Latch`]) holds
//! the latch in its own stack frame. Every task or loop part it waits for
//! holds one count. The last decrement wakes the owner, which may then
//! return at once, freeing the latch with its frame, and the runtime may
//! be dropped right after: a decrementing thread must not touch the latch,
//! or anything only the owner kept alive, after its decrement.
//!
//! So a decrement copies the owner's index and the runtime's address out
//! of the latch *before* it decrements, and makes sure the runtime outlives
//! the wake-up:
//! - on a worker of the same runtime, the worker's own reference keeps it
//!   alive (the common case: no extra cost);
//! - on any other thread (a thread dropping a promise's last handle, which
//!   cancels a scope's delayed task, say), the decrement takes a reference
//!   of its own before the decrement and drops it after the wake-up.
//!
//! The count is released by the decrement and acquired by the owner's
//! check, so whatever a task wrote before its decrement (its result, a
//! recorded panic) is visible to the owner after the wait.
//!
//! # The owner's own counts
//!
//! Most tasks of a scope are spawned by its owner and run by it too. Those
//! need no atomic read-modify-write: the owner's thread counts them in a
//! plain cell, `local` ([`CountLatch::increment_local`],
//! [`CountLatch::decrement_local`]), which only that thread touches. The
//! unfinished things are then `count + local`, in wrapping arithmetic (a
//! task counted locally and finished on a thief's thread takes one off
//! `count`, which may go "below zero" meanwhile). Since only the owner reads
//! `local`, only the owner can tell that the sum is zero ([`is_set`]); a
//! decrement that brings `count` to zero wakes the owner, which may be a
//! spurious wake-up (its own cell not being zero) but never a missed one:
//! the owner moves `local` into `count` ([`flush_local`]) before it parks,
//! so while it is parked `count` alone is the whole sum. Zero is final: once
//! nothing is unfinished nothing can add a count (adding needs one held).
//!
//! [`is_set`]: CountLatch::is_set
//! [`flush_local`]: CountLatch::flush_local
//!
//! loom model: `loom-tests/tests/models/latch.rs`.

// Its `pub` items are the loom models' API (`selvedge::protocols`, built
// with `--cfg loom`); elsewhere they are the crate's own.
#![cfg_attr(not(loom), allow(unreachable_pub))]

use crate::core::sync::{Arc, AtomicUsize, Ordering, UnsafeCell};

/// What a latch's runtime must do for it: wake a waiting worker.
pub trait Unpark {
    /// Wakes worker `worker` if it is parked (a spurious wake-up is fine).
    fn unpark(&self, worker: usize);
}

/// What a decrement copies out before it may release the owner.
struct Target<R> {
    owner: usize,
    /// The owner's runtime; alive while the count is above zero.
    runtime: *const R,
}

impl<R> Clone for Target<R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R> Copy for Target<R> {}

/// A count of unfinished things a worker waits for (see the module docs).
pub struct CountLatch<R> {
    count: AtomicUsize,
    /// The owner's thread's own counts (module docs), as a wrapping
    /// difference: increments minus decrements not yet moved into `count`.
    local: UnsafeCell<usize>,
    /// Read by decrements, written only at creation (and by the loom
    /// models' [`CountLatch::poison`]): a cell, so loom reports a read
    /// that races with the owner freeing the latch.
    target: UnsafeCell<Target<R>>,
}

// SAFETY: `target` is written only at creation (before the latch is shared)
// and read by decrements; the runtime it points to is `Sync` and kept alive
// as the module docs explain. `local` is touched only on the owner's thread
// (the contract of every method that reaches it).
unsafe impl<R: Sync + Send> Sync for CountLatch<R> {}
// SAFETY: as above.
unsafe impl<R: Sync + Send> Send for CountLatch<R> {}

impl<R: Unpark> CountLatch<R> {
    /// A latch of worker `owner` of `runtime`, holding one count: the
    /// owner's own (a scope's body, a loop's first part).
    pub fn new(owner: usize, runtime: &Arc<R>) -> Self {
        Self {
            count: AtomicUsize::new(1),
            local: UnsafeCell::new(0),
            target: UnsafeCell::new(Target {
                owner,
                runtime: Arc::as_ptr(runtime),
            }),
        }
    }

    /// Adds a count, for a task or part about to start. The caller holds a
    /// count already (so the latch cannot reach zero meanwhile).
    #[inline]
    pub fn increment(&self) {
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether worker `worker` of the latch's runtime is its owner (tasks
    /// it spawns and finishes may count with `increment_local` and
    /// `decrement_local`).
    #[inline]
    pub fn is_owner(&self, worker: usize) -> bool {
        // SAFETY: `target` is only written at creation.
        self.target.with(|t| unsafe { (*t).owner }) == worker
    }

    /// Adds a count on the owner's thread, for a task it spawns, without
    /// an atomic read-modify-write (module docs). The caller holds a count
    /// already.
    ///
    /// # Safety
    /// The calling thread is the owner's (the one that created the latch
    /// and waits for it).
    #[inline]
    pub unsafe fn increment_local(&self) {
        // SAFETY: only the owner's thread touches `local` (caller).
        self.local
            .with_mut(|l| unsafe { *l = (*l).wrapping_add(1) });
    }

    /// Releases one count on the owner's thread, for a task that finished
    /// there (wherever it was counted), without an atomic read-modify-write.
    /// It never wakes anyone: the only waiter is this thread, which checks
    /// [`CountLatch::is_set`] before it parks.
    ///
    /// # Safety
    /// As for [`CountLatch::increment_local`], and the caller holds a count
    /// it has not released.
    #[inline]
    pub unsafe fn decrement_local(&self) {
        // SAFETY: only the owner's thread touches `local` (caller).
        self.local
            .with_mut(|l| unsafe { *l = (*l).wrapping_sub(1) });
    }

    /// The owner's own counts, not yet moved into `count`.
    #[inline]
    fn local(&self) -> usize {
        // SAFETY: called only on the owner's thread (every caller's
        // contract), the only one that touches `local`.
        self.local.with(|l| unsafe { *l })
    }

    /// Whether every count was released. Acquires what the decrements
    /// released. Only the owner asks (it alone knows its own counts).
    #[inline]
    pub fn is_set(&self) -> bool {
        self.count
            .load(Ordering::Acquire)
            .wrapping_add(self.local())
            == 0
    }

    /// Moves the owner's own counts into the shared count, so the
    /// decrement that finishes the last task sees zero and wakes the owner.
    /// The owner calls it before it parks. Returns whether the latch is
    /// set.
    #[inline]
    pub fn flush_local(&self) -> bool {
        self.move_local(0)
    }

    /// Releases the owner's own count (the body's), moving its own counts
    /// into the shared one as [`CountLatch::flush_local`] does. Returns
    /// whether the latch is set (then the owner need not wait).
    #[inline]
    pub fn release_own(&self) -> bool {
        self.move_local(1usize.wrapping_neg())
    }

    /// Moves `local + delta` (wrapping) into `count` and clears `local`;
    /// returns whether the latch is set. Owner's thread only.
    #[inline]
    fn move_local(&self, delta: usize) -> bool {
        let delta = self.local().wrapping_add(delta);
        self.local.with_mut(|l| {
            // SAFETY: the owner's thread (the caller) alone touches `local`.
            unsafe { *l = 0 }
        });
        if delta == 0 {
            // Nothing to move (`local` cancels `delta`): no write to the
            // shared line.
            return self.is_set();
        }
        self.count
            .fetch_add(delta, Ordering::AcqRel)
            .wrapping_add(delta)
            == 0
    }

    /// Releases one count; the last one wakes the owner. `current` is the
    /// runtime of the calling worker, if the caller is a worker.
    ///
    /// # Safety
    /// `latch` must be live and the caller must hold a count it has not
    /// released. Nothing of the latch is touched after the decrement, so
    /// the owner may free it as soon as it sees the count at zero.
    #[inline]
    pub unsafe fn decrement(latch: *const Self, current: Option<&Arc<R>>) {
        // SAFETY: the caller's count keeps the latch alive until the
        // decrement below.
        let latch = unsafe { &*latch };
        // SAFETY: `target` is only written at creation.
        let target = latch.target.with(|t| unsafe { *t });
        match current {
            Some(own) if std::ptr::eq(Arc::as_ptr(own), target.runtime) => {
                // This worker's own reference keeps the runtime alive.
                if latch.count.fetch_sub(1, Ordering::AcqRel) == 1 {
                    own.unpark(target.owner);
                }
            }
            _ => {
                // SAFETY: the runtime is alive (our count is not released
                // yet), and `runtime` came from `Arc::as_ptr`.
                let keep = unsafe {
                    Arc::increment_strong_count(target.runtime);
                    Arc::from_raw(target.runtime)
                };
                if latch.count.fetch_sub(1, Ordering::AcqRel) == 1 {
                    keep.unpark(target.owner);
                }
                drop(keep);
            }
        }
    }

    /// Releases one count from a worker of the latch's own runtime: the
    /// last one wakes the owner. The caller's worker keeps the runtime
    /// alive, so this needs neither the thread-local lookup nor the
    /// keep-alive of [`CountLatch::decrement`].
    ///
    /// # Safety
    /// As for `decrement`, and the calling thread is a worker of the
    /// latch's runtime.
    #[inline]
    pub unsafe fn decrement_on_worker(latch: *const Self) {
        // SAFETY: the caller's count keeps the latch alive until the
        // decrement below.
        let latch = unsafe { &*latch };
        // SAFETY: `target` is only written at creation.
        let target = latch.target.with(|t| unsafe { *t });
        if latch.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            // SAFETY: the calling worker holds a reference to its runtime,
            // which is the latch's (caller).
            unsafe { &*target.runtime }.unpark(target.owner);
        }
    }

    /// Marks the latch freed (loom models only): a decrement that reads it
    /// afterwards races with this write, and loom reports it.
    #[cfg(loom)]
    pub fn poison(&self) {
        self.target.with_mut(|t| {
            // SAFETY: loom checks this access for races; that is the point.
            unsafe {
                (*t).owner = usize::MAX;
                (*t).runtime = std::ptr::null();
            }
        });
    }
}

impl<R> std::fmt::Debug for CountLatch<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountLatch")
            .field("count", &self.count.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

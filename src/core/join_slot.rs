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
//! - `HOOKED`: a [`CompletionHook`] is installed (a `JoinHandle::dep` was
//!   asked for): the runner fires it, with whether the task succeeded,
//!   before it leaves. The hook pointer is stored before the flag is set
//!   (release), so a runner whose completion saw the flag reads the hook.
//!   A handle that finds the task already complete when it would set the
//!   flag fires the hook itself: exactly one party fires it.
//!
//! The common case costs one CAS on the runner's side (`COMPLETE |
//! RUNNER_GONE` when nobody is waiting) and one load on the handle's side (it
//! sees `RUNNER_GONE` and frees without a read-modify-write). A task joined
//! while still in its owner's deque never touches this state at all.

// Its `pub` items are the loom models' API (`selvedge::protocols`, built
// with `--cfg loom`); elsewhere they are the crate's own.
#![cfg_attr(not(loom), allow(unreachable_pub))]

use crate::core::sync::{AtomicPtr, AtomicUsize, Ordering, UnsafeCell};
use std::ptr::{self, NonNull};
use std::task::Waker;

const COMPLETE: usize = 1;
const WAITER: usize = 2;
const HANDLE_GONE: usize = 4;
const RUNNER_GONE: usize = 8;
const RESULT_TAKEN: usize = 16;
const HOOKED: usize = 32;
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

/// What a task's completion tells someone else (a higher layer's
/// dependency on the task): two functions over the hook's own memory, which
/// starts with this header. The core knows nothing else about it.
#[derive(Debug)]
#[repr(C)]
pub struct CompletionHook {
    /// Called once, by whichever party saw the task complete, with whether
    /// it succeeded (false: it panicked or was cancelled). Must not unwind.
    pub fire: unsafe fn(NonNull<CompletionHook>, bool),
    /// Called once, when the block is freed (after `fire`, or instead of
    /// it if the task never completed): see [`JoinSlot::release_hook`].
    pub release: unsafe fn(NonNull<CompletionHook>),
}

/// What [`JoinSlot::install_hook`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Install {
    /// The hook is installed; the runner will fire it.
    Installed,
    /// Another hook was installed first: use it, and free the one offered
    /// (nobody else saw it).
    Raced(NonNull<CompletionHook>),
    /// The hook is installed but the task had already completed: the
    /// caller must fire it (nobody else will).
    FireNow,
}

/// The shared state of one task between its runner and its handle.
#[derive(Debug)]
pub struct JoinSlot {
    state: AtomicUsize,
    waker: UnsafeCell<Option<Waker>>,
    /// Null, or the installed hook (never replaced once set).
    hook: AtomicPtr<CompletionHook>,
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
            hook: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// The installed hook, if any. Once set it stays until the slot drops.
    #[inline]
    pub fn hook(&self) -> Option<NonNull<CompletionHook>> {
        NonNull::new(self.hook.load(Ordering::Acquire))
    }

    /// Handle side: installs `hook` to be fired when the task completes.
    /// The slot owns it from here on unless [`Install::Raced`] hands it
    /// back; its `release` runs when the slot drops.
    pub fn install_hook(&self, hook: NonNull<CompletionHook>) -> Install {
        if let Err(existing) = self.hook.compare_exchange(
            ptr::null_mut(),
            hook.as_ptr(),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: only non-null hooks are ever stored.
            return Install::Raced(unsafe { NonNull::new_unchecked(existing) });
        }
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            check_live(s);
            if s & COMPLETE != 0 {
                // The runner completed without seeing HOOKED: it will not
                // fire the hook.
                return Install::FireNow;
            }
            // Release: the hook pointer above is visible to a runner whose
            // completion sees HOOKED.
            match self.state.compare_exchange_weak(
                s,
                s | HOOKED,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Install::Installed,
                Err(actual) => s = actual,
            }
        }
    }

    /// Whether a hook is installed (one relaxed load: for the joining
    /// handle's own thread, which cannot race an installation, and for the
    /// slot's drop).
    #[inline(always)]
    pub fn has_hook(&self) -> bool {
        !self.hook.load(Ordering::Relaxed).is_null()
    }

    #[cold]
    fn fire(hook: NonNull<CompletionHook>, ok: bool) {
        // SAFETY: an installed hook lives until the slot drops, and the
        // caller is the one party that fires it (see `HOOKED`).
        unsafe {
            let fire = hook.as_ref().fire;
            fire(hook, ok)
        }
    }

    /// Whether the result has been published.
    #[inline]
    pub fn is_complete(&self) -> bool {
        self.state.load(Ordering::Acquire) & COMPLETE != 0
    }

    /// Runner side: the result is written; publish it, fire the hook (with
    /// `ok`: whether the task succeeded) and wake a waiter.
    pub fn complete(&self, ok: bool) -> Release {
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            check_live(s);
            debug_assert_eq!(s & (COMPLETE | RUNNER_GONE), 0, "completed twice");
            if s & (WAITER | HOOKED) != 0 {
                break;
            }
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
        }
        self.complete_held(ok);
        self.release_runner()
    }

    /// Runner side: publishes the result as [`JoinSlot::complete`] does
    /// (firing the hook and waking a waiter), but keeps the runner's hold
    /// on the block until [`JoinSlot::release_runner`]: the handle may take
    /// the result meanwhile, but not free the block. For a runner that
    /// still needs the block's memory after the task's end (a parked
    /// task's node inside it, see `dataflow/delayed.rs`).
    pub fn complete_held(&self, ok: bool) {
        let mut s = self.state.load(Ordering::Acquire);
        loop {
            check_live(s);
            debug_assert_eq!(s & (COMPLETE | RUNNER_GONE), 0, "completed twice");
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
        // We completed without leaving, so the block stays until
        // RUNNER_GONE. HOOKED was set before COMPLETE: the hook is ours to
        // fire (the acquire of the CAS made its pointer visible).
        if s & HOOKED != 0 {
            if let Some(hook) = self.hook() {
                Self::fire(hook, ok);
            }
        }
        if s & WAITER == 0 {
            return;
        }
        // WAITER was set when we completed, so the handle only reads the cell
        // from now on and cannot free the block before RUNNER_GONE.
        self.waker.with(|w| {
            // SAFETY: shared read; the handle writes the cell only while
            // WAITER is clear and COMPLETE is not set, and both were
            // excluded above.
            if let Some(w) = unsafe { &*w } {
                // The waker is user code. A panic must neither kill the
                // runner nor skip RUNNER_GONE (the block would leak): it is
                // reported, and the handle finds the result complete when
                // it looks again.
                crate::core::unwind::catch_and_report("a waker's wake", || w.wake_by_ref());
            }
        });
    }

    /// Runner side, after [`JoinSlot::complete_held`]: the runner is done
    /// with the block.
    pub fn release_runner(&self) -> Release {
        let prev = self.state.fetch_or(RUNNER_GONE, Ordering::AcqRel);
        check_live(prev);
        debug_assert!(prev & COMPLETE != 0, "runner released before completing");
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
        // Freeing a block releases its hook: a fire after this finds none
        // (and the models count one fire too few).
        let hook = self.hook.swap(ptr::null_mut(), Ordering::AcqRel);
        if let Some(hook) = NonNull::new(hook) {
            // SAFETY: the slot owned the hook; it is released once, here.
            unsafe { (hook.as_ref().release)(hook) }
        }
    }
}

impl JoinSlot {
    /// Releases the installed hook, if any: the block is being freed (its
    /// owner calls this, once, before dropping the slot; a slot is not
    /// `Drop` so that the hot free path stays small). Out of line: most
    /// slots never get a hook.
    #[cold]
    #[inline(never)]
    pub fn release_hook(&mut self) {
        if let Some(hook) = self.hook() {
            self.hook = AtomicPtr::new(ptr::null_mut());
            // SAFETY: the slot owned the hook since its installation, and
            // nobody uses the slot any more (`&mut self`).
            unsafe {
                let release = hook.as_ref().release;
                release(hook)
            }
        }
    }
}

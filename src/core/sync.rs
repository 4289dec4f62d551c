//! Where atomics, fences, locks, condition variables and race-checked
//! cells come from.
//!
//! Under `--cfg loom` every primitive is loom's, so the models in `loom-tests/`
//! explore the real protocol code; otherwise they are std's. Every atomic,
//! fence, lock and condition variable of the library's code comes from
//! here, and so does every `UnsafeCell` of the modules loom builds. What
//! no model swaps comes from std directly: `Arc`, `Weak`, `Once`,
//! `OnceLock` and `mpsc`; `Cell` and `RefCell` (one thread's state and
//! thread-locals); `TryLockError`; `std::thread` (starting, naming,
//! parking, waking and telling apart threads, yielding, sleeping,
//! `panicking`, `available_parallelism`); and `UnsafeCell` in the modules
//! loom never builds (those marked `#[cfg(not(loom))]` in their folder's
//! `mod.rs`). Unit tests use std's atomics, locks and threads to drive the
//! code they test.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
#[cfg(loom)]
pub(crate) use loom::sync::{Arc, Condvar, Mutex};
#[cfg(loom)]
pub(crate) use loom::thread;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU8, AtomicUsize, Ordering,
};
#[cfg(not(loom))]
pub(crate) use std::sync::{Arc, Condvar, Mutex};
#[cfg(not(loom))]
pub(crate) use std::thread;

#[cfg(not(loom))]
pub(crate) use std::sync::atomic::AtomicU64;

/// Only outside loom: the owner's half of an asymmetric barrier
/// (`rescue.rs`), which loom models with a full fence instead.
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::compiler_fence;

/// A cell whose accesses loom can check for data races.
///
/// std's `UnsafeCell` behind loom's `with`/`with_mut` interface, so the same
/// code compiles against both.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }

    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// Locks a mutex, ignoring poisoning: the data behind our mutexes stays
/// consistent whatever panicked, because user code never runs under them.
pub(crate) fn lock<T>(m: &Mutex<T>) -> crate::core::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

#[cfg(loom)]
pub(crate) use loom::sync::MutexGuard;
#[cfg(not(loom))]
pub(crate) use std::sync::MutexGuard;

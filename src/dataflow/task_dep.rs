//! `JoinHandle::dep`: a task's completion as a dependency. The scheduler
//! only knows a [`CompletionHook`] in the task's join slot; this module
//! puts a promise behind it, fulfilled when the task returns and broken
//! when it panics or is cancelled.

use crate::core::closure_task;
use crate::core::handle::JoinHandle;
use crate::core::join_slot::{CompletionHook, Install};
use crate::core::task;
use crate::dataflow::event::Dep;
use crate::dataflow::promise::Promise;
use std::cell::UnsafeCell;
use std::ptr::NonNull;

/// The hook installed in a task's join slot: a promise for the task's
/// completion and a dependency that keeps its memory alive for every later
/// `dep()` call while the slot lives.
#[repr(C)]
struct TaskDep {
    /// First, so a pointer to the hook is a pointer to this.
    hook: CompletionHook,
    /// Taken once, by `fire`.
    promise: UnsafeCell<Option<Promise>>,
    keep: Dep,
}

impl TaskDep {
    fn new_boxed() -> NonNull<CompletionHook> {
        let promise = Promise::new();
        let keep = promise.dep();
        let boxed = Box::new(TaskDep {
            hook: CompletionHook {
                fire: Self::fire,
                release: Self::release,
            },
            promise: UnsafeCell::new(Some(promise)),
            keep,
        });
        NonNull::from(Box::leak(boxed)).cast()
    }

    /// # Safety
    /// `hook` is a live `TaskDep`'s header.
    unsafe fn dep_of<'a>(hook: NonNull<CompletionHook>) -> &'a Dep {
        // SAFETY: the hook heads a `TaskDep` (caller); `keep` is only read.
        unsafe { &(*hook.cast::<TaskDep>().as_ptr()).keep }
    }

    /// Fulfills the promise when the task succeeded; otherwise drops it
    /// unfulfilled, which breaks it and cancels the tasks waiting on it.
    ///
    /// # Safety
    /// `hook` is a live `TaskDep`'s header, fired once (the join slot's
    /// protocol).
    unsafe fn fire(hook: NonNull<CompletionHook>, ok: bool) {
        // SAFETY: the one firing party is the only one to touch `promise`
        // before `release`.
        let promise = unsafe { (*(*hook.cast::<TaskDep>().as_ptr()).promise.get()).take() };
        if let Some(promise) = promise {
            if ok {
                promise.fulfill();
            }
            drop(promise);
        }
    }

    /// # Safety
    /// `hook` came from `new_boxed`, and nobody uses it any more.
    unsafe fn release(hook: NonNull<CompletionHook>) {
        // SAFETY: made by `Box::leak` in `new_boxed`, released once.
        drop(unsafe { Box::from_raw(hook.cast::<TaskDep>().as_ptr()) });
    }
}

impl<T> JoinHandle<T> {
    /// The task's completion as a [`Dep`], for [`spawn_delayed`](crate::spawn_delayed)
    /// and everything else that takes dependencies: fulfilled when the task
    /// returns, *broken* when it panics or is cancelled (so its dependents
    /// are cancelled too, never left waiting). The handle still joins as
    /// before; asking for the dependency more than once is cheap.
    ///
    /// ```
    /// use selvedge::Runtime;
    ///
    /// let rt = Runtime::builder().num_threads(2).build()?;
    /// let produce = rt.spawn(|| 6);
    /// let consume = rt.spawn_delayed([produce.dep()], || "after produce");
    /// assert_eq!(consume.join(), "after produce");
    /// assert_eq!(produce.join(), 6);
    ///
    /// let failing = rt.spawn(|| -> u32 { panic!("no value") });
    /// let after = rt.spawn_delayed([failing.dep()], || ());
    /// assert!(after.try_join().unwrap_err().is_cancelled());
    /// assert!(failing.try_join().unwrap_err().is_panic());
    /// # Ok::<(), selvedge::BuildError>(())
    /// ```
    pub fn dep(&self) -> Dep {
        let block = self.block();
        // SAFETY: the handle keeps its block alive.
        let slot = unsafe { task::join_slot(block) };
        if let Some(hook) = slot.hook() {
            // SAFETY: an installed hook is a `TaskDep` living as long as
            // the slot, which our handle keeps.
            return unsafe { Self::dep_of(hook) };
        }
        if slot.is_complete() {
            // Finished already: a dependency already closed, no hook.
            // SAFETY: complete (acquired), and the handle has not taken the
            // result (it still holds the block); its type is `T`.
            let ok = unsafe { closure_task::result_is_ok::<T>(block) };
            let promise = Promise::new();
            if ok {
                promise.fulfill();
            }
            return promise.dep();
        }
        let hook = TaskDep::new_boxed();
        match slot.install_hook(hook) {
            // SAFETY: the installed hook lives as long as the slot.
            Install::Installed => unsafe { Self::dep_of(hook) },
            Install::Raced(winner) => {
                // SAFETY: ours was never shared; the winner lives as long
                // as the slot.
                unsafe {
                    TaskDep::release(hook);
                    Self::dep_of(winner)
                }
            }
            Install::FireNow => {
                // SAFETY: complete (acquired by the installation), untaken.
                let ok = unsafe { closure_task::result_is_ok::<T>(block) };
                // SAFETY: installed, and ours alone to fire.
                unsafe {
                    TaskDep::fire(hook, ok);
                    Self::dep_of(hook)
                }
            }
        }
    }

    /// # Safety
    /// `hook` is a live `TaskDep`'s header.
    unsafe fn dep_of(hook: NonNull<CompletionHook>) -> Dep {
        // SAFETY: as the caller promises.
        unsafe { TaskDep::dep_of(hook) }.clone()
    }
}

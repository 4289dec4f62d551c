//! Names for the tasks a piece of code makes, shown in the trace.
//!
//! [`named`] sets a thread-local name for the duration of its closure; a
//! task made meanwhile by the closure (any kind: spawned, delayed,
//! declared, a loop, a GPU task) takes it. Tasks the thread runs while the
//! closure waits do not: a worker clears the name around each task it runs
//! (`Worker::traced`). `spawn`, the hot path, reads the thread-local only
//! while its worker is inside a `named` (a flag of the worker's); the
//! other ways of making tasks read it each time.

#[cfg(feature = "trace")]
use std::cell::Cell;

#[cfg(feature = "trace")]
thread_local! {
    static PENDING: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// Runs `f`; with the `trace` feature, tasks made by `f` on this thread
/// carry `name` in the trace instead of their closure's type name.
#[inline(always)]
pub(crate) fn named<R>(name: &'static str, f: impl FnOnce() -> R) -> R {
    #[cfg(feature = "trace")]
    {
        use crate::core::worker::Worker;
        /// Restores the outer name however `f` ends.
        struct Restore(Option<&'static str>, Option<&'static Worker>);
        impl Drop for Restore {
            fn drop(&mut self) {
                PENDING.with(|p| p.set(self.0));
                if let Some(w) = self.1 {
                    w.leave_naming();
                }
            }
        }
        let w = Worker::current();
        if let Some(w) = w {
            w.enter_naming();
        }
        let _restore = Restore(PENDING.with(|p| p.replace(Some(name))), w);
        f()
    }
    #[cfg(not(feature = "trace"))]
    {
        let _ = name;
        f()
    }
}

/// The name a task made here now takes: `named`'s, else the type name of
/// `F`, the closure the user gave.
#[cfg(feature = "trace")]
#[inline]
pub(crate) fn name_for<F>() -> &'static str {
    pending().unwrap_or_else(std::any::type_name::<F>)
}

/// Sets this thread's `named` name (`None`: none); returns the one before.
#[cfg(feature = "trace")]
pub(crate) fn set_pending(name: Option<&'static str>) -> Option<&'static str> {
    PENDING.with(|p| p.replace(name))
}

/// `named`'s name on this thread, if inside one.
#[cfg(feature = "trace")]
#[inline(always)]
pub(crate) fn pending() -> Option<&'static str> {
    PENDING.with(Cell::get)
}

/// `name` as a `&'static str` for a trace: the same one for equal names,
/// leaked once each (names given at run time, such as a graph's node
/// names, are few and repeat).
#[cfg(feature = "trace")]
pub(crate) fn intern(name: &str) -> &'static str {
    use crate::core::sync::Mutex;
    use std::collections::HashSet;
    use std::sync::OnceLock;
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = crate::core::sync::lock(NAMES.get_or_init(Default::default));
    if let Some(&known) = names.get(name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}

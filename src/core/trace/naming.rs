//! `named`: the tasks a closure makes on this thread carry a name in the
//! trace (see `names.rs`). Here, not in `names.rs`, because it tells the
//! thread's worker, which sits above the task names.

#[cfg(feature = "trace")]
use crate::core::trace::names::set_pending;
#[cfg(feature = "trace")]
use crate::core::worker::Worker;

/// Runs `f`; with the `trace` feature, tasks made by `f` on this thread
/// carry `name` in the trace instead of their closure's type name.
#[inline(always)]
pub(crate) fn named<R>(name: &'static str, f: impl FnOnce() -> R) -> R {
    #[cfg(feature = "trace")]
    {
        /// Restores the outer name however `f` ends.
        struct Restore(Option<&'static str>, Option<&'static Worker>);
        impl Drop for Restore {
            fn drop(&mut self) {
                set_pending(self.0);
                if let Some(w) = self.1 {
                    w.leave_naming();
                }
            }
        }
        let w = Worker::current();
        if let Some(w) = w {
            w.enter_naming();
        }
        let _restore = Restore(set_pending(Some(name)), w);
        f()
    }
    #[cfg(not(feature = "trace"))]
    {
        let _ = name;
        f()
    }
}

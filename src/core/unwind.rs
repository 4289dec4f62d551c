//! Where panics may go, and where they must not.
//!
//! User code runs on workers inside `catch_unwind`, and its panic goes to
//! whoever waits for it: the task's handle, its scope, its loop. Some user
//! code runs where nobody waits: the destructor of a detached task's
//! result or of a panic payload nobody will read, a waker's `wake` or
//! destructor, a signal's action. Such a panic is caught and [`report`]ed,
//! never let into the scheduler's frames: a worker never dies because of
//! user code.
//!
//! A panic in the scheduler's own code is a bug it cannot recover from:
//! other threads may hold pointers into a worker's stack frames (a stack
//! job a thief runs, a scope or loop whose tasks are queued elsewhere), so
//! unwinding those frames would free memory still in use. [`AbortIfPanic`]
//! turns such a panic into an abort with a message saying why.

// The loom models use only the reporting half.
#![cfg_attr(loom, allow(dead_code))]

use crate::core::sync::{lock, AtomicBool, Mutex, Ordering};
use std::any::Any;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe, Location};

/// Aborts the process if dropped: armed around scheduler code that must
/// not unwind, disarmed (forgotten) on the normal path. Costs nothing
/// unless a panic unwinds through it.
///
/// ```ignore
/// let guard = AbortIfPanic::new();
/// scheduler_step();
/// guard.disarm();
/// ```
#[must_use = "the guard aborts only while it lives: bind it and disarm it at the end"]
pub(crate) struct AbortIfPanic {
    /// Where the guard was armed, for the message.
    armed_at: &'static Location<'static>,
}

impl AbortIfPanic {
    /// Arms a guard, recording the caller's location.
    #[inline]
    #[track_caller]
    pub(crate) fn new() -> Self {
        Self {
            armed_at: Location::caller(),
        }
    }

    /// The guarded code finished without unwinding.
    #[inline]
    pub(crate) fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for AbortIfPanic {
    #[cold]
    fn drop(&mut self) {
        // `writeln!` to a locked stderr, not `eprintln!`: a failed write
        // must not panic again while unwinding.
        let _ = writeln!(
            std::io::stderr().lock(),
            "selvedge: a panic escaped the scheduler (guarded at {}); aborting, \
             because a worker's frames may still be referenced by other threads",
            self.armed_at
        );
        std::process::abort();
    }
}

/// Runs `f`, aborting the process if it unwinds (see [`AbortIfPanic`]).
#[inline]
#[track_caller]
pub(crate) fn abort_on_unwind<R>(f: impl FnOnce() -> R) -> R {
    let guard = AbortIfPanic::new();
    let r = f();
    guard.disarm();
    r
}

/// Runs user code that has nobody to hand a panic to (`what` names it for
/// the report, e.g. "a waker's wake"): a panic is caught and [`report`]ed.
#[inline]
pub(crate) fn catch_and_report(what: &str, f: impl FnOnce()) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(f)) {
        report(what, payload);
    }
}

/// Drops `value` (user data nobody will read: a detached task's result, a
/// cancelled task's closure); a panic of its destructor is [`report`]ed.
#[inline]
pub(crate) fn drop_or_report<T>(what: &str, value: T) {
    catch_and_report(what, move || drop(value));
}

/// The first panic of a group of tasks that someone waits for as a whole
/// (a scope's tasks, a loop's parts), resumed by the waiter once all of
/// them finished.
///
/// Recording never unwinds: a later payload is dropped outside the lock,
/// with its destructor's panic [`report`]ed, since that destructor is user
/// code and the task recording it must still count itself finished.
pub(crate) struct FirstPanic {
    slot: Mutex<Option<Box<dyn Any + Send>>>,
    /// Something was recorded: lets [`FirstPanic::take`] skip the lock in
    /// the common case. Relaxed: the waiter reads it after every task of
    /// the group finished, and their finishing orders every record before
    /// that read.
    recorded: AtomicBool,
}

impl FirstPanic {
    pub(crate) fn new() -> Self {
        Self {
            slot: Mutex::new(None),
            recorded: AtomicBool::new(false),
        }
    }

    /// Keeps `payload` if no panic is recorded yet; drops it otherwise,
    /// reporting a panicking destructor as the payload of `what`.
    pub(crate) fn keep(&self, payload: Box<dyn Any + Send>, what: &str) {
        let later = {
            let mut first = lock(&self.slot);
            self.recorded.store(true, Ordering::Relaxed);
            match *first {
                None => {
                    *first = Some(payload);
                    None
                }
                Some(_) => Some(payload),
            }
        };
        if let Some(payload) = later {
            drop_or_report(what, payload);
        }
    }

    /// Records with `f`, which gets the slot under its lock (a loop
    /// gathers every cancelled part into one payload this way). `f` must
    /// not run user code.
    pub(crate) fn record_with(&self, f: impl FnOnce(&mut Option<Box<dyn Any + Send>>)) {
        let mut slot = lock(&self.slot);
        f(&mut slot);
        self.recorded.store(true, Ordering::Relaxed);
    }

    /// The first panic recorded, if any; call once every task of the group
    /// finished.
    pub(crate) fn take(&self) -> Option<Box<dyn Any + Send>> {
        if !self.recorded.load(Ordering::Relaxed) {
            return None;
        }
        lock(&self.slot).take()
    }
}

/// Reports a panic that was caught where nobody waits for it, and drops
/// its payload.
///
/// The panic hook already ran when the panic started (it printed the
/// message, the location and, if asked for, a backtrace), and std offers
/// no way to run the hook again for a caught payload, so this prints one
/// more line to stderr: what panicked, its message, and that the panic
/// was caught and the program goes on (an uncaught panic would have
/// ended the thread). The payload's own destructor may panic too: that
/// panic is reported the same way, and its payload is leaked rather than
/// dropped, since a destructor that panics with a payload like itself
/// would otherwise never end.
#[cold]
pub(crate) fn report(what: &str, payload: Box<dyn Any + Send>) {
    note(what, &*payload);
    if let Err(second) = catch_unwind(AssertUnwindSafe(move || drop(payload))) {
        note("the destructor of that panic's payload", &*second);
        std::mem::forget(second);
    }
}

/// The message of a panic payload, when it is a string (as `panic!`
/// makes it).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> Option<&str> {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
}

/// Prints the line of [`report`].
fn note(what: &str, payload: &(dyn Any + Send)) {
    let message = panic_message(payload).unwrap_or("Box<dyn Any>");
    let _ = writeln!(
        std::io::stderr().lock(),
        "selvedge: {what} panicked ({message}); the panic was caught and \
         discarded, as nobody waits for it, and the runtime goes on"
    );
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::process::Command;

    /// Selects the child's part in the tests below.
    const CHILD: &str = "SELVEDGE_UNWIND_TEST_CHILD";

    /// Runs this test binary again with only `test` and `CHILD=mode` set;
    /// returns the child's status and stderr.
    fn run_child(test: &str, mode: &str) -> (std::process::ExitStatus, String) {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([test, "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, mode)
            .output()
            .unwrap();
        (
            out.status,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    #[cfg(target_os = "linux")]
    fn aborted(status: &std::process::ExitStatus) -> bool {
        use std::os::unix::process::ExitStatusExt;
        status.signal() == Some(libc::SIGABRT)
    }

    #[cfg(not(target_os = "linux"))]
    fn aborted(status: &std::process::ExitStatus) -> bool {
        !status.success()
    }

    #[test]
    fn a_panic_through_an_armed_guard_aborts_with_a_message() {
        const TEST: &str =
            "core::unwind::tests::a_panic_through_an_armed_guard_aborts_with_a_message";
        match std::env::var(CHILD).as_deref() {
            Ok("guard") => {
                let _guard = AbortIfPanic::new();
                panic!("scheduler bug");
            }
            Ok("helper") => {
                abort_on_unwind(|| panic!("scheduler bug"));
            }
            Ok("disarmed") => {
                // The normal path: no abort, and a later panic unwinds.
                assert_eq!(abort_on_unwind(|| 7), 7);
                AbortIfPanic::new().disarm();
                let r = catch_unwind(|| panic!("after"));
                assert!(r.is_err());
                return;
            }
            Ok(other) => unreachable!("unknown child mode {other}"),
            Err(_) => {}
        }
        for mode in ["guard", "helper"] {
            let (status, stderr) = run_child(TEST, mode);
            assert!(aborted(&status), "{mode}: {status:?}\n{stderr}");
            assert!(
                stderr.contains("selvedge: a panic escaped the scheduler")
                    && stderr.contains("aborting, because a worker's frames")
                    && stderr.contains("src/core/unwind.rs"),
                "{mode}: {stderr}"
            );
        }
        let (status, stderr) = run_child(TEST, "disarmed");
        assert!(status.success(), "disarmed: {status:?}\n{stderr}");
        assert!(!stderr.contains("escaped the scheduler"), "{stderr}");
    }

    /// A payload whose destructor panics, with a payload whose destructor
    /// panics too.
    struct Nasty(u32);

    impl Drop for Nasty {
        fn drop(&mut self) {
            std::panic::panic_any(Nasty(self.0 + 1));
        }
    }

    #[test]
    fn reported_panics_do_not_unwind_even_from_payload_destructors() {
        catch_and_report("a test closure", || panic!("plain"));
        catch_and_report("a test closure", || std::panic::panic_any(Nasty(0)));
        drop_or_report("a test value", Nasty(0));
        report("a test payload", Box::new(Nasty(0)));
    }
}

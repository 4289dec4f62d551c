//! Spawning and joining from a thread-local destructor of the main thread,
//! after `main` has used selvedge (and so after selvedge's own thread-locals
//! of that thread may have been destroyed): it works, and does not abort.
//!
//! A test binary of its own with its own `main` (`harness = false`): the
//! parent runs this executable again as a child with `CHILD` set, and
//! checks that the child exited cleanly after its destructor joined.

use std::process::Command;

const CHILD: &str = "SELVEDGE_TLS_DESTRUCTOR_CHILD";

/// Joins a task on the global runtime when the thread's locals are
/// destroyed, and prints its result for the parent to check.
struct JoinOnDrop;

impl Drop for JoinOnDrop {
    fn drop(&mut self) {
        let h = selvedge::spawn(|| 6 * 7);
        let v = h.join();
        let (a, b) = selvedge::join(|| 1, || 2);
        let e = selvedge::spawn(|| 0).try_join().is_ok();
        println!("destructor joined {v} {} {e}", a + b);
    }
}

thread_local! {
    static LATE: JoinOnDrop = const { JoinOnDrop };
}

fn child() {
    // Registered first, so destroyed after what selvedge registers below
    // (destructors run in reverse order of registration).
    LATE.with(|_| ());
    // A join from this (foreign) thread: initialises selvedge's
    // thread-locals for it.
    assert_eq!(selvedge::spawn(|| 1).join(), 1);
}

fn main() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let exe = std::env::current_exe().expect("the test's own executable");
    let out = Command::new(exe)
        .env(CHILD, "1")
        .output()
        .expect("could not run the child process");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the child failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    assert!(
        stdout.contains("destructor joined 42 3 true"),
        "the destructor did not join:\nstdout: {stdout}\nstderr: {stderr}"
    );
    println!("tls_destructor: ok");
}

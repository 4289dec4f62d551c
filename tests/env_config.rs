//! Configuration from environment variables (`SELVEDGE_NUM_THREADS`,
//! `SELVEDGE_STALL_WARN`).
//!
//! Environment variables are process-wide, so these tests live in a binary
//! of their own and take `ENV` while they set one: nothing else here builds
//! a runtime from the environment meanwhile.

use selvedge::{BuildError, Runtime};
use std::sync::{Mutex, MutexGuard};

static ENV: Mutex<()> = Mutex::new(());

/// Holds `ENV` and restores `SELVEDGE_NUM_THREADS` when dropped.
struct NumThreadsVar {
    old: Option<String>,
    _lock: MutexGuard<'static, ()>,
}

impl NumThreadsVar {
    fn take() -> Self {
        let lock = ENV.lock().unwrap_or_else(|e| e.into_inner());
        Self {
            old: std::env::var("SELVEDGE_NUM_THREADS").ok(),
            _lock: lock,
        }
    }

    fn set(&self, value: &str) {
        std::env::set_var("SELVEDGE_NUM_THREADS", value);
    }
}

impl Drop for NumThreadsVar {
    fn drop(&mut self) {
        match &self.old {
            Some(v) => std::env::set_var("SELVEDGE_NUM_THREADS", v),
            None => std::env::remove_var("SELVEDGE_NUM_THREADS"),
        }
    }
}

/// What a runtime gets without any configuration.
fn default_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get().min(256))
}

#[test]
fn thread_count_comes_from_the_environment() {
    let var = NumThreadsVar::take();
    var.set("3");
    assert_eq!(Runtime::new().map(|rt| rt.num_threads()), Ok(3));
    var.set(" 2\n");
    assert_eq!(Runtime::new().map(|rt| rt.num_threads()), Ok(2));
    // The builder's own count wins.
    assert_eq!(
        Runtime::builder()
            .num_threads(1)
            .build()
            .map(|rt| rt.num_threads()),
        Ok(1)
    );
    var.set("lots");
    let bad = Runtime::new().unwrap_err();
    assert_eq!(
        bad,
        BuildError::InvalidThreadCountVar {
            value: "lots".into()
        }
    );
    assert!(bad.to_string().contains("\"lots\""), "{bad}");
    var.set("100000");
    let e = Runtime::new().unwrap_err();
    assert_eq!(
        e,
        BuildError::TooManyThreads {
            requested: 100_000,
            max: 256
        }
    );
}

#[test]
fn a_zero_thread_count_variable_is_reported_as_the_variable() {
    let var = NumThreadsVar::take();
    var.set("0");
    let zero = Runtime::new().unwrap_err();
    assert_eq!(
        zero,
        BuildError::InvalidThreadCountVar { value: "0".into() }
    );
    let msg = zero.to_string();
    assert!(
        msg.contains("SELVEDGE_NUM_THREADS") && !msg.contains("num_threads was 0"),
        "{msg}"
    );
}

#[test]
fn an_empty_thread_count_variable_counts_as_unset() {
    let var = NumThreadsVar::take();
    for value in ["", "   ", "\t\n"] {
        var.set(value);
        let n = Runtime::new().map(|rt| rt.num_threads());
        assert_eq!(n, Ok(default_count()), "SELVEDGE_NUM_THREADS={value:?}");
    }
}

/// An unreadable `SELVEDGE_STALL_WARN` is a build error naming the
/// variable, unless the builder sets the stall warning itself.
#[test]
fn an_unreadable_stall_warning_variable_is_a_build_error() {
    let _lock = ENV.lock().unwrap_or_else(|e| e.into_inner());
    let old = std::env::var("SELVEDGE_STALL_WARN").ok();
    std::env::set_var("SELVEDGE_STALL_WARN", "soon");
    let bad = Runtime::builder().num_threads(1).build().unwrap_err();
    let set = Runtime::builder()
        .num_threads(1)
        .stall_warning(Some(std::time::Duration::from_secs(5)))
        .build()
        .map(|rt| rt.num_threads());
    std::env::set_var("SELVEDGE_STALL_WARN", "0");
    let off = Runtime::builder()
        .num_threads(1)
        .build()
        .map(|rt| rt.num_threads());
    match old {
        Some(v) => std::env::set_var("SELVEDGE_STALL_WARN", v),
        None => std::env::remove_var("SELVEDGE_STALL_WARN"),
    }
    assert_eq!(
        bad,
        BuildError::InvalidStallWarnVar {
            value: "soon".into()
        }
    );
    let msg = bad.to_string();
    assert!(
        msg.contains("SELVEDGE_STALL_WARN") && msg.contains("\"soon\""),
        "{msg}"
    );
    assert_eq!(set, Ok(1));
    assert_eq!(off, Ok(1));
}

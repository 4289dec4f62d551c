//! loom models of selvedge's concurrent protocols (see `tests/`).
//!
//! Build and run them with
//! `RUSTFLAGS="--cfg loom" cargo test -p loom-tests --release`.
//! Without `--cfg loom` the crate is empty.

#[cfg(loom)]
pub mod support {
    //! Helpers shared by the models.

    use loom::thread::Thread;
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    /// A waker that unparks a loom thread.
    pub struct Unpark(pub Thread);

    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }

    /// A waker for the calling loom thread.
    pub fn thread_waker() -> Waker {
        Waker::from(Arc::new(Unpark(loom::thread::current())))
    }

    /// Joins a thread that may still unpark the caller: waits (yielding)
    /// until it raised `finished` first, because loom does not model an
    /// unpark that lands while the target is blocked in `join`.
    pub fn join_after(
        handle: loom::thread::JoinHandle<()>,
        finished: &loom::sync::atomic::AtomicBool,
    ) {
        while !finished.load(loom::sync::atomic::Ordering::SeqCst) {
            loom::thread::yield_now();
        }
        handle.join().unwrap();
    }

    /// Runs `f` under loom with a bounded number of preemptions, so every
    /// model finishes in seconds to minutes (override with
    /// `LOOM_MAX_PREEMPTIONS`).
    pub fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        if b.preemption_bound.is_none() {
            b.preemption_bound = Some(3);
        }
        b.check(f);
    }
}

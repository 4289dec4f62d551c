//! A `Waker` that unparks a thread: a foreign thread blocked in `join`, or
//! a worker parked in one.

use std::sync::Arc;
use std::task::{Wake, Waker};

/// Unparks its thread when woken.
struct ThreadUnparker(std::thread::Thread);

/// A waker that unparks `thread`.
pub(crate) fn thread_waker(thread: std::thread::Thread) -> Waker {
    Waker::from(Arc::new(ThreadUnparker(thread)))
}

impl Wake for ThreadUnparker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

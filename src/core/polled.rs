//! Operations that workers test one by one: GPU work (its event queried)
//! and a user's promises fulfilled by a test (`Promise::fulfill_when`).
//!
//! A completion source (`completions.rs`) tests a whole set of operations
//! at once, as `MPI_Testsome` does; these are tested each on its own, so
//! they share one list per runtime, which the runtime's [`Completions`]
//! polls with its sources. The list is taken with a try-lock: one thread
//! tests at a time, and a worker that finds it taken goes on looking for
//! work. Operations added meanwhile (from any thread, a test included) wait
//! in a second list that the next poll takes in.
//!
//! An operation with a callback of its own (a CUDA host function) needs
//! no parked worker: its callback wakes one. One without (a user's test)
//! has parked workers come back to test it every [`POLL_WHILE_PARKED`].
//!
//! [`Completions`]: crate::core::completions::Completions

use crate::core::sync::{lock, AtomicBool, AtomicUsize, Mutex, Ordering};
use crate::core::unwind::drop_or_report;
use std::sync::TryLockError;
use std::time::Duration;

/// How long a worker parks at most while an operation without a callback
/// is in flight: the bound on its completion's delay when every worker
/// sleeps.
pub(crate) const POLL_WHILE_PARKED: Duration = Duration::from_millis(1);

/// What one test of an operation found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tested {
    /// Nothing new: test it again.
    Pending,
    /// It completed here (its signal fired), but stays in the list until
    /// its callback let go of it: test it again.
    Fired,
    /// It completed earlier, here, and waits for its callback to let go
    /// of it: test it again (a worker keeps testing meanwhile).
    AwaitingCallback,
    /// It is over for the list, which drops it.
    Over,
}

/// One operation that ends outside the pool, tested by polling.
pub(crate) trait Polled: Send {
    /// Tests once (by one thread at a time): what ended completes here. An
    /// operation [`Tested::Over`] is dropped after the list's lock is
    /// released (the drop may run user code).
    fn test(&mut self) -> Tested;

    /// Whether its end reaches a worker without a test too (a callback
    /// that wakes one), so that parked workers need not come back for it.
    fn has_callback(&self) -> bool;
}

/// The runtime's list of operations tested one by one (see the module docs).
#[derive(Default)]
pub(crate) struct PolledList {
    /// Taken by the thread that polls.
    tested: Mutex<Vec<Box<dyn Polled>>>,
    /// Added since the last poll took them in.
    added: Mutex<Vec<Box<dyn Polled>>>,
    any_added: AtomicBool,
    /// Operations in the lists that have no callback.
    without_callback: AtomicUsize,
    /// Operations in the lists that have one.
    with_callback: AtomicUsize,
}

impl PolledList {
    /// Tests `op` from the next poll on. The caller counts it in flight
    /// (`Completions::began`); [`PolledList::poll`] counts it out.
    pub(crate) fn add(&self, op: Box<dyn Polled>) {
        self.count(&*op).fetch_add(1, Ordering::Relaxed);
        lock(&self.added).push(op);
        self.any_added.store(true, Ordering::Release);
    }

    /// Whether parked workers must come back to test (an operation without
    /// a callback is in flight). A hint: Relaxed.
    pub(crate) fn needs_parked_polls(&self) -> bool {
        self.without_callback.load(Ordering::Relaxed) != 0
    }

    /// Whether no operation is in the lists (a hint: Relaxed).
    pub(crate) fn is_empty(&self) -> bool {
        self.with_callback.load(Ordering::Relaxed) == 0 && !self.needs_parked_polls()
    }

    fn count(&self, op: &dyn Polled) -> &AtomicUsize {
        if op.has_callback() {
            &self.with_callback
        } else {
            &self.without_callback
        }
    }

    /// Tests every operation once, unless another thread is testing them.
    /// `ended` is called once per operation that left the list. Whether
    /// anything completed or left it, and whether one awaits its callback.
    pub(crate) fn poll(&self, ended: impl Fn()) -> (bool, bool) {
        let mut tested = match self.tested.try_lock() {
            Ok(tested) => tested,
            // A user's test runs under this lock, but inside
            // `catch_unwind` (`Promise::fulfill_when`): poison changes
            // nothing.
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return (false, false),
        };
        // Loaded before the swap: a line every polling thread would write.
        if self.any_added.load(Ordering::Relaxed) && self.any_added.swap(false, Ordering::Acquire) {
            tested.append(&mut lock(&self.added));
        }
        let (mut progressed, mut awaiting) = (false, false);
        let mut over = Vec::new();
        let mut i = 0;
        while i < tested.len() {
            match tested[i].test() {
                Tested::Pending => i += 1,
                Tested::Fired => {
                    progressed = true;
                    i += 1;
                }
                Tested::AwaitingCallback => {
                    awaiting = true;
                    i += 1;
                }
                Tested::Over => over.push(tested.swap_remove(i)),
            }
        }
        drop(tested);
        progressed |= !over.is_empty();
        for op in over {
            self.count(&*op).fetch_sub(1, Ordering::Relaxed);
            ended();
            // Outside the lock, and caught: a user's test may own anything,
            // and its drop may panic.
            drop_or_report("the drop of a test given to Promise::fulfill_when", op);
        }
        (progressed, awaiting)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{Polled, PolledList, Tested};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// Ends at its `ends_at`-th test.
    struct Counting {
        tests: Arc<AtomicUsize>,
        ends_at: usize,
        callback: bool,
    }

    impl Polled for Counting {
        fn test(&mut self) -> Tested {
            if self.tests.fetch_add(1, Ordering::Relaxed) + 1 >= self.ends_at {
                Tested::Over
            } else {
                Tested::Pending
            }
        }
        fn has_callback(&self) -> bool {
            self.callback
        }
    }

    #[test]
    fn an_operation_is_tested_until_it_ends_then_counted_out_once() {
        let list = PolledList::default();
        let tests = Arc::new(AtomicUsize::new(0));
        list.add(Box::new(Counting {
            tests: Arc::clone(&tests),
            ends_at: 3,
            callback: false,
        }));
        assert!(list.needs_parked_polls());
        let ended = AtomicUsize::new(0);
        let count = || {
            ended.fetch_add(1, Ordering::Relaxed);
        };
        assert!(!list.poll(count).0);
        assert!(!list.poll(count).0);
        assert!(list.poll(count).0);
        assert!(!list.poll(count).0);
        assert_eq!(tests.load(Ordering::Relaxed), 3);
        assert_eq!(ended.load(Ordering::Relaxed), 1);
        assert!(!list.needs_parked_polls());
    }

    #[test]
    fn operations_with_a_callback_need_no_parked_polls() {
        let list = PolledList::default();
        list.add(Box::new(Counting {
            tests: Arc::new(AtomicUsize::new(0)),
            ends_at: 1,
            callback: true,
        }));
        assert!(!list.needs_parked_polls());
        assert!(list.poll(|| ()).0);
    }

    /// A test that adds an operation (a user's test may make a promise)
    /// does not deadlock: the new one waits in the second list.
    #[test]
    fn a_test_may_add_an_operation() {
        struct Adding(Arc<PolledList>, bool);
        impl Polled for Adding {
            fn test(&mut self) -> Tested {
                if !self.1 {
                    self.1 = true;
                    self.0.add(Box::new(Counting {
                        tests: Arc::new(AtomicUsize::new(0)),
                        ends_at: 1,
                        callback: true,
                    }));
                }
                Tested::Over
            }
            fn has_callback(&self) -> bool {
                true
            }
        }
        let list = Arc::new(PolledList::default());
        list.add(Box::new(Adding(Arc::clone(&list), false)));
        let ended = AtomicUsize::new(0);
        let count = || {
            ended.fetch_add(1, Ordering::Relaxed);
        };
        assert!(list.poll(count).0);
        assert!(list.poll(count).0);
        assert_eq!(ended.load(Ordering::Relaxed), 2);
    }
}

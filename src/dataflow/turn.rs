//! `Turn`: a completion in a `Data` handle's order that the accesses after
//! it wait for: a task's writes' (one for all it writes), a `read_now`
//! guard's, a graph run's. (A task's reads share their version's
//! completion instead: `readers.rs`.)
//!
//! An access that ran ends its turn by fulfilling the completion. One that
//! never runs (its task was cancelled: a dependency it declared broke, or
//! its runtime shut down while it waited) passes the turn on instead: its
//! completion is fulfilled once the accesses it was ordered after are
//! over, by a relay (`settle.rs`). So a completion is never broken, and a
//! cancelled access costs the accesses after it nothing but its place in
//! the order: they run, and find the value as the last access that ran
//! left it. (Nothing of the value was touched by the cancelled one.)

use crate::dataflow::event::Dep;
use crate::dataflow::promise::Promise;
use crate::dataflow::settle::relay;
use crate::dataflow::turn_deps::TurnDeps;

/// An access's completion, and the completions it waits for.
pub(crate) struct Turn {
    done: Option<Promise>,
    /// The completions of the accesses before it that were not over yet
    /// when it was recorded: what a turn passed on waits for.
    before: TurnDeps,
}

impl Turn {
    /// A completion that waits for nothing yet.
    pub(crate) fn new() -> Self {
        Self {
            done: Some(Promise::new()),
            before: TurnDeps::NONE,
        }
    }

    /// The completion, for the handles' logs.
    pub(crate) fn dep(&self) -> Dep {
        self.done.as_ref().expect("a turn not over").dep()
    }

    /// Notes that the access comes after `before`, which a turn passed on
    /// waits for.
    pub(crate) fn after(&mut self, before: Dep) {
        self.before.push(before);
    }

    /// The completions it comes after.
    pub(crate) fn before(&self) -> &TurnDeps {
        &self.before
    }

    /// Ends the turn of an access that had it: the accesses after it may
    /// start.
    pub(crate) fn end(mut self) {
        if let Some(done) = self.done.take() {
            done.fulfill();
        }
        if self.before.is_bare() {
            // Nothing left to drop: skip the drop glue (a declared task's
            // hot path; most accesses come after nothing pending).
            std::mem::forget(self);
        }
        // Otherwise what it came after drops with `self`.
    }
}

impl Drop for Turn {
    /// The access never had its turn: it passes it on once the accesses
    /// before it are over.
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            relay(
                std::mem::replace(&mut self.before, TurnDeps::NONE),
                done.into_group(),
            );
        }
    }
}

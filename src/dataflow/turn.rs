//! `Turn`: one access's completion in a `Data` handle's order, which the
//! accesses after it wait for.
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

/// An access's completion, and the completions it waits for.
pub(crate) struct Turn {
    done: Option<Promise>,
    /// The completions of the accesses before it that were not over yet
    /// when it was recorded: what a turn passed on waits for.
    before: Before,
}

/// The completions a turn comes after. One is kept in place, so that a
/// task after at most one pending access (a chain of writes, reads after a
/// write) allocates nothing; more go to a vector. The whole is no bigger
/// than a vector: a turn lives in every declared task's closure, which is
/// written into the task's block, and a few inline slots made that 16
/// bytes longer for every task.
enum Before {
    One(Dep),
    Many(Vec<Dep>),
}

impl Before {
    const NONE: Before = Before::Many(Vec::new());
}

impl Turn {
    /// A completion that waits for nothing yet.
    pub(crate) fn new() -> Self {
        Self {
            done: Some(Promise::new()),
            before: Before::NONE,
        }
    }

    /// The completion, for the handles' logs.
    pub(crate) fn dep(&self) -> Dep {
        self.done.as_ref().expect("a turn not over").dep()
    }

    /// Notes that the access comes after `before`, which a turn passed on
    /// waits for.
    pub(crate) fn after(&mut self, before: Dep) {
        match &mut self.before {
            Before::Many(deps) if deps.is_empty() => self.before = Before::One(before),
            Before::Many(deps) => deps.push(before),
            Before::One(_) => {
                let Before::One(first) = std::mem::replace(&mut self.before, Before::NONE) else {
                    unreachable!()
                };
                self.before = Before::Many(vec![first, before]);
            }
        }
    }

    /// The completions it comes after.
    pub(crate) fn before(&self) -> impl Iterator<Item = &Dep> {
        match &self.before {
            Before::One(dep) => std::slice::from_ref(dep).iter(),
            Before::Many(deps) => deps.iter(),
        }
    }

    /// Ends the turn of an access that had it: the accesses after it may
    /// start.
    pub(crate) fn end(mut self) {
        if let Some(done) = self.done.take() {
            done.fulfill();
        }
        if matches!(&self.before, Before::Many(deps) if deps.capacity() == 0) {
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
            match std::mem::replace(&mut self.before, Before::NONE) {
                Before::One(dep) => relay(std::iter::once(dep), done.into_group()),
                Before::Many(deps) => relay(deps, done.into_group()),
            }
        }
    }
}

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
//!
//! Also `Deps`, the few completions a declared task waits for, kept in
//! place when there is one.

use crate::dataflow::event::Dep;
use crate::dataflow::promise::Promise;
use crate::dataflow::settle::relay;

/// An access's completion, and the completions it waits for.
pub(crate) struct Turn {
    done: Option<Promise>,
    /// The completions of the accesses before it that were not over yet
    /// when it was recorded: what a turn passed on waits for.
    before: Deps,
}

/// A few completions: one kept in place, so that a task after at most one
/// pending access (a chain of writes, reads after a write) allocates
/// nothing; more go to a vector. The whole is no bigger than a vector: a
/// turn lives in every declared task's closure, which is written into the
/// task's block, and a few inline slots made that 16 bytes longer for
/// every task.
pub(crate) enum Deps {
    One(Dep),
    Many(Vec<Dep>),
}

static_assertions::assert_eq_size!(Deps, Vec<Dep>);

impl Deps {
    /// No completion.
    pub(crate) const NONE: Deps = Deps::Many(Vec::new());

    /// Adds `dep`.
    pub(crate) fn push(&mut self, dep: Dep) {
        match self {
            Deps::Many(deps) if deps.is_empty() => *self = Deps::One(dep),
            Deps::Many(deps) => deps.push(dep),
            Deps::One(_) => {
                let Deps::One(first) = std::mem::replace(self, Deps::NONE) else {
                    unreachable!()
                };
                *self = Deps::Many(vec![first, dep]);
            }
        }
    }

    /// The completions.
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, Dep> {
        match self {
            Deps::One(dep) => std::slice::from_ref(dep).iter(),
            Deps::Many(deps) => deps.iter(),
        }
    }

    /// Whether dropping it has nothing to do.
    fn is_bare(&self) -> bool {
        matches!(self, Deps::Many(deps) if deps.capacity() == 0)
    }
}

impl IntoIterator for Deps {
    type Item = Dep;
    type IntoIter = DepsIter;

    fn into_iter(self) -> DepsIter {
        match self {
            Deps::One(dep) => DepsIter::One(Some(dep)),
            // Nothing to free: nothing to drop (a task whose accesses all
            // had their turn, the common case, skips the vector's drop).
            Deps::Many(deps) if deps.capacity() == 0 => DepsIter::One(None),
            Deps::Many(deps) => DepsIter::Many(deps.into_iter()),
        }
    }
}

/// [`Deps`] taken apart, with an exact length (a task that waits for
/// nothing is seen to be ready without looking).
pub(crate) enum DepsIter {
    One(Option<Dep>),
    Many(std::vec::IntoIter<Dep>),
}

impl Iterator for DepsIter {
    type Item = Dep;

    #[inline]
    fn next(&mut self) -> Option<Dep> {
        match self {
            DepsIter::One(dep) => dep.take(),
            DepsIter::Many(deps) => deps.next(),
        }
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            DepsIter::One(dep) => (usize::from(dep.is_some()), Some(usize::from(dep.is_some()))),
            DepsIter::Many(deps) => deps.size_hint(),
        }
    }
}

impl ExactSizeIterator for DepsIter {}

impl Turn {
    /// A completion that waits for nothing yet.
    pub(crate) fn new() -> Self {
        Self {
            done: Some(Promise::new()),
            before: Deps::NONE,
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
    pub(crate) fn before(&self) -> &Deps {
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
                std::mem::replace(&mut self.before, Deps::NONE),
                done.into_group(),
            );
        }
    }
}

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

/// Completions a turn comes after: a few inline (a task declares a few
/// handles, each after one or two accesses), more on the heap.
enum Before {
    Inline(usize, [Option<Dep>; INLINE]),
    Heap(Vec<Dep>),
}

/// Completions kept inline by a [`Turn`]: every access made is one, so its
/// list allocates nothing in the common case.
const INLINE: usize = 3;

impl Before {
    fn push(&mut self, dep: Dep) {
        match self {
            Before::Inline(len, deps) if *len < INLINE => {
                deps[*len] = Some(dep);
                *len += 1;
            }
            Before::Inline(_, deps) => {
                let mut heap: Vec<Dep> = deps.iter_mut().filter_map(Option::take).collect();
                heap.push(dep);
                *self = Before::Heap(heap);
            }
            Before::Heap(heap) => heap.push(dep),
        }
    }

    fn iter(&self) -> impl Iterator<Item = &Dep> {
        let (inline, heap): (&[Option<Dep>], &[Dep]) = match self {
            Before::Inline(len, deps) => (&deps[..*len], &[]),
            Before::Heap(heap) => (&[], heap),
        };
        inline.iter().flatten().chain(heap)
    }

    fn take(&mut self) -> impl Iterator<Item = Dep> {
        let taken = std::mem::replace(self, Before::Inline(0, Default::default()));
        let (inline, heap) = match taken {
            Before::Inline(_, deps) => (Some(deps), Vec::new()),
            Before::Heap(heap) => (None, heap),
        };
        inline.into_iter().flatten().flatten().chain(heap)
    }
}

impl Turn {
    /// A completion that waits for nothing yet.
    pub(crate) fn new() -> Self {
        Self {
            done: Some(Promise::new()),
            before: Before::Inline(0, Default::default()),
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
    pub(crate) fn before(&self) -> impl Iterator<Item = &Dep> {
        self.before.iter()
    }

    /// Ends the turn of an access that had it: the accesses after it may
    /// start.
    pub(crate) fn end(mut self) {
        if let Some(done) = self.done.take() {
            done.fulfill();
        }
        if matches!(self.before, Before::Inline(0, _)) {
            // Nothing left to drop: skip the drop glue (a declared task's
            // hot path; most of its accesses come after nothing pending).
            std::mem::forget(self);
        }
        // Otherwise `before` drops with `self`.
    }
}

impl Drop for Turn {
    /// The access never had its turn: it passes it on once the accesses
    /// before it are over.
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            relay(self.before.take(), done.into_group());
        }
    }
}

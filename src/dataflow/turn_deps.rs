//! `TurnDeps`: the completions a turn comes after (`turn.rs`): up to two
//! kept in place, more in a vector. A write waits, per handle, for the
//! write before it and for the group of reads since (`readers.rs`), so most
//! turns come after one or two completions and allocate nothing. It lives
//! in every declared writer's closure, which is written into the task's
//! block: two in place is where that stops paying.

use crate::dataflow::event::Dep;

/// A turn's completions (see the module docs).
pub(crate) enum TurnDeps {
    /// The first two, in order, `None` after the last.
    Inline([Option<Dep>; 2]),
    Many(Vec<Dep>),
}

static_assertions::const_assert!(size_of::<TurnDeps>() <= 40);

impl TurnDeps {
    /// None.
    pub(crate) const NONE: Self = TurnDeps::Inline([None, None]);

    /// Adds `dep`.
    pub(crate) fn push(&mut self, dep: Dep) {
        match self {
            TurnDeps::Inline([first @ None, _]) => *first = Some(dep),
            TurnDeps::Inline([_, second @ None]) => *second = Some(dep),
            TurnDeps::Inline([first, second]) => {
                let all: Vec<Dep> = [first.take(), second.take(), Some(dep)]
                    .into_iter()
                    .flatten()
                    .collect();
                *self = TurnDeps::Many(all);
            }
            TurnDeps::Many(deps) => deps.push(dep),
        }
    }

    /// The completions.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Dep> {
        let (inline, many): (&[Option<Dep>], &[Dep]) = match self {
            TurnDeps::Inline(slots) => (slots, &[]),
            TurnDeps::Many(deps) => (&[], deps),
        };
        inline.iter().flatten().chain(many)
    }

    /// Whether dropping it has nothing to do.
    pub(crate) fn is_bare(&self) -> bool {
        matches!(self, TurnDeps::Inline([None, None]))
    }
}

impl IntoIterator for TurnDeps {
    type Item = Dep;
    type IntoIter = TurnDepsIter;

    fn into_iter(self) -> TurnDepsIter {
        match self {
            TurnDeps::Inline(slots) => TurnDepsIter::Inline(slots.into_iter()),
            TurnDeps::Many(deps) => TurnDepsIter::Many(deps.into_iter()),
        }
    }
}

/// [`TurnDeps`] taken apart.
pub(crate) enum TurnDepsIter {
    Inline(std::array::IntoIter<Option<Dep>, 2>),
    Many(std::vec::IntoIter<Dep>),
}

impl Iterator for TurnDepsIter {
    type Item = Dep;

    fn next(&mut self) -> Option<Dep> {
        match self {
            TurnDepsIter::Inline(slots) => slots.next().flatten(),
            TurnDepsIter::Many(deps) => deps.next(),
        }
    }
}

//! `OneOrMany`: a few values, one kept in place, more in a vector; as
//! [`Deps`], what a declared task waits for. Most declared tasks wait for
//! at most one earlier access (a chain of writes, reads after a write), so
//! they allocate nothing. The whole is no bigger than a vector: it lives in
//! every declared writer's turn, inside the task's closure, which is
//! written into the task's block.

use crate::dataflow::event::Dep;

/// A few values, one kept in place.
pub(crate) enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

/// The completions a declared task waits for.
pub(crate) type Deps = OneOrMany<Dep>;

static_assertions::assert_eq_size!(Deps, Vec<Dep>);

impl<T> OneOrMany<T> {
    /// None.
    pub(crate) const NONE: Self = OneOrMany::Many(Vec::new());

    /// Adds `value`.
    pub(crate) fn push(&mut self, value: T) {
        match self {
            OneOrMany::Many(values) if values.is_empty() => *self = OneOrMany::One(value),
            OneOrMany::Many(values) => values.push(value),
            OneOrMany::One(_) => {
                let OneOrMany::One(first) = std::mem::replace(self, Self::NONE) else {
                    unreachable!()
                };
                *self = OneOrMany::Many(vec![first, value]);
            }
        }
    }

    /// The values.
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, T> {
        match self {
            OneOrMany::One(value) => std::slice::from_ref(value).iter(),
            OneOrMany::Many(values) => values.iter(),
        }
    }

    /// Whether dropping it has nothing to do (no value, no vector).
    pub(crate) fn is_bare(&self) -> bool {
        matches!(self, OneOrMany::Many(values) if values.capacity() == 0)
    }
}

impl<T> IntoIterator for OneOrMany<T> {
    type Item = T;
    type IntoIter = OneOrManyIter<T>;

    fn into_iter(self) -> OneOrManyIter<T> {
        match self {
            OneOrMany::One(value) => OneOrManyIter::One(Some(value)),
            // Nothing to free: nothing to drop (a task whose accesses all
            // had their turn, the common case, skips the vector's drop).
            OneOrMany::Many(values) if values.capacity() == 0 => OneOrManyIter::One(None),
            OneOrMany::Many(values) => OneOrManyIter::Many(values.into_iter()),
        }
    }
}

/// [`OneOrMany`] taken apart, with an exact length (a task that waits for
/// nothing is seen to be ready without looking).
pub(crate) enum OneOrManyIter<T> {
    One(Option<T>),
    Many(std::vec::IntoIter<T>),
}

impl<T> Iterator for OneOrManyIter<T> {
    type Item = T;

    #[inline]
    fn next(&mut self) -> Option<T> {
        match self {
            OneOrManyIter::One(value) => value.take(),
            OneOrManyIter::Many(values) => values.next(),
        }
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        match self {
            OneOrManyIter::One(value) => {
                let n = usize::from(value.is_some());
                (n, Some(n))
            }
            OneOrManyIter::Many(values) => values.size_hint(),
        }
    }
}

impl<T> ExactSizeIterator for OneOrManyIter<T> {}

//! A waiter's dependencies (`event.rs`): sorted by event address, without
//! duplicates, a few kept in place (every delayed task has such a list, and
//! most wait for one to four events).

use crate::dataflow::inline_vec::InlineVec;

/// Dependencies kept inline before a waiter spills them to the heap.
const INLINE_DEPS: usize = 4;

/// What a [`DepList`] holds: a dependency (`event.rs`'s `Dep`, a type
/// parameter so that this file, below `event.rs`, need not name it),
/// sorted and told apart by the address of the event it names.
pub(crate) trait EventKey {
    /// The event's address.
    fn key(&self) -> usize;
}

/// A waiter's dependencies, sorted by event address, without duplicates.
pub(crate) struct DepList<Dep>(Kept<Dep>);

enum Kept<Dep> {
    Inline(InlineVec<Dep, INLINE_DEPS>),
    Heap(Box<[Dep]>),
}

impl<Dep: EventKey> DepList<Dep> {
    pub(crate) fn collect(deps: impl IntoIterator<Item = Dep>) -> Self {
        let mut iter = deps.into_iter();
        let mut inline = InlineVec::new();
        if iter.size_hint() == (1, Some(1)) {
            // One dependency, the most common list: nothing to sort.
            let Some(d) = iter.next() else {
                return DepList(Kept::Inline(inline));
            };
            let Ok(()) = inline.push(d) else {
                unreachable!("an empty list has room")
            };
            // A hint is only a hint: one that yields more goes on.
            return match iter.next() {
                None => DepList(Kept::Inline(inline)),
                Some(d) => Self::sorted(inline, std::iter::once(d).chain(iter)),
            };
        }
        Self::sorted(inline, iter)
    }

    /// Adds what `iter` yields to `inline`, sorted and without duplicates.
    /// A panicking iterator drops what was collected so far, with the
    /// vector.
    fn sorted(
        mut inline: InlineVec<Dep, INLINE_DEPS>,
        mut iter: impl Iterator<Item = Dep>,
    ) -> Self {
        while let Some(d) = iter.next() {
            // Insertion sort, dropping duplicates: a task listing the same
            // promise twice waits for it once. The new dependency goes
            // last and swaps down past larger keys (swaps, not a rotation
            // or a copy: this runs for every delayed task, and a call to
            // move a few words costs more than the sort).
            let key = d.key();
            if let Err(d) = inline.push(d) {
                return Self::spill(inline, d, iter);
            }
            let held = inline.as_mut_slice();
            let mut at = held.len() - 1;
            while at > 0 {
                let prev = held[at - 1].key();
                if prev < key {
                    break;
                }
                if prev == key {
                    // The copy already held is kept; this one's ref goes.
                    drop(inline.remove(at));
                    break;
                }
                held.swap(at - 1, at);
                at -= 1;
            }
        }
        DepList(Kept::Inline(inline))
    }

    /// More dependencies than fit inline: all of them, sorted and
    /// deduplicated, on the heap.
    #[cold]
    fn spill(
        mut inline: InlineVec<Dep, INLINE_DEPS>,
        next: Dep,
        rest: impl Iterator<Item = Dep>,
    ) -> Self {
        let mut all = Vec::new();
        inline.move_to(&mut all);
        all.push(next);
        all.extend(rest);
        all.sort_unstable_by_key(Dep::key);
        all.dedup_by(|a, b| a.key() == b.key());
        DepList(Kept::Heap(all.into_boxed_slice()))
    }

    /// The dependencies, in order.
    pub(crate) fn as_slice(&self) -> &[Dep] {
        match &self.0 {
            Kept::Inline(deps) => deps.as_slice(),
            Kept::Heap(deps) => deps,
        }
    }
}

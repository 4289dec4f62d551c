//! A waiter's dependencies (`event.rs`): sorted by event address, without
//! duplicates, a few kept in place (every delayed task has such a list, and
//! most wait for one to four events).

use crate::dataflow::event::Dep;

/// Dependencies kept inline before a waiter spills them to the heap.
const INLINE_DEPS: usize = 4;

/// A waiter's dependencies, sorted by event address, without duplicates.
pub(crate) enum DepList {
    Inline {
        len: usize,
        deps: [Option<Dep>; INLINE_DEPS],
    },
    Heap(Box<[Dep]>),
}

impl DepList {
    pub(crate) fn collect(deps: impl IntoIterator<Item = Dep>) -> Self {
        let mut iter = deps.into_iter();
        let mut inline: [Option<Dep>; INLINE_DEPS] = [None, None, None, None];
        let mut len = 0;
        for d in iter.by_ref() {
            if len == INLINE_DEPS {
                return Self::spill(inline, d, iter);
            }
            // Insertion sort, dropping duplicates: a task listing the same
            // promise twice waits for it once. The new dependency goes in
            // the empty slot at `len` and swaps down past larger keys
            // (swaps, not a rotation: this runs for every delayed task, and
            // a slice rotation is a call that costs more than the sort).
            let key = d.key();
            inline[len] = Some(d);
            let mut at = len;
            let mut duplicate = false;
            while at > 0 {
                let prev = inline[at - 1].as_ref().map_or(0, Dep::key);
                if prev < key {
                    break;
                }
                if prev == key {
                    duplicate = true;
                    break;
                }
                inline.swap(at - 1, at);
                at -= 1;
            }
            if duplicate {
                // The copy already held is kept; this one's ref goes.
                inline[at] = None;
                // Close the gap it leaves (the slots after it moved up by
                // one when it swapped down past them).
                for k in at..len {
                    inline.swap(k, k + 1);
                }
                continue;
            }
            len += 1;
        }
        DepList::Inline { len, deps: inline }
    }

    /// More dependencies than fit inline: all of them, sorted and
    /// deduplicated, on the heap.
    #[cold]
    fn spill(
        inline: [Option<Dep>; INLINE_DEPS],
        next: Dep,
        rest: impl Iterator<Item = Dep>,
    ) -> Self {
        let mut all: Vec<Dep> = inline.into_iter().flatten().collect();
        all.push(next);
        all.extend(rest);
        all.sort_unstable_by_key(Dep::key);
        all.dedup_by(|a, b| a.same_as(b));
        DepList::Heap(all.into_boxed_slice())
    }

    pub(crate) fn get(&self, i: usize) -> Option<&Dep> {
        match self {
            DepList::Inline { len, deps } => deps[..*len].get(i).and_then(Option::as_ref),
            DepList::Heap(deps) => deps.get(i),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            DepList::Inline { len, .. } => *len,
            DepList::Heap(deps) => deps.len(),
        }
    }
}

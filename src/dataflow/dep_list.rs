//! A waiter's dependencies (`event.rs`): sorted by event address, without
//! duplicates, a few kept in place (every delayed task has such a list, and
//! most wait for one to four events).

use crate::dataflow::event::Dep;
use std::mem::MaybeUninit;
use std::{ptr, slice};

/// Dependencies kept inline before a waiter spills them to the heap.
const INLINE_DEPS: usize = 4;

/// A waiter's dependencies, sorted by event address, without duplicates.
pub(crate) enum DepList {
    /// The first `len` slots are written; the rest are not. Plain slots
    /// rather than `Option`s: a list is made, walked and dropped for every
    /// delayed task, and this way each touches only the dependencies held,
    /// as one slice.
    Inline {
        len: usize,
        deps: [MaybeUninit<Dep>; INLINE_DEPS],
    },
    Heap(Box<[Dep]>),
}

impl DepList {
    pub(crate) fn collect(deps: impl IntoIterator<Item = Dep>) -> Self {
        let mut iter = deps.into_iter();
        if iter.size_hint() == (1, Some(1)) {
            // One dependency, the most common list: nothing to sort.
            if let Some(d) = iter.next() {
                let mut deps = [const { MaybeUninit::uninit() }; INLINE_DEPS];
                deps[0].write(d);
                let list = DepList::Inline { len: 1, deps };
                // A hint is only a hint: one that yields more goes on.
                return match iter.next() {
                    None => list,
                    Some(d) => Self::sorted(list, std::iter::once(d).chain(iter)),
                };
            }
        }
        Self::sorted(DepList::empty(), iter)
    }

    fn empty() -> Self {
        DepList::Inline {
            len: 0,
            deps: [const { MaybeUninit::uninit() }; INLINE_DEPS],
        }
    }

    /// Adds what `iter` yields to `list`, an inline list, sorted and without
    /// duplicates. Built in place, so that a panicking iterator drops what
    /// was collected so far, with the list.
    fn sorted(mut list: Self, mut iter: impl Iterator<Item = Dep>) -> Self {
        let DepList::Inline { len, deps: inline } = &mut list else {
            unreachable!("built inline")
        };
        for d in iter.by_ref() {
            if *len == INLINE_DEPS {
                // The list forgets them first: each is moved out once.
                *len = 0;
                // SAFETY: all `INLINE_DEPS` slots are written (`len` was
                // that), and nothing else reads them once forgotten.
                let held = inline.iter().map(|s| unsafe { s.assume_init_read() });
                let all: Vec<Dep> = held.chain(std::iter::once(d)).collect();
                return Self::spill(all, iter);
            }
            // Insertion sort, dropping duplicates: a task listing the same
            // promise twice waits for it once. The new dependency goes in
            // the free slot at `len` and swaps down past larger keys (swaps,
            // not a rotation or a copy: this runs for every delayed task,
            // and a call to move a few words costs more than the sort).
            let key = d.key();
            inline[*len].write(d);
            let mut at = *len;
            *len += 1;
            while at > 0 {
                // SAFETY: `at - 1 < len`: written.
                let prev = unsafe { inline[at - 1].assume_init_ref() }.key();
                if prev < key {
                    break;
                }
                if prev == key {
                    // The copy already held is kept; this one's ref goes,
                    // and the slots after it move down into its place.
                    // SAFETY: `at < len`: written; moved out once, as the
                    // slots after it move over it.
                    let repeat = unsafe { inline[at].assume_init_read() };
                    for k in at..*len - 1 {
                        // SAFETY: `k + 1 < len`: written; each moves down
                        // once, into the slot moved out before it.
                        let moved = unsafe { inline[k + 1].assume_init_read() };
                        inline[k].write(moved);
                    }
                    *len -= 1;
                    drop(repeat);
                    break;
                }
                inline.swap(at - 1, at);
                at -= 1;
            }
        }
        list
    }

    /// More dependencies than fit inline: all of them, sorted and
    /// deduplicated, on the heap.
    #[cold]
    fn spill(mut all: Vec<Dep>, rest: impl Iterator<Item = Dep>) -> Self {
        all.extend(rest);
        all.sort_unstable_by_key(Dep::key);
        all.dedup_by(|a, b| a.same_as(b));
        DepList::Heap(all.into_boxed_slice())
    }

    /// The dependencies, in order.
    pub(crate) fn as_slice(&self) -> &[Dep] {
        match self {
            // SAFETY: the first `len` slots are written.
            DepList::Inline { len, deps } => unsafe { slice_of(deps, *len) },
            DepList::Heap(deps) => deps,
        }
    }
}

/// The first `len` slots of `deps`.
///
/// # Safety
/// They are written.
unsafe fn slice_of(deps: &[MaybeUninit<Dep>; INLINE_DEPS], len: usize) -> &[Dep] {
    debug_assert!(len <= INLINE_DEPS);
    // SAFETY: `MaybeUninit<Dep>` has `Dep`'s layout, and the first `len`
    // are written (caller).
    unsafe { slice::from_raw_parts(deps.as_ptr().cast::<Dep>(), len) }
}

impl Drop for DepList {
    fn drop(&mut self) {
        if let DepList::Inline { len, deps } = self {
            let held = ptr::slice_from_raw_parts_mut(deps.as_mut_ptr().cast::<Dep>(), *len);
            // SAFETY: the first `len` slots are written, and dropped once,
            // here.
            unsafe { ptr::drop_in_place(held) };
        }
    }
}

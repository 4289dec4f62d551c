//! A vector of at most `N` values kept in place: what a delayed task's
//! dependencies and a submission's lists of handles and locks use before
//! they spill to the heap. Only the values pushed are ever written, read or
//! dropped: such lists are made, walked and dropped for every task, and
//! most hold one to three values of the `N` they have room for.

use std::mem::MaybeUninit;
use std::{ptr, slice};

/// At most `N` values, in place. The first `len` slots are written; the
/// rest are not (private: nothing else can break that).
pub(crate) struct InlineVec<T, const N: usize> {
    len: usize,
    slots: [MaybeUninit<T>; N],
}

impl<T, const N: usize> InlineVec<T, N> {
    pub(crate) const fn new() -> Self {
        Self {
            len: 0,
            slots: [const { MaybeUninit::uninit() }; N],
        }
    }

    /// Appends `value`, or hands it back when all `N` slots are taken.
    #[inline(always)]
    pub(crate) fn push(&mut self, value: T) -> Result<(), T> {
        let Some(slot) = self.slots.get_mut(self.len) else {
            return Err(value);
        };
        slot.write(value);
        self.len += 1;
        Ok(())
    }

    /// Takes out the value at `at`; the ones after it move down by one (a
    /// slot at a time: a call to move a few words costs more than the
    /// words).
    ///
    /// # Panics
    /// When `at` is not below the length.
    pub(crate) fn remove(&mut self, at: usize) -> T {
        assert!(at < self.len, "remove at {at} of {}", self.len);
        // SAFETY: `at < len`: written; moved out once, as the slots after
        // it move over it.
        let removed = unsafe { self.slots[at].assume_init_read() };
        for k in at + 1..self.len {
            // SAFETY: `k < len`: written; each moves down once, into the
            // slot moved out before it.
            let moved = unsafe { self.slots[k].assume_init_read() };
            self.slots[k - 1].write(moved);
        }
        self.len -= 1;
        removed
    }

    /// Moves every value to the end of `out`, in order, leaving the vector
    /// empty.
    pub(crate) fn move_to(&mut self, out: &mut Vec<T>) {
        out.reserve(self.len);
        // Forgotten first: should a push below panic, nothing is dropped
        // twice (the rest leak).
        let len = std::mem::take(&mut self.len);
        for slot in &self.slots[..len] {
            // SAFETY: the first `len` slots were written, and the vector
            // forgot them above: each is moved out once.
            out.push(unsafe { slot.assume_init_read() });
        }
    }

    pub(crate) fn as_slice(&self) -> &[T] {
        // SAFETY: the first `len` slots are written, and `MaybeUninit<T>`
        // has `T`'s layout.
        unsafe { slice::from_raw_parts(self.slots.as_ptr().cast(), self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        // SAFETY: as in `as_slice`.
        unsafe { slice::from_raw_parts_mut(self.slots.as_mut_ptr().cast(), self.len) }
    }
}

impl<T, const N: usize> Drop for InlineVec<T, N> {
    fn drop(&mut self) {
        let written: *mut [T] = self.as_mut_slice();
        // SAFETY: the first `len` slots are written, each dropped once, here.
        unsafe { ptr::drop_in_place(written) };
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::InlineVec;
    use std::rc::Rc;

    /// Pushed, refused, removed, moved out and dropped: every value
    /// dropped exactly once, whatever way it left.
    #[test]
    fn every_value_is_dropped_once_whichever_way_it_leaves() {
        let value = Rc::new(());
        let mut v: InlineVec<Rc<()>, 4> = InlineVec::new();
        for _ in 0..4 {
            assert!(v.push(value.clone()).is_ok());
        }
        let refused = v.push(value.clone()).expect_err("full");
        drop(refused);
        assert_eq!(Rc::strong_count(&value), 5);
        drop(v.remove(1));
        assert_eq!((v.as_slice().len(), Rc::strong_count(&value)), (3, 4));
        let mut out = vec![value.clone()];
        v.move_to(&mut out);
        assert_eq!((v.as_slice().len(), out.len()), (0, 4));
        assert_eq!(Rc::strong_count(&value), 5);
        drop(out);
        for _ in 0..2 {
            assert!(v.push(value.clone()).is_ok());
        }
        assert_eq!(Rc::strong_count(&value), 3);
        drop(v);
        assert_eq!(Rc::strong_count(&value), 1);
    }

    /// `remove` keeps the order of the values after the one removed.
    #[test]
    fn remove_keeps_the_order() {
        let mut v: InlineVec<u32, 4> = InlineVec::new();
        for x in [10, 20, 30, 40] {
            v.push(x).unwrap();
        }
        assert_eq!(v.remove(1), 20);
        assert_eq!(v.as_slice(), &[10, 30, 40]);
        assert_eq!(v.remove(2), 40);
        assert_eq!(v.as_slice(), &[10, 30]);
        v.as_mut_slice().swap(0, 1);
        assert_eq!(v.as_slice(), &[30, 10]);
    }
}

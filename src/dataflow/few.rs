//! A few values on the stack, more on the heap: the lists a task's
//! submission gathers (its handles, their logs' locks, its reads' shares,
//! what it waits for), which hold one to three values for most tasks.

use crate::dataflow::inline_vec::InlineVec;

/// Up to `N` values on the stack, more on the heap. Each value is an
/// `Option`, so that a caller can take values out in place (a handle
/// declared twice is merged this way) and see the rest where they were.
pub(crate) struct Few<T, const N: usize = 8>(Kept<T, N>);

enum Kept<T, const N: usize> {
    Inline(InlineVec<Option<T>, N>),
    Heap(Vec<Option<T>>),
}

impl<T, const N: usize> Default for Few<T, N> {
    fn default() -> Self {
        Few(Kept::Inline(InlineVec::new()))
    }
}

impl<T, const N: usize> Few<T, N> {
    #[inline(always)]
    pub(crate) fn push(&mut self, value: T) {
        match &mut self.0 {
            Kept::Inline(inline) => {
                if let Err(value) = inline.push(Some(value)) {
                    self.push_more(value);
                }
            }
            Kept::Heap(heap) => heap.push(Some(value)),
        }
    }

    /// The first value beyond `N`: all of them to the heap.
    #[cold]
    fn push_more(&mut self, value: Option<T>) {
        let mut heap = Vec::with_capacity(2 * N);
        if let Kept::Inline(inline) = &mut self.0 {
            inline.move_to(&mut heap);
        }
        heap.push(value);
        self.0 = Kept::Heap(heap);
    }

    /// Takes the values out, one by one (at most as many as there are
    /// slots: a `Few` with nothing pushed is seen to be empty without
    /// looking).
    pub(crate) fn take_all(&mut self) -> impl Iterator<Item = T> + '_ {
        self.slots().iter_mut().filter_map(Option::take)
    }

    /// The values pushed, each `Some` until taken.
    #[inline]
    pub(crate) fn slots(&mut self) -> &mut [Option<T>] {
        match &mut self.0 {
            Kept::Inline(inline) => inline.as_mut_slice(),
            Kept::Heap(heap) => heap,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Few;
    use std::rc::Rc;

    /// Values pushed past the inline room move to the heap in order, and
    /// every one is dropped once: taken, or with the list.
    #[test]
    fn values_past_the_inline_room_keep_their_order_and_drop_once() {
        let value = Rc::new(());
        let mut few: Few<(usize, Rc<()>), 2> = Few::default();
        for i in 0..5 {
            few.push((i, value.clone()));
        }
        let order: Vec<usize> = few.slots().iter().flatten().map(|(i, _)| *i).collect();
        assert_eq!(order, [0, 1, 2, 3, 4]);
        assert_eq!(Rc::strong_count(&value), 6);
        let (i, taken) = few.slots()[1].take().expect("pushed");
        assert_eq!(i, 1);
        drop(taken);
        assert_eq!(few.take_all().count(), 4);
        assert_eq!(Rc::strong_count(&value), 1);
        few.push((5, value.clone()));
        drop(few);
        assert_eq!(Rc::strong_count(&value), 1);
    }
}

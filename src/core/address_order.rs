//! Free blocks handed out in address order.
//!
//! A program that makes a large graph of tasks before they run (a
//! wavefront made up front, a tiled factorisation submitted in the serial
//! algorithm's order) makes its tasks in an order that its own dependencies
//! then follow: a task and the next one made are often ready close
//! together. Blocks freed as the previous graph ran come back in the order
//! they ran, scattered over the memory, so consecutive tasks would land on
//! unrelated pages and lines; more of them than the caches and the TLB
//! hold are then each a miss when their dependencies make them ready.
//! Handing a large batch of free blocks out in ascending address order
//! puts tasks made one after the other next to each other again, as a
//! fresh allocator would.
//!
//! The batch is kept as an array of addresses, sorted once, so that the
//! blocks themselves are not touched until they are handed out (they may
//! be cold, last written by another core).

/// A batch of free blocks of type `B`, handed out lowest address first.
pub(crate) struct AddressOrdered<B> {
    /// Sorted from the highest address down: the next block is the last.
    /// Its capacity is kept between batches, so a worker that refills it
    /// round after round does not allocate.
    blocks: Vec<*mut B>,
}

impl<B> AddressOrdered<B> {
    pub(crate) const fn new() -> Self {
        Self { blocks: Vec::new() }
    }

    /// Takes `blocks` (about `count` of them) as the batch, in address
    /// order. The batch must be empty: blocks are refilled only once all
    /// were handed out.
    pub(crate) fn refill(&mut self, count: usize, blocks: impl IntoIterator<Item = *mut B>) {
        debug_assert!(self.blocks.is_empty(), "refilled while holding blocks");
        self.blocks.reserve(count);
        self.blocks.extend(blocks);
        // Descending, so that `pop` takes the lowest from the end.
        self.blocks.sort_unstable_by(|a, b| b.cmp(a));
    }

    /// The block with the lowest address left, if any.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<*mut B> {
        self.blocks.pop()
    }

    /// The block `pop` will hand out `ahead` calls from now (0: the next),
    /// for fetching it early.
    #[inline]
    pub(crate) fn ahead(&self, ahead: usize) -> Option<*mut B> {
        let len = self.blocks.len();
        len.checked_sub(ahead + 1).map(|i| self.blocks[i])
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Hands out every block left, and lets go of the array's memory (its
    /// owner gives its blocks back while idle).
    pub(crate) fn take_all(&mut self) -> Vec<*mut B> {
        std::mem::take(&mut self.blocks)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::AddressOrdered;

    /// The address of block `i` of a region (never read).
    fn at(i: usize) -> *mut u8 {
        std::ptr::without_provenance_mut((1 << 30) + i * 256)
    }

    fn handed_out(ordered: &mut AddressOrdered<u8>) -> Vec<*mut u8> {
        std::iter::from_fn(|| ordered.pop()).collect()
    }

    #[test]
    fn blocks_come_out_lowest_address_first_whatever_order_they_came_in() {
        let mut ordered = AddressOrdered::new();
        ordered.refill(8, [5, 1, 7, 0, 3, 6, 2, 4].map(at));
        assert_eq!(ordered.ahead(0), Some(at(0)));
        assert_eq!(ordered.ahead(2), Some(at(2)));
        assert_eq!(handed_out(&mut ordered), (0..8).map(at).collect::<Vec<_>>());
        assert!(ordered.is_empty());
        assert_eq!(ordered.ahead(0), None);
    }

    #[test]
    fn a_second_batch_is_ordered_on_its_own() {
        let mut ordered = AddressOrdered::new();
        ordered.refill(3, [3, 1, 2].map(at));
        assert_eq!(handed_out(&mut ordered), [1, 2, 3].map(at));
        ordered.refill(3, [9, 0, 4].map(at));
        assert_eq!(handed_out(&mut ordered), [0, 4, 9].map(at));
    }

    #[test]
    fn what_is_left_is_handed_back_whole() {
        let mut ordered = AddressOrdered::new();
        ordered.refill(4, (0..4).map(at));
        assert_eq!(ordered.pop(), Some(at(0)));
        let mut left = ordered.take_all();
        left.sort_unstable();
        assert_eq!(left, (1..4).map(at).collect::<Vec<_>>());
        assert!(ordered.is_empty());
    }
}

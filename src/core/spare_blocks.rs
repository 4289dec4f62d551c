//! Free task blocks passed between the workers of one runtime.
//!
//! A worker that frees more blocks than its pool keeps (it runs tasks that
//! another worker made) passes the surplus here in chains, and a worker
//! whose pool is empty (it makes tasks that others run) takes everything
//! here with one swap. Without it, the surplus went back to the general
//! allocator from every running thread while the making thread asked it
//! for new blocks: a task graph made on one worker and run on fifteen
//! others was built three times slower, the allocator's lock being the
//! difference.
//!
//! A Treiber stack of chains: pushed with a compare-and-swap on the head,
//! taken whole with a swap, so no node is ever popped alone and the stack
//! has no ABA problem. The Release of the push and the Acquire of the swap
//! make every link a pusher wrote visible to the taker, who then owns every
//! node it took.

// Its `pub` items are the loom models' API (`selvedge::protocols`, built
// with `--cfg loom`); elsewhere they are the crate's own.
#![cfg_attr(not(loom), allow(unreachable_pub))]

use crate::core::sync::{AtomicPtr, AtomicUsize, Ordering, UnsafeCell};
use std::ptr;

/// How many blocks the exchange holds at most (64 MiB of 256-byte blocks,
/// a round of a task graph of 128k tasks with a dependency each): a worker
/// whose surplus would go beyond its limit frees the surplus instead. A
/// worker idle for a while gives back all the exchange holds.
pub const MAX_HELD: usize = 1 << 18;

/// The exchange's limit while nobody takes from it (1 MiB of blocks): the
/// blocks of tasks made outside the workers (other than those a runtime's
/// outside pool hands out) pass through the workers, and nobody would take
/// them back. When a take finds the exchange at least
/// half full, the limit grows by what was refused since the last take (at
/// least doubling), up to [`MAX_HELD`]: a graph made on one worker needs
/// one round for the limit to fit it.
pub const MIN_LIMIT: usize = 1 << 12;

/// A node the exchange can link: a free block (memory holding no value),
/// whose link nobody else uses while the block is free.
///
/// # Safety
/// `link` returns a pointer to the same cell inside the node every time,
/// projected from the raw pointer alone (no reference to the node, whose
/// other bytes may be left over from its last use); nothing but the
/// exchange and the node's owner (whoever holds the free node) touches the
/// cell; and the nodes hold no values, so they may change threads.
pub unsafe trait Linked {
    /// The cell that links `node` to the next node of its chain.
    ///
    /// # Safety
    /// `node` points to a live node.
    unsafe fn link(node: *mut Self) -> *const UnsafeCell<*mut Self>;
}

/// Free nodes, handed between threads in chains (see the module docs).
pub struct SpareBlocks<N> {
    head: AtomicPtr<N>,
    /// About how many nodes are held: raised before a chain is pushed and
    /// zeroed when the stack is taken, so a chain pushed during a take may
    /// go uncounted until the next take (the limit is then passed by a
    /// chain or so, and an idle worker may see nothing to trim until the
    /// next push). Counting what a taker took would mean walking the list.
    held: AtomicUsize,
    /// How many nodes a push may bring the exchange to (see [`MIN_LIMIT`]).
    limit: AtomicUsize,
    /// Nodes refused since the last take.
    refused: AtomicUsize,
}

// SAFETY: the nodes are free memory, holding no value of any thread's
// (`Linked`'s contract), and they change hands through the atomic head
// alone (see the module docs); the exchange holds no node by reference.
unsafe impl<N> Send for SpareBlocks<N> {}
// SAFETY: as above.
unsafe impl<N> Sync for SpareBlocks<N> {}

impl<N: Linked> Default for SpareBlocks<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<N: Linked> SpareBlocks<N> {
    /// An empty exchange.
    pub fn new() -> Self {
        Self {
            head: AtomicPtr::new(ptr::null_mut()),
            held: AtomicUsize::new(0),
            limit: AtomicUsize::new(MIN_LIMIT),
            refused: AtomicUsize::new(0),
        }
    }

    /// Pushes the chain of `len` nodes from `first` to `last` (linked
    /// through their links; `last`'s link is overwritten). Returns `false`,
    /// leaving the chain with the caller, when the exchange already holds
    /// as many nodes as its limit allows.
    ///
    /// # Safety
    /// The caller owns every node of the chain, which is linked from
    /// `first` to `last`, and gives them up on `true`.
    pub unsafe fn push_chain(&self, first: *mut N, last: *mut N, len: usize) -> bool {
        if self.held.load(Ordering::Relaxed) >= self.limit.load(Ordering::Relaxed) {
            self.refused.fetch_add(len, Ordering::Relaxed);
            return false;
        }
        self.held.fetch_add(len, Ordering::Relaxed);
        let mut head = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: the caller owns `last`, which is live.
            let link = unsafe { &*N::link(last) };
            // SAFETY: nobody else touches an owned node's link.
            link.with_mut(|l| unsafe { *l = head });
            // Release: the chain's links (and whatever the pusher wrote in
            // its nodes) are visible to the taker that swaps it out.
            match self
                .head
                .compare_exchange_weak(head, first, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(now) => head = now,
            }
        }
    }

    /// Takes every node held: the first of a null-terminated list linked
    /// through the nodes' links, which the caller now owns (null if none),
    /// and about how many nodes it holds (a push under way may be counted
    /// before its nodes are linked in).
    pub fn take_all(&self) -> (*mut N, usize) {
        // A cheap look first: a worker whose pool is empty asks on every
        // block it makes while nobody has passed any on.
        if self.head.load(Ordering::Relaxed).is_null() {
            return (ptr::null_mut(), 0);
        }
        // Acquire: pairs with each push's Release.
        let list = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        let held = self.held.swap(0, Ordering::Relaxed);
        let refused = self.refused.swap(0, Ordering::Relaxed);
        // Takers want about as much as it holds: let it hold what it had
        // to refuse too.
        let limit = self.limit.load(Ordering::Relaxed);
        if held >= limit / 2 && limit < MAX_HELD {
            let grown = limit.saturating_add(refused.max(limit)).min(MAX_HELD);
            self.limit.store(grown, Ordering::Relaxed);
        }
        (list, held)
    }

    /// Takes every node held, as [`SpareBlocks::take_all`], to give them
    /// back to the allocator (every worker is idle): the limit falls back
    /// to [`MIN_LIMIT`] until takers want more again. An exchange found
    /// empty keeps its limit: a taker emptied it since the last push, so
    /// one is at work (a thread outside the workers making a round of
    /// tasks, slowly enough for them to go idle), and its round's blocks
    /// will come back here.
    pub fn take_all_to_free(&self) -> *mut N {
        // Acquire: pairs with each push's Release.
        let list = self.head.swap(ptr::null_mut(), Ordering::Acquire);
        if list.is_null() {
            return list;
        }
        self.limit.store(MIN_LIMIT, Ordering::Relaxed);
        self.refused.store(0, Ordering::Relaxed);
        self.held.store(0, Ordering::Relaxed);
        list
    }

    /// About how many nodes are held (see the field).
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{Linked, SpareBlocks, MIN_LIMIT};
    use crate::core::sync::UnsafeCell;
    use std::ptr;

    /// A free node: only its link.
    struct Node {
        link: UnsafeCell<*mut Node>,
    }

    // SAFETY: `link` projects the node's own link cell from the pointer.
    unsafe impl Linked for Node {
        unsafe fn link(node: *mut Node) -> *const UnsafeCell<*mut Node> {
            // SAFETY: `node` is live (caller).
            unsafe { ptr::addr_of!((*node).link) }
        }
    }

    /// Pushes a chain of `len` fresh nodes; whether the exchange took it
    /// (the nodes are freed if not).
    fn push_fresh(exchange: &SpareBlocks<Node>, len: usize) -> bool {
        let nodes: Vec<*mut Node> = (0..len)
            .map(|_| {
                Box::into_raw(Box::new(Node {
                    link: UnsafeCell::new(ptr::null_mut()),
                }))
            })
            .collect();
        for pair in nodes.windows(2) {
            // SAFETY: fresh nodes, ours alone.
            unsafe { (*pair[0]).link.with_mut(|l| *l = pair[1]) };
        }
        // SAFETY: owned, linked from first to last.
        let pushed = unsafe { exchange.push_chain(nodes[0], nodes[len - 1], len) };
        if !pushed {
            free(nodes[0]);
        }
        pushed
    }

    fn free(mut list: *mut Node) {
        while !list.is_null() {
            // SAFETY: a taken (or refused) list is ours alone, each node a
            // leaked box.
            let node = unsafe { Box::from_raw(list) };
            // SAFETY: the node is ours; its link is no one else's.
            list = node.link.with(|l| unsafe { *l });
        }
    }

    /// Fills the exchange to its limit, has one chain refused, and takes
    /// it all: the limit grows.
    fn grow_once(exchange: &SpareBlocks<Node>) {
        assert!(push_fresh(exchange, MIN_LIMIT));
        assert!(!push_fresh(exchange, 3 * MIN_LIMIT), "over the limit");
        free(exchange.take_all().0);
    }

    /// Whether the exchange takes a chain of `len` nodes once emptied.
    fn holds(exchange: &SpareBlocks<Node>, len: usize) -> bool {
        free(exchange.take_all().0);
        let first = push_fresh(exchange, MIN_LIMIT);
        let second = push_fresh(exchange, len - MIN_LIMIT);
        free(exchange.take_all().0);
        first && second
    }

    #[test]
    fn a_take_grows_the_limit_by_what_was_refused() {
        let exchange = SpareBlocks::<Node>::new();
        grow_once(&exchange);
        assert!(holds(&exchange, 4 * MIN_LIMIT));
    }

    #[test]
    fn freeing_what_the_exchange_holds_brings_the_limit_back_down() {
        let exchange = SpareBlocks::<Node>::new();
        grow_once(&exchange);
        assert!(push_fresh(&exchange, 1));
        free(exchange.take_all_to_free());
        assert!(!holds(&exchange, 4 * MIN_LIMIT));
    }

    /// Idle workers trimming while a thread outside them makes a round of
    /// tasks find the exchange emptied by that thread: the round's blocks,
    /// coming back, must still fit.
    #[test]
    fn an_exchange_found_empty_keeps_its_limit_when_trimmed() {
        let exchange = SpareBlocks::<Node>::new();
        grow_once(&exchange);
        assert!(exchange.take_all_to_free().is_null());
        assert!(holds(&exchange, 4 * MIN_LIMIT));
    }
}

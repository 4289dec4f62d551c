//! The small types the other files of a graph share: a node's public
//! name, the run slot its node tasks find their run through, and the chain
//! roles of a node.

use std::cell::UnsafeCell;

/// A node of a [`Graph`](crate::Graph): a copyable name for it, to add
/// edges with. It belongs to the graph that made it; using it with another
/// graph panics.
///
/// ```
/// let mut g = selvedge::Graph::new();
/// let first = g.node(|| {});
/// let second = g.node(|| {});
/// assert_eq!((first.index(), second.index()), (0, 1));
/// g.precede(first, second);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Node {
    pub(crate) graph: u64,
    pub(crate) index: u32,
}

impl Node {
    /// The node's position in its graph: the nodes are numbered from 0 in
    /// the order they were added.
    ///
    /// ```
    /// let mut g = selvedge::Graph::new();
    /// assert_eq!(g.node(|| {}).index(), 0);
    /// ```
    pub fn index(self) -> usize {
        self.index as usize
    }

    pub(crate) fn new(graph: u64, index: u32) -> Self {
        Self { graph, index }
    }
}

/// `NodeTask::chain` (`replay.rs`) of a node that is not a stream node.
pub(crate) const NOT_STREAMED: u32 = u32::MAX;
/// `NodeTask::chain` (`replay.rs`) of a stream node that follows its chain's head:
/// started by the head, never run on its own.
pub(crate) const CHAIN_MEMBER: u32 = u32::MAX - 1;

/// Where a graph's nodes find the state of the run under way: written by
/// the run's owner before it queues anything, read by whoever runs a node
/// in that run (the deque hand-off, or the count-down that readied the
/// node, orders the write before the read).
pub(crate) struct RunSlot(pub(crate) UnsafeCell<*const ()>);

impl RunSlot {
    pub(crate) fn new() -> Self {
        Self(UnsafeCell::new(std::ptr::null()))
    }
}

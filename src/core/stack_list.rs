//! Lists taken off a Treiber stack: pushed newest first, served oldest
//! first.
//!
//! Lock-free stacks here (a promise's waiters, the signal inbox) are
//! pushed with a compare-and-swap on their head and taken whole with a
//! swap, which leaves the taker the only owner of every node; the taker
//! reverses the list to serve nodes in the order they were pushed.

use crate::core::sync::UnsafeCell;
use std::ptr;

/// Reverses the list starting at `head` (newest first, linked through
/// `link`) and returns its new head, the oldest node; null stays null.
///
/// # Safety
/// The caller owns every node of the list (it took the list off its stack
/// with a swap whose Acquire made each node's link visible), and each
/// node's link is the `UnsafeCell` that `link` returns for it.
pub(crate) unsafe fn oldest_first<N>(
    head: *mut N,
    link: impl Fn(&N) -> &UnsafeCell<*mut N>,
) -> *mut N {
    let mut reversed: *mut N = ptr::null_mut();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: the caller owns the node, which is live.
        let node = unsafe { &*cur };
        // SAFETY: nobody else reads or writes an owned node's link.
        let next = link(node).with_mut(|n| unsafe { std::mem::replace(&mut *n, reversed) });
        reversed = cur;
        cur = next;
    }
    reversed
}

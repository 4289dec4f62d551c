//! Merging the parts of a parallel reduction in index order, without a lock.
//!
//! When a loop part gives its back iterations away, a *join node* is put
//! between the part that keeps the front (the node's left side) and the
//! part that takes the back (its right side), under whatever the splitting
//! part was to deliver to before (its [`Out`]). Each part, when done,
//! deposits its accumulator on its side and announces it with one
//! read-modify-write; the second to arrive takes both sides, merges them
//! left before right, frees the node and carries the result up to the
//! parent. Every node is completed exactly once, by whichever part
//! finishes last under it, and the value that reaches the root is the
//! in-order merge of every part.
//!
//! `None` travels in place of a value whose computation panicked (the
//! loop resumes the panic and discards the result anyway).

// Its `pub` items are the loom models' API (`selvedge::protocols`, built
// with `--cfg loom`); elsewhere they are the crate's own.
#![cfg_attr(not(loom), allow(unreachable_pub))]

use crate::core::sync::{AtomicUsize, Ordering, UnsafeCell};

/// Where a part's value goes: one side of a join node, or the root.
pub struct Out<T> {
    node: *const JoinNode<T>,
    right: bool,
}

impl<T> Clone for Out<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Out<T> {}

impl<T> Out<T> {
    /// The root: the value that arrives here is the whole reduction's.
    pub const ROOT: Self = Out {
        node: std::ptr::null(),
        right: false,
    };
}

impl<T> std::fmt::Debug for Out<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Out")
            .field("node", &self.node)
            .field("right", &self.right)
            .finish()
    }
}

/// The meeting point of two neighbouring parts.
struct JoinNode<T> {
    /// How many of the two sides have deposited.
    arrived: AtomicUsize,
    left: UnsafeCell<Option<T>>,
    right: UnsafeCell<Option<T>>,
    /// Where the merged value goes.
    parent: Out<T>,
}

/// A new join node under `parent`, returned as its (left, right) sides.
/// Each side must be deposited exactly once; the node is freed by the
/// second deposit.
pub fn split<T>(parent: Out<T>) -> (Out<T>, Out<T>) {
    let node = Box::into_raw(Box::new(JoinNode {
        arrived: AtomicUsize::new(0),
        left: UnsafeCell::new(None),
        right: UnsafeCell::new(None),
        parent,
    }));
    (Out { node, right: false }, Out { node, right: true })
}

/// Delivers `value` to `out`, completing every node this deposit is the
/// second to reach, with `merge(left, right)` (which may fail, giving
/// `None`). Returns the value that reached the root, if this call brought
/// it there.
///
/// # Safety
/// `out` came from [`split`] (or is [`Out::ROOT`]) and has not been
/// deposited to before; no other call deposits to it.
pub unsafe fn deposit<T>(
    mut out: Out<T>,
    mut value: Option<T>,
    mut merge: impl FnMut(T, T) -> Option<T>,
) -> Option<Option<T>> {
    loop {
        if out.node.is_null() {
            return Some(value);
        }
        // SAFETY: a node lives until its second side arrives, and this
        // side has not arrived yet (caller's promise).
        let node = unsafe { &*out.node };
        let side = if out.right { &node.right } else { &node.left };
        // SAFETY: each side is written by exactly one deposit, before it
        // announces its arrival, and read only after both arrived.
        side.with_mut(|s| unsafe { *s = value });
        // AcqRel: the first arrival publishes its side; the second sees it.
        if node.arrived.fetch_add(1, Ordering::AcqRel) == 0 {
            return None; // the other side merges
        }
        // SAFETY: both sides arrived, so nobody else holds the node; it
        // was made by `split` with `Box::new`.
        let node = unsafe { Box::from_raw(out.node as *mut JoinNode<T>) };
        // SAFETY: the node is ours alone now, and the left side's deposit
        // happened before its arrival, which the AcqRel above saw.
        let left = node.left.with_mut(|s| unsafe { (*s).take() });
        // SAFETY: the same for the right side.
        let right = node.right.with_mut(|s| unsafe { (*s).take() });
        value = match (left, right) {
            (Some(l), Some(r)) => merge(l, r),
            // A computation under one side failed (its panic is the
            // loop's to resume), so the other side's value is dropped
            // here. Its destructor is user code: a panic from it must not
            // unwind out of this deposit, or the parent would never get
            // its side and the loop would wait for it forever.
            (l, r) => {
                crate::core::unwind::drop_or_report(
                    "the destructor of a reduction's accumulator",
                    (l, r),
                );
                None
            }
        };
        out = node.parent;
    }
}

//! The block exchange (`selvedge::protocols::SpareBlocks`): workers that run
//! tasks pass their surplus free blocks on in chains, and a worker whose
//! pool is empty takes everything held with one swap. In every interleaving
//! of two pushers and a taker, every node pushed must be taken exactly
//! once, and what a pusher wrote into its nodes before the push (a free
//! block's link, here a stamp too) must be visible to the taker: loom checks
//! the cells as data races, so a push weakened to `Relaxed`, or a take
//! weakened to `Relaxed`, fails this model (a causality violation on the
//! stamp).
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::model;
use selvedge::protocols::{Linked, SpareBlocks};
use std::ptr;

/// A free block: its link, and a stamp its last owner wrote.
struct Node {
    link: UnsafeCell<*mut Node>,
    stamp: UnsafeCell<u32>,
}

// SAFETY: `link` projects the node's own link cell from the pointer, every
// time; the model's nodes hold only plain data.
unsafe impl Linked for Node {
    unsafe fn link(node: *mut Node) -> *const UnsafeCell<*mut Node> {
        // SAFETY: `node` is live (caller).
        unsafe { std::ptr::addr_of!((*node).link) }
    }
}

/// Nodes that outlive the model's threads (leaked, freed at the end).
struct Nodes(Vec<*mut Node>);
// SAFETY: the model hands the nodes between threads only through the
// exchange under test.
unsafe impl Send for Nodes {}
unsafe impl Sync for Nodes {}

fn node() -> *mut Node {
    Box::into_raw(Box::new(Node {
        link: UnsafeCell::new(ptr::null_mut()),
        stamp: UnsafeCell::new(0),
    }))
}

/// Stamps `nodes` with `stamp`, links them into a chain and pushes it.
fn push(exchange: &SpareBlocks<Node>, nodes: &[*mut Node], stamp: u32) {
    for (k, &n) in nodes.iter().enumerate() {
        let next = nodes.get(k + 1).copied().unwrap_or(ptr::null_mut());
        // SAFETY: this thread owns the nodes until the push.
        unsafe {
            (*n).stamp.with_mut(|s| *s = stamp);
            (*n).link.with_mut(|l| *l = next);
        }
    }
    // SAFETY: owned, linked from first to last.
    let pushed = unsafe { exchange.push_chain(nodes[0], nodes[nodes.len() - 1], nodes.len()) };
    assert!(pushed, "a nearly empty exchange refused a chain");
}

/// Walks a list taken whole, reading each node's stamp: (nodes, stamps).
fn walk(list: *mut Node, seen: &mut Vec<(*mut Node, u32)>) {
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: a taken list is the taker's alone.
        let (stamp, next) = unsafe { ((*cur).stamp.with(|s| *s), (*cur).link.with(|l| *l)) };
        seen.push((cur, stamp));
        cur = next;
    }
}

#[test]
fn every_pushed_block_is_taken_once_with_its_pushers_writes() {
    model(|| {
        let exchange = Arc::new(SpareBlocks::<Node>::new());
        let all = Arc::new(Nodes((0..3).map(|_| node()).collect()));
        // Two pushers: a chain of two nodes, and a chain of one.
        let pushers: Vec<_> = [(0..2, 1u32), (2..3, 2u32)]
            .into_iter()
            .map(|(range, stamp)| {
                let (exchange, all) = (exchange.clone(), all.clone());
                thread::spawn(move || push(&exchange, &all.0[range], stamp))
            })
            .collect();
        // The taker, racing them: takes until it has seen every node, so
        // that it learns of each push through the exchange alone (a join
        // would order the pushers' writes before its reads by itself).
        let mut seen = Vec::new();
        while seen.len() < 3 {
            walk(exchange.take_all().0, &mut seen);
            if seen.len() < 3 {
                thread::yield_now();
            }
        }
        for p in pushers {
            p.join().unwrap();
        }
        assert!(exchange.take_all().0.is_null(), "a node left behind");
        assert_eq!(seen.len(), 3, "a node taken twice or lost: {seen:?}");
        for (k, &n) in all.0.iter().enumerate() {
            let expected = if k < 2 { 1 } else { 2 };
            let found: Vec<u32> = seen
                .iter()
                .filter(|(m, _)| *m == n)
                .map(|(_, s)| *s)
                .collect();
            assert_eq!(found, [expected], "node {k}: taken {found:?}");
        }
        for &n in &all.0 {
            // SAFETY: every thread is joined; the nodes are ours again.
            drop(unsafe { Box::from_raw(n) });
        }
    });
}

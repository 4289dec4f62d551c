//! Resolving a graph's dependencies once: every node's successors as a
//! range of one shared array, its count of predecessors, the nodes with
//! none (where a run starts), and the check that there is no cycle.

use crate::graph::chain::{find_chains, StreamWork};
use crate::graph::ids::{RunSlot, CHAIN_MEMBER, NOT_STREAMED};
use std::ptr::NonNull;

/// What [`prepare`] needs of a node: implemented by `replay.rs`'s
/// `NodeTask`, which runs on the plan (so this file cannot name it).
pub(crate) trait PlanNode {
    /// The node's work as a stream node's, if it is one.
    fn stream_work(&mut self) -> Option<&mut dyn StreamWork>;

    /// Records the node's successor range, predecessor count, chain and
    /// run slot, ready for a run.
    fn set_links(
        &mut self,
        first: u32,
        end: u32,
        predecessors: u32,
        chain: u32,
        slot: NonNull<RunSlot>,
    );
}

/// A graph's resolved dependencies, valid until the graph changes.
pub(crate) struct Plan {
    /// Every node's successors, node after node (each node holds its
    /// range): one array, so a finishing node reads one contiguous run.
    pub(crate) successors: Box<[u32]>,
    /// The nodes without predecessors, in the order they were added.
    pub(crate) roots: Box<[u32]>,
    /// Each chain of stream nodes (see `chain.rs`) as a range of
    /// `chain_nodes`, which lists them chain after chain, head first.
    pub(crate) chains: Box<[(u32, u32)]>,
    pub(crate) chain_nodes: Box<[u32]>,
    /// Where the nodes find the state of the run under way: allocated on
    /// its own, so its address, which every node holds, stays put when the
    /// graph moves. Owned through this raw pointer (freed by `Drop`), not
    /// a `Box`: moving a `Box` asserts unique access to what it points to,
    /// which the nodes' pointers would contradict.
    slot: NonNull<RunSlot>,
}

impl Plan {
    /// The run slot (see the field).
    pub(crate) fn slot(&self) -> NonNull<RunSlot> {
        self.slot
    }
}

impl Drop for Plan {
    fn drop(&mut self) {
        // SAFETY: the slot came from `Box::leak` in `prepare` and is freed
        // once, here; the nodes that point to it are only read in a
        // run, which borrows the graph (and so this plan) for its length.
        drop(unsafe { Box::from_raw(self.slot.as_ptr()) });
    }
}

/// Resolves the dependencies of `nodes` given by `edges` (predecessor
/// first) and stores in each node its successor range, its predecessor
/// count (its count of unfinished predecessors starts there), and the
/// plan's run slot. Returns the nodes on a cycle, each before the next and
/// the last before the first, when the edges form one.
pub(crate) fn prepare(nodes: &mut [impl PlanNode], edges: &[(u32, u32)]) -> Result<Plan, Vec<u32>> {
    let n = nodes.len();
    let (start, successors, preds) = lay_out(n, edges);
    // Kahn's algorithm: whatever is never freed of its predecessors lies
    // on a cycle or after one.
    let roots: Box<[u32]> = (0..n as u32).filter(|&i| preds[i as usize] == 0).collect();
    let mut left = preds.clone();
    let mut ready: Vec<u32> = roots.to_vec();
    let mut ordered = 0usize;
    while let Some(i) = ready.pop() {
        ordered += 1;
        for &s in &successors[start[i as usize] as usize..start[i as usize + 1] as usize] {
            left[s as usize] -= 1;
            if left[s as usize] == 0 {
                ready.push(s);
            }
        }
    }
    if ordered < n {
        return Err(find_cycle(&left, edges));
    }
    // Stream nodes linked one to one run as chains; what a node recorded
    // of the chain it headed goes, the chains may have changed.
    let keys: Vec<Option<usize>> = nodes
        .iter_mut()
        .map(|node| {
            node.stream_work().map(|work| {
                work.forget_chain();
                work.chain_key()
            })
        })
        .collect();
    let mut role = vec![NOT_STREAMED; n];
    let mut chains = Vec::new();
    let mut chain_nodes = Vec::new();
    for chain in find_chains(&keys, &start, &successors, &preds) {
        let at = chain_nodes.len() as u32;
        role[chain[0] as usize] = chains.len() as u32;
        for &member in &chain[1..] {
            role[member as usize] = CHAIN_MEMBER;
        }
        chain_nodes.extend_from_slice(&chain);
        chains.push((at, chain_nodes.len() as u32));
    }
    let slot = NonNull::from(Box::leak(Box::new(RunSlot::new())));
    for (i, node) in nodes.iter_mut().enumerate() {
        node.set_links(start[i], start[i + 1], preds[i], role[i], slot);
    }
    Ok(Plan {
        successors,
        roots,
        chains: chains.into_boxed_slice(),
        chain_nodes: chain_nodes.into_boxed_slice(),
        slot,
    })
}

/// The successor lists of `n` nodes joined by `edges`, by counting sort on
/// the predecessor: node i's successors are
/// `successors[start[i]..start[i + 1]]`, in the order their edges were
/// added; `preds[i]` counts node i's predecessors.
pub(crate) fn lay_out(n: usize, edges: &[(u32, u32)]) -> (Vec<u32>, Box<[u32]>, Vec<u32>) {
    let mut start = vec![0u32; n + 1];
    let mut preds = vec![0u32; n];
    for &(from, to) in edges {
        start[from as usize + 1] += 1;
        preds[to as usize] += 1;
    }
    for i in 0..n {
        start[i + 1] += start[i];
    }
    let mut fill = start.clone();
    let mut successors = vec![0u32; edges.len()].into_boxed_slice();
    for &(from, to) in edges {
        let at = &mut fill[from as usize];
        successors[*at as usize] = to;
        *at += 1;
    }
    (start, successors, preds)
}

/// One cycle among the nodes Kahn's algorithm could not order (`left[i] >
/// 0`): each of them has a predecessor among them, so walking from one to
/// a predecessor, and on, must come back to a node already seen.
fn find_cycle(left: &[u32], edges: &[(u32, u32)]) -> Vec<u32> {
    let stuck = |i: u32| left[i as usize] > 0;
    let mut predecessor = vec![u32::MAX; left.len()];
    for &(from, to) in edges {
        if stuck(from) && stuck(to) {
            predecessor[to as usize] = from;
        }
    }
    let first = (0..left.len() as u32)
        .find(|&i| stuck(i))
        .expect("an unordered graph has a node left");
    // Walk back until a node repeats; the walk from its first visit on is
    // the cycle, backwards.
    let mut seen_at = vec![usize::MAX; left.len()];
    let mut walk = Vec::new();
    let mut at = first;
    while seen_at[at as usize] == usize::MAX {
        seen_at[at as usize] = walk.len();
        walk.push(at);
        at = predecessor[at as usize];
        debug_assert!(at != u32::MAX, "every stuck node has a stuck predecessor");
    }
    let mut cycle = walk.split_off(seen_at[at as usize]);
    cycle.reverse();
    // Told from the node added first, so the same cycle reads the same
    // wherever the walk entered it.
    let earliest = (0..cycle.len()).min_by_key(|&i| cycle[i]).unwrap_or(0);
    cycle.rotate_left(earliest);
    cycle
}

#[cfg(test)]
mod tests {
    use super::find_cycle;

    #[test]
    fn a_cycle_is_found_in_edge_order_from_its_earliest_node_past_a_tail() {
        // 0 -> 1 -> 2 -> 3 -> 1, and 4 after 3: 0 is ordered, the rest not.
        let edges = [(0, 1), (1, 2), (2, 3), (3, 1), (3, 4)];
        let left = [0, 1, 1, 1, 1];
        assert_eq!(find_cycle(&left, &edges), [1, 2, 3]);
    }

    #[test]
    fn a_self_edge_is_a_cycle_of_one() {
        assert_eq!(find_cycle(&[1], &[(0, 0)]), [0]);
    }
}

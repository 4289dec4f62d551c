//! Graphs of tasks built once and run many times.
//!
//! An iterative program (a solver's sweeps, a simulation's time steps, a
//! model's training steps) often runs the same dependency graph on every
//! iteration. Built with promises and delayed tasks, each iteration pays
//! again for every promise, every parked task and every dependency walk. A
//! [`Graph`](build::Graph) resolves its dependencies once, when it is first
//! run after a change: each node keeps the range of its successors in one
//! shared array and its count of predecessors. A run then only resets one
//! counter per node, queues the nodes that have no predecessor, and, as each
//! node finishes, counts down its successors' counters; the one that brings a
//! counter to zero runs that successor itself (or queues it, when it readied
//! more than one). Nodes are their own tasks (their task header lives in the
//! node), so a run allocates nothing.
//!
//! The files: `build.rs` (the graph and its nodes, names and edges),
//! `ids.rs` (a node's public name, the run slot, a node's chain role),
//! `plan.rs` (successor lists, counts, roots and the cycle check),
//! `replay.rs` (running a prepared graph on the workers), `countdown.rs` (a
//! node's count of unfinished predecessors, reused run after run),
//! `chain.rs` (nodes whose work goes onto a device's stream and completes
//! later, run as chains),
//! `data.rs` (nodes that declare the `Data` they use: the edges their
//! accesses imply, and each run's access to the handles), `error.rs` (what
//! a failed check or run reports).

#[cfg(not(loom))]
pub(crate) mod build;
#[cfg(not(loom))]
pub(crate) mod chain;
pub(crate) mod countdown;
#[cfg(not(loom))]
pub(crate) mod data;
#[cfg(not(loom))]
pub(crate) mod error;
#[cfg(not(loom))]
pub(crate) mod ids;
#[cfg(not(loom))]
mod plan;
#[cfg(not(loom))]
pub(crate) mod replay;

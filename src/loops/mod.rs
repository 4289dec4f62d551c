//! Parallel loops: [`parallel_for`](crate::parallel_for) with strides,
//! reductions and dataflow dependencies, and
//! [`par_chunks_mut`](crate::par_chunks_mut) /
//! [`par_iter_mut`](crate::par_iter_mut) over slices.
//!
//! A loop is split lazily. It starts as one *part* holding every iteration,
//! run in place by the caller (or as one task, for `spawn` and delayed
//! loops). Between iterations the part checks its worker's mailbox, one
//! relaxed load. Only when a thief's request is there, and the deque has no
//! task to give it, does the worker split a loop: the oldest loop on its
//! stack that has iterations to spare keeps its front and sends the back
//! `remaining / (thieves + 1)` iterations to the thief as a new part. So a
//! loop nested in a loop costs no task at all until some worker is idle,
//! and a thief gets the coarsest work there is (outer iterations, not the
//! tail of an inner loop).
//!
//! A reduction gives each part its own accumulator. A split puts a join
//! node ([`crate::loops::merge`]) between the part that keeps the front and the
//! part that takes the back; whichever of the two finishes second merges
//! them (left before right, so the merge order is the index order) and
//! passes the result up, so the whole reduction merges on the workers that
//! finish last, without a lock.
//!
//! A `depends_on_each` loop checks, before each iteration, whether that
//! iteration's promise is fulfilled (once per bucket). When it is not, the
//! iterations of that bucket become a part parked on the bucket's promise,
//! and the loop goes on with the next bucket: each iteration starts the
//! moment its promise is fulfilled, and no worker waits for it.
//!
//! Every part of a loop counts in the loop's `pending` count: a blocking
//! loop's caller waits (working) until it reaches zero; a spawned loop's
//! last part fulfills the promise its handle waits on.
//!
//! The files: `run.rs` (the `ParallelFor` builder and running a loop),
//! `slices.rs` (loops over slices), `body.rs` (what a loop computes, and
//! the folding of a block of indices), `job.rs` (the state a loop's parts
//! share), `frame.rs` (a running part's frame, the mailbox check),
//! `part.rs` (running a part, block sizing, splitting, a part queued as a
//! task), `each.rs` (per-iteration dependencies), `cancelled.rs` (what a
//! cancelled part reports), `merge.rs` (the lock-free merge tree of a
//! reduction).

#[cfg(not(loom))]
mod body;
#[cfg(not(loom))]
mod cancelled;
#[cfg(not(loom))]
mod each;
#[cfg(not(loom))]
mod frame;
#[cfg(not(loom))]
mod job;
pub(crate) mod merge;
#[cfg(not(loom))]
mod part;
#[cfg(not(loom))]
mod run;
#[cfg(not(loom))]
mod slices;

#[cfg(not(loom))]
pub use run::{parallel_for, ParallelFor};
#[cfg(not(loom))]
pub use slices::{par_chunks_mut, par_iter_mut, ParChunksMut, ParIterMut};

//! # selvedge
//!
//! Nested task parallelism with dataflow dependencies, in the style of the
//! Nim runtime [Weave]: a *work-requesting* scheduler in which every worker
//! owns a deque that only it serves (no atomic read-modify-write and no
//! fence on the owner's path), idle workers send
//! steal requests to random victims' mailboxes, and victims answer at task
//! boundaries with one task or half their deque, whichever the thief's
//! adaptive policy asks for.
//!
//! [Weave]: https://github.com/mratsim/weave
//!
//! ```
//! use selvedge::{spawn, Runtime};
//!
//! fn fib(n: u64) -> u64 {
//!     if n < 2 {
//!         return n;
//!     }
//!     let x = spawn(move || fib(n - 1)); // a handle, unlike rayon::spawn
//!     let y = fib(n - 2);
//!     x.join() + y // runs fib(n-1) in place unless a thief took it
//! }
//!
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let rt = Runtime::builder().num_threads(4).build()?;
//!     assert_eq!(rt.run(|| fib(25)), 75025);
//!     Ok(())
//! }
//! ```
//!
//! The repository's `README.md` gives an overview, and its guide
//! (`docs/guide/`, starting with `getting-started.md`) a page per
//! capability, with complete examples.
//!
//! ## The pieces
//!
//! - [`Runtime`] and [`Builder`]: worker threads; [`Runtime::run`] runs a root
//!   task and blocks, [`Runtime::spawn`] queues work from any thread without
//!   blocking, [`Runtime::sync_root`] waits until everything finished, and
//!   [`Runtime::stats`] reads per-worker counters. Dropping a runtime
//!   finishes its queued work and joins its threads (dropped inside one of
//!   its own tasks, it leaves that to a helper thread and returns).
//! - A task about to block (a channel, a lock, I/O) can say so with
//!   [`block_in_place`], which hands its worker's queued tasks to other
//!   workers first; on Linux an idle worker also takes them from a worker
//!   that stays out of the scheduler for about a millisecond.
//! - [`spawn`] returns a [`JoinHandle`]: [`JoinHandle::join`] works while it
//!   waits (or runs the task in place), resumes a panic with its payload, and
//!   the handle is a [`std::future::Future`] too.
//! - [`scope`] lets tasks borrow from the stack and waits for all of them;
//!   [`join`] is fork-join for two closures.
//! - Dataflow: a [`Promise`] is a one-shot event any thread can fulfill;
//!   [`spawn_delayed`] (and [`Runtime::spawn_delayed`],
//!   [`Scope::spawn_delayed`]) runs a task once every [`Dep`] it names is
//!   fulfilled, with no thread blocked meanwhile; a [`LoopPromise`] has one
//!   promise per iteration, so loops pipeline without barriers. A promise
//!   dropped unfulfilled cancels its waiters: [`JoinHandle::try_join`]
//!   returns a [`JoinError`] saying so.
//! - Declared data access: a [`Data`] handle holds a value that tasks reach
//!   only by declaring it: [`spawn_with`] (and [`Runtime::spawn_with`],
//!   [`Scope::spawn_with`]) hands the closure `&T` for each
//!   [`Data::read`] and `&mut T` for each [`Data::write`], ordering the
//!   tasks of each handle in submission order (a write after the previous
//!   write and the reads since; reads of one version together), with no
//!   lock on the value. A panic while writing poisons the handle: later
//!   accesses are cancelled with a message naming it, until a
//!   [`Data::recover`] access repairs it. [`JoinHandle::dep`] is any task's
//!   completion as a [`Dep`].
//! - Loops: [`parallel_for`] (with [`ParallelFor::stride`],
//!   [`ParallelFor::reduce`], [`ParallelFor::depends_on_each`] and
//!   [`ParallelFor::spawn`]), [`par_chunks_mut`] and [`par_iter_mut`]. A loop
//!   is one part until an idle worker asks for work; then the oldest loop on
//!   the busy worker gives it the back of its remaining iterations. Nested
//!   loops need no barrier, reductions merge in index order, and a
//!   `depends_on_each` loop runs iteration `i` as soon as its promise is
//!   fulfilled. [`ParChunksMut::for_each_span`] hands a worker the chunks
//!   it runs together as one slice, so a kernel with a cost per call (one
//!   that packs its operands) is called once per part (a few times when
//!   the loop is all the work there is to share), not once per chunk.
//! - [`Builder::pin_threads`] pins workers to CPUs (Linux), for machines
//!   whose kernel wakes a parked worker onto a busy CPU.
//! - GPU tasks (feature `cuda`): `gpu::Device::spawn` runs a closure that
//!   enqueues device work on its worker's stream; a host function at the
//!   end of that work fires a pre-allocated signal and a worker fulfills the
//!   task's promise, so nobody blocks on the stream; GPU tasks depending on
//!   GPU tasks wait on events on the device. Built on cudarc, loaded at run
//!   time: without a driver `Device::open` returns an error.
//!   `gpu::Device::spawn_with` declares [`Data`] accesses for a GPU task,
//!   ordered on the device between GPU tasks (events per handle).
//! - Graphs: a [`Graph`] is built once (nodes are closures, edges are
//!   [`Graph::precede`], or follow from the [`Data`] its nodes declare) and
//!   run many times ([`Graph::run`], [`Runtime::run_graph`],
//!   [`Runtime::spawn_graph`]), each run only counting predecessors down.
//! - [`named`] names the tasks a closure makes, for traces and the stall
//!   warning (both with the feature `trace`; without it, it only calls the
//!   closure).
//! - Outside any runtime, [`spawn`], [`scope`], [`join`] and the loops use
//!   a global runtime built on first use ([`global_runtime`]); its size comes
//!   from `SELVEDGE_NUM_THREADS`, else the available parallelism.

#![warn(missing_docs)]
#![warn(unreachable_pub)]
// The examples are what users copy: a handle dropped bare in one would warn
// in their code.
#![doc(test(attr(deny(unused_must_use))))]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

// The layers, lowest first; each imports only from those before it
// (`.ci/check-layers` checks it). See `docs/ARCHITECTURE.md`.
#[cfg(not(loom))]
mod api;
mod core;
mod dataflow;
#[cfg(all(feature = "cuda", not(loom)))]
pub mod gpu;
mod graph;
mod loops;
#[cfg(all(feature = "mpi", not(loom)))]
pub mod mpi;
#[cfg(not(loom))]
mod structured;

#[cfg(not(loom))]
pub use crate::api::builder::Builder;
#[cfg(not(loom))]
pub use crate::api::tasks::{current_num_threads, named, spawn};
#[cfg(not(loom))]
pub use crate::core::blocking::block_in_place;
#[cfg(not(loom))]
pub use crate::core::error::{BuildError, JoinError};
#[cfg(not(loom))]
pub use crate::core::handle::{JoinHandle, TryJoin};
#[cfg(not(loom))]
pub use crate::core::pool::{global_runtime, Runtime};
#[cfg(not(loom))]
pub use crate::core::stats::{RuntimeStats, WorkerStats};
#[cfg(not(loom))]
pub use crate::dataflow::access::{Access, Accesses};
#[cfg(not(loom))]
pub use crate::dataflow::data::{Data, DataError, Read, ReadNow, Recover, Write};
#[cfg(not(loom))]
pub use crate::dataflow::declared::spawn_with;
#[cfg(not(loom))]
pub use crate::dataflow::delayed::spawn_delayed;
#[cfg(not(loom))]
pub use crate::dataflow::event::Dep;
#[cfg(not(loom))]
pub use crate::dataflow::loop_promise::LoopPromise;
#[cfg(not(loom))]
pub use crate::dataflow::promise::Promise;
#[cfg(not(loom))]
pub use crate::graph::build::Graph;
#[cfg(not(loom))]
pub use crate::graph::error::{GraphError, NodePanic};
#[cfg(not(loom))]
pub use crate::graph::ids::Node;
#[cfg(not(loom))]
pub use crate::loops::{
    par_chunks_mut, par_iter_mut, parallel_for, ParChunksMut, ParIterMut, ParallelFor,
};
#[cfg(not(loom))]
pub use crate::structured::join::join;
#[cfg(not(loom))]
pub use crate::structured::scope::{scope, Scope};

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The guide's examples (`docs/guide/`), compiled and run as doc tests, one
/// module per page. The pages of a feature are tested with that feature
/// only; their examples that need hardware are compiled, not run.
#[cfg(doctest)]
pub mod guide {
    #[doc = include_str!("../docs/guide/getting-started.md")]
    pub mod getting_started {}
    #[doc = include_str!("../docs/guide/tasks.md")]
    pub mod tasks {}
    #[doc = include_str!("../docs/guide/dataflow.md")]
    pub mod dataflow {}
    #[doc = include_str!("../docs/guide/data.md")]
    pub mod data {}
    #[doc = include_str!("../docs/guide/graphs.md")]
    pub mod graphs {}
    #[doc = include_str!("../docs/guide/loops.md")]
    pub mod loops {}
    #[cfg(feature = "cuda")]
    #[doc = include_str!("../docs/guide/gpu.md")]
    pub mod gpu {}
    #[cfg(feature = "mpi")]
    #[doc = include_str!("../docs/guide/mpi.md")]
    pub mod mpi {}
    #[cfg(feature = "trace")]
    #[doc = include_str!("../docs/guide/traces.md")]
    pub mod traces {}
    #[doc = include_str!("../docs/guide/tuning.md")]
    pub mod tuning {}
}

/// The concurrent protocols, exposed for the loom models in `loom-tests/`
/// (built with `--cfg loom`). Not part of the public API.
#[cfg(loom)]
#[doc(hidden)]
pub mod protocols {
    pub use crate::core::deque::{Deque, Popped};
    pub use crate::core::fallback_watch::FallbackWatch;
    pub use crate::core::fire_once::{Disposal, FireOnce};
    pub use crate::core::gate::Gate;
    pub use crate::core::join_slot::{CompletionHook, Install, JoinSlot, Release};
    pub use crate::core::latch::{CountLatch, Unpark};
    pub use crate::core::park::Sleep;
    pub use crate::core::rescue::{Guarded, Owner, OwnerGuard, RescueGuard};
    pub use crate::core::signal::{SignalInbox, SignalRef};
    pub use crate::core::spare_blocks::{Linked, SpareBlocks, MAX_HELD, MIN_LIMIT};
    pub use crate::core::steal::{Mailbox, Reply, ReplySlot, StealRequest, VictimSet};
    pub use crate::core::trace::ring::EventRing;
    pub use crate::dataflow::bucket_counts::BucketCounts;
    pub use crate::dataflow::claim::Claim;
    pub use crate::dataflow::event::{Dep, Group, Outcome, Waiter};
    pub use crate::dataflow::run_record::{Noted, RunRecord};
    pub use crate::graph::countdown::Countdown;
    pub use crate::loops::merge::{deposit, split, Out};
}

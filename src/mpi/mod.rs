//! Messages between processes (feature `mpi`): MPI operations as promises.
//!
//! A [`Cluster`] is this process's rank among the MPI ranks (run the
//! program with `mpirun -n N`). Its operations (sends, receives and
//! nonblocking collectives) are posted from any thread and complete as
//! promises: each returns a [`Message`] whose [`dep`](Message::dep) tasks
//! wait on like any other dependency, so a task can wait for "the halo from
//! rank 3 arrived" and run on whichever worker is free when it does.
//!
//! One thread per cluster makes every MPI call (MPI is started on it at
//! `MPI_THREAD_FUNNELED`): it starts the operations nonblocking, tests them,
//! and when one completes fires a signal that a worker picks up to fulfill
//! the operation's promise; no worker ever blocks in MPI. The operations
//! in flight count as the runtime's pending work, so `sync_root` waits for
//! them. Once the runtime's drop has begun, operations posted from outside
//! its workers are refused at once ([`MpiError::RuntimeShutDown`]).
//! Dropping the cluster cancels the receives in flight (their promises
//! break, their handles say [`MpiError::Abandoned`]), lets the sends and
//! collectives complete, and then finalizes MPI; dropped on a worker, it
//! leaves that to the progress thread, and the runtime waits for it.
//!
//! Messages are `Vec`s of [`Element`]s (the integer and float types), moved
//! in and handed back: no borrowed buffer outlives its call. Programmer
//! errors (a rank or tag out of range) panic with a message naming the
//! value; what only the other side knows (a message of another length than
//! the receive asked for) is an error of the operation.
//!
//! A [`RankGraph`] is a graph every rank builds whole, each node annotated
//! with its rank: on its first run each rank keeps its own nodes and turns
//! the edges between ranks into sends and receives, then runs its part as a
//! [`Graph`](crate::Graph), replayed on every later run.
//!
//! The files: `cluster.rs` (the cluster and its operations),
//! `message.rs` (the handle an operation returns), `link.rs` (posting an
//! operation), `op.rs` (an operation as the progress thread gets it),
//! `engine.rs` (the progress thread), `calls.rs` (the MPI calls it makes),
//! `rank_graph.rs` (graphs split by rank), `element.rs` (the element
//! types), `error.rs`.

mod calls;
mod cluster;
mod element;
mod engine;
mod error;
mod link;
mod message;
mod op;
mod rank_graph;

pub use cluster::{Cluster, Reduce};
pub use element::Element;
pub use error::MpiError;
pub use message::Message;
/// The raw MPI bindings this module is built on, for baselines that call
/// MPI directly in a process without a cluster. Not part of the API.
#[doc(hidden)]
pub use mpi_sys;
pub use rank_graph::{RankGraph, RankNode};

//! Messages between processes (feature `mpi`): MPI operations as promises.
//!
//! A [`Cluster`] is this process's rank among the MPI ranks (run the
//! program with `mpirun -n N`). Its operations (sends, receives and
//! nonblocking collectives) are posted from any thread and complete as
//! promises: each returns a [`Message`] whose [`dep`](Message::dep) tasks
//! wait on like any other dependency, so a task can wait for "the halo from
//! rank 3 arrived" and run on whichever worker is free when it does.
//!
//! Operations start nonblocking and are tested with `MPI_Testsome`; when
//! one completes, a signal fires whose action fulfills the operation's
//! promise on a worker. No thread ever blocks in MPI. Who tests: the
//! runtime's workers, while operations are in flight (idle ones in every
//! search for work, busy ones between tasks every ten microseconds or so;
//! what they find completed runs on them at once), a thread outside the
//! pool that joins a message, while it waits, and the cluster's progress
//! thread, which started MPI and keeps the operations moving when every
//! worker runs one long task.
//! A thread that posts an operation starts it itself when no other thread
//! is testing. That needs MPI at `MPI_THREAD_SERIALIZED` (one thread at a
//! time calls MPI, under the cluster's lock); where the library gives only
//! `MPI_THREAD_FUNNELED`, or the environment variable
//! `SELVEDGE_MPI_FUNNELED` is set, the progress thread makes every MPI
//! call and workers pick up what it fired. The operations
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
//! operation), `op.rs` (an operation as the engine gets it), `engine.rs`
//! (the operations in flight and the rounds that start and test them),
//! `progress.rs` (the progress thread), `calls.rs` (the MPI calls),
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
mod progress;
mod rank_graph;

pub use cluster::{Cluster, Reduce};
pub use element::Element;
pub use error::MpiError;
pub use message::Message;
/// The raw MPI bindings this module is built on, for baselines that call
/// MPI directly in a process without a cluster (the tools' `mpi_pingpong`
/// program). Not part of the API: only with the `mpi-baseline` feature.
#[cfg(feature = "mpi-baseline")]
#[doc(hidden)]
pub use mpi_sys;
pub use rank_graph::{RankGraph, RankNode};

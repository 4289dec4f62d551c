//! What an MPI operation, or starting MPI, reports when it fails.

use std::fmt;

/// Why MPI could not start, or an operation did not complete.
///
/// ```
/// let e = selvedge::mpi::MpiError::Abandoned;
/// assert!(e.to_string().contains("abandoned"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MpiError {
    /// MPI could not be started in this process: it was started before
    /// (MPI starts once per process, and cannot start again once
    /// finished), or `MPI_Init_thread` failed or did not give the thread
    /// support the progress thread needs.
    Unavailable {
        /// What happened.
        reason: String,
    },
    /// An MPI call failed.
    Call {
        /// The call (`MPI_Isend`, ...).
        call: &'static str,
        /// The MPI error class's text.
        text: String,
    },
    /// A message received had fewer elements than the receive asked for.
    Length {
        /// The elements asked for.
        expected: usize,
        /// The elements that came.
        got: usize,
        /// The sending rank.
        source: usize,
        /// The message's tag.
        tag: i32,
    },
    /// A message received had more elements than the receive asked for
    /// (MPI truncated it).
    Truncated {
        /// The elements asked for.
        expected: usize,
        /// The sending rank.
        source: usize,
        /// The message's tag.
        tag: i32,
    },
    /// The operation was abandoned before it completed: a receive in
    /// flight when the cluster was dropped (cancelled), an operation
    /// posted after that, or one in flight when MPI failed.
    Abandoned,
    /// The operation was posted after the drop of the cluster's runtime
    /// had begun, from a thread that is not one of its workers: no worker
    /// would be left to complete it, so it was refused before MPI saw it.
    /// Drop the cluster before its runtime (or start it on the global
    /// runtime, which lives as long as the process).
    RuntimeShutDown,
    /// A [`send_after`](super::Cluster::send_after) whose dependency broke,
    /// or whose `produce` panicked: nothing was sent.
    Cancelled,
}

impl fmt::Display for MpiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MpiError::Unavailable { reason } => write!(f, "MPI is not available: {reason}"),
            MpiError::Call { call, text } => write!(f, "{call} failed: {text}"),
            MpiError::Length {
                expected,
                got,
                source,
                tag,
            } => write!(
                f,
                "a receive of {expected} elements from rank {source} (tag {tag}) got a message of {got}"
            ),
            MpiError::Truncated {
                expected,
                source,
                tag,
            } => write!(
                f,
                "a receive of {expected} elements from rank {source} (tag {tag}) got a longer message, truncated"
            ),
            MpiError::Cancelled => write!(
                f,
                "the send was cancelled: a dependency it waited for broke, or what was to produce its data panicked, so nothing was sent"
            ),
            MpiError::Abandoned => write!(
                f,
                "the operation was abandoned before it completed (its cluster was dropped, or MPI failed)"
            ),
            MpiError::RuntimeShutDown => write!(
                f,
                "the operation was refused: the cluster's runtime was dropped (or its drop had begun), so no worker is left to complete it; drop the cluster before its runtime"
            ),
        }
    }
}

impl std::error::Error for MpiError {}

//! An operation as the engine gets it: what MPI is to do, with
//! its buffers' addresses, and what to run and fire once it ended.

use super::MpiError;
use crate::core::signal::SignalRef;
use mpi_sys::{MPI_Datatype, MPI_Op};
use std::ffi::{c_int, c_void};

/// An operation for the engine to start.
pub(super) struct Op {
    pub(super) kind: Kind,
    /// Owns the operation's buffers; run once, with how it ended.
    pub(super) finish: Box<dyn FnOnce(Outcome) + Send>,
    /// Fired once `finish` ran (its action fulfills or breaks the
    /// operation's promise).
    pub(super) signal: SignalRef,
}

// SAFETY: the raw pointers in `kind` point into buffers `finish` owns
// (heap memory, which moving the closure does not move); only the thread
// that holds the engine's lock uses them, until `finish` runs.
unsafe impl Send for Op {}

/// What an operation does, with its buffers' addresses.
pub(super) enum Kind {
    Send {
        buf: *const c_void,
        count: c_int,
        datatype: MPI_Datatype,
        dest: c_int,
        tag: c_int,
    },
    Recv {
        buf: *mut c_void,
        count: c_int,
        datatype: MPI_Datatype,
        source: c_int,
        tag: c_int,
    },
    Bcast {
        buf: *mut c_void,
        count: c_int,
        datatype: MPI_Datatype,
        root: c_int,
    },
    Allreduce {
        send: *const c_void,
        recv: *mut c_void,
        count: c_int,
        datatype: MPI_Datatype,
        op: MPI_Op,
    },
}

impl Kind {
    /// The MPI call that starts it.
    pub(super) fn call(&self) -> &'static str {
        match self {
            Kind::Send { .. } => "MPI_Isend",
            Kind::Recv { .. } => "MPI_Irecv",
            Kind::Bcast { .. } => "MPI_Ibcast",
            Kind::Allreduce { .. } => "MPI_Iallreduce",
        }
    }

    /// What it is, in numbers only (no allocation on the posting path):
    /// for a message to a shutdown notice.
    pub(super) fn describe(&self) -> Described {
        let (peer, tag, count) = match *self {
            Kind::Send {
                count, dest, tag, ..
            } => (dest, tag, count),
            Kind::Recv {
                count, source, tag, ..
            } => (source, tag, count),
            Kind::Bcast { count, root, .. } => (root, -1, count),
            Kind::Allreduce { count, .. } => (-1, -1, count),
        };
        Described {
            call: self.call(),
            peer,
            tag,
            count,
        }
    }
}

/// An operation in numbers, to name it in a notice.
#[derive(Clone, Copy)]
pub(super) struct Described {
    pub(super) call: &'static str,
    /// The destination, source or root; -1 for none.
    pub(super) peer: c_int,
    /// -1 for a collective.
    pub(super) tag: c_int,
    pub(super) count: c_int,
}

impl std::fmt::Display for Described {
    /// As "MPI_Isend of 4 elements to rank 1 (tag 7): ...", saying what
    /// its end waits for.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Described {
            call,
            peer,
            tag,
            count,
        } = *self;
        let count = match count {
            1 => "1 element".to_string(),
            n => format!("{n} elements"),
        };
        match call {
            "MPI_Isend" => write!(
                f,
                "{call} of {count} to rank {peer} (tag {tag}): ends once rank {peer} receives it"
            ),
            "MPI_Irecv" => write!(
                f,
                "{call} of {count} from rank {peer} (tag {tag}): cancelled, MPI has not confirmed it yet"
            ),
            "MPI_Ibcast" => write!(
                f,
                "{call} of {count} from rank {peer}: ends once every rank joined it"
            ),
            _ => write!(
                f,
                "{call} of {count}: ends once every rank joined it"
            ),
        }
    }
}

/// How an operation ended, for its `finish`.
pub(super) enum Outcome {
    /// Complete: `count` elements arrived (a receive), from `source` with
    /// `tag`.
    Done {
        count: usize,
        source: usize,
        tag: i32,
    },
    /// Failed, or cancelled; MPI no longer uses the buffers.
    Failed(MpiError),
    /// Abandoned while MPI may still use the buffers (MPI itself failed):
    /// `finish` must leak them, not free them.
    Leaked,
}

/// What the cluster learns when MPI started.
pub(super) struct Started {
    pub(super) rank: usize,
    pub(super) size: usize,
    pub(super) tag_ub: i32,
}

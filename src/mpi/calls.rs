//! The MPI calls the engine makes (on the progress thread, or where MPI
//! gives `MPI_THREAD_SERIALIZED`, on whichever thread holds the engine's
//! lock: see `engine.rs`): starting MPI and the cluster's communicator,
//! starting an operation, testing the operations in flight, cancelling a
//! receive, reading how one ended, finalizing; and MPI's texts for its
//! error codes.

use super::op::{Kind, Outcome, Started};
use super::MpiError;
use mpi_sys::{MPI_Comm, MPI_Datatype, MPI_Request, MPI_Status};
use std::ffi::{c_int, c_void};

/// Starts MPI on this thread and makes the cluster's communicator; with
/// it, whether other threads may call MPI, one at a time (the library gave
/// `MPI_THREAD_SERIALIZED` or more, and `serialized` asked for it).
pub(super) fn init(serialized: bool) -> Result<(MPI_Comm, Started, bool), MpiError> {
    let unavailable = |reason: String| MpiError::Unavailable { reason };
    let mut provided: c_int = 0;
    // SAFETY: constants of the library, read only.
    let (funneled, serialized_level) = unsafe {
        (
            mpi_sys::RSMPI_THREAD_FUNNELED,
            mpi_sys::RSMPI_THREAD_SERIALIZED,
        )
    };
    let wanted = if serialized {
        serialized_level
    } else {
        funneled
    };
    // SAFETY: null argc/argv are allowed; `provided` is a valid
    // out-pointer. MPI is started once per process (the cluster checks).
    let rc = unsafe {
        mpi_sys::MPI_Init_thread(
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            wanted,
            &mut provided,
        )
    };
    if rc != 0 {
        return Err(unavailable(format!(
            "MPI_Init_thread failed: {}",
            error_text(rc)
        )));
    }
    // SAFETY: constants of the library, read only.
    let (world, null) = unsafe { (mpi_sys::RSMPI_COMM_WORLD, mpi_sys::RSMPI_COMM_NULL) };
    if provided < funneled {
        // SAFETY: started above, on this thread.
        unsafe { mpi_sys::MPI_Finalize() };
        return Err(unavailable(format!(
            "the MPI library gives thread support level {provided}; the progress thread needs MPI_THREAD_FUNNELED ({funneled})"
        )));
    }
    let mut comm = null;
    let (mut rank, mut size) = (0, 0);
    let mut tag_ub: *mut c_int = std::ptr::null_mut();
    let mut has_tag_ub: c_int = 0;
    // SAFETY: MPI is started on this thread; every pointer is a valid
    // out-pointer; errors return instead of aborting once the handler is
    // set.
    let rc = unsafe {
        mpi_sys::MPI_Comm_set_errhandler(world, mpi_sys::RSMPI_ERRORS_RETURN);
        // Errors tied to no object are raised on MPI_COMM_SELF (MPI-4).
        mpi_sys::MPI_Comm_set_errhandler(mpi_sys::RSMPI_COMM_SELF, mpi_sys::RSMPI_ERRORS_RETURN);
        let mut rc = mpi_sys::MPI_Comm_dup(world, &mut comm);
        if rc == 0 {
            mpi_sys::MPI_Comm_set_errhandler(comm, mpi_sys::RSMPI_ERRORS_RETURN);
            rc = mpi_sys::MPI_Comm_rank(comm, &mut rank);
        }
        if rc == 0 {
            rc = mpi_sys::MPI_Comm_size(comm, &mut size);
        }
        if rc == 0 {
            rc = mpi_sys::MPI_Comm_get_attr(
                comm,
                mpi_sys::MPI_TAG_UB as c_int,
                (&mut tag_ub as *mut *mut c_int).cast::<c_void>(),
                &mut has_tag_ub,
            );
        }
        rc
    };
    if rc != 0 {
        // SAFETY: as above; the last MPI call of this thread.
        unsafe { mpi_sys::MPI_Finalize() };
        return Err(unavailable(format!(
            "setting up the communicator failed: {}",
            error_text(rc)
        )));
    }
    // MPI guarantees at least 32767.
    let tag_ub = if has_tag_ub != 0 && !tag_ub.is_null() {
        // SAFETY: MPI returned a pointer to the attribute's value.
        unsafe { *tag_ub }
    } else {
        32767
    };
    Ok((
        comm,
        Started {
            rank: rank as usize,
            size: size as usize,
            tag_ub,
        },
        serialized && provided >= serialized_level,
    ))
}

/// Starts `kind` nonblocking on `comm`; its request, or MPI's error code.
pub(super) fn begin(kind: &Kind, comm: MPI_Comm) -> Result<MPI_Request, c_int> {
    // SAFETY: a constant of the library, read only.
    let mut request = unsafe { mpi_sys::RSMPI_REQUEST_NULL };
    // SAFETY: the caller may call MPI (engine.rs); the buffers are live and
    // hold `count` elements of `datatype` each, and stay put until the
    // operation ends (their owner, `finish`, runs only then).
    let rc = unsafe {
        match *kind {
            Kind::Send {
                buf,
                count,
                datatype,
                dest,
                tag,
            } => mpi_sys::MPI_Isend(buf, count, datatype, dest, tag, comm, &mut request),
            Kind::Recv {
                buf,
                count,
                datatype,
                source,
                tag,
            } => mpi_sys::MPI_Irecv(buf, count, datatype, source, tag, comm, &mut request),
            Kind::Bcast {
                buf,
                count,
                datatype,
                root,
            } => mpi_sys::MPI_Ibcast(buf, count, datatype, root, comm, &mut request),
            Kind::Allreduce {
                send,
                recv,
                count,
                datatype,
                op,
            } => mpi_sys::MPI_Iallreduce(send, recv, count, datatype, op, comm, &mut request),
        }
    };
    if rc == 0 {
        Ok(request)
    } else {
        Err(rc)
    }
}

/// `MPI_Testsome`'s arrays, kept from round to round.
#[derive(Default)]
pub(super) struct Tester {
    indices: Vec<c_int>,
    statuses: Vec<MPI_Status>,
    done: Vec<(usize, MPI_Status, c_int)>,
}

impl Tester {
    /// The requests that completed, by index: (index, status, error code
    /// or 0).
    pub(super) fn test_some(
        &mut self,
        requests: &mut [MPI_Request],
    ) -> Result<&[(usize, MPI_Status, c_int)], c_int> {
        let n = requests.len();
        if self.indices.len() < n {
            self.indices.resize(n, 0);
            // SAFETY: a plain C struct of integers: all zeros is a valid
            // value.
            self.statuses.resize(n, unsafe { std::mem::zeroed() });
        }
        let mut outcount: c_int = 0;
        // SAFETY: the caller may call MPI (engine.rs); the arrays hold at least
        // `n` entries.
        let rc = unsafe {
            mpi_sys::MPI_Testsome(
                n as c_int,
                requests.as_mut_ptr(),
                &mut outcount,
                self.indices.as_mut_ptr(),
                self.statuses.as_mut_ptr(),
            )
        };
        let in_status = rc != 0 && error_class(rc) == mpi_sys::MPI_ERR_IN_STATUS as c_int;
        if rc != 0 && !in_status {
            return Err(rc);
        }
        self.done.clear();
        // A negative count is MPI_UNDEFINED: no active request (cannot
        // happen: every one is).
        for k in 0..outcount.max(0) as usize {
            let status = self.statuses[k];
            let error = if in_status { status.MPI_ERROR } else { 0 };
            self.done.push((self.indices[k] as usize, status, error));
        }
        self.done.sort_unstable_by_key(|&(index, _, _)| index);
        Ok(&self.done)
    }
}

/// How a completed operation ended: `call` started it; `receive` is a
/// receive's datatype and the elements it asked for; `cancel_asked`,
/// whether it was cancelled (then it ended either way: cancelled, or
/// complete before the cancel took).
pub(super) fn outcome(
    call: &'static str,
    receive: Option<(MPI_Datatype, usize)>,
    cancel_asked: bool,
    status: &MPI_Status,
    error: c_int,
) -> Outcome {
    let source = status.MPI_SOURCE.max(0) as usize;
    let tag = status.MPI_TAG;
    if error != 0 {
        return Outcome::Failed(match receive {
            Some((_, expected)) if error_class(error) == mpi_sys::MPI_ERR_TRUNCATE as c_int => {
                MpiError::Truncated {
                    expected,
                    source,
                    tag,
                }
            }
            _ => MpiError::Call {
                call,
                text: error_text(error),
            },
        });
    }
    if cancel_asked && was_cancelled(status) {
        return Outcome::Failed(MpiError::Abandoned);
    }
    let count = match receive {
        Some((datatype, _)) => {
            let mut count: c_int = 0;
            // SAFETY: the caller may call MPI (engine.rs); the status is the
            // completed receive's.
            unsafe { mpi_sys::MPI_Get_count(status, datatype, &mut count) };
            count.max(0) as usize
        }
        None => 0,
    };
    Outcome::Done { count, source, tag }
}

/// Whether the operation whose status this is was cancelled (rather than
/// completed before the cancel took).
fn was_cancelled(status: &MPI_Status) -> bool {
    let mut flag: c_int = 0;
    // SAFETY: the caller may call MPI (engine.rs); `status` is a completed
    // request's; `flag` is a valid out-pointer.
    unsafe { mpi_sys::MPI_Test_cancelled(status, &mut flag) };
    flag != 0
}

/// Asks MPI to cancel an active receive: it then completes, cancelled or
/// (if a message matched it first) received, as a local matter (MPI
/// guarantees it ends whatever the other ranks do). `Err`: MPI's error
/// text.
pub(super) fn cancel(request: &mut MPI_Request) -> Result<(), String> {
    // SAFETY: the caller may call MPI (engine.rs); the request is active.
    let rc = unsafe { mpi_sys::MPI_Cancel(request) };
    if rc == 0 {
        Ok(())
    } else {
        Err(error_text(rc))
    }
}

/// Frees the cluster's communicator and finalizes MPI.
///
/// # Safety
/// On the thread that started MPI, as its last use of MPI: no request is
/// active (or MPI failed), and nothing uses `comm` after.
pub(super) unsafe fn finalize(mut comm: MPI_Comm) {
    // SAFETY: per the caller.
    unsafe {
        mpi_sys::MPI_Comm_free(&mut comm);
        mpi_sys::MPI_Finalize();
    }
}

/// The error class of an MPI error code (MPI libraries return codes that
/// carry more than the class: compare classes).
pub(super) fn error_class(code: c_int) -> c_int {
    let mut class: c_int = code;
    // SAFETY: a valid out-pointer; called where MPI may be called.
    unsafe { mpi_sys::MPI_Error_class(code, &mut class) };
    class
}

/// MPI's text for an error code.
pub(super) fn error_text(code: c_int) -> String {
    let mut text = vec![0 as std::ffi::c_char; mpi_sys::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds MPI_MAX_ERROR_STRING characters and more;
    // MPI_Error_string may be called before MPI starts and after it ends.
    let rc = unsafe { mpi_sys::MPI_Error_string(code, text.as_mut_ptr(), &mut len) };
    if rc != 0 {
        return format!("MPI error {code}");
    }
    let bytes: Vec<u8> = text[..len.max(0) as usize]
        .iter()
        .map(|&c| c as u8)
        .collect();
    format!("{} (MPI error {code})", String::from_utf8_lossy(&bytes))
}

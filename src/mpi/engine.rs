//! The progress engine: one thread per cluster makes every MPI call.
//!
//! MPI is started on this thread (`MPI_Init_thread` at `FUNNELED`: only
//! it calls MPI), which duplicates `MPI_COMM_WORLD` into a communicator of
//! the cluster's own. Operations come to it as commands, each with its
//! buffers (owned by its `finish` closure, so they stay put while MPI uses
//! them) and a signal of the runtime's inbox, made when the operation was
//! posted. The thread starts each operation nonblocking, keeps the raw
//! requests (MPI libraries differ in what a request is: they never leave
//! this thread), and tests them with `MPI_Testsome`; for each one that
//! completes it runs `finish` (which hands the buffer to the operation's
//! handle) and fires the signal, whose action a worker runs: it fulfills
//! the operation's promise, or breaks it if the operation failed.
//!
//! A signal made and not yet fired counts as pending work of the runtime:
//! `sync_root` and the runtime's drop wait for messages in flight. When the
//! cluster is dropped, the thread abandons what is still in flight (a
//! receive is cancelled and waited for; a send's request is freed and its
//! buffer leaked rather than freed under MPI; a collective can be neither,
//! and is left, with its buffers), breaking those promises, frees its
//! communicator and finalizes MPI.
//!
//! Between operations the thread backs off: with operations in flight it
//! tests them busily for 20 µs, then yielding for up to 1 ms, then every
//! 100 µs; with none it sleeps until a command wakes it, so that an idle
//! cluster costs no core.

use super::MpiError;
use crate::core::registry::{fire_signal, Registry};
use crate::core::signal::SignalRef;
use crate::core::sync::{lock, Mutex};
use mpi_sys::{MPI_Comm, MPI_Datatype, MPI_Op, MPI_Request, MPI_Status};
use std::ffi::{c_int, c_void};
use std::sync::{mpsc, Arc};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// An operation for the progress thread to start.
pub(super) struct Op {
    pub(super) kind: Kind,
    /// Owns the operation's buffers; run once, with how it ended.
    pub(super) finish: Box<dyn FnOnce(Outcome) + Send>,
    /// Fired once `finish` ran (its action fulfills or breaks the
    /// operation's promise).
    pub(super) signal: SignalRef,
}

// SAFETY: the raw pointers in `kind` point into buffers `finish` owns
// (heap memory, which moving the closure does not move); only the progress
// thread uses them, until `finish` runs.
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
    fn call(&self) -> &'static str {
        match self {
            Kind::Send { .. } => "MPI_Isend",
            Kind::Recv { .. } => "MPI_Irecv",
            Kind::Bcast { .. } => "MPI_Ibcast",
            Kind::Allreduce { .. } => "MPI_Iallreduce",
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
    /// Failed; MPI no longer uses the buffers.
    Failed(MpiError),
    /// Abandoned while MPI may still use the buffers: `finish` must leak
    /// them, not free them.
    Leaked,
}

/// What the cluster learns when MPI started.
pub(super) struct Started {
    pub(super) rank: usize,
    pub(super) size: usize,
    pub(super) tag_ub: i32,
}

/// Shared between the cluster's handles and its progress thread.
pub(super) struct Engine {
    /// Commands for the thread; `None` once it stopped taking them.
    queue: Mutex<Option<Vec<Command>>>,
    thread: Thread,
    pub(super) registry: Arc<Registry>,
}

enum Command {
    Post(Op),
    Stop,
}

impl Engine {
    /// Starts MPI on a thread of its own; returns once it started (or
    /// failed to).
    pub(super) fn start(
        registry: Arc<Registry>,
    ) -> Result<(Arc<Engine>, Started, std::thread::JoinHandle<()>), MpiError> {
        let (tx, rx) = mpsc::channel();
        let (started_tx, started_rx) = mpsc::channel();
        let join = std::thread::Builder::new()
            .name("selvedge-mpi".into())
            .spawn(move || {
                let engine: Arc<Engine> = match rx.recv() {
                    Ok(engine) => engine,
                    Err(_) => return,
                };
                progress(&engine, started_tx);
            })
            .map_err(|e| MpiError::Unavailable {
                reason: format!("the progress thread could not start: {e}"),
            })?;
        let engine = Arc::new(Engine {
            queue: Mutex::new(Some(Vec::new())),
            thread: join.thread().clone(),
            registry,
        });
        let _ = tx.send(Arc::clone(&engine));
        match started_rx.recv() {
            Ok(Ok(started)) => Ok((engine, started, join)),
            Ok(Err(e)) => {
                let _ = join.join();
                Err(e)
            }
            Err(_) => {
                let _ = join.join();
                Err(MpiError::Unavailable {
                    reason: "the progress thread ended while starting MPI".into(),
                })
            }
        }
    }

    /// Hands `op` to the progress thread; abandons it at once if the
    /// thread stopped.
    pub(super) fn post(&self, op: Op) {
        let mut queue = lock(&self.queue);
        match &mut *queue {
            Some(commands) => {
                commands.push(Command::Post(op));
                drop(queue);
                self.thread.unpark();
            }
            None => {
                drop(queue);
                self.abandon_unstarted(op);
            }
        }
    }

    /// Asks the progress thread to abandon what is in flight, free its
    /// communicator and finalize MPI.
    pub(super) fn stop(&self) {
        if let Some(commands) = &mut *lock(&self.queue) {
            commands.push(Command::Stop);
        }
        self.thread.unpark();
    }

    /// An operation MPI never saw: it fails, and its signal never fires.
    fn abandon_unstarted(&self, op: Op) {
        (op.finish)(Outcome::Failed(MpiError::Abandoned));
        // SAFETY: the signal was never handed to MPI's side: nobody fires
        // it. Its action, dropped unrun, breaks the operation's promise.
        drop(unsafe { self.registry.inbox.discard(op.signal) });
    }

    /// Runs `finish` and fires the signal of a completed operation.
    fn complete(
        &self,
        finish: Box<dyn FnOnce(Outcome) + Send>,
        signal: SignalRef,
        outcome: Outcome,
    ) {
        finish(outcome);
        // SAFETY: fired once, here; the registry outlives this call (the
        // engine holds it).
        unsafe { fire_signal(signal) };
    }
}

/// An operation MPI is working on.
struct InFlight {
    finish: Box<dyn FnOnce(Outcome) + Send>,
    signal: SignalRef,
    call: &'static str,
    /// For a receive: its datatype and the elements asked for.
    receive: Option<(MPI_Datatype, usize)>,
    /// What shutdown may do with it.
    on_stop: OnStop,
}

/// How an operation in flight is abandoned at shutdown.
#[derive(Clone, Copy, PartialEq, Eq)]
enum OnStop {
    /// A receive: cancelled, then waited for.
    Cancel,
    /// A send: its request freed (it completes on its own); its buffer
    /// leaked.
    Free,
    /// A collective: MPI allows neither: the request and the buffers are
    /// leaked.
    Leave,
}

/// The progress thread's body.
fn progress(engine: &Engine, started: mpsc::Sender<Result<Started, MpiError>>) {
    let comm = match init() {
        Ok((comm, info)) => {
            let _ = started.send(Ok(info));
            comm
        }
        Err(e) => {
            *lock(&engine.queue) = None;
            let _ = started.send(Err(e));
            return;
        }
    };
    drop(started);
    let mut comm = comm;
    let mut flights: Vec<InFlight> = Vec::new();
    let mut requests: Vec<MPI_Request> = Vec::new();
    let mut last_progress = Instant::now();
    let mut stopping = false;
    // Reused round after round: a round that finds nothing allocates
    // nothing (the commands' vector is swapped with the queue's, and the
    // test arrays only grow).
    let mut commands: Vec<Command> = Vec::new();
    let mut tester = Tester::default();
    while !stopping {
        let mut progressed = false;
        if let Some(queued) = lock(&engine.queue).as_mut() {
            std::mem::swap(queued, &mut commands);
        }
        for command in commands.drain(..) {
            match command {
                Command::Stop => stopping = true,
                Command::Post(op) if stopping => engine.abandon_unstarted(op),
                Command::Post(op) => {
                    progressed = true;
                    let call = op.kind.call();
                    match begin(&op.kind, comm) {
                        Ok(request) => {
                            let receive = match op.kind {
                                Kind::Recv {
                                    datatype, count, ..
                                } => Some((datatype, count as usize)),
                                _ => None,
                            };
                            requests.push(request);
                            flights.push(InFlight {
                                finish: op.finish,
                                signal: op.signal,
                                call,
                                receive,
                                on_stop: match op.kind {
                                    Kind::Recv { .. } => OnStop::Cancel,
                                    Kind::Send { .. } => OnStop::Free,
                                    Kind::Bcast { .. } | Kind::Allreduce { .. } => OnStop::Leave,
                                },
                            });
                        }
                        Err(code) => engine.complete(
                            op.finish,
                            op.signal,
                            Outcome::Failed(MpiError::Call {
                                call,
                                text: error_text(code),
                            }),
                        ),
                    }
                }
            }
        }
        if !requests.is_empty() {
            match tester.test_some(&mut requests) {
                Ok(done) => {
                    progressed |= !done.is_empty();
                    // Highest index first: `swap_remove` moves the last
                    // entry into the hole, which is then never one to come.
                    for &(index, status, error) in done.iter().rev() {
                        requests.swap_remove(index);
                        let flight = flights.swap_remove(index);
                        let outcome = outcome(&flight, &status, error);
                        engine.complete(flight.finish, flight.signal, outcome);
                    }
                }
                Err(code) => {
                    // MPI failed as a whole: nothing in flight will end.
                    eprintln!(
                        "selvedge: MPI_Testsome failed ({}); abandoning every operation in flight",
                        error_text(code)
                    );
                    stopping = true;
                }
            }
        }
        if stopping {
            // Posts that came after this round took the commands (on an
            // MPI failure there may be some) are abandoned unstarted.
            let late = lock(&engine.queue).take().unwrap_or_default();
            for command in late {
                if let Command::Post(op) = command {
                    engine.abandon_unstarted(op);
                }
            }
            abandon_in_flight(engine, flights.drain(..), requests.drain(..));
            break;
        }
        if progressed {
            last_progress = Instant::now();
        } else {
            back_off(last_progress.elapsed(), !requests.is_empty());
        }
    }
    // SAFETY: MPI was started on this thread, and this is its last use of
    // MPI; nothing uses the communicator after.
    unsafe {
        mpi_sys::MPI_Comm_free(&mut comm);
        mpi_sys::MPI_Finalize();
    }
}

/// Starts MPI on this thread and makes the cluster's communicator.
fn init() -> Result<(MPI_Comm, Started), MpiError> {
    let unavailable = |reason: String| MpiError::Unavailable { reason };
    let mut provided: c_int = 0;
    // SAFETY: null argc/argv are allowed; `provided` is a valid
    // out-pointer. MPI is started once per process (the cluster checks).
    let rc = unsafe {
        mpi_sys::MPI_Init_thread(
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            mpi_sys::RSMPI_THREAD_FUNNELED,
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
    let (funneled, world, null) = unsafe {
        (
            mpi_sys::RSMPI_THREAD_FUNNELED,
            mpi_sys::RSMPI_COMM_WORLD,
            mpi_sys::RSMPI_COMM_NULL,
        )
    };
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
    ))
}

/// Starts `kind` nonblocking on `comm`; its request, or MPI's error code.
fn begin(kind: &Kind, comm: MPI_Comm) -> Result<MPI_Request, c_int> {
    // SAFETY: a constant of the library, read only.
    let mut request = unsafe { mpi_sys::RSMPI_REQUEST_NULL };
    // SAFETY: MPI was started on this thread; the buffers are live and
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
struct Tester {
    indices: Vec<c_int>,
    statuses: Vec<MPI_Status>,
    done: Vec<(usize, MPI_Status, c_int)>,
}

impl Tester {
    /// The requests that completed, by index: (index, status, error code
    /// or 0).
    fn test_some(
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
        // SAFETY: MPI was started on this thread; the arrays hold at least
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

/// How a completed operation ended.
fn outcome(flight: &InFlight, status: &MPI_Status, error: c_int) -> Outcome {
    let source = status.MPI_SOURCE.max(0) as usize;
    let tag = status.MPI_TAG;
    if error != 0 {
        return Outcome::Failed(match flight.receive {
            Some((_, expected)) if error_class(error) == mpi_sys::MPI_ERR_TRUNCATE as c_int => {
                MpiError::Truncated {
                    expected,
                    source,
                    tag,
                }
            }
            _ => MpiError::Call {
                call: flight.call,
                text: error_text(error),
            },
        });
    }
    let count = match flight.receive {
        Some((datatype, _)) => {
            let mut count: c_int = 0;
            // SAFETY: MPI was started on this thread; the status is the
            // completed receive's.
            unsafe { mpi_sys::MPI_Get_count(status, datatype, &mut count) };
            count.max(0) as usize
        }
        None => 0,
    };
    Outcome::Done { count, source, tag }
}

/// Abandons every operation in flight: receives are cancelled and waited
/// for (then their buffers may go); sends and collectives cannot be, and
/// their buffers are leaked. Every one's promise breaks.
fn abandon_in_flight(
    engine: &Engine,
    flights: impl Iterator<Item = InFlight>,
    requests: impl Iterator<Item = MPI_Request>,
) {
    for (flight, mut request) in flights.zip(requests) {
        let outcome = match flight.on_stop {
            OnStop::Cancel => {
                // SAFETY: MPI was started on this thread; the request is
                // active.
                let waited = unsafe {
                    mpi_sys::MPI_Cancel(&mut request);
                    mpi_sys::MPI_Wait(&mut request, mpi_sys::RSMPI_STATUS_IGNORE)
                };
                if waited == 0 {
                    // Cancelled, or complete: MPI is done with the buffer.
                    Outcome::Failed(MpiError::Abandoned)
                } else {
                    Outcome::Leaked
                }
            }
            OnStop::Free => {
                // SAFETY: as above; freeing an active send's request lets it
                // complete on its own, with its buffer (leaked) in place.
                unsafe { mpi_sys::MPI_Request_free(&mut request) };
                Outcome::Leaked
            }
            OnStop::Leave => Outcome::Leaked,
        };
        (flight.finish)(outcome);
        // SAFETY: the signal was never fired (its operation never
        // completed here) and never will be: this thread alone fires them.
        drop(unsafe { engine.registry.inbox.discard(flight.signal) });
    }
}

/// Between rounds without progress. With nothing in flight: sleep until a
/// command wakes the thread. With operations in flight: keep testing them,
/// busily for the first 20 µs since the last progress (a reply often comes
/// within that), then yielding the core between tests up to 1 ms, then
/// sleeping 100 µs between tests (a slow peer costs no core).
fn back_off(since_progress: Duration, in_flight: bool) {
    if !in_flight {
        // The timeout only bounds a missed wake-up.
        std::thread::park_timeout(Duration::from_millis(100));
    } else if since_progress < Duration::from_micros(20) {
        std::hint::spin_loop();
    } else if since_progress < Duration::from_millis(1) {
        std::thread::yield_now();
    } else {
        std::thread::park_timeout(Duration::from_micros(100));
    }
}

/// The error class of an MPI error code (MPI libraries return codes that
/// carry more than the class: compare classes).
fn error_class(code: c_int) -> c_int {
    let mut class: c_int = code;
    // SAFETY: a valid out-pointer; callable on the thread that started MPI.
    unsafe { mpi_sys::MPI_Error_class(code, &mut class) };
    class
}

/// MPI's text for an error code.
fn error_text(code: c_int) -> String {
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

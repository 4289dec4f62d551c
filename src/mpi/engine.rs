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
//! `sync_root` and the runtime's drop wait for messages in flight.
//!
//! When the cluster is dropped, the thread stops taking operations (later
//! ones fail unstarted) and finalizes MPI only once no request is active,
//! as MPI requires: each receive in flight is cancelled (`MPI_Cancel`,
//! which MPI guarantees to end locally); sends and collectives are left to
//! complete, since MPI cannot cancel a collective at all and does not
//! reliably cancel a send (MPI 4.0 deprecates it; MPICH accepts the call on
//! a large send and never ends it), and a send that completes delivers the
//! data its rank meant to send. Each one that ends fires its signal as
//! usual (a cancelled receive breaks its promise: `MpiError::Abandoned`).
//! If some are still active a second after the drop, the thread says on
//! stderr which, and again each time the wait doubles. Then it frees its
//! communicator, finalizes MPI and fires the stop's own signal, if the
//! cluster was dropped on a worker (which does not wait for the thread:
//! the runtime's `sync_root` and drop wait for that signal instead).
//!
//! Should MPI fail as a whole (`MPI_Testsome` returns an error), nothing
//! in flight will end: every operation is abandoned at once, its buffers
//! leaked rather than freed under MPI, its promise broken.
//!
//! Between operations the thread backs off: with operations in flight it
//! tests them busily for 20 µs, then yielding for up to 1 ms, then every
//! 100 µs; with none it sleeps until a command wakes it, so that an idle
//! cluster costs no core.

use super::calls::{self, Tester};
use super::op::{Described, Kind, Op, Outcome, Started};
use super::MpiError;
use crate::core::registry::{fire_signal, Registry};
use crate::core::signal::SignalRef;
use crate::core::sync::{lock, Mutex};
use mpi_sys::{MPI_Datatype, MPI_Request};
use std::sync::{mpsc, Arc};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long a stop waits for operations MPI cannot cancel before it says
/// so; then again each time the wait doubled.
const FIRST_NOTICE: Duration = Duration::from_secs(1);

/// Shared between the cluster's handles and its progress thread.
pub(super) struct Engine {
    /// Commands for the thread; `None` once it stopped taking them.
    queue: Mutex<Option<Vec<Command>>>,
    thread: Thread,
    pub(super) registry: Arc<Registry>,
}

enum Command {
    Post(Op),
    /// The cluster was dropped; the signal, if any, is fired once MPI is
    /// finalized.
    Stop(Option<SignalRef>),
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

    /// Asks the progress thread to end what is in flight (see the module
    /// docs), free its communicator and finalize MPI, and then to fire
    /// `finalized`. If the thread already stopped (MPI failed), `finalized`
    /// is discarded here.
    pub(super) fn stop(&self, finalized: Option<SignalRef>) {
        let mut queue = lock(&self.queue);
        match &mut *queue {
            Some(commands) => commands.push(Command::Stop(finalized)),
            None => {
                drop(queue);
                if let Some(signal) = finalized {
                    // SAFETY: never handed to the thread: nobody fires it.
                    drop(unsafe { self.registry.inbox.discard(signal) });
                }
                return;
            }
        }
        drop(queue);
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
    /// What it is, for its outcome and a shutdown notice.
    described: Described,
    /// For a receive: its datatype and the elements asked for.
    receive: Option<(MPI_Datatype, usize)>,
    /// Whether a stop asked MPI to cancel it (receives only).
    cancel_asked: bool,
}

/// A stop under way: since when, when it next speaks, and the signal to
/// fire once MPI is finalized.
struct Stopping {
    since: Instant,
    next_notice: Duration,
    finalized: Option<SignalRef>,
}

/// The progress thread's body.
fn progress(engine: &Engine, started: mpsc::Sender<Result<Started, MpiError>>) {
    let (comm, rank) = match calls::init() {
        Ok((comm, info)) => {
            let rank = info.rank;
            let _ = started.send(Ok(info));
            (comm, rank)
        }
        Err(e) => {
            *lock(&engine.queue) = None;
            let _ = started.send(Err(e));
            return;
        }
    };
    drop(started);
    let mut flights: Vec<InFlight> = Vec::new();
    let mut requests: Vec<MPI_Request> = Vec::new();
    let mut last_progress = Instant::now();
    let mut stopping: Option<Stopping> = None;
    let mut mpi_failed = false;
    // Reused round after round: a round that finds nothing allocates
    // nothing (the commands' vector is swapped with the queue's, and the
    // test arrays only grow).
    let mut commands: Vec<Command> = Vec::new();
    let mut tester = Tester::default();
    loop {
        let mut progressed = false;
        if let Some(queued) = lock(&engine.queue).as_mut() {
            std::mem::swap(queued, &mut commands);
        }
        for command in commands.drain(..) {
            match command {
                Command::Stop(finalized) => {
                    progressed = true;
                    stopping = Some(Stopping {
                        since: Instant::now(),
                        next_notice: FIRST_NOTICE,
                        finalized,
                    });
                    cancel_receives(&mut flights, &mut requests);
                }
                Command::Post(op) if stopping.is_some() => engine.abandon_unstarted(op),
                Command::Post(op) => {
                    progressed = true;
                    start(engine, comm, op, &mut flights, &mut requests);
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
                        let outcome = calls::outcome(
                            flight.described.call,
                            flight.receive,
                            flight.cancel_asked,
                            &status,
                            error,
                        );
                        engine.complete(flight.finish, flight.signal, outcome);
                    }
                }
                Err(code) => {
                    // MPI failed as a whole: nothing in flight will end.
                    eprintln!(
                        "selvedge: MPI_Testsome failed ({}); abandoning every operation in flight",
                        calls::error_text(code)
                    );
                    mpi_failed = true;
                }
            }
        }
        if mpi_failed {
            abandon_in_flight(engine, flights.drain(..), requests.drain(..));
        }
        if let Some(stop) = &mut stopping {
            if requests.is_empty() {
                break;
            }
            if stop.since.elapsed() >= stop.next_notice {
                say_what_is_left(rank, stop.since.elapsed(), &flights);
                stop.next_notice *= 2;
            }
        } else if mpi_failed {
            break;
        }
        if progressed {
            last_progress = Instant::now();
        } else {
            back_off(last_progress.elapsed(), !requests.is_empty());
        }
    }
    // Posts that came after the last round took the commands are
    // abandoned unstarted; later ones never reach the thread. A stop among
    // them (the cluster dropped as MPI failed) is fired below too.
    let mut late_stop = None;
    for command in lock(&engine.queue).take().unwrap_or_default() {
        match command {
            Command::Post(op) => engine.abandon_unstarted(op),
            Command::Stop(finalized) => late_stop = finalized,
        }
    }
    // SAFETY: MPI was started on this thread, and this is its last use of
    // MPI: every request ended (or MPI failed and they were abandoned);
    // nothing uses the communicator after.
    unsafe { calls::finalize(comm) };
    if let Some(signal) = stopping.and_then(|s| s.finalized).or(late_stop) {
        // SAFETY: fired once, here; the engine holds the registry.
        unsafe { fire_signal(signal) };
    }
}

/// Starts `op` on `comm` and keeps it in flight, or completes it as failed
/// if MPI refused it.
fn start(
    engine: &Engine,
    comm: mpi_sys::MPI_Comm,
    op: Op,
    flights: &mut Vec<InFlight>,
    requests: &mut Vec<MPI_Request>,
) {
    let described = op.kind.describe();
    match calls::begin(&op.kind, comm) {
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
                described,
                receive,
                cancel_asked: false,
            });
        }
        Err(code) => engine.complete(
            op.finish,
            op.signal,
            Outcome::Failed(MpiError::Call {
                call: described.call,
                text: calls::error_text(code),
            }),
        ),
    }
}

/// Asks MPI to cancel every receive in flight: each then completes (as a
/// local matter), cancelled or received, and is tested like any other.
fn cancel_receives(flights: &mut [InFlight], requests: &mut [MPI_Request]) {
    for (flight, request) in flights.iter_mut().zip(requests.iter_mut()) {
        if flight.receive.is_some() && !flight.cancel_asked {
            flight.cancel_asked = true;
            if let Err(text) = calls::cancel(request) {
                // It stays in flight: it may still complete.
                eprintln!(
                    "selvedge: cancelling {} at the cluster's drop failed ({text}); waiting for it to complete",
                    flight.described
                );
            }
        }
    }
}

/// Says on stderr which operations a stop still waits for.
fn say_what_is_left(rank: usize, waited: Duration, flights: &[InFlight]) {
    let list: Vec<String> = flights.iter().map(|f| f.described.to_string()).collect();
    let operations = match list.len() {
        1 => "1 operation".to_string(),
        n => format!("{n} operations"),
    };
    eprintln!(
        "selvedge: rank {rank} dropped its MPI cluster {:.1} s ago and waits for {operations} to end before it finalizes MPI (MPI cannot cancel a collective, and a send is left to complete rather than lose its data): {}",
        waited.as_secs_f64(),
        list.join("; ")
    );
}

/// Abandons every operation in flight after MPI failed: MPI may still use
/// the buffers, so they are leaked (no request is freed or cancelled: MPI
/// allows neither for a collective, and a failed MPI may not answer);
/// every promise breaks.
fn abandon_in_flight(
    engine: &Engine,
    flights: impl Iterator<Item = InFlight>,
    requests: impl Iterator<Item = MPI_Request>,
) {
    for (flight, _request) in flights.zip(requests) {
        (flight.finish)(Outcome::Leaked);
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

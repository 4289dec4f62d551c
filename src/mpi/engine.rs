//! The operations MPI works on, and the threads that test them.
//!
//! MPI is started on a thread of the cluster's own, the progress thread
//! (`progress.rs`), which duplicates `MPI_COMM_WORLD` into a communicator
//! of the cluster's own. Operations come to the engine as commands, each
//! with its buffers (owned by its `finish` closure, so they stay put while
//! MPI uses them) and a signal of the runtime's inbox, made when the
//! operation was posted. A *round* starts each command's operation
//! nonblocking, keeps the raw requests (MPI libraries differ in what a
//! request is: they never leave the engine's state), and tests them with
//! `MPI_Testsome`; for each one that completes it runs `finish` (which
//! hands the buffer to the operation's handle) and fires the signal, whose
//! action a worker runs: it fulfills the operation's promise, or breaks it
//! if the operation failed.
//!
//! Who runs rounds: where the library gives `MPI_THREAD_SERIALIZED` (one
//! thread at a time may call MPI, any thread), any thread that holds the
//! state's lock. Idle workers poll the engine (a round under a try-lock)
//! while operations are in flight, and busy ones between two tasks every
//! ten microseconds or so, as a completion source of their runtime
//! (`core/completions.rs`): what they find ended fires its signal
//! on the worker that found it, which runs the action next, with no thread
//! woken. A thread that posts starts its operation at once when the lock
//! is free, and a thread outside the pool that joins a message tests
//! while it waits. The progress thread is the fallback: it tests at
//! intervals while operations are in flight, so that they progress when
//! every worker is busy, and sleeps until one is posted when none is
//! (`core/fallback_watch.rs` says when posting must wake it). Where the
//! library gives only `MPI_THREAD_FUNNELED`, the progress thread alone
//! calls MPI, as it always did: it tests busily for 20 µs after progress,
//! then yields for up to 1 ms, then tests every 100 µs.
//!
//! A signal made and not yet fired counts as pending work of the runtime:
//! `sync_root` and the runtime's drop wait for messages in flight.
//!
//! Should MPI fail as a whole (`MPI_Testsome` returns an error), nothing
//! in flight will end: every operation is abandoned at once, its buffers
//! leaked rather than freed under MPI, its promise broken.

use super::calls::{self, Tester};
use super::op::{Described, Kind, Op, Outcome};
use super::MpiError;
use crate::core::completions::CompletionSource;
use crate::core::fallback_watch::FallbackWatch;
use crate::core::registry::{fire_signal, Registry};
use crate::core::signal::{Action, SignalRef};
use crate::core::sync::{lock, AtomicBool, AtomicU64, Mutex, Ordering};
use crate::core::worker::Worker;
use mpi_sys::{MPI_Comm, MPI_Datatype, MPI_Request};
use std::sync::Arc;
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long a stop waits for operations MPI cannot cancel before it says
/// so; then again each time the wait doubled.
pub(super) const FIRST_NOTICE: Duration = Duration::from_secs(1);

/// Shared between the cluster's handles, its progress thread and the
/// runtime's workers.
pub(super) struct Engine {
    /// Commands for the next round; `None` once the engine stopped taking
    /// them.
    queue: Mutex<Option<Vec<Command>>>,
    /// What MPI works on: whoever holds the lock may call MPI (see the
    /// module docs).
    state: Mutex<State>,
    /// Whether threads other than the progress thread may run rounds (MPI
    /// gave `MPI_THREAD_SERIALIZED` or more). Set once, before the cluster
    /// is handed out.
    shared_calls: AtomicBool,
    /// Operations in flight, and whether the progress thread sleeps until
    /// one is posted.
    pub(super) watch: FallbackWatch,
    thread: Thread,
    /// When a thread other than the progress thread last ran a round
    /// (nanoseconds since `epoch`): the progress thread, a fallback, skips
    /// its rounds while others test (it would only take the lock and a
    /// core from them), but for one every `OWN_ROUND_AT_LEAST`.
    last_round: AtomicU64,
    epoch: Instant,
    pub(super) registry: Arc<Registry>,
}

pub(super) enum Command {
    Post(Op),
    /// The cluster was dropped; the signal, if any, is fired once MPI is
    /// finalized.
    Stop(Option<SignalRef>),
}

/// An operation MPI is working on.
pub(super) struct InFlight {
    finish: Box<dyn FnOnce(Outcome) + Send>,
    signal: SignalRef,
    /// What it is, for its outcome and a shutdown notice.
    pub(super) described: Described,
    /// For a receive: its datatype and the elements asked for.
    receive: Option<(MPI_Datatype, usize)>,
    /// Whether a stop asked MPI to cancel it (receives only).
    cancel_asked: bool,
}

/// A stop under way: since when, when it next speaks, and the signal to
/// fire once MPI is finalized.
pub(super) struct Stopping {
    pub(super) since: Instant,
    pub(super) next_notice: Duration,
    pub(super) finalized: Option<SignalRef>,
}

/// What MPI works on, behind the engine's lock.
pub(super) struct State {
    /// The cluster's communicator while MPI runs; `None` before it started
    /// and once it is finalized (or failed): no round calls MPI then.
    pub(super) comm: Option<MPI_Comm>,
    pub(super) flights: Vec<InFlight>,
    pub(super) requests: Vec<MPI_Request>,
    tester: Tester,
    /// Reused round after round: a round that finds nothing allocates
    /// nothing (swapped with the queue's vector).
    commands: Vec<Command>,
    pub(super) stopping: Option<Stopping>,
    pub(super) mpi_failed: bool,
    /// The actions of signals discarded under the lock (operations
    /// abandoned), dropped once it is released: dropping one breaks a
    /// promise, which cancels its dependents and drops their closures
    /// (user code, which may drop the last handle of the cluster, whose
    /// drop waits for the progress thread, which waits for the lock).
    discarded: Vec<Action>,
}

// SAFETY: the MPI handles (communicator, requests, datatypes) are used
// only by the thread that holds the engine's lock, and by threads other
// than the one that started MPI only where MPI allows it
// (`MPI_THREAD_SERIALIZED`: `Engine::shared_calls`); the closures and
// signals are `Send`.
unsafe impl Send for State {}

impl Engine {
    /// The engine of the progress thread `thread` (which waits for it,
    /// see `progress::start`), for the runtime `registry`.
    pub(super) fn new(registry: Arc<Registry>, thread: Thread) -> Arc<Engine> {
        Arc::new(Engine {
            queue: Mutex::new(Some(Vec::new())),
            state: Mutex::new(State {
                comm: None,
                flights: Vec::new(),
                requests: Vec::new(),
                tester: Tester::default(),
                commands: Vec::new(),
                stopping: None,
                mpi_failed: false,
                discarded: Vec::new(),
            }),
            shared_calls: AtomicBool::new(false),
            watch: FallbackWatch::new(),
            thread,
            last_round: AtomicU64::new(0),
            epoch: Instant::now(),
            registry,
        })
    }

    /// MPI started on the progress thread with `comm`; `shared_calls`:
    /// whether other threads may run rounds. Called by the progress thread
    /// before it reports the start.
    pub(super) fn started(self: &Arc<Self>, comm: MPI_Comm, shared_calls: bool) {
        lock(&self.state).comm = Some(comm);
        if shared_calls {
            self.shared_calls.store(true, Ordering::Release);
            // Until the progress thread ends (`progress.rs`), the runtime
            // holds the engine, as the engine holds the runtime.
            self.registry
                .completions
                .add(Arc::clone(self) as Arc<dyn CompletionSource>);
        }
    }

    /// Hands `op` to the next round, and runs one at once here if no other
    /// thread is (where MPI allows it); abandons it if the engine stopped.
    pub(super) fn post(&self, op: Op) {
        // Counted before it is queued: a round may end it at once.
        let shared_calls = self.shares_calls();
        if shared_calls {
            self.registry.completions.began();
        }
        let asleep = self.watch.begin();
        let mut queue = lock(&self.queue);
        match &mut *queue {
            Some(commands) => {
                commands.push(Command::Post(op));
                drop(queue);
                // Where the progress thread alone calls MPI, it alone can
                // start the operation: wake it whatever it is doing.
                if asleep || !shared_calls {
                    self.thread.unpark();
                }
                if shared_calls {
                    self.start_posted_here();
                }
            }
            None => {
                drop(queue);
                drop(self.abandon_queued(op));
            }
        }
    }

    /// Starts what was posted, on this thread, if MPI allows it and no
    /// other thread runs a round: the operation is under way before the
    /// caller goes on (no test: a task that posts a thousand messages
    /// would test the growing list a thousand times).
    fn start_posted_here(&self) {
        if let Some(mut state) = self.try_state() {
            if let Some(comm) = state.comm {
                self.start_commands(&mut state, comm, false);
            }
            drop(Self::release(state));
        }
    }

    /// The state if no other thread holds it (poison changes nothing: no
    /// user code runs under the lock).
    fn try_state(&self) -> Option<crate::core::sync::MutexGuard<'_, State>> {
        match self.state.try_lock() {
            Ok(state) => Some(state),
            Err(std::sync::TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Releases the state's lock; returns the actions discarded under it,
    /// for the caller to drop once it holds no lock (see
    /// `State::discarded`).
    #[must_use = "drop the actions once no lock is held"]
    pub(super) fn release(mut state: crate::core::sync::MutexGuard<'_, State>) -> Vec<Action> {
        let discarded = std::mem::take(&mut state.discarded);
        drop(state);
        discarded
    }

    /// Asks the engine to end what is in flight, free its communicator and
    /// finalize MPI, and then to fire `finalized` (see `progress.rs`). If
    /// the engine already stopped (MPI failed), `finalized` is discarded
    /// here.
    pub(super) fn stop(&self, finalized: Option<SignalRef>) {
        let mut queue = lock(&self.queue);
        match &mut *queue {
            Some(commands) => commands.push(Command::Stop(finalized)),
            None => {
                drop(queue);
                if let Some(signal) = finalized {
                    // SAFETY: never handed to MPI's side: nobody fires it.
                    drop(unsafe { self.registry.inbox.discard(signal) });
                }
                return;
            }
        }
        drop(queue);
        self.thread.unpark();
    }

    /// One round, by whoever holds `state` (see the module docs): starts
    /// what was posted, tests what is in flight and completes what ended.
    /// Whether it started or completed anything. `here`: the caller is an
    /// worker of the runtime (idle, or between two tasks), which drains the
    /// inbox next.
    pub(super) fn round(&self, state: &mut State, here: bool) -> bool {
        let Some(comm) = state.comm else {
            return false;
        };
        let mut progressed = self.start_commands(state, comm, here);
        if !state.requests.is_empty() {
            match state.tester.test_some(&mut state.requests) {
                Ok(done) => {
                    progressed |= !done.is_empty();
                    // Highest index first: `swap_remove` moves the last
                    // entry into the hole, which is then never one to come.
                    for &(index, status, error) in done.iter().rev() {
                        state.requests.swap_remove(index);
                        let flight = state.flights.swap_remove(index);
                        let outcome = calls::outcome(
                            flight.described.call,
                            flight.receive,
                            flight.cancel_asked,
                            &status,
                            error,
                        );
                        self.complete(flight.finish, flight.signal, outcome, here);
                    }
                }
                Err(code) => {
                    // MPI failed as a whole: nothing in flight will end.
                    eprintln!(
                        "selvedge: MPI_Testsome failed ({}); abandoning every operation in flight",
                        calls::error_text(code)
                    );
                    state.mpi_failed = true;
                }
            }
        }
        if state.mpi_failed {
            self.abandon_in_flight(state);
        }
        progressed
    }

    /// Takes the queued commands and starts their operations (or, for a
    /// stop, cancels the receives in flight). Whether there were any.
    fn start_commands(&self, state: &mut State, comm: MPI_Comm, here: bool) -> bool {
        if let Some(queued) = lock(&self.queue).as_mut() {
            std::mem::swap(queued, &mut state.commands);
        }
        let mut commands = std::mem::take(&mut state.commands);
        let progressed = !commands.is_empty();
        for command in commands.drain(..) {
            match command {
                Command::Stop(finalized) => {
                    state.stopping = Some(Stopping {
                        since: Instant::now(),
                        next_notice: FIRST_NOTICE,
                        finalized,
                    });
                    cancel_receives(state);
                }
                Command::Post(op) if state.stopping.is_some() || state.mpi_failed => {
                    let action = self.abandon_queued(op);
                    state.discarded.extend(action);
                }
                Command::Post(op) => self.begin(state, comm, op, here),
            }
        }
        // Kept for the next round (empty, its capacity grown).
        state.commands = commands;
        progressed
    }

    /// Starts `op` on `comm` and keeps it in flight, or completes it as
    /// failed if MPI refused it.
    fn begin(&self, state: &mut State, comm: MPI_Comm, op: Op, here: bool) {
        let described = op.kind.describe();
        match calls::begin(&op.kind, comm) {
            Ok(request) => {
                let receive = match op.kind {
                    Kind::Recv {
                        datatype, count, ..
                    } => Some((datatype, count as usize)),
                    _ => None,
                };
                state.requests.push(request);
                state.flights.push(InFlight {
                    finish: op.finish,
                    signal: op.signal,
                    described,
                    receive,
                    cancel_asked: false,
                });
            }
            Err(code) => self.complete(
                op.finish,
                op.signal,
                Outcome::Failed(MpiError::Call {
                    call: described.call,
                    text: calls::error_text(code),
                }),
                here,
            ),
        }
    }

    /// Runs `finish` and fires the signal of an operation that ended.
    /// `here`: the caller is a worker of the runtime (idle, or between two
    /// tasks), which drains the inbox next, so no other worker is woken.
    fn complete(
        &self,
        finish: Box<dyn FnOnce(Outcome) + Send>,
        signal: SignalRef,
        outcome: Outcome,
        here: bool,
    ) {
        finish(outcome);
        self.ended();
        if here {
            // SAFETY: fired once, here; the registry outlives this call
            // (the engine holds it).
            unsafe { self.registry.inbox.fire(signal) };
        } else {
            // SAFETY: as above.
            unsafe { fire_signal(signal) };
        }
    }

    /// An operation counted in flight ended.
    fn ended(&self) {
        self.watch.end();
        if self.shares_calls() {
            self.registry.completions.ended();
        }
    }

    /// An operation MPI never saw: it fails, and its signal never fires.
    /// Returns the signal's action, which the caller drops (unrun: that
    /// breaks the operation's promise) once it holds no lock.
    fn abandon_unstarted(&self, op: Op) -> Option<Action> {
        (op.finish)(Outcome::Failed(MpiError::Abandoned));
        // SAFETY: the signal was never handed to MPI's side: nobody fires
        // it.
        unsafe { self.registry.inbox.discard(op.signal) }
    }

    /// [`Engine::abandon_unstarted`] for an operation taken from the queue
    /// (counted in flight since its post).
    #[must_use = "drop the action once no lock is held"]
    pub(super) fn abandon_queued(&self, op: Op) -> Option<Action> {
        let action = self.abandon_unstarted(op);
        self.ended();
        action
    }

    /// Abandons every operation in flight after MPI failed: MPI may still
    /// use the buffers, so they are leaked (no request is freed or
    /// cancelled: MPI allows neither for a collective, and a failed MPI may
    /// not answer); every promise breaks.
    fn abandon_in_flight(&self, state: &mut State) {
        state.requests.clear();
        for flight in state.flights.drain(..) {
            (flight.finish)(Outcome::Leaked);
            // SAFETY: the signal was never fired (its operation never
            // completed) and never will be: whoever holds the lock alone
            // fires them, and it is dropped from the list here.
            let action = unsafe { self.registry.inbox.discard(flight.signal) };
            state.discarded.extend(action);
            self.ended();
        }
    }

    /// The engine's state, for the progress thread (which waits for it).
    pub(super) fn lock_state(&self) -> crate::core::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Whether threads other than the progress thread run rounds.
    pub(super) fn shares_calls(&self) -> bool {
        self.shared_calls.load(Ordering::Acquire)
    }

    /// Stops taking commands: returns those queued since the last round.
    pub(super) fn close_queue(&self) -> Vec<Command> {
        lock(&self.queue).take().unwrap_or_default()
    }

    fn poll_as(&self, here: bool, discarded: &mut Vec<Action>) -> bool {
        if !self.shares_calls() {
            return false;
        }
        let Some(mut state) = self.try_state() else {
            return false;
        };
        self.last_round.store(self.since_epoch(), Ordering::Relaxed);
        let progressed = self.round(&mut state, here);
        discarded.append(&mut Self::release(state));
        progressed
    }

    fn since_epoch(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Whether a thread other than the progress thread ran a round within
    /// `window`.
    pub(super) fn tested_within(&self, window: Duration) -> bool {
        let last = self.last_round.load(Ordering::Relaxed);
        last != 0 && self.since_epoch().saturating_sub(last) < window.as_nanos() as u64
    }
}

impl CompletionSource for Engine {
    fn poll(&self, discarded: &mut Vec<Action>) -> bool {
        // A worker of the runtime (idle, or between two tasks): it drains
        // what fires, unless it is some other runtime's worker (a source is polled only by its
        // own runtime's workers, but say so rather than assume it).
        let here = Worker::current().is_some_and(|w| Arc::ptr_eq(&w.shared, &self.registry));
        self.poll_as(here, discarded)
    }
}

/// Asks MPI to cancel every receive in flight: each then completes (as a
/// local matter), cancelled or received, and is tested like any other.
fn cancel_receives(state: &mut State) {
    for (flight, request) in state.flights.iter_mut().zip(state.requests.iter_mut()) {
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

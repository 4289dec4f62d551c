//! The progress thread: it starts MPI, runs the engine's rounds as the
//! fallback that keeps operations moving when no other thread tests them
//! (see `engine.rs`), and finalizes MPI once the cluster is dropped.
//!
//! When the cluster is dropped, the engine stops taking operations (later
//! ones fail unstarted) and MPI is finalized only once no request is
//! active, as MPI requires: each receive in flight is cancelled
//! (`MPI_Cancel`, which MPI guarantees to end locally); sends and
//! collectives are left to complete, since MPI cannot cancel a collective
//! at all and does not reliably cancel a send (MPI 4.0 deprecates it;
//! MPICH accepts the call on a large send and never ends it), and a send
//! that completes delivers the data its rank meant to send. Each one that
//! ends fires its signal as usual (a cancelled receive breaks its promise:
//! `MpiError::Abandoned`). If some are still active a second after the
//! drop, the thread says on stderr which, and again each time the wait
//! doubles. Then it frees its communicator, finalizes MPI (on this thread,
//! which started it, as MPI asks) and fires the stop's own signal, if the
//! cluster was dropped on a worker (which does not wait for the thread:
//! the runtime's `sync_root` and drop wait for that signal instead).
//!
//! Between rounds without progress: with nothing in flight the thread
//! sleeps until an operation is posted. With operations in flight, where
//! other threads test too, it is the fallback for when every worker runs a
//! long task, and a thread spinning beside the workers would take a core
//! from them: it tests every 100 µs, and skips its test while another
//! thread tested within that time, but for a round of its own every 10 ms
//! (a stop's notices and its end are its to make). Where it alone may call
//! MPI, it tests busily for the first 20 µs since the last progress (a
//! reply often comes within that), then yields the core between tests up
//! to 1 ms, then tests every 100 µs (a slow peer costs no core).

use super::calls;
use super::engine::{Command, Engine, InFlight};
use super::op::Started;
use super::MpiError;
use crate::core::registry::{fire_signal, Registry};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// How long the progress thread waits between its tests while operations
/// are in flight, where others test too (or after a millisecond without
/// progress, where it alone tests); it skips its test while another thread
/// tested within that time, but for [`OWN_ROUND_AT_LEAST`].
const FALLBACK_INTERVAL: Duration = Duration::from_micros(100);

/// The progress thread runs a round of its own at least this often, however
/// busily others test.
const OWN_ROUND_AT_LEAST: Duration = Duration::from_millis(10);

/// Set (to anything) to keep every MPI call on the progress thread
/// (`MPI_THREAD_FUNNELED`), as with a library that gives no more.
const FUNNELED_VAR: &str = "SELVEDGE_MPI_FUNNELED";

/// Starts MPI on a thread of its own, the progress thread; returns once it
/// started (or failed to).
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
            run(&engine, started_tx);
        })
        .map_err(|e| MpiError::Unavailable {
            reason: format!("the progress thread could not start: {e}"),
        })?;
    let thread = join.thread().clone();
    let engine = Engine::new(registry, thread);
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

/// The progress thread's body.
fn run(engine: &Arc<Engine>, started: mpsc::Sender<Result<Started, MpiError>>) {
    let serialized = std::env::var_os(FUNNELED_VAR).is_none();
    let (comm, rank) = match calls::init(serialized) {
        Ok((comm, info, shared_calls)) => {
            let rank = info.rank;
            engine.started(comm, shared_calls);
            let _ = started.send(Ok(info));
            (comm, rank)
        }
        Err(e) => {
            drop(engine.close_queue());
            let _ = started.send(Err(e));
            return;
        }
    };
    drop(started);
    let mut last_progress = Instant::now();
    let mut own_round = Instant::now();
    let late_stop = loop {
        // Others test: this thread is not needed now, but for a round now
        // and then (a stop's notices, and its end, are its to make).
        if engine.tested_within(FALLBACK_INTERVAL) && own_round.elapsed() < OWN_ROUND_AT_LEAST {
            std::thread::park_timeout(FALLBACK_INTERVAL);
            continue;
        }
        own_round = Instant::now();
        let mut guard = engine.lock_state();
        let state = &mut *guard;
        let progressed = engine.round(state, false);
        let in_flight = !state.requests.is_empty();
        let done = match &mut state.stopping {
            Some(_) if !in_flight => true,
            Some(stop) => {
                if stop.since.elapsed() >= stop.next_notice {
                    say_what_is_left(rank, stop.since.elapsed(), &state.flights);
                    stop.next_notice *= 2;
                }
                false
            }
            None => state.mpi_failed,
        };
        if done {
            // No thread calls MPI from now on: the state has no
            // communicator. Posts that came after the last round are
            // abandoned unstarted; later ones never reach the engine. A
            // stop among them (the cluster dropped as MPI failed) is fired
            // below too.
            state.comm = None;
            let stopping = state.stopping.take();
            drop(Engine::release(guard));
            let mut late_stop = None;
            for command in engine.close_queue() {
                match command {
                    Command::Post(op) => drop(engine.abandon_queued(op)),
                    Command::Stop(finalized) => late_stop = finalized,
                }
            }
            break stopping.and_then(|s| s.finalized).or(late_stop);
        }
        drop(Engine::release(guard));
        if progressed {
            last_progress = Instant::now();
        } else {
            back_off(engine, last_progress.elapsed(), in_flight);
        }
    };
    engine
        .registry
        .completions
        .remove(Arc::as_ptr(engine).cast());
    // SAFETY: MPI was started on this thread, and this is the last use of
    // MPI: every request ended (or MPI failed and they were abandoned);
    // the state's communicator is gone, so no other thread calls MPI.
    unsafe { calls::finalize(comm) };
    if let Some(signal) = late_stop {
        // SAFETY: fired once, here; the engine holds the registry.
        unsafe { fire_signal(signal) };
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

/// Between rounds without progress (see the module docs).
fn back_off(engine: &Engine, since_progress: Duration, in_flight: bool) {
    if !in_flight {
        // Until an operation is posted (`FallbackWatch`); the timeout only
        // bounds a wake-up missed some other way. A stop unparks the
        // thread too.
        if engine.watch.sleep_if_idle() {
            std::thread::park_timeout(Duration::from_millis(100));
            engine.watch.woke();
        } else {
            // Posted but not started yet: the next round starts it.
            std::thread::yield_now();
        }
    } else if engine.shares_calls() || since_progress >= Duration::from_millis(1) {
        std::thread::park_timeout(FALLBACK_INTERVAL);
    } else if since_progress < Duration::from_micros(20) {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

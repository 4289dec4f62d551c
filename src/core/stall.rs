//! Stalls that speak (an invariant of the whole crate: no stall is
//! silent): when no task of a runtime has run for a while although
//! threads wait in joins and tasks sit parked on promises nobody has
//! fulfilled, the runtime says so on stderr, once, naming what waits. Go's "all goroutines are asleep - deadlock!" is the
//! model, as a warning rather than an abort: a thread outside the runtime
//! may still fulfil a promise, so nothing here can prove a deadlock, and
//! nothing here changes what the runtime does.
//!
//! One thread per process, `selvedge-watch`, started with the first
//! watched runtime, samples every watched runtime a few times per delay.
//! What it reads costs the scheduler nothing new:
//!
//! - progress: the per-worker `tasks_run` counters (`stats.rs`), which the
//!   workers keep anyway;
//! - whether any worker runs code: the workers' parking states (`park.rs`);
//!   a worker in a long task, or device work in flight, is not a stall;
//! - the tasks parked on promises: the counts behind
//!   `RuntimeStats::tasks_waiting_on_dependencies`, and, for the message,
//!   their names (`Parked::census`, read under the shards' chunk locks);
//! - what waits: a worker parked in a join or latch wait (its parking
//!   state), and what it waits for: the kind of wait and, for a join, the
//!   task's name, which its park notes ([`note_park`], as the worker goes
//!   to sleep: a join that never parks notes nothing); threads outside every
//!   runtime blocked in a join, which note themselves in a process-wide
//!   list ([`outside_waits`]). Nothing is noted on spawn's or join's fast
//!   path, nor by a scope or a loop that waits without parking.
//!
//! A runtime is reported when, at every sample for the whole delay, no
//! task of it ran, every worker was parked, nothing was queued outside the
//! deques or in flight on a device, some tasks were parked and some thread
//! waited. Threads outside the runtimes count as waiting for every
//! runtime: a join does not know which runtime its task belongs to. A
//! report is printed once; the next one needs a task to run, or the waits
//! or parked tasks to go, first.
//!
//! The watchdog holds runtimes by `Weak` references and never keeps one
//! alive; a runtime is unwatched by its shutdown once it has waited for its
//! tasks (a shutdown waiting forever on a stalled scope is still reported).

use crate::core::error::BuildError;
use crate::core::registry::Registry;
use crate::core::sync::{lock, Condvar, Mutex, Ordering};
use crate::core::wait_notes::{Awaited, STARTED, TASK};
use crate::core::worker::Until;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

/// Notes what worker `me` of `shared` waits for as it parks in `until`
/// (the worker's park, which is about to sleep: its cost is a store and,
/// for a join, an uncontended lock). A waiting worker runs other tasks
/// between its parks, whose own waits park too: noting at each park keeps
/// the note of the innermost wait that parked.
#[inline]
pub(crate) fn note_park(shared: &Registry, me: usize, until: &Until<'_>) {
    let note = &shared.waits.0[me];
    let kind = match until {
        Until::Complete(_, name) => {
            *lock(&note.task) = Some(name);
            TASK
        }
        Until::Latch(_) => STARTED,
        Until::Shutdown | Until::Quiescent => return,
    };
    note.kind.store(kind, Ordering::Relaxed);
}

/// Threads outside every runtime blocked in a join, and what they wait
/// for (free entries are `None`, reused).
static OUTSIDE: Mutex<Vec<Option<(std::thread::Thread, Awaited)>>> = Mutex::new(Vec::new());

/// An entry of [`OUTSIDE`], removed when the wait ends.
pub(crate) struct OutsideNoted(usize);

impl Drop for OutsideNoted {
    fn drop(&mut self) {
        lock(&OUTSIDE)[self.0] = None;
    }
}

/// Notes that the calling thread, which is no worker, blocks until the
/// returned guard goes, waiting for `what`.
pub(crate) fn outside_waits(what: Awaited) -> OutsideNoted {
    let entry = Some((std::thread::current(), what));
    let mut list = lock(&OUTSIDE);
    match list.iter().position(Option::is_none) {
        Some(i) => {
            list[i] = entry;
            OutsideNoted(i)
        }
        None => {
            list.push(entry);
            OutsideNoted(list.len() - 1)
        }
    }
}

/// The runtimes watched, and whether the watchdog thread was started.
struct Watched {
    runtimes: Vec<Watch>,
    started: bool,
}

static WATCHED: Mutex<Watched> = Mutex::new(Watched {
    runtimes: Vec::new(),
    started: false,
});

/// Wakes the watchdog when a runtime comes or goes (its tick may change).
static CHANGED: Condvar = Condvar::new();

/// The shortest and longest time between two samples.
const MIN_TICK: Duration = Duration::from_millis(10);
const MAX_TICK: Duration = Duration::from_secs(10);

/// One watched runtime, and what the samples so far saw.
struct Watch {
    registry: Weak<Registry>,
    /// The delay before a report.
    after: Duration,
    /// The runtime's thread name (its workers are `name-0`, ...).
    name: String,
    /// Tasks run, summed over the workers, at the last sample.
    progress: u64,
    /// Since when the runtime looks stalled.
    since: Instant,
    /// This stall was reported.
    warned: bool,
}

/// Starts the watchdog thread unless it runs: before a runtime that warns
/// starts its workers, so that a refusal leaves nothing to stop.
pub(crate) fn start_watchdog() -> Result<(), BuildError> {
    let mut watched = lock(&WATCHED);
    if !watched.started {
        std::thread::Builder::new()
            .name("selvedge-watch".into())
            .spawn(watchdog)
            .map_err(|e| BuildError::StallWatchSpawn {
                message: e.to_string(),
            })?;
        watched.started = true;
    }
    Ok(())
}

/// Watches `registry` (whose workers are named `name-0`, ...): a stall of
/// `after` is reported. [`start_watchdog`] was called.
pub(crate) fn watch(registry: &Arc<Registry>, after: Duration, name: &str) {
    let mut watched = lock(&WATCHED);
    debug_assert!(watched.started, "watching without a watchdog");
    watched.runtimes.push(Watch {
        registry: Arc::downgrade(registry),
        after,
        name: name.to_owned(),
        progress: 0,
        since: Instant::now(),
        warned: false,
    });
    CHANGED.notify_all();
}

/// Stops watching `registry` (its shutdown): the watchdog reads it only
/// while it is watched, so it never holds the last reference of a runtime
/// being dropped (the caller holds one until this returns).
pub(crate) fn unwatch(registry: &Registry) {
    let mut watched = lock(&WATCHED);
    watched
        .runtimes
        .retain(|w| !std::ptr::eq(w.registry.as_ptr(), registry));
    CHANGED.notify_all();
}

/// The watchdog thread: samples the watched runtimes, prints the reports
/// (outside the lock), sleeps a quarter of the shortest delay.
fn watchdog() {
    let mut watched = lock(&WATCHED);
    loop {
        let now = Instant::now();
        // No allocation unless a report is made: a sample only loads.
        let mut reports = Vec::new();
        for w in watched.runtimes.iter_mut() {
            if let Some(report) = w.sample(now) {
                reports.push(report);
            }
        }
        if !reports.is_empty() {
            drop(watched);
            let mut err = std::io::stderr().lock();
            for report in reports {
                let _ = err.write_all(report.as_bytes());
            }
            drop(err);
            watched = lock(&WATCHED);
        }
        let tick = watched.runtimes.iter().map(|w| w.after / 4).min();
        watched = match tick {
            Some(t) => {
                let t = t.clamp(MIN_TICK, MAX_TICK);
                CHANGED
                    .wait_timeout(watched, t)
                    .map_or_else(|e| e.into_inner().0, |r| r.0)
            }
            None => CHANGED.wait(watched).unwrap_or_else(|e| e.into_inner()),
        };
    }
}

impl Watch {
    /// Samples the runtime; returns the report when a stall has just
    /// lasted the whole delay.
    fn sample(&mut self, now: Instant) -> Option<String> {
        // Alive while watched: its shutdown holds it until it unwatches
        // (which takes the lock we hold), so this is never the last one.
        let r = self.registry.upgrade()?;
        let progress = r
            .counters
            .iter()
            .fold(0u64, |sum, c| sum.wrapping_add(c.tasks_run.load()));
        if progress != self.progress {
            self.progress = progress;
            self.since = now;
            self.warned = false;
        }
        let n = r.num_threads();
        let waiting = (0..n).filter(|&i| r.sleep.is_join_waiting(i)).count()
            + lock(&OUTSIDE).iter().flatten().count();
        let parked = r.tasks_parked();
        if waiting == 0 || parked == 0 {
            // Nothing stalls: what follows is a new stall.
            self.since = now;
            self.warned = false;
            return None;
        }
        if !r.sleep.all_parked() || !r.outside_idle() {
            // A worker runs code (a long task), or work is queued or in
            // flight on a device: not a stall yet.
            self.since = now;
            return None;
        }
        if self.warned || now.duration_since(self.since) < self.after {
            return None;
        }
        self.warned = true;
        Some(self.report(&r, parked))
    }

    /// The message for a stall of runtime `r` with `parked` tasks parked.
    fn report(&self, r: &Registry, parked: u64) -> String {
        let mut waits = Vec::new();
        for i in 0..r.num_threads() {
            if r.sleep.is_join_waiting(i) {
                let thread = r.sleep.thread(i).name().unwrap_or("?").to_owned();
                waits.push(match r.waits.awaited(i) {
                    Some(what) => format!("worker `{thread}` {what}"),
                    None => format!("worker `{thread}` waits"),
                });
            }
        }
        for (thread, what) in lock(&OUTSIDE).iter().flatten() {
            let thread = thread.name().unwrap_or("unnamed");
            waits.push(format!("thread `{thread}` {what}"));
        }
        let census = r.parked.census();
        let (threads, wait) = if waits.len() == 1 {
            ("thread", "waits")
        } else {
            ("threads", "wait")
        };
        let (tasks, sit) = if parked == 1 {
            ("task", "sits")
        } else {
            ("tasks", "sit")
        };
        let mut m = String::new();
        let _ = writeln!(
            m,
            "selvedge: no task has run for {:?}, yet {} {threads} {wait} and {parked} {tasks} \
             {sit} parked on promises nobody has fulfilled (runtime `{}`, {} workers):",
            self.after,
            waits.len(),
            self.name,
            r.num_threads(),
        );
        for w in &waits {
            let _ = writeln!(m, "  {w}");
        }
        const NAMED: usize = 4;
        let named: Vec<String> = census
            .iter()
            .take(NAMED)
            .map(|(name, count)| format!("{count} × `{name}`"))
            .collect();
        let _ = write!(m, "  parked: {}", named.join(", "));
        if census.len() > NAMED {
            let _ = write!(m, ", and {} more kinds", census.len() - NAMED);
        }
        let _ = writeln!(
            m,
            "\n  Unless a thread still fulfils (or drops) one of those promises, this never \
             ends. Common causes: a promise cycle (tasks waiting on promises that only they \
             fulfil); a task waiting on a promise whose handle it holds itself; a scope whose \
             task waits on a promise fulfilled only after the scope ends; a producer that \
             panicked while another handle of its promise lives on (kept by a waiting thread, \
             say). Said once per stall; SELVEDGE_STALL_WARN=0 or \
             Builder::stall_warning(None) turns it off."
        );
        m
    }
}

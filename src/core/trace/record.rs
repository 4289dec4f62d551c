//! What a traced runtime records, and where.
//!
//! Every worker owns one [`Track`]: a ring of events only it writes
//! (`ring.rs`), so recording costs it a clock read and a few plain stores.
//! Threads outside the workers (the one that calls `Runtime::run`, a
//! thread fulfilling a promise, an MPI progress thread) record rarely and
//! share one list behind a lock, one track per thread.
//!
//! A *flow* is an arrow in the picture from where something was sent on
//! to where it arrived: a fulfill that made a task ready, a victim that
//! gave a task to a thief, a steal request travelling between mailboxes,
//! a loop split handing iterations over. Its id travels with what it
//! follows (a task's header, a steal request); ids are unique per trace:
//! the track's number in the high bits, a count in the low.

use crate::core::clock::ticks;
use crate::core::sync::{lock, AtomicU64, Mutex, Ordering};
use crate::core::trace::ring::{EventRing, Snapshot};
use std::path::PathBuf;
use std::thread::ThreadId;
use std::time::Instant;

/// Words per event.
pub(crate) const WORDS: usize = 6;
pub(crate) type Event = [u64; WORDS];

/// Events each worker keeps by default (48 bytes each: 3 MiB a worker).
pub(crate) const DEFAULT_CAPACITY: usize = 1 << 16;

/// What an event is. Its words: `[kind | a << 8, t0, t1, flow, p, q]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    /// A task ran from `t0` to `t1`; `flow` is the arrow that brought it
    /// (0: none); `p, q` its name.
    Task = 1,
    /// Parked from `t0` to `t1`.
    Parked,
    /// A steal request sent to worker `a`; `flow` starts with it.
    StealSent,
    /// A steal request of thief `a` answered with `t1` tasks; its `flow`
    /// ends here.
    StealAnswered,
    /// A steal request of thief `a` declined here and sent on to worker
    /// `t1 - 1` (0: back to the thief); a step of its `flow`.
    StealDeclined,
    /// A fulfill made task `p, q` ready: `flow` starts.
    Ready,
    /// A running loop gave `t1` iterations to worker `a` (`NO_WORKER`: to
    /// the queue shared with parked workers); `flow` starts.
    LoopSplit,
    /// A task left this worker for worker `a`, its `flow` starting here
    /// (`q == 1`) or passing through (`q == 0`).
    Given,
    /// A GPU task `p, q` enqueued its device work: `flow` starts.
    DeviceEnqueued,
    /// Device work whose completion callback fired at `t0` was handled
    /// here at `t1` (its promise fulfilled); its `flow` ends.
    DeviceDone,
}

/// `a` of an event that names no worker.
pub(crate) const NO_WORKER: u64 = (1 << 56) - 1;

impl Kind {
    pub(crate) fn of(word: u64) -> Option<Kind> {
        use Kind::*;
        Some(match word & 0xff {
            1 => Task,
            2 => Parked,
            3 => StealSent,
            4 => StealAnswered,
            5 => StealDeclined,
            6 => Ready,
            7 => LoopSplit,
            8 => Given,
            9 => DeviceEnqueued,
            10 => DeviceDone,
            _ => return None,
        })
    }
}

/// An event's words.
#[inline(always)]
pub(crate) fn event(kind: Kind, a: u64, t0: u64, t1: u64, flow: u64, name: (u64, u64)) -> Event {
    [kind as u64 | (a << 8), t0, t1, flow, name.0, name.1]
}

/// A `&'static str` as two words (address, length), for an event.
#[inline(always)]
pub(crate) fn name_words(name: &'static str) -> (u64, u64) {
    (name.as_ptr() as u64, name.len() as u64)
}

/// The `&'static str` whose [`name_words`] are `words`.
///
/// # Safety
/// `words` were made by `name_words`.
pub(crate) unsafe fn words_name(words: (u64, u64)) -> &'static str {
    // SAFETY: the address and length of a `&'static str` (caller): valid
    // UTF-8 that lives for the rest of the program.
    unsafe {
        std::str::from_utf8_unchecked(std::slice::from_raw_parts(
            words.0 as usize as *const u8,
            words.1 as usize,
        ))
    }
}

/// One worker's events, written only by that worker.
pub(crate) struct Track {
    pub(crate) ring: EventRing<WORDS>,
    /// Flows this worker started (written only by it).
    flows: AtomicU64,
    /// This track's number, in the high bits of its flow ids.
    number: u64,
}

impl Track {
    fn new(number: usize, capacity: usize) -> Self {
        Self {
            ring: EventRing::new(capacity),
            flows: AtomicU64::new(0),
            number: number as u64 + 1,
        }
    }

    /// Records an event (owner only).
    #[inline(always)]
    pub(crate) fn record(&self, e: Event) {
        self.ring.push(e);
    }

    /// A new flow id (owner only).
    #[inline]
    pub(crate) fn new_flow(&self) -> u64 {
        let n = self.flows.load(Ordering::Relaxed) + 1;
        self.flows.store(n, Ordering::Relaxed);
        (self.number << 40) | n
    }
}

/// Events of threads outside the workers.
struct Outside {
    /// Each thread's id and name, in order of first event; its track id is
    /// `OUTSIDE_TRACKS + index`.
    threads: Vec<(ThreadId, String)>,
    events: std::collections::VecDeque<(u32, Event)>,
    lost: u64,
    flows: u64,
}

/// The first track id of threads outside the workers, in the JSON (above
/// every worker's: at most 256).
pub(crate) const OUTSIDE_TRACKS: u64 = 1000;
/// The track id of device callbacks, in the JSON.
pub(crate) const DEVICE_TRACK: u64 = 999;
/// The track number of outside threads in flow ids: above every worker's
/// (at most 256), and small enough that every id stays below 2^53, which
/// a JavaScript viewer (`chrome://tracing`) reads exactly.
const OUTSIDE_FLOWS: u64 = 0x1ff;
const _: () = assert!((OUTSIDE_FLOWS + 1) << 40 <= 1 << 53);

/// A runtime's trace: its workers' tracks, outside threads' events, and
/// where it is written.
pub(crate) struct Tracer {
    pub(crate) path: PathBuf,
    pub(crate) tracks: Box<[crossbeam_utils::CachePadded<Track>]>,
    outside: Mutex<Outside>,
    capacity: usize,
    /// The clock at the start, for turning ticks into microseconds.
    pub(crate) start: (u64, Instant),
    pub(crate) worker_names: Vec<String>,
}

impl Tracer {
    pub(crate) fn new(path: PathBuf, capacity: usize, worker_names: Vec<String>) -> Self {
        let capacity = capacity.max(1);
        Self {
            path,
            tracks: (0..worker_names.len())
                .map(|i| crossbeam_utils::CachePadded::new(Track::new(i, capacity)))
                .collect(),
            outside: Mutex::new(Outside {
                threads: Vec::new(),
                events: std::collections::VecDeque::new(),
                lost: 0,
                flows: 0,
            }),
            capacity,
            start: (ticks(), Instant::now()),
            worker_names,
        }
    }

    /// Records `make(flow)` on the calling thread's outside track, with a
    /// new flow id when `new_flow` (0 otherwise); returns the flow id.
    pub(crate) fn record_outside(&self, new_flow: bool, make: impl FnOnce(u64) -> Event) -> u64 {
        let me = std::thread::current();
        let mut o = lock(&self.outside);
        let track = match o.threads.iter().position(|(id, _)| *id == me.id()) {
            Some(i) => i,
            None => {
                let name = me.name().unwrap_or("unnamed thread").to_owned();
                o.threads.push((me.id(), name));
                o.threads.len() - 1
            }
        };
        let flow = if new_flow {
            o.flows += 1;
            (OUTSIDE_FLOWS << 40) | o.flows
        } else {
            0
        };
        if o.events.len() == self.capacity {
            o.events.pop_front();
            o.lost += 1;
        }
        o.events.push_back((track as u32, make(flow)));
        flow
    }

    /// Everything recorded so far, for writing.
    pub(crate) fn collect(&self) -> Collected {
        let workers = self.tracks.iter().map(|t| t.ring.snapshot()).collect();
        let o = lock(&self.outside);
        Collected {
            workers,
            outside: o.events.iter().copied().collect(),
            outside_threads: o.threads.iter().map(|(_, n)| n.clone()).collect(),
            outside_lost: o.lost,
        }
    }
}

/// A copy of a trace's events.
pub(crate) struct Collected {
    pub(crate) workers: Vec<Snapshot<WORDS>>,
    pub(crate) outside: Vec<(u32, Event)>,
    pub(crate) outside_threads: Vec<String>,
    pub(crate) outside_lost: u64,
}

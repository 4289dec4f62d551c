//! `RunRecord`: how a graph replayed many times stays registered in the logs
//! of the `Data` handles its nodes declare, so that a run registers again
//! only the handles something outside the graph used since the last run.
//!
//! A graph's run is one access to each of its handles (see
//! `graph/data.rs`). Recording it in every handle's log costs a lock and a
//! record per handle on every run, which for a graph of many small tiles
//! is most of a replay. Instead, the log entry a run records names the
//! graph's run record rather than that run's completion; the
//! slot holds the completion of the graph's latest run. An entry that no
//! access from outside the graph looked at since it was recorded stands
//! for each new run as a new record would: a run only puts its completion
//! in the record, and records again only the handles whose entries were
//! looked at.
//!
//! The protocol (the record's state under its mutex; an entry is looked at
//! only under its log's mutex):
//! - An access from outside that finds an entry naming the record notes the
//!   entry's handle in the record ([`RunRecord::seen`]) and waits for the
//!   latest run's completion if it is not over.
//! - A run asks the record which handles were noted ([`RunRecord::begin`]);
//!   with none, the same step puts its completion in the record and it
//!   starts: an access either sees the new completion or was noted before.
//! - Otherwise the run locks those handles' logs and, holding them, puts
//!   its completion in the record and clears the notes
//!   ([`RunRecord::registering`]), unless more handles were noted meanwhile
//!   (then it tries again with those). Still holding the logs, it records
//!   its entries there after whatever is in them. A handle not noted has
//!   nothing after the graph's entry that the run must wait for, and an
//!   access looking at it from now on sees the new completion.
//!
//! A log that drops an entry whose graph's latest run is over (sweeping
//! its list of reads) notes the handle too ([`RunRecord::forget`]), so the
//! next run records it again.

use crate::core::sync::{lock, Mutex};
use crate::dataflow::event::Dep;

/// Beyond this many handles noted, a run registers every handle (the
/// notes would cost more to keep than the registration saves).
const MOST_NOTED: usize = 64;

/// The registration of one graph's runs in its handles' logs.
pub struct RunRecord {
    state: Mutex<SlotState>,
}

struct SlotState {
    /// The completion of the graph's latest run; `None` until a run
    /// registered.
    latest: Option<Dep>,
    /// The handles whose entries an access from outside the graph looked
    /// at (or a log forgot) since the last registration.
    noted: Noted,
}

/// The handles a run must record again, by their logs' addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Noted {
    /// These, in the order they were noted.
    Handles(Vec<usize>),
    /// Every handle: no run registered yet, or too many were noted.
    All,
}

/// What a run does first (see [`RunRecord::begin`]).
#[derive(Debug)]
pub enum Begin {
    /// Nothing to record: its completion is in the record. Holds the
    /// previous run's completion if that is not over (the new run comes
    /// after it).
    Unchanged(Option<Dep>),
    /// Records these handles again first ([`RunRecord::registering`]).
    Register(Noted),
}

impl RunRecord {
    /// A record no run registered in yet.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(SlotState {
                latest: None,
                noted: Noted::All,
            }),
        }
    }

    /// An access from outside the graph found an entry naming this record in
    /// the log at address `handle` (under that log's lock): notes the
    /// handle, and returns what the access waits for, the latest run's
    /// completion, if not over yet.
    pub fn seen(&self, handle: usize) -> Option<Dep> {
        let mut s = lock(&self.state);
        s.note(handle);
        s.latest.as_ref().filter(|d| !d.is_fulfilled()).cloned()
    }

    /// A log at address `handle` sweeping its list of reads found an entry
    /// naming this record: whether it may drop it (the latest run is over),
    /// in which case the handle is noted, so the next run records it again.
    pub fn forget(&self, handle: usize) -> bool {
        let mut s = lock(&self.state);
        if s.latest.as_ref().is_some_and(|d| !d.is_fulfilled()) {
            return false;
        }
        s.note(handle);
        true
    }

    /// Starts a run whose completion is `done`: with no handle noted since
    /// the last registration, puts `done` in the record (the entries stand
    /// for it); else says which handles to record again.
    pub fn begin(&self, done: &Dep) -> Begin {
        let mut s = lock(&self.state);
        match &s.noted {
            Noted::Handles(noted) if noted.is_empty() => {
                let previous = s.latest.replace(done.clone());
                Begin::Unchanged(previous.filter(|d| !d.is_fulfilled()))
            }
            noted => Begin::Register(noted.clone()),
        }
    }

    /// The run whose completion is `done` holds the logs of the handles
    /// `noted` (what [`RunRecord::begin`] or the last call returned): puts
    /// `done` in the record and clears the notes, returning the previous
    /// run's completion if not over. `Err` with the handles noted now when
    /// more were noted since (nothing changed: lock those and call again).
    pub fn registering(&self, done: &Dep, noted: &Noted) -> Result<Option<Dep>, Noted> {
        let mut s = lock(&self.state);
        let unchanged = match (&s.noted, noted) {
            // Notes only grow between registrations, and only this graph's
            // runs (one at a time) clear them.
            (Noted::Handles(now), Noted::Handles(then)) => now.len() == then.len(),
            (Noted::All, Noted::All) => true,
            _ => false,
        };
        if !unchanged {
            return Err(s.noted.clone());
        }
        s.noted = Noted::Handles(Vec::new());
        let previous = s.latest.replace(done.clone());
        Ok(previous.filter(|d| !d.is_fulfilled()))
    }
}

impl SlotState {
    /// Notes `handle` (once), or every handle beyond [`MOST_NOTED`].
    fn note(&mut self, handle: usize) {
        if let Noted::Handles(noted) = &mut self.noted {
            if !noted.contains(&handle) {
                if noted.len() == MOST_NOTED {
                    self.noted = Noted::All;
                } else {
                    noted.push(handle);
                }
            }
        }
    }
}

impl Default for RunRecord {
    fn default() -> Self {
        Self::new()
    }
}

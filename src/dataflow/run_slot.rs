//! `RunSlot`: how a graph replayed many times stays registered in the logs
//! of the `Data` handles its nodes declare, so that a run registers again
//! only the handles something outside the graph used since the last run.
//!
//! A graph's run is one access to each of its handles (see
//! `graph/data.rs`). Recording it in every handle's log costs a lock and a
//! record per handle on every run, which for a graph of many small tiles
//! is most of a replay. Instead, the log entry a run records names the
//! graph's slot rather than that run's completion; the
//! slot holds the completion of the graph's latest run. An entry that no
//! access from outside the graph looked at since it was recorded stands
//! for each new run as a new record would: a run only puts its completion
//! in the slot, and records again only the handles whose entries were
//! looked at.
//!
//! The protocol (the slot's state under its mutex; an entry is looked at
//! only under its log's mutex):
//! - An access from outside that finds an entry naming the slot notes the
//!   entry's handle in the slot ([`RunSlot::seen`]) and waits for the
//!   latest run's completion if it is not over.
//! - A run asks the slot which handles were noted ([`RunSlot::begin`]);
//!   with none, the same step puts its completion in the slot and it
//!   starts: an access either sees the new completion or was noted before.
//! - Otherwise the run locks those handles' logs and, holding them, puts
//!   its completion in the slot and clears the notes
//!   ([`RunSlot::registering`]), unless more handles were noted meanwhile
//!   (then it tries again with those). Still holding the logs, it records
//!   its entries there after whatever is in them. A handle not noted has
//!   nothing after the graph's entry that the run must wait for, and an
//!   access looking at it from now on sees the new completion.
//!
//! A log that forgets an entry (its list of reads swept) notes its handle
//! too, so the next run records it again.

use crate::core::sync::{lock, Mutex};
use crate::dataflow::event::Dep;

/// Beyond this many handles noted, a run registers every handle (the
/// notes would cost more to keep than the registration saves).
const MOST_NOTED: usize = 64;

/// The registration of one graph's runs in its handles' logs.
pub struct RunSlot {
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
    /// These (in the order they were noted; possibly twice).
    Handles(Vec<usize>),
    /// Every handle: no run registered yet, or too many were noted.
    All,
}

/// What a run does first (see [`RunSlot::begin`]).
#[derive(Debug)]
pub enum Begin {
    /// Nothing to record: its completion is in the slot. Holds the
    /// previous run's completion if that is not over (the new run comes
    /// after it).
    Unchanged(Option<Dep>),
    /// Records these handles again first ([`RunSlot::registering`]).
    Register(Noted),
}

impl RunSlot {
    /// A slot no run registered in yet.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(SlotState {
                latest: None,
                noted: Noted::All,
            }),
        }
    }

    /// An access from outside the graph found an entry naming this slot in
    /// the log at address `handle` (under that log's lock): notes the
    /// handle, and returns what the access waits for, the latest run's
    /// completion, if not over yet.
    pub fn seen(&self, handle: usize) -> Option<Dep> {
        let mut s = lock(&self.state);
        if let Noted::Handles(noted) = &mut s.noted {
            if !noted.contains(&handle) {
                if noted.len() == MOST_NOTED {
                    s.noted = Noted::All;
                } else {
                    noted.push(handle);
                }
            }
        }
        s.latest.as_ref().filter(|d| !d.is_fulfilled()).cloned()
    }

    /// Starts a run whose completion is `done`: with no handle noted since
    /// the last registration, puts `done` in the slot (the entries stand
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
    /// `noted` (what [`RunSlot::begin`] or the last call returned): puts
    /// `done` in the slot and clears the notes, returning the previous
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

impl Default for RunSlot {
    fn default() -> Self {
        Self::new()
    }
}

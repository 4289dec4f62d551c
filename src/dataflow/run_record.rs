//! `RunRecord`: how a graph replayed many times stays registered in the logs
//! of the `Data` handles its nodes declare, so that a run registers again
//! only the handles something outside the graph used since the last run.
//!
//! A graph's run is one access to each of its handles (see
//! `graph/data.rs`). Recording it in every handle's log costs a lock and a
//! record per handle on every run, which for a graph of many small tiles
//! is most of a replay. Instead, the log entry a run records names the
//! graph's run record rather than that run's completion; the
//! record holds the completion of the graph's latest run. An entry that no
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
//! - Otherwise the run locks those handles' logs, in address order, and,
//!   holding them: looks at what their entries make it wait for; then
//!   puts its completion in the record and clears the notes
//!   ([`RunRecord::registering`]), unless more handles were noted meanwhile
//!   (then it tries again with those); then records its entries there. A
//!   handle not noted has nothing after the graph's entry that the run
//!   must wait for, and an access looking at it from now on sees the new
//!   completion. Looking before publishing keeps two graphs sharing a
//!   handle from waiting for each other (see `docs/PROTOCOLS.md`).
//!
//! One run of a graph at a time uses its record (a run borrows its graph
//! mutably, and a change to the graph makes a new record): between two
//! registrations the notes only grow.
//!
//! A log that drops an entry whose graph's latest run is over (sweeping
//! its list of reads) notes the handle too ([`RunRecord::forget`]), so the
//! next run records it again.

// Its `pub` items are the loom models' API (`selvedge::protocols`, built
// with `--cfg loom`); elsewhere they are the crate's own.
#![cfg_attr(not(loom), allow(unreachable_pub))]

use crate::core::sync::{lock, Mutex};
use crate::dataflow::event::Dep;

/// Beyond this many handles noted, a run registers every handle (the
/// notes would cost more to keep than the registration saves).
const MOST_NOTED: usize = 64;

/// The registration of one graph's runs in its handles' logs.
pub struct RunRecord {
    state: Mutex<RecordState>,
}

struct RecordState {
    /// The completion of the graph's latest run; `None` until a run
    /// registered.
    latest: Option<Dep>,
    /// The handles whose entries an access from outside the graph looked
    /// at (or a log forgot) since the last registration.
    noted: Noted,
}

/// The handles a run must record again, by their logs' addresses: a list
/// kept by the caller and filled by [`RunRecord::begin`] or a refused
/// [`RunRecord::registering`] (its capacity reused from run to run).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Noted {
    /// Every handle: no run registered yet, or too many were noted.
    pub all: bool,
    /// Otherwise these, in the order they were noted.
    pub handles: Vec<usize>,
}

impl Noted {
    /// Whether `self` still says what `then` said (notes only grow between
    /// registrations, and only the graph's runs, one at a time, clear
    /// them).
    fn same_as(&self, then: &Noted) -> bool {
        self.all == then.all && (self.all || self.handles.len() == then.handles.len())
    }

    /// Makes `self` say what `from` says, in the memory it has.
    fn copy_from(&mut self, from: &Noted) {
        self.all = from.all;
        self.handles.clear();
        if !from.all {
            self.handles.extend_from_slice(&from.handles);
        }
    }
}

impl RunRecord {
    /// A record no run registered in yet.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(RecordState {
                latest: None,
                noted: Noted {
                    all: true,
                    handles: Vec::new(),
                },
            }),
        }
    }

    /// An access from outside the graph found an entry naming this record
    /// in the log at address `handle` (under that log's lock): notes the
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
    /// for it) and returns `Some` with the previous run's completion if
    /// that is not over (the new run comes after it). Else `None`, and
    /// `noted` says which handles to record again
    /// ([`RunRecord::registering`]).
    pub fn begin(&self, done: &Dep, noted: &mut Noted) -> Option<Option<Dep>> {
        let mut s = lock(&self.state);
        if !s.noted.all && s.noted.handles.is_empty() {
            let previous = s.latest.replace(done.clone());
            return Some(previous.filter(|d| !d.is_fulfilled()));
        }
        noted.copy_from(&s.noted);
        None
    }

    /// The run whose completion is `done` holds the logs of the handles
    /// `noted` (as [`RunRecord::begin`] or the last call left it): puts
    /// `done` in the record and clears the notes, returning the previous
    /// run's completion if not over. `Err` when more were noted since:
    /// nothing changed, and `noted` says which handles to lock now.
    #[allow(clippy::result_unit_err)]
    pub fn registering(&self, done: &Dep, noted: &mut Noted) -> Result<Option<Dep>, ()> {
        let mut s = lock(&self.state);
        debug_assert!(
            s.noted.all || s.noted.handles.len() >= noted.handles.len(),
            "notes shrank between a run's start and its registration: two runs at once"
        );
        if !s.noted.same_as(noted) {
            noted.copy_from(&s.noted);
            return Err(());
        }
        s.noted.all = false;
        s.noted.handles.clear();
        let previous = s.latest.replace(done.clone());
        Ok(previous.filter(|d| !d.is_fulfilled()))
    }
}

impl RecordState {
    /// Notes `handle` (once), or every handle beyond [`MOST_NOTED`].
    fn note(&mut self, handle: usize) {
        let noted = &mut self.noted;
        if noted.all || noted.handles.contains(&handle) {
            return;
        }
        if noted.handles.len() == MOST_NOTED {
            noted.all = true;
        } else {
            noted.handles.push(handle);
        }
    }
}

impl Default for RunRecord {
    fn default() -> Self {
        Self::new()
    }
}

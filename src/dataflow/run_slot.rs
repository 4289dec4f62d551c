//! `RunSlot`: how a graph replayed many times stays registered in the logs
//! of the `Data` handles its nodes declare, so that a run that follows
//! another with nothing from outside in between registers nothing.
//!
//! A graph's run is one access to each of its handles (see
//! `graph/data.rs`). Recording it in every handle's log costs a lock and a
//! record per handle on every run, which for a graph of many small tiles
//! is most of a replay. Instead, the log entry a run records names the
//! graph's slot rather than that run's completion; the slot holds the
//! completion of the graph's latest run. A later run whose slot says that
//! no access from outside the graph has looked at those entries since the
//! last registration only puts its own completion in the slot: every entry
//! now stands for it, as a registration would have made them.
//!
//! The protocol (every step under the slot's mutex):
//! - An access from outside that finds an entry naming the slot in a log
//!   (under that log's lock) notes it in the slot ([`RunSlot::seen`]) and
//!   waits for the latest run's completion if it is not over.
//! - A run starts without registering ([`RunSlot::begin_unchanged`]) only
//!   if nothing was noted since the last registration; the same lock makes
//!   an access either see the new run's completion or be noted before the
//!   run looks.
//! - A run that registers records its entries with every log locked and,
//!   still holding them, puts its completion in the slot and clears what
//!   was noted ([`RunSlot::registered`]): no access can look at an entry
//!   in between.
//!
//! A log that forgets an entry (its list of reads swept) notes it as seen
//! from outside too, so the next run registers again.

use crate::core::sync::{lock, Mutex};
use crate::dataflow::event::Dep;

/// The registration of one graph's runs in its handles' logs.
pub struct RunSlot {
    state: Mutex<SlotState>,
}

struct SlotState {
    /// The completion of the graph's latest run; `None` until a run
    /// registered.
    latest: Option<Dep>,
    /// Whether an access from outside the graph looked at (or a log
    /// forgot) one of the entries since the last registration.
    seen: bool,
}

impl RunSlot {
    /// A slot no run registered in yet.
    pub fn new() -> Self {
        Self {
            state: Mutex::new(SlotState {
                latest: None,
                seen: false,
            }),
        }
    }

    /// An access from outside the graph found an entry naming this slot:
    /// notes it, and returns what the access waits for, the latest run's
    /// completion, if not over yet.
    pub fn seen(&self) -> Option<Dep> {
        let mut s = lock(&self.state);
        s.seen = true;
        s.latest.as_ref().filter(|d| !d.is_fulfilled()).cloned()
    }

    /// Starts a run whose completion is `done` without registering it, if
    /// the entries of the last registration still stand: nothing from
    /// outside looked at them since. Returns `Err(())` when the run must
    /// register; else the previous run's completion if it is not over yet
    /// (the new run comes after it).
    #[allow(clippy::result_unit_err)]
    pub fn begin_unchanged(&self, done: &Dep) -> Result<Option<Dep>, ()> {
        let mut s = lock(&self.state);
        if s.seen || s.latest.is_none() {
            return Err(());
        }
        let previous = s.latest.replace(done.clone());
        Ok(previous.filter(|d| !d.is_fulfilled()))
    }

    /// A run whose completion is `done` registered: call it while every log
    /// the run recorded an entry in is still locked.
    pub fn registered(&self, done: Dep) {
        let mut s = lock(&self.state);
        s.latest = Some(done);
        s.seen = false;
    }
}

impl Default for RunSlot {
    fn default() -> Self {
        Self::new()
    }
}

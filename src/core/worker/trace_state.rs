//! What a worker keeps for the trace (feature `trace`): its track of the
//! runtime's trace and how many `named` calls run on its thread. Its own
//! file, apart from `hooks.rs` that reads it, because the worker's state
//! (`mod.rs`) holds it; `trace_state_off.rs` is its empty twin.

use crate::core::registry::Registry;
use crate::core::trace::record::Track;
use std::cell::Cell;

/// A worker's trace state.
pub(super) struct TraceState {
    /// This worker's track of the runtime's trace, when it is traced.
    pub(super) track: Option<&'static Track>,
    /// How many `named` calls are running on this thread: while any is,
    /// `spawn` looks up the name (see `TaskRef::name_if_naming`).
    pub(super) naming: Cell<u32>,
}

impl TraceState {
    /// The trace state of worker `index` of `shared`.
    pub(super) fn new(shared: &Registry, index: usize) -> Self {
        let track = shared.tracer.as_ref().map(|t| {
            let track: *const Track = &*t.tracks[index];
            // SAFETY: the worker holds `shared`, which owns the tracer, for
            // as long as the worker exists (as for its mailbox, see
            // `Worker::run`).
            unsafe { &*track }
        });
        Self {
            track,
            naming: Cell::new(0),
        }
    }
}

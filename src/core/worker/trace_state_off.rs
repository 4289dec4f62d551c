//! The empty twin of `trace_state.rs`, without the `trace` feature: a
//! worker keeps nothing for a trace.

use crate::core::registry::Registry;

/// A worker's trace state: nothing.
pub(super) struct TraceState;

impl TraceState {
    /// Nothing to keep for worker `index` of `shared`.
    #[inline(always)]
    pub(super) fn new(_shared: &Registry, _index: usize) -> Self {
        Self
    }
}

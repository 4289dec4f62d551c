//! The no-op twin of `hooks.rs`, compiled without the `trace` feature:
//! the same hooks, recording nothing, inlined away.

use super::{Until, Worker};
use crate::core::registry::Registry;
use crate::core::steal::{StealRequest, VictimSet};
use crate::core::task::{Header, TaskRef};
use crate::core::trace::names::SpanName;
use std::sync::Arc;

/// Where a task given to the injector goes in a trace; unused untraced.
pub(super) const NO_WORKER: u64 = u64::MAX;

impl Worker {
    /// Runs `run` on `task` (in a trace, as the task's slice).
    #[inline(always)]
    pub(crate) fn traced<R>(&self, task: TaskRef, run: impl FnOnce(TaskRef) -> R) -> R {
        run(task)
    }

    /// Runs `run` on `task`, which its own handle's `join` runs in place.
    #[inline(always)]
    pub(crate) fn traced_in_place<R>(&self, task: TaskRef, run: impl FnOnce(TaskRef) -> R) -> R {
        run(task)
    }

    /// Runs `f`, code that is not a task of its own (in a trace, as a
    /// named slice).
    #[inline(always)]
    pub(crate) fn traced_span<R>(&self, _name: SpanName, f: impl FnOnce() -> R) -> R {
        f()
    }

    /// Records nothing: a fulfill on this worker made `task` ready.
    #[inline(always)]
    pub(crate) fn trace_ready(&self, _task: &TaskRef) {}

    /// Records nothing: `task` leaves this worker for worker `to`.
    #[inline(always)]
    pub(super) fn trace_given(&self, _task: &TaskRef, _to: u64) {}

    /// Parks (see `park_untraced`).
    #[cold]
    pub(super) fn park(&self, until: &Until<'_>) {
        self.park_untraced(until);
    }

    /// Records nothing: a loop split gave `part` to worker `to`.
    #[inline(always)]
    pub(super) fn trace_loop_split(&self, _part: &TaskRef, _to: u64, _iterations: u64) {}

    /// Records nothing: the tasks of `list` leave for worker `to`.
    ///
    /// # Safety
    /// None here; the traced twin's contract: the caller owns the list.
    #[inline(always)]
    pub(super) unsafe fn trace_list_given(&self, _list: *mut Header, _to: u64) {}

    /// Records nothing: this worker answered `req` with `n` tasks.
    #[inline(always)]
    pub(super) fn trace_steal_answered(&self, _req: &StealRequest, _n: usize) {}

    /// Records nothing: this worker declined `req`, forwarded to `next`.
    #[inline(always)]
    pub(super) fn trace_steal_declined(&self, _req: &StealRequest, _next: Option<usize>) {}

    /// This worker's steal request to worker `v`.
    #[inline(always)]
    pub(super) fn steal_request(&self, _v: usize, tried: VictimSet, half: bool) -> StealRequest {
        StealRequest {
            thief: self.index,
            tried,
            half,
        }
    }
}

/// The arrow in a trace from enqueued device work to its completion:
/// nothing without the feature.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))] // GPU tasks only
pub(crate) struct DeviceFlow;

#[cfg_attr(not(feature = "cuda"), allow(dead_code))] // GPU tasks only
impl DeviceFlow {
    /// Records nothing: device work is enqueued for `runtime`.
    #[inline(always)]
    pub(crate) fn start(_runtime: &Arc<Registry>) -> Self {
        Self
    }

    /// Records nothing: the work's completion is handled here.
    #[inline(always)]
    pub(crate) fn end(self) {}
}

impl TaskRef {
    /// Names nothing: the task's name in a trace.
    #[inline(always)]
    pub(crate) fn set_span_name(&self, _name: SpanName) {}

    /// Names nothing: without the `trace` feature a task has no name but
    /// its closure's type.
    #[inline(always)]
    #[allow(clippy::extra_unused_type_parameters)]
    pub(crate) fn name_after_on<F>(&self, _worker: Option<&Worker>) {}

    /// Names nothing (see `name_after_on`).
    #[inline(always)]
    pub(crate) fn name_if_naming(&self, _w: &Worker) {}
}

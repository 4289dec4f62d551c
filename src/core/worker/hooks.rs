//! What a worker records in a trace (feature `trace`), and the names
//! `named` gives the tasks made on it. Without the feature, the no-op
//! twin `hooks_off.rs` stands in, so that the scheduler's own files call
//! these hooks without a `cfg` of their own.

use super::{Until, Worker};
use crate::core::clock::ticks;
use crate::core::registry::Registry;
use crate::core::steal::{StealRequest, VictimSet};
use crate::core::task::{for_each_listed, Header, TaskRef};
use crate::core::trace::names::SpanName;
use crate::core::trace::record::{event, Kind};
use std::sync::Arc;

pub(super) use crate::core::trace::record::NO_WORKER;

impl Worker {
    /// Runs `run` on `task`, as the task's slice in the trace (with
    /// the `trace` feature, when the runtime is traced; else just runs it).
    #[inline(always)]
    pub(crate) fn traced<R>(&self, task: TaskRef, run: impl FnOnce(TaskRef) -> R) -> R {
        // A task run while a `named` waits on this thread is not made
        // by that `named`'s closure: what it makes keeps its own names.
        let _outside = (self.trace.naming.get() != 0).then(|| self.suspend_naming());
        if let Some(t) = self.trace.track {
            let (name, flow, t0) = (task.trace_name(), task.trace_flow(), ticks());
            if flow != 0 {
                // Its arrow ends here. (A graph node's header serves
                // every run: the next run's arrows are new ones.)
                task.set_trace_flow(0);
            }
            let r = run(task);
            t.record(event(Kind::Task, 0, t0, ticks(), flow, name));
            return r;
        }
        run(task)
    }

    /// [`traced`](Worker::traced) for a task its own handle's `join` runs
    /// in place: a slice of its own only when something sent it here (a
    /// fulfill made it ready), else it runs inside its joiner's slice as a
    /// call would, as a spawned task that `join` takes back does.
    #[inline(always)]
    pub(crate) fn traced_in_place<R>(&self, task: TaskRef, run: impl FnOnce(TaskRef) -> R) -> R {
        if task.trace_flow() != 0 {
            return self.traced(task, run);
        }
        run(task)
    }

    /// Clears this thread's `named` name until the guard drops (see
    /// `traced`).
    #[cold]
    fn suspend_naming(&self) -> impl Drop + '_ {
        struct Resume<'w>(&'w Worker, u32, Option<&'static str>);
        impl Drop for Resume<'_> {
            fn drop(&mut self) {
                self.0.trace.naming.set(self.1);
                crate::core::trace::names::set_pending(self.2);
            }
        }
        let outer = crate::core::trace::names::set_pending(None);
        Resume(self, self.trace.naming.replace(0), outer)
    }

    /// Runs `f`, code that is not a task of its own (the share of a loop its
    /// caller runs), as a slice named `name` in the trace, when traced.
    #[inline(always)]
    pub(crate) fn traced_span<R>(&self, name: SpanName, f: impl FnOnce() -> R) -> R {
        if let Some(t) = self.trace.track {
            let t0 = ticks();
            let r = f();
            let name = crate::core::trace::record::name_words(name.get());
            t.record(event(Kind::Task, 0, t0, ticks(), 0, name));
            return r;
        }
        f()
    }

    /// Records that `task` leaves this worker for worker `to` (`NO_WORKER`:
    /// the injector): the arrow to its run starts here, or passes through
    /// when a fulfill or a split started it.
    pub(super) fn trace_given(&self, task: &TaskRef, to: u64) {
        if let Some(t) = self.trace.track {
            let mut flow = task.trace_flow();
            let starts = flow == 0;
            if starts {
                flow = t.new_flow();
                task.set_trace_flow(flow);
            }
            t.record(event(
                Kind::Given,
                to,
                ticks(),
                0,
                flow,
                (0, u64::from(starts)),
            ));
        }
    }

    /// Whether a `named` runs on this thread now.
    #[inline(always)]
    pub(crate) fn naming_tasks(&self) -> bool {
        self.trace.naming.get() != 0
    }

    /// A `named` starts on this thread.
    pub(crate) fn enter_naming(&self) {
        self.trace.naming.set(self.trace.naming.get() + 1);
    }

    /// A `named` ends on this thread.
    pub(crate) fn leave_naming(&self) {
        self.trace.naming.set(self.trace.naming.get() - 1);
    }

    /// Records that a fulfill on this worker made `task` ready.
    pub(crate) fn trace_ready(&self, task: &TaskRef) {
        if let Some(t) = self.trace.track {
            let flow = t.new_flow();
            task.set_trace_flow(flow);
            t.record(event(Kind::Ready, 0, ticks(), 0, flow, task.trace_name()));
        }
    }

    /// Parks (see `park_untraced`), as a slice of the trace when traced.
    #[cold]
    pub(super) fn park(&self, until: &Until<'_>) {
        if let Some(t) = self.trace.track {
            let (parks, t0) = (self.own_counters.parks.load(), ticks());
            self.park_untraced(until);
            if self.own_counters.parks.load() != parks {
                t.record(event(Kind::Parked, 0, t0, ticks(), 0, (0, 0)));
            }
            return;
        }
        self.park_untraced(until);
    }

    /// Records a loop split that gave `part`, `iterations` iterations, to
    /// worker `to` (`NO_WORKER`: the injector).
    pub(super) fn trace_loop_split(&self, part: &TaskRef, to: u64, iterations: u64) {
        if let Some(t) = self.trace.track {
            let flow = t.new_flow();
            part.set_trace_flow(flow);
            t.record(event(
                Kind::LoopSplit,
                to,
                ticks(),
                iterations,
                flow,
                (0, 0),
            ));
        }
    }
}

/// The arrow in a trace from the worker that enqueued device work to the
/// one that handles its completion: both ends on workers of the runtime
/// whose trace it is (a thread of another runtime, or none, draws no end).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))] // GPU tasks only
pub(crate) struct DeviceFlow {
    /// The runtime's registry, as an address to compare with (it is not
    /// kept alive by this).
    home: usize,
    /// 0: no arrow (not traced, or not enqueued on one of its workers).
    flow: u64,
}

#[cfg_attr(not(feature = "cuda"), allow(dead_code))] // GPU tasks only
impl DeviceFlow {
    /// Device work is enqueued now, on this thread, for `runtime`.
    pub(crate) fn start(runtime: &Arc<Registry>) -> Self {
        let home = Arc::as_ptr(runtime) as usize;
        let flow = match Self::on_home(home).and_then(|w| w.trace.track) {
            Some(t) => {
                let flow = t.new_flow();
                let name = crate::core::trace::record::name_words("device work");
                t.record(event(Kind::DeviceEnqueued, 0, ticks(), 0, flow, name));
                flow
            }
            None => 0,
        };
        Self { home, flow }
    }

    /// The work's completion is handled now, on this thread, by an action
    /// its signal runs.
    pub(crate) fn end(self) {
        // No arrow began (untraced): no need to look up this thread's worker.
        if self.flow == 0 {
            return;
        }
        if let Some(t) = Self::on_home(self.home).and_then(|w| w.trace.track) {
            let fired_at = crate::core::signal::fired_at_of_running_action();
            t.record(event(
                Kind::DeviceDone,
                0,
                fired_at,
                ticks(),
                self.flow,
                (0, 0),
            ));
        }
    }

    /// This thread's worker, if it is one of the runtime's at `home`.
    fn on_home(home: usize) -> Option<&'static Worker> {
        Worker::current().filter(|w| Arc::as_ptr(&w.shared) as usize == home)
    }
}

impl TaskRef {
    /// Names the task `name` in the trace.
    #[inline(always)]
    pub(crate) fn set_span_name(&self, name: SpanName) {
        self.set_trace_name(name.get());
    }

    /// [`name_after`](TaskRef::name_after) for a task made on `worker` (if
    /// on one): unless the worker is inside `named`, the type's name is
    /// taken without looking up the thread's `named` name (a scope's
    /// spawn, a hot path, pays two stores).
    #[inline(always)]
    pub(crate) fn name_after_on<F>(&self, worker: Option<&Worker>) {
        match worker {
            Some(w) if !w.naming_tasks() => self.set_trace_name(std::any::type_name::<F>()),
            _ => self.name_after::<F>(),
        }
    }

    /// The name `named` gives to tasks made on worker `w` now, if any: the
    /// hot path of `spawn`, where only a flag of the worker's is read
    /// unless it is inside `named` (a task unnamed shows its vtable's type
    /// name).
    #[inline(always)]
    pub(crate) fn name_if_naming(&self, w: &Worker) {
        if w.naming_tasks() {
            if let Some(name) = crate::core::trace::names::pending() {
                self.set_trace_name(name);
            }
        }
    }
}

impl Worker {
    /// Records that the tasks of `list` leave this worker for worker `to`
    /// (`NO_WORKER`: the injector; see [`trace_given`](Worker::trace_given)).
    ///
    /// # Safety
    /// The caller owns the list until it sends it.
    pub(super) unsafe fn trace_list_given(&self, list: *mut Header, to: u64) {
        if self.trace.track.is_some() {
            // SAFETY: the list is the caller's until it sends it.
            unsafe { for_each_listed(list, |task| self.trace_given(task, to)) };
        }
    }

    /// Records that this worker answered `req` with `n` tasks.
    pub(super) fn trace_steal_answered(&self, req: &StealRequest, n: usize) {
        if let Some(t) = self.trace.track {
            let (thief, flow) = (req.thief as u64, req.flow);
            t.record(event(
                Kind::StealAnswered,
                thief,
                ticks(),
                n as u64,
                flow,
                (0, 0),
            ));
        }
    }

    /// Records that this worker declined `req`, forwarded to `next` (none:
    /// back to the thief).
    pub(super) fn trace_steal_declined(&self, req: &StealRequest, next: Option<usize>) {
        if let Some(t) = self.trace.track {
            let to = next.map_or(0, |v| v as u64 + 1);
            let thief = req.thief as u64;
            t.record(event(
                Kind::StealDeclined,
                thief,
                ticks(),
                to,
                req.flow,
                (0, 0),
            ));
        }
    }

    /// This worker's steal request to worker `v`, its sending recorded
    /// (the arrow of the request starts here).
    pub(super) fn steal_request(&self, v: usize, tried: VictimSet, half: bool) -> StealRequest {
        let flow = self.trace.track.map_or(0, |t| {
            let flow = t.new_flow();
            t.record(event(Kind::StealSent, v as u64, ticks(), 0, flow, (0, 0)));
            flow
        });
        StealRequest {
            thief: self.index,
            tried,
            half,
            flow,
        }
    }
}

//! Completions: how the end of a GPU task's device work reaches the
//! runtime, and what happens when it never will.
//!
//! A task's work is followed by an event recorded on its stream. The
//! runtime's workers query that event while they look for work and
//! between two tasks (`core/completions.rs`): the first to find it
//! complete fires the completion's signal on itself and runs its action
//! right after, with no thread woken. The fallback, for when every worker
//! sleeps or runs one long task: the lane's completion stream waits for
//! the event on the device and then calls a host function that fires the
//! same signal, unless a worker did first (`core/fire_once.rs` decides),
//! and wakes a worker. The host function does nothing else (no CUDA call,
//! no allocation, no lock: see `core/signal.rs`). It is not launched on the
//! work stream because it blocks the work enqueued behind it until it has
//! run: the next task on the stream would wait for a round trip through
//! the driver's callback thread.
//!
//! Every completion in flight is registered; a watchdog thread queries the
//! streams while any is, and when the context is lost (a sticky error) it
//! gives them up, so that their actions are dropped unrun and the promises
//! they own break instead of waiting forever. The registry and the
//! watchdog's thread are the device's (`device.rs`); the watchdog's round
//! and the giving up are here.

use super::capture::{exchange_capture_mode, RELAXED};
use super::device::{DeviceInner, InFlight};
use super::error::is_sticky;
use super::raw::RawEvent;
use super::stream::GpuStream;
use super::GpuError;
use crate::core::fire_once::FireOnce;
use crate::core::polled_signal::{PolledSignal, Query};
use crate::core::registry::fire_signal;
use crate::core::signal::Action;
use crate::core::sync::{lock, Mutex};
use crate::core::worker::hooks::DeviceFlow;
use cudarc::driver::{sys, DriverError};
use std::ffi::c_void;
use std::sync::Arc;

impl DeviceInner {
    /// Has a worker run `action` once the work before `after`'s most recent
    /// record (on `lane`'s stream) is complete. On `Err` the action was
    /// dropped unrun (so what it owns breaks its promises), and it is
    /// dropped unrun by the watchdog if the device fails first. The caller
    /// made the context current.
    pub(super) fn enqueue_completion(
        self: &Arc<Self>,
        lane: &GpuStream,
        after: &Arc<RawEvent>,
        action: impl FnOnce() + Send + 'static,
    ) -> Result<(), GpuError> {
        let mut registry = lock(&self.in_flight);
        // Under the lock the watchdog's abandon pass takes after setting
        // `failed`: either it is seen here, or this completion is registered
        // before that pass and abandoned by it. Never one left behind.
        if let Err(e) = self.check_failed() {
            drop(registry);
            drop(action);
            return Err(e);
        }
        let id = registry.next_id;
        registry.next_id += 1;
        // An arrow in a trace from here to the worker that handles the
        // completion, through the callback.
        let flow = DeviceFlow::start(&self.runtime);
        let action: Action = Box::new(move || {
            flow.end();
            action();
        });
        let signal = self.runtime.signal(action);
        let claim = Arc::new(FireOnce::kept_for_callback(signal));
        let was_idle = registry.signals.is_empty();
        // Registered before it can fire, under the lock its action takes.
        registry.signals.insert(id, Arc::clone(&claim));
        let launched = after.wait_on(lane.completions.cu_stream()).and_then(|()| {
            // SAFETY: the stream is live; `stream_reached` claims the
            // signal through the claim, which the runtime's list of polled
            // operations keeps until that call let go of it.
            unsafe {
                sys::cuLaunchHostFunc(
                    lane.completions.cu_stream(),
                    Some(stream_reached),
                    claim.as_callback_arg(),
                )
            }
            .result()
        });
        if let Err(e) = launched {
            registry.signals.remove(&id);
            drop(registry);
            // SAFETY: never handed to CUDA nor to the workers, so it will
            // never fire.
            drop(unsafe { self.runtime.inbox.discard(signal) });
            let e = GpuError::from(e);
            self.fail_if_sticky(&e);
            return Err(e);
        }
        drop(registry);
        // Workers query the event from now on; the host function is the
        // fallback. Added after the launch: a completion that could not be
        // enqueued must be nobody's to fire.
        self.runtime.watch(Box::new(PolledSignal::new(
            EventEnded {
                event: Arc::clone(after),
                in_flight: Arc::clone(&self.in_flight),
                id,
            },
            claim,
        )));
        if was_idle {
            if let Some(t) = self.watchdog.get() {
                t.unpark();
            }
        }
        Ok(())
    }

    /// The device failed with `error`: no more work, and every completion
    /// in flight is abandoned (its promises break, cancelling dependents).
    pub(super) fn fail(&self, error: DriverError) {
        let _ = self.failed.set(error);
        self.abandon_in_flight();
    }

    /// Gives up every completion whose host function has not run: those
    /// nobody fired have their actions dropped unrun, and every one is
    /// marked given up, so that the runtime's list lets it go (leaking the
    /// claim its host function holds). Only for host functions that never
    /// will run (the context is lost).
    pub(super) fn abandon_in_flight(&self) {
        let actions: Vec<Action> = {
            let registry = lock(&self.in_flight);
            registry
                .signals
                .values()
                .filter_map(|c| c.give_up())
                // SAFETY: claimed here, so never fired and never to be.
                .filter_map(|s| unsafe { self.runtime.inbox.discard(s) })
                .collect()
        };
        // Dropped outside the lock: breaking promises cancels tasks.
        drop(actions);
        self.runtime.sleep.wake_any();
    }

    /// The device failed if `error` is a sticky one (whoever's call saw it
    /// first): completions in flight are abandoned at once, not at the
    /// watchdog's next round, and later spawns say `DeviceFailed`.
    pub(super) fn fail_if_sticky(&self, error: &GpuError) {
        if let GpuError::Driver(e) = error {
            if is_sticky(e.0) {
                self.fail(*e);
            }
        }
    }

    /// Whether the context is lost, asked of this device's own completion
    /// streams (an error a task's closure returned may be another
    /// device's): fails the device if so.
    pub(super) fn check_lost(&self) {
        if self.make_current().is_err() {
            return;
        }
        if let Some(lane) = self.lanes.first() {
            // SAFETY: the stream is live.
            let status = unsafe { sys::cuStreamQuery(lane.completions.cu_stream()) };
            if is_sticky(status) {
                self.fail(DriverError(status));
            }
        }
    }

    /// One watchdog round: a completion stream that reports a sticky error
    /// means the context is lost, and its callbacks will never come. Only
    /// completion streams are queried: sticky errors are the context's, so
    /// any of its streams reports them, and these are never captured (a
    /// query of a stream a task is capturing would end its capture). Other
    /// errors are not the device's state: the watch goes on.
    pub(super) fn check_streams(&self) {
        if let Err(e) = self.make_current() {
            self.fail_if_sticky(&e.into());
            return;
        }
        for lane in self.lanes.iter() {
            // SAFETY: the stream is live.
            let status = unsafe { sys::cuStreamQuery(lane.completions.cu_stream()) };
            if is_sticky(status) {
                self.fail(DriverError(status));
                return;
            }
        }
    }
}

/// The host function enqueued after a GPU task's work: it claims the
/// completion and, unless a worker fired it first, fires its signal (see
/// `core/signal.rs`), which takes one swap, one compare-and-swap, a
/// lock-free push and a wake-up; no CUDA call, no allocation, no lock, no
/// panic.
unsafe extern "C" fn stream_reached(user_data: *mut c_void) {
    // SAFETY: `user_data` is the callback argument of the claim
    // `enqueue_completion` made for this one call, kept until it.
    if let Some(signal) = unsafe { FireOnce::claim_from_callback(user_data) } {
        // SAFETY: claimed, so fired once, here; the device (which holds
        // the runtime) synchronizes its streams before letting the runtime
        // go, so the runtime outlives this call.
        unsafe { fire_signal(signal) }
    }
}

/// Whether the work before an event's most recent record is complete,
/// asked by a polling worker; and the completion's place in the device's
/// registry, which it keeps until its host function let go of the claim
/// (so that a device failure before then gives the claim up, and the
/// runtime's list lets it go).
struct EventEnded {
    event: Arc<RawEvent>,
    in_flight: Arc<Mutex<InFlight>>,
    id: u64,
}

impl Query for EventEnded {
    fn has_ended(&self) -> bool {
        // Allowed, in the relaxed mode, while another thread captures a
        // stream in the global mode (the query would end that capture
        // otherwise). An error reads as "not yet": the host function and
        // the watchdog deal with a failed device.
        let mode = exchange_capture_mode(RELAXED);
        let ended = self.event.is_complete_in_context();
        exchange_capture_mode(mode);
        matches!(ended, Ok(true))
    }

    fn released(&self) {
        lock(&self.in_flight).signals.remove(&self.id);
    }
}

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
//! they own break instead of waiting forever.

use super::device::DeviceInner;
use super::raw::RawEvent;
use super::stream::GpuStream;
use super::GpuError;
use crate::core::fire_once::FireOnce;
use crate::core::polled_signal::{PolledSignal, Query};
use crate::core::registry::fire_signal;
use crate::core::signal::Action;
use crate::core::sync::{lock, Mutex};
use cudarc::driver::{sys, DriverError};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Weak};
use std::time::Duration;

/// How often the watchdog queries the streams while work is in flight.
const WATCHDOG_PERIOD: Duration = Duration::from_millis(20);

/// The completions whose host function has not let go of their claim
/// (whose action may not have run either).
#[derive(Default)]
pub(super) struct InFlight {
    next_id: u64,
    signals: HashMap<u64, Arc<FireOnce>>,
}

impl InFlight {
    pub(super) fn is_empty(&self) -> bool {
        self.signals.is_empty()
    }
}

/// `Err(StreamCapturing)` if `stream` was left being captured into a graph
/// (a completion enqueued then would be recorded into the graph, and fire
/// once per launch of it, or never, instead of running after the work).
/// The capture is ended and its graph destroyed first, so that the stream
/// (the worker's lane) takes work again and can be waited for.
pub(super) fn end_left_capture(stream: sys::CUstream) -> Result<(), GpuError> {
    let mut capture = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: the stream is live; `capture` is a valid out-pointer.
    unsafe { sys::cuStreamIsCapturing(stream, &mut capture) }.result()?;
    if capture == sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE {
        return Ok(());
    }
    let mut graph = std::ptr::null_mut();
    // SAFETY: the stream is live and capturing (or its capture was
    // invalidated, which this ends too); `graph` is a valid out-pointer.
    // Ending fails where the capture is not this stream's to end (it joined
    // one begun on another stream, or another thread began it): that is
    // seen below.
    let _ = unsafe { sys::cuStreamEndCapture(stream, &mut graph) };
    if !graph.is_null() {
        // SAFETY: the graph was just made by the capture and is ours.
        let _ = unsafe { sys::cuGraphDestroy(graph) };
    }
    let mut after = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: as above.
    let asked = unsafe { sys::cuStreamIsCapturing(stream, &mut after) };
    if asked == sys::CUresult::CUDA_SUCCESS
        && after != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
    {
        eprintln!(
            "selvedge: a GPU task left its worker's stream in a capture it could not end (it joined a capture begun on another stream); that worker's GPU tasks fail until the capture ends"
        );
    }
    Err(GpuError::StreamCapturing)
}

/// The capture mode in which a thread may make calls CUDA deems unsafe
/// while another thread captures a stream in the global mode (queries,
/// waits): they are not prohibited then, and do not end that capture.
pub(super) const RELAXED: sys::CUstreamCaptureMode =
    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;

/// Sets the calling thread's capture mode; returns the one it had.
pub(super) fn exchange_capture_mode(mode: sys::CUstreamCaptureMode) -> sys::CUstreamCaptureMode {
    let mut mode = mode;
    // SAFETY: `mode` is a valid in/out pointer; this sets only the calling
    // thread's mode.
    let _ = unsafe { sys::cuThreadExchangeStreamCaptureMode(&mut mode) };
    mode
}

/// Whether `error` means the context is lost: CUDA's sticky errors, after
/// which every call in the context fails and no host function runs.
pub(super) fn is_sticky(error: sys::CUresult) -> bool {
    use sys::CUresult::*;
    matches!(
        error,
        CUDA_ERROR_ILLEGAL_ADDRESS
            | CUDA_ERROR_LAUNCH_TIMEOUT
            | CUDA_ERROR_ASSERT
            | CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUDA_ERROR_MISALIGNED_ADDRESS
            | CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUDA_ERROR_INVALID_PC
            | CUDA_ERROR_LAUNCH_FAILED
            | CUDA_ERROR_ECC_UNCORRECTABLE
            | CUDA_ERROR_NVLINK_UNCORRECTABLE
            | CUDA_ERROR_CONTAINED
            | CUDA_ERROR_TENSOR_MEMORY_LEAK
            | CUDA_ERROR_EXTERNAL_DEVICE
            | CUDA_ERROR_CONTEXT_IS_DESTROYED
            | CUDA_ERROR_DEINITIALIZED
            | CUDA_ERROR_UNKNOWN
    )
}

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
        // Both ends on workers of the device's runtime, whose trace it is.
        #[cfg(feature = "trace")]
        let home = Arc::as_ptr(&self.runtime) as usize;
        #[cfg(feature = "trace")]
        let on_home = move || {
            crate::core::worker::Worker::current()
                .filter(|w| Arc::as_ptr(&w.shared) as usize == home)
        };
        #[cfg(feature = "trace")]
        let flow = on_home().map_or(0, |w| w.trace_device_enqueued());
        let action: Action = Box::new(move || {
            #[cfg(feature = "trace")]
            if let Some(w) = on_home() {
                let fired_at = crate::core::signal::fired_at_of_running_action();
                w.trace_device_done(flow, fired_at);
            }
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
    fn check_streams(&self) {
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

/// The watchdog thread: while completions are in flight, queries the
/// streams every `WATCHDOG_PERIOD`; parks while there are none; ends with
/// the device.
pub(super) fn watch(device: Weak<DeviceInner>) {
    exchange_capture_mode(RELAXED);
    loop {
        let busy = match device.upgrade() {
            Some(d) if d.failed.get().is_none() => {
                let busy = !lock(&d.in_flight).is_empty();
                if busy {
                    d.check_streams();
                }
                busy
            }
            _ => return,
        };
        if busy {
            std::thread::park_timeout(WATCHDOG_PERIOD);
        } else {
            // Woken when work is enqueued, or when the device is dropped;
            // the timeout only bounds a missed unpark.
            std::thread::park_timeout(Duration::from_secs(1));
        }
    }
}

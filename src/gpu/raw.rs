//! The crate's own raw driver calls, where cudarc's would first make the
//! context current with `bind_to_thread`: that returns (and clears)
//! whatever error any other thread's drop recorded on the context, so a task
//! could fail with an error that is not its own, and the error would be
//! lost for its owner. Making a context current, and CUDA events.

use cudarc::driver::{sys, CudaContext, DriverError};
use std::sync::Arc;

/// Makes `ctx` current on the calling thread.
pub(super) fn make_current(ctx: &CudaContext) -> Result<(), DriverError> {
    // SAFETY: the context is live (the caller holds it).
    unsafe { sys::cuCtxSetCurrent(ctx.cu_ctx()) }.result()
}

/// An event without timing (the cheapest kind). The caller makes the
/// event's context current before each call. The event holds its context,
/// so that it is destroyed before the context is released, wherever its
/// last holder (a GPU task's handle) goes.
pub(super) struct RawEvent {
    event: sys::CUevent,
    _context: Arc<CudaContext>,
}

// SAFETY: a CUevent is a driver handle, usable from any thread whose
// current context is its own; it carries no thread-affine state.
unsafe impl Send for RawEvent {}
// SAFETY: as above; the driver synchronizes concurrent calls on one event.
unsafe impl Sync for RawEvent {}

impl RawEvent {
    /// A new event in `context`, which the caller made current.
    pub(super) fn new(context: &Arc<CudaContext>) -> Result<Self, DriverError> {
        let mut event = std::ptr::null_mut();
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32;
        // SAFETY: `event` is a valid out-pointer; the caller made a context
        // current.
        unsafe { sys::cuEventCreate(&mut event, flags) }.result()?;
        Ok(RawEvent {
            event,
            _context: Arc::clone(context),
        })
    }

    /// Records the event after the work enqueued on `stream` so far.
    pub(super) fn record(&self, stream: sys::CUstream) -> Result<(), DriverError> {
        // SAFETY: both handles are live (the caller holds the stream's owner).
        unsafe { sys::cuEventRecord(self.event, stream) }.result()
    }

    /// Makes the work enqueued on `stream` from now on wait, on the device,
    /// for the work before the event's most recent record (the driver takes
    /// that record at this call, so the event may be recorded again at once).
    pub(super) fn wait_on(&self, stream: sys::CUstream) -> Result<(), DriverError> {
        // SAFETY: both handles are live; flags 0 is the default wait.
        unsafe { sys::cuStreamWaitEvent(stream, self.event, 0) }.result()
    }

    /// Whether the work before the most recent record is complete, without
    /// waiting.
    pub(super) fn is_complete(&self) -> Result<bool, DriverError> {
        // SAFETY: the event is live.
        match unsafe { sys::cuEventQuery(self.event) } {
            sys::CUresult::CUDA_SUCCESS => Ok(true),
            sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            error => Err(DriverError(error)),
        }
    }

    /// [`RawEvent::is_complete`] from any thread: makes the event's own
    /// context current first (a worker testing GPU work in flight may have
    /// another device's, or none).
    pub(super) fn is_complete_in_context(&self) -> Result<bool, DriverError> {
        make_current(&self._context)?;
        self.is_complete()
    }

    /// Blocks the calling thread until the work before the most recent
    /// record is complete.
    pub(super) fn synchronize(&self) -> Result<(), DriverError> {
        // SAFETY: the event is live.
        unsafe { sys::cuEventSynchronize(self.event) }.result()
    }

    /// [`RawEvent::synchronize`] from any thread: makes the event's own
    /// context current first.
    pub(super) fn synchronize_in_context(&self) -> Result<(), DriverError> {
        make_current(&self._context)?;
        self.synchronize()
    }
}

impl Drop for RawEvent {
    fn drop(&mut self) {
        // SAFETY: the event is live and ours. Destroying an event whose
        // record is still pending is allowed: the driver frees it once the
        // record completes. A lost context may refuse: then the event leaks
        // with it, which is all a lost context allows.
        let _ = unsafe { sys::cuEventDestroy_v2(self.event) };
    }
}

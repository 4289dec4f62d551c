//! Stream capture: ending a capture a GPU task left open on its worker's
//! stream, and the capture mode in which the runtime's own threads make the
//! calls a capture in the global mode forbids.

use super::GpuError;
use cudarc::driver::sys;

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

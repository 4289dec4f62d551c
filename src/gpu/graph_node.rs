//! GPU nodes of a graph: each chain of them on one device is captured into
//! a CUDA graph on its first run and replayed with one launch after that.
//!
//! The chain is the graph layer's (`graph/chain.rs`): GPU nodes of one
//! device linked one to one. The worker that readies its head makes the
//! chain a lane of its own (a stream and a cuBLAS handle), captures the
//! chain on it (in the relaxed mode: that worker's other CUDA calls go
//! on), calling each node's closure in order, and instantiates the
//! capture. Every run launches that executable graph on the chain's
//! stream, records the chain lane's event behind it and has the chain
//! completed from the completion's host function, as a GPU task's promise
//! is fulfilled. The capture is kept until the graph changes (the chains
//! may then differ) or goes.

use super::completion::end_left_capture;
use super::device::DeviceInner;
use super::stream::KeptAlive;
use super::{Device, GpuError, GpuStream};
use crate::core::sync::{lock, Mutex};
use crate::core::worker::Worker;
use crate::graph::build::{Graph, Node};
use crate::graph::chain::{ChainDone, ChainRest, StreamWork};
use crate::graph::data::NodeWork;
use cudarc::driver::{sys, DriverError};
use std::any::Any;
use std::borrow::Cow;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

impl<'g> Graph<'g> {
    /// Adds a GPU node: `f` enqueues work on a stream of `device` (the
    /// [`GpuStream`] it is given) and returns, and the node finishes once
    /// the device finished that work. A CPU node after it is queued then,
    /// by the stream's completion callback (no thread waits on the
    /// stream).
    ///
    /// GPU nodes of one device linked one to one (each the only successor
    /// of the one before, which is its only predecessor) form a chain,
    /// captured into a CUDA graph on the graph's first run, and again
    /// after the graph changes or a capture failed: each node's closure is
    /// called then, in order, under the capture, on a stream (with a cuBLAS
    /// handle) made for the chain. Every run after that replays the
    /// captured work on that stream with one graph launch, **without
    /// calling the closures**. Hence what a closure may do:
    ///
    /// - Record work (copies, kernels, cuBLAS calls) on buffers that
    ///   outlive the graph: owned by the closure or borrowed for `'g`, and
    ///   made beforehand, on a context whose event tracking is off
    ///   (`unsafe { dev.context().disable_event_tracking() }` before making
    ///   them): cudarc's tracking makes a stream wait on events recorded
    ///   outside the capture, and records events inside it, which CUDA
    ///   refuses or later uses of the buffer trip on. Order the buffers'
    ///   uses outside the graph yourself (after a run, they are done).
    /// - Not allocate device or pinned memory, nor download
    ///   ([`GpuStream::download`]): an allocation under the capture is a
    ///   node of the CUDA graph (pinned memory is refused), not a buffer.
    /// - Not wait (join, a scope, a parallel loop, a nested graph): its
    ///   worker would run other tasks in the middle of the capture.
    /// - Hand values to [`GpuStream::keep_alive`]: they are kept as long as
    ///   the capture.
    ///
    /// Failures: a closure that returns an error or panics fails the chain:
    /// it is reported as the node that panicked, with the error's text, the
    /// chain's other nodes and every node after the chain are skipped, and
    /// the next run captures the chain again. An operation the capture
    /// refuses, a launch that fails, or a device that fails while the
    /// chain's work is in flight fails the chain the same way, reported at
    /// its first node. The graph must be run on the runtime `device` was
    /// opened for; on another, the chain fails, saying so.
    ///
    /// ```no_run
    /// use selvedge::gpu::{gemm, BatchedGemm, Device, GpuError};
    /// use selvedge::Graph;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // For the global runtime, which `Graph::run` uses from here.
    /// let dev = Device::open(0)?;
    /// // SAFETY: the buffers below are made after this and used only by
    /// // the graph's nodes (in order) and after its runs.
    /// unsafe { dev.context().disable_event_tracking() };
    /// let g = BatchedGemm { batch: 8, m: 64, n: 64, k: 64 };
    /// // Buffers made once, before the graph: the captured work uses them
    /// // in every run.
    /// let (a, b, mut c) = dev
    ///     .spawn(move |s| {
    ///         let a = s.stream().clone_htod(&vec![1.0f32; g.a_len()])?;
    ///         let b = s.stream().clone_htod(&vec![0.5f32; g.b_len()])?;
    ///         Ok((a, b, s.stream().alloc_zeros::<f32>(g.c_len())?))
    ///     })
    ///     .join()?;
    /// let mut step = Graph::new();
    /// let multiply = step.gpu_node(&dev, move |s| gemm(s.blas(), g, &a, &b, &mut c));
    /// let after = step.node(|| println!("the product is complete"));
    /// step.precede(multiply, after);
    /// for _ in 0..10 {
    ///     step.run()?; // one graph launch each, after the first
    /// }
    /// # Ok(()) }
    /// ```
    pub fn gpu_node<F>(&mut self, device: &Device, f: F) -> Node
    where
        F: FnMut(&GpuStream) -> Result<(), GpuError> + Send + 'g,
    {
        self.add(None, Box::new(GpuNode::new(device, f)))
    }

    /// [`Graph::gpu_node`] with a name, which errors and reports use.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dev = selvedge::gpu::Device::open(0)?;
    /// let mut g = selvedge::Graph::new();
    /// let clear = g.gpu_node_named("clear", &dev, |_s| Ok(()));
    /// assert_eq!(g.name(clear), "clear");
    /// g.run()?;
    /// # Ok(()) }
    /// ```
    pub fn gpu_node_named<F>(
        &mut self,
        name: impl Into<Cow<'static, str>>,
        device: &Device,
        f: F,
    ) -> Node
    where
        F: FnMut(&GpuStream) -> Result<(), GpuError> + Send + 'g,
    {
        self.add(Some(name.into()), Box::new(GpuNode::new(device, f)))
    }
}

/// A GPU node's work: its closure and, while it heads a chain, the
/// chain's capture.
struct GpuNode<F> {
    device: Arc<DeviceInner>,
    f: F,
    captured: Option<Captured>,
}

impl<F> GpuNode<F> {
    fn new(device: &Device, f: F) -> Self {
        Self {
            device: Arc::clone(&device.inner),
            f,
            captured: None,
        }
    }
}

/// A chain's capture: its executable graph, the chain's own lane (a
/// stream and a cuBLAS handle, made for the chain) on which it was
/// captured and is launched, and what its closures asked to keep alive
/// (their work reads it in every launch).
///
/// A lane of its own, not a worker's: a worker's lane takes other GPU
/// tasks' work, which the capture would take in (a closure that waits lets
/// its worker run other tasks), and the captured cuBLAS calls use their
/// handle's workspace, which a replay on another lane's stream could use
/// while that lane's own GEMMs do.
struct Captured {
    exec: sys::CUgraphExec,
    lane: GpuStream,
    /// Dropped after the executable graph is destroyed.
    kept: KeptAlive,
    device: Arc<DeviceInner>,
}

// SAFETY: a CUgraphExec is a driver handle, usable from any thread whose
// current context is its own; it is launched only by the chain's head,
// which one task at a time owns.
unsafe impl Send for Captured {}

impl Drop for Captured {
    fn drop(&mut self) {
        // No launch is in flight: each run waits for its chain's
        // completion (or, when that could not be enqueued, for the lane's
        // stream), and the graph is changed or dropped only between runs.
        // SAFETY: the executable graph is live and ours, destroyed once; a
        // lost context may refuse, and it then goes with the context.
        let _ = unsafe { sys::cuGraphExecDestroy(self.exec) };
        retire(&self.device, &mut self.lane);
        drop(std::mem::take(&mut self.kept));
    }
}

/// A chain's own lane: a new stream with its cuBLAS handle, sharing the
/// device's completion stream and pinned pool. The caller made the
/// context current.
fn chain_lane(inner: &DeviceInner) -> Result<GpuStream, GpuError> {
    let first = &inner.lanes[0];
    let work = inner.ctx.new_stream()?;
    GpuStream::new(
        work,
        Arc::clone(&first.completions),
        Arc::clone(&first.pinned),
    )
}

/// Lets go of a chain's lane: waits for its stream and destroys its cuBLAS
/// handle, or leaks the handle where the context is lost (destroying one
/// there fails, and cudarc panics).
fn retire(inner: &DeviceInner, lane: &mut GpuStream) {
    let stream = lane.stream.cu_stream();
    let current = inner.make_current();
    let _ = end_left_capture(stream);
    let healthy = current.is_ok() && inner.failed.get().is_none() && {
        // SAFETY: the stream is live.
        let waited = unsafe { sys::cuStreamSynchronize(stream) };
        waited == sys::CUresult::CUDA_SUCCESS
    };
    if healthy {
        lane.destroy_blas();
    }
}

impl<F> NodeWork for GpuNode<F>
where
    F: FnMut(&GpuStream) -> Result<(), GpuError> + Send,
{
    fn run(&mut self) {
        unreachable!("a GPU node runs with its chain, started by its head")
    }

    fn as_stream(&mut self) -> Option<&mut dyn StreamWork> {
        Some(self)
    }
}

impl<F> StreamWork for GpuNode<F>
where
    F: FnMut(&GpuStream) -> Result<(), GpuError> + Send,
{
    fn chain_key(&self) -> usize {
        Arc::as_ptr(&self.device) as usize
    }

    fn forget_chain(&mut self) {
        self.captured = None;
    }

    fn start_chain(&mut self, mut rest: ChainRest<'_>, done: ChainDone) {
        let inner = Arc::clone(&self.device);
        let own_runtime =
            Worker::current().is_some_and(|w| Arc::ptr_eq(&w.shared, inner.runtime()));
        if !own_runtime {
            return done.fail(
                0,
                Box::new(format!(
                    "selvedge: a GPU node of device {} ran in a graph run on another runtime than the one the device was opened for: run the graph on that runtime",
                    inner.ordinal
                )),
            );
        }
        if let Err(e) = inner.check_failed() {
            return done.fail(0, text(&e));
        }
        if let Err(e) = inner.make_current() {
            let e = GpuError::from(e);
            inner.fail_if_sticky(&e);
            return done.fail(0, text(&e));
        }
        if self.captured.is_none() {
            match capture(&inner, &mut self.f, &mut rest) {
                Ok(captured) => self.captured = Some(captured),
                Err((at, payload)) => return done.fail(at, payload),
            }
        }
        let captured = self.captured.as_ref().expect("captured above");
        let lane = &captured.lane;
        let stream = lane.stream.cu_stream();
        // SAFETY: the executable graph and the chain's stream are live and
        // of the current context.
        if let Err(e) = unsafe { sys::cuGraphLaunch(captured.exec, stream) }.result() {
            let e = GpuError::from(e);
            inner.fail_if_sticky(&e);
            return done.fail(0, text(&e));
        }
        // The done goes with the completion; kept here too, so that a
        // completion that cannot be enqueued fails the chain with its error.
        let slot = Arc::new(Mutex::new(Some(done)));
        let in_action = Arc::clone(&slot);
        let enqueued = lane
            .iteration_done
            .record(stream)
            .map_err(GpuError::from)
            .and_then(|()| {
                inner.enqueue_completion(lane, &lane.iteration_done, move || {
                    if let Some(done) = lock(&in_action).take() {
                        done.complete();
                    }
                })
            });
        if let Err(e) = enqueued {
            inner.fail_if_sticky(&e);
            // The launched work may still run: the run (and what its nodes
            // borrow) must outlive it, so the stream is waited for first.
            // SAFETY: the stream is live.
            let _ = unsafe { sys::cuStreamSynchronize(stream) };
            if let Some(done) = lock(&slot).take() {
                done.fail(0, text(&e));
            }
        }
    }

    fn enqueue(&mut self, on: &dyn Any) -> Result<(), Box<dyn Any + Send>> {
        // The chain's key is the device: its head passes its chain's lane
        // on this device.
        let lane = on
            .downcast_ref::<GpuStream>()
            .expect("a GPU chain's head passes its lane");
        call(&mut self.f, lane)
    }
}

/// A GPU error as a node's report shows it.
fn text(e: &GpuError) -> Box<dyn Any + Send> {
    Box::new(e.to_string())
}

/// Calls a node's closure under the capture; an error or a panic is the
/// node's failure.
fn call<F>(f: &mut F, lane: &GpuStream) -> Result<(), Box<dyn Any + Send>>
where
    F: FnMut(&GpuStream) -> Result<(), GpuError>,
{
    match catch_unwind(AssertUnwindSafe(|| f(lane))) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(text(&e)),
        Err(payload) => Err(payload),
    }
}

/// Captures the chain (the head's closure `f`, then `rest`) on a new lane
/// of its own and instantiates it. `Err((at, payload))`: node `at` of the
/// chain failed (0 also where the capture as a whole did). The caller made
/// the context current.
fn capture<F>(
    inner: &Arc<DeviceInner>,
    f: &mut F,
    rest: &mut ChainRest<'_>,
) -> Result<Captured, (usize, Box<dyn Any + Send>)>
where
    F: FnMut(&GpuStream) -> Result<(), GpuError>,
{
    let whole = |e: GpuError| {
        inner.fail_if_sticky(&e);
        (
            0,
            Box::new(format!("capturing the chain into a CUDA graph failed: {e}"))
                as Box<dyn Any + Send>,
        )
    };
    let mut lane = chain_lane(inner).map_err(whole)?;
    let stream = lane.stream.cu_stream();
    // Relaxed: the closures' worker may run other tasks meanwhile (a
    // closure that waits), whose CUDA calls on other streams the other
    // modes would refuse on this thread.
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED;
    // SAFETY: the chain's stream is live, new, of the current context.
    if let Err(e) = unsafe { sys::cuStreamBeginCapture_v2(stream, mode) }.result() {
        retire(inner, &mut lane);
        return Err(whole(e.into()));
    }
    let mut failed = call(f, &lane).err().map(|payload| (0, payload));
    if failed.is_none() {
        for i in 0..rest.len() {
            if let Err(payload) = rest.enqueue(i, &lane) {
                failed = Some((i + 1, payload));
                break;
            }
        }
    }
    let kept = lane.take_kept(0);
    // A closure may have left another context current (a call on another
    // device's buffer binds that one).
    let current = inner.make_current();
    let mut graph = std::ptr::null_mut();
    // SAFETY: the stream is live; `graph` is a valid out-pointer. Ending
    // fails where a closure ended the capture itself, or the context is not
    // current: seen below.
    let ended = unsafe { sys::cuStreamEndCapture(stream, &mut graph) };
    let instantiated = match (&failed, current, ended) {
        (Some(_), _, _) => None,
        (None, Err(e), _) => Some(Err(whole(e.into()))),
        (None, Ok(()), sys::CUresult::CUDA_SUCCESS) if !graph.is_null() => {
            let mut exec = std::ptr::null_mut();
            // SAFETY: the graph is live and ours; `exec` is a valid
            // out-pointer.
            Some(
                unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) }
                    .result()
                    .map(|()| exec)
                    .map_err(|e| whole(e.into())),
            )
        }
        (None, Ok(()), sys::CUresult::CUDA_SUCCESS) => Some(Err(whole(
            DriverError(sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED).into(),
        ))),
        (None, Ok(()), e) => Some(Err(whole(DriverError(e).into()))),
    };
    if !graph.is_null() {
        // SAFETY: the graph was made by the capture and is ours; an
        // executable graph made from it does not need it.
        let _ = unsafe { sys::cuGraphDestroy(graph) };
    }
    let failure = match instantiated {
        Some(Ok(exec)) => {
            return Ok(Captured {
                exec,
                lane,
                kept,
                device: Arc::clone(inner),
            })
        }
        Some(Err(failure)) => failure,
        None => failed.expect("a closure failed"),
    };
    // Nothing captured ran: what the closures kept may go now.
    drop(kept);
    retire(inner, &mut lane);
    inner.check_lost();
    Err(failure)
}

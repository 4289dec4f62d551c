//! GPU nodes of a graph: each chain of them on one device is captured into
//! a CUDA graph on its first run and replayed with one launch after that.
//!
//! The chain is the graph layer's (`graph/chain.rs`): GPU nodes of one
//! device linked one to one. Its head's worker captures the chain on its
//! own lane's stream (in the thread-local mode, so other workers' CUDA
//! calls go on), calling each node's closure in order, and instantiates
//! the capture; every run launches that executable graph on the stream of
//! the worker that readies the head, records the lane's completion event
//! behind it and has the chain completed from the completion's host
//! function, as a GPU task's promise is fulfilled. The capture is kept
//! until the graph changes (the chains may then differ) or goes.

use super::device::DeviceInner;
use super::stream::KeptAlive;
use super::{Device, GpuError, GpuStream};
use crate::core::sync::{lock, Mutex};
use crate::core::worker::Worker;
use crate::graph::build::{Graph, Node};
use crate::graph::chain::{ChainDone, ChainRest, StreamWork};
use crate::graph::data::NodeWork;
use cudarc::driver::sys;
use std::any::Any;
use std::borrow::Cow;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

impl<'g> Graph<'g> {
    /// Adds a GPU node: `f` enqueues work on a stream of `device` (the
    /// [`GpuStream`] it is given) and returns, and the node finishes once
    /// the device finished that work. A CPU node after it runs then (the
    /// stream's completion callback readies it, no thread waits on the
    /// stream).
    ///
    /// GPU nodes of one device linked one to one (each the only successor
    /// of the one before, which is its only predecessor) form a chain,
    /// captured into a CUDA graph on the graph's first run, and again
    /// after the graph changes: each node's closure is called then, in
    /// order, under the capture. Every run after that replays the captured
    /// work with one graph launch, **without calling the closures**. So a
    /// closure records work on buffers that outlive the graph: owned by the
    /// closure, or borrowed for `'g`, allocated beforehand (an allocation
    /// made under the capture is a node of the CUDA graph, made and freed
    /// by each launch); a value it hands to [`GpuStream::keep_alive`] is
    /// kept as long as the capture.
    ///
    /// Failures: a closure that returns an error or panics while its chain
    /// is captured fails the chain: it is reported as the node that
    /// panicked, with the error's text, the chain's other nodes and every
    /// node after the chain are skipped, and the next run captures the
    /// chain again. So does an operation the capture refuses (CUDA refuses
    /// a wait on an event recorded outside the capture, which cudarc's
    /// event tracking adds for a buffer last written on another stream;
    /// see [`Device::context`]). A launch that fails, or a device that
    /// fails while the chain's work is in flight, fails the chain the same
    /// way, reported at its first node. The graph must be run on the
    /// runtime `device` was opened for; on another, the chain fails, saying
    /// so.
    ///
    /// ```no_run
    /// use selvedge::gpu::{BatchedGemm, Device, GpuError};
    /// use selvedge::Graph;
    ///
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let dev = Device::open(0)?;
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
    /// let gemm = step.gpu_node(&dev, move |s| s.gemm(g, &a, &b, &mut c));
    /// let after = step.node(|| println!("the product is complete"));
    /// step.precede(gemm, after);
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

/// A chain's capture, instantiated, and what its closures asked to keep
/// alive (their work reads it in every launch).
struct Captured {
    exec: sys::CUgraphExec,
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
        // completion, and the graph is changed or dropped only between
        // runs. A lost context may refuse; the executable graph then goes
        // with the context.
        if self.device.make_current().is_ok() {
            // SAFETY: the executable graph is live and ours, destroyed once.
            let _ = unsafe { sys::cuGraphExecDestroy(self.exec) };
        }
        drop(std::mem::take(&mut self.kept));
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
        let lane = inner.lane();
        if self.captured.is_none() {
            match capture(&inner, lane, &mut self.f, &mut rest) {
                Ok(captured) => self.captured = Some(captured),
                Err((at, payload)) => return done.fail(at, payload),
            }
        }
        let exec = self.captured.as_ref().expect("captured above").exec;
        let stream = lane.stream.cu_stream();
        // SAFETY: the executable graph and the lane's stream are live and
        // of the current context.
        if let Err(e) = unsafe { sys::cuGraphLaunch(exec, stream) }.result() {
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
            if let Some(done) = lock(&slot).take() {
                done.fail(0, text(&e));
            }
        }
    }

    fn enqueue(&mut self, on: &dyn Any) -> Result<(), Box<dyn Any + Send>> {
        // The chain's key is the device: its head passes this device's lane.
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

/// Captures the chain (the head's closure `f`, then `rest`) on `lane`'s
/// stream and instantiates it. `Err((at, payload))`: node `at` of the
/// chain failed (0 also where the capture as a whole did).
fn capture<F>(
    inner: &Arc<DeviceInner>,
    lane: &GpuStream,
    f: &mut F,
    rest: &mut ChainRest<'_>,
) -> Result<Captured, (usize, Box<dyn Any + Send>)>
where
    F: FnMut(&GpuStream) -> Result<(), GpuError>,
{
    let stream = lane.stream.cu_stream();
    let fail_whole = |e: sys::CUresult| {
        let e = GpuError::from(cudarc::driver::DriverError(e));
        inner.fail_if_sticky(&e);
        (
            0,
            Box::new(format!("capturing the chain into a CUDA graph failed: {e}"))
                as Box<dyn Any + Send>,
        )
    };
    let mode = sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    // SAFETY: the lane's stream is live, of the current context, and not
    // being captured (a GPU task that leaves a capture open has it ended).
    let begun = unsafe { sys::cuStreamBeginCapture_v2(stream, mode) };
    if begun != sys::CUresult::CUDA_SUCCESS {
        return Err(fail_whole(begun));
    }
    let mark = lane.kept_mark();
    let mut failed = call(f, lane).err().map(|payload| (0, payload));
    if failed.is_none() {
        for i in 0..rest.len() {
            if let Err(payload) = rest.enqueue(i, lane) {
                failed = Some((i + 1, payload));
                break;
            }
        }
    }
    let kept = lane.take_kept(mark);
    let mut graph = std::ptr::null_mut();
    // SAFETY: the stream is live and captured by this thread; `graph` is a
    // valid out-pointer.
    let ended = unsafe { sys::cuStreamEndCapture(stream, &mut graph) };
    let destroy_graph = |graph: sys::CUgraph| {
        if !graph.is_null() {
            // SAFETY: the graph was just made by the capture and is ours.
            let _ = unsafe { sys::cuGraphDestroy(graph) };
        }
    };
    if let Some(failure) = failed {
        // Nothing captured ran: what the closures kept may go now.
        destroy_graph(graph);
        drop(kept);
        return Err(failure);
    }
    if ended != sys::CUresult::CUDA_SUCCESS || graph.is_null() {
        destroy_graph(graph);
        drop(kept);
        let error = if ended == sys::CUresult::CUDA_SUCCESS {
            sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        } else {
            ended
        };
        return Err(fail_whole(error));
    }
    let mut exec = std::ptr::null_mut();
    // SAFETY: the graph is live and ours; `exec` is a valid out-pointer.
    let instantiated = unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) };
    destroy_graph(graph);
    if instantiated != sys::CUresult::CUDA_SUCCESS {
        drop(kept);
        return Err(fail_whole(instantiated));
    }
    Ok(Captured {
        exec,
        kept,
        device: Arc::clone(inner),
    })
}

//! Opening a device: the driver probe, one stream and cuBLAS handle per
//! worker, the registry of completions in flight and its watchdog.

use super::GpuError;
use crate::core::pool::{current_registry, Runtime};
use crate::core::registry::{fire_signal, Registry};
use crate::core::signal::{Action, SignalRef};
use crate::core::sync::lock;
use crate::core::worker::Worker;
use cudarc::cublas::CudaBlas;
use cudarc::driver::{
    sys, CudaContext, CudaStream, DevicePtr, DeviceRepr, DriverError, PinnedHostSlice,
};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

/// How often the watchdog queries the streams while work is in flight.
const WATCHDOG_PERIOD: Duration = Duration::from_millis(20);

/// A CUDA device, ready for GPU tasks on one runtime's workers.
///
/// Cloning gives another handle to the same device. Dropping the last one
/// waits for the device's streams to finish their work (so that every
/// callback has run).
///
/// ```
/// match selvedge::gpu::Device::open(0) {
///     Ok(dev) => println!("{} streams on device {}", dev.num_streams(), dev.ordinal()),
///     Err(e) => println!("no GPU: {e}"),
/// }
/// ```
#[derive(Clone)]
pub struct Device {
    pub(super) inner: Arc<DeviceInner>,
}

/// A worker's stream on a device, with its cuBLAS handle: what a GPU task
/// enqueues its work on.
///
/// ```no_run
/// # fn main() -> Result<(), selvedge::gpu::GpuError> {
/// let dev = selvedge::gpu::Device::open(0)?;
/// let zeros = dev
///     .spawn(|s| Ok(s.stream().alloc_zeros::<f32>(1024)?))
///     .join()?;
/// assert_eq!(zeros.len(), 1024);
/// # Ok(()) }
/// ```
pub struct GpuStream {
    stream: Arc<CudaStream>,
    blas: CudaBlas,
}

impl GpuStream {
    /// The CUDA stream (cudarc's), for memory copies and kernel launches.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The cuBLAS handle bound to this stream.
    pub fn blas(&self) -> &CudaBlas {
        &self.blas
    }

    /// Enqueues a copy of `src` to new pinned host memory and returns it
    /// at once. Read it once the task's handle (or its [`dep`]) says the
    /// work is done: by then the copy is complete, and reading it does not
    /// wait. (cudarc's `clone_dtoh` into a `Vec` waits for the stream on
    /// the calling worker instead.) Each call allocates pinned memory,
    /// which is slow (a driver call, and its release may synchronize):
    /// download few, large buffers.
    ///
    /// # Panics
    /// When `src` is empty.
    ///
    /// [`dep`]: super::GpuHandle::dep
    ///
    /// ```no_run
    /// # fn main() -> Result<(), selvedge::gpu::GpuError> {
    /// let dev = selvedge::gpu::Device::open(0)?;
    /// let host = dev
    ///     .spawn(|s| {
    ///         let x = s.stream().clone_htod(&[7u32; 16])?;
    ///         s.download(&x)
    ///     })
    ///     .join()?;
    /// assert_eq!(host.as_slice()?, &[7; 16]);
    /// # Ok(()) }
    /// ```
    pub fn download<T, S>(&self, src: &S) -> Result<PinnedHostSlice<T>, GpuError>
    where
        T: DeviceRepr,
        S: DevicePtr<T>,
    {
        assert!(
            src.len() > 0,
            "GpuStream::download of an empty buffer: there is nothing to copy, and 0 bytes of pinned memory cannot be allocated"
        );
        // SAFETY: the memory is only handed out after the copy into it was
        // enqueued, and cudarc's slice waits for that copy before a read.
        // Flags 0: cached memory, since the host reads it (write-combined
        // memory is slow to read).
        let mut dst = unsafe {
            self.stream
                .context()
                .alloc_pinned_with_flags::<T>(src.len(), 0)
        }?;
        self.stream.memcpy_dtoh(src, &mut dst)?;
        Ok(dst)
    }
}

pub(super) struct DeviceInner {
    ordinal: usize,
    pub(super) ctx: Arc<CudaContext>,
    /// One per worker of `runtime`, indexed by worker.
    lanes: Box<[GpuStream]>,
    /// Signals whose host function is enqueued and has not yet run: what
    /// the watchdog abandons when the device fails. Registry with the
    /// signals' actions, which take themselves out of it even while the
    /// device is being dropped.
    in_flight: Arc<Mutex<InFlight>>,
    /// Set once, by the watchdog, when the device failed.
    failed: OnceLock<DriverError>,
    watchdog: OnceLock<std::thread::Thread>,
    /// Last: dropped after the streams were synchronized.
    runtime: Arc<Registry>,
}

#[derive(Default)]
struct InFlight {
    next_id: u64,
    signals: HashMap<u64, SignalRef>,
}

impl Device {
    /// Opens device `ordinal` for the current runtime (the worker's, or the
    /// global runtime from any other thread).
    ///
    /// Returns [`GpuError::NoDriver`] or [`GpuError::NoBlas`] where the
    /// libraries are missing, [`GpuError::NoDevice`] where the ordinal is
    /// out of range, and the driver's error otherwise; it never panics.
    ///
    /// ```
    /// use selvedge::gpu::{Device, GpuError};
    /// match Device::open(usize::MAX) {
    ///     Err(GpuError::NoDriver | GpuError::NoBlas | GpuError::NoDevice { .. }) => {}
    ///     other => panic!("{:?}", other.err()),
    /// }
    /// ```
    pub fn open(ordinal: usize) -> Result<Device, GpuError> {
        Self::open_for(current_registry().clone(), ordinal)
    }

    /// Opens device `ordinal` for `runtime`'s workers.
    ///
    /// ```
    /// let rt = selvedge::Runtime::builder().num_threads(2).build().unwrap();
    /// if let Ok(dev) = selvedge::gpu::Device::open_in(&rt, 0) {
    ///     assert_eq!(dev.num_streams(), 2);
    /// }
    /// ```
    pub fn open_in(runtime: &Runtime, ordinal: usize) -> Result<Device, GpuError> {
        Self::open_for(runtime.registry().clone(), ordinal)
    }

    fn open_for(runtime: Arc<Registry>, ordinal: usize) -> Result<Device, GpuError> {
        // cudarc panics on first use when a library is missing: probe first.
        // SAFETY: only tries to load the library (and unloads it).
        if !unsafe { sys::is_culib_present() } {
            return Err(GpuError::NoDriver);
        }
        let count = match CudaContext::device_count() {
            Ok(n) => usize::try_from(n).unwrap_or(0),
            // A driver that sees no GPU (none installed, or
            // CUDA_VISIBLE_DEVICES hides them all) fails cuInit so.
            Err(DriverError(sys::CUresult::CUDA_ERROR_NO_DEVICE)) => 0,
            Err(e) => return Err(e.into()),
        };
        if ordinal >= count {
            return Err(GpuError::NoDevice { ordinal, count });
        }
        // SAFETY: only tries to load cuBLAS (and unloads it).
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(GpuError::NoBlas);
        }
        let ctx = CudaContext::new(ordinal)?;
        let lanes = (0..runtime.num_threads())
            .map(|_| {
                let stream = ctx.new_stream()?;
                let blas = CudaBlas::new(stream.clone())?;
                Ok(GpuStream { stream, blas })
            })
            .collect::<Result<Box<[_]>, GpuError>>()?;
        let inner = Arc::new(DeviceInner {
            ordinal,
            ctx,
            lanes,
            in_flight: Arc::default(),
            failed: OnceLock::new(),
            watchdog: OnceLock::new(),
            runtime,
        });
        let weak = Arc::downgrade(&inner);
        let watchdog = std::thread::Builder::new()
            .name(format!("selvedge-gpu{ordinal}-watchdog"))
            .spawn(move || watch(weak))
            .map_err(|_| {
                GpuError::Driver(DriverError(sys::CUresult::CUDA_ERROR_OPERATING_SYSTEM))
            })?;
        let _ = inner.watchdog.set(watchdog.thread().clone());
        Ok(Device { inner })
    }

    /// The device's ordinal.
    ///
    /// ```
    /// if let Ok(dev) = selvedge::gpu::Device::open(0) {
    ///     assert_eq!(dev.ordinal(), 0);
    /// }
    /// ```
    pub fn ordinal(&self) -> usize {
        self.inner.ordinal
    }

    /// How many streams (one per worker of its runtime) the device has.
    ///
    /// ```
    /// if let Ok(dev) = selvedge::gpu::Device::open(0) {
    ///     assert_eq!(dev.num_streams(), selvedge::current_num_threads());
    /// }
    /// ```
    pub fn num_streams(&self) -> usize {
        self.inner.lanes.len()
    }

    /// The device's name, as the driver gives it.
    ///
    /// ```
    /// if let Ok(dev) = selvedge::gpu::Device::open(0) {
    ///     println!("{}", dev.name()?);
    /// }
    /// # Ok::<(), selvedge::gpu::GpuError>(())
    /// ```
    pub fn name(&self) -> Result<String, GpuError> {
        Ok(self.inner.ctx.name()?)
    }

    /// The cudarc context, for modules and kernels.
    ///
    /// ```
    /// if let Ok(dev) = selvedge::gpu::Device::open(0) {
    ///     assert_eq!(dev.context().ordinal(), 0);
    /// }
    /// ```
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.inner.ctx
    }
}

impl DeviceInner {
    /// The calling worker's stream (tasks of a device run on its runtime's
    /// workers; any other thread gets the first).
    pub(super) fn lane(&self) -> &GpuStream {
        let index = match Worker::current() {
            Some(w) if Arc::ptr_eq(&w.shared, &self.runtime) => w.index,
            _ => 0,
        };
        &self.lanes[index]
    }

    pub(super) fn runtime(&self) -> &Arc<Registry> {
        &self.runtime
    }

    /// Makes the device's context current on this thread. Not cudarc's
    /// `bind_to_thread`, which first returns (and clears) any error a drop
    /// anywhere recorded on the context: that error is not this caller's,
    /// and clearing it would hide it from whoever checks next.
    pub(super) fn make_current(&self) -> Result<(), DriverError> {
        // SAFETY: the context is live (we hold it).
        unsafe { sys::cuCtxSetCurrent(self.ctx.cu_ctx()) }.result()
    }

    /// `Err` once the device failed.
    pub(super) fn check_failed(&self) -> Result<(), GpuError> {
        match self.failed.get() {
            Some(&e) => Err(GpuError::DeviceFailed(e)),
            None => Ok(()),
        }
    }

    /// Enqueues on `lane` a host function that, once the stream reaches it,
    /// has a worker run `action`. The action is dropped unrun (and the call
    /// fails) if it cannot be enqueued, and dropped unrun by the watchdog
    /// if the device fails first.
    pub(super) fn enqueue_completion(
        self: &Arc<Self>,
        lane: &GpuStream,
        action: impl FnOnce() + Send + 'static,
    ) -> Result<(), GpuError> {
        // Before anything is registered: a failure here leaves nothing
        // behind that would wait for a host function never launched.
        self.make_current()?;
        let in_flight = Arc::clone(&self.in_flight);
        let mut registry = lock(&self.in_flight);
        let id = registry.next_id;
        registry.next_id += 1;
        let action: Action = Box::new(move || {
            // Out of the registry first: the signal is freed after this
            // returns, and nobody abandoning must find it then.
            lock(&in_flight).signals.remove(&id);
            action();
        });
        let signal = self.runtime.signal(action);
        let was_idle = registry.signals.is_empty();
        // Registered before it can fire, under the lock its action takes.
        registry.signals.insert(id, signal);
        // SAFETY: the stream is live; `stream_reached` fires the signal,
        // which stays live until then (only a worker draining it after it
        // fired frees it).
        let launched = unsafe {
            sys::cuLaunchHostFunc(
                lane.stream.cu_stream(),
                Some(stream_reached),
                signal.as_ptr(),
            )
        }
        .result();
        if let Err(e) = launched {
            registry.signals.remove(&id);
            drop(registry);
            // SAFETY: never handed to CUDA, so it will never fire.
            drop(unsafe { self.runtime.inbox.discard(signal) });
            return Err(e.into());
        }
        drop(registry);
        if was_idle {
            if let Some(t) = self.watchdog.get() {
                t.unpark();
            }
        }
        Ok(())
    }

    /// The device failed with `error`: no more work, and every completion
    /// in flight is abandoned (its promises break, cancelling dependents).
    fn fail(&self, error: DriverError) {
        let _ = self.failed.set(error);
        self.abandon_in_flight();
    }

    /// Abandons every completion whose host function has not run: their
    /// promises break. Only for host functions that never will (the
    /// context is lost).
    fn abandon_in_flight(&self) {
        let actions: Vec<Action> = {
            let mut registry = lock(&self.in_flight);
            let signals: Vec<SignalRef> = registry.signals.drain().map(|(_, s)| s).collect();
            signals
                .into_iter()
                // SAFETY: registered, so not yet drained: the draining
                // worker's action takes the registry lock (held here)
                // before the signal can be freed.
                .filter_map(|s| unsafe { self.runtime.inbox.abandon(s) })
                .collect()
        };
        // Dropped outside the lock: breaking promises cancels tasks.
        drop(actions);
        self.runtime.sleep.wake_any();
    }

    /// One watchdog round: a stream that reports an error other than "not
    /// ready" means the context is lost (CUDA's asynchronous errors are
    /// sticky), and its callbacks will never come.
    fn check_streams(&self) {
        if self.make_current().is_err() {
            return;
        }
        for lane in self.lanes.iter() {
            // A stream being captured into a graph (by a task) must not be
            // queried: that is an error, and it would end the capture.
            let mut capture = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
            // SAFETY: the stream is live; `capture` is a valid out-pointer.
            let asked = unsafe { sys::cuStreamIsCapturing(lane.stream.cu_stream(), &mut capture) };
            if asked == sys::CUresult::CUDA_SUCCESS
                && capture != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE
            {
                continue;
            }
            // SAFETY: the stream is live.
            let status = unsafe { sys::cuStreamQuery(lane.stream.cu_stream()) };
            match status {
                sys::CUresult::CUDA_SUCCESS | sys::CUresult::CUDA_ERROR_NOT_READY => {}
                error => {
                    self.fail(DriverError(error));
                    return;
                }
            }
        }
    }
}

impl Drop for DeviceInner {
    /// Waits for the streams, so that every host function has run before
    /// the runtime's inbox may go away. Where a stream cannot be waited for
    /// (the context is lost), the host functions still registered never
    /// will run: they are abandoned, so that their promises break and the
    /// runtime does not wait for them forever.
    fn drop(&mut self) {
        let mut all_done = self.make_current().is_ok();
        for lane in self.lanes.iter() {
            // SAFETY: the stream is live. (cudarc's `synchronize` would bind
            // with `bind_to_thread` and could return an unrelated recorded
            // error without waiting.)
            let waited = all_done
                && unsafe { sys::cuStreamSynchronize(lane.stream.cu_stream()) }
                    .result()
                    .is_ok();
            all_done &= waited;
        }
        if !all_done {
            self.abandon_in_flight();
        }
        if let Some(t) = self.watchdog.get() {
            t.unpark();
        }
    }
}

/// The host function enqueued after a GPU task's work: it only fires the
/// signal (see `core/signal.rs`), which takes one compare-and-swap, a lock-free
/// push and a wake-up; no CUDA call, no allocation, no lock, no panic.
unsafe extern "C" fn stream_reached(user_data: *mut c_void) {
    // SAFETY: `user_data` is `SignalRef::as_ptr` of the signal
    // `enqueue_completion` registered for this one call, live until fired.
    let signal = unsafe { SignalRef::from_ptr(user_data) };
    // SAFETY: the signal is fired once, here; the device (which holds the
    // runtime) synchronizes its streams before letting the runtime go, so
    // the runtime outlives this call.
    unsafe { fire_signal(signal) }
}

/// The watchdog thread: while completions are in flight, queries the
/// streams every `WATCHDOG_PERIOD`; parks while there are none; ends with
/// the device.
fn watch(device: Weak<DeviceInner>) {
    loop {
        let busy = match device.upgrade() {
            Some(d) if d.failed.get().is_none() => {
                let busy = !lock(&d.in_flight).signals.is_empty();
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

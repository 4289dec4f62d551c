//! Opening a device: the libraries checked, one lane (work stream, cuBLAS
//! handle, completion stream) per worker, the registry of its completions
//! in flight and its watchdog thread (whose round is in `completion.rs`);
//! and closing it, also after the context was lost.

use super::capture::{end_left_capture, exchange_capture_mode, RELAXED};
use super::error::is_sticky;
use super::libraries;
use super::pinned::PinnedPool;
use super::raw;
use super::stream::GpuStream;
use super::GpuError;
use crate::core::fire_once::FireOnce;
use crate::core::pool::{current_registry, Runtime};
use crate::core::registry::Registry;
use crate::core::sync::{lock, Mutex};
use crate::core::worker::Worker;
use cudarc::driver::{sys, CudaContext, DriverError};
use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};
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

pub(super) struct DeviceInner {
    pub(super) ordinal: usize,
    pub(super) ctx: Arc<CudaContext>,
    /// One per worker of `runtime`, indexed by worker.
    pub(super) lanes: Box<[GpuStream]>,
    /// Signals whose host function is enqueued and has not yet run: what
    /// the watchdog abandons when the device fails. Registry with the
    /// signals' actions, which take themselves out of it even while the
    /// device is being dropped.
    pub(super) in_flight: Arc<Mutex<InFlight>>,
    /// Set once, by the watchdog, when the device failed.
    pub(super) failed: OnceLock<DriverError>,
    pub(super) watchdog: OnceLock<std::thread::Thread>,
    /// Last: dropped after the streams were synchronized.
    pub(super) runtime: Arc<Registry>,
}

impl Device {
    /// Opens device `ordinal` for the current runtime (the worker's, or the
    /// global runtime from any other thread).
    ///
    /// Returns [`GpuError::NoDriver`] or [`GpuError::NoBlas`] (with the
    /// reason) where a library is missing, a stub, too old or mismatched,
    /// [`GpuError::NoDevice`] where the ordinal is out of range, and the
    /// driver's error otherwise; it never panics.
    ///
    /// ```
    /// use selvedge::gpu::Device;
    /// match Device::open(usize::MAX) {
    ///     Err(e) if e.is_unavailable() => {}
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
        // cudarc panics on first use when a library or a symbol is missing:
        // check both first.
        let count = libraries::device_count()?;
        if ordinal >= count {
            return Err(GpuError::NoDevice { ordinal, count });
        }
        libraries::blas()?;
        let ctx = CudaContext::new(ordinal)?;
        let pinned = Arc::new(PinnedPool::new(ctx.clone()));
        let mut lanes = Vec::with_capacity(runtime.num_threads());
        for _ in 0..runtime.num_threads() {
            let lane = ctx
                .new_stream()
                .map_err(GpuError::from)
                .and_then(|work| GpuStream::new(work, ctx.new_stream()?, pinned.clone()));
            match lane {
                Ok(lane) => lanes.push(lane),
                Err(e) => {
                    // Nothing was enqueued on the lanes built so far.
                    for lane in &mut lanes {
                        lane.destroy_blas();
                    }
                    return Err(e);
                }
            }
        }
        let lanes = lanes.into_boxed_slice();
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

    /// Makes the device's context current on this thread (see `raw.rs`
    /// for why not cudarc's `bind_to_thread`).
    pub(super) fn make_current(&self) -> Result<(), DriverError> {
        raw::make_current(&self.ctx)
    }

    /// `Err` once the device failed.
    pub(super) fn check_failed(&self) -> Result<(), GpuError> {
        match self.failed.get() {
            Some(&e) => Err(GpuError::DeviceFailed(e)),
            None => Ok(()),
        }
    }
}

impl Drop for DeviceInner {
    /// Waits for the streams, so that every host function has run before
    /// the runtime's inbox may go away. Where a stream cannot be waited for
    /// (the context is lost), the host functions still registered never
    /// will run: they are abandoned, so that their promises break and the
    /// runtime does not wait for them forever, and the cuBLAS handles are
    /// leaked (destroying one in a lost context fails, and cudarc panics).
    fn drop(&mut self) {
        // Waiting for streams is forbidden to this thread while another
        // captures in the global mode (and would end that capture).
        let mode = exchange_capture_mode(RELAXED);
        let current = self.make_current();
        // A capture a task left open would make its stream refuse the wait.
        for lane in self.lanes.iter() {
            let _ = end_left_capture(lane.stream.cu_stream());
        }
        // The work streams first: their completions wait on them. Every
        // stream is waited for, even after one failed: a healthy one's host
        // functions must have run before anything below lets go.
        let streams: Vec<sys::CUstream> = self
            .lanes
            .iter()
            .map(|lane| lane.stream.cu_stream())
            .chain(self.lanes.iter().map(|lane| lane.completions.cu_stream()))
            .collect();
        let mut all_done = current.is_ok();
        let mut lost = matches!(current, Err(DriverError(e)) if is_sticky(e));
        for stream in streams {
            // SAFETY: the stream is live. (cudarc's `synchronize` would bind
            // with `bind_to_thread` and could return an unrelated recorded
            // error without waiting.)
            let waited = unsafe { sys::cuStreamSynchronize(stream) };
            all_done &= waited == sys::CUresult::CUDA_SUCCESS;
            lost |= is_sticky(waited);
        }
        lost |= self.failed.get().is_some();
        if lost {
            // The host functions still registered never will run: their
            // actions are dropped, breaking their promises.
            self.abandon_in_flight();
        }
        if !all_done || lost {
            // A host function abandoned above (or one already running when
            // the context was lost), or one that runs after a wait that
            // failed for another reason, may still fire its signal into
            // the runtime's inbox: the registry must outlive it, so this
            // device's hold on it is leaked, not released.
            std::mem::forget(Arc::clone(&self.runtime));
        }
        // cuBLAS's destroy synchronizes the whole device, and cudarc panics
        // if it fails: destroy the handles only when that will not fail.
        // SAFETY: a plain driver call in the current context.
        let healthy = all_done && !lost && unsafe { sys::cuCtxSynchronize() }.result().is_ok();
        for lane in self.lanes.iter_mut() {
            if healthy {
                lane.destroy_blas();
            }
            // Otherwise left in its `ManuallyDrop`: leaked with the context.
        }
        exchange_capture_mode(mode);
        if let Some(t) = self.watchdog.get() {
            t.unpark();
        }
    }
}

/// The completions whose host function has not let go of their claim
/// (whose action may not have run either).
#[derive(Default)]
pub(super) struct InFlight {
    pub(super) next_id: u64,
    pub(super) signals: HashMap<u64, Arc<FireOnce>>,
}

impl InFlight {
    pub(super) fn is_empty(&self) -> bool {
        self.signals.is_empty()
    }
}

/// The watchdog thread: while completions are in flight, queries the
/// streams every `WATCHDOG_PERIOD`; parks while there are none; ends with
/// the device.
fn watch(device: Weak<DeviceInner>) {
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

//! A worker's lane on a device: its work stream, the cuBLAS handle bound to
//! it, the stream its completions are signalled from, and what its tasks
//! keep alive until their work is complete.

use super::pinned::{AnyBitPattern, PinnedBuffer, PinnedPool};
use super::raw::{self, RawEvent};
use super::GpuError;
use crate::core::sync::{lock, Mutex};
use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaStream, DevicePtr};
use std::mem::ManuallyDrop;
use std::sync::Arc;

/// What a task keeps alive until its device work is complete.
pub(super) type KeptAlive = Vec<Box<dyn Send>>;

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
    pub(super) stream: Arc<CudaStream>,
    /// Dropped by the device, which leaks it instead when the context is
    /// lost (cudarc's drop would panic there).
    pub(super) blas: ManuallyDrop<CudaBlas>,
    /// Where this lane's completions wait for their work's event and then
    /// call their host function: a host function blocks the work enqueued
    /// behind it on its stream, and here nothing but other completions is.
    pub(super) completions: Arc<CudaStream>,
    /// Recorded after each loop iteration's work, for its completion to
    /// wait on (a wait takes the record current at the call, so one event
    /// serves every iteration). Shared with the completions that workers
    /// poll, which query it (a later record only makes them wait longer).
    pub(super) iteration_done: Arc<RawEvent>,
    /// Values the running task asked to keep until its work is complete.
    kept: Mutex<KeptAlive>,
    pub(super) pinned: Arc<PinnedPool>,
}

impl GpuStream {
    pub(super) fn new(
        stream: Arc<CudaStream>,
        completions: Arc<CudaStream>,
        pinned: Arc<PinnedPool>,
    ) -> Result<Self, GpuError> {
        let iteration_done = Arc::new(RawEvent::new(stream.context())?);
        let blas = CudaBlas::new(stream.clone()).map_err(|e| match e.0 {
            // What a cuBLAS newer than the driver says.
            cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_NOT_INITIALIZED => {
                GpuError::NoBlas {
                    reason: format!(
                        "cuBLAS could not start ({e:?}): cuBLAS 13 needs a driver for CUDA 13 (580 or newer), cuBLAS 12 one for CUDA 12 (525 or newer)"
                    ),
                }
            }
            _ => GpuError::Blas(e),
        })?;
        Ok(GpuStream {
            stream,
            blas: ManuallyDrop::new(blas),
            completions,
            iteration_done,
            kept: Mutex::new(Vec::new()),
            pinned,
        })
    }

    /// Destroys the cuBLAS handle (once, when the device goes with its
    /// context healthy). cudarc's drop unwraps the destroy: a failure
    /// leaks the handle (the panic is caught) rather than unwind out of a
    /// drop.
    pub(super) fn destroy_blas(&mut self) {
        let destroyed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            // SAFETY: called once per lane, by the device's drop or by a
            // failed open; the handle is never used again.
            unsafe { ManuallyDrop::drop(&mut self.blas) }
        }));
        drop(destroyed);
    }

    /// The CUDA stream (cudarc's), for memory copies and kernel launches.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), selvedge::gpu::GpuError> {
    /// let dev = selvedge::gpu::Device::open(0)?;
    /// let x = dev.spawn(|s| Ok(s.stream().clone_htod(&[1u32, 2])?)).join()?;
    /// assert_eq!(x.len(), 2);
    /// # Ok(()) }
    /// ```
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    /// The cuBLAS handle bound to this stream.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), selvedge::gpu::GpuError> {
    /// let dev = selvedge::gpu::Device::open(0)?;
    /// dev.spawn(|s| {
    ///     assert!(!s.blas().handle().is_null());
    ///     Ok(())
    /// })
    /// .join()?;
    /// # Ok(()) }
    /// ```
    pub fn blas(&self) -> &CudaBlas {
        &self.blas
    }

    /// Keeps `value` alive until the device has finished the work this task
    /// enqueued, then drops it on a worker.
    ///
    /// A GPU task's closure returns as soon as its work is *enqueued*, and
    /// drops what it captured then, while the device may still be reading
    /// it. For a buffer the task owns, cudarc orders the free after the
    /// task's work on the buffer's own stream; but a buffer shared between
    /// tasks on several streams (an `Arc<CudaSlice>`) records only the last
    /// reader, so the last handle dropped could free it under an earlier
    /// reader on another stream. Handing each task's clone to `keep_alive`
    /// makes the last drop come after every reader's work is complete. Host
    /// memory the device reads asynchronously needs the same.
    ///
    /// In a [`Device::parallel_for`](super::Device::parallel_for), a value
    /// kept by iteration `i` lives until iteration `i`'s work is complete.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// # fn main() -> Result<(), selvedge::gpu::GpuError> {
    /// let dev = selvedge::gpu::Device::open(0)?;
    /// let weights = Arc::new(dev.spawn(|s| Ok(s.stream().clone_htod(&[0.5f32; 256])?)).join()?);
    /// let readers: Vec<_> = (0..4)
    ///     .map(|_| {
    ///         let weights = Arc::clone(&weights);
    ///         dev.spawn(move |s| {
    ///             let mut out = s.stream().alloc_zeros::<f32>(256)?;
    ///             s.stream().memcpy_dtod(&*weights, &mut out)?;
    ///             s.keep_alive(weights); // freed only after this copy is done
    ///             Ok(out)
    ///         })
    ///     })
    ///     .collect();
    /// drop(weights);
    /// for r in readers {
    ///     r.join()?;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn keep_alive<V: Send + 'static>(&self, value: V) {
        lock(&self.kept).push(Box::new(value));
    }

    /// Where the values a task is about to keep alive start: taken back by
    /// [`GpuStream::take_kept`] when its completion is enqueued. A task run
    /// nested inside another on the same worker (while the outer one waits)
    /// takes only its own, since it starts and ends in between.
    pub(super) fn kept_mark(&self) -> usize {
        lock(&self.kept).len()
    }

    /// The values kept alive since `mark`, for the completion being
    /// enqueued.
    pub(super) fn take_kept(&self, mark: usize) -> KeptAlive {
        let mut kept = lock(&self.kept);
        let mark = mark.min(kept.len());
        kept.split_off(mark)
    }

    /// Enqueues a copy of `src` to pinned host memory from the device's
    /// pool and returns it at once. Read it once the task's handle (or its
    /// [`dep`]) says the work is done: by then the copy is complete, and
    /// reading it does not wait. (cudarc's `clone_dtoh` into a `Vec` waits
    /// for the stream on the calling worker instead.)
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
    pub fn download<T, S>(&self, src: &S) -> Result<PinnedBuffer<T>, GpuError>
    where
        T: AnyBitPattern,
        S: DevicePtr<T>,
    {
        let len = src.len();
        assert!(
            len > 0,
            "GpuStream::download of an empty buffer: there is nothing to copy"
        );
        raw::make_current(self.stream.context())?;
        // cudarc's tracking: the copy waits for earlier writes of `src`, and
        // `_read` records this read when dropped, after the copy is enqueued.
        let (ptr, _read) = src.device_ptr(&self.stream);
        PinnedBuffer::enqueue_copy(&self.pinned, self.stream.cu_stream(), ptr, len)
    }
}

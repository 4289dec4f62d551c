//! GPU tasks with declared data access: [`Device::spawn_with`]. The
//! handles are the CPU's [`Data`](crate::Data); a GPU task records in each
//! handle's log its completion (which CPU accesses wait for: the stream's
//! callback) together with its link (its event and when it is enqueued),
//! which later GPU tasks of the same device wait for on the device
//! instead: MXNet's per-variable sync object, one writer and the readers
//! since, with no host round trip between GPU tasks.

use crate::dataflow::access::Accesses;
use crate::dataflow::data::Recorded;
use crate::dataflow::declared::with_logs;
use crate::gpu::device::Device;
use crate::gpu::error::GpuError;
use crate::gpu::stream::GpuStream;
use crate::gpu::task::{GpuHandle, Link};
use std::sync::Arc;

impl Device {
    /// Runs `f` as a GPU task (see [`Device::spawn`]) that declares the
    /// accesses `accesses` to [`Data`](crate::Data) handles, typically
    /// holding device buffers: `f` gets `&T` for each read and `&mut T`
    /// for each write, and enqueues device work on them. The order is the
    /// one every declared access follows (per handle, in submission
    /// order); between GPU tasks of this device it is kept on the device:
    /// the stream of a task waits for the events of the tasks before it,
    /// so a chain of GPU tasks never waits on the host. A CPU task (or
    /// [`Data::into_inner`](crate::Data::into_inner)) after a GPU task
    /// waits until the GPU task's work is complete.
    ///
    /// The accesses are kept alive until the task's work is complete. A
    /// task that fails or panics breaks the order after it: the later
    /// accesses of its handles are cancelled.
    ///
    /// ```no_run
    /// use selvedge::gpu::{cudarc::driver::CudaSlice, Device};
    /// use selvedge::Data;
    /// # fn main() -> Result<(), selvedge::gpu::GpuError> {
    /// let dev = Device::open(0)?;
    /// let x: Data<CudaSlice<f32>> = Data::new(dev.spawn(|s| Ok(s.stream().alloc_zeros(1024)?)).join()?);
    /// let y: Data<CudaSlice<f32>> = Data::new(dev.spawn(|s| Ok(s.stream().alloc_zeros(1024)?)).join()?);
    /// dev.spawn_with(x.write(), |s, x| Ok(s.stream().memcpy_htod(&[2.0f32; 1024], x)?));
    /// // Ordered after the write on the device, not on the host.
    /// dev.spawn_with((x.read(), y.write()), |s, (x, y)| Ok(s.stream().memcpy_dtod(x, y)?));
    /// let y = y.into_inner(); // waits for the copy's completion
    /// let back = dev.spawn(move |s| s.download(&y)).join()?;
    /// assert_eq!(back.as_slice()?, &[2.0f32; 1024][..]);
    /// # Ok(()) }
    /// ```
    ///
    /// # Panics
    /// When `accesses` declares one handle twice (nothing is submitted).
    pub fn spawn_with<A, T, F>(&self, accesses: A, f: F) -> GpuHandle<T>
    where
        A: Accesses + 'static,
        F: for<'a> FnOnce(&GpuStream, A::Refs<'a>) -> Result<T, GpuError> + Send + 'static,
        T: Send + 'static,
    {
        let me = self.id();
        let (link, promises) = self.new_link();
        let recorded = Recorded {
            done: link.done().clone(),
            device: Some(Arc::new(link.clone())),
        };
        let mut host_deps = Vec::new();
        let mut device_waits = Vec::new();
        with_logs(&accesses, self.inner.runtime(), |after, logs| {
            host_deps.extend(after.cloned());
            for (log, mode) in logs {
                for before in log.before(mode) {
                    match before
                        .device
                        .as_ref()
                        .and_then(|d| d.downcast_ref::<Link>())
                    {
                        Some(gpu) => gpu.wait_from(me, &mut host_deps, &mut device_waits),
                        None => host_deps.push(before.done.clone()),
                    }
                }
                log.record(mode, recorded.clone());
            }
        });
        self.spawn_linked(host_deps, device_waits, link, promises, move |s| {
            // SAFETY: every access has its turn on the host: the tasks
            // before it on this device have enqueued their work (and the
            // stream waits for it on the device), every other one
            // finished. The references end with `f`, which returns owned
            // values.
            let value = f(s, unsafe { accesses.refs() });
            // What the device still uses lives until its work is complete.
            s.keep_alive(accesses);
            value
        })
    }
}

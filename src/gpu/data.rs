//! GPU tasks with declared data access: [`Device::spawn_with`]. The
//! handles are the CPU's [`Data`](crate::Data); a GPU task records in each
//! handle's log its completion (which CPU accesses wait for: the stream's
//! callback) together with its link (its event and when it is enqueued),
//! which later GPU tasks of the same device wait for on the device
//! instead: MXNet's per-variable sync object, one writer and the readers
//! since, with no host round trip between GPU tasks.

use crate::dataflow::access::Accesses;
use crate::dataflow::declared::{set_written_poison, with_logs, with_turn, write_pending};
use crate::dataflow::event::Dep;
use crate::dataflow::held::{self, Behind};
use crate::dataflow::log::{Completion, Recorded};
use crate::gpu::device::Device;
use crate::gpu::error::GpuError;
use crate::gpu::raw::RawEvent;
use crate::gpu::stream::GpuStream;
use crate::gpu::task::GpuHandle;
use crate::gpu::turns::GpuTurns;
use std::panic::resume_unwind;
use std::sync::{Arc, OnceLock};

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
    /// The accesses are kept alive until the task's work is complete. The
    /// rules are a CPU task's: a poisoned handle is refused (a
    /// [`Data::recover`](crate::Data::recover) access is granted and clears
    /// the poison when `f` returns `Ok`); an `f` that panics or returns an
    /// error poisons what it writes (the work it enqueued may have written
    /// part of it); a task cancelled before it ran gives up its place, and
    /// the accesses after it run once those before it are complete.
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
    /// When `accesses` declares one handle twice, other than for two reads
    /// (nothing is submitted).
    pub fn spawn_with<A, T, F>(&self, accesses: A, f: F) -> GpuHandle<T>
    where
        A: Accesses + 'static,
        F: for<'a> FnOnce(&GpuStream, A::Refs<'a>) -> Result<T, GpuError> + Send + 'static,
        T: Send + 'static,
    {
        let me = self.id();
        let (link, promises) = self.new_link();
        let mut turns = GpuTurns::new();
        let recorded = Recorded {
            done: Completion::Once(turns.done().dep()),
            device: Some(Arc::new(DataLink {
                enqueued: turns.enqueued().dep(),
                event: link.event().clone(),
                device: me,
            })),
        };
        let mut host_deps = Vec::new();
        let mut device_waits = Vec::new();
        let holding = held::anything_here();
        let mut behind = None;
        with_logs(&accesses, self.inner.runtime(), |after, logs| {
            host_deps.extend(after.cloned());
            for (log, mode, target) in logs {
                if holding && behind.is_none() {
                    behind = held::conflict_here(target, mode, write_pending(log, mode));
                }
                for before in log.before(mode) {
                    match before
                        .device
                        .as_ref()
                        .and_then(|d| d.downcast_ref::<DataLink>())
                    {
                        Some(gpu) if gpu.device == me => {
                            host_deps.push(gpu.enqueued.clone());
                            device_waits.push(gpu.event.clone());
                        }
                        _ => host_deps.push(before.done.clone()),
                    }
                    // Passed on, a turn waits until the accesses before it
                    // are complete: it has no event to be waited for.
                    turns.enqueued().after(before.done.clone());
                    turns.done().after(before.done.clone());
                }
                log.record(mode, recorded.clone());
            }
        });
        let (behind, token) = behind.map(|c| Behind::new(&c)).unzip();
        let task = move |s: &GpuStream| {
            let _alive = token;
            let who = format_args!("GPU task `{}`", std::any::type_name::<F>());
            // As a CPU task's: poison refused, held on this thread, a panic
            // poisoning what it writes, a recover clearing it.
            let ran = with_turn(&accesses, &who, true, |refs| f(s, refs));
            if let Ok(Err(e)) = &ran {
                // The work it enqueued before failing may have written part
                // of what it writes.
                let cause: Arc<str> =
                    format!("{who} failed while it held a write to it: {e}").into();
                set_written_poison(&accesses, Some(&cause), Some(&cause));
            }
            // What the device still uses lives until its work is complete.
            s.keep_alive(accesses);
            ran.unwrap_or_else(|payload| resume_unwind(payload))
        };
        let handle = self.spawn_linked(host_deps, device_waits, link, promises, Some(turns), task);
        if let Some(behind) = behind {
            behind.note(handle.join_block());
        }
        handle
    }
}

/// What a declared GPU access records for the same device's later GPU
/// accesses: unlike a task's `Link`, never broken.
pub(super) struct DataLink {
    /// Fulfilled once the task's work and `event` are enqueued; or, when it
    /// failed or never ran (`event` is then never set), once what it
    /// enqueued and the accesses before it are complete.
    enqueued: Dep,
    /// The task's own event, recorded after its work.
    event: Arc<OnceLock<Arc<RawEvent>>>,
    /// Identifies the device (its `DeviceInner`'s address).
    device: usize,
}

//! GPU tasks (feature `cuda`): device work as dataflow tasks.
//!
//! A [`Device`] gives each worker of its runtime a lane: a CUDA stream with
//! its own cuBLAS handle, and a second stream for completions.
//! [`Device::spawn`] runs a closure on a worker with that worker's
//! [`GpuStream`]; the closure *enqueues* device work and returns. The
//! runtime records an event after that work; the lane's completion stream
//! waits for the event on the device and then calls a host function whose
//! only job is to fire a pre-allocated signal (no CUDA call, no allocation,
//! no lock in the callback); a worker picks the signal up and fulfills the
//! task's promise. No thread blocks on a stream meanwhile (except where
//! cudarc stages an upload from pageable host memory), and the next task's
//! work on the stream does not wait for the callback.
//!
//! A GPU task that depends on other GPU tasks of the same device
//! ([`GpuHandle::gpu_dep`]) does not wait for their callbacks: it is
//! enqueued as soon as their work is *enqueued*, its stream waiting on the
//! events recorded after them, so a chain of device work runs ahead of the
//! host. CPU consumers ([`GpuHandle::dep`]) wait for the callback.
//!
//! # What a task's closure must keep alive
//!
//! The closure returns, and drops what it captured, when its work is
//! enqueued, not when it is complete. Buffers it owns are safe (cudarc
//! frees them behind the work on their stream), but a buffer shared with
//! tasks on other streams (an `Arc<CudaSlice>`) or host memory the device
//! reads asynchronously must outlive the work: hand it to
//! [`GpuStream::keep_alive`], which drops it once the task's work is
//! complete. The value a task returns is handed out only then.
//!
//! # Errors
//!
//! A task that returns an error, or panics, breaks its promises: its
//! dependents are cancelled, never left waiting; a failing iteration of
//! [`Device::parallel_for`] breaks that iteration's promise, and the loop
//! returns the error. A device error that stops callbacks (a sticky error:
//! the context is lost) is noticed by a watchdog thread that queries the
//! streams while work is in flight; it breaks every pending promise, later
//! spawns fail with [`GpuError::DeviceFailed`], and dropping the device
//! then leaks what a lost context cannot destroy instead of panicking.
//!
//! # Libraries
//!
//! The CUDA driver and cuBLAS are loaded at run time: the crate builds
//! without a CUDA toolkit, and [`Device::open`] returns
//! [`GpuError::NoDriver`], [`GpuError::NoBlas`] or [`GpuError::NoDevice`]
//! (with the reason) where they are missing, never a panic. cuBLAS 12
//! works with any driver from CUDA 12.0 (525) on, cuBLAS 13 with one from
//! CUDA 13.0 (580) on; it is found on the loader's path, in a CUDA toolkit
//! directory or a Python `nvidia-cublas` wheel, or named by
//! `SELVEDGE_CUBLAS=/path/to/libcublas.so.N`.
//!
//! # Graphs
//!
//! [`Graph::gpu_node`](crate::Graph::gpu_node) adds a GPU node to a
//! [`Graph`](crate::Graph): GPU nodes of one device linked one to one form
//! a chain, captured into a CUDA graph on the graph's first run and
//! replayed with one launch on every run after that; the nodes after a
//! chain run once its completion came.
//!
//! # Graph capture
//!
//! A task may capture its stream into a CUDA graph, ending the capture
//! before it returns (one left open is ended and discarded, and the task
//! fails with [`GpuError::StreamCapturing`]). Capture in the thread-local
//! or relaxed mode: other workers keep making calls (pinned allocations,
//! queries) that the global mode forbids during another thread's capture.
//!
//! ```
//! use selvedge::gpu::{Device, GpuError};
//!
//! match Device::open(0) {
//!     Ok(dev) => {
//!         let h = dev.spawn(|s| {
//!             let x = s.stream().clone_htod(&[1.0f32, 2.0, 3.0])?;
//!             Ok(x)
//!         });
//!         let x = h.join()?; // the copy has completed
//!         assert_eq!(x.len(), 3);
//!     }
//!     Err(e) if e.is_unavailable() => println!("no GPU here: {e}"),
//!     Err(e) => return Err(e),
//! }
//! # Ok::<(), GpuError>(())
//! ```
//!
//! A GEMM, a GPU task behind it and a CPU task behind both (the example
//! of the guide's GPU page):
//!
//! ```no_run
//! use selvedge::gpu::{gemm, BatchedGemm, Device, GpuError};
//!
//! fn main() -> Result<(), GpuError> {
//!     // Err(e) with e.is_unavailable() without a GPU: never a panic.
//!     let dev = Device::open(0)?;
//!     let g = BatchedGemm { batch: 64, m: 256, n: 256, k: 256 };
//!     let (a, b) = (vec![1.0f32; g.a_len()], vec![0.5f32; g.b_len()]);
//!     // Runs on a worker with that worker's stream; returns once enqueued.
//!     let product = dev.spawn(move |s| {
//!         let a = s.stream().clone_htod(&a)?;
//!         let b = s.stream().clone_htod(&b)?;
//!         let mut c = s.stream().alloc_zeros::<f32>(g.c_len())?;
//!         gemm(s.blas(), g, &a, &b, &mut c)?; // row-major strided-batched SGEMM
//!         Ok(c)
//!     });
//!     // Another GPU task: enqueued behind it at once, its stream waiting on
//!     // the first one's event on the device (no host round trip).
//!     let summary = dev.spawn_delayed([product.gpu_dep()], |s| {
//!         Ok(s.stream().alloc_zeros::<f32>(1)?)
//!     });
//!     // A CPU task: runs when the stream's callback says the product is done.
//!     let cpu = selvedge::spawn_delayed([product.dep()], || "product ready");
//!     let c = product.join()?;           // its value, once its work is complete
//!     let host = dev.spawn(move |s| s.download(&c)).join()?; // pinned memory
//!     assert_eq!(host.as_slice()?[0], 128.0);
//!     assert_eq!(cpu.join(), "product ready");
//!     summary.join()?;
//!     Ok(())
//! }
//! ```

mod blas;
mod capture;
mod completion;
mod data;
mod device;
mod error;
mod finish;
mod graph_node;
mod libraries;
mod pinned;
mod raw;
mod stream;
mod task;
mod turns;

pub use blas::{gemm, BatchedGemm, GemmElement};
pub use device::Device;
pub use error::GpuError;
pub use pinned::{AnyBitPattern, PinnedBuffer};
pub use stream::GpuStream;
pub use task::{GpuDep, GpuHandle};

/// The cudarc crate this module is built on (the same version), for the
/// memory and kernel APIs used inside GPU tasks.
pub use cudarc;
/// The bf16 and f16 types cuBLAS computes with.
pub use half;

//! GPU tasks (feature `cuda`): device work as dataflow tasks.
//!
//! A [`Device`] owns one CUDA stream per worker of its runtime, each with its
//! own cuBLAS handle. [`Device::spawn`] runs a closure on a worker with that
//! worker's [`GpuStream`]; the closure *enqueues* device work and returns.
//! The runtime then enqueues a host function on the stream whose only job is
//! to fire a pre-allocated signal (see `core/signal.rs`: no CUDA call, no
//! allocation, no lock in the callback); a worker picks the signal up and
//! fulfills the task's promise. No thread blocks on the stream meanwhile.
//!
//! A GPU task that depends on other GPU tasks of the same device
//! ([`GpuHandle::gpu_dep`]) does not wait for their callbacks: it is
//! enqueued as soon as their work is *enqueued*, its stream waiting on the
//! events recorded after them, so a chain of device work runs ahead of the
//! host. CPU consumers ([`GpuHandle::dep`]) wait for the callback.
//!
//! A device error that stops callbacks (a sticky error: the context is
//! unusable) is noticed by a watchdog thread that queries the streams while
//! work is in flight; it breaks the pending promises, so their dependents
//! are cancelled instead of waiting forever, and later spawns fail.
//!
//! The CUDA driver (and cuBLAS) are loaded at run time: the crate builds
//! without a CUDA toolkit, and [`Device::open`] returns
//! [`GpuError::NoDriver`] where there is no driver, never a panic. The
//! bindings are CUDA 12.0's, so any driver from 525 on will do.
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
//!     Err(GpuError::NoDriver | GpuError::NoBlas | GpuError::NoDevice { .. }) => {
//!         println!("no GPU here");
//!     }
//!     Err(e) => return Err(e),
//! }
//! # Ok::<(), GpuError>(())
//! ```
//!
//! A GEMM, a GPU task behind it and a CPU task behind both (the README's
//! example):
//!
//! ```no_run
//! use selvedge::gpu::{BatchedGemm, Device, GpuError};
//!
//! fn main() -> Result<(), GpuError> {
//!     // Err(NoDriver | NoBlas | NoDevice { .. }) without a GPU: never a panic.
//!     let dev = Device::open(0)?;
//!     let g = BatchedGemm { batch: 64, m: 256, n: 256, k: 256 };
//!     let (a, b) = (vec![1.0f32; g.a_len()], vec![0.5f32; g.b_len()]);
//!     // Runs on a worker with that worker's stream; returns once enqueued.
//!     let product = dev.spawn(move |s| {
//!         let a = s.stream().clone_htod(&a)?;
//!         let b = s.stream().clone_htod(&b)?;
//!         let mut c = s.stream().alloc_zeros::<f32>(g.c_len())?;
//!         s.gemm(g, &a, &b, &mut c)?; // row-major strided-batched SGEMM
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
mod device;
mod error;
mod task;

pub use blas::{gemm, BatchedGemm, GemmElement};
pub use device::{Device, GpuStream};
pub use error::GpuError;
pub use task::{GpuDep, GpuHandle};

/// The cudarc crate this module is built on (the same version), for the
/// memory and kernel APIs used inside GPU tasks.
pub use cudarc;
/// The bf16 and f16 types cuBLAS computes with.
pub use half;

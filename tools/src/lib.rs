//! The workloads selvedge is measured with, shared by this crate's programs
//! (`bench_report`, the `batched_gemm` and `cholesky` demonstrations), its
//! criterion benchmarks (`benches/`) and its tests: each workload written
//! once per scheduler (selvedge, rayon, chili, serial) with the same task
//! structure, so that every driver times exactly the same code. Beside
//! them, `gpu_machine` turns the GPU bundle's report into the GPU
//! machine's section of `bench_report`'s document.
//!
//! Not published: it exists to measure selvedge, not to be depended on.

pub mod access;
pub mod blis;
#[cfg(feature = "full")]
pub mod cholesky;
pub mod dataflow;
#[cfg(feature = "full")]
pub mod dataflow_group;
pub mod gemm;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod gpu_machine;
pub mod handoff;
pub mod loops;
pub mod microkernel;
pub mod pinning;
pub mod turns;
pub mod workloads;

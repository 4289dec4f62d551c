//! What can go wrong with a device.

use cudarc::cublas::result::CublasError;
use cudarc::driver::{sys, DriverError};
use std::fmt;

/// Why a device could not be opened, or a GPU task failed.
///
/// ```
/// let e = selvedge::gpu::GpuError::NoDevice { ordinal: 3, count: 1 };
/// assert_eq!(e.to_string(), "no CUDA device 3: the driver sees 1 device(s)");
/// assert!(e.is_unavailable());
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum GpuError {
    /// No usable CUDA driver: libcuda could not be loaded, or it is a stub,
    /// too old, or does not match the kernel module. `reason` says which.
    NoDriver {
        /// What was tried and what the driver said.
        reason: String,
    },
    /// The driver works but no usable cuBLAS library was found. `reason`
    /// names the places searched.
    NoBlas {
        /// What was tried.
        reason: String,
    },
    /// There is no device with this ordinal.
    NoDevice {
        /// The ordinal asked for.
        ordinal: usize,
        /// How many devices the driver reports.
        count: usize,
    },
    /// A driver call failed.
    Driver(DriverError),
    /// A cuBLAS call failed.
    Blas(CublasError),
    /// The device hit an error that stops its streams (a sticky error, such
    /// as an illegal address in a kernel): every task in flight was
    /// cancelled, and the device takes no more work.
    DeviceFailed(DriverError),
    /// A GPU task returned while its stream was still being captured into
    /// a CUDA graph. Its completion cannot be enqueued behind a capture
    /// (it would be recorded into the graph instead of running): end the
    /// capture inside the task.
    StreamCapturing,
}

impl GpuError {
    /// Whether this machine simply has no usable GPU (no driver, no cuBLAS,
    /// no such device), as opposed to a GPU that failed: what a program
    /// with a CPU fallback checks.
    ///
    /// ```
    /// use selvedge::gpu::{Device, GpuError};
    /// match Device::open(0) {
    ///     Ok(_) => println!("a GPU"),
    ///     Err(e) if e.is_unavailable() => println!("CPU only: {e}"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok::<(), GpuError>(())
    /// ```
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            GpuError::NoDriver { .. } | GpuError::NoBlas { .. } | GpuError::NoDevice { .. }
        )
    }
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuError::NoDriver { reason } => write!(f, "no usable CUDA driver: {reason}"),
            GpuError::NoBlas { reason } => write!(f, "no usable cuBLAS library: {reason}"),
            GpuError::NoDevice { ordinal, count } => {
                write!(
                    f,
                    "no CUDA device {ordinal}: the driver sees {count} device(s)"
                )
            }
            GpuError::Driver(e) => write!(f, "CUDA driver error: {e}"),
            GpuError::Blas(e) => write!(f, "cuBLAS error: {e:?}"),
            GpuError::DeviceFailed(e) => write!(f, "the device failed and takes no more work: {e}"),
            GpuError::StreamCapturing => write!(
                f,
                "a GPU task returned while its stream was being captured into a CUDA graph: end the capture inside the task"
            ),
        }
    }
}

impl std::error::Error for GpuError {}

impl From<DriverError> for GpuError {
    fn from(e: DriverError) -> Self {
        GpuError::Driver(e)
    }
}

impl From<CublasError> for GpuError {
    fn from(e: CublasError) -> Self {
        GpuError::Blas(e)
    }
}

/// Whether `error` means the context is lost: CUDA's sticky errors, after
/// which every call in the context fails and no host function runs.
pub(super) fn is_sticky(error: sys::CUresult) -> bool {
    use sys::CUresult::*;
    matches!(
        error,
        CUDA_ERROR_ILLEGAL_ADDRESS
            | CUDA_ERROR_LAUNCH_TIMEOUT
            | CUDA_ERROR_ASSERT
            | CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUDA_ERROR_MISALIGNED_ADDRESS
            | CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUDA_ERROR_INVALID_PC
            | CUDA_ERROR_LAUNCH_FAILED
            | CUDA_ERROR_ECC_UNCORRECTABLE
            | CUDA_ERROR_NVLINK_UNCORRECTABLE
            | CUDA_ERROR_CONTAINED
            | CUDA_ERROR_TENSOR_MEMORY_LEAK
            | CUDA_ERROR_EXTERNAL_DEVICE
            | CUDA_ERROR_CONTEXT_IS_DESTROYED
            | CUDA_ERROR_DEINITIALIZED
            | CUDA_ERROR_UNKNOWN
    )
}

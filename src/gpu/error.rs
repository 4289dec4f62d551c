//! What can go wrong with a device.

use cudarc::cublas::result::CublasError;
use cudarc::driver::DriverError;
use std::fmt;

/// Why a device could not be opened, or a GPU task failed.
///
/// ```
/// let e = selvedge::gpu::GpuError::NoDevice { ordinal: 3, count: 1 };
/// assert_eq!(e.to_string(), "no CUDA device 3: the driver sees 1 device(s)");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum GpuError {
    /// The CUDA driver library (libcuda) could not be loaded.
    NoDriver,
    /// The cuBLAS library could not be loaded (the driver could).
    NoBlas,
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
}

impl fmt::Display for GpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuError::NoDriver => write!(f, "the CUDA driver library (libcuda) is not installed"),
            GpuError::NoBlas => write!(f, "the cuBLAS library (libcublas) is not installed"),
            GpuError::NoDevice { ordinal, count } => {
                write!(
                    f,
                    "no CUDA device {ordinal}: the driver sees {count} device(s)"
                )
            }
            GpuError::Driver(e) => write!(f, "CUDA driver error: {e}"),
            GpuError::Blas(e) => write!(f, "cuBLAS error: {e:?}"),
            GpuError::DeviceFailed(e) => write!(f, "the device failed and takes no more work: {e}"),
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

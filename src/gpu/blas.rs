//! Strided-batched GEMM on a stream, row-major, without cuBLAS
//! configuration by hand.

use super::raw;
use super::GpuError;
use cudarc::cublas::sys::cublasOperation_t;
use cudarc::cublas::{CudaBlas, Gemm, GemmConfig, StridedBatchedConfig};
use cudarc::driver::{DevicePtr, DevicePtrMut};
use half::bf16;

/// The shape of a batch of row-major products `C[i] = A[i] · B[i]`, with
/// `A[i]` of `m × k`, `B[i]` of `k × n` and `C[i]` of `m × n`, each batch
/// stored back to back.
///
/// ```no_run
/// use selvedge::gpu::{gemm, BatchedGemm, Device};
/// # fn main() -> Result<(), selvedge::gpu::GpuError> {
/// let dev = Device::open(0)?;
/// let g = BatchedGemm { batch: 8, m: 64, n: 32, k: 16 };
/// let c = dev
///     .spawn(move |s| {
///         let a = s.stream().clone_htod(&vec![1.0f32; g.a_len()])?;
///         let b = s.stream().clone_htod(&vec![2.0f32; g.b_len()])?;
///         let mut c = s.stream().alloc_zeros::<f32>(g.c_len())?;
///         gemm(s.blas(), g, &a, &b, &mut c)?;
///         s.download(&c)
///     })
///     .join()?;
/// assert!(c.as_slice()?.iter().all(|&x| x == 32.0)); // k · 1 · 2
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchedGemm {
    /// How many products.
    pub batch: usize,
    /// Rows of `A` and `C`.
    pub m: usize,
    /// Columns of `B` and `C`.
    pub n: usize,
    /// Columns of `A`, rows of `B`.
    pub k: usize,
}

impl BatchedGemm {
    /// Elements of all the `A`s.
    ///
    /// # Panics
    /// When the count overflows `usize`, naming the shape.
    ///
    /// ```
    /// let g = selvedge::gpu::BatchedGemm { batch: 8, m: 64, n: 32, k: 16 };
    /// assert_eq!(g.a_len(), 8 * 64 * 16);
    /// ```
    pub fn a_len(&self) -> usize {
        self.elements("a", self.m, self.k)
    }

    /// Elements of all the `B`s.
    ///
    /// # Panics
    /// When the count overflows `usize`, naming the shape.
    ///
    /// ```
    /// let g = selvedge::gpu::BatchedGemm { batch: 8, m: 64, n: 32, k: 16 };
    /// assert_eq!(g.b_len(), 8 * 16 * 32);
    /// ```
    pub fn b_len(&self) -> usize {
        self.elements("b", self.k, self.n)
    }

    /// Elements of all the `C`s.
    ///
    /// # Panics
    /// When the count overflows `usize`, naming the shape.
    ///
    /// ```
    /// let g = selvedge::gpu::BatchedGemm { batch: 8, m: 64, n: 32, k: 16 };
    /// assert_eq!(g.c_len(), 8 * 64 * 32);
    /// let huge = selvedge::gpu::BatchedGemm { batch: usize::MAX, m: 2, n: 2, k: 2 };
    /// let message = std::panic::catch_unwind(|| huge.c_len()).unwrap_err();
    /// assert!(message.downcast_ref::<String>().unwrap().contains("overflows usize"));
    /// ```
    pub fn c_len(&self) -> usize {
        self.elements("c", self.m, self.n)
    }

    /// `batch · rows · cols`, checked: a length that wrapped would let a
    /// short buffer pass the length checks.
    fn elements(&self, name: &str, rows: usize, cols: usize) -> usize {
        self.batch
            .checked_mul(rows)
            .and_then(|n| n.checked_mul(cols))
            .unwrap_or_else(|| panic!("gemm: the length of {name} for {self:?} overflows usize"))
    }

    /// Floating-point operations of the whole batch (a multiply and an add
    /// per term).
    ///
    /// ```
    /// let g = selvedge::gpu::BatchedGemm { batch: 2, m: 4, n: 4, k: 4 };
    /// assert_eq!(g.flops(), 256.0);
    /// ```
    pub fn flops(&self) -> f64 {
        2.0 * self.batch as f64 * self.m as f64 * self.n as f64 * self.k as f64
    }
}

/// The element types [`gemm`] multiplies: `f32`, and `bf16`
/// with f32 accumulation (cuBLAS's).
///
/// ```
/// use selvedge::gpu::GemmElement;
///
/// /// A product's cost in bytes moved, for any element type `gemm` takes.
/// fn bytes<E: GemmElement>(g: selvedge::gpu::BatchedGemm) -> usize {
///     (g.a_len() + g.b_len() + g.c_len()) * std::mem::size_of::<E>()
/// }
/// let g = selvedge::gpu::BatchedGemm { batch: 1, m: 2, n: 2, k: 2 };
/// assert_eq!(bytes::<f32>(g), 48);
/// assert_eq!(bytes::<selvedge::gpu::half::bf16>(g), 24);
/// ```
pub trait GemmElement: Copy + sealed::Sealed {
    /// 1 and 0 in this type, for alpha and beta.
    #[doc(hidden)]
    const ONE_ZERO: (Self, Self);
}

impl GemmElement for f32 {
    const ONE_ZERO: (Self, Self) = (1.0, 0.0);
}

impl GemmElement for bf16 {
    const ONE_ZERO: (Self, Self) = (bf16::ONE, bf16::ZERO);
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::bf16 {}
}

fn dim(name: &str, value: usize) -> i32 {
    i32::try_from(value).unwrap_or_else(|_| panic!("gemm {name} = {value} exceeds i32::MAX"))
}

/// Enqueues `c = a · b` for every product of the batch `g` (row-major) on
/// `blas`'s stream: one strided-batched cuBLAS call. Inside a GPU task, pass
/// the task's handle, [`GpuStream::blas`](crate::gpu::GpuStream::blas);
/// outside them, a cuBLAS handle of one's own.
///
/// Panics if a buffer is shorter than `g` needs, naming it and both
/// lengths.
///
/// ```no_run
/// use selvedge::gpu::cudarc::cublas::CudaBlas;
/// use selvedge::gpu::{gemm, BatchedGemm, Device};
/// # fn main() -> Result<(), selvedge::gpu::GpuError> {
/// let dev = Device::open(0)?;
/// let stream = dev.context().new_stream()?;
/// let blas = CudaBlas::new(stream.clone())?;
/// let g = BatchedGemm { batch: 4, m: 8, n: 8, k: 8 };
/// let a = stream.clone_htod(&vec![1.0f32; g.a_len()])?;
/// let b = stream.clone_htod(&vec![1.0f32; g.b_len()])?;
/// let mut c = stream.alloc_zeros::<f32>(g.c_len())?;
/// gemm(&blas, g, &a, &b, &mut c)?;
/// stream.synchronize()?;
/// # Ok(()) }
/// ```
pub fn gemm<T, A, B, C>(
    blas: &CudaBlas,
    g: BatchedGemm,
    a: &A,
    b: &B,
    c: &mut C,
) -> Result<(), GpuError>
where
    T: GemmElement,
    A: DevicePtr<T>,
    B: DevicePtr<T>,
    C: DevicePtrMut<T>,
    CudaBlas: Gemm<T>,
{
    for (name, have, need) in [
        ("a", a.len(), g.a_len()),
        ("b", b.len(), g.b_len()),
        ("c", c.len(), g.c_len()),
    ] {
        assert!(
            have >= need,
            "gemm buffer {name} holds {have} elements, the batch {g:?} needs {need}"
        );
    }
    if g.batch == 0 || g.m == 0 || g.n == 0 {
        return Ok(());
    }
    let (m, n, k) = (dim("m", g.m), dim("n", g.n), dim("k", g.k));
    // cuBLAS runs in the calling thread's current context, which need not
    // be the buffers' on a thread of the caller's own: make it so.
    raw::make_current(c.stream().context())?;
    let (one, zero) = T::ONE_ZERO;
    // cuBLAS is column-major: a row-major C = A·B is the column-major
    // Cᵀ = Bᵀ·Aᵀ, so B goes first and the roles of m and n swap.
    let cfg = StridedBatchedConfig {
        gemm: GemmConfig {
            transa: cublasOperation_t::CUBLAS_OP_N,
            transb: cublasOperation_t::CUBLAS_OP_N,
            m: n,
            n: m,
            k,
            alpha: one,
            lda: n,
            // cuBLAS wants a leading dimension of at least 1, even for an
            // empty inner dimension (then C is just zeroed).
            ldb: k.max(1),
            beta: zero,
            ldc: n,
        },
        batch_size: dim("batch", g.batch),
        // Each dimension fits an i32 (checked above), so each product fits
        // an i64.
        stride_a: i64::from(k) * i64::from(n),
        stride_b: i64::from(m) * i64::from(k),
        stride_c: i64::from(m) * i64::from(n),
    };
    // SAFETY: the lengths were checked against the shape above, and every
    // pointer is used on `blas`'s stream (cudarc orders it after earlier
    // writes of the buffers on other streams).
    unsafe { blas.gemm_strided_batched(cfg, b, a, c) }?;
    Ok(())
}

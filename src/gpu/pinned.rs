//! Pinned host memory for device-to-host copies: a per-device pool of
//! blocks, so that `GpuStream::download` does not pay a driver allocation
//! (and a release that may synchronize the device) on every call.

use super::raw::{self, RawEvent};
use super::GpuError;
use crate::core::sync::{lock, AtomicBool, Mutex, Ordering};
use cudarc::driver::{sys, CudaContext, DeviceRepr, DriverError};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::Arc;

/// Blocks come in powers of two from this size up, so a block freed by one
/// download fits the next of a similar size.
const SMALLEST_BLOCK: usize = 4096;

/// Free blocks beyond this many bytes are released instead of kept.
const POOL_LIMIT: usize = 1 << 30;

/// One pinned allocation and the event recorded after the copy into it.
struct Block {
    ptr: NonNull<u8>,
    bytes: usize,
    copied: RawEvent,
}

// SAFETY: pinned host memory is ordinary memory, owned by whoever holds
// the block; the event is `Send`.
unsafe impl Send for Block {}

/// A device's pool of pinned blocks (shared with the buffers handed out,
/// which may outlive the device).
pub(super) struct PinnedPool {
    ctx: Arc<CudaContext>,
    free: Mutex<FreeBlocks>,
}

#[derive(Default)]
struct FreeBlocks {
    blocks: Vec<Block>,
    bytes: usize,
}

impl PinnedPool {
    pub(super) fn new(ctx: Arc<CudaContext>) -> Self {
        PinnedPool {
            ctx,
            free: Mutex::new(FreeBlocks::default()),
        }
    }

    fn make_current(&self) -> Result<(), DriverError> {
        raw::make_current(&self.ctx)
    }

    /// A block of at least `bytes` bytes (`bytes > 0`), from the pool or
    /// new. The caller made the context current.
    fn take(&self, bytes: usize) -> Result<Block, DriverError> {
        let class = bytes.max(SMALLEST_BLOCK).next_power_of_two();
        {
            let mut free = lock(&self.free);
            if let Some(i) = free.blocks.iter().position(|b| b.bytes == class) {
                let block = free.blocks.swap_remove(i);
                free.bytes -= class;
                return Ok(block);
            }
        }
        let copied = RawEvent::new(&self.ctx)?;
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` is a valid out-pointer. Flags 0: cached memory, as
        // the host reads it (write-combined memory is slow to read).
        unsafe { sys::cuMemHostAlloc(&mut ptr, class, 0) }.result()?;
        let ptr = NonNull::new(ptr.cast::<u8>())
            .ok_or(DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY))?;
        Ok(Block {
            ptr,
            bytes: class,
            copied,
        })
    }

    /// Takes back a block whose copy is complete.
    fn give_back(&self, block: Block) {
        let mut free = lock(&self.free);
        if free.bytes + block.bytes <= POOL_LIMIT {
            free.bytes += block.bytes;
            free.blocks.push(block);
        } else {
            drop(free);
            self.release(block);
        }
    }

    fn release(&self, block: Block) {
        if self.make_current().is_ok() {
            // SAFETY: allocated by `cuMemHostAlloc` in this context, and no
            // copy into it is pending (the caller checked its event).
            let _ = unsafe { sys::cuMemFreeHost(block.ptr.as_ptr().cast()) };
        }
        // Otherwise the context is lost, and the memory goes with it.
    }
}

impl Drop for PinnedPool {
    fn drop(&mut self) {
        let blocks = std::mem::take(&mut lock(&self.free).blocks);
        for block in blocks {
            self.release(block);
        }
    }
}

/// The element types a [`PinnedBuffer`] holds: plain numbers, for which
/// any bytes the device wrote are a valid value (not `bool`, whose other
/// bit patterns would be undefined behaviour to read).
///
/// ```
/// fn readable<T: selvedge::gpu::AnyBitPattern>() {}
/// readable::<f32>();
/// readable::<selvedge::gpu::half::bf16>();
/// ```
pub trait AnyBitPattern: DeviceRepr + sealed::Sealed {}

mod sealed {
    pub trait Sealed {}
}

macro_rules! any_bit_pattern {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl AnyBitPattern for $t {}
    )*};
}

any_bit_pattern!(
    i8,
    i16,
    i32,
    i64,
    i128,
    isize,
    u8,
    u16,
    u32,
    u64,
    u128,
    usize,
    f32,
    f64,
    half::f16,
    half::bf16
);

/// Pinned host memory holding a copy of device memory, from
/// [`GpuStream::download`](super::GpuStream::download). Reading it
/// ([`PinnedBuffer::as_slice`]) waits for the copy only if it is not yet
/// complete, which it always is once the GPU task that enqueued it has
/// finished: the first read of the value a [`GpuHandle`](super::GpuHandle)
/// returned costs one event query that does not wait, later reads an atomic
/// load. Dropping the buffer returns its memory to the device's pool.
///
/// ```no_run
/// # fn main() -> Result<(), selvedge::gpu::GpuError> {
/// let dev = selvedge::gpu::Device::open(0)?;
/// let host = dev
///     .spawn(|s| {
///         let x = s.stream().clone_htod(&[1u8, 2, 3])?;
///         s.download(&x)
///     })
///     .join()?;
/// assert_eq!(host.as_slice()?, &[1, 2, 3]);
/// assert_eq!(host.len(), 3);
/// # Ok(()) }
/// ```
pub struct PinnedBuffer<T> {
    /// `None` only once dropped, or leaked with a lost context.
    block: Option<Block>,
    len: usize,
    /// Set once the copy is known to be complete.
    complete: AtomicBool,
    pool: Arc<PinnedPool>,
    _elements: PhantomData<T>,
}

// SAFETY: the buffer owns its memory, which holds `T`s.
unsafe impl<T: Send> Send for PinnedBuffer<T> {}
// SAFETY: shared access only reads the memory (after the copy completed).
unsafe impl<T: Sync> Sync for PinnedBuffer<T> {}

impl<T: AnyBitPattern> PinnedBuffer<T> {
    /// Enqueues on `stream` a copy of `bytes` bytes from `src` into a block
    /// of `pool`; the caller made the context current and checked that
    /// `bytes` is `len` elements of `T`, more than 0.
    pub(super) fn enqueue_copy(
        pool: &Arc<PinnedPool>,
        stream: sys::CUstream,
        src: sys::CUdeviceptr,
        len: usize,
    ) -> Result<Self, GpuError> {
        let bytes = len * std::mem::size_of::<T>();
        let block = pool.take(bytes)?;
        let buffer = PinnedBuffer {
            block: Some(block),
            len,
            complete: AtomicBool::new(false),
            pool: Arc::clone(pool),
            _elements: PhantomData,
        };
        let block = buffer.block.as_ref().expect("just set");
        // SAFETY: the block holds at least `bytes` bytes and nobody reads it
        // before its event says the copy is complete; `src` holds `bytes`
        // bytes (the caller's device pointer of `len` elements).
        unsafe { sys::cuMemcpyDtoHAsync_v2(block.ptr.as_ptr().cast(), src, bytes, stream) }
            .result()?;
        if let Err(e) = block.copied.record(stream) {
            // The copy is enqueued but nothing records its end: the block
            // can never be known free again, so it is leaked.
            let mut buffer = buffer;
            std::mem::forget(buffer.block.take());
            return Err(e.into());
        }
        Ok(buffer)
    }

    /// How many elements the buffer holds.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), selvedge::gpu::GpuError> {
    /// let dev = selvedge::gpu::Device::open(0)?;
    /// let host = dev.spawn(|s| s.download(&s.stream().alloc_zeros::<f32>(8)?)).join()?;
    /// assert_eq!(host.len(), 8);
    /// # Ok(()) }
    /// ```
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no elements (never: an empty download
    /// panics).
    ///
    /// ```no_run
    /// # fn main() -> Result<(), selvedge::gpu::GpuError> {
    /// let dev = selvedge::gpu::Device::open(0)?;
    /// let host = dev.spawn(|s| s.download(&s.stream().alloc_zeros::<f32>(8)?)).join()?;
    /// assert!(!host.is_empty());
    /// # Ok(()) }
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The copied elements, once the copy is complete (waiting for it if
    /// it is not yet: only when read inside the task that enqueued it).
    /// Fails if the device failed before the copy completed.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), selvedge::gpu::GpuError> {
    /// let dev = selvedge::gpu::Device::open(0)?;
    /// let host = dev
    ///     .spawn(|s| s.download(&s.stream().clone_htod(&[4.0f64; 2])?))
    ///     .join()?;
    /// assert_eq!(host.as_slice()?, &[4.0, 4.0]);
    /// # Ok(()) }
    /// ```
    pub fn as_slice(&self) -> Result<&[T], GpuError> {
        self.wait()?;
        let block = self.block.as_ref().expect("a live buffer has its block");
        // SAFETY: the block holds `len` `T`s written by the completed copy
        // (an `AnyBitPattern` is valid for any bytes the device wrote), and
        // nothing writes them any more.
        Ok(unsafe { std::slice::from_raw_parts(block.ptr.as_ptr().cast::<T>(), self.len) })
    }

    /// The copied elements in a `Vec` of their own.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), selvedge::gpu::GpuError> {
    /// let dev = selvedge::gpu::Device::open(0)?;
    /// let host = dev.spawn(|s| s.download(&s.stream().clone_htod(&[9u16; 3])?)).join()?;
    /// assert_eq!(host.to_vec()?, vec![9, 9, 9]);
    /// # Ok(()) }
    /// ```
    pub fn to_vec(&self) -> Result<Vec<T>, GpuError>
    where
        T: Clone,
    {
        Ok(self.as_slice()?.to_vec())
    }

    fn wait(&self) -> Result<(), GpuError> {
        // Acquire: the completion that set the flag (or the event wait
        // below on another thread) happens-before our reads.
        if self.complete.load(Ordering::Acquire) {
            return Ok(());
        }
        let block = self.block.as_ref().expect("a live buffer has its block");
        self.pool.make_current()?;
        if !block.copied.is_complete()? {
            block.copied.synchronize()?;
        }
        self.complete.store(true, Ordering::Release);
        Ok(())
    }
}

impl<T> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        let Some(block) = self.block.take() else {
            return;
        };
        let done = self.complete.load(Ordering::Acquire)
            || (self.pool.make_current().is_ok() && block.copied.synchronize().is_ok());
        if done {
            self.pool.give_back(block);
        } else {
            // The copy may still write into the block and nothing can wait
            // for it (the context is lost): leak the block with the context.
            std::mem::forget(block);
        }
    }
}

impl<T: AnyBitPattern + std::fmt::Debug> std::fmt::Debug for PinnedBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("len", &self.len)
            .field("complete", &self.complete.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

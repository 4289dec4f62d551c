//! What the GPU test binaries share: opening the device (or skipping), a
//! deadline that aborts a hung test, hand-written PTX kernels, and a way to
//! put consecutive GPU tasks on different workers' streams.
//!
//! Not a test target of its own (a directory without `main.rs`); each
//! `tests/gpu*.rs` that needs it says `mod gpu_support;`.
#![allow(dead_code)]

use selvedge::gpu::cudarc::driver::{result, sys, CudaStream, DriverError};
use selvedge::gpu::Device;
use selvedge::{JoinHandle, Runtime};
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Whether a missing GPU must fail the tests (set by the GPU bundle's run
/// script on a GPU machine).
pub fn gpu_required() -> bool {
    std::env::var_os("SELVEDGE_REQUIRE_GPU").is_some_and(|v| v == "1")
}

/// The device, or `None` after printing why the test skips; with
/// `SELVEDGE_REQUIRE_GPU=1` a missing GPU panics instead.
pub fn device(rt: &Runtime, test: &str) -> Option<Device> {
    match Device::open_in(rt, 0) {
        Ok(dev) => Some(dev),
        Err(e) if e.is_unavailable() => {
            if gpu_required() {
                panic!("{test}: SELVEDGE_REQUIRE_GPU=1 but {e}");
            }
            eprintln!("{test}: skipped: {e}");
            None
        }
        Err(e) => panic!("{test}: opening the device failed: {e}"),
    }
}

/// Held by each test of `tests/gpu/` for its whole run, so that they
/// run one at a time. They share the device's one CUDA context, and a call
/// that waits for the whole device in one test (a module load, a free, a
/// device's drop) can hold up the others' calls until every test's work on
/// the device is done: on an H100, run side by side, a chain that must run
/// ahead of the device saw its links enqueued only after their producers'
/// 40 ms of work, and a value kept by a panicking task was gone before its
/// 300 ms of work could have ended; run one at a time, both passed.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed holding it leaves it poisoned: the next one runs.
    ONE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Aborts the process, saying why, unless dropped within `limit`: a test
/// that would hang fails instead (a hang inside the runtime cannot be
/// unwound out of).
pub struct Deadline {
    done: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Deadline {
    pub fn new(what: &str, limit: Duration) -> Deadline {
        let (tx, rx) = mpsc::channel::<()>();
        let what = what.to_string();
        let thread = std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(limit) {
                eprintln!("{what}: still not finished after {limit:?}: something hangs; aborting");
                std::process::abort();
            }
        });
        Deadline {
            done: Some(tx),
            thread: Some(thread),
        }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        // Dropping the sender ends the wait (with `Disconnected`), also
        // while unwinding out of a failed assertion.
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The kernels, in PTX (JIT-compiled by the driver, so no CUDA compiler
/// is needed; checked with `ptxas -arch=sm_50` and `sm_90`):
///
/// - `spin(ns)`: one thread spins on `%globaltimer` until `ns` nanoseconds
///   have passed, so that the work enqueued after it on its stream runs
///   that much later;
/// - `spin_copy(src, dst, n, ns)`: each thread of one block spins for `ns`
///   nanoseconds, then the block copies `n` f32s from `src` to `dst` (the
///   read comes late: a buffer freed too early is read after its free);
/// - `fault()`: stores to address 0 (an illegal address: a sticky error
///   that ruins the context).
pub const PTX: &str = r#"
.version 7.0
.target sm_50
.address_size 64

.visible .entry spin(
    .param .u64 spin_ns
)
{
    .reg .pred %p<2>;
    .reg .b64 %rd<5>;

    ld.param.u64 %rd1, [spin_ns];
    mov.u64 %rd2, %globaltimer;
    add.s64 %rd3, %rd2, %rd1;
$L__spin:
    mov.u64 %rd4, %globaltimer;
    setp.lt.u64 %p1, %rd4, %rd3;
    @%p1 bra $L__spin;
    ret;
}

.visible .entry spin_copy(
    .param .u64 spin_copy_src,
    .param .u64 spin_copy_dst,
    .param .u64 spin_copy_n,
    .param .u64 spin_copy_ns
)
{
    .reg .pred %p<3>;
    .reg .b32 %r<3>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<12>;

    ld.param.u64 %rd1, [spin_copy_src];
    ld.param.u64 %rd2, [spin_copy_dst];
    ld.param.u64 %rd3, [spin_copy_n];
    ld.param.u64 %rd4, [spin_copy_ns];
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    mov.u64 %rd5, %globaltimer;
    add.s64 %rd5, %rd5, %rd4;
$L__wait:
    mov.u64 %rd6, %globaltimer;
    setp.lt.u64 %p1, %rd6, %rd5;
    @%p1 bra $L__wait;
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ntid.x;
    cvt.u64.u32 %rd7, %r1;
    cvt.u64.u32 %rd8, %r2;
$L__copy:
    setp.ge.u64 %p2, %rd7, %rd3;
    @%p2 bra $L__done;
    shl.b64 %rd9, %rd7, 2;
    add.s64 %rd10, %rd1, %rd9;
    add.s64 %rd11, %rd2, %rd9;
    ld.global.f32 %f1, [%rd10];
    st.global.f32 [%rd11], %f1;
    add.s64 %rd7, %rd7, %rd8;
    bra.uni $L__copy;
$L__done:
    ret;
}

.visible .entry fault()
{
    .reg .b64 %rd<2>;
    .reg .b32 %r<2>;
    mov.u64 %rd1, 0;
    mov.u32 %r1, 1;
    st.global.u32 [%rd1], %r1;
    ret;
}
"#;

/// A kernel of the module loaded by [`Kernels::load`]: a driver handle,
/// usable from any thread whose current context is the device's.
#[derive(Clone, Copy)]
pub struct Kernel(sys::CUfunction);

// SAFETY: a CUfunction is a driver handle with no thread affinity; the
// module it belongs to is never unloaded (it goes with the context).
unsafe impl Send for Kernel {}
// SAFETY: as above; launching is thread-safe in the driver.
unsafe impl Sync for Kernel {}

/// The PTX module's kernels, loaded into the device's context.
#[derive(Clone, Copy)]
pub struct Kernels {
    pub spin: Kernel,
    pub spin_copy: Kernel,
    pub fault: Kernel,
}

impl Kernels {
    /// Loads [`PTX`] into `dev`'s context (made current on this thread).
    pub fn load(dev: &Device) -> Kernels {
        dev.context()
            .bind_to_thread()
            .expect("making the device's context current");
        let ptx = CString::new(PTX).unwrap();
        // SAFETY: a NUL-terminated PTX image, in the current context; the
        // names are the module's entries.
        unsafe {
            let module = result::module::load_data(ptx.as_ptr().cast::<c_void>())
                .expect("loading the PTX module");
            let get = |name: &str| {
                Kernel(
                    result::module::get_function(module, CString::new(name).unwrap())
                        .unwrap_or_else(|e| panic!("kernel {name}: {e}")),
                )
            };
            Kernels {
                spin: get("spin"),
                spin_copy: get("spin_copy"),
                fault: get("fault"),
            }
        }
    }

    /// Enqueues a spin of `duration` on `stream` (whose context is current).
    pub fn spin(&self, stream: &CudaStream, duration: Duration) -> Result<(), DriverError> {
        let mut ns = duration.as_nanos() as u64;
        let mut params = [(&mut ns as *mut u64).cast::<c_void>()];
        // SAFETY: `spin` takes one u64, passed by pointer; the pointer is
        // read during the launch call only.
        unsafe {
            result::launch_kernel(
                self.spin.0,
                (1, 1, 1),
                (1, 1, 1),
                0,
                stream.cu_stream(),
                &mut params,
            )
        }
    }

    /// Enqueues on `stream` a copy of `n` f32s from `src` to `dst` that
    /// starts after spinning for `duration`.
    ///
    /// # Safety
    /// `src` and `dst` hold `n` f32s each, and stay allocated until the
    /// kernel has run.
    pub unsafe fn spin_copy(
        &self,
        stream: &CudaStream,
        src: sys::CUdeviceptr,
        dst: sys::CUdeviceptr,
        n: usize,
        duration: Duration,
    ) -> Result<(), DriverError> {
        let (mut src, mut dst, mut n) = (src, dst, n as u64);
        let mut ns = duration.as_nanos() as u64;
        let mut params = [
            (&mut src as *mut u64).cast::<c_void>(),
            (&mut dst as *mut u64).cast::<c_void>(),
            (&mut n as *mut u64).cast::<c_void>(),
            (&mut ns as *mut u64).cast::<c_void>(),
        ];
        // SAFETY: four u64 parameters, passed by pointer; the buffers per
        // the caller.
        unsafe {
            result::launch_kernel(
                self.spin_copy.0,
                (1, 1, 1),
                (256, 1, 1),
                0,
                stream.cu_stream(),
                &mut params,
            )
        }
    }

    /// Enqueues the faulting kernel on `stream`.
    pub fn fault(&self, stream: &CudaStream) -> Result<(), DriverError> {
        // SAFETY: no parameters; the fault is the caller's point.
        unsafe {
            result::launch_kernel(
                self.fault.0,
                (1, 1, 1),
                (1, 1, 1),
                0,
                stream.cu_stream(),
                &mut [],
            )
        }
    }
}

/// Pinned host memory of `u32`s from `cuMemHostAlloc`, read and written
/// only through raw pointers: unlike cudarc's `PinnedHostSlice`, whose
/// `as_slice` synchronizes with its event first, reading it never waits, so
/// a reader that runs before a copy into it is complete sees what was
/// there before.
pub struct RawPinned {
    ptr: *mut u32,
    len: usize,
    dev: Device,
}

impl RawPinned {
    /// `len` elements, each set to `value`.
    pub fn new(dev: &Device, len: usize, value: u32) -> RawPinned {
        dev.context()
            .bind_to_thread()
            .expect("making the device's context current");
        let mut ptr = std::ptr::null_mut::<c_void>();
        // SAFETY: a valid out-pointer, in the current context; flags 0:
        // ordinary (cached) pinned memory.
        unsafe { sys::cuMemHostAlloc(&mut ptr, len * std::mem::size_of::<u32>(), 0) }
            .result()
            .expect("cuMemHostAlloc");
        let ptr = ptr.cast::<u32>();
        for i in 0..len {
            // SAFETY: within the allocation.
            unsafe { ptr.add(i).write_volatile(value) };
        }
        RawPinned {
            ptr,
            len,
            dev: dev.clone(),
        }
    }

    /// The address, for closures (a raw pointer is not `Send`).
    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Element `i` of the memory at `addr` (from [`RawPinned::addr`]), read
    /// as it is now, without any synchronization.
    ///
    /// # Safety
    /// `addr` is a live `RawPinned`'s, and `i` is below its length.
    pub unsafe fn read(addr: usize, i: usize) -> u32 {
        // SAFETY: per the caller; volatile, as the device writes it behind
        // the compiler's back.
        unsafe { (addr as *const u32).add(i).read_volatile() }
    }

    /// Sets element `i` of the memory at `addr` (from [`RawPinned::addr`]).
    ///
    /// # Safety
    /// As for [`RawPinned::read`], and no copy reads it meanwhile.
    pub unsafe fn write(addr: usize, i: usize, value: u32) {
        // SAFETY: per the caller.
        unsafe { (addr as *mut u32).add(i).write_volatile(value) }
    }
}

impl Drop for RawPinned {
    fn drop(&mut self) {
        // Only once nothing copies into it any more (the tests join every
        // task that does first).
        let _ = self.dev.context().bind_to_thread();
        // SAFETY: allocated by cuMemHostAlloc in this context, freed once.
        let _ = unsafe { sys::cuMemFreeHost(self.ptr.cast()) };
    }
}

/// A deterministic pseudo-random fill in [-1, 1).
pub fn fill(len: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// Places consecutive GPU tasks on the two workers of a two-worker
/// runtime in turn, so that each runs on the other worker's stream than
/// the one before it.
///
/// A task spawned from outside the runtime goes to whichever worker takes
/// it, and a GPU task made ready by its producer (`gpu_dep`) goes to the
/// producer's own worker: left alone, a chain stays on one stream, where
/// the stream's order hides a missing cross-stream wait. So before each
/// spawn, a busy CPU task holds the worker that ran the previous task
/// (it is the only one free to take it, the other being held), and the
/// other worker is let go: the spawned task can only run there.
///
/// Spawn through [`Alternate::next`] from a thread that is not one of the
/// runtime's workers, and only tasks whose dependencies are already met
/// (a `gpu_dep` on the previous task is: its work was enqueued before the
/// worker that ran it could take the blocker).
pub struct Alternate<'a> {
    rt: &'a Runtime,
    held: Option<Blocker>,
}

struct Blocker {
    release: Arc<AtomicBool>,
    handle: JoinHandle<std::thread::ThreadId>,
    thread: std::thread::ThreadId,
}

impl Blocker {
    /// A CPU task that spins until released, once it runs.
    fn start(rt: &Runtime) -> Blocker {
        let started = Arc::new(std::sync::Mutex::new(None));
        let release = Arc::new(AtomicBool::new(false));
        let handle = rt.spawn({
            let (started, release) = (started.clone(), release.clone());
            move || {
                let me = std::thread::current().id();
                *started.lock().unwrap() = Some(me);
                while !release.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
                me
            }
        });
        let t0 = Instant::now();
        let thread = loop {
            if let Some(t) = *started.lock().unwrap() {
                break t;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "a blocking task did not start within 20 s"
            );
            std::thread::sleep(Duration::from_micros(50));
        };
        Blocker {
            release,
            handle,
            thread,
        }
    }

    fn release(self) -> std::thread::ThreadId {
        self.release.store(true, Ordering::Release);
        self.handle.join()
    }
}

impl<'a> Alternate<'a> {
    /// For `rt`, which must have exactly two workers.
    pub fn new(rt: &'a Runtime) -> Alternate<'a> {
        assert_eq!(rt.num_threads(), 2, "Alternate needs a two-worker runtime");
        Alternate { rt, held: None }
    }

    /// Spawns with `spawn` (a `dev.spawn...` call) on the worker that did
    /// not run the previous task.
    pub fn next<R>(&mut self, spawn: impl FnOnce() -> R) -> R {
        // Held first: the worker that ran the previous task (the only
        // free one) takes the blocker once that task has returned.
        let now_held = Blocker::start(self.rt);
        if let Some(before) = self.held.take() {
            let freed = before.release();
            assert_ne!(
                freed, now_held.thread,
                "both blockers ran on one worker: the runtime has more than two"
            );
        }
        self.held = Some(now_held);
        spawn()
    }

    /// Lets the held worker go.
    pub fn finish(mut self) {
        if let Some(b) = self.held.take() {
            b.release();
        }
    }
}

impl Drop for Alternate<'_> {
    fn drop(&mut self) {
        if let Some(b) = self.held.take() {
            b.release.store(true, Ordering::Release);
        }
    }
}

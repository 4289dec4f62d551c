//! Pinning worker threads to CPUs, for [`crate::Builder::pin_threads`].
//!
//! Why a runtime would: on some virtual machines the kernel wakes a parked
//! worker onto the CPU of the worker that woke it, which is busy, while
//! another CPU idles, and leaves it queued there until its periodic load
//! balancing moves it (about 4 ms). A pool that starts from parked workers
//! then runs on one CPU for its first milliseconds. A pinned worker can
//! only be woken on its own CPU.
//!
//! Workers are spread over the CPUs the building thread may run on (its
//! affinity mask, so `taskset` and cpusets are respected), continuing
//! round-robin from where the previous pinned runtime of the process
//! stopped, so two small pinned runtimes do not share their first CPU.

use crate::core::sync::{AtomicUsize, Ordering};
use std::io;
use std::thread::JoinHandle;

/// Where the next pinned worker of this process goes, as an index into
/// the allowed CPUs (a counter, not a protocol: any interleaving spreads
/// the workers).
static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

/// Pins each of `threads` to its own CPU of the calling thread's affinity
/// mask (round-robin when there are more threads than CPUs). Returns the
/// index of the thread that could not be pinned, the CPU, and why.
pub(crate) fn pin_all<T>(threads: &[JoinHandle<T>]) -> Result<(), (usize, usize, io::Error)> {
    let cpus = allowed_cpus().map_err(|e| (0, 0, e))?;
    let first = NEXT_SLOT.fetch_add(threads.len(), Ordering::Relaxed);
    for (index, thread) in threads.iter().enumerate() {
        let cpu = cpus[(first + index) % cpus.len()];
        pin(thread, cpu).map_err(|e| (index, cpu, e))?;
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: `cpu_set_t` is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable `cpu_set_t` of the size passed;
    // pid 0 is the calling thread.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE, the set's capacity.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect();
    if cpus.is_empty() {
        return Err(io::Error::other("the thread's affinity mask names no CPU"));
    }
    Ok(cpus)
}

#[cfg(target_os = "linux")]
fn pin<T>(thread: &JoinHandle<T>, cpu: usize) -> io::Result<()> {
    use std::os::unix::thread::JoinHandleExt;
    // SAFETY: `cpu_set_t` is a plain bit array; all zeroes is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` came from the allowed set, so it is below CPU_SETSIZE.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: the handle's thread has not been joined (we hold the handle),
    // so its pthread_t is valid; `set` is a valid `cpu_set_t` of the size
    // passed.
    let rc = unsafe {
        libc::pthread_setaffinity_np(
            thread.as_pthread_t(),
            std::mem::size_of::<libc::cpu_set_t>(),
            &set,
        )
    };
    // pthread functions return the error number instead of setting errno.
    match rc {
        0 => Ok(()),
        errno => Err(io::Error::from_raw_os_error(errno)),
    }
}

#[cfg(not(target_os = "linux"))]
fn allowed_cpus() -> io::Result<Vec<usize>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "pinning worker threads is supported on Linux only",
    ))
}

#[cfg(not(target_os = "linux"))]
fn pin<T>(_: &JoinHandle<T>, _: usize) -> io::Result<()> {
    unreachable!("allowed_cpus fails first on this platform")
}

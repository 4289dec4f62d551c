//! GPU nodes of graphs (feature `cuda`): a chain of them captured into a
//! CUDA graph once and replayed each run, its CPU successor released by the
//! completion, and failures reported per node. Without a GPU every test
//! says it skipped and passes; with `SELVEDGE_REQUIRE_GPU=1` a missing GPU
//! fails them. (The graph side of chains, with a fake device, is tested in
//! `src/graph/chain.rs` and runs everywhere.)
#![cfg(feature = "cuda")]

mod gpu_support;

use gpu_support::{device, one_at_a_time, Deadline, Kernels, RawPinned};
use selvedge::gpu::cudarc::driver::{sys, DriverError};
use selvedge::gpu::GpuError;
use selvedge::{Graph, GraphError, Runtime};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const SENTINEL: u32 = 0xDEAD_BEEF; // odd: no value written below is

/// What a check node saw: how long after its run's start it ran, and the
/// first wrong elements it read (index, value).
type Seen = (Duration, Vec<(usize, u32)>);

/// prepare (CPU: new input, output reset to sentinels) -> upload (GPU:
/// input to `a`, then a 20 ms spin) -> copy (GPU: `a` to `b`) -> download
/// (GPU: `b` to the output) -> check (CPU: reads the output with no
/// synchronization). Five runs, then a change to the graph and two more.
/// The three GPU nodes form one chain: their closures are called when it
/// is captured (the first run, and the first after the change), never
/// otherwise; each run must still move that run's input (the replay does
/// the work), and `check` must see all of it (the completion came after
/// the download, not before: sentinels, or a check before the spin could
/// have ended, say otherwise).
#[test]
fn a_gpu_chain_is_captured_once_and_each_run_replays_it_before_its_cpu_successor() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(4).build().unwrap();
    let Some(dev) = device(&rt, "gpu chain replay") else {
        return;
    };
    let _deadline = Deadline::new("gpu chain replay", Duration::from_secs(120));
    // SAFETY: the buffers below are made after this and used only by this
    // test's nodes, which the graph orders; they are freed after the last
    // run. (`Device::open_in` gives this device a context of its own.)
    unsafe { dev.context().disable_event_tracking() };
    let kernels = Kernels::load(&dev);
    let n = 1 << 14;
    let bytes = n * std::mem::size_of::<u32>();
    let input = RawPinned::new(&dev, n, 0);
    let output = RawPinned::new(&dev, n, SENTINEL);
    let (input_at, output_at) = (input.addr(), output.addr());
    // Plain device memory (cuMemAlloc): the graph's lane is another
    // stream than any task's, and memory from a stream-ordered allocation
    // (cudarc's `alloc_zeros`) on a task's stream would reach it ordered
    // only by the task's completion, which compute-sanitizer does not see.
    let a = RawDevice::new(&dev, n);
    let b = RawDevice::new(&dev, n);
    let (pa, pb) = (a.ptr, b.ptr);
    let run = AtomicU32::new(0);
    let calls = [
        AtomicUsize::new(0),
        AtomicUsize::new(0),
        AtomicUsize::new(0),
    ];
    let started = Mutex::new(Instant::now());
    let seen: Mutex<Vec<Seen>> = Mutex::new(Vec::new());
    let spin = Duration::from_millis(20);
    let expected = |r: u32, i: usize| (i as u32).wrapping_mul(3).wrapping_add(2 * r);
    let mut g = Graph::new();
    let prepare = g.node_named("prepare", || {
        let r = run.load(Relaxed);
        for i in 0..n {
            // SAFETY: live until the graph is dropped; no copy reads or
            // writes them while this node runs (the graph orders them).
            unsafe {
                RawPinned::write(input_at, i, expected(r, i));
                RawPinned::write(output_at, i, SENTINEL);
            }
        }
        *started.lock().unwrap() = Instant::now();
    });
    let upload = g.gpu_node_named("upload", &dev, |s| {
        calls[0].fetch_add(1, Relaxed);
        // SAFETY: `input` and `a` hold `n` u32s and outlive the graph.
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(pa, input_at as *const c_void, bytes, s.stream().cu_stream())
        }
        .result()?;
        Ok(kernels.spin(s.stream(), spin)?)
    });
    let copy = g.gpu_node_named("copy", &dev, |s| {
        calls[1].fetch_add(1, Relaxed);
        // SAFETY: `a` and `b` hold `n` u32s and outlive the graph.
        Ok(unsafe { kernels.spin_copy(s.stream(), pa, pb, n, Duration::ZERO) }?)
    });
    let download = g.gpu_node_named("download", &dev, |s| {
        calls[2].fetch_add(1, Relaxed);
        // SAFETY: `b` and `output` hold `n` u32s and outlive the graph.
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(output_at as *mut c_void, pb, bytes, s.stream().cu_stream())
        }
        .result()?;
        Ok(())
    });
    let check = g.node_named("check", || {
        let waited = started.lock().unwrap().elapsed();
        let r = run.load(Relaxed);
        // SAFETY: live until the graph is dropped.
        let wrong: Vec<(usize, u32)> = (0..n)
            .map(|i| (i, unsafe { RawPinned::read(output_at, i) }))
            .filter(|&(i, v)| v != expected(r, i))
            .take(4)
            .collect();
        seen.lock().unwrap().push((waited, wrong));
    });
    g.precede(prepare, upload);
    g.precede(upload, copy);
    g.precede(copy, download);
    g.precede(download, check);
    for r in 0..5 {
        run.store(r, Relaxed);
        rt.run_graph(&mut g).unwrap();
    }
    let captured: Vec<usize> = calls.iter().map(|c| c.load(Relaxed)).collect();
    assert_eq!(
        captured,
        [1, 1, 1],
        "the chain is captured once, on the first run"
    );
    // A change to the graph: the chain is captured again on the next run.
    g.node(|| {});
    for r in 5..7 {
        run.store(r, Relaxed);
        rt.run_graph(&mut g).unwrap();
    }
    drop(g);
    let captured: Vec<usize> = calls.iter().map(|c| c.load(Relaxed)).collect();
    assert_eq!(
        captured,
        [2, 2, 2],
        "a changed graph captures its chains again"
    );
    for (r, (waited, wrong)) in seen.into_inner().unwrap().into_iter().enumerate() {
        assert!(
            wrong.is_empty(),
            "run {r}: the CPU node after the chain read its output before the chain's work was complete: {wrong:x?} (0xdeadbeef: not yet written)"
        );
        assert!(
            waited >= spin - Duration::from_millis(2),
            "run {r}: the CPU node after the chain ran {waited:?} after the input was written, before the chain's {spin:?} spin could have ended"
        );
    }
    drop((a, b));
}

/// `len` `u32`s of device memory from `cuMemAlloc`, freed after a host
/// wait on the whole context.
struct RawDevice {
    ptr: sys::CUdeviceptr,
    dev: selvedge::gpu::Device,
}

impl RawDevice {
    fn new(dev: &selvedge::gpu::Device, len: usize) -> RawDevice {
        dev.context()
            .bind_to_thread()
            .expect("making the device's context current");
        let mut ptr: sys::CUdeviceptr = 0;
        // SAFETY: a valid out-pointer, in the current context.
        unsafe { sys::cuMemAlloc_v2(&mut ptr, len * std::mem::size_of::<u32>()) }
            .result()
            .expect("cuMemAlloc");
        RawDevice {
            ptr,
            dev: dev.clone(),
        }
    }
}

impl Drop for RawDevice {
    fn drop(&mut self) {
        let _ = self.dev.context().bind_to_thread();
        // SAFETY: no arguments; the context is current on this thread.
        let _ = unsafe { sys::cuCtxSynchronize() };
        // SAFETY: allocated by cuMemAlloc in this context, freed once, and
        // nothing enqueued uses it once the context is idle.
        let _ = unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

/// A chain whose middle node panics, then returns an error, then works:
/// each failure is reported at that node with its text, the chain's other
/// nodes and the node after it skipped, and the graph captures the chain
/// again on the next run.
#[test]
fn a_failing_gpu_node_fails_its_chain_and_the_next_run_captures_it_again() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let Some(dev) = device(&rt, "gpu chain failure") else {
        return;
    };
    let _deadline = Deadline::new("gpu chain failure", Duration::from_secs(60));
    let kernels = Kernels::load(&dev);
    let attempt = AtomicUsize::new(0);
    let after_ran = AtomicBool::new(false);
    let mut g = Graph::new();
    let first = g.gpu_node_named("first", &dev, |s| {
        Ok(kernels.spin(s.stream(), Duration::from_micros(50))?)
    });
    let middle = g.gpu_node_named("middle", &dev, |_s| match attempt.fetch_add(1, Relaxed) {
        0 => panic!("middle broke"),
        1 => Err(GpuError::Driver(DriverError(
            sys::CUresult::CUDA_ERROR_INVALID_VALUE,
        ))),
        _ => Ok(()),
    });
    let last = g.gpu_node_named("last", &dev, |s| {
        Ok(kernels.spin(s.stream(), Duration::from_micros(50))?)
    });
    let after = g.node_named("after", || after_ran.store(true, Relaxed));
    g.precede(first, middle);
    g.precede(middle, last);
    g.precede(last, after);
    for expected in ["middle broke", "CUDA driver error"] {
        match rt.run_graph(&mut g) {
            Err(GraphError::Failed {
                panicked,
                skipped_names,
                ..
            }) => {
                assert_eq!(panicked.len(), 1);
                assert_eq!(panicked[0].name, "middle");
                let message = panicked[0].message().unwrap_or("");
                assert!(
                    message.contains(expected),
                    "{message:?} should say {expected:?}"
                );
                assert_eq!(skipped_names, ["first", "last", "after"]);
            }
            other => panic!("expected the chain to fail, got {other:?}"),
        }
        assert!(!after_ran.load(Relaxed));
    }
    rt.run_graph(&mut g).unwrap();
    assert!(after_ran.load(Relaxed));
    assert_eq!(
        attempt.load(Relaxed),
        3,
        "each failed capture is tried again"
    );
}

/// A graph with a GPU node run on a runtime other than the device's fails
/// that node, saying so, and does not hang.
#[test]
fn a_gpu_node_run_on_another_runtime_fails_saying_so() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let Some(dev) = device(&rt, "gpu node on another runtime") else {
        return;
    };
    let _deadline = Deadline::new("gpu node on another runtime", Duration::from_secs(60));
    let other = Runtime::builder().num_threads(2).build().unwrap();
    let mut g = Graph::new();
    g.gpu_node_named("elsewhere", &dev, |_s| Ok(()));
    match other.run_graph(&mut g) {
        Err(GraphError::Failed { panicked, .. }) => {
            let message = panicked[0].message().unwrap_or("");
            assert!(message.contains("another runtime"), "{message:?}");
        }
        other => panic!("expected the node to fail, got {other:?}"),
    }
    rt.run_graph(&mut g).unwrap();
}

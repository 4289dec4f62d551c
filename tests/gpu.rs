//! GPU tasks (feature `cuda`). Without a GPU every test says it skipped and
//! passes; with `SELVEDGE_REQUIRE_GPU=1` a missing GPU fails them.
//!
//! The GPU bundle also runs this binary under compute-sanitizer's memcheck
//! (one test at a time).
#![cfg(feature = "cuda")]

mod gpu_support;

use gpu_support::{device, fill, one_at_a_time, Alternate, Deadline, Kernels, RawPinned};
use selvedge::gpu::cudarc::driver::{sys, DevicePtr, DevicePtrMut};
use selvedge::gpu::half::bf16;
use selvedge::gpu::{gemm, BatchedGemm, Device, GpuDep, GpuError, GpuHandle, PinnedBuffer};
use selvedge::{parallel_for, scope, spawn_delayed, LoopPromise, Promise, Runtime};
use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Row-major batched product on the CPU, in f64.
fn reference(g: BatchedGemm, a: &[f32], b: &[f32]) -> Vec<f64> {
    let mut c = vec![0.0f64; g.c_len()];
    for p in 0..g.batch {
        let (a, b) = (&a[p * g.m * g.k..], &b[p * g.k * g.n..]);
        for i in 0..g.m {
            for j in 0..g.n {
                c[p * g.m * g.n + i * g.n + j] = (0..g.k)
                    .map(|l| f64::from(a[i * g.k + l]) * f64::from(b[l * g.n + j]))
                    .sum();
            }
        }
    }
    c
}

fn max_error(got: impl Iterator<Item = f64>, want: &[f64]) -> f64 {
    got.zip(want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0, f64::max)
}

#[test]
fn opening_without_a_gpu_is_an_error_not_a_panic() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    match Device::open_in(&rt, 0) {
        Ok(dev) => assert_eq!(dev.num_streams(), 2),
        Err(e) => {
            let text = e.to_string();
            assert!(!text.is_empty());
            eprintln!("no device: {text}");
        }
    }
    // An ordinal no machine has.
    match Device::open_in(&rt, 1 << 20) {
        Err(GpuError::NoDevice { ordinal, .. }) => assert_eq!(ordinal, 1 << 20),
        Err(GpuError::NoDriver { .. } | GpuError::NoBlas { .. }) => {}
        Err(e) => panic!("unexpected error: {e}"),
        Ok(_) => panic!("opened device 2^20"),
    }
}

#[test]
fn batched_sgemm_and_bf16_gemm_match_the_cpu() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(4).build().unwrap();
    let Some(dev) = device(&rt, "batched gemm") else {
        return;
    };
    for g in [
        BatchedGemm {
            batch: 7,
            m: 33,
            n: 17,
            k: 65,
        },
        BatchedGemm {
            batch: 16,
            m: 64,
            n: 64,
            k: 64,
        },
        BatchedGemm {
            batch: 2,
            m: 256,
            n: 128,
            k: 512,
        },
    ] {
        let (a, b) = (fill(g.a_len(), 1), fill(g.b_len(), 2));
        let want = reference(g, &a, &b);
        let (a2, b2) = (a.clone(), b.clone());
        let got = dev
            .spawn(move |s| {
                let a = s.stream().clone_htod(&a2)?;
                let b = s.stream().clone_htod(&b2)?;
                let mut c = s.stream().alloc_zeros::<f32>(g.c_len())?;
                gemm(s.blas(), g, &a, &b, &mut c)?;
                s.download(&c)
            })
            .join()
            .unwrap();
        let err = max_error(got.as_slice().unwrap().iter().map(|&x| f64::from(x)), &want);
        // cuBLAS sums in an order of its own (it uses TF32 for f32 only
        // when asked to): a loose bound, which still catches any layout or
        // transposition mistake (those give errors of order 1).
        assert!(
            err < 2e-2 * (g.k as f64).sqrt(),
            "{g:?}: f32 max error {err}"
        );

        let (ah, bh): (Vec<bf16>, Vec<bf16>) = (
            a.iter().map(|&x| bf16::from_f32(x)).collect(),
            b.iter().map(|&x| bf16::from_f32(x)).collect(),
        );
        let got = dev
            .spawn(move |s| {
                let a = s.stream().clone_htod(&ah)?;
                let b = s.stream().clone_htod(&bh)?;
                let mut c = s.stream().alloc_zeros::<bf16>(g.c_len())?;
                gemm(s.blas(), g, &a, &b, &mut c)?;
                s.download(&c)
            })
            .join()
            .unwrap();
        let err = max_error(
            got.as_slice()
                .unwrap()
                .iter()
                .map(|x| f64::from(x.to_f32())),
            &want,
        );
        assert!(
            err < 0.1 * (g.k as f64).sqrt(),
            "{g:?}: bf16 max error {err}"
        );
    }
}

#[test]
fn callbacks_fulfill_promises_under_load() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(8).build().unwrap();
    let Some(dev) = device(&rt, "callbacks under load") else {
        return;
    };
    let tasks = 4000;
    let after = Arc::new(AtomicUsize::new(0));
    let handles: Vec<(GpuHandle<_>, _)> = rt.run(|| {
        (0..tasks)
            .map(|i| {
                let h = dev.spawn(move |s| {
                    let x = s.stream().clone_htod(&[i as u32; 64])?;
                    s.download(&x)
                });
                let after = after.clone();
                let cpu = spawn_delayed([h.dep()], move || {
                    after.fetch_add(1, Relaxed);
                });
                (h, cpu)
            })
            .collect()
    });
    for (i, (h, cpu)) in handles.into_iter().enumerate() {
        let host = h.join().unwrap();
        assert!(
            host.as_slice().unwrap().iter().all(|&x| x == i as u32),
            "task {i}"
        );
        cpu.join();
    }
    assert_eq!(after.load(Relaxed), tasks);
    rt.sync_root();
}

#[test]
fn a_gpu_chain_runs_ahead_on_the_device_and_keeps_its_order() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(4).build().unwrap();
    let Some(dev) = device(&rt, "gpu chain") else {
        return;
    };
    let len = 1 << 16;
    let links = 300;
    let source = fill(len, 7);
    // Every link's buffer, allocated up front so that a link can be
    // enqueued before its producer's callback.
    let buffers: Arc<Vec<Mutex<_>>> = Arc::new(
        dev.spawn(move |s| {
            (0..=links)
                .map(|_| Ok(Mutex::new(s.stream().alloc_zeros::<f32>(len)?)))
                .collect::<Result<Vec<_>, GpuError>>()
        })
        .join()
        .unwrap(),
    );
    let src = source.clone();
    let bufs = buffers.clone();
    let mut last = dev.spawn(move |s| {
        s.stream()
            .memcpy_htod(&src, &mut *bufs[0].lock().unwrap())?;
        Ok(())
    });
    let mut handles = Vec::new();
    for i in 1..=links {
        let bufs = buffers.clone();
        let next = dev.spawn_delayed([last.gpu_dep()], move |s| {
            let from = bufs[i - 1].lock().unwrap();
            s.stream()
                .memcpy_dtod(&*from, &mut *bufs[i].lock().unwrap())?;
            Ok(())
        });
        handles.push(std::mem::replace(&mut last, next));
    }
    let bufs = buffers.clone();
    let out = dev
        .spawn_delayed([last.gpu_dep()], move |s| {
            s.download(&*bufs[links].lock().unwrap())
        })
        .join()
        .unwrap();
    assert_eq!(
        out.as_slice().unwrap(),
        &source[..],
        "the chain lost its order"
    );
    last.join().unwrap();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn a_failing_task_reports_its_error_and_breaks_its_dependents() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let Some(dev) = device(&rt, "failing task") else {
        return;
    };
    let failing = dev.spawn(|s| -> Result<(), GpuError> {
        // A copy into a buffer that is too small: cudarc asserts, so use
        // an error of our own instead.
        let _ = s;
        Err(GpuError::StreamCapturing)
    });
    let cpu = spawn_delayed([failing.dep()], || ());
    let gpu = dev.spawn_delayed([failing.gpu_dep()], |_| Ok(()));
    assert!(matches!(failing.join(), Err(GpuError::StreamCapturing)));
    assert!(cpu.try_join().unwrap_err().is_cancelled());
    // The consumer's own handle reports the cancellation.
    assert!(gpu.try_join().unwrap_err().is_cancelled());
}

#[test]
fn a_device_loop_fulfills_each_iteration_from_its_callback() {
    let _one = one_at_a_time();
    use selvedge::gpu::cudarc::driver::PinnedHostSlice;
    let rt = Runtime::builder().num_threads(4).build().unwrap();
    let Some(dev) = device(&rt, "device loop") else {
        return;
    };
    let n = 256;
    let len = 4096;
    // Pinned buffers allocated up front, one per iteration.
    let hosts: Vec<Mutex<PinnedHostSlice<u32>>> = (0..n)
        .map(|_| {
            // SAFETY: written only by the copies below, read after them.
            Mutex::new(unsafe { dev.context().alloc_pinned_with_flags::<u32>(len, 0) }.unwrap())
        })
        .collect();
    let done = LoopPromise::new(0..n);
    let checked = AtomicUsize::new(0);
    rt.run(|| {
        scope(|s| {
            s.spawn(|_| {
                parallel_for(0..n).depends_on_each(&done).for_each(|i| {
                    let host = hosts[i].lock().unwrap();
                    assert!(
                        host.as_slice().unwrap().iter().all(|&x| x == i as u32),
                        "iteration {i}"
                    );
                    checked.fetch_add(1, Relaxed);
                });
            });
            dev.parallel_for(0..n, &done, |s, i| {
                let x = s.stream().clone_htod(&vec![i as u32; len])?;
                s.stream().memcpy_dtoh(&x, &mut *hosts[i].lock().unwrap())?;
                Ok(())
            })
            .unwrap();
        })
    });
    assert_eq!(checked.load(Relaxed), n);
}

/// The message of a panic payload (a `String` or a `&str`).
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else {
        "<a panic payload that is not text>".to_string()
    }
}

/// A chain of GPU tasks, each on the other worker's stream than the one
/// before it, ordered by nothing but the crate's `cuStreamWaitEvent` on the
/// producer's event: cudarc's own event tracking (which makes a read of a
/// `CudaSlice` on one stream wait for its last write on another) is turned
/// off. Each link reads its producer's buffer first thing on its stream and
/// writes its own buffer only after a 40 ms spin, and the links are
/// enqueued while their producer's work is still running: a consumer whose
/// stream did not wait on the device would read its producer's buffer
/// before the producer wrote it (zeros), and the chain's end would not hold
/// the source.
#[test]
fn a_chain_across_streams_is_ordered_by_the_crates_event_waits_alone() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let Some(dev) = device(&rt, "chain across streams") else {
        return;
    };
    let _deadline = Deadline::new("chain across streams", Duration::from_secs(120));
    // SAFETY: the buffers below are created after this call, so cudarc
    // tracks none of their uses: the test orders them (through the crate's
    // waits, the point of the test), and frees them only once every task
    // using them was joined (their work complete). `CudaContext::new` gives
    // each `Device` a context object of its own, so the other tests'
    // devices keep their tracking. (It need not precede the streams, which
    // the device made when it opened: cudarc decides per buffer, when the
    // buffer is allocated, and checks the flag again on each use.)
    unsafe { dev.context().disable_event_tracking() };
    assert!(!dev.context().is_event_tracking());
    let kernels = Kernels::load(&dev);
    let len = 1 << 16;
    let links = 12;
    let spin = Duration::from_millis(40);
    let source = fill(len, 11);
    let src = source.clone();
    // bufs[0] holds the source; bufs[k] (what link k writes) and tmps[k]
    // (what it read) start as zeros. Complete once this task is joined.
    type Buffers = Arc<Vec<Mutex<selvedge::gpu::cudarc::driver::CudaSlice<f32>>>>;
    let (bufs, tmps): (Buffers, Buffers) = dev
        .spawn(move |s| {
            let mut bufs = vec![Mutex::new(s.stream().clone_htod(&src)?)];
            let mut tmps = vec![Mutex::new(s.stream().alloc_zeros::<f32>(1)?)];
            for _ in 1..=links {
                bufs.push(Mutex::new(s.stream().alloc_zeros::<f32>(len)?));
                tmps.push(Mutex::new(s.stream().alloc_zeros::<f32>(len)?));
            }
            // A host wait on the allocations (no tracking orders them for
            // the other stream): compute-sanitizer's stream-ordered race
            // tracking sees it, and no use on the other stream is reported
            // as one before the allocation.
            s.stream().synchronize()?;
            Ok((Arc::new(bufs), Arc::new(tmps)))
        })
        .join()
        .unwrap();
    let mut alternate = Alternate::new(&rt);
    // Each link's value: its stream, whether its producer's work was
    // already complete when it was enqueued, and when it ran.
    let mut handles: Vec<GpuHandle<(usize, bool, Duration)>> = Vec::new();
    let start = Instant::now();
    for k in 1..=links {
        let producer: Vec<GpuDep> = handles.last().map(GpuHandle::gpu_dep).into_iter().collect();
        let producer_done = handles.last().map(GpuHandle::dep);
        let (bufs, tmps) = (bufs.clone(), tmps.clone());
        let h = alternate.next(|| {
            dev.spawn_delayed(producer, move |s| {
                let producer_was_done = producer_done.is_some_and(|d| d.is_fulfilled());
                let ran = start.elapsed();
                let stream = s.stream();
                // Read the producer's output now (in this stream's order)...
                stream.memcpy_dtod(&*bufs[k - 1].lock().unwrap(), &mut *tmps[k].lock().unwrap())?;
                kernels.spin(stream, spin)?;
                // ... and write this link's output 40 ms later.
                stream.memcpy_dtod(&*tmps[k].lock().unwrap(), &mut *bufs[k].lock().unwrap())?;
                Ok((stream.cu_stream() as usize, producer_was_done, ran))
            })
        });
        handles.push(h);
    }
    alternate.finish();
    let results: Vec<(usize, bool, Duration)> =
        handles.into_iter().map(|h| h.join().unwrap()).collect();
    for k in 1..links {
        assert_ne!(
            results[k - 1].0,
            results[k].0,
            "links {k} and {} ran on one stream: the test did not cross streams",
            k + 1
        );
    }
    // Link k + 1 is enqueued within a millisecond or so of link k, while
    // each link's work takes 40 ms on the device: the host runs ahead.
    let ahead = results[1..]
        .iter()
        .filter(|(_, was_done, _)| !was_done)
        .count();
    let ran: Vec<String> = results
        .iter()
        .map(|(_, _, at)| format!("{:.1}", at.as_secs_f64() * 1e3))
        .collect();
    eprintln!(
        "chain across streams: {ahead} of {} links enqueued while their producer's work was running",
        links - 1
    );
    assert!(
        ahead >= (links - 1) / 2,
        "only {ahead} of {} links were enqueued before their producer's work was complete: a gpu_dep consumer must be enqueued as soon as its producer's work is (and otherwise this test does not test the device-side wait); the links ran at [{}] ms, each producer's work taking {spin:?}",
        links - 1,
        ran.join(", ")
    );
    // Every task above was joined: its work is complete.
    let bufs2 = bufs.clone();
    let outs: Vec<PinnedBuffer<f32>> = dev
        .spawn(move |s| {
            bufs2
                .iter()
                .map(|b| s.download(&*b.lock().unwrap()))
                .collect::<Result<Vec<_>, _>>()
        })
        .join()
        .unwrap();
    for (k, out) in outs.iter().enumerate() {
        assert!(
            out.as_slice().unwrap() == &source[..],
            "link {k}'s output is not the source: a link read its producer's buffer before the producer wrote it (its stream did not wait for the producer's event)"
        );
    }
    // Untracked buffers are freed on the stream that made them, with no
    // wait for the other stream's reads: a host wait on the whole device
    // first, which compute-sanitizer's stream-ordered race tracking sees
    // (the joins above, through host functions, it does not).
    dev.context().synchronize().unwrap();
    drop((bufs, tmps));
}

/// A GPU task spins 30 ms on the device and then copies known values into
/// raw pinned memory (filled with a sentinel first); a CPU task behind its
/// `dep()` reads that memory with no synchronization at all. The callback
/// that releases the CPU task must come after the copy: if the completion
/// did not wait for the task's work (no wait on its event, or an event
/// recorded before the work), the CPU task would start at once and read
/// sentinels, and before the spin could have ended.
#[test]
fn a_cpu_dependent_runs_only_once_the_tasks_device_work_is_complete() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(4).build().unwrap();
    let Some(dev) = device(&rt, "callback timing") else {
        return;
    };
    let _deadline = Deadline::new("callback timing", Duration::from_secs(60));
    let kernels = Kernels::load(&dev);
    const SENTINEL: u32 = 0xDEAD_BEEF; // odd: no value below is
    let n = 1 << 16;
    let expected = |i: usize| (i as u32).wrapping_mul(2);
    let values: Vec<u32> = (0..n).map(expected).collect();
    let src = dev
        .spawn(move |s| Ok(s.stream().clone_htod(&values)?))
        .join()
        .unwrap();
    let host = RawPinned::new(&dev, n, SENTINEL);
    let addr = host.addr();
    let spin = Duration::from_millis(30);
    let start = Instant::now();
    let h = dev.spawn(move |s| {
        let stream = s.stream();
        kernels.spin(stream, spin)?;
        {
            let (ptr, _read) = src.device_ptr(stream);
            // SAFETY: `addr` holds `n` u32s and outlives the copy (the test
            // joins this task before freeing it); `src` holds `n` u32s.
            unsafe {
                sys::cuMemcpyDtoHAsync_v2(
                    addr as *mut c_void,
                    ptr,
                    n * std::mem::size_of::<u32>(),
                    stream.cu_stream(),
                )
            }
            .result()?;
        }
        s.keep_alive(src);
        Ok(())
    });
    let reader = rt.spawn_delayed([h.dep()], move || {
        let waited = start.elapsed();
        // SAFETY: the memory lives until this task is joined.
        let wrong: Vec<(usize, u32)> = (0..n)
            .map(|i| (i, unsafe { RawPinned::read(addr, i) }))
            .filter(|&(i, v)| v != expected(i))
            .take(4)
            .collect();
        (waited, wrong)
    });
    let (waited, wrong) = reader.join();
    h.join().unwrap();
    assert!(
        wrong.is_empty(),
        "the CPU task read the copy's destination before the copy was complete: {wrong:x?} (0xdeadbeef: not yet written)"
    );
    assert!(
        waited >= spin - Duration::from_millis(2),
        "the CPU task started {waited:?} after the spawn, before the device's {spin:?} spin could have ended"
    );
}

/// [`a_cpu_dependent_runs_only_once_the_tasks_device_work_is_complete`] for
/// a device loop: each iteration spins 20 ms and then copies its values to
/// raw pinned memory; the `depends_on_each` loop behind it reads its
/// iteration's memory with no synchronization. An iteration's promise
/// fulfilled before its work is complete (a completion not waiting for the
/// iteration's record of the lane's shared event) shows as sentinels read,
/// or an iteration run before any spin could have ended.
#[test]
fn a_device_loop_iteration_is_fulfilled_only_once_its_work_is_complete() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(4).build().unwrap();
    let Some(dev) = device(&rt, "device loop callback timing") else {
        return;
    };
    let _deadline = Deadline::new("device loop callback timing", Duration::from_secs(60));
    let kernels = Kernels::load(&dev);
    const SENTINEL: u32 = 0xDEAD_BEEF;
    let iterations = 16;
    let len = 4096;
    let expected = |k: usize| (k as u32).wrapping_mul(2);
    let values: Vec<u32> = (0..iterations * len).map(expected).collect();
    let src = dev
        .spawn(move |s| Ok(s.stream().clone_htod(&values)?))
        .join()
        .unwrap();
    let host = RawPinned::new(&dev, iterations * len, SENTINEL);
    let addr = host.addr();
    let spin = Duration::from_millis(20);
    let done = LoopPromise::new(0..iterations);
    let waited = Mutex::new(vec![None; iterations]);
    let wrong = Mutex::new(Vec::new());
    let start = Instant::now();
    rt.run(|| {
        scope(|sc| {
            sc.spawn(|_| {
                parallel_for(0..iterations)
                    .depends_on_each(&done)
                    .for_each(|i| {
                        waited.lock().unwrap()[i] = Some(start.elapsed());
                        for j in i * len..(i + 1) * len {
                            // SAFETY: the memory outlives the loop.
                            let v = unsafe { RawPinned::read(addr, j) };
                            if v != expected(j) {
                                wrong.lock().unwrap().push((i, j, v));
                                break;
                            }
                        }
                    });
            });
            dev.parallel_for(0..iterations, &done, |s, i| {
                let stream = s.stream();
                kernels.spin(stream, spin)?;
                let view = src.slice(i * len..(i + 1) * len);
                let (ptr, _read) = view.device_ptr(stream);
                // SAFETY: iteration `i`'s part of the memory, which outlives
                // the loop; the view holds `len` u32s.
                unsafe {
                    sys::cuMemcpyDtoHAsync_v2(
                        (addr + i * len * std::mem::size_of::<u32>()) as *mut c_void,
                        ptr,
                        len * std::mem::size_of::<u32>(),
                        stream.cu_stream(),
                    )
                }
                .result()?;
                Ok(())
            })
            .unwrap();
        })
    });
    let wrong = wrong.into_inner().unwrap();
    assert!(
        wrong.is_empty(),
        "iterations read their memory before its copy was complete (iteration, index, value): {wrong:x?}"
    );
    for (i, w) in waited.into_inner().unwrap().into_iter().enumerate() {
        let w = w.unwrap_or_else(|| panic!("iteration {i} never ran"));
        assert!(
            w >= spin - Duration::from_millis(2),
            "iteration {i} ran {w:?} after the start, before its {spin:?} spin could have ended"
        );
    }
    // `src` was read on several streams, and cudarc's free waits only for
    // the read it recorded last: the loop's end (through host functions)
    // ordered the rest, which compute-sanitizer's stream-ordered race
    // tracking does not see, so a host wait on the whole device first.
    dev.context().synchronize().unwrap();
    drop(src);
}

/// A buffer shared by GPU tasks on both workers' streams, each handing its
/// `Arc` clone to `keep_alive`, while the test drops its own handle as soon
/// as the readers are enqueued and at once allocates and fills buffers of
/// the same size on the shared buffer's stream. Each reader copies the
/// buffer only after a spin (100, 75, 50, 25 ms, the earliest reader
/// reading last).
///
/// Were the clones dropped when the closures return (no `keep_alive`, or
/// one that drops at enqueue), the test's drop would be the last: cudarc
/// would free the buffer on its stream behind the last reader it recorded
/// (the 25 ms one) only, the stream-ordered allocator would hand the block
/// to the refill on that same stream, and the readers still spinning would
/// copy -7.0s. (The GPU bundle also runs this binary under
/// compute-sanitizer's memcheck; a read of memory returned to the
/// stream-ordered pool is a use after free it reports only with its
/// stream-ordered race tracking, `--track-stream-ordered-races all`, where
/// its version has it: the refill is what makes the bug visible here.)
#[test]
fn a_shared_buffer_dropped_at_once_outlives_its_readers_on_other_streams() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let Some(dev) = device(&rt, "keep_alive") else {
        return;
    };
    let _deadline = Deadline::new("keep_alive", Duration::from_secs(60));
    let kernels = Kernels::load(&dev);
    let len = 1 << 18;
    let values = fill(len, 5);
    // On a stream of its own, which no task uses: its free waits for
    // nothing but that stream's work and the last read cudarc recorded.
    let side = dev.context().new_stream().unwrap();
    let shared = Arc::new(side.clone_htod(&values).unwrap());
    side.synchronize().unwrap();
    let spins = [100, 75, 50, 25].map(Duration::from_millis);
    let mut alternate = Alternate::new(&rt);
    let readers: Vec<GpuHandle<(usize, PinnedBuffer<f32>)>> = spins
        .iter()
        .map(|&spin| {
            let shared = Arc::clone(&shared);
            alternate.next(|| {
                dev.spawn(move |s| {
                    let stream = s.stream();
                    let mut out = stream.alloc_zeros::<f32>(len)?;
                    {
                        let (src, _read) = shared.device_ptr(stream);
                        let (dst, _write) = out.device_ptr_mut(stream);
                        // SAFETY: both hold `len` f32s; `shared` is kept
                        // alive below until this work is complete, `out`
                        // is freed by cudarc behind it on this stream.
                        unsafe { kernels.spin_copy(stream, src, dst, len, spin)? };
                    }
                    s.keep_alive(shared);
                    let host = s.download(&out)?;
                    Ok((stream.cu_stream() as usize, host))
                })
            })
        })
        .collect();
    alternate.finish();
    // Wait until every reader's closure has returned and its work is
    // enqueued (a GPU task behind them all starts then, long before their
    // spins end), so that a clone dropped too early is gone by now.
    let enqueued = Promise::new();
    let probe = dev.spawn_delayed(readers.iter().map(GpuHandle::gpu_dep), {
        let enqueued = enqueued.clone();
        move |_| {
            enqueued.fulfill();
            Ok(())
        }
    });
    rt.spawn_delayed([enqueued.dep()], || ()).join();
    drop(shared);
    // What would take the buffer's memory if it were freed now.
    let refills: Vec<_> = (0..4)
        .map(|_| side.clone_htod(&vec![-7.0f32; len]).unwrap())
        .collect();
    let mut streams = Vec::new();
    for (r, h) in readers.into_iter().enumerate() {
        let (stream, host) = h.join().unwrap();
        streams.push(stream);
        let got = host.as_slice().unwrap();
        let bad = got.iter().zip(&values).filter(|(g, v)| g != v).count();
        assert_eq!(
            bad, 0,
            "reader {r} (spin {:?}) copied {bad} wrong values (e.g. {:?}): the shared buffer was freed and reused before its read",
            spins[r],
            got.iter().zip(&values).find(|(g, v)| g != v).map(|(g, _)| *g)
        );
    }
    probe.join().unwrap();
    for r in 1..streams.len() {
        assert_ne!(
            streams[r - 1],
            streams[r],
            "readers {} and {r} shared a stream",
            r - 1
        );
    }
    drop(refills);
    side.synchronize().unwrap();
}

/// A device loop whose iteration 3 fails (returns an error, or panics)
/// while a `depends_on_each` loop waits on every iteration: the failed
/// iteration's promise must be broken, so the waiting loop reports
/// iteration 3 cancelled (and runs every other iteration) instead of
/// waiting forever for a promise nobody will fulfill (the deadline aborts
/// the process then); the device loop returns the error, or resumes the
/// panic.
#[test]
fn a_failing_device_loop_iteration_cancels_what_waits_on_it() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(4).build().unwrap();
    let Some(dev) = device(&rt, "failing device loop iteration") else {
        return;
    };
    let _deadline = Deadline::new("failing device loop iteration", Duration::from_secs(60));
    let kernels = Kernels::load(&dev);
    let n = 16;
    for panics in [false, true] {
        let done = LoopPromise::new(0..n);
        let ran = Mutex::new(Vec::new());
        let device_loop = Mutex::new(None);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            rt.run(|| {
                scope(|sc| {
                    sc.spawn(|_| {
                        parallel_for(0..n)
                            .depends_on_each(&done)
                            .for_each(|i| ran.lock().unwrap().push(i));
                    });
                    let result = catch_unwind(AssertUnwindSafe(|| {
                        dev.parallel_for(0..n, &done, |s, i| {
                            kernels.spin(s.stream(), Duration::from_millis(2))?;
                            if i == 3 {
                                if panics {
                                    panic!("iteration 3 panics on purpose");
                                }
                                return Err(GpuError::StreamCapturing);
                            }
                            Ok(())
                        })
                    }));
                    *device_loop.lock().unwrap() = Some(result);
                })
            })
        }));
        let what = if panics { "panicking" } else { "failing" };
        let message = match outcome {
            Err(payload) => panic_text(&*payload),
            Ok(()) => {
                panic!("{what} iteration: the waiting loop did not report iteration 3 cancelled")
            }
        };
        assert!(
            message.contains("parallel loop iteration 3 was cancelled"),
            "{what} iteration: the waiting loop panicked with {message:?}"
        );
        let mut ran = ran.into_inner().unwrap();
        ran.sort_unstable();
        assert_eq!(
            ran,
            (0..n).filter(|&i| i != 3).collect::<Vec<_>>(),
            "{what} iteration: the waiting loop must run every iteration but 3"
        );
        match device_loop.into_inner().unwrap() {
            Some(Ok(Err(GpuError::StreamCapturing))) if !panics => {}
            Some(Err(payload)) if panics => {
                let text = panic_text(&*payload);
                assert!(
                    text.contains("iteration 3 panics on purpose"),
                    "the device loop resumed another panic: {text:?}"
                );
            }
            Some(Ok(other)) => panic!("{what} iteration: the device loop returned {other:?}"),
            Some(Err(payload)) => panic!(
                "{what} iteration: the device loop panicked: {}",
                panic_text(&*payload)
            ),
            None => panic!("{what} iteration: the device loop did not return"),
        }
    }
}

/// Tasks spinning 100 ms on the device, and the test's only `Device`
/// dropped at once (the tasks' closures hold it until they ran, so the
/// last handle goes on a worker), then, with a second device, dropped by
/// this thread once every task's work is enqueued and still running. The
/// drop waits for the streams: every task completes with its value and
/// its CPU dependent runs; nothing hangs (the deadline) or panics (a
/// panic in the drop on a worker would reach the task's handle).
#[test]
fn dropping_the_device_with_work_in_flight_lets_the_work_complete() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(4).build().unwrap();
    let _deadline = Deadline::new(
        "device dropped with work in flight",
        Duration::from_secs(60),
    );
    for round in 0..2 {
        let Some(dev) = device(&rt, "device dropped with work in flight") else {
            return;
        };
        let kernels = Kernels::load(&dev);
        let len = 1024;
        let tasks: Vec<_> = (0..8u32)
            .map(|i| {
                let h = dev.spawn(move |s| {
                    let x = s.stream().clone_htod(&vec![i; len])?;
                    kernels.spin(s.stream(), Duration::from_millis(100))?;
                    s.download(&x)
                });
                let cpu = rt.spawn_delayed([h.dep()], move || i);
                (h, cpu)
            })
            .collect();
        if round == 1 {
            // Once every task's work is enqueued: a GPU task behind them all
            // starts then. (Its own closure and the tasks' wrappers let go
            // of the device a moment later.)
            let enqueued = Promise::new();
            let probe = dev.spawn_delayed(tasks.iter().map(|(h, _)| h.gpu_dep()), {
                let enqueued = enqueued.clone();
                move |_| {
                    enqueued.fulfill();
                    Ok(())
                }
            });
            rt.spawn_delayed([enqueued.dep()], || ()).join();
            std::thread::sleep(Duration::from_millis(10));
            let t = Instant::now();
            drop(dev);
            eprintln!(
                "device dropped with work in flight: the drop on the test's thread took {:?}",
                t.elapsed()
            );
            probe.join().unwrap();
        } else {
            drop(dev);
        }
        for (i, (h, cpu)) in tasks.into_iter().enumerate() {
            let host = match h.try_join() {
                Ok(Ok(host)) => host,
                Ok(Err(e)) => panic!("round {round}: task {i} failed: {e}"),
                Err(e) => panic!("round {round}: task {i}: {e}"),
            };
            assert!(
                host.as_slice().unwrap().iter().all(|&x| x == i as u32),
                "round {round}: task {i}'s value"
            );
            assert_eq!(cpu.join(), i as u32);
        }
    }
}

/// A device outliving the runtime it was opened for: dropping the runtime
/// waits for the device work in flight (its completions count as pending
/// work), so the tasks finish with their values; a GPU task still parked
/// on a promise is cancelled with the runtime's other parked tasks, and one
/// spawned after the runtime is gone is cancelled, not left waiting; the
/// device is dropped last without a hang or a panic.
#[test]
fn dropping_the_runtime_before_the_device_finishes_the_work_in_flight() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let Some(dev) = device(&rt, "runtime dropped before the device") else {
        return;
    };
    let _deadline = Deadline::new("runtime dropped before the device", Duration::from_secs(60));
    let kernels = Kernels::load(&dev);
    let len = 1024;
    let tasks: Vec<_> = (0..4u32)
        .map(|i| {
            dev.spawn(move |s| {
                let x = s.stream().clone_htod(&vec![i; len])?;
                kernels.spin(s.stream(), Duration::from_millis(100))?;
                s.download(&x)
            })
        })
        .collect();
    let never = Promise::new();
    let parked = dev.spawn_delayed([GpuDep::from(never.dep())], |_| Ok(()));
    drop(rt);
    for (i, h) in tasks.into_iter().enumerate() {
        match h.try_join() {
            Ok(Ok(host)) => assert!(
                host.as_slice().unwrap().iter().all(|&x| x == i as u32),
                "task {i}'s value"
            ),
            Ok(Err(e)) => panic!("task {i} failed: {e}"),
            Err(e) => panic!("task {i}, in flight when the runtime was dropped: {e}"),
        }
    }
    match parked.try_join() {
        Err(e) if e.is_cancelled() => {}
        other => panic!("a GPU task parked on a promise when its runtime was dropped: {other:?}"),
    }
    let late = dev.spawn(|_| Ok(1));
    match late.try_join() {
        Err(e) if e.is_cancelled() => {}
        other => panic!("a GPU task spawned after its runtime was dropped: {other:?}"),
    }
    drop(never);
    drop(dev);
}

/// A GPU task that hands a value to `keep_alive`, enqueues work and then
/// panics: the value must live until that work is complete (the device may
/// still be reading it) and then go, not stay until the device is dropped.
#[test]
fn a_panicking_task_releases_what_it_kept_once_its_work_is_complete() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let Some(dev) = device(&rt, "kept values of a panicking task") else {
        return;
    };
    let _deadline = Deadline::new("kept values of a panicking task", Duration::from_secs(60));
    let kernels = Kernels::load(&dev);
    let kept = Arc::new(());
    let watch = Arc::downgrade(&kept);
    let h = dev.spawn(move |s| -> Result<(), GpuError> {
        kernels.spin(s.stream(), Duration::from_millis(300))?;
        s.keep_alive(kept);
        panic!("a GPU task panics after keeping a value");
    });
    assert!(h.try_join().unwrap_err().is_panic());
    assert_eq!(
        watch.strong_count(),
        1,
        "a panicking task's kept value was dropped while its work was still running"
    );
    let start = Instant::now();
    while watch.strong_count() != 0 && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        watch.strong_count(),
        0,
        "a panicking task's kept value outlived its work by 10 s (it stays with the lane until the device is dropped)"
    );
}

/// A task that returns with its stream still being captured into a graph
/// (a capture begun and never ended): it fails with `StreamCapturing`, its
/// CPU dependent is cancelled instead of waiting for a completion that
/// would have been captured into the graph (and never run), and its
/// worker's lane takes work again (the capture was ended and discarded),
/// also after a closure that failed or panicked mid-capture; a task that
/// ends its own capture is fine.
#[test]
fn a_capture_left_open_fails_the_task_and_frees_the_lane() {
    let _one = one_at_a_time();
    use selvedge::gpu::cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
    let rt = Runtime::builder().num_threads(1).build().unwrap();
    let Some(dev) = device(&rt, "capture left open") else {
        return;
    };
    let _deadline = Deadline::new("capture left open", Duration::from_secs(60));
    let mode = CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    let left_open = dev.spawn(move |s| {
        s.stream().begin_capture(mode)?;
        Ok(())
    });
    let cpu = spawn_delayed([left_open.dep()], || ());
    assert!(
        matches!(left_open.join(), Err(GpuError::StreamCapturing)),
        "a task that left its capture open did not fail with StreamCapturing"
    );
    assert!(cpu.try_join().unwrap_err().is_cancelled());
    // One worker, so the same lane: it must work again.
    let again = dev
        .spawn(|s| s.download(&s.stream().clone_htod(&[5u32; 8])?))
        .join()
        .expect("the lane after a capture left open");
    assert_eq!(again.as_slice().unwrap(), &[5; 8]);
    // A closure that fails or panics in the middle of its capture: the
    // capture is ended all the same, and the lane works again.
    let failed = dev.spawn(move |s| -> Result<(), GpuError> {
        s.stream().begin_capture(mode)?;
        Err(GpuError::NoDevice {
            ordinal: 7,
            count: 0,
        })
    });
    assert!(matches!(
        failed.join(),
        Err(GpuError::NoDevice { ordinal: 7, .. })
    ));
    let panicked = dev.spawn(move |s| -> Result<(), GpuError> {
        s.stream().begin_capture(mode)?;
        panic!("a GPU task panics in the middle of its capture");
    });
    assert!(panicked.try_join().unwrap_err().is_panic());
    let again = dev
        .spawn(|s| s.download(&s.stream().clone_htod(&[6u32; 8])?))
        .join()
        .expect("the lane after a capture abandoned by an error or a panic");
    assert_eq!(again.as_slice().unwrap(), &[6; 8]);
    // A capture ended inside the task is the task's business.
    let ended = dev.spawn(move |s| {
        s.stream().begin_capture(mode)?;
        let graph = s.stream().end_capture(
            CUgraphInstantiate_flags::CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH,
        )?;
        drop(graph);
        Ok(16)
    });
    assert_eq!(ended.join().unwrap(), 16);
}

/// Declared access between GPU tasks: a copy that reads `x` slowly (a spin
/// kernel first) and a write of `x` submitted after it, on another worker's
/// stream: the write must wait for the copy's event on the device, or `y`
/// would receive the zeros. CPU accesses afterwards wait for completion.
#[test]
fn declared_gpu_accesses_keep_their_order_on_the_device() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(4).build().unwrap();
    let Some(dev) = device(&rt, "declared gpu data") else {
        return;
    };
    let _deadline = Deadline::new("declared gpu data", Duration::from_secs(60));
    let kernels = Kernels::load(&dev);
    let len = 1 << 16;
    let alloc = || {
        selvedge::Data::new(
            dev.spawn(move |s| Ok(s.stream().alloc_zeros::<f32>(len)?))
                .join()
                .unwrap(),
        )
    };
    let (x, y) = (alloc(), alloc());
    for round in 0..20 {
        let value = round as f32 + 1.0;
        let write = dev.spawn_with(x.write(), move |s, x| {
            Ok(s.stream().memcpy_htod(&vec![value; len], x)?)
        });
        let copy = dev.spawn_with((x.read(), y.write()), move |s, (x, y)| {
            kernels.spin(s.stream(), Duration::from_millis(5))?;
            Ok(s.stream().memcpy_dtod(x, y)?)
        });
        let clear = dev.spawn_with(x.write(), |s, x| Ok(s.stream().memset_zeros(x)?));
        // A CPU task ordered after the GPU write of `y`: it runs once the
        // copy is complete on the device (its callback), not before. (The
        // copy's handle is completed by a task of its own, readied by the
        // same callback, which may run after this one: its `dep`, fulfilled
        // in the callback before the data turns pass on, says when the
        // device finished.)
        let check = rt.spawn_with(y.read(), |_y| ());
        check.join();
        assert!(
            copy.dep().is_fulfilled(),
            "a CPU access to y ran before the GPU copy completed"
        );
        let yv = y.read_now().unwrap();
        let back = {
            let yv: &selvedge::gpu::cudarc::driver::CudaSlice<f32> = &yv;
            let stream = dev.context().default_stream();
            stream.clone_dtoh(yv).unwrap()
        };
        drop(yv);
        assert!(
            back.iter().all(|&v| v == value),
            "round {round}: y holds {:?}, not {value}: the write of x did not wait for the copy",
            &back[..4]
        );
        write.join().unwrap();
        copy.join().unwrap();
        clear.join().unwrap();
    }
    let x = x.into_inner();
    let back = dev.spawn(move |s| s.download(&x)).join().unwrap();
    assert!(back.as_slice().unwrap().iter().all(|&v| v == 0.0));
}

//! The order of device work: chains across streams, CPU tasks after device
//! work, device loops, buffers shared between streams.

use super::*;

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

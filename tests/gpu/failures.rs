//! Failures and endings: failing device loops, devices and runtimes dropped
//! with work in flight, panicking tasks, captures left open, declared
//! accesses kept in order.

use super::*;

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

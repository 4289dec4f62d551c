//! A device error that stops the streams (a kernel storing to address 0)
//! must break the promises of the work in flight, not hang them. A test
//! binary of its own: the error ruins the CUDA context for the process.
#![cfg(feature = "cuda")]

mod gpu_support;

use gpu_support::{device, Deadline, Kernels};
use selvedge::gpu::GpuError;
use selvedge::{parallel_for, scope, LoopPromise, Runtime};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

/// The faulting task spins 200 ms before its faulting kernel, so the fault
/// comes long after the task's completion was enqueued: nothing on the
/// enqueue path can see it, and it is the watchdog, querying the streams
/// while completions are in flight, that must notice the sticky error and
/// break every pending promise: the task's own (its handle reports a
/// cancellation, its CPU dependent is cancelled), those of a GPU task
/// enqueued behind it on the device, and those of a device loop whose
/// iterations (400 ms spins each) are all in flight when the fault hits
/// (the loop waiting on them reports them cancelled). Then the device takes
/// no more work, and dropping it (its cuBLAS handles cannot be destroyed in
/// a lost context) and then the runtime neither panics nor hangs.
#[test]
fn a_sticky_device_error_breaks_pending_promises() {
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let Some(dev) = device(&rt, "sticky device error") else {
        return;
    };
    let kernels = Kernels::load(&dev);
    // Everything below must finish: the deadline fails the test (aborting
    // the process) rather than let it hang.
    let deadline = Deadline::new(
        "a sticky device error left promises pending",
        Duration::from_secs(60),
    );
    let faulting = dev.spawn(move |s| {
        kernels.spin(s.stream(), Duration::from_millis(200))?;
        kernels.fault(s.stream())?;
        Ok(())
    });
    let dependent = rt.spawn_delayed([faulting.dep()], || ());
    let behind = dev.spawn_delayed([faulting.gpu_dep()], move |s| {
        kernels.spin(s.stream(), Duration::from_millis(1))?;
        Ok(())
    });
    let iterations = 4;
    let done = LoopPromise::new(0..iterations);
    let ran = AtomicUsize::new(0);
    let device_loop = Mutex::new(None);
    let waiting_loop = catch_unwind(AssertUnwindSafe(|| {
        rt.run(|| {
            scope(|sc| {
                sc.spawn(|_| {
                    parallel_for(0..iterations)
                        .depends_on_each(&done)
                        .for_each(|_| {
                            ran.fetch_add(1, Relaxed);
                        });
                });
                let r = dev.parallel_for(0..iterations, &done, |s, _| {
                    kernels.spin(s.stream(), Duration::from_millis(400))?;
                    Ok(())
                });
                *device_loop.lock().unwrap() = Some(r);
            })
        })
    }));

    let outcome = faulting.try_join();
    assert!(
        matches!(&outcome, Err(e) if e.is_cancelled()),
        "the faulting task's completion was in flight when the fault came: the watchdog must cancel it, but its handle gave {outcome:?}"
    );
    assert!(dependent.try_join().unwrap_err().is_cancelled());
    match behind.try_join() {
        Err(e) if e.is_cancelled() => {}
        Ok(Err(GpuError::DeviceFailed(_))) => {}
        other => panic!("a GPU task behind the faulting one: {other:?}"),
    }
    match waiting_loop {
        Err(payload) => {
            let text = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            assert!(
                text.contains("cancelled"),
                "the loop waiting on the device loop panicked with {text:?}"
            );
            eprintln!(
                "sticky device error: the waiting loop ran {} of {iterations} iterations and reported: {text}",
                ran.load(Relaxed)
            );
        }
        Ok(()) => panic!(
            "the device loop's iterations were in flight when the fault came, yet the loop waiting on them ran all {} (its promises were fulfilled?)",
            ran.load(Relaxed)
        ),
    }
    match device_loop.into_inner().unwrap() {
        Some(Ok(())) => {}
        Some(Err(GpuError::DeviceFailed(_) | GpuError::Driver(_))) => {
            eprintln!(
                "sticky device error: some device loop iteration was enqueued after the fault"
            );
        }
        Some(Err(e)) => panic!("the device loop failed with {e}"),
        None => panic!("the device loop did not return"),
    }
    // The device takes no more work: the task fails, or is cancelled.
    match dev.spawn(|_| Ok(())).try_join() {
        Ok(Err(GpuError::DeviceFailed(_) | GpuError::Driver(_))) => {}
        Err(e) if e.is_cancelled() => {}
        other => panic!("a failed device accepted work: {other:?}"),
    }
    // The last handle: the device's drop runs here (every task that held
    // it has finished).
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| drop(dev))) {
        panic!(
            "dropping a failed device panicked: {:?}",
            payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
        );
    }
    // Its completions were abandoned, so the runtime is quiet.
    drop(rt);
    drop(deadline);
}

//! GPU tasks that declare `Data` (feature `cuda`) keep the rules CPU tasks
//! keep: a poisoned handle is refused and a `recover` clears it, a closure
//! that fails poisons what it writes, a wait for a handle the closure
//! holds panics, and a task cancelled before it ran leaves the handle
//! usable. Without a GPU every test says it skipped and passes.
#![cfg(feature = "cuda")]

mod gpu_support;

use gpu_support::{device, one_at_a_time, Deadline};
use selvedge::gpu::cudarc::driver::CudaSlice;
use selvedge::gpu::{Device, GpuError};
use selvedge::{Data, Promise, Runtime};
use std::time::Duration;

const LEN: usize = 1024;

fn buffer(dev: &Device, value: f32) -> Data<CudaSlice<f32>> {
    Data::named(
        "buf",
        dev.spawn(move |s| Ok(s.stream().clone_htod(&[value; LEN])?))
            .join()
            .unwrap(),
    )
}

fn first(dev: &Device, d: &Data<CudaSlice<f32>>) -> f32 {
    dev.spawn_with(d.read(), |s, x| Ok(s.stream().clone_dtoh(x)?[0]))
        .join()
        .unwrap()
}

/// A CPU writer's panic poisons the handle: a GPU reader is refused,
/// naming it; a GPU `recover` runs and clears the poison.
#[test]
fn gpu_tasks_refuse_poison_and_recover_clears_it() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let Some(dev) = device(&rt, "gpu poison") else {
        return;
    };
    let _deadline = Deadline::new("gpu poison", Duration::from_secs(60));
    let d = buffer(&dev, 1.0);
    let bad = rt.spawn_with(d.write(), |_: &mut CudaSlice<f32>| panic!("cpu broke it"));
    assert!(bad.try_join().unwrap_err().is_panic());
    let refused = dev.spawn_with(d.read(), |s, x| Ok(s.stream().clone_dtoh(x)?[0]));
    let err = refused.try_join().unwrap_err();
    assert!(
        err.is_cancelled() && err.to_string().contains("Data \"buf\" is poisoned"),
        "{err}"
    );
    dev.spawn_with(d.recover(), |s, x| {
        Ok(s.stream().memcpy_htod(&[2.0f32; LEN], x)?)
    })
    .join()
    .unwrap();
    assert_eq!(first(&dev, &d), 2.0);
    assert!(d.read_now().is_ok(), "the recover cleared the poison");
}

/// A GPU closure that returns an error poisons what it writes; the handle
/// recovers as usual, and gives its value back.
#[test]
fn a_failing_gpu_task_poisons_what_it_writes() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let Some(dev) = device(&rt, "gpu failure") else {
        return;
    };
    let _deadline = Deadline::new("gpu failure", Duration::from_secs(60));
    let d = buffer(&dev, 1.0);
    let failed = dev.spawn_with(d.write(), |_s, _x| -> Result<(), GpuError> {
        Err(GpuError::NoDevice {
            ordinal: 7,
            count: 0,
        })
    });
    assert!(failed.join().is_err());
    // Same device, after it: refused (poisoned), not hung.
    let after = dev.spawn_with(d.read(), |_s, _x| Ok(()));
    let err = after.try_join().unwrap_err();
    assert!(
        err.to_string().contains("failed while it held a write"),
        "{err}"
    );
    rt.spawn_with(d.recover(), |_x| ()).join();
    assert_eq!(first(&dev, &d), 1.0);
    assert!(d.try_into_inner().is_ok());
}

/// `into_inner` inside a GPU task on a handle it declared would wait for
/// itself: it panics instead.
#[test]
fn into_inner_inside_a_gpu_task_on_its_own_handle_panics() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let Some(dev) = device(&rt, "gpu self wait") else {
        return;
    };
    let _deadline = Deadline::new("gpu self wait", Duration::from_secs(60));
    let d = buffer(&dev, 1.0);
    let d2 = d.clone();
    let err = dev
        .spawn_with(d.read(), move |_s, _x| {
            let _ = d2.into_inner();
            Ok(())
        })
        .try_join()
        .unwrap_err();
    assert!(
        err.to_string().contains("inside a task that declared it"),
        "{err}"
    );
}

/// A GPU task cancelled before it ran (a dependency it declared broke)
/// passes its turn on: the GPU and CPU accesses after it run.
#[test]
fn a_cancelled_gpu_access_leaves_the_handle_usable() {
    let _one = one_at_a_time();
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let Some(dev) = device(&rt, "gpu cancel") else {
        return;
    };
    let _deadline = Deadline::new("gpu cancel", Duration::from_secs(60));
    let d = buffer(&dev, 1.0);
    let p = Promise::new();
    let cancelled = dev.spawn_with((d.write(), p.dep()), |s, (x, ())| {
        Ok(s.stream().memcpy_htod(&[9.0f32; LEN], x)?)
    });
    let after = dev.spawn_with(d.write(), |s, x| {
        Ok(s.stream().memcpy_htod(&[3.0f32; LEN], x)?)
    });
    drop(p);
    assert!(cancelled.try_join().unwrap_err().is_cancelled());
    after.join().unwrap();
    assert_eq!(first(&dev, &d), 3.0);
    assert!(d.try_into_inner().is_ok());
}

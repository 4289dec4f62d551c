//! A device error that stops the streams (a kernel storing to address 0)
//! must break the promises of the work in flight, not hang them. A test
//! binary of its own: the error ruins the CUDA context for the process.
#![cfg(feature = "cuda")]

use selvedge::gpu::cudarc::driver::result;
use selvedge::gpu::{Device, GpuError};
use selvedge::{spawn_delayed, Runtime};
use std::ffi::{c_void, CString};
use std::sync::mpsc;
use std::time::Duration;

/// A kernel that stores to address 0, in PTX (loaded by the driver, so no
/// compiler is needed).
const FAULT_PTX: &str = r#"
.version 7.0
.target sm_50
.address_size 64
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

#[test]
fn a_sticky_device_error_breaks_pending_promises() {
    let rt = Runtime::builder().num_threads(2).build().unwrap();
    let dev = match Device::open_in(&rt, 0) {
        Ok(dev) => dev,
        Err(e) if e.is_unavailable() => {
            if std::env::var_os("SELVEDGE_REQUIRE_GPU").is_some_and(|v| v == "1") {
                panic!("SELVEDGE_REQUIRE_GPU=1 but {e}");
            }
            eprintln!("sticky device error: skipped: {e}");
            return;
        }
        Err(e) => panic!("opening the device failed: {e}"),
    };
    let ctx = dev.context().clone();
    let faulting = dev.spawn(move |s| {
        ctx.bind_to_thread()?;
        let ptx = CString::new(FAULT_PTX).unwrap();
        // SAFETY: a NUL-terminated PTX image; the kernel takes no
        // parameters, and its fault is the point of the test.
        unsafe {
            let module = result::module::load_data(ptx.as_ptr().cast::<c_void>())?;
            let f = result::module::get_function(module, CString::new("fault").unwrap())?;
            result::launch_kernel(f, (1, 1, 1), (1, 1, 1), 0, s.stream().cu_stream(), &mut [])?;
        }
        Ok(())
    });
    let dependent = spawn_delayed([faulting.dep()], || ());
    // Everything below must finish: a watchdog thread fails the test
    // rather than let it hang.
    let (tx, rx) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if rx.recv_timeout(Duration::from_secs(60)).is_err() {
            eprintln!("a sticky device error left promises pending for 60 s");
            std::process::abort();
        }
    });
    let outcome = faulting.try_join();
    assert!(
        matches!(&outcome, Err(e) if e.is_cancelled()) || matches!(outcome, Ok(Err(_))),
        "the faulting task neither failed nor was cancelled"
    );
    assert!(dependent.try_join().unwrap_err().is_cancelled());
    // The device takes no more work: the task fails, or is cancelled.
    match dev.spawn(|_| Ok(())).try_join() {
        Ok(Err(GpuError::DeviceFailed(_) | GpuError::Driver(_))) => {}
        Err(e) if e.is_cancelled() => {}
        other => panic!("a failed device accepted work: {other:?}"),
    }
    tx.send(()).unwrap();
    watchdog.join().unwrap();
}

//! GPU tasks (feature `cuda`). Without a GPU every test says it skipped and
//! passes; with `SELVEDGE_REQUIRE_GPU=1` a missing GPU fails them.
//!
//! The GPU bundle also runs this binary under compute-sanitizer's memcheck
//! (one test at a time).
#![cfg(feature = "cuda")]

#[path = "../gpu_support/mod.rs"]
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

mod failures;
mod ordering;

//! The batched GEMM demonstration on a GPU (feature `cuda`), shared by
//! `tools/src/bin/batched_gemm.rs` and `tools/benches/gpu.rs`, on the CPU
//! workload's batches (`crate::gemm`).
//!
//! - `selvedge`: `Device::parallel_for` over groups of the batch; each
//!   group's iteration enqueues a strided-batched SGEMM and a copy of the
//!   products to pinned host memory on its worker's stream, and the
//!   stream's callback fulfills the group's iteration of a `LoopPromise`;
//!   stage 2 (ReLU and row sums, on the CPU) is a `depends_on_each` loop
//!   over the groups with a loop over each group's matrices nested in it.
//!   No barrier, no thread blocked on a stream.
//! - `direct`: the same GEMMs issued straight to cuBLAS as one call on one
//!   stream, a copy back, a stream synchronize, then stage 2 with rayon.
//!
//! Both read the products the same way: a group's (for `direct`, the
//! batch's) pinned host buffer is locked, and cudarc's `as_slice` (an
//! event synchronize) called, once; stage 2 then runs on each matrix from
//! that plain slice.

use crate::gemm::{activate_and_sum, Batch, Output};
use selvedge::gpu::cudarc::cublas::CudaBlas;
use selvedge::gpu::cudarc::driver::{CudaSlice, CudaStream, PinnedHostSlice};
use selvedge::gpu::{gemm, BatchedGemm, Device, GpuError};
use selvedge::{parallel_for, LoopPromise};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Why no GPU could be used, for an error of `Device::open`: the error's
/// own text where the machine has no usable GPU (it names the missing
/// driver, cuBLAS or device, and why), else that the device failed to open.
pub fn why_no_gpu(e: &GpuError) -> String {
    if e.is_unavailable() {
        e.to_string()
    } else {
        format!("device 0 could not be opened: {e}")
    }
}

/// One group of consecutive matrices, with its device and host buffers.
pub struct Group {
    first: usize,
    len: usize,
    a: CudaSlice<f32>,
    b: CudaSlice<f32>,
    c: Mutex<CudaSlice<f32>>,
    host: Mutex<PinnedHostSlice<f32>>,
}

/// A batch uploaded to a device: per group for selvedge's version, whole
/// for the direct one.
pub struct DeviceBatch {
    pub batch: usize,
    pub n: usize,
    pub groups: Vec<Group>,
    whole: Group,
}

fn shape(n: usize, batch: usize) -> BatchedGemm {
    BatchedGemm {
        batch,
        m: n,
        n,
        k: n,
    }
}

fn upload(
    stream: &Arc<CudaStream>,
    input: &Batch,
    first: usize,
    len: usize,
) -> Result<Group, GpuError> {
    let nn = input.n * input.n;
    let range = first * nn..(first + len) * nn;
    // SAFETY: pinned memory written only by the copies enqueued below.
    let host = unsafe { stream.context().alloc_pinned_with_flags::<f32>(len * nn, 0) }?;
    Ok(Group {
        first,
        len,
        a: stream.clone_htod(&input.a[range.clone()])?,
        b: stream.clone_htod(&input.b[range])?,
        c: Mutex::new(stream.alloc_zeros::<f32>(len * nn)?),
        host: Mutex::new(host),
    })
}

impl DeviceBatch {
    /// Uploads `input` in groups of `group_size` matrices.
    pub fn upload(dev: &Device, input: &Batch, group_size: usize) -> Result<Arc<Self>, GpuError> {
        assert!(group_size > 0, "group size must be at least 1, got 0");
        let stream = dev.context().new_stream()?;
        let groups = (0..input.batch)
            .step_by(group_size)
            .map(|first| upload(&stream, input, first, group_size.min(input.batch - first)))
            .collect::<Result<Vec<_>, _>>()?;
        let whole = upload(&stream, input, 0, input.batch)?;
        stream.synchronize()?;
        Ok(Arc::new(DeviceBatch {
            batch: input.batch,
            n: input.n,
            groups,
            whole,
        }))
    }
}

/// Stage 2 of the matrix `i` of `products` (a group's, or the batch's).
fn finish_matrix(products: &[f32], i: usize, n: usize, c: &mut [f32], sums: &mut [f32]) {
    let nn = n * n;
    c.copy_from_slice(&products[i * nn..][..nn]);
    activate_and_sum(c, sums, n);
}

/// When the parts of one run of [`selvedge`] happened, on the host clock,
/// in nanoseconds from [`Timeline::new`]: lock-free, one atomic store per
/// event, and only when a timeline is passed (for one untimed run).
pub struct Timeline {
    base: Instant,
    /// When group `g`'s GEMM and copy were enqueued (its iteration's
    /// closure returned; `Device::parallel_for` enqueues the callback
    /// right after).
    enqueued: Vec<AtomicU64>,
    /// When group `g`'s stage 2 started: by then its callback had
    /// fulfilled its iteration.
    stage2_start: Vec<AtomicU64>,
    /// How many groups' iterations were fulfilled (their callbacks had
    /// come) when group `g`'s stage 2 started, its own included.
    fulfilled_at_start: Vec<AtomicU64>,
    /// When group `g`'s stage 2 finished.
    stage2_end: Vec<AtomicU64>,
    /// When `Device::parallel_for` returned (every group enqueued).
    stage1_returned: AtomicU64,
}

const UNSET: u64 = u64::MAX;

fn unset(len: usize) -> Vec<AtomicU64> {
    (0..len).map(|_| AtomicU64::new(UNSET)).collect()
}

impl Timeline {
    /// A timeline for a run over `groups` groups, its clock starting now.
    pub fn new(groups: usize) -> Self {
        Timeline {
            base: Instant::now(),
            enqueued: unset(groups),
            stage2_start: unset(groups),
            fulfilled_at_start: unset(groups),
            stage2_end: unset(groups),
            stage1_returned: AtomicU64::new(UNSET),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(UNSET - 1)
    }

    fn mark(&self, slot: &AtomicU64) {
        slot.store(self.now(), Ordering::Relaxed);
    }

    /// What was measured, in a few sentences; `None` if the run did not
    /// record every group (it failed).
    pub fn summary(&self) -> Option<String> {
        let groups = self.stage2_start.len();
        if groups == 0 {
            return None;
        }
        let read = |v: &[AtomicU64]| -> Option<Vec<u64>> {
            v.iter()
                .map(|t| Some(t.load(Ordering::Relaxed)).filter(|&t| t != UNSET))
                .collect()
        };
        let ms = |ns: u64| ns as f64 / 1e6;
        let enqueued = read(&self.enqueued)?;
        let start = read(&self.stage2_start)?;
        let fulfilled = read(&self.fulfilled_at_start)?;
        let end = read(&self.stage2_end)?;
        let returned =
            Some(self.stage1_returned.load(Ordering::Relaxed)).filter(|&t| t != UNSET)?;
        let last_enqueued = *enqueued.iter().max()?;
        let first = (0..groups).min_by_key(|&g| start[g])?;
        let last_start = *start.iter().max()?;
        let last_end = *end.iter().max()?;
        let all = groups as u64;
        // Groups whose stage 2 started while some other group's callback
        // had not yet come: after a barrier, none could have.
        let ahead = fulfilled.iter().filter(|&&k| k < all).count();
        let before_last_enqueue = start.iter().filter(|&&t| t < last_enqueued).count();
        let mut s = format!(
            "timeline of one extra, untimed run ({groups} groups; host clock, from just before the run):\n  \
             stage 1: every group's GEMM and copy were enqueued by {:.3} ms; Device::parallel_for returned at {:.3} ms\n  \
             stage 2: the first group to start (group {first}) started at {:.3} ms, when {} of {groups} groups' callbacks had come; \
             the last started at {:.3} ms (every callback had come by then); stage 2 finished at {:.3} ms\n  ",
            ms(last_enqueued),
            ms(returned),
            ms(start[first]),
            fulfilled[first],
            ms(last_start),
            ms(last_end),
        );
        if ahead > 0 {
            s += &format!(
                "{ahead} of {groups} groups' stage 2 started before every group's callback had come \
                 ({before_last_enqueue} before all of stage 1 was even enqueued): \
                 stage 2 ran behind stage 1 with no barrier"
            );
        } else {
            s += "every group's stage 2 started after all the callbacks had come: \
                  this run shows no overlap of the stages";
        }
        Some(s)
    }
}

/// selvedge's version (see the module docs); call it on a worker of the
/// device's runtime (inside `Runtime::run`). With a `timeline`, records
/// when each group's parts ran (for one untimed run: the clock reads are
/// cheap but not free).
///
/// Returns the device's error if stage 1 failed (an iteration could not be
/// enqueued, or the device failed while the work was in flight): the
/// failed groups' iterations are broken, so stage 2's loop stops with a
/// cancellation panic, which this turns back into the error.
pub fn selvedge(
    dev: &Device,
    d: &Arc<DeviceBatch>,
    out: &mut Output,
    timeline: Option<&Timeline>,
) -> Result<(), GpuError> {
    let (n, nn) = (d.n, d.n * d.n);
    let groups = d.groups.len();
    let matrices: Vec<Mutex<(&mut [f32], &mut [f32])>> = out
        .c
        .chunks_mut(nn)
        .zip(out.row_sums.chunks_mut(n))
        .map(Mutex::new)
        .collect();
    // Iteration g: group g's products are in its pinned host buffer.
    let groups_done = LoopPromise::new(0..groups);
    let mut stage1 = Ok(());
    let stage2_error = Mutex::new(None);
    let ran = catch_unwind(AssertUnwindSafe(|| {
        selvedge::scope(|s| {
            // Stage 2, nested: a group's matrices as soon as its callback came.
            s.spawn(|_| {
                parallel_for(0..groups)
                    .depends_on_each(&groups_done)
                    .for_each(|g| {
                        if let Some(t) = timeline {
                            t.mark(&t.stage2_start[g]);
                            let k = (0..groups).filter(|&i| groups_done.is_fulfilled(i)).count();
                            t.fulfilled_at_start[g].store(k as u64, Ordering::Relaxed);
                        }
                        let group = &d.groups[g];
                        // One lock and one event synchronize per group (the
                        // callback came, so the copy is complete).
                        let host = group.host.lock().unwrap();
                        let products = match host.as_slice() {
                            Ok(p) => p,
                            Err(e) => {
                                stage2_error.lock().unwrap().get_or_insert(e.into());
                                return;
                            }
                        };
                        parallel_for(0..group.len).for_each(|i| {
                            let mut guard = matrices[group.first + i].lock().unwrap();
                            let (c, sums) = &mut *guard;
                            finish_matrix(products, i, n, c, sums);
                        });
                        if let Some(t) = timeline {
                            t.mark(&t.stage2_end[g]);
                        }
                    });
            });
            // Stage 1: one GPU task per group, each on its worker's stream;
            // the stream's callback fulfills the group's iteration.
            stage1 = dev.parallel_for(0..groups, &groups_done, |s, g| {
                let group = &d.groups[g];
                let mut c = group.c.lock().unwrap();
                gemm(s.blas(), shape(n, group.len), &group.a, &group.b, &mut *c)?;
                s.stream()
                    .memcpy_dtoh(&*c, &mut *group.host.lock().unwrap())?;
                if let Some(t) = timeline {
                    t.mark(&t.enqueued[g]);
                }
                Ok(())
            });
            if let Some(t) = timeline {
                t.mark(&t.stage1_returned);
            }
        })
    }));
    match ran {
        Ok(()) => {
            stage1?;
            stage2_error.into_inner().unwrap().map_or(Ok(()), Err)
        }
        // Stage 2 was cancelled (or panicked): if stage 1 failed, that is
        // why, and its error is what to report.
        Err(panic) => {
            stage1?;
            // Every group was enqueued, so the device may have failed with
            // the work in flight (the watchdog broke those iterations): a
            // new task on it says so.
            if let Ok(Err(e)) = dev.spawn(|_| Ok(())).try_join() {
                return Err(e);
            }
            resume_unwind(panic)
        }
    }
}

/// The peer: one cuBLAS call for the whole batch on `blas`'s stream, a
/// copy back, a synchronize, then stage 2 with rayon (call it inside the
/// rayon pool).
pub fn direct(
    d: &DeviceBatch,
    stream: &Arc<CudaStream>,
    blas: &CudaBlas,
    out: &mut Output,
) -> Result<(), GpuError> {
    use rayon::prelude::*;
    let (n, nn) = (d.n, d.n * d.n);
    let whole = &d.whole;
    let mut c = whole.c.lock().unwrap();
    gemm(blas, shape(n, d.batch), &whole.a, &whole.b, &mut *c)?;
    stream.memcpy_dtoh(&*c, &mut *whole.host.lock().unwrap())?;
    stream.synchronize()?;
    // One lock and one event synchronize for the batch, as selvedge's
    // version takes one per group.
    let host = whole.host.lock().unwrap();
    let products = host.as_slice()?;
    out.c
        .par_chunks_mut(nn)
        .zip(out.row_sums.par_chunks_mut(n))
        .enumerate()
        .for_each(|(m, (c, sums))| finish_matrix(products, m, n, c, sums));
    Ok(())
}

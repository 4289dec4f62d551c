//! The batched GEMM demonstration on a GPU (feature `cuda`), shared by
//! `examples/batched_gemm.rs` and `benches/gpu.rs`. Include it next to
//! `workloads/gemm.rs` as `mod gemm`.
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

use crate::gemm::{activate_and_sum, Batch, Output};
use selvedge::gpu::cudarc::cublas::CudaBlas;
use selvedge::gpu::cudarc::driver::{CudaSlice, CudaStream, PinnedHostSlice};
use selvedge::gpu::{gemm, BatchedGemm, Device, GpuError};
use selvedge::{parallel_for, LoopPromise};
use std::sync::{Arc, Mutex};

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

/// Stage 2 of matrix `m` from the pinned copy of its group's products.
fn finish_matrix(group: &Group, m: usize, n: usize, c: &mut [f32], sums: &mut [f32]) {
    let nn = n * n;
    let host = group.host.lock().unwrap();
    let products = host.as_slice().expect("pinned products");
    c.copy_from_slice(&products[(m - group.first) * nn..][..nn]);
    activate_and_sum(c, sums, n);
}

/// selvedge's version (see the module docs); call it on a worker of the
/// device's runtime (inside `Runtime::run`).
pub fn selvedge(dev: &Device, d: &Arc<DeviceBatch>, out: &mut Output) -> Result<(), GpuError> {
    let (n, nn) = (d.n, d.n * d.n);
    let matrices: Vec<Mutex<(&mut [f32], &mut [f32])>> = out
        .c
        .chunks_mut(nn)
        .zip(out.row_sums.chunks_mut(n))
        .map(Mutex::new)
        .collect();
    // Iteration g: group g's products are in its pinned host buffer.
    let groups_done = LoopPromise::new(0..d.groups.len());
    selvedge::scope(|s| {
        // Stage 2, nested: a group's matrices as soon as its callback came.
        s.spawn(|_| {
            parallel_for(0..d.groups.len())
                .depends_on_each(&groups_done)
                .for_each(|g| {
                    let group = &d.groups[g];
                    parallel_for(group.first..group.first + group.len).for_each(|m| {
                        let mut guard = matrices[m].lock().unwrap();
                        let (c, sums) = &mut *guard;
                        finish_matrix(group, m, n, c, sums);
                    });
                });
        });
        // Stage 1: one GPU task per group, each on its worker's stream;
        // the stream's callback fulfills the group's iteration.
        dev.parallel_for(0..d.groups.len(), &groups_done, |s, g| {
            let group = &d.groups[g];
            let mut c = group.c.lock().unwrap();
            s.gemm(shape(n, group.len), &group.a, &group.b, &mut *c)?;
            s.stream()
                .memcpy_dtoh(&*c, &mut *group.host.lock().unwrap())?;
            Ok(())
        })
    })
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
    out.c
        .par_chunks_mut(nn)
        .zip(out.row_sums.par_chunks_mut(n))
        .enumerate()
        .for_each(|(m, (c, sums))| finish_matrix(whole, m, n, c, sums));
    Ok(())
}

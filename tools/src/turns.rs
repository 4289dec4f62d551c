//! Timing several implementations of one workload fairly on a shared
//! machine: shared by `tools/src/bin/batched_gemm.rs` and `tools/benches/trace.rs`.

use std::time::Instant;

/// Times each of `runs` `samples` times, after one warm-up each, taking
/// turns (one sample of each per round) so that a slow phase of a shared
/// machine hits all of them alike; returns each one's median in seconds.
pub fn interleaved_medians<const N: usize>(
    samples: usize,
    mut runs: [&mut dyn FnMut(); N],
) -> [f64; N] {
    for run in runs.iter_mut() {
        run();
    }
    let mut times = [(); N].map(|_| Vec::with_capacity(samples));
    for _ in 0..samples {
        for (run, times) in runs.iter_mut().zip(&mut times) {
            let t = Instant::now();
            run();
            times.push(t.elapsed().as_secs_f64());
        }
    }
    times.map(|mut t| {
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    })
}

//! How long a cache line takes to travel from one CPU to another right
//! now: two plain threads pass one word back and forth.
//!
//! Fine-grained parallel work moves cache lines between cores all the
//! time: a task made on one core and run on another, a promise fulfilled
//! on one and waited on by the other. What one such move costs is the
//! machine's, not the scheduler's, and on a VM it changes while you
//! measure: the host decides where the virtual CPUs run, and moves them.
//! On this project's 2-vCPU development machine a one-way hand-off
//! usually took 30-45 ns, but about 15 ns (presumably the two vCPUs on
//! one core's hyperthreads) or 110-250 ns (presumably on different dies)
//! for seconds at a time. It explains little of the spread of the
//! fine-grained figures there: the 256x256 wavefront of 1 µs tiles took
//! 55-84 ms in runs next to a slow probe and 55-80 ms in runs between two
//! usual ones (rayon's barrier version: 33-37 ms). The reports print it
//! so that a run taken in a slow regime can be told apart, and so that a
//! machine where it matters more shows it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crossbeam_utils::CachePadded;

use crate::pinning;

/// Round trips per probe (a few milliseconds).
const ROUND_TRIPS: u64 = 20_000;
/// Round trips before the timed ones, so both threads are running.
const WARM_UP_TRIPS: u64 = 1_000;

/// One probe of the one-way hand-off time in nanoseconds: half the mean
/// round trip of one word between two plain threads, over `ROUND_TRIPS`
/// round trips after `WARM_UP_TRIPS` (the threads pinned to the first
/// two CPUs the process may use when `SELVEDGE_PIN_THREADS` asks for
/// pinning, as the pools' threads are).
pub fn one_way_ns() -> f64 {
    let line = CachePadded::new(AtomicU64::new(0));
    let line = &*line;
    // The word counts hand-offs: odd values are the initiator's, even ones
    // the responder's.
    let wait_for = |value: u64| {
        while line.load(Ordering::Acquire) != value {
            std::hint::spin_loop();
        }
    };
    let total = WARM_UP_TRIPS + ROUND_TRIPS;
    std::thread::scope(|s| {
        s.spawn(|| {
            pinning::pin_current_thread(1);
            for i in 0..total {
                wait_for(2 * i + 1);
                line.store(2 * i + 2, Ordering::Release);
            }
        });
        s.spawn(|| {
            pinning::pin_current_thread(0);
            let mut started = Instant::now();
            for i in 0..total {
                if i == WARM_UP_TRIPS {
                    started = Instant::now();
                }
                line.store(2 * i + 1, Ordering::Release);
                wait_for(2 * i + 2);
            }
            started.elapsed().as_secs_f64() * 1e9 / (2 * ROUND_TRIPS) as f64
        })
        .join()
        .expect("the hand-off probe's initiator")
    })
}

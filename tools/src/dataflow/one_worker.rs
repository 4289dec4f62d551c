//! A runtime of one worker, for the rows that time what a dependency
//! itself costs. On two workers the delayed tasks of the promise-overhead
//! workload are made slowly enough for the other worker to ask for them,
//! and most are stolen, while its plain spawns are all made before it asks:
//! the difference between the two rows also holds the stealing.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

static ONE: LazyLock<selvedge::Runtime> = LazyLock::new(|| {
    selvedge::Runtime::builder()
        .num_threads(1)
        .build()
        .expect("a runtime of one worker")
});

/// Runs `f` on the runtime of one worker; returns its result and how long
/// it took.
pub fn timed(f: impl FnOnce() -> u64 + Send) -> (u64, Duration) {
    let start = Instant::now();
    let sum = ONE.run(f);
    (sum, start.elapsed())
}

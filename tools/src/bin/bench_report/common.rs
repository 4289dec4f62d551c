//! What the sections of `bench_report` share: medians, goal verdicts and
//! the progress lines of `--markdown` mode.

/// Untimed runs of each implementation before its samples.
pub const WARMUPS: usize = 2;

/// The median, minimum and maximum of `ms` (not empty).
pub fn median_min_max(mut ms: Vec<f64>) -> (f64, f64, f64) {
    ms.sort_by(f64::total_cmp);
    let median = if ms.len() % 2 == 1 {
        ms[ms.len() / 2]
    } else {
        (ms[ms.len() / 2 - 1] + ms[ms.len() / 2]) / 2.0
    };
    (median, ms[0], ms[ms.len() - 1])
}

/// How a goal's row ends: met or missed.
pub fn met(ok: bool) -> &'static str {
    if ok {
        "**met**"
    } else {
        "**missed**"
    }
}

/// In `--markdown` mode, says on stderr what is being timed (stdout is the
/// document); in the normal mode, nothing.
pub fn progress(md: bool, what: &str) {
    if md {
        eprintln!("bench_report: {what}");
    }
}

//! What a cancelled part reports: the loop panics naming every cancelled
//! iteration.

use std::ops::Range;

/// Why a loop part is cancelled (the part cannot tell which).
pub(super) const CANCELLED_WHY: &str =
    "a dependency was dropped unfulfilled, or the runtime shut down";

/// How many ranges of cancelled iterations a loop's message names before it
/// sums up the rest: a loop of a million iterations whose every other
/// iteration was cancelled still gets a message of one line.
pub(super) const CANCELLED_RANGES_NAMED: usize = 8;

/// The cancelled parts of a loop so far, as iteration numbers: the panic
/// payload of a loop while it runs, turned into [`cancelled_message`] when
/// it ends.
pub(super) struct CancelledParts(pub(super) Vec<Range<usize>>);

/// The message of a loop whose iterations `parts` (iteration numbers `k`,
/// for index `start + k * stride`; disjoint, in any order) were cancelled:
/// the indices as sorted ranges, adjacent parts joined, e.g. "iterations
/// 3..=5, 9, 12..=20"; past [`CANCELLED_RANGES_NAMED`] ranges the rest is
/// counted instead.
pub(super) fn cancelled_message(
    start: usize,
    stride: usize,
    mut parts: Vec<Range<usize>>,
) -> String {
    use std::fmt::Write;
    parts.sort_unstable_by_key(|ks| ks.start);
    let mut runs: Vec<Range<usize>> = Vec::with_capacity(parts.len());
    for ks in parts {
        match runs.last_mut() {
            Some(last) if last.end >= ks.start => last.end = last.end.max(ks.end),
            _ => runs.push(ks),
        }
    }
    let index = |k: usize| start + k * stride;
    let mut list = String::new();
    for (n, ks) in runs.iter().take(CANCELLED_RANGES_NAMED).enumerate() {
        if n > 0 {
            list.push_str(", ");
        }
        let (first, last) = (index(ks.start), index(ks.end - 1));
        // Writing to a String cannot fail.
        let _ = if first == last {
            write!(list, "{first}")
        } else {
            write!(list, "{first}..={last}")
        };
    }
    if let Some(rest) = runs.get(CANCELLED_RANGES_NAMED..).filter(|r| !r.is_empty()) {
        let more: usize = rest.iter().map(ExactSizeIterator::len).sum();
        let ranges = rest.len();
        let _ = write!(
            list,
            " and {more} more iteration{} in {ranges} range{}",
            if more == 1 { "" } else { "s" },
            if ranges == 1 { "" } else { "s" },
        );
    }
    let total: usize = runs.iter().map(ExactSizeIterator::len).sum();
    let step = if stride > 1 {
        format!(" (stride {stride})")
    } else {
        String::new()
    };
    let (noun, verb) = if total == 1 {
        ("iteration", "was")
    } else {
        ("iterations", "were")
    };
    format!("selvedge: parallel loop {noun} {list}{step} {verb} cancelled: {CANCELLED_WHY}")
}

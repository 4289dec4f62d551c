//! Unit tests of the promise protocol's dependency lists.

use super::*;

/// Every list of up to six dependencies over four events, in every
/// order and with every pattern of repeats (the inline path and the
/// spill past it): sorted by address, each event once, and one ref
/// held per event kept (the repeats' refs were given back).
#[test]
fn a_dependency_list_is_sorted_without_repeats() {
    const EVENTS: usize = 4;
    let group = Group::new(EVENTS);
    // SAFETY: the test holds the group's handle until the end.
    let g = unsafe { group.as_ref() };
    for len in 1..=6u32 {
        for code in 0..EVENTS.pow(len) {
            let picks: Vec<usize> = (0..len as usize)
                .map(|k| code / EVENTS.pow(k as u32) % EVENTS)
                .collect();
            // SAFETY: the handle keeps the group alive; `i < EVENTS`.
            let deps = picks.iter().map(|&i| unsafe { Group::dep(group, i) });
            let list = DepList::collect(deps);
            let mut want: Vec<usize> = picks
                .iter()
                .map(|&i| g.event(i) as *const _ as usize)
                .collect();
            want.sort_unstable();
            want.dedup();
            let got: Vec<usize> = (0..list.len())
                .map(|k| list.get(k).expect("in range").key())
                .collect();
            assert_eq!(got, want, "dependencies {picks:?}");
            assert_eq!(
                g.refs.load(Ordering::Relaxed),
                1 + want.len(),
                "refs for {picks:?}"
            );
        }
    }
    assert_eq!(
        g.refs.load(Ordering::Relaxed),
        1,
        "every list gave its refs back"
    );
    // SAFETY: the test's handle, given up last.
    unsafe { Group::release_handle(group, |_| unreachable!("nothing parked")) };
}

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
            let got: Vec<usize> = list.as_slice().iter().map(Dep::key).collect();
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

/// An iterator whose size hint says one item, whatever it yields: its
/// `n`th call (from 1) returns what the closure gives for `n`.
struct OneItemHint<F>(F, usize);

impl<F: FnMut(usize) -> Option<Dep>> Iterator for OneItemHint<F> {
    type Item = Dep;
    fn next(&mut self) -> Option<Dep> {
        self.1 += 1;
        (self.0)(self.1)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (1, Some(1))
    }
}

/// An iterator whose size hint says one dependency but that yields three:
/// the hint is only a hint, so all three are kept (in order), none lost.
#[test]
fn a_dependency_list_keeps_what_an_iterator_yields_past_its_hint() {
    let group = Group::new(3);
    // SAFETY: the test holds the group's handle until the end; `i < 3`.
    let mut deps = [2, 0, 1]
        .map(|i| unsafe { Group::dep(group, i) })
        .into_iter();
    let list = DepList::collect(OneItemHint(|_| deps.next(), 0));
    // SAFETY: as above.
    let g = unsafe { group.as_ref() };
    let mut want: Vec<usize> = (0..3).map(|i| g.event(i) as *const _ as usize).collect();
    want.sort_unstable();
    let got: Vec<usize> = list.as_slice().iter().map(Dep::key).collect();
    assert_eq!(got, want);
    drop(list);
    assert_eq!(
        g.refs.load(Ordering::Relaxed),
        1,
        "the list gave its refs back"
    );
    // SAFETY: the test's handle, given up last.
    unsafe { Group::release_handle(group, |_| unreachable!("nothing parked")) };
}

/// An iterator that panics after yielding some dependencies: the ones
/// collected so far are dropped with the unwinding list, so their refs go
/// back (else the group would never be freed).
#[test]
fn a_dependency_list_gives_back_its_refs_when_its_iterator_panics() {
    const EVENTS: usize = 6;
    let group = Group::new(EVENTS);
    // SAFETY: the test holds the group's handle until the end.
    let g = unsafe { group.as_ref() };
    for yielded in 0..EVENTS {
        let deps = (0..EVENTS).map(|i| {
            if i >= yielded {
                // Unwinds without the panic hook's report on stderr.
                std::panic::resume_unwind(Box::new("the iterator fails"));
            }
            // SAFETY: the handle keeps the group alive; `i < EVENTS`.
            unsafe { Group::dep(group, EVENTS - 1 - i) }
        });
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            DepList::collect(deps);
        }));
        assert!(caught.is_err());
        assert_eq!(
            g.refs.load(Ordering::Relaxed),
            1,
            "refs after a panic past {yielded}"
        );
    }
    // SAFETY: the test's handle, given up last.
    unsafe { Group::release_handle(group, |_| unreachable!("nothing parked")) };
}

/// Iterators whose hint says one dependency, against what they do: one
/// that yields none (an empty list, the iterator not asked again), and
/// one that panics on its second item (the first's ref goes back).
#[test]
fn a_dependency_list_copes_with_a_one_item_hint_that_is_wrong() {
    let group = Group::new(1);
    // SAFETY: the test holds the group's handle until the end.
    let g = unsafe { group.as_ref() };
    let none = DepList::collect(OneItemHint(
        |call| {
            assert_eq!(call, 1, "asked again after its end");
            None
        },
        0,
    ));
    assert!(none.as_slice().is_empty());
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        DepList::collect(OneItemHint(
            |call| match call {
                // SAFETY: the handle keeps the group alive.
                1 => Some(unsafe { Group::dep(group, 0) }),
                _ => std::panic::resume_unwind(Box::new("the iterator fails")),
            },
            0,
        ))
    }));
    assert!(caught.is_err());
    assert_eq!(
        g.refs.load(Ordering::Relaxed),
        1,
        "the first dependency's ref went back"
    );
    // SAFETY: the test's handle, given up last.
    unsafe { Group::release_handle(group, |_| unreachable!("nothing parked")) };
}

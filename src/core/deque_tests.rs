//! Unit tests of `deque.rs`.

use super::*;
use crate::core::rescue::Guarded;

fn ids(g: &OwnerGuard<'_, Deque<u32>>) -> Vec<u32> {
    let mut out = Vec::new();
    while let Some(x) = g.pop_above(0) {
        out.push(x);
    }
    out
}

#[test]
fn frames_pop_only_their_children_after_thefts() {
    let g = Guarded::new(Deque::default());
    let o = g.claim();
    o.push(1).unwrap();
    o.push(2).unwrap();
    let base = o.top();
    let child = o.push(3).unwrap();
    assert_eq!(child, base);
    // A thief takes the two oldest; the frame's child keeps its position.
    {
        let e = o.enter();
        assert_eq!(e.steal_one(), Some(1));
        assert_eq!(e.steal_one(), Some(2));
    }
    assert_eq!(o.top(), base + 1);
    assert!(matches!(o.pop_above(base), Popped::Task(3)));
    assert!(matches!(o.pop_above(base), Popped::Nothing));
    assert!(o.enter().is_empty());
}

#[test]
fn take_at_finds_buried_tasks_and_leaves_holes() {
    let g = Guarded::new(Deque::default());
    let o = g.claim();
    let a = o.push(10).unwrap();
    let b = o.push(20).unwrap();
    o.push(30).unwrap();
    let e = o.enter();
    // Wrong task at a position: refused.
    assert_eq!(e.take_at(a, |&x| x == 20), None);
    assert_eq!(e.take_at(a, |&x| x == 10), Some(10));
    // The hole is skipped by thieves.
    let mut got = Vec::new();
    assert_eq!(e.steal_half(|x| got.push(x)), 1);
    assert_eq!(got, [20]);
    assert_eq!(e.take_at(b, |&x| x == 20), None);
    assert_eq!(ids(&e), [30]);
}

#[test]
fn take_newest_only_takes_the_newest() {
    let g = Guarded::new(Deque::default());
    let o = g.claim();
    let a = o.push(1).unwrap();
    let b = o.push(2).unwrap();
    assert_eq!(o.take_newest(a, |_| true), None);
    assert_eq!(o.take_newest(b, |&x| x == 3), None);
    assert_eq!(o.take_newest(b, |&x| x == 2), Some(2));
    assert_eq!(o.take_newest(a, |&x| x == 1), Some(1));
    assert!(o.enter().is_empty());
}

#[test]
fn tasks_taken_back_out_of_order_leave_no_holes_behind() {
    let g = Guarded::new(Deque::with_capacity(8));
    let o = g.claim();
    // An older task stays at the bottom throughout.
    o.push(0).unwrap();
    for round in 0..1000 {
        let a = o.push(1).unwrap();
        let b = o.push(2).unwrap();
        // Spawn order: the older one first, from the middle.
        assert_eq!(o.enter().take_at(a, |&x| x == 1), Some(1));
        assert_eq!(o.take_newest(b, |&x| x == 2), Some(2));
        assert_eq!(o.top(), a, "round {round}: a hole stayed under the top");
    }
    assert!(matches!(o.pop_above(0), Popped::Task(0)));
}

#[test]
fn a_full_deque_grows_or_shifts_and_keeps_positions() {
    let g = Guarded::new(Deque::with_capacity(4));
    let o = g.claim();
    let mut pos = Vec::new();
    for i in 0..4u32 {
        pos.push(o.push(i).unwrap());
    }
    assert_eq!(o.push(4), Err(4));
    let e = o.enter();
    pos.push(e.push(4));
    assert_eq!(pos, [0, 1, 2, 3, 4]);
    // Thieves take the three oldest; the next pushes shift instead of
    // growing, and positions keep counting.
    for i in 0..3 {
        assert_eq!(e.steal_one(), Some(i));
    }
    for i in 5..8u32 {
        let p = e.push(i);
        assert_eq!(p, u64::from(i));
    }
    assert_eq!(e.take_at(3, |&x| x == 3), Some(3));
    assert_eq!(ids(&e), [7, 6, 5, 4]);
    assert!(e.is_empty());
}

#[test]
fn a_rescuer_takes_from_the_bottom_while_the_owner_pops_the_top() {
    if !crate::core::rescue::available() {
        return;
    }
    let g = Guarded::new(Deque::default());
    let o = g.claim();
    for i in 0..10u32 {
        o.push(i).unwrap();
    }
    let mut stolen = Vec::new();
    {
        let r = g.try_rescue().expect("the owner is not busy");
        assert_eq!(r.steal(true, |x| stolen.push(x)), 5);
        assert_eq!(r.steal(false, |x| stolen.push(x)), 1);
    }
    assert_eq!(stolen, [4, 3, 2, 1, 0, 5]);
    assert!(matches!(o.pop_above(0), Popped::Task(9)));
    assert_eq!(ids(&o.enter()), [8, 7, 6]);
}

/// The real barriers and threads: an owner pushing and popping as fast
/// as it can (growing the deque, taking tasks back, answering a thief
/// now and then) while rescuers steal from the bottom, more threads
/// than cores, until they have rescued some hundred times. Every task
/// is taken exactly once. (A smoke test: the races it runs are too
/// narrow to hit on demand; the loom model is what fails when an
/// ordering is weakened.)
#[test]
fn rescuers_and_a_busy_owner_take_every_task_once() {
    use crate::core::sync::{thread, Arc, AtomicBool, AtomicU8, AtomicUsize};
    if !crate::core::rescue::available() {
        return;
    }
    const MAX_TASKS: usize = 1 << 20;
    const RESCUES: usize = 200;
    let g = Arc::new(Guarded::new(Deque::with_capacity(16)));
    let taken: Arc<Vec<AtomicU8>> = Arc::new((0..MAX_TASKS).map(|_| AtomicU8::new(0)).collect());
    let stop = Arc::new(AtomicBool::new(false));
    let rescues = Arc::new(AtomicUsize::new(0));
    let rescuers: Vec<_> = (0..2)
        .map(|r| {
            let (g, taken, stop, rescues) =
                (g.clone(), taken.clone(), stop.clone(), rescues.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let Some(guard) = g.try_rescue() {
                        let n = rescues.fetch_add(1, Ordering::Relaxed);
                        guard.steal((n + r) % 2 == 0, |t: usize| {
                            taken[t].fetch_add(1, Ordering::Relaxed);
                        });
                    }
                }
            })
        })
        .collect();
    let owner = g.claim();
    let take = |t: usize| {
        taken[t].fetch_add(1, Ordering::Relaxed);
    };
    let pop = || match owner.pop_above(0) {
        Popped::Task(t) => Some(t),
        Popped::Nothing => None,
        Popped::Unsure => owner.enter().pop_above(0),
    };
    let mut tasks = 0;
    while tasks < MAX_TASKS && rescues.load(Ordering::Relaxed) < RESCUES {
        let t = tasks;
        tasks += 1;
        let pos = match owner.push(t) {
            Ok(pos) => pos,
            Err(t) => owner.enter().push(t),
        };
        match t % 16 {
            // A join taking its task back (the deque stays short, so
            // the owner and the rescuers often want the same task).
            0..=6 => {
                let is_it = |&x: &usize| x == t;
                if let Some(x) = owner
                    .take_newest(pos, is_it)
                    .or_else(|| owner.enter().take_at(pos, is_it))
                {
                    take(x);
                }
            }
            7..=13 => pop().into_iter().for_each(take),
            // Answering a thief from the exclusive section.
            14 => owner.enter().steal_one().into_iter().for_each(take),
            _ => {}
        }
    }
    while let Some(t) = pop() {
        take(t);
    }
    stop.store(true, Ordering::Relaxed);
    for h in rescuers {
        h.join().unwrap();
    }
    assert!(owner.enter().is_empty());
    let wrong: Vec<_> = (0..tasks)
        .filter(|&t| taken[t].load(Ordering::Relaxed) != 1)
        .take(10)
        .collect();
    assert!(
        wrong.is_empty(),
        "of {tasks} tasks and {} rescues, taken other than once: {wrong:?}",
        rescues.load(Ordering::Relaxed)
    );
}

//! Rescue: an idle worker taking tasks from the deque of a worker stuck in
//! user code (`src/core/rescue.rs`, `src/core/deque.rs`). The owner's exclusive
//! section and a rescuer exclude each other through a plain store, a light
//! barrier and a load on the owner's side and a try-lock, a heavy barrier
//! and a load on the rescuer's; outside that section the owner pushes and
//! pops with plain stores and loads while a rescuer takes from the bottom
//! (the THE protocol with asymmetric barriers). Every interleaving must
//! run each task exactly once, never let the two touch a slot at the same
//! time (loom's `UnsafeCell` reports a data race otherwise), and answer a
//! steal request exactly once when a rescuer answers it for the owner.
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::model;
use selvedge::protocols::{
    Deque, Guarded, Mailbox, Owner, Popped, Reply, ReplySlot, StealRequest, VictimSet,
};

/// The owner's pop as the worker does it: the fast path, then the
/// exclusive section when the fast path is unsure.
fn pop(owner: &Owner<'_, Deque<usize>>) -> Option<usize> {
    match owner.pop_above(0) {
        Popped::Task(t) => Some(t),
        Popped::Nothing => None,
        Popped::Unsure => owner.enter().pop_above(0),
    }
}

/// Runs the owner's side and a rescuer that steals (one task, or half)
/// from the bottom: the owner pushes `before` tasks before the rescuer
/// starts and one more while it runs, then pops until empty. Each task is
/// taken by exactly one of them.
fn owner_and_rescuer(before: usize, half: bool) {
    model(move || {
        let g = Arc::new(Guarded::new(Deque::with_capacity(4)));
        let owner = g.claim();
        for t in 0..before {
            owner.push(t).unwrap();
        }
        let rescuer = {
            let g = g.clone();
            thread::spawn(move || {
                let mut stolen = Vec::new();
                if let Some(r) = g.try_rescue() {
                    r.steal(half, |t| stolen.push(t));
                }
                stolen
            })
        };
        let mut ran = Vec::new();
        ran.extend(pop(&owner));
        owner.push(before).unwrap();
        while let Some(t) = pop(&owner) {
            ran.push(t);
        }
        ran.extend(rescuer.join().unwrap());
        ran.sort_unstable();
        assert_eq!(
            ran,
            (0..=before).collect::<Vec<_>>(),
            "a task was lost or ran twice"
        );
        assert!(owner.enter().is_empty());
    });
}

/// One task queued: the owner's pop and the rescuer's steal race for it.
#[test]
fn the_owner_and_a_rescuer_race_for_the_last_task() {
    owner_and_rescuer(1, false);
}

/// Two tasks queued: the rescuer takes the older half while the owner pops
/// the newest and pushes another.
#[test]
fn a_rescuer_steals_half_while_the_owner_pops_and_pushes() {
    owner_and_rescuer(2, true);
}

/// The owner's exclusive section (taking the oldest task, as it does when
/// it answers a thief) and a rescuer never hold the deque at once.
#[test]
fn the_exclusive_section_excludes_a_rescuer() {
    model(|| {
        let g = Arc::new(Guarded::new(Deque::with_capacity(4)));
        let owner = g.claim();
        owner.push(1).unwrap();
        owner.push(2).unwrap();
        let rescuer = {
            let g = g.clone();
            thread::spawn(move || {
                let mut stolen = Vec::new();
                if let Some(r) = g.try_rescue() {
                    r.steal(false, |t| stolen.push(t));
                }
                stolen
            })
        };
        let mut ran = Vec::new();
        ran.extend(owner.enter().steal_one());
        ran.extend(pop(&owner));
        ran.extend(rescuer.join().unwrap());
        ran.sort_unstable();
        assert_eq!(ran, [1, 2], "a task was lost or ran twice");
    });
}

struct World {
    tasks: Guarded<Deque<usize>>,
    mailbox: Mailbox,
    reply: ReplySlot<u64>,
    answers: AtomicUsize,
}

/// Answers every request in the mailbox with a task `take` gives, as
/// `answer_requests` does (with one victim, a request nobody can serve is
/// declined).
fn answer(w: &World, mut take: impl FnMut() -> Option<usize>) {
    while let Some(req) = w.mailbox.take() {
        assert_eq!(req.thief, 1);
        w.answers.fetch_add(1, Ordering::Relaxed);
        match take() {
            // The thief never withdraws here: the slot takes the work.
            Some(t) => assert!(w.reply.send_work(t as *mut u64)),
            None => w.reply.send_declined(),
        }
    }
}

/// A thief's request waits in the owner's mailbox; the owner answers it at
/// its next scheduler entry while a rescuer may answer it first. It is
/// answered exactly once, and the task it carries is one the owner did not
/// also run.
#[test]
fn a_request_is_answered_once_when_a_rescuer_answers_it() {
    model(|| {
        // Task ids are addresses, as real tasks are; leaked (loom reruns
        // the model, and a leak per run is fine in a test).
        let task = Box::into_raw(Box::new(7u64)) as usize;
        let w = Arc::new(World {
            tasks: Guarded::new(Deque::with_capacity(2)),
            mailbox: Mailbox::new(2),
            reply: ReplySlot::new(),
            answers: AtomicUsize::new(0),
        });
        let owner = w.tasks.claim();
        owner.push(task).unwrap();
        w.mailbox.post(StealRequest {
            thief: 1,
            tried: VictimSet::only(1),
            half: false,
        });
        let rescuer = {
            let w = w.clone();
            thread::spawn(move || {
                if let Some(r) = w.tasks.try_rescue() {
                    answer(&w, || {
                        let mut got = None;
                        r.steal(false, |t| got = Some(t));
                        got
                    });
                }
            })
        };
        let ran_here = {
            let e = owner.enter();
            answer(&w, || e.steal_one());
            drop(e);
            pop(&owner)
        };
        rescuer.join().unwrap();
        assert_eq!(
            w.answers.load(Ordering::Relaxed),
            1,
            "request lost or answered twice"
        );
        match w.reply.take() {
            Reply::Work(p) => {
                assert_eq!(p as usize, task);
                assert!(ran_here.is_none(), "the task was given away and run here");
            }
            Reply::Declined => assert_eq!(ran_here, Some(task)),
            Reply::Pending => panic!("no answer"),
        }
    });
}

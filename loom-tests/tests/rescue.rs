//! Rescue: an idle worker acting as the owner of a worker stuck in user
//! code (`src/rescue.rs`). The owner brackets its scheduler code with plain
//! beacon stores and a light barrier; the rescuer takes a try-lock, issues
//! the heavy barrier and re-reads the beacon. Every interleaving must keep
//! the two out of the state at the same time (loom's `UnsafeCell` reports a
//! data race otherwise), carry the state's contents between them (a lost or
//! duplicated task otherwise), and answer a steal request exactly once when
//! a rescuer answers it for the owner.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::model;
use selvedge::protocols::{Guarded, Mailbox, Queued, Reply, ReplySlot, StealRequest, VictimSet};

/// A deque stand-in: task ids, newest last.
#[derive(Default)]
struct Tasks(Vec<usize>);

impl Queued for Tasks {
    fn queued(&self) -> usize {
        self.0.len()
    }
}

/// The owner pushes two tasks and pops them (three scheduler entries)
/// while a rescuer that saw a quiet beacon steals what it finds: each task
/// is run by exactly one of them, and they never touch the deque at once.
#[test]
fn owner_and_rescuer_exclude_each_other() {
    model(|| {
        let g = Arc::new(Guarded::new(Tasks::default()));
        let rescuer = {
            let g = g.clone();
            thread::spawn(move || {
                let seen = g.sample();
                let mut stolen = Vec::new();
                if let Some(mut r) = g.try_rescue(seen) {
                    r.with(|d| stolen.append(&mut d.0));
                }
                stolen
            })
        };
        let owner = g.claim();
        let mut ran = Vec::new();
        owner.enter().with(|d| d.0.push(1));
        {
            let mut e = owner.enter();
            e.with(|d| d.0.push(2));
            e.with(|d| ran.extend(d.0.pop()));
        }
        owner.enter().with(|d| ran.extend(d.0.pop()));
        let stolen = rescuer.join().unwrap();
        ran.extend(stolen);
        ran.sort_unstable();
        assert_eq!(ran, [1, 2], "a task was lost or ran twice");
        assert_eq!(owner.enter().with(|d| d.0.len()), 0);
    });
}

struct World {
    tasks: Guarded<Tasks>,
    mailbox: Mailbox,
    reply: ReplySlot<u64>,
    answers: AtomicUsize,
}

/// Answers every request in the mailbox from `d`, as `answer_requests`
/// does (with one victim, a request nobody can serve is declined).
fn answer(w: &World, d: &mut Tasks) {
    while let Some(req) = w.mailbox.take() {
        assert_eq!(req.thief, 1);
        w.answers.fetch_add(1, Ordering::Relaxed);
        match d.0.pop() {
            Some(t) => w.reply.send_work(t as *mut u64),
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
            tasks: Guarded::new(Tasks(vec![task])),
            mailbox: Mailbox::new(2),
            reply: ReplySlot::new(),
            answers: AtomicUsize::new(0),
        });
        w.mailbox.post(StealRequest {
            thief: 1,
            tried: VictimSet::only(1),
            half: false,
        });
        let rescuer = {
            let w = w.clone();
            thread::spawn(move || {
                let seen = w.tasks.sample();
                if let Some(mut r) = w.tasks.try_rescue(seen) {
                    r.with(|d| answer(&w, d));
                }
            })
        };
        let owner = w.tasks.claim();
        let ran_here = {
            let mut e = owner.enter();
            e.with(|d| answer(&w, d));
            e.with(|d| d.0.pop())
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

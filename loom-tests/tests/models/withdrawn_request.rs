//! A steal request whose thief stops waiting before the answer comes
//! (`src/core/worker/withdraw.rs`, `ReplySlot` in `src/core/steal.rs`).
//!
//! The thief (worker 1) has a request in the victim's mailbox when it
//! finds other work, as a worker picks the root task of `Runtime::run`
//! from the injector while its request travels. That task then waits,
//! parked, for a task that only another worker can run; the only such
//! task is the one the victim (worker 2) is about to answer the request
//! with. An idle worker (worker 0, this thread) runs whatever it finds in
//! the injector and parks otherwise. Every interleaving must run the
//! stolen task, so that everyone finishes; loom reports a deadlock if the
//! task strands in the slot of a thief that no longer looks there, and a
//! data race if the task's contents reach its runner without a
//! happens-before from the victim.
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicPtr, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::{join_after, model};
use selvedge::protocols::{Mailbox, Reply, ReplySlot, Sleep, StealRequest, VictimSet};
use std::ptr;

const IDLE: usize = 0;
const THIEF: usize = 1;

/// A stolen task: the victim writes its contents before it answers, and
/// whoever runs it reads them (a loom cell: a read without a
/// happens-before from the write is reported).
struct Task(UnsafeCell<u64>);

struct World {
    /// The victim's mailbox.
    mailbox: Mailbox,
    /// The thief's reply slot.
    reply: ReplySlot<Task>,
    /// An injector of one task: written once, by whoever queues the task,
    /// and only read by the idle worker, which owns the task once it sees
    /// it. (Taking it with a `swap` would be more like the real injector,
    /// but loom 0.7 can let a read-modify-write miss a concurrent store:
    /// tokio-rs/loom#254.)
    injector: AtomicPtr<Task>,
    /// Only the idle worker parks through it: the other two entries stay
    /// `AWAKE`, so waking them does nothing (the thief waits on `ran`).
    sleep: Sleep,
    /// The stolen task ran.
    ran: AtomicBool,
    victim_finished: AtomicBool,
    thief_finished: AtomicBool,
}

/// `Registry::inject_list` for one task: queue it, wake a parked worker.
fn inject(w: &World, task: *mut Task) {
    w.injector.store(task, Ordering::SeqCst);
    w.sleep.wake_any();
}

/// `thief_withdraws: false` is what the runtime did before withdrawal
/// existed: loom then finds the interleaving in which the answer lands in
/// the slot of a thief that waits, in its own task, for that very work,
/// while the idle worker sleeps, and reports the deadlock (a runtime's test
/// saw it as a root task waiting 10 s for a task it had been handed
/// itself). Not a test of its own: loom aborts the process after a
/// deadlock, so `should_panic` cannot catch it; see docs/PROTOCOLS.md,
/// section 2, for how each weakening was checked.
fn a_thief_stops_waiting_before_its_answer(thief_withdraws: bool) {
    model(move || {
        let me = thread::current();
        let w = Arc::new(World {
            mailbox: Mailbox::new(3),
            reply: ReplySlot::new(),
            injector: AtomicPtr::new(ptr::null_mut()),
            sleep: Sleep::new(vec![me.clone(), me.clone(), me]),
            ran: AtomicBool::new(false),
            victim_finished: AtomicBool::new(false),
            thief_finished: AtomicBool::new(false),
        });
        // The thief's request, in flight.
        w.mailbox.post(StealRequest {
            thief: THIEF,
            tried: VictimSet::only(THIEF),
            half: false,
        });
        let victim = {
            let w = w.clone();
            thread::spawn(move || {
                let req = w.mailbox.take().expect("the thief's request");
                let task = Box::into_raw(Box::new(Task(UnsafeCell::new(0))));
                // SAFETY: the task is ours until it is sent.
                unsafe { (*task).0.with_mut(|p| *p = 42) };
                // `Worker::reply`, then `Worker::requeue_refused`.
                if !w.reply.send_work(task) {
                    inject(&w, task);
                    w.reply.send_declined();
                }
                w.sleep.wake(req.thief);
                w.victim_finished.store(true, Ordering::SeqCst);
            })
        };
        let thief = {
            let w = w.clone();
            thread::spawn(move || {
                // `Worker::stop_waiting`, before it runs the task it found.
                if thief_withdraws {
                    match w.reply.withdraw() {
                        None => {}
                        // `Worker::withdraw_request`: the answer came first.
                        Some(Reply::Work(task)) => inject(&w, task),
                        Some(_) => panic!("the victim had work, yet the thief got none"),
                    }
                }
                // The task it found: it waits for the stolen task to run.
                while !w.ran.load(Ordering::SeqCst) {
                    thread::park();
                }
                w.thief_finished.store(true, Ordering::SeqCst);
            })
        };
        let thief_thread = thief.thread().clone();
        // The idle worker: runs injected work, parks otherwise.
        loop {
            let task = w.injector.load(Ordering::SeqCst);
            if !task.is_null() {
                // SAFETY: whoever injected the task gave it up, and only
                // this worker takes from the injector.
                let task = unsafe { Box::from_raw(task) };
                // SAFETY: the task is ours to run.
                assert_eq!(task.0.with(|p| unsafe { *p }), 42);
                w.ran.store(true, Ordering::SeqCst);
                thief_thread.unpark();
                break;
            }
            w.sleep
                .idle_park(IDLE, || !w.injector.load(Ordering::SeqCst).is_null());
        }
        join_after(victim, &w.victim_finished);
        join_after(thief, &w.thief_finished);
        // The request has ended: declined after the withdrawal, or taken
        // by it; no work is left in the slot.
        match w.reply.take() {
            Reply::Declined | Reply::Pending => {}
            Reply::Work(_) => panic!("work left in the slot of a thief that stopped waiting"),
        }
    });
}

/// The protocol: the thief withdraws its request before it runs other
/// work, and an answer that finds the request withdrawn goes to the
/// injector.
#[test]
fn work_answered_to_a_thief_that_stopped_waiting_reaches_an_idle_worker() {
    a_thief_stops_waiting_before_its_answer(true);
}

/// A thief that withdrew its request and then waits for work again (it
/// takes from its slot, which undoes the withdrawal) while the victim
/// answers: the task runs exactly once, on the thief (the answer came
/// after the undoing) or on the idle worker (it went to the injector), and
/// the request ends with one answer.
#[test]
fn a_thief_back_to_waiting_takes_the_answer_or_the_injector_does() {
    model(|| {
        let me = thread::current();
        let w = Arc::new(World {
            mailbox: Mailbox::new(3),
            reply: ReplySlot::new(),
            injector: AtomicPtr::new(ptr::null_mut()),
            sleep: Sleep::new(vec![me.clone(), me.clone(), me]),
            ran: AtomicBool::new(false),
            victim_finished: AtomicBool::new(false),
            thief_finished: AtomicBool::new(false),
        });
        w.mailbox.post(StealRequest {
            thief: THIEF,
            tried: VictimSet::only(THIEF),
            half: false,
        });
        let thief = {
            let w = w.clone();
            thread::spawn(move || {
                // It ran other work (withdrawn), and is back to waiting.
                match w.reply.withdraw() {
                    Some(Reply::Work(task)) => inject(&w, task),
                    Some(_) => panic!("the victim had work, yet the thief got none"),
                    None => loop {
                        match w.reply.take() {
                            Reply::Pending => thread::park(),
                            Reply::Declined => break,
                            Reply::Work(task) => {
                                // SAFETY: the victim sent the task to us.
                                let task = unsafe { Box::from_raw(task) };
                                // SAFETY: the task is ours to run.
                                assert_eq!(task.0.with(|p| unsafe { *p }), 42);
                                assert!(!w.ran.swap(true, Ordering::SeqCst), "ran twice");
                                w.sleep.wake(IDLE);
                                break;
                            }
                        }
                    },
                }
                w.thief_finished.store(true, Ordering::SeqCst);
            })
        };
        let victim = {
            let w = w.clone();
            let thief_thread = thief.thread().clone();
            thread::spawn(move || {
                let req = w.mailbox.take().expect("the thief's request");
                let task = Box::into_raw(Box::new(Task(UnsafeCell::new(0))));
                // SAFETY: the task is ours until it is sent.
                unsafe { (*task).0.with_mut(|p| *p = 42) };
                if !w.reply.send_work(task) {
                    inject(&w, task);
                    w.reply.send_declined();
                }
                // `Sleep::wake(thief)`: the thief waits parked, not
                // registered here (see `World::sleep`).
                assert_eq!(req.thief, THIEF);
                thief_thread.unpark();
                w.victim_finished.store(true, Ordering::SeqCst);
            })
        };
        // The idle worker: runs injected work until the task has run.
        loop {
            let task = w.injector.load(Ordering::SeqCst);
            if !task.is_null() {
                // SAFETY: as in the model above.
                let task = unsafe { Box::from_raw(task) };
                // SAFETY: the task is ours to run.
                assert_eq!(task.0.with(|p| unsafe { *p }), 42);
                assert!(!w.ran.swap(true, Ordering::SeqCst), "ran twice");
                break;
            }
            if w.ran.load(Ordering::SeqCst) {
                break;
            }
            w.sleep.idle_park(IDLE, || {
                !w.injector.load(Ordering::SeqCst).is_null() || w.ran.load(Ordering::SeqCst)
            });
        }
        join_after(victim, &w.victim_finished);
        join_after(thief, &w.thief_finished);
        assert!(
            matches!(w.reply.take(), Reply::Pending),
            "an answer left over"
        );
    });
}

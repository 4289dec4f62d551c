//! A task pushed on a worker's deque while another worker goes to park
//! (`Sleep::idle_park_for` and `Sleep::sleepers_after_queueing` in
//! `src/core/park.rs`; `Worker::push` and `share_oldest`).
//!
//! The pusher (worker 1) pushes one task on its real deque, then does what
//! `Worker::push` does after a push: if it sees a sleeper, it moves its
//! oldest task to the injector and wakes one. Then it blocks in its own
//! code until that task has run, as a root that spawns and then waits on
//! a channel does. The idle worker (worker 0, this thread) runs what it
//! finds in the injector, takes the task from the pusher's deque as a
//! rescuer when it sees it queued there, and idle-parks otherwise, with
//! the re-check the runtime makes: the injector and the other deques.
//! Every interleaving must run the task; loom reports a deadlock if the
//! pusher missed the sleeper while the sleeper missed the task.
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::{join_after, model};
use selvedge::protocols::{Deque, Guarded, Sleep};

const IDLE: usize = 0;
const TASK: usize = 7;

struct World {
    /// The pusher's deque.
    deque: Guarded<Deque<usize>>,
    /// An injector of one task (0: empty): stored by the pusher, only read
    /// by the idle worker. (A `swap` to take it would be more like the real
    /// injector, but loom 0.7 can let a read-modify-write miss a concurrent
    /// store: tokio-rs/loom#254.)
    injector: AtomicUsize,
    /// Only the idle worker parks through it; the pusher's entry stays
    /// `AWAKE`.
    sleep: Sleep,
    /// The task ran.
    ran: AtomicBool,
    pusher_finished: AtomicBool,
}

#[test]
fn a_task_pushed_while_a_worker_parks_reaches_it() {
    model(|| {
        let me = thread::current();
        let w = Arc::new(World {
            deque: Guarded::new(Deque::with_capacity(4)),
            injector: AtomicUsize::new(0),
            sleep: Sleep::new(vec![me.clone(), me]),
            ran: AtomicBool::new(false),
            pusher_finished: AtomicBool::new(false),
        });
        let pusher = {
            let w = w.clone();
            thread::spawn(move || {
                let owner = w.deque.claim();
                owner.push(TASK).unwrap();
                // `Worker::push`, then `share_oldest`.
                if w.sleep.sleepers_after_queueing() {
                    if let Some(task) = owner.enter().steal_one() {
                        w.injector.store(task, Ordering::SeqCst);
                        w.sleep.wake_any();
                    }
                }
                // Its own code, waiting for the task.
                while !w.ran.load(Ordering::SeqCst) {
                    thread::park();
                }
                w.pusher_finished.store(true, Ordering::SeqCst);
            })
        };
        let pusher_thread = pusher.thread().clone();
        let mut ran = None;
        while ran.is_none() {
            let injected = w.injector.load(Ordering::SeqCst);
            if injected != 0 {
                ran = Some(injected);
            } else if w.deque.peek().queued_estimate() > 0 {
                // The runtime asks the pusher, finds it stuck in its own
                // code and rescues the task (`Worker::rescue`).
                match w.deque.try_rescue() {
                    Some(r) => {
                        r.steal(false, |t| ran = Some(t));
                    }
                    None => thread::yield_now(), // the pusher is sharing it
                }
            } else {
                w.sleep.idle_park(IDLE, || {
                    w.injector.load(Ordering::SeqCst) != 0 || w.deque.peek().queued_estimate() > 0
                });
            }
        }
        assert_eq!(ran, Some(TASK));
        w.ran.store(true, Ordering::SeqCst);
        pusher_thread.unpark();
        join_after(pusher, &w.pusher_finished);
    });
}

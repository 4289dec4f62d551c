//! Idle parking against the ways work arrives: an injector push with
//! `wake_any` (to an idle worker, or to one waiting in a join when none is
//! idle), a mailbox post with `wake`, and shutdown after the runtime
//! was observed quiescent. loom fails a model whose thread parks forever,
//! so a lost wake-up shows up as a deadlock.
use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::{join_after, model};
use selvedge::protocols::{Mailbox, Sleep, StealRequest, VictimSet};

struct World {
    injector: AtomicUsize,
    mailbox: Mailbox,
    shutdown: AtomicBool,
    /// The other thread is done touching the world (see `join_after`).
    finished: AtomicBool,
    sleep: Sleep,
}

fn world() -> Arc<World> {
    Arc::new(World {
        injector: AtomicUsize::new(0),
        mailbox: Mailbox::new(2),
        shutdown: AtomicBool::new(false),
        finished: AtomicBool::new(false),
        sleep: Sleep::new(vec![thread::current()]),
    })
}

/// The worker's idle loop (worker 0 is the model's main thread): take
/// injected work, answer requests, otherwise park; stop on shutdown.
fn idle_loop(w: &World, want_items: usize, want_requests: usize) {
    let (mut items, mut requests) = (0, 0);
    loop {
        if w.injector.load(Ordering::SeqCst) > 0 {
            w.injector.fetch_sub(1, Ordering::SeqCst);
            items += 1;
            continue;
        }
        if w.mailbox.take().is_some() {
            requests += 1;
            continue;
        }
        if items == want_items && requests == want_requests && w.shutdown.load(Ordering::SeqCst) {
            return;
        }
        w.sleep.idle_park(0, || {
            w.injector.load(Ordering::SeqCst) > 0
                || !w.mailbox.is_empty()
                || w.shutdown.load(Ordering::SeqCst)
        });
    }
}

#[test]
fn injected_work_wakes_an_idle_worker() {
    model(|| {
        let w = world();
        let producer = {
            let w = w.clone();
            thread::spawn(move || {
                w.injector.fetch_add(1, Ordering::SeqCst);
                w.sleep.wake_any();
                // Then wait until the runtime is quiescent and stop it.
                w.sleep
                    .wait_quiescent(|| w.injector.load(Ordering::SeqCst) == 0);
                w.shutdown.store(true, Ordering::SeqCst);
                w.sleep.wake_all();
                w.finished.store(true, Ordering::SeqCst);
            })
        };
        idle_loop(&w, 1, 0);
        join_after(producer, &w.finished);
    });
}

/// A steal request must wake its victim by itself: the thief posts into
/// the victim's mailbox and calls `Sleep::wake` (as
/// `Worker::post_request` and `Worker::forward` do) while the victim is
/// going to park. The victim stops as soon as it took the request, and
/// nothing else ever wakes it (no shutdown, no `wake_all`, no other
/// work), so a lost wake-up leaves it parked for good and loom reports a
/// deadlock. (An earlier version ended with a shutdown `wake_all`, which
/// woke the victim whatever `wake` did: it passed with `wake`'s unpark
/// taken out.)
///
/// Catches: `wake` not unparking, or not moving the state to `AWAKE` (the
/// idle sleeper re-parks while it reads `SLEEPING`), or a victim that
/// parks without re-checking its mailbox after announcing itself. Under
/// loom the mailbox is a `Mutex<VecDeque>` whose lock orders the post
/// before or after the victim's re-check, so this model does not depend on
/// the Dekker fences of `wake` and `idle_park` (the signal model in
/// `core/signal.rs` does).
fn a_steal_request_wakes_its_victim(victim_waits_in_a_join: bool) {
    model(move || {
        let w = world();
        let thief = {
            let w = w.clone();
            thread::spawn(move || {
                w.mailbox.post(StealRequest {
                    thief: 1,
                    tried: VictimSet::only(1),
                    half: false,
                });
                w.sleep.wake(0);
                w.finished.store(true, Ordering::SeqCst);
            })
        };
        // The victim: answers its mailbox, else parks (idle, or as a join
        // waiter still holding tasks for thieves, the usual victim: an
        // idle-parked worker is not picked).
        while w.mailbox.take().is_none() {
            if victim_waits_in_a_join {
                w.sleep.join_park(0, || !w.mailbox.is_empty());
            } else {
                w.sleep.idle_park(0, || !w.mailbox.is_empty());
            }
        }
        join_after(thief, &w.finished);
    });
}

#[test]
fn a_steal_request_wakes_its_idle_parked_victim() {
    a_steal_request_wakes_its_victim(false);
}

#[test]
fn a_steal_request_wakes_its_victim_waiting_in_a_join() {
    a_steal_request_wakes_its_victim(true);
}

/// A worker waiting in a join (parked as a join waiter, one worker in all)
/// must be woken by work injected for the runtime: with nobody idle,
/// `wake_any` falls back to a join waiter, which takes injected work while
/// it waits. Here the injected task is what completes the join.
#[test]
fn injected_work_wakes_a_worker_waiting_in_a_join() {
    model(|| {
        let w = world();
        let done = Arc::new(AtomicBool::new(false));
        let producer = {
            let w = w.clone();
            thread::spawn(move || {
                w.injector.fetch_add(1, Ordering::SeqCst);
                w.sleep.wake_any();
                w.finished.store(true, Ordering::SeqCst);
            })
        };
        // The join's wait loop: run injected work, else park as a waiter.
        while !done.load(Ordering::SeqCst) {
            if w.injector.load(Ordering::SeqCst) > 0 {
                w.injector.fetch_sub(1, Ordering::SeqCst);
                done.store(true, Ordering::SeqCst); // the task the join awaited
                continue;
            }
            w.sleep.join_park(0, || {
                w.injector.load(Ordering::SeqCst) > 0 || done.load(Ordering::SeqCst)
            });
        }
        join_after(producer, &w.finished);
    });
}

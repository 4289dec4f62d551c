//! A steal request travels thief -> victim 1 (no work, forwards) -> victim 2,
//! which answers with work or declines; the thief parks until the answer
//! lands in its reply slot. Every interleaving must deliver exactly one
//! answer, carry the task intact, and never lose the thief's wake-up.
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::{join_after, model};
use selvedge::protocols::{Mailbox, Reply, ReplySlot, Sleep, StealRequest, VictimSet};

struct World {
    mailboxes: [Mailbox; 3],
    reply: ReplySlot<u64>,
    sleep: Sleep,
    /// Victim 2, the last to wake the thief, is done (see `join_after`).
    finished: AtomicBool,
}

fn world() -> Arc<World> {
    // Only the thief (this thread) parks; the victims never do, so the
    // registry's other entries are never unparked for real.
    let me = thread::current();
    Arc::new(World {
        mailboxes: [Mailbox::new(3), Mailbox::new(3), Mailbox::new(3)],
        reply: ReplySlot::new(),
        sleep: Sleep::new(vec![me.clone(), me.clone(), me]),
        finished: AtomicBool::new(false),
    })
}

fn request_round_trip(victim2_has_work: bool) {
    model(move || {
        let w = world();
        w.mailboxes[1].post(StealRequest {
            thief: 0,
            tried: VictimSet::only(0),
            half: false,
        });
        w.sleep.wake(1);
        // Victim 1 runs once the request is in its mailbox (a victim that
        // polls an empty mailbox just carries on, which needs no model).
        let v1 = {
            let w = w.clone();
            thread::spawn(move || {
                let mut req = w.mailboxes[1].take().expect("request delivered");
                // No work here: forward to the one victim not yet tried.
                req.tried.insert(1);
                assert!(!req.tried.contains(2));
                w.mailboxes[2].post(req);
                w.sleep.wake(2);
                let w2 = w.clone();
                thread::spawn(move || {
                    let req = w2.mailboxes[2].take().expect("request forwarded");
                    assert_eq!(req.thief, 0);
                    if victim2_has_work {
                        // The thief does not withdraw: the slot takes it.
                        assert!(w2.reply.send_work(Box::into_raw(Box::new(42u64))));
                    } else {
                        w2.reply.send_declined();
                    }
                    w2.sleep.wake(req.thief);
                    w2.finished.store(true, Ordering::SeqCst);
                })
            })
        };
        let answer = loop {
            match w.reply.take() {
                Reply::Pending => w.sleep.join_park(0, || w.reply.has_reply()),
                other => break other,
            }
        };
        match answer {
            Reply::Work(p) => {
                assert!(victim2_has_work);
                // SAFETY: the victim sent ownership of a boxed u64.
                assert_eq!(*unsafe { Box::from_raw(p) }, 42);
            }
            Reply::Declined => assert!(!victim2_has_work),
            Reply::Pending => unreachable!(),
        }
        let v2 = v1.join().unwrap();
        join_after(v2, &w.finished);
        assert_eq!(w.reply.take(), Reply::Pending, "a second answer arrived");
    });
}

#[test]
fn forwarded_request_is_answered_with_work() {
    request_round_trip(true);
}

#[test]
fn forwarded_request_returns_declined() {
    request_round_trip(false);
}

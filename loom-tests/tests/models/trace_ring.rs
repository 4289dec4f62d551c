//! The trace ring (`selvedge::protocols::EventRing`): one worker appends
//! its events while another thread copies them out to write a trace. The
//! copy must keep only whole events, in order, however the writer's
//! overwriting of the oldest slots interleaves with it: a kept event that
//! mixes words of two events would give the trace a name pointer of one
//! event and a length of another. Without the writer's release fence
//! between its claim and its words (or the reader's acquire fence), a
//! reader can see a word of a newer event and still an old claim, and keep
//! a torn event: this model then fails.
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::model;
use selvedge::protocols::EventRing;

/// Checks a snapshot: whole events (both words equal), consecutive, and
/// as many as were written less those lost.
fn check(events: &[[u64; 2]], lost: u64) {
    for e in events {
        assert_eq!(e[0], e[1], "a torn event was kept: {e:?}");
    }
    for (k, e) in events.iter().enumerate() {
        assert_eq!(e[0], lost + 1 + k as u64, "events out of order: {events:?}");
    }
}

#[test]
fn a_reader_beside_an_overwriting_writer_keeps_whole_events() {
    model(|| {
        // Two slots, three events: the third overwrites the first's slot,
        // possibly while the reader copies it. (The reader on a thread of
        // its own: loom then interleaves it with every push.)
        let ring = Arc::new(EventRing::<2>::new(2));
        let reader = {
            let ring = ring.clone();
            thread::spawn(move || {
                let s = ring.snapshot();
                check(&s.events, s.lost);
            })
        };
        for i in 1..=3u64 {
            ring.push([i, i]);
        }
        reader.join().unwrap();
        let s = ring.snapshot();
        check(&s.events, s.lost);
        assert_eq!(s.events, vec![[2, 2], [3, 3]]);
    });
}

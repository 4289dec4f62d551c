//! A single-writer ring of fixed-size events that any thread may copy out
//! while its writer goes on: the store of a worker's trace events.
//!
//! The writer (a worker, for its own events) pays no read-modify-write and
//! no fence instruction: on x86 each of its stores is a plain `mov`. A
//! reader copies the events it finds, then discards every event whose slot
//! the writer may have begun to overwrite meanwhile, so what it keeps is
//! whole: a seqlock whose sequence is the event count.
//!
//! - `claimed` is the number of events the writer has started to write. It
//!   is stored, then a release fence, before the words of event `j` go into
//!   slot `j % capacity`.
//! - `published` is the number of events written whole; stored with
//!   release after the words.
//! - A reader loads `published` (acquire), copies events
//!   `published - capacity ..`, then an acquire fence and loads `claimed`.
//!   Had it read any word of a later event `j` from a slot, the fence pair
//!   makes `claimed >= j + 1` visible to it; so an event `i` is kept only
//!   if `i + capacity >= claimed`, that is, no later event reused its slot.
//!
//! Modelled under loom in `loom-tests/tests/models/trace_ring.rs`.

// Its `pub` items are the loom models' API (`selvedge::protocols`, built
// with `--cfg loom`); elsewhere they are the crate's own.
#![cfg_attr(not(loom), allow(unreachable_pub))]

use crate::core::sync::{fence, AtomicU64, Ordering};

/// A ring of events of `N` words each, written by one thread.
pub struct EventRing<const N: usize> {
    slots: Box<[[AtomicU64; N]]>,
    /// Events the writer has started to write.
    claimed: AtomicU64,
    /// Events written whole.
    published: AtomicU64,
}

/// What a reader copied out of a ring.
#[derive(Debug, Default)]
pub struct Snapshot<const N: usize> {
    /// The events kept, oldest first, each whole.
    pub events: Vec<[u64; N]>,
    /// Events written before those and no longer held (overwritten, or
    /// being overwritten while the reader copied them).
    pub lost: u64,
}

impl<const N: usize> EventRing<N> {
    /// A ring holding the latest `capacity` events (at least 1).
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            slots: (0..capacity)
                .map(|_| std::array::from_fn(|_| AtomicU64::new(0)))
                .collect(),
            claimed: AtomicU64::new(0),
            published: AtomicU64::new(0),
        }
    }

    /// How many events the ring holds.
    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Appends `event`, overwriting the oldest when full.
    ///
    /// Only one thread may ever call this on a given ring (its owner).
    #[inline]
    pub fn push(&self, event: [u64; N]) {
        // Only the owner stores `published`: its own last store.
        let n = self.published.load(Ordering::Relaxed);
        self.claimed.store(n + 1, Ordering::Relaxed);
        // Orders the claim before the words: a reader that sees a word of
        // this event sees the claim (its acquire fence pairs with this).
        fence(Ordering::Release);
        let slot = &self.slots[(n % self.slots.len() as u64) as usize];
        for (word, value) in slot.iter().zip(event) {
            word.store(value, Ordering::Relaxed);
        }
        self.published.store(n + 1, Ordering::Release);
    }

    /// The events written so far that the ring still holds whole, oldest
    /// first. Any thread may call this, while the owner pushes.
    pub fn snapshot(&self) -> Snapshot<N> {
        let cap = self.slots.len() as u64;
        let end = self.published.load(Ordering::Acquire);
        let begin = end.saturating_sub(cap);
        let mut events: Vec<[u64; N]> = (begin..end)
            .map(|i| {
                let slot = &self.slots[(i % cap) as usize];
                std::array::from_fn(|w| slot[w].load(Ordering::Relaxed))
            })
            .collect();
        // Pairs with the writer's release fence: a word of a later event
        // read above makes its claim visible here.
        fence(Ordering::Acquire);
        let claimed = self.claimed.load(Ordering::Relaxed);
        let whole_from = claimed.saturating_sub(cap).max(begin);
        let torn = (whole_from - begin).min(events.len() as u64) as usize;
        events.drain(..torn);
        Snapshot {
            lost: end - events.len() as u64,
            events,
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_full_ring_keeps_the_latest_events_in_order() {
        let ring = EventRing::<2>::new(4);
        for i in 0..10u64 {
            ring.push([i, i * 10]);
        }
        let s = ring.snapshot();
        assert_eq!(s.events, vec![[6, 60], [7, 70], [8, 80], [9, 90]]);
        assert_eq!(s.lost, 6);
    }

    #[test]
    fn a_reader_beside_the_writer_keeps_only_whole_events() {
        let ring = std::sync::Arc::new(EventRing::<3>::new(8));
        let writer = {
            let ring = ring.clone();
            std::thread::spawn(move || {
                for i in 1..=200_000u64 {
                    ring.push([i, i, i]);
                }
            })
        };
        let mut reads = 0;
        while !writer.is_finished() || reads == 0 {
            let s = ring.snapshot();
            for pair in s.events.windows(2) {
                assert_eq!(pair[0][0] + 1, pair[1][0], "events out of order");
            }
            for e in &s.events {
                assert!(e[0] == e[1] && e[1] == e[2], "a torn event was kept: {e:?}");
            }
            reads += 1;
        }
        writer.join().unwrap();
    }
}

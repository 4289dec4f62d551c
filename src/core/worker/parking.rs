//! A worker parking: what it notes first (stranded work to rescue, what
//! it waits for, blocks to trim), and how long it sleeps, by what it waits
//! for.

use super::{Until, Worker, RESCUE_AFTER};
use crate::core::block_alloc;
use crate::core::block_pool;
use crate::core::sync::Ordering;
use std::time::{Duration, Instant};

/// How often a worker waiting in `sync_root` re-checks quiescence while parked.
const SYNC_ROOT_POLL: Duration = Duration::from_micros(500);

impl Worker {
    /// Parks until what it waits for (`until`) may hold or work may have
    /// come, after a rescue scan, for at most the time something stranded
    /// or in flight, or a pool to trim, gives it.
    #[cold]
    pub(super) fn park_untraced(&self, until: &Until<'_>) {
        let shared = &*self.shared;
        let me = self.index;
        if matches!(until, Until::Quiescent) {
            // Nobody signals quiescence to a worker: poll, slowly.
            shared.counters[me].parks.bump();
            std::thread::park_timeout(SYNC_ROOT_POLL);
            return;
        }
        let scan = self.rescue_scan();
        if scan.rescued {
            return; // our reply, or work for others, is on its way
        }
        // Someone's tasks may be stranded: come back to rescue them. An
        // operation without a callback is in flight: come back to test it.
        let timeout = [
            scan.stranded.then_some(RESCUE_AFTER),
            self.parked_poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        let incoming = || !shared.mailboxes[me].is_empty() || shared.replies[me].has_reply();
        crate::core::stall::note_park(shared, me, until);
        shared.counters[me].parks.bump();
        match until {
            Until::Shutdown => {
                // A pool holding a busy spell's blocks is trimmed once the
                // worker has stayed idle a while, not at once: the next
                // round of an iterative program would need them again.
                let trim =
                    block_alloc::pool_over_idle_capacity() || shared.outside_blocks.has_surplus();
                let timeout = match (trim, timeout) {
                    (true, Some(t)) => Some(t.min(block_pool::POOL_TRIM_AFTER)),
                    (true, None) => Some(block_pool::POOL_TRIM_AFTER),
                    (false, t) => t,
                };
                let parked_at = Instant::now();
                // Tasks queued on a deque whose pusher saw no sleeper: ask
                // for them (unless a request of ours is out, whose answer
                // wakes us).
                let queued = || !self.in_flight.get() && shared.queued_beside(me);
                shared.sleep.idle_park_for(
                    me,
                    || {
                        incoming()
                            || !shared.outside_empty()
                            || shared.shutdown.load(Ordering::SeqCst)
                            || queued()
                    },
                    timeout,
                );
                if trim && parked_at.elapsed() >= block_pool::POOL_TRIM_AFTER {
                    // The exchange and the pool for threads outside the
                    // workers only when no other worker is busy: one that
                    // makes tasks takes its blocks back from there.
                    let everyone_idle = shared.sleep.quiescent_except(me, || true);
                    block_alloc::trim_pool(everyone_idle);
                    if everyone_idle {
                        shared.outside_blocks.trim();
                    }
                }
            }
            Until::Complete(c, _) => {
                if c.register(&self.waker) {
                    return;
                }
                shared.sleep.join_park_for(
                    me,
                    || incoming() || !shared.outside_empty() || c.is_complete(),
                    timeout,
                );
            }
            Until::Latch(latch) => {
                // The task that brings the count to zero unparks us, once
                // our own counts are in it.
                if latch.flush_local() {
                    return;
                }
                shared.sleep.join_park_for(
                    me,
                    || incoming() || !shared.outside_empty() || latch.is_set(),
                    timeout,
                );
            }
            Until::Quiescent => {}
        }
    }
}

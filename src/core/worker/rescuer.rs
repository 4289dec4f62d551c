//! An idle worker acting for workers stuck in user code: before it parks,
//! it looks for tasks or steal requests stranded behind a worker that has
//! been out of its scheduler code for a while, and takes that worker's
//! place for a moment to hand them out (the protocol is `rescue.rs`'s).

use super::{Worker, RESCUE_AFTER};
use crate::core::rescue;
use crate::core::steal::VictimSet;
use std::time::Instant;

/// What an idle worker's look at the other workers found.
#[derive(Default)]
pub(super) struct Scan {
    /// It took some worker's place and answered its requests.
    pub(super) rescued: bool,
    /// Some worker outside its scheduler code has tasks queued or requests
    /// waiting: park only briefly.
    pub(super) stranded: bool,
}

impl Worker {
    /// Looks at the other workers for tasks or requests stranded behind a
    /// worker stuck in user code, and rescues those that made no progress
    /// for `RESCUE_AFTER`.
    #[cold]
    pub(super) fn rescue_scan(&self) -> Scan {
        let mut scan = Scan::default();
        if !rescue::available() {
            return scan;
        }
        let shared = &*self.shared;
        let now = Instant::now();
        for (v, seen) in self.seen.iter().enumerate() {
            if v == self.index {
                continue;
            }
            // Progress: the owner counts every task it runs, in place too.
            let progress = shared.counters[v].tasks_run.load();
            let queued = shared.deques[v].peek().queued_estimate();
            if shared.deques[v].is_busy() || (queued == 0 && shared.mailboxes[v].is_empty()) {
                seen.set((progress, queued, now));
                continue;
            }
            scan.stranded = true;
            let (old_progress, old_queued, since) = seen.get();
            if old_progress != progress || old_queued != queued {
                seen.set((progress, queued, now));
            } else if now.duration_since(since) >= RESCUE_AFTER && self.rescue(v) {
                scan.rescued = true;
                let queued = shared.deques[v].peek().queued_estimate();
                seen.set((progress, queued, now));
            }
        }
        scan
    }

    /// Acts as worker `v`'s owner, if it is not in its scheduler's
    /// exclusive section: asks it for work (if this worker has no request
    /// out) and answers every request waiting in its mailbox from the
    /// bottom of its deque, while `v` may come back to the top at any
    /// moment. Loop parts running on `v` are not split: that is `v`'s
    /// business when it comes back.
    fn rescue(&self, v: usize) -> bool {
        let shared = &*self.shared;
        let Some(g) = shared.deques[v].try_rescue() else {
            return false;
        };
        if !self.in_flight.get() && g.get().queued_estimate() > 0 {
            // Served below, with the requests already waiting.
            self.post_request(v, VictimSet::only(self.index));
        }
        let mailbox = &shared.mailboxes[v];
        let mut moved = 0;
        while let Some(req) = mailbox.take() {
            let mut list = std::ptr::null_mut();
            let n = g.steal(req.half, |t| list = t.into_list(list));
            moved += n;
            self.reply(req, (n > 0).then_some((list, n)), v);
        }
        if moved > 0 {
            shared.counters[self.index].rescues.bump();
        }
        true
    }
}

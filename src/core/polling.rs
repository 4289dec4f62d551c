//! How workers test the operations in flight outside the pool
//! (`completions.rs`): between two tasks, and instead of parking.
//!
//! A busy worker tests them between two tasks, at most every
//! [`POLL_BETWEEN_TASKS_TICKS`], so that a completion waits for the end of
//! a task rather than for the operation's own thread, while tasks of a
//! microsecond do not each pay for a test.
//!
//! An idle worker tests them in every round of its search for work, and
//! parks after a few hundred rounds (a tenth of a millisecond or so). From
//! then on a completion would wait for the operation's own callback (a
//! CUDA host function, tens of microseconds after the work, then a worker
//! woken), or for a parked worker's timeout (which the kernel's timer
//! slack stretches by tens of microseconds). So one worker at a time holds
//! the *polling duty*: while an operation is in flight (an MPI message,
//! GPU work, a user's `Promise::fulfill_when`) it goes on testing, and
//! yields the CPU between rounds, instead of parking (and rescues tasks
//! stranded behind a worker in user code, as a parking worker does). That
//! costs one core, yielded to any thread that wants it, and only while
//! operations are in flight and keep beginning or completing (or one a
//! worker completed awaits its callback): once none did for
//! `DUTY_SPINS_FOR_TICKS` (`completions.rs`, about 1.4 ms on x86, 4.2 ms
//! where ticks are nanoseconds), the holder parks too, so that no worker
//! spins for ever for an operation that does not end; from then on the
//! operation's callback (a GPU task's host function, MPI's fallback
//! thread) wakes a worker, or, without one, the holder comes back every
//! [`DUTY_PARK`] to test. With nothing in flight, every idle worker parks. The holder renews the
//! duty in each of those rounds; once it stops (it found a task, or
//! parked), another worker may take the duty over when
//! `DUTY_LAPSES_AFTER_TICKS` (`completions.rs`, about 10 µs) passed since
//! its last round. So a worker that finds work gives nothing up on its way
//! to it.
//!
//! A worker that does not park would keep the runtime from ever being
//! quiescent, which `sync_root` and the runtime's drop wait for, and a
//! user's operation (unlike a message or GPU work, whose signals are
//! pending) does not count against quiescence. So while a thread waits
//! for quiescence the holder parks too, for [`DUTY_PARK`] at most while
//! there was activity lately: it comes back to test, and to take up the
//! duty again once the wait is over. The other workers park
//! for [`POLL_WHILE_PARKED`] at most while an operation without a callback
//! is in flight (the holder may have gone to run a long task; a GPU
//! operation's host function, or MPI's fallback thread, wakes a worker
//! instead).

use crate::core::clock::ticks;
use crate::core::polled::POLL_WHILE_PARKED;
use crate::core::worker::Worker;
use std::time::Duration;

/// How often a busy worker tests the operations in flight between tasks,
/// in `clock::ticks` (about 10 µs at 3 GHz on x86_64, where they count the
/// time-stamp counter; 33 µs elsewhere, where they are nanoseconds).
const POLL_BETWEEN_TASKS_TICKS: u64 = 1 << 15;

/// How long the worker holding the polling duty parks at most when it may
/// not keep testing (see `parked_poll_timeout`).
const DUTY_PARK: Duration = Duration::from_micros(100);

impl Worker {
    /// While operations are in flight, a busy worker tests them too, at
    /// most every [`POLL_BETWEEN_TASKS_TICKS`] from the end of its last
    /// test (nor does a long test run back to back). What the test fires
    /// (waking nobody) the caller must drain next.
    #[cold]
    pub(super) fn poll_between_tasks(&self) {
        if ticks().wrapping_sub(self.last_poll.get()) >= POLL_BETWEEN_TASKS_TICKS {
            self.shared.completions.poll();
            self.last_poll.set(ticks());
        }
    }

    /// Between two parts of one long task (the nodes of a graph's chain),
    /// what a worker does between two tasks: test the operations in flight
    /// when due, then run the actions of the signals fired meanwhile.
    pub(crate) fn between_parts(&self) {
        if self.shared.completions.any_in_flight() {
            self.poll_between_tasks();
        }
        self.drain_fired_signals();
    }

    /// Whether this worker, about to park, goes on testing instead: an
    /// operation is in flight, one began or completed lately, nobody waits
    /// for the runtime to be quiescent, and it holds (or takes) the
    /// polling duty.
    pub(super) fn keeps_polling(&self) -> bool {
        let completions = &self.shared.completions;
        if !completions.needs_awake_poller() || self.shared.quiescence_wanted() {
            return false;
        }
        let active = completions.recently_active(ticks()) || completions.active_now();
        active && completions.take_polling_duty(self.index, ticks())
    }

    /// How long this worker, about to park, may sleep before it must test
    /// the operations in flight. It parks although operations are in
    /// flight while a thread waits for quiescence, while none began or
    /// completed lately, or while another worker holds the duty. The
    /// holder (or a worker that takes the duty because nobody holds it;
    /// never a lapsed one) then comes back after [`DUTY_PARK`] while an
    /// operation without a callback is in flight, or, after activity, to
    /// take up the duty again once a wait for quiescence is over; the
    /// others after
    /// [`POLL_WHILE_PARKED`] while an operation without a callback is in
    /// flight (in case the holder went to run a long task), and never
    /// otherwise (a callback, or a source's fallback thread, wakes one).
    pub(super) fn parked_poll_timeout(&self) -> Option<Duration> {
        let completions = &self.shared.completions;
        if !completions.needs_awake_poller() {
            completions.leave_polling_duty(self.index);
            return None;
        }
        let now = ticks();
        let holder_returns = completions.needs_parked_polls()
            || (self.shared.quiescence_wanted() && completions.recently_active(now));
        if holder_returns && completions.keep_or_take_free_duty(self.index, now) {
            Some(DUTY_PARK)
        } else if completions.needs_parked_polls() {
            Some(POLL_WHILE_PARKED)
        } else {
            None
        }
    }
}

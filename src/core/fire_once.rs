//! One completion that two parties race to report: a worker that tests the
//! operation and finds it ended, and the operation's own callback (a CUDA
//! host function), which comes later and is the fallback that wakes a
//! parked worker. A signal (`signal.rs`) may be fired once only, so the
//! two *claim* it first, and whoever claims fires. A third party may claim
//! it to give up on it (the device failed): the signal is then discarded,
//! never fired.
//!
//! The callback gets a raw pointer to the claim and holds no reference
//! count (a count it would give up could free memory in the callback,
//! which may not allocate or free). So the claim is *kept* for the
//! callback until it ran: the callback's one swap both claims and lets go,
//! and the list of claims in flight frees a claim only once it sees the
//! callback let go. The callback reads everything it needs (the signal)
//! before that swap; the swap releases, and the list's load that sees the
//! callback gone acquires, so the read comes before the memory goes.
//! Modelled under loom in `loom-tests/tests/models/fire_once.rs`, which fails
//! with the swap made Relaxed.
//!
//! After a device failure the callback never comes: a claim given up while
//! still kept is leaked, not freed (as a signal whose callback never comes
//! is).

// Its `pub` items are the loom models' API (`selvedge::protocols`, built
// with `--cfg loom`); elsewhere they are the crate's own.
#![cfg_attr(not(loom), allow(unreachable_pub))]
// Made for GPU completions (and the unit tests and loom models).
#![cfg_attr(not(feature = "cuda"), allow(dead_code))]

use crate::core::signal::SignalRef;
use crate::core::sync::{AtomicU8, Ordering, UnsafeCell};

/// Somebody claimed the signal (to fire it, or to give up on it).
const CLAIMED: u8 = 1;
/// The callback has not run yet: it holds a raw pointer to the claim.
const KEPT: u8 = 2;
/// Claimed to give up on the operation, while still kept.
const GIVEN_UP: u8 = 4;

/// A signal that a poller, a callback and an abandoner race to claim (see
/// the module docs).
#[derive(Debug)]
pub struct FireOnce {
    /// Written once, at creation; read by whoever claims, and by the
    /// callback before it lets go.
    signal: UnsafeCell<SignalRef>,
    state: AtomicU8,
}

// SAFETY: `signal` is never written after creation; everything else is an
// atomic. Who may use the signal is decided by the claim.
unsafe impl Send for FireOnce {}
// SAFETY: as above.
unsafe impl Sync for FireOnce {}

impl FireOnce {
    /// A claim for `signal`, kept for a callback that will call
    /// [`FireOnce::claim_from_callback`] once.
    pub fn kept_for_callback(signal: SignalRef) -> Self {
        Self {
            signal: UnsafeCell::new(signal),
            state: AtomicU8::new(KEPT),
        }
    }

    /// The callback's pointer to this claim.
    pub fn as_callback_arg(&self) -> *mut std::ffi::c_void {
        (self as *const Self).cast_mut().cast()
    }

    /// For a poller that found the operation ended: the signal, for this
    /// caller to fire, if nobody claimed it before.
    pub fn claim(&self) -> Option<SignalRef> {
        // Acquire: the signal was written before the claim was published
        // (under the lock of the list it went in); nothing to release.
        if self.state.fetch_or(CLAIMED, Ordering::Acquire) & CLAIMED != 0 {
            return None;
        }
        // SAFETY: written only at creation.
        Some(self.signal.with(|s| unsafe { *s }))
    }

    /// For whoever gives up on the operation (the device failed, its
    /// callback will never come): the signal, for this caller to discard,
    /// if nobody claimed it before.
    pub fn give_up(&self) -> Option<SignalRef> {
        if self.state.fetch_or(CLAIMED | GIVEN_UP, Ordering::Acquire) & CLAIMED != 0 {
            return None;
        }
        // SAFETY: written only at creation.
        Some(self.signal.with(|s| unsafe { *s }))
    }

    /// The callback: claims and lets go in one swap; the signal, for it to
    /// fire, if nobody claimed it before. After the swap the claim may be
    /// freed: this reads nothing of it then.
    ///
    /// # Safety
    /// `arg` is [`FireOnce::as_callback_arg`] of a claim made by
    /// [`FireOnce::kept_for_callback`], and this is the one call for it.
    pub unsafe fn claim_from_callback(arg: *mut std::ffi::c_void) -> Option<SignalRef> {
        // SAFETY: kept (not freed) until the swap below, per the caller.
        let claim = unsafe { &*arg.cast::<FireOnce>() };
        // Read before letting go. SAFETY: written only at creation.
        let signal = claim.signal.with(|s| unsafe { *s });
        // Release: the read above happens before whoever frees the claim
        // acquires the let-go (`may_be_freed`).
        let before = claim.state.swap(CLAIMED, Ordering::Release);
        (before & CLAIMED == 0).then_some(signal)
    }

    /// Whether somebody claimed it.
    pub fn is_claimed(&self) -> bool {
        self.state.load(Ordering::Relaxed) & CLAIMED != 0
    }

    /// Whether the claim's list may let it go: claimed, and its callback
    /// ran (it reads the claim no more) or never will (given up; then the
    /// caller leaks it rather than free it, see the module docs).
    pub fn may_be_freed(&self) -> Disposal {
        // Acquire: pairs with the callback's swap.
        let state = self.state.load(Ordering::Acquire);
        if state & CLAIMED == 0 {
            Disposal::Keep
        } else if state & KEPT == 0 {
            Disposal::Free
        } else if state & GIVEN_UP != 0 {
            Disposal::Leak
        } else {
            Disposal::Keep
        }
    }
}

#[cfg(loom)]
impl FireOnce {
    /// For the loom models: the write that freeing the claim would be, so
    /// that loom checks the callback's read of it comes first.
    pub fn free_in_model(&self) {
        self.signal.with_mut(|_| ());
    }
}

/// What a list of claims in flight does with one ([`FireOnce::may_be_freed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposal {
    /// Keep it: unclaimed, or its callback has yet to run.
    Keep,
    /// Free it: claimed, and its callback ran.
    Free,
    /// Forget it: given up on, its callback never to run (it may still
    /// hold the pointer).
    Leak,
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::{Disposal, FireOnce};
    use crate::core::signal::{SignalInbox, SignalRef};

    fn signal(inbox: &SignalInbox) -> SignalRef {
        inbox.signal(Box::new(|| ()), std::ptr::null())
    }

    #[test]
    fn the_poller_claims_first_and_the_callback_only_lets_go() {
        let inbox = SignalInbox::new();
        let s = signal(&inbox);
        let claim = FireOnce::kept_for_callback(s);
        assert_eq!(claim.may_be_freed(), Disposal::Keep);
        assert_eq!(claim.claim(), Some(s));
        assert_eq!(claim.claim(), None);
        assert_eq!(
            claim.may_be_freed(),
            Disposal::Keep,
            "the callback still holds it"
        );
        // SAFETY: the one callback call for this claim.
        let by_callback = unsafe { FireOnce::claim_from_callback(claim.as_callback_arg()) };
        assert_eq!(by_callback, None);
        assert_eq!(claim.may_be_freed(), Disposal::Free);
        // SAFETY: s was never fired.
        unsafe { inbox.fire(s) };
        assert_eq!(inbox.drain(), 1);
    }

    #[test]
    fn the_callback_claims_first_and_the_poller_finds_it_claimed() {
        let inbox = SignalInbox::new();
        let s = signal(&inbox);
        let claim = FireOnce::kept_for_callback(s);
        // SAFETY: the one callback call for this claim.
        let by_callback = unsafe { FireOnce::claim_from_callback(claim.as_callback_arg()) };
        assert_eq!(by_callback, Some(s));
        assert_eq!(claim.claim(), None);
        assert_eq!(claim.give_up(), None);
        assert_eq!(claim.may_be_freed(), Disposal::Free);
        // SAFETY: s was never fired.
        unsafe { inbox.fire(s) };
        assert_eq!(inbox.drain(), 1);
    }

    #[test]
    fn a_claim_given_up_before_its_callback_ran_is_leaked_not_freed() {
        let inbox = SignalInbox::new();
        let s = signal(&inbox);
        let claim = FireOnce::kept_for_callback(s);
        assert_eq!(claim.give_up(), Some(s));
        assert_eq!(claim.claim(), None);
        assert_eq!(claim.may_be_freed(), Disposal::Leak);
        // Should the callback come after all, it fires nothing, and then
        // the claim may go.
        // SAFETY: the one callback call for this claim.
        let by_callback = unsafe { FireOnce::claim_from_callback(claim.as_callback_arg()) };
        assert_eq!(by_callback, None);
        assert_eq!(claim.may_be_freed(), Disposal::Free);
        // SAFETY: s was never fired and never will be.
        drop(unsafe { inbox.discard(s) });
    }
}

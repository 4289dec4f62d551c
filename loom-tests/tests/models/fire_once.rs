//! A GPU completion's claim (`FireOnce`): a worker that found the work
//! ended, the work's host function (which holds a raw pointer to the
//! claim, and no count), and whoever gives up on a failed device race to
//! claim its signal. Exactly one of them wins, and the claim is freed only
//! after the host function is done reading it: the model's free is a write
//! to the cell the host function reads, which loom reports as a data race
//! if the host function's swap is made Relaxed.
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::model;
use selvedge::protocols::{Disposal, FireOnce, SignalInbox, SignalRef};

/// The list's side: waits until it may free the claim, then frees it.
fn free_when_released(claim: &FireOnce) -> Disposal {
    loop {
        match claim.may_be_freed() {
            Disposal::Keep => thread::yield_now(),
            release => {
                if release == Disposal::Free {
                    claim.free_in_model();
                }
                return release;
            }
        }
    }
}

/// A signal of `inbox`, its claim, and a thread that runs the claim's
/// host function (whether it fired the signal, when joined).
fn claim_raced_by_a_host_function(
    inbox: &SignalInbox,
) -> (SignalRef, Arc<FireOnce>, thread::JoinHandle<bool>) {
    let signal = inbox.signal(Box::new(|| ()), std::ptr::null());
    let claim = Arc::new(FireOnce::kept_for_callback(signal));
    let arg = claim.as_callback_arg() as usize;
    let host_function = thread::spawn(move || {
        // SAFETY: the one call; the claim is kept until its swap.
        unsafe { FireOnce::claim_from_callback(arg as *mut _) }.is_some()
    });
    (signal, claim, host_function)
}

#[test]
fn a_poller_and_the_host_function_fire_it_once_and_the_claim_outlives_the_host_function() {
    model(|| {
        let inbox = SignalInbox::new();
        let (signal, claim, host_function) = claim_raced_by_a_host_function(&inbox);
        let by_poller = claim.claim().is_some();
        assert_eq!(free_when_released(&claim), Disposal::Free);
        let by_host_function = host_function.join().unwrap();
        assert!(by_poller != by_host_function, "fired by both or by neither");
        // SAFETY: fired once, by whoever claimed it.
        unsafe { inbox.fire(signal) };
        assert_eq!(inbox.drain(), 1);
    });
}

#[test]
fn giving_up_races_the_host_function_and_one_wins() {
    model(|| {
        let inbox = SignalInbox::new();
        let (signal, claim, host_function) = claim_raced_by_a_host_function(&inbox);
        let given_up = claim.give_up().is_some();
        let release = free_when_released(&claim);
        let by_host_function = host_function.join().unwrap();
        assert!(
            given_up != by_host_function,
            "claimed by both or by neither"
        );
        if given_up {
            // Either left to leak (the host function had yet to come) or
            // freed (it came and let go).
            // SAFETY: never fired, and never will be.
            drop(unsafe { inbox.discard(signal) });
        } else {
            assert_eq!(release, Disposal::Free);
            // SAFETY: fired once, by the host function's claim.
            unsafe { inbox.fire(signal) };
            assert_eq!(inbox.drain(), 1);
        }
    });
}

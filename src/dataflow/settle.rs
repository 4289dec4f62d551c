//! What becomes of a waiter the promise protocol is done with: a delayed
//! task's waiter goes to `delayed.rs` (its task is scheduled or
//! cancelled); a *relay*'s fulfills the promise it relays to.
//!
//! A relay is how something that will never happen lets what waits for it
//! go on in order: it waits until each of its dependencies is closed,
//! fulfilled or broken, then fulfills one promise, on whichever thread
//! closed the last one. It is not a task: no runtime runs it, so no
//! runtime's shutdown can cancel it, and a thread outside every runtime
//! may fire it. (An access to a `Data` that never ran passes its turn on
//! this way, once the accesses before it are over: see `turn.rs`.)

use crate::core::block_alloc;
use crate::dataflow::delayed;
use crate::dataflow::event::{Dep, Group, Outcome, Waiter};
use std::cell::{Cell, RefCell};
use std::mem::ManuallyDrop;
use std::ptr::{self, NonNull};

/// The one function the promise protocol hands outcomes to: every
/// promise and loop promise passes it to the protocol's operations.
pub(crate) fn settle(outcome: Outcome) {
    // SAFETY: the outcome hands the waiter over: it is ours to read.
    if unsafe { outcome.waiter().as_ref() }.relay {
        settle_relay(outcome);
    } else {
        delayed::settle(outcome);
    }
}

/// A relay's node: the protocol's waiter first, so an [`Outcome`]'s waiter
/// pointer is a pointer to this.
#[repr(C)]
struct Relay {
    waiter: ManuallyDrop<Waiter>,
    /// A promise's group, of which the relay holds one handle: fulfilled
    /// (and the handle given up) when the relay fires.
    then: NonNull<Group>,
}

/// Fulfills the promise whose group is `then` (of one event; the caller
/// gives up the handle it holds on it) once every one of `deps` is
/// closed, fulfilled or broken: at once when they are, or else from
/// whichever thread closes the last one.
pub(crate) fn relay(deps: impl IntoIterator<Item = Dep>, then: NonNull<Group>) {
    let mut waiter = Waiter::relay(deps);
    if waiter.skip_fulfilled() {
        drop(waiter);
        fire(then);
        return;
    }
    let node = block_alloc::alloc_raw::<Relay>();
    // SAFETY: fresh memory for a `Relay`.
    unsafe {
        node.as_ptr().write(Relay {
            waiter: ManuallyDrop::new(waiter),
            then,
        })
    };
    // SAFETY: we own the fresh node, which stays allocated until its
    // outcome is settled (`settle_relay` frees it).
    if let Some(outcome) = unsafe { Waiter::start(node.cast::<Waiter>()) } {
        settle_relay(outcome);
    }
}

/// A relay's outcome: stopped by a broken dependency, it moves on to its
/// next open one; ready, it fires.
fn settle_relay(outcome: Outcome) {
    // SAFETY: the outcome hands the waiter, a relay's, over.
    let Some(w) = (unsafe { Waiter::relay_ready(outcome) }) else {
        return;
    };
    let node = w.cast::<Relay>();
    // SAFETY: the outcome hands the node over; nobody else touches it. The
    // waiter (its dependencies) is dropped and `then` read out before the
    // block is freed.
    let then = unsafe {
        ManuallyDrop::drop(&mut *ptr::addr_of_mut!((*node.as_ptr()).waiter));
        let then = ptr::addr_of!((*node.as_ptr()).then).read();
        block_alloc::free_raw(node);
        then
    };
    fire(then);
}

thread_local! {
    /// Set while this thread fires relays.
    static FIRING: Cell<bool> = const { Cell::new(false) };
    /// Relays that became ready while this thread fired another one, fired
    /// by the outer call.
    static QUEUED: RefCell<Vec<NonNull<Group>>> = const { RefCell::new(Vec::new()) };
}

/// Fulfills `then` and gives up the relay's handle. A relay fired by
/// another one's fulfill is queued and fired by the outermost call, so a
/// long chain of relays takes a loop, not a recursion as deep as the chain.
fn fire(then: NonNull<Group>) {
    match FIRING.try_with(|f| f.replace(true)) {
        Ok(false) => {}
        Ok(true) => {
            if QUEUED.try_with(|q| q.borrow_mut().push(then)).is_err() {
                fire_now(then);
            }
            return;
        }
        // During thread-local teardown: fire now, recursing if need be.
        Err(_) => return fire_now(then),
    }
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            let _ = FIRING.try_with(|f| f.set(false));
        }
    }
    let _reset = Reset;
    let mut next = Some(then);
    while let Some(then) = next {
        fire_now(then);
        next = QUEUED.try_with(|q| q.borrow_mut().pop()).ok().flatten();
    }
}

fn fire_now(then: NonNull<Group>) {
    // SAFETY: the relay holds a handle on `then`, a promise's group of
    // one event, and gives it up after fulfilling it.
    unsafe {
        Group::fulfill(then, 0, settle);
        Group::release_handle(then, settle);
    }
}

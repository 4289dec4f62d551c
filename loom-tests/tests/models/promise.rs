//! The promise protocol (`selvedge::protocols::{Group, Waiter}`): a delayed
//! task parking on its dependencies races the threads that fulfill them or
//! drop their last handle. In every interleaving the task must be settled
//! exactly once (ready, or cancelled when a dependency broke), never before
//! every dependency is fulfilled (the fulfillers' writes are visible to it,
//! which loom checks as data races), and each promise must be freed once,
//! after its last reference.
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::model;
use selvedge::protocols::{Claim, Dep, Group, Outcome, Waiter};
use std::ptr::{self, NonNull};

/// A raw pointer that may cross to a model thread.
#[derive(Clone, Copy)]
struct Registry<T>(NonNull<T>);
// SAFETY: the protocol under test synchronises every access.
unsafe impl<T> Send for Registry<T> {}

/// What the model's tasks did.
#[derive(Default)]
struct Record {
    ready: AtomicUsize,
    cancelled: AtomicUsize,
}

/// Data a fulfiller writes before fulfilling; a ready task reads it.
struct Produced(UnsafeCell<u64>);

impl Produced {
    fn new() -> Arc<Self> {
        Arc::new(Self(UnsafeCell::new(0)))
    }
    fn write(&self, v: u64) {
        self.0.with_mut(|p| unsafe { *p = v });
    }
    fn read(&self) -> u64 {
        self.0.with(|p| unsafe { *p })
    }
}

/// A task settled by the protocol: checks what it must see, counts, frees
/// the waiter (releasing its dependencies, as a real task node does).
fn settler(record: Arc<Record>, inputs: Vec<(Arc<Produced>, u64)>) -> impl FnMut(Outcome) + Clone {
    move |outcome| match outcome {
        Outcome::Ready(w) => {
            for (p, v) in &inputs {
                assert_eq!(p.read(), *v, "task started before a fulfiller's write");
            }
            record.ready.fetch_add(1, Ordering::SeqCst);
            // SAFETY: the outcome hands the waiter over.
            drop(unsafe { Box::from_raw(w.as_ptr()) });
        }
        Outcome::Cancelled(w) => {
            record.cancelled.fetch_add(1, Ordering::SeqCst);
            // SAFETY: as above.
            drop(unsafe { Box::from_raw(w.as_ptr()) });
        }
    }
}

/// A waiter on `deps`, leaked for the protocol.
fn waiter(deps: Vec<Dep>) -> NonNull<Waiter> {
    NonNull::from(Box::leak(Box::new(Waiter::new(deps))))
}

/// Parks (or settles at once) a waiter, as `spawn_delayed` does: past the
/// dependencies fulfilled already (whose fulfillers' writes reach the task
/// through that check alone), then parked from there.
fn start(w: NonNull<Waiter>, mut settle: impl FnMut(Outcome)) {
    // SAFETY: we own the fresh waiter; nobody else can reach it yet.
    if unsafe { &mut *w.as_ptr() }.skip_fulfilled() {
        settle(Outcome::Ready(w));
        return;
    }
    // SAFETY: we own the fresh waiter.
    if let Some(outcome) = unsafe { Waiter::start(w) } {
        settle(outcome);
    }
}

#[test]
fn park_races_fulfill() {
    model(|| {
        let g = Group::new(1);
        let data = Produced::new();
        let record = Arc::new(Record::default());
        let settle = settler(record.clone(), vec![(data.clone(), 42)]);
        // SAFETY: we hold the creating handle.
        let w = waiter(vec![unsafe { Group::dep(g, 0) }]);
        let producer = {
            let (g, data, settle) = (Registry(g), data.clone(), settle.clone());
            thread::spawn(move || {
                data.write(42);
                // SAFETY: this thread owns the group's only handle.
                unsafe {
                    assert!(Group::fulfill(g.0, 0, settle.clone()));
                    Group::release_handle(g.0, settle);
                }
            })
        };
        start(w, settle);
        producer.join().unwrap();
        assert_eq!(record.ready.load(Ordering::SeqCst), 1);
        assert_eq!(record.cancelled.load(Ordering::SeqCst), 0);
        assert!(
            Group::is_freed(g),
            "promise not freed after its last reference"
        );
    });
}

#[test]
fn two_dependencies_fulfilled_concurrently_while_parking() {
    // Two events of one group (a loop promise's two iterations), so their
    // address order, which decides where the task parks first, is the same
    // in every execution (loom needs a deterministic model).
    model(|| {
        let g = Group::new(3);
        // SAFETY: we hold the creating handle; one more for each fulfiller.
        unsafe { Group::acquire_handle(g) };
        let (d1, d2) = (Produced::new(), Produced::new());
        let record = Arc::new(Record::default());
        let settle = settler(record.clone(), vec![(d1.clone(), 1), (d2.clone(), 2)]);
        // Listed out of order: the waiter sorts them.
        // SAFETY: as above.
        let w = waiter(unsafe { vec![Group::dep(g, 2), Group::dep(g, 1)] });
        let fulfiller = |event: usize, d: &Arc<Produced>, v: u64| {
            let (g, d, settle) = (Registry(g), d.clone(), settle.clone());
            thread::spawn(move || {
                d.write(v);
                // SAFETY: this thread owns one handle.
                unsafe {
                    assert!(Group::fulfill(g.0, event, settle.clone()));
                    Group::release_handle(g.0, settle);
                }
            })
        };
        let t1 = fulfiller(1, &d1, 1);
        let t2 = fulfiller(2, &d2, 2);
        start(w, settle);
        t1.join().unwrap();
        t2.join().unwrap();
        assert_eq!(record.ready.load(Ordering::SeqCst), 1);
        assert_eq!(record.cancelled.load(Ordering::SeqCst), 0);
        assert!(Group::is_freed(g));
    });
}

/// A relay (`Waiter::relay`): what an access that never ran uses to pass
/// its turn on. It waits for each dependency to close, fulfilled or broken,
/// while one thread fulfills the first and another breaks the second: in
/// every interleaving it fires exactly once, only after both closed, and
/// sees what both threads wrote before closing theirs. Both ways round:
/// the broken dependency first in the relay's order, and last.
#[test]
fn a_relay_fires_once_after_every_dependency_closed_either_way() {
    relay_model(1, 2);
    relay_model(2, 1);
}

/// The relay model: event `fulfilled` is fulfilled, event `broken` broken.
fn relay_model(fulfilled: usize, broken: usize) {
    model(move || {
        let g = Group::new(3);
        // SAFETY: we hold the creating handle; one more for each closer.
        unsafe {
            Group::acquire_handle(g);
            Group::acquire_handle(g);
        }
        let (d1, d2) = (Produced::new(), Produced::new());
        let fired = Arc::new(AtomicUsize::new(0));
        let settle = {
            let (d1, d2, fired) = (d1.clone(), d2.clone(), fired.clone());
            move |outcome: Outcome| {
                // SAFETY: the outcome hands the relay's waiter over.
                let Some(w) = (unsafe { Waiter::relay_ready(outcome) }) else {
                    return;
                };
                assert_eq!(d1.read(), 1, "relay fired before the fulfiller's write");
                assert_eq!(d2.read(), 2, "relay fired before the breaker's write");
                fired.fetch_add(1, Ordering::SeqCst);
                // SAFETY: the outcome hands the waiter over.
                drop(unsafe { Box::from_raw(w.as_ptr()) });
            }
        };
        // SAFETY: as above.
        let w = NonNull::from(Box::leak(Box::new(Waiter::relay(unsafe {
            vec![Group::dep(g, 1), Group::dep(g, 2)]
        }))));
        let fulfiller = {
            let (g, d1, settle) = (Registry(g), d1.clone(), settle.clone());
            thread::spawn(move || {
                d1.write(1);
                // SAFETY: this thread owns one handle.
                unsafe {
                    assert!(Group::fulfill(g.0, fulfilled, settle.clone()));
                    Group::release_handle(g.0, settle);
                }
            })
        };
        let breaker = {
            let (g, d2, settle) = (Registry(g), d2.clone(), settle.clone());
            thread::spawn(move || {
                d2.write(2);
                // SAFETY: this thread owns one handle.
                unsafe {
                    assert!(Group::break_event(g.0, broken, settle.clone()));
                    Group::release_handle(g.0, settle);
                }
            })
        };
        start(w, settle.clone());
        fulfiller.join().unwrap();
        breaker.join().unwrap();
        assert_eq!(
            fired.load(Ordering::SeqCst),
            1,
            "a relay fires exactly once"
        );
        // SAFETY: the model's own handle, given up last (event 0 breaks;
        // nothing waits on it).
        unsafe { Group::release_handle(g, settle) };
        assert!(
            Group::is_freed(g),
            "promise not freed after its last reference"
        );
    });
}

#[test]
fn last_handle_dropped_while_another_fulfills() {
    // Two handles: one fulfills then drops, the other drops concurrently.
    // Whichever drop is last must see the fulfill: the task runs, never
    // cancelled.
    model(|| {
        let g = Group::new(1);
        // SAFETY: we hold the creating handle.
        unsafe { Group::acquire_handle(g) };
        let data = Produced::new();
        let record = Arc::new(Record::default());
        let settle = settler(record.clone(), vec![(data.clone(), 5)]);
        // SAFETY: as above.
        start(waiter(vec![unsafe { Group::dep(g, 0) }]), settle.clone());
        let fulfiller = {
            let (g, data, settle) = (Registry(g), data.clone(), settle.clone());
            thread::spawn(move || {
                data.write(5);
                // SAFETY: this thread owns one of the two handles.
                unsafe {
                    Group::fulfill(g.0, 0, settle.clone());
                    Group::release_handle(g.0, settle);
                }
            })
        };
        // SAFETY: the main thread owns the other handle.
        unsafe { Group::release_handle(g, settle) };
        fulfiller.join().unwrap();
        assert_eq!(record.ready.load(Ordering::SeqCst), 1);
        assert_eq!(record.cancelled.load(Ordering::SeqCst), 0);
        assert!(Group::is_freed(g));
    });
}

#[test]
fn broken_while_parking_cancels_exactly_once() {
    // Both handles are dropped unfulfilled by two threads while the task
    // parks: first it passes a fulfilled event (event 1), then parks on
    // event 2, which breaks. It must be cancelled exactly once, whoever
    // gets there first. (One group, for a deterministic address order.)
    model(|| {
        let g = Group::new(3);
        // SAFETY: we hold the creating handle.
        unsafe { Group::acquire_handle(g) };
        let record = Arc::new(Record::default());
        let settle = settler(record.clone(), vec![]);
        // SAFETY: as above.
        unsafe { Group::fulfill(g, 1, settle.clone()) };
        // SAFETY: as above.
        let w = waiter(unsafe { vec![Group::dep(g, 1), Group::dep(g, 2)] });
        let droppers: Vec<_> = (0..2)
            .map(|_| {
                let (g, settle) = (Registry(g), settle.clone());
                // SAFETY: each thread owns one handle.
                thread::spawn(move || unsafe { Group::release_handle(g.0, settle) })
            })
            .collect();
        start(w, settle);
        droppers.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(record.ready.load(Ordering::SeqCst), 0);
        assert_eq!(record.cancelled.load(Ordering::SeqCst), 1);
        assert!(Group::is_freed(g));
    });
}

#[test]
fn break_races_fulfill_while_parking() {
    // A loop promise's iteration broken by one thread (a failed producer)
    // while another fulfills it and a task parks on it: exactly one of the
    // two wins, the task is settled once (ready only with the fulfiller's
    // write visible), and a broken event never turns fulfilled afterwards
    // (with a plain swap in the fulfill it would).
    model(|| {
        let g = Group::new(1);
        // SAFETY: we hold the creating handle; this is the second.
        unsafe { Group::acquire_handle(g) };
        let data = Produced::new();
        let record = Arc::new(Record::default());
        let settle = settler(record.clone(), vec![(data.clone(), 7)]);
        // SAFETY: we hold a handle.
        let w = waiter(vec![unsafe { Group::dep(g, 0) }]);
        // Keeps the group alive for the final check.
        // SAFETY: as above.
        let event = unsafe { Group::dep(g, 0) };
        let fulfiller = {
            let (g, data, settle) = (Registry(g), data.clone(), settle.clone());
            thread::spawn(move || {
                data.write(7);
                // SAFETY: this thread owns one handle.
                unsafe {
                    let won = Group::fulfill(g.0, 0, settle.clone());
                    Group::release_handle(g.0, settle);
                    won
                }
            })
        };
        let breaker = {
            let (g, settle) = (Registry(g), settle.clone());
            thread::spawn(move || {
                // SAFETY: this thread owns the other handle.
                unsafe {
                    let won = Group::break_event(g.0, 0, settle.clone());
                    Group::release_handle(g.0, settle);
                    won
                }
            })
        };
        start(w, settle);
        let fulfilled_first = fulfiller.join().unwrap();
        let broke = breaker.join().unwrap();
        assert!(fulfilled_first != broke, "both or neither closed the event");
        assert_eq!(
            event.is_fulfilled(),
            !broke,
            "a broken event turned fulfilled"
        );
        drop(event);
        if broke {
            assert_eq!(record.cancelled.load(Ordering::SeqCst), 1);
            assert_eq!(record.ready.load(Ordering::SeqCst), 0);
        } else {
            assert_eq!(record.ready.load(Ordering::SeqCst), 1);
            assert_eq!(record.cancelled.load(Ordering::SeqCst), 0);
        }
        assert!(Group::is_freed(g));
    });
}

#[test]
fn last_reference_frees_once() {
    // The group's references go away on three threads at once: a plain
    // dependency dropped, the only handle dropped (breaking the promise and
    // cancelling the parked task, whose dependency goes with it), and a
    // cloned dependency dropped. The group must be freed exactly once (a
    // second free, or a reference taken after the free, fails an
    // assertion inside the protocol) and only after the last of them.
    model(|| {
        let g = Group::new(1);
        let record = Arc::new(Record::default());
        let settle = settler(record.clone(), vec![]);
        // SAFETY: we hold the creating handle.
        let (d1, d2) = unsafe { (Group::dep(g, 0), Group::dep(g, 0)) };
        start(waiter(vec![d1.clone()]), settle.clone());
        let t1 = thread::spawn(move || drop(d1));
        let t2 = {
            let (g, settle) = (Registry(g), settle.clone());
            // SAFETY: this thread owns the only handle.
            thread::spawn(move || unsafe { Group::release_handle(g.0, settle) })
        };
        let d3 = d2.clone();
        drop(d2);
        assert!(!Group::is_freed(g));
        drop(d3);
        t1.join().unwrap();
        t2.join().unwrap();
        assert_eq!(record.cancelled.load(Ordering::SeqCst), 1);
        assert!(Group::is_freed(g));
    });
}

/// A parked task's node as the runtime lays it out: the waiter first, a
/// claim, and the task that the claim's winner takes.
#[repr(C)]
struct Node {
    waiter: Waiter,
    claim: Claim,
    /// The task: `Some` until taken; the free clears it (as dropping the
    /// node would), so a free racing the winner is a data race loom sees.
    task: UnsafeCell<Option<u64>>,
}

/// Runs `f` on the node unless a free happened (checked by loom).
fn take_task(node: &Node) -> Option<u64> {
    node.task.with_mut(|t| unsafe { (*t).take() })
}

/// One party lets go of the node; the last frees it.
/// `released` counts the releases: a node has two references, so a third
/// release is a bug even where the count wraps without a free.
fn release(node: NonNull<Node>, freed: &AtomicUsize, released: &AtomicUsize) {
    released.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the caller holds one of the node's references.
    if unsafe { node.as_ref() }.claim.release() {
        // SAFETY: the last reference: nobody else touches the node.
        unsafe { node.as_ref() }
            .task
            .with_mut(|t| unsafe { *t = None });
        freed.fetch_add(1, Ordering::SeqCst);
    }
}

/// A thread that fulfills `g`'s one event and drops its handle, settling
/// through `settle`; the caller gives it the group's only handle.
fn fulfill_then_drop_on_a_thread(
    g: NonNull<Group>,
    settle: impl FnMut(Outcome) + Clone + 'static,
) -> thread::JoinHandle<()> {
    let g = Registry(g);
    thread::spawn(move || {
        // SAFETY: this thread owns the only handle.
        unsafe {
            assert!(Group::fulfill(g.0, 0, settle.clone()));
            Group::release_handle(g.0, settle);
        }
    })
}

#[test]
fn reclaim_races_fulfill() {
    // A runtime's drop reclaims a parked task (empties its registry slot,
    // then claims it and takes its task) while another thread fulfills the
    // promise it waits on (the protocol settles it ready, tries to claim it
    // too and, if it wins, empties the registry slot to release the
    // registry's reference at once). Exactly one side gets the task, one
    // swap finds the node in the slot, and the node is freed once, after
    // both references are gone.
    model(|| {
        let g = Group::new(1);
        let freed = Arc::new(AtomicUsize::new(0));
        let released = Arc::new(AtomicUsize::new(0));
        let winners = Arc::new(AtomicUsize::new(0));
        // SAFETY: we hold the creating handle.
        let dep = unsafe { Group::dep(g, 0) };
        let node = NonNull::from(Box::leak(Box::new(Node {
            waiter: Waiter::new(vec![dep]),
            claim: Claim::new(),
            task: UnsafeCell::new(Some(7)),
        })));
        // The registry's slot, holding the registry's reference (stored
        // before the node is handed to the protocol, as `delay` does).
        let slot = Arc::new(AtomicPtr::new(node.as_ptr()));
        let settle = {
            let (freed, released, winners, slot) = (
                freed.clone(),
                released.clone(),
                winners.clone(),
                slot.clone(),
            );
            let node = Registry(node);
            move |outcome: Outcome| {
                let Outcome::Ready(w) = outcome else {
                    panic!("fulfilled, not cancelled")
                };
                assert_eq!(w.cast::<Node>(), node.0);
                // SAFETY: the outcome hands the protocol's side over.
                let n = unsafe { node.0.as_ref() };
                if n.claim.claim() {
                    assert_eq!(take_task(n), Some(7));
                    winners.fetch_add(1, Ordering::SeqCst);
                    // As `take_node` does: the registry's reference too,
                    // unless the reclaim swapped it out first; holding
                    // both, it frees the node without releasing either.
                    if !slot.swap(ptr::null_mut(), Ordering::Acquire).is_null() {
                        released.fetch_add(2, Ordering::SeqCst);
                        n.task.with_mut(|t| unsafe { *t = None });
                        freed.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                }
                release(node.0, &freed, &released);
            }
        };
        // SAFETY: we own the fresh node; it stays allocated (loom never
        // frees it) and we do not touch the waiter after it parked.
        assert!(unsafe { Waiter::start(node.cast()) }.is_none());
        let fulfiller = fulfill_then_drop_on_a_thread(g, settle.clone());
        // The registry's side, as `Parked::reclaim` does it: the swap
        // first, the claim after.
        if !slot.swap(ptr::null_mut(), Ordering::Acquire).is_null() {
            // SAFETY: the registry's reference keeps the node allocated;
            // only the claim is touched until the task is won.
            let n = unsafe { node.as_ref() };
            if n.claim.claim() {
                assert_eq!(take_task(n), Some(7));
                winners.fetch_add(1, Ordering::SeqCst);
            }
            release(node, &freed, &released);
        }
        fulfiller.join().unwrap();
        assert_eq!(winners.load(Ordering::SeqCst), 1, "one side takes the task");
        assert_eq!(freed.load(Ordering::SeqCst), 1, "the node is freed once");
        assert_eq!(
            released.load(Ordering::SeqCst),
            2,
            "each reference released once"
        );
    });
}

/// A parked task's node inside its task's block (`dataflow/delayed.rs`):
/// the block is the task's, so whichever party acts on the task (runs it,
/// or cancels it, either of which may free the block) must wait for the
/// other party to let go of the node.
#[repr(C)]
struct InPlace {
    waiter: Waiter,
    claim: Claim,
    /// The task, taken by the claim's winner and put back when it leaves
    /// the task to the last party.
    task: UnsafeCell<Option<u64>>,
    /// What each party reads of the node up to its release (the waiter's
    /// dependencies, the slot); freeing the block writes it, so a free
    /// racing a party's last use is a data race loom sees.
    used: UnsafeCell<u64>,
}

/// What acting on the task does to the block in the worst case: frees it.
fn free_block(node: &InPlace, frees: &AtomicUsize) {
    node.used.with_mut(|u| unsafe { *u = 0 });
    node.task.with_mut(|t| unsafe { *t = None });
    frees.fetch_add(1, Ordering::SeqCst);
}

/// A party's last use of the node, then its release: `true` for the last.
fn use_then_release(node: &InPlace) -> bool {
    node.used.with(|u| unsafe { *u });
    node.claim.release()
}

#[test]
fn reclaim_races_fulfill_for_a_node_in_its_tasks_block() {
    // As `reclaim_races_fulfill`, with the node inside its task's block:
    // the protocol side, if it wins the claim and finds the registry's
    // reference still in the slot, holds both and acts at once; if the
    // reclaim swapped the slot first, it puts the task back and the last
    // party to release acts. The reclaim, if it wins, cancels the task
    // keeping the block, and the last party gives the block up. Either
    // way the task is acted on once and the block freed once, after both
    // parties' last use of the node.
    model(|| {
        let g = Group::new(1);
        let frees = Arc::new(AtomicUsize::new(0));
        let acted = Arc::new(AtomicUsize::new(0));
        // SAFETY: we hold the creating handle.
        let dep = unsafe { Group::dep(g, 0) };
        let node = NonNull::from(Box::leak(Box::new(InPlace {
            waiter: Waiter::new(vec![dep]),
            claim: Claim::new(),
            task: UnsafeCell::new(Some(7)),
            used: UnsafeCell::new(1),
        })));
        let slot = Arc::new(AtomicPtr::new(node.as_ptr()));
        let settle = {
            let (frees, acted, slot) = (frees.clone(), acted.clone(), slot.clone());
            let node = Registry(node);
            move |outcome: Outcome| {
                let Outcome::Ready(w) = outcome else {
                    panic!("fulfilled, not cancelled")
                };
                assert_eq!(w.cast::<InPlace>(), node.0);
                // SAFETY: the outcome hands the protocol's side over; the
                // block stays until both parties let go (checked here).
                let n = unsafe { node.0.as_ref() };
                if !n.claim.claim() {
                    // The reclaim cancelled the task keeping the block.
                    if use_then_release(n) {
                        free_block(n, &frees);
                    }
                    return;
                }
                let task = n.task.with_mut(|t| unsafe { (*t).take() });
                assert_eq!(task, Some(7));
                if !slot.swap(ptr::null_mut(), Ordering::Acquire).is_null() {
                    // Both references: acts at once (runs the task).
                    acted.fetch_add(1, Ordering::SeqCst);
                    free_block(n, &frees);
                    return;
                }
                n.task.with_mut(|t| unsafe { *t = task });
                if use_then_release(n) {
                    assert_eq!(n.task.with_mut(|t| unsafe { (*t).take() }), Some(7));
                    acted.fetch_add(1, Ordering::SeqCst);
                    free_block(n, &frees);
                }
            }
        };
        // SAFETY: we own the fresh node; loom never frees it.
        assert!(unsafe { Waiter::start(node.cast()) }.is_none());
        let fulfiller = fulfill_then_drop_on_a_thread(g, settle.clone());
        // The reclaim: the swap first, the claim after.
        if !slot.swap(ptr::null_mut(), Ordering::Acquire).is_null() {
            // SAFETY: the registry's reference keeps the node allocated.
            let n = unsafe { node.as_ref() };
            if n.claim.claim() {
                // Cancels the task keeping the block, then releases.
                assert_eq!(n.task.with_mut(|t| unsafe { (*t).take() }), Some(7));
                acted.fetch_add(1, Ordering::SeqCst);
                if use_then_release(n) {
                    free_block(n, &frees);
                }
            } else if use_then_release(n) {
                // The protocol side left the task to the last party.
                assert_eq!(n.task.with_mut(|t| unsafe { (*t).take() }), Some(7));
                acted.fetch_add(1, Ordering::SeqCst);
                free_block(n, &frees);
            }
        }
        fulfiller.join().unwrap();
        assert_eq!(acted.load(Ordering::SeqCst), 1, "the task is acted on once");
        assert_eq!(frees.load(Ordering::SeqCst), 1, "the block is freed once");
    });
}

//! The join slot (`JoinSlot`): a runner publishing a result races a handle
//! that joins (registering a waker and parking), awaits with changing
//! wakers, or detaches. Every interleaving must read the result only after
//! it was written, wake the joiner, and free the block exactly once, never
//! while the other side still touches it.
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;
use loom_tests::support::{model, thread_waker};
use selvedge::protocols::{CompletionHook, Install, JoinSlot, Release};
use std::ptr::NonNull;

/// A stand-in for a task block: the join state and the result storage.
struct Block {
    completion: JoinSlot,
    result: UnsafeCell<Option<u64>>,
    /// What a runner that holds the block after completing still uses (a
    /// parked task's node inside the block).
    node: UnsafeCell<u64>,
    frees: AtomicUsize,
}

impl Block {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            completion: JoinSlot::new(),
            result: UnsafeCell::new(None),
            node: UnsafeCell::new(0),
            frees: AtomicUsize::new(0),
        })
    }

    /// Frees the block: counts, and writes the storage as a deallocation
    /// would, so loom reports any access that races with it.
    fn free(&self, drop_result: bool, expect_result: bool) {
        assert_eq!(drop_result, expect_result, "wrong drop_result");
        self.frees.fetch_add(1, Ordering::SeqCst);
        self.result.with_mut(|r| unsafe { *r = None });
        self.node.with_mut(|n| unsafe { *n = 0 });
        self.completion.poison();
    }

    fn run(&self, value: u64, handle_takes: bool) {
        self.result.with_mut(|r| unsafe { *r = Some(value) });
        if let Release::Free { drop_result } = self.completion.complete(true) {
            self.free(drop_result, !handle_takes);
        }
    }
}

/// Runs the task on a new thread, as a worker would.
fn spawn_runner(b: &Arc<Block>, value: u64, handle_takes: bool) -> thread::JoinHandle<()> {
    let b = b.clone();
    thread::spawn(move || b.run(value, handle_takes))
}

#[test]
fn runner_completes_while_handle_joins_and_parks() {
    model(|| {
        let b = Block::new();
        let runner = spawn_runner(&b, 7, true);
        let waker = thread_waker();
        while !b.completion.register(&waker) {
            thread::park();
        }
        let v = b.result.with_mut(|r| unsafe { (*r).take() });
        assert_eq!(v, Some(7));
        if let Release::Free { drop_result } = b.completion.release_handle(true) {
            b.free(drop_result, false);
        }
        runner.join().unwrap();
        assert_eq!(b.frees.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn runner_completes_while_handle_detaches() {
    model(|| {
        let b = Block::new();
        let runner = spawn_runner(&b, 3, false);
        if let Release::Free { drop_result } = b.completion.release_handle(false) {
            b.free(drop_result, true);
        }
        runner.join().unwrap();
        assert_eq!(b.frees.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn runner_holding_the_block_after_completing_races_a_join_or_a_detach() {
    // A runner that still uses the block after the task's end (a parked
    // task's node inside the block, whose other party lets go later)
    // publishes with `complete_held`, uses the block, and gives it up with
    // `release_runner`, while the handle joins and takes the result, or
    // detaches. The handle gets the result as soon as it is published, and
    // the block is freed once, after the runner's last use: never by the
    // handle while the runner holds it.
    for handle_takes in [true, false] {
        model(move || {
            let b = Block::new();
            let runner = {
                let b = b.clone();
                thread::spawn(move || {
                    b.result.with_mut(|r| unsafe { *r = Some(5) });
                    b.completion.complete_held(false);
                    b.node.with_mut(|n| unsafe { *n += 1 });
                    if let Release::Free { drop_result } = b.completion.release_runner() {
                        b.free(drop_result, !handle_takes);
                    }
                })
            };
            let taken = handle_takes.then(|| {
                let waker = thread_waker();
                while !b.completion.register(&waker) {
                    thread::park();
                }
                b.result.with_mut(|r| unsafe { (*r).take() })
            });
            if let Release::Free { drop_result } = b.completion.release_handle(handle_takes) {
                b.free(drop_result, !handle_takes);
            }
            runner.join().unwrap();
            assert_eq!(taken, handle_takes.then_some(Some(5)));
            assert_eq!(b.frees.load(Ordering::SeqCst), 1);
        });
    }
}

#[test]
fn awaiting_handle_switches_wakers_then_detaches() {
    model(|| {
        let b = Block::new();
        let runner = spawn_runner(&b, 9, false);
        // Poll with one waker, then with another (a future moved between
        // executors), then drop the handle without taking the result.
        let (first, first_wakes) = counting_waker();
        let (second, second_wakes) = counting_waker();
        let done_early = b.completion.register(&first);
        let done = done_early || b.completion.register(&second);
        if let Release::Free { drop_result } = b.completion.release_handle(false) {
            b.free(drop_result, true);
        }
        runner.join().unwrap();
        assert_eq!(b.frees.load(Ordering::SeqCst), 1);
        // A registration that saw "pending" is woken, on the waker that was
        // current when the runner completed; a replaced waker may or may not
        // have fired, but never both for one completion.
        let wakes = first_wakes.load(Ordering::SeqCst) + second_wakes.load(Ordering::SeqCst);
        if !done {
            assert_eq!(wakes, 1, "a pending registration was never woken");
            assert_eq!(second_wakes.load(Ordering::SeqCst), 1);
        }
        assert!(wakes <= 1);
    });
}

/// A waker that only counts its wakes (unparking a thread that is blocked
/// in `JoinHandle::join` is outside what loom models).
fn counting_waker() -> (std::task::Waker, Arc<AtomicUsize>) {
    struct Count(Arc<AtomicUsize>);
    impl std::task::Wake for Count {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        fn wake_by_ref(self: &std::sync::Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let n = Arc::new(AtomicUsize::new(0));
    let w = std::task::Waker::from(std::sync::Arc::new(Count(n.clone())));
    (w, n)
}

#[test]
fn runner_leaves_even_when_the_waker_panics() {
    quiet_waker_panics();
    model(|| {
        let b = Block::new();
        let runner = spawn_runner(&b, 5, true);
        let waker = std::task::Waker::from(std::sync::Arc::new(UnparkThenPanic(
            loom::thread::current(),
        )));
        while !b.completion.register(&waker) {
            thread::park();
        }
        let v = b.result.with_mut(|r| unsafe { (*r).take() });
        assert_eq!(v, Some(5));
        if let Release::Free { drop_result } = b.completion.release_handle(true) {
            b.free(drop_result, false);
        }
        // The wake's panic stayed inside `complete`: the runner returned,
        // and it still marked itself gone, so the block was freed once.
        runner.join().unwrap();
        assert_eq!(b.frees.load(Ordering::SeqCst), 1, "the block leaked");
    });
}

/// The payload of [`UnparkThenPanic`]'s panic.
const WAKER_PANIC: &str = "a waker that panics";

/// A waker that unparks its thread, then panics (user code).
struct UnparkThenPanic(loom::thread::Thread);

impl std::task::Wake for UnparkThenPanic {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        self.0.unpark();
        std::panic::panic_any(WAKER_PANIC);
    }
}

/// Keeps the panic hook from printing the expected waker panics of every
/// explored interleaving; other panics are printed as before.
fn quiet_waker_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.payload().downcast_ref::<&str>() != Some(&WAKER_PANIC) {
                previous(info);
            }
        }));
    });
}

/// A completion hook that counts its fires (with the task's success) in
/// counters outside the block, and whose fire reads a cell that the
/// installer wrote before installing it (so loom reports a fire that does
/// not see the installation).
#[repr(C)]
struct CountingHook {
    hook: CompletionHook,
    written_before_install: UnsafeCell<u64>,
    fires: Arc<AtomicUsize>,
    releases: Arc<AtomicUsize>,
}

impl CountingHook {
    fn boxed(fires: &Arc<AtomicUsize>, releases: &Arc<AtomicUsize>) -> NonNull<CompletionHook> {
        let h = Box::new(CountingHook {
            hook: CompletionHook {
                fire: Self::fire,
                release: Self::release,
            },
            written_before_install: UnsafeCell::new(0),
            fires: fires.clone(),
            releases: releases.clone(),
        });
        h.written_before_install.with_mut(|v| unsafe { *v = 41 });
        NonNull::from(Box::leak(h)).cast()
    }

    unsafe fn fire(hook: NonNull<CompletionHook>, ok: bool) {
        let h = unsafe { &*hook.cast::<CountingHook>().as_ptr() };
        assert_eq!(h.written_before_install.with(|v| unsafe { *v }), 41);
        assert!(ok);
        h.fires.fetch_add(1, Ordering::SeqCst);
    }

    unsafe fn release(hook: NonNull<CompletionHook>) {
        let h = unsafe { Box::from_raw(hook.cast::<CountingHook>().as_ptr()) };
        h.releases.fetch_add(1, Ordering::SeqCst);
    }
}

/// Installs a hook as `JoinHandle::dep` does: fires it when the runner
/// completed first, frees its own when another won.
fn install(b: &Block, fires: &Arc<AtomicUsize>, releases: &Arc<AtomicUsize>) {
    let hook = CountingHook::boxed(fires, releases);
    match b.completion.install_hook(hook) {
        Install::Installed => {}
        Install::Raced(winner) => {
            // As `JoinHandle::dep` does, read the winner's hook: its
            // contents were written before it was installed.
            let w = unsafe { &*winner.cast::<CountingHook>().as_ptr() };
            assert_eq!(w.written_before_install.with(|v| unsafe { *v }), 41);
            unsafe { CountingHook::release(hook) }
        }
        Install::FireNow => unsafe { CountingHook::fire(hook, true) },
    }
}

#[test]
fn hook_installed_while_the_runner_completes_fires_once() {
    model(|| {
        let fires = Arc::new(AtomicUsize::new(0));
        let releases = Arc::new(AtomicUsize::new(0));
        let b = Block::new();
        let runner = spawn_runner(&b, 1, false);
        install(&b, &fires, &releases);
        if let Release::Free { drop_result } = b.completion.release_handle(false) {
            b.free(drop_result, true);
        }
        runner.join().unwrap();
        assert_eq!(
            fires.load(Ordering::SeqCst),
            1,
            "the hook fired {} times",
            fires.load(Ordering::SeqCst)
        );
        drop(b);
        assert_eq!(releases.load(Ordering::SeqCst), 1);
    });
}

#[test]
fn two_installers_and_a_runner_fire_one_hook_once() {
    model(|| {
        let fires = Arc::new(AtomicUsize::new(0));
        let releases = Arc::new(AtomicUsize::new(0));
        let b = Block::new();
        let other = {
            let (b, fires, releases) = (b.clone(), fires.clone(), releases.clone());
            thread::spawn(move || install(&b, &fires, &releases))
        };
        let runner = spawn_runner(&b, 1, false);
        install(&b, &fires, &releases);
        other.join().unwrap();
        if let Release::Free { drop_result } = b.completion.release_handle(false) {
            b.free(drop_result, true);
        }
        runner.join().unwrap();
        assert_eq!(fires.load(Ordering::SeqCst), 1);
        drop(b);
        assert_eq!(
            releases.load(Ordering::SeqCst),
            2,
            "one hook raced and was freed, one released with the slot"
        );
    });
}

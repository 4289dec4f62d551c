//! `JoinHandle`: the owned result slot of a spawned task.

use crate::core::closure_task;
use crate::core::endless;
use crate::core::error::JoinError;
use crate::core::join_slot::JoinSlot;
use crate::core::stall;
use crate::core::task::{self, Header, TaskRef};
use crate::core::thread_waker::thread_waker;
use crate::core::wait_notes::Awaited;
use crate::core::worker::{Until, Worker};
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::ptr::NonNull;
use std::task::{Context, Poll, Waker};

/// An owned permission to join a task: wait for it and take its result.
///
/// Dropping the handle detaches the task ([`JoinHandle::detach`] says so
/// explicitly, without a warning): it still runs, and its result is
/// dropped (a panic from the result's destructor is printed and discarded:
/// nobody waits for it). The handle is also a [`Future`], so async code can
/// `.await` it; the awaiting task is woken when the result is ready, never
/// polled in a loop.
///
/// ```
/// let rt = selvedge::Runtime::builder().num_threads(2).build().unwrap();
/// let h = rt.spawn(|| "done");
/// assert_eq!(h.join(), "done");
/// ```
#[must_use = "dropping a JoinHandle detaches the task: join it to get the result, or call .detach() to say that nobody will"]
pub struct JoinHandle<T> {
    block: Option<NonNull<Header>>,
    /// Where `spawn` pushed the task on the spawning worker's deque, so
    /// `join` can take it back without searching; [`NOT_SPAWNED_HERE`]
    /// for a task that went elsewhere (the injector, or parked on
    /// promises: the block itself says where it was queued once ready).
    /// Two words in all, so a handle returns in registers.
    pos: u64,
    _result: PhantomData<T>,
}

/// [`JoinHandle::pos`] of a task that `spawn` did not push on a worker.
const NOT_SPAWNED_HERE: u64 = u64::MAX;

static_assertions::assert_eq_size!(JoinHandle<u64>, [usize; 2]);

// SAFETY: the handle only moves a `T` out of the block (needs `T: Send`);
// `&JoinHandle` only reads the completion state with atomics.
unsafe impl<T: Send> Send for JoinHandle<T> {}
// SAFETY: as above: no `&T` is ever handed out through `&JoinHandle`.
unsafe impl<T: Send> Sync for JoinHandle<T> {}

impl<T> std::fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinHandle")
            .field("finished", &self.is_finished())
            .finish_non_exhaustive()
    }
}

thread_local! {
    static THREAD_WAKER: Waker = thread_waker(std::thread::current());
}

impl<T> JoinHandle<T> {
    /// A handle for `task`, which must be a handled task returning `T`.
    ///
    /// # Safety
    /// `task` must come from `closure_task::new_handled` with result type `T`, and if
    /// its closure or `T` is not `'static`, the handle must be joined before
    /// those borrows end.
    pub(crate) unsafe fn new(task: &TaskRef) -> Self {
        Self {
            block: Some(task.ptr()),
            pos: NOT_SPAWNED_HERE,
            _result: PhantomData,
        }
    }

    /// Records that `spawn` pushed the task at deque position `pos` of the
    /// calling worker. (Only plain spawned tasks: `join` runs such a task
    /// in place by value, letting its panic unwind as it is.)
    #[inline]
    pub(crate) fn spawned_at(mut self, pos: u64) -> Self {
        debug_assert_ne!(pos, NOT_SPAWNED_HERE);
        self.pos = pos;
        self
    }

    /// The task's block, while the handle holds it.
    pub(crate) fn block(&self) -> NonNull<Header> {
        self.block.expect("JoinHandle used after completion")
    }

    fn join_slot(&self) -> &JoinSlot {
        let block = self.block.expect("JoinHandle used after completion");
        // SAFETY: the handle keeps the block alive until it releases it.
        unsafe { task::join_slot(block) }
    }

    /// Whether the task has finished (its result is ready).
    ///
    /// ```
    /// let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
    /// let h = rt.spawn(|| 1);
    /// rt.sync_root();
    /// assert!(h.is_finished());
    /// ```
    pub fn is_finished(&self) -> bool {
        self.block.is_none() || self.join_slot().is_complete()
    }

    /// Lets the task run on without anyone waiting for it: what dropping the
    /// handle does, said explicitly (for tasks whose effect is what counts,
    /// such as tasks ordered by the data they declare).
    ///
    /// ```
    /// let d = selvedge::Data::new(0);
    /// selvedge::spawn_with(d.write(), |d| *d = 1).detach();
    /// assert_eq!(d.into_inner(), 1);
    /// ```
    pub fn detach(self) {
        drop(self);
    }

    /// Waits for the task and returns its value; resumes its panic, with the
    /// original payload, if it panicked.
    ///
    /// On a worker thread, `join` runs the task in place when no thief took
    /// it, and otherwise keeps working (its own children first, then stolen
    /// tasks) until the result is ready. Elsewhere it blocks without
    /// spinning.
    ///
    /// ```
    /// let rt = selvedge::Runtime::builder().num_threads(2).build().unwrap();
    /// let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
    ///     rt.run(|| selvedge::spawn(|| panic!("boom")).join())
    /// }));
    /// let payload = r.unwrap_err();
    /// assert_eq!(payload.downcast_ref::<&str>(), Some(&"boom"));
    /// ```
    ///
    /// # Panics
    /// Resumes the task's panic; and panics with a message saying why when
    /// the task was cancelled (a delayed task whose dependency was dropped
    /// unfulfilled). [`JoinHandle::try_join`] returns both as an error.
    ///
    /// Panics too, naming the handle, when the wait could never end: the
    /// task declares a [`Data`](crate::Data) access ordered after one that
    /// the code calling `join` holds until it returns (a task that declared
    /// the handle, or a node of a graph run that declares it, joining a task
    /// it spawned on that handle). `try_join` panics the same way.
    #[inline]
    pub fn join(mut self) -> T {
        let result = if self.pos == NOT_SPAWNED_HERE {
            // A delayed or submitted task: the `Result` path, which reports
            // a declared-access task's cancellation as one.
            self.join_result()
        } else {
            let worker = Worker::current();
            if let Some(w) = worker {
                if let Some(task) = self.take_back(w) {
                    std::mem::forget(self);
                    w.count_task_run();
                    // SAFETY: the task is a plain spawned one of result type
                    // T, ours (taken back), with no hook; the handle is
                    // forgotten, so nothing else touches the block; the
                    // pool is this worker's, on its own thread.
                    return w.nested(|| unsafe {
                        closure_task::run_for_value::<T>(task, w.own_pool())
                    });
                }
            }
            let block = self.block.take().expect("JoinHandle used after completion");
            Self::wait_and_take(block, worker)
        };
        match result {
            Ok(v) => v,
            Err(payload) => JoinError::from_payload(payload).resume(),
        }
    }

    /// Like [`JoinHandle::join`], but returns a panic or a cancellation as
    /// a [`JoinError`] instead of panicking.
    ///
    /// ```
    /// let rt = selvedge::Runtime::builder().num_threads(2).build().unwrap();
    /// assert_eq!(rt.spawn(|| 7).try_join().unwrap(), 7);
    ///
    /// let p = selvedge::Promise::new();
    /// let h = rt.spawn_delayed([p.dep()], || 7);
    /// drop(p); // broken promise: the delayed task can never run
    /// assert!(h.try_join().unwrap_err().is_cancelled());
    /// ```
    #[inline]
    pub fn try_join(self) -> Result<T, JoinError> {
        self.join_result().map_err(JoinError::from_payload)
    }

    /// Like [`JoinHandle::join`], but returns a panic payload instead of
    /// resuming it.
    #[inline]
    pub(crate) fn join_result(mut self) -> std::thread::Result<T> {
        let worker = Worker::current();
        if let Some(w) = worker {
            if let Some(task) = self.take_back(w) {
                self.block = None;
                w.count_task_run();
                // SAFETY: the task is ours (taken back from `w`'s deque),
                // of result type T, with no hook.
                let run =
                    |task| w.nested(|| unsafe { closure_task::run_inline_for_handle::<T>(task) });
                // A delayed task made ready here, run in place: its own
                // slice in a trace, where the arrow from its fulfill ends.
                return w.traced_in_place(task, run);
            }
        }
        let block = self.block.take().expect("JoinHandle used after completion");
        Self::wait_and_take(block, worker)
    }

    /// Takes the task back from worker `w`'s deque, to run it in place, if
    /// it is still queued there and has no completion hook.
    #[inline]
    fn take_back(&self, w: &Worker) -> Option<TaskRef> {
        let block = self.block();
        let pos = if self.pos != NOT_SPAWNED_HERE {
            // Pointer identity makes this right on any worker: the slot at
            // `pos` of `w`'s deque holds this very block only if it is the
            // one `spawn` pushed there.
            self.pos
        } else {
            // A delayed task: queued where it became ready, perhaps on `w`.
            // SAFETY: the handle keeps the block alive.
            let (origin, pos) = unsafe { task::queued_at(block) };
            if origin != Some(w.address()) {
                return None;
            }
            pos
        };
        // A task whose dependency was asked for (`dep`) completes through
        // its join slot, which fires it: it is not run in place but waited
        // for (this worker runs it from its deque).
        // SAFETY: the handle keeps the block alive.
        if unsafe { task::join_slot(block) }.has_hook() {
            return None;
        }
        w.take_back(pos, block)
    }

    /// The slow path of a join: the task left this worker (or was never on
    /// it). Wait for its completion, then take the result.
    #[cold]
    fn wait_and_take(block: NonNull<Header>, worker: Option<&Worker>) -> std::thread::Result<T> {
        // SAFETY: the block lives until we release it.
        if !unsafe { task::join_slot(block) }.is_complete() {
            if let Some(why) = endless::endless_join(block) {
                // The wait could never end. The handle lets go of the
                // task first, as its drop would, then panics.
                // SAFETY: the handle held the block until here; after the
                // release it is freed by whichever side is last.
                unsafe {
                    let release = task::join_slot(block).release_handle(false);
                    closure_task::finish_release::<T>(block, release);
                }
                panic!("{why}");
            }
        }
        // SAFETY: the block lives until we release it.
        let name = unsafe { task::name(block) };
        if let Some(w) = worker {
            // SAFETY: as above.
            w.wait_until(Until::Complete(unsafe { task::join_slot(block) }, name));
        } else {
            let _noted = stall::outside_waits(Awaited::Task(Some(name)));
            // SAFETY: as above.
            let c = unsafe { task::join_slot(block) };
            let wait = |waker: &Waker| {
                while !c.register(waker) {
                    std::thread::park();
                }
            };
            // A join from a thread-local destructor may come after
            // THREAD_WAKER's own was run: then a waker of its own.
            if THREAD_WAKER.try_with(wait).is_err() {
                wait(&thread_waker(std::thread::current()));
            }
        }
        // SAFETY: the completion is complete, the result untaken, of type T.
        unsafe { Self::take_and_release(block) }
    }

    /// # Safety
    /// The block's completion must be complete and the result not taken.
    unsafe fn take_and_release(block: NonNull<Header>) -> std::thread::Result<T> {
        // SAFETY: complete and untaken (caller), of the handle's type `T`.
        let result = unsafe { closure_task::take_result::<T>(block) };
        // SAFETY: the handle still holds the block until it releases it.
        let release = unsafe { task::join_slot(block) }.release_handle(true);
        // SAFETY: `release` was returned to this handle for `block`, whose
        // result type is `T`.
        unsafe { closure_task::finish_release::<T>(block, release) };
        result
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            // SAFETY: the handle still holds the block; after release it is
            // freed by whichever side is last.
            unsafe {
                let release = task::join_slot(block).release_handle(false);
                closure_task::finish_release::<T>(block, release);
            }
        }
    }
}

impl<T> JoinHandle<T> {
    /// The poll of both futures: registers `cx`'s waker with the task's
    /// completion (so the task's end wakes it: never polled in a loop), and
    /// once complete takes the result and releases the block.
    fn poll_result(&mut self, cx: &mut Context<'_>) -> Poll<std::thread::Result<T>> {
        let block = self.block.expect("JoinHandle polled after it completed");
        // SAFETY: the handle holds the block.
        let c = unsafe { task::join_slot(block) };
        if !c.register(cx.waker()) {
            return Poll::Pending;
        }
        self.block = None;
        // SAFETY: complete (register returned true), result untaken.
        Poll::Ready(unsafe { Self::take_and_release(block) })
    }

    /// A future of the task's result that, like
    /// [`JoinHandle::try_join`], returns a panic or a cancellation as a
    /// [`JoinError`] instead of panicking (awaiting the handle itself
    /// panics, as [`JoinHandle::join`] does). The awaiting task is woken
    /// when the result is ready, never polled in a loop.
    ///
    /// ```
    /// use std::future::Future;
    /// use std::pin::pin;
    /// use std::sync::Arc;
    /// use std::task::{Context, Poll, Wake, Waker};
    ///
    /// // A minimal executor: park until the future's waker unparks us.
    /// struct Unpark(std::thread::Thread);
    /// impl Wake for Unpark {
    ///     fn wake(self: Arc<Self>) {
    ///         self.0.unpark();
    ///     }
    /// }
    /// fn block_on<F: Future>(f: F) -> F::Output {
    ///     let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    ///     let mut cx = Context::from_waker(&waker);
    ///     let mut f = pin!(f);
    ///     loop {
    ///         if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
    ///             return v;
    ///         }
    ///         std::thread::park();
    ///     }
    /// }
    ///
    /// let rt = selvedge::Runtime::builder().num_threads(2).build().unwrap();
    /// assert_eq!(block_on(rt.spawn(|| 7).try_join_async()).unwrap(), 7);
    ///
    /// let p = selvedge::Promise::new();
    /// let h = rt.spawn_delayed([p.dep()], || 7);
    /// drop(p); // broken promise: the delayed task can never run
    /// let err = block_on(h.try_join_async()).unwrap_err();
    /// assert!(err.is_cancelled(), "{err}");
    /// ```
    pub fn try_join_async(self) -> TryJoin<T> {
        TryJoin { handle: self }
    }
}

impl<T> Future for JoinHandle<T> {
    type Output = T;

    /// Ready with the task's value once it finished; resumes its panic.
    /// [`JoinHandle::try_join_async`] returns errors instead.
    ///
    /// # Panics
    /// When polled again after it returned `Ready`; and as
    /// [`JoinHandle::join`] when the task panicked or was cancelled.
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        match self.poll_result(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(v)) => Poll::Ready(v),
            Poll::Ready(Err(payload)) => JoinError::from_payload(payload).resume(),
        }
    }
}

impl<T> Unpin for JoinHandle<T> {}

/// The future of [`JoinHandle::try_join_async`]: the task's value, or a
/// [`JoinError`] when it panicked or was cancelled. Dropping it detaches
/// the task, as dropping its handle does.
///
/// ```
/// let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
/// let h = rt.spawn(|| panic!("no"));
/// rt.sync_root();
/// assert!(h.is_finished());
/// // Finished: the first poll is ready (no executor needed).
/// let mut fut = h.try_join_async();
/// let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
/// match std::pin::Pin::new(&mut fut).poll(&mut cx) {
///     std::task::Poll::Ready(Err(e)) => assert!(e.is_panic(), "{e}"),
///     other => panic!("expected a panic error, got {other:?}"),
/// }
/// # use std::future::Future;
/// ```
#[must_use = "futures do nothing unless polled; dropping this detaches the task"]
pub struct TryJoin<T> {
    handle: JoinHandle<T>,
}

impl<T> std::fmt::Debug for TryJoin<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TryJoin")
            .field("handle", &self.handle)
            .finish()
    }
}

impl<T> Future for TryJoin<T> {
    type Output = Result<T, JoinError>;

    /// Ready with the task's value, or why there is none, once it
    /// finished.
    ///
    /// # Panics
    /// When polled again after it returned `Ready`.
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.handle
            .poll_result(cx)
            .map(|r| r.map_err(JoinError::from_payload))
    }
}

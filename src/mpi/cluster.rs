//! A cluster: this process's place among the MPI ranks, and the
//! operations it posts, each a promise.

use super::engine::{Engine, Kind, Op, Outcome as Ended};
use super::{Element, MpiError};
use crate::core::pool::{current_registry, Runtime};
use crate::core::registry::Registry;
use crate::core::sync::{lock, Condvar, Mutex};
use crate::core::sync::{AtomicBool, Ordering};
use crate::core::worker::Worker;
use crate::dataflow::delayed::submit_delayed;
use crate::dataflow::event::Dep;
use crate::dataflow::promise::Promise;
use std::ffi::{c_int, c_void};
use std::sync::Arc;

/// MPI starts once per process, and cannot start again once finished.
static STARTED: AtomicBool = AtomicBool::new(false);

/// This process's rank among the MPI ranks, and its progress thread: post
/// sends, receives and collectives, each of which completes as a promise
/// (its [`Dep`]) that tasks can wait on like any other.
///
/// One per process: [`Cluster::start`] starts MPI (on a thread of its own,
/// which makes every MPI call), and dropping the last handle abandons the
/// operations still in flight (their promises break) and finalizes MPI.
/// Operations in flight count as pending work of the runtime: `sync_root`
/// and the runtime's drop wait for them, so drop the cluster first when a
/// message may never come.
///
/// ```no_run
/// use selvedge::mpi::Cluster;
///
/// // Run with `mpirun -n 2 <program>`.
/// let cluster = Cluster::start()?;
/// let (me, peer) = (cluster.rank(), 1 - cluster.rank());
/// let sent = cluster.isend(vec![me as f64; 4], peer, 7);
/// let received = cluster.irecv::<f64>(4, peer, 7);
/// // A task that runs once the message arrived.
/// let doubled = selvedge::spawn_delayed([received.dep()], move || {
///     received.join().map(|v| v.iter().map(|x| 2.0 * x).collect::<Vec<_>>())
/// });
/// assert_eq!(doubled.join()?, vec![2.0 * peer as f64; 4]);
/// sent.join()?; // the buffer back, once MPI is done with it
/// # Ok::<(), selvedge::mpi::MpiError>(())
/// ```
#[derive(Clone)]
pub struct Cluster {
    inner: Arc<Inner>,
}

struct Inner {
    link: Link,
    rank: usize,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// What posting an operation needs: the engine, and the bounds ranks and
/// tags are checked against. Held by what posts on the cluster's behalf
/// after the caller let go (a `send_after`'s task, a graph's completions):
/// it does not keep the cluster, so MPI is finalized when the last
/// [`Cluster`] handle goes, not when a pending completion does.
#[derive(Clone)]
pub(super) struct Link {
    engine: Arc<Engine>,
    size: usize,
    tag_ub: i32,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.link.engine.stop();
        if let Some(thread) = lock(&self.thread).take() {
            let _ = thread.join();
        }
    }
}

impl Cluster {
    /// Starts MPI for the current runtime (the worker's, or the global
    /// runtime from any other thread).
    ///
    /// # Errors
    /// [`MpiError::Unavailable`] when MPI was started in this process
    /// before, or cannot start (the reason says why).
    ///
    /// ```no_run
    /// let cluster = selvedge::mpi::Cluster::start()?;
    /// println!("rank {} of {}", cluster.rank(), cluster.size());
    /// # Ok::<(), selvedge::mpi::MpiError>(())
    /// ```
    pub fn start() -> Result<Cluster, MpiError> {
        Self::start_for(Arc::clone(current_registry()))
    }

    /// [`Cluster::start`] for `runtime`: the operations' completions run
    /// on its workers.
    ///
    /// ```no_run
    /// let rt = selvedge::Runtime::new()?;
    /// let cluster = selvedge::mpi::Cluster::start_in(&rt)?;
    /// # let _ = cluster;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn start_in(runtime: &Runtime) -> Result<Cluster, MpiError> {
        Self::start_for(Arc::clone(runtime.registry()))
    }

    fn start_for(registry: Arc<Registry>) -> Result<Cluster, MpiError> {
        if STARTED.swap(true, Ordering::AcqRel) {
            return Err(MpiError::Unavailable {
                reason: "MPI was started in this process before: it starts once per process (keep the cluster, and clone it)".into(),
            });
        }
        let (engine, started, thread) = Engine::start(registry)?;
        Ok(Cluster {
            inner: Arc::new(Inner {
                link: Link {
                    engine,
                    size: started.size,
                    tag_ub: started.tag_ub,
                },
                rank: started.rank,
                thread: Mutex::new(Some(thread)),
            }),
        })
    }

    /// This process's rank, from 0.
    ///
    /// ```no_run
    /// # let cluster = selvedge::mpi::Cluster::start()?;
    /// assert!(cluster.rank() < cluster.size());
    /// # Ok::<(), selvedge::mpi::MpiError>(())
    /// ```
    pub fn rank(&self) -> usize {
        self.inner.rank
    }

    /// How many ranks there are.
    ///
    /// ```no_run
    /// # let cluster = selvedge::mpi::Cluster::start()?;
    /// assert!(cluster.size() >= 1);
    /// # Ok::<(), selvedge::mpi::MpiError>(())
    /// ```
    pub fn size(&self) -> usize {
        self.inner.link.size
    }

    /// The largest tag this MPI library allows (at least 32767).
    ///
    /// ```no_run
    /// # let cluster = selvedge::mpi::Cluster::start()?;
    /// assert!(cluster.tag_ub() >= 32767);
    /// # Ok::<(), selvedge::mpi::MpiError>(())
    /// ```
    pub fn tag_ub(&self) -> i32 {
        self.inner.link.tag_ub
    }

    /// Sends `buf` to rank `dest` with `tag`, nonblocking. The handle's
    /// [`dep`](Message::dep) is fulfilled once MPI is done with the buffer
    /// (which [`join`](Message::join) gives back), and broken if the send
    /// failed or was abandoned.
    ///
    /// # Panics
    /// If `dest` is not a rank of the cluster, `tag` is outside
    /// `0..=tag_ub()`, or `buf` holds more than `i32::MAX` elements.
    ///
    /// ```no_run
    /// # let cluster = selvedge::mpi::Cluster::start()?;
    /// let sent = cluster.isend(vec![1u32, 2, 3], 0, 1);
    /// # let _ = cluster.irecv::<u32>(3, 0, 1);
    /// assert_eq!(sent.join()?, [1, 2, 3]);
    /// # Ok::<(), selvedge::mpi::MpiError>(())
    /// ```
    pub fn isend<T: Element>(&self, buf: Vec<T>, dest: usize, tag: i32) -> Message<T> {
        self.link().check_rank("isend to", dest);
        self.link().check_tag("isend", tag);
        self.link()
            .post(send("isend", &buf, dest, tag), buf, |_, buf| Ok(buf))
    }

    /// Sends what `produce` returns once every one of `deps` is fulfilled:
    /// a task that runs `produce` and then [`isend`](Cluster::isend)s its
    /// value. If a dependency breaks, nothing is sent and the handle's
    /// dependency breaks too.
    ///
    /// # Panics
    /// As for [`Cluster::isend`] (checked before anything runs).
    ///
    /// ```no_run
    /// # let cluster = selvedge::mpi::Cluster::start()?;
    /// let ready = selvedge::Promise::new();
    /// let sent = cluster.send_after([ready.dep()], || vec![4.0f32; 8], 0, 2);
    /// # let _ = cluster.irecv::<f32>(8, 0, 2);
    /// ready.fulfill();
    /// sent.join()?;
    /// # Ok::<(), selvedge::mpi::MpiError>(())
    /// ```
    pub fn send_after<D, F, T>(&self, deps: D, produce: F, dest: usize, tag: i32) -> Message<T>
    where
        D: IntoIterator<Item = Dep>,
        F: FnOnce() -> Vec<T> + Send + 'static,
        T: Element,
    {
        self.link().check_rank("send_after to", dest);
        self.link().check_tag("send_after", tag);
        let promise = Promise::new();
        let dep = promise.dep();
        let slot: Slot<T> = Arc::new(Outcome::new());
        let link = self.link().clone();
        let mut unsent = Unsent {
            slot: Some(Arc::clone(&slot)),
            promise: Some(promise),
        };
        // The task's handle is not kept: its promise and slot say how the
        // send went. A broken dependency drops the task unrun, and with it
        // the guard: the outcome says cancelled, and the promise breaks.
        drop(submit_delayed(
            &self.link().engine.registry,
            deps,
            move || {
                // Taken only once `produce` returned: if it panics, the
                // guard, dropped in the unwinding, says cancelled.
                let buf = produce();
                let kind = send("send_after", &buf, dest, tag);
                let (slot, promise) = unsent.take();
                link.post_with(kind, buf, |_, buf| Ok(buf), promise, slot);
            },
        ));
        Message {
            dep,
            slot,
            registry: Arc::clone(&self.link().engine.registry),
        }
    }

    /// Receives a message of `len` elements from rank `source` with
    /// `tag`, nonblocking. The handle's [`dep`](Message::dep) is fulfilled
    /// once it arrived, and [`join`](Message::join) gives it; a message of
    /// another length is an error ([`MpiError::Length`] or
    /// [`MpiError::Truncated`]) and breaks the dependency.
    ///
    /// # Panics
    /// If `source` is not a rank of the cluster, `tag` is outside
    /// `0..=tag_ub()`, or `len` is more than `i32::MAX`.
    ///
    /// ```no_run
    /// # let cluster = selvedge::mpi::Cluster::start()?;
    /// # let _ = cluster.isend(vec![0i64; 16], 0, 3);
    /// let halo = cluster.irecv::<i64>(16, 0, 3);
    /// let rows = halo.join()?;
    /// assert_eq!(rows.len(), 16);
    /// # Ok::<(), selvedge::mpi::MpiError>(())
    /// ```
    pub fn irecv<T: Element>(&self, len: usize, source: usize, tag: i32) -> Message<T> {
        self.link().check_rank("irecv from", source);
        self.link().check_tag("irecv", tag);
        let (kind, buf) = receive(len, source, tag);
        self.link()
            .post(kind, buf, move |outcome, buf| received(outcome, buf, len))
    }

    /// Broadcasts `buf` from rank `root` to every rank, nonblocking: every
    /// rank calls it, in the same order as its other collectives, with a
    /// buffer of the same length (the root's holds the data); each gets
    /// the root's data from [`join`](Message::join).
    ///
    /// # Panics
    /// If `root` is not a rank of the cluster, or `buf` holds more than
    /// `i32::MAX` elements.
    ///
    /// ```no_run
    /// # let cluster = selvedge::mpi::Cluster::start()?;
    /// let data = if cluster.rank() == 0 { vec![1.0f64, 2.0] } else { vec![0.0; 2] };
    /// assert_eq!(cluster.ibcast(data, 0).join()?, [1.0, 2.0]);
    /// # Ok::<(), selvedge::mpi::MpiError>(())
    /// ```
    pub fn ibcast<T: Element>(&self, mut buf: Vec<T>, root: usize) -> Message<T> {
        self.link().check_rank("ibcast from", root);
        let count = count_of("ibcast", buf.len());
        let kind = Kind::Bcast {
            buf: buf.as_mut_ptr().cast::<c_void>(),
            count,
            datatype: T::datatype(),
            root: root as c_int,
        };
        self.link().post(kind, buf, |_, buf| Ok(buf))
    }

    /// Reduces `buf` element by element over every rank with `op`,
    /// nonblocking: every rank calls it, in the same order as its other
    /// collectives, with a buffer of the same length; each gets the
    /// result from [`join`](Message::join).
    ///
    /// # Panics
    /// If `buf` holds more than `i32::MAX` elements.
    ///
    /// ```no_run
    /// use selvedge::mpi::{Cluster, Reduce};
    /// # let cluster = Cluster::start()?;
    /// let total = cluster.iallreduce(vec![1u64], Reduce::Sum).join()?;
    /// assert_eq!(total[0], cluster.size() as u64);
    /// # Ok::<(), selvedge::mpi::MpiError>(())
    /// ```
    pub fn iallreduce<T: Element>(&self, buf: Vec<T>, op: Reduce) -> Message<T> {
        let count = count_of("iallreduce", buf.len());
        let mut result: Vec<T> = Vec::with_capacity(buf.len());
        let kind = Kind::Allreduce {
            send: buf.as_ptr().cast::<c_void>(),
            recv: result.as_mut_ptr().cast::<c_void>(),
            count,
            datatype: T::datatype(),
            op: op.handle(),
        };
        let len = buf.len();
        self.link()
            .post(kind, (buf, result), move |_, (_, mut result)| {
                // SAFETY: MPI wrote `len` elements of a type for which every
                // bit pattern is a value.
                unsafe { result.set_len(len) };
                Ok(result)
            })
    }

    /// The posting side of the cluster (see [`Link`]).
    pub(super) fn link(&self) -> &Link {
        &self.inner.link
    }
}

impl Link {
    /// Posts an operation whose buffers are `owned`; `done` makes the
    /// handle's value from them once the operation completed.
    fn post<T, B>(
        &self,
        kind: Kind,
        owned: B,
        done: impl FnOnce(Ended, B) -> Result<Vec<T>, MpiError> + Send + 'static,
    ) -> Message<T>
    where
        T: Element,
        B: Send + 'static,
    {
        let promise = Promise::new();
        let dep = promise.dep();
        let slot: Slot<T> = Arc::new(Outcome::new());
        self.post_with(kind, owned, done, promise, Arc::clone(&slot));
        Message {
            dep,
            slot,
            registry: Arc::clone(&self.engine.registry),
        }
    }

    /// [`Cluster::post`] with the handle's promise (or what to call when
    /// the operation ends) and slot made already.
    fn post_with<T, B>(
        &self,
        kind: Kind,
        owned: B,
        done: impl FnOnce(Ended, B) -> Result<Vec<T>, MpiError> + Send + 'static,
        then: impl Into<Then<T>>,
        slot: Slot<T>,
    ) where
        T: Element,
        B: Send + 'static,
    {
        let in_finish = Arc::clone(&slot);
        let finish = Box::new(move |outcome: Ended| {
            let result = match outcome {
                Ended::Failed(e) => Err(e),
                Ended::Leaked => {
                    // MPI may still use the buffers: never freed.
                    std::mem::forget(owned);
                    Err(MpiError::Abandoned)
                }
                done_outcome => done(done_outcome, owned),
            };
            in_finish.set(result);
        });
        let then = then.into();
        let action = Box::new(move || {
            // `finish` ran before the signal fired.
            match then {
                Then::Fulfill(promise) => {
                    if slot.is_ok() {
                        promise.fulfill();
                    }
                    // Otherwise the promise is dropped here: broken.
                }
                Then::Call(f) => f(lock(&slot.value).take().unwrap_or(Err(MpiError::Abandoned))),
            }
        });
        let signal = self.engine.registry.signal(action);
        self.engine.post(Op {
            kind,
            finish,
            signal,
        });
    }

    /// [`Cluster::isend`] that calls `then` with the outcome on a worker
    /// when the send ended, instead of handing out a handle (`then` is
    /// dropped uncalled if the send is abandoned).
    pub(super) fn isend_then<T: Element>(
        &self,
        buf: Vec<T>,
        dest: usize,
        tag: i32,
        then: impl FnOnce(Result<Vec<T>, MpiError>) + Send + 'static,
    ) {
        self.check_rank("isend to", dest);
        self.check_tag("isend", tag);
        let kind = send("isend", &buf, dest, tag);
        let then = Then::Call(Box::new(then));
        self.post_with(kind, buf, |_, buf| Ok(buf), then, Arc::new(Outcome::new()));
    }

    /// [`Cluster::irecv`] that calls `then` with the outcome on a worker
    /// when the receive ended (dropped uncalled if it is abandoned).
    pub(super) fn irecv_then<T: Element>(
        &self,
        len: usize,
        source: usize,
        tag: i32,
        then: impl FnOnce(Result<Vec<T>, MpiError>) + Send + 'static,
    ) {
        self.check_rank("irecv from", source);
        self.check_tag("irecv", tag);
        let (kind, buf) = receive(len, source, tag);
        let then = Then::Call(Box::new(then));
        self.post_with(
            kind,
            buf,
            move |outcome, buf| received(outcome, buf, len),
            then,
            Arc::new(Outcome::new()),
        );
    }

    /// The runtime its completions run on.
    pub(super) fn registry(&self) -> &Arc<Registry> {
        &self.engine.registry
    }

    fn check_rank(&self, what: &str, rank: usize) {
        assert!(
            rank < self.size,
            "selvedge::mpi: {what} rank {rank}, but the cluster has {} ranks (0..{})",
            self.size,
            self.size
        );
    }

    fn check_tag(&self, what: &str, tag: i32) {
        assert!(
            (0..=self.tag_ub).contains(&tag),
            "selvedge::mpi: {what} with tag {tag}, outside 0..={} (this MPI library's MPI_TAG_UB)",
            self.tag_ub
        );
    }
}

/// A send of `buf` (`what` names the call for a count too large).
fn send<T: Element>(what: &str, buf: &[T], dest: usize, tag: i32) -> Kind {
    Kind::Send {
        buf: buf.as_ptr().cast::<c_void>(),
        count: count_of(what, buf.len()),
        datatype: T::datatype(),
        dest: dest as c_int,
        tag,
    }
}

/// A receive of `len` elements: its operation and its buffer.
fn receive<T: Element>(len: usize, source: usize, tag: i32) -> (Kind, Vec<T>) {
    let count = count_of("irecv", len);
    let mut buf: Vec<T> = Vec::with_capacity(len);
    let kind = Kind::Recv {
        buf: buf.as_mut_ptr().cast::<c_void>(),
        count,
        datatype: T::datatype(),
        source: source as c_int,
        tag,
    };
    (kind, buf)
}

/// A completed receive's value: the buffer, if the message had `len`
/// elements.
fn received<T: Element>(outcome: Ended, mut buf: Vec<T>, len: usize) -> Result<Vec<T>, MpiError> {
    let Ended::Done { count, source, tag } = outcome else {
        unreachable!("finish handles failures")
    };
    if count != len {
        return Err(MpiError::Length {
            expected: len,
            got: count,
            source,
            tag,
        });
    }
    // SAFETY: MPI wrote `len` elements of a type for which every bit
    // pattern is a value (a predefined numeric type).
    unsafe { buf.set_len(len) };
    Ok(buf)
}

/// What an operation's completion does: fulfill its handle's promise
/// (broken if it failed), or call a function with its outcome.
enum Then<T> {
    Fulfill(Promise),
    Call(Box<dyn FnOnce(Result<Vec<T>, MpiError>) + Send>),
}

impl<T> From<Promise> for Then<T> {
    fn from(promise: Promise) -> Self {
        Then::Fulfill(promise)
    }
}

/// The element count of an operation, which MPI takes as an `int`.
fn count_of(what: &str, len: usize) -> c_int {
    c_int::try_from(len).unwrap_or_else(|_| {
        panic!(
            "selvedge::mpi: {what} of {len} elements, more than MPI's int count allows ({})",
            c_int::MAX
        )
    })
}

/// Where an operation's outcome goes: set once, by its `finish` (or, for a
/// `send_after` whose task never ran, when the task is dropped).
type Slot<T> = Arc<Outcome<T>>;

/// An operation's outcome, and a condition variable for a thread outside
/// the pool waiting for it.
struct Outcome<T> {
    value: Mutex<Option<Result<Vec<T>, MpiError>>>,
    set: Condvar,
    /// Whether the operation succeeded: kept apart from `value`, which a
    /// `join` may take before the completion reads it.
    succeeded: AtomicBool,
}

impl<T> Outcome<T> {
    fn new() -> Self {
        Self {
            value: Mutex::new(None),
            set: Condvar::new(),
            succeeded: AtomicBool::new(false),
        }
    }

    /// Sets the outcome (once: a later call changes nothing) and wakes the
    /// waiters.
    fn set(&self, result: Result<Vec<T>, MpiError>) {
        let mut value = lock(&self.value);
        if value.is_none() {
            // Relaxed: the signal's fire (after this) releases it to the
            // completion.
            self.succeeded.store(result.is_ok(), Ordering::Relaxed);
            *value = Some(result);
        }
        drop(value);
        self.set.notify_all();
    }

    fn is_ok(&self) -> bool {
        self.succeeded.load(Ordering::Relaxed)
    }
}

/// A `send_after`'s promise and outcome, until its task runs: dropped
/// unrun (a dependency broke), the outcome says cancelled and then the
/// promise breaks.
struct Unsent<T> {
    slot: Option<Slot<T>>,
    promise: Option<Promise>,
}

impl<T> Unsent<T> {
    fn take(&mut self) -> (Slot<T>, Promise) {
        let slot = self.slot.take().expect("a task runs once");
        let promise = self.promise.take().expect("a task runs once");
        (slot, promise)
    }
}

impl<T> Drop for Unsent<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            slot.set(Err(MpiError::Cancelled));
        }
        drop(self.promise.take());
    }
}

/// A reduction for [`Cluster::iallreduce`].
///
/// ```
/// let op = selvedge::mpi::Reduce::Max;
/// assert_ne!(op, selvedge::mpi::Reduce::Sum);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reduce {
    /// The sum.
    Sum,
    /// The product.
    Product,
    /// The smallest.
    Min,
    /// The largest.
    Max,
}

impl Reduce {
    fn handle(self) -> mpi_sys::MPI_Op {
        // SAFETY: constants of the library, read only.
        unsafe {
            match self {
                Reduce::Sum => mpi_sys::RSMPI_SUM,
                Reduce::Product => mpi_sys::RSMPI_PROD,
                Reduce::Min => mpi_sys::RSMPI_MIN,
                Reduce::Max => mpi_sys::RSMPI_MAX,
            }
        }
    }
}

/// A posted operation: its dependency for tasks, and its value once it
/// completed (the received message, the send's buffer back, a
/// collective's result).
///
/// ```no_run
/// # let cluster = selvedge::mpi::Cluster::start()?;
/// # let _ = cluster.isend(vec![1u8], 0, 0);
/// let m = cluster.irecv::<u8>(1, 0, 0);
/// let after = selvedge::spawn_delayed([m.dep()], || "arrived");
/// assert_eq!(after.join(), "arrived");
/// assert_eq!(m.join()?, [1]);
/// # Ok::<(), selvedge::mpi::MpiError>(())
/// ```
pub struct Message<T> {
    dep: Dep,
    slot: Slot<T>,
    registry: Arc<Registry>,
}

impl<T: Element> Message<T> {
    /// Fulfilled when the operation completed; broken if it failed or was
    /// abandoned (the tasks waiting on it are cancelled).
    pub fn dep(&self) -> Dep {
        self.dep.clone()
    }

    /// Whether the operation ended (completed, failed or was abandoned).
    pub fn is_finished(&self) -> bool {
        lock(&self.slot.value).is_some()
    }

    /// Waits until the operation ended (working meanwhile, on a worker)
    /// and returns its value or its error.
    ///
    /// # Errors
    /// What MPI reported, a message of the wrong length, or
    /// [`MpiError::Abandoned`] when the cluster was dropped first (or, for
    /// [`Cluster::send_after`], a dependency broke).
    pub fn join(self) -> Result<Vec<T>, MpiError> {
        if Worker::current().is_some() {
            // A task behind the dependency: the worker runs other tasks
            // until it ran (or was cancelled: the dependency broke).
            let _ = submit_delayed(&self.registry, [self.dep.clone()], || ()).try_join();
        } else {
            // Outside the pool: woken as soon as the progress thread set the
            // outcome, not after a worker passed the completion on.
            let mut value = lock(&self.slot.value);
            while value.is_none() {
                value = self
                    .slot
                    .set
                    .wait(value)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
        }
        lock(&self.slot.value)
            .take()
            .unwrap_or(Err(MpiError::Abandoned))
    }
}

#[cfg(test)]
mod tests {
    use super::Outcome;
    use crate::mpi::MpiError;

    /// A `join` may take the value before the completion asks whether the
    /// operation succeeded: the answer must not depend on the value still
    /// being there.
    #[test]
    fn success_is_known_after_the_value_was_taken() {
        let ok: Outcome<u8> = Outcome::new();
        ok.set(Ok(vec![1]));
        assert_eq!(crate::core::sync::lock(&ok.value).take(), Some(Ok(vec![1])));
        assert!(ok.is_ok());
        let failed: Outcome<u8> = Outcome::new();
        failed.set(Err(MpiError::Abandoned));
        drop(crate::core::sync::lock(&failed.value).take());
        assert!(!failed.is_ok());
    }
}

//! A cluster: this process's place among the MPI ranks, and the
//! operations it posts, each a promise.

use super::link::{count_of, receive, received, send, Link};
use super::message::{Message, Outcome, Slot, Unsent};
use super::op::Kind;
use super::progress;
use super::{Element, MpiError};
use crate::core::pool::{current_registry, Runtime};
use crate::core::registry::Registry;
use crate::core::sync::{lock, Mutex};
use crate::core::sync::{AtomicBool, Ordering};
use crate::core::worker::Worker;
use crate::dataflow::delayed::spawn_delayed_on;
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
/// which keeps the operations moving when every worker of the runtime runs
/// a long task; the workers test them too: see [the module
/// docs](crate::mpi)), and dropping the last handle finalizes MPI once
/// every operation in flight ended: receives are cancelled (their
/// promises break, their handles say [`MpiError::Abandoned`]); sends and
/// collectives, which MPI cannot reliably cancel, complete when the other
/// ranks take part (the drop says on stderr what it still waits for after
/// a second). Dropped on a worker, the last handle does not wait for
/// that: the cluster's runtime's `sync_root` and drop do.
///
/// Operations in flight count as pending work of the runtime: `sync_root`
/// and the runtime's drop wait for them, so drop the cluster first when a
/// message may never come. Once the runtime's drop has begun, operations
/// posted from outside its workers are refused at once
/// ([`MpiError::RuntimeShutDown`], their dependencies broken): no worker
/// would be left to complete them.
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

impl Drop for Inner {
    /// Stops the progress thread, which finalizes MPI once every request
    /// ended (see `progress.rs`), and waits for it, except where waiting
    /// could block what the stop needs: on a worker (any runtime's), where
    /// the stop may wait for a send or a collective whose other side a task
    /// queued behind this one would post, the progress thread is left to
    /// finish on its own (it joins nothing and needs no one), and a signal
    /// of the cluster's runtime, fired once MPI is finalized, makes that
    /// runtime's `sync_root` and drop wait for it instead. (The progress
    /// thread itself may drop the last handle, in a closure it drops: it
    /// cannot join itself. Other threads drop what the engine gives up only
    /// once they hold none of its locks, so the thread they join can end.)
    fn drop(&mut self) {
        let Some(thread) = lock(&self.thread).take() else {
            return;
        };
        let on_progress_thread = thread.thread().id() == std::thread::current().id();
        if Worker::current().is_none() && !on_progress_thread {
            self.link.engine.stop(None);
            let _ = thread.join();
            return;
        }
        let finalized = if on_progress_thread {
            None
        } else {
            // Refused once the runtime's drop began: nothing is left to
            // wait for MPI then.
            self.link
                .registry()
                .signal_unless_shut_down(Box::new(|| ()))
                .ok()
        };
        self.link.engine.stop(finalized);
        // The handle is dropped: the thread runs on, detached.
        drop(thread);
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
    /// on its workers. Drop the cluster before `runtime`: once the
    /// runtime's drop has begun, what is posted from outside its workers
    /// is refused ([`MpiError::RuntimeShutDown`]).
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
        let (engine, started, thread) = progress::start(registry)?;
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
        if self.link().registry().is_shut_down_for_caller() {
            // Said up front: the task would be cancelled, and the send say
            // `Cancelled`, which names the wrong cause.
            return Message::refused(self.link().registry(), MpiError::RuntimeShutDown);
        }
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
        drop(spawn_delayed_on(self.link().registry(), deps, move || {
            // Taken only once `produce` returned: if it panics, the
            // guard, dropped in the unwinding, says cancelled.
            let buf = produce();
            let kind = send("send_after", &buf, dest, tag);
            let (slot, promise) = unsent.take();
            link.post_with(kind, buf, |_, buf| Ok(buf), promise, slot);
        }));
        Message {
            dep,
            slot,
            registry: Arc::clone(self.link().registry()),
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

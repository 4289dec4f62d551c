//! GPU tasks: spawning, their handles, and dependencies that stay on the
//! device.

use super::finish::{after_failure, finish_work, KeptSince, Record};
use super::raw::RawEvent;
use super::turns::{GpuTurns, RanTurns};
use super::{Device, GpuError, GpuStream};
use crate::core::error::JoinError;
use crate::core::handle::JoinHandle;
use crate::core::pool::started_global_registry;
use crate::core::sync::{lock, Mutex};
use crate::core::worker::Worker;
use crate::dataflow::delayed;
use crate::dataflow::event::Dep;
use crate::dataflow::loop_promise::LoopPromise;
use crate::dataflow::promise::Promise;
use crate::loops::parallel_for;
use std::sync::{Arc, OnceLock};

/// The handle of a GPU task: its value once the device finished the work
/// the task enqueued, and the dependencies other tasks can wait on.
///
/// ```no_run
/// # fn main() -> Result<(), selvedge::gpu::GpuError> {
/// let dev = selvedge::gpu::Device::open(0)?;
/// let upload = dev.spawn(|s| Ok(s.stream().clone_htod(&[1.0f32; 256])?));
/// // A CPU task that runs once the upload is complete on the device.
/// let after = selvedge::spawn_delayed([upload.dep()], || "uploaded");
/// assert_eq!(after.join(), "uploaded");
/// let buffer = upload.join()?;
/// assert_eq!(buffer.len(), 256);
/// # Ok(()) }
/// ```
pub struct GpuHandle<T> {
    join: JoinHandle<Result<T, GpuError>>,
    pub(super) link: Link,
}

/// What a consumer needs of a GPU task to depend on it.
#[derive(Clone)]
pub(super) struct Link {
    /// Fulfilled when the stream reached the end of the task's work;
    /// broken if the task failed.
    done: Dep,
    /// Fulfilled once the work and `event` are enqueued; broken if the task
    /// failed.
    enqueued: Dep,
    /// Recorded after the task's work (set before `enqueued` is fulfilled).
    event: Arc<OnceLock<Arc<RawEvent>>>,
    /// Identifies the device (its `DeviceInner`'s address).
    device: usize,
}

/// A dependency of a GPU task ([`Device::spawn_delayed`]): any promise
/// ([`Dep`] converts), or another GPU task's [`GpuHandle::gpu_dep`], which
/// on the same device is waited for on the device, not by the host.
///
/// ```
/// let p = selvedge::Promise::new();
/// let dep: selvedge::gpu::GpuDep = p.dep().into();
/// # drop(dep);
/// ```
pub struct GpuDep(DepKind);

enum DepKind {
    Host(Dep),
    Gpu(Link),
}

impl From<Dep> for GpuDep {
    fn from(dep: Dep) -> Self {
        GpuDep(DepKind::Host(dep))
    }
}

impl<T> GpuHandle<T> {
    /// Waits until the device finished the task's work (working meanwhile,
    /// on a worker) and returns the task's value, or its error. Resumes the
    /// task's panic; panics if the task was cancelled (a dependency broke,
    /// or the device failed while its work was in flight).
    ///
    /// ```
    /// # fn main() -> Result<(), selvedge::gpu::GpuError> {
    /// # let Ok(dev) = selvedge::gpu::Device::open(0) else { return Ok(()) }; // no GPU here
    /// let zeros = dev.spawn(|s| Ok(s.stream().alloc_zeros::<f32>(16)?));
    /// assert_eq!(zeros.join()?.len(), 16);
    /// # Ok(()) }
    /// ```
    pub fn join(self) -> Result<T, GpuError> {
        self.join.join()
    }

    /// [`GpuHandle::join`] that reports a panic or a cancellation as a
    /// [`JoinError`].
    ///
    /// ```
    /// # fn main() -> Result<(), selvedge::gpu::GpuError> {
    /// # let Ok(dev) = selvedge::gpu::Device::open(0) else { return Ok(()) }; // no GPU here
    /// let failing = dev.spawn(|_| -> Result<(), _> { panic!("no kernel for this shape") });
    /// let err = failing.try_join().unwrap_err();
    /// assert!(err.is_panic());
    /// # Ok(()) }
    /// ```
    pub fn try_join(self) -> Result<Result<T, GpuError>, JoinError> {
        self.join.try_join()
    }

    /// Whether the task finished (its work is complete on the device, or it
    /// failed).
    ///
    /// ```
    /// # fn main() -> Result<(), selvedge::gpu::GpuError> {
    /// # let Ok(dev) = selvedge::gpu::Device::open(0) else { return Ok(()) }; // no GPU here
    /// let h = dev.spawn(|s| Ok(s.stream().alloc_zeros::<f32>(16)?));
    /// while !h.is_finished() {
    ///     std::thread::yield_now(); // other work meanwhile
    /// }
    /// assert_eq!(h.join()?.len(), 16);
    /// # Ok(()) }
    /// ```
    pub fn is_finished(&self) -> bool {
        self.join.is_finished()
    }

    /// A dependency for CPU tasks: fulfilled once the device finished the
    /// task's work (from the stream's callback); broken if the task failed
    /// or was cancelled.
    ///
    /// ```
    /// # fn main() -> Result<(), selvedge::gpu::GpuError> {
    /// # let Ok(dev) = selvedge::gpu::Device::open(0) else { return Ok(()) }; // no GPU here
    /// let upload = dev.spawn(|s| Ok(s.stream().clone_htod(&[1.0f32; 8])?));
    /// let report = selvedge::spawn_delayed([upload.dep()], || "on the device");
    /// assert_eq!(report.join(), "on the device");
    /// # Ok(()) }
    /// ```
    pub fn dep(&self) -> Dep {
        self.link.done.clone()
    }

    /// A dependency for GPU tasks: on the same device, the consumer is
    /// enqueued as soon as this task's work is, its stream waiting for this
    /// task's event on the device (no host round trip); on another device
    /// it is [`GpuHandle::dep`].
    ///
    /// ```
    /// # fn main() -> Result<(), selvedge::gpu::GpuError> {
    /// # let Ok(dev) = selvedge::gpu::Device::open(0) else { return Ok(()) }; // no GPU here
    /// let a = dev.spawn(|s| Ok(s.stream().clone_htod(&[2.0f32; 8])?));
    /// // Enqueued behind `a`'s copy on the device, with no host round trip.
    /// let b = dev.spawn_delayed([a.gpu_dep()], |s| Ok(s.stream().alloc_zeros::<f32>(8)?));
    /// assert_eq!(b.join()?.len(), 8);
    /// a.join()?;
    /// # Ok(()) }
    /// ```
    pub fn gpu_dep(&self) -> GpuDep {
        GpuDep(DepKind::Gpu(self.link.clone()))
    }

    /// The handle as a plain [`JoinHandle`] (awaitable, too).
    ///
    /// ```
    /// # fn main() -> Result<(), selvedge::gpu::GpuError> {
    /// # let Ok(dev) = selvedge::gpu::Device::open(0) else { return Ok(()) }; // no GPU here
    /// let handles: Vec<selvedge::JoinHandle<Result<usize, _>>> = (0..4)
    ///     .map(|n| dev.spawn(move |_| Ok(n)).into_join_handle())
    ///     .collect();
    /// let sum: usize = handles.into_iter().map(|h| h.join()).sum::<Result<_, _>>()?;
    /// assert_eq!(sum, 6);
    /// # Ok(()) }
    /// ```
    pub fn into_join_handle(self) -> JoinHandle<Result<T, GpuError>> {
        self.join
    }

    /// The block of the task its join waits for (see `core::endless`).
    pub(super) fn join_block(&self) -> std::ptr::NonNull<crate::core::task::Header> {
        self.join.block()
    }
}

/// Fulfills its promise when dropped, unless defused: a failing or
/// panicking GPU task still lets its handle report what happened.
struct FulfillOnDrop(Option<Promise>);

impl FulfillOnDrop {
    fn defuse(mut self) {
        self.0 = None;
    }
}

impl Drop for FulfillOnDrop {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            p.fulfill();
        }
    }
}

impl Device {
    /// Runs `f` on a worker with that worker's stream; `f` enqueues device
    /// work and returns. The handle's value is `f`'s, available once the
    /// stream has finished the work `f` enqueued. What `f` captured is
    /// dropped when it returns, before that work is complete: hand what
    /// the device still reads to [`GpuStream::keep_alive`].
    ///
    /// ```no_run
    /// # fn main() -> Result<(), selvedge::gpu::GpuError> {
    /// let dev = selvedge::gpu::Device::open(0)?;
    /// let data = dev.spawn(|s| Ok(s.stream().clone_htod(&[3.0f32; 4])?)).join()?;
    /// let back = dev.spawn(move |s| s.download(&data)).join()?;
    /// assert_eq!(back.as_slice()?, &[3.0; 4]);
    /// # Ok(()) }
    /// ```
    pub fn spawn<T, F>(&self, f: F) -> GpuHandle<T>
    where
        F: FnOnce(&GpuStream) -> Result<T, GpuError> + Send + 'static,
        T: Send + 'static,
    {
        self.spawn_delayed(Vec::<GpuDep>::new(), f)
    }

    /// [`Device::spawn`] once every dependency is met. Dependencies on GPU
    /// tasks of this device ([`GpuHandle::gpu_dep`]) are met as soon as
    /// their work is enqueued: this task's stream waits for them on the
    /// device. Any other dependency is waited for by the runtime, with no
    /// thread blocked.
    ///
    /// ```no_run
    /// # fn main() -> Result<(), selvedge::gpu::GpuError> {
    /// let dev = selvedge::gpu::Device::open(0)?;
    /// let a = dev.spawn(|s| Ok(s.stream().clone_htod(&[1.0f32; 64])?));
    /// // Enqueued right after `a`'s copy, not after its callback.
    /// let b = dev.spawn_delayed([a.gpu_dep()], |s| Ok(s.stream().alloc_zeros::<f32>(64)?));
    /// b.join()?;
    /// a.join()?;
    /// # Ok(()) }
    /// ```
    pub fn spawn_delayed<D, T, F>(&self, deps: D, f: F) -> GpuHandle<T>
    where
        D: IntoIterator,
        D::Item: Into<GpuDep>,
        F: FnOnce(&GpuStream) -> Result<T, GpuError> + Send + 'static,
        T: Send + 'static,
    {
        let me = self.id();
        let mut host_deps = Vec::new();
        let mut device_waits = Vec::new();
        for dep in deps {
            match dep.into().0 {
                DepKind::Host(d) => host_deps.push(d),
                DepKind::Gpu(link) => link.wait_from(me, &mut host_deps, &mut device_waits),
            }
        }
        let (link, promises) = self.new_link();
        self.spawn_linked(host_deps, device_waits, link, promises, None, f)
    }

    /// What identifies this device in a [`Link`].
    pub(super) fn id(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }

    /// A new task's link and the promises behind it, made before the task
    /// is submitted (so its dependents can be recorded first).
    pub(super) fn new_link(&self) -> (Link, LinkPromises) {
        let promises = LinkPromises {
            enqueued: Promise::new(),
            done: Promise::new(),
            finished: Promise::new(),
            event: Arc::new(OnceLock::new()),
        };
        let link = Link {
            done: promises.done.dep(),
            enqueued: promises.enqueued.dep(),
            event: promises.event.clone(),
            device: self.id(),
        };
        (link, promises)
    }

    /// Submits the task of `link`: once `host_deps` are fulfilled, on a
    /// worker's stream that first waits for `device_waits` on the device
    /// (an event never recorded is not waited for: see `data.rs`). The
    /// task ends `turns`, the turns of its declared data accesses if it has
    /// any, when its work is enqueued and complete; if it fails once it
    /// started, when what it enqueued is complete (see `RanTurns`).
    pub(super) fn spawn_linked<T, F>(
        &self,
        host_deps: Vec<Dep>,
        device_waits: Vec<Arc<OnceLock<Arc<RawEvent>>>>,
        link: Link,
        promises: LinkPromises,
        turns: Option<GpuTurns>,
        f: F,
    ) -> GpuHandle<T>
    where
        F: FnOnce(&GpuStream) -> Result<T, GpuError> + Send + 'static,
        T: Send + 'static,
    {
        let inner = self.inner.clone();
        let LinkPromises {
            enqueued,
            done,
            finished,
            event,
        } = promises;
        let finished_dep = finished.dep();
        let runtime = inner.runtime().clone();
        let work = delayed::spawn_delayed_on_as::<F, _, _, _>(&runtime, host_deps, move || {
            // First, so that a task dropped unrun, or returning early,
            // drops `f` (the handles a declared task holds) before its
            // turns pass on (fields drop in order).
            let mut unrun = Unrun { f: Some(f), turns };
            let finish = FulfillOnDrop(Some(finished.clone()));
            inner.check_failed()?;
            // The device's context current on this worker, for whatever
            // `f` calls that does not bind it itself (cuBLAS, raw calls).
            inner.make_current()?;
            let lane = inner.lane();
            let stream = lane.stream.cu_stream();
            for producer in &device_waits {
                // Set before the producer's `enqueued` was fulfilled; a
                // declared access's producer that failed or never ran has
                // none, and was complete before its turn passed on.
                if let Some(e) = producer.get() {
                    e.wait_on(stream)?;
                }
            }
            // From here the task runs: if it fails, its data turns end once
            // what it enqueued is complete, and after what it kept alive
            // (dropped before them: `kept` is made after `ran`).
            let ran = RanTurns::new(unrun.turns.take(), &inner, lane);
            let kept = KeptSince::mark(&inner, lane);
            let f = unrun.f.take().expect("a task runs once");
            let value = f(lane);
            let kept = kept.take();
            let value = match value {
                Ok(value) => value,
                Err(e) => {
                    after_failure(&inner, lane, kept);
                    return Err(e);
                }
            };
            let done_turn = ran.completion();
            let recorded = finish_work(&inner, lane, kept, Record::Own, move || {
                done.fulfill();
                finished.fulfill();
                done_turn();
            })?;
            let _ = event.set(recorded.expect("a task's own event"));
            enqueued.fulfill();
            ran.enqueued();
            finish.defuse();
            Ok(value)
        });
        // The work's failure passed on as it is: a task refused (poisoned
        // data) stays cancelled, with its reason, for the one who joins it.
        // (A task cancelled before it ran drops `finished` unfulfilled,
        // which cancels this task too.)
        let join = delayed::spawn_delayed_on(&runtime, [finished_dep], move || {
            work.try_join()
                .unwrap_or_else(|e| std::panic::resume_unwind(e.into_payload()))
        });
        GpuHandle { join, link }
    }
}

/// What a GPU task has not run yet: its closure, dropped before its data
/// turns (declared first), so that a declared task that never runs lets go
/// of its handles before the accesses after it may start.
struct Unrun<F> {
    f: Option<F>,
    turns: Option<GpuTurns>,
}

/// The promises of a task's [`Link`], kept by the task until it fulfills
/// them (dropped unfulfilled, they break its dependents).
pub(super) struct LinkPromises {
    enqueued: Promise,
    done: Promise,
    finished: Promise,
    event: Arc<OnceLock<Arc<RawEvent>>>,
}

impl Link {
    /// What a task of device `me` waits for to come after this one: on the
    /// same device, its enqueueing on the host and its event on the
    /// device; on another, its completion.
    pub(super) fn wait_from(
        &self,
        me: usize,
        host_deps: &mut Vec<Dep>,
        device_waits: &mut Vec<Arc<OnceLock<Arc<RawEvent>>>>,
    ) {
        if self.device == me {
            host_deps.push(self.enqueued.clone());
            device_waits.push(self.event.clone());
        } else {
            host_deps.push(self.done.clone());
        }
    }

    /// The event recorded after the task's work, once it is enqueued.
    pub(super) fn event(&self) -> &Arc<OnceLock<Arc<RawEvent>>> {
        &self.event
    }
}

impl Device {
    /// A parallel loop whose iterations enqueue device work: `f(stream, i)`
    /// runs for every `i` in `range`, split lazily over the workers like
    /// [`crate::parallel_for`], each on its worker's stream; iteration `i`'s
    /// promise in `done` is fulfilled by its completion once the work `f`
    /// enqueued for it is complete. Returns when every iteration is
    /// *enqueued* (not done): pair it with a `depends_on_each(&done)` loop
    /// to run CPU work behind each iteration, with no barrier.
    ///
    /// Call it on a worker of the device's runtime (inside its
    /// [`crate::Runtime::run`]), or from a thread outside every runtime
    /// when the device belongs to the global runtime; anywhere else it
    /// panics, naming the device. A value an iteration hands to
    /// [`GpuStream::keep_alive`] lives until that iteration's work is
    /// complete.
    ///
    /// No iteration is ever left pending: an iteration whose `f` fails or
    /// panics, or whose completion cannot be enqueued, has its promise in
    /// `done` broken ([`LoopPromise::break_iteration`]), and so do the
    /// iterations whose work was in flight when the device failed (a
    /// sticky error: the watchdog abandons their completions). What waits
    /// on a broken iteration is cancelled (a `depends_on_each` loop panics
    /// naming it). The first error is returned once every iteration was
    /// tried; a panic in `f` is resumed here. An index outside `done`'s
    /// range panics before anything runs.
    ///
    /// ```no_run
    /// use selvedge::{parallel_for, scope, LoopPromise};
    /// # fn main() -> Result<(), selvedge::gpu::GpuError> {
    /// let dev = selvedge::gpu::Device::open(0)?;
    /// let uploaded = LoopPromise::new(0..16);
    /// scope(|s| {
    ///     s.spawn(|_| {
    ///         parallel_for(0..16)
    ///             .depends_on_each(&uploaded)
    ///             .for_each(|i| println!("chunk {i} is on the device"));
    ///     });
    ///     dev.parallel_for(0..16, &uploaded, |s, i| {
    ///         let _chunk = s.stream().clone_htod(&[i as f32; 1024])?;
    ///         Ok(())
    ///     })
    /// })?;
    /// # Ok(()) }
    /// ```
    pub fn parallel_for<F>(
        &self,
        range: std::ops::Range<usize>,
        done: &LoopPromise,
        f: F,
    ) -> Result<(), GpuError>
    where
        F: Fn(&GpuStream, usize) -> Result<(), GpuError> + Sync,
    {
        if !range.is_empty() {
            let promised = done.range();
            assert!(
                promised.start <= range.start && range.end <= promised.end,
                "Device::parallel_for over {range:?} with a LoopPromise over {promised:?}"
            );
        }
        let inner = &self.inner;
        let own_runtime = match Worker::current() {
            Some(w) => Arc::ptr_eq(&w.shared, inner.runtime()),
            // Not started, the global runtime cannot be the device's.
            None => started_global_registry().is_some_and(|g| Arc::ptr_eq(g, inner.runtime())),
        };
        assert!(
            own_runtime,
            "Device::parallel_for called outside the runtime device {} was opened for: call it inside that runtime's Runtime::run",
            inner.ordinal
        );
        let first_error = Mutex::new(None);
        parallel_for(range).for_each(|i| {
            // Breaks iteration `i` unless its completion fulfills it: on an
            // error, a panic in `f`, or a completion the device abandons.
            let iteration = IterationGuard::new(done, i);
            let enqueue = || -> Result<(), GpuError> {
                inner.check_failed()?;
                inner.make_current()?;
                let lane = inner.lane();
                let kept = KeptSince::mark(inner, lane);
                let result = f(lane, i);
                let kept = kept.take();
                if let Err(e) = result {
                    after_failure(inner, lane, kept);
                    return Err(e);
                }
                finish_work(inner, lane, kept, Record::Lane, move || {
                    iteration.fulfill();
                })
                .map(drop)
            };
            if let Err(e) = enqueue() {
                lock(&first_error).get_or_insert(e);
            }
        });
        match first_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Iteration `i` of a device loop's promise: fulfilled by the iteration's
/// completion, broken if dropped without it.
struct IterationGuard {
    done: Option<LoopPromise>,
    i: usize,
}

impl IterationGuard {
    fn new(done: &LoopPromise, i: usize) -> Self {
        IterationGuard {
            done: Some(done.clone()),
            i,
        }
    }

    fn fulfill(mut self) {
        if let Some(done) = self.done.take() {
            done.fulfill(self.i);
        }
    }
}

impl Drop for IterationGuard {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            done.break_iteration(self.i);
        }
    }
}

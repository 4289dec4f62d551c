//! `Data<T>`: a value that tasks reach only through declared accesses,
//! ordered per handle in submission order (a write after the previous write
//! and every read since it; a read after the previous write), so a task gets
//! `&T` or `&mut T` without a lock. The ordering is made of promises: each
//! task's accesses depend on the completions of the accesses before them
//! (see `declared.rs`); this module holds the value, its ordering state and
//! what waits on it from outside a task.

use crate::core::error::{CancelledBecause, JoinError};
use crate::core::registry::Registry;
use crate::core::sync::{lock, AtomicBool, Mutex, Ordering};
use crate::dataflow::access::sealed::{SealedAccess, Target};
use crate::dataflow::access::{single_access_set, Access, Declared};
use crate::dataflow::event::Dep;
use crate::dataflow::held;
use crate::dataflow::log::{Log, Recorded};
use crate::dataflow::mode::Mode;
use crate::dataflow::readers::ReadShare;
use crate::dataflow::turn::Turn;
use std::cell::UnsafeCell;
use std::fmt;
use std::sync::Arc;

/// A shared value that tasks access by declaring it: [`Data::read`] gives
/// a task `&T`, [`Data::write`] gives it `&mut T`, and the runtime orders
/// the tasks of each handle in the order they were submitted, so no lock is
/// needed to reach the value and the borrow rules hold across tasks:
///
/// - a write waits for the previous write and for every read since it;
/// - a read waits for the previous write only, so reads of the same
///   version run at the same time.
///
/// Nothing waits on a thread: a task whose accesses are not ready yet is
/// parked on the completions of the tasks before it, like a
/// [`spawn_delayed`](crate::spawn_delayed) task. Cloning a `Data` gives
/// another handle to the same value (for tables of tiles, for closures).
/// The value is reachable only through a declared access, through
/// [`Data::read_now`], or by taking it back with [`Data::into_inner`] once
/// every access finished.
///
/// A task that panics while it holds a write *poisons* the handle: later
/// accesses are cancelled (their handles report a [`JoinError`](crate::JoinError)
/// whose message names the handle and the task that panicked), and the
/// tasks cancelled that way poison what they would have written. A
/// [`Data::recover`] access is granted all the same and clears the poison
/// when it returns.
///
/// A task cancelled *before it ran* (a [`Dep`] it declared broke, or its
/// runtime shut down while it waited) touched nothing: it gives up its
/// place in the order, and the accesses after it run once the ones before
/// it are over, finding the value as the last access that ran left it.
///
/// ```
/// use selvedge::{spawn_with, Data};
///
/// let n = 1000;
/// let a = Data::new(vec![1.0f64; n]);
/// let b = Data::new(vec![0.0f64; n]);
/// spawn_with((a.read(), b.write()), |(a, b)| b.copy_from_slice(a)).detach();
/// // Ordered after the copy: it reads the copied values.
/// let sum = spawn_with(b.read(), |b| b.iter().sum::<f64>());
/// assert_eq!(sum.join(), n as f64);
/// let v: Vec<f64> = b.into_inner(); // waits for every access
/// assert_eq!(v.len(), n);
/// ```
pub struct Data<T> {
    inner: Arc<Inner<T>>,
}

/// What the handles of one `Data` share, laid out in order: the value on
/// the line after the handles' reference counts (the log's alignment gives
/// them a line of their own), then the log on lines of its own.
#[repr(C)]
pub(crate) struct Inner<T> {
    slot: UnsafeCell<Slot<T>>,
    name: Option<Box<str>>,
    /// On cache lines of its own: the submitting thread locks it while the
    /// tasks' workers touch the value and the handle's reference count.
    log: OwnLines<Mutex<Log>>,
}

/// A field that starts a cache line, padded no further: a handle of a small
/// value is 256 bytes (its counts, its value, its log's two lines), where
/// padding the log to 128 bytes (`CachePadded`, for adjacent-line
/// prefetching) would take 384, and a grid of tiles touches every byte of
/// its handles each run.
#[repr(align(64))]
struct OwnLines<T>(T);

// A handle of a small value: its counts' line, then these 192 bytes.
static_assertions::const_assert!(std::mem::size_of::<Inner<u64>>() <= 192);

/// The value and its poison, one version at a time: whoever has the
/// access's turn reads or writes both.
struct Slot<T> {
    value: T,
    poison: Option<Arc<str>>,
}

// SAFETY: the value is reached only by the task whose declared access has
// its turn (the promise ordering makes those turns exclusive for writes and
// shared for reads), so sharing the handle across threads shares `&T`
// between readers (`T: Sync`) and moves `&mut T` to writers (`T: Send`).
unsafe impl<T: Send + Sync> Sync for Inner<T> {}
// SAFETY: as above; the value itself moves with the last handle (`T: Send`).
unsafe impl<T: Send + Sync> Send for Inner<T> {}

impl<T> Inner<T> {
    /// How messages name the handle.
    fn describe(&self) -> String {
        match &self.name {
            Some(name) => format!("Data \"{name}\""),
            None => format!(
                "Data<{}> at {:p}",
                std::any::type_name::<T>(),
                std::ptr::from_ref(self)
            ),
        }
    }
}

impl<T: Send + Sync> Target for Inner<T> {
    fn log(&self) -> &Mutex<Log> {
        &self.log.0
    }

    fn describe(&self) -> String {
        Inner::describe(self)
    }

    unsafe fn poison(&self) -> Option<Arc<str>> {
        // SAFETY: the caller's access has its turn: no write runs.
        unsafe { (*self.slot.get()).poison.clone() }
    }

    unsafe fn set_poison(&self, cause: Option<Arc<str>>) {
        if cause.is_some() {
            // Before the poison, and so before the turn ends.
            EVER_POISONED.store(true, Ordering::Relaxed);
        }
        // SAFETY: the caller's write has its turn: nobody else touches the
        // slot.
        unsafe { (*self.slot.get()).poison = cause };
    }
}

/// Whether any handle was ever poisoned: until one is, an access need not
/// look for poison (a declared task's hot path). Set before the poison is,
/// by the writer that has the turn, so an access after that write, which
/// starts after the turn ended, sees it set.
static EVER_POISONED: AtomicBool = AtomicBool::new(false);

/// Whether a handle may be poisoned (see [`EVER_POISONED`]).
pub(crate) fn poison_possible() -> bool {
    EVER_POISONED.load(Ordering::Relaxed)
}

impl<T: Send + Sync> Data<T> {
    /// A new handle holding `value`, with no access yet.
    ///
    /// ```
    /// let d = selvedge::Data::new(vec![0u8; 16]);
    /// assert_eq!(d.into_inner().len(), 16);
    /// ```
    pub fn new(value: T) -> Self {
        Self::with_name(None, value)
    }

    /// A new handle whose name the messages about it use (a poisoned
    /// handle, a handle declared twice), e.g. the tile's coordinates.
    ///
    /// ```
    /// let tile = selvedge::Data::named("A[2][1]", [0.0f64; 4]);
    /// assert_eq!(tile.name(), Some("A[2][1]"));
    /// ```
    pub fn named(name: impl Into<String>, value: T) -> Self {
        Self::with_name(Some(name.into().into_boxed_str()), value)
    }

    fn with_name(name: Option<Box<str>>, value: T) -> Self {
        Self {
            inner: Arc::new(Inner {
                slot: UnsafeCell::new(Slot {
                    value,
                    poison: None,
                }),
                name,
                log: OwnLines(Mutex::new(Log::default())),
            }),
        }
    }

    /// The name given by [`Data::named`].
    ///
    /// ```
    /// assert_eq!(selvedge::Data::new(1).name(), None);
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.inner.name.as_deref()
    }

    /// A read access: the task gets `&T`, after every write submitted
    /// before it, alongside the other reads of that version.
    ///
    /// ```
    /// use selvedge::{spawn_with, Data};
    ///
    /// let d = Data::new(String::from("shared"));
    /// let a = spawn_with(d.read(), |s| s.len());
    /// let b = spawn_with(d.read(), |s| s.to_uppercase());
    /// assert_eq!((a.join(), b.join().as_str()), (6, "SHARED"));
    /// ```
    pub fn read(&self) -> Read<T> {
        Read {
            inner: self.inner.clone(),
            share: None,
        }
    }

    /// A write access: the task gets `&mut T`, after the previous write
    /// and every read submitted since it.
    ///
    /// ```
    /// use selvedge::{spawn_with, Data};
    ///
    /// let d = Data::new(0);
    /// for _ in 0..10 {
    ///     spawn_with(d.write(), |d| *d += 1).detach();
    /// }
    /// assert_eq!(d.into_inner(), 10);
    /// ```
    pub fn write(&self) -> Write<T> {
        Write {
            inner: self.inner.clone(),
        }
    }

    /// A write access granted even when the handle is poisoned: the task
    /// gets `&mut T` to repair or replace the value, and when it returns
    /// the poison is cleared. (It still waits like a write; if it panics,
    /// the handle stays poisoned.)
    ///
    /// ```
    /// use selvedge::{spawn_with, Data};
    ///
    /// let d = Data::named("counter", 0);
    /// let bad = spawn_with(d.write(), |_: &mut i32| panic!("lost the count"));
    /// assert!(bad.try_join().unwrap_err().is_panic());
    /// let err = spawn_with(d.read(), |d| *d).try_join().unwrap_err();
    /// assert!(err.is_cancelled() && err.to_string().contains("\"counter\" is poisoned"), "{err}");
    ///
    /// spawn_with(d.recover(), |d| *d = 0).detach();
    /// assert_eq!(spawn_with(d.read(), |d| *d).join(), 0);
    /// ```
    pub fn recover(&self) -> Recover<T> {
        Recover {
            inner: self.inner.clone(),
        }
    }

    /// Waits until every access submitted so far finished, and returns
    /// the value.
    ///
    /// # Panics
    /// When [`Data::try_into_inner`] would return an error: the handle is
    /// poisoned, or another handle to it still exists (the message names
    /// the handle and what commonly holds one). Like `try_into_inner`,
    /// when called inside a task that declared this handle, or a node of a
    /// graph run that declares it (it would wait for itself).
    ///
    /// `into_inner` takes the handle by value. After a `Data` was moved
    /// into a closure, the compiler may suggest `d.clone().into_inner()`:
    /// that clone is a second handle, so it panics, saying so. Clone the
    /// handle for the closure instead (`let d2 = d.clone();` and move `d2`),
    /// and keep `d` to take the value back.
    ///
    /// ```
    /// use selvedge::{spawn_with, Data};
    ///
    /// let d = Data::new(vec![1, 2, 3]);
    /// spawn_with(d.write(), |v| v.push(4)).detach();
    /// assert_eq!(d.into_inner(), [1, 2, 3, 4]);
    /// ```
    pub fn into_inner(self) -> T {
        match self.try_into_inner() {
            Ok(value) => value,
            Err(e) => panic!("selvedge: Data::into_inner: {e}"),
        }
    }

    /// Waits until every access submitted so far is over (working
    /// meanwhile, on a worker), and returns the value; or says why it
    /// cannot, handing back the value or the handle. An access cancelled
    /// before it ran is over once the accesses before it are: it left the
    /// value as it was.
    ///
    /// # Panics
    /// Inside a task that declared this handle, or inside a node of a
    /// [`Graph`](crate::Graph) run that declares it: it would wait for its
    /// own access.
    ///
    /// ```
    /// use selvedge::{spawn_with, Data, DataError};
    ///
    /// let d = Data::new(5);
    /// let other = d.clone();
    /// let d = match d.try_into_inner() {
    ///     Err(DataError::Shared(d)) => d, // `other` is still alive
    ///     _ => unreachable!(),
    /// };
    /// drop(other);
    /// assert_eq!(d.try_into_inner().ok(), Some(5));
    ///
    /// let d = Data::new(5);
    /// let _ = spawn_with(d.write(), |_: &mut i32| panic!("broke it")).try_join();
    /// match d.try_into_inner() {
    ///     Err(DataError::Poisoned { value, cause }) => {
    ///         assert_eq!(value, 5);
    ///         assert!(cause.contains("broke it"), "{cause}");
    ///     }
    ///     _ => unreachable!(),
    /// }
    /// ```
    pub fn try_into_inner(self) -> Result<T, DataError<T>> {
        self.refuse_self_wait("try_into_inner");
        let (pending, runtime) = {
            let mut log = lock(&self.inner.log.0);
            (log.pending(), log.runtime.clone())
        };
        wait_over(pending, runtime.upgrade());
        match Arc::try_unwrap(self.inner) {
            Ok(inner) => {
                let slot = inner.slot.into_inner();
                match slot.poison {
                    None => Ok(slot.value),
                    Some(cause) => Err(DataError::Poisoned {
                        value: slot.value,
                        cause: cause.to_string(),
                    }),
                }
            }
            Err(inner) => Err(DataError::Shared(Data { inner })),
        }
    }

    /// Reads the value from the calling thread: waits (working meanwhile,
    /// on a worker) for every write submitted so far, and returns a guard
    /// that derefs to `&T`. The read counts as an access submitted now:
    /// writes submitted later wait until the guard is dropped.
    ///
    /// ```
    /// use selvedge::{spawn_with, Data};
    ///
    /// let d = Data::new(1);
    /// spawn_with(d.write(), |d| *d += 41).detach();
    /// assert_eq!(*d.read_now().unwrap(), 42);
    /// ```
    ///
    /// An error is the one a task reading it would get: cancelled, because
    /// the handle is poisoned.
    ///
    /// # Panics
    /// Inside a task that declared this handle, or inside a node of a
    /// [`Graph`](crate::Graph) run that declares it: it would wait for its
    /// own access.
    pub fn read_now(&self) -> Result<ReadNow<'_, T>, JoinError> {
        self.refuse_self_wait("read_now");
        let mut turn = Turn::new();
        let runtime = {
            let mut log = lock(&self.inner.log.0);
            for before in log.before(Mode::Read) {
                turn.after(before.done);
            }
            log.record(Mode::Read, Recorded::host(turn.dep()));
            log.runtime.clone()
        };
        wait_over(turn.before().iter().cloned().collect(), runtime.upgrade());
        // SAFETY: our read has its turn: every earlier write is over and
        // later ones wait for `turn`.
        if let Some(cause) = unsafe { self.inner.poison() } {
            turn.end();
            return Err(cancelled(poisoned_message(&self.inner.describe(), &cause)));
        }
        Ok(ReadNow {
            inner: &self.inner,
            turn: Some(turn),
        })
    }
}

impl<T: Send + Sync> Data<T> {
    /// Panics when a task running on this thread declared this handle, or
    /// a graph run one of whose nodes runs on it: it would wait for its
    /// own access, forever.
    fn refuse_self_wait(&self, what: &str) {
        if held::contains(held::address(&*self.inner)) {
            panic!(
                "selvedge: Data::{what} on {} inside a task that declared it, or inside a \
                 node of a graph run that declares it: the wait would never end (that \
                 access comes first, and ends only after this code returns); use the \
                 reference the task was given, or declare the handle on the node",
                self.inner.describe()
            );
        }
    }
}

/// The message of an access cancelled because `handle` is poisoned.
pub(crate) fn poisoned_message(handle: &str, cause: &str) -> String {
    format!("{handle} is poisoned: {cause}; a recover() access clears it")
}

/// A cancellation error with this message.
fn cancelled(message: String) -> JoinError {
    JoinError::from_payload(Box::new(CancelledBecause(message)))
}

/// Waits until the accesses whose completions are `deps` are over (from
/// any thread, working meanwhile on a worker). A completion is fulfilled
/// when its access ended or passed its turn on (see `turn.rs`), never
/// broken; but the runtime the wait runs on may shut down meanwhile.
pub(crate) fn wait_over(mut deps: Vec<Dep>, mut runtime: Option<Arc<Registry>>) {
    // A task waiting on them, first on `runtime` (the runtime of the latest
    // access, or the caller's): its handle's join blocks without spinning
    // (or works, on a worker).
    loop {
        deps.retain(|d| !d.is_closed());
        if deps.is_empty() {
            return;
        }
        let on = runtime
            .take()
            .unwrap_or_else(|| crate::core::pool::current_registry().clone());
        // An error: that runtime shut down while the task waited (then
        // this thread's own runtime, or the global one, takes the wait
        // over), or a completion was closed otherwise.
        let _ = crate::dataflow::delayed::spawn_delayed_on(&on, deps.clone(), || ()).try_join();
    }
}

impl<T> Clone for Data<T> {
    /// Another handle to the same value.
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<T: Send + Sync> fmt::Debug for Data<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.inner.describe())
    }
}

/// Why [`Data::try_into_inner`] gives no value. Nothing is lost: each
/// case hands back the value or the handle. Its message says what to do.
///
/// ```
/// let data = selvedge::Data::new(vec![1, 2, 3]);
/// let held = data.clone();
/// let err = data.try_into_inner().unwrap_err();
/// assert!(err.to_string().contains("1 other handle still alive: drop it first"), "{err}");
/// # drop(held);
/// ```
pub enum DataError<T> {
    /// A task panicked while it held a write: the value as it left it, and
    /// what happened.
    Poisoned {
        /// The value, possibly half updated.
        value: T,
        /// Which task panicked, and its message.
        cause: String,
    },
    /// Other handles to the value still exist (clones of the `Data`): the
    /// handle, back.
    Shared(Data<T>),
}

impl<T> fmt::Display for DataError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataError::Poisoned { cause, .. } => write!(f, "the value is poisoned: {cause}"),
            DataError::Shared(d) => {
                let others = Arc::strong_count(&d.inner) - 1;
                write!(
                    f,
                    "{} has {others} other handle{} still alive: drop {} first. Handles \
                     are held by clones of the Data (in closures, in tables such as a \
                     Vec<Data<_>>), by accesses not yet given to a task (a Vec<Read<_>>), by \
                     a Graph whose nodes declared it (drop the graph), and by tasks still \
                     queued or waiting (join them, or wait with Runtime::sync_root)",
                    d.inner.describe(),
                    if others == 1 { "" } else { "s" },
                    if others == 1 { "it" } else { "them" },
                )
            }
        }
    }
}

impl<T> fmt::Debug for DataError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DataError({self})")
    }
}

impl<T> std::error::Error for DataError<T> {}

/// The guard of [`Data::read_now`]: `&T` until dropped; writes submitted
/// after the read wait for the drop.
///
/// ```
/// let d = selvedge::Data::new([1, 2, 3]);
/// let r = d.read_now().unwrap();
/// assert_eq!(r.len(), 3);
/// ```
pub struct ReadNow<'a, T> {
    inner: &'a Inner<T>,
    turn: Option<Turn>,
}

impl<T> std::ops::Deref for ReadNow<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: the read has its turn until it ends, which only the
        // guard's drop does.
        unsafe { &(*self.inner.slot.get()).value }
    }
}

impl<T> Drop for ReadNow<'_, T> {
    fn drop(&mut self) {
        if let Some(turn) = self.turn.take() {
            turn.end();
        }
    }
}

impl<T: fmt::Debug> fmt::Debug for ReadNow<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (**self).fmt(f)
    }
}

macro_rules! access_type {
    ($(#[$doc:meta])* $name:ident, $mode:expr, $ref:ty, $get:ident $(, $share:ident)?) => {
        $(#[$doc])*
        pub struct $name<T> {
            inner: Arc<Inner<T>>,
            $(
                /// Submitted as a task's read: the task's share of the
                /// version's reads (`readers.rs`), dropped after `inner`.
                $share: Option<ReadShare>,
            )?
        }

        impl<T: Send + Sync> SealedAccess for $name<T> {
            fn declare<'s>(&'s self, each: &mut dyn FnMut(Declared<'s>)) {
                each(Declared::Data(&*self.inner, $mode))
            }

            fn data(&self) -> Option<(&dyn Target, Mode)> {
                Some((&*self.inner, $mode))
            }

            fn recovers(&self) -> bool {
                $mode == Mode::Recover
            }

            $(
                fn hold_share(&mut self, take: &mut dyn FnMut(&dyn Target) -> Option<ReadShare>) {
                    self.$share = take(&*self.inner);
                }
            )?
        }

        $(
            #[cfg(test)]
            impl<T> $name<T> {
                /// Whether it holds its task's share of the reads.
                pub(crate) fn holds_share(&self) -> bool {
                    self.$share.is_some()
                }
            }
        )?

        impl<T: Send + Sync> Access for $name<T> {
            type Ref<'a> = $ref where Self: 'a;

            unsafe fn get(&self) -> Self::Ref<'_> {
                // SAFETY: the access has its turn (caller): shared with
                // other reads for a read, exclusive for a write.
                unsafe { $get!(self.inner.slot.get()) }
            }
        }

        impl<T: Send + Sync> fmt::Debug for $name<T> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{} of {}", stringify!($name), self.inner.describe())
            }
        }
    };
}

macro_rules! shared {
    ($p:expr) => {
        &(*$p).value
    };
}

macro_rules! exclusive {
    ($p:expr) => {
        &mut (*$p).value
    };
}

access_type!(
    /// A read access ([`Data::read`]): the task gets `&T`.
    ///
    /// ```
    /// let d = selvedge::Data::new(3);
    /// let r: selvedge::Read<i32> = d.read();
    /// assert_eq!(selvedge::spawn_with(r, |v| *v).join(), 3);
    /// ```
    Read,
    Mode::Read,
    &'a T,
    shared,
    share
);

access_type!(
    /// A write access ([`Data::write`]): the task gets `&mut T`.
    ///
    /// ```
    /// let d = selvedge::Data::new(3);
    /// let w: selvedge::Write<i32> = d.write();
    /// selvedge::spawn_with(w, |v| *v *= 2).detach();
    /// assert_eq!(d.into_inner(), 6);
    /// ```
    Write,
    Mode::Write,
    &'a mut T,
    exclusive
);

access_type!(
    /// A write access granted on a poisoned handle, which clears the poison
    /// when its task returns ([`Data::recover`]).
    ///
    /// ```
    /// let d = selvedge::Data::new(3);
    /// let r: selvedge::Recover<i32> = d.recover();
    /// selvedge::spawn_with(r, |v| *v = 0).detach();
    /// assert_eq!(d.into_inner(), 0);
    /// ```
    Recover,
    Mode::Recover,
    &'a mut T,
    exclusive
);

single_access_set!(Read, Write, Recover);

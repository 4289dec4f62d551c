//! Names for the tasks a piece of code makes, shown in the trace, and
//! [`TaskName`], a task's name as another thread may read it (the stall
//! warning names the tasks parked on promises).
//!
//! `named` (`naming.rs`) sets a thread-local name for the duration of its closure; a
//! task made meanwhile by the closure (any kind: spawned, delayed,
//! declared, a loop, a GPU task) takes it. Tasks the thread runs while the
//! closure waits do not: a worker clears the name around each task it runs
//! (`Worker::traced`). `spawn`, the hot path, reads the thread-local only
//! while its worker is inside a `named` (a flag of the worker's); the
//! other ways of making tasks read it each time.

#[cfg(feature = "trace")]
use std::cell::Cell;

#[cfg(feature = "trace")]
thread_local! {
    static PENDING: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// The name a task made here now takes: `named`'s, else the type name of
/// `F`, the closure the user gave.
#[cfg(feature = "trace")]
#[inline]
pub(crate) fn name_for<F>() -> &'static str {
    pending().unwrap_or_else(std::any::type_name::<F>)
}

/// Sets this thread's `named` name (`None`: none); returns the one before.
#[cfg(feature = "trace")]
pub(crate) fn set_pending(name: Option<&'static str>) -> Option<&'static str> {
    PENDING.with(|p| p.replace(name))
}

/// `named`'s name on this thread, if inside one.
#[cfg(feature = "trace")]
#[inline(always)]
pub(crate) fn pending() -> Option<&'static str> {
    PENDING.with(Cell::get)
}

/// `name` as a `&'static str` for a trace: the same one for equal names,
/// leaked once each (names given at run time, such as a graph's node
/// names, are few and repeat).
#[cfg(feature = "trace")]
fn intern(name: &str) -> &'static str {
    use crate::core::sync::Mutex;
    use std::collections::HashSet;
    use std::sync::OnceLock;
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = crate::core::sync::lock(NAMES.get_or_init(Default::default));
    if let Some(&known) = names.get(name) {
        return known;
    }
    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.insert(leaked);
    leaked
}

/// The name of a slice of the trace that a piece of code fixes when it is
/// made: a graph node's, a loop's parts'. Zero-sized without the `trace`
/// feature, so the files that keep one need no `cfg` of their own.
#[cfg(feature = "trace")]
#[derive(Clone, Copy)]
pub(crate) struct SpanName(&'static str);

/// The name of a slice of the trace (zero-sized: no `trace` feature).
#[cfg(not(feature = "trace"))]
#[derive(Clone, Copy)]
pub(crate) struct SpanName;

#[cfg(feature = "trace")]
impl SpanName {
    /// `name`, as it is.
    pub(crate) fn new(name: &'static str) -> Self {
        Self(name)
    }

    /// A copy of `name` that outlives its owner, one per distinct text.
    pub(crate) fn interned(name: &str) -> Self {
        Self(intern(name))
    }

    /// `named`'s name on this thread, else the type name of `F`, the
    /// closure the user gave.
    #[inline]
    pub(crate) fn of<F>() -> Self {
        Self(name_for::<F>())
    }

    /// The name as text.
    pub(crate) fn get(self) -> &'static str {
        self.0
    }
}

#[cfg(not(feature = "trace"))]
impl SpanName {
    /// Nothing kept.
    #[inline(always)]
    pub(crate) fn new(_name: &'static str) -> Self {
        Self
    }

    /// Nothing kept.
    #[inline(always)]
    pub(crate) fn interned(_name: &str) -> Self {
        Self
    }

    /// Nothing kept.
    #[inline(always)]
    #[allow(clippy::extra_unused_type_parameters)]
    pub(crate) fn of<F>() -> Self {
        Self
    }
}

/// A task's name as a thread other than its maker's may read it: the
/// type of the closure its maker was given and, with the `trace`
/// feature, the name [`named`](crate::core::trace::naming::named) gave it. Each part is one word, so a
/// [`NameCell`] keeps it in atomics a reader loads whole.
#[derive(Clone, Copy)]
pub(crate) struct TaskName {
    of_type: fn() -> &'static str,
    #[cfg(feature = "trace")]
    given: Option<&'static &'static str>,
}

impl TaskName {
    /// The name a task made here now from closure `F` takes: `named`'s
    /// (feature `trace`), else `F`'s type. Without the feature, a function
    /// pointer and nothing read.
    #[inline(always)]
    pub(crate) fn of<F>() -> Self {
        Self {
            of_type: std::any::type_name::<F>,
            #[cfg(feature = "trace")]
            given: pending().map(thin),
        }
    }

    /// The name as text.
    pub(crate) fn get(self) -> &'static str {
        #[cfg(feature = "trace")]
        if let Some(given) = self.given {
            return given;
        }
        (self.of_type)()
    }
}

/// A [`TaskName`] kept where a thread other than its writer may read it
/// (a parked task's slot, read by the stall warning's census), one atomic
/// per word. A reader that catches the name being replaced may pair one
/// task's type with another's given name: still a name, never a torn one.
pub(crate) struct NameCell {
    /// A `fn() -> &'static str` (null before the first store).
    of_type: crate::core::sync::AtomicPtr<()>,
    #[cfg(feature = "trace")]
    given: crate::core::sync::AtomicPtr<&'static str>,
}

impl NameCell {
    pub(crate) fn new() -> Self {
        use crate::core::sync::AtomicPtr;
        Self {
            of_type: AtomicPtr::new(std::ptr::null_mut()),
            #[cfg(feature = "trace")]
            given: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Keeps `name`. Relaxed: a reader learns that a name is there through
    /// something its writer published after (the slot's node pointer).
    #[inline(always)]
    pub(crate) fn store(&self, name: TaskName) {
        use crate::core::sync::Ordering::Relaxed;
        self.of_type.store(name.of_type as *mut (), Relaxed);
        #[cfg(feature = "trace")]
        self.given.store(
            name.given.map_or(std::ptr::null_mut(), |g| {
                (g as *const &'static str).cast_mut()
            }),
            Relaxed,
        );
    }

    /// The name kept, if one ever was.
    pub(crate) fn load(&self) -> Option<TaskName> {
        use crate::core::sync::Ordering::Relaxed;
        let of_type = self.of_type.load(Relaxed);
        if of_type.is_null() {
            return None;
        }
        // SAFETY: every non-null value stored is a `fn() -> &'static str`
        // cast to a pointer (`store`), and a pointer-sized atomic is never
        // torn.
        let of_type = unsafe { std::mem::transmute::<*mut (), fn() -> &'static str>(of_type) };
        Some(TaskName {
            of_type,
            #[cfg(feature = "trace")]
            // SAFETY: a non-null value is a `&'static &'static str` from
            // `thin` (`store`).
            given: unsafe { self.given.load(Relaxed).as_ref() },
        })
    }
}

/// `name` behind a thin `'static` reference, one per distinct text (names
/// are few and repeat); the last one this thread asked for is found
/// without the lock.
#[cfg(feature = "trace")]
fn thin(name: &'static str) -> &'static &'static str {
    use crate::core::sync::Mutex;
    use std::collections::HashMap;
    use std::sync::OnceLock;
    thread_local! {
        static LAST: Cell<Option<&'static &'static str>> = const { Cell::new(None) };
    }
    if let Some(last) = LAST.with(Cell::get) {
        if std::ptr::eq(*last, name) {
            return last;
        }
    }
    static THIN: OnceLock<Mutex<HashMap<&'static str, &'static &'static str>>> = OnceLock::new();
    let mut names = crate::core::sync::lock(THIN.get_or_init(Default::default));
    let found: &'static &'static str = names
        .entry(name)
        .or_insert_with(|| Box::leak(Box::new(name)));
    LAST.with(|l| l.set(Some(found)));
    found
}

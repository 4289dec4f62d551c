//! A raw pointer that may cross threads.

/// A raw pointer that closures and tasks may carry to other threads. The
/// code that dereferences it states, in its `SAFETY:` comment, what keeps
/// the pointee alive and its accesses free of races.
pub(crate) struct SendPtr<T: ?Sized>(*mut T);

impl<T: ?Sized> SendPtr<T> {
    /// Wraps `ptr`.
    #[inline(always)]
    pub(crate) fn new(ptr: *mut T) -> Self {
        Self(ptr)
    }

    /// A pointer to what `r` refers to, with `r`'s provenance.
    #[inline(always)]
    pub(crate) fn from_ref(r: &T) -> Self {
        Self((r as *const T).cast_mut())
    }

    /// The pointer (a method, so closures capture the whole wrapper and
    /// not the bare field).
    #[inline(always)]
    pub(crate) fn get(&self) -> *mut T {
        self.0
    }
}

impl<T: ?Sized> Clone for SendPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: ?Sized> Copy for SendPtr<T> {}

// SAFETY: sharing the wrapper shares only the address; an element of `T`
// reached through it goes to one thread at a time (each user says why), so
// `T: Send` suffices, as for `&mut T`.
unsafe impl<T: ?Sized + Send> Sync for SendPtr<T> {}
// SAFETY: sending the wrapper lets another thread reach `&T`, which
// `T: Sync` allows; what keeps `T` alive is the dereferencing code's
// business.
unsafe impl<T: ?Sized + Sync> Send for SendPtr<T> {}

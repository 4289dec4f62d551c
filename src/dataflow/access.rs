//! What a task may declare it accesses ([`Access`]) and sets of such
//! declarations ([`Accesses`]: one access, tuples, vectors and arrays),
//! and the type-erased view the submission and the run work with.

use crate::dataflow::event::Dep;
use crate::dataflow::mode::Mode;
use crate::dataflow::readers::ReadShare;

pub(crate) mod sealed {
    use super::Declared;
    use crate::core::sync::Mutex;
    use crate::dataflow::log::Log;
    use crate::dataflow::readers::ReadShare;
    use std::sync::Arc;

    /// The data behind a handle, without its type.
    pub trait Target: Sync {
        /// The handle's ordering state (locked only at submission).
        fn log(&self) -> &Mutex<Log>;
        /// How messages name the handle.
        fn describe(&self) -> String;
        /// Why the handle is poisoned, if it is.
        ///
        /// # Safety
        /// The caller holds a declared access that has its turn.
        unsafe fn poison(&self) -> Option<Arc<str>>;
        /// Poisons the handle (`Some`) or clears its poison (`None`).
        ///
        /// # Safety
        /// The caller holds a declared write that has its turn.
        unsafe fn set_poison(&self, cause: Option<Arc<str>>);
    }

    /// Implemented by the access types of this crate only.
    pub trait SealedAccess {
        /// Hands what this access declares to `each`.
        fn declare<'s>(&'s self, each: &mut dyn FnMut(Declared<'s>));

        /// The handle and mode, for an access to a handle.
        fn data(&self) -> Option<(&dyn Target, super::Mode)> {
            None
        }

        /// For a read submitted as a task's, keeps the task's share of the
        /// reads of the handle's current version (`take` gives it, by
        /// handle) until the access is dropped.
        fn hold_share(&mut self, _take: &mut dyn FnMut(&dyn Target) -> Option<ReadShare>) {}

        /// Whether it is a recover access.
        fn recovers(&self) -> bool {
            false
        }
    }

    /// Implemented by the access sets of this crate only.
    pub trait SealedAccesses {
        /// Hands every declaration of the set to `each`.
        fn declare_all<'s>(&'s self, each: &mut dyn FnMut(Declared<'s>));

        /// For a set of one access to a handle (the common case, which a
        /// submission takes a shorter way for), the handle and mode.
        fn only_data(&self) -> Option<(&dyn Target, super::Mode)> {
            None
        }

        /// [`SealedAccess::hold_share`] for each access of the set.
        fn hold_shares(&mut self, take: &mut dyn FnMut(&dyn Target) -> Option<ReadShare>);

        /// Whether the set has a recover access (known without a walk
        /// through `declare_all` for a single access or a tuple).
        fn recovers(&self) -> bool;
    }
}

/// One declaration of a task.
pub enum Declared<'s> {
    /// An access to a data handle.
    Data(&'s dyn sealed::Target, Mode),
    /// A plain dependency.
    After(&'s Dep),
}

impl std::fmt::Debug for Declared<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Declared::Data(t, mode) => write!(f, "{mode:?} {}", t.describe()),
            Declared::After(_) => f.write_str("Dep"),
        }
    }
}

/// One access a task declares: [`Data::read`](crate::Data::read) (the task
/// gets `&T`), [`Data::write`](crate::Data::write) and
/// [`Data::recover`](crate::Data::recover) (`&mut T`), or a [`Dep`] (the
/// task also waits for it, and gets `()`).
///
/// ```
/// use selvedge::{spawn_with, Data};
///
/// let a = Data::new(2);
/// let h = spawn_with(a.read(), |a: &i32| a * 10); // one access, no tuple
/// assert_eq!(h.join(), 20);
/// ```
pub trait Access: sealed::SealedAccess + Send {
    /// What the task's closure receives for this access.
    type Ref<'a>
    where
        Self: 'a;

    /// The reference, for the task's closure.
    ///
    /// # Safety
    /// The access must have its turn: every access it is ordered after
    /// finished, and none ordered after it started.
    #[doc(hidden)]
    unsafe fn get(&self) -> Self::Ref<'_>;
}

/// The accesses one task declares: a single [`Access`]; a `Vec` or an
/// array of one access type (the closure receives a `Vec` or an array of
/// references); or a tuple of up to eight of these (the closure receives a
/// tuple of what each member gives, in the same order). Declaring one
/// handle twice in a set panics at submission, unless both are reads (the
/// closure gets two references to the same value): declare it once, as a
/// write if the task writes it.
///
/// ```
/// use selvedge::{spawn_with, Data};
///
/// let parts: Vec<Data<u64>> = (1..=4).map(Data::new).collect();
/// let total = Data::new(0);
/// let reads: Vec<_> = parts.iter().map(Data::read).collect();
/// spawn_with((reads, total.write()), |(parts, total)| {
///     *total = parts.iter().copied().sum();
/// })
/// .detach();
/// assert_eq!(total.into_inner(), 10);
/// ```
pub trait Accesses: sealed::SealedAccesses + Send {
    /// What the task's closure receives.
    type Refs<'a>
    where
        Self: 'a;

    /// The references, for the task's closure.
    ///
    /// # Safety
    /// As for [`Access::get`], for every access of the set.
    #[doc(hidden)]
    unsafe fn refs(&self) -> Self::Refs<'_>;
}

/// An access type as a set of one access: invoked by `data.rs` for `Data`'s
/// access types, which it defines.
macro_rules! single_access_set {
    ($($ty:ident),*) => {$(
        impl<T: Send + Sync> $crate::dataflow::access::sealed::SealedAccesses for $ty<T> {
            fn declare_all<'s>(
                &'s self,
                each: &mut dyn FnMut($crate::dataflow::access::Declared<'s>),
            ) {
                $crate::dataflow::access::sealed::SealedAccess::declare(self, each)
            }

            fn only_data(
                &self,
            ) -> Option<(
                &dyn $crate::dataflow::access::sealed::Target,
                $crate::dataflow::mode::Mode,
            )> {
                $crate::dataflow::access::sealed::SealedAccess::data(self)
            }

            fn hold_shares(
                &mut self,
                take: &mut dyn FnMut(
                    &dyn $crate::dataflow::access::sealed::Target,
                ) -> Option<$crate::dataflow::readers::ReadShare>,
            ) {
                $crate::dataflow::access::sealed::SealedAccess::hold_share(self, take)
            }

            fn recovers(&self) -> bool {
                $crate::dataflow::access::sealed::SealedAccess::recovers(self)
            }
        }

        impl<T: Send + Sync> $crate::dataflow::access::Accesses for $ty<T> {
            type Refs<'a> = <Self as $crate::dataflow::access::Access>::Ref<'a> where Self: 'a;

            unsafe fn refs(&self) -> Self::Refs<'_> {
                // SAFETY: the caller's contract is `get`'s.
                unsafe { $crate::dataflow::access::Access::get(self) }
            }
        }
    )*};
}
pub(crate) use single_access_set;

impl sealed::SealedAccesses for Dep {
    fn declare_all<'s>(&'s self, each: &mut dyn FnMut(Declared<'s>)) {
        each(Declared::After(self))
    }

    fn hold_shares(&mut self, _take: &mut dyn FnMut(&dyn sealed::Target) -> Option<ReadShare>) {}

    fn recovers(&self) -> bool {
        false
    }
}

impl Accesses for Dep {
    type Refs<'a> = ();

    unsafe fn refs(&self) -> Self::Refs<'_> {}
}

impl sealed::SealedAccess for Dep {
    fn declare<'s>(&'s self, each: &mut dyn FnMut(Declared<'s>)) {
        each(Declared::After(self))
    }
}

impl Access for Dep {
    type Ref<'a> = ();

    unsafe fn get(&self) -> Self::Ref<'_> {}
}

macro_rules! tuple_access_set {
    ($($name:ident $idx:tt),+) => {
        impl<$($name: Accesses),+> sealed::SealedAccesses for ($($name,)+) {
            fn declare_all<'s>(&'s self, each: &mut dyn FnMut(Declared<'s>)) {
                $( self.$idx.declare_all(each); )+
            }

            fn hold_shares(
                &mut self,
                take: &mut dyn FnMut(&dyn sealed::Target) -> Option<ReadShare>,
            ) {
                $( self.$idx.hold_shares(take); )+
            }

            fn recovers(&self) -> bool {
                false $( || self.$idx.recovers() )+
            }

            fn only_data(&self) -> Option<(&dyn sealed::Target, Mode)> {
                // A tuple of one (the others have more than one access):
                // known from the arity, without asking each element.
                if [$($idx),+].len() == 1 {
                    self.0.only_data()
                } else {
                    None
                }
            }
        }

        impl<$($name: Accesses),+> Accesses for ($($name,)+) {
            type Refs<'a> = ($($name::Refs<'a>,)+) where Self: 'a;

            unsafe fn refs(&self) -> Self::Refs<'_> {
                // SAFETY: the caller's contract covers every member.
                unsafe { ($(self.$idx.refs(),)+) }
            }
        }
    };
}

tuple_access_set!(A 0);
tuple_access_set!(A 0, B 1);
tuple_access_set!(A 0, B 1, C 2);
tuple_access_set!(A 0, B 1, C 2, D 3);
tuple_access_set!(A 0, B 1, C 2, D 3, E 4);
tuple_access_set!(A 0, B 1, C 2, D 3, E 4, F 5);
tuple_access_set!(A 0, B 1, C 2, D 3, E 4, F 5, G 6);
tuple_access_set!(A 0, B 1, C 2, D 3, E 4, F 5, G 6, H 7);

/// `SealedAccesses` for a collection of accesses of one kind, through its
/// slice: vectors and arrays.
macro_rules! slice_access_set {
    ($([$($generics:tt)*] $ty:ty),+) => {$(
        impl<$($generics)*> sealed::SealedAccesses for $ty {
            fn declare_all<'s>(&'s self, each: &mut dyn FnMut(Declared<'s>)) {
                for a in self {
                    a.declare(each);
                }
            }

            fn hold_shares(
                &mut self,
                take: &mut dyn FnMut(&dyn sealed::Target) -> Option<ReadShare>,
            ) {
                for a in self {
                    a.hold_share(take);
                }
            }

            fn recovers(&self) -> bool {
                self.iter().any(|a| a.recovers())
            }

            fn only_data(&self) -> Option<(&dyn sealed::Target, Mode)> {
                match &self[..] {
                    [a] => a.data(),
                    _ => None,
                }
            }
        }
    )+};
}

slice_access_set!([A: Access] Vec<A>, [A: Access, const N: usize] [A; N]);

impl<A: Access> Accesses for Vec<A> {
    type Refs<'a>
        = Vec<A::Ref<'a>>
    where
        Self: 'a;

    unsafe fn refs(&self) -> Self::Refs<'_> {
        // SAFETY: the caller's contract covers every member.
        self.iter().map(|a| unsafe { a.get() }).collect()
    }
}

impl<A: Access, const N: usize> Accesses for [A; N] {
    type Refs<'a>
        = [A::Ref<'a>; N]
    where
        Self: 'a;

    unsafe fn refs(&self) -> Self::Refs<'_> {
        // SAFETY: the caller's contract covers every member.
        self.each_ref().map(|a| unsafe { a.get() })
    }
}

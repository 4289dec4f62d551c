//! `WorkerAddress`: which worker queued a task, as a plain word that a
//! task block can keep without knowing the worker type.

/// Which worker queued a task: the worker's address, never zero, so an
/// `Option<WorkerAddress>` is one word, and a task block can store "no
/// worker" (a task that went to the injector) as 0.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct WorkerAddress(std::num::NonZeroUsize);

impl WorkerAddress {
    /// The address of `worker` (the `Worker` on its thread's stack).
    #[inline(always)]
    pub(crate) fn of<W>(worker: &W) -> Self {
        Self(std::ptr::NonNull::from(worker).addr())
    }

    /// The address stored as a word (see [`WorkerAddress::from_word`]).
    #[inline(always)]
    pub(crate) fn to_word(self) -> usize {
        self.0.get()
    }

    /// The address stored by [`WorkerAddress::to_word`], or `None` for 0.
    #[inline(always)]
    pub(crate) fn from_word(word: usize) -> Option<Self> {
        std::num::NonZeroUsize::new(word).map(Self)
    }
}

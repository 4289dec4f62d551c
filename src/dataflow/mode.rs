//! How a task accesses a data handle: read, write or recover.

/// How a task accesses one [`Data`](crate::Data) handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `&T`: after the previous write, alongside other reads.
    Read,
    /// `&mut T`: after the previous write and every read since.
    Write,
    /// `&mut T` as a write, granted even when the handle is poisoned; the
    /// poison is cleared when the task returns.
    Recover,
}

impl Mode {
    pub(crate) fn writes(self) -> bool {
        self != Mode::Read
    }
}

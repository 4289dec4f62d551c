//! Errors from the environment (as opposed to programmer errors, which panic).

use std::fmt;

/// Why a [`crate::Runtime`] could not be built.
///
/// ```
/// let err = selvedge::Runtime::builder().num_threads(0).build().unwrap_err();
/// assert_eq!(err.to_string(), "a runtime needs at least one worker thread (num_threads was 0)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// `num_threads(0)`. (`SELVEDGE_NUM_THREADS=0` gives
    /// [`BuildError::InvalidThreadCountVar`], which names the variable.)
    ZeroThreads,
    /// More workers than a runtime supports, asked for with
    /// [`crate::Builder::num_threads`] or `SELVEDGE_NUM_THREADS`. (Without
    /// either, the default count is capped at the maximum instead.)
    TooManyThreads {
        /// The count asked for.
        requested: usize,
        /// The most supported.
        max: usize,
    },
    /// `SELVEDGE_NUM_THREADS` is set but is not a positive integer (it is
    /// `0`, or not a number). Set to nothing but whitespace, it counts as
    /// unset.
    InvalidThreadCountVar {
        /// The variable's value.
        value: String,
    },
    /// The name given to [`crate::Builder::thread_name`] contains a NUL
    /// byte, which thread names cannot hold.
    InvalidThreadName {
        /// The name given.
        name: String,
    },
    /// The operating system refused to start a worker thread.
    ThreadSpawn {
        /// Index of the worker that failed to start.
        index: usize,
        /// The OS error.
        message: String,
    },
    /// `SELVEDGE_PIN_THREADS` is set but is not `0`, `1`, `false` or `true`.
    InvalidPinVar {
        /// The variable's value.
        value: String,
    },
    /// `SELVEDGE_STALL_WARN` is set but is not a number of seconds (`0`
    /// turns the stall warning off). Set to nothing but whitespace, it
    /// counts as unset.
    InvalidStallWarnVar {
        /// The variable's value.
        value: String,
    },
    /// The operating system refused to start the thread that watches for
    /// stalls (see [`crate::Builder::stall_warning`], which can turn the
    /// warning off).
    StallWatchSpawn {
        /// The OS error.
        message: String,
    },
    /// Pinning was asked for (`pin_threads(true)` or
    /// `SELVEDGE_PIN_THREADS=1`) and a worker could not be pinned: the OS
    /// refused, or the platform is not Linux.
    Pin {
        /// Index of the worker that could not be pinned.
        index: usize,
        /// The CPU it was to run on.
        cpu: usize,
        /// The OS error.
        message: String,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroThreads => {
                write!(
                    f,
                    "a runtime needs at least one worker thread (num_threads was 0)"
                )
            }
            Self::TooManyThreads { requested, max } => write!(
                f,
                "a runtime supports at most {max} worker threads, {requested} were requested"
            ),
            Self::InvalidThreadCountVar { value } => write!(
                f,
                "SELVEDGE_NUM_THREADS must be a positive integer, found {value:?}"
            ),
            Self::InvalidThreadName { name } => write!(
                f,
                "worker thread names cannot contain a NUL byte, found {name:?}"
            ),
            Self::ThreadSpawn { index, message } => {
                write!(f, "could not start worker thread {index}: {message}")
            }
            Self::InvalidPinVar { value } => write!(
                f,
                "SELVEDGE_PIN_THREADS must be 0, 1, false or true, found {value:?}"
            ),
            Self::InvalidStallWarnVar { value } => write!(
                f,
                "SELVEDGE_STALL_WARN must be a number of seconds (0 turns the warning off), \
                 found {value:?}"
            ),
            Self::StallWatchSpawn { message } => write!(
                f,
                "could not start the thread that watches for stalls: {message} \
                 (Builder::stall_warning(None) builds a runtime without it)"
            ),
            Self::Pin {
                index,
                cpu,
                message,
            } => write!(
                f,
                "could not pin worker thread {index} to CPU {cpu}: {message}"
            ),
        }
    }
}

impl std::error::Error for BuildError {}

/// Why a task was cancelled instead of run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cancellation {
    /// The last handle of a promise it depended on was dropped unfulfilled.
    DependencyDropped,
    /// It became ready after its runtime had shut down.
    RuntimeShutDown,
}

impl fmt::Display for Cancellation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::DependencyDropped => {
                "a dependency was dropped unfulfilled (the last handle of a promise it waited on was dropped)"
            }
            Self::RuntimeShutDown => "its runtime shut down before the task could run",
        })
    }
}

/// The result slot of a cancelled task holds this as its "panic" payload;
/// a handle recognises it and reports [`JoinError`] cancellation instead.
pub(crate) struct Cancelled(pub(crate) Cancellation);

/// A task that gave up before doing its work, for a reason a layer above
/// the scheduler states (data it was to access is poisoned): its "panic"
/// payload, which a handle reports as a cancellation with this message.
pub(crate) struct CancelledBecause(pub(crate) String);

/// Why a task was cancelled, as a [`JoinError`] reports it.
enum CancelReason {
    Scheduler(Cancellation),
    Said(String),
}

impl fmt::Display for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Scheduler(why) => why.fmt(f),
            Self::Said(why) => f.write_str(why),
        }
    }
}

impl fmt::Debug for CancelReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Scheduler(why) => why.fmt(f),
            Self::Said(why) => why.fmt(f),
        }
    }
}

/// Why [`crate::JoinHandle::try_join`] has no value: the task panicked, or
/// it was cancelled before it could run (a delayed task whose dependency
/// was dropped unfulfilled, or that became ready after its runtime shut
/// down).
///
/// ```
/// let rt = selvedge::Runtime::builder().num_threads(2).build().unwrap();
/// let p = selvedge::Promise::new();
/// let h = rt.spawn_delayed([p.dep()], || 1);
/// drop(p); // nobody can fulfill it any more: the task is cancelled
/// let err = h.try_join().unwrap_err();
/// assert!(err.is_cancelled());
/// assert!(err.to_string().contains("dropped unfulfilled"));
/// ```
pub struct JoinError {
    repr: JoinErrorRepr,
}

enum JoinErrorRepr {
    Panic(Box<dyn std::any::Any + Send>),
    Cancelled(CancelReason),
}

impl JoinError {
    /// Classifies the payload of a task's failed result.
    pub(crate) fn from_payload(payload: Box<dyn std::any::Any + Send>) -> Self {
        let repr = match payload.downcast::<Cancelled>() {
            Ok(c) => JoinErrorRepr::Cancelled(CancelReason::Scheduler(c.0)),
            Err(p) => match p.downcast::<CancelledBecause>() {
                Ok(c) => JoinErrorRepr::Cancelled(CancelReason::Said(c.0)),
                Err(p) => JoinErrorRepr::Panic(p),
            },
        };
        Self { repr }
    }

    /// Whether the task panicked.
    ///
    /// ```
    /// let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
    /// let err = rt.spawn(|| panic!("no")).try_join().unwrap_err();
    /// assert!(err.is_panic() && !err.is_cancelled());
    /// ```
    pub fn is_panic(&self) -> bool {
        matches!(self.repr, JoinErrorRepr::Panic(_))
    }

    /// Whether the task was cancelled without running.
    ///
    /// ```
    /// let p = selvedge::Promise::new();
    /// let h = selvedge::spawn_delayed([p.dep()], || ());
    /// drop(p);
    /// assert!(h.try_join().unwrap_err().is_cancelled());
    /// ```
    pub fn is_cancelled(&self) -> bool {
        matches!(self.repr, JoinErrorRepr::Cancelled(_))
    }

    /// The panic payload, or the error back when the task was cancelled.
    ///
    /// ```
    /// let rt = selvedge::Runtime::builder().num_threads(1).build().unwrap();
    /// let err = rt.spawn(|| panic!("no")).try_join().unwrap_err();
    /// let payload = err.try_into_panic().ok().unwrap();
    /// assert_eq!(payload.downcast_ref::<&str>(), Some(&"no"));
    /// ```
    pub fn try_into_panic(self) -> Result<Box<dyn std::any::Any + Send>, JoinError> {
        match self.repr {
            JoinErrorRepr::Panic(p) => Ok(p),
            JoinErrorRepr::Cancelled(_) => Err(self),
        }
    }

    /// The error as a task's failure payload again: a task that unwinds
    /// with it fails the way the joined task did (a cancellation stays a
    /// cancellation, with its reason).
    #[cfg(feature = "cuda")]
    pub(crate) fn into_payload(self) -> Box<dyn std::any::Any + Send> {
        match self.repr {
            JoinErrorRepr::Panic(p) => p,
            JoinErrorRepr::Cancelled(CancelReason::Scheduler(why)) => Box::new(Cancelled(why)),
            JoinErrorRepr::Cancelled(CancelReason::Said(why)) => Box::new(CancelledBecause(why)),
        }
    }

    /// Resumes the panic, or panics with a message saying why the task was
    /// cancelled: what [`crate::JoinHandle::join`] does with an error.
    pub(crate) fn resume(self) -> ! {
        match self.repr {
            JoinErrorRepr::Panic(p) => std::panic::resume_unwind(p),
            JoinErrorRepr::Cancelled(why) => {
                panic!("selvedge: joined a task that was cancelled: {why}")
            }
        }
    }
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.repr {
            JoinErrorRepr::Panic(p) => match crate::core::unwind::panic_message(&**p) {
                Some(m) => write!(f, "task panicked: {m}"),
                None => f.write_str("task panicked"),
            },
            JoinErrorRepr::Cancelled(why) => write!(f, "task cancelled: {why}"),
        }
    }
}

impl fmt::Debug for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.repr {
            JoinErrorRepr::Panic(_) => f.write_str("JoinError::Panic(..)"),
            JoinErrorRepr::Cancelled(why) => write!(f, "JoinError::Cancelled({why:?})"),
        }
    }
}

impl std::error::Error for JoinError {}

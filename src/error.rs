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
    /// `num_threads(0)`, or `SELVEDGE_NUM_THREADS=0`.
    ZeroThreads,
    /// More workers than a runtime supports.
    TooManyThreads {
        /// The count asked for.
        requested: usize,
        /// The most supported.
        max: usize,
    },
    /// `SELVEDGE_NUM_THREADS` is set but is not a number.
    InvalidThreadCountVar {
        /// The variable's value.
        value: String,
    },
    /// The operating system refused to start a worker thread.
    ThreadSpawn {
        /// Index of the worker that failed to start.
        index: usize,
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
            Self::ThreadSpawn { index, message } => {
                write!(f, "could not start worker thread {index}: {message}")
            }
        }
    }
}

impl std::error::Error for BuildError {}

//! A runtime's settings, and how unset ones are read from the environment.

use crate::core::error::BuildError;
use crate::core::steal::MAX_WORKERS;
use std::time::Duration;

/// The stall warning's delay when neither the builder nor
/// `SELVEDGE_STALL_WARN` sets one.
pub(crate) const DEFAULT_STALL_WARNING: Duration = Duration::from_secs(10);

/// What a runtime is built with; `None` means "the default" (see
/// `Builder`, whose setters fill this in, for what each default is).
#[derive(Debug, Clone, Default)]
pub(crate) struct RuntimeConfig {
    pub(crate) num_threads: Option<usize>,
    pub(crate) thread_name: Option<String>,
    pub(crate) stack_size: Option<usize>,
    pub(crate) pin_threads: Option<bool>,
    /// How long nothing runs, while something waits, before the runtime
    /// says so (`Builder::stall_warning`; `Some(None)`: never).
    pub(crate) stall_warning: Option<Option<Duration>>,
    /// Where the trace goes (`Builder::trace_to`).
    #[cfg(feature = "trace")]
    pub(crate) trace_path: Option<std::path::PathBuf>,
    /// Events kept per worker (`Builder::trace_capacity`).
    #[cfg(feature = "trace")]
    pub(crate) trace_capacity: Option<usize>,
}

/// Runtimes traced through `SELVEDGE_TRACE` so far in this process: the
/// first writes to the variable's path, the next ones beside it.
#[cfg(feature = "trace")]
static ENV_TRACED: crate::core::sync::AtomicUsize = crate::core::sync::AtomicUsize::new(0);

impl RuntimeConfig {
    pub(crate) fn resolve_pin_threads(&self) -> Result<bool, BuildError> {
        if let Some(pin) = self.pin_threads {
            return Ok(pin);
        }
        match std::env::var("SELVEDGE_PIN_THREADS") {
            Ok(v) => match v.trim() {
                "1" | "true" => Ok(true),
                "0" | "false" => Ok(false),
                _ => Err(BuildError::InvalidPinVar { value: v }),
            },
            Err(_) => Ok(false),
        }
    }

    /// Where this runtime's trace goes, if it is traced: the builder's
    /// path, else `SELVEDGE_TRACE` (empty: unset). Runtimes after the first
    /// traced through the variable write `name-2.json`, `name-3.json`...
    /// beside it, so none overwrites another's.
    #[cfg(feature = "trace")]
    pub(crate) fn resolve_trace_path(&self) -> Option<std::path::PathBuf> {
        if let Some(p) = &self.trace_path {
            return Some(p.clone());
        }
        let var = std::env::var_os("SELVEDGE_TRACE").filter(|v| !v.is_empty())?;
        let path = std::path::PathBuf::from(var);
        let n = ENV_TRACED.fetch_add(1, crate::core::sync::Ordering::Relaxed) + 1;
        Some(numbered(path, n))
    }

    /// Without the `trace` feature, says once that `SELVEDGE_TRACE` has no
    /// effect, rather than leave its user looking for a file.
    #[cfg(not(feature = "trace"))]
    pub(crate) fn warn_if_trace_requested(&self) {
        static WARNED: std::sync::Once = std::sync::Once::new();
        if std::env::var_os("SELVEDGE_TRACE").is_some_and(|v| !v.is_empty()) {
            WARNED.call_once(|| {
                eprintln!(
                    "selvedge: SELVEDGE_TRACE is set, but this program was built without \
                     selvedge's `trace` feature: no trace is written"
                )
            });
        }
    }

    /// How long nothing may run, while something waits, before the
    /// runtime warns (`None`: never): the builder's setting, else
    /// `SELVEDGE_STALL_WARN`, else [`DEFAULT_STALL_WARNING`].
    pub(crate) fn resolve_stall_warning(&self) -> Result<Option<Duration>, BuildError> {
        let after = match self.stall_warning {
            Some(after) => after,
            None => resolve_stall_var(std::env::var("SELVEDGE_STALL_WARN").ok())?,
        };
        Ok(after.filter(|d| !d.is_zero()))
    }

    pub(crate) fn resolve_num_threads(&self) -> Result<usize, BuildError> {
        resolve_num_threads(
            self.num_threads,
            std::env::var("SELVEDGE_NUM_THREADS").ok(),
            || std::thread::available_parallelism().ok().map(|n| n.get()),
        )
    }
}

/// The worker count from, in order: the builder's `explicit` count, the
/// `SELVEDGE_NUM_THREADS` variable's value `var` (empty or only whitespace:
/// unset), the available `parallelism` (1 when unknown). Only the last is
/// capped at [`MAX_WORKERS`]: a machine with more CPUs still gets a
/// runtime, while a count someone asked for is checked.
fn resolve_num_threads(
    explicit: Option<usize>,
    var: Option<String>,
    parallelism: impl FnOnce() -> Option<usize>,
) -> Result<usize, BuildError> {
    let n = match (explicit, var) {
        (Some(n), _) => {
            if n == 0 {
                return Err(BuildError::ZeroThreads);
            }
            n
        }
        (None, Some(v)) if !v.trim().is_empty() => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => return Err(BuildError::InvalidThreadCountVar { value: v }),
        },
        (None, _) => return Ok(parallelism().unwrap_or(1).clamp(1, MAX_WORKERS)),
    };
    if n > MAX_WORKERS {
        return Err(BuildError::TooManyThreads {
            requested: n,
            max: MAX_WORKERS,
        });
    }
    Ok(n)
}

/// The stall warning's delay from `SELVEDGE_STALL_WARN`'s value `var`:
/// seconds, fractions allowed, `0` for never; unset, empty or only
/// whitespace gives the default.
fn resolve_stall_var(var: Option<String>) -> Result<Option<Duration>, BuildError> {
    let Some(v) = var.filter(|v| !v.trim().is_empty()) else {
        return Ok(Some(DEFAULT_STALL_WARNING));
    };
    match v
        .trim()
        .parse::<f64>()
        .ok()
        .map(Duration::try_from_secs_f64)
    {
        Some(Ok(d)) if d.is_zero() => Ok(None),
        Some(Ok(d)) => Ok(Some(d)),
        _ => Err(BuildError::InvalidStallWarnVar { value: v }),
    }
}

/// `path` for the `n`th runtime traced through the variable: the path
/// itself for the first, `stem-n.ext` for the others.
#[cfg(feature = "trace")]
fn numbered(path: std::path::PathBuf, n: usize) -> std::path::PathBuf {
    if n == 1 {
        return path;
    }
    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
    let name = match path.extension() {
        Some(ext) => format!("{stem}-{n}.{}", ext.to_string_lossy()),
        None => format!("{stem}-{n}"),
    };
    path.with_file_name(name)
}

const _: () = assert!(MAX_WORKERS == 256);

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(
        explicit: Option<usize>,
        var: Option<&str>,
        cpus: Option<usize>,
    ) -> Result<usize, BuildError> {
        resolve_num_threads(explicit, var.map(str::to_owned), || cpus)
    }

    #[cfg(feature = "trace")]
    #[test]
    fn later_runtimes_traced_through_the_variable_write_beside_the_first() {
        use std::path::PathBuf;
        assert_eq!(numbered("t/a.json".into(), 1), PathBuf::from("t/a.json"));
        assert_eq!(numbered("t/a.json".into(), 3), PathBuf::from("t/a-3.json"));
        assert_eq!(numbered("trace".into(), 2), PathBuf::from("trace-2"));
    }

    #[test]
    fn the_stall_warning_variable_is_seconds_and_zero_is_never() {
        let var = |v: &str| resolve_stall_var(Some(v.into()));
        assert_eq!(resolve_stall_var(None), Ok(Some(DEFAULT_STALL_WARNING)));
        assert_eq!(var(" "), Ok(Some(DEFAULT_STALL_WARNING)));
        assert_eq!(var("3"), Ok(Some(Duration::from_secs(3))));
        assert_eq!(var(" 0.25 "), Ok(Some(Duration::from_millis(250))));
        assert_eq!(var("0"), Ok(None));
        assert_eq!(var("0.0"), Ok(None));
        for bad in ["-1", "ten", "1s", "inf", "NaN"] {
            assert_eq!(
                var(bad),
                Err(BuildError::InvalidStallWarnVar { value: bad.into() }),
                "{bad}"
            );
        }
        let msg = var("ten").unwrap_err().to_string();
        assert!(
            msg.contains("SELVEDGE_STALL_WARN") && msg.contains("\"ten\""),
            "{msg}"
        );
    }

    #[test]
    fn the_default_count_is_capped_at_the_maximum() {
        assert_eq!(resolve(None, None, Some(300)), Ok(MAX_WORKERS));
        assert_eq!(resolve(None, None, Some(MAX_WORKERS + 1)), Ok(MAX_WORKERS));
        assert_eq!(resolve(None, None, Some(MAX_WORKERS)), Ok(MAX_WORKERS));
        assert_eq!(resolve(None, None, Some(3)), Ok(3));
        // Unknown parallelism: one worker. An empty variable is unset.
        assert_eq!(resolve(None, None, None), Ok(1));
        assert_eq!(resolve(None, Some(""), Some(300)), Ok(MAX_WORKERS));
    }

    #[test]
    fn an_explicit_count_above_the_maximum_is_an_error() {
        let too_many = BuildError::TooManyThreads {
            requested: 300,
            max: MAX_WORKERS,
        };
        assert_eq!(resolve(Some(300), None, Some(4)), Err(too_many.clone()));
        assert_eq!(resolve(None, Some("300"), Some(4)), Err(too_many));
        assert_eq!(resolve(Some(MAX_WORKERS), None, Some(4)), Ok(MAX_WORKERS));
        // The builder's count wins over the variable, even a bad one.
        assert_eq!(resolve(Some(2), Some("lots"), Some(4)), Ok(2));
    }

    #[test]
    fn an_empty_thread_count_variable_counts_as_unset() {
        for v in ["", " ", "\t\n "] {
            assert_eq!(resolve(None, Some(v), Some(5)), Ok(5), "{v:?}");
        }
        assert_eq!(resolve(None, Some(" 3 "), Some(5)), Ok(3));
    }

    #[test]
    fn a_zero_from_the_variable_names_the_variable() {
        let err = resolve(None, Some("0"), Some(5)).unwrap_err();
        assert_eq!(err, BuildError::InvalidThreadCountVar { value: "0".into() });
        let msg = err.to_string();
        assert!(
            msg.contains("SELVEDGE_NUM_THREADS") && msg.contains("\"0\""),
            "{msg}"
        );
        assert!(!msg.contains("num_threads was 0"), "{msg}");
        assert_eq!(
            resolve(Some(0), None, Some(5)),
            Err(BuildError::ZeroThreads)
        );
    }
}

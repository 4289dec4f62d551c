//! Finding the CUDA driver and cuBLAS, and checking them before the first
//! call, so that a missing, stub, old or mismatched library is an error that
//! says what happened, never a panic inside cudarc.
//!
//! cudarc loads both libraries by name on first use (`libcuda.so`,
//! `libcuda.so.1`, `libcublas.so`, `libcublas.so.13`, `libcublas.so.12`, ...)
//! through the dynamic loader, and panics if none loads or a symbol is
//! missing. cuBLAS often lives outside the loader's path: in a Python
//! wheel (`site-packages/nvidia/cu13/lib/libcublas.so.13`, or
//! `nvidia/cublas/lib` for CUDA 12) or a toolkit
//! directory. Such a library, or the one `SELVEDGE_CUBLAS` names, is loaded
//! here by its full path first; the loader then hands cudarc that same
//! library when it asks for it by its SONAME (a library already loaded
//! matches a later request for its SONAME), which is checked by comparing
//! one symbol's address.

use super::GpuError;
use cudarc::driver::{sys, DriverError};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The environment variable naming the cuBLAS library to use.
pub(super) const CUBLAS_VARIABLE: &str = "SELVEDGE_CUBLAS";

/// The oldest driver API the crate calls into: CUDA 12.0 (driver 525).
const OLDEST_DRIVER: i32 = 12000;

/// Every driver entry point the crate, and the cudarc calls it makes, use:
/// checked before the first call, since cudarc panics on a missing one.
const DRIVER_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDeviceGetName",
    "cuDeviceGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxSetCurrent",
    "cuCtxGetCurrent",
    "cuCtxSynchronize",
    "cuStreamCreate",
    "cuStreamDestroy_v2",
    "cuStreamQuery",
    "cuStreamSynchronize",
    "cuStreamIsCapturing",
    "cuStreamBeginCapture_v2",
    "cuStreamEndCapture",
    "cuGraphInstantiateWithFlags",
    "cuGraphLaunch",
    "cuGraphExecDestroy",
    "cuGraphDestroy",
    "cuThreadExchangeStreamCaptureMode",
    "cuStreamWaitEvent",
    "cuLaunchHostFunc",
    "cuEventCreate",
    "cuEventRecord",
    "cuEventQuery",
    "cuEventSynchronize",
    "cuEventDestroy_v2",
    "cuMemAllocAsync",
    "cuMemFreeAsync",
    "cuMemAlloc_v2",
    "cuMemFree_v2",
    "cuMemsetD8Async",
    "cuMemHostAlloc",
    "cuMemFreeHost",
    "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2",
    "cuMemcpyDtoDAsync_v2",
    "cuGetErrorString",
    "cuGetErrorName",
];

/// The cuBLAS entry points the crate calls.
const BLAS_SYMBOLS: &[&str] = &[
    "cublasGetProperty",
    "cublasCreate_v2",
    "cublasDestroy_v2",
    "cublasSetStream_v2",
    "cublasSgemmStridedBatched",
    "cublasGemmStridedBatchedEx",
];

/// The oldest cuBLAS the crate calls into (older ones export the same
/// names, with other meanings for some arguments).
const OLDEST_BLAS: i32 = 12;

/// The cuBLAS file names looked for in the directories searched, newest
/// first.
const BLAS_FILES: &[&str] = &["libcublas.so.13", "libcublas.so.12"];

/// Checks the driver and initializes it; returns how many devices it sees.
pub(super) fn device_count() -> Result<usize, GpuError> {
    let no_driver = |reason: String| GpuError::NoDriver { reason };
    // SAFETY: only tries to load the library (and unloads it).
    if !unsafe { sys::is_culib_present() } {
        return Err(no_driver(format!(
            "libcuda could not be loaded (the loader found none of {}): no NVIDIA driver is installed, or it is not on the loader's path",
            candidates("cuda")
        )));
    }
    // SAFETY: present (checked above), so cudarc's loader does not panic.
    let lib = unsafe { sys::culib() };
    for name in DRIVER_SYMBOLS {
        // SAFETY: only looks the symbol up; nothing is called.
        if unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_err() {
            return Err(no_driver(format!(
                "libcuda has no {name}: the driver is older than CUDA 12.0 (driver 525), which selvedge needs"
            )));
        }
    }
    // SAFETY: a plain driver call (the symbol exists).
    match unsafe { sys::cuInit(0) }.result() {
        Ok(()) => {}
        // A driver that sees no GPU (none installed, or
        // CUDA_VISIBLE_DEVICES hides them all).
        Err(DriverError(sys::CUresult::CUDA_ERROR_NO_DEVICE)) => return Ok(0),
        Err(e) => return Err(no_driver(init_failure(e))),
    }
    let mut version = 0;
    // SAFETY: `version` is a valid out-pointer.
    unsafe { sys::cuDriverGetVersion(&mut version) }.result()?;
    if version < OLDEST_DRIVER {
        return Err(no_driver(format!(
            "the driver supports CUDA {}.{}, selvedge needs 12.0 or newer (driver 525)",
            version / 1000,
            version % 1000 / 10
        )));
    }
    let mut count = 0;
    // SAFETY: `count` is a valid out-pointer; the driver is initialized.
    unsafe { sys::cuDeviceGetCount(&mut count) }.result()?;
    Ok(usize::try_from(count).unwrap_or(0))
}

/// Why `cuInit` failed, in words a user can act on.
fn init_failure(e: DriverError) -> String {
    let why = match e.0 {
        sys::CUresult::CUDA_ERROR_STUB_LIBRARY => {
            "the libcuda found is the CUDA toolkit's stub (from its lib64/stubs directory), not a driver: put the driver's libcuda.so.1 first on the loader's path"
        }
        sys::CUresult::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH => {
            "the libcuda found does not match the kernel module's version (a driver upgrade without a reboot, or a container with another driver's library)"
        }
        sys::CUresult::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE => {
            "the CUDA forward-compatibility libcuda found does not support this GPU"
        }
        _ => "the driver could not initialize",
    };
    format!("cuInit failed with {e:?}: {why}")
}

/// Finds and checks cuBLAS, once per process.
pub(super) fn blas() -> Result<(), GpuError> {
    static FOUND: OnceLock<Result<(), String>> = OnceLock::new();
    FOUND
        .get_or_init(find_blas)
        .clone()
        .map_err(|reason| GpuError::NoBlas { reason })
}

fn find_blas() -> Result<(), String> {
    if let Some(path) = std::env::var_os(CUBLAS_VARIABLE) {
        let path = PathBuf::from(path);
        preload(&path).map_err(|e| format!("{CUBLAS_VARIABLE}={}: {e}", path.display()))?;
        return check_blas(Some(&path));
    }
    // SAFETY: only tries to load the library (and unloads it).
    if unsafe { cudarc::cublas::sys::is_culib_present() } {
        return check_blas(None);
    }
    let dirs = search_dirs();
    for dir in &dirs {
        for file in BLAS_FILES {
            let path = dir.join(file);
            if path.is_file() {
                preload(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                return check_blas(Some(&path));
            }
        }
    }
    Err(format!(
        "the loader found none of {}, and no {} is in {}; set {CUBLAS_VARIABLE}=/path/to/libcublas.so.N",
        candidates("cublas"),
        BLAS_FILES.join(" or "),
        if dirs.is_empty() {
            "any Python wheel or CUDA toolkit directory (none exists)".to_string()
        } else {
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        }
    ))
}

/// Checks that cudarc's loader finds cuBLAS (the one loaded from `path`,
/// if given) and that it has every entry point the crate calls.
fn check_blas(path: Option<&Path>) -> Result<(), String> {
    // SAFETY: only tries to load the library (and unloads it).
    if !unsafe { cudarc::cublas::sys::is_culib_present() } {
        let path = path.map_or_else(String::new, |p| p.display().to_string());
        return Err(format!(
            "{path} was loaded, but cudarc looks for cuBLAS by the names {} and its SONAME is none of them",
            candidates("cublas")
        ));
    }
    // SAFETY: present (checked above), so cudarc's loader does not panic.
    let lib = unsafe { cudarc::cublas::sys::culib() };
    for name in BLAS_SYMBOLS {
        // SAFETY: only looks the symbol up; nothing is called.
        if unsafe { lib.get::<unsafe extern "C" fn()>(name.as_bytes()) }.is_err() {
            return Err(format!(
                "the cuBLAS found has no {name}: it is older than CUDA 12"
            ));
        }
    }
    let mut major = 0;
    // SAFETY: the symbol exists (checked above); `major` is a valid
    // out-pointer. A query of the library's version, needing no handle.
    let asked = unsafe {
        cudarc::cublas::sys::cublasGetProperty(
            cudarc::cublas::sys::libraryPropertyType::MAJOR_VERSION,
            &mut major,
        )
    };
    if asked != cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        return Err(format!(
            "the cuBLAS found does not say its version ({asked:?})"
        ));
    }
    if major < OLDEST_BLAS {
        return Err(format!(
            "the cuBLAS found is version {major}, selvedge needs {OLDEST_BLAS} or newer"
        ));
    }
    if let Some(path) = path {
        // SAFETY: only looks the symbol up; nothing is called.
        let theirs = unsafe { lib.get::<unsafe extern "C" fn()>(b"cublasCreate_v2") }
            .map(|f| *f as usize)
            .ok();
        if theirs != symbol_address(path, "cublasCreate_v2") {
            return Err(format!(
                "{} was loaded, but another cuBLAS on the loader's path (one of {}) is found first: remove it from the path, or unset {CUBLAS_VARIABLE} to use it",
                path.display(),
                candidates("cublas")
            ));
        }
    }
    Ok(())
}

/// The names cudarc's loader tries for `lib`, for messages.
fn candidates(lib: &str) -> String {
    let names = cudarc::get_lib_name_candidates(lib);
    let prefix = format!("lib{lib}.so");
    let mut shown: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| n.starts_with(&prefix))
        .collect();
    shown.dedup();
    shown.join(", ")
}

/// Where cuBLAS is looked for when the loader does not find it: the CUDA
/// toolkit's directories, then the `nvidia-cublas` wheels of Python
/// installations. Only directories that exist.
fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(root) = std::env::var_os(var) {
            dirs.push(PathBuf::from(root).join("lib64"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    dirs.extend(children("/usr/local", "cuda-").map(|d| d.join("lib64")));
    let mut roots: Vec<PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(root) = std::env::var_os(var) {
            roots.push(PathBuf::from(root).join("lib"));
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        roots.push(PathBuf::from(home).join(".local/lib"));
    }
    for root in ["/usr/local/lib", "/usr/lib", "/opt/conda/lib"] {
        roots.push(PathBuf::from(root));
    }
    let mut packages: Vec<PathBuf> = std::env::var_os("PYTHONPATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    for root in &roots {
        for python in children(root, "python3") {
            packages.push(python.join("site-packages"));
            packages.push(python.join("dist-packages"));
        }
    }
    // `nvidia/cublas/lib` (the CUDA 12 wheels), `nvidia/cu13/lib` (the
    // CUDA 13 ones), and whatever other `nvidia/cu*` wheel holds it.
    dirs.extend(
        packages
            .iter()
            .flat_map(|p| children(p.join("nvidia"), "cu"))
            .map(|d| d.join("lib")),
    );
    dirs.retain(|d| d.is_dir());
    dirs.dedup();
    dirs
}

/// The entries of `dir` whose names start with `prefix`, sorted newest
/// version first (reverse order of names).
fn children(dir: impl AsRef<Path>, prefix: &str) -> impl Iterator<Item = PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .collect();
    found.sort();
    found.into_iter().rev()
}

/// Loads the library at `path` (and the cuBLASLt beside it, which cuBLAS
/// needs) for the rest of the process.
#[cfg(target_os = "linux")]
fn preload(path: &Path) -> Result<(), String> {
    if !path.is_file() {
        return Err("no such file".to_string());
    }
    if let (Some(dir), Some(name)) = (path.parent(), path.file_name()) {
        let lt = name
            .to_string_lossy()
            .replacen("libcublas", "libcublasLt", 1);
        let lt = dir.join(lt);
        if lt.is_file() {
            open(&lt)?;
        }
    }
    open(path)
}

#[cfg(not(target_os = "linux"))]
fn preload(_path: &Path) -> Result<(), String> {
    Err("loading cuBLAS from a path is only supported on Linux".to_string())
}

/// `dlopen`s `path`, never to close it.
#[cfg(target_os = "linux")]
fn open(path: &Path) -> Result<(), String> {
    handle(path).map(|_| ())
}

#[cfg(target_os = "linux")]
fn handle(path: &Path) -> Result<*mut libc::c_void, String> {
    use std::os::unix::ffi::OsStrExt;
    let name = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| "the path contains a NUL byte".to_string())?;
    // SAFETY: a NUL-terminated path; loading a library runs its
    // initializers, which for the CUDA libraries only set up state.
    let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns a NUL-terminated message or null.
        let message = unsafe { libc::dlerror() };
        let message = if message.is_null() {
            "dlopen failed".to_string()
        } else {
            // SAFETY: non-null, NUL-terminated, valid until the next dl call.
            unsafe { std::ffi::CStr::from_ptr(message) }
                .to_string_lossy()
                .into_owned()
        };
        return Err(message);
    }
    Ok(handle)
}

/// The address of `symbol` in the library at `path` (already loaded).
#[cfg(target_os = "linux")]
fn symbol_address(path: &Path, symbol: &str) -> Option<usize> {
    let handle = handle(path).ok()?;
    let symbol = std::ffi::CString::new(symbol).ok()?;
    // SAFETY: a live handle and a NUL-terminated name; only looked up.
    let address = unsafe { libc::dlsym(handle, symbol.as_ptr()) };
    (!address.is_null()).then_some(address as usize)
}

#[cfg(not(target_os = "linux"))]
fn symbol_address(_path: &Path, _symbol: &str) -> Option<usize> {
    None
}

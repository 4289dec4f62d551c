//! `Device::open` against fake CUDA libraries, built here with the system C
//! compiler: a stub driver, drivers missing a symbol, too old or seeing no
//! device, a driver that fails its first real call, and cuBLAS missing,
//! misnamed or incomplete. Each must give the error that says so, never a
//! panic (cudarc panics on a missing library or symbol unless the crate
//! checks first). These need no GPU and run everywhere.
//!
//! The loader's path is read when a process starts, so each case runs this
//! binary again as a child process (`fake_library_child`, with
//! `LD_LIBRARY_PATH` naming the fakes' directory and `SELVEDGE_FAKE_CASE`
//! telling it to open the device), which prints what `Device::open`
//! returned; the parent checks the child's exit status and that line.
#![cfg(all(feature = "cuda", target_os = "linux"))]

use selvedge::gpu::{Device, GpuError};
use selvedge::Runtime;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Tells the child which case it runs (and that it is the child).
const CASE_VARIABLE: &str = "SELVEDGE_FAKE_CASE";
/// How the child's result line starts.
const RESULT_PREFIX: &str = "FAKE-LIBRARY-RESULT";

/// The child: opens device 0 with whatever libraries the loader finds and
/// prints the outcome on one line. Does nothing in a plain test run.
#[test]
fn fake_library_child() {
    let Some(case) = std::env::var_os(CASE_VARIABLE) else {
        return;
    };
    let rt = Runtime::builder().num_threads(1).build().unwrap();
    let (kind, text) = match Device::open_in(&rt, 0) {
        Ok(dev) => ("Ok", format!("opened {} streams", dev.num_streams())),
        Err(e) => {
            let kind = match &e {
                GpuError::NoDriver { .. } => "NoDriver",
                GpuError::NoBlas { .. } => "NoBlas",
                GpuError::NoDevice { .. } => "NoDevice",
                GpuError::Driver(_) => "Driver",
                _ => "Other",
            };
            (kind, e.to_string())
        }
    };
    // On a line of its own (the harness has written "test ... " before).
    println!(
        "\n{RESULT_PREFIX} {} {kind} {}",
        case.to_string_lossy(),
        text.replace('\n', " ")
    );
}

/// The names in the list `name` of src/gpu/libraries.rs (the symbols the
/// crate checks), so that the fakes follow the list as it changes.
fn symbols(name: &str) -> Vec<&'static str> {
    let source = include_str!("../src/gpu/libraries.rs");
    let header = format!("const {name}: &[&str] = &[");
    let start = source
        .find(&header)
        .unwrap_or_else(|| panic!("src/gpu/libraries.rs has no `{header}`"))
        + header.len();
    let end = start + source[start..].find("];").expect("the list ends");
    let names: Vec<&str> = source[start..end].split('"').skip(1).step_by(2).collect();
    assert!(names.len() > 3, "{name}: {names:?}");
    names
}

/// The values the fake driver's implemented functions give.
struct Driver {
    /// What `cuInit` returns (0: success).
    init: i32,
    /// What `cuDriverGetVersion` reports.
    version: i32,
    /// What `cuDeviceGetCount` reports.
    count: i32,
}

const WORKING: Driver = Driver {
    init: 0,
    version: 13000,
    count: 1,
};

/// C source of a libcuda exporting `exports`: the few functions the check
/// calls behave as `driver` says, every other one returns
/// CUDA_ERROR_NOT_SUPPORTED (801, a valid CUresult: what a caller reads
/// must be one).
fn driver_source(exports: &[&str], driver: &Driver) -> String {
    let mut c = String::from("typedef int CUresult;\n");
    for &name in exports {
        let body = match name {
            "cuInit" => format!("CUresult cuInit(unsigned int f) {{ (void)f; return {}; }}", driver.init),
            "cuDriverGetVersion" => format!(
                "CUresult cuDriverGetVersion(int *v) {{ *v = {}; return 0; }}",
                driver.version
            ),
            "cuDeviceGetCount" => format!(
                "CUresult cuDeviceGetCount(int *n) {{ *n = {}; return 0; }}",
                driver.count
            ),
            "cuGetErrorString" => "CUresult cuGetErrorString(CUresult e, const char **s) { (void)e; *s = \"an error of the fake libcuda\"; return 0; }".to_string(),
            "cuGetErrorName" => "CUresult cuGetErrorName(CUresult e, const char **s) { (void)e; *s = \"FAKE_ERROR\"; return 0; }".to_string(),
            _ => format!("CUresult {name}(void) {{ return 801; }}"),
        };
        c.push_str(&body);
        c.push('\n');
    }
    c
}

/// C source of a libcublas exporting `exports`: `cublasGetProperty` says
/// it is version `major`, every other one returns
/// CUBLAS_STATUS_NOT_SUPPORTED (15).
fn blas_source_of_version(exports: &[&str], major: i32) -> String {
    let mut c = String::new();
    for &name in exports {
        let body = match name {
            "cublasGetProperty" => format!(
                "int cublasGetProperty(int type, int *value) {{ *value = type == 0 ? {major} : 0; return 0; }}"
            ),
            _ => format!("int {name}(void) {{ return 15; }}"),
        };
        c.push_str(&body);
        c.push('\n');
    }
    c
}

/// [`blas_source_of_version`] for cuBLAS 13.
fn blas_source(exports: &[&str]) -> String {
    blas_source_of_version(exports, 13)
}

/// A directory of fake libraries for one case, removed when dropped.
struct Fakes {
    dir: PathBuf,
}

impl Fakes {
    fn new(case: &str) -> Fakes {
        let dir =
            std::env::temp_dir().join(format!("selvedge-fake-libs-{}-{case}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Fakes { dir }
    }

    /// Compiles `source` into `file` (with SONAME `file`), and links each
    /// of `aliases` to it: cudarc asks the loader for `libcuda.so` before
    /// `libcuda.so.1` (and `libcublas.so` before `libcublas.so.13`), and a
    /// real library under that name elsewhere on the machine must not be
    /// found first.
    fn library(&self, file: &str, aliases: &[&str], source: &str) {
        self.library_in(&self.dir, file, aliases, source);
    }

    /// [`Fakes::library`] into `dir` (the C source stays in the fakes'
    /// directory).
    fn library_in(&self, dir: &Path, file: &str, aliases: &[&str], source: &str) {
        let c = self.dir.join(format!("{file}.c"));
        std::fs::write(&c, source).unwrap();
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(dir.join(file))
            .arg(format!("-Wl,-soname,{file}"))
            .arg(&c)
            .output()
            .expect("running cc");
        assert!(
            out.status.success(),
            "cc failed on {}:\n{}",
            c.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        for alias in aliases {
            std::os::unix::fs::symlink(file, dir.join(alias)).unwrap();
        }
    }

    /// A fake driver exporting `exports`.
    fn driver(&self, exports: &[&str], driver: &Driver) {
        self.library(
            "libcuda.so.1",
            &["libcuda.so"],
            &driver_source(exports, driver),
        );
    }

    /// A fake cuBLAS exporting `exports`; returns its path.
    fn blas(&self, exports: &[&str]) -> PathBuf {
        self.library("libcublas.so.13", &["libcublas.so"], &blas_source(exports));
        self.dir.join("libcublas.so.13")
    }

    /// Runs the child for `case` with these libraries (and `SELVEDGE_CUBLAS`
    /// set to `cublas`, or unset), checks that it exited successfully after
    /// printing its result, and returns the result's kind and text.
    fn open(&self, case: &str, cublas: Option<&Path>) -> (String, String) {
        self.open_with(case, cublas, &[])
    }

    /// [`Fakes::open`] with more environment variables for the child (the
    /// Python installations' variables are removed unless given here).
    fn open_with(
        &self,
        case: &str,
        cublas: Option<&Path>,
        env: &[(&str, &Path)],
    ) -> (String, String) {
        let mut command = Command::new(std::env::current_exe().unwrap());
        for var in ["VIRTUAL_ENV", "CONDA_PREFIX", "PYTHONPATH"] {
            command.env_remove(var);
        }
        command.env("HOME", &self.dir);
        for (var, value) in env {
            command.env(var, value);
        }
        command
            .args([
                "fake_library_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CASE_VARIABLE, case)
            .env("LD_LIBRARY_PATH", &self.dir)
            .env_remove("SELVEDGE_CUBLAS")
            .env_remove("LD_PRELOAD")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if let Some(path) = cublas {
            command.env("SELVEDGE_CUBLAS", path);
        }
        let mut child = command.spawn().expect("starting the child");
        let started = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > Duration::from_secs(60) {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "{case}: the child hung for 60 s:\n{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let prefix = format!("{RESULT_PREFIX} {case} ");
        let result = stdout.lines().find_map(|l| l.strip_prefix(&prefix));
        assert!(
            out.status.success() && result.is_some() && stdout.contains("1 passed"),
            "{case}: the child failed ({}), or printed no result:\n--- stdout\n{stdout}--- stderr\n{stderr}",
            out.status
        );
        let (kind, text) = result
            .unwrap()
            .split_once(' ')
            .unwrap_or((result.unwrap(), ""));
        eprintln!("{case}: Device::open returned {kind}: {text}");
        (kind.to_string(), text.to_string())
    }
}

impl Drop for Fakes {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether the system C compiler runs (every Rust-on-Linux machine has
/// one, as rustc links with it); says so when it does not.
fn have_cc(test: &str) -> bool {
    let ok = Command::new("cc")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("{test}: skipped: no C compiler (`cc`) to build the fake libraries with");
    }
    ok
}

fn assert_mentions(case: &str, text: &str, words: &[&str]) {
    for w in words {
        assert!(text.contains(w), "{case}: {text:?} does not mention {w:?}");
    }
}

/// The CUDA toolkit's stub libcuda (every symbol, but `cuInit` returns
/// CUDA_ERROR_STUB_LIBRARY): `NoDriver`, saying it is the stub.
#[test]
fn a_stub_driver_is_no_driver_and_says_stub() {
    if !have_cc("stub driver") {
        return;
    }
    let fakes = Fakes::new("stub");
    fakes.driver(
        &symbols("DRIVER_SYMBOLS"),
        &Driver {
            init: 34, // CUDA_ERROR_STUB_LIBRARY
            ..WORKING
        },
    );
    let (kind, text) = fakes.open("stub", None);
    assert_eq!(kind, "NoDriver", "stub: {text}");
    assert_mentions("stub", &text, &["CUDA_ERROR_STUB_LIBRARY", "stub"]);
}

/// A libcuda missing a symbol the crate (or cudarc for it) calls:
/// `NoDriver` naming the first one missing, for a library with nothing but
/// `cuInit`, one without `cuLaunchHostFunc`, and one without the list's
/// last symbol (so the whole list is checked).
#[test]
fn a_driver_missing_a_symbol_is_no_driver_naming_it() {
    if !have_cc("driver missing a symbol") {
        return;
    }
    let all = symbols("DRIVER_SYMBOLS");
    let last = *all.last().unwrap();
    for (case, exports, missing) in [
        ("only-cuinit", vec!["cuInit"], all[1]),
        (
            "no-cuLaunchHostFunc",
            all.iter()
                .copied()
                .filter(|&s| s != "cuLaunchHostFunc")
                .collect(),
            "cuLaunchHostFunc",
        ),
        (
            "no-last-symbol",
            all.iter().copied().filter(|&s| s != last).collect(),
            last,
        ),
    ] {
        let fakes = Fakes::new(case);
        fakes.driver(&exports, &WORKING);
        let (kind, text) = fakes.open(case, None);
        assert_eq!(kind, "NoDriver", "{case}: {text}");
        assert_mentions(case, &text, &[&format!("no {missing}:"), "12.0"]);
    }
}

/// A driver older than CUDA 12.0 (11.8): `NoDriver`, saying 12.0 is needed.
#[test]
fn an_old_driver_is_no_driver_saying_12_0_is_needed() {
    if !have_cc("old driver") {
        return;
    }
    let fakes = Fakes::new("cuda-11.8");
    fakes.driver(
        &symbols("DRIVER_SYMBOLS"),
        &Driver {
            version: 11080,
            ..WORKING
        },
    );
    let (kind, text) = fakes.open("cuda-11.8", None);
    assert_eq!(kind, "NoDriver", "cuda-11.8: {text}");
    assert_mentions("cuda-11.8", &text, &["CUDA 11.8", "12.0"]);
}

/// `cuInit` failing with other errors: a driver that does not match the
/// kernel module is `NoDriver` saying so; one that sees no device
/// (CUDA_ERROR_NO_DEVICE: no GPU, or CUDA_VISIBLE_DEVICES hides them all)
/// is `NoDevice` with a count of 0.
#[test]
fn a_mismatched_driver_or_one_without_devices_says_so() {
    if !have_cc("cuInit errors") {
        return;
    }
    let all = symbols("DRIVER_SYMBOLS");
    let fakes = Fakes::new("mismatch");
    fakes.driver(
        &all,
        &Driver {
            init: 803, // CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
            ..WORKING
        },
    );
    let (kind, text) = fakes.open("mismatch", None);
    assert_eq!(kind, "NoDriver", "mismatch: {text}");
    assert_mentions(
        "mismatch",
        &text,
        &["CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "kernel module"],
    );

    let fakes = Fakes::new("no-device");
    fakes.driver(
        &all,
        &Driver {
            init: 100, // CUDA_ERROR_NO_DEVICE
            ..WORKING
        },
    );
    let (kind, text) = fakes.open("no-device", None);
    assert_eq!(kind, "NoDevice", "no-device: {text}");
    assert_mentions("no-device", &text, &["sees 0 device"]);
}

/// A working driver and `SELVEDGE_CUBLAS` naming a file that does not
/// exist: `NoBlas` naming the variable and the path.
#[test]
fn selvedge_cublas_naming_no_file_is_no_blas_naming_the_variable() {
    if !have_cc("SELVEDGE_CUBLAS without a file") {
        return;
    }
    let fakes = Fakes::new("cublas-missing");
    fakes.driver(&symbols("DRIVER_SYMBOLS"), &WORKING);
    let path = fakes.dir.join("nowhere/libcublas.so.13");
    let (kind, text) = fakes.open("cublas-missing", Some(&path));
    assert_eq!(kind, "NoBlas", "cublas-missing: {text}");
    assert_mentions(
        "cublas-missing",
        &text,
        &[
            "SELVEDGE_CUBLAS",
            &path.display().to_string(),
            "no such file",
        ],
    );
}

/// A working driver and `SELVEDGE_CUBLAS` naming a cuBLAS (SONAME
/// libcublas.so.13) without `cublasGemmStridedBatchedEx`: `NoBlas` naming
/// the missing symbol.
#[test]
fn a_cublas_missing_a_symbol_is_no_blas_naming_it() {
    if !have_cc("cuBLAS missing a symbol") {
        return;
    }
    let fakes = Fakes::new("cublas-incomplete");
    fakes.driver(&symbols("DRIVER_SYMBOLS"), &WORKING);
    let exports: Vec<&str> = symbols("BLAS_SYMBOLS")
        .into_iter()
        .filter(|&s| s != "cublasGemmStridedBatchedEx")
        .collect();
    let path = fakes.blas(&exports);
    let (kind, text) = fakes.open("cublas-incomplete", Some(&path));
    assert_eq!(kind, "NoBlas", "cublas-incomplete: {text}");
    assert_mentions("cublas-incomplete", &text, &["cublasGemmStridedBatchedEx"]);
}

/// Libraries that pass every check but a driver whose calls fail
/// (`cuDeviceGet` returns CUDA_ERROR_NOT_SUPPORTED): the failure comes back
/// as a driver error (not "unavailable": the driver is there), never as a
/// panic inside cudarc.
#[test]
fn a_driver_failing_after_the_checks_is_a_driver_error_not_a_panic() {
    if !have_cc("driver failing after the checks") {
        return;
    }
    let fakes = Fakes::new("failing-driver");
    fakes.driver(&symbols("DRIVER_SYMBOLS"), &WORKING);
    let path = fakes.blas(&symbols("BLAS_SYMBOLS"));
    let (kind, text) = fakes.open("failing-driver", Some(&path));
    assert_eq!(kind, "Driver", "failing-driver: {text}");
    assert_mentions("failing-driver", &text, &["CUDA_ERROR_NOT_SUPPORTED"]);
}

/// Whether the machine's loader finds a real cuBLAS by itself (in its
/// cache): then cudarc takes that one before any searched for, and the
/// wheel cases below cannot show the search. Says so when it does.
fn loader_has_cublas(test: &str) -> bool {
    let listed = Command::new("ldconfig")
        .arg("-p")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).contains("libcublas.so"))
        .unwrap_or(false);
    if listed {
        eprintln!("{test}: skipped: the loader's cache lists a cuBLAS, which is found first");
    }
    listed
}

impl Fakes {
    /// A fake cuBLAS exporting `exports` where a CUDA 13 Python wheel puts
    /// it (`<venv>/lib/python3.12/site-packages/nvidia/cu13/lib`), off the
    /// loader's path; returns the virtual environment's root.
    fn wheel_blas(&self, exports: &[&str]) -> PathBuf {
        let venv = self.dir.join("venv");
        let lib = venv.join("lib/python3.12/site-packages/nvidia/cu13/lib");
        std::fs::create_dir_all(&lib).unwrap();
        self.library_in(&lib, "libcublas.so.13", &[], &blas_source(exports));
        venv
    }
}

/// No cuBLAS on the loader's path and none named, but one in the active
/// virtual environment's CUDA 13 wheel: it is found there and checked (its
/// missing symbol named), which also shows that cudarc's loader is handed
/// the library loaded from that path (it asks by SONAME only).
#[test]
fn a_cublas_in_a_python_wheel_is_found_and_checked() {
    if !have_cc("cuBLAS in a wheel") || loader_has_cublas("cuBLAS in a wheel") {
        return;
    }
    let fakes = Fakes::new("wheel-incomplete");
    fakes.driver(&symbols("DRIVER_SYMBOLS"), &WORKING);
    let exports: Vec<&str> = symbols("BLAS_SYMBOLS")
        .into_iter()
        .filter(|&s| s != "cublasSgemmStridedBatched")
        .collect();
    let venv = fakes.wheel_blas(&exports);
    let (kind, text) = fakes.open_with("wheel-incomplete", None, &[("VIRTUAL_ENV", &venv)]);
    assert_eq!(kind, "NoBlas", "wheel-incomplete: {text}");
    assert_mentions("wheel-incomplete", &text, &["cublasSgemmStridedBatched"]);

    // A complete one passes the checks (the fake driver then fails its
    // first real call), and without the wheel nothing is found.
    let fakes = Fakes::new("wheel-complete");
    fakes.driver(&symbols("DRIVER_SYMBOLS"), &WORKING);
    let venv = fakes.wheel_blas(&symbols("BLAS_SYMBOLS"));
    let (kind, text) = fakes.open_with("wheel-complete", None, &[("VIRTUAL_ENV", &venv)]);
    assert_eq!(kind, "Driver", "wheel-complete: {text}");
    let (kind, text) = fakes.open("wheel-absent", None);
    assert_eq!(kind, "NoBlas", "wheel-absent: {text}");
    assert_mentions("wheel-absent", &text, &["SELVEDGE_CUBLAS"]);
}

/// A cuBLAS that exports every name the crate calls but says it is version
/// 11 (older ones export the same names, with other meanings for some
/// arguments): `NoBlas` saying 12 is needed.
#[test]
fn an_old_cublas_is_no_blas_saying_12_is_needed() {
    if !have_cc("old cuBLAS") {
        return;
    }
    let fakes = Fakes::new("cublas-11");
    fakes.driver(&symbols("DRIVER_SYMBOLS"), &WORKING);
    fakes.library(
        "libcublas.so.13",
        &["libcublas.so"],
        &blas_source_of_version(&symbols("BLAS_SYMBOLS"), 11),
    );
    let path = fakes.dir.join("libcublas.so.13");
    let (kind, text) = fakes.open("cublas-11", Some(&path));
    assert_eq!(kind, "NoBlas", "cublas-11: {text}");
    assert_mentions("cublas-11", &text, &["version 11", "12 or newer"]);
}

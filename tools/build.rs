//! Says whether this compiler has the AVX-512 intrinsics (stable since
//! Rust 1.89), for the GEMM demonstration's microkernel
//! (`tools/src/microkernel.rs`): the crate itself builds with
//! older compilers, and its programs, benchmarks and tests use the AVX2
//! kernel there. selvedge itself does not depend on it.

use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    // "rustc 1.95.0 (59807616e 2026-04-14)": the major and minor numbers.
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|v| {
            let number = v.split_whitespace().nth(1)?;
            let mut parts = number.split(['.', '-']);
            let major = parts.next()?.parse::<u32>().ok()?;
            let minor = parts.next()?.parse::<u32>().ok()?;
            Some((major, minor))
        });
    if version.is_some_and(|v| v >= (1, 89)) {
        println!("cargo::rustc-cfg=avx512_intrinsics");
    }
}

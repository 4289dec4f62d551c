//! Says whether this compiler has the AVX-512 intrinsics (stable since
//! Rust 1.89), for the GEMM demonstration's microkernel
//! (`benches/workloads/microkernel.rs`): the crate itself builds with
//! older compilers, and its benchmarks and examples use the AVX2 kernel
//! there. Nothing of the library depends on it.

use std::process::Command;

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let minor = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|v| v.split('.').nth(1).and_then(|m| m.parse::<u32>().ok()));
    if minor.is_some_and(|m| m >= 89) {
        println!("cargo::rustc-cfg=avx512_intrinsics");
    }
}

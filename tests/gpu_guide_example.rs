//! The GPU example that opens the guide's GPU page (`docs/guide/gpu.md`,
//! also the last example of `selvedge::gpu`'s docs; both are `no_run`),
//! run as a test with its values checked. Without a GPU it says it skipped
//! and passes; with `SELVEDGE_REQUIRE_GPU=1` a missing GPU fails it. A
//! second test, which runs everywhere, checks that this file still holds
//! the guide's example line for line, and that the module docs' copy is
//! the same code.
#![cfg(feature = "cuda")]

mod gpu_support;

use selvedge::gpu::{gemm, BatchedGemm, Device, GpuError};

/// The guide's example: its `main`, renamed, with checks added (marked
/// "added"); every other line is the guide's, in its order (rustfmt
/// would reformat some of them).
#[rustfmt::skip]
fn guide_example() -> Result<(), GpuError> {
    // Err(e) with e.is_unavailable() without a GPU: never a panic.
    let dev = Device::open(0)?;
    let g = BatchedGemm { batch: 64, m: 256, n: 256, k: 256 };
    let (a, b) = (vec![1.0f32; g.a_len()], vec![0.5f32; g.b_len()]);
    // Runs on a worker with that worker's stream; returns once enqueued.
    let product = dev.spawn(move |s| {
        let a = s.stream().clone_htod(&a)?;
        let b = s.stream().clone_htod(&b)?;
        let mut c = s.stream().alloc_zeros::<f32>(g.c_len())?;
        gemm(s.blas(), g, &a, &b, &mut c)?; // row-major strided-batched SGEMM
        Ok(c)
    });
    // A GPU task behind it: its stream waits on the device, not the host.
    let summary = dev.spawn_delayed([product.gpu_dep()], |s| {
        Ok(s.stream().alloc_zeros::<f32>(1)?)
    });
    // A CPU task: runs when the stream's callback says the product is done.
    let cpu = selvedge::spawn_delayed([product.dep()], || "product ready");
    let c = product.join()?;           // its value, once its work is complete
    let host = dev.spawn(move |s| s.download(&c)).join()?; // pinned memory
    assert_eq!(host.as_slice()?[0], 128.0);
    // Added: the whole product, each entry k · 1 · 0.5 = 128 (exact in
    // f32, whatever order cuBLAS sums in).
    assert_eq!(host.len(), g.c_len());
    if let Some((i, x)) = host
        .as_slice()?
        .iter()
        .enumerate()
        .find(|&(_, &x)| x != 128.0)
    {
        panic!("entry {i} of the product is {x}, not 128");
    }
    assert_eq!(cpu.join(), "product ready");
    summary.join()?;
    Ok(())
}

#[test]
fn the_guides_gpu_example_computes_its_product() {
    match guide_example() {
        Ok(()) => {}
        Err(e) if e.is_unavailable() => {
            if gpu_support::gpu_required() {
                panic!("the guide's GPU example: SELVEDGE_REQUIRE_GPU=1 but {e}");
            }
            eprintln!("the guide's GPU example: skipped: {e}");
        }
        Err(e) => panic!("the guide's GPU example failed: {e}"),
    }
}

/// The example's lines: the guide block's, trimmed, blank lines left out.
fn guide_block() -> Vec<&'static str> {
    let page = include_str!("../docs/guide/gpu.md");
    let block = page
        .split("```rust,no_run\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("docs/guide/gpu.md has a ```rust,no_run block");
    block
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect()
}

#[test]
fn this_file_holds_the_guides_gpu_example() {
    let block = guide_block();
    assert!(
        block.iter().any(|l| l.contains("Device::open(0)")),
        "the guide's first GPU block is not the example: {block:?}"
    );
    // Each line of the guide's, in order, among this file's lines (the added
    // checks come in between).
    let this = include_str!("gpu_guide_example.rs");
    let mut mine = this.lines().map(str::trim);
    for line in &block {
        let wanted = if *line == "fn main() -> Result<(), GpuError> {" {
            "fn guide_example() -> Result<(), GpuError> {"
        } else {
            line
        };
        assert!(
            mine.any(|m| m == wanted),
            "the guide's GPU example changed: its line {line:?} is not in tests/gpu_guide_example.rs (in order): copy the example here again"
        );
    }
    // The module docs' copy of the example is the same code (its comments
    // may differ).
    let docs: String = include_str!("../src/gpu/mod.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    let doc_example = docs
        .split("```no_run\n")
        .skip(1)
        .filter_map(|b| b.split("\n```").next())
        .find(|b| b.contains("BatchedGemm { batch: 64"))
        .expect("selvedge::gpu's docs hold the guide's example");
    let code = |lines: &mut dyn Iterator<Item = &str>| -> Vec<String> {
        lines
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("//"))
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        code(&mut block.iter().copied()),
        code(&mut doc_example.lines()),
        "the guide's GPU example and the one in src/gpu/mod.rs differ"
    );
}

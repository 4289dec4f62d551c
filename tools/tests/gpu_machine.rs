//! The GPU bundle's report as a section of `BENCHMARKS.md`.

use selvedge_tools::gpu_machine::{read_section, section};

/// A report as the bundle's run script writes it (shortened).
const SUMMARY: &str = "\
gpu-bundle: step output before the summary

## GPU checks: summary

Mode: GPU (NVIDIA H200, 580.65.06); cuBLAS: /x/libcublas.so.13; 16 cores.
Bundle: commit 0123456789ab, built 2026-11-30 03:00 UTC.

| step | result | time | note |
|---|---|---:|---|
| tests gpu | pass | 41 | |

### Demonstration (`batched_gemm --batch 256 --size 256 --threads 16 --samples 11`)

```text
# not a heading: inside a code block
selvedge gpu 3.1 ms
```

### CPU scaling (bench_report, 5 samples; the whole reports in out/scaling-N.md)

| workload: selvedge / rayon, median ms | 1 thread | 16 threads |
|---|---:|---:|
| fib | 10 / 12 | 1 / 1.5 |
";

#[test]
fn the_report_becomes_a_section_with_its_headings_one_level_down() {
    let s = section(SUMMARY).expect("a report");
    assert!(s.starts_with("## A GPU machine\n"), "{s}");
    // What the run printed before its summary is not part of it.
    assert!(!s.contains("step output before"), "{s}");
    assert!(s.contains("\n### The checks\n"), "{s}");
    assert!(!s.contains("GPU checks: summary"), "{s}");
    assert!(s.contains("\n#### Demonstration (`batched_gemm"), "{s}");
    assert!(s.contains("\n#### CPU scaling (bench_report"), "{s}");
    // Lines in a code block are the program's output, kept as written.
    assert!(
        s.contains("\n# not a heading: inside a code block\n"),
        "{s}"
    );
    // Everything else as written, figures included.
    assert!(s.contains("Bundle: commit 0123456789ab"), "{s}");
    assert!(s.contains("| fib | 10 / 12 | 1 / 1.5 |"), "{s}");
}

#[test]
fn a_file_that_is_not_a_gpu_runs_report_is_refused_naming_it() {
    assert!(section("# selvedge benchmarks\n\n| a | b |\n").is_err());
    let no_gpu = "## GPU checks: summary\n\nMode: no GPU (no libcuda).\n";
    let skipped = section(no_gpu).unwrap_err();
    assert!(skipped.contains("a run without a GPU"), "{skipped}");
    assert!(skipped.contains("no libcuda"), "{skipped}");
    let dir = std::env::temp_dir().join(format!("selvedge-gpu-machine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = read_section(&dir).unwrap_err();
    assert!(
        missing.contains("cannot read the GPU bundle's report"),
        "{missing}"
    );
    assert!(missing.contains("summary.md"), "{missing}");
    std::fs::write(dir.join("summary.md"), "no report here\n").unwrap();
    let wrong = read_section(&dir).unwrap_err();
    assert!(
        wrong.contains("summary.md: not a GPU bundle's report"),
        "{wrong}"
    );
    std::fs::write(dir.join("summary.md"), SUMMARY).unwrap();
    assert_eq!(read_section(&dir).unwrap(), section(SUMMARY).unwrap());
    std::fs::remove_dir_all(&dir).unwrap();
}

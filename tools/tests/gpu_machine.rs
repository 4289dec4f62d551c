//! The GPU bundle's reports as a section of `BENCHMARKS.md`.

use selvedge_tools::gpu_machine::{read_section, run, section, NOT_INCLUDED};

/// A report as the bundle's run script writes it (shortened).
const SUMMARY: &str = "\
gpu-bundle: step output before the summary

## GPU checks: summary

Mode: GPU (NVIDIA H200, 580.65.06); cuBLAS: /x/libcublas.so.13; 16 cores.

Bundle: commit 0123456789ab, built 2026-11-30 03:00 UTC on x86_64 (Linux).

| step | result | time | note |
|---|---|---:|---|
| test gpu | pass | 41 | |

### Demonstration (`batched_gemm --batch 256 --size 256 --threads 16 --samples 11`)

```text
# not a heading: inside a code block
selvedge gpu 3.1 ms
```

### CPU scaling (bench_report, 5 samples; the whole reports in scaling-N.md beside this summary)

| workload: selvedge / rayon, median ms | 1 thread | 16 threads |
|---|---:|---:|
| fib | 10 / 12 | 1 / 1.5 |
";

#[test]
fn a_report_becomes_a_subsection_with_its_headings_one_level_down() {
    let s = run(SUMMARY).expect("a report");
    assert!(s.starts_with("### A run of the GPU bundle\n"), "{s}");
    // What the call printed before its summary is not part of it.
    assert!(!s.contains("step output before"), "{s}");
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
fn the_section_holds_every_run_given_in_order_or_says_where_they_come_from() {
    assert_eq!(section(&[]), NOT_INCLUDED);
    assert!(NOT_INCLUDED.starts_with("## A GPU machine\n"));
    let second = SUMMARY.replace("0123456789ab", "ba9876543210");
    let s = section(&[run(SUMMARY).unwrap(), run(&second).unwrap()]);
    assert!(s.starts_with("## A GPU machine\n"), "{s}");
    assert_eq!(s.matches("### A run of the GPU bundle").count(), 2, "{s}");
    let (first_at, second_at) = (
        s.find("0123456789ab").unwrap(),
        s.find("ba9876543210").unwrap(),
    );
    assert!(first_at < second_at, "{s}");
}

#[test]
fn a_file_that_is_not_a_gpu_runs_report_is_refused_naming_it() {
    assert!(run("# selvedge benchmarks\n\n| a | b |\n").is_err());
    let no_gpu = "## GPU checks: summary\n\nMode: no GPU (no libcuda).\n";
    let skipped = run(no_gpu).unwrap_err();
    assert!(skipped.contains("a run without a GPU"), "{skipped}");
    assert!(skipped.contains("no libcuda"), "{skipped}");

    let dir = std::env::temp_dir().join(format!("selvedge-gpu-machine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let missing = read_section(std::slice::from_ref(&dir)).unwrap_err();
    assert!(
        missing.contains("cannot read the GPU bundle's report"),
        "{missing}"
    );
    assert!(missing.contains("summary.md"), "{missing}");
    std::fs::write(dir.join("summary.md"), "no report here\n").unwrap();
    let wrong = read_section(std::slice::from_ref(&dir)).unwrap_err();
    assert!(
        wrong.contains("summary.md: not a GPU bundle's report"),
        "{wrong}"
    );
    // A folder stands for its last call's report; a file is one call's.
    std::fs::write(dir.join("summary.md"), SUMMARY).unwrap();
    let call = dir.join("summary-20261130T030000Z.md");
    std::fs::write(&call, SUMMARY.replace("0123456789ab", "ba9876543210")).unwrap();
    let both = read_section(&[call, dir.clone()]).unwrap();
    assert_eq!(
        both.matches("### A run of the GPU bundle").count(),
        2,
        "{both}"
    );
    assert!(both.find("ba9876543210").unwrap() < both.find("0123456789ab").unwrap());
    assert_eq!(read_section(&[]).unwrap(), NOT_INCLUDED);
    std::fs::remove_dir_all(&dir).unwrap();
}

//! The GPU machine's part of `BENCHMARKS.md`: the report a run of the GPU
//! bundle writes (`summary.md`: its checks, the GPU benchmarks, and the
//! CPU table from 1 to 16 threads), as a section of `bench_report`'s
//! document. `bench_report` does not measure these itself: they need the
//! GPU machine, where the bundle runs without a Rust toolchain.

use std::path::Path;

/// The name of the report the bundle's run script writes in its output
/// folder.
pub const SUMMARY: &str = "summary.md";

/// The report's title, as the run script writes it.
const TITLE: &str = "## GPU checks: summary";

/// Reads `dir/summary.md` (the bundle's output folder, copied back from
/// the GPU machine) and returns it as a section of the document
/// ([`section`]).
///
/// # Errors
/// The file cannot be read, it is not the bundle's report, or the run had
/// no GPU: the message names the path and what was wrong.
pub fn read_section(dir: &Path) -> Result<String, String> {
    let path = dir.join(SUMMARY);
    let summary = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "cannot read the GPU bundle's report {}: {e}",
            path.display()
        )
    })?;
    section(&summary).map_err(|why| format!("{}: {why}", path.display()))
}

/// `summary`, the bundle's report, under a heading of the document: its
/// headings one level down (its own title becomes "The checks"), the rest
/// as written.
///
/// # Errors
/// `summary` is not the bundle's report (no title), or the run found no
/// GPU (its checks were skipped: there is nothing to report).
pub fn section(summary: &str) -> Result<String, String> {
    let Some(start) = summary.find(TITLE) else {
        return Err(format!("not a GPU bundle's report: no \"{TITLE}\" heading"));
    };
    let body = &summary[start..];
    if let Some(mode) = body.lines().find(|l| l.starts_with("Mode: no GPU")) {
        return Err(format!(
            "a run without a GPU, whose checks were skipped ({mode})"
        ));
    }
    let mut out = String::from(
        "## A GPU machine\n\n\
         The GPU checks, the GPU benchmarks and the CPU table from 1 to 16 threads, \
         from one run of the GPU bundle on the machine it names, as its run script \
         wrote them (`.gpu-bundle/run.sh`, see `docs/DEVELOPING.md`). The bundle's \
         commit and date are its own, not necessarily this report's.\n\n",
    );
    let mut in_code = false;
    for line in body.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && line == TITLE {
            out.push_str("### The checks");
        } else if !in_code && line.starts_with('#') {
            out.push('#');
            out.push_str(line);
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    Ok(out)
}

/// The section printed when no bundle's report is given: where those
/// figures come from.
pub const NOT_INCLUDED: &str = "## A GPU machine\n\n\
    Not in this report. The GPU figures and the CPU table from 1 to 16 threads \
    come from a run of the GPU bundle on a GPU machine (`.gpu-bundle/run.sh`, \
    see `docs/DEVELOPING.md`); `bench_report --markdown --gpu-machine DIR` adds \
    its report, `DIR/summary.md`, here.\n";

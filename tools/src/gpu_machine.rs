//! The GPU machine's part of `BENCHMARKS.md`: the reports runs of the GPU
//! bundle write (`summary.md`: their checks, the GPU benchmarks, and the
//! CPU table from 1 to 16 threads), as a section of `bench_report`'s
//! document. `bench_report` does not measure these itself: they need the
//! GPU machine, where the bundle runs without a Rust toolchain.

use std::path::{Path, PathBuf};

/// The report of the run script's last call, in its output folder.
pub const SUMMARY: &str = "summary.md";

/// The report's title, as the run script writes it.
const TITLE: &str = "## GPU checks: summary";

/// The reports at `paths`, in that order: a file is one call's report (the
/// script keeps one per call, `summary-<UTC time>.md`), a folder stands for
/// its [`SUMMARY`], the last call's. Returns the document's section
/// ([`section`]).
///
/// # Errors
/// A report cannot be read, is not the bundle's report, or comes from a
/// run without a GPU: the message names the path and what was wrong.
pub fn read_section(paths: &[PathBuf]) -> Result<String, String> {
    let mut runs = Vec::with_capacity(paths.len());
    for path in paths {
        let file = if path.is_dir() {
            path.join(SUMMARY)
        } else {
            path.clone()
        };
        runs.push(read_run(&file)?);
    }
    Ok(section(&runs))
}

/// One call's report, from `file`, as a subsection ([`run`]).
fn read_run(file: &Path) -> Result<String, String> {
    let summary = std::fs::read_to_string(file).map_err(|e| {
        format!(
            "cannot read the GPU bundle's report {}: {e}",
            file.display()
        )
    })?;
    run(&summary).map_err(|why| format!("{}: {why}", file.display()))
}

/// One call's report as a subsection of the document: its title becomes
/// "A run of the GPU bundle", its other headings go one level down (not
/// the lines of its code blocks, which are a program's output), the rest
/// is as written.
///
/// # Errors
/// `summary` is not the bundle's report (no title), or the run found no
/// GPU (its checks were skipped: there is nothing to report).
pub fn run(summary: &str) -> Result<String, String> {
    let Some(start) = summary.find(TITLE) else {
        return Err(format!("not a GPU bundle's report: no \"{TITLE}\" heading"));
    };
    let body = &summary[start..];
    if let Some(mode) = body.lines().find(|l| l.starts_with("Mode: no GPU")) {
        return Err(format!(
            "a run without a GPU, whose checks were skipped ({mode})"
        ));
    }
    let mut out = String::new();
    let mut in_code = false;
    for line in body.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
        }
        if !in_code && line == TITLE {
            out.push_str("### A run of the GPU bundle");
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

/// The GPU machine's section: [`NOT_INCLUDED`] without runs, else the
/// runs' subsections ([`run`]) under a heading that says where they come
/// from.
pub fn section(runs: &[String]) -> String {
    if runs.is_empty() {
        return NOT_INCLUDED.to_string();
    }
    let mut out = String::from(
        "## A GPU machine\n\n\
         Runs of the GPU bundle on the machine each names, as its run script \
         wrote their reports (`.gpu-bundle/run.sh`, see `docs/DEVELOPING.md`): \
         the steps each ran and their results, the GPU benchmarks and the CPU \
         table from 1 to 16 threads where it ran them. Each names the commit \
         its bundle was built from, not necessarily this report's.\n",
    );
    for r in runs {
        out.push('\n');
        out.push_str(r);
    }
    out
}

/// The section when no run's report is given: where those figures come
/// from.
pub const NOT_INCLUDED: &str = "## A GPU machine\n\n\
    Not in this report. The GPU figures and the CPU table from 1 to 16 threads \
    come from runs of the GPU bundle on a GPU machine (`.gpu-bundle/run.sh`, \
    see `docs/DEVELOPING.md`); `bench_report --markdown --gpu-machine PATH` adds \
    their reports here.\n";

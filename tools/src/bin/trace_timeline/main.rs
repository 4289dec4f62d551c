//! Renders a trace into an SVG timeline picture.
//!
//! The input is a Chrome trace-event JSON file (the format that Perfetto and
//! `chrome://tracing` open), such as the one selvedge's tracer writes: an
//! object with a `traceEvents` array (a bare array of events is accepted
//! too). The picture has one row per thread (workers first, in the order of
//! their `thread_sort_index` metadata, then the threads outside the pool),
//! labelled with the `thread_name` metadata and the share of the shown
//! window that the row spent in tasks. On each row:
//!
//! - every task slice (`"ph":"X"`, or a `B`/`E` pair) is a bar from `ts`
//!   to `ts + dur`, coloured by its name: the ten names with the most
//!   time in the window get a colour of their own, the rest share a grey.
//!   Slices nested in one another (a task that waits runs other tasks
//!   inside its own slice) are drawn as thinner bars stacked inside their
//!   parent, one inset per level, so that no slice hides another;
//! - the `park` slices (the worker asleep) are a thin hatched band;
//! - point events are small tick marks: steals (category `steal`: a
//!   request sent, answered, declined, a task given) in red at the top of
//!   the row, the others ("made ready", loop splits, device events) in dark
//!   grey at the bottom. selvedge writes these as zero-length `X` slices
//!   (for its flows to bind to); instant (`i`) events are drawn the same;
//! - flows (`s`, then `t` steps, then `f`, with the same `cat` and `id`)
//!   are thin arrows from each point to the next: a task's (from the
//!   fulfill, split, theft or device completion that sent it to its run) in
//!   blue, a steal request's path (`steal_flow`) dashed in red.
//!   `--no-flows` leaves them out; at most `--max-flows` are drawn, tasks'
//!   first, evenly thinned beyond that.
//!
//! Below the rows: a time axis in milliseconds since the first event, and a
//! legend of the colours, with shortened task names (Rust paths lose their
//! common crate prefix and `{{closure}}` segments; names given by the user
//! are kept as they are), each with its number of slices and total time.
//! Hovering over a bar in a browser shows its full name, duration and start.
//!
//! ```text
//! cargo run --release -p selvedge-tools --bin trace_timeline -- IN.json OUT.svg \
//!     [--title T] [--width PX] [--from MS] [--to MS] [--no-flows] [--max-flows N]
//! ```
//!
//! `--title` defaults to the input's file name, `--width` (of the whole
//! picture, in pixels) to 1400. `--from` and `--to` choose a time window,
//! in milliseconds since the first event (by default all of it).
//! The subtitle says how many events the tracer lost (`otherData`'s
//! `lost_events`), if any. `scripts/trace-picture.sh` runs the batched GEMM
//! demonstration with tracing and renders its trace this way:
//!
//! ```text
//! cargo run --release -p selvedge-tools --features trace --bin batched_gemm -- --trace target/trace/gemm.json
//! cargo run --release -p selvedge-tools --bin trace_timeline -- target/trace/gemm.json gemm.svg
//! ```

mod load;
mod names;
mod render;

use load::load;
use render::render;
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: trace_timeline IN.json OUT.svg [--title T] [--width PX] \
[--from MS] [--to MS] [--no-flows] [--max-flows N]";

const HELP: &str = "
Renders a Chrome trace-event JSON file (as written by selvedge's tracer)
into an SVG timeline: one row per thread, task slices coloured by name,
nested slices inset, parks hatched, steals and other events as ticks,
flows as arrows.

  --title T       title of the picture (default: the input's file name)
  --width PX      width of the picture in pixels (default 1400)
  --from MS       start of the window, in ms since the first event (default 0)
  --to MS         end of the window, in ms since the first event (default: the end)
  --flows         draw the flow arrows (the default)
  --no-flows      leave the flow arrows out
  --max-flows N   draw at most N flow arrows, evenly thinned (default 2000)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Usage(msg)) => {
            eprintln!("trace_timeline: {msg}\n{USAGE}");
            ExitCode::from(2)
        }
        Err(Failure::Error(msg)) => {
            eprintln!("trace_timeline: {msg}");
            ExitCode::FAILURE
        }
    }
}

enum Failure {
    /// Bad command line: the message and the usage line, exit status 2.
    Usage(String),
    /// Anything else: the message, exit status 1.
    Error(String),
}

fn run(args: &[String]) -> Result<(), Failure> {
    let Some(opts) = parse_args(args)? else {
        println!("{USAGE}\n{HELP}");
        return Ok(());
    };
    let trace = load(&opts.input)?;
    let title = opts.title.clone().unwrap_or_else(|| {
        opts.input
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| opts.input.display().to_string())
    });
    let picture = render(&trace, &opts, &title)?;
    std::fs::write(&opts.output, picture.svg)
        .map_err(|e| Failure::Error(format!("cannot write {}: {e}", opts.output.display())))?;
    eprintln!(
        "trace_timeline: wrote {} ({} tracks, {} slices, {} flow arrows, {:.3} ms shown)",
        opts.output.display(),
        trace.tracks.len(),
        picture.slices,
        picture.arrows,
        picture.window_ms,
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// Command line

struct Options {
    input: PathBuf,
    output: PathBuf,
    title: Option<String>,
    width: f64,
    from_ms: Option<f64>,
    to_ms: Option<f64>,
    flows: bool,
    max_flows: usize,
}

/// The options, or `None` for `--help`.
fn parse_args(args: &[String]) -> Result<Option<Options>, Failure> {
    let mut positional = Vec::new();
    let mut opts = Options {
        input: PathBuf::new(),
        output: PathBuf::new(),
        title: None,
        width: 1400.0,
        from_ms: None,
        to_ms: None,
        flows: true,
        max_flows: 2000,
    };
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        i += 1;
        if !arg.starts_with("--") && arg != "-h" {
            positional.push(arg);
            continue;
        }
        // `--key value` or `--key=value`.
        let (key, inline) = match arg.split_once('=') {
            Some((k, v)) => (k, Some(v.to_string())),
            None => (arg, None),
        };
        let mut value = || -> Result<String, Failure> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            let v = args
                .get(i)
                .ok_or_else(|| Failure::Usage(format!("{key} needs a value")))?;
            i += 1;
            Ok(v.clone())
        };
        match key {
            "-h" | "--help" => return Ok(None),
            "--title" => opts.title = Some(value()?),
            "--width" => {
                let w = number(key, &value()?)?;
                if w < 300.0 {
                    return Err(Failure::Usage(format!(
                        "--width {w}: the picture needs at least 300 pixels"
                    )));
                }
                opts.width = w;
            }
            "--from" => opts.from_ms = Some(number(key, &value()?)?),
            "--to" => opts.to_ms = Some(number(key, &value()?)?),
            "--max-flows" => {
                let v = value()?;
                opts.max_flows = v.parse().map_err(|_| {
                    Failure::Usage(format!("--max-flows {v:?}: not a whole number"))
                })?;
            }
            "--flows" => opts.flows = true,
            "--no-flows" => opts.flows = false,
            _ => return Err(Failure::Usage(format!("unknown option {arg:?}"))),
        }
    }
    match positional.as_slice() {
        [input, output] => {
            opts.input = PathBuf::from(input);
            opts.output = PathBuf::from(output);
        }
        [] | [_] => return Err(Failure::Usage("needs an input and an output file".into())),
        [_, _, extra, ..] => {
            return Err(Failure::Usage(format!("unexpected argument {extra:?}")));
        }
    }
    if let (Some(from), Some(to)) = (opts.from_ms, opts.to_ms) {
        if from >= to {
            return Err(Failure::Usage(format!(
                "--from {from} is not before --to {to}"
            )));
        }
    }
    Ok(Some(opts))
}

fn number(key: &str, text: &str) -> Result<f64, Failure> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        _ => Err(Failure::Usage(format!("{key} {text:?}: not a number"))),
    }
}

//! Writing a trace as Chrome trace-event JSON (the format Perfetto,
//! `chrome://tracing` and Speedscope open): one process, one thread track
//! per worker, one per outside thread that recorded, one for device
//! callbacks; tasks and parking as complete (`X`) slices, the other events
//! as zero-length slices, and flows as `s`/`t`/`f` events bound to them.

use crate::core::clock::ticks;
use crate::core::stats::Counters;
use crate::core::trace::record::{
    Collected, Event, Kind, Tracer, DEVICE_TRACK, NO_WORKER, OUTSIDE_TRACKS,
};
use std::fmt::Write as _;
use std::io::Write as _;
use std::time::Duration;

/// How long after the tracer started the clock's rate is read, at least:
/// long enough that the reading's error is well under a microsecond per
/// millisecond.
const CALIBRATION: Duration = Duration::from_millis(20);

/// Writes `tracer`'s events so far to its path (replacing the file), with
/// the workers' `counters` (read after the events) beside them.
pub(crate) fn write(tracer: &Tracer, counters: &Counters) -> std::io::Result<()> {
    let collected = tracer.collect();
    let clock = Clock::calibrate(tracer);
    let json = render(tracer, &collected, &clock, counters);
    if let Some(dir) = tracer.path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::io::BufWriter::new(std::fs::File::create(&tracer.path)?);
    file.write_all(json.as_bytes())?;
    file.flush()
}

/// Ticks to microseconds since the tracer started.
struct Clock {
    base: u64,
    us_per_tick: f64,
}

impl Clock {
    fn calibrate(tracer: &Tracer) -> Self {
        let (t0, i0) = tracer.start;
        if let Some(wait) = CALIBRATION.checked_sub(i0.elapsed()) {
            std::thread::sleep(wait);
        }
        let (t1, elapsed) = (ticks(), i0.elapsed());
        let us_per_tick = elapsed.as_secs_f64() * 1e6 / t1.wrapping_sub(t0).max(1) as f64;
        Clock {
            base: t0,
            us_per_tick,
        }
    }

    fn us(&self, t: u64) -> f64 {
        // Signed: a worker's clock may read a hair before the start.
        t.wrapping_sub(self.base) as i64 as f64 * self.us_per_tick
    }
}

/// A JSON string literal of `s`.
fn quoted(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The name an event carries.
fn name_of(e: &Event) -> &'static str {
    let (ptr, len) = (e[4] as usize as *const u8, e[5] as usize);
    if ptr.is_null() {
        return "task";
    }
    // SAFETY: the two words were made by `name_words` from a `&'static
    // str` (rings and the outside list keep only whole events, see
    // `ring.rs`), so they are the address and length of valid UTF-8 that
    // lives for the rest of the program.
    unsafe { std::str::from_utf8_unchecked(std::slice::from_raw_parts(ptr, len)) }
}

struct Out<'a> {
    json: String,
    clock: &'a Clock,
    first: bool,
}

impl Out<'_> {
    /// Starts an event object with the fields every event has.
    fn open(&mut self, ph: &str, cat: &str, name: &str, tid: u64, t: u64) {
        if !self.first {
            self.json.push_str(",\n");
        }
        self.first = false;
        let _ = write!(self.json, "{{\"ph\":\"{ph}\",\"cat\":\"{cat}\",\"name\":");
        quoted(&mut self.json, name);
        let _ = write!(
            self.json,
            ",\"pid\":1,\"tid\":{tid},\"ts\":{:.3}",
            self.clock.us(t)
        );
    }

    /// A slice from `t0` to `t1`, with `args` (a JSON object body).
    fn slice(&mut self, cat: &str, name: &str, tid: u64, t0: u64, t1: u64, args: &str) {
        self.open("X", cat, name, tid, t0);
        let dur = (self.clock.us(t1) - self.clock.us(t0)).max(0.0);
        let _ = write!(self.json, ",\"dur\":{dur:.3}");
        if !args.is_empty() {
            let _ = write!(self.json, ",\"args\":{{{args}}}");
        }
        self.json.push('}');
    }

    /// A flow event (`s`, `t` or `f`) of `id` at `t`, bound to the slice
    /// that encloses it on `tid`. A task's arrow (from a fulfill, a split,
    /// a theft or a device completion to its run) is `cat` "flow", name
    /// "task"; a steal request's (from its thief through the victims that
    /// declined it) is "steal_flow", "steal request".
    fn flow(&mut self, ph: &str, id: u64, tid: u64, t: u64) {
        self.open(ph, "flow", "task", tid, t);
        let _ = write!(self.json, ",\"id\":{id},\"bp\":\"e\"}}");
    }

    fn steal_flow(&mut self, ph: &str, id: u64, tid: u64, t: u64) {
        self.open(ph, "steal_flow", "steal request", tid, t);
        let _ = write!(self.json, ",\"id\":{id},\"bp\":\"e\"}}");
    }

    fn meta(&mut self, what: &str, tid: u64, args: &str) {
        if !self.first {
            self.json.push_str(",\n");
        }
        self.first = false;
        let _ = write!(
            self.json,
            "{{\"ph\":\"M\",\"name\":\"{what}\",\"pid\":1,\"tid\":{tid},\"args\":{{{args}}}}}"
        );
    }

    fn worker(a: u64) -> String {
        if a == NO_WORKER {
            "\"parked workers\"".into()
        } else {
            a.to_string()
        }
    }

    /// Writes event `e` of track `tid`.
    fn event(&mut self, tid: u64, e: &Event) {
        let Some(kind) = Kind::of(e[0]) else { return };
        let a = e[0] >> 8;
        let (t0, t1, flow) = (e[1], e[2], e[3]);
        match kind {
            Kind::Task => {
                self.slice("task", name_of(e), tid, t0, t1, "");
                if flow != 0 {
                    self.flow("f", flow, tid, t0);
                }
            }
            Kind::Parked => self.slice("park", "parked", tid, t0, t1, ""),
            Kind::StealSent => {
                let args = format!("\"victim\":{a}");
                self.slice("steal", "steal request", tid, t0, t0, &args);
                self.steal_flow("s", flow, tid, t0);
            }
            Kind::StealAnswered => {
                let args = format!("\"thief\":{a},\"tasks\":{t1}");
                self.slice("steal", "steal answered", tid, t0, t0, &args);
                self.steal_flow("f", flow, tid, t0);
            }
            Kind::StealDeclined => {
                let to = if t1 == 0 {
                    "\"back to the thief\"".to_string()
                } else {
                    (t1 - 1).to_string()
                };
                let args = format!("\"thief\":{a},\"sent on to\":{to}");
                self.slice("steal", "steal declined", tid, t0, t0, &args);
                // Back to the thief: the request ends here.
                self.steal_flow(if t1 == 0 { "f" } else { "t" }, flow, tid, t0);
            }
            Kind::Ready => {
                let mut args = String::from("\"task\":");
                quoted(&mut args, name_of(e));
                self.slice("dataflow", "made ready", tid, t0, t0, &args);
                self.flow("s", flow, tid, t0);
            }
            Kind::LoopSplit => {
                let args = format!("\"to\":{},\"iterations\":{t1}", Self::worker(a));
                self.slice("loop", "loop split", tid, t0, t0, &args);
                self.flow("s", flow, tid, t0);
            }
            Kind::Given => {
                let args = format!("\"to\":{}", Self::worker(a));
                self.slice("steal", "task given", tid, t0, t0, &args);
                self.flow(if e[5] == 1 { "s" } else { "t" }, flow, tid, t0);
            }
            Kind::DeviceEnqueued => {
                let mut args = String::from("\"task\":");
                quoted(&mut args, name_of(e));
                self.slice("device", "device work enqueued", tid, t0, t0, &args);
                self.flow("s", flow, tid, t0);
            }
            Kind::DeviceDone => {
                self.slice("device", "completion callback", DEVICE_TRACK, t0, t0, "");
                self.flow("t", flow, DEVICE_TRACK, t0);
                self.slice("device", "device work done", tid, t1, t1, "");
                self.flow("f", flow, tid, t1);
            }
        }
    }
}

/// The workers' counters, summed, as a JSON object body: what the trace's
/// events can be checked against (a trace written at the runtime's drop,
/// after its workers left, holds every event they counted, unless
/// `lost_events` says some were overwritten).
fn totals(counters: &Counters) -> String {
    let sum = |f: fn(&crate::core::stats::WorkerCounters) -> u64| -> u64 {
        counters.iter().map(|c| f(c)).sum()
    };
    format!(
        "\"tasks_run\":{},\"steal_requests_sent\":{},\"steal_requests_answered\":{},\
         \"steal_requests_declined\":{},\"tasks_given\":{},\"parks\":{},\"loop_splits\":{}",
        sum(|c| c.tasks_run.load()),
        sum(|c| c.requests_sent.load()),
        sum(|c| c.requests_answered.load()),
        sum(|c| c.requests_declined.load()),
        sum(|c| c.tasks_given.load()),
        sum(|c| c.parks.load()),
        sum(|c| c.loop_splits.load()),
    )
}

fn render(tracer: &Tracer, c: &Collected, clock: &Clock, counters: &Counters) -> String {
    let mut out = Out {
        json: String::with_capacity(
            256 + 160 * c.workers.iter().map(|w| w.events.len()).sum::<usize>(),
        ),
        clock,
        first: true,
    };
    let lost: u64 = c.workers.iter().map(|w| w.lost).sum::<u64>() + c.outside_lost;
    let _ = writeln!(
        out.json,
        "{{\"displayTimeUnit\":\"ns\",\"otherData\":{{\"lost_events\":{lost},\"capacity_per_worker\":{},\"stats\":{{{}}}}},\"traceEvents\":[",
        tracer.tracks.first().map_or(0, |t| t.ring.capacity()),
        totals(counters)
    );
    let n = tracer.tracks.len();
    let process = format!("\"name\":\"selvedge runtime ({n} workers)\"");
    out.meta("process_name", 0, &process);
    for (i, name) in tracer.worker_names.iter().enumerate() {
        let mut args = String::from("\"name\":");
        quoted(&mut args, &format!("worker {i} ({name})"));
        out.meta("thread_name", i as u64, &args);
        out.meta(
            "thread_sort_index",
            i as u64,
            &format!("\"sort_index\":{i}"),
        );
    }
    for (k, name) in c.outside_threads.iter().enumerate() {
        let tid = OUTSIDE_TRACKS + k as u64;
        let mut args = String::from("\"name\":");
        quoted(&mut args, &format!("outside: {name}"));
        out.meta("thread_name", tid, &args);
        out.meta("thread_sort_index", tid, &format!("\"sort_index\":{tid}"));
    }
    if c.workers
        .iter()
        .flat_map(|w| &w.events)
        .any(|e| Kind::of(e[0]) == Some(Kind::DeviceDone))
    {
        out.meta("thread_name", DEVICE_TRACK, "\"name\":\"device callbacks\"");
        let args = format!("\"sort_index\":{DEVICE_TRACK}");
        out.meta("thread_sort_index", DEVICE_TRACK, &args);
    }
    for (i, w) in c.workers.iter().enumerate() {
        for e in &w.events {
            out.event(i as u64, e);
        }
    }
    for (track, e) in &c.outside {
        out.event(OUTSIDE_TRACKS + u64::from(*track), e);
    }
    out.json.push_str("\n]}\n");
    out.json
}

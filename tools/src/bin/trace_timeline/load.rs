// ---------------------------------------------------------------------------
// The trace

use crate::Failure;
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// Slack, in microseconds, when deciding whether one slice ends before the
/// next starts: `ts` and `dur` are each rounded to nanoseconds, so that a
/// slice may seem to end a nanosecond after the next one starts.
const EPS_US: f64 = 0.002;

#[derive(Default)]
pub(crate) struct Track {
    pub(crate) pid: i64,
    pub(crate) tid: i64,
    pub(crate) name: Option<String>,
    sort_index: Option<i64>,
    /// After `load`: sorted by start, outer slices before the ones inside.
    pub(crate) slices: Vec<Slice>,
    /// `park` slices: (start, end).
    pub(crate) parks: Vec<(f64, f64)>,
    pub(crate) instants: Vec<Instant>,
    /// `B` events waiting for their `E`: (start, name).
    open: Vec<(f64, usize)>,
}

pub(crate) struct Slice {
    pub(crate) start: f64,
    pub(crate) end: f64,
    /// Index into `Trace::names`.
    pub(crate) name: usize,
    /// How many slices of the same track it lies inside.
    pub(crate) depth: usize,
    /// Whether slices lie inside it (then its label would be covered).
    pub(crate) has_children: bool,
}

/// A point event: an instant (`i`), or a zero-length slice of an event
/// category (selvedge writes steals, "made ready", loop splits and device
/// events so, for their flows to bind to).
pub(crate) struct Instant {
    pub(crate) ts: f64,
    pub(crate) steal: bool,
    /// Index into `Trace::marker_names`.
    pub(crate) name: usize,
}

/// One arrow: from a point of a flow to the next.
pub(crate) struct FlowSegment {
    /// A steal request's path (category `steal_flow`), not a task's.
    pub(crate) steal: bool,
    pub(crate) from_ts: f64,
    pub(crate) from_track: usize,
    pub(crate) to_ts: f64,
    pub(crate) to_track: usize,
}

pub(crate) struct Trace {
    pub(crate) process_name: Option<String>,
    pub(crate) tracks: Vec<Track>,
    /// The distinct slice names.
    pub(crate) names: Vec<String>,
    /// The distinct names of point events.
    pub(crate) marker_names: Vec<String>,
    pub(crate) flows: Vec<FlowSegment>,
    /// `otherData.lost_events`: events the tracer's rings overwrote.
    pub(crate) lost_events: u64,
    /// The first timestamp and the last end, in microseconds.
    pub(crate) start: f64,
    pub(crate) end: f64,
}

/// A flow point before the tracks are sorted: `rank` 0 for `s`, 1 for `t`,
/// 2 for `f`.
struct FlowPoint {
    ts: f64,
    track: (i64, i64),
    rank: u8,
}

pub(crate) fn load(path: &Path) -> Result<Trace, Failure> {
    let shown = path.display();
    let json: Value = {
        let bytes =
            std::fs::read(path).map_err(|e| Failure::Error(format!("cannot read {shown}: {e}")))?;
        serde_json::from_slice(&bytes)
            .map_err(|e| Failure::Error(format!("{shown} is not valid JSON: {e}")))?
    };
    let events = match &json {
        Value::Object(map) => match map.get("traceEvents") {
            Some(Value::Array(events)) => events,
            Some(_) => {
                return Err(Failure::Error(format!(
                    "{shown}: \"traceEvents\" is not an array"
                )))
            }
            None => {
                return Err(Failure::Error(format!(
                    "{shown} has no \"traceEvents\" array: not a Chrome trace-event file"
                )))
            }
        },
        Value::Array(events) => events,
        _ => {
            return Err(Failure::Error(format!(
                "{shown} is not a Chrome trace-event file (expected an object with \"traceEvents\")"
            )))
        }
    };

    let mut tracks = Tracks::default();
    let mut names: Vec<String> = Vec::new();
    let mut name_of: HashMap<String, usize> = HashMap::new();
    let mut intern = |name: &str| -> usize {
        if let Some(&i) = name_of.get(name) {
            return i;
        }
        names.push(name.to_string());
        name_of.insert(name.to_string(), names.len() - 1);
        names.len() - 1
    };
    let mut marker_names: Vec<String> = Vec::new();
    let mut marker_of: HashMap<String, usize> = HashMap::new();
    let mut marker = |name: &str| -> usize {
        *marker_of.entry(name.to_string()).or_insert_with(|| {
            marker_names.push(name.to_string());
            marker_names.len() - 1
        })
    };
    let mut process_name = None;
    let mut flow_points: HashMap<(String, String), Vec<FlowPoint>> = HashMap::new();
    let (mut start, mut end) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut skipped = 0usize;
    // The `(track, slice)` pairs to fill in once the tracks are built.
    let mut slices: Vec<(usize, Slice)> = Vec::new();

    for event in events {
        let Some(ph) = event.get("ph").and_then(Value::as_str) else {
            skipped += 1;
            continue;
        };
        let pid = integer(event.get("pid"));
        let tid = integer(event.get("tid"));
        let name = event.get("name").and_then(Value::as_str).unwrap_or("");
        let cat = event.get("cat").and_then(Value::as_str).unwrap_or("");
        let args = event.get("args");
        if ph == "M" {
            match name {
                "process_name" if process_name.is_none() => {
                    process_name = args
                        .and_then(|a| a.get("name"))
                        .and_then(Value::as_str)
                        .map(str::to_string);
                }
                "thread_name" => {
                    let t = tracks.get(pid, tid);
                    if let Some(n) = args.and_then(|a| a.get("name")).and_then(Value::as_str) {
                        tracks.list[t].name = Some(n.to_string());
                    }
                }
                "thread_sort_index" => {
                    let t = tracks.get(pid, tid);
                    if let Some(i) = args.and_then(|a| a.get("sort_index")) {
                        tracks.list[t].sort_index = Some(integer(Some(i)));
                    }
                }
                _ => {}
            }
            continue;
        }
        let Some(ts) = event.get("ts").and_then(Value::as_f64) else {
            skipped += 1;
            continue;
        };
        start = start.min(ts);
        end = end.max(ts);
        match ph {
            "X" => {
                let dur = event
                    .get("dur")
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0)
                    .max(0.0);
                end = end.max(ts + dur);
                let t = tracks.get(pid, tid);
                if cat == "park" {
                    tracks.list[t].parks.push((ts, ts + dur));
                } else if is_point_event(cat, dur) {
                    let steal = cat.contains("steal");
                    let name = marker(if name.is_empty() { cat } else { name });
                    tracks.list[t].instants.push(Instant { ts, steal, name });
                } else {
                    let name = intern(if name.is_empty() { "(unnamed)" } else { name });
                    slices.push((t, new_slice(ts, ts + dur, name)));
                }
            }
            "B" => {
                let t = tracks.get(pid, tid);
                let name = intern(if name.is_empty() { "(unnamed)" } else { name });
                tracks.list[t].open.push((ts, name));
            }
            "E" => {
                let t = tracks.get(pid, tid);
                if let Some((begin, name)) = tracks.list[t].open.pop() {
                    slices.push((t, new_slice(begin, ts, name)));
                } else {
                    skipped += 1;
                }
            }
            "i" | "I" => {
                let t = tracks.get(pid, tid);
                let steal = cat.contains("steal") || name.contains("steal");
                let name = marker(if name.is_empty() { "instant" } else { name });
                tracks.list[t].instants.push(Instant { ts, steal, name });
            }
            "s" | "t" | "f" => {
                let Some(id) = event.get("id").or_else(|| event.get("id2")) else {
                    skipped += 1;
                    continue;
                };
                tracks.get(pid, tid);
                let rank = match ph {
                    "s" => 0,
                    "t" => 1,
                    _ => 2,
                };
                flow_points
                    .entry((cat.to_string(), id.to_string()))
                    .or_default()
                    .push(FlowPoint {
                        ts,
                        track: (pid, tid),
                        rank,
                    });
            }
            _ => skipped += 1,
        }
    }
    if !start.is_finite() {
        return Err(Failure::Error(format!(
            "{shown} has no events with timestamps: nothing to draw"
        )));
    }
    if skipped > 0 {
        eprintln!(
            "trace_timeline: {shown}: skipped {skipped} events not drawn (unknown or incomplete)"
        );
    }
    let mut tracks = tracks.list;
    for (t, slice) in slices {
        tracks[t].slices.push(slice);
    }
    // `B` events without their `E`: open to the end of the trace.
    for t in &mut tracks {
        for (begin, name) in std::mem::take(&mut t.open) {
            t.slices.push(new_slice(begin, end, name));
        }
        assign_depths(&mut t.slices);
        t.parks.sort_by(|a, b| a.0.total_cmp(&b.0));
        t.instants.sort_by(|a, b| a.ts.total_cmp(&b.ts));
    }

    // Workers by their sort index (then tid); threads without one after.
    tracks.sort_by_key(|t| (t.pid, t.sort_index.is_none(), t.sort_index, t.tid));
    let index: HashMap<(i64, i64), usize> = tracks
        .iter()
        .enumerate()
        .map(|(i, t)| ((t.pid, t.tid), i))
        .collect();

    // Chain each flow's points in time order (`s` starts a chain, `f` ends
    // it: an id may be used again after its `f`).
    let mut flows = Vec::new();
    let mut keys: Vec<_> = flow_points.keys().cloned().collect();
    keys.sort();
    for key in keys {
        let steal = key.0.contains("steal");
        let mut points = flow_points.remove(&key).unwrap_or_default();
        points.sort_by(|a, b| a.ts.total_cmp(&b.ts).then(a.rank.cmp(&b.rank)));
        let mut last: Option<&FlowPoint> = None;
        for p in &points {
            if p.rank == 0 {
                last = Some(p);
                continue;
            }
            if let Some(from) = last {
                flows.push(FlowSegment {
                    steal,
                    from_ts: from.ts,
                    from_track: index[&from.track],
                    to_ts: p.ts,
                    to_track: index[&p.track],
                });
            }
            last = if p.rank == 2 { None } else { Some(p) };
        }
    }
    flows.sort_by(|a, b| a.from_ts.total_cmp(&b.from_ts));

    let lost_events = json
        .get("otherData")
        .and_then(|o| o.get("lost_events"))
        .and_then(Value::as_u64)
        .unwrap_or(0);

    Ok(Trace {
        process_name,
        tracks,
        names,
        marker_names,
        flows,
        lost_events,
        start,
        end,
    })
}

/// The tracks met so far, by (pid, tid).
#[derive(Default)]
struct Tracks {
    list: Vec<Track>,
    index: HashMap<(i64, i64), usize>,
}

impl Tracks {
    fn get(&mut self, pid: i64, tid: i64) -> usize {
        let list = &mut self.list;
        *self.index.entry((pid, tid)).or_insert_with(|| {
            list.push(Track {
                pid,
                tid,
                ..Track::default()
            });
            list.len() - 1
        })
    }
}

fn new_slice(start: f64, end: f64, name: usize) -> Slice {
    Slice {
        start,
        end: end.max(start),
        name,
        depth: 0,
        has_children: false,
    }
}

/// Whether a complete (`X`) slice is a point event rather than a span of
/// work: selvedge's zero-length slices of steals, "made ready", loop splits
/// and device events, or any zero-length slice of a category other than
/// tasks.
fn is_point_event(cat: &str, dur: f64) -> bool {
    matches!(cat, "steal" | "dataflow" | "loop" | "device")
        || (dur == 0.0 && !cat.is_empty() && cat != "task")
}

/// A pid or tid: a number (or a string holding one).
fn integer(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .unwrap_or(0),
        Some(Value::String(s)) => s.trim().parse().unwrap_or(0),
        _ => 0,
    }
}

/// Sorts a track's slices (by start, the longer first) and gives each the
/// number of slices it lies inside.
fn assign_depths(slices: &mut [Slice]) {
    slices.sort_by(|a, b| a.start.total_cmp(&b.start).then(b.end.total_cmp(&a.end)));
    // The slices open at the current start: (end, index).
    let mut stack: Vec<(f64, usize)> = Vec::new();
    for i in 0..slices.len() {
        let start = slices[i].start;
        while stack.last().is_some_and(|&(end, _)| end <= start + EPS_US) {
            stack.pop();
        }
        if let Some(&(_, parent)) = stack.last() {
            slices[parent].has_children = true;
        }
        slices[i].depth = stack.len();
        stack.push((slices[i].end, i));
    }
}

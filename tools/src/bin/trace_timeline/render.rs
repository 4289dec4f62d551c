// ---------------------------------------------------------------------------
// The picture

use crate::load::{FlowSegment, Slice, Trace};
use crate::names::short_names;
use crate::{Failure, Options};
use std::fmt::Write as _;

mod helpers;
use helpers::{
    busy_share, duration, esc, light, list, nice_step, text_width, thin_out, track_label,
};

/// Distinguishable colours (Tableau 10, its grey swapped for a light green
/// so that it cannot be taken for `OTHER_COLOR`).
const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#8cd17d",
];
/// The colour of every task name beyond the palette.
const OTHER_COLOR: &str = "#a8a8a8";
const STEAL_COLOR: &str = "#b2182b";
const INSTANT_COLOR: &str = "#444444";
const FLOW_COLOR: &str = "#1f4e79";
const FONT: &str = "DejaVu Sans, Verdana, Helvetica, Arial, sans-serif";

pub(crate) struct Picture {
    pub(crate) svg: String,
    pub(crate) slices: usize,
    pub(crate) arrows: usize,
    pub(crate) window_ms: f64,
}

/// A rectangle to draw: one slice, or a run of slices too thin to tell
/// apart.
struct Bar {
    x0: f64,
    x1: f64,
    depth: usize,
    /// Index into the colours (`PALETTE.len()` for the grey): the first
    /// slice's.
    colour: usize,
    /// Whether slices of other colours joined the run.
    mixed: bool,
    /// Time in the run by colour: a mixed run takes the colour with most.
    time: [f64; PALETTE.len() + 1],
    /// The (first) slice (its track's index), for the tooltip and label.
    slice: usize,
    count: usize,
}

impl Bar {
    /// The colour of the slices with the most time in the bar.
    fn fill(&self) -> &'static str {
        let mut best = self.colour;
        if self.mixed {
            for (c, &t) in self.time.iter().enumerate() {
                if t > self.time[best] {
                    best = c;
                }
            }
        }
        PALETTE.get(best).copied().unwrap_or(OTHER_COLOR)
    }
}

struct Row {
    y: f64,
    height: f64,
    /// The vertical inset of a slice at each further depth.
    inset: f64,
}

impl Row {
    const PAD: f64 = 3.0;

    /// Top and height of a bar at `depth`.
    fn bar(&self, depth: usize) -> (f64, f64) {
        let inner = self.height - 2.0 * Self::PAD;
        let d = depth as f64 * self.inset;
        (self.y + Self::PAD + d, (inner - 2.0 * d).max(2.0))
    }

    fn centre(&self) -> f64 {
        self.y + self.height / 2.0
    }
}

pub(crate) fn render(trace: &Trace, opts: &Options, title: &str) -> Result<Picture, Failure> {
    // The window, in microseconds.
    let w0 = trace.start + opts.from_ms.unwrap_or(0.0) * 1000.0;
    let w1 = match opts.to_ms {
        Some(to) => trace.start + to * 1000.0,
        None => trace.end.max(trace.start + 0.001),
    };
    if w1 <= w0 {
        return Err(Failure::Error(format!(
            "the window {:.3}–{:.3} ms is empty: {} spans 0–{:.3} ms",
            (w0 - trace.start) / 1000.0,
            (w1 - trace.start) / 1000.0,
            opts.input.display(),
            (trace.end - trace.start) / 1000.0
        )));
    }
    let visible = |s: &Slice| s.end >= w0 && s.start <= w1;

    // Names by time in the window: the first ten get the palette.
    let mut total = vec![0.0f64; trace.names.len()];
    let mut count = vec![0usize; trace.names.len()];
    let mut shown_slices = 0;
    for t in &trace.tracks {
        for s in t.slices.iter().filter(|s| visible(s)) {
            total[s.name] += s.end.min(w1) - s.start.max(w0);
            count[s.name] += 1;
            shown_slices += 1;
        }
    }
    let mut ranked: Vec<usize> = (0..trace.names.len()).filter(|&n| count[n] > 0).collect();
    ranked.sort_by(|&a, &b| {
        total[b]
            .total_cmp(&total[a])
            .then(count[b].cmp(&count[a]))
            .then(trace.names[a].cmp(&trace.names[b]))
    });
    let mut colour_of = vec![PALETTE.len(); trace.names.len()];
    for (rank, &n) in ranked.iter().take(PALETTE.len()).enumerate() {
        colour_of[n] = rank;
    }
    let visible_names: Vec<String> = ranked.iter().map(|&n| trace.names[n].clone()).collect();
    let visible_short = short_names(&visible_names);
    let mut short = vec![String::new(); trace.names.len()];
    for (k, &n) in ranked.iter().enumerate() {
        short[n] = visible_short[k].clone();
    }

    // Horizontal layout.
    let width = opts.width;
    let labels: Vec<String> = trace.tracks.iter().map(|t| track_label(trace, t)).collect();
    let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(8);
    let left = (text_width(longest, 12.0) + 24.0).clamp(90.0, 280.0);
    let right = 24.0;
    let plot_w = width - left - right;
    let x_of = |ts: f64| left + (ts - w0) / (w1 - w0) * plot_w;

    // Vertical layout: rows grow with their nesting.
    let top = 64.0;
    let mut rows = Vec::new();
    let mut y = top;
    for t in &trace.tracks {
        let depth = t
            .slices
            .iter()
            .filter(|s| visible(s))
            .map(|s| s.depth)
            .max()
            .unwrap_or(0);
        let height = (30.0 + 8.0 * depth as f64).min(96.0);
        let inner = height - 2.0 * Row::PAD;
        let inset = if depth == 0 {
            0.0
        } else {
            ((inner - 6.0) / (2.0 * depth as f64)).min(4.0)
        };
        rows.push(Row { y, height, inset });
        y += height;
    }
    let plot_bottom = y;

    let mut svg = String::with_capacity(1 << 20);
    let mut body = String::with_capacity(1 << 20);

    // Row backgrounds and labels.
    for (i, (t, row)) in trace.tracks.iter().zip(&rows).enumerate() {
        let fill = if i % 2 == 0 { "#f6f7f9" } else { "#ffffff" };
        let _ = writeln!(
            body,
            r#"<rect x="0" y="{:.1}" width="{:.1}" height="{:.1}" fill="{fill}"/>"#,
            row.y, width, row.height
        );
        let label = esc(&labels[i]);
        let busy = busy_share(&t.slices, w0, w1);
        if t.slices.is_empty() && t.parks.is_empty() {
            let _ = writeln!(
                body,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="end" font-size="12" fill="#222">{label}</text>"##,
                left - 10.0,
                row.centre() + 4.0
            );
        } else {
            let _ = writeln!(
                body,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="end" font-size="12" fill="#222">{label}</text>"##,
                left - 10.0,
                row.centre() - 1.0
            );
            let _ = writeln!(
                body,
                r##"<text x="{:.1}" y="{:.1}" text-anchor="end" font-size="9.5" fill="#777">busy {:.0}%</text>"##,
                left - 10.0,
                row.centre() + 10.0,
                busy * 100.0
            );
        }
    }

    // Time axis: ticks every 1, 2 or 5 times a power of ten milliseconds.
    let (from_ms, to_ms) = ((w0 - trace.start) / 1000.0, (w1 - trace.start) / 1000.0);
    let step = nice_step((to_ms - from_ms) / (plot_w / 110.0).max(2.0));
    let decimals = (-step.log10().floor()).max(0.0) as usize;
    let mut ticks = String::new();
    let mut k = (from_ms / step).ceil() as i64;
    while (k as f64) * step <= to_ms + step * 1e-9 {
        let ms = k as f64 * step;
        let x = x_of(trace.start + ms * 1000.0);
        let _ = writeln!(
            body,
            r##"<line x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{plot_bottom:.1}" stroke="#dde1e6" stroke-width="0.7"/>"##
        );
        let _ = writeln!(
            ticks,
            r##"<line x1="{x:.1}" y1="{plot_bottom:.1}" x2="{x:.1}" y2="{:.1}" stroke="#333"/><text x="{x:.1}" y="{:.1}" text-anchor="middle" font-size="11" fill="#333">{ms:.decimals$}</text>"##,
            plot_bottom + 5.0,
            plot_bottom + 18.0
        );
        k += 1;
    }

    // Slices, track by track, outer ones first.
    let mut labels_svg = String::new();
    for (t, row) in trace.tracks.iter().zip(&rows) {
        let mut bars: Vec<Bar> = Vec::new();
        // The last bar at each depth, which a thin neighbour may join.
        let mut last_at: Vec<Option<usize>> = Vec::new();
        for (i, s) in t.slices.iter().enumerate().filter(|(_, s)| visible(s)) {
            let x0 = x_of(s.start.max(w0));
            let x1 = x_of(s.end.min(w1)).max(x0 + 0.5);
            let colour = colour_of[s.name];
            let dur = s.end.min(w1) - s.start.max(w0);
            if last_at.len() <= s.depth {
                last_at.resize(s.depth + 1, None);
            }
            // Slices under a pixel and a half wide join the run of thin
            // slices before them: without limit while they have its colour,
            // up to two pixels when the colours differ.
            if let Some(b) = last_at[s.depth].map(|j| &mut bars[j]) {
                let thin = x1 - x0 < 1.5 && (b.x1 - b.x0 < 1.5 || b.count > 1);
                let same = !b.mixed && b.colour == colour;
                if thin && x0 - b.x1 < 0.5 && (same || b.x1 - b.x0 < 2.0) {
                    b.x1 = b.x1.max(x1);
                    b.count += 1;
                    b.mixed |= !same;
                    b.time[colour] += dur;
                    continue;
                }
            }
            last_at[s.depth] = Some(bars.len());
            let mut time = [0.0; PALETTE.len() + 1];
            time[colour] = dur;
            bars.push(Bar {
                x0,
                x1,
                depth: s.depth,
                colour,
                mixed: false,
                time,
                slice: i,
                count: 1,
            });
        }
        bars.sort_by_key(|b| b.depth);
        for b in &bars {
            let s = &t.slices[b.slice];
            let (by, bh) = row.bar(b.depth);
            let w = b.x1 - b.x0;
            let fill = b.fill();
            let stroke = if w >= 3.0 {
                r##" stroke="#1a1a1a" stroke-opacity="0.45" stroke-width="0.6""##
            } else {
                ""
            };
            let tip = if b.count > 1 {
                format!(
                    "{} short slices, {} in all",
                    b.count,
                    duration(b.time.iter().sum())
                )
            } else {
                format!(
                    "{}\n{} at {:.3} ms",
                    trace.names[s.name],
                    duration(s.end - s.start),
                    (s.start - trace.start) / 1000.0
                )
            };
            let _ = writeln!(
                body,
                r#"<rect x="{:.2}" y="{by:.1}" width="{w:.2}" height="{bh:.1}" fill="{fill}"{stroke}><title>{}</title></rect>"#,
                b.x0,
                esc(&tip)
            );
            // A label where it fits and no slice inside would cover it.
            let name = &short[s.name];
            let chars = name.chars().count();
            if b.count == 1 && !s.has_children && bh >= 11.0 && text_width(chars, 10.0) + 8.0 <= w {
                let ink = if light(fill) { "#111" } else { "#fff" };
                let _ = writeln!(
                    labels_svg,
                    r#"<text x="{:.1}" y="{:.1}" font-size="10" fill="{ink}">{}</text>"#,
                    b.x0 + 4.0,
                    by + bh / 2.0 + 3.5,
                    esc(name)
                );
            }
        }
    }
    body.push_str(&labels_svg);

    // Parks: a hatched band across the middle of the row.
    let mut parked_any = false;
    for (t, row) in trace.tracks.iter().zip(&rows) {
        let mut runs: Vec<(f64, f64)> = Vec::new();
        for &(a, b) in t.parks.iter().filter(|&&(a, b)| b >= w0 && a <= w1) {
            let (x0, x1) = (x_of(a.max(w0)), x_of(b.min(w1)));
            match runs.last_mut() {
                Some(r) if x0 - r.1 < 0.5 => r.1 = r.1.max(x1),
                _ => runs.push((x0, x1)),
            }
        }
        for (x0, x1) in runs {
            parked_any = true;
            let _ = writeln!(
                body,
                r##"<rect x="{x0:.2}" y="{:.1}" width="{:.2}" height="6" fill="url(#park)" stroke="#8a8a8a" stroke-width="0.4"/>"##,
                row.centre() - 3.0,
                (x1 - x0).max(0.5)
            );
        }
    }

    // Point events: ticks, steals' at the top of the row, others' at the
    // bottom, one per pixel at most.
    // The names of the point events drawn, steals' and others'.
    let mut seen = [
        vec![false; trace.marker_names.len()],
        vec![false; trace.marker_names.len()],
    ];
    for (t, row) in trace.tracks.iter().zip(&rows) {
        let mut last_px = [f64::NEG_INFINITY; 2];
        for inst in t.instants.iter().filter(|i| i.ts >= w0 && i.ts <= w1) {
            let x = x_of(inst.ts);
            let kind = usize::from(inst.steal);
            seen[kind][inst.name] = true;
            if x - last_px[kind] < 1.0 {
                continue;
            }
            last_px[kind] = x;
            let (colour, y0) = if inst.steal {
                (STEAL_COLOR, row.y)
            } else {
                (INSTANT_COLOR, row.y + row.height - 8.0)
            };
            let _ = writeln!(
                body,
                r#"<line x1="{x:.2}" y1="{y0:.1}" x2="{x:.2}" y2="{:.1}" stroke="{colour}" stroke-width="1.2"/>"#,
                y0 + 8.0
            );
        }
    }

    // Flows: arrows from each point to the next, evenly thinned to the cap.
    let mut arrows = 0;
    let mut flows_note = String::new();
    // Whether tasks' arrows, and steal requests' arrows, were drawn.
    let mut flows_seen = [false; 2];
    if opts.flows {
        let in_window = |steal: bool| -> Vec<&FlowSegment> {
            trace
                .flows
                .iter()
                .filter(|f| f.steal == steal && f.to_ts >= w0 && f.from_ts <= w1)
                .collect()
        };
        let (tasks, steals) = (in_window(false), in_window(true));
        let all = tasks.len() + steals.len();
        // Tasks' arrows first; steal requests' in what the cap leaves.
        let tasks = thin_out(tasks, opts.max_flows);
        let steals = thin_out(steals, opts.max_flows - tasks.len());
        let chosen: Vec<&FlowSegment> = tasks.into_iter().chain(steals).collect();
        if chosen.len() < all {
            flows_note = format!(" · {} of {all} flow arrows", chosen.len());
        } else if all > 0 {
            flows_note = format!(" · {all} flow arrows");
        }
        let _ = writeln!(body, r#"<g clip-path="url(#plot)" fill="none">"#);
        for f in &chosen {
            let (x0, x1) = (x_of(f.from_ts), x_of(f.to_ts));
            let (y0, y1) = (rows[f.from_track].centre(), rows[f.to_track].centre());
            let path = if f.from_track == f.to_track {
                // On one row: a small arc above the bars.
                let lift = rows[f.from_track].height / 2.0 + 4.0;
                format!(
                    "M{x0:.2},{y0:.1} Q{:.2},{:.1} {x1:.2},{y1:.1}",
                    (x0 + x1) / 2.0,
                    y0 - lift
                )
            } else {
                format!("M{x0:.2},{y0:.1} L{x1:.2},{y1:.1}")
            };
            if f.steal {
                flows_seen[1] = true;
                let _ = writeln!(
                    body,
                    r##"<path d="{path}" stroke="{STEAL_COLOR}" stroke-opacity="0.45" stroke-width="0.7" stroke-dasharray="2,1.5" marker-end="url(#steal-arrow)"/>"##
                );
            } else {
                flows_seen[0] = true;
                let _ = writeln!(
                    body,
                    r#"<path d="{path}" stroke="{FLOW_COLOR}" stroke-opacity="0.5" stroke-width="0.8" marker-end="url(#arrow)"/>"#
                );
            }
        }
        body.push_str("</g>\n");
        arrows = chosen.len();
    }

    // The axis line and its title.
    let _ = writeln!(
        body,
        r##"<line x1="{left:.1}" y1="{plot_bottom:.1}" x2="{:.1}" y2="{plot_bottom:.1}" stroke="#333"/>"##,
        left + plot_w
    );
    body.push_str(&ticks);
    let _ = writeln!(
        body,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="11.5" fill="#444">time since the first event (ms)</text>"##,
        left + plot_w / 2.0,
        plot_bottom + 36.0
    );

    // The legend, in columns.
    let mut entries: Vec<(LegendMark, String, String)> = Vec::new();
    for &n in ranked.iter().take(PALETTE.len()) {
        entries.push((
            LegendMark::Colour(PALETTE[colour_of[n]]),
            format!("{}  ({}×, {})", short[n], count[n], duration(total[n])),
            trace.names[n].clone(),
        ));
    }
    if ranked.len() > PALETTE.len() {
        let rest = &ranked[PALETTE.len()..];
        let rest_count: usize = rest.iter().map(|&n| count[n]).sum();
        let rest_total: f64 = rest.iter().map(|&n| total[n]).sum();
        let tip: Vec<&str> = rest.iter().map(|&n| trace.names[n].as_str()).collect();
        entries.push((
            LegendMark::Colour(OTHER_COLOR),
            format!(
                "{} other name{}  ({rest_count}×, {})",
                rest.len(),
                if rest.len() == 1 { "" } else { "s" },
                duration(rest_total)
            ),
            tip.join("\n"),
        ));
    }
    if parked_any {
        entries.push((LegendMark::Park, "parked".into(), "a worker asleep".into()));
    }
    for (kind, colour, what) in [(1, STEAL_COLOR, "steals"), (0, INSTANT_COLOR, "events")] {
        let names: Vec<&str> = (0..trace.marker_names.len())
            .filter(|&n| seen[kind][n])
            .map(|n| trace.marker_names[n].as_str())
            .collect();
        if !names.is_empty() {
            entries.push((
                LegendMark::Tick(colour),
                format!("{what}: {}", list(&names, 3)),
                names.join("\n"),
            ));
        }
    }
    if flows_seen[0] {
        entries.push((
            LegendMark::Arrow(FLOW_COLOR, "arrow"),
            "flow: a task sent or made ready → its run".into(),
            String::new(),
        ));
    }
    if flows_seen[1] {
        entries.push((
            LegendMark::Arrow(STEAL_COLOR, "steal-arrow"),
            "a steal request's path".into(),
            String::new(),
        ));
    }
    let longest = entries
        .iter()
        .map(|e| e.1.chars().count())
        .max()
        .unwrap_or(0);
    let column = 34.0 + text_width(longest, 11.5);
    let columns = ((width - 40.0) / column)
        .floor()
        .clamp(1.0, entries.len().max(1) as f64) as usize;
    let legend_rows = entries.len().div_ceil(columns);
    let legend_top = plot_bottom + 58.0;
    for (k, (mark, text, tip)) in entries.iter().enumerate() {
        // Column-major, so that the ranks read downwards.
        let (c, r) = (k / legend_rows, k % legend_rows);
        let x = 20.0 + c as f64 * column;
        let y = legend_top + r as f64 * 20.0;
        let _ = write!(body, "<g>");
        if !tip.is_empty() {
            let _ = write!(body, "<title>{}</title>", esc(tip));
        }
        match mark {
            LegendMark::Colour(fill) => {
                let _ = write!(
                    body,
                    r##"<rect x="{x:.1}" y="{:.1}" width="22" height="12" fill="{fill}" stroke="#1a1a1a" stroke-opacity="0.45" stroke-width="0.6"/>"##,
                    y - 10.0
                );
            }
            LegendMark::Park => {
                let _ = write!(
                    body,
                    r##"<rect x="{x:.1}" y="{:.1}" width="22" height="6" fill="url(#park)" stroke="#8a8a8a" stroke-width="0.4"/>"##,
                    y - 7.0
                );
            }
            LegendMark::Tick(colour) => {
                let _ = write!(
                    body,
                    r#"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{colour}" stroke-width="1.2"/>"#,
                    x + 11.0,
                    y - 10.0,
                    x + 11.0,
                    y - 2.0
                );
            }
            LegendMark::Arrow(colour, marker) => {
                let _ = write!(
                    body,
                    r#"<path d="M{x:.1},{:.1} L{:.1},{:.1}" stroke="{colour}" stroke-width="1" marker-end="url(#{marker})"/>"#,
                    y - 1.0,
                    x + 22.0,
                    y - 9.0
                );
            }
        }
        let _ = writeln!(
            body,
            r##"<text x="{:.1}" y="{y:.1}" font-size="11.5" fill="#222">{}</text></g>"##,
            x + 30.0,
            esc(text)
        );
    }
    let height = legend_top + legend_rows as f64 * 20.0 + 6.0;

    // Title and subtitle.
    let mut subtitle = String::new();
    if let Some(p) = &trace.process_name {
        let _ = write!(subtitle, "{p} · ");
    }
    let _ = write!(
        subtitle,
        "{shown_slices} slices on {} tracks · {from_ms:.3}–{to_ms:.3} ms of {:.3} ms{flows_note}",
        trace.tracks.len(),
        (trace.end - trace.start) / 1000.0
    );
    if trace.lost_events > 0 {
        let _ = write!(
            subtitle,
            " · {} events lost (the tracer's rings overflowed)",
            trace.lost_events
        );
    }

    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="{FONT}">"#
    );
    let _ = writeln!(
        svg,
        r##"<defs>
<pattern id="park" patternUnits="userSpaceOnUse" width="4" height="4" patternTransform="rotate(45)"><rect width="4" height="4" fill="#efefef"/><line x1="0" y1="0" x2="0" y2="4" stroke="#9a9a9a" stroke-width="1.6"/></pattern>
<marker id="arrow" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="5" markerHeight="5" orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="{FLOW_COLOR}" fill-opacity="0.8"/></marker>
<marker id="steal-arrow" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="4" markerHeight="4" orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="{STEAL_COLOR}" fill-opacity="0.7"/></marker>
<clipPath id="plot"><rect x="{left:.1}" y="{:.1}" width="{plot_w:.1}" height="{:.1}"/></clipPath>
</defs>
<rect width="100%" height="100%" fill="#fff"/>
<text x="20" y="26" font-size="17" font-weight="bold" fill="#111">{}</text>
<text x="20" y="46" font-size="11.5" fill="#555">{}</text>"##,
        top - 14.0,
        plot_bottom - top + 14.0,
        esc(title),
        esc(&subtitle)
    );
    svg.push_str(&body);
    svg.push_str("</svg>\n");
    Ok(Picture {
        svg,
        slices: shown_slices,
        arrows,
        window_ms: to_ms - from_ms,
    })
}

enum LegendMark {
    Colour(&'static str),
    Park,
    Tick(&'static str),
    /// Colour and marker id.
    Arrow(&'static str, &'static str),
}

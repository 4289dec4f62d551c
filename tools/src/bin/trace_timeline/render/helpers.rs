//! The small functions the picture is drawn with: lists and labels, the
//! busy share of a window, axis steps, durations, text widths, a colour's
//! lightness and XML escaping.

use crate::load::{Slice, Trace, Track};

/// The first `n` of `items`, then "…" if there are more.
pub(super) fn list(items: &[&str], n: usize) -> String {
    let mut text = items[..items.len().min(n)].join(", ");
    if items.len() > n {
        text.push_str(", …");
    }
    text
}

/// At most `cap` of `items`, evenly spread.
pub(super) fn thin_out<T: Copy>(items: Vec<T>, cap: usize) -> Vec<T> {
    if items.len() <= cap {
        return items;
    }
    (0..cap).map(|k| items[k * items.len() / cap]).collect()
}

pub(super) fn track_label(trace: &Trace, t: &Track) -> String {
    let name = t.name.clone().unwrap_or_else(|| format!("tid {}", t.tid));
    let several_processes = trace.tracks.iter().any(|o| o.pid != t.pid);
    if several_processes {
        format!("{} · {name}", t.pid)
    } else {
        name
    }
}

/// The share of `[w0, w1]` covered by the track's outermost slices.
pub(super) fn busy_share(slices: &[Slice], w0: f64, w1: f64) -> f64 {
    let mut covered = 0.0;
    let mut reach = w0;
    for s in slices.iter().filter(|s| s.depth == 0) {
        let (a, b) = (s.start.max(reach), s.end.min(w1));
        if b > a {
            covered += b - a;
        }
        reach = reach.max(s.end);
    }
    covered / (w1 - w0)
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
pub(super) fn nice_step(raw: f64) -> f64 {
    let raw = if raw > 0.0 && raw.is_finite() {
        raw
    } else {
        1.0
    };
    let power = 10f64.powf(raw.log10().floor());
    let m = raw / power;
    let n = if m <= 1.0 {
        1.0
    } else if m <= 2.0 {
        2.0
    } else if m <= 5.0 {
        5.0
    } else {
        10.0
    };
    n * power
}

/// A duration in microseconds, in a fitting unit.
pub(super) fn duration(us: f64) -> String {
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else if us >= 1.0 {
        format!("{us:.1} µs")
    } else {
        format!("{:.0} ns", us * 1000.0)
    }
}

/// About how wide `chars` characters of the sans-serif font are.
pub(super) fn text_width(chars: usize, size: f64) -> f64 {
    chars as f64 * size * 0.6
}

/// Whether dark text reads better than white on `#rrggbb`.
pub(super) fn light(hex: &str) -> bool {
    let channel = |i: usize| {
        hex.get(i..i + 2)
            .and_then(|h| u8::from_str_radix(h, 16).ok())
            .map_or(0.5, |v| f64::from(v) / 255.0)
    };
    0.299 * channel(1) + 0.587 * channel(3) + 0.114 * channel(5) > 0.55
}

/// Text for SVG content and attribute values.
pub(super) fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}

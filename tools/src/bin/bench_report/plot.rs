//! `bench_report --plot DIR`: an SVG bar chart of each table of medians the
//! report prints.
//!
//! The sections describe each table as a [`Chart`]: one [`Group`] per row
//! of the table (a workload, or an implementation where the table is about
//! one workload), one [`Bar`] per runtime in it, the median time, and a
//! note with the ratios the table prints. [`Plots`] turns them into
//! horizontal grouped bar charts, one file per chart, named after a slug
//! of its title.

use std::collections::HashSet;

use plotters::coord::Shift;
use std::path::{Path, PathBuf};

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One printed table, as a chart.
pub struct Chart {
    /// The table's title (the chart's, and its file's name).
    pub title: String,
    /// The unit of the values (the axis says it).
    pub unit: &'static str,
    /// One per row of the table, top to bottom.
    pub groups: Vec<Group>,
}

/// A row of a table: its label and a bar per runtime.
pub struct Group {
    pub label: String,
    pub bars: Vec<Bar>,
}

/// One runtime's median in a row, and what the table says about it beside
/// the time (its ratios), written after the time on the chart.
pub struct Bar {
    /// The implementation (the legend's entry; also its colour).
    pub series: String,
    pub value: f64,
    pub note: String,
}

impl Chart {
    pub fn new(title: impl Into<String>, unit: &'static str) -> Self {
        Chart {
            title: title.into(),
            unit,
            groups: Vec::new(),
        }
    }

    /// Adds a row and returns it, for its bars.
    pub fn group(&mut self, label: impl Into<String>) -> &mut Group {
        self.groups.push(Group {
            label: label.into(),
            bars: Vec::new(),
        });
        self.groups.last_mut().expect("just pushed")
    }

    /// A table about one workload: a row per implementation, one bar each.
    pub fn row(&mut self, series: &str, value: Option<f64>, note: String) {
        self.group(series).bar(series, value, note);
    }
}

impl Group {
    /// Adds a bar; a time the table has not got (`—`), or that is not a
    /// positive number, gets none.
    pub fn bar(&mut self, series: &str, value: Option<f64>, note: String) -> &mut Self {
        if let Some(value) = value.filter(|v| v.is_finite() && *v > 0.0) {
            self.bars.push(Bar {
                series: series.to_string(),
                value,
                note,
            });
        }
        self
    }
}

/// The ratios of `value` to each named reference the table divides by,
/// as `0.52x serial, 1.03x rayon`; a missing reference is left out (the
/// callers leave out a bar's ratio to itself so).
pub fn ratios(value: Option<f64>, refs: &[(&str, Option<f64>)]) -> String {
    let Some(value) = value else {
        return String::new();
    };
    refs.iter()
        .filter_map(|&(r, t)| t.map(|t| format!("{:.2}x {r}", value / t)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The folder the charts go to, and the names already used in it.
pub struct Plots {
    dir: PathBuf,
    used: HashSet<String>,
    written: Vec<PathBuf>,
}

impl Plots {
    /// Creates `dir` where missing and checks that a file can be written
    /// into it, so that a bad folder fails before the benchmarks run.
    pub fn open(dir: &Path) -> Result<Plots, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("--plot: cannot create the directory {}: {e}", dir.display()))?;
        let probe = dir.join(".bench_report_write_test");
        std::fs::write(&probe, b"")
            .map_err(|e| format!("--plot: cannot write into {}: {e}", dir.display()))?;
        // Only the probe's removal: failing to remove it is no reason to stop.
        let _ = std::fs::remove_file(&probe);
        Ok(Plots {
            dir: dir.to_path_buf(),
            used: HashSet::new(),
            written: Vec::new(),
        })
    }

    /// Writes `chart` as `DIR/<slug of its title>.svg` (a chart without a
    /// bar is skipped). Returns the path written.
    pub fn write(&mut self, chart: &Chart) -> Result<Option<PathBuf>, String> {
        if chart.groups.iter().all(|g| g.bars.is_empty()) {
            return Ok(None);
        }
        let base = slug(&chart.title);
        let mut name = base.clone();
        let mut k = 2;
        while !self.used.insert(name.clone()) {
            name = format!("{base}-{k}");
            k += 1;
        }
        let path = self.dir.join(format!("{name}.svg"));
        let svg = render(chart).map_err(|e| format!("--plot: drawing {}: {e}", path.display()))?;
        std::fs::write(&path, svg)
            .map_err(|e| format!("--plot: cannot write {}: {e}", path.display()))?;
        self.written.push(path.clone());
        Ok(Some(path))
    }

    /// The files written so far.
    pub fn written(&self) -> &[PathBuf] {
        &self.written
    }
}

/// A file name from a title: lower-case ASCII letters and digits, every
/// other run of characters one `-` (`µ` becomes `u`, `×` `x`, and an
/// apostrophe nothing: `weaves-benchmark-suite-summary`).
pub fn slug(title: &str) -> String {
    let mut s = String::new();
    for c in title.chars() {
        let c = match c {
            '\'' | '’' => continue,
            'µ' => 'u',
            '×' => 'x',
            c => c.to_ascii_lowercase(),
        };
        if c.is_ascii_alphanumeric() {
            s.push(c);
        } else if !s.is_empty() && !s.ends_with('-') {
            s.push('-');
        }
    }
    while s.ends_with('-') {
        s.pop();
    }
    if s.is_empty() {
        s.push_str("chart");
    }
    s
}

const WIDTH: u32 = 1200;
const FONT: &str = "sans-serif";
/// Pixels per bar, and between two rows (in bars).
const SLOT_PX: f64 = 22.0;
const GROUP_GAP: f64 = 0.6;
/// The size of the labels after the bars (plotters' size: the SVG says
/// `size / 1.24`).
const BAR_TEXT: f64 = 15.0;
/// Bar thickness, in slots.
const BAR: f64 = 0.78;
/// The widest a row label may make the label area (longer ones are cut).
const MAX_LABEL_PX: u32 = 480;
/// Above this ratio of the largest to the smallest time the time axis is
/// logarithmic (otherwise the short bars would not show).
const LOG_ABOVE: f64 = 25.0;

/// An estimate of the width of `text` in a sans-serif font of plotters'
/// `size` (the SVG's font size is `size / 1.24`): about half an em per
/// character, and a little more to be safe with other fonts.
fn text_px(text: &str, size: f64) -> f64 {
    text.chars().count() as f64 * size / 1.24 * 0.58
}

/// The label written after a bar: the series' name where a row has
/// several bars, the time, and the ratios.
fn bar_label(bar: &Bar, named: bool, unit: &str) -> String {
    let mut s = String::new();
    if named {
        s.push_str(&bar.series);
        s.push_str(": ");
    }
    s.push_str(&format!("{} {unit}", number(bar.value)));
    if !bar.note.is_empty() {
        s.push_str(" (");
        s.push_str(&bar.note);
        s.push(')');
    }
    s
}

/// A time as the tables write it, to about three significant digits.
fn number(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else if v >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A tick value without float noise (0.3, not 0.30000000000000004).
fn tick(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let digits = 3 - v.abs().log10().floor() as i32;
    let p = 10f64.powi(digits.max(0));
    format!("{}", (v * p).round() / p)
}

/// The colour of the `k`-th series of a family in a chart: selvedge in
/// blues and purples, rayon in oranges and reds, chili in greens, serial
/// code in greys, anything else in browns and pinks.
fn colour(series: &str, k: usize) -> RGBColor {
    const SELVEDGE: [RGBColor; 8] = [
        RGBColor(31, 119, 180),
        RGBColor(106, 61, 154),
        RGBColor(23, 190, 207),
        RGBColor(26, 35, 126),
        RGBColor(186, 104, 200),
        RGBColor(100, 181, 246),
        RGBColor(74, 20, 140),
        RGBColor(0, 121, 107),
    ];
    const RAYON: [RGBColor; 6] = [
        RGBColor(255, 127, 14),
        RGBColor(214, 39, 40),
        RGBColor(240, 190, 60),
        RGBColor(140, 20, 20),
        RGBColor(255, 138, 128),
        RGBColor(191, 90, 0),
    ];
    const CHILI: [RGBColor; 2] = [RGBColor(44, 160, 44), RGBColor(120, 190, 80)];
    const SERIAL: [RGBColor; 2] = [RGBColor(127, 127, 127), RGBColor(176, 176, 176)];
    const OTHER: [RGBColor; 3] = [
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(188, 189, 34),
    ];
    let family: &[RGBColor] = match family(series) {
        0 => &SELVEDGE,
        1 => &RAYON,
        2 => &CHILI,
        3 => &SERIAL,
        _ => &OTHER,
    };
    family[k % family.len()]
}

fn family(series: &str) -> usize {
    let s = series.to_ascii_lowercase();
    if s.starts_with("selvedge") {
        0
    } else if s.starts_with("rayon") || s.starts_with("peer") {
        1
    } else if s.starts_with("chili") {
        2
    } else if s.starts_with("serial") {
        3
    } else {
        4
    }
}

/// A linear axis from `lo` to `hi` with its ticks where we want them (the
/// rows' middles, round times): plotters' `with_key_points` on an `f64`
/// range cannot take a label formatter.
struct Axis {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
}

impl Ranged for Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let share = (v - self.lo) / (self.hi - self.lo);
        limit.0 + (share * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

/// The chart as an SVG document.
fn render(chart: &Chart) -> Result<String, String> {
    let groups: Vec<&Group> = chart.groups.iter().filter(|g| !g.bars.is_empty()).collect();
    // The series in order of first appearance, each with its colour.
    let mut series: Vec<(&str, RGBColor)> = Vec::new();
    let mut per_family = [0usize; 5];
    for bar in groups.iter().flat_map(|g| &g.bars) {
        if !series.iter().any(|(s, _)| *s == bar.series) {
            let f = family(&bar.series);
            series.push((&bar.series, colour(&bar.series, per_family[f])));
            per_family[f] += 1;
        }
    }
    let colour_of = |name: &str| {
        series
            .iter()
            .find(|(s, _)| *s == name)
            .map_or(BLACK, |&(_, c)| c)
    };
    let named = groups.iter().any(|g| g.bars.len() > 1);

    // Rows top to bottom: y runs from `total` (top) down to 0.
    let mut slots = 0.0;
    let mut centres = Vec::new(); // (group centre, bar centres), from the top
    for (i, g) in groups.iter().enumerate() {
        if i > 0 {
            slots += GROUP_GAP;
        }
        let start = slots;
        let bars: Vec<f64> = g
            .bars
            .iter()
            .map(|_| {
                slots += 1.0;
                slots - 0.5
            })
            .collect();
        centres.push(((start + slots) / 2.0, bars));
    }
    let total = slots;
    let y_of = |from_top: f64| total - from_top;

    // Row labels, cut to the label area.
    let label_size = 16.0;
    let max_chars = ((f64::from(MAX_LABEL_PX) - 16.0) / text_px("m", label_size)) as usize;
    let labels: Vec<String> = groups
        .iter()
        .map(|g| {
            if g.label.chars().count() > max_chars {
                let cut: String = g.label.chars().take(max_chars - 1).collect();
                format!("{cut}…")
            } else {
                g.label.clone()
            }
        })
        .collect();
    let label_px = labels
        .iter()
        .map(|l| text_px(l, label_size))
        .fold(60.0, f64::max)
        .min(f64::from(MAX_LABEL_PX))
        + 16.0;

    // The legend: columns of swatches and names under the chart.
    let legend_size = 16.0;
    let entry_px = series
        .iter()
        .map(|(s, _)| text_px(s, legend_size))
        .fold(0.0, f64::max)
        + 40.0;
    let columns = ((f64::from(WIDTH) - 40.0) / entry_px).floor().max(1.0) as usize;
    let legend_rows = series.len().div_ceil(columns);
    let legend_h = 16 + 20 * legend_rows as u32;

    let plot_h = (total * SLOT_PX).ceil() as u32;
    let height = 40 + 26 + plot_h + 60 + legend_h + 10;
    let plot_w = f64::from(WIDTH) - label_px - 20.0 - 30.0;

    // The time axis: logarithmic where the times span more than LOG_ABOVE.
    let values: Vec<f64> = groups
        .iter()
        .flat_map(|g| &g.bars)
        .map(|b| b.value)
        .collect();
    let (min, max) = values.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), &v| {
        (lo.min(v), hi.max(v))
    });
    let log = max / min > LOG_ABOVE;
    let show = |v: f64| if log { v.log10() } else { v };
    let lo = if log {
        (min.log10() - 0.15).floor()
    } else {
        0.0
    };
    // Room after each bar for its label: the axis ends where the widest
    // need is met, a bar taking at least a third of the width.
    let mut hi = show(max);
    for g in &groups {
        for bar in &g.bars {
            let need = text_px(&bar_label(bar, named, chart.unit), BAR_TEXT) + 10.0;
            let share = (1.0 - need / plot_w).max(0.33);
            hi = hi.max(lo + (show(bar.value) - lo) / share);
        }
    }
    let ticks: Vec<f64> = if log {
        let decades = hi - lo;
        let mut t = Vec::new();
        let mut e = lo;
        while e <= hi + 1e-9 {
            t.push(e);
            if decades <= 2.5 {
                for m in [2.0f64, 5.0] {
                    let v = e + m.log10();
                    if v <= hi {
                        t.push(v);
                    }
                }
            }
            e += 1.0;
        }
        t
    } else {
        let raw = hi / 6.0;
        let p = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 2.5, 5.0, 10.0]
            .iter()
            .map(|m| m * p)
            .find(|s| *s >= raw)
            .unwrap_or(10.0 * p);
        hi = (hi / step).ceil() * step;
        (0..)
            .map(|k| k as f64 * step)
            .take_while(|v| *v <= hi + step * 1e-6)
            .collect()
    };
    let group_ticks: Vec<f64> = centres.iter().map(|(c, _)| y_of(*c)).collect();

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let (top, legend_area) = root.split_vertically(height - legend_h - 10);
        let titled = top
            .titled(&chart.title, (FONT, 27).into_font().style(FontStyle::Bold))
            .map_err(|e| e.to_string())?;
        let what = if named {
            "bars: the median of each implementation; after each: its name, the median and the ratios the table prints"
        } else {
            "bars: the median of each implementation; after each: the median and the ratios the table prints"
        };
        let area = titled
            .titled(what, (FONT, 16).into_font().color(&RGBColor(90, 90, 90)))
            .map_err(|e| e.to_string())?;

        let x_desc = format!(
            "median time per run, {}{}",
            chart.unit,
            if log { " (logarithmic scale)" } else { "" }
        );
        let row_of = |y: &f64| {
            group_ticks
                .iter()
                .position(|t| (t - y).abs() < 1e-6)
                .map(|i| labels[i].clone())
                .unwrap_or_default()
        };
        let x_fmt = |x: &f64| {
            if log {
                tick(10f64.powf(*x))
            } else {
                tick(*x)
            }
        };
        let mut ctx = ChartBuilder::on(&area)
            .margin_left(10)
            .margin_right(30)
            .margin_top(8)
            .x_label_area_size(50)
            .y_label_area_size(label_px as u32)
            .build_cartesian_2d(
                Axis { lo, hi, ticks },
                Axis {
                    lo: -0.3,
                    hi: total + 0.3,
                    ticks: group_ticks.clone(),
                },
            )
            .map_err(|e| e.to_string())?;
        ctx.configure_mesh()
            .disable_y_mesh()
            .x_desc(x_desc)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&row_of)
            .label_style((FONT, label_size))
            .axis_desc_style((FONT, 18))
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()
            .map_err(|e| e.to_string())?;

        let text = (FONT, BAR_TEXT)
            .into_font()
            .color(&RGBColor(30, 30, 30))
            .pos(Pos::new(HPos::Left, VPos::Center));
        for (g, (_, bar_y)) in groups.iter().zip(&centres) {
            for (bar, &y) in g.bars.iter().zip(bar_y) {
                let y = y_of(y);
                let x = show(bar.value);
                ctx.draw_series(std::iter::once(Rectangle::new(
                    [(lo, y - BAR / 2.0), (x, y + BAR / 2.0)],
                    colour_of(&bar.series).filled(),
                )))
                .map_err(|e| e.to_string())?;
                ctx.draw_series(std::iter::once(
                    EmptyElement::at((x, y))
                        + Text::new(bar_label(bar, named, chart.unit), (5, 0), text.clone()),
                ))
                .map_err(|e| e.to_string())?;
            }
        }

        draw_legend(&legend_area, &series, entry_px, columns, legend_size)?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The legend: a swatch and the name of each series, in columns.
fn draw_legend(
    area: &DrawingArea<SVGBackend, Shift>,
    series: &[(&str, RGBColor)],
    entry_px: f64,
    columns: usize,
    size: f64,
) -> Result<(), String> {
    let style = (FONT, size)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (i, (name, c)) in series.iter().enumerate() {
        let x = 20 + ((i % columns) as f64 * entry_px) as i32;
        let y = 8 + 20 * (i / columns) as i32;
        area.draw(&Rectangle::new([(x, y + 2), (x + 14, y + 16)], c.filled()))
            .map_err(|e| e.to_string())?;
        area.draw(&Text::new(name.to_string(), (x + 20, y + 9), style.clone()))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

//! Chart geometry for the dashboard's server-rendered SVG: scales, ticks and shapes as plain
//! numbers and strings, which the templates turn into SVG elements (so every label goes
//! through the templates' HTML escaping). Pure functions, no I/O.
//!
//! - [`context_chart`]: from a [`CallSeries`], the context's tokens at each LLM call of a task (a line with a point
//!   per call, rising to each compression's "before" and dropping to its "after"), the
//!   compression threshold (a horizontal line) and each compression (a vertical marker from the
//!   tokens before to the tokens after, between the two calls).
//! - [`stacked_columns`]: columns of stacked segments (tasks per day by status; the duration
//!   histogram is the one-segment case).
//! - [`horizontal_bars`]: labelled bars (tokens by model).

use super::call_series::CallSeries;

/// Points drawn as separate circles up to this many calls; above, only the line.
pub const MAX_POINTS: usize = 400;

/// A tick on an axis: its position (pixels) and its label.
#[derive(Debug, Clone, PartialEq)]
pub struct Tick {
    pub pos: f64,
    pub label: String,
}

/// A point of the context chart (one LLM call).
#[derive(Debug, Clone, PartialEq)]
pub struct ChartPoint {
    pub x: f64,
    pub y: f64,
    /// Tooltip (SVG `<title>`).
    pub title: String,
    /// `ok` or `error`.
    pub class: &'static str,
}

/// A compression marker.
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    pub x: f64,
    /// Top (tokens before) and bottom (tokens after) of the marker.
    pub y_before: f64,
    pub y_after: f64,
    pub title: String,
}

/// A horizontal reference line (threshold, window).
#[derive(Debug, Clone, PartialEq)]
pub struct HLine {
    pub y: f64,
    pub label: String,
}

/// The context chart, laid out.
#[derive(Debug, Clone, PartialEq)]
pub struct ContextChart {
    pub width: f64,
    pub height: f64,
    /// Plot area: left, top, right, bottom.
    pub left: f64,
    pub top: f64,
    pub right: f64,
    pub bottom: f64,
    /// `points` attribute of the polyline (`x,y x,y …`).
    pub line: String,
    /// One circle per call (empty above [`MAX_POINTS`] calls).
    pub points: Vec<ChartPoint>,
    pub threshold: Option<HLine>,
    pub window: Option<HLine>,
    pub compressions: Vec<Marker>,
    pub x_ticks: Vec<Tick>,
    pub y_ticks: Vec<Tick>,
    /// Calls in the series.
    pub calls: u64,
    /// Compressions in the series (markers are drawn for at most
    /// [`super::call_series::MAX_MARKERS`]).
    pub compressions_total: u64,
}

/// `n` in short form: `950`, `1.2k`, `45k`, `3.4M`.
pub fn short_number(n: f64) -> String {
    let a = n.abs();
    let (v, unit) = if a >= 1e9 {
        (n / 1e9, "G")
    } else if a >= 1e6 {
        (n / 1e6, "M")
    } else if a >= 1e3 {
        (n / 1e3, "k")
    } else {
        (n, "")
    };
    if unit.is_empty() {
        format!("{}", v.round() as i64)
    } else if v.abs() < 10.0 && (v * 10.0).round() % 10.0 != 0.0 {
        format!("{v:.1}{unit}")
    } else {
        format!("{}{unit}", v.round() as i64)
    }
}

/// A "nice" tick step (1, 2 or 5 × 10^k) giving about `count` ticks up to `max`.
pub fn nice_step(max: f64, count: usize) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / count.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    (nice * mag).max(1.0)
}

/// Ticks from 0 to `max` (inclusive, rounded up to a step) and the axis top value.
fn value_ticks(max: f64, count: usize) -> (Vec<f64>, f64) {
    let step = nice_step(max, count);
    let top = ((max / step).ceil() * step).max(step);
    let n = (top / step).round() as usize;
    ((0..=n).map(|i| i as f64 * step).collect(), top)
}

fn fmt(v: f64) -> String {
    format!("{v:.1}")
}

/// Lay out the context chart of `series`: a point per call while every call is its own group
/// (at most [`MAX_POINTS`] calls), else a line through the groups' maxima.
pub fn context_chart(series: &CallSeries) -> ContextChart {
    let (width, height) = (760.0, 280.0);
    let (left, top, right, bottom) = (56.0, 16.0, width - 16.0, height - 32.0);
    let reference = (series.max_tokens as f64).max(series.threshold.unwrap_or(0) as f64);
    let show_window = series
        .window
        .filter(|w| (*w as f64) <= reference * 1.25 && *w > 0);
    let (ticks, y_top) = value_ticks(reference.max(show_window.unwrap_or(0) as f64).max(1.0), 5);
    let y = |v: f64| bottom - (v / y_top) * (bottom - top);
    let count = series.calls;
    // Call i (0-based) sits at x(i + 1); the axis runs from 0.5 to count + 0.5.
    let span = count.max(1) as f64;
    let x = |pos: f64| left + (pos - 0.5) / span * (right - left);

    let mut vertices: Vec<(f64, f64)> =
        Vec::with_capacity(series.groups.len() + 2 * series.compressions.len());
    let mut next = series.compressions.iter().peekable();
    for g in &series.groups {
        if series.exact() {
            // At each compression, the rise to its "before" and the drop to its "after" (the
            // context grows between two calls, then is cut).
            while let Some(k) = next.next_if(|k| k.after_calls <= g.first) {
                let kx = x(k.after_calls as f64 + 0.5);
                vertices.push((kx, y(k.before_tokens as f64)));
                vertices.push((kx, y(k.after_tokens as f64)));
            }
        }
        let pos = g.first as f64 + (g.count as f64 + 1.0) / 2.0;
        vertices.push((x(pos), y(g.max_tokens as f64)));
    }
    let line = vertices
        .iter()
        .map(|(vx, vy)| format!("{},{}", fmt(*vx), fmt(*vy)))
        .collect::<Vec<_>>()
        .join(" ");
    let points = if series.exact() && count as usize <= MAX_POINTS {
        series
            .groups
            .iter()
            .map(|g| ChartPoint {
                x: x(g.first as f64 + 1.0),
                y: y(g.max_tokens as f64),
                title: format!(
                    "LLM call {}: {} context tokens{}",
                    g.first_n,
                    g.max_tokens,
                    if g.errors > 0 { " (failed)" } else { "" }
                ),
                class: if g.errors > 0 { "error" } else { "ok" },
            })
            .collect()
    } else {
        Vec::new()
    };
    let compressions = series
        .compressions
        .iter()
        .map(|c| Marker {
            x: x(c.after_calls as f64 + 0.5).clamp(left, right),
            y_before: y(c.before_tokens as f64),
            y_after: y(c.after_tokens as f64),
            title: format!(
                "compression after LLM call {}: {} → {} tokens{}",
                c.after_calls,
                c.before_tokens,
                c.after_tokens,
                c.summary_id
                    .map(|s| format!(" (summary {s})"))
                    .unwrap_or_default()
            ),
        })
        .collect();
    let x_step = nice_step(count as f64, 8) as u64;
    let mut x_ticks = Vec::new();
    if count > 0 {
        let mut i = 1;
        while i <= count {
            x_ticks.push(Tick {
                pos: x(i as f64),
                label: i.to_string(),
            });
            i = if i == 1 && x_step > 1 {
                x_step
            } else {
                i + x_step
            };
        }
    }
    ContextChart {
        width,
        height,
        left,
        top,
        right,
        bottom,
        line,
        points,
        threshold: series.threshold.map(|t| HLine {
            y: y(t as f64),
            label: format!("threshold {}", short_number(t as f64)),
        }),
        window: show_window.map(|w| HLine {
            y: y(w as f64),
            label: format!("window {}", short_number(w as f64)),
        }),
        compressions,
        x_ticks,
        y_ticks: ticks
            .iter()
            .map(|v| Tick {
                pos: y(*v),
                label: short_number(*v),
            })
            .collect(),
        calls: count,
        compressions_total: series.compressions_total,
    }
}

/// A segment of a column.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    pub y: f64,
    pub height: f64,
    /// CSS class (e.g. the status).
    pub class: String,
    pub title: String,
}

/// A column of stacked segments.
#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub x: f64,
    pub width: f64,
    /// Centre of the column, for its label.
    pub center: f64,
    pub segments: Vec<Segment>,
    /// Shown under the column ("" for none).
    pub label: String,
}

/// A column chart, laid out.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnChart {
    pub width: f64,
    pub height: f64,
    pub left: f64,
    pub top: f64,
    pub right: f64,
    pub bottom: f64,
    pub columns: Vec<Column>,
    pub y_ticks: Vec<Tick>,
}

/// One input column: its label, whether to print the label, and its segments as
/// `(class, value, tooltip)` from the bottom up.
pub type ColumnInput = (String, bool, Vec<(String, f64, String)>);

/// Lay out `columns` as stacked columns.
pub fn stacked_columns(columns: &[ColumnInput], width: f64, height: f64) -> ColumnChart {
    let (left, top, right, bottom) = (48.0, 12.0, width - 8.0, height - 40.0);
    let max = columns
        .iter()
        .map(|(_, _, segs)| segs.iter().map(|(_, v, _)| v).sum::<f64>())
        .fold(0.0, f64::max);
    let (ticks, y_top) = value_ticks(max.max(1.0), 4);
    let y = |v: f64| bottom - (v / y_top) * (bottom - top);
    let slot = (right - left) / columns.len().max(1) as f64;
    let bar = (slot * 0.75).max(1.0);
    ColumnChart {
        width,
        height,
        left,
        top,
        right,
        bottom,
        columns: columns
            .iter()
            .enumerate()
            .map(|(i, (label, show, segs))| {
                let x0 = left + i as f64 * slot + (slot - bar) / 2.0;
                let mut base = 0.0;
                let segments = segs
                    .iter()
                    .filter(|(_, v, _)| *v > 0.0)
                    .map(|(class, v, title)| {
                        let s = Segment {
                            y: y(base + v),
                            height: y(base) - y(base + v),
                            class: class.clone(),
                            title: title.clone(),
                        };
                        base += v;
                        s
                    })
                    .collect();
                Column {
                    x: x0,
                    width: bar,
                    center: x0 + bar / 2.0,
                    segments,
                    label: if *show { label.clone() } else { String::new() },
                }
            })
            .collect(),
        y_ticks: ticks
            .iter()
            .map(|v| Tick {
                pos: y(*v),
                label: short_number(*v),
            })
            .collect(),
    }
}

/// A horizontal bar.
#[derive(Debug, Clone, PartialEq)]
pub struct HBar {
    pub y: f64,
    pub width: f64,
    pub label: String,
    pub value: String,
    pub title: String,
}

/// A horizontal bar chart, laid out.
#[derive(Debug, Clone, PartialEq)]
pub struct HBarChart {
    pub width: f64,
    pub height: f64,
    /// Where the bars start (labels are left of it).
    pub left: f64,
    pub bar_height: f64,
    pub bars: Vec<HBar>,
}

/// Lay out `(label, value)` pairs as horizontal bars, longest scaled to the chart's width.
pub fn horizontal_bars(items: &[(String, f64)], width: f64) -> HBarChart {
    let left = 180.0;
    let bar_height = 22.0;
    let max = items.iter().map(|(_, v)| *v).fold(0.0, f64::max).max(1.0);
    let room = width - left - 80.0;
    HBarChart {
        width,
        height: (items.len().max(1) as f64) * (bar_height + 8.0) + 8.0,
        left,
        bar_height,
        bars: items
            .iter()
            .enumerate()
            .map(|(i, (label, v))| HBar {
                y: 8.0 + i as f64 * (bar_height + 8.0),
                width: (v / max * room).max(if *v > 0.0 { 1.0 } else { 0.0 }),
                label: label.clone(),
                value: short_number(*v),
                title: format!("{label}: {v}"),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(tokens: &[u64], compressions: &[(u64, u64, u64)]) -> CallSeries {
        let mut s = CallSeries::new();
        let mut next = compressions.iter().peekable();
        for (i, t) in tokens.iter().enumerate() {
            while let Some((_, before, after)) = next.next_if(|(at, _, _)| *at == i as u64) {
                s.push_compression(*before, *after, Some(1));
            }
            s.push_call(i as u64 + 1, *t, true);
        }
        s.threshold = Some(700);
        s.window = Some(1000);
        s
    }

    #[test]
    fn numbers_and_steps() {
        assert_eq!(short_number(950.0), "950");
        assert_eq!(short_number(1200.0), "1.2k");
        assert_eq!(short_number(45_000.0), "45k");
        assert_eq!(short_number(3_400_000.0), "3.4M");
        assert_eq!(short_number(2_000.0), "2k");
        assert_eq!(nice_step(1000.0, 5), 200.0);
        assert_eq!(nice_step(7.0, 5), 2.0);
        assert_eq!(nice_step(0.0, 5), 1.0);
        assert_eq!(value_ticks(950.0, 5).1, 1000.0);
    }

    #[test]
    fn context_chart_places_points_threshold_and_compressions() {
        let c = context_chart(&series(&[400, 900, 300, 500], &[(2, 1000, 250)]));
        assert_eq!(c.points.len(), 4);
        assert_eq!(c.calls, 4);
        // Higher token counts are higher up (smaller y).
        assert!(c.points[1].y < c.points[0].y);
        let t = c.threshold.as_ref().unwrap();
        assert!(
            t.y > c.points[1].y && t.y < c.points[0].y,
            "700 is between 400 and 900"
        );
        assert!(c.window.is_some());
        // The compression sits between calls 2 and 3, from 1000 down to 250.
        let m = &c.compressions[0];
        assert!(m.x > c.points[1].x && m.x < c.points[2].x);
        assert!(m.y_before < m.y_after);
        // Four calls, and the rise and drop of the compression between calls 2 and 3.
        assert_eq!(c.line.split(' ').count(), 6);
        assert_eq!(c.x_ticks[0].label, "1");
        assert!(c.y_ticks.iter().any(|t| t.label == "1k"));
    }

    #[test]
    fn long_series_are_grouped_without_points() {
        let tokens: Vec<u64> = (1..=10_000).collect();
        let mut long = series(&tokens, &[]);
        long.threshold = None;
        let c = context_chart(&long);
        assert!(c.points.is_empty());
        assert!(c.line.split(' ').count() <= 2 * crate::web::call_series::MAX_GROUPS);
        assert!(c.threshold.is_none());
        assert_eq!(c.calls, 10_000);
        let empty = context_chart(&CallSeries::new());
        assert!(empty.line.is_empty() && empty.x_ticks.is_empty());
    }

    #[test]
    fn columns_stack_and_bars_scale() {
        let cols = vec![
            (
                "a".to_string(),
                true,
                vec![
                    ("completed".into(), 2.0, "2".into()),
                    ("failed".into(), 1.0, "1".into()),
                ],
            ),
            (
                "b".to_string(),
                false,
                vec![("completed".into(), 0.0, "0".into())],
            ),
        ];
        let c = stacked_columns(&cols, 600.0, 200.0);
        assert_eq!(c.columns[0].segments.len(), 2);
        assert!(c.columns[1].segments.is_empty());
        let s = &c.columns[0].segments;
        assert!((s[0].y - (s[1].y + s[1].height)).abs() < 1e-9, "stacked");
        assert_eq!(c.columns[1].label, "");
        let b = horizontal_bars(&[("m1".into(), 100.0), ("m2".into(), 50.0)], 600.0);
        assert!((b.bars[0].width - 2.0 * b.bars[1].width).abs() < 1e-9);
    }
}

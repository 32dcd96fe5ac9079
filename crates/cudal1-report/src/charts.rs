//! Charts as inline SVG, built by hand so that the report needs no fonts, scripts or images from
//! outside: line charts (fast_p curves, training curves, optimize rounds), grouped bars (speedup
//! distributions) and a scatter with a diagonal (claimed against measured).
//!
//! Every chart is an `<svg class="chart">` with an `id`, a `<title>` for screen readers and a
//! legend; text is escaped.

use std::fmt::Write;

/// Colours of series, in order (distinct for the common kinds of colour blindness).
const PALETTE: [&str; 8] =
    ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#7f7f7f", "#000000"];

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 320.0;
const LEFT: f64 = 56.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 44.0;

/// The colour of the `i`th series.
#[must_use]
pub fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// One line of a [`LineChart`].
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub color: &'static str,
    pub dashed: bool,
}

/// Lines against a shared x axis.
#[derive(Clone, Debug, PartialEq)]
pub struct LineChart {
    pub id: String,
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// Fixed ranges; else from the data.
    pub x_range: Option<(f64, f64)>,
    pub y_range: Option<(f64, f64)>,
    /// Marks each point with a dot (few points, e.g. optimize rounds).
    pub dots: bool,
}

/// Escapes text for SVG and HTML.
#[must_use]
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// An axis mapping data to pixels, linear or logarithmic (base 10).
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    from: f64,
    to: f64,
}

impl Axis {
    fn new(lo: f64, hi: f64, log: bool, from: f64, to: f64) -> Axis {
        let (lo, hi) = if log { (lo.log10(), hi.log10()) } else { (lo, hi) };
        let (lo, hi) = if (hi - lo).abs() < 1e-12 { (lo - 0.5, hi + 0.5) } else { (lo, hi) };
        Axis { lo, hi, log, from, to }
    }

    fn px(&self, v: f64) -> f64 {
        let v = if self.log { v.max(1e-300).log10() } else { v };
        self.from + (v - self.lo) / (self.hi - self.lo) * (self.to - self.from)
    }

    /// Tick values, in data units.
    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (a, b) = (self.lo.floor() as i32, self.hi.ceil() as i32);
            let mut out = Vec::new();
            for e in a..=b {
                for m in [1.0, 2.0, 5.0] {
                    let v = m * 10f64.powi(e);
                    let l = v.log10();
                    if l >= self.lo - 1e-9 && l <= self.hi + 1e-9 {
                        out.push(v);
                    }
                }
            }
            return out;
        }
        let step = nice_step((self.hi - self.lo) / 5.0);
        let mut v = (self.lo / step).ceil() * step;
        let mut out = Vec::new();
        while v <= self.hi + step * 1e-9 && out.len() < 50 {
            out.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
            v += step;
        }
        out
    }
}

fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
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
    nice * mag
}

/// A tick label: short, without trailing zeros.
fn tick_text(v: f64) -> String {
    if v != 0.0 && (v.abs() >= 1e5 || v.abs() < 1e-3) {
        return format!("{v:.0e}");
    }
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".into()
    } else {
        s.to_owned()
    }
}

fn range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values.filter(|v| v.is_finite()).fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((a, b)) => Some((a.min(v), b.max(v))),
    })
}

fn open(out: &mut String, id: &str, title: &str, height: f64) {
    let _ = write!(
        out,
        r#"<svg class="chart" id="{id}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" role="img" aria-label="{t}"><title>{t}</title><text class="chart-title" x="{x}" y="18" text-anchor="middle">{t}</text>"#,
        id = escape(id),
        t = escape(title),
        x = WIDTH / 2.0,
    );
}

fn axes(out: &mut String, x: &Axis, y: &Axis, x_label: &str, y_label: &str, height: f64) {
    let bottom = height - BOTTOM;
    let _ = write!(
        out,
        r##"<g class="axes"><line x1="{LEFT}" y1="{bottom}" x2="{}" y2="{bottom}" stroke="#444"/><line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}" stroke="#444"/>"##,
        WIDTH - RIGHT
    );
    for t in x.ticks() {
        let px = x.px(t);
        let _ = write!(
            out,
            r##"<line x1="{px:.1}" y1="{bottom}" x2="{px:.1}" y2="{TOP}" stroke="#e4e4e4"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            bottom + 14.0,
            tick_text(t)
        );
    }
    for t in y.ticks() {
        let py = y.px(t);
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{}" y2="{py:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 4.0,
            py + 4.0,
            tick_text(t)
        );
    }
    let _ = write!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text x="14" y="{:.1}" text-anchor="middle" transform="rotate(-90 14 {:.1})">{}</text></g>"#,
        (LEFT + WIDTH - RIGHT) / 2.0,
        height - 8.0,
        escape(x_label),
        (TOP + bottom) / 2.0,
        (TOP + bottom) / 2.0,
        escape(y_label)
    );
}

/// Height of the legend below a chart's plot.
fn legend_height(entries: usize) -> f64 {
    16.0 * entries as f64 + 4.0
}

/// The legend, below the plot (whose height is `top`), one entry per line.
fn legend(out: &mut String, entries: &[(&str, &str, bool)], top: f64) {
    let _ = write!(out, r#"<g class="legend">"#);
    for (i, (name, color, dashed)) in entries.iter().enumerate() {
        let y = top + 8.0 + 16.0 * i as f64;
        let x = LEFT;
        let dash = if *dashed { r#" stroke-dasharray="4 3""# } else { "" };
        let _ = write!(
            out,
            r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
            x + 18.0,
            x + 22.0,
            y + 4.0,
            escape(name)
        );
    }
    out.push_str("</g>");
}

/// Renders `chart`; an empty chart says that it has no data.
#[must_use]
pub fn line_chart(chart: &LineChart) -> String {
    let mut out = String::new();
    open(&mut out, &chart.id, &chart.title, HEIGHT + legend_height(chart.series.len()));
    let xs = chart
        .x_range
        .or_else(|| range(chart.series.iter().flat_map(|s| s.points.iter().map(|p| p.0))));
    let ys = chart
        .y_range
        .or_else(|| range(chart.series.iter().flat_map(|s| s.points.iter().map(|p| p.1))));
    let (Some((x0, x1)), Some((y0, y1))) = (xs, ys) else {
        let _ = write!(
            out,
            r#"<text class="no-data" x="{}" y="{}" text-anchor="middle">no data</text></svg>"#,
            WIDTH / 2.0,
            HEIGHT / 2.0
        );
        return out;
    };
    let pad = if chart.y_range.is_some() { 0.0 } else { (y1 - y0).abs() * 0.05 };
    let x = Axis::new(x0, x1, false, LEFT, WIDTH - RIGHT);
    let y = Axis::new(y0 - pad, y1 + pad, false, HEIGHT - BOTTOM, TOP);
    axes(&mut out, &x, &y, &chart.x_label, &chart.y_label, HEIGHT);
    for s in &chart.series {
        let points: Vec<String> = s
            .points
            .iter()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .map(|&(a, b)| format!("{:.1},{:.1}", x.px(a), y.px(b)))
            .collect();
        let dash = if s.dashed { r#" stroke-dasharray="5 4""# } else { "" };
        let _ = write!(
            out,
            r#"<polyline class="series" data-name="{}" fill="none" stroke="{}" stroke-width="2"{dash} points="{}"/>"#,
            escape(&s.name),
            s.color,
            points.join(" ")
        );
        if chart.dots {
            for p in &points {
                let (a, b) = p.split_once(',').unwrap_or(("0", "0"));
                let _ = write!(out, r#"<circle cx="{a}" cy="{b}" r="3" fill="{}"/>"#, s.color);
            }
        }
    }
    let entries: Vec<(&str, &str, bool)> =
        chart.series.iter().map(|s| (s.name.as_str(), s.color, s.dashed)).collect();
    legend(&mut out, &entries, HEIGHT);
    out.push_str("</svg>");
    out
}

/// Counts per category for each group (e.g. per speedup bin, for each batch), as side-by-side bars.
#[must_use]
pub fn grouped_bars(
    id: &str,
    title: &str,
    x_label: &str,
    categories: &[String],
    groups: &[(String, Vec<usize>)],
) -> String {
    let mut out = String::new();
    open(&mut out, id, title, HEIGHT + legend_height(groups.len()));
    let max = groups.iter().flat_map(|g| g.1.iter().copied()).max().unwrap_or(0);
    if max == 0 || categories.is_empty() {
        let _ = write!(
            out,
            r#"<text class="no-data" x="{}" y="{}" text-anchor="middle">no correct candidates</text></svg>"#,
            WIDTH / 2.0,
            HEIGHT / 2.0
        );
        return out;
    }
    let bottom = HEIGHT - BOTTOM;
    let y = Axis::new(0.0, max as f64 * 1.1, false, bottom, TOP);
    let slot = (WIDTH - RIGHT - LEFT) / categories.len() as f64;
    let bar = (slot * 0.8) / groups.len().max(1) as f64;
    let _ = write!(
        out,
        r##"<g class="axes"><line x1="{LEFT}" y1="{bottom}" x2="{}" y2="{bottom}" stroke="#444"/><line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}" stroke="#444"/>"##,
        WIDTH - RIGHT
    );
    for t in y.ticks().into_iter().filter(|t| t.fract() == 0.0) {
        let py = y.px(t);
        let _ = write!(
            out,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{}" y2="{py:.1}" stroke="#e4e4e4"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 4.0,
            py + 4.0,
            tick_text(t)
        );
    }
    for (i, c) in categories.iter().enumerate() {
        let cx = LEFT + slot * (i as f64 + 0.5);
        let _ = write!(
            out,
            r#"<text x="{cx:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            bottom + 14.0,
            escape(c)
        );
    }
    let _ = write!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text x="14" y="{:.1}" text-anchor="middle" transform="rotate(-90 14 {:.1})">tasks</text></g>"#,
        (LEFT + WIDTH - RIGHT) / 2.0,
        HEIGHT - 8.0,
        escape(x_label),
        (TOP + bottom) / 2.0,
        (TOP + bottom) / 2.0
    );
    for (g, (name, counts)) in groups.iter().enumerate() {
        for (i, &n) in counts.iter().enumerate() {
            if n == 0 {
                continue;
            }
            let x0 = LEFT + slot * i as f64 + slot * 0.1 + bar * g as f64;
            let top = y.px(n as f64);
            let _ = write!(
                out,
                r#"<rect class="bar" data-group="{}" data-count="{n}" x="{x0:.1}" y="{top:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}: {n}</title></rect>"#,
                escape(name),
                bar.max(1.0),
                bottom - top,
                color(g),
                escape(&format!("{name}, {}", categories[i]))
            );
        }
    }
    let entries: Vec<(&str, &str, bool)> =
        groups.iter().enumerate().map(|(g, (n, _))| (n.as_str(), color(g), false)).collect();
    legend(&mut out, &entries, HEIGHT);
    out.push_str("</svg>");
    out
}

/// A point of a [`scatter`], with the label shown on hover.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub x: f64,
    pub y: f64,
    pub label: String,
}

/// Points on log-log axes with the diagonal y = x (e.g. claimed against measured speedups).
#[must_use]
pub fn scatter(id: &str, title: &str, x_label: &str, y_label: &str, points: &[Point]) -> String {
    let mut out = String::new();
    open(&mut out, id, title, HEIGHT + 40.0);
    let height = HEIGHT + 40.0;
    let good: Vec<&Point> = points
        .iter()
        .filter(|p| p.x > 0.0 && p.y > 0.0 && p.x.is_finite() && p.y.is_finite())
        .collect();
    let Some((lo, hi)) = range(good.iter().flat_map(|p| [p.x, p.y])) else {
        let _ = write!(
            out,
            r#"<text class="no-data" x="{}" y="{}" text-anchor="middle">no data</text></svg>"#,
            WIDTH / 2.0,
            height / 2.0
        );
        return out;
    };
    let (lo, hi) = (lo.min(0.5) / 1.2, hi.max(2.0) * 1.2);
    let x = Axis::new(lo, hi, true, LEFT, WIDTH - RIGHT);
    let y = Axis::new(lo, hi, true, height - BOTTOM, TOP);
    axes(&mut out, &x, &y, x_label, y_label, height);
    let _ = write!(
        out,
        r##"<line class="diagonal" x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#999" stroke-dasharray="4 3"/>"##,
        x.px(lo),
        y.px(lo),
        x.px(hi),
        y.px(hi)
    );
    for p in good {
        let _ = write!(
            out,
            r#"<circle class="point" cx="{:.1}" cy="{:.1}" r="4" fill="{}" fill-opacity="0.75"><title>{}</title></circle>"#,
            x.px(p.x),
            y.px(p.y),
            color(0),
            escape(&format!("{}: {:.2}x, {:.2}x", p.label, p.x, p.y))
        );
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_chart_draws_each_series_and_escapes_names() {
        let chart = LineChart {
            id: "c".into(),
            title: "fast_p <all>".into(),
            x_label: "p".into(),
            y_label: "share".into(),
            series: vec![Series {
                name: "a&b".into(),
                points: vec![(0.0, 1.0), (5.0, 0.0)],
                color: color(0),
                dashed: false,
            }],
            x_range: Some((0.0, 5.0)),
            y_range: Some((0.0, 1.0)),
            dots: false,
        };
        let svg = line_chart(&chart);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert!(
            svg.contains("fast_p &lt;all&gt;") && svg.contains(r#"data-name="a&amp;b""#),
            "{svg}"
        );
        assert_eq!(svg.matches("<polyline").count(), 1);
        // The first point sits on the left axis and at the top (share 1.0).
        assert!(svg.contains(&format!("points=\"{LEFT:.1},{TOP:.1}")), "{svg}");
    }

    #[test]
    fn empty_charts_say_so() {
        let chart = LineChart {
            id: "e".into(),
            title: "t".into(),
            x_label: String::new(),
            y_label: String::new(),
            series: vec![],
            x_range: None,
            y_range: None,
            dots: false,
        };
        assert!(line_chart(&chart).contains("no data"));
        assert!(grouped_bars("b", "t", "x", &["a".into()], &[("g".into(), vec![0])])
            .contains("no correct candidates"));
        assert!(scatter("s", "t", "x", "y", &[]).contains("no data"));
    }

    #[test]
    fn bars_carry_their_counts() {
        let svg = grouped_bars(
            "b",
            "t",
            "speedup",
            &["<1".into(), "1-2".into()],
            &[("x".into(), vec![2, 3]), ("y".into(), vec![0, 1])],
        );
        assert_eq!(svg.matches("<rect").count(), 3);
        assert!(svg.contains(r#"data-count="3""#));
    }

    #[test]
    fn ticks_are_round_numbers() {
        let a = Axis::new(0.0, 5.0, false, 0.0, 100.0);
        assert_eq!(a.ticks(), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let l = Axis::new(0.5, 20.0, true, 0.0, 100.0);
        assert_eq!(l.ticks(), vec![0.5, 1.0, 2.0, 5.0, 10.0, 20.0]);
        assert_eq!(tick_text(0.25), "0.25");
        assert_eq!(tick_text(2.0), "2");
    }
}

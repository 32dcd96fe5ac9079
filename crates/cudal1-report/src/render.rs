//! The report as HTML, through `templates/report.html` (embedded; every value is escaped, the
//! charts are inline SVG built by [`crate::charts`]).

use minijinja::value::Serde;
use minijinja::{context, AutoEscape, Environment, Error, ErrorKind, Value};

use crate::model::Report;
use crate::ReportError;

const TEMPLATE: &str = include_str!("../templates/report.html");

/// Renders `report` as one HTML document.
pub fn render(report: &Report) -> Result<String, ReportError> {
    let mut env = Environment::new();
    // HTML escaping as the charts do it: `/` stays readable in paths and code.
    env.set_formatter(|out, state, value| {
        if value.is_safe()
            || !matches!(state.auto_escape(), AutoEscape::Html)
            || value.is_undefined()
            || value.is_none()
        {
            return minijinja::escape_formatter(out, state, value);
        }
        let text = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
        out.write_str(&crate::charts::escape(&text))
            .map_err(|e| Error::new(ErrorKind::WriteFailure, e.to_string()))
    });
    env.add_template("report.html", TEMPLATE).map_err(ReportError::Render)?;
    env.add_filter("x", |v: Option<f64>| v.map_or_else(|| "–".to_owned(), |v| format!("{v:.2}x")));
    env.add_filter("ms", |v: Option<f64>| v.map_or_else(|| "–".to_owned(), ms));
    env.add_filter("pct", |v: Option<f64>| {
        v.map_or_else(|| "–".to_owned(), |v| format!("{:.1}%", v * 100.0))
    });
    env.add_filter("raw", |v: Option<f64>| v.map_or_else(String::new, |v| format!("{v}")));
    env.add_filter("f2", |v: f64| format!("{v:.2}"));
    env.add_filter("f3", |v: f64| format!("{v:.3}"));
    env.add_filter("f4", |v: f64| format!("{v:.4}"));
    env.add_filter("g4", |v: f64| {
        if v != 0.0 && (v.abs() >= 1e4 || v.abs() < 1e-3) {
            format!("{v:.3e}")
        } else {
            format!("{:.4}", v).trim_end_matches('0').trim_end_matches('.').to_owned()
        }
    });
    env.add_filter("firstline", |v: String| {
        v.lines().find(|l| !l.trim().is_empty()).unwrap_or("").to_owned()
    });
    env.add_filter("svg", |v: String| Value::from_safe_string(v));
    let t = env.get_template("report.html").map_err(ReportError::Render)?;
    t.render(context! { r => Value::from(Serde(report)), version => env!("CARGO_PKG_VERSION") })
        .map_err(ReportError::Render)
}

/// Milliseconds with three significant digits.
fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0} ms")
    } else if v >= 10.0 {
        format!("{v:.1} ms")
    } else if v >= 1.0 {
        format!("{v:.2} ms")
    } else {
        format!("{v:.3} ms")
    }
}

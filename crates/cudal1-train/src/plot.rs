//! `metrics.svg`: each metric against the step, one panel each.

use crate::TrainError;
use plotters::prelude::*;
use serde_json::Value;
use std::path::Path;

/// Plots `keys` of `lines` (those with at least one number) against their `step`.
pub fn write_svg(
    lines: &[Value],
    title: &str,
    keys: &[&str],
    path: &Path,
) -> Result<(), TrainError> {
    let series: Vec<(&str, Vec<(f64, f64)>)> = keys
        .iter()
        .map(|k| {
            (
                *k,
                lines
                    .iter()
                    .filter_map(|l| Some((l.get("step")?.as_f64()?, value(l, k)?)))
                    .collect::<Vec<_>>(),
            )
        })
        .filter(|(_, points)| !points.is_empty())
        .collect();
    let err = |e: String| TrainError::Io {
        doing: "plot into",
        path: path.to_owned(),
        source: std::io::Error::other(e),
    };
    let columns = 2usize;
    let rows = series.len().div_ceil(columns).max(1);
    let root = SVGBackend::new(path, (900, 40 + 260 * rows as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(e.to_string()))?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(|e| err(e.to_string()))?;
    let panels = root.split_evenly((rows, columns));
    for ((name, points), panel) in series.iter().zip(panels.iter()) {
        let (x0, x1) =
            points.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
        let (y0, y1) =
            points.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.1), b.max(p.1)));
        let pad = ((y1 - y0) * 0.05).max(1e-9);
        let mut chart = ChartBuilder::on(panel)
            .caption(*name, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(56)
            .build_cartesian_2d(x0..x1.max(x0 + 1.0), (y0 - pad)..(y1 + pad))
            .map_err(|e| err(e.to_string()))?;
        chart.configure_mesh().x_desc("step").draw().map_err(|e| err(e.to_string()))?;
        chart
            .draw_series(LineSeries::new(points.iter().copied(), &BLUE))
            .map_err(|e| err(e.to_string()))?;
    }
    root.present().map_err(|e| err(e.to_string()))
}

/// A number at `key`, or at `a.b` inside an object.
fn value(line: &Value, key: &str) -> Option<f64> {
    let mut v = line;
    for part in key.split('.') {
        v = v.get(part)?;
    }
    v.as_f64().filter(|x| x.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plots_the_metrics_that_have_numbers() {
        let dir = tempfile::tempdir().unwrap();
        let lines: Vec<Value> = (1..=5).map(|s| serde_json::json!({"step": s, "loss": 1.0 / s as f64, "seconds": {"train": 0.5}})).collect();
        let path = dir.path().join("m.svg");
        write_svg(&lines, "sft", &["loss", "seconds.train", "absent"], &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(
            svg.starts_with("<svg")
                && svg.contains("loss")
                && svg.contains("seconds.train")
                && !svg.contains("absent")
        );
    }
}

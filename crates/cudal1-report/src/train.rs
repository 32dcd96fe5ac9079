//! A training run's curves from its directory (`metrics.jsonl`, one object per step with
//! `step`; `run.json` names the stage): every numeric metric against the step, rewards and
//! losses first.

use std::path::Path;

use serde_json::Value;

use crate::charts::{self, LineChart, Series};
use crate::model::TrainingView;
use crate::ReportError;

/// At most this many metrics are plotted per run.
const MAX_CHARTS: usize = 12;

/// A run's metrics, read.
#[derive(Debug)]
pub struct Run {
    name: String,
    view: TrainingView,
    /// Each plotted metric's points (step, value).
    series: Vec<(String, Vec<(f64, f64)>)>,
}

impl Run {
    pub fn into_view(self) -> TrainingView {
        self.view
    }
}

/// One chart per metric that several runs share, a line per run (runs side by side).
#[must_use]
pub fn compare(runs: &[Run]) -> Vec<String> {
    if runs.len() < 2 {
        return Vec::new();
    }
    let mut keys: Vec<&str> = Vec::new();
    for r in runs {
        for (k, _) in &r.series {
            if !keys.contains(&k.as_str())
                && runs.iter().filter(|o| o.series.iter().any(|(ok, _)| ok == k)).count() >= 2
            {
                keys.push(k);
            }
        }
    }
    keys.into_iter()
        .map(|key| {
            let series = runs
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    let points = r.series.iter().find(|(k, _)| k == key)?.1.clone();
                    Some(Series {
                        name: format!("{} ({})", r.name, r.view.stage),
                        points,
                        color: charts::color(i),
                        dashed: false,
                    })
                })
                .collect();
            charts::line_chart(&LineChart {
                id: format!("train-compare-{}", slug(key)),
                title: format!("{key}, runs side by side"),
                x_label: "step".into(),
                y_label: key.to_owned(),
                series,
                x_range: None,
                y_range: None,
                dots: false,
            })
        })
        .collect()
}

/// Reads the run in `dir`.
pub fn read(dir: &Path) -> Result<Run, ReportError> {
    let metrics = dir.join("metrics.jsonl");
    let text = std::fs::read_to_string(&metrics)
        .map_err(|source| ReportError::Training { path: metrics.clone(), source })?;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).map_err(|e| ReportError::TrainingData {
            path: metrics.clone(),
            line: i + 1,
            reason: e.to_string(),
        })?;
        lines.push(v);
    }
    let stage = std::fs::read_to_string(dir.join("run.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v.get("stage")?.as_str().map(str::to_owned))
        .unwrap_or_else(|| "training".to_owned());
    let mut keys: Vec<String> = Vec::new();
    for line in &lines {
        let mut found = Vec::new();
        numeric_keys(line, "", &mut found);
        for k in found {
            if k != "step" && !keys.contains(&k) {
                keys.push(k);
            }
        }
    }
    keys.sort_by_key(|k| (priority(k), k.clone()));
    keys.truncate(MAX_CHARTS);
    let name = dir
        .file_name()
        .map_or_else(|| dir.display().to_string(), |n| n.to_string_lossy().into_owned());
    let mut charts_out = Vec::new();
    let mut last = Vec::new();
    let mut all = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let points: Vec<(f64, f64)> =
            lines.iter().filter_map(|l| Some((l.get("step")?.as_f64()?, at(l, key)?))).collect();
        if let Some(&(_, v)) = points.last() {
            last.push((key.clone(), v));
        }
        charts_out.push(charts::line_chart(&LineChart {
            id: format!("train-{}-{}", slug(&name), slug(key)),
            title: format!("{name} ({stage}): {key}"),
            x_label: "step".into(),
            y_label: key.clone(),
            series: vec![Series {
                name: key.clone(),
                points: points.clone(),
                color: charts::color(i),
                dashed: false,
            }],
            x_range: None,
            y_range: None,
            dots: lines.len() <= 30,
        }));
        all.push((key.clone(), points));
    }
    let view = TrainingView {
        dir: dir.display().to_string(),
        stage,
        steps: lines.len(),
        charts: charts_out,
        last,
    };
    Ok(Run { name, view, series: all })
}

/// Rewards first, then losses, then the rest.
fn priority(key: &str) -> u8 {
    if key.contains("reward") {
        0
    } else if key.contains("loss") {
        1
    } else {
        2
    }
}

fn numeric_keys(v: &Value, prefix: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                numeric_keys(child, &key, out);
            }
        }
        Value::Number(n) if n.as_f64().is_some_and(f64::is_finite) => out.push(prefix.to_owned()),
        _ => {}
    }
}

fn at(line: &Value, key: &str) -> Option<f64> {
    key.split('.').try_fold(line, |v, part| v.get(part))?.as_f64().filter(|x| x.is_finite())
}

fn slug(text: &str) -> String {
    text.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curves_come_from_every_numeric_metric_rewards_first() {
        let dir = tempfile::tempdir().unwrap();
        let lines: Vec<String> = (1..=4).map(|s| serde_json::json!({"step": s, "loss": 1.0 / f64::from(s), "reward": {"mean": f64::from(s) * 0.1}, "note": "x"}).to_string()).collect();
        std::fs::write(dir.path().join("metrics.jsonl"), lines.join("\n")).unwrap();
        std::fs::write(dir.path().join("run.json"), r#"{"stage": "grpo", "settings": {}}"#)
            .unwrap();
        let run = read(dir.path()).unwrap();
        let other = read(dir.path()).unwrap();
        let compared = compare(&[run, other]);
        assert_eq!(compared.len(), 2, "a chart per shared metric");
        assert_eq!(compared[0].matches("<polyline").count(), 2, "a line per run");
        let t = read(dir.path()).unwrap().into_view();
        assert_eq!((t.stage.as_str(), t.steps, t.charts.len()), ("grpo", 4, 2));
        assert_eq!(t.last, vec![("reward.mean".to_owned(), 0.4), ("loss".to_owned(), 0.25)]);
        assert!(t.charts[0].contains("reward.mean"));
    }

    #[test]
    fn a_missing_or_broken_metrics_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let e = read(dir.path()).unwrap_err();
        assert!(e.to_string().contains("metrics.jsonl"), "{e}");
        std::fs::write(dir.path().join("metrics.jsonl"), "{\"step\": 1}\nnot json\n").unwrap();
        let e = read(dir.path()).unwrap_err();
        assert!(matches!(e, ReportError::TrainingData { line: 2, .. }), "{e:?}");
    }
}

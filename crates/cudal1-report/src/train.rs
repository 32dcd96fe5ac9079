//! A training run's curves from its directory (`metrics.jsonl`, one object per step with
//! `step`; `run.json` names the stage): every numeric metric against the step, rewards and
//! losses first.

use std::path::{Component, Path, PathBuf};

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

/// Reads the runs in `dirs`, each named by the shortest end of its path that names no other
/// (`seed-0/rl` and `seed-1/rl` where both end in `rl`), so that legends, titles and chart ids
/// tell them apart.
pub fn read_all(dirs: &[PathBuf]) -> Result<Vec<Run>, ReportError> {
    dirs.iter().zip(distinct_names(dirs)).map(|(d, name)| read_named(d, name)).collect()
}

/// The shortest distinct ends of `dirs`: one component each, lengthened while another path ends
/// the same way.
fn distinct_names(dirs: &[PathBuf]) -> Vec<String> {
    let parts: Vec<Vec<String>> = dirs
        .iter()
        .map(|d| {
            std::path::absolute(d)
                .unwrap_or_else(|_| d.clone())
                .components()
                .filter_map(|c| match c {
                    Component::Normal(s) => Some(s.to_string_lossy().into_owned()),
                    _ => None,
                })
                .collect()
        })
        .collect();
    let mut depth = vec![1; dirs.len()];
    loop {
        let names: Vec<String> = parts
            .iter()
            .zip(&depth)
            .map(|(p, &k)| p[p.len().saturating_sub(k)..].join("/"))
            .collect();
        let longer: Vec<usize> = (0..names.len())
            .filter(|&i| {
                depth[i] < parts[i].len()
                    && names.iter().enumerate().any(|(j, n)| j != i && *n == names[i])
            })
            .collect();
        if longer.is_empty() {
            return names
                .into_iter()
                .zip(dirs)
                .map(|(n, d)| if n.is_empty() { d.display().to_string() } else { n })
                .collect();
        }
        for i in longer {
            depth[i] += 1;
        }
    }
}

fn read_named(dir: &Path, name: String) -> Result<Run, ReportError> {
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
    let heldout = read_heldout(dir)?;
    if !heldout.is_empty() {
        let (held_charts, held_last) = heldout_charts(&name, &stage, &lines, &heldout);
        charts_out.splice(0..0, held_charts);
        last.extend(held_last);
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

/// The held-out evaluations of a run during training (`heldout.jsonl`: one object per evaluated
/// step with `step`, the numbers, and an object of them per group of tasks); none when the run
/// has no such file.
fn read_heldout(dir: &Path) -> Result<Vec<Value>, ReportError> {
    let path = dir.join("heldout.jsonl");
    let Ok(text) = std::fs::read_to_string(&path) else { return Ok(Vec::new()) };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|e| ReportError::TrainingData {
                path: path.clone(),
                line: i + 1,
                reason: e.to_string(),
            })
        })
        .collect()
}

/// The held-out metrics drawn, each beside its training counterpart where the run has one
/// (correct rate and fast_1 on the step's own samples): lines for all held-out tasks and for
/// each group of them (the families never trained on apart from the rest).
fn heldout_charts(
    name: &str,
    stage: &str,
    train: &[Value],
    heldout: &[Value],
) -> (Vec<String>, Vec<(String, f64)>) {
    let mut groups: Vec<String> = Vec::new();
    for l in heldout {
        for (k, v) in l.as_object().into_iter().flatten() {
            if v.is_object() && !groups.contains(k) {
                groups.push(k.clone());
            }
        }
    }
    let mut charts_out = Vec::new();
    let mut last = Vec::new();
    for key in ["correct_rate", "fast1_rate", "geomean_speedup_of_correct"] {
        let mut series = Vec::new();
        let points: Vec<(f64, f64)> =
            train.iter().filter_map(|l| Some((l.get("step")?.as_f64()?, at(l, key)?))).collect();
        if !points.is_empty() {
            series.push(Series {
                name: format!("train {key}"),
                points,
                color: charts::color(0),
                dashed: false,
            });
        }
        for (i, group) in std::iter::once(None).chain(groups.iter().map(Some)).enumerate() {
            let path = group.map_or_else(|| key.to_owned(), |g| format!("{g}.{key}"));
            let points: Vec<(f64, f64)> = heldout
                .iter()
                .filter_map(|l| Some((l.get("step")?.as_f64()?, at(l, &path)?)))
                .collect();
            if let Some(&(_, v)) = points.last() {
                last.push((format!("held-out {path}"), v));
            }
            if !points.is_empty() {
                series.push(Series {
                    name: group.map_or_else(|| "held-out".to_owned(), |g| format!("held-out, {g}")),
                    points,
                    color: charts::color(i + 1),
                    dashed: true,
                });
            }
        }
        if series.iter().any(|s| s.dashed) {
            charts_out.push(charts::line_chart(&LineChart {
                id: format!("train-{}-heldout-{}", slug(name), slug(key)),
                title: format!("{name} ({stage}): {key}, train and held-out"),
                x_label: "step".into(),
                y_label: key.to_owned(),
                series,
                x_range: None,
                y_range: None,
                dots: true,
            }));
        }
    }
    (charts_out, last)
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

    /// The run in `dir` alone.
    fn read(dir: &Path) -> Result<Run, ReportError> {
        read_all(&[dir.to_path_buf()]).map(|mut runs| runs.remove(0))
    }

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
    fn runs_of_the_same_name_are_told_apart_by_their_paths() {
        let names =
            |dirs: &[&str]| distinct_names(&dirs.iter().map(PathBuf::from).collect::<Vec<_>>());
        assert_eq!(
            names(&["/a/seed-0/rl", "/a/seed-1/rl", "/a/seed-0/control"]),
            ["seed-0/rl", "seed-1/rl", "control"]
        );
        assert_eq!(names(&["/x/runs/rl", "/y/runs/rl"]), ["x/runs/rl", "y/runs/rl"]);
        // The same directory twice keeps its whole path; the root its display.
        assert_eq!(names(&["/a/rl", "/a/rl", "/"]), ["a/rl", "a/rl", "/"]);
        // In the report: a legend entry per run, each named apart.
        let dir = tempfile::tempdir().unwrap();
        for seed in ["seed-0", "seed-1"] {
            let run = dir.path().join(seed).join("rl");
            std::fs::create_dir_all(&run).unwrap();
            std::fs::write(run.join("metrics.jsonl"), r#"{"step": 1, "loss": 0.5}"#).unwrap();
        }
        let runs = read_all(&[dir.path().join("seed-0/rl"), dir.path().join("seed-1/rl")]).unwrap();
        let chart = &compare(&runs)[0];
        assert!(chart.contains("seed-0/rl (training)") && chart.contains("seed-1/rl (training)"));
    }

    #[test]
    fn held_out_curves_are_drawn_beside_the_train_curves_with_each_group_apart() {
        let dir = tempfile::tempdir().unwrap();
        let lines: Vec<String> = (1..=4)
            .map(|s| serde_json::json!({"step": s, "reward_mean": 0.5, "correct_rate": 0.25 * f64::from(s), "fast1_rate": 0.1}).to_string())
            .collect();
        std::fs::write(dir.path().join("metrics.jsonl"), lines.join("\n")).unwrap();
        let held = [
            serde_json::json!({"step": 2, "correct_rate": 0.5, "fast1_rate": 0.25, "geomean_speedup_of_correct": 1.5, "unseen families": {"correct_rate": 0.0, "fast1_rate": 0.0, "geomean_speedup_of_correct": null}}),
            serde_json::json!({"step": 4, "correct_rate": 0.75, "fast1_rate": 0.5, "geomean_speedup_of_correct": 2.0, "unseen families": {"correct_rate": 0.5, "fast1_rate": 0.0, "geomean_speedup_of_correct": 1.0}}),
        ];
        std::fs::write(
            dir.path().join("heldout.jsonl"),
            held.iter().map(|v| format!("{v}\n")).collect::<String>(),
        )
        .unwrap();
        let t = read(dir.path()).unwrap().into_view();
        // Correct rate: the train line, then the held-out lines (all, unseen families).
        assert!(t.charts[0].contains("correct_rate, train and held-out"), "{}", t.charts[0]);
        assert_eq!(t.charts[0].matches("<polyline").count(), 3);
        assert!(t.charts[0].contains("held-out, unseen families"));
        assert!(t.charts[1].contains("fast1_rate, train and held-out"));
        // The geomean has no train line: held-out alone (the unseen families' from one point).
        assert!(t.charts[2].contains("geomean_speedup_of_correct"));
        assert!(t.last.contains(&("held-out fast1_rate".to_owned(), 0.5)), "{:?}", t.last);
        assert!(t.last.contains(&("held-out unseen families.correct_rate".to_owned(), 0.5)));
        // A broken line is an error naming the file.
        std::fs::write(dir.path().join("heldout.jsonl"), "{\"step\": 2}\nnot json\n").unwrap();
        let e = read(dir.path()).unwrap_err();
        assert!(e.to_string().contains("heldout.jsonl"), "{e}");
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

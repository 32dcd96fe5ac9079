//! `cudal1 baselines DIR`: eager PyTorch, `torch.compile` in each mode and CUDA graphs on every
//! task of a suite, each measured by the same protocol as candidates (its program goes through
//! the engine like one, [`cudal1_eval::baseline`]) and stored per task, settings, class of device
//! and name, so that `eval --baseline NAME` can state speedups against it. A rerun resumes from
//! the store; `--force` measures again.

use crate::args::BaselinesArgs;
use crate::batch::{self, Item, Options};
use crate::exit::Status;
use crate::interrupt;
use crate::out;
use crate::style;
use crate::workspace::Workspace;
use anyhow::{bail, Context, Result};
use cudal1_eval::{Baseline, Device, Evaluation, Mode, Verdict};
use cudal1_stats::Interval;
use cudal1_store::{BaselineKey, BaselineStatus, NewBaseline, StoredBaseline};
use cudal1_task::{load_suite, Task};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The class of device results are filed under: the GPU's class as the job queue names it
/// (`nvidia-h100-80gb-hbm3`), or `cpu`.
pub fn gpu_class(ws: &Workspace) -> String {
    ws.judge.gpu_class.clone()
}

/// The class of `device` as [`gpu_class`] names it.
pub fn class_of(device: &Device, interpreter: &cudal1_python::Interpreter) -> Result<String> {
    match device {
        Device::Cpu => Ok("cpu".into()),
        Device::Cuda(i) => interpreter
            .probe
            .gpu_names
            .get(*i as usize)
            .map(|n| cudal1_queue::gpu_class_of(n))
            .context(
                "PyTorch did not name the GPU, so its results cannot be filed under a class of GPU",
            ),
    }
}

/// One baseline of one task, as measured now or found in the store.
struct Measured {
    task: String,
    stored: NewBaseline,
    reused: bool,
    /// The evaluation's row (`cudal1 show ID`), when it ran through the engine now.
    evaluation_id: Option<i64>,
}

pub fn run(a: BaselinesArgs) -> Result<Status> {
    crate::workspace::check(&a.common)?;
    if !(a.compile_timeout > 0.0) {
        bail!("`--compile-timeout` must be a positive number of seconds");
    }
    let suite = load_suite(&a.dir)?;
    for p in &suite.problems {
        eprintln!("warning: skipping a task: {p}");
    }
    let mut tasks: Vec<Arc<Task>> = suite.tasks.into_iter().map(Arc::new).collect();
    if !a.only.is_empty() {
        let unknown: Vec<&str> = a
            .only
            .iter()
            .map(String::as_str)
            .filter(|o| !tasks.iter().any(|t| t.key() == *o))
            .collect();
        if !unknown.is_empty() {
            bail!("no task `{}` in `{}`\nhint: name tasks as `level1/12_Name` (`cudal1 tasks list {}` lists them)", unknown.join("`, `"), a.dir.display(), a.dir.display());
        }
        tasks.retain(|t| a.only.iter().any(|o| *o == t.key()));
    }
    if tasks.is_empty() {
        bail!("`{}` holds no task", a.dir.display());
    }
    let names: Vec<Baseline> =
        if a.names.is_empty() { Baseline::ALL.to_vec() } else { a.names.clone() };
    let mut ws = Workspace::resolve(&a.common, a.device.as_ref(), None)?;
    let class = gpu_class(&ws);
    let settings_hash = batch::settings_for(&ws, Mode::Full).key_hash();
    // The first call of `torch.compile` compiles, and may take minutes; the call timeout is not
    // part of the settings' key, so results still match candidates' settings.
    ws.settings.call_timeout =
        ws.settings.call_timeout.max(Duration::from_secs_f64(a.compile_timeout));
    let device = ws.devices[0].clone();

    let mut results: BTreeMap<(usize, Baseline), Measured> = BTreeMap::new();
    let mut items: Vec<Item> = Vec::new();
    let mut item_of: Vec<(usize, Baseline)> = Vec::new();
    for (ti, task) in tasks.iter().enumerate() {
        for &b in &names {
            let key = BaselineKey {
                task_hash: task.hash.clone(),
                settings_hash: settings_hash.clone(),
                gpu_class: class.clone(),
                judge: ws.judge.version.clone(),
                name: b.name().into(),
            };
            if !a.common.force {
                if let Some(s) = ws.store.find_baseline(&key)? {
                    results.insert(
                        (ti, b),
                        Measured {
                            task: task.key(),
                            stored: s.baseline,
                            reused: true,
                            evaluation_id: None,
                        },
                    );
                    continue;
                }
            }
            if let Some(why) = b.unavailable_on(&device) {
                let row = failed(key, task, why, serde_json::Value::Null);
                ws.store.record_baseline(&row)?;
                results.insert(
                    (ti, b),
                    Measured { task: task.key(), stored: row, reused: false, evaluation_id: None },
                );
                continue;
            }
            items.push(Item {
                task: Arc::clone(task),
                candidate: b.program(task),
                expect: None,
                claimed: None,
            });
            item_of.push((ti, b));
        }
    }
    if !results.is_empty() && results.values().any(|m| m.reused) && !a.json {
        eprintln!(
            "resuming: {} of {} baselines already in the store",
            results.values().filter(|m| m.reused).count(),
            tasks.len() * names.len()
        );
    }

    let interrupt = interrupt::install("the baselines under way");
    let opts = Options {
        mode: Mode::Full,
        json_lines: false,
        progress_lines: !a.json,
        force: a.common.force,
        batch_id: None,
        against: None,
    };
    let finished = batch::run(&ws, &items, &opts, &interrupt)?;
    for row in &finished.rows {
        let (ti, b) = item_of[row.item];
        let task = &tasks[ti];
        let key = BaselineKey {
            task_hash: task.hash.clone(),
            settings_hash: settings_hash.clone(),
            gpu_class: class.clone(),
            judge: ws.judge.version.clone(),
            name: b.name().into(),
        };
        let stored = from_evaluation(key, task, b, &row.evaluation);
        ws.store.record_baseline(&stored)?;
        results.insert(
            (ti, b),
            Measured { task: task.key(), stored, reused: row.reused, evaluation_id: row.id },
        );
    }
    let reference_failures: Vec<String> = finished
        .task_failures
        .iter()
        .map(|(i, e, _)| {
            format!("{}: {}", tasks[item_of[*i].0].key(), e.lines().next().unwrap_or(""))
        })
        .collect();
    let host_failures: Vec<String> = finished
        .host_failures
        .iter()
        .map(|(i, e)| {
            format!(
                "{} {}: {}",
                tasks[item_of[*i].0].key(),
                item_of[*i].1,
                e.lines().next().unwrap_or("")
            )
        })
        .collect();
    let measured = results.values().filter(|m| m.stored.status == BaselineStatus::Measured).count();
    let failed_count = results.len() - measured;

    if a.json {
        for m in results.values() {
            out::line(row_json(m, &class))?;
        }
        out::line(serde_json::json!({"summary": {
            "gpu_class": class,
            "judge": ws.judge.version,
            "settings_hash": settings_hash,
            "counts": {
                "baselines": tasks.len() * names.len(),
                "measured": measured,
                "failed": failed_count,
                "reused": results.values().filter(|m| m.reused).count(),
                "skipped": finished.cancelled,
                "reference_failures": reference_failures.len(),
                "host_failures": host_failures.len(),
            },
            "reference_failures": reference_failures,
            "host_failures": host_failures,
        }}))?;
    } else {
        print_table(results.values())?;
        out::line(format!("{measured} measured, {failed_count} failed (their reasons above) on `{class}`; saved in {}", a.common.db.display()))?;
        if results.values().any(|m| m.reused) {
            out::line("* from the store (same task, settings and class of device); --force measures again")?;
        }
        for f in &reference_failures {
            out::line(format!("reference failed, no baselines: {f}"))?;
        }
        for f in &host_failures {
            out::line(format!(
                "no result (the machine failed, not the baseline; run the same command again): {f}"
            ))?;
        }
        if finished.cancelled > 0 {
            out::line(format!(
                "{} baseline(s) skipped after the interrupt; run the same command again to resume",
                finished.cancelled
            ))?;
        }
    }
    if finished.cancelled > 0 || interrupt.interrupted() {
        return Ok(Status::Interrupted);
    }
    // A baseline that fails on a task is data, like a verdict; a failing reference is a problem.
    Ok(Status::problems_if(!reference_failures.is_empty() || !host_failures.is_empty()))
}

fn failed(
    key: BaselineKey,
    task: &Task,
    reason: String,
    evaluation: serde_json::Value,
) -> NewBaseline {
    NewBaseline {
        key,
        task_name: task.key(),
        status: BaselineStatus::Failed,
        reason,
        speedup_median: None,
        speedup_ci_low: None,
        speedup_ci_high: None,
        baseline_ms: None,
        reference_ms: None,
        evaluation,
    }
}

/// A baseline's evaluation as the store keeps it. `eager` is the reference itself: its speedup is
/// 1 by definition, and its time the reference's; what was measured against itself stays in the
/// evaluation (and its reason), an A/A check of the timing.
fn from_evaluation(key: BaselineKey, task: &Task, b: Baseline, e: &Evaluation) -> NewBaseline {
    let json = serde_json::to_value(e).unwrap_or_default();
    match (e.verdict, e.speedup) {
        (Verdict::Correct, Some(s)) if b == Baseline::Eager => NewBaseline {
            status: BaselineStatus::Measured,
            reason: format!(
                "the reference itself; against itself it measured {:.3}x [{:.3}, {:.3}]",
                s.median, s.ci_low, s.ci_high
            ),
            speedup_median: Some(1.0),
            speedup_ci_low: Some(1.0),
            speedup_ci_high: Some(1.0),
            baseline_ms: e.ref_ms,
            reference_ms: e.ref_ms,
            ..failed(key, task, String::new(), json)
        },
        (Verdict::Correct, Some(s)) => NewBaseline {
            status: BaselineStatus::Measured,
            reason: e.reason.clone(),
            speedup_median: Some(s.median),
            speedup_ci_low: Some(s.ci_low),
            speedup_ci_high: Some(s.ci_high),
            baseline_ms: e.candidate_ms,
            reference_ms: e.ref_ms,
            ..failed(key, task, String::new(), json)
        },
        _ => failed(key, task, format!("{}: {}", e.verdict, e.reason), json),
    }
}

fn interval(b: &NewBaseline) -> Option<Interval> {
    Some(Interval {
        median: b.speedup_median?,
        ci_low: b.speedup_ci_low?,
        ci_high: b.speedup_ci_high?,
    })
}

fn row_json(m: &Measured, class: &str) -> serde_json::Value {
    let b = &m.stored;
    serde_json::json!({
        "task": m.task,
        "task_hash": b.key.task_hash,
        "baseline": b.key.name,
        "gpu_class": class,
        "judge": b.key.judge,
        "status": b.status,
        "reason": b.reason,
        "speedup": interval(b),
        "baseline_ms": b.baseline_ms,
        "reference_ms": b.reference_ms,
        "reused": m.reused,
        "evaluation_id": m.evaluation_id,
    })
}

fn print_table<'a>(rows: impl Iterator<Item = &'a Measured>) -> Result<()> {
    let mut t = style::table();
    t.set_header([
        "task",
        "baseline",
        "status",
        "vs eager [95% CI]",
        "baseline ms",
        "eager ms",
        "reason",
    ]);
    let ms = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.4}"));
    for m in rows {
        let b = &m.stored;
        let status = format!("{}{}", b.status.as_str(), if m.reused { " *" } else { "" });
        let speedup = interval(b).map_or("-".into(), |s| {
            format!("{:.2}x [{:.2}, {:.2}]", s.median, s.ci_low, s.ci_high)
        });
        t.add_row([
            m.task.clone(),
            b.key.name.clone(),
            status,
            speedup,
            ms(b.baseline_ms),
            ms(b.reference_ms),
            crate::report::reason_summary(&b.reason),
        ]);
    }
    out::line(t)?;
    Ok(())
}

/// The baselines `eval --baseline NAME` states speedups against: one per task, found in the store
/// under the evaluation's settings and class of device.
pub struct Against {
    pub baseline: Baseline,
    by_task: BTreeMap<String, StoredBaseline>,
}

/// A candidate's speedup restated against a baseline.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Restated {
    /// Against the baseline: the candidate's speedup over eager divided by the baseline's.
    pub speedup: Option<Interval>,
    /// The baseline failed on this task, so eager (what one would run instead) stands in for it.
    pub fell_back_to_eager: bool,
}

impl Against {
    /// The baselines of `tasks`; every task must have one (measured or failed), except for
    /// `eager`, which is 1 by definition.
    pub fn load(ws: &Workspace, baseline: Baseline, tasks: &[&Task]) -> Result<Against> {
        let mut by_task = BTreeMap::new();
        if baseline == Baseline::Eager {
            return Ok(Against { baseline, by_task });
        }
        let class = gpu_class(ws);
        let settings_hash = batch::settings_for(ws, Mode::Full).key_hash();
        let mut missing = Vec::new();
        for t in tasks {
            let key = BaselineKey {
                task_hash: t.hash.clone(),
                settings_hash: settings_hash.clone(),
                gpu_class: class.clone(),
                judge: ws.judge.version.clone(),
                name: baseline.name().into(),
            };
            match ws.store.find_baseline(&key)? {
                Some(s) => {
                    by_task.insert(t.hash.clone(), s);
                }
                None => missing.push(t.key()),
            }
        }
        missing.sort();
        missing.dedup();
        if !missing.is_empty() {
            bail!(
                "no `{baseline}` baseline on `{class}` under these settings, measured by this version of cudal1, for {} task(s): {}\nhint: measure them first with `cudal1 baselines SUITE --names {baseline}` and the same device and evaluation flags (tolerances, seeds, budget, window, --scale), into the same store (`--db {}`)",
                missing.len(),
                missing.iter().take(5).map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ") + if missing.len() > 5 { ", …" } else { "" },
                ws.store.path().display()
            );
        }
        Ok(Against { baseline, by_task })
    }

    /// The candidate's speedup against the baseline. The interval is conservative: the two were
    /// measured apart, so the quotient's bounds are the candidate's bounds over the baseline's
    /// opposite ones (`[low / high_b, high / low_b]`); it holds with at least ~90% confidence
    /// when both 95% intervals hold.
    pub fn restate(&self, e: &Evaluation) -> Restated {
        let stored = self.by_task.get(&e.task_hash).map(|s| &s.baseline);
        let base = stored.and_then(interval);
        let fell_back_to_eager = stored.is_some_and(|s| s.status == BaselineStatus::Failed);
        let speedup = e.speedup.map(|c| match base {
            Some(b) => Interval {
                median: c.median / b.median,
                ci_low: c.ci_low / b.ci_high,
                ci_high: c.ci_high / b.ci_low,
            },
            None => c,
        });
        Restated { speedup, fell_back_to_eager }
    }

    /// As [`Against::restate`], for `--json` rows: the name, the baseline's own speedup over eager
    /// and the restated speedup.
    pub fn json(&self, e: &Evaluation) -> serde_json::Value {
        let r = self.restate(e);
        let stored = self.by_task.get(&e.task_hash).map(|s| &s.baseline);
        serde_json::json!({
            "name": self.baseline.name(),
            "status": stored.map_or(BaselineStatus::Measured, |s| s.status),
            "baseline_speedup": stored.map_or(Some(Interval { median: 1.0, ci_low: 1.0, ci_high: 1.0 }), interval),
            "speedup": r.speedup,
            "fell_back_to_eager": r.fell_back_to_eager,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restating_divides_medians_and_widens_the_interval() {
        let stored = |status, s: Option<(f64, f64, f64)>| StoredBaseline {
            created_at: String::new(),
            baseline: NewBaseline {
                key: BaselineKey {
                    task_hash: "t".into(),
                    settings_hash: "s".into(),
                    gpu_class: "cpu".into(),
                    judge: "1.judge".into(),
                    name: "compile-default".into(),
                },
                task_name: "level1/x".into(),
                status,
                reason: String::new(),
                speedup_median: s.map(|s| s.0),
                speedup_ci_low: s.map(|s| s.1),
                speedup_ci_high: s.map(|s| s.2),
                baseline_ms: None,
                reference_ms: None,
                evaluation: serde_json::Value::Null,
            },
        };
        let e: Evaluation = serde_json::from_value(serde_json::json!({
            "task": "level1/x", "task_hash": "t", "candidate": "c", "candidate_hash": "h", "verdict": "correct",
            "reason": "", "reason_class": "correct", "speedup": {"median": 3.0, "ci_low": 2.0, "ci_high": 4.0},
            "ref_ms": 1.0, "candidate_ms": 0.33, "device": "cpu",
            "environment": {"gpu": null, "driver": null, "torch": "2", "cuda": null, "python": "3"},
            "measurements": {"checks": [], "findings": [], "phases_ms": {}}, "duration_ms": 1.0
        }))
        .unwrap();
        let mut against = Against { baseline: Baseline::CompileDefault, by_task: BTreeMap::new() };
        against.by_task.insert("t".into(), stored(BaselineStatus::Measured, Some((1.5, 1.0, 2.0))));
        let r = against.restate(&e);
        let s = r.speedup.unwrap();
        assert_eq!((s.median, s.ci_low, s.ci_high, r.fell_back_to_eager), (2.0, 1.0, 4.0, false));
        against.by_task.insert("t".into(), stored(BaselineStatus::Failed, None));
        let r = against.restate(&e);
        assert_eq!((r.speedup.unwrap().median, r.fell_back_to_eager), (3.0, true));
    }
}

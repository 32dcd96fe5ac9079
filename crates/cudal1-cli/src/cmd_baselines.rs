//! `cudal1 baselines DIR`: eager PyTorch, `torch.compile` in each mode and CUDA graphs on every
//! task of a suite, each measured by the same protocol as candidates (its program goes through
//! the engine like one, [`cudal1_eval::baseline`]) and stored per task, settings, class of device
//! and name, so that `eval --baseline NAME` can state speedups against it. A rerun resumes from
//! the store; `--force` measures again.

use crate::against::{gpu_class, interval};
use crate::args::BaselinesArgs;
use crate::batch::{self, Item, Options};
use crate::exit::Status;
use crate::interrupt;
use crate::out;
use crate::style;
use crate::workspace::Workspace;
use anyhow::{bail, Result};
use cudal1_eval::{Baseline, Evaluation, Mode, Verdict};
use cudal1_store::{BaselineKey, BaselineStatus, NewBaseline};
use cudal1_task::{load_suite, Task};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

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
    let mut ws = Workspace::resolve(&a.common, &a.device, None)?;
    let class = gpu_class(&ws);
    let settings_hash = batch::settings_for(&ws, Mode::Full).key_hash();
    // The first call of `torch.compile` compiles, and may take minutes; the call timeout is not
    // part of the settings' key, so results still match candidates' settings.
    ws.settings.call_timeout =
        ws.settings.call_timeout.max(Duration::from_secs_f64(a.compile_timeout));
    let device = ws.machine.devices[0].clone();

    let mut results: BTreeMap<(usize, Baseline), Measured> = BTreeMap::new();
    let mut items: Vec<Item> = Vec::new();
    let mut item_of: Vec<(usize, Baseline)> = Vec::new();
    for (ti, task) in tasks.iter().enumerate() {
        for &b in &names {
            let key = BaselineKey {
                task_hash: task.hash.clone(),
                settings_hash: settings_hash.clone(),
                gpu_class: class.clone(),
                judge: ws.machine.judge.version.clone(),
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
            judge: ws.machine.judge.version.clone(),
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
            "judge": ws.machine.judge.version,
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
        out::line(format!("{measured} measured, {failed_count} failed (their reasons above) on `{class}`; saved in {}", a.common.db.db.display()))?;
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

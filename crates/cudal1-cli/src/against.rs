//! Speedups stated against a stored baseline (`eval --baseline NAME`), and the class of device
//! that results are filed under. `cudal1 baselines` measures what this reads.

use crate::batch;
use crate::workspace::Workspace;
use anyhow::{bail, Context, Result};
use cudal1_eval::{Baseline, Device, Evaluation, Mode};
use cudal1_stats::Interval;
use cudal1_store::{BaselineKey, BaselineStatus, NewBaseline, StoredBaseline};
use cudal1_task::Task;
use std::collections::BTreeMap;

/// The class of device results are filed under: the GPU's class as the job queue names it
/// (`nvidia-h100-80gb-hbm3`), or `cpu`.
pub fn gpu_class(ws: &Workspace) -> String {
    ws.machine.judge.gpu_class.clone()
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

pub(crate) fn interval(b: &NewBaseline) -> Option<Interval> {
    Some(Interval {
        median: b.speedup_median?,
        ci_low: b.speedup_ci_low?,
        ci_high: b.speedup_ci_high?,
    })
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
                judge: ws.machine.judge.version.clone(),
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

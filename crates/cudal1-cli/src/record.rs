//! Evaluations to and from the store. The whole evaluation is kept in `measurements`, so a
//! resumed batch reports exactly what was measured.

use cudal1_eval::{EvalSettings, Evaluation};
use cudal1_store::{EvalKey, NewEvaluation, StoredEvaluation};

pub fn key(task_hash: &str, candidate_hash: &str, settings: &EvalSettings) -> EvalKey {
    EvalKey { task_hash: task_hash.to_owned(), candidate_hash: candidate_hash.to_owned(), settings_hash: settings.key_hash() }
}

pub fn to_store(e: &Evaluation, task_path: &str, settings: &EvalSettings, batch_id: Option<&str>) -> NewEvaluation {
    NewEvaluation {
        key: key(&e.task_hash, &e.candidate_hash, settings),
        batch_id: batch_id.map(str::to_owned),
        task_name: e.task.clone(),
        task_path: task_path.to_owned(),
        candidate_label: e.candidate.clone(),
        verdict: e.verdict.as_str().to_owned(),
        reason: e.reason.clone(),
        speedup_median: e.speedup.map(|s| s.median),
        speedup_ci_low: e.speedup.map(|s| s.ci_low),
        speedup_ci_high: e.speedup.map(|s| s.ci_high),
        ref_ms: e.ref_ms,
        candidate_ms: e.candidate_ms,
        device: e.device.clone(),
        environment: serde_json::to_value(&e.environment).unwrap_or_default(),
        settings: serde_json::to_value(settings).unwrap_or_default(),
        measurements: serde_json::to_value(e).unwrap_or_default(),
        duration_ms: e.duration_ms,
    }
}

/// The stored evaluation, relabelled for the task and candidate as they are named now.
pub fn from_store(stored: &StoredEvaluation, task: &str, label: &str) -> Option<Evaluation> {
    let mut e: Evaluation = serde_json::from_value(stored.measurements.clone()).ok()?;
    task.clone_into(&mut e.task);
    e.candidate = label.to_owned();
    Some(e)
}

/// A stored evaluation as `cudal1 show --json` and `cudal1 export` give it: the evaluation as
/// `eval --json` prints it, with its row id, when and under which batch and settings it was
/// recorded, and the task's file.
pub fn stored_json(s: &StoredEvaluation) -> serde_json::Value {
    let mut v = s.measurements.clone();
    if !v.is_object() {
        v = serde_json::json!({"measurements": v});
    }
    v["id"] = s.id.into();
    v["created_at"] = s.created_at.clone().into();
    v["batch_id"] = s.batch_id.clone().into();
    v["task_path"] = s.task_path.clone().into();
    v["settings"] = s.settings.clone();
    v
}

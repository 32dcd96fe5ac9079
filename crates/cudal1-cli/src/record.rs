//! Evaluations to and from the store. The whole evaluation is kept in `measurements`, so a
//! resumed batch reports exactly what was measured.

use cudal1_eval::{EvalSettings, Evaluation, Judge};
use cudal1_store::{EvalKey, NewEvaluation, StoredEvaluation};

/// The key an evaluation by `judge` is stored and found under: a verdict of another judging
/// version or class of GPU is never found under it.
pub fn key(
    task_hash: &str,
    candidate_hash: &str,
    settings: &EvalSettings,
    judge: &Judge,
) -> EvalKey {
    EvalKey {
        task_hash: task_hash.to_owned(),
        candidate_hash: candidate_hash.to_owned(),
        settings_hash: settings.key_hash(),
        judge: judge.version.clone(),
        gpu_class: judge.gpu_class.clone(),
    }
}

/// `e` as the store keeps it, filed under `judge` (the engine's, which judged it).
pub fn to_store(
    e: &Evaluation,
    task_path: &str,
    settings: &EvalSettings,
    judge: &Judge,
    batch_id: Option<&str>,
) -> NewEvaluation {
    NewEvaluation {
        key: key(&e.task_hash, &e.candidate_hash, settings, judge),
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
    v["judge"] = judge_json(s);
    if let Some(share) = s.own_share {
        v["own_share"] = share.into();
        v["own_kernels"] = s.own_kernels.clone().unwrap_or_default();
    }
    v
}

/// A line for people: the stored own-kernel share, where one was measured.
pub fn own_share_line(s: &StoredEvaluation) -> Option<String> {
    let kernels: cudal1_eval::own::OwnShare =
        serde_json::from_value(s.own_kernels.clone()?).ok()?;
    Some(kernels.text())
}

/// Who judged a stored evaluation, and whether this build would reuse it: `version` and
/// `gpu_class` are null in rows recorded before judges were (never reused).
pub fn judge_json(s: &StoredEvaluation) -> serde_json::Value {
    let text = |t: &str| if t.is_empty() { serde_json::Value::Null } else { t.into() };
    serde_json::json!({
        "version": text(&s.key.judge),
        "gpu_class": text(&s.key.gpu_class),
        "current": s.key.judge == cudal1_eval::judge_version(),
    })
}

/// A line for people: who judged `s`, and whether it is reused.
pub fn judge_line(s: &StoredEvaluation) -> String {
    if s.key.judge.is_empty() {
        return "an older cudal1, before judges were recorded (never reused: `eval` judges it again)".into();
    }
    let class = if s.key.gpu_class.is_empty() { "?" } else { &s.key.gpu_class };
    if s.key.judge == cudal1_eval::judge_version() {
        format!("{} on {class} (this version)", s.key.judge)
    } else {
        format!(
            "{} on {class}, an older judging version (never reused: `eval` judges it again)",
            s.key.judge
        )
    }
}

//! [`RunDir`]: a training run's directory, written so that Ctrl-C or a crash resumes at the last
//! committed step.
//!
//! ```text
//! run.json          the stage and its settings, written once; resuming with other settings is refused
//! state.json        the last committed step and its checkpoint, replaced atomically
//! checkpoints/step-N/   the worker's checkpoint (weights or adapter, optimizer, RNG, step)
//! metrics.jsonl     one line per step (lines past the committed step are dropped on resume)
//! samples.jsonl     one line per sample, for stages that sample
//! metrics.svg       the metrics plotted
//! heldout/step-N.json, heldout.jsonl   held-out evaluations during the run (`train rl --heldout`),
//!                   each made after step N was committed
//! ```
//!
//! A step is committed in this order: the worker writes its checkpoint (atomically, into its own
//! directory), then `state.json` is replaced. A crash before the replacement leaves the previous
//! commit in force; the steps after it are done again, from the same data order and seeds.

use crate::policy::Policy;
use crate::TrainError;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Checkpoints kept besides the committed one.
const KEEP: usize = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// The last committed step (0: none yet).
    pub step: u64,
    /// Relative to the run directory.
    pub checkpoint: Option<String>,
    /// What a stage needs to resume besides the step (e.g. the round of a self-supervised run).
    #[serde(default)]
    pub extra: Value,
}

#[derive(Debug)]
pub struct RunDir {
    root: PathBuf,
}

fn write_atomically(path: &Path, text: &str) -> Result<(), TrainError> {
    let tmp = path.with_extension("tmp");
    let io = TrainError::io;
    let mut f = std::fs::File::create(&tmp).map_err(io("write", &tmp))?;
    f.write_all(text.as_bytes()).and_then(|()| f.sync_all()).map_err(io("write", &tmp))?;
    std::fs::rename(&tmp, path).map_err(io("replace", path))
}

/// Writes the policy's device in `run` (a `run.json`: `settings.policy.device`) by its one name:
/// older binaries recorded `--policy-device` as given, so `cuda` there is the `cuda:0` a run
/// records now, and such a run resumes. A name that is no device is left as it is (and differs).
fn canonical_policy_device(run: &mut Value) {
    if let Some(device) = run.pointer_mut("/settings/policy/device") {
        if let Some(parsed) = device.as_str().and_then(|d| cudal1_eval::Device::parse(d).ok()) {
            *device = Value::String(parsed.to_string());
        }
    }
}

impl RunDir {
    /// Opens (or starts) the run in `root` for `stage` with `settings`; returns the state to
    /// resume from, if any.
    pub fn open(
        root: &Path,
        stage: &str,
        settings: &impl Serialize,
    ) -> Result<(RunDir, Option<RunState>), TrainError> {
        std::fs::create_dir_all(root.join("checkpoints"))
            .map_err(TrainError::io("create", root))?;
        let wanted = serde_json::json!({"stage": stage, "settings": settings});
        let run_json = root.join("run.json");
        match std::fs::read_to_string(&run_json) {
            Ok(text) => {
                let mut had: Value = serde_json::from_str(&text).map_err(|e| TrainError::Data {
                    path: run_json.clone(),
                    line: 1,
                    reason: e.to_string(),
                })?;
                canonical_policy_device(&mut had);
                if had != wanted {
                    return Err(TrainError::Mismatch {
                        dir: root.to_owned(),
                        what: differences(&had, &wanted).join(", "),
                    });
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                write_atomically(
                    &run_json,
                    &serde_json::to_string_pretty(&wanted).expect("plain data"),
                )?;
            }
            Err(e) => return Err(TrainError::io("read", &run_json)(e)),
        }
        let dir = RunDir { root: root.to_owned() };
        let state = match std::fs::read_to_string(dir.root.join("state.json")) {
            Ok(text) => {
                Some(serde_json::from_str::<RunState>(&text).map_err(|e| TrainError::Data {
                    path: dir.root.join("state.json"),
                    line: 1,
                    reason: e.to_string(),
                })?)
            }
            Err(_) => None,
        };
        let committed = state.as_ref().map_or(0, |s| s.step);
        for file in ["metrics.jsonl", "samples.jsonl"] {
            dir.drop_after(file, committed)?;
        }
        Ok((dir, state))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Appends a line to `metrics.jsonl` (it must carry `step`).
    pub fn record_metrics(&self, line: &Value) -> Result<(), TrainError> {
        self.append("metrics.jsonl", std::slice::from_ref(line))
    }

    pub fn record_samples(&self, lines: &[Value]) -> Result<(), TrainError> {
        self.append("samples.jsonl", lines)
    }

    fn append(&self, file: &str, lines: &[Value]) -> Result<(), TrainError> {
        let path = self.root.join(file);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(TrainError::io("open", &path))?;
        let mut text = String::new();
        for l in lines {
            text.push_str(&l.to_string());
            text.push('\n');
        }
        f.write_all(text.as_bytes())
            .and_then(|()| f.flush())
            .map_err(TrainError::io("append to", &path))
    }

    /// Lines of a JSONL file of the run.
    pub fn lines(&self, file: &str) -> Vec<Value> {
        std::fs::read_to_string(self.root.join(file))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Keeps the lines of `file` whose `step` is at most `step` (what a crash wrote past the
    /// commit is done again).
    fn drop_after(&self, file: &str, step: u64) -> Result<(), TrainError> {
        let path = self.root.join(file);
        let Ok(text) = std::fs::read_to_string(&path) else { return Ok(()) };
        let kept: Vec<&str> = text
            .lines()
            .filter(|l| {
                serde_json::from_str::<Value>(l)
                    .ok()
                    .and_then(|v| v.get("step").and_then(Value::as_u64))
                    .is_some_and(|s| s <= step)
            })
            .collect();
        let count = text.lines().count();
        if kept.len() != count {
            tracing::info!(
                file,
                dropped = count - kept.len(),
                step,
                "dropping lines past the last committed step"
            );
            let mut out = kept.join("\n");
            if !out.is_empty() {
                out.push('\n');
            }
            write_atomically(&path, &out)?;
        }
        Ok(())
    }

    /// Commits `step`: the policy's checkpoint, then the state that points to it.
    pub fn commit(
        &self,
        policy: &mut Policy,
        step: u64,
        extra: Value,
    ) -> Result<RunState, TrainError> {
        let name = format!("checkpoints/step-{step:08}");
        policy.save(&self.root.join(&name))?;
        let state = RunState { step, checkpoint: Some(name), extra };
        write_atomically(
            &self.root.join("state.json"),
            &serde_json::to_string_pretty(&state).expect("plain data"),
        )?;
        self.prune(step);
        Ok(state)
    }

    /// The policy as of the committed state.
    pub fn resume(&self, policy: &mut Policy, state: &RunState) -> Result<(), TrainError> {
        if let Some(ckpt) = &state.checkpoint {
            let restored = policy.restore(&self.root.join(ckpt))?;
            tracing::info!(step = state.step, restored, "resumed from the last committed step");
        }
        Ok(())
    }

    fn prune(&self, committed: u64) {
        let dir = self.root.join("checkpoints");
        let mut steps: Vec<(u64, PathBuf)> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let step: u64 = name.strip_prefix("step-")?.parse().ok()?;
                Some((step, e.path()))
            })
            .filter(|(s, _)| *s < committed)
            .collect();
        steps.sort();
        let excess = steps.len().saturating_sub(KEEP);
        for (_, path) in steps.into_iter().take(excess) {
            let _ = std::fs::remove_dir_all(path);
        }
    }

    /// Writes `metrics.svg` from `metrics.jsonl`.
    pub fn plot(&self, title: &str, keys: &[&str]) -> Result<PathBuf, TrainError> {
        let path = self.root.join("metrics.svg");
        crate::plot::write_svg(&self.lines("metrics.jsonl"), title, keys, &path)?;
        Ok(path)
    }
}

/// The committed checkpoint of the run in `root` (to start another stage from it).
pub fn committed_checkpoint(root: &Path) -> Result<PathBuf, TrainError> {
    let path = root.join("state.json");
    let text = std::fs::read_to_string(&path).map_err(TrainError::io("read", &path))?;
    let state: RunState = serde_json::from_str(&text).map_err(|e| TrainError::Data {
        path: path.clone(),
        line: 1,
        reason: e.to_string(),
    })?;
    state.checkpoint.map(|c| root.join(c)).ok_or_else(|| {
        TrainError::Config(format!(
            "the run in `{}` has committed no checkpoint yet",
            root.display()
        ))
    })
}

/// The top-level keys whose values differ (for a readable mismatch).
fn differences(a: &Value, b: &Value) -> Vec<String> {
    fn walk(prefix: String, a: &Value, b: &Value, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
                keys.sort();
                keys.dedup();
                for k in keys {
                    let p = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                    walk(
                        p,
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                        out,
                    );
                }
            }
            _ if a != b => out.push(format!("`{prefix}` was {a}, now {b}")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(String::new(), a, b, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_refuses_other_settings_and_drops_lines_past_the_commit() {
        let dir = tempfile::tempdir().unwrap();
        let (run, state) =
            RunDir::open(dir.path(), "sft", &serde_json::json!({"lr": 1e-4})).unwrap();
        assert!(state.is_none());
        for step in 1..=3 {
            run.record_metrics(&serde_json::json!({"step": step, "loss": 1.0})).unwrap();
        }
        // As if step 1 was committed and the process died during step 3.
        std::fs::write(dir.path().join("state.json"), r#"{"step": 1, "checkpoint": null}"#)
            .unwrap();
        let (run, state) =
            RunDir::open(dir.path(), "sft", &serde_json::json!({"lr": 1e-4})).unwrap();
        assert_eq!(state.unwrap().step, 1);
        assert_eq!(run.lines("metrics.jsonl").len(), 1);
        let err = RunDir::open(dir.path(), "sft", &serde_json::json!({"lr": 2e-4})).unwrap_err();
        assert!(err.to_string().contains("`settings.lr` was 0.0001, now 0.0002"), "{err}");
    }

    #[test]
    fn a_run_recorded_on_plain_cuda_resumes_on_cuda_0() {
        let dir = tempfile::tempdir().unwrap();
        let settings = |device: &str| serde_json::json!({"policy": {"device": device}, "lr": 1e-4});
        // What an older binary wrote for `--policy-device cuda`.
        std::fs::write(
            dir.path().join("run.json"),
            serde_json::json!({"stage": "rl", "settings": settings("cuda")}).to_string(),
        )
        .unwrap();
        std::fs::write(dir.path().join("state.json"), r#"{"step": 2, "checkpoint": null}"#)
            .unwrap();
        let (_, state) = RunDir::open(dir.path(), "rl", &settings("cuda:0")).unwrap();
        assert_eq!(state.unwrap().step, 2);
        // Another GPU is still another device.
        let err = RunDir::open(dir.path(), "rl", &settings("cuda:1")).unwrap_err();
        assert!(err.to_string().contains("was \"cuda:0\", now \"cuda:1\""), "{err}");
    }
}

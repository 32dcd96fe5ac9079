//! Degenerate tasks: references whose outputs do not measure what a speedup should mean.
//!
//! [`check_task`] runs a task's reference in a trusted runner and a probe (a wrapper of the
//! reference's own `Model`, see `degenerate_probe.py`) in a candidate runner, then compares, under
//! the task's tolerance:
//!
//! - the outputs of different input seeds with each other (`constant_across_seeds`);
//! - null candidates with the expected outputs: zeros (`near_zero`), ones (`null_ones`), each
//!   output's own mean everywhere (`constant_output`), an input echoed back (`null_echo`);
//! - the model on other inputs (`input_independent`) and with other weights
//!   (`weight_independent`, only for models with parameters).
//!
//! A flagged task can be passed without doing its work, so its speedups mean nothing: it belongs
//! out of speed statistics and rewards. The result is a [`TaskCheck`].

use crate::correctness::{distinct_tolerances, judge};
use crate::reference::{absolute, runner_device, INIT_SEED};
use crate::runner::{CallError, Launch, Role, RunnerClient, RunnerEnv};
use crate::settings::EvalSettings;
use cudal1_protocol::{
    Compare, CompareReply, Expected, Hello, Load, LoadReply, OutputRef, Outputs,
};
use cudal1_task::Task;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

const PROBE_SOURCE: &str = include_str!("degenerate_probe.py");

/// Why a task is degenerate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlagKind {
    ConstantAcrossSeeds,
    InputIndependent,
    WeightIndependent,
    NearZero,
    NullOnes,
    ConstantOutput,
    NullEcho,
}

impl FlagKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FlagKind::ConstantAcrossSeeds => "constant_across_seeds",
            FlagKind::InputIndependent => "input_independent",
            FlagKind::WeightIndependent => "weight_independent",
            FlagKind::NearZero => "near_zero",
            FlagKind::NullOnes => "null_ones",
            FlagKind::ConstantOutput => "constant_output",
            FlagKind::NullEcho => "null_echo",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Flag {
    pub kind: FlagKind,
    pub reason: String,
}

/// The verdict on one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskCheck {
    pub task: String,
    pub flags: Vec<Flag>,
    pub parameters: u64,
    /// Probe modes that could not be judged, with why (the probe failed on this task).
    pub unjudged: Vec<String>,
}

impl TaskCheck {
    pub fn is_degenerate(&self) -> bool {
        !self.flags.is_empty()
    }
}

/// The task's reference (or the probe) could not be run.
#[derive(Debug, thiserror::Error)]
#[error("checking `{task}` failed while {doing}: {source}")]
pub struct CheckError {
    pub task: String,
    pub doing: String,
    #[source]
    pub source: CallError,
}

/// Probe modes, what their passing means, and the flag they raise.
const NULLS: [(&str, FlagKind, &str); 4] = [
    ("zeros", FlagKind::NearZero, "a candidate returning zeros passes: the output is near zero"),
    ("ones", FlagKind::NullOnes, "a candidate returning ones passes"),
    (
        "fill_mean",
        FlagKind::ConstantOutput,
        "a candidate filling each output with one value passes: the output is constant",
    ),
    ("echo", FlagKind::NullEcho, "a candidate returning its input passes"),
];

/// Checks one task on `seeds` (three or more give a clear answer).
pub fn check_task(
    env: &RunnerEnv,
    task: &Task,
    settings: &EvalSettings,
    work_root: &Path,
    seeds: &[u64],
) -> Result<TaskCheck, CheckError> {
    let fail = |doing: &str, source: CallError| CheckError {
        task: task.key(),
        doing: doing.to_owned(),
        source,
    };
    let dir = tempfile::Builder::new()
        .prefix("check-")
        .tempdir_in(work_root)
        .map_err(|e| fail("creating its directory", CallError::Protocol(e.to_string())))?;
    let task_path = absolute(&task.path);
    let load = |candidate: Option<PathBuf>| Load {
        reference: task_path.clone(),
        candidate,
        device: runner_device(&settings.device),
        init_seed: INIT_SEED,
        scale: settings.scale,
    };
    let limit = settings.call_timeout * (seeds.len().max(1) as u32) + Duration::from_secs(60);

    let ref_dir = dir.path().join("reference");
    std::fs::create_dir_all(&ref_dir)
        .map_err(|e| fail("creating its directory", CallError::Protocol(e.to_string())))?;
    let mut reference =
        RunnerClient::spawn(env, launch(Role::Reference, "reference", &ref_dir, vec![], settings))
            .map_err(|e| fail("starting the reference", e))?;
    let result = (|| {
        let hello = reference
            .call(&Hello {}, crate::runner::HELLO_TIMEOUT)
            .map_err(|e| fail("starting the reference", e))?;
        crate::memory::refuse_if_too_large(&mut reference, &task_path, settings, &hello)
            .map_err(|e| fail("checking that it fits in memory", e))?;
        let loaded: LoadReply = reference
            .call(&load(None), settings.load_timeout)
            .map_err(|e| fail("loading the reference", e))?;
        let expected = reference
            .call(
                &Expected { seeds: seeds.to_vec(), dir: ref_dir.join("expected"), share_bytes: 0 },
                limit,
            )
            .map_err(|e| fail("running the reference", e))?
            .results;
        let expected: Vec<PathBuf> = expected
            .into_iter()
            .map(|r| {
                r.path.ok_or_else(|| {
                    fail(
                        "running the reference",
                        CallError::Protocol(format!(
                            "no file of expected outputs for seed {}",
                            r.seed
                        )),
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        let mut check = TaskCheck {
            task: task.key(),
            flags: Vec::new(),
            parameters: loaded.parameters,
            unjudged: Vec::new(),
        };
        let mut compare = |expected: &Path, actual: &Path| -> Result<bool, CheckError> {
            passes(&mut reference, expected, actual, settings)
                .map_err(|e| fail("comparing outputs", e))
        };

        // Outputs of different seeds against the first seed's.
        let mut same = true;
        for e in &expected[1..] {
            same &= compare(&expected[0], e)?;
        }
        if same && expected.len() > 1 {
            check.flags.push(Flag {
                kind: FlagKind::ConstantAcrossSeeds,
                reason: format!("the outputs for {} input seeds are equal", expected.len()),
            });
        }

        // The probes, in one candidate runner.
        let probe_dir = dir.path().join("probe");
        std::fs::create_dir_all(&probe_dir)
            .map_err(|e| fail("writing the probe", CallError::Protocol(e.to_string())))?;
        let probe_file = probe_dir.join("probe.py");
        std::fs::write(&probe_file, PROBE_SOURCE)
            .map_err(|e| fail("writing the probe", CallError::Protocol(e.to_string())))?;
        let mut probe = RunnerClient::spawn(
            env,
            launch(Role::Candidate, "probe", &probe_dir, vec![task_path.clone()], settings),
        )
        .map_err(|e| fail("starting the probe", e))?;
        let outcome = (|| {
            probe
                .call(&Hello {}, crate::runner::HELLO_TIMEOUT)
                .map_err(|e| fail("starting the probe", e))?;
            probe
                .call(&load(Some(probe_file.clone())), settings.load_timeout)
                .map_err(|e| fail("loading the probe", e))?;
            let mut run_mode =
                |mode: &str,
                 compare: &mut dyn FnMut(&Path, &Path) -> Result<bool, CheckError>|
                 -> Result<Result<bool, String>, CheckError> {
                    std::fs::write(probe_dir.join("probe-mode"), mode).map_err(|e| {
                        fail("writing the probe", CallError::Protocol(e.to_string()))
                    })?;
                    let out_dir = probe_dir.join(format!("out-{mode}"));
                    // Seed by seed, stopping at the first mismatch: a healthy task fails every null
                    // candidate on its first seed.
                    for (&seed, e) in seeds.iter().zip(&expected) {
                        let reply = match probe.call(
                            &Outputs { seeds: vec![seed], dir: out_dir.clone(), share_bytes: 0 },
                            limit,
                        ) {
                            Ok(r) => r,
                            // A probe that cannot run on this task (an echo of the wrong kind) judges nothing.
                            Err(CallError::Runner(e)) => {
                                return Ok(Err(e.message.lines().next().unwrap_or("").to_owned()))
                            }
                            Err(e) => return Err(fail(&format!("running the probe ({mode})"), e)),
                        };
                        let Some(path) = reply.results.first().and_then(|r| r.path.as_deref())
                        else {
                            return Ok(Ok(false));
                        };
                        if !compare(e, path)? {
                            return Ok(Ok(false));
                        }
                    }
                    Ok(Ok(true))
                };
            // The probe must reproduce the reference before its other answers mean anything.
            match run_mode("model", &mut compare)? {
                Ok(true) => {}
                Ok(false) => {
                    check.unjudged.push(
                        "model: the probe does not reproduce the reference (nondeterministic?)"
                            .into(),
                    );
                    return Ok(());
                }
                Err(why) => {
                    check.unjudged.push(format!("model: {why}"));
                    return Ok(());
                }
            }
            for (mode, kind, reason) in NULLS {
                match run_mode(mode, &mut compare)? {
                    Ok(true) => check.flags.push(Flag { kind, reason: reason.into() }),
                    Ok(false) => {}
                    Err(why) => check.unjudged.push(format!("{mode}: {why}")),
                }
            }
            match run_mode("perturbed", &mut compare)? {
                Ok(true) => check.flags.push(Flag {
                    kind: FlagKind::InputIndependent,
                    reason: "the model gives the same outputs for other inputs".into(),
                }),
                Ok(false) => {}
                Err(why) => check.unjudged.push(format!("perturbed: {why}")),
            }
            if check.parameters > 0 {
                match run_mode("reweighted", &mut compare)? {
                    Ok(true) => check.flags.push(Flag {
                        kind: FlagKind::WeightIndependent,
                        reason: "the model gives the same outputs with other weights".into(),
                    }),
                    Ok(false) => {}
                    Err(why) => check.unjudged.push(format!("reweighted: {why}")),
                }
            }
            Ok(())
        })();
        probe.shutdown();
        outcome.map(|()| check)
    })();
    reference.shutdown();
    result
}

fn launch<'a>(
    role: Role,
    label: &str,
    scratch: &'a Path,
    reads: Vec<PathBuf>,
    settings: &'a EvalSettings,
) -> Launch<'a> {
    Launch {
        role,
        label: format!("tasks check {label}"),
        device: &settings.device,
        scratch,
        extensions: None,
        reads,
        // The probe is our code, but it runs the task's code in a candidate role.
        sandbox: settings.sandbox && role == Role::Candidate,
        memory_bytes: settings.memory_bytes.filter(|_| role == Role::Candidate),
        untimed: true,
    }
}

/// Whether `actual` matches `expected` under the settings' tolerance (per output dtype).
fn passes(
    reference: &mut RunnerClient,
    expected: &Path,
    actual: &Path,
    settings: &EvalSettings,
) -> Result<bool, CallError> {
    let timeout = Duration::from_secs(120);
    let (atol, rtol) = settings.tolerance.for_dtype("float32");
    let request = |atol, rtol| Compare {
        expected: OutputRef::File(expected.to_owned()),
        actual: OutputRef::File(actual.to_owned()),
        atol,
        rtol,
    };
    let first: CompareReply = reference.call(&request(atol, rtol), timeout)?;
    let mut replies = vec![((atol, rtol), first)];
    for t in distinct_tolerances(&replies[0].1, &settings.tolerance) {
        if replies.iter().all(|(have, _)| *have != t) {
            let r = reference.call(&request(t.0, t.1), timeout)?;
            replies.push((t, r));
        }
    }
    Ok(judge(&replies, &settings.tolerance).failure.is_none())
}

/// Flagged tasks by key, from `cudal1 tasks check --json` lines (one [`TaskCheck`] per line), for
/// leaving them out of speed statistics and rewards.
pub fn read_flagged(jsonl: &str) -> std::collections::BTreeMap<String, Vec<Flag>> {
    jsonl
        .lines()
        .filter_map(|l| serde_json::from_str::<TaskCheck>(l).ok())
        .filter(TaskCheck::is_degenerate)
        .map(|c| (c.task, c.flags))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_read_back_from_json_lines() {
        let flagged = TaskCheck {
            task: "level1/1_A".into(),
            flags: vec![Flag { kind: FlagKind::NearZero, reason: "zeros pass".into() }],
            parameters: 0,
            unjudged: vec![],
        };
        let clean =
            TaskCheck { task: "level1/2_B".into(), flags: vec![], parameters: 3, unjudged: vec![] };
        let text = format!(
            "{}\n{}\nnot json\n",
            serde_json::to_string(&flagged).unwrap(),
            serde_json::to_string(&clean).unwrap()
        );
        let read = read_flagged(&text);
        assert_eq!(read.len(), 1);
        assert_eq!(read["level1/1_A"][0].kind, FlagKind::NearZero);
        assert_eq!(serde_json::to_value(FlagKind::NullEcho).unwrap(), "null_echo");
        assert_eq!(FlagKind::ConstantAcrossSeeds.as_str(), "constant_across_seeds");
    }
}

//! `eval --own-share`: after the evaluations, each correct candidate on a GPU is profiled with
//! Nsight Compute ([`crate::profiling::Profiling`], outside its evaluation) and its GPU time is
//! split between the kernels it built itself and the rest ([`cudal1_eval::own`]); the share is
//! stored with the evaluation, and found there again by a later run of the same evaluation.

use crate::args::NcuArgs;
use crate::interrupt::Interrupt;
use crate::profiling::{Options, Profiling, Program};
use crate::workspace::Workspace;
use anyhow::{Context, Result};
use cudal1_eval::own::{attribute, OwnKernels, OwnShare};
use cudal1_eval::profile::Profile;
use cudal1_eval::{CompileCache, Device, Evaluation, Verdict};
use cudal1_task::{Candidate, Task};
use std::sync::Arc;

/// One evaluation whose share may be measured.
pub struct Subject<'a> {
    /// Its row in the store.
    pub id: Option<i64>,
    pub task: &'a Task,
    pub candidate: &'a Candidate,
    pub evaluation: &'a Evaluation,
}

/// What `--own-share` found for one evaluation.
pub enum Found {
    /// Not a correct evaluation on a GPU: no share.
    NotApplicable,
    Measured {
        share: OwnShare,
        reused: bool,
    },
    Failed(String),
}

impl Found {
    /// `own_share` and `own_kernels` (or `own_share_error`) for a JSON object.
    pub fn add_to(&self, v: &mut serde_json::Value) {
        match self {
            Found::NotApplicable => {}
            Found::Measured { share, reused } => {
                v["own_share"] = share.share.into();
                v["own_kernels"] = serde_json::to_value(share).unwrap_or_default();
                v["own_kernels"]["reused"] = (*reused).into();
            }
            Found::Failed(e) => {
                v["own_share"] = serde_json::Value::Null;
                v["own_share_error"] = e.clone().into();
            }
        }
    }

    /// `73% own (2 of 5 kernels)`, or why there is none.
    pub fn text(&self) -> Option<String> {
        match self {
            Found::NotApplicable => None,
            Found::Measured { share, .. } => Some(share.text()),
            Found::Failed(e) => Some(format!("not measured: {}", e.lines().next().unwrap_or(""))),
        }
    }
}

/// Measures (or finds in the store) the share of each subject, in order.
pub fn measure(
    ws: &Workspace,
    ncu: &NcuArgs,
    force: bool,
    sandbox: bool,
    interrupt: &Arc<Interrupt>,
    subjects: &[Subject<'_>],
) -> Result<Vec<Found>> {
    let applicable = |s: &Subject<'_>| {
        s.evaluation.verdict == Verdict::Correct && s.evaluation.device.starts_with("cuda")
    };
    if !subjects.iter().any(applicable) {
        return Ok(subjects.iter().map(|_| Found::NotApplicable).collect());
    }
    let device = ws
        .machine
        .gpu()
        .context("`--own-share` needs a CUDA device: Nsight Compute profiles GPU kernels")?;
    let profiling = start_profiling(ws, ncu, device, force, sandbox, interrupt)?;
    let builds = CompileCache { root: ws.machine.cache.join("extensions") };
    let mut found = Vec::with_capacity(subjects.len());
    for s in subjects {
        if !applicable(s) || interrupt.interrupted() {
            found.push(Found::NotApplicable);
            continue;
        }
        found.push(match one(ws, &profiling, &builds, force, s) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(task = %s.task.key(), candidate = %s.candidate.label, error = %format!("{e:#}"), "no own-kernel share");
                Found::Failed(format!("{e:#}"))
            }
        });
    }
    Ok(found)
}

fn one(
    ws: &Workspace,
    profiling: &Profiling<'_>,
    builds: &CompileCache,
    force: bool,
    s: &Subject<'_>,
) -> Result<Found> {
    if let (false, Some(id)) = (force, s.id) {
        let stored = ws.store.evaluation(id)?;
        if let Some(kernels) = stored.and_then(|e| e.own_kernels) {
            if let Ok(share) = serde_json::from_value::<OwnShare>(kernels) {
                return Ok(Found::Measured { share, reused: true });
            }
        }
    }
    let share = share_of(profiling, builds, s.task, s.candidate)?;
    if let Some(id) = s.id {
        ws.store.set_own_share(id, share.share, &serde_json::to_value(&share)?)?;
    }
    Ok(Found::Measured { share, reused: false })
}

/// Profiles `candidate` (and `task`'s reference, whose kernels are never the candidate's own)
/// and splits its GPU time.
fn share_of(
    profiling: &Profiling<'_>,
    builds: &CompileCache,
    task: &Task,
    candidate: &Candidate,
) -> Result<OwnShare> {
    // Its symbols are read from the pool's build: made now if this machine's cache has none.
    profiling.publish_builds(task, &Program::Source(candidate))?;
    let own = OwnKernels::of_program(Some(&builds.dir_for(candidate)), &candidate.source)?;
    // Only names the program builds can be its own: without any, its share is 0 whatever it
    // runs, and neither it nor its reference is profiled (20-30 s each under ncu on an H100).
    if own.defines_none() {
        return Ok(OwnShare::of_none(&own));
    }
    // The reference's kernels are PyTorch's and its libraries': never the candidate's own.
    let library: Vec<String> = match profiling.get(task, &Program::Reference) {
        Ok((row, _)) => serde_json::from_value::<Profile>(row.profile)
            .map(|p| p.kernels.into_iter().map(|k| k.name).collect())
            .unwrap_or_default(),
        Err(e) => {
            tracing::warn!(task = %task.key(), error = %format!("{e:#}"), "the reference could not be profiled; its kernel names are not excluded from own kernels");
            Vec::new()
        }
    };
    let (row, _) = profiling.get(task, &Program::Source(candidate))?;
    let profile: Profile = serde_json::from_value(row.profile)
        .context("a stored profile is not one this version reads")?;
    Ok(attribute(&profile, &own.with_library(library))?)
}

/// `train rl --reward speedup-own-kernels`: shares of the programs the engine judged correct.
pub struct TrainShares<'a> {
    profiling: Profiling<'a>,
    builds: CompileCache,
}

impl<'a> TrainShares<'a> {
    pub fn new(
        ws: &'a Workspace,
        ncu: &NcuArgs,
        sandbox: bool,
        interrupt: &Arc<Interrupt>,
    ) -> Result<TrainShares<'a>> {
        let device = ws.machine.gpu().context("`--reward speedup-own-kernels` needs a CUDA device: Nsight Compute profiles GPU kernels\nhint: use `--reward speedup`, or train on a GPU")?;
        let profiling = start_profiling(ws, ncu, device, false, sandbox, interrupt)?;
        Ok(TrainShares {
            profiling,
            builds: CompileCache { root: ws.machine.cache.join("extensions") },
        })
    }
}

impl cudal1_train::kernels::OwnShares for TrainShares<'_> {
    fn own_share(&self, task: &Task, code: &str) -> Result<f64, String> {
        // The engine judged it as this candidate: the same hash finds the same published build.
        let candidate = Candidate::from_source("rl program".into(), code.to_owned());
        share_of(&self.profiling, &self.builds, task, &candidate)
            .map(|s| s.share)
            .map_err(|e| format!("{e:#}"))
    }
}

/// Profiling on `device` for own-kernel shares, stopped by the command's Ctrl-C.
fn start_profiling<'a>(
    ws: &'a Workspace,
    ncu: &NcuArgs,
    device: Device,
    force: bool,
    sandbox: bool,
    interrupt: &Arc<Interrupt>,
) -> Result<Profiling<'a>> {
    let options = Options {
        force,
        dry_run: false,
        sandbox,
        cancel: Some(crate::interrupt::profile_cancel(interrupt)),
        builds: ws.settings.clone(),
    };
    Profiling::new(
        ncu,
        &ws.machine.env,
        &ws.machine.interpreter,
        device,
        &ws.machine.cache,
        &ws.store,
        options,
    )
}

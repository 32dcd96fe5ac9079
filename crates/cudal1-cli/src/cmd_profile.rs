//! `cudal1 profile TASK [CANDIDATE ...]`: where each program's GPU time goes, from Nsight
//! Compute (`cudal1_eval::profile`), stored per task, program and class of GPU so that `report`
//! shows it and `optimize --profile` puts it in prompts. [`Profiling`] is the one place that
//! profiles and records.

use crate::args::{DeviceFlag, ProfileArgs};
use crate::exit::Status;
use crate::out;
use crate::profiling::{Options, Profiling, Program};
use anyhow::{bail, Context, Result};
use cudal1_eval::profile::{Profile, ProfileError};
use cudal1_eval::Device;
use cudal1_store::{Store, REFERENCE_PROGRAM};
use cudal1_task::{Candidate, Task};
use std::path::PathBuf;

pub fn run(a: &ProfileArgs) -> Result<Status> {
    let task = Task::load(&a.task)?;
    let candidates: Vec<(Candidate, PathBuf)> = a
        .candidates
        .iter()
        .map(|p| Candidate::load(p).map(|c| (c, p.clone())))
        .collect::<Result<_, _>>()?;
    if a.no_reference && candidates.is_empty() {
        bail!("nothing to profile: `--no-reference` and no candidate\nhint: name candidate files after the task");
    }
    let python = crate::workspace::Python::resolve(&a.python)?;
    let (interp, env, cache) = (&python.interpreter, &python.env, &python.cache);
    let device = match &a.device.device {
        Some(DeviceFlag::One(d)) => d.clone(),
        Some(DeviceFlag::All) | None if interp.probe.gpus.is_empty() && !a.dry_run => {
            bail!("profiling needs a CUDA device and PyTorch sees none\nhint: `--dry-run --device cpu` checks that the programs run under the profiling driver")
        }
        Some(DeviceFlag::All) | None if interp.probe.gpus.is_empty() => Device::Cpu,
        Some(DeviceFlag::All) | None => Device::Cuda(0),
    };
    if device == Device::Cpu && !a.dry_run {
        bail!("{}", ProfileError::NeedsGpu);
    }
    let store = Store::open(&a.db.db)?;
    let interrupt = crate::interrupt::install("the profile under way");
    let options = Options {
        force: a.force,
        dry_run: a.dry_run,
        sandbox: !a.no_sandbox,
        cancel: Some(crate::interrupt::profile_cancel(&interrupt)),
        // The pool builds what no evaluation published, as `eval` would with these flags.
        builds: cudal1_eval::EvalSettings { sandbox: !a.no_sandbox, ..Default::default() },
    };
    let profiling = Profiling::new(&a.ncu, env, interp, device, cache, &store, options)?;
    let mut programs: Vec<(String, Program<'_>)> = Vec::new();
    if !a.no_reference {
        programs.push((REFERENCE_PROGRAM.to_owned(), Program::Reference));
    }
    programs.extend(candidates.iter().map(|(c, p)| (c.label.clone(), Program::File(c, p))));

    let mut failures = 0;
    for (label, program) in &programs {
        if interrupt.interrupted() {
            return Ok(Status::Interrupted);
        }
        if a.dry_run {
            let result = profiling.dry_run(&task, program);
            if result.is_err() {
                failures += 1;
            }
            if a.json {
                let mut v = serde_json::json!({"task": task.key(), "program": label, "dry_run": true, "ok": result.is_ok()});
                match &result {
                    Ok(built) => v["built_here"] = built.clone().into(),
                    Err(e) => v["error"] = format!("{e:#}").into(),
                }
                out::line(v)?;
            } else {
                match result {
                    Ok(built) if built.is_empty() => out::line(format!(
                        "{} {label}: runs under the profiling driver",
                        task.key()
                    ))?,
                    Ok(built) => out::line(format!(
                        "{} {label}: runs under the profiling driver, after building {} itself (not among the compile pool's builds: a profile's warm-up pays for it)",
                        task.key(),
                        built.join(", ")
                    ))?,
                    Err(e) => out::line(format!("{} {label}: {e:#}", task.key()))?,
                }
            }
            continue;
        }
        if !a.json {
            eprintln!("profiling {} {label} with Nsight Compute ...", task.key());
        }
        match profiling.get(&task, program) {
            Ok((row, reused)) => {
                let profile: Profile = serde_json::from_value(row.profile.clone()).context("a stored profile is not one this version reads\nhint: `--force` profiles again")?;
                if a.json {
                    out::line(serde_json::json!({
                        "task": row.task_name, "program": label, "program_hash": row.key.program, "gpu_class": row.key.gpu_class,
                        "reused": reused, "brief": row.brief, "profile": row.profile,
                    }))?;
                } else {
                    let from =
                        if reused { " (from the store; --force profiles again)" } else { "" };
                    out::line(format!("{} {label} on {}{from}:", task.key(), row.key.gpu_class))?;
                    for line in profile.brief(a.top).lines() {
                        out::line(format!("  {line}"))?;
                    }
                }
            }
            Err(e) => {
                failures += 1;
                if a.json {
                    out::line(
                        serde_json::json!({"task": task.key(), "program": label, "error": format!("{e:#}")}),
                    )?;
                } else {
                    out::line(format!("{} {label}: not profiled: {e:#}", task.key()))?;
                }
            }
        }
    }
    if interrupt.interrupted() {
        return Ok(Status::Interrupted);
    }
    Ok(Status::problems_if(failures > 0))
}

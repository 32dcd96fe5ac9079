//! `cudal1 tasks list`: what a suite holds; `cudal1 tasks check`: which of its tasks are
//! degenerate. Both send one job per task to the engine, so tasks run in parallel where the
//! machine allows, and print each row as it finishes.

use crate::args::{CheckArgs, DeviceFlag, EngineFlags, ListArgs, TasksCommand};
use crate::exit::Status;
use crate::interrupt;
use crate::out;
use crate::reporters::Progress;
use crate::workspace::{EngineRequest, Machine, Python};
use anyhow::{bail, Result};
use crossbeam_channel::Receiver;
use cudal1_eval::degenerate::TaskCheck;
use cudal1_eval::memory::Footprint;
use cudal1_eval::{
    Device, EvalSettings, Evaluator, Event, EventKind, Job, JobId, JobOutcome, Tolerance,
};
use cudal1_protocol::DescribeReply;
use cudal1_store::{NewTaskCheck, Store};
use cudal1_supervisor::human_bytes;
use cudal1_task::{load_suite, Task};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub fn run(cmd: TasksCommand) -> Result<Status> {
    match cmd {
        TasksCommand::List(a) => list(&a),
        TasksCommand::Check(a) => check(&a),
        TasksCommand::Synth(a) => synth(&a),
    }
}

fn synth(a: &crate::args::SynthArgs) -> Result<Status> {
    use cudal1_task::synth::{generate, FAMILIES};
    let scale = a.scale;
    let tasks = generate(scale, a.train, a.heldout);
    let write = |path: std::path::PathBuf, text: &str| -> Result<()> {
        std::fs::create_dir_all(path.parent().expect("a file in a folder"))?;
        std::fs::write(&path, text)
            .map_err(|e| anyhow::anyhow!("writing `{}`: {e}", path.display()))
    };
    for t in &tasks {
        write(a.out.join(t.split).join("level1").join(format!("{}.py", t.stem)), &t.reference)?;
        let dir = a.out.join("solutions").join(t.split).join("level1").join(&t.stem);
        write(
            dir.join("fast.py"),
            &format!("# cudal1: expect=correct faster\n# The family's known rewrite.\n{}", t.fast),
        )?;
        write(dir.join("slow.py"), &format!("# cudal1: expect=correct\n# Correct, no faster: the reference's computation restated.\n{}", t.slow))?;
    }
    let manifest = serde_json::json!({"scale": scale, "families": FAMILIES, "tasks": tasks});
    write(a.out.join("manifest.json"), &serde_json::to_string_pretty(&manifest)?)?;
    let train = tasks.iter().filter(|t| t.split == "train").count();
    out::line(format!(
        "{} tasks in {} ({train} train, {} held out; families never trained on: {}); solutions in {}",
        tasks.len(),
        a.out.display(),
        tasks.len() - train,
        FAMILIES.iter().filter(|f| f.heldout_only).map(|f| f.name).collect::<Vec<_>>().join(", "),
        a.out.join("solutions").display()
    ))?;
    Ok(Status::Done)
}

/// Submits one job per task and hands each task's outcome, as it finishes, to `on_done`; returns
/// how many were cancelled by an interrupt.
fn each_task(
    what: &str,
    engine: Evaluator,
    events: &Receiver<Event>,
    tasks: &[Arc<Task>],
    job: impl Fn(Arc<Task>) -> Job,
    mut on_done: impl FnMut(usize, JobOutcome, &Progress) -> Result<()>,
) -> Result<usize> {
    if tasks.is_empty() {
        engine.finish();
        return Ok(0);
    }
    let mut progress = Progress::new(what, tasks.len() as u64);
    let ids: HashMap<JobId, usize> =
        tasks.iter().enumerate().map(|(i, t)| (engine.submit(job(Arc::clone(t))).id, i)).collect();
    let (mut left, mut cancelled) = (tasks.len(), 0);
    for event in events {
        let Some(&i) = ids.get(&event.job) else { continue };
        match event.kind {
            EventKind::Started { .. } => {
                progress.progress(&tasks[i].key(), false);
                continue;
            }
            EventKind::Finished(JobOutcome::Cancelled) => cancelled += 1,
            EventKind::Finished(outcome) => on_done(i, outcome, &progress)?,
            _ => continue,
        }
        progress.inc();
        left -= 1;
        if left == 0 {
            break;
        }
    }
    progress.finish();
    engine.finish();
    Ok(cancelled)
}

fn list(a: &ListArgs) -> Result<Status> {
    let suite = load_suite(&a.dir)?;
    let tasks: Vec<Arc<Task>> = suite.tasks.into_iter().map(Arc::new).collect();
    let mut described: Vec<Option<Result<Arc<DescribeReply>, String>>> = vec![None; tasks.len()];
    let mut cancelled = 0;
    let mut interrupted = false;
    if !a.static_only && !tasks.is_empty() {
        // Trusted CPU runners read every task: shapes and parameter counts come from running
        // `get_inputs()` and building the model on meta tensors, which allocates nothing.
        let machine = Machine::resolve(
            Python::resolve(&a.python)?,
            &EngineRequest {
                device: Some(&DeviceFlag::One(Device::Cpu)),
                engine: Some(&EngineFlags {
                    compile_workers: Some(1),
                    lanes: a.lanes.clone(),
                    pipeline: false,
                }),
                untimed: true,
                ..EngineRequest::default()
            },
        )?;
        let interrupt = interrupt::install("the tasks being read");
        let (engine, events) = machine.engine_with_events(&EvalSettings::default())?;
        interrupt.watch(engine.canceller());
        cancelled = each_task(
            "tasks list",
            engine,
            &events,
            &tasks,
            Job::describe,
            |i, outcome, progress| {
                let result = match outcome {
                    JobOutcome::Described(d) => Ok(d),
                    JobOutcome::TaskFailed { error, .. } | JobOutcome::HostFailed { error } => {
                        Err(error)
                    }
                    _ => return Ok(()),
                };
                if a.json {
                    progress.suspend(|| out::line(list_row(&tasks[i], Some(&result))))?;
                }
                described[i] = Some(result);
                Ok(())
            },
        )?;
        interrupted = interrupt.interrupted();
    } else if a.json {
        for t in &tasks {
            out::line(list_row(t, None))?;
        }
    }
    let failed = described.iter().filter(|d| matches!(d, Some(Err(_)))).count();
    if !a.json {
        let mut t = crate::style::table();
        t.set_header(["level", "id", "name", "inputs", "parameters", "memory"]);
        for (task, d) in tasks.iter().zip(&described) {
            let (inputs, parameters, memory) = match d {
                Some(Ok(d)) => (
                    describe_values(&d.inputs),
                    d.parameters.to_string(),
                    Footprint::from_reply(d)
                        .map_or("-".into(), |f| human_bytes(f.cpu_evaluation())),
                ),
                Some(Err(e)) => {
                    (format!("error: {}", e.lines().next().unwrap_or("")), "-".into(), "-".into())
                }
                None => ("-".into(), "-".into(), "-".into()),
            };
            let cell = |v: Option<u32>| v.map_or("-".into(), |x| x.to_string());
            t.add_row([
                cell(task.name.level),
                cell(task.name.id),
                task.name.name.clone(),
                inputs,
                parameters,
                memory,
            ]);
        }
        out::line(t)?;
        out::line(format!("{} task(s) in {}; memory: what one evaluation on the CPU holds (a reference and a candidate process)", tasks.len(), a.dir.display()))?;
        if failed > 0 {
            out::line(format!("{failed} task(s) could not be read"))?;
        }
    }
    for p in &suite.problems {
        eprintln!("warning: {p}");
    }
    if cancelled > 0 || interrupted {
        return Ok(Status::Interrupted);
    }
    Ok(Status::problems_if(!suite.problems.is_empty() || failed > 0))
}

fn describe_values(values: &[cudal1_protocol::ValueSpec]) -> String {
    values.iter().map(cudal1_protocol::ValueSpec::describe).collect::<Vec<_>>().join(", ")
}

fn list_row(t: &Task, d: Option<&Result<Arc<DescribeReply>, String>>) -> serde_json::Value {
    let ok = d.and_then(|r| r.as_ref().ok());
    serde_json::json!({
        "key": t.key(),
        "level": t.name.level,
        "id": t.name.id,
        "name": t.name.name,
        "path": t.path,
        "hash": t.hash,
        "inputs": ok.map(|l| l.inputs.iter().map(cudal1_protocol::ValueSpec::describe).collect::<Vec<_>>()),
        "init_inputs": ok.map(|l| l.init_inputs.iter().map(cudal1_protocol::ValueSpec::describe).collect::<Vec<_>>()),
        "parameters": ok.map(|l| l.parameters),
        "input_bytes": ok.and_then(|l| l.input_bytes),
        "output_bytes": ok.and_then(|l| l.output_bytes),
        "parameter_bytes": ok.and_then(|l| l.parameter_bytes),
        "memory_bytes": ok.and_then(|l| Footprint::from_reply(l)).map(|f| f.cpu_evaluation()),
        "method": ok.map(|l| l.method.clone()),
        "note": ok.and_then(|l| l.note.clone()),
        "error": d.and_then(|r| r.as_ref().err()),
    })
}

fn check(a: &CheckArgs) -> Result<Status> {
    if a.seeds < 2 {
        bail!("`--seeds` must be at least 2: outputs of different seeds are compared");
    }
    if a.call_timeout.is_nan()
        || a.call_timeout <= 0.0
        || a.load_timeout.is_nan()
        || a.load_timeout <= 0.0
    {
        bail!("`--call-timeout` and `--load-timeout` must be positive numbers of seconds");
    }
    let suite = load_suite(&a.dir)?;
    let tasks: Vec<Arc<Task>> = suite
        .tasks
        .into_iter()
        .filter(|t| a.only.is_empty() || a.only.contains(&t.key()))
        .map(Arc::new)
        .collect();
    if tasks.is_empty() {
        bail!("no task of `{}` matches `--only {}`", a.dir.display(), a.only.join(" "));
    }
    let machine = Machine::resolve(
        Python::resolve(&a.python)?,
        &EngineRequest {
            device: a.device.device.as_ref(),
            engine: Some(&EngineFlags {
                compile_workers: Some(1),
                lanes: a.lanes.clone(),
                pipeline: false,
            }),
            ..EngineRequest::default()
        },
    )?;
    let devices = &machine.devices;
    let settings = EvalSettings {
        tolerance: if a.kernelbench_v0 { Tolerance::KernelBenchV0 } else { Tolerance::PerDtype },
        call_timeout: Duration::from_secs_f64(a.call_timeout),
        load_timeout: Duration::from_secs_f64(a.load_timeout),
        sandbox: !a.no_sandbox,
        ..EvalSettings::for_device(devices[0].clone())
    };
    let device_text = devices.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    // Fixed seeds: a check is repeatable, and the tasks' own seeding decides their inputs.
    let seeds: Vec<u64> = (0..a.seeds as u64).map(|i| 1000 + 7919 * i).collect();
    // Checks are filed under the settings, seeds and who checked (this build, this class of GPU).
    let settings_hash =
        cudal1_task::content_hash(&format!("{}|{seeds:?}", machine.judge.settings_hash(&settings)));
    let interrupt = interrupt::install("the task checks under way");
    let (engine, events) = machine.engine_with_events(&settings)?;
    interrupt.watch(engine.canceller());
    // Checks already in the store are not made again (`--force` makes them again).
    let store = Store::open(&a.db.db)?;
    let mut rows: Vec<Option<Result<Arc<TaskCheck>, String>>> = vec![None; tasks.len()];
    let mut reused = vec![false; tasks.len()];
    for (i, t) in tasks.iter().enumerate() {
        let stored = if a.force { None } else { store.find_task_check(&t.hash, &settings_hash)? };
        if let Some(c) =
            stored.and_then(|s| serde_json::from_value::<TaskCheck>(s.check.result).ok())
        {
            if a.json {
                out::line(check_row(&t.key(), &Ok(Arc::new(c.clone())), true)?)?;
            }
            rows[i] = Some(Ok(Arc::new(c)));
            reused[i] = true;
        }
    }
    let pending: Vec<Arc<Task>> =
        tasks.iter().zip(&reused).filter(|(_, r)| !**r).map(|(t, _)| Arc::clone(t)).collect();
    let index: Vec<usize> = (0..tasks.len()).filter(|i| !reused[*i]).collect();
    let done_before = tasks.len() - pending.len();
    if done_before > 0 && !a.json {
        eprintln!("resuming: {done_before} of {} task(s) already checked (from `{}`; --force checks again)", tasks.len(), a.db.db.display());
    }
    let mut save_error = None;
    let cancelled = each_task(
        "tasks check",
        engine,
        &events,
        &pending,
        |t| Job::check_task(t, seeds.clone()),
        |p, outcome, progress| {
            let i = index[p];
            let result = match outcome {
                JobOutcome::Checked(c) => Ok(c),
                JobOutcome::TaskFailed { error, .. } | JobOutcome::HostFailed { error } => {
                    Err(error)
                }
                _ => return Ok(()),
            };
            if let Ok(c) = &result {
                let saved = store.insert_task_check(&NewTaskCheck {
                    task_hash: tasks[i].hash.clone(),
                    settings_hash: settings_hash.clone(),
                    task_name: tasks[i].key(),
                    result: serde_json::to_value(&**c)?,
                });
                if let Err(e) = saved {
                    save_error.get_or_insert(e);
                }
            }
            if a.json {
                let row = check_row(&tasks[i].key(), &result, false)?;
                progress.suspend(|| out::line(row))?;
            } else {
                progress.on_terminal(&check_line(&tasks[i].key(), &result));
            }
            rows[i] = Some(result);
            Ok(())
        },
    )?;
    if let Some(e) = save_error {
        return Err(anyhow::Error::new(e)
            .context("saving task checks (the checks finished, but some were not saved)"));
    }
    let flagged = rows.iter().filter(|r| matches!(r, Some(Ok(c)) if c.is_degenerate())).count();
    let failed = rows.iter().filter(|r| matches!(r, Some(Err(_)))).count();
    if !a.json {
        let mut t = crate::style::table();
        t.set_header(["task", "degenerate", "why"]);
        for ((task, result), reused) in tasks.iter().zip(&rows).zip(&reused) {
            let (verdict, why) = match result {
                Some(Ok(c)) if c.is_degenerate() => (
                    "yes".to_owned(),
                    c.flags
                        .iter()
                        .map(|f| format!("{}: {}", f.kind.as_str(), f.reason))
                        .collect::<Vec<_>>()
                        .join("\n"),
                ),
                Some(Ok(c)) if !c.unjudged.is_empty() => {
                    ("no".to_owned(), format!("not judged: {}", c.unjudged.join("; ")))
                }
                Some(Ok(_)) => ("no".to_owned(), String::new()),
                Some(Err(e)) => ("error".to_owned(), e.lines().next().unwrap_or("").to_owned()),
                None => ("-".to_owned(), "not checked (interrupted)".to_owned()),
            };
            t.add_row([task.key(), if *reused { format!("{verdict} *") } else { verdict }, why]);
        }
        out::line(t)?;
        if done_before > 0 {
            out::line("* from the store (the same task and check settings); --force checks again")?;
        }
        let done = rows.iter().filter(|r| r.is_some()).count();
        out::line(format!("{flagged} of {done} task(s) degenerate on {device_text}; leave them out of speed statistics and rewards"))?;
        if failed > 0 {
            out::line(format!("{failed} task(s) could not be checked"))?;
        }
    }
    for p in &suite.problems {
        eprintln!("warning: {p}");
    }
    if cancelled > 0 || interrupt.interrupted() {
        return Ok(Status::Interrupted);
    }
    Ok(Status::problems_if(flagged > 0 || failed > 0 || !suite.problems.is_empty()))
}

/// A check as `--json` prints it: the check (or the error), and whether it came from the store.
fn check_row(
    key: &str,
    result: &Result<Arc<TaskCheck>, String>,
    reused: bool,
) -> Result<serde_json::Value> {
    let mut v = match result {
        Ok(c) => serde_json::to_value(&**c)?,
        Err(e) => {
            serde_json::json!({"task": key, "flags": [], "parameters": null, "unjudged": [], "error": e})
        }
    };
    v["reused"] = reused.into();
    Ok(v)
}

/// The line a finished check prints above the progress bar (on a terminal).
fn check_line(key: &str, result: &Result<Arc<TaskCheck>, String>) -> String {
    use crate::style::{err, Paint};
    match result {
        Ok(c) if c.is_degenerate() => format!(
            "{key}: {} ({})",
            err("degenerate", Paint::Warning),
            c.flags.iter().map(|f| f.kind.as_str()).collect::<Vec<_>>().join(", ")
        ),
        Ok(_) => format!("{key}: healthy"),
        Err(e) => {
            format!("{key}: {} {}", err("error:", Paint::Error), e.lines().next().unwrap_or(""))
        }
    }
}

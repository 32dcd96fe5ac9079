//! `cudal1 tasks list`: what a suite holds; `cudal1 tasks check`: which of its tasks are
//! degenerate. Both send one job per task to the engine, so tasks run in parallel where the
//! machine allows, and print each row as it finishes.

use crate::args::{CheckArgs, ListArgs, TasksCommand};
use crate::exit::Status;
use crate::interrupt;
use crate::out;
use crate::workspace;
use anyhow::{bail, Result};
use cudal1_eval::degenerate::TaskCheck;
use cudal1_eval::memory::Footprint;
use cudal1_supervisor::human_bytes;
use cudal1_eval::{CompileCache, Device, EngineConfig, EvalSettings, Evaluator, Event, EventKind, Job, JobId, JobOutcome, Tolerance};
use cudal1_protocol::DescribeReply;
use cudal1_task::{load_suite, Task};
use crossbeam_channel::Receiver;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub fn run(cmd: TasksCommand) -> Result<Status> {
    match cmd {
        TasksCommand::List(a) => list(&a),
        TasksCommand::Check(a) => check(&a),
    }
}

/// Submits one job per task and hands each task's outcome, as it finishes, to `on_done`; returns
/// how many were cancelled by an interrupt.
fn each_task(engine: Evaluator, events: &Receiver<Event>, tasks: &[Arc<Task>], job: impl Fn(Arc<Task>) -> Job, mut on_done: impl FnMut(usize, JobOutcome, &indicatif::ProgressBar) -> Result<()>) -> Result<usize> {
    let progress = indicatif::ProgressBar::new(tasks.len() as u64);
    progress.set_style(indicatif::ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}").expect("valid template"));
    progress.enable_steady_tick(Duration::from_millis(200));
    let ids: HashMap<JobId, usize> = tasks.iter().enumerate().map(|(i, t)| (engine.submit(job(Arc::clone(t))).id, i)).collect();
    let (mut left, mut cancelled) = (tasks.len(), 0);
    for event in events {
        let Some(&i) = ids.get(&event.job) else { continue };
        match event.kind {
            EventKind::Started { .. } => {
                progress.set_message(tasks[i].key());
                continue;
            }
            EventKind::Finished(JobOutcome::Cancelled) => cancelled += 1,
            EventKind::Finished(outcome) => on_done(i, outcome, &progress)?,
            _ => continue,
        }
        progress.inc(1);
        left -= 1;
        if left == 0 {
            break;
        }
    }
    progress.finish_and_clear();
    engine.finish();
    Ok(cancelled)
}

fn list(a: &ListArgs) -> Result<Status> {
    let suite = load_suite(&a.dir)?;
    let tasks: Vec<Arc<Task>> = suite.tasks.into_iter().map(Arc::new).collect();
    let mut described: Vec<Option<Result<Arc<DescribeReply>, String>>> = vec![None; tasks.len()];
    let mut cancelled = 0;
    if !a.static_only && !tasks.is_empty() {
        // Trusted CPU runners read every task: shapes and parameter counts come from running
        // `get_inputs()` and building the model on meta tensors, which allocates nothing.
        let (_, env, cache) = workspace::interpreter(a.python.as_deref(), a.cache_dir.as_deref())?;
        let mut config = EngineConfig::new(env, vec![Device::Cpu], EvalSettings::default(), CompileCache { root: cache.join("extensions") });
        config.compile_workers = 1;
        if let Some(n) = a.lanes {
            config.lanes = n;
        }
        let interrupt = interrupt::install("the tasks being read");
        let (engine, events) = Evaluator::start(config)?;
        interrupt.watch(engine.canceller());
        cancelled = each_task(engine, &events, &tasks, Job::describe, |i, outcome, progress| {
            let result = match outcome {
                JobOutcome::Described(d) => Ok(d),
                JobOutcome::TaskFailed { error, .. } | JobOutcome::HostFailed { error } => Err(error),
                _ => return Ok(()),
            };
            if a.json {
                progress.suspend(|| out::line(list_row(&tasks[i], Some(&result))))?;
            }
            described[i] = Some(result);
            Ok(())
        })?;
    } else if a.json {
        for t in &tasks {
            out::line(list_row(t, None))?;
        }
    }
    let failed = described.iter().filter(|d| matches!(d, Some(Err(_)))).count();
    if !a.json {
        let mut t = comfy_table::Table::new();
        t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
        t.set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
        t.set_header(["level", "id", "name", "inputs", "parameters", "memory"]);
        for (task, d) in tasks.iter().zip(&described) {
            let (inputs, parameters, memory) = match d {
                Some(Ok(d)) => (describe_values(&d.inputs), d.parameters.to_string(), Footprint::from_reply(d).map_or("-".into(), |f| human_bytes(f.cpu_evaluation()))),
                Some(Err(e)) => (format!("error: {}", e.lines().next().unwrap_or("")), "-".into(), "-".into()),
                None => ("-".into(), "-".into(), "-".into()),
            };
            let cell = |v: Option<u32>| v.map_or("-".into(), |x| x.to_string());
            t.add_row([cell(task.name.level), cell(task.name.id), task.name.name.clone(), inputs, parameters, memory]);
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
    if cancelled > 0 {
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
    if a.call_timeout.is_nan() || a.call_timeout <= 0.0 {
        bail!("`--call-timeout` must be a positive number of seconds");
    }
    let suite = load_suite(&a.dir)?;
    let tasks: Vec<Arc<Task>> = suite.tasks.into_iter().filter(|t| a.only.is_empty() || a.only.contains(&t.key())).map(Arc::new).collect();
    if tasks.is_empty() {
        bail!("no task of `{}` matches `--only {}`", a.dir.display(), a.only.join(" "));
    }
    let (interpreter, env, cache) = workspace::interpreter(a.python.as_deref(), a.cache_dir.as_deref())?;
    let devices = workspace::devices(a.device.as_ref(), &interpreter)?;
    let settings = EvalSettings {
        tolerance: if a.kernelbench_v0 { Tolerance::KernelBenchV0 } else { Tolerance::PerDtype },
        call_timeout: Duration::from_secs_f64(a.call_timeout),
        sandbox: !a.no_sandbox,
        ..EvalSettings::for_device(devices[0].clone())
    };
    let device_text = devices.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ");
    let mut config = EngineConfig::new(env, devices, settings, CompileCache { root: cache.join("extensions") });
    config.compile_workers = 1;
    if let Some(n) = a.lanes {
        config.lanes = n;
    }
    // Fixed seeds: a check is repeatable, and the tasks' own seeding decides their inputs.
    let seeds: Vec<u64> = (0..a.seeds as u64).map(|i| 1000 + 7919 * i).collect();
    let interrupt = interrupt::install("the task checks under way");
    let (engine, events) = Evaluator::start(config)?;
    interrupt.watch(engine.canceller());
    let mut rows: Vec<Option<Result<Arc<TaskCheck>, String>>> = vec![None; tasks.len()];
    let cancelled = each_task(engine, &events, &tasks, |t| Job::check_task(t, seeds.clone()), |i, outcome, progress| {
        let result = match outcome {
            JobOutcome::Checked(c) => Ok(c),
            JobOutcome::TaskFailed { error, .. } | JobOutcome::HostFailed { error } => Err(error),
            _ => return Ok(()),
        };
        if a.json {
            let value = match &result {
                Ok(c) => serde_json::to_value(&**c)?,
                Err(e) => serde_json::json!({"task": tasks[i].key(), "flags": [], "error": e}),
            };
            progress.suspend(|| out::line(value))?;
        }
        rows[i] = Some(result);
        Ok(())
    })?;
    let flagged = rows.iter().filter(|r| matches!(r, Some(Ok(c)) if c.is_degenerate())).count();
    let failed = rows.iter().filter(|r| matches!(r, Some(Err(_)))).count();
    if !a.json {
        let mut t = comfy_table::Table::new();
        t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
        t.set_content_arrangement(comfy_table::ContentArrangement::Dynamic);
        t.set_header(["task", "degenerate", "why"]);
        for (task, result) in tasks.iter().zip(&rows) {
            let (verdict, why) = match result {
                Some(Ok(c)) if c.is_degenerate() => {
                    ("yes".to_owned(), c.flags.iter().map(|f| format!("{}: {}", f.kind.as_str(), f.reason)).collect::<Vec<_>>().join("\n"))
                }
                Some(Ok(c)) if !c.unjudged.is_empty() => ("no".to_owned(), format!("not judged: {}", c.unjudged.join("; "))),
                Some(Ok(_)) => ("no".to_owned(), String::new()),
                Some(Err(e)) => ("error".to_owned(), e.lines().next().unwrap_or("").to_owned()),
                None => ("-".to_owned(), "not checked (interrupted)".to_owned()),
            };
            t.add_row([task.key(), verdict, why]);
        }
        out::line(t)?;
        let done = rows.iter().filter(|r| r.is_some()).count();
        out::line(format!("{flagged} of {done} task(s) degenerate on {device_text}; leave them out of speed statistics and rewards"))?;
        if failed > 0 {
            out::line(format!("{failed} task(s) could not be checked"))?;
        }
    }
    for p in &suite.problems {
        eprintln!("warning: {p}");
    }
    if cancelled > 0 {
        return Ok(Status::Interrupted);
    }
    Ok(Status::problems_if(flagged > 0 || failed > 0 || !suite.problems.is_empty()))
}

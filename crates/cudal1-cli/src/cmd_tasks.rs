//! `cudal1 tasks list`: what a suite holds; `cudal1 tasks check`: which of its tasks are
//! degenerate.

use crate::args::TasksCommand;
use crate::setup;
use anyhow::{bail, Result};
use cudal1_eval::degenerate::{check_task, TaskCheck};
use cudal1_eval::reference::{absolute, INIT_SEED};
use cudal1_eval::runner::{Launch, Role, RunnerClient};
use cudal1_eval::{Device, EvalSettings, Tolerance};
use cudal1_protocol::{Hello, Load, LoadReply};
use cudal1_task::load_suite;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

pub fn run(cmd: TasksCommand) -> Result<ExitCode> {
    match cmd {
        TasksCommand::List { dir, json, static_only, python, cache_dir } => list(dir, json, static_only, python, cache_dir),
        TasksCommand::Check { dir, json, device, seeds, kernelbench_v0, only, no_sandbox, call_timeout, python, cache_dir } => {
            let options = CheckOptions { json, device, seeds, kernelbench_v0, only, no_sandbox, call_timeout, python, cache_dir };
            check(dir, options)
        }
    }
}

fn list(dir: PathBuf, json: bool, static_only: bool, python: Option<PathBuf>, cache_dir: Option<PathBuf>) -> Result<ExitCode> {
    let suite = load_suite(&dir)?;
    let mut loaded: Vec<Result<LoadReply, String>> = Vec::new();
    if !static_only && !suite.tasks.is_empty() {
        // One trusted CPU runner loads every task in turn: shapes and parameter counts come from
        // running `get_inputs()` and building the model, which no static reading can give.
        let cache = setup::cache_dir(cache_dir.as_deref());
        let (env, _) = setup::runner_env(python.as_deref(), &cache)?;
        let work = setup::work_root()?;
        let mut client = RunnerClient::spawn(
            &env,
            Launch {
                role: Role::Reference,
                label: "tasks list".into(),
                device: &Device::Cpu,
                scratch: work.path(),
                extensions: None,
                reads: vec![],
                sandbox: false,
                memory_bytes: None,
            },
        )?;
        client.call(&Hello {}, Duration::from_secs(120))?;
        let progress = indicatif::ProgressBar::new(suite.tasks.len() as u64);
        for task in &suite.tasks {
            progress.set_message(task.key());
            let req = Load { reference: absolute(&task.path), candidate: None, device: "cpu".into(), init_seed: INIT_SEED };
            loaded.push(client.call(&req, Duration::from_secs(300)).map_err(|e| e.to_string()));
            progress.inc(1);
        }
        progress.finish_and_clear();
        client.shutdown();
    }
    let rows: Vec<serde_json::Value> = suite
        .tasks
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let info = loaded.get(i);
            serde_json::json!({
                "key": t.key(),
                "level": t.name.level,
                "id": t.name.id,
                "name": t.name.name,
                "path": t.path,
                "hash": t.hash,
                "inputs": info.and_then(|r| r.as_ref().ok()).map(|l| l.inputs.iter().map(|s| s.describe()).collect::<Vec<_>>()),
                "init_inputs": info.and_then(|r| r.as_ref().ok()).map(|l| l.init_inputs.iter().map(|s| s.describe()).collect::<Vec<_>>()),
                "parameters": info.and_then(|r| r.as_ref().ok()).map(|l| l.parameters),
                "error": info.and_then(|r| r.as_ref().err()),
            })
        })
        .collect();
    if json {
        for r in &rows {
            println!("{r}");
        }
    } else {
        let mut t = comfy_table::Table::new();
        t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
        t.set_header(["level", "id", "name", "inputs", "parameters"]);
        for r in &rows {
            let inputs = match (&r["inputs"], &r["error"]) {
                (serde_json::Value::Array(a), _) => a.iter().filter_map(|v| v.as_str()).collect::<Vec<_>>().join(", "),
                (_, serde_json::Value::String(e)) => format!("error: {}", e.lines().next().unwrap_or("")),
                _ => "-".into(),
            };
            let cell = |v: &serde_json::Value| if v.is_null() { "-".to_string() } else { v.to_string().trim_matches('"').to_string() };
            t.add_row([cell(&r["level"]), cell(&r["id"]), cell(&r["name"]), inputs, cell(&r["parameters"])]);
        }
        println!("{t}");
        println!("{} task(s) in {}", rows.len(), dir.display());
    }
    for p in &suite.problems {
        eprintln!("warning: {p}");
    }
    Ok(if suite.problems.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

struct CheckOptions {
    json: bool,
    device: Option<String>,
    seeds: usize,
    kernelbench_v0: bool,
    only: Vec<String>,
    no_sandbox: bool,
    call_timeout: f64,
    python: Option<PathBuf>,
    cache_dir: Option<PathBuf>,
}

fn check(dir: PathBuf, o: CheckOptions) -> Result<ExitCode> {
    if o.seeds < 2 {
        bail!("`--seeds` must be at least 2: outputs of different seeds are compared");
    }
    if o.call_timeout.is_nan() || o.call_timeout <= 0.0 {
        bail!("`--call-timeout` must be a positive number of seconds");
    }
    let suite = load_suite(&dir)?;
    let tasks: Vec<_> = suite.tasks.iter().filter(|t| o.only.is_empty() || o.only.contains(&t.key())).collect();
    if tasks.is_empty() {
        bail!("no task of `{}` matches `--only {}`", dir.display(), o.only.join(" "));
    }
    let cache = setup::cache_dir(o.cache_dir.as_deref());
    let (env, interp) = setup::runner_env(o.python.as_deref(), &cache)?;
    let device = match o.device.as_deref() {
        Some("all") => bail!("`tasks check` runs on one device: use `cpu`, `cuda` or `cuda:N`"),
        flag => setup::devices(flag, &interp)?.remove(0),
    };
    let settings = EvalSettings {
        tolerance: if o.kernelbench_v0 { Tolerance::KernelBenchV0 } else { Tolerance::PerDtype },
        call_timeout: Duration::from_secs_f64(o.call_timeout),
        sandbox: !o.no_sandbox,
        ..EvalSettings::for_device(device)
    };
    // Fixed seeds: a check is repeatable, and the tasks' own seeding decides their inputs.
    let seeds: Vec<u64> = (0..o.seeds as u64).map(|i| 1000 + 7919 * i).collect();
    let work = setup::work_root()?;
    let progress = indicatif::ProgressBar::new(tasks.len() as u64);
    let mut flagged = 0usize;
    let mut failed = 0usize;
    let mut rows: Vec<(String, Result<TaskCheck, String>)> = Vec::new();
    for task in tasks {
        progress.set_message(task.key());
        let result = check_task(&env, task, &settings, work.path(), &seeds).map_err(|e| format!("{e}"));
        match &result {
            Ok(c) if c.is_degenerate() => flagged += 1,
            Ok(_) => {}
            Err(_) => failed += 1,
        }
        if o.json {
            let value = match &result {
                Ok(c) => serde_json::to_value(c)?,
                Err(e) => serde_json::json!({"task": task.key(), "flags": [], "error": e}),
            };
            progress.suspend(|| println!("{value}"));
        }
        rows.push((task.key(), result));
        progress.inc(1);
    }
    progress.finish_and_clear();
    if !o.json {
        let mut t = comfy_table::Table::new();
        t.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
        t.set_header(["task", "degenerate", "why"]);
        for (key, result) in &rows {
            let (verdict, why) = match result {
                Ok(c) if c.is_degenerate() => {
                    ("yes".to_owned(), c.flags.iter().map(|f| format!("{}: {}", f.kind.as_str(), f.reason)).collect::<Vec<_>>().join("\n"))
                }
                Ok(c) if !c.unjudged.is_empty() => ("no".to_owned(), format!("not judged: {}", c.unjudged.join("; "))),
                Ok(_) => ("no".to_owned(), String::new()),
                Err(e) => ("error".to_owned(), e.lines().next().unwrap_or("").to_owned()),
            };
            t.add_row([key.clone(), verdict, why]);
        }
        println!("{t}");
        println!("{flagged} of {} task(s) degenerate on {}; leave them out of speed statistics and rewards", rows.len(), settings.device);
        if failed > 0 {
            println!("{failed} task(s) could not be checked");
        }
    }
    for p in &suite.problems {
        eprintln!("warning: {p}");
    }
    Ok(if flagged == 0 && failed == 0 && suite.problems.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

//! `cudal1 tasks list`: what a suite holds.

use crate::args::TasksCommand;
use crate::setup;
use anyhow::Result;
use cudal1_eval::reference::{absolute, INIT_SEED};
use cudal1_eval::runner::{Launch, Role, RunnerClient};
use cudal1_eval::Device;
use cudal1_protocol::{Hello, Load, LoadReply};
use cudal1_task::load_suite;
use std::process::ExitCode;
use std::time::Duration;

pub fn run(cmd: TasksCommand) -> Result<ExitCode> {
    let TasksCommand::List { dir, json, static_only, python, cache_dir } = cmd;
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

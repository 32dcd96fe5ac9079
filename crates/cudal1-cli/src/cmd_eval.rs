//! `cudal1 eval`: one candidate, or a batch over a suite.

use crate::args::EvalArgs;
use crate::record;
use crate::report::{self, Row};
use crate::setup;
use anyhow::{bail, Context, Result};
use cudal1_eval::{evaluate_one, Batch, BatchEvent, BatchJob, CompileCache, Evaluation, Verdict};
use cudal1_stats::{summarize, TaskResult};
use cudal1_store::{NewBatch, Store};
use cudal1_task::{expectation, load_suite, match_candidates, Candidate, CandidateSource, Expectation, Task};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

const FAST_P: [f64; 3] = [1.0, 1.5, 2.0];

pub fn run(a: EvalArgs) -> Result<ExitCode> {
    match (&a.task, &a.candidate, &a.suite, &a.candidates) {
        (Some(task), Some(cand), _, _) => single(&a, task, cand),
        (_, _, Some(suite), Some(cands)) => suite_batch(&a, suite, cands),
        _ => bail!("nothing to evaluate\nhint: give `--task REF.py --candidate CAND.py`, or `--suite DIR --candidates DIR_OR_JSONL`"),
    }
}

fn random_seed(flag: Option<u64>) -> u64 {
    flag.unwrap_or_else(rand::random)
}

fn single(a: &EvalArgs, task_path: &Path, cand_path: &Path) -> Result<ExitCode> {
    let task = Task::load(task_path)?;
    let candidate = Candidate::load(cand_path)?;
    let cache = setup::cache_dir(a.common.cache_dir.as_deref());
    let (env, interp) = setup::runner_env(a.common.python.as_deref(), &cache)?;
    let device = setup::devices(a.device.as_deref(), &interp)?.remove(0);
    let settings = setup::settings(&a.common, device)?;
    let store = Store::open(&a.common.db)?;
    let key = record::key(&task.hash, &candidate.hash, &settings);
    let reused = if a.common.force { None } else { store.find_evaluation(&key)?.and_then(|s| record::from_store(&s, &candidate.label)) };
    let evaluation = match reused {
        Some(e) => {
            tracing::info!("reusing the stored result (use --force to evaluate again)");
            e
        }
        None => {
            let work = setup::work_root()?;
            let compile_cache = CompileCache { root: cache.join("extensions") };
            let e = evaluate_one(&env, &task, &candidate, &settings, &compile_cache, work.path(), random_seed(a.common.seed))?;
            store.insert_evaluation(&record::to_store(&e, &task.path.display().to_string(), &settings, None))?;
            e
        }
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&evaluation)?);
    } else {
        report::print_single(&evaluation);
    }
    let expect = expectation(&candidate.source);
    Ok(exit_code(a.common.check_expectations, &[(&evaluation, expect.as_ref())]))
}

fn exit_code(check: bool, rows: &[(&Evaluation, Option<&Expectation>)]) -> ExitCode {
    if check && rows.iter().any(|(e, x)| report::expectation_met(e, *x) == Some(false)) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

fn suite_batch(a: &EvalArgs, suite_dir: &Path, cands: &Path) -> Result<ExitCode> {
    let suite = load_suite(suite_dir)?;
    for p in &suite.problems {
        eprintln!("warning: skipping a task: {p}");
    }
    let (matched, problems) = match_candidates(&suite.tasks, &CandidateSource::from_path(cands))?;
    for p in &problems {
        eprintln!("warning: skipping a candidate: {p}");
    }
    if matched.is_empty() {
        bail!("no candidate in `{}` matches a task of `{}`\nhint: lay candidates out like the suite (`level1/12_Name.py` or `level1/12_Name/*.py`), or use JSONL rows with a `task` field", cands.display(), suite_dir.display());
    }
    let cache = setup::cache_dir(a.common.cache_dir.as_deref());
    let (env, interp) = setup::runner_env(a.common.python.as_deref(), &cache)?;
    let devices = setup::devices(a.device.as_deref(), &interp)?;
    let settings = setup::settings(&a.common, devices[0].clone())?;
    let store = Store::open(&a.common.db)?;
    let batch_id = cudal1_task::content_hash(&format!("{}|{}|{}", suite_dir.display(), cands.display(), settings.key_hash()))[..16].to_owned();
    if store.find_batch(&batch_id)?.is_none() {
        store.create_batch(&NewBatch {
            id: batch_id.clone(),
            settings: serde_json::to_value(&settings)?,
            suite_path: suite_dir.display().to_string(),
            candidates_path: cands.display().to_string(),
        })?;
    }

    // Resume: anything already evaluated under the same settings is reported from the store.
    let mut results: BTreeMap<usize, (Evaluation, bool)> = BTreeMap::new();
    let mut jobs = Vec::new();
    for (id, m) in matched.iter().enumerate() {
        let task = &suite.tasks[m.task];
        let key = record::key(&task.hash, &m.candidate.hash, &settings);
        let stored = if a.common.force { None } else { store.find_evaluation(&key)?.and_then(|s| record::from_store(&s, &m.candidate.label)) };
        match stored {
            Some(e) => {
                results.insert(id, (e, true));
            }
            None => jobs.push(BatchJob { id, task: m.task, candidate: m.candidate.clone() }),
        }
    }

    let progress = ProgressBar::new(matched.len() as u64);
    progress.set_style(ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {msg}").expect("valid template"));
    progress.set_position(results.len() as u64);
    if !results.is_empty() {
        progress.println(format!("resuming: {} of {} candidates already evaluated", results.len(), matched.len()));
    }
    let cancel = setup::install_interrupt("the evaluations under way");
    let work = setup::work_root()?;
    let compile_cache = CompileCache { root: cache.join("extensions") };
    let workers = a.common.compile_workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)));
    let batch = Batch {
        env: &env,
        tasks: &suite.tasks,
        devices: &devices,
        settings: &settings,
        cache: &compile_cache,
        work_root: work.path(),
        compile_workers: workers,
        seed: random_seed(a.common.seed),
        cancel: &cancel,
        prefetch: a.prefetch,
    };
    let mut failures: Vec<String> = Vec::new();
    let mut skipped = 0usize;
    let mut store_error = None;
    batch.run(jobs, |event| match event {
        BatchEvent::Compiled { id, ms, cached, ok } => {
            tracing::info!(candidate = %matched[id].candidate.label, ms, cached, ok, "compiled");
        }
        BatchEvent::Started { id, device } => {
            progress.set_message(format!("{} on {device}", matched[id].candidate.label));
        }
        BatchEvent::Finished { id, evaluation } => {
            let task = &suite.tasks[matched[id].task];
            let row = record::to_store(&evaluation, &task.path.display().to_string(), &settings, Some(&batch_id));
            if let Err(e) = store.insert_evaluation(&row) {
                store_error.get_or_insert(e);
            }
            if !a.json {
                progress.println(format!("{:<13} {:>18}  {}  {}", evaluation.verdict.as_str(), report::speedup_text(&evaluation), task.key(), matched[id].candidate.label));
            }
            results.insert(id, (*evaluation, false));
            progress.inc(1);
        }
        BatchEvent::ReferenceFailed { id, error } => {
            progress.println(format!("reference failed for {}: {}", matched[id].candidate.label, error.lines().next().unwrap_or("")));
            failures.push(error);
            progress.inc(1);
        }
        BatchEvent::Skipped { .. } => {
            skipped += 1;
            progress.inc(1);
        }
    });
    progress.finish_and_clear();
    if let Some(e) = store_error {
        return Err(e).context("saving results (the batch finished, but some results were not saved)");
    }

    let rows: Vec<Row<'_>> = results
        .iter()
        .map(|(id, (e, reused))| Row { evaluation: e, expect: matched[*id].expect.as_ref(), reused: *reused })
        .collect();
    let per_candidate: Vec<TaskResult> = rows.iter().map(|r| task_result(r.evaluation)).collect();
    let by_candidate = summarize(&per_candidate, &FAST_P);
    let by_task = summarize(&best_per_task(&rows), &FAST_P);
    store.finish_batch(&batch_id, &serde_json::json!({"candidates": by_candidate, "tasks": by_task}))?;
    let mismatched: Vec<&Row<'_>> = rows.iter().filter(|r| report::expectation_met(r.evaluation, r.expect) == Some(false)).collect();

    if a.json {
        for r in &rows {
            let mut v = serde_json::to_value(r.evaluation)?;
            v["expect"] = serde_json::to_value(r.expect)?;
            v["reused"] = r.reused.into();
            println!("{}", serde_json::to_string(&v)?);
        }
        println!("{}", serde_json::json!({"summary": {"batch": batch_id, "candidates": by_candidate, "tasks": by_task, "reference_failures": failures, "skipped": skipped, "expectation_mismatches": mismatched.len()}}));
    } else {
        report::print_table(&rows);
        report::print_summary(&format!("{} candidates", rows.len()), &by_candidate);
        report::print_summary(&format!("best per task ({} tasks)", by_task.tasks), &by_task);
        if rows.iter().any(|r| r.reused) {
            println!("* from the store (same task, candidate and settings); --force evaluates again");
        }
        if !failures.is_empty() {
            println!("{} candidate(s) got no verdict because their reference failed", failures.len());
        }
        if skipped > 0 {
            println!("{skipped} candidate(s) skipped after the interrupt; run the same command again to resume");
        }
        if !mismatched.is_empty() {
            println!("{} verdict(s) differ from the candidates' `# cudal1: expect=` lines", mismatched.len());
        }
        println!("batch {batch_id} saved in {}", a.common.db.display());
    }
    let pairs: Vec<(&Evaluation, Option<&Expectation>)> = rows.iter().map(|r| (r.evaluation, r.expect)).collect();
    let code = exit_code(a.common.check_expectations, &pairs);
    if code == ExitCode::SUCCESS && !failures.is_empty() {
        return Ok(ExitCode::from(1));
    }
    Ok(code)
}

fn task_result(e: &Evaluation) -> TaskResult {
    let correct = e.verdict == Verdict::Correct;
    TaskResult { correct, speedup: if correct { e.speedup.map(|s| s.median) } else { None }, excluded: false }
}

/// KernelBench counts tasks: a task is solved by its best correct candidate.
fn best_per_task(rows: &[Row<'_>]) -> Vec<TaskResult> {
    let mut best: BTreeMap<&str, TaskResult> = BTreeMap::new();
    for r in rows {
        let t = task_result(r.evaluation);
        let entry = best.entry(r.evaluation.task.as_str()).or_insert(t);
        let better = match (t.correct, entry.correct) {
            (true, false) => true,
            (true, true) => t.speedup.unwrap_or(0.0) > entry.speedup.unwrap_or(0.0),
            _ => false,
        };
        if better {
            *entry = t;
        }
    }
    best.into_values().collect()
}


//! `cudal1 eval`: one candidate, a batch over a suite, or another system's published outputs.
//! Every form is a batch through the engine ([`crate::batch`]); they differ in where the items
//! come from and how the result is shown.

use crate::against::{Against, Restated};
use crate::args::{EvalArgs, FromFormat};
use crate::batch::{self, Item, Options};
use crate::exit::Status;
use crate::interrupt;
use crate::out;
use crate::report::{self, Row};
use crate::workspace::Workspace;
use anyhow::{bail, Result};
use clap::ValueEnum;
use cudal1_eval::{Evaluation, Verdict};
use cudal1_stats::{summarize, SuiteSummary, TaskResult};
use cudal1_store::{ClaimRecord, NewBatch};
use cudal1_task::{
    expectation, load_suite, match_candidates, read_cuda_l1, Candidate, CandidateSource, Task,
    TaskError,
};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const FAST_P: [f64; 3] = [1.0, 1.5, 2.0];

/// What to do when the machine failed under an evaluation (most often: it ran out of memory).
const HOST_HINT: &str = "the machine failed, not the candidate (the reason says how); when it ran out of memory: run fewer evaluations at once (`--lanes 1`, fewer programs beside cudal1), shrink the task for a trial (`--scale 0.25`), or use a machine with more memory; the same command evaluates it again";

pub fn run(a: EvalArgs) -> Result<Status> {
    crate::workspace::check(&a.common)?;
    match (&a.task, &a.candidate, &a.suite, &a.candidates, &a.from) {
        (Some(task), Some(cand), _, _, _) => single(&a, task, cand),
        (_, _, Some(suite), Some(cands), _) => suite_batch(&a, suite, cands),
        (_, _, suite, None, Some(from)) => from_batch(&a, from, suite.as_deref()),
        (_, _, Some(_), None, None) => bail!("`--suite` needs candidates\nhint: add `--candidates DIR_OR_JSONL`, or `--from FORMAT PATH` for another system's outputs"),
        _ => bail!("nothing to evaluate\nhint: give `--task REF.py --candidate CAND.py`, `--suite DIR --candidates DIR_OR_JSONL`, or `--from cuda-l1 FILE.json`"),
    }
}

fn single(a: &EvalArgs, task_path: &Path, cand_path: &Path) -> Result<Status> {
    if task_path.is_dir() {
        bail!("`--task {}` is a directory\nhint: use `--suite {0} --candidates DIR` to evaluate a suite", task_path.display());
    }
    let task = Task::load(task_path)?;
    let candidate = Candidate::load(cand_path)?;
    let ws = Workspace::resolve(&a.common, &a.device, a.prefetch.prefetch)?;
    check_own_share(a, &ws)?;
    let against = against(a, &ws, &[&task])?;
    let interrupt = interrupt::install("the evaluation under way");
    let expect = expectation(&candidate.source).map(|e| e.on_device(ws.machine.on_gpu()));
    let items = vec![Item { task: Arc::new(task), candidate, expect, claimed: None }];
    let opts = Options {
        mode: a.mode,
        json_lines: false,
        progress_lines: false,
        force: a.common.force,
        batch_id: None,
        against: None,
    };
    let finished = batch::run(&ws, &items, &opts, &interrupt)?;
    if let Some((_, error, remedies)) = finished.task_failures.first() {
        match crate::hint::for_memory(remedies) {
            Some(hint) => bail!("{}\nhint: {hint}", error.trim_end()),
            None => bail!("{error}"),
        }
    }
    if let Some((_, error)) = finished.host_failures.first() {
        bail!("no verdict: {error}\nhint: {HOST_HINT}");
    }
    let Some(row) = finished.rows.first() else {
        eprintln!("interrupted before the evaluation finished; nothing was saved");
        return Ok(Status::Interrupted);
    };
    let e = &*row.evaluation;
    let own = if a.own_share {
        let subject = crate::own_share::Subject {
            id: row.id,
            task: &items[0].task,
            candidate: &items[0].candidate,
            evaluation: e,
        };
        crate::own_share::measure(
            &ws,
            &a.ncu,
            a.common.force,
            !a.common.no_sandbox,
            &interrupt,
            &[subject],
        )?
        .pop()
    } else {
        None
    };
    if a.json {
        let mut v = serde_json::to_value(e)?;
        v["id"] = row.id.into();
        v["reused"] = row.reused.into();
        if let Some(own) = &own {
            own.add_to(&mut v);
        }
        if let Some(against) = &against {
            v["baseline"] = against.json(e);
        }
        out::line(serde_json::to_string_pretty(&v)?)?;
    } else {
        report::print_single(e, row.id)?;
        if let Some(text) = own.as_ref().and_then(crate::own_share::Found::text) {
            out::line(format!("own kernels: {text}"))?;
        }
        if let Some(against) = &against {
            out::line(format!(
                "vs {}: {} (median, conservative interval)",
                against.baseline,
                vs_text(&against.restate(e))
            ))?;
        }
        if let (Some(id), true) =
            (row.id, e.measurements.log_tail.as_deref().is_some_and(|l| !l.trim().is_empty()))
        {
            out::line(format!(
                "log:        {} line(s) of its output: `cudal1 show {id}`",
                e.measurements.log_tail.as_deref().unwrap_or("").lines().count()
            ))?;
        }
        if row.reused {
            eprintln!("(from the store: the same task, candidate and settings were judged before by this version of cudal1 on this class of device; --force evaluates again)");
        }
    }
    if let Some(hint) = crate::hint::for_verdict(e) {
        eprintln!("hint: {hint}");
    }
    let mismatch = a.common.check_expectations
        && report::expectation_met(e, items[0].expect.as_ref()) == Some(false);
    // Ctrl-C let the evaluation finish (it is saved), but the run was still interrupted.
    if interrupt.interrupted() {
        return Ok(Status::Interrupted);
    }
    Ok(Status::problems_if(mismatch))
}

fn suite_batch(a: &EvalArgs, suite_dir: &Path, cands: &Path) -> Result<Status> {
    let suite = load_suite(suite_dir)?;
    let mut input_problems: Vec<String> =
        suite.problems.iter().map(|p| format!("skipping a task: {p}")).collect();
    let (matched, problems) = match_candidates(&suite.tasks, &CandidateSource::from_path(cands))?;
    input_problems.extend(problems.iter().map(|p| format!("skipping a candidate: {p}")));
    for p in &input_problems {
        eprintln!("warning: {p}");
    }
    if matched.is_empty() {
        bail!("no candidate in `{}` matches a task of `{}`\nhint: lay candidates out like the suite (`level1/12_Name.py` or `level1/12_Name/*.py`), or use JSONL rows with a `task` field", cands.display(), suite_dir.display());
    }
    let tasks: Vec<Arc<Task>> = suite.tasks.into_iter().map(Arc::new).collect();
    let items: Vec<Item> = matched
        .into_iter()
        .map(|m| Item {
            task: Arc::clone(&tasks[m.task]),
            candidate: m.candidate,
            expect: m.expect,
            claimed: None,
        })
        .collect();
    run_batch(
        a,
        &format!("{}|{}", suite_dir.display(), cands.display()),
        (suite_dir, cands),
        items,
        Vec::new(),
        input_problems,
    )
}

/// A row of another system's release that has nothing to evaluate.
struct Missing {
    task: String,
    at: String,
    reason: String,
}

fn from_batch(a: &EvalArgs, from: &[String], suite_dir: Option<&Path>) -> Result<Status> {
    let [format, path] = from else { bail!("`--from` takes a format and a path") };
    let format = FromFormat::from_str(format, true).map_err(|_| anyhow::anyhow!("unknown format `{format}` for `--from`\nhint: use `cuda-l1` (CUDA-L1's release JSON) or `kernelbench` (a generation directory, with `--suite`)"))?;
    let path = PathBuf::from(path);
    match format {
        FromFormat::Kernelbench => {
            let Some(suite) = suite_dir else {
                bail!("`--from kernelbench {}` needs the references\nhint: add `--suite KernelBench/` (a KernelBench checkout)", path.display())
            };
            suite_batch(a, suite, &path)
        }
        FromFormat::CudaL1 => from_cuda_l1(a, &path, suite_dir),
    }
}

fn from_cuda_l1(a: &EvalArgs, path: &Path, suite_dir: Option<&Path>) -> Result<Status> {
    let (rows, problems) = read_cuda_l1(path)?;
    let mut input_problems: Vec<String> =
        problems.iter().map(|p| format!("skipping a row: {p}")).collect();
    // KernelBench's names, when a checkout is given; the references come from the rows either way.
    let names: BTreeMap<(u32, u32), String> = match suite_dir {
        Some(dir) => load_suite(dir)?
            .tasks
            .iter()
            .filter_map(|t| Some(((t.name.level?, t.name.id?), t.name.stem.clone())))
            .collect(),
        None => BTreeMap::new(),
    };
    let cache = crate::workspace::cache_dir(a.common.python.cache_dir.as_deref());
    let mut tasks: BTreeMap<String, Arc<Task>> = BTreeMap::new();
    let mut items = Vec::new();
    let mut missing = Vec::new();
    for row in rows {
        let stem = names
            .get(&(row.level, row.id))
            .cloned()
            .unwrap_or_else(|| format!("{}_cuda_l1", row.id));
        let key = format!("level{}/{stem}", row.level);
        let Some(reference) = row.reference else {
            missing.push(Missing {
                task: key,
                at: row.at,
                reason: "the row has no `ref_code`".into(),
            });
            continue;
        };
        let Some(code) = row.code else {
            missing.push(Missing {
                task: key,
                at: row.at,
                reason: "the release has no code for this task (`custom_code` is null)".into(),
            });
            continue;
        };
        let task = match imported_task(&cache, row.level, &stem, reference, &mut tasks) {
            Ok(t) => t,
            Err(e) => {
                input_problems.push(format!("skipping a row: {}: its reference: {e}", row.at));
                continue;
            }
        };
        let claimed = serde_json::to_value(&row.claimed)?;
        items.push(Item {
            task,
            candidate: Candidate::from_source(row.at, code),
            expect: None,
            claimed: Some(claimed),
        });
    }
    for p in &input_problems {
        eprintln!("warning: {p}");
    }
    if items.is_empty() {
        bail!("`{}` holds no row with both a reference and code to evaluate", path.display());
    }
    let suite_label = suite_dir.map_or_else(|| "cuda-l1".to_owned(), |d| d.display().to_string());
    run_batch(
        a,
        &format!("cuda-l1|{}", path.display()),
        (Path::new(&suite_label), path),
        items,
        missing,
        input_problems,
    )
}

/// The reference of an imported row as a task file in the cache (content-addressed, written once),
/// so that runners can load it and the store can name it.
fn imported_task(
    cache: &Path,
    level: u32,
    stem: &str,
    source: String,
    seen: &mut BTreeMap<String, Arc<Task>>,
) -> Result<Arc<Task>, TaskError> {
    let key = format!("level{level}/{stem}|{}", cudal1_task::content_hash(&source));
    if let Some(t) = seen.get(&key) {
        return Ok(Arc::clone(t));
    }
    let task = Arc::new(Task::materialize(
        &cache.join("imported"),
        &format!("level{level}/{stem}"),
        source,
    )?);
    seen.insert(key, Arc::clone(&task));
    Ok(task)
}

/// Runs a batch of items and reports it: a table or JSON lines, the summaries, the exit status.
fn run_batch(
    a: &EvalArgs,
    what: &str,
    paths: (&Path, &Path),
    items: Vec<Item>,
    missing: Vec<Missing>,
    input_problems: Vec<String>,
) -> Result<Status> {
    let (items, missing) = only(a, items, missing)?;
    let (items, missing) = limit(a, items, missing);
    let ws = Workspace::resolve(&a.common, &a.device, a.prefetch.prefetch)?;
    check_own_share(a, &ws)?;
    let gpu = ws.machine.on_gpu();
    let items: Vec<Item> = items
        .into_iter()
        .map(|i| Item { expect: i.expect.map(|e| e.on_device(gpu)), ..i })
        .collect();
    let settings = batch::settings_for(&ws, a.mode);
    let batch_id =
        cudal1_task::content_hash(&format!("{what}|{}", settings.key_hash()))[..16].to_owned();
    if ws.store.find_batch(&batch_id)?.is_none() {
        ws.store.create_batch(&NewBatch {
            id: batch_id.clone(),
            settings: serde_json::to_value(&settings)?,
            suite_path: paths.0.display().to_string(),
            candidates_path: paths.1.display().to_string(),
        })?;
    }
    record_inputs(&ws.store, &batch_id, &items)?;
    let against = against(a, &ws, &items.iter().map(|i| &*i.task).collect::<Vec<_>>())?;
    let interrupt = interrupt::install("the evaluations under way");
    let opts = Options {
        mode: a.mode,
        json_lines: a.json,
        progress_lines: !a.json,
        force: a.common.force,
        batch_id: Some(&batch_id),
        against: against.as_ref(),
    };
    let finished = batch::run(&ws, &items, &opts, &interrupt)?;
    let members: Vec<(i64, &str, &str)> = finished
        .rows
        .iter()
        .filter_map(|r| Some((r.id?, r.evaluation.task.as_str(), r.evaluation.candidate.as_str())))
        .collect();
    ws.store.add_batch_evaluations(&batch_id, &members)?;
    let rows: Vec<Row<'_>> = finished
        .rows
        .iter()
        .map(|r| Row {
            evaluation: &r.evaluation,
            id: r.id,
            expect: items[r.item].expect.as_ref(),
            reused: r.reused,
            claimed: items[r.item].claimed.as_ref(),
            vs_baseline: against.as_ref().map(|b| vs_text(&b.restate(&r.evaluation))),
        })
        .collect();
    let timed = a.mode.times();
    let per_candidate: Vec<TaskResult> = rows
        .iter()
        .map(|r| task_result(r.evaluation))
        .chain(missing.iter().map(|_| TaskResult::default()))
        .collect();
    let by_candidate = summarize(&per_candidate, &FAST_P);
    let by_task = summarize(&best_per_task(&rows, &missing), &FAST_P);
    // The same summaries with each speedup restated against `--baseline`.
    let vs = against.as_ref().map(|b| {
        let restated: Vec<TaskResult> =
            rows.iter().map(|r| restated_result(r.evaluation, b)).collect();
        let per_candidate: Vec<TaskResult> =
            restated.iter().copied().chain(missing.iter().map(|_| TaskResult::default())).collect();
        let best = best_of(
            rows.iter().map(|r| r.evaluation.task.as_str()).zip(restated.iter().copied()),
            &missing,
        );
        let fell_back = rows.iter().filter(|r| b.restate(r.evaluation).fell_back_to_eager).count();
        (b.baseline, summarize(&per_candidate, &FAST_P), summarize(&best, &FAST_P), fell_back)
    });
    ws.store.finish_batch(&batch_id, &serde_json::json!({"candidates": suite_json(&by_candidate), "tasks": suite_json(&by_task)}))?;
    let mismatched = rows
        .iter()
        .filter(|r| report::expectation_met(r.evaluation, r.expect) == Some(false))
        .count();
    let failures: Vec<&str> = finished.task_failures.iter().map(|(_, e, _)| e.as_str()).collect();
    let failure_hint = finished
        .task_failures
        .iter()
        .find_map(|(_, _, remedies)| crate::hint::for_memory(remedies));
    let verdict_hint = rows.iter().find_map(|r| crate::hint::for_verdict(r.evaluation));
    let host_failures: Vec<&str> = finished.host_failures.iter().map(|(_, e)| e.as_str()).collect();
    let claims = claimed_against_measured(&rows);
    let own: Vec<crate::own_share::Found> = if a.own_share && !interrupt.interrupted() {
        let subjects: Vec<crate::own_share::Subject<'_>> = finished
            .rows
            .iter()
            .map(|r| crate::own_share::Subject {
                id: r.id,
                task: &items[r.item].task,
                candidate: &items[r.item].candidate,
                evaluation: &r.evaluation,
            })
            .collect();
        crate::own_share::measure(
            &ws,
            &a.ncu,
            a.common.force,
            !a.common.no_sandbox,
            &interrupt,
            &subjects,
        )?
    } else {
        Vec::new()
    };

    if a.json {
        for m in &missing {
            out::line(
                serde_json::json!({"task": m.task, "candidate": m.at, "verdict": null, "missing": m.reason}),
            )?;
        }
        let mut summary = serde_json::json!({
            "batch": batch_id,
            "mode": a.mode,
            "counts": {
                "candidates": items.len() + missing.len(),
                "evaluated": rows.iter().filter(|r| !r.reused).count(),
                "reused": rows.iter().filter(|r| r.reused).count(),
                "skipped": finished.cancelled,
                "missing_code": missing.len(),
                "reference_failures": failures.len(),
                "host_failures": host_failures.len(),
                "waited_for_memory": finished.memory_waits,
                "ran_alone_for_memory": finished.ran_alone_for_memory,
                "input_problems": input_problems.len(),
                "expectation_mismatches": mismatched,
            },
            "candidates": suite_json(&by_candidate),
            "tasks": suite_json(&by_task),
            "reference_failures": failures,
            "host_failures": host_failures,
            "input_problems": input_problems,
        });
        for (r, found) in finished.rows.iter().zip(&own) {
            if matches!(found, crate::own_share::Found::NotApplicable) {
                continue;
            }
            let mut v = serde_json::json!({"own_share_of": {"id": r.id, "task": r.evaluation.task, "candidate": r.evaluation.candidate}});
            found.add_to(&mut v);
            out::line(v)?;
        }
        if a.own_share {
            summary["own_share"] = own_summary(&own);
        }
        if let Some(c) = &claims {
            summary["claimed"] = serde_json::to_value(c)?;
        }
        if let Some(s) = &finished.stats {
            summary["engine"] = engine_json(s);
        }
        if let Some((name, c, t, fell_back)) = &vs {
            summary["baseline"] = serde_json::json!({"name": name.name(), "candidates": suite_json(c), "tasks": suite_json(t), "fell_back_to_eager": fell_back});
        }
        out::line(serde_json::json!({ "summary": summary }))?;
        // The JSON keeps the reasons; what to do about them is for the person at the terminal.
        for hint in failure_hint.iter().chain(&verdict_hint) {
            eprintln!("hint: {hint}");
        }
    } else {
        report::print_table(
            &rows,
            &missing
                .iter()
                .map(|m| (m.task.as_str(), m.at.as_str(), m.reason.as_str()))
                .collect::<Vec<_>>(),
            a.baseline.map(|b| b.name()),
        )?;
        if a.own_share {
            print_own_shares(&rows, &own)?;
        }
        print_summary(&format!("{} candidates", rows.len() + missing.len()), &by_candidate, timed)?;
        print_summary(&format!("best per task ({} tasks)", by_task.tasks), &by_task, timed)?;
        if let Some((name, c, t, fell_back)) = &vs {
            print_summary(
                &format!("{} candidates against {name}", rows.len() + missing.len()),
                c,
                timed,
            )?;
            print_summary(&format!("best per task against {name} ({} tasks)", t.tasks), t, timed)?;
            if *fell_back > 0 {
                out::line(format!("{fell_back} candidate(s) are on tasks where {name} failed; eager stands in for it there (`cudal1 baselines` gives the reasons)"))?;
            }
        }
        if let Some(c) = &claims {
            out::line(format!(
                "claimed against measured, over the {} candidates measured correct: claimed geomean {:.3}x, measured {:.3}x",
                c.rows, c.claimed_geomean, c.measured_geomean
            ))?;
        }
        if rows.iter().any(|r| r.reused) {
            out::line(
                "* from the store (same task, candidate and settings); --force evaluates again",
            )?;
        }
        if !missing.is_empty() {
            out::line(format!(
                "{} row(s) have no code to evaluate; they count as not solved",
                missing.len()
            ))?;
        }
        if finished.memory_waits > 0 {
            out::line(format!(
                "{} candidate(s) waited for memory before they started ({} needed more than the budget and ran alone); `--memory-budget` sets the host's",
                finished.memory_waits, finished.ran_alone_for_memory
            ))?;
        }
        if !failures.is_empty() {
            out::line(format!(
                "{} candidate(s) got no verdict because their reference failed",
                failures.len()
            ))?;
            if let Some(hint) = &failure_hint {
                eprintln!("hint: {hint}");
            }
        }
        if let Some(hint) = &verdict_hint {
            eprintln!("hint: {hint}");
        }
        if !host_failures.is_empty() {
            out::line(format!("{} candidate(s) got no verdict because the machine failed (not their fault); run the same command again to evaluate them", host_failures.len()))?;
            eprintln!("hint: {HOST_HINT}");
        }
        if finished.cancelled > 0 {
            out::line(format!(
                "{} candidate(s) skipped after the interrupt; run the same command again to resume",
                finished.cancelled
            ))?;
        }
        if !input_problems.is_empty() {
            out::line(format!(
                "{} input row(s) or file(s) were skipped (see the warnings above)",
                input_problems.len()
            ))?;
        }
        if mismatched > 0 {
            out::line(format!(
                "{mismatched} verdict(s) differ from the candidates' `# cudal1: expect=` lines"
            ))?;
        }
        out::line(format!("batch {batch_id} saved in {}", a.common.db.db.display()))?;
    }
    if finished.cancelled > 0 || interrupt.interrupted() {
        return Ok(Status::Interrupted);
    }
    let problems = (a.common.check_expectations && mismatched > 0)
        || !failures.is_empty()
        || !host_failures.is_empty()
        || !input_problems.is_empty();
    Ok(Status::problems_if(problems))
}

/// Keeps the programs' text and another system's claims in the store, for `cudal1 report`.
fn record_inputs(store: &cudal1_store::Store, batch_id: &str, items: &[Item]) -> Result<()> {
    let mut sources: Vec<(&str, &str)> = Vec::new();
    for i in items {
        sources.push((&i.task.hash, &i.task.source));
        sources.push((&i.candidate.hash, &i.candidate.source));
    }
    store.record_sources(&sources)?;
    let claims: Vec<ClaimRecord> = items
        .iter()
        .filter_map(|i| {
            Some(ClaimRecord {
                batch_id: batch_id.to_owned(),
                task_hash: i.task.hash.clone(),
                candidate_hash: i.candidate.hash.clone(),
                claimed: i.claimed.clone()?,
            })
        })
        .collect();
    if !claims.is_empty() {
        store.record_claims(&claims)?;
    }
    Ok(())
}

/// The items and missing rows of the tasks `--only` names (all without it); every name must
/// match a task.
fn only(
    a: &EvalArgs,
    items: Vec<Item>,
    missing: Vec<Missing>,
) -> Result<(Vec<Item>, Vec<Missing>)> {
    if a.only.is_empty() {
        return Ok((items, missing));
    }
    let unknown: Vec<&str> = a
        .only
        .iter()
        .map(String::as_str)
        .filter(|o| {
            !items.iter().any(|i| i.task.key() == *o) && !missing.iter().any(|m| m.task == *o)
        })
        .collect();
    if !unknown.is_empty() {
        let mut known: Vec<String> = items.iter().map(|i| i.task.key()).collect();
        known.dedup();
        bail!(
            "no candidate for `--only {}`\nhint: name tasks as `level1/12_Name`; candidates here are for {}",
            unknown.join(" "),
            known.iter().take(5).map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ") + if known.len() > 5 { ", …" } else { "" }
        );
    }
    let keep = |key: &str| a.only.iter().any(|o| o == key);
    Ok((
        items.into_iter().filter(|i| keep(&i.task.key())).collect(),
        missing.into_iter().filter(|m| keep(&m.task)).collect(),
    ))
}

/// `--limit N`: the first N items and rows without code, in the input's order.
fn limit(
    a: &EvalArgs,
    mut items: Vec<Item>,
    mut missing: Vec<Missing>,
) -> (Vec<Item>, Vec<Missing>) {
    if let Some(n) = a.limit {
        items.truncate(n);
        missing.truncate(n.saturating_sub(items.len()));
    }
    (items, missing)
}

/// `--own-share` profiles GPU kernels: refused at once on the CPU.
fn check_own_share(a: &EvalArgs, ws: &Workspace) -> Result<()> {
    if a.own_share && !ws.machine.on_gpu() {
        bail!("`--own-share` needs a CUDA device: Nsight Compute profiles GPU kernels\nhint: drop `--own-share`, or run on a GPU (`--device cuda`)");
    }
    Ok(())
}

/// The summary's `own_share`: how many were measured, and their mean and range.
fn own_summary(own: &[crate::own_share::Found]) -> serde_json::Value {
    use crate::own_share::Found;
    let shares: Vec<f64> = own
        .iter()
        .filter_map(
            |f| if let Found::Measured { share, .. } = f { Some(share.share) } else { None },
        )
        .collect();
    let failed = own.iter().filter(|f| matches!(f, Found::Failed(_))).count();
    let mean = (!shares.is_empty()).then(|| shares.iter().sum::<f64>() / shares.len() as f64);
    serde_json::json!({
        "measured": shares.len(),
        "failed": failed,
        "mean": mean,
        "min": shares.iter().copied().reduce(f64::min),
        "max": shares.iter().copied().reduce(f64::max),
    })
}

/// The own-kernel share of each correct candidate, beside its speedup.
fn print_own_shares(rows: &[Row<'_>], own: &[crate::own_share::Found]) -> Result<()> {
    let lines: Vec<String> = rows
        .iter()
        .zip(own)
        .filter_map(|(r, f)| {
            let text = f.text()?;
            let speedup = r
                .evaluation
                .speedup
                .map_or_else(|| "-".to_owned(), |s| format!("{:.2}x", s.median));
            Some(format!(
                "  {:<40} {:<28} {speedup:>8}  {text}",
                r.evaluation.task,
                report::short_label(&r.evaluation.candidate)
            ))
        })
        .collect();
    if !lines.is_empty() {
        out::line(
            "own-kernel share (GPU time in kernels the candidate built itself; Nsight Compute):",
        )?;
        for l in lines {
            out::line(l)?;
        }
    }
    Ok(())
}

fn print_summary(title: &str, s: &SuiteSummary, timed: bool) -> Result<()> {
    if timed {
        report::print_summary(title, s)?;
    } else {
        out::line(format!(
            "{title}: {} of {} correct ({:.1}%; correctness only, not timed)",
            s.correct,
            s.tasks,
            s.correct_rate * 100.0
        ))?;
    }
    Ok(())
}

/// A suite summary for JSON: `count` is how many results it is over (candidates, or tasks).
fn suite_json(s: &SuiteSummary) -> serde_json::Value {
    let mut v = serde_json::to_value(s).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        if let Some(n) = m.remove("tasks") {
            m.insert("count".into(), n);
        }
    }
    v
}

fn engine_json(s: &cudal1_eval::EngineStats) -> serde_json::Value {
    let wall = s.wall.as_secs_f64();
    serde_json::json!({
        "wall_s": wall,
        "references_started": s.references_started,
        "references_reused": s.references_reused,
        "timing_busy_s": s.timing_busy.iter().map(|(d, t)| serde_json::json!({"device": d.to_string(), "s": t.as_secs_f64(), "share": t.as_secs_f64() / wall.max(1e-9)})).collect::<Vec<_>>(),
    })
}

/// Another system's claims next to cudal1's measurements, over candidates measured correct.
#[derive(serde::Serialize)]
struct Claims {
    rows: usize,
    claimed_geomean: f64,
    measured_geomean: f64,
}

fn claimed_against_measured(rows: &[Row<'_>]) -> Option<Claims> {
    let pairs: Vec<(f64, f64)> = rows
        .iter()
        .filter(|r| r.evaluation.verdict == Verdict::Correct)
        .filter_map(|r| {
            Some((r.claimed?.get("score_default")?.as_f64()?, r.evaluation.speedup?.median))
        })
        .filter(|(c, m)| *c > 0.0 && *m > 0.0)
        .collect();
    if pairs.is_empty() {
        return None;
    }
    let geomean = |xs: Vec<f64>| (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp();
    Some(Claims {
        rows: pairs.len(),
        claimed_geomean: geomean(pairs.iter().map(|p| p.0).collect()),
        measured_geomean: geomean(pairs.iter().map(|p| p.1).collect()),
    })
}

fn task_result(e: &Evaluation) -> TaskResult {
    let correct = e.verdict == Verdict::Correct;
    let speedup = e.speedup.filter(|_| correct);
    TaskResult {
        correct,
        speedup: speedup.map(|s| s.median),
        speedup_low: speedup.map(|s| s.ci_low),
        excluded: false,
    }
}

/// The baselines `--baseline` names, for these tasks (`None` without the flag).
fn against(a: &EvalArgs, ws: &Workspace, tasks: &[&Task]) -> Result<Option<Against>> {
    let Some(baseline) = a.baseline else { return Ok(None) };
    if !a.mode.times() {
        bail!("`--baseline {baseline}` compares speedups, but `--mode {}` does not time\nhint: leave out `--mode` (or use `--mode full`)", a.mode);
    }
    Against::load(ws, baseline, tasks).map(Some)
}

/// `2.00x [1.00, 4.00]`, and where the baseline failed on the task, that eager stood in.
fn vs_text(r: &Restated) -> String {
    let mut text = r
        .speedup
        .map_or("-".into(), |s| format!("{:.2}x [{:.2}, {:.2}]", s.median, s.ci_low, s.ci_high));
    if r.fell_back_to_eager {
        text.push_str(" (baseline failed: vs eager)");
    }
    text
}

/// As [`task_result`], with the speedup restated against a baseline.
fn restated_result(e: &Evaluation, against: &Against) -> TaskResult {
    let mut t = task_result(e);
    if t.correct {
        let s = against.restate(e).speedup;
        t.speedup = s.map(|s| s.median);
        t.speedup_low = s.map(|s| s.ci_low);
    }
    t
}

/// KernelBench counts tasks: a task is solved by its best correct candidate.
fn best_per_task(rows: &[Row<'_>], missing: &[Missing]) -> Vec<TaskResult> {
    best_of(rows.iter().map(|r| (r.evaluation.task.as_str(), task_result(r.evaluation))), missing)
}

/// The best result per task of `(task, result)` pairs; tasks with only missing rows count as not
/// solved.
fn best_of<'a>(
    results: impl Iterator<Item = (&'a str, TaskResult)>,
    missing: &'a [Missing],
) -> Vec<TaskResult> {
    let mut best: BTreeMap<&str, TaskResult> = BTreeMap::new();
    for m in missing {
        best.entry(m.task.as_str()).or_default();
    }
    for (task, t) in results {
        let entry = best.entry(task).or_insert(t);
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

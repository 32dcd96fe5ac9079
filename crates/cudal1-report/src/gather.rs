//! From the store to a [`Report`]: the batches asked for (the latest by default), their
//! evaluations with code and diffs, summaries and fast_p against each baseline, optimize runs and
//! training runs' metrics.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use cudal1_eval::{Evaluation, Verdict};
use cudal1_stats::{summarize, TaskResult};
use cudal1_store::{ProgramDatabase, Store, StoredEvaluation};

use crate::charts::{self, LineChart, Point, Series};
use crate::model::{
    BaselineTime, BatchView, ClaimsView, DiffLine, EvalDetail, FastPRow, KernelRow, LevelChart,
    LineageRow, Notice, ProfileView, Report, RoundRow, RunView, Speedup, Summary, TaskCell,
    TaskRow,
};
use crate::{train, ReportError};
use cudal1_eval::profile::{duration_text, short_name, Profile};

/// The p of the summary's fast_p columns (as `eval`'s summary).
pub const SUMMARY_P: [f64; 3] = [1.0, 1.5, 2.0];
/// The p of the fast_p table.
const TABLE_P: [f64; 7] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0];
/// Bins of the speedup distribution: upper edges, and their labels.
const BINS: [(f64, &str); 7] = [
    (0.5, "<0.5"),
    (0.9, "0.5–0.9"),
    (1.1, "0.9–1.1"),
    (1.5, "1.1–1.5"),
    (2.0, "1.5–2"),
    (5.0, "2–5"),
    (f64::INFINITY, "≥5"),
];

/// What to put in the report.
#[derive(Clone, Debug, Default)]
pub struct Request {
    pub title: Option<String>,
    /// Batch ids; empty: the most recent batch.
    pub batches: Vec<String>,
    /// Optimize run ids; empty: every run in the store.
    pub runs: Vec<String>,
    /// Training run directories (each with `metrics.jsonl`).
    pub training: Vec<PathBuf>,
    /// Baselines to measure against besides the reference; empty: every one the store has
    /// measured for the batches' tasks.
    pub baselines: Vec<String>,
}

/// One baseline (e.g. `compile-max-autotune`) per task, to measure candidates against.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BaselineSet {
    pub name: String,
    /// By task hash.
    pub by_task: HashMap<String, BaselineMeasure>,
}

/// A baseline measured on a task.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BaselineMeasure {
    /// Its median time per call.
    pub ms: Option<f64>,
    /// Its speedup over eager PyTorch (the reference), measured beside the reference as
    /// candidates are: a candidate's speedup over it is the candidate's over the reference
    /// divided by this, each side normalised by its own reference timing.
    pub speedup: f64,
}

/// The measured baselines of the batches' tasks, from the store: `names` (all but `eager`,
/// which is the reference itself, when empty). A baseline measured under the batch's settings,
/// by the same judge (judging version and class of GPU), is preferred; then one under its
/// settings; else the most recent one of the task.
pub fn baselines_for(
    store: &Store,
    batch_ids: &[String],
    names: &[String],
) -> Result<Vec<BaselineSet>, ReportError> {
    let mut tasks: BTreeMap<String, BTreeSet<(String, String, String)>> = BTreeMap::new();
    for id in batch_ids {
        for e in store.batch_evaluations(id)? {
            tasks.entry(e.key.task_hash).or_default().insert((
                e.key.settings_hash,
                e.key.judge,
                e.key.gpu_class,
            ));
        }
    }
    let mut sets: BTreeMap<String, BaselineSet> = names
        .iter()
        .map(|n| (n.clone(), BaselineSet { name: n.clone(), by_task: HashMap::new() }))
        .collect();
    for (task, settings) in &tasks {
        let mut found = store.baselines(&cudal1_store::BaselineFilter::task(task))?;
        found.retain(|b| {
            b.baseline.status == cudal1_store::BaselineStatus::Measured
                && b.baseline.key.name != "eager"
        });
        // Newest first, then those of the batch's settings first, and of its judges before them.
        found.sort_by(|a, b| b.created_at.cmp(&a.created_at));
        found.sort_by_key(|b| {
            let k = &b.baseline.key;
            let same_settings = settings.iter().any(|(s, _, _)| *s == k.settings_hash);
            let same_judge =
                settings.contains(&(k.settings_hash.clone(), k.judge.clone(), k.gpu_class.clone()));
            (!same_judge, !same_settings)
        });
        for b in found {
            let name = &b.baseline.key.name;
            if !names.is_empty() && !names.contains(name) {
                continue;
            }
            let Some(speedup) = b.baseline.speedup_median.filter(|s| *s > 0.0) else { continue };
            let set = sets
                .entry(name.clone())
                .or_insert_with(|| BaselineSet { name: name.clone(), by_task: HashMap::new() });
            set.by_task
                .entry(task.clone())
                .or_insert(BaselineMeasure { ms: b.baseline.baseline_ms, speedup });
        }
    }
    Ok(sets.into_values().collect())
}

/// One evaluation with what the report needs beside the stored row.
struct Row {
    /// Which batch of the report it belongs to (an evaluation may be shown by several).
    batch: usize,
    stored: StoredEvaluation,
    eval: Option<Evaluation>,
    claimed: Option<f64>,
}

impl Row {
    fn correct(&self) -> bool {
        self.stored.verdict == Verdict::Correct.as_str()
    }

    fn speedup(&self) -> Option<Speedup> {
        let s = &self.stored;
        let (median, ci_low, ci_high) = (s.speedup_median?, s.speedup_ci_low?, s.speedup_ci_high?);
        let interval = cudal1_stats::Interval { median, ci_low, ci_high };
        Some(Speedup { median, ci_low, ci_high, wide: interval.is_wide() })
    }

    fn task_result(&self) -> TaskResult {
        let speedup = self.speedup().filter(|_| self.correct());
        TaskResult {
            correct: self.correct(),
            speedup: speedup.map(|s| s.median),
            speedup_low: speedup.map(|s| s.ci_low),
            excluded: false,
        }
    }

    /// The candidate's speedup over a baseline, when it was measured correct.
    fn over(&self, baseline: &BaselineMeasure) -> Option<f64> {
        let s = self.stored.speedup_median.filter(|s| *s > 0.0 && self.correct())?;
        Some(s / baseline.speedup)
    }

    /// Unique in the page: `b2-e17` is evaluation 17 as the second batch showed it.
    fn anchor(&self) -> String {
        format!("b{}-e{}", self.batch + 1, self.stored.id)
    }
}

/// A batch's rows.
struct Batch {
    view: BatchView,
    rows: Vec<Row>,
}

/// Gathers the report from `store`.
pub fn gather(store: &Store, request: &Request) -> Result<Report, ReportError> {
    let ids: Vec<String> = if request.batches.is_empty() {
        store.batch_ids()?.into_iter().take(1).collect()
    } else {
        request.batches.clone()
    };
    let mut batches = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        batches.push(batch(store, id, i)?);
    }
    let baselines = &baselines_for(store, &ids, &request.baselines)?;
    let mut report = Report {
        title: request.title.clone().unwrap_or_else(|| "cudal1 report".to_owned()),
        store: store.path().display().to_string(),
        baselines: std::iter::once("reference".to_owned())
            .chain(baselines.iter().map(|b| b.name.clone()))
            .collect(),
        fast_p_columns: TABLE_P.iter().map(|p| format!("fast_{p}")).collect(),
        ..Report::default()
    };
    fast_p(&mut report, &batches, baselines);
    report.distributions = distributions(&batches);
    report.tasks = task_rows(&batches, baselines);
    let mut shown: BTreeSet<String> = BTreeSet::new();
    for b in &batches {
        for r in &b.rows {
            shown.insert(r.stored.key.task_hash.clone());
            let code = source(store, &r.stored.candidate_label, &r.stored.key.candidate_hash)?;
            let reference = source(store, &r.stored.task_path, &r.stored.key.task_hash)?;
            report.details.push(detail(r, &b.view.label, baselines, code, reference));
        }
        let (findings, warnings) = notices(b);
        report.findings.extend(findings);
        report.warnings.extend(warnings);
        if let Some(c) = claims(b) {
            report.claims.push(c);
        }
    }
    report.own_shares = report.details.iter().any(|d| d.own_share.is_some());
    report.batches = batches.into_iter().map(|b| b.view).collect();
    let runs = if request.runs.is_empty() { store.run_ids()? } else { request.runs.clone() };
    for id in &runs {
        report.runs.push(run(store, id)?);
    }
    report.runs_compared = compare_runs(&report.runs);
    let training = train::read_all(&request.training)?;
    report.training_compared = train::compare(&training);
    report.training = training.into_iter().map(train::Run::into_view).collect();
    for id in &runs {
        if let Some(r) = store.find_run(id)? {
            shown.insert(r.task_hash);
        }
    }
    report.profiles = profiles(store, &shown)?;
    Ok(report)
}

/// The stored profiles of these tasks, the reference's first within a task.
fn profiles(store: &Store, tasks: &BTreeSet<String>) -> Result<Vec<ProfileView>, ReportError> {
    let mut rows: Vec<_> = store
        .profiles(None)?
        .into_iter()
        .filter(|p| tasks.contains(&p.profile.key.task_hash))
        .collect();
    rows.sort_by_key(|p| {
        (
            p.profile.task_name.clone(),
            p.profile.key.program != cudal1_store::REFERENCE_PROGRAM,
            p.profile.label.clone(),
        )
    });
    Ok(rows.into_iter().map(profile_view).collect())
}

fn profile_view(stored: cudal1_store::StoredProfile) -> ProfileView {
    let p = stored.profile;
    let pct = |v: Option<f64>| v.map_or_else(|| "–".to_owned(), |v| format!("{v:.0}"));
    let parsed = serde_json::from_value::<Profile>(p.profile).ok();
    let kernels = parsed
        .as_ref()
        .map(|prof| {
            prof.kernels
                .iter()
                .map(|k| KernelRow {
                    name: short_name(&k.name, 90),
                    full_name: k.name.clone(),
                    share: k.share,
                    time: duration_text(k.time_ns),
                    launches: k.launches,
                    compute: pct(k.compute_pct),
                    memory: pct(k.memory_pct),
                    dram: pct(k.dram_pct),
                    occupancy: pct(k.occupancy_pct),
                    registers: pct(k.registers),
                    grid: k.grid.clone(),
                    block: k.block.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    ProfileView {
        task: p.task_name,
        label: p.label,
        gpu_class: p.key.gpu_class,
        created_at: stored.created_at,
        summary: p.brief.lines().next().unwrap_or("").to_owned(),
        kernels,
        brief: p.brief,
    }
}

fn batch(store: &Store, id: &str, index: usize) -> Result<Batch, ReportError> {
    let stored = store.find_batch(id)?.ok_or_else(|| ReportError::UnknownBatch {
        store: store.path().to_owned(),
        batch: id.to_owned(),
    })?;
    let claimed = claimed_scores(store, id)?;
    let rows: Vec<Row> = store
        .batch_evaluations(id)?
        .into_iter()
        .map(|s| {
            let eval = serde_json::from_value::<Evaluation>(s.measurements.clone()).ok();
            let claimed =
                claimed.get(&(s.key.task_hash.clone(), s.key.candidate_hash.clone())).copied();
            Row { batch: index, stored: s, eval, claimed }
        })
        .collect();
    let first = rows.first().map(|r| &r.stored);
    let missing = missing(stored.summary.as_ref(), &rows);
    let mut verdicts: BTreeMap<&str, usize> =
        Verdict::ALL.iter().map(|v| (v.as_str(), 0)).collect();
    for r in &rows {
        *verdicts.entry(r.stored.verdict.as_str()).or_default() += 1;
    }
    let findings = rows
        .iter()
        .map(|r| {
            r.eval.as_ref().map_or(0, |e| {
                e.measurements
                    .findings
                    .iter()
                    .map(|f| (&f.kind, &f.detail))
                    .collect::<BTreeSet<_>>()
                    .len()
            })
        })
        .sum();
    let warnings = rows.iter().map(|r| r.eval.as_ref().map_or(0, |e| e.warnings.len())).sum();
    let short = Path::new(&stored.candidates_path)
        .file_name()
        .map_or_else(|| stored.candidates_path.clone(), |n| n.to_string_lossy().into_owned());
    let view = BatchView {
        id: stored.id.clone(),
        label: format!("#{} {short}", index + 1),
        created_at: stored.created_at.clone(),
        suite_path: stored.suite_path.clone(),
        candidates_path: stored.candidates_path.clone(),
        device: first.map(|s| s.device.clone()).unwrap_or_default(),
        gpu: rows.iter().find_map(|r| r.eval.as_ref()?.environment.gpu.clone()),
        candidates: rows.len(),
        verdicts: Verdict::ALL
            .iter()
            .map(|v| (v.as_str().to_owned(), verdicts[v.as_str()]))
            .collect(),
        by_task: summary(&padded(
            best_per_task(&rows).into_values().map(Row::task_result).collect(),
            missing.0,
        )),
        by_candidate: summary(&padded(rows.iter().map(Row::task_result).collect(), missing.1)),
        missing_tasks: missing.0,
        missing_candidates: missing.1,
        findings,
        warnings,
    };
    Ok(Batch { view, rows })
}

/// Rows of the batch that had nothing to evaluate (a release's task without code): eval counts
/// them as not solved, in its summary's counts over tasks and candidates; the report does too.
fn missing(summary: Option<&serde_json::Value>, rows: &[Row]) -> (usize, usize) {
    let count = |key: &str| {
        summary
            .and_then(|s| s.get(key)?.get("count")?.as_u64())
            .and_then(|n| usize::try_from(n).ok())
    };
    let tasks = rows.iter().map(|r| r.stored.task_name.as_str()).collect::<BTreeSet<_>>().len();
    (
        count("tasks").map_or(0, |n| n.saturating_sub(tasks)),
        count("candidates").map_or(0, |n| n.saturating_sub(rows.len())),
    )
}

/// `results` and `n` unsolved results.
fn padded(mut results: Vec<TaskResult>, n: usize) -> Vec<TaskResult> {
    results.extend(std::iter::repeat_n(TaskResult::default(), n));
    results
}

/// Claims recorded with the batch (`eval --from cuda-l1`): `score_default` by task and candidate hash.
fn claimed_scores(
    store: &Store,
    batch_id: &str,
) -> Result<HashMap<(String, String), f64>, ReportError> {
    Ok(store
        .claims(batch_id)?
        .into_iter()
        .filter_map(|c| {
            Some(((c.task_hash, c.candidate_hash), c.claimed.get("score_default")?.as_f64()?))
        })
        .collect())
}

fn summary(results: &[TaskResult]) -> Summary {
    let s = summarize(results, &SUMMARY_P);
    Summary {
        count: s.tasks,
        correct: s.correct,
        correct_rate: s.correct_rate,
        mean_speedup: s.mean_speedup,
        median_speedup: s.median_speedup,
        geomean_speedup: s.geomean_speedup,
        fast_p: s.fast_p.iter().zip(&s.fast_p_lower).map(|(a, b)| (a.0, a.1, b.1)).collect(),
    }
}

/// Rank of a verdict when a task has no correct candidate: the nearest miss first.
fn verdict_rank(v: &str) -> usize {
    ["correct", "incorrect", "exploit", "timeout", "runtime_error", "compile_error"]
        .iter()
        .position(|x| *x == v)
        .unwrap_or(9)
}

/// The best candidate of each task: the fastest correct one, else the nearest miss.
fn best_per_task(rows: &[Row]) -> BTreeMap<&str, &Row> {
    let mut best: BTreeMap<&str, &Row> = BTreeMap::new();
    for r in rows {
        let entry = best.entry(r.stored.task_name.as_str()).or_insert(r);
        let better = match (r.correct(), entry.correct()) {
            (true, true) => {
                r.stored.speedup_median.unwrap_or(0.0) > entry.stored.speedup_median.unwrap_or(0.0)
            }
            (true, false) => true,
            (false, false) => verdict_rank(&r.stored.verdict) < verdict_rank(&entry.stored.verdict),
            (false, true) => false,
        };
        if better {
            *entry = r;
        }
    }
    best
}

/// fast_p against each baseline, per batch: the curve for p in [0, 5] and the table.
fn fast_p(report: &mut Report, batches: &[Batch], baselines: &[BaselineSet]) {
    let ps: Vec<f64> = (0..=100).map(|i| f64::from(i) * 0.05).collect();
    let mut series = Vec::new();
    for (bi, b) in batches.iter().enumerate() {
        let best = best_per_task(&b.rows);
        let pad = b.view.missing_tasks;
        let mut against: Vec<(String, Vec<TaskResult>)> = vec![(
            "reference".to_owned(),
            padded(best.values().map(|r| r.task_result()).collect(), pad),
        )];
        for base in baselines {
            let results = best
                .values()
                .map(|r| {
                    let s = base.by_task.get(&r.stored.key.task_hash).and_then(|m| r.over(m));
                    TaskResult {
                        correct: r.correct(),
                        speedup: s,
                        speedup_low: None,
                        excluded: false,
                    }
                })
                .collect();
            against.push((base.name.clone(), padded(results, pad)));
        }
        for (ai, (name, results)) in against.iter().enumerate() {
            let curve = summarize(results, &ps);
            let label = if batches.len() > 1 {
                format!("{} vs {name}", b.view.label)
            } else {
                format!("vs {name}")
            };
            series.push(Series {
                name: label.clone(),
                points: curve.fast_p.clone(),
                color: charts::color(bi * (baselines.len() + 1) + ai),
                dashed: false,
            });
            if ai == 0 {
                series.push(Series {
                    name: format!("{label} (interval's lower bound)"),
                    points: curve.fast_p_lower,
                    color: charts::color(bi * (baselines.len() + 1)),
                    dashed: true,
                });
            }
            report.fast_p_rows.push(FastPRow {
                batch: b.view.label.clone(),
                baseline: name.clone(),
                values: summarize(results, &TABLE_P).fast_p.into_iter().map(|p| p.1).collect(),
            });
        }
    }
    report.fast_p_chart = charts::line_chart(&LineChart {
        id: "fast-p".into(),
        title: "fast_p: share of tasks correct and faster than p times".into(),
        x_label: "p (speedup threshold)".into(),
        y_label: "share of tasks".into(),
        series,
        x_range: Some((0.0, 5.0)),
        y_range: Some((0.0, 1.0)),
        dots: false,
    });
}

fn level_of(task: &str) -> String {
    task.split_once('/').map_or_else(|| "tasks".to_owned(), |(l, _)| l.to_owned())
}

/// Per level, how many tasks' best correct speedups fall in each bin, a bar per batch.
fn distributions(batches: &[Batch]) -> Vec<LevelChart> {
    let levels: BTreeSet<String> =
        batches.iter().flat_map(|b| b.rows.iter().map(|r| level_of(&r.stored.task_name))).collect();
    levels
        .into_iter()
        .map(|level| {
            let groups: Vec<(String, Vec<usize>)> = batches
                .iter()
                .map(|b| {
                    let mut counts = vec![0; BINS.len()];
                    for r in best_per_task(&b.rows)
                        .values()
                        .filter(|r| level_of(&r.stored.task_name) == level && r.correct())
                    {
                        if let Some(s) = r.stored.speedup_median {
                            counts[BINS
                                .iter()
                                .position(|(hi, _)| s < *hi)
                                .unwrap_or(BINS.len() - 1)] += 1;
                        }
                    }
                    (b.view.label.clone(), counts)
                })
                .collect();
            let categories: Vec<String> = BINS.iter().map(|b| b.1.to_owned()).collect();
            let svg = charts::grouped_bars(
                &format!("dist-{level}"),
                &format!("{level}: best correct speedup per task"),
                "speedup over the reference",
                &categories,
                &groups,
            );
            LevelChart { level, svg }
        })
        .collect()
}

fn task_rows(batches: &[Batch], baselines: &[BaselineSet]) -> Vec<TaskRow> {
    let mut names: BTreeMap<String, (String, Option<f64>)> = BTreeMap::new();
    for b in batches {
        for r in &b.rows {
            let entry = names
                .entry(r.stored.task_name.clone())
                .or_insert_with(|| (r.stored.key.task_hash.clone(), None));
            entry.1 = entry.1.or(r.stored.ref_ms);
        }
    }
    // Per batch: each task's best candidate, and how many candidates it had.
    type Best<'a> = (BTreeMap<&'a str, &'a Row>, BTreeMap<&'a str, usize>);
    let bests: Vec<Best<'_>> = batches
        .iter()
        .map(|b| {
            let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
            for r in &b.rows {
                *counts.entry(r.stored.task_name.as_str()).or_default() += 1;
            }
            (best_per_task(&b.rows), counts)
        })
        .collect();
    let mut rows: Vec<TaskRow> = names
        .into_iter()
        .map(|(task, (hash, ref_ms))| TaskRow {
            level: level_of(&task),
            ref_ms,
            baseline_ms: baselines
                .iter()
                .map(|b| b.by_task.get(&hash).and_then(|m| m.ms))
                .collect(),
            cells: bests
                .iter()
                .map(|(best, counts)| {
                    best.get(task.as_str()).map(|r| TaskCell {
                        anchor: r.anchor(),
                        verdict: r.stored.verdict.clone(),
                        reason: first_line(&r.stored.reason),
                        speedup: r.speedup().filter(|_| r.correct()),
                        candidates: counts.get(task.as_str()).copied().unwrap_or(0),
                        claimed: r.claimed,
                    })
                })
                .collect(),
            task,
        })
        .collect();
    rows.sort_by_key(|r| natural_key(&r.task));
    rows
}

/// `level1/12_Name` sorts after `level1/2_Name`.
fn natural_key(task: &str) -> (String, u64, String) {
    let (level, rest) = task.split_once('/').unwrap_or(("", task));
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (level.to_owned(), digits.parse().unwrap_or(u64::MAX), rest.to_owned())
}

fn first_line(text: &str) -> String {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").to_owned()
}

fn detail(
    r: &Row,
    batch: &str,
    baselines: &[BaselineSet],
    code: Option<String>,
    reference: Option<String>,
) -> EvalDetail {
    let s = &r.stored;
    let (diff, diff_note) = match (&reference, &code) {
        (Some(a), Some(b)) => (unified_diff(a, b), None),
        (None, _) => (
            Vec::new(),
            Some(format!("the reference is in neither the store nor `{}`", s.task_path)),
        ),
        (_, None) => (Vec::new(), Some("the candidate's code is not available".to_owned())),
    };
    let eval = r.eval.as_ref();
    EvalDetail {
        anchor: r.anchor(),
        id: s.id,
        batch: batch.to_owned(),
        task: s.task_name.clone(),
        candidate: s.candidate_label.clone(),
        verdict: s.verdict.clone(),
        reason: s.reason.clone(),
        reason_class: eval.map(|e| e.reason_class.clone()).unwrap_or_default(),
        speedup: r.speedup(),
        ref_ms: s.ref_ms,
        candidate_ms: s.candidate_ms,
        baselines: baselines
            .iter()
            .map(|b| {
                let m = b.by_task.get(&s.key.task_hash)?;
                Some(BaselineTime {
                    name: b.name.clone(),
                    ms: m.ms,
                    baseline_speedup: m.speedup,
                    speedup: r.over(m),
                })
            })
            .collect(),
        claimed: r.claimed,
        own_share: s.own_share,
        own_text: s
            .own_kernels
            .clone()
            .and_then(|k| serde_json::from_value::<cudal1_eval::own::OwnShare>(k).ok())
            .map(|o| o.text()),
        warnings: judge_warning(s)
            .into_iter()
            .chain(
                eval.map(|e| {
                    e.warnings
                        .iter()
                        .map(|w| format!("{}: {}", w.class, w.message))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default(),
            )
            .collect(),
        findings: eval
            .map(|e| {
                e.measurements
                    .findings
                    .iter()
                    .map(|f| format!("{}: {}", f.kind, f.detail))
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect()
            })
            .unwrap_or_default(),
        log_tail: eval
            .and_then(|e| e.measurements.log_tail.clone())
            .filter(|l| !l.trim().is_empty()),
        code,
        diff,
        diff_note,
    }
}

/// A warning for an evaluation that another judging version made: this build would not reuse
/// its verdict (`eval` judges it again).
fn judge_warning(s: &StoredEvaluation) -> Option<String> {
    if s.key.judge == cudal1_eval::judge_version() {
        return None;
    }
    let by = if s.key.judge.is_empty() {
        "an older cudal1, before judges were recorded".to_owned()
    } else {
        format!("judging version {}", s.key.judge)
    };
    Some(format!("older_judge: judged by {by}; this version would judge it again"))
}

/// The program with content hash `hash`: from the store, else from `path` when the file still
/// holds it (batches recorded before the store kept programs).
fn source(store: &Store, path: &str, hash: &str) -> Result<Option<String>, ReportError> {
    if let Some(text) = store.source(hash)? {
        return Ok(Some(text));
    }
    let Ok(text) = std::fs::read_to_string(path) else { return Ok(None) };
    Ok((cudal1_task::content_hash(&text) == hash).then_some(text))
}

/// A unified diff of `new` against `old`, three lines of context.
#[must_use]
pub fn unified_diff(old: &str, new: &str) -> Vec<DiffLine> {
    let diff = similar::TextDiff::from_lines(old, new);
    let mut out = Vec::new();
    for hunk in diff.unified_diff().context_radius(3).iter_hunks() {
        out.push(DiffLine { kind: "hunk", text: hunk.header().to_string() });
        for change in hunk.iter_changes() {
            let (kind, sign) = match change.tag() {
                similar::ChangeTag::Insert => ("add", '+'),
                similar::ChangeTag::Delete => ("del", '-'),
                similar::ChangeTag::Equal => ("ctx", ' '),
            };
            out.push(DiffLine {
                kind,
                text: format!("{sign}{}", change.value().trim_end_matches(['\n', '\r'])),
            });
        }
    }
    out
}

fn notices(b: &Batch) -> (Vec<Notice>, Vec<Notice>) {
    let mut findings = Vec::new();
    let mut warnings = Vec::new();
    for r in &b.rows {
        let Some(e) = &r.eval else { continue };
        let notice = |kind: &str, detail: &str| Notice {
            anchor: r.anchor(),
            batch: b.view.label.clone(),
            task: r.stored.task_name.clone(),
            candidate: r.stored.candidate_label.clone(),
            verdict: r.stored.verdict.clone(),
            kind: kind.to_owned(),
            detail: detail.to_owned(),
        };
        // A finding repeats for each checked call that shows it: once per kind and detail.
        let mut seen = BTreeSet::new();
        for f in &e.measurements.findings {
            if seen.insert((f.kind.as_str(), f.detail.as_str())) {
                findings.push(notice(&f.kind, &f.detail));
            }
        }
        // An exploit without a finding of its own is still one: its reason says why.
        if r.stored.verdict == Verdict::Exploit.as_str() && e.measurements.findings.is_empty() {
            findings.push(notice(&e.reason_class, &first_line(&e.reason)));
        }
        warnings.extend(e.warnings.iter().map(|w| notice(&w.class, &w.message)));
    }
    (findings, warnings)
}

fn claims(b: &Batch) -> Option<ClaimsView> {
    let claimed_rows = b.rows.iter().filter(|r| r.claimed.is_some()).count();
    if claimed_rows == 0 {
        return None;
    }
    let pairs: Vec<(&Row, f64, Speedup)> = b
        .rows
        .iter()
        .filter(|r| r.correct())
        .filter_map(|r| Some((r, r.claimed?, r.speedup()?)))
        .filter(|(_, c, s)| *c > 0.0 && s.median > 0.0)
        .collect();
    let geomean = |xs: Vec<f64>| cudal1_stats::geometric_mean(&xs);
    let points: Vec<Point> = pairs
        .iter()
        .map(|(r, c, s)| Point { x: *c, y: s.median, label: r.stored.task_name.clone() })
        .collect();
    Some(ClaimsView {
        batch: b.view.label.clone(),
        pairs: pairs.len(),
        claimed_rows,
        claimed_geomean: geomean(pairs.iter().map(|p| p.1).collect()),
        measured_geomean: geomean(pairs.iter().map(|p| p.2.median).collect()),
        overstated: pairs.iter().filter(|(_, c, s)| *c > s.ci_high).count(),
        svg: charts::scatter(
            &format!("claims-{}", b.view.id),
            &format!("{}: claimed against measured", b.view.label),
            "claimed speedup",
            "measured speedup (median)",
            &points,
        ),
    })
}

/// Best speedup per round of every run in one chart, when there are several.
fn compare_runs(runs: &[RunView]) -> String {
    if runs.len() < 2 {
        return String::new();
    }
    let series = runs
        .iter()
        .enumerate()
        .map(|(i, r)| Series {
            name: format!("{} ({})", r.task, r.id.chars().take(12).collect::<String>()),
            points: r
                .rounds
                .iter()
                .filter_map(|rd| Some((f64::from(rd.round), rd.best_speedup?)))
                .collect(),
            color: charts::color(i),
            dashed: false,
        })
        .collect();
    charts::line_chart(&LineChart {
        id: "runs-compared".into(),
        title: "Best speedup per round, runs side by side".into(),
        x_label: "round".into(),
        y_label: "best speedup".into(),
        series,
        x_range: None,
        y_range: None,
        dots: true,
    })
}

fn run(store: &Store, id: &str) -> Result<RunView, ReportError> {
    let stored = store.find_run(id)?.ok_or_else(|| ReportError::UnknownRun {
        store: store.path().to_owned(),
        run: id.to_owned(),
    })?;
    let rounds: Vec<RoundRow> = store
        .rounds_for_run(id)?
        .into_iter()
        .map(|r| RoundRow {
            round: r.round.round,
            samples: r.round.samples,
            valid: r.round.valid,
            correct: r.round.correct,
            new_programs: r.round.new_programs,
            best_speedup: r.round.best_speedup,
            best_program_id: r.round.best_program_id,
            cost_usd: r.round.cost_usd,
        })
        .collect();
    let points: Vec<(f64, f64)> =
        rounds.iter().filter_map(|r| Some((f64::from(r.round), r.best_speedup?))).collect();
    let chart = charts::line_chart(&LineChart {
        id: format!("run-{id}"),
        title: format!("{}: best speedup per round", stored.task_name),
        x_label: "round".into(),
        y_label: "best speedup".into(),
        series: vec![Series {
            name: "best so far".into(),
            points,
            color: charts::color(0),
            dashed: false,
        }],
        x_range: None,
        y_range: None,
        dots: true,
    });
    let best = rounds.iter().rev().find_map(|r| r.best_program_id);
    let mut lineage = Vec::new();
    let mut best_code = None;
    if let Some(best) = best {
        let mut queue = std::collections::VecDeque::from([(best, 0usize)]);
        let mut seen = BTreeSet::new();
        while let Some((pid, depth)) = queue.pop_front() {
            if !seen.insert(pid) || lineage.len() >= 200 {
                continue;
            }
            let Some(p) = store.program(pid)? else { continue };
            if depth == 0 {
                best_code = Some(p.code.clone());
            }
            queue.extend(p.parent_ids.iter().map(|&q| (q, depth + 1)));
            lineage.push(LineageRow {
                id: p.id,
                depth,
                round: p.round,
                verdict: p.verdict,
                speedup: p.speedup_median,
                parents: p.parent_ids,
            });
        }
    }
    Ok(RunView {
        id: stored.id,
        task: stored.task_name,
        created_at: stored.created_at,
        stop_reason: stored.stop_reason,
        rounds,
        chart,
        lineage,
        best_code,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use cudal1_store::{
        BaselineKey, BaselineStatus, ClaimRecord, EvalKey, NewBaseline, NewBatch, NewEvaluation,
        NewProgram, NewRound, NewRun, ProgramKey,
    };

    fn evaluation(
        task: &str,
        cand: &str,
        verdict: &str,
        speedup: Option<(f64, f64, f64)>,
    ) -> NewEvaluation {
        NewEvaluation {
            key: EvalKey {
                task_hash: format!("t-{task}"),
                candidate_hash: format!("c-{cand}"),
                settings_hash: "s".into(),
                judge: cudal1_eval::judge_version(),
                gpu_class: "cpu".into(),
            },
            batch_id: Some("b1".into()),
            task_name: task.into(),
            task_path: "/gone/ref.py".into(),
            candidate_label: format!("/gone/{cand}.py"),
            verdict: verdict.into(),
            reason: format!("{verdict} because <reasons>"),
            speedup_median: speedup.map(|s| s.0),
            speedup_ci_low: speedup.map(|s| s.1),
            speedup_ci_high: speedup.map(|s| s.2),
            ref_ms: Some(2.0),
            candidate_ms: speedup.map(|s| 2.0 / s.0),
            device: "cpu".into(),
            environment: serde_json::json!({}),
            settings: serde_json::json!({}),
            measurements: serde_json::json!({}),
            duration_ms: 1.0,
        }
    }

    /// A store with one batch (two tasks, three candidates), their code, a claim, a baseline and
    /// an optimize run of three generations.
    fn store() -> Store {
        let store = Store::open_in_memory().unwrap();
        store
            .create_batch(&NewBatch {
                id: "b1".into(),
                settings: serde_json::json!({}),
                suite_path: "tasks".into(),
                candidates_path: "cands".into(),
            })
            .unwrap();
        store
            .insert_evaluation(&evaluation("level1/1_A", "fast", "correct", Some((2.0, 1.8, 2.2))))
            .unwrap();
        store.insert_evaluation(&evaluation("level1/1_A", "wrong", "incorrect", None)).unwrap();
        store
            .insert_evaluation(&evaluation(
                "level2/1_B",
                "slow",
                "correct",
                Some((0.5, 0.45, 0.55)),
            ))
            .unwrap();
        store
            .record_sources(&[
                ("t-level1/1_A", "def f(x):\n    return x\n"),
                ("c-fast", "def f(x):\n    return x * 1\n"),
            ])
            .unwrap();
        store
            .record_claims(&[ClaimRecord {
                batch_id: "b1".into(),
                task_hash: "t-level1/1_A".into(),
                candidate_hash: "c-fast".into(),
                claimed: serde_json::json!({"score_default": 3.0}),
            }])
            .unwrap();
        store
            .record_baseline(&NewBaseline {
                key: BaselineKey {
                    task_hash: "t-level1/1_A".into(),
                    settings_hash: "s".into(),
                    gpu_class: "cpu".into(),
                    judge: cudal1_eval::judge_version(),
                    name: "compile-default".into(),
                },
                task_name: "level1/1_A".into(),
                status: BaselineStatus::Measured,
                reason: String::new(),
                speedup_median: Some(1.6),
                speedup_ci_low: Some(1.5),
                speedup_ci_high: Some(1.7),
                baseline_ms: Some(1.25),
                reference_ms: Some(2.0),
                evaluation: serde_json::Value::Null,
            })
            .unwrap();
        store
            .begin_run(&NewRun {
                id: "r1".into(),
                task_hash: "t".into(),
                task_name: "level1/1_A".into(),
                task_path: "p".into(),
                settings_hash: "s".into(),
                settings: serde_json::json!({}),
                config: serde_json::json!({}),
            })
            .unwrap();
        let mut parents = Vec::new();
        for (round, speedup) in [(1u32, 1.1), (2, 1.4), (3, 1.9)] {
            let id = store
                .insert_program(&NewProgram {
                    key: ProgramKey {
                        task_hash: "t".into(),
                        code_hash: format!("p{round}"),
                        settings_hash: "s".into(),
                    },
                    code: format!("# round {round}"),
                    run_id: "r1".into(),
                    round,
                    trajectory: None,
                    turn: 1,
                    parent_ids: parents.clone(),
                    verdict: "correct".into(),
                    reason: String::new(),
                    reason_class: String::new(),
                    speedup_median: Some(speedup),
                    speedup_ci_low: Some(speedup),
                    speedup_ci_high: Some(speedup),
                    evaluation: serde_json::json!({}),
                })
                .unwrap();
            store
                .finish_round(&NewRound {
                    run_id: "r1".into(),
                    round,
                    samples: 2,
                    valid: 2,
                    correct: 1,
                    new_programs: 1,
                    best_program_id: Some(id),
                    best_speedup: Some(speedup),
                    prompt_tokens: 0,
                    completion_tokens: 0,
                    cost_usd: 0.0,
                    wall_ms: 1.0,
                })
                .unwrap();
            parents = vec![id];
        }
        store
    }

    #[test]
    fn the_report_holds_the_stores_numbers() {
        let report = gather(&store(), &Request::default()).unwrap();
        let b = &report.batches[0];
        assert_eq!((b.id.as_str(), b.candidates), ("b1", 3));
        assert_eq!((b.by_task.count, b.by_task.correct), (2, 2));
        assert!((b.by_task.geomean_speedup.unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(b.by_task.fast_p[0], (1.0, 0.5, 0.5));
        assert_eq!((b.by_candidate.count, b.by_candidate.correct), (3, 2));
        // Against the baseline: 2.0 / 1.6 = 1.25 on the one task it was measured on.
        assert_eq!(report.baselines, ["reference", "compile-default"]);
        let row = report.fast_p_rows.iter().find(|r| r.baseline == "compile-default").unwrap();
        assert_eq!(row.values[2], 0.5, "{row:?}");
        let a = report.tasks.iter().find(|t| t.task == "level1/1_A").unwrap();
        assert_eq!((a.ref_ms, a.baseline_ms.clone()), (Some(2.0), vec![Some(1.25)]));
        let cell = a.cells[0].as_ref().unwrap();
        assert_eq!(
            (cell.verdict.as_str(), cell.candidates, cell.claimed),
            ("correct", 2, Some(3.0))
        );
        assert_eq!(cell.speedup.unwrap().median, 2.0);
        // Code and diff from the store, though the files are gone.
        let fast = report.details.iter().find(|d| d.candidate == "/gone/fast.py").unwrap();
        assert_eq!(fast.code.as_deref(), Some("def f(x):\n    return x * 1\n"));
        assert!(
            fast.diff.iter().any(|l| l.kind == "add" && l.text == "+    return x * 1"),
            "{:?}",
            fast.diff
        );
        assert!((fast.baselines[0].as_ref().unwrap().speedup.unwrap() - 1.25).abs() < 1e-12);
        let wrong = report.details.iter().find(|d| d.candidate == "/gone/wrong.py").unwrap();
        assert!(wrong.code.is_none() && wrong.diff_note.is_some());
        // Claimed against measured.
        let claims = &report.claims[0];
        assert_eq!((claims.claimed_rows, claims.pairs, claims.overstated), (1, 1, 1));
        assert!(
            (claims.claimed_geomean.unwrap() - 3.0).abs() < 1e-12
                && (claims.measured_geomean.unwrap() - 2.0).abs() < 1e-12,
            "{claims:?}"
        );
        // The optimize run: best per round and the lineage of the best, newest first.
        let run = &report.runs[0];
        assert_eq!(
            run.rounds.iter().map(|r| r.best_speedup.unwrap()).collect::<Vec<_>>(),
            [1.1, 1.4, 1.9]
        );
        assert_eq!(
            run.lineage.iter().map(|l| (l.round, l.depth)).collect::<Vec<_>>(),
            [(3, 0), (2, 1), (1, 2)]
        );
        assert_eq!(run.best_code.as_deref(), Some("# round 3"));
        assert!(report.runs_compared.is_empty(), "one run needs no comparison");
    }

    #[test]
    fn an_older_judges_evaluation_is_listed_with_a_warning_that_says_so() {
        let store = store();
        let mut old = evaluation("level1/9_Old", "old", "correct", Some((14.0, 13.0, 15.0)));
        old.key.judge = String::new();
        old.batch_id = Some("b1".into());
        store.insert_evaluation(&old).unwrap();
        let report = gather(&store, &Request::default()).unwrap();
        let warned = |task: &str| {
            report
                .details
                .iter()
                .find(|d| d.task == task)
                .unwrap()
                .warnings
                .iter()
                .any(|w| w.starts_with("older_judge: judged by an older cudal1"))
        };
        assert!(warned("level1/9_Old"));
        assert!(!warned("level1/1_A"), "this version's evaluations carry no such warning");
    }

    #[test]
    fn rows_without_code_count_as_unsolved_as_eval_counts_them() {
        let store = store();
        // eval's summary of a release with one more task and candidate that had no code.
        store
            .finish_batch(
                "b1",
                &serde_json::json!({"tasks": {"count": 3}, "candidates": {"count": 4}}),
            )
            .unwrap();
        let report = gather(&store, &Request::default()).unwrap();
        let b = &report.batches[0];
        assert_eq!((b.missing_tasks, b.missing_candidates), (1, 1));
        assert_eq!((b.by_task.count, b.by_task.correct, b.by_candidate.count), (3, 2, 4));
        assert!((b.by_task.correct_rate - 2.0 / 3.0).abs() < 1e-12);
        assert!(
            (report.fast_p_rows[0].values[2] - 1.0 / 3.0).abs() < 1e-12,
            "{:?}",
            report.fast_p_rows[0]
        );
    }

    #[test]
    fn several_runs_are_overlaid_in_one_chart() {
        let store = store();
        store
            .begin_run(&NewRun {
                id: "r2".into(),
                task_hash: "t".into(),
                task_name: "level1/1_A".into(),
                task_path: "p".into(),
                settings_hash: "s".into(),
                settings: serde_json::json!({}),
                config: serde_json::json!({}),
            })
            .unwrap();
        store
            .finish_round(&NewRound {
                run_id: "r2".into(),
                round: 1,
                samples: 1,
                valid: 1,
                correct: 1,
                new_programs: 0,
                best_program_id: None,
                best_speedup: Some(1.2),
                prompt_tokens: 0,
                completion_tokens: 0,
                cost_usd: 0.0,
                wall_ms: 1.0,
            })
            .unwrap();
        let report = gather(&store, &Request::default()).unwrap();
        assert_eq!(report.runs.len(), 2);
        assert_eq!(
            report.runs_compared.matches("<polyline").count(),
            2,
            "{}",
            report.runs_compared
        );
    }

    #[test]
    fn the_page_escapes_what_it_shows() {
        let store = store();
        store
            .insert_evaluation(&evaluation(
                "level1/2_<script>alert(1)</script>",
                "x",
                "timeout",
                None,
            ))
            .unwrap();
        let html = crate::render(&gather(&store, &Request::default()).unwrap()).unwrap();
        assert!(!html.contains("<script>alert(1)"), "unescaped task name");
        assert!(html.contains("level1/2_&lt;script&gt;alert(1)&lt;/script&gt;"));
        assert!(html.contains("correct because &lt;reasons&gt;"));
        assert_eq!(html.matches("<script>").count(), 1, "only the page's own script");
    }

    #[test]
    fn own_kernel_shares_get_a_column_and_a_line_where_measured() {
        let store = store();
        let html = crate::render(&gather(&store, &Request::default()).unwrap()).unwrap();
        assert!(!html.contains(">own kernels</th>"), "no share measured, no column");
        let fast = store
            .all_evaluations()
            .unwrap()
            .into_iter()
            .find(|e| e.candidate_label == "/gone/fast.py")
            .unwrap();
        let share = cudal1_eval::own::OwnShare {
            share: 0.75,
            own_ns: 750.0,
            total_ns: 1000.0,
            calls: 1,
            profiled_ms_per_call: 0.001,
            extension_symbols: 12,
            triton_kernels: vec![],
            profiled: true,
            kernels: vec![
                cudal1_eval::own::AttributedKernel {
                    name: "_Z1kPf".into(),
                    launches: 1,
                    time_ns: 750.0,
                    origin: cudal1_eval::own::Origin::Own,
                },
                cudal1_eval::own::AttributedKernel {
                    name: "ampere_sgemm".into(),
                    launches: 1,
                    time_ns: 250.0,
                    origin: cudal1_eval::own::Origin::Library,
                },
            ],
        };
        assert!(store
            .set_own_share(fast.id, share.share, &serde_json::to_value(&share).unwrap())
            .unwrap());
        let report = gather(&store, &Request::default()).unwrap();
        let d = report.details.iter().find(|d| d.id == fast.id).unwrap();
        assert_eq!(
            (d.own_share, d.own_text.as_deref()),
            (Some(0.75), Some("75% own (1 of 2 kernels)"))
        );
        let html = crate::render(&report).unwrap();
        assert!(html.contains(">own kernels</th>"), "the column");
        assert!(html.contains("data-value=\"0.75\">75.0%</td>"), "the cell");
        assert!(html.contains("own kernels: 75% own (1 of 2 kernels)"), "the details");
    }

    #[test]
    fn unknown_batches_and_runs_are_errors() {
        let store = store();
        let e = gather(&store, &Request { batches: vec!["nope".into()], ..Request::default() })
            .unwrap_err();
        assert!(
            matches!(e, ReportError::UnknownBatch { ref batch, .. } if batch == "nope"),
            "{e:?}"
        );
        let e = gather(&store, &Request { runs: vec!["nope".into()], ..Request::default() })
            .unwrap_err();
        assert!(matches!(e, ReportError::UnknownRun { .. }), "{e:?}");
    }

    #[test]
    fn a_diff_marks_added_and_removed_lines() {
        let d = unified_diff("a\nb\nc\n", "a\nB\nc\n");
        let kinds: Vec<&str> = d.iter().map(|l| l.kind).collect();
        assert_eq!(kinds, ["hunk", "ctx", "del", "add", "ctx"]);
        assert_eq!(d[2].text, "-b");
        assert_eq!(d[3].text, "+B");
        assert!(unified_diff("same\n", "same\n").is_empty());
    }

    #[test]
    fn tasks_sort_by_level_then_number() {
        let mut names = vec!["level2/1_A", "level1/12_B", "level1/2_C"];
        names.sort_by_key(|n| natural_key(n));
        assert_eq!(names, ["level1/2_C", "level1/12_B", "level2/1_A"]);
    }

    #[test]
    fn profiles_of_the_tasks_shown_come_with_their_kernels() {
        let store = store();
        let kernel = |name: &str, share: f64, compute: Option<f64>| {
            serde_json::json!({"name": name, "launches": 2, "time_ns": share * 1e4, "share": share, "compute_pct": compute, "memory_pct": 81.0,
                "dram_pct": null, "occupancy_pct": 45.5, "registers": 32.0, "block": "(256, 1, 1)", "grid": "(80, 1, 1)"})
        };
        let profile = serde_json::json!({"calls": 1, "launches": 4, "total_ns": 1e4, "kernels": [kernel("gemm<float>", 0.75, Some(12.0)), kernel("add", 0.25, None)]});
        for (task, program, label) in [
            ("t-level1/1_A", "c-fast", "/gone/fast.py"),
            ("t-level1/1_A", cudal1_store::REFERENCE_PROGRAM, "reference"),
            ("t-elsewhere", "x", "x.py"),
        ] {
            store
                .record_profile(&cudal1_store::NewProfile {
                    key: cudal1_store::ProfileKey { task_hash: task.into(), program: program.into(), gpu_class: "nvidia-h100".into() },
                    task_name: "level1/1_A".into(),
                    label: label.into(),
                    brief: "4 kernel launches (2 distinct kernels) in 1 call, 10.0 µs of GPU time.\n- 75% `gemm<float>`".into(),
                    profile: profile.clone(),
                })
                .unwrap();
        }
        let report = gather(&store, &Request::default()).unwrap();
        let labels: Vec<&str> = report.profiles.iter().map(|p| p.label.as_str()).collect();
        assert_eq!(
            labels,
            ["reference", "/gone/fast.py"],
            "the reference first; tasks not shown are left out"
        );
        let p = &report.profiles[1];
        assert_eq!(
            p.summary,
            "4 kernel launches (2 distinct kernels) in 1 call, 10.0 µs of GPU time."
        );
        assert_eq!(p.kernels.len(), 2);
        let k = &p.kernels[0];
        assert_eq!(
            (
                k.name.as_str(),
                k.time.as_str(),
                k.compute.as_str(),
                k.occupancy.as_str(),
                k.dram.as_str()
            ),
            ("gemm<float>", "7.5 µs", "12", "46", "–")
        );
        let html = crate::render::render(&report).unwrap();
        assert!(html.contains("<section id=\"profiles\">"));
        assert!(html.contains("<code title=\"gemm&lt;float&gt;\">gemm&lt;float&gt;</code></td><td class=\"num\">75.0%</td>"), "escaped and shown");
    }
}

//! The held-out evaluation run after each stage, the same every time (same prompts, seeds and
//! sampling), so that stages compare: the share of samples that are executable and correct, the
//! share faster than the reference (fast_1), the geometric-mean speedup of the correct samples,
//! and the best of a task's G samples; each with a bootstrap interval over tasks.

use crate::data::task_messages;
use crate::kernels::{correct_speedup, judge};
use crate::policy::{Policy, Sampling};
use crate::{TrainError, TrainEvent};
use cudal1_eval::{Evaluator, JobOutcome, Mode};
use cudal1_search::{extract_program, Prompts};
use cudal1_stats::{statistic_interval, Interval};
use cudal1_task::Task;
use serde::Serialize;
use serde_json::{json, Value};
use std::sync::Arc;

/// One sample's outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SampleResult {
    pub task: String,
    pub has_program: bool,
    pub truncated: bool,
    /// The verdict, when it was judged (`None`: no program, or not judged).
    pub verdict: Option<String>,
    pub correct: bool,
    pub speedup: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeldoutReport {
    pub tasks: usize,
    pub samples_per_task: u32,
    pub correct_rate: Option<Interval>,
    pub fast1_rate: Option<Interval>,
    /// Geometric mean over the correct samples' speedups.
    pub geomean_speedup_of_correct: Option<Interval>,
    /// Share of tasks with at least one correct sample.
    pub solved_rate: Option<Interval>,
    /// Geometric mean over tasks of the best correct speedup (tasks with none count as 0 in
    /// `solved_rate` and are left out here).
    pub best_of_g_geomean: Option<Interval>,
    pub samples: Vec<SampleResult>,
}

const RESAMPLES: usize = 2000;

/// Samples `per_task` replies for each task with fixed seeds and judges them (full mode).
pub fn evaluate(
    policy: &mut Policy,
    engine: &Evaluator,
    prompts: &Prompts,
    tasks: &[Arc<Task>],
    per_task: u32,
    sampling: Sampling,
    seed: u64,
    on_event: &mut dyn FnMut(TrainEvent),
) -> Result<HeldoutReport, TrainError> {
    let mut prompt_ids = Vec::with_capacity(tasks.len());
    for task in tasks {
        prompt_ids.push(policy.prompt_ids(&task_messages(prompts, task)?[0].content)?);
    }
    on_event(TrainEvent::Phase { step: 0, phase: "generate" });
    let samples = policy.generate(prompt_ids, per_task, sampling, seed)?;
    on_event(TrainEvent::Phase { step: 0, phase: "evaluate" });
    let mut results: Vec<SampleResult> = Vec::with_capacity(samples.len());
    let mut items = Vec::new();
    let mut item_of = Vec::new();
    for s in &samples {
        let task = &tasks[s.prompt_index];
        let program = extract_program(&s.text).ok();
        results.push(SampleResult {
            task: task.key(),
            has_program: program.is_some(),
            truncated: s.finish_reason == "length",
            verdict: None,
            correct: false,
            speedup: None,
        });
        match program {
            Some(code) => {
                item_of.push(Some(items.len()));
                items.push((Arc::clone(task), code, format!("held-out {}", task.key())));
            }
            None => item_of.push(None),
        }
    }
    let outcomes = judge(engine, Mode::Full, &items, &mut |done, of| on_event(TrainEvent::Progress { done, of, what: "programs judged" }));
    for (r, i) in results.iter_mut().zip(item_of) {
        if let Some(JobOutcome::Evaluated(e)) = i.map(|i| &outcomes[i]) {
            r.verdict = Some(e.verdict.as_str().to_owned());
            r.speedup = correct_speedup(e);
            r.correct = r.speedup.is_some();
        }
    }
    Ok(report(tasks.len(), per_task, results, seed))
}

/// The statistics of judged samples, over `tasks` tasks of `per_task` samples each.
pub fn report(tasks: usize, per_task: u32, samples: Vec<SampleResult>, seed: u64) -> HeldoutReport {
    let by_task: Vec<Vec<&SampleResult>> = {
        let mut keys: Vec<&str> = samples.iter().map(|s| s.task.as_str()).collect();
        keys.dedup();
        keys.iter().map(|k| samples.iter().filter(|s| s.task == *k).collect()).collect()
    };
    let geomean = |xs: Vec<f64>| {
        #[expect(clippy::cast_precision_loss)]
        let n = xs.len() as f64;
        (!xs.is_empty()).then(|| (xs.iter().map(|x| x.ln()).sum::<f64>() / n).exp())
    };
    let n = by_task.len();
    let correct_rate = statistic_interval(n, |idx| share(&by_task, idx, |s| s.correct), RESAMPLES, 0.95, seed);
    let fast1_rate = statistic_interval(n, |idx| share(&by_task, idx, |s| s.correct && s.speedup.is_some_and(|x| x > 1.0)), RESAMPLES, 0.95, seed);
    let geomean_speedup_of_correct = statistic_interval(
        n,
        |idx| geomean(idx.iter().flat_map(|&t| by_task[t].iter()).filter_map(|s| s.speedup).filter(|x| *x > 0.0).collect()),
        RESAMPLES,
        0.95,
        seed,
    );
    let best = |t: usize| by_task[t].iter().filter_map(|s| s.speedup).fold(None, |b: Option<f64>, x| Some(b.map_or(x, |b| b.max(x))));
    #[expect(clippy::cast_precision_loss)]
    let solved_rate = statistic_interval(n, |idx| Some(idx.iter().filter(|&&t| best(t).is_some()).count() as f64 / idx.len() as f64), RESAMPLES, 0.95, seed);
    let best_of_g_geomean = statistic_interval(n, |idx| geomean(idx.iter().filter_map(|&t| best(t)).filter(|x| *x > 0.0).collect()), RESAMPLES, 0.95, seed);
    HeldoutReport { tasks, samples_per_task: per_task, correct_rate, fast1_rate, geomean_speedup_of_correct, solved_rate, best_of_g_geomean, samples }
}

/// The share of the samples of tasks `idx` that `pick` holds for.
#[expect(clippy::cast_precision_loss)]
fn share(by_task: &[Vec<&SampleResult>], idx: &[usize], pick: impl Fn(&SampleResult) -> bool) -> Option<f64> {
    let all: Vec<&SampleResult> = idx.iter().flat_map(|&t| by_task[t].iter().copied()).collect();
    (!all.is_empty()).then(|| all.iter().filter(|s| pick(s)).count() as f64 / all.len() as f64)
}

impl HeldoutReport {
    /// The report without its per-sample rows (for summaries).
    pub fn summary(&self) -> Value {
        json!({
            "tasks": self.tasks,
            "samples_per_task": self.samples_per_task,
            "correct_rate": self.correct_rate,
            "fast1_rate": self.fast1_rate,
            "geomean_speedup_of_correct": self.geomean_speedup_of_correct,
            "solved_rate": self.solved_rate,
            "best_of_g_geomean": self.best_of_g_geomean,
            "with_program": self.samples.iter().filter(|s| s.has_program).count(),
            "truncated": self.samples.iter().filter(|s| s.truncated).count(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(task: &str, speedup: Option<f64>) -> SampleResult {
        SampleResult { task: task.into(), has_program: true, truncated: false, verdict: None, correct: speedup.is_some(), speedup }
    }

    #[test]
    fn rates_and_geomeans_follow_their_definitions() {
        let samples = vec![
            sample("a", Some(2.0)),
            sample("a", None),
            sample("b", Some(0.5)),
            sample("b", Some(0.5)),
            sample("c", None),
            sample("c", None),
        ];
        let r = report(3, 2, samples, 1);
        assert_eq!(r.correct_rate.unwrap().median, 0.5);
        assert!((r.fast1_rate.unwrap().median - 1.0 / 6.0).abs() < 1e-12);
        // Correct speedups 2, 0.5, 0.5: geomean (0.5)^(1/3).
        assert!((r.geomean_speedup_of_correct.unwrap().median - 0.5f64.powf(1.0 / 3.0)).abs() < 1e-12);
        assert!((r.solved_rate.unwrap().median - 2.0 / 3.0).abs() < 1e-12);
        // Best per solved task: 2 and 0.5, geomean 1.
        assert!((r.best_of_g_geomean.unwrap().median - 1.0).abs() < 1e-12);
    }
}

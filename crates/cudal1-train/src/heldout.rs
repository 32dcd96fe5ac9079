//! The held-out evaluation run after each stage, the same every time (same prompts, seeds and
//! sampling), so that stages compare: the share of samples that are executable and correct, the
//! share faster than the reference (fast_1), the geometric-mean speedup of the correct samples,
//! and the best of a task's G samples; each with a bootstrap interval over tasks.

use crate::data::task_messages;
use crate::kernels::{correct_speedup, judge_each};
use crate::policy::{Policy, Sampling};
use crate::{TrainError, TrainEvent};
use cudal1_eval::{Evaluator, JobOutcome, Mode};
use cudal1_search::{extract_program, normalized_hash, Language, Prompts};
use cudal1_stats::{statistic_interval, Interval};
use cudal1_task::Task;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::Arc;

/// One sample's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SampleResult {
    pub task: String,
    pub has_program: bool,
    pub truncated: bool,
    /// The verdict, when it was judged (`None`: no program, or not judged).
    pub verdict: Option<String>,
    pub correct: bool,
    pub speedup: Option<f64>,
    /// The program the reply held (to show one stage's program beside another's); absent in
    /// reports written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// It held a program that got no verdict: the machine failed (out of memory under it, or
    /// beside a policy that holds the GPU), its task's reference failed, or the run stopped. It
    /// is neither correct nor incorrect, and the statistics leave it out (`unjudged` counts it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unjudged: bool,
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

/// A generated reply, as the progress file keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Reply {
    prompt_index: usize,
    text: String,
    finish_reason: String,
}

/// A judged program, as the progress file keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Judged {
    item: usize,
    verdict: String,
    speedup: Option<f64>,
}

/// One line of the progress file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    /// What was asked: the first line; a file for anything else is started over.
    Asked(Value),
    Replies(Vec<Reply>),
    Judged(Judged),
}

/// Where a held-out evaluation keeps its replies and verdicts as they come (JSON lines), so that
/// a rerun after Ctrl-C or a crash generates nothing again and judges only what is missing; a
/// rerun of a finished one rebuilds its report at once.
pub struct Progress {
    path: PathBuf,
}

impl Progress {
    #[must_use]
    pub fn at(path: PathBuf) -> Progress {
        Progress { path }
    }

    /// What the file holds for `asked`: its replies, if they were all generated, and the verdicts.
    fn load(&self, asked: &Value) -> Result<(Option<Vec<Reply>>, Vec<Judged>), TrainError> {
        let Ok(text) = std::fs::read_to_string(&self.path) else { return Ok((None, Vec::new())) };
        let mut lines = text.lines().map(serde_json::from_str::<Line>);
        match lines.next() {
            Some(Ok(Line::Asked(a))) if a == *asked => {}
            _ => return Ok((None, Vec::new())),
        }
        let (mut replies, mut judged) = (None, Vec::new());
        // A line cut off by a crash is passed over.
        for line in lines.filter_map(Result::ok) {
            match line {
                Line::Replies(r) => replies = Some(r),
                Line::Judged(j) => judged.push(j),
                Line::Asked(_) => break,
            }
        }
        Ok((replies, judged))
    }

    fn start(&self, asked: &Value, replies: &[Reply]) -> Result<(), TrainError> {
        let mut text = serde_json::to_string(&Line::Asked(asked.clone())).expect("serialisable");
        text.push('\n');
        text.push_str(
            &serde_json::to_string(&Line::Replies(replies.to_vec())).expect("serialisable"),
        );
        text.push('\n');
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, text).map_err(TrainError::io("write", &tmp))?;
        std::fs::rename(&tmp, &self.path).map_err(TrainError::io("replace", &self.path))
    }

    fn append(&self, judged: &Judged) -> Result<(), TrainError> {
        use std::io::{Read, Seek, SeekFrom, Write};
        let io = TrainError::io("append to", &self.path);
        let mut f =
            std::fs::OpenOptions::new().read(true).append(true).open(&self.path).map_err(io)?;
        // A line a crash cut off is ended first, so that this one stands on its own.
        let mut last = [0u8; 1];
        let cut = f.seek(SeekFrom::End(-1)).is_ok()
            && f.read_exact(&mut last).is_ok()
            && last[0] != b'\n';
        let mut line = if cut { "\n".to_owned() } else { String::new() };
        line.push_str(&serde_json::to_string(&Line::Judged(judged.clone())).expect("serialisable"));
        line.push('\n');
        // One write: a line is whole or cut, never interleaved.
        f.write_all(line.as_bytes()).map_err(TrainError::io("append to", &self.path))
    }
}

/// Samples `per_task` replies for each task with fixed seeds and judges them (full mode).
/// `asked` names the policy and the evaluation settings; with `progress`, replies and verdicts of
/// an earlier run of the same `asked`, tasks, sampling, seed and prompt language are used again.
#[allow(clippy::too_many_arguments)]
pub fn evaluate(
    policy: &mut Policy,
    engine: &Evaluator,
    prompts: &Prompts,
    tasks: &[Arc<Task>],
    per_task: u32,
    sampling: Sampling,
    seed: u64,
    progress: Option<(&Progress, Value)>,
    on_event: &mut dyn FnMut(TrainEvent),
) -> Result<HeldoutReport, TrainError> {
    let asked = progress.as_ref().map(|(_, who)| {
        let mut asked = json!({
            "policy": who,
            "tasks": tasks.iter().map(|t| t.hash.clone()).collect::<Vec<_>>(),
            "per_task": per_task,
            "sampling": {"temperature": sampling.temperature, "top_p": sampling.top_p, "max_tokens": sampling.max_tokens},
            "seed": seed,
        });
        // Replies to prompts in another language are another evaluation's. Only a language
        // other than CUDA is written, so that evaluations made before languages existed resume.
        if prompts.asks_for() != Language::Cuda {
            asked["language"] = json!(prompts.asks_for().as_str());
        }
        asked
    });
    let (kept, judged) = match (&progress, &asked) {
        (Some((p, _)), Some(a)) => p.load(a)?,
        _ => (None, Vec::new()),
    };
    let replies = match kept {
        Some(r) => {
            on_event(TrainEvent::Reused {
                what: format!(
                    "{} replies and {} verdicts of an earlier run",
                    r.len(),
                    judged.len()
                ),
            });
            r
        }
        None => {
            let mut prompt_ids = Vec::with_capacity(tasks.len());
            for task in tasks {
                prompt_ids.push(policy.prompt_ids(&task_messages(prompts, task)?[0].content)?);
            }
            on_event(TrainEvent::Phase { step: 0, phase: "generate" });
            let samples = policy.generate(prompt_ids, per_task, sampling, seed)?;
            let replies: Vec<Reply> = samples
                .into_iter()
                .map(|s| Reply {
                    prompt_index: s.prompt_index,
                    text: s.text,
                    finish_reason: s.finish_reason,
                })
                .collect();
            if let (Some((p, _)), Some(a)) = (&progress, &asked) {
                p.start(a, &replies)?;
            }
            replies
        }
    };
    on_event(TrainEvent::Phase { step: 0, phase: "evaluate" });
    let mut results: Vec<SampleResult> = Vec::with_capacity(replies.len());
    let mut items = Vec::new();
    let mut item_of = Vec::new();
    for s in &replies {
        let task = tasks.get(s.prompt_index).ok_or_else(|| TrainError::Data {
            path: PathBuf::from("held-out progress"),
            line: 0,
            reason: format!("a reply names prompt {} of {}", s.prompt_index, tasks.len()),
        })?;
        let program = extract_program(&s.text).ok();
        results.push(SampleResult {
            task: task.key(),
            has_program: program.is_some(),
            truncated: s.finish_reason == "length",
            verdict: None,
            correct: false,
            speedup: None,
            program: program.clone(),
            unjudged: false,
        });
        match program {
            Some(code) => {
                item_of.push(Some(items.len()));
                items.push((Arc::clone(task), code, format!("held-out {}", task.key())));
            }
            None => item_of.push(None),
        }
    }
    // Verdicts kept from before; the rest are judged now, each kept as it comes.
    let mut verdicts: Vec<Option<(String, Option<f64>)>> = vec![None; items.len()];
    for j in judged.into_iter().filter(|j| j.item < items.len()) {
        verdicts[j.item] = Some((j.verdict, j.speedup));
    }
    let todo: Vec<usize> = (0..items.len()).filter(|&i| verdicts[i].is_none()).collect();
    let batch: Vec<_> = todo.iter().map(|&i| items[i].clone()).collect();
    // The engine judges each task and program once; every item that is that program is kept.
    let keys: Vec<(String, String)> =
        batch.iter().map(|(t, code, _)| (t.hash.clone(), normalized_hash(code))).collect();
    let same = |k: usize| (0..keys.len()).filter(|&m| keys[m] == keys[k]).collect::<Vec<_>>();
    let mut write_error = None;
    let outcomes = judge_each(
        engine,
        Mode::Full,
        &batch,
        &mut |k, outcome| {
            if let (JobOutcome::Evaluated(e), Some((p, _))) = (outcome, &progress) {
                for m in same(k) {
                    let j = Judged {
                        item: todo[m],
                        verdict: e.verdict.as_str().to_owned(),
                        speedup: correct_speedup(e),
                    };
                    if let Err(err) = p.append(&j) {
                        write_error.get_or_insert(err);
                    }
                }
            }
        },
        &mut |done, of| on_event(TrainEvent::Progress { done, of, what: "programs judged" }),
    );
    if let Some(e) = write_error {
        return Err(e);
    }
    for (k, outcome) in outcomes.iter().enumerate() {
        if let JobOutcome::Evaluated(e) = outcome {
            verdicts[todo[k]] = Some((e.verdict.as_str().to_owned(), correct_speedup(e)));
        }
    }
    for (r, i) in results.iter_mut().zip(item_of) {
        let Some(i) = i else { continue };
        match verdicts[i].clone() {
            Some((verdict, speedup)) => {
                r.verdict = Some(verdict);
                r.speedup = speedup;
                r.correct = speedup.is_some();
            }
            None => r.unjudged = true,
        }
    }
    Ok(report(tasks.len(), per_task, results, seed))
}

/// The statistics of judged samples, over `tasks` tasks of `per_task` samples each; a sample
/// with a program that got no verdict ([`SampleResult::unjudged`]) is left out, and a task with
/// no other sample with it.
pub fn report(tasks: usize, per_task: u32, samples: Vec<SampleResult>, seed: u64) -> HeldoutReport {
    let by_task: Vec<Vec<&SampleResult>> = {
        let judged = || samples.iter().filter(|s| !s.unjudged);
        let mut keys: Vec<&str> = judged().map(|s| s.task.as_str()).collect();
        keys.dedup();
        keys.iter().map(|k| judged().filter(|s| s.task == *k).collect()).collect()
    };
    let geomean = |xs: Vec<f64>| {
        #[expect(clippy::cast_precision_loss)]
        let n = xs.len() as f64;
        (!xs.is_empty()).then(|| (xs.iter().map(|x| x.ln()).sum::<f64>() / n).exp())
    };
    let n = by_task.len();
    let correct_rate =
        statistic_interval(n, |idx| share(&by_task, idx, |s| s.correct), RESAMPLES, 0.95, seed);
    let fast1_rate = statistic_interval(
        n,
        |idx| share(&by_task, idx, |s| s.correct && s.speedup.is_some_and(|x| x > 1.0)),
        RESAMPLES,
        0.95,
        seed,
    );
    let geomean_speedup_of_correct = statistic_interval(
        n,
        |idx| {
            geomean(
                idx.iter()
                    .flat_map(|&t| by_task[t].iter())
                    .filter_map(|s| s.speedup)
                    .filter(|x| *x > 0.0)
                    .collect(),
            )
        },
        RESAMPLES,
        0.95,
        seed,
    );
    let best = |t: usize| {
        by_task[t]
            .iter()
            .filter_map(|s| s.speedup)
            .fold(None, |b: Option<f64>, x| Some(b.map_or(x, |b| b.max(x))))
    };
    #[expect(clippy::cast_precision_loss)]
    let solved_rate = statistic_interval(
        n,
        |idx| Some(idx.iter().filter(|&&t| best(t).is_some()).count() as f64 / idx.len() as f64),
        RESAMPLES,
        0.95,
        seed,
    );
    let best_of_g_geomean = statistic_interval(
        n,
        |idx| geomean(idx.iter().filter_map(|&t| best(t)).filter(|x| *x > 0.0).collect()),
        RESAMPLES,
        0.95,
        seed,
    );
    HeldoutReport {
        tasks,
        samples_per_task: per_task,
        correct_rate,
        fast1_rate,
        geomean_speedup_of_correct,
        solved_rate,
        best_of_g_geomean,
        samples,
    }
}

/// The share of the samples of tasks `idx` that `pick` holds for.
#[expect(clippy::cast_precision_loss)]
fn share(
    by_task: &[Vec<&SampleResult>],
    idx: &[usize],
    pick: impl Fn(&SampleResult) -> bool,
) -> Option<f64> {
    let all: Vec<&SampleResult> = idx.iter().flat_map(|&t| by_task[t].iter().copied()).collect();
    (!all.is_empty()).then(|| all.iter().filter(|s| pick(s)).count() as f64 / all.len() as f64)
}

impl HeldoutReport {
    /// The summary of each group of tasks (`group_of` names a task's group from its key; tasks
    /// it names none are left out), e.g. the families trained on apart from those never seen.
    pub fn summaries_by(
        &self,
        group_of: &dyn Fn(&str) -> Option<String>,
        seed: u64,
    ) -> std::collections::BTreeMap<String, Value> {
        let mut groups: std::collections::BTreeMap<String, Vec<SampleResult>> =
            std::collections::BTreeMap::new();
        for s in &self.samples {
            if let Some(g) = group_of(&s.task) {
                groups.entry(g).or_default().push(s.clone());
            }
        }
        groups
            .into_iter()
            .map(|(g, samples)| {
                let mut tasks: Vec<&str> = samples.iter().map(|s| s.task.as_str()).collect();
                tasks.sort_unstable();
                tasks.dedup();
                let n = tasks.len();
                (g, report(n, self.samples_per_task, samples, seed).summary())
            })
            .collect()
    }

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
            "unjudged": self.samples.iter().filter(|s| s.unjudged).count(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn sample(task: &str, speedup: Option<f64>) -> SampleResult {
        SampleResult {
            task: task.into(),
            has_program: true,
            truncated: false,
            verdict: None,
            correct: speedup.is_some(),
            speedup,
            program: None,
            unjudged: false,
        }
    }

    #[test]
    fn a_program_that_got_no_verdict_is_left_out_of_every_statistic() {
        let unjudged = |task: &str| SampleResult { unjudged: true, ..sample(task, None) };
        // Task a: one correct at 2x, one unjudged; task c: unjudged alone.
        let samples = vec![sample("a", Some(2.0)), unjudged("a"), sample("b", None), unjudged("c")];
        let r = report(3, 2, samples, 1);
        // a is half of the judged (2 of 2 tasks' judged samples: a's one, b's one).
        assert_eq!(r.correct_rate.unwrap().median, 0.5);
        assert_eq!(r.solved_rate.unwrap().median, 0.5, "c has no judged sample: not a task here");
        assert_eq!(r.summary()["unjudged"], 2);
        // Counted as incorrect instead, a would be half correct and the rate a third.
        let as_wrong =
            report(3, 2, vec![sample("a", Some(2.0)), sample("a", None), sample("b", None)], 1);
        assert!(as_wrong.correct_rate.unwrap().median < 0.5);
        // In a report written out, the flag is there only where it is set.
        let v = serde_json::to_value(&r.samples).unwrap();
        assert_eq!((v[1]["unjudged"].as_bool(), v[0].get("unjudged")), (Some(true), None));
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
        assert!(
            (r.geomean_speedup_of_correct.unwrap().median - 0.5f64.powf(1.0 / 3.0)).abs() < 1e-12
        );
        assert!((r.solved_rate.unwrap().median - 2.0 / 3.0).abs() < 1e-12);
        // Best per solved task: 2 and 0.5, geomean 1.
        assert!((r.best_of_g_geomean.unwrap().median - 1.0).abs() < 1e-12);
        // By group: task c alone is one group, a and b the other; tasks of no group left out.
        let by = r.summaries_by(
            &|t: &str| match t {
                "c" => Some("unseen".to_owned()),
                "a" => Some("seen".to_owned()),
                _ => None,
            },
            1,
        );
        assert_eq!(by.len(), 2);
        assert_eq!(by["unseen"]["tasks"], 1);
        assert_eq!(by["unseen"]["correct_rate"]["median"], 0.0);
        assert_eq!(by["seen"]["correct_rate"]["median"], 0.5);
        assert_eq!(by["seen"]["fast1_rate"]["median"], 0.5);
    }

    #[test]
    fn progress_survives_a_line_cut_off_by_a_crash_and_is_only_for_what_was_asked() {
        let dir = tempfile::tempdir().unwrap();
        let progress = Progress::at(dir.path().join("p.jsonl"));
        let asked = json!({"seed": 1});
        let replies =
            vec![Reply { prompt_index: 0, text: "a".into(), finish_reason: "stop".into() }];
        progress.start(&asked, &replies).unwrap();
        progress
            .append(&Judged { item: 0, verdict: "correct".into(), speedup: Some(2.0) })
            .unwrap();
        // A crash mid-line, then a rerun appending after it.
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.path().join("p.jsonl"))
            .unwrap()
            .write_all(b"{\"judged\":{\"item\":1,\"ver")
            .unwrap();
        progress.append(&Judged { item: 2, verdict: "incorrect".into(), speedup: None }).unwrap();
        let (kept, judged) = progress.load(&asked).unwrap();
        assert_eq!(kept, Some(replies));
        assert_eq!(judged.iter().map(|j| j.item).collect::<Vec<_>>(), vec![0, 2]);
        let (kept, judged) = progress.load(&json!({"seed": 2})).unwrap();
        assert!(kept.is_none() && judged.is_empty(), "another evaluation starts over");
    }
}

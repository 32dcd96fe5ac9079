//! Judging programs with the evaluation engine, and [`KernelEnv`]: GRPO's environment over
//! KernelBench-format tasks, with CUDA-L1's contrastive prompts drawn from the store's program
//! database and rewards from measured speedups.

use crate::grpo::{Environment, GroupPrompt, Scored, Ticket};
use crate::TrainError;
use crossbeam_channel::{unbounded, Receiver};
use cudal1_eval::{
    Done, EngineConfig, Evaluation, Evaluator, Job, JobId, JobOutcome, Mode, Verdict,
};
use cudal1_model::messages::Sample;
use cudal1_search::{
    draw_prompt, extract_program, normalized_hash, Attempt, Exemplar, ExemplarSampler, Prompts,
    Variant,
};
use cudal1_store::{NewProgram, ProgramDatabase, ProgramKey};
use cudal1_task::{Candidate, Task};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// Evaluates programs through the engine, each distinct (task, normalised code) once per call.
pub fn judge(
    engine: &Evaluator,
    mode: Mode,
    items: &[(Arc<Task>, String, String)],
    on_progress: &mut dyn FnMut(usize, usize),
) -> Vec<JobOutcome> {
    judge_each(engine, mode, items, &mut |_, _| {}, on_progress)
}

/// [`judge`], telling `on_outcome` each item's outcome as it comes (items with the same task and
/// program share the first one's, and are told once, under the first one's index).
pub fn judge_each(
    engine: &Evaluator,
    mode: Mode,
    items: &[(Arc<Task>, String, String)],
    on_outcome: &mut dyn FnMut(usize, &JobOutcome),
    on_progress: &mut dyn FnMut(usize, usize),
) -> Vec<JobOutcome> {
    Judging::submit(engine, mode, items).collect(on_outcome, on_progress)
}

/// Programs submitted to the engine whose outcomes have not been collected yet: the engine
/// judges them while the caller does other work (the policy samples the next step).
pub struct Judging {
    done: Receiver<Done>,
    /// The item each job was submitted for.
    ids: HashMap<JobId, usize>,
    /// For each item, the item whose job judges it (itself, or the first with its program).
    of_item: Vec<usize>,
}

impl Judging {
    /// Submits each distinct (task, normalised code) of `items` once.
    pub fn submit(
        engine: &Evaluator,
        mode: Mode,
        items: &[(Arc<Task>, String, String)],
    ) -> Judging {
        let (tx, done) = unbounded();
        let mut first: HashMap<(String, String), usize> = HashMap::new();
        let mut of_item = Vec::with_capacity(items.len());
        let mut ids = HashMap::new();
        for (i, (task, code, label)) in items.iter().enumerate() {
            let key = (task.hash.clone(), normalized_hash(code));
            if let Some(&j) = first.get(&key) {
                of_item.push(j);
                continue;
            }
            first.insert(key, i);
            of_item.push(i);
            let id = engine.submit_to(
                Job::evaluate(
                    Arc::clone(task),
                    Candidate::from_source(label.clone(), code.clone()),
                )
                .mode(mode),
                &tx,
            );
            ids.insert(id, i);
        }
        Judging { done, ids, of_item }
    }

    /// Waits for every outcome, in the items' order.
    pub fn collect(
        self,
        on_outcome: &mut dyn FnMut(usize, &JobOutcome),
        on_progress: &mut dyn FnMut(usize, usize),
    ) -> Vec<JobOutcome> {
        let mut outcomes: Vec<Option<JobOutcome>> = vec![None; self.of_item.len()];
        let total = self.ids.len();
        for done in 0..total {
            let Ok(d) = self.done.recv() else { break };
            if let Some(&i) = self.ids.get(&d.id) {
                on_outcome(i, &d.outcome);
                outcomes[i] = Some(d.outcome);
            }
            on_progress(done + 1, total);
        }
        self.of_item.iter().map(|&j| outcomes[j].clone().unwrap_or(JobOutcome::Cancelled)).collect()
    }
}

/// The engine that judges a step's samples at the engine's full speed: pipelined, so that every
/// lane loads and checks samples side by side (a lane keeps the references of its last tasks
/// alive, so a step's samples of one task share them) and only the samples found correct take
/// the device alone, to be timed, each for `budget` (`train rl --reward-budget`, apart from the
/// held-out evaluation's).
#[must_use]
pub fn reward_engine(mut config: EngineConfig, budget: std::time::Duration) -> EngineConfig {
    config.settings.timing_budget = budget;
    config.pipeline = true;
    config
}

/// A correct evaluation's speedup (1.0 where it was not timed).
pub fn correct_speedup(e: &Evaluation) -> Option<f64> {
    (e.verdict == Verdict::Correct).then(|| e.speedup.map_or(1.0, |s| s.median))
}

/// What a correct program earns.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RewardKind {
    Speedup,
    Correct,
    /// Its speedup where at least `threshold` of its GPU time runs in kernels it built itself
    /// (the own-kernel share, `cudal1_eval::own`); below it, or unmeasured, its speedup capped
    /// at 1: a program fast only through library kernels gains nothing over the reference.
    SpeedupOwnKernels {
        threshold: f64,
    },
}

/// The own-kernel share a `speedup-own-kernels` reward asks for by default.
pub const OWN_SHARE_THRESHOLD: f64 = 0.5;

impl RewardKind {
    /// `speedup`, `correct` or `speedup-own-kernels` (with [`OWN_SHARE_THRESHOLD`]).
    pub fn parse(text: &str) -> Result<RewardKind, String> {
        match text {
            "speedup" => Ok(RewardKind::Speedup),
            "correct" => Ok(RewardKind::Correct),
            "speedup-own-kernels" => {
                Ok(RewardKind::SpeedupOwnKernels { threshold: OWN_SHARE_THRESHOLD })
            }
            _ => Err(format!(
                "unknown reward `{text}`: use `speedup`, `correct` or `speedup-own-kernels`"
            )),
        }
    }

    /// Whether scoring needs each correct program's own-kernel share.
    #[must_use]
    pub fn needs_own_share(self) -> bool {
        matches!(self, RewardKind::SpeedupOwnKernels { .. })
    }

    /// The reward of a program with `speedup` (`None`: not correct) and own-kernel share `own`
    /// (`None`: not measured).
    #[must_use]
    pub fn of(self, speedup: Option<f64>, own: Option<f64>, low: f64) -> f64 {
        match (self, speedup) {
            (RewardKind::Speedup, Some(s)) => s,
            (RewardKind::Correct, Some(_)) => 1.0,
            (RewardKind::SpeedupOwnKernels { threshold }, Some(s)) => {
                if own.is_some_and(|o| o >= threshold) {
                    s
                } else {
                    s.min(1.0)
                }
            }
            (_, None) => low,
        }
    }
}

/// Measures the own-kernel share of a correct program (a profile on the GPU): for the
/// `speedup-own-kernels` reward.
pub trait OwnShares {
    /// The share, 0 to 1, of `code` (a program of `task` the engine judged correct), or why
    /// there is none.
    fn own_share(&self, task: &Task, code: &str) -> Result<f64, String>;
}

/// GRPO over kernel tasks.
pub struct KernelEnv<'a> {
    pub tasks: Vec<Arc<Task>>,
    pub engine: &'a Evaluator,
    pub store: &'a dyn ProgramDatabase,
    pub prompts: &'a Prompts,
    pub sampler: ExemplarSampler,
    /// Earlier variants a prompt shows (CUDA-L1: 2).
    pub exemplars: usize,
    /// The reward of a program that is wrong, an exploit, unparsable or cut off.
    pub low_reward: f64,
    /// What a correct program earns: its measured speedup (CUDA-L1), or 1 whatever its speed
    /// (the control that shows what the speedup reward adds).
    pub reward: RewardKind,
    /// Where `speedup-own-kernels` gets its shares (none: unmeasured, so speedups are capped).
    pub own_shares: Option<&'a dyn OwnShares>,
    /// Names this run's programs in the store.
    pub run_id: String,
    /// With `turns` above 1: a trajectory ends at a correct program with at least this speedup.
    pub turn_target: f64,
    pub settings_hash: String,
    /// The order tasks are drawn in, refilled (shuffled) when used up.
    order: Vec<usize>,
    /// Scorings started and not yet finished, by ticket.
    pending: HashMap<u64, PendingScores>,
    next_ticket: u64,
}

impl<'a> KernelEnv<'a> {
    pub fn new(
        tasks: Vec<Arc<Task>>,
        engine: &'a Evaluator,
        store: &'a dyn ProgramDatabase,
        prompts: &'a Prompts,
        sampler: ExemplarSampler,
        exemplars: usize,
        run_id: String,
    ) -> KernelEnv<'a> {
        // Exemplars and stored rewards only from programs this build judged on this class of GPU.
        let settings_hash = engine.judge().settings_hash(engine.settings());
        KernelEnv {
            tasks,
            engine,
            store,
            prompts,
            sampler,
            exemplars,
            low_reward: 0.0,
            reward: RewardKind::Speedup,
            own_shares: None,
            run_id,
            turn_target: 1.0,
            settings_hash,
            order: Vec::new(),
            pending: HashMap::new(),
            next_ticket: 0,
        }
    }

    /// The own-kernel share of the stored program `id` (`code`, of `task`), measured now and
    /// recorded with it; `None` (a capped reward) where it cannot be measured.
    fn measure_own_share(&self, task: &Task, code: &str, id: i64) -> Option<f64> {
        let source = self.own_shares?;
        match source.own_share(task, code) {
            Ok(share) => {
                if let Err(e) = self.store.set_program_own_share(id, share) {
                    tracing::warn!(program = id, error = %e, "could not record an own-kernel share");
                }
                Some(share)
            }
            Err(e) => {
                tracing::warn!(program = id, task = %task.key(), error = %e, "no own-kernel share: its speedup is capped at 1");
                None
            }
        }
    }

    /// Programs of `task` that a prompt at `step` may show: those of other runs, and this run's
    /// from earlier steps.
    fn variants(&self, task: &Task, step: u64) -> Result<Vec<Variant>, TrainError> {
        Ok(self
            .store
            .programs_for_task(&task.hash, &self.settings_hash)?
            .into_iter()
            .filter(|p| p.run_id != self.run_id || u64::from(p.round) < step)
            .map(|p| Variant {
                id: p.id,
                speedup: (p.verdict == Verdict::Correct.as_str())
                    .then_some(p.speedup_median)
                    .flatten()
                    .filter(|s| s.is_finite()),
                code: p.code,
                profile: None,
            })
            .collect())
    }
}

impl Environment for KernelEnv<'_> {
    fn prompts(
        &mut self,
        step: u64,
        groups: usize,
        rng: &mut StdRng,
    ) -> Result<Vec<GroupPrompt>, TrainError> {
        let mut out = Vec::with_capacity(groups);
        for _ in 0..groups {
            if self.order.is_empty() {
                self.order = (0..self.tasks.len()).collect();
                self.order.shuffle(rng);
            }
            let task = Arc::clone(&self.tasks[self.order.pop().expect("refilled above")]);
            let drawn = draw_prompt(
                self.prompts,
                &task.source,
                &self.variants(&task, step)?,
                true,
                &self.sampler,
                self.exemplars,
                rng,
            )?;
            out.push(GroupPrompt { key: task.key(), prompt: drawn.prompt, info: json!({"task_hash": task.hash, "contrastive": drawn.contrastive, "shown": drawn.shown}) });
        }
        Ok(out)
    }

    fn score(
        &mut self,
        step: u64,
        prompts: &[GroupPrompt],
        samples: &[(usize, &Sample)],
    ) -> Result<Vec<Scored>, TrainError> {
        let ticket = self.start_scoring(step, prompts, samples)?;
        self.finish_scoring(ticket)
    }

    /// The refinement prompt (`refine.j2`): the exemplars the trajectory's first turn showed,
    /// then the sample's program with its verdict and reason; none once the program is correct
    /// with at least `turn_target`.
    fn next_turn(
        &mut self,
        _step: u64,
        prompt: &GroupPrompt,
        sample: &Sample,
        scored: &Scored,
    ) -> Result<Option<GroupPrompt>, TrainError> {
        if scored.correct && scored.speedup.is_some_and(|s| s >= self.turn_target) {
            return Ok(None);
        }
        let hash = prompt.info["task_hash"].as_str().unwrap_or_default();
        let task = Arc::clone(
            self.tasks
                .iter()
                .find(|t| t.hash == hash)
                .expect("prompts name tasks of this environment"),
        );
        let turn = prompt.info["turn"].as_u64().and_then(|t| u32::try_from(t).ok()).unwrap_or(1);
        let ids = |key: &str| -> Vec<i64> {
            prompt.info[key]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_i64).collect())
                .unwrap_or_default()
        };
        let exemplar_ids =
            if prompt.info.get("exemplars").is_some() { ids("exemplars") } else { ids("shown") };
        let mut exemplars = Vec::new();
        for id in &exemplar_ids {
            if let Some(p) = self.store.program(*id)? {
                if let Some(speedup) = p
                    .speedup_median
                    .filter(|s| p.verdict == Verdict::Correct.as_str() && s.is_finite())
                {
                    exemplars.push(Exemplar::measured(p.code, speedup));
                }
            }
        }
        let previous = scored.record["program_id"].as_i64();
        let attempt = match previous.map(|id| self.store.program(id)).transpose()?.flatten() {
            Some(p) => {
                let code = extract_program(&sample.text).unwrap_or_else(|_| p.code.clone());
                Attempt::judged(turn, code, &cudal1_optimize::judged(&p), None)
            }
            None => Attempt::without_program(turn, scored.record["detail"].as_str()),
        };
        let text = self.prompts.refine(&task.source, &exemplars, &attempt)?;
        let mut shown = exemplar_ids.clone();
        shown.extend(previous);
        let info = json!({"task_hash": task.hash, "contrastive": !exemplar_ids.is_empty(), "shown": shown, "exemplars": exemplar_ids, "turn": turn + 1});
        Ok(Some(GroupPrompt { key: prompt.key.clone(), prompt: text, info }))
    }

    /// Scores what needs no run at once (no program in the reply, a program measured before) and
    /// submits the rest to the engine; returns before the engine has judged them.
    fn start_scoring(
        &mut self,
        step: u64,
        prompts: &[GroupPrompt],
        samples: &[(usize, &Sample)],
    ) -> Result<Ticket, TrainError> {
        let task_of = |g: usize| -> Arc<Task> {
            let hash = prompts[g].info["task_hash"].as_str().unwrap_or_default();
            Arc::clone(
                self.tasks
                    .iter()
                    .find(|t| t.hash == hash)
                    .expect("prompts name tasks of this environment"),
            )
        };
        let mut scored: Vec<Option<Scored>> = vec![None; samples.len()];
        let mut to_judge: Vec<ToJudge> = Vec::new();
        for (i, (g, s)) in samples.iter().enumerate() {
            match extract_program(&s.text) {
                Ok(code) => {
                    let task = task_of(*g);
                    let key = ProgramKey {
                        task_hash: task.hash.clone(),
                        code_hash: normalized_hash(&code),
                        settings_hash: self.settings_hash.clone(),
                    };
                    // A program measured before (any run) is not measured again.
                    if let Some(p) = self.store.find_program(&key)? {
                        let correct = p.verdict == Verdict::Correct.as_str();
                        let speedup = p.speedup_median.filter(|_| correct);
                        let own = if correct && self.reward.needs_own_share() {
                            p.own_share.or_else(|| self.measure_own_share(&task, &code, p.id))
                        } else {
                            None
                        };
                        let reward = self.reward.of(
                            correct.then(|| speedup.unwrap_or(1.0)),
                            own,
                            self.low_reward,
                        );
                        scored[i] = Some(Scored {
                            reward: Some(reward),
                            correct,
                            speedup,
                            record: json!({"verdict": p.verdict, "reason": clipped(&p.reason), "findings": p.evaluation["measurements"]["findings"], "speedup_ci": [p.speedup_ci_low, p.speedup_ci_high], "program_id": p.id, "cached": true}),
                        });
                    } else {
                        let parent_ids = prompts[*g].info["shown"]
                            .as_array()
                            .map(|a| a.iter().filter_map(Value::as_i64).collect())
                            .unwrap_or_default();
                        let turn = prompts[*g].info["turn"]
                            .as_u64()
                            .and_then(|t| u32::try_from(t).ok())
                            .unwrap_or(1);
                        to_judge.push(ToJudge { sample: i, task, code, parent_ids, turn });
                    }
                }
                Err(e) => {
                    let why = if s.finish_reason == "length" {
                        "cut off before a complete program"
                    } else {
                        "no program in the reply"
                    };
                    scored[i] = Some(Scored {
                        reward: Some(self.low_reward),
                        correct: false,
                        speedup: None,
                        record: json!({"verdict": null, "no_program": why, "detail": e.to_string()}),
                    });
                }
            }
        }
        let items: Vec<(Arc<Task>, String, String)> = to_judge
            .iter()
            .map(|t| {
                (Arc::clone(&t.task), t.code.clone(), format!("rl step {step} sample {}", t.sample))
            })
            .collect();
        let judging = Judging::submit(self.engine, Mode::Full, &items);
        let id = self.next_ticket;
        self.next_ticket += 1;
        self.pending.insert(id, PendingScores { step, scored, to_judge, judging });
        Ok(Ticket::pending(id))
    }

    /// Waits for the engine's verdicts, saves each new program in the store, and scores it.
    fn finish_scoring(&mut self, ticket: Ticket) -> Result<Vec<Scored>, TrainError> {
        let id = match ticket.into_ready() {
            Ok(scores) => return Ok(scores),
            Err(id) => id,
        };
        let PendingScores { step, mut scored, to_judge, judging } =
            self.pending.remove(&id).ok_or_else(|| {
                TrainError::Config(format!("no scoring {id} is pending in this environment"))
            })?;
        let outcomes = judging.collect(&mut |_, _| {}, &mut |_, _| {});
        for (ToJudge { sample, task, code, parent_ids, turn }, outcome) in
            to_judge.into_iter().zip(outcomes)
        {
            scored[sample] = Some(match outcome {
                JobOutcome::Evaluated(e) => {
                    let speedup = correct_speedup(&e);
                    let key = ProgramKey {
                        task_hash: task.hash.clone(),
                        code_hash: normalized_hash(&code),
                        settings_hash: self.settings_hash.clone(),
                    };
                    let id = self.store.insert_program(&NewProgram {
                        key,
                        code: code.clone(),
                        run_id: self.run_id.clone(),
                        round: u32::try_from(step).unwrap_or(u32::MAX),
                        trajectory: None,
                        turn,
                        parent_ids,
                        verdict: e.verdict.as_str().to_owned(),
                        reason: e.reason.clone(),
                        reason_class: e.reason_class.clone(),
                        speedup_median: e.speedup.map(|s| s.median).filter(|x| x.is_finite()),
                        speedup_ci_low: e.speedup.map(|s| s.ci_low).filter(|x| x.is_finite()),
                        speedup_ci_high: e.speedup.map(|s| s.ci_high).filter(|x| x.is_finite()),
                        evaluation: serde_json::to_value(&*e).unwrap_or_default(),
                    })?;
                    let own = if speedup.is_some() && self.reward.needs_own_share() {
                        self.measure_own_share(&task, &code, id)
                    } else {
                        None
                    };
                    let reward = self.reward.of(speedup, own, self.low_reward);
                    Scored {
                        reward: Some(reward),
                        correct: speedup.is_some(),
                        speedup,
                        record: json!({"verdict": e.verdict, "reason_class": e.reason_class, "reason": clipped(&e.reason), "findings": e.measurements.findings, "speedup_ci": e.speedup.map(|s| [s.ci_low, s.ci_high]), "program_id": id, "cached": false}),
                    }
                }
                // The task's reference failed, or the run is stopping: not the sample's doing.
                other => Scored {
                    reward: None,
                    correct: false,
                    speedup: None,
                    record: json!({"verdict": null, "unscored": format!("{other:?}").chars().take(200).collect::<String>()}),
                },
            });
        }
        Ok(scored.into_iter().map(|s| s.expect("every sample is scored above")).collect())
    }
}

/// A verdict's reason as a sample's record keeps it (the store has it whole).
fn clipped(reason: &str) -> String {
    reason.chars().take(300).collect()
}

/// A sample whose program the engine judges.
struct ToJudge {
    sample: usize,
    task: Arc<Task>,
    code: String,
    /// The programs its prompt showed.
    parent_ids: Vec<i64>,
    /// Its turn in its trajectory (`train rl --turns`).
    turn: u32,
}

/// Scores started by [`Environment::start_scoring`] and not yet finished.
struct PendingScores {
    step: u64,
    scored: Vec<Option<Scored>>,
    to_judge: Vec<ToJudge>,
    judging: Judging,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_control_reward_pays_correctness_alone() {
        assert_eq!(RewardKind::Speedup.of(Some(2.5), None, 0.0), 2.5);
        assert_eq!(RewardKind::Correct.of(Some(2.5), None, 0.0), 1.0);
        assert_eq!(RewardKind::Correct.of(None, None, -1.0), -1.0);
        assert_eq!(RewardKind::parse("correct"), Ok(RewardKind::Correct));
        assert!(RewardKind::parse("fast").is_err());
    }

    #[test]
    fn a_speedup_from_library_kernels_alone_gains_nothing() {
        let r = RewardKind::parse("speedup-own-kernels").unwrap();
        assert_eq!(r, RewardKind::SpeedupOwnKernels { threshold: OWN_SHARE_THRESHOLD });
        assert!(r.needs_own_share() && !RewardKind::Speedup.needs_own_share());
        // Its own kernels do the work: the whole speedup.
        assert_eq!(r.of(Some(3.0), Some(0.95), 0.0), 3.0);
        assert_eq!(r.of(Some(3.0), Some(0.5), 0.0), 3.0, "at the threshold");
        // cuBLAS or PyTorch does the work (a share of 0, or below the threshold): no gain.
        assert_eq!(r.of(Some(3.0), Some(0.0), 0.0), 1.0);
        assert_eq!(r.of(Some(3.0), Some(0.49), 0.0), 1.0);
        // Unmeasured counts as library; a slower program keeps its (lower) speedup.
        assert_eq!(r.of(Some(3.0), None, 0.0), 1.0);
        assert_eq!(r.of(Some(0.8), Some(0.0), 0.0), 0.8);
        // Wrong is wrong.
        assert_eq!(r.of(None, Some(1.0), -1.0), -1.0);
        // The same speedup, own against library: the group sees the difference.
        assert!(r.of(Some(2.0), Some(1.0), 0.0) > r.of(Some(2.0), Some(0.1), 0.0));
    }
}

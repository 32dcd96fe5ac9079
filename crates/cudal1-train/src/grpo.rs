//! Stage 3: GRPO (CUDA-L1's contrastive RL), generic over where prompts and rewards come from.
//!
//! A step draws `groups` prompts from the [`Environment`] and samples `group_size` completions of
//! each (a group shares one identical prompt). The environment scores every completion: a reward,
//! or `None` when it could not be scored (an infrastructure failure), which leaves the sample out
//! of its group. Advantages are the group's rewards normalised by its mean and its spread, the
//! spread held at or above `std_floor` (timing noise must not become signal), and clipped to
//! `[-advantage_clip, advantage_clip]` (CUDA-L1: 1.5). A group whose scored rewards are all equal
//! carries no signal: it is dropped and another is drawn, up to `max_refills` times. The kept
//! samples then take `updates` PPO steps (at least two, so that the ratio clip acts) against the
//! log-probabilities of the policy that sampled them, with a KL penalty to the reference policy.
//!
//! With `turns` above 1 each sample is the first turn of a trajectory: the environment turns a
//! judged sample into the next turn's prompt (its verdict and reason shown), the policy writes
//! one completion for it, and so on up to `turns` programs or until the environment says the
//! trajectory is good enough. A turn's reward is its score plus the discounted scores of the
//! turns after it ([`crate::turns::turn_rewards`], Kevin's `gamma`), and advantages are normalised
//! per turn within the group (turn t against the group's other turn t's, as Dr. Kernel argues).
//!
//! With one GPU the phases run strictly in turn: the policy is idle while candidates are timed.
//! When the policy has a device of its own ([`GrpoConfig::overlap`]), the next step's first
//! groups are sampled while this step's are being judged: those samples come from the weights
//! before this step's update (one step off-policy, which the PPO ratio against their recorded
//! log-probabilities accounts for), and their prompts show the programs measured up to the step
//! before.

use crate::policy::{Peaks, Policy, Sampling};
use crate::run::RunDir;
use crate::turns::{turn_rewards, TurnAggregation};
use crate::{TrainError, TrainEvent};
use cudal1_model::messages::{
    Aggregation, Memory, Policy as Which, Sample, Sequence, StepKind, TrainStep, TrainStepReply,
};
use cudal1_search::group_advantages;
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use std::time::Instant;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GrpoConfig {
    pub steps: u64,
    /// Groups (prompts) per step.
    pub groups: usize,
    /// Samples per group (G).
    pub group_size: u32,
    /// PPO updates per batch (at least 2).
    pub updates: u32,
    pub sampling: Sampling,
    pub clip_low: f64,
    pub clip_high: f64,
    pub kl_coef: f64,
    pub std_floor: f64,
    pub advantage_clip: f64,
    pub aggregation: Aggregation,
    pub normalizer: Option<f64>,
    pub micro_batch: u32,
    pub max_grad_norm: Option<f64>,
    /// Draws of new groups to replace flat ones, per step.
    pub max_refills: usize,
    /// Commit (checkpoint) every this many steps, and after the last.
    pub save_every: u64,
    pub seed: u64,
    /// Programs per trajectory (`train rl --turns`); 1 is single-shot GRPO.
    #[serde(default = "one_turn", skip_serializing_if = "is_one")]
    pub turns: u32,
    /// How much a later turn's score adds to an earlier turn's reward, per turn (Kevin: 0.4).
    #[serde(default = "default_gamma", skip_serializing_if = "is_default_gamma")]
    pub turn_gamma: f64,
    /// Sample the next step's groups while this step's are judged. Only where the policy's
    /// device is not one that times candidates. A schedule, not a setting of the run: it is not
    /// saved with the run, and a run may resume with the other schedule.
    #[serde(skip)]
    pub overlap: bool,
    /// Train on groups whose rewards are all equal too, with advantage 0 (only the KL penalty
    /// moves them, and they count in the loss's token mean), as TRL's GRPO does, instead of
    /// dropping them and drawing others. With `max_refills` 0 every step trains on exactly
    /// `groups` x `group_size` samples, whatever the rewards: a step's full cost, even for a
    /// policy that writes no program yet.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_flat_groups: bool,
}

impl GrpoConfig {
    pub fn check(&self) -> Result<(), TrainError> {
        let bad = |what: &str| Err(TrainError::Config(what.to_owned()));
        if self.updates < 2 {
            return bad("`updates` must be at least 2, so that the PPO ratio clip acts");
        }
        if self.group_size < 2 {
            return bad("`group_size` must be at least 2: advantages are relative within a group");
        }
        if self.groups == 0 || self.steps == 0 || self.save_every == 0 {
            return bad("`groups`, `steps` and `save_every` must be positive");
        }
        if !(self.advantage_clip > 0.0 && self.std_floor >= 0.0 && self.kl_coef >= 0.0) {
            return bad(
                "`advantage_clip` must be positive, `std_floor` and `kl_coef` not negative",
            );
        }
        if self.turns == 0 || !(0.0..=1.0).contains(&self.turn_gamma) {
            return bad("`turns` must be at least 1 and `turn_gamma` within [0, 1]");
        }
        if self.turns > 1 && self.overlap {
            return bad("later turns are sampled after their first turn is judged: `turns` above 1 runs without overlap");
        }
        if self.aggregation == Aggregation::Fixed && self.normalizer.is_none_or(|n| n <= 0.0) {
            return bad("the `fixed` loss aggregation needs a positive `normalizer`");
        }
        Ok(())
    }
}

fn one_turn() -> u32 {
    1
}

fn default_gamma() -> f64 {
    0.4
}

// Runs recorded before turns existed are resumed under the same settings.
fn is_one(n: &u32) -> bool {
    *n == 1
}

fn is_default_gamma(g: &f64) -> bool {
    *g == default_gamma()
}

/// One group's prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupPrompt {
    /// What the group is about (a task's key), for records.
    pub key: String,
    pub prompt: String,
    /// Anything the environment wants in the sample records (exemplars shown, prompt kind).
    pub info: Value,
}

/// The environment's judgement of one completion.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// `None`: could not be scored; the sample is left out of its group.
    pub reward: Option<f64>,
    pub correct: bool,
    pub speedup: Option<f64>,
    /// Merged into the sample's line in `samples.jsonl`.
    pub record: Value,
}

/// Where prompts and rewards come from: the kernel tasks and the evaluator, or a script in tests.
pub trait Environment {
    fn prompts(
        &mut self,
        step: u64,
        groups: usize,
        rng: &mut StdRng,
    ) -> Result<Vec<GroupPrompt>, TrainError>;
    /// Scores `samples` (each with the index of its group in `prompts`), in order.
    fn score(
        &mut self,
        step: u64,
        prompts: &[GroupPrompt],
        samples: &[(usize, &Sample)],
    ) -> Result<Vec<Scored>, TrainError>;

    /// Starts scoring `samples`; [`Environment::finish_scoring`] returns the scores. An
    /// environment that judges elsewhere (the evaluation engine) returns at once, so that the
    /// policy can sample meanwhile; by default the scores are made here.
    fn start_scoring(
        &mut self,
        step: u64,
        prompts: &[GroupPrompt],
        samples: &[(usize, &Sample)],
    ) -> Result<Ticket, TrainError> {
        self.score(step, prompts, samples).map(Ticket::ready)
    }

    /// The prompt of the next turn of a trajectory whose last turn answered `prompt` with
    /// `sample`, judged `scored`; `None` ends the trajectory (its program is good enough).
    /// Environments without refinement turns refuse.
    fn next_turn(
        &mut self,
        step: u64,
        prompt: &GroupPrompt,
        sample: &Sample,
        scored: &Scored,
    ) -> Result<Option<GroupPrompt>, TrainError> {
        let _ = (step, prompt, sample, scored);
        Err(TrainError::Config(
            "this environment has no refinement turns: run with `turns` 1".to_owned(),
        ))
    }

    /// Waits for the scores a [`Ticket`] stands for, in the order of its samples.
    fn finish_scoring(&mut self, ticket: Ticket) -> Result<Vec<Scored>, TrainError> {
        ticket.into_ready().map_err(|id| {
            TrainError::Config(format!(
                "scoring {id} was started elsewhere: this environment has no scores pending"
            ))
        })
    }
}

/// Scores being made: ready, or pending in the environment that started them under an id.
#[derive(Debug)]
pub struct Ticket(Pending);

#[derive(Debug)]
enum Pending {
    Ready(Vec<Scored>),
    Elsewhere(u64),
}

impl Ticket {
    pub fn ready(scores: Vec<Scored>) -> Ticket {
        Ticket(Pending::Ready(scores))
    }

    /// Scores the environment keeps under `id` until they are asked for.
    pub fn pending(id: u64) -> Ticket {
        Ticket(Pending::Elsewhere(id))
    }

    /// The scores, or the id of the pending ones.
    pub fn into_ready(self) -> Result<Vec<Scored>, u64> {
        match self.0 {
            Pending::Ready(v) => Ok(v),
            Pending::Elsewhere(id) => Err(id),
        }
    }
}

/// A seed for step `step`, attempt `attempt` (SplitMix64 of the mix).
pub(crate) fn step_seed(seed: u64, step: u64, attempt: u64) -> u64 {
    let mut z = seed
        ^ step.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ attempt.wrapping_mul(0xd1b5_4a32_d192_ed03);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) >> 11
}

/// What `run` did.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpoSummary {
    pub first_step: u64,
    pub last_step: u64,
    pub metrics: Vec<Value>,
}

/// Runs (or resumes) GRPO until `config.steps` or until `stop` returns true between steps.
pub fn run(
    policy: &mut Policy,
    env: &mut dyn Environment,
    config: &GrpoConfig,
    run: &RunDir,
    resume_from: u64,
    stop: &dyn Fn() -> bool,
    on_event: &mut dyn FnMut(TrainEvent),
) -> Result<GrpoSummary, TrainError> {
    run_evaluating(policy, env, config, run, resume_from, stop, on_event, None)
}

/// What evaluates the policy during a run (the held-out tasks): called with the policy as of
/// step `step`, once that step is committed, and the stage's event sink.
pub type Evaluate<'a> =
    dyn FnMut(&mut Policy, u64, &mut dyn FnMut(TrainEvent)) -> Result<(), TrainError> + 'a;

/// Evaluations during a run: every `every` steps and after the last step.
pub struct Evaluations<'a, 'b> {
    pub every: u64,
    pub evaluate: &'b mut Evaluate<'a>,
}

impl Evaluations<'_, '_> {
    /// Whether step `step` of a run of `steps` is evaluated.
    #[must_use]
    pub fn due(&self, step: u64, steps: u64) -> bool {
        step > 0 && (step % self.every.max(1) == 0 || step == steps)
    }
}

/// [`run`], with `evaluations`: each due step is committed (whatever `save_every` says) and then
/// evaluated. The evaluation is the caller's to keep; a run resumed at a due step calls it
/// again for that step first (a stop may have come before it finished), so it should reuse what
/// an earlier call finished.
#[expect(clippy::too_many_arguments)]
pub fn run_evaluating(
    policy: &mut Policy,
    env: &mut dyn Environment,
    config: &GrpoConfig,
    run: &RunDir,
    resume_from: u64,
    stop: &dyn Fn() -> bool,
    on_event: &mut dyn FnMut(TrainEvent),
    mut evaluations: Option<Evaluations<'_, '_>>,
) -> Result<GrpoSummary, TrainError> {
    config.check()?;
    if let Some(e) = &mut evaluations {
        if e.due(resume_from, config.steps) && !stop() {
            on_event(TrainEvent::Phase { step: resume_from, phase: "held-out evaluation" });
            (e.evaluate)(policy, resume_from, on_event)?;
        }
    }
    let mut metrics = Vec::new();
    let mut last = resume_from;
    let mut committed = resume_from;
    // The next step's first draw, sampled while this step was judged (the overlapped schedule).
    // A stop drops it: a resumed run samples that step again with the committed weights.
    let mut ahead: Option<Drawn> = None;
    // Each step reports the memory peaks of its own wall time.
    policy.take_peaks();
    for step in resume_from + 1..=config.steps {
        if stop() {
            break;
        }
        on_event(TrainEvent::StepStarted { step, of: config.steps });
        let started = Instant::now();
        let first = match ahead.take() {
            Some(drawn) => drawn,
            None => {
                on_event(TrainEvent::Phase { step, phase: "generate" });
                first_draw(policy, env, config, step)?
            }
        };
        let look_ahead = config.overlap && step < config.steps && !stop();
        let (mut line, next) = one_step(policy, env, config, run, first, look_ahead, on_event)?;
        ahead = next;
        line["seconds"]["step"] = json!(started.elapsed().as_secs_f64());
        run.record_metrics(&line)?;
        let evaluated = evaluations.as_ref().is_some_and(|e| e.due(step, config.steps));
        if step % config.save_every == 0 || step == config.steps || evaluated {
            run.commit(policy, step, Value::Null)?;
            committed = step;
            on_event(TrainEvent::Committed { step });
        }
        on_event(TrainEvent::StepFinished { step, metrics: line.clone() });
        metrics.push(line);
        last = step;
        if let Some(e) = evaluations.as_mut().filter(|_| evaluated && !stop()) {
            on_event(TrainEvent::Phase { step, phase: "held-out evaluation" });
            (e.evaluate)(policy, step, on_event)?;
        }
    }
    // A stop between commits: commit what was done, so that nothing is redone.
    if last > committed {
        run.commit(policy, last, Value::Null)?;
        on_event(TrainEvent::Committed { step: last });
    }
    Ok(GrpoSummary { first_step: resume_from + 1, last_step: last, metrics })
}

/// One draw of groups for a step: their prompts and the policy's samples.
struct Drawn {
    step: u64,
    attempt: u64,
    /// Where the step's prompts are drawn from; a refill draws on from here.
    rng: StdRng,
    prompts: Vec<GroupPrompt>,
    ids: Vec<Vec<u32>>,
    samples: Vec<Sample>,
    /// Wall time spent sampling.
    seconds: f64,
    /// Sampled during the step before, while its programs were judged.
    ahead: bool,
}

/// Draws `need` prompts for `step` and samples a group of each.
fn draw(
    policy: &mut Policy,
    env: &mut dyn Environment,
    config: &GrpoConfig,
    step: u64,
    attempt: u64,
    need: usize,
    mut rng: StdRng,
) -> Result<Drawn, TrainError> {
    let started = Instant::now();
    let prompts = env.prompts(step, need, &mut rng)?;
    let mut ids = Vec::with_capacity(prompts.len());
    for p in &prompts {
        ids.push(policy.prompt_ids(&p.prompt)?);
    }
    let samples = policy.generate(
        ids.clone(),
        config.group_size,
        config.sampling,
        step_seed(config.seed, step, attempt + 1),
    )?;
    Ok(Drawn {
        step,
        attempt,
        rng,
        prompts,
        ids,
        samples,
        seconds: started.elapsed().as_secs_f64(),
        ahead: false,
    })
}

/// A step's first draw: all its groups, prompts drawn from the step's own seed. The same whether
/// it is sampled at the step's turn or ahead of it.
fn first_draw(
    policy: &mut Policy,
    env: &mut dyn Environment,
    config: &GrpoConfig,
    step: u64,
) -> Result<Drawn, TrainError> {
    draw(
        policy,
        env,
        config,
        step,
        0,
        config.groups,
        StdRng::seed_from_u64(step_seed(config.seed, step, 0)),
    )
}

/// A later turn of a trajectory: its prompt (and the prompt's tokens), the policy's completion
/// and the environment's judgement.
struct Turn {
    prompt: GroupPrompt,
    ids: Vec<u32>,
    sample: Sample,
    scored: Scored,
}

/// Turns 2..=`turns` of each sample's trajectory, in order; a trajectory ends when the
/// environment gives no next prompt or a turn could not be scored.
#[expect(clippy::too_many_arguments)]
fn later_turns(
    policy: &mut Policy,
    env: &mut dyn Environment,
    config: &GrpoConfig,
    step: u64,
    attempt: u64,
    prompts: &[GroupPrompt],
    samples: &[Sample],
    scored: &[Scored],
    on_event: &mut dyn FnMut(TrainEvent),
) -> Result<Vec<Vec<Turn>>, TrainError> {
    let mut out: Vec<Vec<Turn>> = samples.iter().map(|_| Vec::new()).collect();
    for turn in 2..=config.turns {
        let mut next: Vec<(usize, GroupPrompt)> = Vec::new();
        for (i, first) in samples.iter().enumerate() {
            // Only trajectories that reached the turn before.
            if out[i].len() + 2 != turn as usize {
                continue;
            }
            let (prompt, sample, judged) = match out[i].last() {
                Some(t) => (&t.prompt, &t.sample, &t.scored),
                None => (&prompts[first.prompt_index], first, &scored[i]),
            };
            if judged.reward.is_none() {
                continue;
            }
            if let Some(p) = env.next_turn(step, prompt, sample, judged)? {
                next.push((i, p));
            }
        }
        if next.is_empty() {
            break;
        }
        on_event(TrainEvent::Phase { step, phase: "generate turn" });
        let ids = next
            .iter()
            .map(|(_, p)| policy.prompt_ids(&p.prompt))
            .collect::<Result<Vec<_>, _>>()?;
        let seed = step_seed(
            config.seed ^ u64::from(turn).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            step,
            attempt + 1,
        );
        let got = policy.generate(ids.clone(), 1, config.sampling, seed)?;
        on_event(TrainEvent::Phase { step, phase: "evaluate turn" });
        let turn_prompts: Vec<GroupPrompt> = next.iter().map(|(_, p)| p.clone()).collect();
        let indexed: Vec<(usize, &Sample)> = got.iter().map(|s| (s.prompt_index, s)).collect();
        let judged = env.score(step, &turn_prompts, &indexed)?;
        for (sample, scored) in got.into_iter().zip(judged) {
            let k = sample.prompt_index;
            let (i, prompt) = &next[k];
            out[*i].push(Turn { prompt: prompt.clone(), ids: ids[k].clone(), sample, scored });
        }
    }
    Ok(out)
}

/// Each turn's reward of one trajectory: its score plus the discounted scores of the turns
/// after it, up to the first turn that could not be scored (`None` from there on).
fn trajectory_rewards(scores: &[Option<f64>], gamma: f64) -> Vec<Option<f64>> {
    let scored: Vec<f64> = scores.iter().map_while(|s| *s).collect();
    let mut rewards: Vec<Option<f64>> =
        turn_rewards(&scored, gamma, TurnAggregation::Sum).into_iter().map(Some).collect();
    rewards.resize(scores.len(), None);
    rewards
}

/// Judges the step's first draw (and refills of groups without signal), then updates the policy.
/// With `look_ahead`, the next step's first draw is sampled while the first draw is judged, and
/// returned.
fn one_step(
    policy: &mut Policy,
    env: &mut dyn Environment,
    config: &GrpoConfig,
    run: &RunDir,
    first: Drawn,
    look_ahead: bool,
    on_event: &mut dyn FnMut(TrainEvent),
) -> Result<(Value, Option<Drawn>), TrainError> {
    let step = first.step;
    let sampled_ahead = first.ahead;
    let (mut t_generate, mut t_evaluate, mut t_ahead) = (0.0f64, 0.0f64, 0.0f64);
    let mut sequences: Vec<Sequence> = Vec::new();
    let mut kept_groups = 0usize;
    let (mut dropped, mut unscored, mut samples_total) = (0usize, 0usize, 0usize);
    let (mut rewards, mut correct, mut fast, mut best) = (Vec::new(), 0usize, 0usize, None::<f64>);
    let mut records = Vec::new();
    let mut drawn_groups = 0usize;
    let (mut flat_kept, mut generated) = (0usize, 0usize);
    let mut prompt_lengths: Vec<usize> = Vec::new();
    let (mut later_total, mut later_correct) = (0usize, 0usize);
    let mut next = None;
    let mut current = Some(first);
    while let Some(Drawn { attempt, rng, prompts, ids, samples, seconds, .. }) = current.take() {
        t_generate += seconds;
        generated += samples.iter().map(|s| s.ids.len()).sum::<usize>();
        prompt_lengths.extend(ids.iter().map(Vec::len));
        let started = Instant::now();
        on_event(TrainEvent::Phase { step, phase: "evaluate" });
        let indexed: Vec<(usize, &Sample)> = samples.iter().map(|s| (s.prompt_index, s)).collect();
        let ticket = env.start_scoring(step, &prompts, &indexed)?;
        if look_ahead && attempt == 0 {
            // The policy samples the next step while this step's programs are judged.
            on_event(TrainEvent::Phase { step, phase: "generate next" });
            let mut ahead = first_draw(policy, env, config, step + 1)?;
            ahead.ahead = true;
            t_ahead = ahead.seconds;
            next = Some(ahead);
        }
        let scored = env.finish_scoring(ticket)?;
        let later = if config.turns > 1 {
            later_turns(policy, env, config, step, attempt, &prompts, &samples, &scored, on_event)?
        } else {
            samples.iter().map(|_| Vec::new()).collect()
        };
        t_evaluate += started.elapsed().as_secs_f64();
        samples_total += samples.len();
        later_total += later.iter().map(Vec::len).sum::<usize>();
        later_correct += later.iter().flatten().filter(|t| t.scored.correct).count();

        for (g, prompt) in prompts.iter().enumerate() {
            let members: Vec<usize> =
                (0..samples.len()).filter(|&i| samples[i].prompt_index == g).collect();
            // Each member's turn rewards, then the group's advantages turn by turn.
            let returns: Vec<Vec<Option<f64>>> = members
                .iter()
                .map(|&i| {
                    let scores: Vec<Option<f64>> = std::iter::once(scored[i].reward)
                        .chain(later[i].iter().map(|t| t.scored.reward))
                        .collect();
                    trajectory_rewards(&scores, config.turn_gamma)
                })
                .collect();
            let depth = returns.iter().map(Vec::len).max().unwrap_or(1);
            let mut flat = false;
            let per_turn: Vec<Option<Vec<Option<f64>>>> = (0..depth)
                .map(|t| {
                    let at: Vec<Option<f64>> =
                        returns.iter().map(|r| r.get(t).copied().flatten()).collect();
                    group_advantages(&at, config.std_floor, config.advantage_clip).or_else(|| {
                        let zeros: Vec<Option<f64>> =
                            at.iter().map(|r| r.filter(|x| x.is_finite()).map(|_| 0.0)).collect();
                        let keep = config.keep_flat_groups && zeros.iter().any(Option::is_some);
                        flat |= keep && t == 0;
                        keep.then_some(zeros)
                    })
                })
                .collect();
            let advantages = per_turn[0].clone();
            let signal = per_turn.iter().any(Option::is_some);
            flat_kept += usize::from(flat);
            for (k, &i) in members.iter().enumerate() {
                let s = &samples[i];
                let sc = &scored[i];
                match sc.reward {
                    Some(r) => rewards.push(r),
                    None => unscored += 1,
                }
                correct += usize::from(sc.correct);
                fast += usize::from(sc.correct && sc.speedup.is_some_and(|x| x > 1.0));
                if sc.correct {
                    best = match (best, sc.speedup) {
                        (Some(b), Some(x)) => Some(b.max(x)),
                        (b, x) => b.or(x),
                    };
                }
                let advantage = advantages.as_ref().and_then(|a| a[k]);
                let mut record = json!({
                    "step": step, "attempt": attempt, "group": drawn_groups + g, "key": prompt.key, "info": prompt.info,
                    "text": s.text, "tokens": s.ids.len(), "finish_reason": s.finish_reason,
                    "reward": sc.reward, "advantage": advantage, "kept": signal,
                    "sampled_ahead": attempt == 0 && sampled_ahead,
                });
                if config.turns > 1 {
                    record["turn"] = json!(1);
                    record["trajectory"] = json!(k);
                    record["turn_reward"] = json!(returns[k][0]);
                }
                if let (Value::Object(r), Value::Object(extra)) = (&mut record, &sc.record) {
                    r.extend(extra.clone());
                }
                records.push(record);
                if let Some(a) = advantage {
                    if !s.ids.is_empty() {
                        let mut seq = Sequence::new(ids[g].clone(), s.ids.clone());
                        seq.advantage = Some(a);
                        seq.old_logprobs = Some(s.logprobs.clone());
                        sequences.push(seq);
                    }
                }
                for (n, t) in later[i].iter().enumerate() {
                    let advantage = per_turn[n + 1].as_ref().and_then(|a| a[k]);
                    let mut record = json!({
                        "step": step, "attempt": attempt, "group": drawn_groups + g, "key": t.prompt.key, "info": t.prompt.info,
                        "text": t.sample.text, "tokens": t.sample.ids.len(), "finish_reason": t.sample.finish_reason,
                        "reward": t.scored.reward, "advantage": advantage, "kept": signal, "sampled_ahead": false,
                        "turn": n + 2, "trajectory": k, "turn_reward": returns[k][n + 1],
                    });
                    if let (Value::Object(r), Value::Object(extra)) =
                        (&mut record, &t.scored.record)
                    {
                        r.extend(extra.clone());
                    }
                    records.push(record);
                    if let Some(a) = advantage.filter(|_| !t.sample.ids.is_empty()) {
                        let mut seq = Sequence::new(t.ids.clone(), t.sample.ids.clone());
                        seq.advantage = Some(a);
                        seq.old_logprobs = Some(t.sample.logprobs.clone());
                        sequences.push(seq);
                    }
                }
            }
            if signal {
                kept_groups += 1;
            } else {
                dropped += 1;
            }
        }
        drawn_groups += prompts.len();
        let need = config.groups - kept_groups;
        if need > 0 && attempt < config.max_refills as u64 {
            on_event(TrainEvent::Phase { step, phase: "generate" });
            current = Some(draw(policy, env, config, step, attempt + 1, need, rng)?);
        }
    }
    run.record_samples(&records)?;

    let started = Instant::now();
    on_event(TrainEvent::Phase { step, phase: "train" });
    let mut stats: Vec<TrainStepReply> = Vec::new();
    if !sequences.is_empty() {
        if config.kl_coef > 0.0 {
            let reference = policy.logprobs(
                sequences.clone(),
                Which::Reference,
                config.sampling.temperature,
            )?;
            for (s, r) in sequences.iter_mut().zip(reference) {
                s.ref_logprobs = Some(r);
            }
        }
        for _ in 0..config.updates {
            let req = TrainStep {
                kind: StepKind::Pg,
                sequences: sequences.clone(),
                aggregation: config.aggregation,
                normalizer: config.normalizer,
                clip_low: config.clip_low,
                clip_high: config.clip_high,
                kl_coef: config.kl_coef,
                temperature: config.sampling.temperature,
                micro_batch: config.micro_batch,
                max_grad_norm: config.max_grad_norm,
            };
            stats.push(policy.step(&req)?);
        }
    } else {
        tracing::warn!(step, dropped, "no group carried signal this step: no update");
    }
    let t_train = started.elapsed().as_secs_f64();

    #[expect(clippy::cast_precision_loss)]
    let mean = |xs: &[f64]| {
        if xs.is_empty() {
            None
        } else {
            Some(xs.iter().sum::<f64>() / xs.len() as f64)
        }
    };
    let reward_mean = mean(&rewards);
    let reward_std = reward_mean.map(|m| {
        (rewards.iter().map(|r| (r - m).powi(2)).sum::<f64>() / rewards.len() as f64).sqrt()
    });
    let last = stats.last();
    let peaks = policy.take_peaks();
    let ratio = |n: usize| if samples_total == 0 { 0.0 } else { n as f64 / samples_total as f64 };
    let line = json!({
        "step": step,
        "reward_mean": reward_mean,
        "reward_std": reward_std,
        "correct_rate": ratio(correct),
        "fast1_rate": ratio(fast),
        "best_speedup": best,
        "loss": last.map(|s| s.loss),
        "kl": last.map(|s| s.kl),
        "clip_fraction": last.map(|s| s.clip_fraction),
        "entropy": stats.first().map(|s| s.entropy),
        "grad_norm": last.map(|s| s.grad_norm),
        "tokens": stats.first().map_or(0, |s| s.tokens),
        "samples": samples_total,
        "later_turns": later_total,
        "later_correct": later_correct,
        "groups": kept_groups,
        "groups_dropped": dropped,
        "groups_flat_kept": flat_kept,
        "unscored": unscored,
        "updates": stats.len(),
        "seconds": {"generate": t_generate, "evaluate": t_evaluate, "train": t_train, "generate_next": t_ahead},
        "sampled_ahead": sampled_ahead,
        "generated_tokens": generated,
        "prompt_tokens": {
            "mean": (!prompt_lengths.is_empty()).then(|| prompt_lengths.iter().sum::<usize>() as f64 / prompt_lengths.len() as f64),
            "max": prompt_lengths.iter().max(),
        },
        "generate_tokens_per_s": (t_generate > 0.0).then(|| generated as f64 / t_generate),
        "decoder": policy.decoder(),
        "adapter": policy.adapter(),
        "peak_memory": peak_memory(&peaks),
    });
    Ok((line, next))
}

/// A step's `peak_memory`: the policy worker's peaks while it sampled (`generate_bytes`) and
/// while it scored and trained (`train_bytes`) during the step's wall time (with the overlapped
/// schedule, sampling the next step counts in this one), the larger of the two (`peak_bytes`), the
/// most the allocator reserved (`reserved_bytes`) and the device's size; null when the worker
/// reported nothing.
fn peak_memory(peaks: &Peaks) -> Value {
    let both = [&peaks.generate, &peaks.train];
    let Some(any) = both.iter().find_map(|m| m.as_ref()) else {
        return Value::Null;
    };
    let bytes = |m: &Option<Memory>| m.as_ref().map(|m| m.peak_bytes);
    json!({
        "device": any.device,
        "measure": any.measure,
        "generate_bytes": bytes(&peaks.generate),
        "train_bytes": bytes(&peaks.train),
        "peak_bytes": both.iter().filter_map(|m| bytes(m)).max(),
        "reserved_bytes": both.iter().filter_map(|m| m.as_ref().and_then(|m| m.reserved_bytes)).max(),
        "total_bytes": any.total_bytes,
    })
}

/// The metrics `cudal1 train rl` both plots and reports after each step.
const HEADLINE: [&str; 6] =
    ["reward_mean", "correct_rate", "fast1_rate", "best_speedup", "kl", "clip_fraction"];

/// The metrics `cudal1 train rl` plots.
pub const PLOTTED: [&str; 10] =
    joined(HEADLINE, ["entropy", "grad_norm", "seconds.generate", "seconds.evaluate"]);

/// The metrics `cudal1 train rl` reports in its line after each step.
pub const REPORTED: [&str; 7] = joined(HEADLINE, ["generate_tokens_per_s"]);

/// `a` followed by `b` (`C` must be their lengths' sum; a wrong one fails to compile).
const fn joined<const A: usize, const B: usize, const C: usize>(
    a: [&'static str; A],
    b: [&'static str; B],
) -> [&'static str; C] {
    assert!(A + B == C, "the joined length must be the sum of the parts' lengths");
    let mut out = [""; C];
    let mut i = 0;
    while i < C {
        out[i] = if i < A { a[i] } else { b[i - A] };
        i += 1;
    }
    out
}

//! [`Optimizer::run`]: rounds of samples for one task. Each round plans its prompts, lets the
//! generator pool send them, records every reply as it arrives, sends each new program to the
//! evaluator at once, and finishes when every sample is recorded and every evaluation is back.
//! Everything is written to the store as it happens, so a crash or Ctrl-C resumes from there.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::{never, select, unbounded, Receiver, Sender};
use cudal1_eval::{Done, Evaluator, Job, JobId, JobOutcome, Verdict};
use cudal1_llm::{Completion, Llm, LlmError};
use cudal1_search::{
    extract_program, normalized_hash, ExemplarSampler, Language, Prompts, Written,
};
use cudal1_store::{
    NewProgram, NewRound, NewRun, NewSample, ProgramDatabase, ProgramKey, Store, StoredProgram,
    StoredSample,
};
use cudal1_task::{content_hash, Candidate, Task};
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::generate::{self, Gate, Generated, Sampling};
use crate::plan::{plan_round, plan_turns, sample_seed, PlanInput, Planned};
use crate::stop::{self, Budget, Spend, StopReason};
use crate::summary::{self, Invocation, RunSummary};
use crate::tally::{correct_speedup, index_programs, round_totals, Outcome, ProgramIndex};
use crate::turns::{next_turns, trajectory_id, NextTurn};
use crate::{Event, OptimizeConfig, OptimizeError};

/// Everything a run needs. One optimizer can run several tasks in turn.
pub struct Optimizer<'a> {
    pub llm: &'a dyn Llm,
    pub prompts: &'a Prompts,
    pub store: &'a Store,
    /// Every program is judged by this engine (the one device loop); the run's jobs are its own,
    /// other users may share it.
    pub engine: &'a Evaluator,
    pub config: &'a OptimizeConfig,
    /// Set once (Ctrl-C): no new requests, evaluations under way finish, the round resumes later.
    pub cancel: &'a AtomicBool,
    /// Where prompts' Nsight Compute profiles come from (`--profile`); `None` shows none.
    pub profiles: Option<&'a dyn Profiles>,
}

/// Nsight Compute briefs for prompts (`optimize --profile`). Called while a round is planned,
/// when none of the run's evaluations is under way, so that a profile never runs beside the run's
/// timing. An error is shown as an event and the prompt goes without that profile.
pub trait Profiles {
    /// The brief of the task's reference.
    fn reference(&self, task: &Task) -> Result<String, String>;
    /// The brief of one of the task's programs.
    fn program(&self, task: &Task, program: &StoredProgram) -> Result<String, String>;
}

/// The run id: the same task, evaluation settings, output label and prompt language continue the
/// same run. A CUDA run's id is what it was before languages existed, so those runs resume.
pub fn run_id(task_hash: &str, settings_hash: &str, label: &str, language: Language) -> String {
    let key = match language {
        Language::Cuda => format!("{task_hash}|{settings_hash}|{label}"),
        other => format!("{task_hash}|{settings_hash}|{label}|{other}"),
    };
    content_hash(&key)[..16].to_owned()
}

/// A program sent to the evaluator and what its record needs when it comes back.
struct InFlight {
    code_hash: String,
    code: String,
    round: u32,
    parents: Vec<i64>,
    trajectory: String,
    turn: u32,
}

/// The state of one run while it is under way.
struct Loop<'o, 'a> {
    opt: &'o Optimizer<'a>,
    task: &'o Task,
    /// The task as the engine's jobs hold it.
    job_task: Arc<Task>,
    /// Where the engine sends the outcomes of this run's jobs.
    done_tx: Sender<Done>,
    run_id: String,
    settings_hash: String,
    samples: Vec<StoredSample>,
    programs: ProgramIndex,
    in_flight: HashMap<JobId, InFlight>,
    outstanding: usize,
    spend: Spend,
    budget: Budget,
    invocation: Invocation,
    /// Why the round under way must end early, once what is in flight is back.
    stop_in_round: Option<StopReason>,
    fatal: Option<OptimizeError>,
    /// The reference's brief once it was tried (`None` inside: it failed).
    reference_profile: Option<Option<String>>,
    /// Programs' briefs, and the ids tried (failures are not tried again).
    profiles: HashMap<i64, String>,
    profiles_tried: HashSet<i64>,
    /// The ids of the samples recorded by the wave of requests under way.
    wave: Vec<i64>,
}

impl Optimizer<'_> {
    /// Runs (or resumes) the optimisation of `task`; `label` names the run among others of the
    /// same task and settings (the CLI passes the output directory).
    pub fn run(
        &self,
        task: &Task,
        label: &str,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<RunSummary, OptimizeError> {
        self.config.check()?;
        let started = Instant::now();
        // The settings with who judges (this build, this class of GPU): a run, its programs and
        // the exemplars its prompts show are another judge's only under another hash, so an
        // upgrade or another GPU starts afresh rather than trusting speedups it did not measure.
        let settings_hash = self.engine.judge().settings_hash(self.engine.settings());
        let run_id = run_id(&task.hash, &settings_hash, label, self.prompts.asks_for());
        let store_err =
            |source| OptimizeError::Store { task: task.key(), source: Box::new(source) };
        let mut config = serde_json::to_value(self.config).unwrap_or_default();
        if self.prompts.asks_for() != Language::Cuda {
            config["language"] = self.prompts.asks_for().as_str().into();
        }
        self.store
            .begin_run(&NewRun {
                id: run_id.clone(),
                task_hash: task.hash.clone(),
                task_name: task.key(),
                task_path: task.path.display().to_string(),
                settings_hash: settings_hash.clone(),
                settings: serde_json::to_value(self.engine.settings()).unwrap_or_default(),
                config,
            })
            .map_err(store_err)?;
        let samples = self.store.samples_for_run(&run_id).map_err(store_err)?;
        let programs = index_programs(
            self.store
                .programs_for_task(&task.hash, &settings_hash)
                .map_err(store_err)?
                .into_iter()
                .map(without_evaluation)
                .collect(),
        );
        let spend = Spend {
            tokens: samples
                .iter()
                .map(|s| s.sample.prompt_tokens + s.sample.completion_tokens)
                .sum(),
            cost_usd: samples.iter().map(|s| s.sample.cost_usd).sum(),
        };
        let (done_tx, done_rx) = unbounded();
        let mut state = Loop {
            opt: self,
            task,
            job_task: Arc::new(task.clone()),
            done_tx,
            run_id,
            settings_hash,
            samples,
            programs,
            in_flight: HashMap::new(),
            outstanding: 0,
            spend,
            budget: Budget::new(self.config, started),
            invocation: Invocation::default(),
            stop_in_round: None,
            fatal: None,
            reference_profile: None,
            profiles: HashMap::new(),
            profiles_tried: HashSet::new(),
            wave: Vec::new(),
        };
        let mut rounds: Vec<NewRound> = self
            .store
            .rounds_for_run(&state.run_id)
            .map_err(store_err)?
            .into_iter()
            .map(|r| r.round)
            .collect();
        let gate = Gate::new(self.cancel, state.budget.deadline.map(|(d, _)| d));
        let stop = std::thread::scope(|scope| {
            let result = state.go(scope, &gate, &done_rx, &mut rounds, on_event);
            // Generators finish what they sent.
            gate.close();
            result
        })?;
        on_event(Event::Stopped { reason: stop.clone() });
        self.store.finish_run(&state.run_id, &stop.describe()).map_err(store_err)?;
        let language = self.prompts.asks_for();
        let mut parts = summary::parts(rounds, &state.samples, &state.programs, language);
        if let Some(best) = &mut parts.best {
            // The index holds programs without their evaluations: the best one's comes from the
            // store.
            let key = state.programs.values().find(|p| p.id == best.program_id).map(|p| &p.key);
            if let Some(key) = key {
                if let Some(full) = self.store.find_program(key).map_err(store_err)? {
                    best.evaluation = full.evaluation;
                }
            }
        }
        Ok(RunSummary {
            run_id: state.run_id,
            task: task.key(),
            task_path: task.path.display().to_string(),
            llm: self.llm.describe(),
            language,
            stop_text: stop.describe(),
            stop,
            rounds: parts.rounds,
            best: parts.best,
            totals: parts.totals,
            invocation: state.invocation,
            samples: parts.samples,
        })
    }
}

impl<'o, 'a> Loop<'o, 'a> {
    fn store_err(&self, source: cudal1_store::StoreError) -> OptimizeError {
        OptimizeError::Store { task: self.task.key(), source: Box::new(source) }
    }

    fn go<'scope, 'env>(
        &mut self,
        scope: &'scope std::thread::Scope<'scope, 'env>,
        gate: &'env Gate<'env>,
        eval_rx: &Receiver<Done>,
        rounds: &mut Vec<NewRound>,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<StopReason, OptimizeError>
    where
        'a: 'env,
    {
        let config = self.opt.config;
        let pending = self.resubmit_pending();
        on_event(Event::RunStarted {
            run_id: self.run_id.clone(),
            task: self.task.key(),
            finished_rounds: u32::try_from(rounds.len()).unwrap_or(u32::MAX),
            recorded_samples: self.samples.len(),
            pending_evaluations: pending,
        });
        // Programs an earlier invocation left unevaluated come first.
        self.wait_for_evaluations(eval_rx, gate, on_event)?;
        if gate.cancelled() {
            return Ok(StopReason::Interrupted);
        }
        let sampler = ExemplarSampler::new(config.bucket_width, config.exemplar_temperature)
            .map_err(|e| OptimizeError::Config { reason: e.to_string() })?;
        loop {
            let finished = u32::try_from(rounds.len()).unwrap_or(u32::MAX);
            let bests: Vec<Option<f64>> = rounds.iter().map(|r| r.best_speedup).collect();
            if let Some(stop) = stop::before_round(
                config,
                finished,
                &bests,
                &self.budget,
                self.spend,
                Instant::now(),
            ) {
                return Ok(stop);
            }
            let round = finished + 1;
            let round_started = Instant::now();
            let stop = self.run_round(scope, gate, eval_rx, round, &sampler, on_event)?;
            if gate.cancelled() {
                return Ok(StopReason::Interrupted);
            }
            let round_has_samples = self.samples.iter().any(|s| s.sample.round == round);
            if stop.as_ref().is_none_or(StopReason::finishes_round) && round_has_samples {
                let wall_ms = round_started.elapsed().as_secs_f64() * 1e3;
                let language = self.opt.prompts.asks_for();
                let totals = round_totals(
                    &self.run_id,
                    round,
                    &self.samples,
                    &self.programs,
                    wall_ms,
                    language,
                );
                self.opt.store.finish_round(&totals).map_err(|e| self.store_err(e))?;
                on_event(Event::RoundFinished { totals: totals.clone() });
                rounds.push(totals);
            }
            if let Some(stop) = stop {
                return Ok(stop);
            }
        }
    }

    /// One round: its first turns (requests an earlier invocation sent without an answer are
    /// sent again; answered ones are kept), then, with `--turns`, waves of later turns until
    /// every trajectory is good enough, has its K turns, or failed in this invocation. Returns
    /// why the run must stop after it, if it must (an interruption returns at once).
    fn run_round<'scope, 'env>(
        &mut self,
        scope: &'scope std::thread::Scope<'scope, 'env>,
        gate: &'env Gate<'env>,
        eval_rx: &Receiver<Done>,
        round: u32,
        sampler: &ExemplarSampler,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<Option<StopReason>, OptimizeError>
    where
        'a: 'env,
    {
        let config = self.opt.config;
        let first_turn = |s: &&StoredSample| s.sample.round == round && s.sample.turn == 1;
        let answered = self
            .samples
            .iter()
            .filter(first_turn)
            .filter(|s| s.sample.outcome != Outcome::LlmError.as_str())
            .count();
        let next = self
            .samples
            .iter()
            .filter(|s| s.sample.round == round)
            .map(|s| s.sample.index)
            .max()
            .map_or(0, |m| m + 1);
        let missing = config.samples.saturating_sub(u32::try_from(answered).unwrap_or(u32::MAX));
        let mut fresh: Vec<u32> = (next..next + missing).collect();
        // Later turns requested by this invocation: one whose request failed is not sent again
        // until the next invocation (as a failed first turn is not).
        let mut sent: HashSet<(u32, u32)> = HashSet::new();
        let mut first_wave = true;
        loop {
            let mut continuing: Vec<NextTurn> =
                next_turns(round, &self.samples, &self.programs, config.turns, config.turn_target)
                    .into_iter()
                    .filter(|n| !sent.contains(&(n.index, n.turn)))
                    .collect();
            // A refinement prompt shows the previous program's whole verdict: read it back.
            for n in &mut continuing {
                if let Some(previous) = n.previous_program.as_mut() {
                    let full = self
                        .opt
                        .store
                        .find_program(&previous.key)
                        .map_err(|e| self.store_err(e))?;
                    if let Some(full) = full {
                        previous.evaluation = full.evaluation;
                    }
                }
            }
            if !first_wave && continuing.is_empty() {
                return Ok(None);
            }
            let planned = self.plan(round, &fresh, &continuing, sampler, on_event)?;
            sent.extend(planned.iter().filter(|p| p.turn > 1).map(|p| (p.index, p.turn)));
            let requests = u32::try_from(planned.len()).unwrap_or(u32::MAX);
            self.wave.clear();
            if first_wave {
                on_event(Event::RoundStarted {
                    round,
                    requests,
                    already_recorded: u32::try_from(answered).unwrap_or(u32::MAX),
                    kind: planned.first().map_or(crate::PromptKind::First, |p| p.kind),
                });
            } else {
                on_event(Event::TurnsStarted { round, requests });
            }
            let sampling = Sampling {
                temperature: config.temperature,
                top_p: config.top_p,
                max_tokens: config.max_tokens,
            };
            let replies =
                generate::spawn(scope, self.opt.llm, gate, sampling, planned, config.concurrency);
            self.drain_round(replies, eval_rx, gate, on_event)?;
            if gate.cancelled() {
                return Ok(Some(StopReason::Interrupted));
            }
            let recorded = self.wave.len();
            if recorded < requests as usize {
                // Requests were left unsent: a budget closed the gate, or the deadline passed.
                return Ok(Some(
                    self.stop_in_round
                        .take()
                        .or_else(|| self.budget.exceeded(self.spend, Instant::now()))
                        .unwrap_or(StopReason::Interrupted),
                ));
            }
            if let Some(stop) = self.stop_in_round.take().or_else(|| self.llm_unavailable(round)) {
                return Ok(Some(stop));
            }
            fresh.clear();
            first_wave = false;
        }
    }

    /// A wave of requests (a round's first turns, or later turns) whose every request failed
    /// ends the run; the round stays unfinished, so the next invocation sends them again.
    fn llm_unavailable(&self, round: u32) -> Option<StopReason> {
        let this: Vec<&StoredSample> =
            self.samples.iter().filter(|s| self.wave.contains(&s.id)).collect();
        let all_failed =
            !this.is_empty() && this.iter().all(|s| s.sample.outcome == Outcome::LlmError.as_str());
        all_failed.then(|| StopReason::LlmUnavailable {
            round,
            error: this.last().and_then(|s| s.sample.reason.clone()).unwrap_or_default(),
        })
    }

    /// The prompts of the round's new slots `indices` and of its trajectories' next turns. With
    /// `--profile`, the correct programs they show (and the reference) are profiled if they are
    /// not yet, and the same draws are rendered again with the profiles.
    fn plan(
        &mut self,
        round: u32,
        indices: &[u32],
        next: &[NextTurn],
        sampler: &ExemplarSampler,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<Vec<Planned>, OptimizeError> {
        let planned = self.draw(round, indices, next, sampler)?;
        if self.opt.profiles.is_none() {
            return Ok(planned);
        }
        let correct =
            |id: &i64| self.programs.values().any(|p| p.id == *id && correct_speedup(p).is_some());
        let shown: std::collections::BTreeSet<i64> =
            planned.iter().flat_map(|p| p.exemplar_ids.iter().copied()).filter(correct).collect();
        if self.profile_for_prompts(round, &shown, on_event) {
            self.draw(round, indices, next, sampler)
        } else {
            Ok(planned)
        }
    }

    /// The round's prompts, drawn from the round's own seed: drawing again gives the same draws.
    fn draw(
        &self,
        round: u32,
        indices: &[u32],
        next: &[NextTurn],
        sampler: &ExemplarSampler,
    ) -> Result<Vec<Planned>, OptimizeError> {
        let config = self.opt.config;
        let mut programs: Vec<&StoredProgram> = self.programs.values().collect();
        programs.sort_by_key(|p| p.id);
        let input = PlanInput {
            round,
            reference: &self.task.source,
            prompts: self.opt.prompts,
            programs: &programs,
            sampler,
            exemplars: config.exemplars,
            seed: config.seed ^ seed_of(&self.run_id),
            reference_profile: self.reference_profile.as_ref().and_then(Option::as_deref),
            profiles: &self.profiles,
        };
        let mut rng = StdRng::seed_from_u64(sample_seed(input.seed, round, u32::MAX));
        let prompt_err =
            |source| OptimizeError::Prompt { task: self.task.key(), source: Box::new(source) };
        let mut planned = plan_turns(&input, next).map_err(prompt_err)?;
        planned.extend(plan_round(&input, indices, &mut rng).map_err(prompt_err)?);
        Ok(planned)
    }

    /// With `--profile`: the reference's brief (once), and one for each program in `shown` that
    /// was not profiled yet; whether any was. Runs between rounds: every evaluation of the run is
    /// back by now. Ctrl-C stops it; the prompts then go without what is missing.
    fn profile_for_prompts(
        &mut self,
        round: u32,
        shown: &std::collections::BTreeSet<i64>,
        on_event: &mut dyn FnMut(Event),
    ) -> bool {
        let Some(source) = self.opt.profiles else { return false };
        let mut todo: Vec<&StoredProgram> = shown
            .iter()
            .filter(|id| !self.profiles_tried.contains(id))
            .filter_map(|id| self.programs.values().find(|p| p.id == *id))
            .collect();
        todo.sort_by_key(|p| p.id);
        let reference = self.reference_profile.is_none();
        if todo.is_empty() && !reference {
            return false;
        }
        on_event(Event::Profiling { round, programs: todo.len() + usize::from(reference) });
        let cancelled = || self.opt.cancel.load(std::sync::atomic::Ordering::SeqCst);
        let mut reference_brief = None;
        if reference && !cancelled() {
            let got = source.reference(self.task);
            if let Err(error) = &got {
                on_event(Event::ProfileFailed { program_id: None, error: error.clone() });
            }
            reference_brief = Some(got.ok());
        }
        let mut found = Vec::new();
        for p in todo {
            if cancelled() {
                break;
            }
            match source.program(self.task, p) {
                Ok(brief) => found.push((p.id, Some(brief))),
                Err(error) => {
                    on_event(Event::ProfileFailed { program_id: Some(p.id), error });
                    found.push((p.id, None));
                }
            }
        }
        let any = reference_brief.is_some() || !found.is_empty();
        if reference_brief.is_some() {
            self.reference_profile = reference_brief;
        }
        for (id, brief) in found {
            self.profiles_tried.insert(id);
            if let Some(b) = brief {
                self.profiles.insert(id, b);
            }
        }
        any
    }

    /// Records replies as they come and evaluates new programs as they come, until every
    /// request of the round is answered and every evaluation is back.
    fn drain_round(
        &mut self,
        replies: Receiver<Generated>,
        eval_rx: &Receiver<Done>,
        gate: &Gate<'_>,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<(), OptimizeError> {
        let closed = never();
        let mut replies_open = true;
        while replies_open || self.outstanding > 0 {
            let replies_rx = if replies_open { &replies } else { &closed };
            select! {
                recv(replies_rx) -> msg => match msg {
                    Ok(Generated::Reply { planned, result, accounting }) => {
                        self.invocation.requests += 1;
                        self.on_reply(planned, result, gate, on_event)?;
                        drop(accounting);
                    }
                    Ok(Generated::NotSent { planned }) => {
                        tracing::debug!(round = planned.round, index = planned.index, "request not sent: the gate is closed");
                    }
                    Err(_) => replies_open = false,
                },
                recv(eval_rx) -> msg => match msg {
                    Ok(done) => self.on_evaluated(done, gate, on_event)?,
                    Err(_) => return Err(OptimizeError::EvaluatorStopped { task: self.task.key(), outstanding: self.outstanding }),
                },
            }
            if let Some(e) = self.fatal.take() {
                return Err(e);
            }
        }
        Ok(())
    }

    /// Waits for the evaluations under way (no new requests).
    fn wait_for_evaluations(
        &mut self,
        eval_rx: &Receiver<Done>,
        gate: &Gate<'_>,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<(), OptimizeError> {
        while self.outstanding > 0 {
            match eval_rx.recv() {
                Ok(done) => self.on_evaluated(done, gate, on_event)?,
                Err(_) => {
                    return Err(OptimizeError::EvaluatorStopped {
                        task: self.task.key(),
                        outstanding: self.outstanding,
                    })
                }
            }
            if let Some(e) = self.fatal.take() {
                return Err(e);
            }
        }
        Ok(())
    }

    fn on_reply(
        &mut self,
        planned: Planned,
        result: Result<Completion, LlmError>,
        gate: &Gate<'_>,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<(), OptimizeError> {
        let mut sample = NewSample {
            run_id: self.run_id.clone(),
            round: planned.round,
            index: planned.index,
            turn: planned.turn,
            prompt_kind: planned.kind.as_str().to_owned(),
            exemplar_ids: planned.exemplar_ids.clone(),
            model: None,
            reply: None,
            finish_reason: None,
            prompt_tokens: 0,
            completion_tokens: 0,
            cost_usd: 0.0,
            latency_ms: None,
            outcome: Outcome::LlmError.as_str().to_owned(),
            reason: None,
            code_hash: None,
        };
        let mut code = None;
        match result {
            Err(LlmError::BudgetExhausted { spent_usd, cap_usd }) => {
                gate.close();
                let message = format!("spent ${spent_usd:.4} of a ${cap_usd:.4} cap");
                self.stop_in_round.get_or_insert(StopReason::LlmBudget { message });
                return Ok(());
            }
            Err(e) if e.is_fatal() => {
                gate.close();
                self.fatal = Some(OptimizeError::Llm {
                    task: self.task.key(),
                    llm: self.opt.llm.describe(),
                    source: Box::new(e),
                });
                return Ok(());
            }
            Err(e) => {
                tracing::warn!(round = planned.round, index = planned.index, error = %e, "LLM request failed");
                sample.reason = Some(error_chain(&e));
            }
            Ok(c) => {
                let cost = self.opt.config.prices.cost(c.prompt_tokens, c.completion_tokens);
                self.spend.tokens += c.prompt_tokens + c.completion_tokens;
                self.spend.cost_usd += cost;
                sample.model = Some(c.model);
                sample.finish_reason = c.finish_reason;
                sample.prompt_tokens = c.prompt_tokens;
                sample.completion_tokens = c.completion_tokens;
                sample.cost_usd = cost;
                sample.latency_ms = Some(c.latency.as_secs_f64() * 1e3);
                match extract_program(&c.text) {
                    Ok(program) => {
                        sample.outcome = Outcome::Program.as_str().to_owned();
                        sample.code_hash = Some(normalized_hash(&program));
                        code = Some(program);
                    }
                    Err(e) => {
                        sample.outcome = Outcome::NoCode.as_str().to_owned();
                        sample.reason = Some(e.to_string());
                    }
                }
                sample.reply = Some(c.text);
                if let Some(stop) = self.budget.exceeded(self.spend, Instant::now()) {
                    gate.close();
                    self.stop_in_round.get_or_insert(stop);
                }
            }
        }
        let id = self.opt.store.insert_sample(&sample).map_err(|e| self.store_err(e))?;
        let tokens = sample.prompt_tokens + sample.completion_tokens;
        let outcome = match sample.outcome.as_str() {
            "program" => Outcome::Program,
            "no_code" => Outcome::NoCode,
            _ => Outcome::LlmError,
        };
        let (reason, code_hash) = (sample.reason.clone(), sample.code_hash.clone());
        // A later turn sent again takes its failed request's row.
        self.samples.retain(|s| s.id != id);
        self.samples.push(StoredSample { id, created_at: String::new(), sample });
        self.wave.push(id);
        let (queued, known_program) = match (code, code_hash) {
            (Some(code), Some(hash)) => self.submit(
                hash,
                code,
                planned.round,
                planned.exemplar_ids,
                planned.index,
                planned.turn,
            ),
            _ => (false, None),
        };
        let (round, index, turn) = (planned.round, planned.index, planned.turn);
        on_event(Event::SampleRecorded {
            round,
            index,
            turn,
            outcome,
            reason,
            tokens,
            queued,
            known_program,
        });
        Ok(())
    }

    /// Sends a program to the evaluator unless the database holds it or it is under way;
    /// returns (sent, the known program's id).
    fn submit(
        &mut self,
        hash: String,
        code: String,
        round: u32,
        parents: Vec<i64>,
        index: u32,
        turn: u32,
    ) -> (bool, Option<i64>) {
        if let Some(p) = self.programs.get(&hash) {
            return (false, Some(p.id));
        }
        if self.in_flight.values().any(|f| f.code_hash == hash) {
            return (false, None);
        }
        let label = if turn > 1 {
            format!("{} round {round} sample {index} turn {turn}", self.task.key())
        } else {
            format!("{} round {round} sample {index}", self.task.key())
        };
        let candidate = Candidate::from_source(label, code.clone());
        let id = self
            .opt
            .engine
            .submit_to(Job::evaluate(Arc::clone(&self.job_task), candidate), &self.done_tx);
        let trajectory = trajectory_id(&self.run_id, round, index);
        self.in_flight
            .insert(id, InFlight { code_hash: hash, code, round, parents, trajectory, turn });
        self.outstanding += 1;
        (true, None)
    }

    /// Samples of this run whose program has no verdict yet (an earlier invocation stopped
    /// before it was evaluated) go to the evaluator again; returns how many.
    fn resubmit_pending(&mut self) -> usize {
        let pending: Vec<(String, String, u32, Vec<i64>, u32, u32)> = self
            .samples
            .iter()
            .filter_map(|s| {
                let hash = s.sample.code_hash.clone()?;
                if self.programs.contains_key(&hash) {
                    return None;
                }
                let code = extract_program(s.sample.reply.as_deref()?).ok()?;
                Some((
                    hash,
                    code,
                    s.sample.round,
                    s.sample.exemplar_ids.clone(),
                    s.sample.index,
                    s.sample.turn,
                ))
            })
            .collect();
        let before = self.outstanding;
        for (hash, code, round, parents, index, turn) in pending {
            self.submit(hash, code, round, parents, index, turn);
        }
        self.outstanding - before
    }

    fn on_evaluated(
        &mut self,
        done: Done,
        gate: &Gate<'_>,
        on_event: &mut dyn FnMut(Event),
    ) -> Result<(), OptimizeError> {
        self.outstanding = self.outstanding.saturating_sub(1);
        let Some(flight) = self.in_flight.remove(&done.id) else { return Ok(()) };
        match done.outcome {
            JobOutcome::Evaluated(evaluation) => {
                let e = &*evaluation;
                let code_hash = flight.code_hash;
                let key = ProgramKey {
                    task_hash: self.task.hash.clone(),
                    code_hash: code_hash.clone(),
                    settings_hash: self.settings_hash.clone(),
                };
                let program = NewProgram {
                    key: key.clone(),
                    code: flight.code,
                    run_id: self.run_id.clone(),
                    round: flight.round,
                    trajectory: Some(flight.trajectory),
                    turn: flight.turn,
                    parent_ids: flight.parents,
                    verdict: e.verdict.as_str().to_owned(),
                    reason: e.reason.clone(),
                    reason_class: e.reason_class.clone(),
                    speedup_median: e.speedup.map(|s| s.median).filter(|x| !x.is_nan()),
                    speedup_ci_low: e.speedup.map(|s| s.ci_low).filter(|x| !x.is_nan()),
                    speedup_ci_high: e.speedup.map(|s| s.ci_high).filter(|x| !x.is_nan()),
                    evaluation: serde_json::to_value(e).unwrap_or_default(),
                };
                let store = self.opt.store;
                store.insert_program(&program).map_err(|e| self.store_err(e))?;
                let stored = store.find_program(&key).map_err(|e| self.store_err(e))?;
                self.invocation.evaluations += 1;
                if let Some(stored) = stored {
                    let written = Written::of(&stored.code);
                    on_event(Event::ProgramEvaluated {
                        round: stored.round,
                        program_id: stored.id,
                        verdict: Verdict::parse(&stored.verdict).unwrap_or(e.verdict),
                        speedup: stored.speedup_median,
                        reason: stored.reason.clone(),
                        written,
                        in_language: self.opt.prompts.asks_for().may_show(written),
                    });
                    self.programs.insert(code_hash, without_evaluation(stored));
                }
            }
            JobOutcome::TaskFailed { error, at_start: true, remedies } => {
                gate.close();
                self.fatal.get_or_insert(OptimizeError::Reference {
                    task: self.task.key(),
                    message: error,
                    remedies,
                });
            }
            JobOutcome::TaskFailed { error, at_start: false, .. } => {
                tracing::warn!(task = %self.task.key(), %error, "the reference failed while judging a program");
                on_event(Event::ReferenceFailed { error });
            }
            JobOutcome::HostFailed { error } => {
                tracing::warn!(task = %self.task.key(), %error, "the machine failed while judging a program");
                on_event(Event::HostFailed { error });
            }
            JobOutcome::Checked(_) | JobOutcome::Described(_) | JobOutcome::Cancelled => {}
        }
        Ok(())
    }
}

/// A program as the run's index keeps it: without its evaluation (checks, timing, the log's
/// tail), which the store holds. A long run would otherwise keep every evaluation until it ends;
/// a refinement prompt and the summary's best program read theirs back from the store.
fn without_evaluation(mut program: StoredProgram) -> StoredProgram {
    program.evaluation = serde_json::Value::Null;
    program
}

/// A 64-bit number from a run id, so runs of different tasks draw different samples.
fn seed_of(run_id: &str) -> u64 {
    run_id
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// The error and its causes on one line, e.g. "did not answer within 3s: timed out".
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_are_stable_and_depend_on_every_part() {
        let id = |t: &str, s: &str, o: &str| run_id(t, s, o, Language::Cuda);
        let a = id("t", "s", "/out");
        assert_eq!(a.len(), 16);
        assert_eq!(a, id("t", "s", "/out"));
        assert_ne!(a, id("t2", "s", "/out"));
        assert_ne!(a, id("t", "s2", "/out"));
        assert_ne!(a, id("t", "s", "/out2"));
        // A CUDA run keeps the id it had before languages existed; a Triton run is another.
        assert_eq!(a, content_hash("t|s|/out")[..16]);
        let triton = run_id("t", "s", "/out", Language::Triton);
        assert_eq!(triton.len(), 16);
        assert_ne!(a, triton);
    }

    #[test]
    fn error_chains_show_their_causes() {
        let e = LlmError::Timeout {
            url: "http://x".into(),
            timeout: std::time::Duration::from_secs(3),
            source: "timed out reading the body".into(),
        };
        assert_eq!(
            error_chain(&e),
            "`http://x` did not answer within 3s: timed out reading the body"
        );
    }
}

//! `cudal1 train`: CUDA-L1's three stages. `sft-data` and `sft` (stage 1), `self-sup` (stage 2),
//! `rl` (stage 3), and `eval`, the same held-out evaluation after each. The stages live in
//! cudal1-train; this module resolves the command line, starts the policy and the engine, and
//! reports.

use crate::args::{
    LanguageArg, LanguageFlag, Overlap, PolicyArgs, RlArgs, SelfSupArgs, SftArgs, SftDataArgs,
    TableArgs, TrainCommand, TrainEvalArgs,
};
use crate::exit::Status;
use crate::interrupt::{self, Interrupt};
use crate::out;
use crate::reporters::TrainReporter;
use crate::workspace::{Python, Workspace};
use anyhow::{bail, Context, Result};
use cudal1_eval::{Device, Evaluator, Mode};
use cudal1_llm::{ChatRequest, Llm, OpenAiClient};
use cudal1_model::messages::{Lora, ModelSource, Optimizer};
use cudal1_model::ModelConfig;
use cudal1_search::Prompts;
use cudal1_task::{load_suite, match_candidates, CandidateSource, Task};
use cudal1_train::data::{self, Candidate, Collected, SftExample};
use cudal1_train::grpo::{self, GrpoConfig};
use cudal1_train::heldout;
use cudal1_train::kernels::{KernelEnv, RewardKind};
use cudal1_train::run::{committed_checkpoint, RunDir};
use cudal1_train::selfsup::{self, SelfSupConfig};
use cudal1_train::sft::{self, SftConfig};
use cudal1_train::{Limits, Policy, PolicySpec, Sampling, TrainEvent};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

impl Overlap {
    /// Whether the policy samples while programs are timed. Never on a device that times them
    /// (no policy kernel beside a timed candidate); by default only for a policy on a GPU of its
    /// own (a policy on the CPU would take the cores that timed programs launch from).
    fn resolve(self, policy: &Device, timing: &[Device]) -> Result<bool> {
        let apart = !timing.contains(policy);
        match self {
            Overlap::Off => Ok(false),
            Overlap::Auto => Ok(apart && policy.is_cuda()),
            Overlap::On if apart => Ok(true),
            Overlap::On => bail!(
                "`--overlap on` needs the policy on a device that times no programs, but `{policy}` times them\nhint: give the policy a GPU of its own (`--policy-device cuda:0` with `--device cuda:1`), or leave `--overlap` at `auto`"
            ),
        }
    }
}

pub fn run(cmd: TrainCommand) -> Result<Status> {
    match cmd {
        TrainCommand::SftData(a) => sft_data(&a),
        TrainCommand::Sft(a) => sft_stage(&a),
        TrainCommand::SelfSup(a) => self_sup(&a),
        TrainCommand::Rl(a) => rl(&a),
        TrainCommand::Eval(a) => eval(&a),
        TrainCommand::Table(a) => table(&a),
    }
}

fn tasks_of(dir: &Path) -> Result<Vec<Arc<Task>>> {
    let suite = load_suite(dir)?;
    for p in &suite.problems {
        eprintln!("warning: skipping a task: {p}");
    }
    if suite.tasks.is_empty() {
        bail!("`{}` holds no task", dir.display());
    }
    Ok(suite.tasks.into_iter().map(Arc::new).collect())
}

/// The built-in prompts, asking for programs in `--language`: every stage that prompts the model
/// (`sft-data`, `self-sup`, `rl` and its held-out evaluations, `eval`) takes them from here.
fn stage_prompts(language: &LanguageArg) -> Prompts {
    Prompts::builtin().language(language.language.into())
}

/// `--language` in a run's settings, so that a run resumes only in its own language. Only a
/// language other than CUDA is written: runs made before the flag existed asked for CUDA, and
/// resume as such.
fn record_language(settings: &mut serde_json::Value, language: &LanguageArg) {
    if language.language != LanguageFlag::Cuda {
        settings["language"] = json!(cudal1_search::Language::from(language.language).as_str());
    }
}

/// `--reward` as the run's settings record it.
fn reward_name(reward: RewardKind) -> &'static str {
    match reward {
        RewardKind::Speedup => "speedup",
        RewardKind::Correct => "correct",
        RewardKind::SpeedupOwnKernels { .. } => "speedup-own-kernels",
    }
}

/// The policy's device: `--policy-device`, else the first GPU when there is one.
fn policy_device(a: &PolicyArgs, python: &Python) -> Device {
    a.policy_device.clone().unwrap_or(if python.gpus() > 0 { Device::Cuda(0) } else { Device::Cpu })
}

/// The policy's spec from the flags, on `device`.
fn policy_spec(a: &PolicyArgs, device: &Device) -> PolicySpec {
    let dtype = a.dtype.clone().unwrap_or_else(|| {
        if device.is_cuda() {
            "bfloat16".into()
        } else {
            "float32".into()
        }
    });
    let source = match (&a.model_dir, &a.gguf_dir) {
        (Some(dir), _) => ModelSource::Hf(dir.clone()),
        (None, Some(dir)) => {
            ModelSource::Gguf { dir: Some(dir.clone()), file: a.gguf_file.clone() }
        }
        (None, None) => ModelSource::Embedded(true),
    };
    let lora = (a.lora_r > 0).then(|| Lora {
        r: a.lora_r,
        alpha: a.lora_alpha.unwrap_or(2.0 * f64::from(a.lora_r)),
        dropout: 0.0,
        target_modules: None,
    });
    let lr = a.lr.unwrap_or(if lora.is_some() { 1e-4 } else { 1e-5 });
    PolicySpec {
        source,
        device: device.to_string(),
        dtype,
        lora,
        optimizer: Optimizer { lr, ..Optimizer::default() },
    }
}

/// Starts the policy (with a reference policy for the KL penalty when asked), from `--init`'s
/// weights when given.
fn start_policy(
    a: &PolicyArgs,
    spec: &PolicySpec,
    python: &Path,
    cache: &Path,
    reference: bool,
    seed: u64,
) -> Result<Policy> {
    let root = cudal1_python::MODEL_WORKER
        .install(cache)
        .with_context(|| format!("installing the model worker under `{}`", cache.display()))?;
    let mut config = ModelConfig::new(python, root);
    config.threads = a.threads;
    config.label = "policy".into();
    let mut policy = Policy::start(&config, spec, reference, seed, Limits::default())
        .with_context(|| format!("starting the policy with `{}`\nhint: the interpreter needs torch, transformers and peft (scripts/setup.sh installs them)", python.display()))?;
    if let Some(init) = &a.init {
        let ckpt = committed_checkpoint(init)?;
        policy.init_from(&ckpt).with_context(|| format!("starting from `{}`", ckpt.display()))?;
        tracing::info!(checkpoint = %ckpt.display(), "policy starts from another run");
    }
    Ok(policy)
}

/// While `engine` judges on the policy's GPU (one GPU: they take turns), what the policy's
/// worker keeps there is taken off what the engine's jobs may use, after each of its ops.
fn count_policy_memory(policy: &mut Policy, engine: &Evaluator, device: &Device) {
    if device.is_cuda() && engine.devices().contains(device) {
        let (outside, device) = (engine.outside_memory(), device.clone());
        policy.report_held(Box::new(move |held| outside.hold(&device, held)));
    }
}

fn sft_data(a: &SftDataArgs) -> Result<Status> {
    if a.endpoint.llm_url.is_none() && a.from_solutions.is_none() {
        bail!("nothing to collect\nhint: give `--llm-url URL --model NAME` to sample, and/or `--from-solutions DIR` for a corpus");
    }
    let tasks = tasks_of(&a.suite)?;
    let ws = Workspace::resolve(&a.common, &a.device, None)?;
    let prompts = stage_prompts(&a.language);
    let interrupt = interrupt::install("the judging under way");
    let engine = ws.engine()?;
    interrupt.watch(engine.canceller());
    let mut reporter = TrainReporter::new("sft-data", &[]);
    let mut stats = Collected::default();
    let mut candidates: Vec<Candidate> = Vec::new();
    if let Some(dir) = &a.from_solutions {
        let plain: Vec<Task> = tasks.iter().map(|t| (**t).clone()).collect();
        let (matched, problems) = match_candidates(&plain, &CandidateSource::from_path(dir))?;
        for p in &problems {
            eprintln!("warning: skipping a solution: {p}");
        }
        for m in matched {
            let task = Arc::clone(&tasks[m.task]);
            let label = std::path::Path::new(&m.candidate.label)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            candidates.push(Candidate {
                messages: data::task_messages(&prompts, &task)?,
                reply: data::corpus_reply(&m.candidate.source),
                provenance: json!({"source": "corpus", "path": m.candidate.label, "label": label}),
                task,
            });
        }
        let found = candidates.len();
        candidates = data::answers_in(prompts.asks_for(), candidates, &mut stats);
        let left_out = found - candidates.len();
        if left_out > 0 {
            let kinds = kinds_text(&stats.other_language);
            let language = prompts.asks_for();
            if candidates.is_empty() && a.endpoint.llm_url.is_none() {
                bail!("none of the {found} solutions in `{}` is a {language} program ({kinds}): answers to {language} prompts must be {language} kernels (`@triton.jit` functions, and no CUDA extension)\nhint: give `--from-solutions` a directory of {language} solutions, or leave out `--language {language}` to collect CUDA and PyTorch answers", dir.display());
            }
            eprintln!("sft-data: left out {left_out} of the {found} solutions in `{}`, written in another language than the {language} the prompts ask for ({kinds})", dir.display());
        }
    }
    if let Some(mut c) = a.endpoint.config() {
        c.max_concurrent = a.concurrency.max(1);
        let llm = OpenAiClient::new(c)?;
        let request =
            ChatRequest::new(vec![]).with_max_tokens(a.max_tokens).with_temperature(a.temperature);
        let sampled = data::sample_llm(
            &llm as &dyn Llm,
            &prompts,
            &tasks,
            a.samples,
            &request,
            a.concurrency,
            ws.machine.seed,
            &mut stats,
            &mut |e| reporter.event(e),
        )?;
        let (found, mut these) = (sampled.len(), Collected::default());
        let sampled = data::answers_in(prompts.asks_for(), sampled, &mut these);
        if sampled.len() < found {
            eprintln!(
                "sft-data: left out {} of the {found} sampled replies, whose programs are written in another language than the {} the prompts ask for ({})",
                found - sampled.len(),
                prompts.asks_for(),
                kinds_text(&these.other_language)
            );
        }
        for (kind, n) in these.other_language {
            *stats.other_language.entry(kind).or_default() += n;
        }
        candidates.extend(sampled);
    }
    let kept = data::keep_correct(&engine, candidates, &mut HashSet::new(), &mut stats, &mut |e| {
        reporter.event(e)
    });
    reporter.finish();
    engine.finish();
    if interrupt.interrupted() {
        eprintln!("interrupted: nothing written; run the same command again");
        return Ok(Status::Interrupted);
    }
    data::write(&a.out, &kept)?;
    let mut by_label: std::collections::BTreeMap<String, usize> = std::collections::BTreeMap::new();
    for e in &kept {
        let label = e
            .provenance
            .get("label")
            .and_then(|v| v.as_str())
            .unwrap_or(e.provenance["source"].as_str().unwrap_or("?"));
        *by_label.entry(label.to_owned()).or_default() += 1;
    }
    out::line(
        json!({"examples": kept.len(), "by_label": by_label, "collected": stats, "out": a.out}),
    )?;
    Ok(Status::problems_if(stats.llm_errors > 0 && stats.replies == 0))
}

/// `2 cuda, 1 pytorch`: what left-out answers were written in.
fn kinds_text(counts: &std::collections::BTreeMap<String, usize>) -> String {
    counts.iter().map(|(k, n)| format!("{n} {k}")).collect::<Vec<_>>().join(", ")
}

fn read_all(paths: &[PathBuf]) -> Result<Vec<SftExample>> {
    let mut all = Vec::new();
    for p in paths {
        all.extend(data::read(p)?);
    }
    Ok(all)
}

fn sft_stage(a: &SftArgs) -> Result<Status> {
    let examples = read_all(&a.data)?;
    if examples.is_empty() {
        bail!("no examples in {:?}\nhint: make them with `cudal1 train sft-data`", a.data);
    }
    let python = Python::resolve(&a.python)?;
    let spec = policy_spec(&a.policy, &policy_device(&a.policy, &python));
    let config = SftConfig {
        epochs: a.epochs,
        batch_size: a.batch_size,
        micro_batch: a.micro_batch,
        save_every: a.save_every,
        seed: a.seed,
    };
    let settings = json!({"policy": spec, "config": config, "init": a.policy.init, "data": a.data, "examples": examples.len()});
    let (run, state) = RunDir::open(&a.out, "sft", &settings)?;
    let interrupt = interrupt::install("the step under way");
    let mut policy =
        start_policy(&a.policy, &spec, &python.interpreter.path, &python.cache, false, a.seed)?;
    let resume = state.as_ref().map_or(0, |s| s.step);
    let mut reporter = TrainReporter::new("sft", &["loss", "grad_norm", "tokens"]);
    if let Some(state) = &state {
        run.resume(&mut policy, state)?;
        reporter.event(TrainEvent::Resumed { step: state.step });
    }
    let sequences = sft::encode(&mut policy, &examples)?;
    let stop = || interrupt.interrupted();
    let lines = sft::run(&mut policy, &sequences, &config, &run, resume, true, &stop, &mut |e| {
        reporter.event(e)
    })?;
    reporter.finish();
    policy.shutdown();
    finish(
        &run,
        "sft",
        &["loss", "grad_norm", "entropy", "seconds.train"],
        lines.last(),
        &interrupt,
    )
}

fn finish(
    run: &RunDir,
    stage: &str,
    plotted: &[&str],
    last: Option<&serde_json::Value>,
    interrupt: &Interrupt,
) -> Result<Status> {
    let plot = run.plot(stage, plotted)?;
    out::line(json!({"run": run.root(), "last": last, "plot": plot}))?;
    Ok(if interrupt.interrupted() { Status::Interrupted } else { Status::Done })
}

fn self_sup(a: &SelfSupArgs) -> Result<Status> {
    let tasks = tasks_of(&a.suite)?;
    let stage1 = read_all(&a.data)?;
    let python = Python::resolve(&a.common.python)?;
    let device = policy_device(&a.policy, &python);
    let spec = policy_spec(&a.policy, &device);
    // One resolution: the policy's device is kept out of timing where other GPUs remain.
    let ws = Workspace::resolve_with(python, &a.common, &a.device, None, Some(&device))?;
    let config = SelfSupConfig {
        rounds: a.rounds,
        samples_per_task: a.samples,
        sampling: Sampling { temperature: a.temperature, top_p: 1.0, max_tokens: a.max_tokens },
        replay: a.replay,
        epochs: a.epochs,
        batch_size: a.batch_size,
        micro_batch: a.micro_batch,
        seed: ws.seed_for_training(),
    };
    let mut settings = json!({"policy": spec, "config": config, "init": a.policy.init, "suite": a.suite, "data": a.data, "eval": ws.settings.key_hash()});
    record_language(&mut settings, &a.language);
    let (run, state) = RunDir::open(&a.out, "self-sup", &settings)?;
    let interrupt = interrupt::install("the round under way");
    let mut policy = start_policy(
        &a.policy,
        &spec,
        &ws.machine.interpreter.path,
        &ws.machine.cache,
        false,
        config.seed,
    )?;
    let mut reporter = TrainReporter::new("self-sup", &["new_kept", "judged_correct_rate", "loss"]);
    if let Some(state) = &state {
        run.resume(&mut policy, state)?;
        reporter.event(TrainEvent::Resumed { step: state.step });
    }
    let engine = ws.engine()?;
    interrupt.watch(engine.canceller());
    count_policy_memory(&mut policy, &engine, &device);
    let stop = || interrupt.interrupted();
    let prompts = stage_prompts(&a.language);
    let lines = selfsup::run(
        &mut policy,
        &engine,
        &prompts,
        &tasks,
        &stage1,
        &config,
        &run,
        state.map_or(0, |s| s.step),
        &stop,
        &mut |e| reporter.event(e),
    )?;
    reporter.finish();
    engine.finish();
    policy.shutdown();
    finish(
        &run,
        "self-sup",
        &[
            "new_kept",
            "judged_correct_rate",
            "loss",
            "seconds.generate",
            "seconds.evaluate",
            "seconds.train",
        ],
        lines.last(),
        &interrupt,
    )
}

fn rl(a: &RlArgs) -> Result<Status> {
    let tasks = tasks_of(&a.suite)?;
    let python = Python::resolve(&a.common.python)?;
    let device = policy_device(&a.policy, &python);
    let spec = policy_spec(&a.policy, &device);
    // One resolution: the policy's device is kept out of timing where other GPUs remain.
    let ws = Workspace::resolve_with(python, &a.common, &a.device, None, Some(&device))?;
    let reward_budget = a.reward_budget.unwrap_or(a.common.budget);
    if !(reward_budget.is_finite() && reward_budget > 0.0) {
        bail!("`--reward-budget` must be a positive number of seconds, not {reward_budget}");
    }
    if a.heldout_every == 0 {
        bail!("`--heldout-every` must be at least 1");
    }
    let heldout_tasks = a.heldout.as_deref().map(tasks_of).transpose()?;
    let (aggregation, reward) = (a.aggregation, a.reward);
    if reward.needs_own_share() && !ws.machine.on_gpu() {
        bail!("`--reward speedup-own-kernels` needs a CUDA device: Nsight Compute profiles GPU kernels\nhint: use `--reward speedup`, or train on a GPU");
    }
    let config = GrpoConfig {
        steps: a.steps,
        groups: a.groups,
        group_size: a.group_size,
        updates: a.updates,
        sampling: Sampling { temperature: a.temperature, top_p: a.top_p, max_tokens: a.max_tokens },
        clip_low: a.clip,
        clip_high: a.clip,
        kl_coef: a.kl,
        std_floor: a.std_floor,
        advantage_clip: a.advantage_clip,
        aggregation,
        normalizer: a.normalizer,
        micro_batch: a.micro_batch,
        max_grad_norm: Some(1.0),
        max_refills: a.max_refills,
        save_every: a.save_every,
        seed: ws.seed_for_training(),
        turns: a.turns,
        turn_gamma: a.turn_gamma,
        // A later turn waits for its first turn's verdict: nothing to sample ahead.
        overlap: a.turns <= 1 && a.overlap.resolve(&device, &ws.machine.devices)?,
        keep_flat_groups: a.keep_flat_groups,
    };
    config.check()?;
    let sampler = a.exemplar.sampler()?;
    let mut settings = json!({
        "policy": spec, "config": config, "init": a.policy.init, "suite": a.suite, "eval": ws.settings.key_hash(),
        "exemplars": a.exemplar.exemplars, "bucket_width": a.exemplar.bucket_width, "exemplar_temperature": a.exemplar.exemplar_temperature, "low_reward": a.low_reward, "reward": reward_name(reward),
    });
    if a.turns > 1 {
        settings["turn_target"] = json!(a.turn_target);
    }
    record_language(&mut settings, &a.language);
    // Runs without it resume as before; the held-out evaluation is no setting of the run.
    if let Some(b) = a.reward_budget {
        settings["reward_budget"] = json!(b);
    }
    let (run, state) = RunDir::open(&a.out, "rl", &settings)?;
    let run_id = cudal1_task::content_hash(&format!(
        "train-rl|{}",
        std::fs::canonicalize(&a.out).unwrap_or_else(|_| a.out.clone()).display()
    ))[..16]
        .to_owned();
    let interrupt = interrupt::install("the step under way");
    let mut policy = start_policy(
        &a.policy,
        &spec,
        &ws.machine.interpreter.path,
        &ws.machine.cache,
        a.kl > 0.0,
        config.seed,
    )?;
    let mut reporter = TrainReporter::new("rl", &grpo::REPORTED);
    if let Some(state) = &state {
        run.resume(&mut policy, state)?;
        reporter.event(TrainEvent::Resumed { step: state.step });
    }
    let engine = Evaluator::start(cudal1_train::kernels::reward_engine(
        ws.machine.engine_config(&ws.settings),
        Duration::from_secs_f64(reward_budget),
    ))
    .context("starting the evaluation engine of the rewards")?;
    interrupt.watch(engine.canceller());
    count_policy_memory(&mut policy, &engine, &device);
    let prompts = stage_prompts(&a.language);
    let mut env =
        KernelEnv::new(tasks, &engine, &ws.store, &prompts, sampler, a.exemplar.exemplars, run_id);
    env.low_reward = a.low_reward;
    env.turn_target = a.turn_target;
    env.reward = reward;
    let shares = if reward.needs_own_share() {
        Some(crate::own_share::TrainShares::new(&ws, &a.ncu, !a.common.no_sandbox, &interrupt)?)
    } else {
        None
    };
    env.own_shares = shares.as_ref().map(|s| s as &dyn cudal1_train::kernels::OwnShares);
    let stop = || interrupt.interrupted();
    let heldout_sampling = Sampling {
        temperature: a.heldout_temperature.unwrap_or(a.temperature),
        top_p: 1.0,
        max_tokens: a.heldout_max_tokens.unwrap_or(a.max_tokens),
    };
    let groups = a.heldout.as_deref().and_then(family_groups);
    // The held-out evaluation times with `--budget`: the reward engine when that is its budget
    // too, else an engine of its own for each evaluation.
    let same_budget = (reward_budget - a.common.budget).abs() < 1e-12;
    let mut evaluate = |policy: &mut Policy, step: u64, on_event: &mut dyn FnMut(TrainEvent)| {
        let Some(tasks) = &heldout_tasks else { return Ok(()) };
        let own = if same_budget {
            None
        } else {
            let mut config = ws.machine.engine_config(&ws.settings);
            config.pipeline = true;
            let own = Evaluator::start(config).map_err(|e| {
                cudal1_train::TrainError::Config(format!(
                    "starting the held-out evaluation's engine: {e}"
                ))
            })?;
            interrupt.watch(own.canceller());
            count_policy_memory(policy, &own, &device);
            Some(own)
        };
        let judge = own.as_ref().unwrap_or(&engine);
        let plan = HeldoutPlan {
            tasks,
            samples: a.heldout_samples,
            sampling: heldout_sampling,
            seed: a.heldout_seed,
            groups: groups.as_ref(),
        };
        let done =
            heldout_during_run(policy, judge, &prompts, &run, step, &plan, &ws, &spec, on_event);
        if let Some(own) = own {
            own.finish();
            count_policy_memory(policy, &engine, &device);
        }
        if interrupt.interrupted() {
            return Ok(());
        }
        done
    };
    let evaluations = heldout_tasks
        .is_some()
        .then_some(grpo::Evaluations { every: a.heldout_every, evaluate: &mut evaluate });
    let summary = grpo::run_evaluating(
        &mut policy,
        &mut env,
        &config,
        &run,
        state.map_or(0, |s| s.step),
        &stop,
        &mut |e| reporter.event(e),
        evaluations,
    )?;
    reporter.finish();
    drop(env);
    engine.finish();
    policy.shutdown();
    finish(&run, "rl", &grpo::PLOTTED, summary.metrics.last(), &interrupt)
}

/// What a held-out evaluation during a run asks.
struct HeldoutPlan<'a> {
    tasks: &'a [Arc<Task>],
    samples: u32,
    sampling: Sampling,
    seed: u64,
    groups: Option<&'a HashMap<String, String>>,
}

/// The held-out evaluation of the policy as of `step` of `run`: `heldout/step-N.json` (as `train
/// eval` writes it, with the step), its replies and verdicts kept beside it as they come (a stop
/// resumes them), and `heldout.jsonl` rewritten with every evaluated step's numbers. A step
/// whose report exists is not evaluated again.
#[allow(clippy::too_many_arguments)]
fn heldout_during_run(
    policy: &mut Policy,
    engine: &Evaluator,
    prompts: &Prompts,
    run: &RunDir,
    step: u64,
    plan: &HeldoutPlan<'_>,
    ws: &Workspace,
    spec: &PolicySpec,
    on_event: &mut dyn FnMut(TrainEvent),
) -> Result<(), cudal1_train::TrainError> {
    let dir = run.root().join("heldout");
    std::fs::create_dir_all(&dir).map_err(cudal1_train::TrainError::io("create", &dir))?;
    let out = dir.join(format!("step-{step:08}.json"));
    if !out.exists() {
        let started = std::time::Instant::now();
        // Its phases are told as the held-out evaluation's, at this step.
        let mut tell = |e: TrainEvent| match e {
            TrainEvent::Phase { phase, .. } => on_event(TrainEvent::Phase {
                step,
                phase: if phase == "generate" { "held-out generate" } else { "held-out judging" },
            }),
            other => on_event(other),
        };
        let progress = heldout::Progress::at(progress_path(&out));
        let who = json!({"policy": spec, "step": step, "eval": engine.settings().key_hash(), "gpu_class": ws.machine.judge.gpu_class, "judge": ws.machine.judge.version});
        let report = heldout::evaluate(
            policy,
            engine,
            prompts,
            plan.tasks,
            plan.samples,
            plan.sampling,
            plan.seed,
            Some((&progress, who)),
            &mut tell,
        )?;
        if engine.is_cancelled() {
            return Ok(());
        }
        let groups = plan.groups.map(|g| report.summaries_by(&|t| group_of(g, t), plan.seed));
        // Seconds of this call's part of it (a resumed one took longer in all).
        let seconds = started.elapsed().as_secs_f64();
        let full = json!({"summary": report.summary(), "groups": groups, "step": step, "seconds": seconds, "init": run.root(), "samples": report.samples, "mode": Mode::Full, "language": prompts.asks_for()});
        std::fs::write(&out, serde_json::to_string_pretty(&full).expect("plain data"))
            .map_err(cudal1_train::TrainError::io("write", &out))?;
    }
    // Every evaluated step's numbers (medians), in step order: the curves of `report --train`.
    let mut lines = Vec::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(cudal1_train::TrainError::io("read", &dir))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    for f in files {
        let Ok(v) = std::fs::read_to_string(&f)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).map_err(|e| e.to_string()))
        else {
            continue;
        };
        let mut line = heldout_numbers(&v["summary"]);
        line["step"] = v["step"].clone();
        line["seconds"] = v["seconds"].clone();
        if let Some(groups) = v["groups"].as_object() {
            for (g, summary) in groups {
                line[g] = heldout_numbers(summary);
            }
        }
        lines.push(line.to_string());
    }
    let path = run.root().join("heldout.jsonl");
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, lines.join("\n") + "\n")
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(cudal1_train::TrainError::io("write", &path))
}

/// A held-out summary's point estimates (the curves' points).
fn heldout_numbers(summary: &serde_json::Value) -> serde_json::Value {
    let mut line = json!({});
    for k in [
        "correct_rate",
        "fast1_rate",
        "geomean_speedup_of_correct",
        "solved_rate",
        "best_of_g_geomean",
    ] {
        line[k] = summary[k]["median"].clone();
    }
    line
}

/// Task stems by group from a synthetic suite's `manifest.json` (in `dir` or its parent):
/// `trained families` for a family with any training task, else `unseen families`. `None`
/// where there is no manifest (any other suite).
fn family_groups(dir: &Path) -> Option<HashMap<String, String>> {
    let text = [dir.join("manifest.json"), dir.join("../manifest.json")]
        .iter()
        .find_map(|p| std::fs::read_to_string(p).ok())?;
    let manifest: serde_json::Value = serde_json::from_str(&text).ok()?;
    let tasks = manifest["tasks"].as_array()?;
    let trained: HashSet<&str> = tasks
        .iter()
        .filter(|t| t["split"] == "train")
        .filter_map(|t| t["family"].as_str())
        .collect();
    Some(
        tasks
            .iter()
            .filter_map(|t| {
                let family = t["family"].as_str()?;
                let group =
                    if trained.contains(family) { "trained families" } else { "unseen families" };
                Some((t["stem"].as_str()?.to_owned(), group.to_owned()))
            })
            .collect(),
    )
}

/// The group of the task `key` (`level1/5_diag_matmul_4`: by its stem).
fn group_of(groups: &HashMap<String, String>, key: &str) -> Option<String> {
    groups.get(key.rsplit('/').next().unwrap_or(key)).cloned()
}

fn eval(a: &TrainEvalArgs) -> Result<Status> {
    let tasks = tasks_of(&a.suite)?;
    let python = Python::resolve(&a.common.python)?;
    let device = policy_device(&a.policy, &python);
    let spec = policy_spec(&a.policy, &device);
    // One resolution: the policy's device is kept out of timing where other GPUs remain.
    let ws = Workspace::resolve_with(python, &a.common, &a.device, None, Some(&device))?;
    let interrupt = interrupt::install("the evaluation under way");
    let mut policy =
        start_policy(&a.policy, &spec, &ws.machine.interpreter.path, &ws.machine.cache, false, 0)?;
    let engine = ws.engine()?;
    interrupt.watch(engine.canceller());
    count_policy_memory(&mut policy, &engine, &device);
    let mut reporter = TrainReporter::new("held-out", &[]);
    let prompts = stage_prompts(&a.language);
    let sampling = Sampling { temperature: a.temperature, top_p: 1.0, max_tokens: a.max_tokens };
    // Replies and verdicts are kept beside the report as they come: a rerun of the same
    // evaluation (policy checkpoint, tasks, sampling, seed, settings) generates nothing again.
    let progress = heldout::Progress::at(progress_path(&a.out));
    if let Some(parent) = a.out.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    let checkpoint = a.policy.init.as_deref().map(committed_checkpoint).transpose()?;
    // Verdicts kept in the progress file are reused only by the same judge (version and GPU class).
    let who = json!({"policy": spec, "checkpoint": checkpoint, "eval": ws.settings.key_hash(), "gpu_class": ws.machine.judge.gpu_class, "judge": ws.machine.judge.version});
    let report = heldout::evaluate(
        &mut policy,
        &engine,
        &prompts,
        &tasks,
        a.samples,
        sampling,
        a.sample_seed,
        Some((&progress, who)),
        &mut |e| reporter.event(e),
    )?;
    reporter.finish();
    engine.finish();
    policy.shutdown();
    if interrupt.interrupted() {
        eprintln!("interrupted: the report would be incomplete and was not written; the same command resumes (replies and verdicts so far are in `{}`)", progress_path(&a.out).display());
        return Ok(Status::Interrupted);
    }
    let groups =
        family_groups(&a.suite).map(|g| report.summaries_by(&|t| group_of(&g, t), a.sample_seed));
    let full = json!({"summary": report.summary(), "groups": groups, "init": a.policy.init, "samples": report.samples, "mode": Mode::Full, "language": prompts.asks_for()});
    std::fs::write(&a.out, serde_json::to_string_pretty(&full)?)
        .with_context(|| format!("writing `{}`", a.out.display()))?;
    out::line(json!({"summary": report.summary(), "report": a.out}))?;
    Ok(Status::Done)
}

fn table(a: &TableArgs) -> Result<Status> {
    use cudal1_train::ablation::{self, SeedResults};
    let mut results = Vec::new();
    for dir in &a.seeds {
        let mut arms = std::collections::BTreeMap::new();
        let entries = std::fs::read_dir(dir)
            .with_context(|| format!("reading the seed directory `{}`", dir.display()))?;
        // Each arm's report: `heldout-<arm>.json`, or with --at-step, an RL run's (a directory
        // with held-out evaluations during the run: `heldout/`) evaluation after that step, where
        // it made one.
        let mut paths = std::collections::BTreeMap::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(arm) = name.strip_prefix("heldout-").and_then(|n| n.strip_suffix(".json")) {
                paths.entry(arm.to_owned()).or_insert_with(|| e.path());
            } else if let Some(step) = a.at_step.filter(|_| e.path().join("heldout").is_dir()) {
                let then = e.path().join("heldout").join(format!("step-{step:08}.json"));
                paths.insert(name, then);
            }
        }
        for (arm, path) in paths {
            if !path.is_file() {
                continue;
            }
            let text = std::fs::read_to_string(&path)?;
            let v: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("reading `{}`", path.display()))?;
            let samples: Vec<heldout::SampleResult> = serde_json::from_value(v["samples"].clone())
                .with_context(|| {
                    format!(
                        "`{}` holds no held-out samples (`train eval` writes them)",
                        path.display()
                    )
                })?;
            arms.insert(arm, samples);
        }
        if arms.is_empty() {
            bail!("`{}` holds no `heldout-<arm>.json`\nhint: give the directories bench/gpu_ablation.sh writes (one per seed), where `train eval --out DIR/heldout-sft.json` and the like put their reports", dir.display());
        }
        results.push(SeedResults { label: dir.display().to_string(), arms });
    }
    let groups = a.synth.as_deref().and_then(family_groups);
    if a.synth.is_some() && groups.is_none() {
        bail!(
            "no `manifest.json` in `{}`: give the directory `cudal1 tasks synth` wrote",
            a.synth.as_deref().unwrap_or(Path::new("")).display()
        );
    }
    let group = |t: &str| groups.as_ref().and_then(|g| group_of(g, t));
    let t = ablation::table(&results, &group, a.bootstrap_seed);
    let mut learned = Vec::new();
    for (dir, r) in a.seeds.iter().zip(&results) {
        let lines: Vec<serde_json::Value> = std::fs::read_to_string(dir.join("rl/samples.jsonl"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        let beside = match (r.arms.get("sft"), r.arms.get("rl")) {
            (Some(sft), Some(rl)) => ablation::beside(sft, rl, a.beside),
            _ => Vec::new(),
        };
        learned.push(json!({"seed": r.label, "top": ablation::top_samples(&lines, a.top), "sft_beside_rl": beside}));
    }
    if a.json {
        out::line(json!({"table": t, "learned": learned, "at_step": a.at_step}))?;
        return Ok(Status::Done);
    }
    let cell = |i: Option<cudal1_stats::Interval>, pct: bool| match i {
        Some(i) if pct => {
            format!("{:.1} [{:.1}, {:.1}]", 100.0 * i.median, 100.0 * i.ci_low, 100.0 * i.ci_high)
        }
        Some(i) => format!("{:.3} [{:.3}, {:.3}]", i.median, i.ci_low, i.ci_high),
        None => "-".to_owned(),
    };
    let when = a.at_step.map(|n| format!(", the RL arms after step {n}")).unwrap_or_default();
    out::line(format!(
        "held-out results of {} seeds{when}; 95% bootstrap intervals over seeds and tasks",
        t.seeds.len()
    ))?;
    let mut scope = String::new();
    for r in &t.rows {
        if r.scope != scope {
            scope.clone_from(&r.scope);
            let title = if scope == "all" {
                "all held-out tasks".to_owned()
            } else {
                format!("held-out tasks of {scope}")
            };
            out::line(format!(
                "\n{title}\n{:10} {:>5} {:>6} {:>8} {:>20} {:>20} {:>24}",
                "arm", "seeds", "tasks", "samples", "correct %", "fast_1 %", "geomean (correct)"
            ))?;
        }
        out::line(format!(
            "{:10} {:>5} {:>6} {:>8} {:>20} {:>20} {:>24}",
            r.arm,
            r.seeds,
            r.tasks,
            r.samples,
            cell(r.correct_rate, true),
            cell(r.fast1_rate, true),
            cell(r.geomean_speedup_of_correct, false)
        ))?;
    }
    // Each seed apart: its geomean of correct samples, with its correct and fast_1 shares.
    out::line("\neach seed, all held-out tasks: geomean of correct (correct %, fast_1 %)")?;
    let width = t.seeds.iter().map(String::len).max().unwrap_or(0).max(22);
    out::line(
        std::iter::once(format!("{:10}", "arm"))
            .chain(t.seeds.iter().map(|s| format!(" {s:>width$}")))
            .collect::<String>(),
    )?;
    let pct = |x: Option<f64>| x.map_or("-".to_owned(), |x| format!("{:.0}%", 100.0 * x));
    let seed_cell = |r: &cudal1_train::ablation::SeedRow| {
        let g = r.geomean_speedup_of_correct.map_or("-".to_owned(), |g| format!("{g:.3}"));
        format!("{g} ({}, {})", pct(r.correct_rate), pct(r.fast1_rate))
    };
    let mut arms: Vec<&str> = t.per_seed.iter().map(|r| r.arm.as_str()).collect();
    arms.dedup();
    for arm in arms {
        let mut line = format!("{arm:10}");
        for seed in &t.seeds {
            let r = t.per_seed.iter().find(|r| r.arm == arm && &r.seed == seed);
            let text = r.map_or("-".to_owned(), seed_cell);
            line.push_str(&format!(" {text:>width$}"));
        }
        out::line(line)?;
    }
    out::line("")?;
    for c in &t.comparisons {
        let d = c.fast1_difference.map_or("-".to_owned(), |i| {
            format!(
                "{:+.1} points [{:+.1}, {:+.1}]",
                100.0 * i.median,
                100.0 * i.ci_low,
                100.0 * i.ci_high
            )
        });
        out::line(format!(
            "{} vs {} ({} tasks, {} seeds): fast_1 {d}; geomean of correct, ratio {}",
            c.a,
            c.b,
            c.scope,
            c.seeds,
            cell(c.geomean_ratio, false)
        ))?;
    }
    for l in &learned {
        out::line(format!("\nwhat RL learned, seed {}", l["seed"].as_str().unwrap_or("?")))?;
        if l["top"].as_array().is_none_or(Vec::is_empty) {
            out::line("(no judged program in its RL run)")?;
        }
        for s in l["top"].as_array().into_iter().flatten() {
            out::line(format!(
                "- step {} {} reward {} {} {}; findings {}",
                s["step"],
                s["task"].as_str().unwrap_or("?"),
                s["reward"],
                s["verdict"].as_str().unwrap_or("-"),
                s["reason"].as_str().unwrap_or(""),
                s["findings"]
            ))?;
            if let Some(p) = s["program"].as_str() {
                out::line(indent(p, 40))?;
            }
        }
        for b in l["sft_beside_rl"].as_array().into_iter().flatten() {
            out::line(format!("{}: SFT against RL", b["task"].as_str().unwrap_or("?")))?;
            for (name, side) in [("SFT", &b["a"]), ("RL", &b["b"])] {
                out::line(format!(
                    "  {name}: {} {}",
                    side["verdict"].as_str().unwrap_or("no program"),
                    side["speedup"]
                ))?;
                if let Some(p) = side["program"].as_str() {
                    out::line(indent(p, 40))?;
                }
            }
        }
    }
    Ok(Status::Done)
}

/// A program for the terminal: indented, at most `lines` lines.
fn indent(program: &str, lines: usize) -> String {
    let total = program.lines().count();
    let mut out: Vec<String> = program.lines().take(lines).map(|l| format!("    | {l}")).collect();
    if total > lines {
        out.push(format!("    | ... {} more lines", total - lines));
    }
    out.join("\n")
}

/// `report.json` keeps its replies and verdicts in `report.json.progress.jsonl`.
fn progress_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().map(std::ffi::OsStr::to_os_string).unwrap_or_default();
    name.push(".progress.jsonl");
    out.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::devices_left;

    #[test]
    fn the_policys_gpu_is_left_out_of_evaluation_when_there_are_others() {
        let gpus = |n: u32| (0..n).map(Device::Cuda).collect::<Vec<_>>();
        assert_eq!(
            devices_left(gpus(4), &Device::Cuda(1)),
            vec![Device::Cuda(0), Device::Cuda(2), Device::Cuda(3)]
        );
        assert_eq!(devices_left(gpus(2), &Device::Cuda(0)), vec![Device::Cuda(1)]);
        // One GPU is shared in turn; a policy on the CPU or elsewhere leaves every GPU to timing.
        assert_eq!(devices_left(gpus(1), &Device::Cuda(0)), gpus(1));
        assert_eq!(devices_left(gpus(2), &Device::Cpu), gpus(2));
        assert_eq!(devices_left(gpus(2), &Device::Cuda(7)), gpus(2));
        assert_eq!(devices_left(vec![Device::Cpu], &Device::Cpu), vec![Device::Cpu]);
    }

    #[test]
    fn the_policy_samples_ahead_only_where_it_times_nothing() {
        let gpus = |n: u32| (0..n).map(Device::Cuda).collect::<Vec<_>>();
        let (cuda0, cpu) = (Device::Cuda(0), Device::Cpu);
        // Two GPUs: the policy's is left out of timing, so by default it samples ahead.
        let timing = devices_left(gpus(2), &cuda0);
        assert!(Overlap::Auto.resolve(&cuda0, &timing).unwrap());
        assert!(!Overlap::Off.resolve(&cuda0, &timing).unwrap());
        // One GPU, shared in turn: never, and asking for it is an error that says what to do.
        let one = devices_left(gpus(1), &cuda0);
        assert!(!Overlap::Auto.resolve(&cuda0, &one).unwrap());
        let err = Overlap::On.resolve(&cuda0, &one).unwrap_err().to_string();
        assert!(err.contains("--policy-device") && err.contains("times them"), "{err}");
        // A policy on the CPU beside GPU timing: only when asked; beside CPU timing: never.
        assert!(!Overlap::Auto.resolve(&cpu, &gpus(1)).unwrap());
        assert!(Overlap::On.resolve(&cpu, &gpus(1)).unwrap());
        assert!(Overlap::On.resolve(&cpu, &[Device::Cpu]).is_err());
    }

    /// Every stage that prompts the model takes `--language`, and its prompts ask for what it
    /// names; its run settings name it only when it is not CUDA (older runs resume).
    #[test]
    fn every_prompting_stage_asks_for_the_language_it_is_given() {
        use crate::args::{Cli, Command};
        use clap::Parser;
        let stages: [&[&str]; 4] = [
            &["sft-data", "--suite", "s", "--out", "o"],
            &["self-sup", "--suite", "s", "--out", "o"],
            &["rl", "--suite", "s", "--out", "o"],
            &["eval", "--suite", "s", "--out", "o"],
        ];
        for stage in stages {
            for (extra, triton) in [(&[][..], false), (&["--language", "triton"][..], true)] {
                let argv = ["cudal1", "train"].iter().chain(stage).chain(extra);
                let cli = Cli::try_parse_from(argv).unwrap_or_else(|e| panic!("{stage:?}: {e}"));
                let Command::Train(train) = cli.command else { panic!("{stage:?}") };
                let language = match *train {
                    TrainCommand::SftData(a) => a.language,
                    TrainCommand::SelfSup(a) => a.language,
                    TrainCommand::Rl(a) => a.language,
                    TrainCommand::Eval(a) => a.language,
                    _ => unreachable!(),
                };
                let prompt = stage_prompts(&language).first("class Model: pass").unwrap();
                assert_eq!(prompt.contains("functions under `@triton.jit`"), triton, "{prompt}");
                assert_eq!(prompt.contains("with PyTorch and CUDA."), !triton, "{prompt}");
                let mut settings = json!({"seed": 1});
                record_language(&mut settings, &language);
                let want = if triton {
                    json!({"seed": 1, "language": "triton"})
                } else {
                    json!({"seed": 1})
                };
                assert_eq!(settings, want, "{stage:?}");
            }
        }
    }

    #[test]
    fn a_reward_is_recorded_by_the_name_it_was_given() {
        for name in ["speedup", "correct", "speedup-own-kernels"] {
            assert_eq!(reward_name(RewardKind::parse(name).unwrap()), name);
        }
    }
}

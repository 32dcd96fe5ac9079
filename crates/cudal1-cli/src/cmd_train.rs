//! `cudal1 train`: CUDA-L1's three stages. `sft-data` and `sft` (stage 1), `self-sup` (stage 2),
//! `rl` (stage 3), and `eval`, the same held-out evaluation after each. The stages live in
//! cudal1-train; this module resolves the command line, starts the policy and the engine, and
//! reports.

use crate::args::{
    Overlap, PolicyArgs, RlArgs, SelfSupArgs, SftArgs, SftDataArgs, TrainCommand, TrainEvalArgs,
};
use crate::exit::Status;
use crate::interrupt::{self, Interrupt};
use crate::out;
use crate::reporters::TrainReporter;
use crate::workspace::{Python, Workspace};
use anyhow::{bail, Context, Result};
use cudal1_eval::{Device, Mode};
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
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

fn sft_data(a: &SftDataArgs) -> Result<Status> {
    if a.endpoint.llm_url.is_none() && a.from_solutions.is_none() {
        bail!("nothing to collect\nhint: give `--llm-url URL --model NAME` to sample, and/or `--from-solutions DIR` for a corpus");
    }
    let tasks = tasks_of(&a.suite)?;
    let ws = Workspace::resolve(&a.common, &a.device, None)?;
    let prompts = Prompts::builtin();
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
    }
    if let Some(mut c) = a.endpoint.config() {
        c.max_concurrent = a.concurrency.max(1);
        let llm = OpenAiClient::new(c)?;
        let request =
            ChatRequest::new(vec![]).with_max_tokens(a.max_tokens).with_temperature(a.temperature);
        candidates.extend(data::sample_llm(
            &llm as &dyn Llm,
            &prompts,
            &tasks,
            a.samples,
            &request,
            a.concurrency,
            ws.machine.seed,
            &mut stats,
            &mut |e| reporter.event(e),
        )?);
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
    let settings = json!({"policy": spec, "config": config, "init": a.policy.init, "suite": a.suite, "data": a.data, "eval": ws.settings.key_hash()});
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
    let stop = || interrupt.interrupted();
    let prompts = Prompts::builtin();
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
    let mut reporter = TrainReporter::new(
        "rl",
        &["reward_mean", "correct_rate", "fast1_rate", "best_speedup", "kl", "clip_fraction"],
    );
    if let Some(state) = &state {
        run.resume(&mut policy, state)?;
        reporter.event(TrainEvent::Resumed { step: state.step });
    }
    let engine = ws.engine()?;
    interrupt.watch(engine.canceller());
    let prompts = Prompts::builtin();
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
    let summary = grpo::run(
        &mut policy,
        &mut env,
        &config,
        &run,
        state.map_or(0, |s| s.step),
        &stop,
        &mut |e| reporter.event(e),
    )?;
    reporter.finish();
    drop(env);
    engine.finish();
    policy.shutdown();
    finish(&run, "rl", &grpo::PLOTTED, summary.metrics.last(), &interrupt)
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
    let mut reporter = TrainReporter::new("held-out", &[]);
    let prompts = Prompts::builtin();
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
    let full = json!({"summary": report.summary(), "init": a.policy.init, "samples": report.samples, "mode": Mode::Full});
    std::fs::write(&a.out, serde_json::to_string_pretty(&full)?)
        .with_context(|| format!("writing `{}`", a.out.display()))?;
    out::line(json!({"summary": report.summary(), "report": a.out}))?;
    Ok(Status::Done)
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

    #[test]
    fn a_reward_is_recorded_by_the_name_it_was_given() {
        for name in ["speedup", "correct", "speedup-own-kernels"] {
            assert_eq!(reward_name(RewardKind::parse(name).unwrap()), name);
        }
    }
}

//! `cudal1 train`: CUDA-L1's three stages. `sft-data` and `sft` (stage 1), `self-sup` (stage 2),
//! `rl` (stage 3), and `eval`, the same held-out evaluation after each. The stages live in
//! cudal1-train; this module resolves the command line, starts the policy and the engine, and
//! reports.

use crate::args::{CommonEval, DeviceFlag};
use crate::exit::Status;
use crate::interrupt::{self, Interrupt};
use crate::out;
use crate::workspace::Workspace;
use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use cudal1_eval::{Device, Evaluator, Mode};
use cudal1_llm::{ChatRequest, Llm, OpenAiClient};
use cudal1_model::messages::{Aggregation, Lora, ModelSource, Optimizer};
use cudal1_model::ModelConfig;
use cudal1_search::Prompts;
use cudal1_task::{load_suite, match_candidates, CandidateSource, Task};
use cudal1_train::data::{self, Candidate, Collected, SftExample};
use cudal1_train::grpo::{self, GrpoConfig};
use cudal1_train::heldout;
use cudal1_train::kernels::KernelEnv;
use cudal1_train::run::{committed_checkpoint, RunDir};
use cudal1_train::selfsup::{self, SelfSupConfig};
use cudal1_train::sft::{self, SftConfig};
use cudal1_train::{Limits, Policy, PolicySpec, Sampling, TrainEvent};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

#[derive(Subcommand)]
pub enum TrainCommand {
    /// Stage 1 data: sample candidates from OpenAI-compatible endpoints and/or take a corpus of
    /// solutions, keep those the evaluator finds correct (correctness mode), once per task and
    /// normalised source, and write them as JSONL examples with their provenance.
    SftData(SftDataArgs),
    /// Stage 1: fine-tune the policy (full or LoRA) on supervised examples with the chat template.
    Sft(SftArgs),
    /// Stage 2: rounds in which the policy samples, the evaluator keeps the correct programs not
    /// seen before, and the policy is fine-tuned on them (with a replay of stage 1's data).
    SelfSup(SelfSupArgs),
    /// Stage 3: GRPO with CUDA-L1's contrastive prompts and rewards from measured speedups.
    Rl(RlArgs),
    /// The held-out evaluation (same prompts, seeds and sampling every time): correct rate,
    /// fast_1, geomean speedup of correct samples and best-of-G, with intervals over tasks.
    Eval(EvalArgs),
    /// The ablation table over stages and seeds from held-out results (`heldout-<arm>.json` in
    /// each seed's directory, as bench/gpu_ablation.sh leaves them): correct %, fast_1 % and the
    /// geomean speedup of correct samples with 95% bootstrap intervals over tasks and seeds, RL
    /// against self-supervised and against the control; then what RL learned (its top-reward
    /// samples with verdicts and findings, SFT's program beside RL's for a few tasks).
    Table(TableArgs),
}

#[derive(Args, Debug)]
pub struct PolicyArgs {
    /// A Hugging Face checkpoint directory (default: the embedded SmolLM2-135M-Instruct).
    #[arg(long, conflicts_with = "gguf_dir")]
    pub model_dir: Option<PathBuf>,
    /// A directory holding a GGUF model.
    #[arg(long)]
    pub gguf_dir: Option<PathBuf>,
    /// The GGUF file inside `--gguf-dir`, when it holds several.
    #[arg(long, requires = "gguf_dir")]
    pub gguf_file: Option<String>,
    /// Start from the last committed checkpoint of another run (its weights; a fresh optimizer).
    #[arg(long)]
    pub init: Option<PathBuf>,
    /// Where the policy runs: `cpu` or `cuda:N` (default: `cuda:0` when there is a GPU).
    #[arg(long)]
    pub policy_device: Option<String>,
    /// `float32`, `bfloat16` or `float16` (default: float32 on the CPU, bfloat16 on a GPU).
    #[arg(long)]
    pub dtype: Option<String>,
    /// LoRA rank; 0 trains every weight.
    #[arg(long, default_value_t = 16)]
    pub lora_r: u32,
    /// LoRA alpha (default: twice the rank).
    #[arg(long)]
    pub lora_alpha: Option<f64>,
    /// AdamW learning rate (default: 1e-4 with LoRA, 1e-5 for full fine-tuning).
    #[arg(long)]
    pub lr: Option<f64>,
    /// torch CPU threads of the policy.
    #[arg(long)]
    pub threads: Option<usize>,
}

#[derive(Args, Debug)]
pub struct SftDataArgs {
    /// The tasks (a suite in KernelBench's layout).
    #[arg(long)]
    pub suite: PathBuf,
    /// The JSONL file of examples to write.
    #[arg(long)]
    pub out: PathBuf,
    /// The server to sample from.
    #[command(flatten)]
    pub endpoint: crate::args::EndpointArgs,
    /// Replies sampled per task.
    #[arg(long, default_value_t = 4)]
    pub samples: u32,
    /// Tokens per reply.
    #[arg(long, default_value_t = 4096)]
    pub max_tokens: u32,
    /// Sampling temperature.
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f32,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// A corpus of solutions laid out like the suite (`level1/12_Name/*.py`), taken as replies.
    #[arg(long)]
    pub from_solutions: Option<PathBuf>,
    /// Devices that judge the programs (`cpu`, `cuda`, `cuda:N`, `all`).
    #[arg(long, value_parser = crate::args::parse_device)]
    pub device: Option<DeviceFlag>,
    #[command(flatten)]
    pub common: CommonEval,
}

#[derive(Args, Debug)]
pub struct SftArgs {
    /// Supervised examples (JSONL from `train sft-data`); repeatable.
    #[arg(long, required = true)]
    pub data: Vec<PathBuf>,
    /// The run directory (the same one resumes the run).
    #[arg(long)]
    pub out: PathBuf,
    /// Passes over the examples.
    #[arg(long, default_value_t = 3)]
    pub epochs: u32,
    /// Examples per step.
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Examples per forward pass (memory only: results do not depend on it).
    #[arg(long, default_value_t = 4)]
    pub micro_batch: u32,
    /// Commit a checkpoint every this many steps.
    /// Commit a checkpoint every this many steps.
    #[arg(long, default_value_t = 10)]
    pub save_every: u64,
    /// Seed of the data order and of the model's initial state.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// The Python interpreter with PyTorch, transformers and peft.
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Where the model worker is cached (default: ~/.cache/cudal1).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct SelfSupArgs {
    /// The training tasks.
    #[arg(long)]
    pub suite: PathBuf,
    /// Stage 1's examples, replayed in each round.
    #[arg(long)]
    pub data: Vec<PathBuf>,
    /// The run directory (the same one resumes the run).
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, default_value_t = 3)]
    pub rounds: u64,
    /// Samples per task per round.
    #[arg(long, default_value_t = 4)]
    pub samples: u32,
    /// Stage-1 examples replayed per round, as a fraction of them.
    #[arg(long, default_value_t = 0.5)]
    pub replay: f64,
    /// Passes over the examples.
    #[arg(long, default_value_t = 1)]
    pub epochs: u32,
    /// Examples per step.
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    /// Sequences per forward pass (memory only: results do not depend on it).
    #[arg(long, default_value_t = 4)]
    pub micro_batch: u32,
    /// Sampling temperature of the policy.
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f64,
    /// Tokens per reply.
    #[arg(long, default_value_t = 1024)]
    pub max_tokens: u32,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Devices that judge the programs (default: every GPU but the policy's, or the CPU).
    #[arg(long, value_parser = crate::args::parse_device)]
    pub device: Option<DeviceFlag>,
    #[command(flatten)]
    pub common: CommonEval,
}

#[derive(Args, Debug)]
pub struct RlArgs {
    /// The training tasks.
    #[arg(long)]
    pub suite: PathBuf,
    /// The run directory (the same one resumes the run).
    #[arg(long)]
    pub out: PathBuf,
    /// GRPO steps in all (rerunning with a larger number continues the run).
    #[arg(long, default_value_t = 20)]
    pub steps: u64,
    /// Groups (prompts) per step.
    #[arg(long, default_value_t = 4)]
    pub groups: usize,
    /// Samples per group (G).
    #[arg(long, default_value_t = 8)]
    pub group_size: u32,
    /// PPO updates per batch (at least 2, so that the ratio clip acts).
    #[arg(long, default_value_t = 2)]
    pub updates: u32,
    #[command(flatten)]
    pub exemplar: crate::args::ExemplarArgs,
    /// What the prompts ask programs to be written in: `cuda` or `triton` (as `optimize`).
    #[arg(long, value_enum, default_value_t)]
    pub language: crate::args::LanguageFlag,
    /// PPO ratio clip (both sides).
    #[arg(long, default_value_t = 0.2)]
    pub clip: f64,
    /// KL penalty coefficient towards the reference policy.
    #[arg(long, default_value_t = 0.01)]
    pub kl: f64,
    /// Floor of a group's reward spread, so that timing noise is not signal.
    #[arg(long, default_value_t = 0.05)]
    pub std_floor: f64,
    /// Advantages are clipped to [-k, k] (CUDA-L1: 1.5).
    #[arg(long, default_value_t = 1.5)]
    pub advantage_clip: f64,
    /// `token_mean`, `sequence_mean` or `fixed` (with `--normalizer`).
    #[arg(long, default_value = "token_mean")]
    pub aggregation: String,
    /// The constant every token's loss is divided by, for `--aggregation fixed`.
    #[arg(long)]
    pub normalizer: Option<f64>,
    /// The reward of a wrong, exploiting, unparsable or cut-off program.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub low_reward: f64,
    /// What a correct program earns: `speedup` (its measured speedup, CUDA-L1), `correct` (1
    /// whatever its speed: the control run), or `speedup-own-kernels` (its speedup when at least
    /// half of its GPU time runs in kernels it built itself, else at most 1: no gain from library
    /// kernels alone; each correct program is profiled with Nsight Compute, on a GPU).
    #[arg(long, default_value = "speedup")]
    pub reward: String,
    /// How `speedup-own-kernels` profiles (Nsight Compute).
    #[command(flatten)]
    pub ncu: crate::args::NcuArgs,
    /// Programs per trajectory: each sample's next turn is prompted with its program's verdict
    /// and reason (`refine.j2`); a turn's reward adds the discounted scores of the turns after it
    /// (`--turn-gamma`), and advantages are normalised per turn within the group. Runs without
    /// `--overlap` (a later turn needs its first turn judged).
    #[arg(long, default_value_t = 1)]
    pub turns: u32,
    /// How much a later turn's score adds to an earlier turn's reward, per turn (Kevin: 0.4).
    #[arg(long, default_value_t = 0.4)]
    pub turn_gamma: f64,
    /// A trajectory ends early at a correct program with at least this speedup.
    #[arg(long, default_value_t = 1.0)]
    pub turn_target: f64,
    /// Sampling temperature of the policy.
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f64,
    /// Nucleus sampling of the policy.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f64,
    /// Tokens per reply.
    #[arg(long, default_value_t = 1024)]
    pub max_tokens: u32,
    /// Draws of new groups per step to replace groups without signal (all rewards equal).
    #[arg(long, default_value_t = 2)]
    pub max_refills: usize,
    /// Train on groups without signal too, with advantage 0 (only the KL penalty moves them),
    /// as TRL's GRPO does, instead of dropping them. With `--max-refills 0` every step samples
    /// and trains on exactly `--groups` x `--group-size` samples: what a step costs, even for a
    /// policy that writes no program yet (bench/gpu_big_policy.sh).
    #[arg(long)]
    pub keep_flat_groups: bool,
    /// Commit a checkpoint every this many steps.
    #[arg(long, default_value_t = 1)]
    pub save_every: u64,
    /// Sequences per forward pass (memory only: results do not depend on it).
    #[arg(long, default_value_t = 4)]
    pub micro_batch: u32,
    /// Sample the next step while this step's programs are judged (its samples then come from
    /// the weights before this step's update): `auto` when the policy's GPU times no programs,
    /// `on` wherever the policy's device is not a timing device, or `off`.
    #[arg(long, value_enum, default_value_t = Overlap::Auto)]
    pub overlap: Overlap,
    /// Seconds of timed blocks per correct sample of a step (both sides together), apart from
    /// `--budget`, which the held-out evaluation uses (default: `--budget`).
    #[arg(long)]
    pub reward_budget: Option<f64>,
    /// Held-out tasks evaluated during the run (every `--heldout-every` steps and after the last,
    /// the same prompts, seed and sampling each time); their numbers go to `heldout.jsonl` and
    /// each report to `heldout/step-N.json` in the run directory.
    #[arg(long)]
    pub heldout: Option<PathBuf>,
    /// Steps between held-out evaluations.
    #[arg(long, default_value_t = 10, requires = "heldout")]
    pub heldout_every: u64,
    /// Held-out samples per task.
    #[arg(long, default_value_t = 4, requires = "heldout")]
    pub heldout_samples: u32,
    /// Held-out sampling temperature (default: `--temperature`).
    #[arg(long, requires = "heldout")]
    pub heldout_temperature: Option<f64>,
    /// Held-out tokens per reply (default: `--max-tokens`).
    #[arg(long, requires = "heldout")]
    pub heldout_max_tokens: Option<u32>,
    /// Seed of the held-out samples (`train eval --sample-seed`: keep them equal, so that the
    /// stages compare).
    #[arg(long, default_value_t = 1234, requires = "heldout")]
    pub heldout_seed: u64,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Devices that time the programs (default: every GPU but the policy's, or the one GPU in
    /// turn with the policy).
    #[arg(long, value_parser = crate::args::parse_device)]
    pub device: Option<DeviceFlag>,
    #[command(flatten)]
    pub common: CommonEval,
}

/// `train rl --overlap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Overlap {
    Auto,
    On,
    Off,
}

impl Overlap {
    /// Whether the policy samples while programs are timed. Never on a device that times them
    /// (no policy kernel beside a timed candidate); by default only for a policy on a GPU of its
    /// own (a policy on the CPU would take the cores that timed programs launch from).
    fn resolve(self, policy_device: &str, timing: &[Device]) -> Result<bool> {
        let policy = Device::parse(policy_device).map_err(anyhow::Error::msg)?;
        let apart = !timing.contains(&policy);
        match self {
            Overlap::Off => Ok(false),
            Overlap::Auto => Ok(apart && policy.is_cuda()),
            Overlap::On if apart => Ok(true),
            Overlap::On => bail!(
                "`--overlap on` needs the policy on a device that times no programs, but `{policy_device}` times them\nhint: give the policy a GPU of its own (`--policy-device cuda:0` with `--device cuda:1`), or leave `--overlap` at `auto`"
            ),
        }
    }
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// The held-out tasks.
    #[arg(long)]
    pub suite: PathBuf,
    /// Where the report (JSON) goes.
    #[arg(long)]
    pub out: PathBuf,
    /// Samples per task (G).
    #[arg(long, default_value_t = 4)]
    pub samples: u32,
    /// Sampling temperature of the policy.
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f64,
    /// Tokens per reply.
    #[arg(long, default_value_t = 1024)]
    pub max_tokens: u32,
    /// Seed of the samples: keep it for every stage, so that they compare.
    #[arg(long, default_value_t = 1234)]
    pub sample_seed: u64,
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Devices that judge the samples (default: every GPU but the policy's, or the one GPU in
    /// turn with the policy).
    #[arg(long, value_parser = crate::args::parse_device)]
    pub device: Option<DeviceFlag>,
    #[command(flatten)]
    pub common: CommonEval,
}

#[derive(Args, Debug)]
pub struct TableArgs {
    /// One directory per seed, each holding `heldout-<arm>.json` (arms: base, sft, self-sup, rl,
    /// control, or any other name) and, for what RL learned, the RL run in `rl/`.
    #[arg(required = true)]
    pub seeds: Vec<PathBuf>,
    /// The synthetic suite (`tasks synth`'s directory, with `manifest.json`): families never
    /// trained on are reported apart from the rest.
    #[arg(long)]
    pub synth: Option<PathBuf>,
    /// Top-reward samples of each seed's RL run shown.
    #[arg(long, default_value_t = 3)]
    pub top: usize,
    /// Tasks of each seed shown with SFT's program beside RL's.
    #[arg(long, default_value_t = 2)]
    pub beside: usize,
    /// Seed of the bootstrap.
    #[arg(long, default_value_t = 1)]
    pub bootstrap_seed: u64,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
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

/// The policy's spec from the flags; the device defaults to the first GPU when there is one.
fn policy_spec(a: &PolicyArgs, gpus: usize) -> Result<PolicySpec> {
    let device = a.policy_device.clone().unwrap_or_else(|| {
        if gpus > 0 {
            "cuda:0".into()
        } else {
            "cpu".into()
        }
    });
    Device::parse(&device).map_err(anyhow::Error::msg).context("`--policy-device`")?;
    let dtype = a.dtype.clone().unwrap_or_else(|| {
        if device == "cpu" {
            "float32".into()
        } else {
            "bfloat16".into()
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
    Ok(PolicySpec {
        source,
        device,
        dtype,
        lora,
        optimizer: Optimizer { lr, ..Optimizer::default() },
    })
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

/// The evaluation workspace; with several GPUs and no `--device`, the policy's GPU is left to it.
fn eval_workspace(
    common: &CommonEval,
    device: Option<&DeviceFlag>,
    policy_device: &str,
) -> Result<Workspace> {
    let mut ws = Workspace::resolve(common, device, None)?;
    if device.is_none() {
        ws.devices = evaluation_devices(std::mem::take(&mut ws.devices), policy_device);
    }
    tracing::info!(devices = ?ws.devices, policy = policy_device, "evaluation devices");
    Ok(ws)
}

/// The devices that judge programs when none was asked for: with several GPUs, all but the
/// policy's (it generates and trains there while they time); with one, that one, in turn with
/// the policy.
fn evaluation_devices(mut devices: Vec<Device>, policy_device: &str) -> Vec<Device> {
    if devices.len() > 1 {
        if let Ok(Device::Cuda(n)) = Device::parse(policy_device) {
            devices.retain(|d| *d != Device::Cuda(n));
        }
    }
    devices
}

/// Progress of a stage: a bar over its steps and a line per step.
struct Reporter {
    bar: ProgressBar,
    keys: &'static [&'static str],
    /// Where no bar is drawn (stderr is not a terminal: a log file, a cluster's job output),
    /// progress goes out as plain lines, at most one per [`LOG_EVERY`] between phases.
    what: String,
    last_line: Option<std::time::Instant>,
}

/// How often a log (no terminal) gets a progress line within one phase.
const LOG_EVERY: Duration = Duration::from_secs(15);

impl Reporter {
    fn new(what: &str, keys: &'static [&'static str]) -> Reporter {
        let bar = ProgressBar::new(0);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} {prefix} {msg}",
            )
            .expect("valid template"),
        );
        bar.set_prefix(what.to_owned());
        bar.enable_steady_tick(Duration::from_millis(200));
        Reporter { bar, keys, what: what.to_owned(), last_line: None }
    }

    fn event(&mut self, e: TrainEvent) {
        match e {
            TrainEvent::StepStarted { step, of } => {
                self.bar.set_length(of);
                self.bar.set_position(step - 1);
            }
            TrainEvent::Phase { step, phase } => {
                self.log(format!("step {step}: {phase}"), true);
                self.bar.set_message(phase);
            }
            TrainEvent::Progress { done, of, what } => {
                self.log(format!("{done}/{of} {what}"), done == of);
                self.bar.set_message(format!("{done}/{of} {what}"));
            }
            TrainEvent::StepFinished { step, metrics } => {
                self.bar.set_position(step);
                let parts: Vec<String> = self
                    .keys
                    .iter()
                    .filter_map(|k| {
                        let v = metrics.get(*k)?;
                        Some(match v.as_f64() {
                            Some(x) if x.fract() != 0.0 => format!("{k} {x:.4}"),
                            _ => format!("{k} {v}"),
                        })
                    })
                    .collect();
                self.say(format!("step {step}: {}", parts.join(", ")));
            }
            TrainEvent::Committed { step } => tracing::info!(step, "committed"),
            TrainEvent::Resumed { step } => self.say(format!("resuming after step {step}")),
            TrainEvent::Reused { what } => self.say(format!("using {what} again")),
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }

    /// A line above the bar, or in the log where no bar is drawn.
    fn say(&self, line: String) {
        if self.bar.is_hidden() {
            eprintln!("[{}] {line}", self.what);
        } else {
            self.bar.println(line);
        }
    }

    /// A plain progress line where no bar is drawn: always when `always`, else throttled.
    fn log(&mut self, line: String, always: bool) {
        if !self.bar.is_hidden() {
            return;
        }
        let now = std::time::Instant::now();
        if always || self.last_line.is_none_or(|t| now.duration_since(t) >= LOG_EVERY) {
            self.last_line = Some(now);
            eprintln!("[{}] {line}", self.what);
        }
    }
}

fn sft_data(a: &SftDataArgs) -> Result<Status> {
    if a.endpoint.llm_url.is_none() && a.from_solutions.is_none() {
        bail!("nothing to collect\nhint: give `--llm-url URL --model NAME` to sample, and/or `--from-solutions DIR` for a corpus");
    }
    let tasks = tasks_of(&a.suite)?;
    let ws = Workspace::resolve(&a.common, a.device.as_ref(), None)?;
    let prompts = Prompts::builtin();
    let interrupt = interrupt::install("the judging under way");
    let engine = ws.engine()?;
    interrupt.watch(engine.canceller());
    let mut reporter = Reporter::new("sft-data", &[]);
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
            ws.seed,
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
    let (interp, _, cache) =
        crate::workspace::interpreter(a.python.as_deref(), a.cache_dir.as_deref())?;
    let spec = policy_spec(&a.policy, interp.probe.gpus.len())?;
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
    let mut policy = start_policy(&a.policy, &spec, &interp.path, &cache, false, a.seed)?;
    let resume = state.as_ref().map_or(0, |s| s.step);
    let mut reporter = Reporter::new("sft", &["loss", "grad_norm", "tokens"]);
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
    let (interp, _, cache) =
        crate::workspace::interpreter(a.common.python.as_deref(), a.common.cache_dir.as_deref())?;
    let spec = policy_spec(&a.policy, interp.probe.gpus.len())?;
    let ws = eval_workspace(&a.common, a.device.as_ref(), &spec.device)?;
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
    let mut policy = start_policy(&a.policy, &spec, &interp.path, &cache, false, config.seed)?;
    let mut reporter = Reporter::new("self-sup", &["new_kept", "judged_correct_rate", "loss"]);
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
    let (interp, _, cache) =
        crate::workspace::interpreter(a.common.python.as_deref(), a.common.cache_dir.as_deref())?;
    let spec = policy_spec(&a.policy, interp.probe.gpus.len())?;
    let ws = eval_workspace(&a.common, a.device.as_ref(), &spec.device)?;
    let reward_budget = a.reward_budget.unwrap_or(a.common.budget);
    if !(reward_budget.is_finite() && reward_budget > 0.0) {
        bail!("`--reward-budget` must be a positive number of seconds, not {reward_budget}");
    }
    if a.heldout_every == 0 {
        bail!("`--heldout-every` must be at least 1");
    }
    let heldout_tasks = a.heldout.as_deref().map(tasks_of).transpose()?;
    let aggregation = Aggregation::parse(&a.aggregation).map_err(anyhow::Error::msg)?;
    let reward = cudal1_train::kernels::RewardKind::parse(&a.reward).map_err(anyhow::Error::msg)?;
    if reward.needs_own_share() && !ws.on_gpu() {
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
        overlap: a.turns <= 1 && a.overlap.resolve(&spec.device, &ws.devices)?,
        keep_flat_groups: a.keep_flat_groups,
    };
    config.check()?;
    let sampler = a.exemplar.sampler()?;
    let mut settings = json!({
        "policy": spec, "config": config, "init": a.policy.init, "suite": a.suite, "eval": ws.settings.key_hash(),
        "exemplars": a.exemplar.exemplars, "bucket_width": a.exemplar.bucket_width, "exemplar_temperature": a.exemplar.exemplar_temperature, "low_reward": a.low_reward, "reward": a.reward,
    });
    if a.turns > 1 {
        settings["turn_target"] = json!(a.turn_target);
    }
    // Runs made before the flag existed asked for CUDA, and resume as such.
    if a.language != crate::args::LanguageFlag::Cuda {
        settings["language"] = json!(cudal1_search::Language::from(a.language).as_str());
    }
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
    let mut policy = start_policy(&a.policy, &spec, &interp.path, &cache, a.kl > 0.0, config.seed)?;
    let mut reporter = Reporter::new(
        "rl",
        &[
            "reward_mean",
            "correct_rate",
            "fast1_rate",
            "best_speedup",
            "kl",
            "clip_fraction",
            "generate_tokens_per_s",
        ],
    );
    if let Some(state) = &state {
        run.resume(&mut policy, state)?;
        reporter.event(TrainEvent::Resumed { step: state.step });
    }
    let engine = Evaluator::start(cudal1_train::kernels::reward_engine(
        ws.engine_config(),
        Duration::from_secs_f64(reward_budget),
    ))
    .context("starting the evaluation engine of the rewards")?;
    interrupt.watch(engine.canceller());
    let prompts = Prompts::builtin().language(a.language.into());
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
            let mut config = ws.engine_config();
            config.pipeline = true;
            let own = Evaluator::start(config).map_err(|e| {
                cudal1_train::TrainError::Config(format!(
                    "starting the held-out evaluation's engine: {e}"
                ))
            })?;
            interrupt.watch(own.canceller());
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
        let who = json!({"policy": spec, "step": step, "eval": engine.settings().key_hash(), "gpu_class": ws.judge.gpu_class, "judge": ws.judge.version});
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
        let full = json!({"summary": report.summary(), "groups": groups, "step": step, "seconds": seconds, "init": run.root(), "samples": report.samples, "mode": Mode::Full});
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

fn eval(a: &EvalArgs) -> Result<Status> {
    let tasks = tasks_of(&a.suite)?;
    let (interp, _, cache) =
        crate::workspace::interpreter(a.common.python.as_deref(), a.common.cache_dir.as_deref())?;
    let spec = policy_spec(&a.policy, interp.probe.gpus.len())?;
    let ws = eval_workspace(&a.common, a.device.as_ref(), &spec.device)?;
    let interrupt = interrupt::install("the evaluation under way");
    let mut policy = start_policy(&a.policy, &spec, &interp.path, &cache, false, 0)?;
    let engine = ws.engine()?;
    interrupt.watch(engine.canceller());
    let mut reporter = Reporter::new("held-out", &[]);
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
    let who = json!({"policy": spec, "checkpoint": checkpoint, "eval": ws.settings.key_hash(), "gpu_class": ws.judge.gpu_class, "judge": ws.judge.version});
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
    let full = json!({"summary": report.summary(), "groups": groups, "init": a.policy.init, "samples": report.samples, "mode": Mode::Full});
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
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(arm) = name.strip_prefix("heldout-").and_then(|n| n.strip_suffix(".json"))
            else {
                continue;
            };
            let text = std::fs::read_to_string(e.path())?;
            let v: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("reading `{}`", e.path().display()))?;
            let samples: Vec<heldout::SampleResult> = serde_json::from_value(v["samples"].clone())
                .with_context(|| {
                    format!(
                        "`{}` holds no held-out samples (`train eval` writes them)",
                        e.path().display()
                    )
                })?;
            arms.insert(arm.to_owned(), samples);
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
        out::line(json!({"table": t, "learned": learned}))?;
        return Ok(Status::Done);
    }
    let cell = |i: Option<cudal1_stats::Interval>, pct: bool| match i {
        Some(i) if pct => {
            format!("{:.1} [{:.1}, {:.1}]", 100.0 * i.median, 100.0 * i.ci_low, 100.0 * i.ci_high)
        }
        Some(i) => format!("{:.3} [{:.3}, {:.3}]", i.median, i.ci_low, i.ci_high),
        None => "-".to_owned(),
    };
    out::line(format!(
        "held-out results of {} seeds; 95% bootstrap intervals over seeds and tasks",
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

    #[test]
    fn the_policys_gpu_is_left_out_of_evaluation_when_there_are_others() {
        let gpus = |n: u32| (0..n).map(Device::Cuda).collect::<Vec<_>>();
        assert_eq!(
            evaluation_devices(gpus(4), "cuda:1"),
            vec![Device::Cuda(0), Device::Cuda(2), Device::Cuda(3)]
        );
        assert_eq!(evaluation_devices(gpus(2), "cuda:0"), vec![Device::Cuda(1)]);
        // One GPU is shared in turn; a policy on the CPU or elsewhere leaves every GPU to timing.
        assert_eq!(evaluation_devices(gpus(1), "cuda:0"), gpus(1));
        assert_eq!(evaluation_devices(gpus(2), "cpu"), gpus(2));
        assert_eq!(evaluation_devices(gpus(2), "cuda:7"), gpus(2));
        assert_eq!(evaluation_devices(vec![Device::Cpu], "cpu"), vec![Device::Cpu]);
    }

    #[test]
    fn the_policy_samples_ahead_only_where_it_times_nothing() {
        let gpus = |n: u32| (0..n).map(Device::Cuda).collect::<Vec<_>>();
        // Two GPUs: the policy's is left out of timing, so by default it samples ahead.
        let timing = evaluation_devices(gpus(2), "cuda:0");
        assert!(Overlap::Auto.resolve("cuda:0", &timing).unwrap());
        assert!(!Overlap::Off.resolve("cuda:0", &timing).unwrap());
        // One GPU, shared in turn: never, and asking for it is an error that says what to do.
        let one = evaluation_devices(gpus(1), "cuda:0");
        assert!(!Overlap::Auto.resolve("cuda:0", &one).unwrap());
        let err = Overlap::On.resolve("cuda:0", &one).unwrap_err().to_string();
        assert!(err.contains("--policy-device") && err.contains("times them"), "{err}");
        // A policy on the CPU beside GPU timing: only when asked; beside CPU timing: never.
        assert!(!Overlap::Auto.resolve("cpu", &gpus(1)).unwrap());
        assert!(Overlap::On.resolve("cpu", &gpus(1)).unwrap());
        assert!(Overlap::On.resolve("cpu", &[Device::Cpu]).is_err());
    }
}

//! `cudal1 train`'s arguments.

use super::{CommonEval, DeviceArg, EndpointArgs, ExemplarArgs, LanguageArg, NcuArgs, PythonFlags};
use clap::{Args, Subcommand, ValueEnum};
use cudal1_eval::Device;
use cudal1_model::messages::Aggregation;
use cudal1_train::kernels::RewardKind;
use std::path::PathBuf;

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
    #[arg(long, value_parser = Device::parse)]
    pub policy_device: Option<Device>,
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
#[command(
    mut_arg("device", |a| a.help("Devices that judge the programs (`cpu`, `cuda`, `cuda:N`, `all`)")),
)]
pub struct SftDataArgs {
    /// The tasks (a suite in KernelBench's layout).
    #[arg(long)]
    pub suite: PathBuf,
    /// The JSONL file of examples to write.
    #[arg(long)]
    pub out: PathBuf,
    /// The server to sample from.
    #[command(flatten)]
    pub endpoint: EndpointArgs,
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
    #[command(flatten)]
    pub language: LanguageArg,
    #[command(flatten)]
    pub device: DeviceArg,
    #[command(flatten)]
    pub common: CommonEval,
}

#[derive(Args, Debug)]
#[command(
    mut_arg("python", |a| a.help("The Python interpreter with PyTorch, transformers and peft")),
    mut_arg("cache_dir", |a| a.help("Where the model worker is cached (default: ~/.cache/cudal1)")),
)]
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
    #[arg(long, default_value_t = 10)]
    pub save_every: u64,
    /// Seed of the data order and of the model's initial state.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub python: PythonFlags,
}

#[derive(Args, Debug)]
#[command(
    mut_arg("device", |a| a.help("Devices that judge the programs (default: every GPU but the policy's, or the CPU)")),
)]
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
    pub language: LanguageArg,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub device: DeviceArg,
    #[command(flatten)]
    pub common: CommonEval,
}

#[derive(Args, Debug)]
#[command(
    mut_arg("device", |a| a.help("Devices that time the programs (default: every GPU but the policy's, or the one GPU in turn with the policy)")),
    mut_arg("language", |a| a.help("What the prompts ask programs to be written in: `cuda` or `triton` (as `optimize`)")),
)]
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
    pub exemplar: ExemplarArgs,
    #[command(flatten)]
    pub language: LanguageArg,
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
    #[arg(long, default_value = "token_mean", value_parser = Aggregation::parse)]
    pub aggregation: Aggregation,
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
    #[arg(long, default_value = "speedup", value_parser = RewardKind::parse)]
    pub reward: RewardKind,
    /// How `speedup-own-kernels` profiles (Nsight Compute).
    #[command(flatten)]
    pub ncu: NcuArgs,
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
    #[command(flatten)]
    pub device: DeviceArg,
    #[command(flatten)]
    pub common: CommonEval,
}

/// `train rl --overlap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Overlap {
    Auto,
    On,
    Off,
}

#[derive(Args, Debug)]
#[command(
    mut_arg("device", |a| a.help("Devices that judge the samples (default: every GPU but the policy's, or the one GPU in turn with the policy)")),
)]
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
    pub language: LanguageArg,
    #[command(flatten)]
    pub policy: PolicyArgs,
    #[command(flatten)]
    pub device: DeviceArg,
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
    /// Each stage-3 arm as its held-out evaluation after this RL step (`<arm>/heldout/step-N.json`
    /// of its run directory, written with `--heldout-every`) instead of its last (`heldout-<arm>.json`);
    /// a seed whose arm has no evaluation at that step leaves the arm out.
    #[arg(long, value_name = "N")]
    pub at_step: Option<u64>,
    /// One JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

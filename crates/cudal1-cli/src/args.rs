//! Command-line arguments.

use clap::{Args, Parser, Subcommand, ValueEnum};
use cudal1_eval::{Baseline, Device, Mode, TimingWindow};
use std::path::PathBuf;

/// `--device`: one device or every visible GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceFlag {
    All,
    One(Device),
}

/// Parses `cpu`, `cuda`, `cuda:N` or `all`.
pub fn parse_device(text: &str) -> Result<DeviceFlag, String> {
    if text == "all" {
        return Ok(DeviceFlag::All);
    }
    Device::parse(text)
        .map(DeviceFlag::One)
        .map_err(|_| format!("unknown device `{text}`: use `cpu`, `cuda`, `cuda:N` or `all`"))
}

/// A size in bytes: `512M`, `4G`, `1.5GiB`, `800000000` (K, M, G, T are powers of 1024).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().trim_end_matches("ib").trim_end_matches('b')
    {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => {
            return Err(format!(
                "`{text}` is not a size: use a number with K, M, G or T (`512M`, `4G`)"
            ))
        }
    };
    let value: f64 = number.parse().map_err(|_| {
        format!("`{text}` is not a size: use a number with K, M, G or T (`512M`, `4G`)")
    })?;
    let bytes = value * (1u64 << shift) as f64;
    if !(bytes >= 1.0 && bytes < u64::MAX as f64) {
        return Err(format!("`{text}` is not a usable size"));
    }
    Ok(bytes as u64)
}

/// [`parse_size`], or `0`.
pub fn parse_size_or_zero(text: &str) -> Result<u64, String> {
    if text.trim() == "0" {
        Ok(0)
    } else {
        parse_size(text)
    }
}

fn parse_window(text: &str) -> Result<TimingWindow, String> {
    TimingWindow::parse(text)
}

pub fn parse_mode(text: &str) -> Result<Mode, String> {
    Mode::parse(text)
}

/// Formats of other systems' outputs that `eval --from` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FromFormat {
    /// CUDA-L1's release files (`optimized_cuda_code/*.json`): rows with `level_id`, `task_id`,
    /// `ref_code`, `custom_code` and `score_*`, as JSON lines or grouped by level.
    #[value(name = "cuda-l1")]
    CudaL1,
    /// A KernelBench generation directory (`level_1_problem_12_sample_0_kernel.py`); needs
    /// `--suite` for the references.
    Kernelbench,
}

#[derive(Parser)]
#[command(
    name = "cudal1",
    version,
    about = "Make PyTorch programs faster with LLM-written CUDA, verified by an evaluator that cannot be fooled"
)]
pub struct Cli {
    /// More detail: whole reasons in tables and info logging (-v), debug logging (-vv); also
    /// `RUST_LOG`.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Evaluate candidates against references: verdicts, reasons and speedups.
    #[command(allow_negative_numbers = true)]
    Eval(EvalArgs),
    /// Inspect task suites: list them, find degenerate tasks.
    #[command(subcommand)]
    Tasks(TasksCommand),
    /// Make a program faster: rounds of LLM samples, each evaluated as it arrives; the best
    /// correct program, its record and a report go to `--out`. Rerunning resumes.
    #[command(allow_negative_numbers = true)]
    Optimize(Box<crate::cmd_optimize::OptimizeArgs>),
    /// Train a model through CUDA-L1's three stages: supervised data and fine-tuning, self-supervised
    /// rounds, contrastive RL; and the held-out evaluation between them.
    #[command(subcommand)]
    Train(Box<crate::cmd_train::TrainCommand>),
    /// Print one stored evaluation in full: the whole reason, phases, checks, timing and the
    /// program's own output (traceback, compiler output).
    Show(ShowArgs),
    /// Write the store's evaluations as JSON lines or CSV.
    Export(ExportArgs),
    /// Write one self-contained HTML report from the store: summaries, fast_p curves, every
    /// task's verdicts with code and diffs, findings, optimize histories and training curves.
    Report(crate::cmd_report::ReportArgs),
    /// Profile programs with Nsight Compute: each kernel's share of the GPU time, its compute and
    /// memory throughput, occupancy and launch shape; stored for `report` and `optimize --profile`.
    Profile(Box<crate::cmd_profile::ProfileArgs>),
    /// Confine this process and run a program in it (for tools that must start the program
    /// themselves, such as Nsight Compute).
    #[command(hide = true)]
    SandboxExec(crate::cmd_sandbox::SandboxExecArgs),
    /// Print a shell completion script (`cudal1 completions bash > ~/.local/share/bash-completion/completions/cudal1`).
    Completions(CompletionsArgs),
    /// Serve rewards and contrastive prompts to RL engines (verl, TRL, OpenRLHF) over HTTP:
    /// every completion is judged by the evaluator, on this machine or by `cudal1 worker`s.
    Serve(Box<crate::cmd_serve::ServeArgs>),
    /// Measure baselines on every task of a suite: eager PyTorch, `torch.compile` (default,
    /// reduce-overhead, max-autotune) and CUDA graphs, each by the same protocol as candidates,
    /// stored so that `eval --baseline NAME` states speedups against them. Rerunning resumes.
    #[command(allow_negative_numbers = true)]
    Baselines(Box<BaselinesArgs>),
    /// Take evaluation jobs from a shared queue (`--queue postgres://...`) and judge them on this
    /// machine's device; one worker per GPU.
    Worker(Box<crate::cmd_worker::WorkerArgs>),
}

#[derive(Args, Debug)]
pub struct ShowArgs {
    /// The evaluation's id: the `id` column of `cudal1 eval`'s table, `id` in its `--json` rows.
    pub id: i64,
    /// Print it as JSON: the evaluation as `eval --json` prints it, with when and how it was recorded.
    #[arg(long)]
    pub json: bool,
    /// The SQLite store.
    #[arg(long, env = "CUDAL1_DB", default_value = "cudal1.db")]
    pub db: PathBuf,
}

/// Formats of `cudal1 export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// One JSON object per evaluation, as `cudal1 show ID --json` prints it.
    Jsonl,
    /// One row per evaluation: ids, task, candidate, verdict, speedup and its interval, times, reason.
    Csv,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// `jsonl` or `csv`.
    #[arg(long, value_enum, default_value = "jsonl")]
    pub format: ExportFormat,
    /// Only the evaluations of this batch (`cudal1 eval` prints its id last).
    #[arg(long)]
    pub batch: Option<String>,
    /// Write to this file instead of stdout.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// The SQLite store.
    #[arg(long, env = "CUDAL1_DB", default_value = "cudal1.db")]
    pub db: PathBuf,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// `bash`, `zsh`, `fish`, `elvish` or `powershell`.
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// A reference program (KernelBench format).
    #[arg(long, conflicts_with_all = ["suite", "from"], requires = "candidate")]
    pub task: Option<PathBuf>,
    /// The candidate program for `--task`.
    #[arg(long, requires = "task")]
    pub candidate: Option<PathBuf>,
    /// A directory of tasks in KernelBench's layout (`level1/12_Name.py`).
    #[arg(long)]
    pub suite: Option<PathBuf>,
    /// Candidates for `--suite`: a directory laid out like the suite, a KernelBench generation
    /// directory, or a JSONL file of `{"task": ..., "code": ...}` rows.
    #[arg(long, requires = "suite", conflicts_with = "from")]
    pub candidates: Option<PathBuf>,
    /// Another system's outputs: `cuda-l1 FILE.json` (references come with the rows; `--suite`
    /// adds KernelBench's task names) or `kernelbench DIR` (with `--suite`). Each row's claimed
    /// speedup is shown beside the measured one.
    #[arg(long, num_args = 2, value_names = ["FORMAT", "PATH"])]
    pub from: Option<Vec<String>>,
    /// Only the candidates of these tasks (`level1/12_Name`, repeatable), for suites and
    /// releases.
    #[arg(long, value_name = "TASK", conflicts_with = "task")]
    pub only: Vec<String>,
    /// `cpu`, `cuda`, `cuda:N`, or `all` (every visible GPU; the default when there are GPUs).
    #[arg(long, value_parser = parse_device)]
    pub device: Option<DeviceFlag>,
    /// `full` (correctness, then timing) or `correctness` (compile, run and compare on the seeds;
    /// no timing, so evaluations share a device and run in parallel).
    #[arg(long, default_value = "full", value_parser = parse_mode)]
    pub mode: Mode,
    /// State speedups and fast_p against this baseline as well as against eager PyTorch:
    /// `eager`, `compile-default`, `compile-reduce-overhead`, `compile-max-autotune` or
    /// `cuda-graphs`, measured before by `cudal1 baselines` under the same settings, device class
    /// and store. Where the baseline failed on a task, eager stands in for it.
    #[arg(long, value_name = "NAME", value_parser = parse_baseline)]
    pub baseline: Option<Baseline>,
    /// Print JSON (one object for `--task`; for a batch one row per line as each finishes, then a
    /// summary line).
    #[arg(long)]
    pub json: bool,
    /// Start the next candidates' processes while one is timed (default: on GPUs only, where the
    /// interpreter's start-up takes no core from the timed processes).
    #[arg(long, value_name = "BOOL")]
    pub prefetch: Option<bool>,
    /// Only the first N candidates (after `--only`), for a slice of a suite or release.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// After judging, profile each correct candidate on the GPU with Nsight Compute and store
    /// the share of its GPU time in kernels it built itself (its extensions, its Triton
    /// kernels) against library and PyTorch kernels.
    #[arg(long)]
    pub own_share: bool,
    #[command(flatten)]
    pub ncu: NcuArgs,
    #[command(flatten)]
    pub common: CommonEval,
}

#[derive(Args, Debug)]
pub struct BaselinesArgs {
    /// The suite (a directory in KernelBench's layout, or one task file).
    pub dir: PathBuf,
    /// Only these tasks (`level1/12_Name`, repeatable).
    #[arg(long, value_name = "TASK")]
    pub only: Vec<String>,
    /// The baselines to measure, comma-separated (default: all of `eager`, `compile-default`,
    /// `compile-reduce-overhead`, `compile-max-autotune`, `cuda-graphs`).
    #[arg(long, value_delimiter = ',', value_parser = parse_baseline)]
    pub names: Vec<Baseline>,
    /// `cpu`, `cuda`, `cuda:N`, or `all` (every visible GPU; the default when there are GPUs).
    #[arg(long, value_parser = parse_device)]
    pub device: Option<DeviceFlag>,
    /// Print one JSON object per task and baseline, then a summary line.
    #[arg(long)]
    pub json: bool,
    /// Seconds one call of a baseline may take, at least `--call-timeout`: the first call of
    /// `torch.compile` compiles (minutes for `max-autotune`).
    #[arg(long, value_name = "SECONDS", default_value_t = 600.0)]
    pub compile_timeout: f64,
    #[command(flatten)]
    pub common: CommonEval,
}

/// A baseline's name.
pub fn parse_baseline(text: &str) -> Result<Baseline, String> {
    Baseline::parse(text)
        .ok_or_else(|| format!("unknown baseline `{text}`: use one of {}", Baseline::names()))
}

#[derive(Args, Debug, Clone)]
pub struct CommonEval {
    /// Absolute tolerance for every dtype (default: 1e-4 for fp32, 1e-2 for fp16/bf16).
    #[arg(long, requires = "rtol")]
    pub atol: Option<f64>,
    /// Relative tolerance for every dtype.
    #[arg(long, requires = "atol")]
    pub rtol: Option<f64>,
    /// KernelBench v0 tolerances: 1e-2 for every dtype.
    #[arg(long, conflicts_with = "atol")]
    pub kernelbench_v0: bool,
    /// Input seeds checked before timing.
    #[arg(long, default_value_t = 5)]
    pub seeds: usize,
    /// Seconds of timed blocks per candidate (both sides together).
    #[arg(long, default_value_t = 4.0)]
    pub budget: f64,
    /// What a GPU call's time covers: `gpu`, the GPU's own work (the host's launch is hidden behind
    /// a queued spin; stable on tiny tasks), or `wall`, from an idle GPU to the end of the
    /// synchronisation (counts launch overhead, and the host's noise with it).
    #[arg(long, default_value = "gpu", value_parser = parse_window)]
    pub window: TimingWindow,
    /// Seconds one model call may take before the candidate is judged a timeout.
    #[arg(long, default_value_t = 20.0)]
    pub call_timeout: f64,
    /// Seconds a program may take to load (imports, construction) and, apart, to make its first
    /// call, where `torch.compile` compiles; builds the compile pool could not make get
    /// `--compile-timeout` on top. Beyond it the verdict is `timeout`.
    #[arg(long, default_value_t = 300.0)]
    pub load_timeout: f64,
    /// Run candidate code without the sandbox (no network namespace, Landlock or limits).
    #[arg(long)]
    pub no_sandbox: bool,
    /// A trial on smaller inputs, for tasks too large for this machine: the task's module-level
    /// integers that give an input's leading dimension (`batch_size`) are multiplied by this
    /// (0 < SCALE <= 1). Results are marked as scaled and stored apart.
    #[arg(long, value_name = "SCALE")]
    pub scale: Option<f64>,
    /// Host memory a candidate's processes may hold (`512M`, `4G`; default 32G or half the host's
    /// memory (MemTotal), whichever is less): beyond it they are killed and the verdict is
    /// `runtime_error` (out of memory). A value over the host's available memory is kept, with a
    /// warning.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memory: Option<u64>,
    /// On a GPU, outputs checked for correctness (up to SIZE per check, default 8G) go from the
    /// candidate to the reference on the device (CUDA IPC) instead of through files; `0`: files
    /// only. Results are the same either way.
    #[arg(long, value_name = "SIZE", value_parser = parse_size_or_zero)]
    pub device_outputs: Option<u64>,
    /// The Python interpreter with PyTorch (default: CUDAL1_PYTHON, VIRTUAL_ENV, .venv, python3).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// The SQLite store.
    #[arg(long, env = "CUDAL1_DB", default_value = "cudal1.db")]
    pub db: PathBuf,
    /// Evaluate again even when the store has a result for the same task, candidate and settings.
    #[arg(long)]
    pub force: bool,
    /// Compile workers for `load_inline` candidates (default: half the cores).
    #[arg(long)]
    pub compile_workers: Option<usize>,
    /// Evaluations that do not time (`--mode correctness`, task checks) run this many at once per
    /// device (default on a GPU: one per 2.7 of its share of the cores, 2 to 8; on the CPU: one
    /// per two cores). Timed ones always run alone.
    #[arg(long)]
    pub lanes: Option<usize>,
    /// Host memory the jobs running at once may reserve in all (`8G`; default: the host's
    /// available memory when the run starts). A job starts only when its estimated need (from its
    /// task's sizes, and what its reference was seen to hold) fits beside the running jobs'; on a
    /// GPU the GPU's memory is a budget too. A job that cannot fit even alone runs alone.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memory_budget: Option<u64>,
    /// Load and check timed candidates on every lane, side by side, and hold the device alone
    /// only to time them (one at a time): the timing slot waits less for loading.
    #[arg(long)]
    pub pipeline: bool,
    /// Where the runner package and built extensions are cached (default: ~/.cache/cudal1).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Seed for the evaluation's random choices (input seeds, block order); random by default.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Exit with status 1 when a verdict differs from its candidate's `# cudal1: expect=` line.
    #[arg(long)]
    pub check_expectations: bool,
}

#[derive(Subcommand)]
pub enum TasksCommand {
    /// List the tasks of a suite: level, id, name, input shapes and parameter count.
    List(ListArgs),
    /// Find degenerate tasks: outputs constant across seeds, near zero, independent of the inputs
    /// or of the weights, or passed by a null candidate (zeros, ones, an input echoed back).
    /// Exit status 1 when a task is flagged or cannot be checked.
    #[command(allow_negative_numbers = true)]
    Check(CheckArgs),
    /// Write synthetic task families with known faster rewrites (for measuring training): a train
    /// split, a held-out split with families never trained on, and a fast and a slow correct
    /// rewrite of every task.
    Synth(SynthArgs),
}

#[derive(Args, Debug)]
pub struct SynthArgs {
    /// Where to write `train/`, `heldout/`, `solutions/` and `manifest.json`.
    pub out: PathBuf,
    /// `cpu` (small tensors, for tests) or `gpu` (calls of about a millisecond).
    #[arg(long, default_value = "gpu")]
    pub scale: String,
    /// Training instances per training family.
    #[arg(long, default_value_t = 4)]
    pub train: usize,
    /// Held-out instances per family (every family, the evaluation-only ones included).
    #[arg(long, default_value_t = 2)]
    pub heldout: usize,
}

#[derive(Args, Debug)]
pub struct ListArgs {
    /// The suite (a KernelBench checkout, one of its level folders, or a single task).
    pub dir: PathBuf,
    /// One JSON object per task, printed as each is read.
    #[arg(long)]
    pub json: bool,
    /// Only read the files; do not run them to find shapes and parameters.
    #[arg(long)]
    pub static_only: bool,
    /// The Python interpreter with PyTorch (default: CUDAL1_PYTHON, VIRTUAL_ENV, .venv, python3).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Where the runner package is cached (default: ~/.cache/cudal1).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Tasks read at once (default: one per two cores).
    #[arg(long)]
    pub lanes: Option<usize>,
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The suite to check.
    pub dir: PathBuf,
    /// One JSON object per task (`task`, `flags`, `parameters`, `unjudged`, `error`), printed as
    /// each task is done.
    #[arg(long)]
    pub json: bool,
    /// `cpu`, `cuda`, `cuda:N` or `all` (default: every GPU when there are any, else the CPU).
    #[arg(long, value_parser = parse_device)]
    pub device: Option<DeviceFlag>,
    /// Input seeds compared per task.
    #[arg(long, default_value_t = 3)]
    pub seeds: usize,
    /// KernelBench v0 tolerances (1e-2 for every dtype) instead of the per-dtype defaults.
    #[arg(long)]
    pub kernelbench_v0: bool,
    /// Only these tasks (`level1/12_Name`, repeatable).
    #[arg(long)]
    pub only: Vec<String>,
    /// Run the probes without the sandbox.
    #[arg(long)]
    pub no_sandbox: bool,
    /// Seconds one model call may take.
    #[arg(long, default_value_t = 120.0)]
    pub call_timeout: f64,
    /// Seconds a task's reference (and each probe) may take to load, and apart to make its first
    /// call.
    #[arg(long, default_value_t = 300.0)]
    pub load_timeout: f64,
    /// The Python interpreter with PyTorch (default: CUDAL1_PYTHON, VIRTUAL_ENV, .venv, python3).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Where the runner package is cached (default: ~/.cache/cudal1).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Tasks checked at once per device (default on a GPU: one per 2.7 of its share of the cores,
    /// 2 to 8; on the CPU: one per two cores).
    #[arg(long)]
    pub lanes: Option<usize>,
    /// The SQLite store: finished checks are saved there, so that a stopped check resumes.
    #[arg(long, env = "CUDAL1_DB", default_value = "cudal1.db")]
    pub db: PathBuf,
    /// Check again tasks the store has a check of (same task and check settings).
    #[arg(long)]
    pub force: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_powers_of_1024() {
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("2kb"), Ok(2048));
        assert_eq!(parse_size("800"), Ok(800));
        assert!(parse_size("lots").unwrap_err().contains("`512M`"));
        assert!(
            parse_size("4X").is_err() && parse_size("0").is_err() && parse_size("-1G").is_err()
        );
        assert_eq!((parse_size_or_zero("0"), parse_size_or_zero("2G")), (Ok(0), Ok(2 << 30)));
        assert!(parse_size_or_zero("-1").is_err());
    }
}

/// `--language`: what the prompts ask programs to be written in (`optimize` and `train rl`).
#[derive(ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LanguageFlag {
    /// Custom CUDA through `load_inline`, or a faster PyTorch program (CUDA-L1's prompts).
    #[default]
    Cuda,
    /// Triton kernels (`@triton.jit`): their JIT compiles and autotuning happen before the
    /// checks, off the GPU's timing slot.
    Triton,
}

impl From<LanguageFlag> for cudal1_search::Language {
    fn from(flag: LanguageFlag) -> Self {
        match flag {
            LanguageFlag::Cuda => cudal1_search::Language::Cuda,
            LanguageFlag::Triton => cudal1_search::Language::Triton,
        }
    }
}

/// How a contrastive prompt draws earlier variants of a task (CUDA-L1's exemplar sampler):
/// `optimize`, `serve` and `train rl` take the same flags.
#[derive(Args, Debug, Clone)]
pub struct ExemplarArgs {
    /// Earlier correct variants a contrastive prompt shows (CUDA-L1: 2).
    #[arg(long, default_value_t = 2)]
    pub exemplars: usize,
    /// Width of the exemplar sampler's speedup buckets (variants within one width count as alike).
    #[arg(long, default_value_t = 0.25)]
    pub bucket_width: f64,
    /// Softmax temperature over bucket mean speedups: lower favours the fastest variants, higher
    /// draws more evenly.
    #[arg(long, default_value_t = 1.0)]
    pub exemplar_temperature: f64,
}

impl ExemplarArgs {
    /// The sampler, or an error naming the flag that is out of range.
    pub fn sampler(&self) -> anyhow::Result<cudal1_search::ExemplarSampler> {
        cudal1_search::ExemplarSampler::new(self.bucket_width, self.exemplar_temperature)
            .map_err(|e| anyhow::anyhow!("{e}"))
    }
}

/// An OpenAI-compatible LLM server: `optimize` and `train sft-data` take the same flags.
#[derive(Args, Debug, Clone)]
pub struct EndpointArgs {
    /// Base URL of an OpenAI-compatible server (`http://127.0.0.1:8000/v1`).
    #[arg(long, requires = "model")]
    pub llm_url: Option<String>,
    /// The model name the server expects.
    #[arg(long, requires = "llm_url")]
    pub model: Option<String>,
    /// The environment variable that holds the API key (no key is sent when it is unset).
    #[arg(long, default_value = "OPENAI_API_KEY")]
    pub api_key_env: String,
}

impl EndpointArgs {
    /// The client's settings when a server was named; the caller adds its limits.
    pub fn config(&self) -> Option<cudal1_llm::OpenAiConfig> {
        let (url, model) = (self.llm_url.as_ref()?, self.model.as_ref()?);
        let mut c = cudal1_llm::OpenAiConfig::new(url.clone(), model.clone());
        c.api_key_env = self.api_key_env.clone();
        Some(c)
    }
}

/// How Nsight Compute runs: `cudal1 profile` and `optimize --profile` share these.
#[derive(Args, Debug, Clone)]
pub struct NcuArgs {
    /// Nsight Compute's `ncu` (default: PATH, $CUDA_HOME/bin, /usr/local/cuda/bin, then
    /// /opt/nvidia/nsight-compute/*/).
    #[arg(long, value_name = "PATH")]
    pub ncu: Option<PathBuf>,
    /// Calls of the model before profiling starts (extension builds, autotuning, caches).
    #[arg(long, default_value_t = 3)]
    pub profile_warmup: u32,
    /// Calls of the model profiled.
    #[arg(long, default_value_t = 1)]
    pub profile_calls: u32,
    /// Seconds one profiled run may take, ncu's replays included.
    #[arg(long, default_value_t = 300.0)]
    pub profile_timeout: f64,
}

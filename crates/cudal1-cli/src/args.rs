//! Command-line arguments.

use clap::{Args, Parser, Subcommand, ValueEnum};
use cudal1_eval::{Device, Mode, TimingWindow};
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
    Device::parse(text).map(DeviceFlag::One).map_err(|_| format!("unknown device `{text}`: use `cpu`, `cuda`, `cuda:N` or `all`"))
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
#[command(name = "cudal1", version, about = "Make PyTorch programs faster with LLM-written CUDA, verified by an evaluator that cannot be fooled")]
pub struct Cli {
    /// More logging (-v info, -vv debug); also `RUST_LOG`.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand)]
pub enum Command {
    /// Evaluate candidates against references: verdicts, reasons and speedups.
    Eval(EvalArgs),
    /// Inspect task suites: list them, find degenerate tasks.
    #[command(subcommand)]
    Tasks(TasksCommand),
    /// Make a program faster: rounds of LLM samples, each evaluated as it arrives; the best
    /// correct program, its record and a report go to `--out`. Rerunning resumes.
    Optimize(Box<crate::cmd_optimize::OptimizeArgs>),
    /// Serve rewards and contrastive prompts to RL engines (verl, TRL, OpenRLHF) over HTTP:
    /// every completion is judged by the evaluator, on this machine or by `cudal1 worker`s.
    Serve(Box<crate::cmd_serve::ServeArgs>),
    /// Take evaluation jobs from a shared queue (`--queue postgres://...`) and judge them on this
    /// machine's device; one worker per GPU.
    Worker(Box<crate::cmd_worker::WorkerArgs>),
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
    /// `cpu`, `cuda`, `cuda:N`, or `all` (every visible GPU; the default when there are GPUs).
    #[arg(long, value_parser = parse_device)]
    pub device: Option<DeviceFlag>,
    /// `full` (correctness, then timing) or `correctness` (compile, run and compare on the seeds;
    /// no timing, so evaluations share a device and run in parallel).
    #[arg(long, default_value = "full", value_parser = parse_mode)]
    pub mode: Mode,
    /// Print JSON (one object for `--task`; for a batch one row per line as each finishes, then a
    /// summary line).
    #[arg(long)]
    pub json: bool,
    /// Start the next candidates' processes while one is timed (default: on GPUs only, where the
    /// interpreter's start-up takes no core from the timed processes).
    #[arg(long, value_name = "BOOL")]
    pub prefetch: Option<bool>,
    #[command(flatten)]
    pub common: CommonEval,
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
    /// Run candidate code without the sandbox (no network namespace, Landlock or limits).
    #[arg(long)]
    pub no_sandbox: bool,
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
    /// device (default: 4 per GPU, one per two cores on the CPU). Timed ones always run alone.
    #[arg(long)]
    pub lanes: Option<usize>,
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
    Check(CheckArgs),
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
    /// The Python interpreter with PyTorch (default: CUDAL1_PYTHON, VIRTUAL_ENV, .venv, python3).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Where the runner package is cached (default: ~/.cache/cudal1).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Tasks checked at once per device (default: 4 per GPU, one per two cores on the CPU).
    #[arg(long)]
    pub lanes: Option<usize>,
}

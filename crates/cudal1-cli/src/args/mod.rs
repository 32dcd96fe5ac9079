//! Command-line arguments: every clap type lives below this module, and nothing here names a
//! command's code (`cmd_*` files import from here, never the other way). Flags that several
//! commands take are declared once in [`flags`].

mod flags;
mod optimize;
mod profile;
mod report;
mod sandbox;
mod serve;
mod train;
mod worker;

pub use flags::*;
pub use optimize::OptimizeArgs;
pub use profile::ProfileArgs;
pub use report::ReportArgs;
pub use sandbox::SandboxExecArgs;
pub use serve::ServeArgs;
pub use train::{
    EvalArgs as TrainEvalArgs, Overlap, PolicyArgs, RlArgs, SelfSupArgs, SftArgs, SftDataArgs,
    TableArgs, TrainCommand,
};
pub use worker::{StageFlag, WorkerArgs};

use clap::{Args, Parser, Subcommand, ValueEnum};
use cudal1_eval::{Baseline, Mode};
use std::path::PathBuf;

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
    Optimize(Box<OptimizeArgs>),
    /// Train a model through CUDA-L1's three stages: supervised data and fine-tuning, self-supervised
    /// rounds, contrastive RL; and the held-out evaluation between them.
    #[command(subcommand)]
    Train(Box<TrainCommand>),
    /// Print one stored evaluation in full: the whole reason, phases, checks, timing and the
    /// program's own output (traceback, compiler output).
    Show(ShowArgs),
    /// Write the store's evaluations as JSON lines or CSV.
    Export(ExportArgs),
    /// Write one self-contained HTML report from the store: summaries, fast_p curves, every
    /// task's verdicts with code and diffs, findings, optimize histories and training curves.
    Report(ReportArgs),
    /// Profile programs with Nsight Compute: each kernel's share of the GPU time, its compute and
    /// memory throughput, occupancy and launch shape; stored for `report` and `optimize --profile`.
    Profile(Box<ProfileArgs>),
    /// Confine this process and run a program in it (for tools that must start the program
    /// themselves, such as Nsight Compute).
    #[command(hide = true)]
    SandboxExec(SandboxExecArgs),
    /// Print a shell completion script (`cudal1 completions bash > ~/.local/share/bash-completion/completions/cudal1`).
    Completions(CompletionsArgs),
    /// Serve rewards and contrastive prompts to RL engines (verl, TRL, OpenRLHF) over HTTP:
    /// every completion is judged by the evaluator, on this machine or by `cudal1 worker`s.
    Serve(Box<ServeArgs>),
    /// Measure baselines on every task of a suite: eager PyTorch, `torch.compile` (default,
    /// reduce-overhead, max-autotune) and CUDA graphs, each by the same protocol as candidates,
    /// stored so that `eval --baseline NAME` states speedups against them. Rerunning resumes.
    #[command(allow_negative_numbers = true)]
    Baselines(Box<BaselinesArgs>),
    /// Take evaluation jobs from a shared queue (`--queue postgres://...`) and judge them on this
    /// machine's device; one worker per GPU.
    Worker(Box<WorkerArgs>),
}

#[derive(Args, Debug)]
pub struct ShowArgs {
    /// The evaluation's id: the `id` column of `cudal1 eval`'s table, `id` in its `--json` rows.
    pub id: i64,
    /// Print it as JSON: the evaluation as `eval --json` prints it, with when and how it was recorded.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub db: DbFlag,
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
    #[command(flatten)]
    pub db: DbFlag,
}

#[derive(Args, Debug)]
pub struct CompletionsArgs {
    /// `bash`, `zsh`, `fish`, `elvish` or `powershell`.
    pub shell: clap_complete::Shell,
}

#[derive(Args, Debug)]
#[command(mut_arg("prefetch", |a| a.help("Start the next candidates' processes while one is timed (default: on GPUs only, where the interpreter's start-up takes no core from the timed processes)")))]
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
    #[command(flatten)]
    pub device: DeviceArg,
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
    #[command(flatten)]
    pub prefetch: PrefetchFlag,
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
    #[command(flatten)]
    pub device: DeviceArg,
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
    #[arg(long, default_value = "gpu", value_parser = cudal1_task::synth::Scale::parse)]
    pub scale: cudal1_task::synth::Scale,
    /// Training instances per training family.
    #[arg(long, default_value_t = 4)]
    pub train: usize,
    /// Held-out instances per family (every family, the evaluation-only ones included).
    #[arg(long, default_value_t = 2)]
    pub heldout: usize,
}

#[derive(Args, Debug)]
#[command(
    mut_arg("cache_dir", |a| a.help("Where the runner package is cached (default: ~/.cache/cudal1)")),
    mut_arg("lanes", |a| a.help("Tasks read at once (default: one per two cores)")),
)]
pub struct ListArgs {
    /// The suite (a KernelBench checkout, one of its level folders, or a single task).
    pub dir: PathBuf,
    /// One JSON object per task, printed as each is read.
    #[arg(long)]
    pub json: bool,
    /// Only read the files; do not run them to find shapes and parameters.
    #[arg(long)]
    pub static_only: bool,
    #[command(flatten)]
    pub python: PythonFlags,
    #[command(flatten)]
    pub lanes: LanesFlag,
}

#[derive(Args, Debug)]
#[command(
    mut_arg("device", |a| a.help("`cpu`, `cuda`, `cuda:N` or `all` (default: every GPU when there are any, else the CPU)")),
    mut_arg("cache_dir", |a| a.help("Where the runner package is cached (default: ~/.cache/cudal1)")),
    mut_arg("lanes", |a| a.help("Tasks checked at once per device (default on a GPU: one per 2.7 of its share of the cores, 2 to 8; on the CPU: one per two cores)")),
    mut_arg("db", |a| a.help("The SQLite store: finished checks are saved there, so that a stopped check resumes")),
)]
pub struct CheckArgs {
    /// The suite to check.
    pub dir: PathBuf,
    /// One JSON object per task (`task`, `flags`, `parameters`, `unjudged`, `error`), printed as
    /// each task is done.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub device: DeviceArg,
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
    #[command(flatten)]
    pub python: PythonFlags,
    #[command(flatten)]
    pub lanes: LanesFlag,
    #[command(flatten)]
    pub db: DbFlag,
    /// Check again tasks the store has a check of (same task and check settings).
    #[arg(long)]
    pub force: bool,
}

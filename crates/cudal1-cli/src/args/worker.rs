//! `cudal1 worker`'s arguments.

use super::{DbFlag, DeviceArg, EngineFlags, GpuClassFlag, PrefetchFlag, PythonFlags, QueueFlag};
use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StageFlag {
    /// Judge jobs (building what they need first).
    Run,
    /// Only build extensions, for machines without a GPU.
    Compile,
}

#[derive(Args, Debug)]
#[command(
    mut_arg("db", |a| a.help("The SQLite store, when there is no `--queue`")),
    mut_arg("device", |a| a.help("`cpu`, `cuda` or `cuda:N`: one device per worker process (start one worker per GPU)")),
    mut_arg("gpu_class", |a| a.help("The class of jobs to take (default: this device's GPU, e.g. `nvidia-h100-80gb-hbm3`, or `cpu`). `cudal1 serve --gpu-class` must name the same")),
    mut_arg("cache_dir", |a| a.help("Where the runner package, built extensions and the jobs' tasks are cached")),
    mut_arg("compile_workers", |a| a.help(None::<&str>)),
    mut_arg("lanes", |a| a.help("Evaluations that do not time run this many at once on the device")),
    mut_arg("pipeline", |a| a.help("Load and check timed candidates on every lane, and hold the device alone only to time them")),
)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub queue: QueueFlag,
    #[command(flatten)]
    pub db: DbFlag,
    #[command(flatten)]
    pub device: DeviceArg,
    #[command(flatten)]
    pub gpu_class: GpuClassFlag,
    #[arg(long, value_enum, default_value = "run")]
    pub stage: StageFlag,
    /// Seconds a claimed job stays this worker's without a heartbeat; after that another worker
    /// may take it.
    #[arg(long, default_value_t = 60.0)]
    pub lease: f64,
    /// Jobs held at once (default: enough to keep the compile pool and the device busy).
    #[arg(long)]
    pub ahead: Option<usize>,
    /// Stop after this many seconds without a job to take.
    #[arg(long)]
    pub exit_when_idle: Option<f64>,
    /// The worker's name in the queue (default: host, process id and a random part).
    #[arg(long)]
    pub name: Option<String>,
    /// Take jobs whose settings turn the sandbox off.
    #[arg(long)]
    pub no_sandbox: bool,
    #[command(flatten)]
    pub python: PythonFlags,
    #[command(flatten)]
    pub engine: EngineFlags,
    #[command(flatten)]
    pub prefetch: PrefetchFlag,
    /// Print a line per job on stderr.
    #[arg(long)]
    pub progress: bool,
}

//! `cudal1 profile`'s arguments.

use super::{DbFlag, DeviceArg, NcuArgs, PythonFlags};
use clap::Args;
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(mut_arg("device", |a| a.help("`cuda` or `cuda:N` (default: the first GPU)")))]
pub struct ProfileArgs {
    /// The task: a reference program (KernelBench format).
    pub task: PathBuf,
    /// Candidate programs of the task (their `ModelNew`); the task's own `Model` is profiled too.
    pub candidates: Vec<PathBuf>,
    /// Leave the reference out.
    #[arg(long)]
    pub no_reference: bool,
    #[command(flatten)]
    pub device: DeviceArg,
    #[command(flatten)]
    pub ncu: NcuArgs,
    /// Kernels shown per program.
    #[arg(long, default_value_t = 5)]
    pub top: usize,
    /// Load and call each program as a profile would, without Nsight Compute (any device, the
    /// CPU too): a quick check before GPU time is spent.
    #[arg(long)]
    pub dry_run: bool,
    /// Profile again even when the store has a profile of the same task, program and GPU class.
    #[arg(long)]
    pub force: bool,
    /// Run the programs unconfined (by default each confines itself before it runs: it writes
    /// only to its scratch and build directories).
    #[arg(long)]
    pub no_sandbox: bool,
    /// One JSON object per program on stdout.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub db: DbFlag,
    #[command(flatten)]
    pub python: PythonFlags,
}

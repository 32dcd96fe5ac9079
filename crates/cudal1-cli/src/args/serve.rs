//! `cudal1 serve`'s arguments.

use super::{
    CommonEval, DeviceArg, ExemplarArgs, GpuClassFlag, LanguageArg, PrefetchFlag, QueueFlag,
};
use clap::Args;
use cudal1_eval::Mode;
use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(Args, Debug)]
#[command(
    mut_arg("queue", |a| a.help("A PostgreSQL job queue shared with `cudal1 worker`s on other machines (`postgres://user@host/db`); without it, the SQLite store `--db` of this machine")),
    mut_arg("device", |a| a.help("The devices of the local worker: `cpu`, `cuda`, `cuda:N` or `all`")),
    mut_arg("language", |a| a.help("What prompts ask programs to be written in, `cuda` or `triton`, when a request does not say (`language` in `POST /v1/prompt` and `GET /v1/prompts/export`)")),
    mut_arg("gpu_class", |a| a.help("The GPU class jobs are measured on (default: the local worker's GPU, e.g. `nvidia-h100-80gb-hbm3`, or `cpu`); needed with a queue and no local worker")),
)]
pub struct ServeArgs {
    /// The suite whose tasks are served; requests name them as `eval` does (`level1/12_Name`).
    #[arg(long)]
    pub suite: PathBuf,
    /// Address to listen on. Any address but a loopback one needs a token (`--token-env`).
    #[arg(long, default_value = "127.0.0.1:8377")]
    pub listen: SocketAddr,
    /// The environment variable holding the bearer token every request but `/health` must send.
    #[arg(long, default_value = "CUDAL1_SERVE_TOKEN")]
    pub token_env: String,
    #[command(flatten)]
    pub queue: QueueFlag,
    /// Judge jobs on this machine's devices too (default: yes with the SQLite store, no with a
    /// PostgreSQL queue).
    #[arg(long, value_name = "BOOL")]
    pub local_worker: Option<bool>,
    #[command(flatten)]
    pub device: DeviceArg,
    #[command(flatten)]
    pub gpu_class: GpuClassFlag,
    /// `full` (verdict and speedup; reward = speedup) or `correctness` (no timing; reward 1 or 0),
    /// for requests that do not say.
    #[arg(long, default_value = "full", value_parser = super::parse_mode)]
    pub mode: Mode,
    /// Seconds a reward request waits for its results when it does not say.
    #[arg(long, default_value_t = 60.0)]
    pub wait: f64,
    /// The longest wait a request may ask for.
    #[arg(long, default_value_t = 600.0)]
    pub max_wait: f64,
    /// Seconds `/openrlhf/get_reward` waits before answering 503 (OpenRLHF then retries).
    #[arg(long, default_value_t = 170.0)]
    pub openrlhf_wait: f64,
    /// Largest request body, in MiB.
    #[arg(long, default_value_t = 16)]
    pub max_body: usize,
    /// Most items (or jobs) per request.
    #[arg(long, default_value_t = 1024)]
    pub max_items: usize,
    /// Largest completion, in KiB.
    #[arg(long, default_value_t = 256)]
    pub max_completion: usize,
    #[command(flatten)]
    pub exemplar: ExemplarArgs,
    #[command(flatten)]
    pub language: LanguageArg,
    /// Clip of group-normalised rewards (CUDA-L1: 1.5).
    #[arg(long, default_value_t = 1.5)]
    pub clip: f64,
    /// Workers that may take a job (and go away) before it is given up.
    #[arg(long, default_value_t = 3)]
    pub max_attempts: u32,
    /// Seconds the local worker's claims last without a heartbeat.
    #[arg(long, default_value_t = 60.0)]
    pub lease: f64,
    /// Queue programs that build extensions for `cudal1 worker --stage compile` machines first.
    #[arg(long)]
    pub compile_stage: bool,
    #[command(flatten)]
    pub prefetch: PrefetchFlag,
    #[command(flatten)]
    pub common: CommonEval,
}

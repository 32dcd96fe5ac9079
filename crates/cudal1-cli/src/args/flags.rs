//! Flags that several commands take, each declared once: a command flattens the group
//! (`#[command(flatten)]`) and, where its help says more for that command, rewords it with
//! `mut_arg`. Values are parsed here, at the edge, into the types the commands use.

use clap::Args;
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

pub fn parse_window(text: &str) -> Result<TimingWindow, String> {
    TimingWindow::parse(text)
}

pub fn parse_mode(text: &str) -> Result<Mode, String> {
    Mode::parse(text)
}

/// A baseline's name.
pub fn parse_baseline(text: &str) -> Result<Baseline, String> {
    Baseline::parse(text)
        .ok_or_else(|| format!("unknown baseline `{text}`: use one of {}", Baseline::names()))
}

/// `--python` and `--cache-dir`: the interpreter every command that runs Python finds, and where
/// what it installs is cached.
#[derive(Args, Debug, Clone)]
pub struct PythonFlags {
    /// The Python interpreter with PyTorch (default: CUDAL1_PYTHON, VIRTUAL_ENV, .venv, python3).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Where the runner package and built extensions are cached (default: ~/.cache/cudal1).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
}

/// `--db`: the SQLite store.
#[derive(Args, Debug, Clone)]
pub struct DbFlag {
    /// The SQLite store.
    #[arg(long, env = "CUDAL1_DB", default_value = "cudal1.db")]
    pub db: PathBuf,
}

/// `--device`: one device, or every visible GPU.
#[derive(Args, Debug, Clone)]
pub struct DeviceArg {
    /// `cpu`, `cuda`, `cuda:N`, or `all` (every visible GPU; the default when there are GPUs).
    #[arg(long, value_parser = parse_device)]
    pub device: Option<DeviceFlag>,
}

/// `--language`: what the prompts ask programs to be written in (`optimize`, every `train` stage
/// that prompts a model, and `serve`'s default).
#[derive(Args, Debug, Clone)]
pub struct LanguageArg {
    /// What the prompts ask programs to be written in: `cuda` (custom CUDA through `load_inline`,
    /// or faster PyTorch) or `triton` (Triton kernels). Templates see it as `language`.
    #[arg(long, value_enum, default_value_t)]
    pub language: LanguageFlag,
}

/// `--language`'s values.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
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

/// `--lanes`: jobs that do not time, run at once per device.
#[derive(Args, Debug, Clone)]
pub struct LanesFlag {
    /// Evaluations that do not time (`--mode correctness`, task checks) run this many at once per
    /// device (default on a GPU: one per 2.7 of its share of the cores, 2 to 8; on the CPU: one
    /// per two cores). Timed ones always run alone.
    #[arg(long)]
    pub lanes: Option<usize>,
}

/// How the evaluation engine spreads its work: compile workers, lanes, the pipeline.
#[derive(Args, Debug, Clone)]
pub struct EngineFlags {
    /// Compile workers for `load_inline` candidates (default: half the cores).
    #[arg(long)]
    pub compile_workers: Option<usize>,
    #[command(flatten)]
    pub lanes: LanesFlag,
    /// Load and check timed candidates on every lane, side by side, and hold the device alone
    /// only to time them (one at a time): the timing slot waits less for loading.
    #[arg(long)]
    pub pipeline: bool,
}

/// `--queue`: a PostgreSQL job queue shared by `serve` and `worker`s.
#[derive(Args, Debug, Clone)]
pub struct QueueFlag {
    /// The PostgreSQL job queue shared with `cudal1 serve` (`postgres://user@host/db`); without it,
    /// the SQLite store `--db` of this machine.
    #[arg(long, env = "CUDAL1_QUEUE")]
    pub queue: Option<String>,
}

/// `--prefetch`.
#[derive(Args, Debug, Clone)]
pub struct PrefetchFlag {
    /// Start the next candidates' processes while one is timed (default: on GPUs).
    #[arg(long, value_name = "BOOL")]
    pub prefetch: Option<bool>,
}

/// `--gpu-class`: the class of GPU jobs are measured on (`serve`, `worker`).
#[derive(Args, Debug, Clone)]
pub struct GpuClassFlag {
    /// The class of jobs to take (default: this device's GPU, e.g. `nvidia-h100-80gb-hbm3`, or
    /// `cpu`).
    #[arg(long)]
    pub gpu_class: Option<String>,
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
    #[command(flatten)]
    pub python: PythonFlags,
    #[command(flatten)]
    pub db: DbFlag,
    /// Evaluate again even when the store has a result for the same task, candidate and settings.
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub engine: EngineFlags,
    /// Host memory the jobs running at once may reserve in all (`8G`; default: the host's
    /// available memory when the run starts). A job starts only when its estimated need (from its
    /// task's sizes, and what its reference was seen to hold) fits beside the running jobs'; on a
    /// GPU the GPU's memory is a budget too. A job that cannot fit even alone runs alone.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub memory_budget: Option<u64>,
    /// Seed for the evaluation's random choices (input seeds, block order); random by default.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Exit with status 1 when a verdict differs from its candidate's `# cudal1: expect=` line.
    #[arg(long)]
    pub check_expectations: bool,
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

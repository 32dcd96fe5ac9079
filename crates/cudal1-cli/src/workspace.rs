//! Settings resolved once: [`Workspace::resolve`] turns the command line into the interpreter,
//! the runner environment, the devices (their timing cores reserved), the evaluation settings and
//! the store, and [`Workspace::engine`] starts the one evaluation engine every command uses.

use crate::args::{CommonEval, DeviceFlag};
use anyhow::{anyhow, bail, Context, Result};
use crossbeam_channel::Receiver;
use cudal1_eval::{
    CompileCache, Device, EngineConfig, EvalSettings, Evaluator, Event, Judge, MemoryBudget, Mode,
    RunnerEnv, Tolerance,
};
use cudal1_python::{find_interpreter, Interpreter, PythonRequest};
use cudal1_store::Store;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub struct Workspace {
    pub interpreter: Interpreter,
    pub env: RunnerEnv,
    /// The runner package, built extensions and imported tasks live here.
    pub cache: PathBuf,
    pub devices: Vec<Device>,
    pub settings: EvalSettings,
    /// Who judges here: this build's judging version and the devices' class of GPU. Results are
    /// stored, and found again, under it.
    pub judge: Judge,
    pub store: Store,
    pub compile_workers: Option<usize>,
    pub lanes: Option<usize>,
    pub prefetch: Option<bool>,
    pub pipeline: bool,
    pub seed: u64,
    pub memory: MemoryBudget,
    /// `--seed` as given.
    seed_flag: Option<u64>,
}

impl Workspace {
    /// Everything `eval`, `optimize` and `tasks check` share, from their common flags.
    pub fn resolve(
        common: &CommonEval,
        device: Option<&DeviceFlag>,
        prefetch: Option<bool>,
    ) -> Result<Workspace> {
        let (interpreter, env, cache) =
            interpreter(common.python.as_deref(), common.cache_dir.as_deref())?;
        let devices = devices(device, &interpreter)?;
        let settings = settings(common, devices[0].clone())?;
        let judge = judge(&devices, &interpreter)?;
        let store = Store::open(&common.db)?;
        let memory = memory_budget(common.memory_budget, &devices, &interpreter);
        Ok(Workspace {
            interpreter,
            env,
            cache,
            devices,
            settings,
            judge,
            store,
            compile_workers: common.compile_workers,
            lanes: common.lanes,
            prefetch,
            pipeline: common.pipeline,
            seed: common.seed.unwrap_or_else(rand::random),
            memory,
            seed_flag: common.seed,
        })
    }

    /// The seed of a training run's own choices (data order, sampling): `--seed`, else 0, so that
    /// rerunning the same command resumes the same run.
    pub fn seed_for_training(&self) -> u64 {
        self.seed_flag.unwrap_or(0)
    }

    /// Whether candidates run on a GPU here.
    pub fn on_gpu(&self) -> bool {
        self.gpu().is_some()
    }

    /// The first GPU of this workspace's devices.
    pub fn gpu(&self) -> Option<Device> {
        self.devices.iter().find(|d| d.is_cuda()).cloned()
    }

    /// Starts the evaluation engine on this workspace's devices, without an event stream (each
    /// job's outcome comes on its handle).
    pub fn engine(&self) -> Result<Evaluator> {
        let config = self.engine_config();
        let parent = config.scratch_parent.clone();
        Evaluator::start(config).with_context(|| scratch_error(&parent))
    }

    /// As [`Workspace::engine`], with the stream of every job's events, for a reporter that reads
    /// it to the end.
    pub fn engine_with_events(&self) -> Result<(Evaluator, Receiver<Event>)> {
        let config = self.engine_config();
        let parent = config.scratch_parent.clone();
        Evaluator::start_with_events(config).with_context(|| scratch_error(&parent))
    }

    /// What [`Workspace::engine`] starts an engine from.
    pub fn engine_config(&self) -> EngineConfig {
        let parts = EngineParts {
            compile_workers: self.compile_workers,
            lanes: self.lanes,
            prefetch: self.prefetch,
            pipeline: self.pipeline,
            seed: self.seed,
            memory: self.memory.clone(),
        };
        let mut config =
            engine_config(&self.env, &self.devices, &self.settings, &self.cache, &parts);
        config.judge = self.judge.clone();
        config
    }
}

/// Who judges on `devices`: this build, and their class of GPU as torch names it (`cpu`).
fn scratch_error(parent: &Path) -> String {
    format!("making a scratch directory in `{}`\nhint: set CUDAL1_WORK_DIR to a writable directory with room", parent.display())
}

pub fn judge(devices: &[Device], interpreter: &Interpreter) -> Result<Judge> {
    let class = cudal1_eval::judge::devices_class(devices, &interpreter.probe.gpu_names)
        .map_err(|e| anyhow::anyhow!("{e}\nhint: results are filed per class of GPU; delete `python/` in the cache directory so that PyTorch is asked again"))?;
    Ok(Judge::new(class))
}

/// The engine flags every command shares.
pub struct EngineParts {
    pub compile_workers: Option<usize>,
    pub lanes: Option<usize>,
    pub prefetch: Option<bool>,
    pub pipeline: bool,
    pub seed: u64,
    pub memory: MemoryBudget,
}

/// Where jobs must fit: `--memory-budget` (else the host's available memory now) and each GPU's
/// memory as PyTorch reports it.
pub fn memory_budget(flag: Option<u64>, devices: &[Device], interp: &Interpreter) -> MemoryBudget {
    let gpu = |d: &Device| match d {
        Device::Cuda(i) => interp.probe.gpu_memory.get(*i as usize).copied(),
        Device::Cpu => None,
    };
    MemoryBudget {
        host: flag.or_else(cudal1_eval::scratch::available_memory),
        devices: devices.iter().map(gpu).collect(),
    }
}

/// An engine's configuration on these devices, with the extensions cache below `cache`.
pub fn engine_config(
    env: &RunnerEnv,
    devices: &[Device],
    settings: &EvalSettings,
    cache: &Path,
    parts: &EngineParts,
) -> EngineConfig {
    let mut config = EngineConfig::new(
        env.clone(),
        devices.to_vec(),
        settings.clone(),
        CompileCache { root: cache.join("extensions") },
    );
    if let Some(n) = parts.compile_workers {
        config.compile_workers = n;
    }
    if let Some(n) = parts.lanes {
        config.lanes = n;
    }
    config.prefetch = parts.prefetch;
    config.pipeline = parts.pipeline;
    config.seed = parts.seed;
    config.memory = parts.memory.clone();
    config
}

pub fn cache_dir(flag: Option<&Path>) -> PathBuf {
    if let Some(p) = flag {
        return p.to_owned();
    }
    if let Some(p) = std::env::var_os("CUDAL1_CACHE_DIR") {
        return PathBuf::from(p);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("cudal1")
}

/// The interpreter, probed, the runner package installed in the cache, and the cache.
pub fn interpreter(
    python: Option<&Path>,
    cache_flag: Option<&Path>,
) -> Result<(Interpreter, RunnerEnv, PathBuf)> {
    let cache = cache_dir(cache_flag);
    let interp = find_interpreter(&PythonRequest {
        flag: python.map(Path::to_owned),
        start_dir: None,
        probe_cache: Some(cache.join("python")),
    })?;
    tracing::info!(python = %interp.path.display(), source = %interp.source, torch = ?interp.probe.torch, "using Python");
    let mut env = RunnerEnv::prepare(&interp, &cache)
        .with_context(|| format!("installing the runner package under `{}`", cache.display()))?;
    // `CUDAL1_FORK_SERVER=0`: every runner starts its own interpreter, as before the fork server.
    env.forks = std::env::var_os("CUDAL1_FORK_SERVER").is_none_or(|v| v != "0");
    Ok((interp, env, cache))
}

/// `--device`: one device, or every visible GPU. The CPU cores that will time on them are kept
/// free of cudal1's other work from here on (`cudal1_eval::cores`; `CUDAL1_TIMING_CORES` names
/// them by hand).
pub fn devices(flag: Option<&DeviceFlag>, interp: &Interpreter) -> Result<Vec<Device>> {
    let devices = chosen_devices(flag, interp)?;
    cudal1_eval::cores::reserve(&devices).map_err(anyhow::Error::msg)?;
    Ok(devices)
}

fn chosen_devices(flag: Option<&DeviceFlag>, interp: &Interpreter) -> Result<Vec<Device>> {
    let gpus = interp.probe.gpus.len() as u32;
    match flag {
        None | Some(DeviceFlag::All) if gpus > 0 => Ok((0..gpus).map(Device::Cuda).collect()),
        None => Ok(vec![Device::Cpu]),
        Some(DeviceFlag::All) => bail!("`--device all` asks for every GPU, but PyTorch at `{}` sees none\nhint: use `--device cpu`", interp.path.display()),
        Some(DeviceFlag::One(d)) => {
            if let Device::Cuda(n) = d {
                if *n >= gpus {
                    bail!("`--device {d}`: PyTorch at `{}` sees {gpus} GPU(s)\nhint: use `--device cpu` or `--device all`, or check `nvidia-smi` and CUDA_VISIBLE_DEVICES", interp.path.display());
                }
            }
            Ok(vec![d.clone()])
        }
    }
}

/// Refuses values of the common flags that cannot work, before anything is read or started.
pub fn check(common: &CommonEval) -> Result<()> {
    if common.seeds == 0 {
        bail!("`--seeds` must be at least 1");
    }
    if !(common.budget > 0.0 && common.call_timeout > 0.0 && common.load_timeout > 0.0) {
        bail!(
            "`--budget`, `--call-timeout` and `--load-timeout` must be positive numbers of seconds"
        );
    }
    if let Some(scale) = common.scale {
        if !(scale > 0.0 && scale <= 1.0) {
            bail!("`--scale {scale}` must be a number in (0, 1]: the fraction of the leading input dimensions to keep");
        }
    }
    for (name, value) in [("--atol", common.atol), ("--rtol", common.rtol)] {
        if value.is_some_and(|v| !(v >= 0.0)) {
            bail!("`{name}` must be a tolerance of 0 or more");
        }
    }
    Ok(())
}

/// `--memory` as given (with a warning when the host cannot give it), else the default capped to
/// the host (`cudal1_eval::memory::default_process_limit`).
fn memory_limit(flag: Option<u64>) -> u64 {
    use cudal1_eval::{memory, scratch};
    match flag {
        Some(limit) => {
            if let Some(beyond) = memory::limit_beyond_host(
                limit,
                scratch::available_memory(),
                scratch::total_memory(),
            ) {
                eprintln!("warning: {}", crate::hint::limit_beyond_host(&beyond));
            }
            limit
        }
        None => memory::default_process_limit(scratch::total_memory()),
    }
}

pub fn settings(common: &CommonEval, device: Device) -> Result<EvalSettings> {
    check(common)?;
    let tolerance = match (common.atol, common.rtol, common.kernelbench_v0) {
        (Some(atol), Some(rtol), _) => Tolerance::Fixed { atol, rtol },
        (_, _, true) => Tolerance::KernelBenchV0,
        _ => Tolerance::PerDtype,
    };
    Ok(EvalSettings {
        tolerance,
        correctness_seeds: common.seeds,
        timing_budget: Duration::from_secs_f64(common.budget),
        call_timeout: Duration::from_secs_f64(common.call_timeout),
        load_timeout: Duration::from_secs_f64(common.load_timeout),
        sandbox: !common.no_sandbox,
        window: common.window,
        mode: Mode::Full,
        memory_bytes: Some(memory_limit(common.memory)),
        scale: common.scale.filter(|s| *s < 1.0),
        device_output_bytes: common
            .device_outputs
            .unwrap_or(cudal1_eval::DEFAULT_DEVICE_OUTPUT_BYTES),
        ..EvalSettings::for_device(device)
    })
}

/// The store at `path`, which must exist (reading never makes an empty one).
pub fn open_existing(path: &std::path::Path) -> Result<Store> {
    if !path.is_file() {
        return Err(anyhow!("there is no store at `{}`\nhint: pass `--db FILE` (or set CUDAL1_DB) to the file `cudal1 eval` wrote", path.display()));
    }
    Ok(Store::open(path)?)
}

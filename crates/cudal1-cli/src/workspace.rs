//! Settings resolved once, low to high: [`Python::resolve`] finds the interpreter and installs the
//! runner package, [`Machine::resolve`] adds the devices (their timing cores reserved), who judges
//! on them and the engine's spread, and [`Workspace::resolve`] the evaluation settings and the
//! store. Every command that runs Python goes through the same steps, as far as it needs, and
//! starts its engine from [`Machine::engine_config`].

use crate::args::{CommonEval, DeviceArg, DeviceFlag, EngineFlags, PythonFlags};
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

/// Step 1 of every resolution: `--python` found and probed, the runner package installed in the
/// `--cache-dir`. Commands that start Python children without the engine (a policy, a profiler,
/// the embedded model) stop here.
pub struct Python {
    pub interpreter: Interpreter,
    pub env: RunnerEnv,
    /// The runner package, built extensions and imported tasks live here.
    pub cache: PathBuf,
}

impl Python {
    pub fn resolve(flags: &PythonFlags) -> Result<Python> {
        let (interpreter, env, cache) =
            interpreter(flags.python.as_deref(), flags.cache_dir.as_deref())?;
        Ok(Python { interpreter, env, cache })
    }

    /// The GPUs PyTorch sees here.
    pub fn gpus(&self) -> usize {
        self.interpreter.probe.gpus.len()
    }
}

/// What an engine user asks of the machine, from its flags, lowest layer first: every field left
/// `None` takes the engine's default.
#[derive(Default)]
pub struct EngineRequest<'a> {
    pub device: Option<&'a DeviceFlag>,
    pub engine: Option<&'a EngineFlags>,
    pub prefetch: Option<bool>,
    pub memory_budget: Option<u64>,
    pub seed: Option<u64>,
    /// Compile workers when `--compile-workers` is not a flag of the command (`tasks check`: 1).
    pub compile_workers: Option<usize>,
    /// A device the caller keeps for itself (`train`'s policy): with several GPUs and no
    /// `--device`, it times nothing.
    pub keep_out: Option<&'a Device>,
    /// Nothing will be timed (`tasks list` only reads tasks): no CPU core is kept for timing.
    pub untimed: bool,
}

/// Step 2: the machine an engine runs on, resolved once for every engine user (eval, baselines,
/// optimize, train, serve, worker, tasks, profile): the devices (their timing cores reserved),
/// who judges on them, and how the engine spreads its work.
pub struct Machine {
    pub interpreter: Interpreter,
    pub env: RunnerEnv,
    /// The runner package, built extensions and imported tasks live here.
    pub cache: PathBuf,
    pub devices: Vec<Device>,
    /// Who judges here: this build's judging version and the devices' class of GPU. Results are
    /// stored, and found again, under it.
    pub judge: Judge,
    pub compile_workers: Option<usize>,
    pub lanes: Option<usize>,
    pub prefetch: Option<bool>,
    pub pipeline: bool,
    pub seed: u64,
    pub memory: MemoryBudget,
}

impl Machine {
    pub fn resolve(python: Python, request: &EngineRequest<'_>) -> Result<Machine> {
        let Python { interpreter, env, cache } = python;
        let mut devices = chosen_devices(request.device, &interpreter)?;
        if !request.untimed {
            cudal1_eval::cores::reserve(&devices).map_err(anyhow::Error::msg)?;
        }
        if let (None, Some(kept)) = (request.device, request.keep_out) {
            devices = devices_left(devices, kept);
            tracing::info!(devices = ?devices, kept = %kept, "evaluation devices");
        }
        let judge = judge(&devices, &interpreter)?;
        let memory = memory_budget(request.memory_budget, &devices, &interpreter);
        let engine = request.engine;
        Ok(Machine {
            compile_workers: engine.and_then(|e| e.compile_workers).or(request.compile_workers),
            lanes: engine.and_then(|e| e.lanes.lanes),
            prefetch: request.prefetch,
            pipeline: engine.is_some_and(|e| e.pipeline),
            seed: request.seed.unwrap_or_else(rand::random),
            interpreter,
            env,
            cache,
            devices,
            judge,
            memory,
        })
    }

    /// Whether candidates run on a GPU here.
    pub fn on_gpu(&self) -> bool {
        self.gpu().is_some()
    }

    /// The first GPU of these devices.
    pub fn gpu(&self) -> Option<Device> {
        self.devices.iter().find(|d| d.is_cuda()).cloned()
    }

    /// The class of GPU jobs here are measured on: `--gpu-class`, else the first device's.
    pub fn gpu_class(&self, flag: Option<&str>) -> Result<String> {
        match (flag, &self.devices[0]) {
            (Some(c), _) => Ok(c.to_owned()),
            (None, Device::Cpu) => Ok("cpu".to_owned()),
            (None, Device::Cuda(i)) => self
                .interpreter
                .probe
                .gpu_names
                .get(*i as usize)
                .map(|n| cudal1_queue::gpu_class_of(n))
                .context("PyTorch did not name the GPU\nhint: name its class with `--gpu-class`"),
        }
    }

    /// An engine's configuration on these devices with `settings` (the extensions cache below
    /// the cache directory).
    pub fn engine_config(&self, settings: &EvalSettings) -> EngineConfig {
        let mut config = EngineConfig::new(
            self.env.clone(),
            self.devices.clone(),
            settings.clone(),
            CompileCache { root: self.cache.join("extensions") },
        );
        if let Some(n) = self.compile_workers {
            config.compile_workers = n;
        }
        if let Some(n) = self.lanes {
            config.lanes = n;
        }
        config.prefetch = self.prefetch;
        config.pipeline = self.pipeline;
        config.seed = self.seed;
        config.memory = self.memory.clone();
        config.judge = self.judge.clone();
        config
    }

    /// Starts an engine with `settings`, without an event stream.
    pub fn engine(&self, settings: &EvalSettings) -> Result<Evaluator> {
        let config = self.engine_config(settings);
        let parent = config.scratch_parent.clone();
        Evaluator::start(config).with_context(|| scratch_error(&parent))
    }

    /// As [`Machine::engine`], with the stream of every job's events, for a reporter that reads
    /// it to the end.
    pub fn engine_with_events(
        &self,
        settings: &EvalSettings,
    ) -> Result<(Evaluator, Receiver<Event>)> {
        let config = self.engine_config(settings);
        let parent = config.scratch_parent.clone();
        Evaluator::start_with_events(config).with_context(|| scratch_error(&parent))
    }
}

/// Step 3, for commands that evaluate with the common flags (eval, baselines, optimize, train):
/// the machine, the evaluation settings and the store.
pub struct Workspace {
    pub machine: Machine,
    pub settings: EvalSettings,
    pub store: Store,
    /// `--seed` as given.
    seed_flag: Option<u64>,
}

impl Workspace {
    /// Everything `eval`, `baselines`, `optimize` and `train` share, from their common flags.
    pub fn resolve(
        common: &CommonEval,
        device: &DeviceArg,
        prefetch: Option<bool>,
    ) -> Result<Workspace> {
        Workspace::resolve_with(Python::resolve(&common.python)?, common, device, prefetch, None)
    }

    /// As [`Workspace::resolve`] with the interpreter already found (`train` starts its policy
    /// with it too), keeping `keep_out` (the policy's device) from timing where others remain.
    pub fn resolve_with(
        python: Python,
        common: &CommonEval,
        device: &DeviceArg,
        prefetch: Option<bool>,
        keep_out: Option<&Device>,
    ) -> Result<Workspace> {
        let machine = Machine::resolve(
            python,
            &EngineRequest {
                device: device.device.as_ref(),
                engine: Some(&common.engine),
                prefetch,
                memory_budget: common.memory_budget,
                seed: common.seed,
                compile_workers: None,
                keep_out,
                untimed: false,
            },
        )?;
        let settings = settings(common, machine.devices[0].clone())?;
        let store = Store::open(&common.db.db)?;
        Ok(Workspace { machine, settings, store, seed_flag: common.seed })
    }

    /// The seed of a training run's own choices (data order, sampling): `--seed`, else 0, so that
    /// rerunning the same command resumes the same run.
    pub fn seed_for_training(&self) -> u64 {
        self.seed_flag.unwrap_or(0)
    }

    /// Starts the evaluation engine on this workspace's devices, without an event stream (each
    /// job's outcome comes on its handle).
    pub fn engine(&self) -> Result<Evaluator> {
        self.machine.engine(&self.settings)
    }

    /// As [`Workspace::engine`], with the stream of every job's events, for a reporter that reads
    /// it to the end.
    pub fn engine_with_events(&self) -> Result<(Evaluator, Receiver<Event>)> {
        self.machine.engine_with_events(&self.settings)
    }
}

/// The devices that judge programs when none was asked for and the caller keeps `kept` (train's
/// policy): with several GPUs, all but that one (it generates and trains there while they time);
/// with one, that one, in turn with the caller.
pub fn devices_left(mut devices: Vec<Device>, kept: &Device) -> Vec<Device> {
    if devices.len() > 1 && kept.is_cuda() {
        devices.retain(|d| d != kept);
    }
    devices
}

/// What went wrong making the engine's scratch directory, and what to do.
fn scratch_error(parent: &Path) -> String {
    format!("making a scratch directory in `{}`\nhint: set CUDAL1_WORK_DIR to a writable directory with room", parent.display())
}

/// Who judges on `devices`: this build, and their class of GPU as torch names it (`cpu`).
fn judge(devices: &[Device], interpreter: &Interpreter) -> Result<Judge> {
    let class = cudal1_eval::judge::devices_class(devices, &interpreter.probe.gpu_names)
        .map_err(|e| anyhow::anyhow!("{e}\nhint: results are filed per class of GPU; delete `python/` in the cache directory so that PyTorch is asked again"))?;
    Ok(Judge::new(class))
}

/// Where jobs must fit: `--memory-budget` (else the host's available memory now) and each GPU's
/// memory as PyTorch reports it.
fn memory_budget(flag: Option<u64>, devices: &[Device], interp: &Interpreter) -> MemoryBudget {
    let gpu = |d: &Device| match d {
        Device::Cuda(i) => interp.probe.gpu_memory.get(*i as usize).copied(),
        Device::Cpu => None,
    };
    MemoryBudget {
        host: flag.or_else(cudal1_eval::scratch::available_memory),
        devices: devices.iter().map(gpu).collect(),
    }
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
fn interpreter(
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
/// free of cudal1's other work from the machine's resolution on (`cudal1_eval::cores`;
/// `CUDAL1_TIMING_CORES` names them by hand).
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

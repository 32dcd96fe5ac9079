//! `cudal1 worker`: takes evaluation jobs from a shared queue (PostgreSQL with `--queue`, else the
//! SQLite store of this machine) and judges them on this machine's devices, until Ctrl-C (or
//! `--exit-when-idle`). With `--stage compile`, a machine without a GPU builds the extensions of
//! queued programs for the GPU machines instead.

use crate::args::{parse_device, DeviceFlag};
use crate::exit::Status;
use crate::interrupt;
use crate::queue_backend::Backend;
use crate::workspace::{self, EngineParts};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use cudal1_eval::{Device, EvalSettings};
use cudal1_queue::{artifact, gpu_class_of, CompileStageConfig, WorkerConfig, WorkerEvent};
use cudal1_store::Stage;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StageFlag {
    /// Judge jobs (building what they need first).
    Run,
    /// Only build extensions, for machines without a GPU.
    Compile,
}

#[derive(Args, Debug)]
pub struct WorkerArgs {
    /// The PostgreSQL job queue shared with `cudal1 serve` (`postgres://user@host/db`); without it,
    /// the SQLite store `--db` of this machine.
    #[arg(long, env = "CUDAL1_QUEUE")]
    pub queue: Option<String>,
    /// The SQLite store, when there is no `--queue`.
    #[arg(long, env = "CUDAL1_DB", default_value = "cudal1.db")]
    pub db: PathBuf,
    /// `cpu`, `cuda` or `cuda:N`: one device per worker process (start one worker per GPU).
    #[arg(long, value_parser = parse_device)]
    pub device: Option<DeviceFlag>,
    /// The class of jobs to take (default: this device's GPU, e.g. `nvidia-h100-80gb-hbm3`, or
    /// `cpu`). `cudal1 serve --gpu-class` must name the same.
    #[arg(long)]
    pub gpu_class: Option<String>,
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
    /// The Python interpreter with PyTorch (default: CUDAL1_PYTHON, VIRTUAL_ENV, .venv, python3).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// Where the runner package, built extensions and the jobs' tasks are cached.
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    #[arg(long)]
    pub compile_workers: Option<usize>,
    /// Evaluations that do not time run this many at once on the device.
    #[arg(long)]
    pub lanes: Option<usize>,
    /// Start the next candidates' processes while one is timed (default: on GPUs).
    #[arg(long, value_name = "BOOL")]
    pub prefetch: Option<bool>,
    /// Load and check timed candidates on every lane, and hold the device alone only to time them.
    #[arg(long)]
    pub pipeline: bool,
    /// Print a line per job on stderr.
    #[arg(long)]
    pub progress: bool,
}

pub fn run(a: WorkerArgs) -> Result<Status> {
    if !(a.lease.is_finite() && a.lease >= 0.5) {
        bail!("`--lease` must be at least 0.5 seconds");
    }
    let (interp, env, cache) = workspace::interpreter(a.python.as_deref(), a.cache_dir.as_deref())?;
    let backend = Backend::open(a.queue.as_deref(), &a.db, Duration::from_secs(600))?;
    let name = a.name.clone().unwrap_or_else(WorkerConfig::default_name);
    let lease = Duration::from_secs_f64(a.lease);
    let idle = a.exit_when_idle.map(Duration::from_secs_f64);
    let build_environment = artifact::environment(&interp.probe);
    let interrupt = interrupt::install("the evaluations under way");
    if a.stage == StageFlag::Compile {
        let gpu_class = a.gpu_class.clone().context("`--stage compile` builds for GPU machines of one class\nhint: add `--gpu-class NAME` as the GPU workers print it when they start")?;
        let config = CompileStageConfig {
            name: name.clone(),
            gpu_class: gpu_class.clone(),
            env,
            compile_cache: cudal1_eval::CompileCache { root: cache.join("extensions") },
            workers: a.compile_workers.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
            }),
            lease,
            task_root: cache.join("jobs"),
            work_root: cudal1_eval::scratch::default_parent()
                .join(format!("cudal1-compile-{}", std::process::id())),
            build_environment,
            exit_when_idle: idle,
        };
        eprintln!(
            "worker {name}: building extensions for `{gpu_class}` jobs from {}",
            backend.queue().describe()
        );
        let progress = a.progress;
        let moved = cudal1_queue::run_compile_stage(
            backend.queue().as_ref(),
            &config,
            interrupt.flag(),
            &|job, built| {
                if progress {
                    eprintln!("job {} ({}): {built:?}", job.id, job.task_name);
                }
            },
        );
        let _ = std::fs::remove_dir_all(&config.work_root);
        eprintln!("worker {name}: {moved} job(s) moved on to the run stage");
        return Ok(if interrupt.interrupted() { Status::Interrupted } else { Status::Done });
    }
    let devices = workspace::devices(a.device.as_ref(), &interp)?;
    if devices.len() != 1 {
        bail!("a worker runs on one device; this machine has {}\nhint: start one worker per GPU: `cudal1 worker --device cuda:0`, `--device cuda:1`, ...", devices.len());
    }
    let gpu_class = match (&a.gpu_class, &devices[0]) {
        (Some(c), _) => c.clone(),
        (None, Device::Cpu) => "cpu".to_owned(),
        (None, Device::Cuda(i)) => interp
            .probe
            .gpu_names
            .get(*i as usize)
            .map(|n| gpu_class_of(n))
            .context("PyTorch did not name the GPU\nhint: name its class with `--gpu-class`")?,
    };
    // The settings come with each job; these only seed the engine's configuration.
    let seed_settings = EvalSettings::for_device(devices[0].clone());
    let parts = EngineParts {
        compile_workers: a.compile_workers,
        lanes: a.lanes,
        prefetch: a.prefetch,
        pipeline: a.pipeline,
        seed: rand::random(),
        memory: workspace::memory_budget(None, &devices, &interp),
    };
    let engine = workspace::engine_config(&env, &devices, &seed_settings, &cache, &parts);
    let ahead = a.ahead.unwrap_or(engine.compile_workers + engine.lanes.max(2));
    let config = WorkerConfig {
        engine,
        name: name.clone(),
        gpu_class: gpu_class.clone(),
        stages: vec![Stage::Run, Stage::Compile],
        lease,
        ahead,
        task_root: cache.join("jobs"),
        allow_unsandboxed: a.no_sandbox,
        build_environment,
        exit_when_idle: idle,
    };
    eprintln!(
        "worker {name}: taking `{gpu_class}` jobs from {} on {}",
        backend.queue().describe(),
        devices[0]
    );
    let progress = a.progress;
    let summary = cudal1_queue::run(
        backend.queue().as_ref(),
        &config,
        interrupt.flag(),
        &mut |event| {
            match event {
        WorkerEvent::EngineStarted { canceller } => interrupt.watch(canceller),
        WorkerEvent::Claimed { job } if progress => eprintln!("job {} ({}): claimed, attempt {}", job.id, job.task_name, job.attempt),
        WorkerEvent::Finished { job, task, verdict, error, first } if progress => {
            let what = verdict.map_or_else(|| format!("failed: {}", error.unwrap_or("")), str::to_owned);
            let kept = if first { "" } else { " (another worker's result came first; dropped)" };
            eprintln!("job {job} ({task}): {what}{kept}");
        }
        WorkerEvent::Released { job } if progress => eprintln!("job {job}: given back to the queue"),
        WorkerEvent::HostFailed { job, error } => eprintln!("warning: job {job}: no verdict, the machine failed, not the candidate ({error}); it comes back when its lease runs out"),
        WorkerEvent::LeaseLost { job } => eprintln!("warning: job {job}: its lease ran out; another worker may take it (the first result wins)"),
        WorkerEvent::StoreProblem { error } => eprintln!("warning: the queue: {error}"),
        _ => {}
    }
        },
    )?;
    eprintln!(
        "worker {name}: {} claimed, {} evaluated, {} failed, {} given back, {} dropped as second results",
        summary.claimed, summary.evaluated, summary.failed, summary.released, summary.discarded
    );
    let stopped = interrupt.interrupted() || interrupt.flag().load(Ordering::SeqCst);
    Ok(if stopped { Status::Interrupted } else { Status::Done })
}

//! `cudal1 worker`: takes evaluation jobs from a shared queue (PostgreSQL with `--queue`, else the
//! SQLite store of this machine) and judges them on this machine's devices, until Ctrl-C (or
//! `--exit-when-idle`). With `--stage compile`, a machine without a GPU builds the extensions of
//! queued programs for the GPU machines instead.

use crate::args::{StageFlag, WorkerArgs};
use crate::exit::Status;
use crate::interrupt;
use crate::queue_backend::Backend;
use crate::reporters::WorkerReporter;
use crate::workspace::{EngineRequest, Machine, Python};
use anyhow::{bail, Context, Result};
use cudal1_eval::EvalSettings;
use cudal1_queue::{artifact, CompileStageConfig, WorkerConfig};
use cudal1_store::Stage;
use std::sync::atomic::Ordering;
use std::time::Duration;

pub fn run(a: WorkerArgs) -> Result<Status> {
    if !(a.lease.is_finite() && a.lease >= 0.5) {
        bail!("`--lease` must be at least 0.5 seconds");
    }
    let python = Python::resolve(&a.python)?;
    let backend = Backend::open(a.queue.queue.as_deref(), &a.db.db, Duration::from_secs(600))?;
    let name = a.name.clone().unwrap_or_else(WorkerConfig::default_name);
    let lease = Duration::from_secs_f64(a.lease);
    let idle = a.exit_when_idle.map(Duration::from_secs_f64);
    let build_environment = artifact::environment(&python.interpreter.probe);
    let interrupt = interrupt::install("the evaluations under way");
    if a.stage == StageFlag::Compile {
        let gpu_class = a.gpu_class.gpu_class.clone().context("`--stage compile` builds for GPU machines of one class\nhint: add `--gpu-class NAME` as the GPU workers print it when they start")?;
        let config = CompileStageConfig {
            name: name.clone(),
            gpu_class: gpu_class.clone(),
            env: python.env.clone(),
            compile_cache: cudal1_eval::CompileCache { root: python.cache.join("extensions") },
            workers: a.engine.compile_workers.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
            }),
            lease,
            task_root: python.cache.join("jobs"),
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
    let machine = Machine::resolve(
        python,
        &EngineRequest {
            device: a.device.device.as_ref(),
            engine: Some(&a.engine),
            prefetch: a.prefetch.prefetch,
            ..EngineRequest::default()
        },
    )?;
    let devices = &machine.devices;
    if devices.len() != 1 {
        bail!("a worker runs on one device; this machine has {}\nhint: start one worker per GPU: `cudal1 worker --device cuda:0`, `--device cuda:1`, ...", devices.len());
    }
    let gpu_class = machine.gpu_class(a.gpu_class.gpu_class.as_deref())?;
    // The settings come with each job; these only seed the engine's configuration.
    let engine = machine.engine_config(&EvalSettings::for_device(devices[0].clone()));
    let ahead = a.ahead.unwrap_or(engine.compile_workers + engine.lanes.max(2));
    let config = WorkerConfig {
        engine,
        name: name.clone(),
        gpu_class: gpu_class.clone(),
        stages: vec![Stage::Run, Stage::Compile],
        lease,
        ahead,
        task_root: machine.cache.join("jobs"),
        allow_unsandboxed: a.no_sandbox,
        build_environment,
        exit_when_idle: idle,
    };
    eprintln!(
        "worker {name}: taking `{gpu_class}` jobs from {} on {}",
        backend.queue().describe(),
        devices[0]
    );
    let reporter = WorkerReporter { per_job: a.progress };
    let summary =
        cudal1_queue::run(backend.queue().as_ref(), &config, interrupt.flag(), &mut |event| {
            reporter.event(event, |c| interrupt.watch(c))
        })?;
    eprintln!(
        "worker {name}: {} claimed, {} evaluated, {} failed, {} given back, {} dropped as second results",
        summary.claimed, summary.evaluated, summary.failed, summary.released, summary.discarded
    );
    let stopped = interrupt.interrupted() || interrupt.flag().load(Ordering::SeqCst);
    Ok(if stopped { Status::Interrupted } else { Status::Done })
}

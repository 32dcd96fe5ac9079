//! `cudal1 serve`: the HTTP service for RL engines (rewards, contrastive prompts, prompt export,
//! OpenRLHF's reward shape) over the tasks of a suite. Jobs go to the SQLite store of this
//! machine, judged by a worker inside this process on its devices, or to a PostgreSQL queue
//! (`--queue`) that `cudal1 worker`s on GPU machines take them from.

use crate::args::ServeArgs;
use crate::exit::Status;
use crate::interrupt;
use crate::queue_backend::Backend;
use crate::reporters::WorkerReporter;
use crate::workspace::{self, EngineRequest, Machine, Python};
use anyhow::{bail, Context, Result};
use cudal1_eval::Device;
use cudal1_queue::{artifact, WorkerConfig};
use cudal1_serve::{Limits, PromptDefaults, ServeConfig, Service};
use cudal1_store::Stage;
use cudal1_task::{load_suite, Task};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

pub fn run(a: ServeArgs) -> Result<Status> {
    let suite = load_suite(&a.suite)?;
    for p in &suite.problems {
        eprintln!("warning: skipping a task: {p}");
    }
    let mut tasks: BTreeMap<String, Arc<Task>> = BTreeMap::new();
    for t in suite.tasks {
        if let Some(other) = tasks.insert(t.key(), Arc::new(t)) {
            bail!("two tasks of `{}` are both named `{}`", a.suite.display(), other.key());
        }
    }
    if tasks.is_empty() {
        bail!("`{}` holds no task to serve", a.suite.display());
    }
    let token = std::env::var(&a.token_env).ok().filter(|t| !t.is_empty());
    if token.is_none() && !a.listen.ip().is_loopback() {
        bail!("`--listen {}` is reachable from other machines, and no token is set\nhint: put a secret in the environment variable {} (or the one `--token-env` names); clients send it as `Authorization: Bearer <token>`", a.listen, a.token_env);
    }
    for (what, x) in [
        ("--wait", a.wait),
        ("--max-wait", a.max_wait),
        ("--openrlhf-wait", a.openrlhf_wait),
        ("--lease", a.lease),
    ] {
        if !(x.is_finite() && x >= 0.0) {
            bail!("`{what}` must be a number of seconds");
        }
    }
    let backend =
        Backend::open(a.queue.queue.as_deref(), &a.common.db.db, Duration::from_secs(30))?;
    let local = a.local_worker.unwrap_or(!backend.is_shared());
    let interrupt = interrupt::install("the evaluations under way");

    let (settings, gpu_class, worker) = if local {
        let machine = Machine::resolve(
            Python::resolve(&a.common.python)?,
            &EngineRequest {
                device: a.device.device.as_ref(),
                engine: Some(&a.common.engine),
                prefetch: a.prefetch.prefetch,
                memory_budget: a.common.memory_budget,
                seed: a.common.seed,
                ..EngineRequest::default()
            },
        )?;
        let settings = workspace::settings(&a.common, machine.devices[0].clone())?;
        let gpu_class = machine.gpu_class(a.gpu_class.gpu_class.as_deref())?;
        let engine = machine.engine_config(&settings);
        let devices = &machine.devices;
        let ahead = engine.compile_workers + engine.lanes.max(2) * devices.len();
        let worker = WorkerConfig {
            engine,
            name: WorkerConfig::default_name(),
            gpu_class: gpu_class.clone(),
            stages: vec![Stage::Run, Stage::Compile],
            lease: Duration::from_secs_f64(a.lease.max(1.0)),
            ahead,
            task_root: machine.cache.join("jobs"),
            allow_unsandboxed: a.common.no_sandbox,
            build_environment: artifact::environment(&machine.interpreter.probe),
            exit_when_idle: None,
        };
        (settings, gpu_class, Some(worker))
    } else {
        let gpu_class = a.gpu_class.gpu_class.clone().context("with a shared queue and no local worker, the GPU class of the workers must be named\nhint: add `--gpu-class NAME` as `cudal1 worker` prints it when it starts (`cpu` for CPU workers)")?;
        let device = if gpu_class == "cpu" { Device::Cpu } else { Device::Cuda(0) };
        (workspace::settings(&a.common, device)?, gpu_class, None)
    };

    let mut config = ServeConfig::new(tasks, settings, gpu_class.clone());
    config.default_mode = a.mode;
    config.token = token;
    config.limits = Limits {
        max_body_bytes: a.max_body << 20,
        max_items: a.max_items,
        max_completion_bytes: a.max_completion << 10,
    };
    config.default_wait = Duration::from_secs_f64(a.wait);
    config.max_wait = Duration::from_secs_f64(a.max_wait);
    config.openrlhf_wait = Duration::from_secs_f64(a.openrlhf_wait);
    config.prompt_defaults = PromptDefaults {
        exemplars: a.exemplar.exemplars,
        temperature: a.exemplar.exemplar_temperature,
        bucket_width: a.exemplar.bucket_width,
        language: a.language.language.into(),
    };
    config.clip = a.clip;
    config.max_attempts = a.max_attempts;
    config.compile_stage = a.compile_stage;
    if !(a.clip.is_finite() && a.clip > 0.0) {
        bail!("`--clip` must be a positive number");
    }
    a.exemplar.sampler()?;
    let task_count = config.tasks.len();
    let language = config.prompt_defaults.language;
    let service = Service::new(config, backend.serve_store());

    let worker_thread = worker.map(|w| {
        let (queue, interrupt) = (backend.queue(), Arc::clone(&interrupt));
        std::thread::Builder::new()
            .name("local-worker".into())
            .spawn(move || {
                let reporter = WorkerReporter { per_job: false };
                cudal1_queue::run(queue.as_ref(), &w, interrupt.flag(), &mut |event| {
                    reporter.event(event, |c| interrupt.watch(c));
                })
            })
            .expect("the system can start a thread")
    });

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the HTTP runtime")?;
    let served = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(a.listen).await.with_context(|| format!("cannot listen on `{}`\nhint: is another `cudal1 serve` running there? choose another port with `--listen`", a.listen))?;
        let addr = listener.local_addr()?;
        let evaluating = if local { "judged here" } else { "judged by `cudal1 worker`s" };
        eprintln!("cudal1 serve: listening on http://{addr} ({task_count} tasks, `{gpu_class}` jobs in {}, {evaluating}; prompts ask for {language} unless a request names its `language`)", backend.queue().describe());
        let stopping = Arc::clone(&service);
        let interrupt = Arc::clone(&interrupt);
        let shutdown = async move {
            while !interrupt.interrupted() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            // Waiting requests answer at once (their items pending; the same request after a
            // restart finds the same jobs).
            stopping.shutdown();
        };
        cudal1_serve::serve(listener, service, shutdown).await.context("serving HTTP")
    });
    if let Some(t) = worker_thread {
        match t.join() {
            Ok(Ok(summary)) => eprintln!(
                "local worker: {} evaluated, {} given back to the queue",
                summary.evaluated, summary.released
            ),
            Ok(Err(e)) => eprintln!("warning: local worker: {e}"),
            Err(_) => eprintln!("warning: the local worker panicked"),
        }
    }
    served?;
    Ok(Status::Interrupted)
}

//! The service over a real HTTP connection (reqwest against axum on a free port), with a real
//! SQLite file and, where verdicts are the point, a real worker judging on the CPU with the
//! Python runner.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use cudal1_eval::{CompileCache, Device, EngineConfig, EvalSettings, Mode, RunnerEnv};
use cudal1_queue::{WorkerConfig, WorkerSummary};
use cudal1_serve::{ServeConfig, Service};
use cudal1_store::{JobQueue, Stage, Store};
use cudal1_task::{load_suite, Task};
use reqwest::StatusCode;
use serde_json::{json, Value};

mod api;
mod rewards;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn suite() -> BTreeMap<String, Arc<Task>> {
    load_suite(&repo().join("tests/suite-cpu/tasks"))
        .unwrap()
        .tasks
        .into_iter()
        .map(|t| (t.key(), Arc::new(t)))
        .collect()
}

fn settings() -> EvalSettings {
    EvalSettings {
        timing_budget: Duration::from_millis(300),
        call_timeout: Duration::from_secs(10),
        ..EvalSettings::for_device(Device::Cpu)
    }
}

/// A candidate file of the CPU suite, as a model would answer: prose, then the program.
fn answer(task: &str, file: &str) -> String {
    let code = std::fs::read_to_string(
        repo().join(format!("tests/suite-cpu/candidates/{task}/{file}.py")),
    )
    .unwrap();
    format!("Analysis: it is faster.\n\n```python\n{code}\n```\n")
}

/// A server on a free port over an SQLite store; with a worker judging on the CPU if asked.
struct Server {
    _dir: tempfile::TempDir,
    url: String,
    store: Arc<Store>,
    stop: Arc<AtomicBool>,
    worker: Option<std::thread::JoinHandle<WorkerSummary>>,
    service: Arc<Service>,
}

impl Server {
    async fn start(tweak: impl FnOnce(&mut ServeConfig), judge: bool) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join("serve.db")).unwrap());
        let mut config = ServeConfig::new(suite(), settings(), "cpu".into());
        config.poll = Duration::from_millis(200);
        config.default_mode = Mode::Correctness;
        tweak(&mut config);
        let service = Service::new(config, Arc::clone(&store) as Arc<dyn cudal1_store::ServeStore>);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(cudal1_serve::serve(listener, Arc::clone(&service), std::future::pending()));
        let stop = Arc::new(AtomicBool::new(false));
        let worker = judge.then(|| {
            let (store, stop, config) =
                (Arc::clone(&store), Arc::clone(&stop), worker_config(dir.path()));
            std::thread::spawn(move || {
                cudal1_queue::run(store.as_ref(), &config, &stop, &mut |_| {}).unwrap()
            })
        });
        Server { _dir: dir, url, store, stop, worker, service }
    }

    /// Stops the worker; its summary.
    fn finish(mut self) -> WorkerSummary {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        self.worker.take().map(|w| w.join().unwrap()).unwrap_or_default()
    }
}

fn runner_env(cache: &Path) -> RunnerEnv {
    let flag = std::env::var_os("CUDAL1_TEST_PYTHON")
        .map(PathBuf::from)
        .or_else(|| Some(repo().join(".venv/bin/python")).filter(|p| p.exists()));
    let interp = cudal1_python::find_interpreter(&cudal1_python::PythonRequest {
        flag,
        start_dir: Some(repo()),
        ..Default::default()
    })
    .unwrap();
    RunnerEnv::prepare(&interp, cache).unwrap()
}

fn worker_config(dir: &Path) -> WorkerConfig {
    let env = runner_env(&dir.join("cache"));
    let mut engine = EngineConfig::new(
        env,
        vec![Device::Cpu],
        settings(),
        CompileCache { root: dir.join("extensions") },
    );
    engine.scratch_parent = dir.join("scratch");
    engine.compile_workers = 1;
    engine.lanes = 1;
    WorkerConfig {
        engine,
        name: "test-worker".into(),
        gpu_class: "cpu".into(),
        stages: vec![Stage::Run, Stage::Compile],
        lease: Duration::from_secs(10),
        ahead: 2,
        task_root: dir.join("tasks"),
        allow_unsandboxed: false,
        build_environment: "test".into(),
        exit_when_idle: None,
    }
}

async fn post(url: &str, body: &Value) -> (StatusCode, Value) {
    let r = reqwest::Client::new().post(url).json(body).send().await.unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn item(task: &str, file: &str) -> Value {
    json!({"task": task, "completion": answer(task, file)})
}

fn queued(store: &Store) -> u64 {
    let c = store.counts().unwrap();
    c.queued + c.running + c.done + c.failed
}

//! [`ModelWorker`]: one `python -m cudal1_model` process under the supervisor every Python child
//! uses. The worker is trusted (it runs no candidate code), so it runs unsandboxed, but it is still
//! a process that can hang or die: every call has a time limit, and a worker that misses one is
//! killed with its whole process group.

use cudal1_protocol::{parse_envelope, ChildError, Request};
use cudal1_supervisor::{Sandbox, SpawnError, Worker, WorkerError, WorkerSpec};
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

/// What starts a model worker.
#[derive(Debug, Clone)]
pub struct ModelConfig {
    /// A Python with torch and transformers (and peft for LoRA).
    pub python: PathBuf,
    /// The directory that holds the `cudal1_model` package (`cudal1_python::MODEL_WORKER.install`).
    pub package_root: PathBuf,
    /// torch CPU threads; `None` leaves torch's default.
    pub threads: Option<usize>,
    /// `CUDA_VISIBLE_DEVICES` for the worker (`Some("")` hides every GPU); `None` passes the
    /// caller's.
    pub visible_devices: Option<String>,
    /// For logs and errors.
    pub label: String,
}

impl ModelConfig {
    pub fn new(python: impl Into<PathBuf>, package_root: impl Into<PathBuf>) -> ModelConfig {
        ModelConfig {
            python: python.into(),
            package_root: package_root.into(),
            threads: None,
            visible_devices: None,
            label: "model worker".into(),
        }
    }
}

/// Why a call to the model worker gave no reply.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("could not start the model worker")]
    Spawn(#[from] SpawnError),
    /// It timed out, died or wrote something that is not a reply; it is gone now.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// It answered with an error (`kind`: `bad_request`, `not_loaded`, `load_error`, `oom`,
    /// `runtime_error`).
    #[error("the model worker could not do `{op}` ({kind}): {message}")]
    Refused { op: &'static str, kind: String, message: String },
    #[error("the model worker's reply to `{op}` is malformed: {detail}")]
    Protocol { op: &'static str, detail: String },
}

impl ModelError {
    /// The worker's error kind, when it answered with one.
    pub fn kind(&self) -> Option<&str> {
        match self {
            ModelError::Refused { kind, .. } => Some(kind),
            _ => None,
        }
    }
}

/// A running model worker.
pub struct ModelWorker {
    worker: Worker,
}

impl std::fmt::Debug for ModelWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelWorker").field("pid", &self.worker.pid()).finish()
    }
}

/// Environment variables a model worker keeps: where tools, libraries and caches are, and the
/// Hugging Face switches a user may have set (offline mode, cache location).
const KEPT: [&str; 12] = [
    "PATH",
    "HOME",
    "LD_LIBRARY_PATH",
    "CUDA_HOME",
    "CUDA_PATH",
    "LANG",
    "TMPDIR",
    "XDG_CACHE_HOME",
    "HF_HOME",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "PYTORCH_CUDA_ALLOC_CONF",
];

impl ModelWorker {
    /// Starts the worker; it loads nothing until [`crate::messages::Load`].
    pub fn spawn(config: &ModelConfig) -> Result<ModelWorker, ModelError> {
        let mut env: Vec<(OsString, OsString)> =
            KEPT.iter().filter_map(|k| std::env::var_os(k).map(|v| ((*k).into(), v))).collect();
        let mut paths = vec![config.package_root.clone()];
        if let Some(existing) = std::env::var_os("PYTHONPATH") {
            paths.extend(std::env::split_paths(&existing));
        }
        if let Ok(joined) = std::env::join_paths(paths) {
            env.push(("PYTHONPATH".into(), joined));
        }
        env.push(("PYTHONUNBUFFERED".into(), "1".into()));
        env.push(("PYTHONNOUSERSITE".into(), "1".into()));
        // Progress bars of transformers go to stderr, which is kept for errors: keep it short.
        env.push(("HF_HUB_DISABLE_PROGRESS_BARS".into(), "1".into()));
        env.push(("TOKENIZERS_PARALLELISM".into(), "false".into()));
        match &config.visible_devices {
            Some(v) => env.push(("CUDA_VISIBLE_DEVICES".into(), v.into())),
            None => {
                if let Some(v) = std::env::var_os("CUDA_VISIBLE_DEVICES") {
                    env.push(("CUDA_VISIBLE_DEVICES".into(), v));
                }
            }
        }
        let mut args: Vec<OsString> = vec!["-m".into(), "cudal1_model".into()];
        if let Some(t) = config.threads {
            args.extend(["--threads".into(), t.to_string().into()]);
        }
        let cwd = std::env::current_dir().unwrap_or_else(|_| std::env::temp_dir());
        let spec = WorkerSpec {
            label: config.label.clone(),
            program: config.python.clone(),
            args,
            cwd,
            env,
            sandbox: Sandbox::disabled(),
        };
        let worker = Worker::spawn(spec)?;
        tracing::debug!(pid = worker.pid(), label = %config.label, "started the model worker");
        Ok(ModelWorker { worker })
    }

    /// Sends one request and waits up to `timeout` for its reply.
    pub fn call<R: Request>(
        &mut self,
        request: &R,
        timeout: Duration,
    ) -> Result<R::Reply, ModelError> {
        let reply = self.worker.request(request.to_json(), timeout)?;
        match parse_envelope::<R::Reply, ChildError>(reply) {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(ChildError { kind, message })) => {
                Err(ModelError::Refused { op: R::OP, kind, message })
            }
            Err(detail) => Err(ModelError::Protocol { op: R::OP, detail }),
        }
    }

    /// The end of the worker's stderr (Python's tracebacks and warnings).
    pub fn stderr_tail(&self) -> String {
        self.worker.stderr_tail()
    }

    pub fn pid(&self) -> u32 {
        self.worker.pid()
    }

    /// Asks the worker to stop, then makes sure its process group is gone.
    pub fn shutdown(mut self) {
        let _ = self.call(&cudal1_protocol::Shutdown {}, Duration::from_secs(10));
        self.worker.terminate(Duration::from_secs(3));
    }
}

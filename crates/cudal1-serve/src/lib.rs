//! cudal1's HTTP service for RL engines. The main type is [`Service`]: it answers reward
//! requests (a batch of task and completion pairs in; per item a reward, verdict, reason and
//! speedup with its interval out, or `null` with the reason when it could not be scored), makes
//! CUDA-L1's contrastive prompts from the program database and exports prompt sets as JSONL,
//! and speaks OpenRLHF's remote reward shape. It evaluates nothing itself: every program becomes
//! a job in a [`cudal1_store::JobQueue`] (idempotent: the same task, code and settings are
//! measured once), judged by `cudal1 worker`s (or the worker `cudal1 serve` runs beside it on
//! its own GPUs), and requests wait for their jobs' results up to a deadline.
//!
//! ```no_run
//! # async fn demo(config: cudal1_serve::ServeConfig, store: std::sync::Arc<dyn cudal1_store::ServeStore>) -> std::io::Result<()> {
//! let service = cudal1_serve::Service::new(config, store);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8377").await?;
//! cudal1_serve::serve(listener, service, std::future::pending()).await
//! # }
//! ```
//!
//! Routes: `POST /v1/reward` (long poll), `POST /v1/reward/submit` and `POST /v1/reward/get`
//! (the asynchronous pair), `POST /v1/prompt`, `GET /v1/prompts/export`, `GET /v1/tasks`,
//! `POST /openrlhf/get_reward`, `GET /metrics` (Prometheus), `GET /health`.

pub mod api;
mod error;
mod groups;
mod http;
mod metrics;
mod prompt;
mod reward;
mod waiters;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use cudal1_eval::{EvalSettings, Mode};
use cudal1_search::{Language, Prompts};
use cudal1_store::ServeStore;
use cudal1_task::Task;

pub use error::ApiError;
pub use http::router;

/// Sizes the service refuses to go beyond (413 Payload Too Large).
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_body_bytes: usize,
    pub max_items: usize,
    pub max_completion_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_body_bytes: 16 << 20, max_items: 1024, max_completion_bytes: 256 << 10 }
    }
}

/// The defaults of prompts for requests that do not say: the sampler's (CUDA-L1: two
/// exemplars) and the language programs are asked in (CUDA).
#[derive(Debug, Clone)]
pub struct PromptDefaults {
    pub exemplars: usize,
    pub temperature: f64,
    pub bucket_width: f64,
    pub language: Language,
}

impl Default for PromptDefaults {
    fn default() -> PromptDefaults {
        PromptDefaults {
            exemplars: 2,
            temperature: 1.0,
            bucket_width: 0.25,
            language: Language::Cuda,
        }
    }
}

/// Everything a service is built from, resolved once by its user.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The suite, by name (`level1/12_Name`).
    pub tasks: BTreeMap<String, Arc<Task>>,
    /// The evaluation settings of every job; the mode is set per request.
    pub settings: EvalSettings,
    pub default_mode: Mode,
    /// The GPU class jobs are measured on (workers take only their class's jobs, and only jobs of
    /// their judging version).
    pub gpu_class: String,
    /// Required as `Authorization: Bearer <token>` on every route but `/health`.
    pub token: Option<String>,
    pub limits: Limits,
    /// How long a reward request waits when it does not say.
    pub default_wait: Duration,
    pub max_wait: Duration,
    /// How long `/openrlhf/get_reward` waits before answering 503 (OpenRLHF's client gives up
    /// after 180 s, then retries).
    pub openrlhf_wait: Duration,
    /// How often waiters look at their jobs when no signal came.
    pub poll: Duration,
    pub prompt_defaults: PromptDefaults,
    /// Clip of group-normalised rewards.
    pub clip: f64,
    /// Workers that may take a job before it is failed.
    pub max_attempts: u32,
    /// Queue programs that build extensions for a compile-stage worker first.
    pub compile_stage: bool,
}

impl ServeConfig {
    /// The defaults, for this suite and settings.
    pub fn new(
        tasks: BTreeMap<String, Arc<Task>>,
        settings: EvalSettings,
        gpu_class: String,
    ) -> ServeConfig {
        ServeConfig {
            tasks,
            settings,
            default_mode: Mode::Full,
            gpu_class,
            token: None,
            limits: Limits::default(),
            default_wait: Duration::from_secs(60),
            max_wait: Duration::from_secs(600),
            openrlhf_wait: Duration::from_secs(170),
            poll: Duration::from_secs(1),
            prompt_defaults: PromptDefaults::default(),
            clip: 1.5,
            max_attempts: 3,
            compile_stage: false,
        }
    }
}

/// The service's state, shared by every request.
pub struct Service {
    config: ServeConfig,
    store: Arc<dyn ServeStore>,
    waiters: Arc<waiters::Waiters>,
    groups: groups::Groups,
    metrics: metrics::Metrics,
    /// The templates asking for CUDA, and the same asking for Triton.
    cuda_prompts: Prompts,
    triton_prompts: Prompts,
    /// What each program shown or considered as an exemplar is written in, by id: a program's
    /// code never changes, so it is read once ([`cudal1_search::exemplar_pool`]).
    written: std::sync::Mutex<std::collections::HashMap<i64, cudal1_search::Written>>,
    /// Set by [`Service::shutdown`]: waiting requests answer at once.
    closing: std::sync::atomic::AtomicBool,
}

impl Service {
    pub fn new(config: ServeConfig, store: Arc<dyn ServeStore>) -> Arc<Service> {
        Service::with_prompts(config, store, Prompts::builtin())
    }

    /// As [`Service::new`], with prompt templates of one's own. Each prompt asks for the
    /// language its request names (`config.prompt_defaults.language` when it names none),
    /// whatever language `prompts` were set to.
    pub fn with_prompts(
        config: ServeConfig,
        store: Arc<dyn ServeStore>,
        prompts: Prompts,
    ) -> Arc<Service> {
        let waiters = Arc::new(waiters::Waiters::default());
        waiters.dispatch(store.subscribe());
        Arc::new(Service {
            config,
            store,
            waiters,
            groups: groups::Groups::default(),
            metrics: metrics::Metrics::new(),
            cuda_prompts: prompts.clone().language(Language::Cuda),
            triton_prompts: prompts.language(Language::Triton),
            written: std::sync::Mutex::default(),
            closing: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Makes waiting requests answer now with what they have (items still pending say so), so
    /// that a graceful shutdown is not held up by long polls.
    pub fn shutdown(&self) {
        self.closing.store(true, std::sync::atomic::Ordering::SeqCst);
        self.waiters.wake_all();
    }

    fn closing(&self) -> bool {
        self.closing.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn config(&self) -> &ServeConfig {
        &self.config
    }

    /// The templates asking for `language`.
    fn prompts(&self, language: Language) -> &Prompts {
        match language {
            Language::Cuda => &self.cuda_prompts,
            Language::Triton => &self.triton_prompts,
        }
    }

    /// Runs store work off the async threads.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> Result<T, cudal1_store::StoreError> + Send + 'static,
    ) -> Result<T, ApiError> {
        self.blocking_api(move || f().map_err(ApiError::from)).await
    }

    async fn blocking_api<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|e| ApiError::internal(format!("a worker thread failed: {e}")))?
    }
}

/// Serves until `shutdown` completes; requests under way then finish.
pub async fn serve(
    listener: tokio::net::TcpListener,
    service: Arc<Service>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(service)).with_graceful_shutdown(shutdown).await
}

//! LLM clients for cudal1. The main type is the [`Llm`] trait: one blocking
//! call that turns a [`ChatRequest`] into a [`Completion`]. Implementations:
//! [`OpenAiClient`] for any OpenAI-compatible `/v1/chat/completions` server
//! (vLLM, SGLang, Ollama, llama.cpp, hosted APIs) with retries, a concurrency
//! limit and a cost cap; [`Mixture`] to spread requests over several models by
//! weight; and [`EmbeddedModel`], a small local model run by a Python worker.
//!
//! ```no_run
//! use cudal1_llm::{ChatRequest, Llm, OpenAiClient, OpenAiConfig};
//! let client = OpenAiClient::new(OpenAiConfig::new("http://127.0.0.1:8000/v1", "qwen"))?;
//! let reply = client.complete(&ChatRequest::user("Say hi").with_max_tokens(16))?;
//! println!("{} ({} tokens)", reply.text, reply.completion_tokens);
//! # Ok::<(), cudal1_llm::LlmError>(())
//! ```
//!
//! Calls block; callers that want parallel samples use threads (clones of a
//! client share its connection pool, concurrency limit and [`Usage`]).

mod chat;
mod embedded;
mod endpoint;
mod error;
mod limiter;
mod mixture;
mod openai;
mod retry;
#[cfg(feature = "test-server")]
pub mod test_server;
mod usage;
mod wire;

pub use chat::{ChatRequest, Completion, Message, Role};
pub use embedded::{EmbeddedConfig, EmbeddedModel};
pub use endpoint::chat_completions_url;
pub use error::LlmError;
pub use mixture::Mixture;
pub use openai::{OpenAiClient, OpenAiConfig};
pub use retry::RetryPolicy;
pub use usage::{Prices, Usage, UsageSnapshot};

/// A source of chat completions.
pub trait Llm: Send + Sync {
    /// One completion for `req`; blocks until it is there or has failed.
    fn complete(&self, req: &ChatRequest) -> Result<Completion, LlmError>;

    /// A short human-readable name (model and where it runs), for logs and reports.
    fn describe(&self) -> String;
}

impl<T: Llm + ?Sized> Llm for std::sync::Arc<T> {
    fn complete(&self, req: &ChatRequest) -> Result<Completion, LlmError> {
        (**self).complete(req)
    }

    fn describe(&self) -> String {
        (**self).describe()
    }
}

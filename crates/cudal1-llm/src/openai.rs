//! [`OpenAiClient`]: any server that speaks `/v1/chat/completions`.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::endpoint::chat_completions_url;
use crate::limiter::Limiter;
use crate::retry::{parse_retry_after, status_is_retryable, RetryPolicy};
use crate::usage::{Prices, Usage};
use crate::wire::{error_message, parse_reply, request_body, shorten};
use crate::{ChatRequest, Completion, Llm, LlmError};

/// Everything an [`OpenAiClient`] needs. Build with [`OpenAiConfig::new`] and
/// change the public fields.
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// With or without a trailing `/v1`, or the full `.../chat/completions` URL.
    pub base_url: String,
    pub model: String,
    /// The NAME of the environment variable holding the API key. When that
    /// variable is unset or empty no `Authorization` header is sent (local servers).
    pub api_key_env: String,
    /// End-to-end limit for one HTTP attempt, body included.
    pub timeout: Duration,
    /// Requests in flight at once, shared by all clones of the client.
    pub max_concurrent: usize,
    pub retry: RetryPolicy,
    pub prices: Prices,
    /// Refuse to send once the estimated cost reaches this many dollars.
    pub cost_cap_usd: Option<f64>,
    /// Extra body fields, merged last (`null` removes a field); see the crate docs.
    pub extra_body: Map<String, Value>,
}

impl OpenAiConfig {
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: "OPENAI_API_KEY".to_owned(),
            timeout: Duration::from_secs(600),
            max_concurrent: 8,
            retry: RetryPolicy::default(),
            prices: Prices::default(),
            cost_cap_usd: None,
            extra_body: Map::new(),
        }
    }
}

/// Keeps the key out of `Debug` output and logs.
#[derive(Clone)]
struct ApiKey(String);

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

#[derive(Debug)]
struct Inner {
    config: OpenAiConfig,
    url: String,
    api_key: Option<ApiKey>,
    agent: ureq::Agent,
    limiter: Limiter,
    usage: Usage,
}

/// A blocking client for an OpenAI-compatible chat endpoint. Cheap to clone;
/// clones share the connection pool, the concurrency limit and the [`Usage`].
#[derive(Debug, Clone)]
pub struct OpenAiClient {
    inner: Arc<Inner>,
}

/// The result of one HTTP attempt, before the retry decision.
enum Attempt {
    Done(Completion),
    /// Worth retrying after the delay; `Retry-After` when the server gave one.
    Retry {
        error: LlmError,
        retry_after: Option<Duration>,
    },
    Fail(LlmError),
}

impl OpenAiClient {
    /// A client with its own [`Usage`], capped by `config.cost_cap_usd`.
    pub fn new(config: OpenAiConfig) -> Result<Self, LlmError> {
        let usage = Usage::new(config.cost_cap_usd);
        Self::with_usage(config, usage)
    }

    /// A client that adds to (and is capped by) a [`Usage`] shared with others;
    /// `config.cost_cap_usd` is ignored in favour of the shared one's cap.
    pub fn with_usage(config: OpenAiConfig, usage: Usage) -> Result<Self, LlmError> {
        let url = chat_completions_url(&config.base_url)?;
        if config.max_concurrent == 0 {
            return Err(LlmError::InvalidConfig {
                reason: "max_concurrent must be at least 1".to_owned(),
            });
        }
        if config.model.trim().is_empty() {
            return Err(LlmError::InvalidConfig { reason: "model name is empty".to_owned() });
        }
        if config.timeout.is_zero() {
            return Err(LlmError::InvalidConfig { reason: "timeout must be positive".to_owned() });
        }
        let api_key =
            std::env::var(&config.api_key_env).ok().filter(|k| !k.trim().is_empty()).map(ApiKey);
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(config.timeout))
            .http_status_as_error(false)
            .user_agent(concat!("cudal1/", env!("CARGO_PKG_VERSION")))
            .build()
            .into();
        let limiter = Limiter::new(config.max_concurrent);
        Ok(Self { inner: Arc::new(Inner { config, url, api_key, agent, limiter, usage }) })
    }

    pub fn usage(&self) -> &Usage {
        &self.inner.usage
    }

    pub fn config(&self) -> &OpenAiConfig {
        &self.inner.config
    }

    /// The full chat-completions URL requests go to.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    fn attempt(&self, body: &[u8]) -> Attempt {
        let inner = &*self.inner;
        let url = &inner.url;
        let mut request = inner.agent.post(url).header("content-type", "application/json");
        if let Some(key) = &inner.api_key {
            request = request.header("authorization", format!("Bearer {}", key.0));
        }
        inner.usage.record_attempt();
        let started = Instant::now();
        let response = request.send(body).and_then(|mut resp| {
            let status = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after);
            let text = resp.body_mut().read_to_string()?;
            Ok((status, retry_after, text))
        });
        let latency = started.elapsed();
        let (status, retry_after, text) = match response {
            Ok(parts) => parts,
            Err(e) => return self.transport_failure(e),
        };
        if (200..300).contains(&status) {
            return match parse_reply(&text) {
                Ok(parsed) => {
                    let cost =
                        inner.config.prices.cost(parsed.prompt_tokens, parsed.completion_tokens);
                    inner.usage.record_completion(
                        parsed.prompt_tokens,
                        parsed.completion_tokens,
                        cost,
                    );
                    Attempt::Done(Completion {
                        text: parsed.text,
                        prompt_tokens: parsed.prompt_tokens,
                        completion_tokens: parsed.completion_tokens,
                        model: parsed.model.unwrap_or_else(|| inner.config.model.clone()),
                        finish_reason: parsed.finish_reason,
                        latency,
                    })
                }
                Err(reason) => Attempt::Fail(LlmError::BadResponse {
                    url: url.clone(),
                    reason,
                    body: shorten(&text, 500),
                }),
            };
        }
        let error = LlmError::Status {
            url: url.clone(),
            status,
            message: error_message(&text),
            attempts: 0,
        };
        if status_is_retryable(status) {
            Attempt::Retry { error, retry_after }
        } else {
            Attempt::Fail(error)
        }
    }

    fn transport_failure(&self, e: ureq::Error) -> Attempt {
        let url = self.inner.url.clone();
        let timed_out = matches!(&e, ureq::Error::Timeout(_))
            || matches!(&e, ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::TimedOut);
        if timed_out {
            return Attempt::Fail(LlmError::Timeout {
                url,
                timeout: self.inner.config.timeout,
                source: Box::new(e),
            });
        }
        match e {
            ureq::Error::Io(_)
            | ureq::Error::ConnectionFailed
            | ureq::Error::HostNotFound
            | ureq::Error::Protocol(_) => Attempt::Retry {
                error: LlmError::Connection { url, attempts: 0, source: Box::new(e) },
                retry_after: None,
            },
            ureq::Error::BadUri(_) | ureq::Error::Http(_) | ureq::Error::InvalidProxyUrl => {
                Attempt::Fail(LlmError::InvalidConfig {
                    reason: format!("cannot send to `{url}`: {e}"),
                })
            }
            other => {
                Attempt::Fail(LlmError::Connection { url, attempts: 1, source: Box::new(other) })
            }
        }
    }
}

/// Writes the final attempt count into errors that carry one.
fn with_attempts(error: LlmError, n: u32) -> LlmError {
    match error {
        LlmError::Status { url, status, message, .. } => {
            LlmError::Status { url, status, message, attempts: n }
        }
        LlmError::Connection { url, source, .. } => {
            LlmError::Connection { url, attempts: n, source }
        }
        other => other,
    }
}

impl Llm for OpenAiClient {
    fn complete(&self, req: &ChatRequest) -> Result<Completion, LlmError> {
        let inner = &*self.inner;
        if let Some(reason) = req.problem() {
            return Err(LlmError::InvalidRequest { target: inner.url.clone(), reason });
        }
        inner.usage.check_budget()?;
        let body =
            serde_json::to_vec(&request_body(&inner.config.model, req, &inner.config.extra_body))
                .expect("a JSON value always serialises");
        // Held through backoff waits too: a rate-limited server should not see
        // the waiting callers replaced by fresh ones.
        let _permit = inner.limiter.acquire();
        // The budget may have run out while this caller waited for a permit.
        inner.usage.check_budget()?;
        let mut rng = rand::rng();
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.attempt(&body) {
                Attempt::Done(completion) => return Ok(completion),
                Attempt::Fail(error) => return Err(with_attempts(error, attempts)),
                Attempt::Retry { error, retry_after } => {
                    if attempts > inner.config.retry.max_retries {
                        return Err(with_attempts(error, attempts));
                    }
                    let wait = inner.config.retry.delay(attempts - 1, retry_after, &mut rng);
                    tracing::warn!(url = %inner.url, attempt = attempts, wait_ms = wait.as_millis(), %error, "retrying LLM request");
                    std::thread::sleep(wait);
                }
            }
        }
    }

    fn describe(&self) -> String {
        format!("openai-compatible `{}` at `{}`", self.inner.config.model, self.inner.url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_configs_are_refused() {
        let mut c = OpenAiConfig::new("http://127.0.0.1:1", "m");
        c.max_concurrent = 0;
        assert!(matches!(OpenAiClient::new(c), Err(LlmError::InvalidConfig { .. })));
        assert!(matches!(
            OpenAiClient::new(OpenAiConfig::new("127.0.0.1:1", "m")),
            Err(LlmError::InvalidConfig { .. })
        ));
        assert!(matches!(
            OpenAiClient::new(OpenAiConfig::new("http://127.0.0.1:1", " ")),
            Err(LlmError::InvalidConfig { .. })
        ));
    }

    #[test]
    fn debug_output_hides_the_key() {
        let var = format!("CUDAL1_UNIT_KEY_{}", std::process::id());
        std::env::set_var(&var, "sk-very-secret");
        let mut c = OpenAiConfig::new("http://127.0.0.1:1/v1", "m");
        c.api_key_env = var.clone();
        let client = OpenAiClient::new(c).unwrap();
        std::env::remove_var(&var);
        let dbg = format!("{client:?}");
        assert!(!dbg.contains("sk-very-secret"));
        assert!(dbg.contains("ApiKey(***)"));
    }

    #[test]
    fn invalid_requests_are_not_sent() {
        let client = OpenAiClient::new(OpenAiConfig::new("http://127.0.0.1:1", "m")).unwrap();
        let mut req = ChatRequest::user("x");
        req.n = 3;
        assert!(matches!(client.complete(&req), Err(LlmError::InvalidRequest { .. })));
        assert_eq!(client.usage().snapshot().attempts, 0);
    }
}

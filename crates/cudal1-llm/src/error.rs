//! The one error type of this crate.

use std::time::Duration;

/// Why a completion could not be had.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The request itself is malformed; nothing was sent.
    #[error("invalid request for `{target}`: {reason}")]
    InvalidRequest { target: String, reason: String },

    /// The client's configuration cannot work.
    #[error("invalid LLM configuration: {reason}")]
    InvalidConfig { reason: String },

    /// The server answered with an error status that is not worth retrying,
    /// or retries ran out.
    #[error("`{url}` answered HTTP {status} after {attempts} attempt(s): {message}")]
    Status { url: String, status: u16, message: String, attempts: u32 },

    /// No answer within the configured time. Not retried: the server may still
    /// be generating, and a second request would double its load and cost.
    #[error("`{url}` did not answer within {timeout:?}")]
    Timeout {
        url: String,
        timeout: Duration,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// The connection failed (refused, reset, DNS, TLS) on every attempt.
    #[error("could not reach `{url}` after {attempts} attempt(s)")]
    Connection {
        url: String,
        attempts: u32,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    /// The server answered 2xx but the body is not a usable completion.
    #[error("`{url}` sent an unusable reply: {reason}; body starts with: {body}")]
    BadResponse { url: String, reason: String, body: String },

    /// The cost cap was reached; the request was not sent.
    #[error("LLM budget exhausted: spent ${spent_usd:.4} of a ${cap_usd:.4} cap")]
    BudgetExhausted { spent_usd: f64, cap_usd: f64 },

    /// The embedded model's worker process failed (the worker's stderr ends `reason`).
    #[error("embedded model {target}: {reason}")]
    Worker {
        target: String,
        reason: String,
        #[source]
        source: Option<cudal1_model::ModelError>,
    },
}

impl LlmError {
    /// Whether a caller that samples many candidates should stop sampling
    /// (the budget is gone or the setup is wrong) rather than go on.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            LlmError::BudgetExhausted { .. }
                | LlmError::InvalidConfig { .. }
                | LlmError::InvalidRequest { .. }
        ) || matches!(self, LlmError::Status { status: 401 | 403 | 404, .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_and_auth_errors_are_fatal_but_server_errors_are_not() {
        assert!(LlmError::BudgetExhausted { spent_usd: 1.0, cap_usd: 1.0 }.is_fatal());
        let status =
            |status| LlmError::Status { url: "u".into(), status, message: "m".into(), attempts: 1 };
        assert!(status(401).is_fatal());
        assert!(!status(500).is_fatal());
        assert!(!status(429).is_fatal());
    }
}

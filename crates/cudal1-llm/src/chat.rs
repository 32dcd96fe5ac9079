//! The request and reply types every [`crate::Llm`] speaks.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Who wrote a message in a chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

/// One turn of a chat.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

impl Message {
    pub fn system(content: impl Into<String>) -> Self {
        Self { role: Role::System, content: content.into() }
    }

    pub fn user(content: impl Into<String>) -> Self {
        Self { role: Role::User, content: content.into() }
    }

    pub fn assistant(content: impl Into<String>) -> Self {
        Self { role: Role::Assistant, content: content.into() }
    }
}

/// A request for one completion of a chat.
///
/// `n` exists so that the wire format is explicit; every client here answers
/// with one completion and rejects any other value, because callers sample in
/// parallel threads instead (each sample then has its own seed and usage).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    pub temperature: f32,
    pub top_p: f32,
    pub max_tokens: u32,
    pub seed: Option<u64>,
    pub n: u32,
}

impl ChatRequest {
    /// A request with the sampling settings CUDA-L1 style search uses by default.
    pub fn new(messages: Vec<Message>) -> Self {
        Self { messages, temperature: 1.0, top_p: 1.0, max_tokens: 8192, seed: None, n: 1 }
    }

    /// One user message, nothing else.
    pub fn user(prompt: impl Into<String>) -> Self {
        Self::new(vec![Message::user(prompt)])
    }

    #[must_use]
    pub fn with_temperature(mut self, temperature: f32) -> Self {
        self.temperature = temperature;
        self
    }

    #[must_use]
    pub fn with_top_p(mut self, top_p: f32) -> Self {
        self.top_p = top_p;
        self
    }

    #[must_use]
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    #[must_use]
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Why this request cannot be sent, if it cannot.
    pub fn problem(&self) -> Option<String> {
        if self.n != 1 {
            return Some(format!("n must be 1, got {}", self.n));
        }
        if self.messages.is_empty() {
            return Some("a request needs at least one message".to_owned());
        }
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return Some(format!("temperature must be finite and >= 0, got {}", self.temperature));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Some(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if self.max_tokens == 0 {
            return Some("max_tokens must be at least 1".to_owned());
        }
        None
    }
}

/// One completion and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    pub text: String,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// The model that answered, as the server names it.
    pub model: String,
    /// `stop`, `length`, ... as the server reports it; `None` when it said nothing.
    pub finish_reason: Option<String>,
    /// Wall time of the successful attempt (retries and waits not included).
    pub latency: Duration,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_serialise_in_lowercase() {
        let json = serde_json::to_string(&Message::system("x")).unwrap();
        assert_eq!(json, r#"{"role":"system","content":"x"}"#);
    }

    #[test]
    fn problems_are_found() {
        assert_eq!(ChatRequest::user("hi").problem(), None);
        let mut r = ChatRequest::user("hi");
        r.n = 2;
        assert!(r.problem().unwrap().contains("n must be 1"));
        assert!(ChatRequest::new(vec![]).problem().unwrap().contains("at least one message"));
        assert!(ChatRequest::user("x").with_top_p(0.0).problem().unwrap().contains("top_p"));
        assert!(ChatRequest::user("x")
            .with_temperature(f32::NAN)
            .problem()
            .unwrap()
            .contains("temperature"));
        assert!(ChatRequest::user("x")
            .with_max_tokens(0)
            .problem()
            .unwrap()
            .contains("max_tokens"));
    }
}

//! The OpenAI chat-completions JSON: building request bodies and reading
//! replies and error bodies from the many servers that claim compatibility.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::ChatRequest;

/// The request body. `extra` entries are merged last: they add fields
/// (`max_completion_tokens`, `reasoning_effort`, ...) or override ours, and a
/// `null` value removes a field (for example `max_tokens` on models that refuse it).
pub(crate) fn request_body(model: &str, req: &ChatRequest, extra: &Map<String, Value>) -> Value {
    let mut body = json!({
        "model": model,
        "messages": req.messages,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "max_tokens": req.max_tokens,
        "n": req.n,
        "stream": false,
    });
    let obj = body.as_object_mut().expect("built as an object");
    if let Some(seed) = req.seed {
        obj.insert("seed".to_owned(), json!(seed));
    }
    for (k, v) in extra {
        if v.is_null() {
            obj.remove(k);
        } else {
            obj.insert(k.clone(), v.clone());
        }
    }
    body
}

#[derive(Debug, Deserialize)]
struct WireResponse {
    model: Option<String>,
    #[serde(default)]
    choices: Vec<WireChoice>,
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
struct WireChoice {
    message: Option<WireMessage>,
    /// Old completions-style servers put the text here.
    text: Option<String>,
    finish_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireMessage {
    content: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
}

/// What a 2xx body says, before latency is attached.
#[derive(Debug, PartialEq)]
pub(crate) struct Parsed {
    pub text: String,
    pub model: Option<String>,
    pub finish_reason: Option<String>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// Reads a 2xx body; `Err` holds the reason it is unusable.
pub(crate) fn parse_reply(body: &str) -> Result<Parsed, String> {
    let value: Value = serde_json::from_str(body).map_err(|e| format!("not JSON ({e})"))?;
    // Some gateways answer 200 with an error object instead of choices.
    if value.get("choices").is_none() {
        if let Some(msg) = error_message_from_json(&value) {
            return Err(format!("the server reported an error: {msg}"));
        }
    }
    let wire: WireResponse =
        serde_json::from_value(value).map_err(|e| format!("unexpected JSON shape ({e})"))?;
    let Some(choice) = wire.choices.into_iter().next() else {
        return Err("no choices in the reply".to_owned());
    };
    // A null content (a reasoning model cut off by max_tokens) is an empty
    // answer, not a transport failure: the caller's extraction reports it.
    let text = choice.message.and_then(|m| m.content).or(choice.text).unwrap_or_default();
    let usage = wire.usage.unwrap_or(WireUsage { prompt_tokens: None, completion_tokens: None });
    Ok(Parsed {
        text,
        model: wire.model,
        finish_reason: choice.finish_reason,
        prompt_tokens: usage.prompt_tokens.unwrap_or(0),
        completion_tokens: usage.completion_tokens.unwrap_or(0),
    })
}

/// The human-readable message in an error body, in the shapes servers use:
/// OpenAI `{"error":{"message":..}}`, `{"error":".."}`, vLLM `{"message":..}`,
/// FastAPI `{"detail":..}`; otherwise the body itself, shortened.
pub(crate) fn error_message(body: &str) -> String {
    if let Ok(value) = serde_json::from_str::<Value>(body) {
        if let Some(msg) = error_message_from_json(&value) {
            return msg;
        }
    }
    let trimmed = body.trim();
    if trimmed.is_empty() {
        "(empty body)".to_owned()
    } else {
        shorten(trimmed, 2000)
    }
}

fn error_message_from_json(value: &Value) -> Option<String> {
    let err = value.get("error");
    let candidates = [
        err.and_then(|e| e.get("message")),
        err.filter(|e| e.is_string()),
        value.get("message"),
        value.get("detail"),
    ];
    candidates.into_iter().flatten().find_map(|v| match v {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    })
}

/// At most `max` bytes, cut on a character boundary.
pub(crate) fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Message;

    #[test]
    fn body_has_sampling_fields_and_extras_override_or_remove() {
        let req = ChatRequest::new(vec![Message::system("s"), Message::user("u")])
            .with_temperature(0.5)
            .with_max_tokens(99)
            .with_seed(3);
        let mut extra = Map::new();
        extra.insert("max_tokens".into(), Value::Null);
        extra.insert("max_completion_tokens".into(), json!(99));
        let body = request_body("m", &req, &extra);
        assert_eq!(body["model"], "m");
        assert_eq!(body["messages"][1]["role"], "user");
        assert_eq!(body["temperature"], 0.5);
        assert_eq!(body["seed"], 3);
        assert_eq!(body["n"], 1);
        assert!(body.get("max_tokens").is_none());
        assert_eq!(body["max_completion_tokens"], 99);
        let no_seed = request_body("m", &ChatRequest::user("x"), &Map::new());
        assert!(no_seed.get("seed").is_none());
    }

    #[test]
    fn parses_a_normal_reply() {
        let body = r#"{"id":"x","model":"qwen","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#;
        let p = parse_reply(body).unwrap();
        assert_eq!(
            p,
            Parsed {
                text: "hi".into(),
                model: Some("qwen".into()),
                finish_reason: Some("stop".into()),
                prompt_tokens: 12,
                completion_tokens: 3
            }
        );
    }

    #[test]
    fn null_content_is_empty_text_and_missing_usage_is_zero() {
        let p =
            parse_reply(r#"{"choices":[{"message":{"content":null},"finish_reason":"length"}]}"#)
                .unwrap();
        assert_eq!(p.text, "");
        assert_eq!(p.finish_reason.as_deref(), Some("length"));
        assert_eq!((p.prompt_tokens, p.completion_tokens), (0, 0));
    }

    #[test]
    fn unusable_replies_say_why() {
        assert!(parse_reply("<html>").unwrap_err().contains("not JSON"));
        assert!(parse_reply(r#"{"choices":[]}"#).unwrap_err().contains("no choices"));
        assert!(parse_reply(r#"{"error":{"message":"model overloaded"}}"#)
            .unwrap_err()
            .contains("model overloaded"));
    }

    #[test]
    fn error_messages_in_common_shapes() {
        assert_eq!(error_message(r#"{"error":{"message":"bad key","type":"auth"}}"#), "bad key");
        assert_eq!(error_message(r#"{"error":"nope"}"#), "nope");
        assert_eq!(
            error_message(r#"{"object":"error","message":"too long","code":400}"#),
            "too long"
        );
        assert_eq!(error_message(r#"{"detail":"Not Found"}"#), "Not Found");
        assert_eq!(error_message("plain text\n"), "plain text");
        assert_eq!(error_message(""), "(empty body)");
        assert!(error_message(&"é".repeat(3000)).ends_with('…'));
    }
}

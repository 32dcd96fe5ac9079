//! Turning the base URL a user typed into the chat-completions URL.

use crate::LlmError;

/// `http://h:8000`, `http://h:8000/`, `http://h:8000/v1` and
/// `http://h:8000/v1/` all become `http://h:8000/v1/chat/completions`.
/// A URL that already ends in `/chat/completions` is kept, so a provider with
/// an unusual prefix (`.../v1beta/openai/chat/completions`) can be named in full.
pub fn chat_completions_url(base_url: &str) -> Result<String, LlmError> {
    let base = base_url.trim().trim_end_matches('/');
    let Some((scheme, rest)) = base.split_once("://") else {
        return Err(LlmError::InvalidConfig {
            reason: format!(
                "base URL `{base_url}` has no scheme; write e.g. `http://127.0.0.1:8000/v1`"
            ),
        });
    };
    if !matches!(scheme, "http" | "https") || rest.is_empty() {
        return Err(LlmError::InvalidConfig {
            reason: format!("base URL `{base_url}` must be http:// or https:// followed by a host"),
        });
    }
    Ok(if base.ends_with("/chat/completions") {
        base.to_owned()
    } else if base.ends_with("/v1") {
        format!("{base}/chat/completions")
    } else {
        format!("{base}/v1/chat/completions")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_and_without_v1() {
        let want = "http://127.0.0.1:8000/v1/chat/completions";
        for base in [
            "http://127.0.0.1:8000",
            "http://127.0.0.1:8000/",
            "http://127.0.0.1:8000/v1",
            " http://127.0.0.1:8000/v1/ ",
        ] {
            assert_eq!(chat_completions_url(base).unwrap(), want, "{base}");
        }
    }

    #[test]
    fn prefixes_and_full_urls() {
        assert_eq!(
            chat_completions_url("https://openrouter.ai/api/v1").unwrap(),
            "https://openrouter.ai/api/v1/chat/completions"
        );
        assert_eq!(
            chat_completions_url("https://x.example/v1beta/openai/chat/completions").unwrap(),
            "https://x.example/v1beta/openai/chat/completions"
        );
    }

    #[test]
    fn rejects_garbage() {
        assert!(chat_completions_url("localhost:8000").is_err());
        assert!(chat_completions_url("ftp://host").is_err());
        assert!(chat_completions_url("http://").is_err());
    }
}

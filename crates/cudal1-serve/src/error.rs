//! Errors as clients see them: a status and `{"error": ..., "hint": ...}`. Bad input is a 4xx
//! that says what is wrong; only cudal1's own failures (the store unreachable) are 5xx.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use cudal1_store::StoreError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub hint: Option<String>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into(), hint: None }
    }

    pub fn unprocessable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, message)
    }

    pub fn too_large(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    pub fn unauthorized() -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "a valid bearer token is required").hint(
            "send `Authorization: Bearer <token>` with the token `cudal1 serve` was started with",
        )
    }

    #[must_use]
    pub fn hint(mut self, hint: impl Into<String>) -> ApiError {
        self.hint = Some(hint.into());
        self
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            text.push_str(": ");
            text.push_str(&s.to_string());
            source = s.source();
        }
        tracing::error!(error = %text, "store");
        // What a client can do, in the API's words; the store's operator reads the log.
        let hint = match e {
            StoreError::Connect { .. } => Some(
                "the server cannot reach its store at the moment; send the request again later",
            ),
            _ => None,
        };
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: text,
            hint: hint.map(str::to_owned),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = serde_json::json!({"error": self.message});
        if let Some(h) = &self.hint {
            body["hint"] = h.clone().into();
        }
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_store_is_a_503_whose_hint_is_for_api_clients() {
        let refused =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
        let e = ApiError::from(StoreError::Connect {
            store: "postgres://db/cudal1".into(),
            source: Box::new(refused),
        });
        assert_eq!(e.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            e.message,
            "cannot connect to the store `postgres://db/cudal1`: connection refused"
        );
        let hint = e.hint.unwrap();
        assert!(hint.contains("again later") && !hint.contains("--"), "{hint}");
    }
}

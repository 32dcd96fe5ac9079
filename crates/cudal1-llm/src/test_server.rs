//! A real HTTP server on 127.0.0.1 for tests of HTTP clients (feature `test-server`): it stands
//! in for a hosted LLM, answering each request with what a test's handler says.
//!
//! Built on axum and tokio, which serve every connection concurrently. `tiny_http`, used before,
//! runs connections on a task pool that can lose a wake-up: when two connections arrive while one
//! idle thread is waking, the second waits in the pool's queue until a running connection ends,
//! and a client that keeps its connections alive (a pool of keep-alive connections, as every
//! OpenAI client has) never ends one. On a loaded 2-core machine, `optimize` with 8 samples in
//! flight then waited for ever on requests that the server had received and never read.

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use std::net::TcpListener;
use std::sync::Arc;
use std::thread::JoinHandle;

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// The path with its query, as sent (`/v1/chat/completions`).
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Request {
    /// The first header named `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The body as JSON; panics (failing the test) when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).expect("the request's body is JSON")
    }
}

/// What the server does with a request.
pub enum Reply {
    /// A status, a body, and headers beside `Content-Type: application/json`.
    Send { status: u16, body: String, headers: Vec<(String, String)> },
    /// No answer: the request stays open until the server stops.
    Hang,
}

impl Reply {
    /// `status` with a JSON body.
    pub fn json(status: u16, body: impl Into<String>) -> Reply {
        Reply::Send { status, body: body.into(), headers: Vec::new() }
    }

    /// A chat-completions reply (status 200) whose one choice says `text`.
    pub fn completion(text: &str, prompt_tokens: u64, completion_tokens: u64) -> Reply {
        Reply::json(200, completion_json(text, "scripted", prompt_tokens, completion_tokens))
    }
}

/// A well-formed chat-completions body.
pub fn completion_json(
    text: &str,
    model: &str,
    prompt_tokens: u64,
    completion_tokens: u64,
) -> String {
    serde_json::json!({
        "id": "cmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                  "total_tokens": prompt_tokens + completion_tokens}
    })
    .to_string()
}

type Handler = dyn Fn(Request) -> Reply + Send + Sync;

/// The running server; dropping it (or [`TestServer::stop`]) closes every connection.
pub struct TestServer {
    url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl TestServer {
    /// Serves on an ephemeral port of 127.0.0.1. `handler` runs on a blocking thread of its own
    /// for each request (it may sleep or wait), several at once.
    pub fn start(
        handler: impl Fn(Request) -> Reply + Send + Sync + 'static,
    ) -> std::io::Result<TestServer> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let url = format!("http://{}", listener.local_addr()?);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("test-server")
            .enable_all()
            .build()?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let handler: Arc<Handler> = Arc::new(handler);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = axum::Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let handler = Arc::clone(&handler);
                async move { answer(handler, method, uri, headers, body).await }
            },
        );
        let thread = std::thread::Builder::new().name("test-server".into()).spawn(move || {
            runtime.block_on(async move {
                tokio::select! {
                    served = axum::serve(listener, app) => {
                        if let Err(e) = served {
                            eprintln!("the test server stopped: {e}");
                        }
                    }
                    _ = stopped => {}
                }
            });
            // Connections and hanging requests are dropped with their tasks.
            runtime.shutdown_background();
        })?;
        Ok(TestServer { url, stop: Some(stop), thread: Some(thread) })
    }

    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops serving and closes every connection.
    pub fn stop(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shut();
    }
}

async fn answer(
    handler: Arc<Handler>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = Request {
        method: method.to_string(),
        path: uri.path_and_query().map_or_else(|| uri.path().to_owned(), |p| p.to_string()),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect(),
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    let reply = match tokio::task::spawn_blocking(move || handler(request)).await {
        Ok(reply) => reply,
        Err(e) => {
            return (StatusCode::INTERNAL_SERVER_ERROR, format!("the handler failed: {e}"))
                .into_response()
        }
    };
    match reply {
        Reply::Hang => std::future::pending().await,
        Reply::Send { status, body, headers } => {
            let mut response = Response::new(axum::body::Body::from(body));
            *response.status_mut() =
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let h = response.headers_mut();
            h.insert("content-type", HeaderValue::from_static("application/json"));
            for (k, v) in headers {
                if let (Ok(k), Ok(v)) =
                    (HeaderName::try_from(k.as_str()), HeaderValue::try_from(v.as_str()))
                {
                    h.insert(k, v);
                }
            }
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn many_clients_keeping_connections_alive_are_all_answered() {
        // What stalled `tiny_http`: more concurrent keep-alive clients than idle threads.
        let seen = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&seen);
        let server = TestServer::start(move |r| {
            counter.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(20));
            Reply::json(201, format!("{{\"path\": \"{}\"}}", r.path))
        })
        .unwrap();
        let url = format!("{}/v1/x?y=1", server.url());
        let agent = ureq::Agent::new_with_defaults();
        std::thread::scope(|s| {
            for _ in 0..12 {
                s.spawn(|| {
                    for _ in 0..3 {
                        let mut resp = agent
                            .post(&url)
                            .config()
                            .http_status_as_error(false)
                            .build()
                            .send("{}")
                            .unwrap();
                        assert_eq!(resp.status().as_u16(), 201);
                        let body = resp.body_mut().read_to_string().unwrap();
                        assert!(body.contains("/v1/x?y=1"), "{body}");
                    }
                });
            }
        });
        assert_eq!(seen.load(Ordering::SeqCst), 36);
        server.stop();
    }

    #[test]
    fn a_hanging_request_ends_when_the_server_stops() {
        let server = TestServer::start(|_| Reply::Hang).unwrap();
        let url = format!("{}/hang", server.url());
        let client = std::thread::spawn(move || ureq::post(&url).send("{}").map(|_| ()));
        std::thread::sleep(Duration::from_millis(200));
        assert!(!client.is_finished(), "the request hangs while the server runs");
        server.stop();
        assert!(client.join().unwrap().is_err(), "the connection closed without an answer");
    }
}

//! A real HTTP server on 127.0.0.1 (ephemeral port) that answers from a script
//! and records what it saw.

use std::sync::Arc;
use std::thread::JoinHandle;

use tiny_http::{Header, Response, Server};

/// What the server does with the i-th request.
pub enum Reply {
    /// Status, body and extra headers.
    Send(u16, String, Vec<(&'static str, String)>),
    /// Keep the request open and never answer (until the server finishes).
    Hang,
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).expect("request body is JSON")
    }
}

pub struct Scripted {
    server: Arc<Server>,
    pub base_url: String,
    thread: Option<JoinHandle<Vec<Seen>>>,
}

pub fn record(req: &mut tiny_http::Request) -> Seen {
    let mut body = String::new();
    req.as_reader().read_to_string(&mut body).expect("read request body");
    Seen {
        path: req.url().to_owned(),
        headers: req.headers().iter().map(|h| (h.field.to_string(), h.value.to_string())).collect(),
        body,
    }
}

pub fn respond(
    req: tiny_http::Request,
    status: u16,
    body: String,
    headers: Vec<(&'static str, String)>,
) {
    let mut resp = Response::from_string(body)
        .with_status_code(status)
        .with_header(Header::from_bytes("Content-Type", "application/json").unwrap());
    for (k, v) in headers {
        resp = resp.with_header(Header::from_bytes(k, v.as_bytes()).unwrap());
    }
    // The client may have given up already (timeout tests); that is fine.
    let _ = req.respond(resp);
}

/// Binds 127.0.0.1 on an ephemeral port.
pub fn bind() -> (Arc<Server>, String) {
    let server = Arc::new(Server::http("127.0.0.1:0").expect("bind 127.0.0.1:0"));
    let port = server.server_addr().to_ip().expect("an IP listener").port();
    (server, format!("http://127.0.0.1:{port}"))
}

impl Scripted {
    /// `script(i, &seen)` decides the reply to the i-th request (0-based).
    pub fn start(script: impl Fn(usize, &Seen) -> Reply + Send + 'static) -> Self {
        let (server, base_url) = bind();
        let srv = Arc::clone(&server);
        let thread = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut hanging = Vec::new();
            // recv() fails once `finish` unblocks it.
            while let Ok(mut req) = srv.recv() {
                let s = record(&mut req);
                match script(seen.len(), &s) {
                    Reply::Send(status, body, headers) => respond(req, status, body, headers),
                    Reply::Hang => hanging.push(req),
                }
                seen.push(s);
            }
            drop(hanging);
            seen
        });
        Self { server, base_url, thread: Some(thread) }
    }

    /// Stops the server and returns every request it saw, in order.
    pub fn finish(mut self) -> Vec<Seen> {
        self.server.unblock();
        self.thread.take().unwrap().join().expect("server thread panicked")
    }
}

/// A well-formed chat-completions reply.
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

pub fn ok(text: &str) -> Reply {
    Reply::Send(200, completion_json(text, "test-model", 10, 5), vec![])
}

//! A real HTTP server on 127.0.0.1 (ephemeral port, [`cudal1_llm::test_server`]) that answers
//! from a script and records what it saw.

use std::sync::{Arc, Mutex};

use cudal1_llm::test_server::{self, TestServer};

pub use cudal1_llm::test_server::completion_json;

/// What the server does with the i-th request.
pub enum Reply {
    /// Status, body and extra headers.
    Send(u16, String, Vec<(&'static str, String)>),
    /// Keep the request open and never answer (until the server finishes).
    Hang,
}

impl From<Reply> for test_server::Reply {
    fn from(r: Reply) -> Self {
        match r {
            Reply::Send(status, body, headers) => test_server::Reply::Send {
                status,
                body,
                headers: headers.into_iter().map(|(k, v)| (k.to_owned(), v)).collect(),
            },
            Reply::Hang => test_server::Reply::Hang,
        }
    }
}

/// One request as the server saw it.
pub type Seen = test_server::Request;

pub struct Scripted {
    server: TestServer,
    seen: Arc<Mutex<Vec<Seen>>>,
    pub base_url: String,
}

impl Scripted {
    /// `script(i, &seen)` decides the reply to the i-th request (0-based, in the order they
    /// arrived).
    pub fn start(script: impl Fn(usize, &Seen) -> Reply + Send + Sync + 'static) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        let server = TestServer::start(move |request| {
            let i = {
                let mut log = log.lock().unwrap();
                log.push(request.clone());
                log.len() - 1
            };
            script(i, &request).into()
        })
        .expect("a test server on 127.0.0.1");
        let base_url = server.url().to_owned();
        Self { server, seen, base_url }
    }

    /// Stops the server and returns every request it saw, in order.
    pub fn finish(self) -> Vec<Seen> {
        self.server.stop();
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

pub fn ok(text: &str) -> Reply {
    Reply::Send(200, completion_json(text, "test-model", 10, 5), vec![])
}

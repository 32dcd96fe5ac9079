//! Connections: a few idle clients kept for reuse, and every operation retried on a fresh
//! connection while the server is unreachable (restarting, failing over), up to a time budget.
//! Errors that are not about the connection (a constraint, a bad statement) are returned at once.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use cudal1_store::StoreError;
use postgres::{Client, Config, NoTls};

/// How many idle connections are kept.
const IDLE: usize = 8;

pub(crate) struct Pool {
    config: Config,
    /// The server as people should see it (no password).
    pub(crate) describe: String,
    idle: Mutex<Vec<Client>>,
    /// How long an operation keeps retrying while the server is unreachable.
    pub(crate) retry_for: Duration,
}

impl Pool {
    pub(crate) fn new(config: Config, describe: String, retry_for: Duration) -> Pool {
        Pool { config, describe, idle: Mutex::default(), retry_for }
    }

    pub(crate) fn connect(&self) -> Result<Client, postgres::Error> {
        self.config.connect(NoTls)
    }

    /// Runs `op` on a connection, retrying on a new one while the connection is what failed.
    pub(crate) fn run<T>(
        &self,
        operation: &'static str,
        mut op: impl FnMut(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, StoreError> {
        let deadline = Instant::now() + self.retry_for;
        let mut pause = Duration::from_millis(50);
        loop {
            // Here only when the connection failed; other outcomes returned.
            let e = match self.take() {
                Ok(mut client) => match op(&mut client) {
                    Ok(v) => {
                        self.put(client);
                        return Ok(v);
                    }
                    Err(e) if is_connection_error(&e) || client.is_closed() => e,
                    Err(e) => {
                        self.put(client);
                        return Err(StoreError::Backend {
                            store: self.describe.clone(),
                            operation,
                            source: Box::new(e),
                        });
                    }
                },
                Err(e) => e,
            };
            if Instant::now() + pause > deadline {
                return Err(StoreError::Connect {
                    store: self.describe.clone(),
                    source: Box::new(e),
                });
            }
            tracing::warn!(store = %self.describe, operation, error = %e, "the database is unreachable; retrying");
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    fn take(&self) -> Result<Client, postgres::Error> {
        let idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
        match idle {
            Some(c) if !c.is_closed() => Ok(c),
            _ => self.connect(),
        }
    }

    fn put(&self, client: Client) {
        let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
        if idle.len() < IDLE && !client.is_closed() {
            idle.push(client);
        }
    }
}

/// Whether the error means the connection (or the server) is gone, so that the same statement
/// may succeed on a new one: a closed socket, an I/O error, the server shutting down or not yet
/// accepting connections (SQLSTATE classes 08 and 57P).
pub(crate) fn is_connection_error(e: &postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => {
            let c = code.code();
            c.starts_with("08") || c.starts_with("57P")
        }
        // No SQLSTATE: an I/O error (a refused or broken connection) is one; a value that did
        // not convert is not.
        None => {
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                if s.is::<std::io::Error>() {
                    return true;
                }
                source = s.source();
            }
            false
        }
    }
}

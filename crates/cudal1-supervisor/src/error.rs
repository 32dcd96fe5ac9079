//! Errors of starting a worker and of talking to it.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::outcome::{LimitHit, Outcome};

/// A worker could not be started; nothing of it is left running.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("`{label}`: invalid worker spec: {detail}")]
    InvalidSpec { label: String, detail: String },
    #[error("`{label}`: cannot start `{program}`", program = program.display())]
    Spawn {
        label: String,
        program: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("`{label}`: cannot build the Landlock ruleset: {detail}")]
    Landlock {
        label: String,
        detail: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("`{label}`: cannot set up the cgroup `{path}`", path = path.display())]
    Cgroup {
        label: String,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("`{label}`: the fork server could not start it: {detail}")]
    Zygote { label: String, detail: String },
    #[error("`{label}`: cannot start a supervisor thread")]
    Thread {
        label: String,
        #[source]
        source: io::Error,
    },
}

/// A request did not produce a reply. Every variant except `BadRequest` and `Io` leaves
/// the worker dead (killed by us where it was not already).
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("`{label}`: no reply within {after:?}; the worker was killed")]
    Timeout { label: String, after: Duration, stderr_tail: String },
    #[error("`{label}`: the worker {outcome}{}", limit.map(|l| format!(" ({l})")).unwrap_or_default())]
    Exited { label: String, outcome: Outcome, limit: Option<LimitHit>, stderr_tail: String },
    #[error("`{label}`: protocol error: {detail}; the worker was killed")]
    Protocol { label: String, detail: String, stderr_tail: String },
    #[error("`{label}`: I/O error talking to the worker")]
    Io {
        label: String,
        #[source]
        source: io::Error,
    },
    #[error("`{label}`: a stdout line exceeded {limit} bytes; the worker was killed")]
    LineTooLong { label: String, limit: usize },
    #[error("`{label}`: bad request: {detail}")]
    BadRequest { label: String, detail: String },
}

impl WorkerError {
    /// The end of the worker's stderr, where the variant carries it.
    #[must_use]
    pub fn stderr_tail(&self) -> Option<&str> {
        match self {
            WorkerError::Timeout { stderr_tail, .. }
            | WorkerError::Exited { stderr_tail, .. }
            | WorkerError::Protocol { stderr_tail, .. } => Some(stderr_tail),
            _ => None,
        }
    }

    #[must_use]
    pub fn label(&self) -> &str {
        match self {
            WorkerError::Timeout { label, .. }
            | WorkerError::Exited { label, .. }
            | WorkerError::Protocol { label, .. }
            | WorkerError::Io { label, .. }
            | WorkerError::LineTooLong { label, .. }
            | WorkerError::BadRequest { label, .. } => label,
        }
    }
}

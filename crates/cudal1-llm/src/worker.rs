//! One `python -m cudal1_llm_worker` process: spawn, one JSON line out, one
//! JSON line back (with a time limit), stderr kept for error messages, and a
//! graceful-then-forced stop.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::LlmError;

/// How much of the worker's stderr to keep for error messages.
const STDERR_TAIL_BYTES: usize = 8 * 1024;

/// What starts a worker.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    pub python: PathBuf,
    pub pythonpath: PathBuf,
    pub args: Vec<String>,
}

#[derive(Debug)]
pub(crate) struct WorkerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Lines from the worker's stdout, read by a thread so reads can time out.
    lines: Receiver<std::io::Result<String>>,
    stderr: Arc<Mutex<VecDeque<u8>>>,
    program: String,
    /// Set when a call failed: the process is hung or out of step, so it is
    /// killed at once instead of being asked to stop.
    broken: bool,
}

impl WorkerProcess {
    pub(crate) fn spawn(launch: &Launch) -> Result<Self, LlmError> {
        let program = format!("{} -m cudal1_llm_worker {}", launch.python.display(), launch.args.join(" "));
        // Our package first, then whatever the user had.
        let mut paths = vec![launch.pythonpath.clone()];
        if let Some(existing) = std::env::var_os("PYTHONPATH") {
            paths.extend(std::env::split_paths(&existing));
        }
        let pythonpath = std::env::join_paths(paths).map_err(|e| LlmError::Worker {
            program: program.clone(),
            reason: format!("cannot build PYTHONPATH: {e}"),
            source: None,
        })?;
        let mut child = Command::new(&launch.python)
            .arg("-m")
            .arg("cudal1_llm_worker")
            .args(&launch.args)
            .env("PYTHONPATH", pythonpath)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| LlmError::Worker { program: program.clone(), reason: "cannot start".to_owned(), source: Some(e) })?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr_pipe = child.stderr.take().expect("stderr is piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        let tail = Arc::clone(&stderr);
        // Drained continuously: a full stderr pipe would block the worker.
        std::thread::spawn(move || drain_into_tail(stderr_pipe, &tail));
        tracing::debug!(%program, pid = child.id(), "started LLM worker");
        Ok(Self { child, stdin, lines, stderr, program, broken: false })
    }

    pub(crate) fn program(&self) -> &str {
        &self.program
    }

    /// The last few KiB the worker wrote to stderr.
    pub(crate) fn stderr_tail(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (a, b) = tail.as_slices();
        let mut bytes = a.to_vec();
        bytes.extend_from_slice(b);
        String::from_utf8_lossy(&bytes).trim().to_owned()
    }

    fn fail(&mut self, reason: impl Into<String>, source: Option<std::io::Error>) -> LlmError {
        self.broken = true;
        let tail = self.stderr_tail();
        let reason = if tail.is_empty() { reason.into() } else { format!("{}; its stderr ends with:\n{tail}", reason.into()) };
        LlmError::Worker { program: self.program.clone(), reason, source }
    }

    /// Sends `request` (which carries `id`) and waits up to `timeout` for the
    /// reply with that id. Any failure leaves the process unusable; the caller
    /// drops it.
    pub(crate) fn call(&mut self, request: &Value, timeout: Duration) -> Result<Value, LlmError> {
        let id = request.get("id").cloned().unwrap_or(Value::Null);
        let mut line = serde_json::to_string(request).expect("a JSON value always serialises");
        line.push('\n');
        let write = match self.stdin.as_mut() {
            Some(stdin) => stdin.write_all(line.as_bytes()).and_then(|()| stdin.flush()),
            None => Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "stdin already closed")),
        };
        if let Err(e) = write {
            let status = self.exit_status_after_eof();
            return Err(self.fail(format!("cannot send a request ({status})"), Some(e)));
        }
        match self.lines.recv_timeout(timeout) {
            Ok(Ok(text)) => {
                let reply: Value = serde_json::from_str(&text).map_err(|e| {
                    self.fail(format!("sent a line that is not JSON ({e}): {}", crate::wire::shorten(&text, 300)), None)
                })?;
                if reply.get("id") == Some(&id) {
                    Ok(reply)
                } else {
                    // Requests are strictly one at a time, so this is a worker bug.
                    let got = reply.get("id").cloned().unwrap_or(Value::Null);
                    Err(self.fail(format!("answered id {got} to request id {id}"), None))
                }
            }
            Ok(Err(e)) => Err(self.fail("stdout could not be read", Some(e))),
            Err(RecvTimeoutError::Timeout) => Err(self.fail(format!("no answer within {timeout:?}"), None)),
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.exit_status_after_eof();
                Err(self.fail(format!("exited before answering ({status})"), None))
            }
        }
    }

    /// The exit status once stdout has closed; the process is gone or going.
    fn exit_status_after_eof(&mut self) -> String {
        // stdout closed means the process is exiting; waiting is bounded by the kill below.
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(status)) => return describe_status(status),
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => return format!("status unknown: {e}"),
            }
        }
        "still running after closing stdout".to_owned()
    }
}

fn describe_status(status: ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exit code {code}"),
        None => {
            #[cfg(unix)]
            {
                use std::os::unix::process::ExitStatusExt;
                if let Some(signal) = status.signal() {
                    return format!("killed by signal {signal}");
                }
            }
            "no exit code".to_owned()
        }
    }
}

fn drain_into_tail(mut pipe: impl Read, tail: &Mutex<VecDeque<u8>>) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = pipe.read(&mut buf) {
        if n == 0 {
            break;
        }
        let mut t = tail.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        t.extend(&buf[..n]);
        let excess = t.len().saturating_sub(STDERR_TAIL_BYTES);
        t.drain(..excess);
    }
}

impl Drop for WorkerProcess {
    /// Asks politely (`shutdown`, then end of input), waits a moment, then
    /// kills; a broken worker is killed at once.
    fn drop(&mut self) {
        if self.broken {
            let _ = self.child.kill();
            let _ = self.child.wait();
            return;
        }
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"{\"id\":null,\"op\":\"shutdown\"}\n");
        }
        let deadline = Instant::now() + Duration::from_secs(3);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        tracing::warn!(program = %self.program, "LLM worker did not stop; killing it");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

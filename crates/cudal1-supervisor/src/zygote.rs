//! A fork server: a trusted process that has imported what every worker imports (an interpreter
//! with PyTorch: seconds of CPU) and forks one worker per request, in milliseconds.
//!
//! The zygote never runs a worker's code; it only forks. Each child takes the pipes sent with its
//! request (`SCM_RIGHTS`) as its stdin, stdout and stderr, starts its own session, dies with the
//! zygote (which dies with the supervisor), and applies the supervisor's confinement steps to
//! itself (cgroup, rlimits, network and PID namespaces, capabilities, a Landlock ruleset built here
//! and sent as a descriptor, a seccomp program built here) before it loads anything; the zygote
//! answers `spawned` only once the child has said that all of them took, and the supervisor then
//! checks in `/proc` what it can see of them (with a PID namespace, in the namespace's init and
//! runner under the child, which stays outside as their keeper). The zygote reaps its children
//! and reports each exit status and peak memory, which the [`crate::Worker`] reads as it would
//! its own child's. The zygote is not dumpable; its children are again. Everything else about a forked worker (signals to its group, the network
//! namespace that tags its processes, its cgroup, leak checks) is the same as for an exec'd one.
//!
//! The wire: a `SOCK_SEQPACKET` socket (the zygote's stdin), one JSON object per packet. The
//! Python side is `cudal1_runner.zygote`.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{bounded, Receiver, Sender};
use nix::sys::socket::{self, ControlMessage, MsgFlags};
use serde_json::{json, Value};

use crate::child_setup::SandboxSteps;
use crate::pipes::{self, StderrTail};
use crate::{launch, spawner};

/// How long a fork may wait for its reply: the zygote answers its first requests only once its
/// imports are done (seconds on a busy machine).
const FORK_TIMEOUT: Duration = Duration::from_secs(120);
const MAX_PACKET: usize = 1 << 20;

/// A running fork server. Cloning shares it.
#[derive(Clone)]
pub struct Zygote {
    inner: Arc<Inner>,
}

struct Inner {
    program: PathBuf,
    pid: u32,
    /// Set once the zygote process has been waited for: its pid is no longer ours.
    reaped: std::sync::atomic::AtomicBool,
    socket: OwnedFd,
    state: Mutex<State>,
    stderr: Arc<StderrTail>,
}

#[derive(Default)]
struct State {
    /// Why the zygote can no longer fork, once it cannot.
    dead: Option<String>,
    /// It found threads after its imports and will not fork (it ends).
    unfit: bool,
    /// It said it is ready (its imports are done): it reads its input from then on.
    ready: bool,
    next_id: u64,
    /// Requests waiting for their reply, by id.
    waiting: HashMap<u64, Sender<Result<Forked, String>>>,
    /// Forked children not yet reaped, by pid: where their exit goes.
    children: HashMap<u32, (Sender<io::Result<ExitStatus>>, Arc<AtomicU64>)>,
}

/// A child the zygote forked and that has confined itself.
pub(crate) struct Forked {
    pub pid: u32,
    /// Its exit status once the zygote has reaped it; an error if the zygote ended first (the
    /// child then died with it).
    pub exits: Receiver<io::Result<ExitStatus>>,
    /// Its `ru_maxrss` in bytes, set when it is reaped.
    pub leader_peak: Arc<AtomicU64>,
}

impl Zygote {
    /// Starts `program args` as a trusted fork server in `cwd` with exactly `env`, in a session of
    /// its own, dying with this process. Returns at once: the zygote answers requests once it is
    /// ready, and a zygote that cannot fork (it ended, or found itself unfit) fails them.
    ///
    /// # Errors
    /// When the socket or the process cannot be made.
    pub fn start(
        program: &Path,
        args: &[OsString],
        cwd: &Path,
        env: &[(OsString, OsString)],
    ) -> io::Result<Zygote> {
        let (ours, theirs) = socket::socketpair(
            socket::AddressFamily::Unix,
            socket::SockType::SeqPacket,
            None,
            socket::SockFlag::SOCK_CLOEXEC,
        )?;
        let mut command = launch::command(program, args, cwd, env, None);
        command.stdin(Stdio::from(theirs)).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = spawner::spawn(command)?;
        let pid = child.id();
        let stderr = StderrTail::new(crate::spec::DEFAULT_STDERR_TAIL);
        if let Some(err) = child.stderr.take() {
            pipes::spawn_stderr_reader(format!("cudal1-zygote-stderr-{pid}"), err, stderr.clone())?;
        }
        let reading = ours.try_clone()?;
        let inner = Arc::new(Inner {
            program: program.to_owned(),
            pid,
            reaped: std::sync::atomic::AtomicBool::new(false),
            socket: ours,
            state: Mutex::new(State::default()),
            stderr,
        });
        let reader = Arc::clone(&inner);
        std::thread::Builder::new().name(format!("cudal1-zygote-{pid}")).spawn(move || {
            reader.read_replies(&reading);
            // The zygote closed its end: it ended, or is about to. Reap it.
            let status = child.wait();
            reader.reaped.store(true, Ordering::SeqCst);
            reader.died(match status {
                Ok(s) => format!("the fork server {s}"),
                Err(e) => format!("the fork server could not be waited for: {e}"),
            });
        })?;
        tracing::debug!(pid, program = %program.display(), "fork server started");
        Ok(Zygote { inner })
    }

    /// The fork server's pid.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.inner.pid
    }

    /// The interpreter the zygote runs: a worker of another program cannot be forked from it.
    #[must_use]
    pub fn program(&self) -> &Path {
        &self.inner.program
    }

    /// Ends the zygote (it reads the end of its input); its children die with it.
    pub fn shutdown(&self) {
        // SAFETY: shutdown on a socket we own; the reader then sees the zygote close its end.
        unsafe { libc::shutdown(self.inner.socket.as_raw_fd(), libc::SHUT_WR) };
    }

    /// Ends the zygote and waits until it has been reaped, so that nothing of it is left for init
    /// to adopt (its children die with it, and it reaps them as they do); one that has not ended
    /// within `grace` is killed, as is at once one still importing (it reads its input only once
    /// ready, and has no children yet). Whether it was reaped.
    pub fn end(&self, grace: Duration) -> bool {
        self.shutdown();
        let grace = if self.inner.lock().ready { grace } else { Duration::ZERO };
        if self.wait_reaped(grace) {
            return true;
        }
        if !self.inner.reaped.load(Ordering::SeqCst) {
            tracing::debug!(
                pid = self.inner.pid,
                "the fork server did not end at the end of its input; killing it"
            );
            // A child not yet waited for: its pid is still ours.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(self.inner.pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        self.wait_reaped(Duration::from_secs(2))
    }

    fn wait_reaped(&self, within: Duration) -> bool {
        let deadline = std::time::Instant::now() + within;
        while !self.inner.reaped.load(Ordering::SeqCst) {
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }

    /// Why the zygote can no longer fork, once it cannot.
    #[must_use]
    pub fn dead(&self) -> Option<String> {
        self.inner.lock().dead.clone()
    }

    /// Whether the zygote found threads in itself after its imports, so that it cannot fork
    /// safely (one started with the same imports would find them too).
    #[must_use]
    pub fn unfit(&self) -> bool {
        self.inner.lock().unfit
    }

    /// Forks a child that becomes `argv` with `env` in `cwd`, confined by `steps` (the Landlock
    /// ruleset among them is sent as a descriptor), with `stdio` as its stdin, stdout and stderr.
    pub(crate) fn fork(
        &self,
        argv: &[OsString],
        env: &[(OsString, OsString)],
        cwd: &Path,
        steps: Option<&SandboxSteps>,
        stdio: [&OwnedFd; 3],
    ) -> Result<Forked, String> {
        let text = |s: &OsStr, what: &str| {
            s.to_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{what} `{}` is not UTF-8", s.to_string_lossy()))
        };
        let argv = argv.iter().map(|a| text(a, "an argument")).collect::<Result<Vec<_>, _>>()?;
        let env = env
            .iter()
            .map(|(k, v)| Ok((text(k, "a variable")?, text(v, "a value")?)))
            .collect::<Result<Vec<_>, String>>()?;
        let cwd = text(cwd.as_os_str(), "the directory")?;
        let wire = match steps {
            Some(s) => Some(s.to_wire()?),
            None => None,
        };
        let mut fds: Vec<RawFd> = stdio.iter().map(|f| f.as_raw_fd()).collect();
        if let Some(ruleset) = steps.and_then(|s| s.landlock.as_ref()) {
            fds.push(ruleset.as_raw_fd());
        }
        let (tx, rx) = bounded(1);
        let id = {
            let mut state = self.inner.lock();
            if let Some(why) = &state.dead {
                return Err(why.clone());
            }
            state.next_id += 1;
            let id = state.next_id;
            state.waiting.insert(id, tx);
            id
        };
        let request =
            json!({"op": "spawn", "id": id, "argv": argv, "env": env, "cwd": cwd, "steps": wire})
                .to_string();
        let sent = socket::sendmsg::<()>(
            self.inner.socket.as_raw_fd(),
            &[IoSlice::new(request.as_bytes())],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_NOSIGNAL,
            None,
        );
        if let Err(e) = sent {
            self.inner.lock().waiting.remove(&id);
            return Err(format!("cannot reach the fork server: {e}"));
        }
        match rx.recv_timeout(FORK_TIMEOUT) {
            Ok(result) => result,
            Err(_) => {
                self.inner.lock().waiting.remove(&id);
                Err(format!("the fork server did not answer within {FORK_TIMEOUT:?}"))
            }
        }
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn read_replies(&self, socket: &OwnedFd) {
        let mut buf = vec![0u8; MAX_PACKET];
        loop {
            let n = match socket::recv(socket.as_raw_fd(), &mut buf, MsgFlags::empty()) {
                Ok(0) => return,
                Ok(n) => n,
                // ECONNRESET: the zygote ended with a request of ours unread; what it sent before
                // is still queued, and is read next.
                Err(nix::errno::Errno::EINTR | nix::errno::Errno::ECONNRESET) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the fork server failed");
                    return;
                }
            };
            match serde_json::from_slice::<Value>(&buf[..n]) {
                Ok(reply) => self.dispatch(&reply),
                Err(e) => {
                    tracing::warn!(error = %e, "the fork server sent a packet that is not JSON");
                    return;
                }
            }
        }
    }

    fn dispatch(&self, reply: &Value) {
        let id = reply["id"].as_u64().unwrap_or(0);
        let pid = reply["pid"].as_u64().and_then(|p| u32::try_from(p).ok());
        let mut state = self.lock();
        match (reply["op"].as_str(), pid) {
            (Some("ready"), _) => {
                state.unfit = reply["threads"].as_u64() != Some(1);
                state.ready = true;
                tracing::debug!(pid = self.pid, threads = %reply["threads"], "fork server ready");
            }
            (Some("spawned"), Some(pid)) => {
                let (exit_tx, exits) = bounded(1);
                let leader_peak = Arc::new(AtomicU64::new(0));
                state.children.insert(pid, (exit_tx, Arc::clone(&leader_peak)));
                let delivered = state
                    .waiting
                    .remove(&id)
                    .is_some_and(|w| w.send(Ok(Forked { pid, exits, leader_peak })).is_ok());
                if !delivered {
                    // Nobody waits for it any more (the request timed out): it must not run.
                    // SAFETY: kill has no memory-safety preconditions; the zygote has not reaped
                    // this pid yet (its exit is reported after this reply), so it is the child.
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                }
            }
            (Some("failed"), _) => {
                let error = reply["error"].as_str().unwrap_or("no reason given").to_owned();
                if let Some(w) = state.waiting.remove(&id) {
                    let _ = w.send(Err(error));
                }
            }
            (Some("exited"), Some(pid)) => {
                if let Some((exit_tx, peak)) = state.children.remove(&pid) {
                    peak.store(
                        reply["maxrss_kb"].as_u64().unwrap_or(0).saturating_mul(1024),
                        Ordering::SeqCst,
                    );
                    let status =
                        reply["status"].as_i64().and_then(|s| i32::try_from(s).ok()).unwrap_or(-1);
                    let _ = exit_tx.send(Ok(ExitStatus::from_raw(status)));
                }
            }
            _ => tracing::warn!(%reply, "the fork server sent an unknown reply"),
        }
    }

    /// The zygote is gone: nothing waits for it any more, and its children died with it.
    fn died(&self, why: String) {
        // Its last words, once its stderr has been read to the end.
        self.stderr.wait_closed(std::time::Instant::now() + Duration::from_secs(1));
        let tail = self.stderr.text();
        let why = if tail.trim().is_empty() { why } else { format!("{why}: {}", tail.trim()) };
        tracing::debug!(pid = self.pid, reason = %why, "fork server ended");
        let mut state = self.lock();
        for (_, w) in state.waiting.drain() {
            let _ = w.send(Err(why.clone()));
        }
        for (_, (exit_tx, _)) in state.children.drain() {
            let _ = exit_tx.send(Err(io::Error::other(format!("its fork server ended ({why})"))));
        }
        state.dead = Some(why);
    }
}

//! `Worker`: one supervised process group and the request/reply conversation with it.
//!
//! Each worker is a small state machine: running → leader exited (seen by the waiter
//! thread) → finished (group checked for leaks, killed, cgroup removed). Every path that
//! gives up on a worker ends in `finish`, so the final `Outcome` is computed in one place.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{never, select, Receiver, RecvTimeoutError, TryRecvError};
use serde_json::Value;

use crate::cgroup::WorkerCgroup;
use crate::error::{SpawnError, WorkerError};
use crate::launch::{launch, Launched};
use crate::live;
use crate::outcome::{LimitHit, Outcome};
use crate::pipes::{StderrTail, StdoutEvent};
use crate::procfs;
use crate::spec::{Sandbox, SpawnOptions, WorkerSpec};
use crate::watchdog::RssWatchdog;
use crate::zygote::Zygote;

/// How long to wait for the leader to be reaped after SIGKILL before giving up on it
/// (a process in uninterruptible sleep, e.g. inside a GPU driver call).
const KILL_WAIT: Duration = Duration::from_secs(10);
/// How long a keeper has, once its namespace is killed, to reap it and end by itself before it is
/// killed too (a runner's end may take seconds in a GPU driver).
const KEEPER_WAIT: Duration = Duration::from_secs(5);
/// How long `Drop` waits for the leader after SIGKILL.
const DROP_WAIT: Duration = Duration::from_secs(2);

/// A supervised worker process (the leader of its own session and process group) that
/// answers line-delimited JSON requests. Dropping it kills the whole group.
pub struct Worker {
    label: String,
    pid: u32,
    options: SpawnOptions,
    sandbox: Sandbox,
    stdin: Option<File>,
    lines: Receiver<StdoutEvent>,
    stdout_open: bool,
    exits: Receiver<io::Result<ExitStatus>>,
    /// The leader's `ru_maxrss`, once it is reaped. A keeper's is the larger of the runner's
    /// (its waited-for child's) and its own, which counts the pages of the process it was forked
    /// from: the supervisor's where it was forked by this process, a runner's own start where it
    /// was forked by a fork server.
    leader_peak: Arc<AtomicU64>,
    /// The kernel's OOM kills since boot when the worker started (see [`LimitHit::HostMemory`]).
    oom_kills_at_start: Option<u64>,
    kernel_log: Option<procfs::KernelLog>,
    /// The most memory the worker was seen to hold, recorded when it finished.
    peak_bytes: Option<u64>,
    /// How the leader ended, once the waiter thread has told us.
    leader: Option<Outcome>,
    /// The final outcome, once the group is gone and cleaned up.
    finished: Option<Outcome>,
    stderr: Arc<StderrTail>,
    pipe_inodes: Vec<u64>,
    cgroup: Option<WorkerCgroup>,
    watchdog: Option<RssWatchdog>,
    limit_hit: Option<LimitHit>,
    next_id: u64,
    /// A sandboxed worker's own network namespace (see [`Worker::escaped`]), held open.
    tag: Option<procfs::NetTag>,
    /// A sandboxed worker's own PID namespace, held open, with its init and its runner: the
    /// leader (`pid`) is then the keeper outside it (`pid_namespace.rs`).
    pid_ns: Option<(procfs::NsTag, procfs::PidNamespace)>,
    /// When the leader started ([`procfs::group_is_ours`]): once it is reaped, its pid, and so
    /// its group's id, may name another process's group.
    start_time: Option<u64>,
    /// Its entry in the live-child registry ([`Worker::enlist`]), dropped once its group is gone.
    enlisted: Option<live::Enlisted>,
}

enum WriteFail {
    TimedOut,
    Closed,
    Io(io::Error),
}

impl Worker {
    /// Starts a worker with the default `SpawnOptions`.
    ///
    /// # Errors
    /// `SpawnError` when the spec is invalid, the sandbox cannot be built (a missing write
    /// path, a cgroup that cannot be made) or the process cannot be started; nothing of the
    /// worker is left running then.
    pub fn spawn(spec: WorkerSpec) -> Result<Worker, SpawnError> {
        Self::spawn_with_options(spec, SpawnOptions::default())
    }

    /// Starts a worker with explicit supervision options.
    ///
    /// # Errors
    /// As [`Worker::spawn`].
    pub fn spawn_with_options(
        spec: WorkerSpec,
        options: SpawnOptions,
    ) -> Result<Worker, SpawnError> {
        Self::start(spec, options, None)
    }

    /// Starts a worker as a child of `zygote` (a fork server running `spec.program`), which
    /// confines it exactly as [`Worker::spawn`] would before it runs anything of its own.
    ///
    /// # Errors
    /// As [`Worker::spawn`], and [`SpawnError::Zygote`] when the zygote cannot fork it (it
    /// ended, runs another program, or the child could not confine itself).
    pub fn spawn_forked(
        spec: WorkerSpec,
        options: SpawnOptions,
        zygote: &Zygote,
    ) -> Result<Worker, SpawnError> {
        Self::start(spec, options, Some(zygote))
    }

    fn start(
        spec: WorkerSpec,
        options: SpawnOptions,
        zygote: Option<&Zygote>,
    ) -> Result<Worker, SpawnError> {
        let Launched {
            pid,
            stdin,
            lines,
            exits,
            leader_peak,
            oom_kills_at_start,
            kernel_log,
            stderr,
            pipe_inodes,
            cgroup,
            watchdog,
            tag,
            pid_ns,
            start_time,
        } = launch(&spec, &options, zygote)?;
        Ok(Worker {
            label: spec.label,
            pid,
            options,
            sandbox: spec.sandbox,
            stdin: Some(stdin),
            lines,
            stdout_open: true,
            exits,
            leader_peak,
            oom_kills_at_start,
            kernel_log,
            peak_bytes: None,
            leader: None,
            finished: None,
            stderr,
            pipe_inodes,
            cgroup,
            watchdog,
            limit_hit: None,
            next_id: 1,
            tag,
            pid_ns,
            start_time,
            enlisted: None,
        })
    }

    /// Enters the worker in the live-child registry under `scope` (the directory it works in)
    /// and `class`, until its group is gone: [`crate::kill_under`] a directory above `scope`
    /// kills it at once, and so does enlisting under a directory already killed.
    pub fn enlist(&mut self, scope: &std::path::Path, class: &'static str) {
        if self.finished.is_none() {
            self.enlisted = Some(live::enlist(self.pid, self.start_time, scope, class));
        }
    }

    /// Stops every process of the worker's group (SIGSTOP), between requests; [`Worker::resume`]
    /// lets them go on.
    pub fn pause(&self) {
        self.signal_group(libc::SIGSTOP);
    }

    /// Lets a [`Worker::pause`]d group go on (SIGCONT).
    pub fn resume(&self) {
        self.signal_group(libc::SIGCONT);
    }

    fn signal_group(&self, signal: i32) {
        if self.finished.is_none() && procfs::group_is_ours(self.pid as i32, self.start_time) {
            // SAFETY: kill has no memory-safety preconditions; the group is still the worker's.
            unsafe { libc::kill(-(self.pid as libc::pid_t), signal) };
        }
    }

    /// The inode of the PID namespace the worker runs in, when it got one of its own: nothing it
    /// runs can name a process outside it, and what it leaves there is killed with it.
    #[must_use]
    pub fn pid_namespace(&self) -> Option<u64> {
        self.pid_ns.as_ref().map(|(tag, _)| tag.inode())
    }

    /// The pid of the process that runs the worker's program: [`Worker::pid`], or in a PID
    /// namespace of its own, the keeper's child there.
    #[must_use]
    pub fn runner_pid(&self) -> u32 {
        self.pid_ns.as_ref().map_or(self.pid, |(_, ns)| ns.runner)
    }

    /// The live processes in the worker's own network namespace (none without one).
    fn tagged(&self) -> Vec<u32> {
        self.tag.as_ref().map(|t| procfs::in_net_namespace(t.inode())).unwrap_or_default()
    }

    /// The inode of the network namespace the worker was started in, when it got one of its
    /// own: every process it starts is in it, and no other worker's is while this handle lives.
    pub fn net_namespace(&self) -> Option<u64> {
        self.tag.as_ref().map(procfs::NetTag::inode)
    }

    /// Live members of the worker's process group, while its id is still the worker's.
    fn group(&self) -> Vec<u32> {
        procfs::own_group(self.pid as i32, self.start_time)
    }

    /// Processes of this worker that left its process group: members of its cgroup, or of the
    /// network namespace a sandboxed worker was started in (which its seccomp filter keeps them
    /// from leaving), that are not in the group: a double-forked daemon in a session of its own,
    /// say. They are killed; their pids are returned (empty for a worker without either tag).
    pub fn escaped(&mut self) -> Vec<u32> {
        let group = self.group();
        let mut found: Vec<u32> = self.tagged();
        if let Some(cgroup) = &self.cgroup {
            found.extend(cgroup.members());
        }
        found.retain(|p| *p != self.pid && !group.contains(p));
        found.sort_unstable();
        found.dedup();
        for &pid in &found {
            // SAFETY: kill has no memory-safety preconditions; the pid is one of this worker's.
            unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
        }
        found
    }

    /// CPU time (user and system, all threads) used so far by the worker, by its descendants,
    /// and by the children they have waited for.
    #[must_use]
    pub fn cpu_time(&self) -> Duration {
        if self.finished.is_some() {
            return Duration::ZERO;
        }
        procfs::cpu_time(&procfs::tree(self.pid))
    }

    /// The leader's pid, which is also its process group and session id. In a PID namespace of
    /// its own the leader is the keeper that waits for the runner ([`Worker::runner_pid`]) and
    /// ends as it ended.
    #[must_use]
    pub fn pid(&self) -> u32 {
        self.pid
    }

    #[must_use]
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Names the worker anew in its errors and logs (a worker given other work).
    pub fn relabel(&mut self, label: impl Into<String>) {
        self.label = label.into();
    }

    /// The last ~64 KiB (`SpawnOptions::stderr_tail_bytes`) of stderr, lossily decoded.
    #[must_use]
    pub fn stderr_tail(&self) -> String {
        self.stderr.text()
    }

    /// The sandbox limit the worker ran into, known once it has ended.
    #[must_use]
    pub fn limit_hit(&self) -> Option<LimitHit> {
        self.limit_hit
    }

    /// The most resident memory the worker has held so far, in bytes: the largest of the
    /// leader's own high-water mark, the RSS watchdog's largest sum over its group and its
    /// cgroup's peak, where each is known.
    #[must_use]
    pub fn peak_memory(&self) -> Option<u64> {
        if self.finished.is_some() {
            return self.peak_bytes;
        }
        self.measured_peak()
    }

    fn measured_peak(&self) -> Option<u64> {
        let leader = match self.leader_peak.load(Ordering::SeqCst) {
            // The keeper's own high-water mark is its parent's memory: the runner's is the worker's.
            0 => procfs::peak_rss_bytes(self.runner_pid()),
            reaped => Some(reaped),
        };
        let watchdog = self.watchdog.as_ref().map(RssWatchdog::peak_bytes).filter(|b| *b > 0);
        let cgroup = self.cgroup.as_ref().and_then(WorkerCgroup::peak_bytes);
        [leader, watchdog, cgroup].into_iter().flatten().max()
    }

    /// Whether the leader is still running.
    pub fn is_alive(&mut self) -> bool {
        if self.finished.is_some() || self.leader.is_some() {
            return false;
        }
        match self.exits.try_recv() {
            Ok(status) => {
                self.leader = Some(outcome_of(status));
                false
            }
            Err(TryRecvError::Empty) => true,
            Err(TryRecvError::Disconnected) => {
                self.leader = Some(Outcome::Exited(-1));
                false
            }
        }
    }

    /// Adds a fresh `"id"` to the request object, writes it as one line and waits up to
    /// `timeout` for the reply line with that id. Any other line is a protocol error. On
    /// timeout, protocol error or an overlong line the whole group is terminated.
    ///
    /// # Errors
    /// `Timeout`, `Exited` (with how it died and the stderr tail), `Protocol`,
    /// `LineTooLong`: the worker is dead afterwards. `BadRequest` (not an object) and `Io`
    /// (writing to its stdin failed oddly) leave it as it was.
    pub fn request(&mut self, request: Value, timeout: Duration) -> Result<Value, WorkerError> {
        if let Some(outcome) = self.finished.clone() {
            return Err(self.exited_error(outcome));
        }
        let Value::Object(mut map) = request else {
            return Err(WorkerError::BadRequest {
                label: self.label.clone(),
                detail: "a request must be a JSON object".into(),
            });
        };
        let id = self.next_id;
        self.next_id += 1;
        map.insert("id".into(), Value::from(id));
        let mut line = serde_json::to_vec(&Value::Object(map)).map_err(|e| {
            WorkerError::BadRequest { label: self.label.clone(), detail: e.to_string() }
        })?;
        line.push(b'\n');

        let deadline = Instant::now() + timeout;
        match self.write_line(&line, deadline) {
            // A closed stdin means the worker is exiting; the waiter says how.
            Ok(()) | Err(WriteFail::Closed) => {}
            Err(WriteFail::TimedOut) => return Err(self.time_out(timeout)),
            Err(WriteFail::Io(source)) => {
                return Err(WorkerError::Io { label: self.label.clone(), source })
            }
        }
        self.await_reply(id, deadline, timeout)
    }

    fn await_reply(
        &mut self,
        id: u64,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Value, WorkerError> {
        loop {
            if self.leader.is_some() {
                return self.exited_during(id);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(self.time_out(timeout));
            }
            let lines = if self.stdout_open { self.lines.clone() } else { never() };
            select! {
                recv(lines) -> event => match event {
                    Ok(StdoutEvent::Line(bytes)) => {
                        return match match_reply(&bytes, id) {
                            Ok(reply) => Ok(reply),
                            Err(detail) => Err(self.protocol_error(detail)),
                        };
                    }
                    Ok(StdoutEvent::TooLong) => return Err(self.line_too_long()),
                    Ok(StdoutEvent::Failed(e)) => {
                        tracing::warn!(label = %self.label, error = %e, "reading the worker's stdout failed");
                        self.stdout_open = false;
                    }
                    Ok(StdoutEvent::Eof) | Err(_) => self.stdout_open = false,
                },
                recv(self.exits) -> status => {
                    self.leader = Some(status.map_or(Outcome::Exited(-1), outcome_of));
                }
                default(deadline - now) => return Err(self.time_out(timeout)),
            }
        }
    }

    /// The leader died during a request; its reply may still be in the pipe.
    fn exited_during(&mut self, id: u64) -> Result<Value, WorkerError> {
        let until = Instant::now() + self.options.leak_grace;
        let mut reply = None;
        while self.stdout_open {
            match self.lines.recv_deadline(until) {
                Ok(StdoutEvent::Line(bytes)) => {
                    if reply.is_none() {
                        reply = match_reply(&bytes, id).ok();
                    }
                }
                Ok(StdoutEvent::TooLong) => {}
                Ok(StdoutEvent::Eof | StdoutEvent::Failed(_))
                | Err(RecvTimeoutError::Disconnected) => {
                    self.stdout_open = false;
                }
                Err(RecvTimeoutError::Timeout) => break,
            }
        }
        let outcome = self.finish(self.options.leak_grace);
        match reply {
            Some(reply) => Ok(reply),
            None => Err(self.exited_error(outcome)),
        }
    }

    /// Waits up to `timeout` for the leader to exit on its own (after a `shutdown`
    /// request, say); then checks for leaks. `None` if it is still running.
    pub fn wait(&mut self, timeout: Duration) -> Option<Outcome> {
        if let Some(outcome) = &self.finished {
            return Some(outcome.clone());
        }
        if self.leader.is_none() {
            match self.exits.recv_timeout(timeout) {
                Ok(status) => self.leader = Some(outcome_of(status)),
                Err(RecvTimeoutError::Timeout) => return None,
                Err(RecvTimeoutError::Disconnected) => self.leader = Some(Outcome::Exited(-1)),
            }
        }
        Some(self.finish(self.options.leak_grace))
    }

    /// Signals the group (SIGTERM), waits up to `grace`, SIGKILLs what is left, reaps the
    /// leader and reports how it ended, including leaks.
    pub fn terminate(mut self, grace: Duration) -> Outcome {
        self.shut_down(grace)
    }

    fn shut_down(&mut self, grace: Duration) -> Outcome {
        if let Some(outcome) = &self.finished {
            return outcome.clone();
        }
        // Records an exit that already happened: then there is nothing to signal.
        let _ = self.is_alive();
        if self.leader.is_some() {
            return self.finish(self.options.leak_grace);
        }
        let start = Instant::now();
        self.signal_all(libc::SIGTERM);
        match self.exits.recv_timeout(grace) {
            Ok(status) => {
                self.leader = Some(outcome_of(status));
                // The rest of the group got SIGTERM too: it has the rest of the grace.
                let window = grace.saturating_sub(start.elapsed()).max(self.options.leak_grace);
                self.finish(window)
            }
            Err(RecvTimeoutError::Disconnected) => {
                self.leader = Some(Outcome::Exited(-1));
                self.finish(self.options.leak_grace)
            }
            Err(RecvTimeoutError::Timeout) => {
                self.signal_all(libc::SIGKILL);
                let mut ended = self.exits.recv_timeout(KEEPER_WAIT);
                if matches!(ended, Err(RecvTimeoutError::Timeout)) {
                    self.kill_keeper();
                    ended = self.exits.recv_timeout(KILL_WAIT);
                }
                match ended {
                    Ok(status) => {
                        self.leader = Some(outcome_of(status));
                        self.finish(self.options.leak_grace)
                    }
                    Err(_) => {
                        tracing::error!(label = %self.label, pid = self.pid, "the worker survived SIGKILL; giving up on reaping it");
                        self.leader = Some(Outcome::TimedOut);
                        self.finish(self.options.leak_grace)
                    }
                }
            }
        }
    }

    /// After the leader has ended: waits up to `window` for the rest of the group to go
    /// and the pipes to close, kills whatever did not, records limits, removes the cgroup.
    fn finish(&mut self, window: Duration) -> Outcome {
        if let Some(outcome) = &self.finished {
            return outcome.clone();
        }
        let leader = self.leader.clone().unwrap_or(Outcome::Exited(-1));
        let unreaped = leader == Outcome::TimedOut;
        let until = Instant::now() + window;
        let (survivors, pipes_open) = loop {
            self.drain_stdout();
            let survivors = self.survivors();
            let pipes_open = self.stdout_open || !self.stderr.is_closed();
            if (survivors.is_empty() && !pipes_open) || Instant::now() >= until {
                break (survivors, pipes_open);
            }
            if survivors.is_empty() && !self.stdout_open {
                // Only stderr is still open: wait for its reader rather than poll.
                self.stderr.wait_closed(until);
                continue;
            }
            std::thread::sleep(
                Duration::from_millis(2).min(until.saturating_duration_since(Instant::now())),
            );
        };
        let mut outcome = leader;
        if !survivors.is_empty() || pipes_open || unreaped {
            let mut all = survivors;
            if pipes_open {
                for holder in procfs::pipe_holders(&self.pipe_inodes, std::process::id()) {
                    if !all.contains(&holder) {
                        all.push(holder);
                    }
                }
            }
            if unreaped && !all.contains(&self.pid) {
                all.push(self.pid);
            }
            self.signal_all(libc::SIGKILL);
            for &pid in &all {
                // SAFETY: kill has no memory-safety preconditions; these hold our pipes
                // or sit in our group.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
            }
            all.sort_unstable();
            tracing::debug!(label = %self.label, survivors = ?all, "worker leaked processes");
            outcome = Outcome::Leaked { leader: Box::new(outcome), survivors: all };
        }
        self.peak_bytes = self.measured_peak();
        self.limit_hit = self.limit_hit.or_else(|| self.observed_limit(&outcome));
        if let Some(watchdog) = &mut self.watchdog {
            watchdog.stop();
        }
        if let Some(cgroup) = &mut self.cgroup {
            cgroup.remove();
        }
        self.stdin = None;
        if !unreaped {
            // The group is gone and the leader reaped: its id may be another's from now on.
            self.enlisted = None;
        }
        self.finished = Some(outcome.clone());
        outcome
    }

    fn observed_limit(&self, outcome: &Outcome) -> Option<LimitHit> {
        let sb = &self.sandbox;
        let own = self.watchdog.as_ref().is_some_and(RssWatchdog::fired)
            || self.cgroup.as_ref().is_some_and(WorkerCgroup::limit_reached);
        let killed = outcome.leader_signal() == Some(libc::SIGKILL);
        // Only worth finding out for a SIGKILL: the OOM killer sends nothing else.
        let anyone_killed = || {
            self.cgroup.as_ref().is_some_and(|c| c.oom_kills() > 0)
                || matches!((self.oom_kills_at_start, procfs::oom_kills_since_boot()), (Some(before), Some(now)) if now > before)
        };
        // The runner (its leader's signal is the runner's), or the keeper or the init, whose end
        // ends the runner too.
        let mut victims = vec![self.pid];
        if let Some((_, ns)) = &self.pid_ns {
            victims.extend([ns.runner, ns.init]);
        }
        let named_in_log = || {
            let log = self.kernel_log.as_ref()?;
            match log.names_oom_kill(&victims)? {
                // The kernel logs the kill just after sending it: when an OOM kill happened, a
                // moment later the line is there if it is about this worker.
                false if anyone_killed() => {
                    std::thread::sleep(Duration::from_millis(100));
                    log.names_oom_kill(&victims)
                }
                named => Some(named),
            }
        };
        let oom_killed = killed
            && oom_killed(
                self.cgroup.as_ref().and_then(WorkerCgroup::oom_kills_of_members),
                named_in_log,
                anyone_killed,
            );
        if let Some(hit) = memory_hit(own, sb.memory_bytes, killed, oom_killed, self.peak_bytes) {
            return Some(hit);
        }
        if let (Some(libc::SIGXCPU), Some(limit_seconds)) =
            (outcome.leader_signal(), sb.cpu_seconds)
        {
            return Some(LimitHit::Cpu { limit_seconds });
        }
        if let (true, Some(limit)) =
            (self.cgroup.as_ref().is_some_and(|c| c.pids_max_hits() > 0), sb.max_processes)
        {
            return Some(LimitHit::Processes { limit });
        }
        None
    }

    /// Live members of the group, the cgroup or the worker's network namespace (the leader is
    /// reaped by now).
    fn survivors(&self) -> Vec<u32> {
        let mut pids = self.group();
        let tagged = self.tagged();
        let cgroup = self.cgroup.as_ref().map(WorkerCgroup::members).unwrap_or_default();
        for pid in tagged.into_iter().chain(cgroup) {
            if !pids.contains(&pid) {
                pids.push(pid);
            }
        }
        pids
    }

    fn drain_stdout(&mut self) {
        while self.stdout_open {
            match self.lines.try_recv() {
                Ok(StdoutEvent::Eof | StdoutEvent::Failed(_)) | Err(TryRecvError::Disconnected) => {
                    self.stdout_open = false;
                }
                Ok(_) => {}
                Err(TryRecvError::Empty) => break,
            }
        }
    }

    /// The process group, plus cgroup and namespace members that left it. SIGKILL spares a
    /// keeper that is still running ([`kill_worker_group`] says why): it is killed last, by
    /// [`Worker::kill_keeper`] where it has not ended by itself.
    fn signal_all(&self, signal: i32) {
        let keeper = (signal == libc::SIGKILL).then(|| self.live_keeper()).flatten();
        if let (Some(keeper), Some((_, ns))) = (keeper, &self.pid_ns) {
            kill_namespace(keeper, ns.init);
        }
        for pid in self.tagged().into_iter().filter(|p| Some(*p) != keeper) {
            // SAFETY: kill has no memory-safety preconditions; the pid is in the worker's own
            // network namespace, so it is one of its processes.
            unsafe { libc::kill(pid as libc::pid_t, signal) };
        }
        // SAFETY: kill has no memory-safety preconditions. Once the leader is reaped and the
        // group is empty, its id may be another process's group: only signal while it is ours
        // (the leader may be reaped before `self.leader` says so).
        if procfs::group_is_ours(self.pid as i32, self.start_time) {
            match keeper {
                Some(keeper) => kill_all_but(procfs::group_members(self.pid as i32), keeper),
                None => unsafe {
                    libc::kill(-(self.pid as libc::pid_t), signal);
                },
            }
        }
        if let Some(cgroup) = &self.cgroup {
            match (signal, keeper) {
                (libc::SIGKILL, Some(keeper)) => kill_all_but(cgroup.members(), keeper),
                (libc::SIGKILL, None) => cgroup.kill_all(),
                _ => cgroup.signal(signal),
            }
        }
    }

    /// The leader, while it is a keeper still running (its pid still names it).
    fn live_keeper(&self) -> Option<u32> {
        (self.pid_ns.is_some()
            && self.leader.is_none()
            && procfs::group_is_ours(self.pid as i32, self.start_time)
            && procfs::is_running(self.pid))
        .then_some(self.pid)
    }

    /// The last resort after a SIGKILL that spared the keeper: the keeper itself (what it had not
    /// reaped yet goes to the nearest subreaper, [`crate::orphans`]).
    fn kill_keeper(&self) {
        if let Some(keeper) = self.live_keeper() {
            tracing::debug!(label = %self.label, pid = keeper, "the keeper did not end after its namespace was killed; killing it");
            // SAFETY: kill has no memory-safety preconditions; the pid still names our leader.
            unsafe { libc::kill(keeper as libc::pid_t, libc::SIGKILL) };
        }
    }

    fn write_line(&mut self, line: &[u8], deadline: Instant) -> Result<(), WriteFail> {
        let Some(stdin) = &mut self.stdin else { return Err(WriteFail::Closed) };
        let mut written = 0;
        while written < line.len() {
            match stdin.write(&line[written..]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() || !wait_writable(stdin, left) {
                        return Err(WriteFail::TimedOut);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                    self.stdin = None;
                    return Err(WriteFail::Closed);
                }
                Err(e) => return Err(WriteFail::Io(e)),
            }
        }
        Ok(())
    }

    fn time_out(&mut self, after: Duration) -> WorkerError {
        let how = self.shut_down(self.options.kill_grace);
        tracing::debug!(label = %self.label, outcome = %how, "timed-out worker terminated");
        self.finished = Some(Outcome::TimedOut);
        WorkerError::Timeout { label: self.label.clone(), after, stderr_tail: self.stderr.text() }
    }

    fn protocol_error(&mut self, detail: String) -> WorkerError {
        self.shut_down(self.options.kill_grace);
        WorkerError::Protocol { label: self.label.clone(), detail, stderr_tail: self.stderr.text() }
    }

    fn line_too_long(&mut self) -> WorkerError {
        self.shut_down(self.options.kill_grace);
        WorkerError::LineTooLong { label: self.label.clone(), limit: self.options.line_limit }
    }

    fn exited_error(&self, outcome: Outcome) -> WorkerError {
        WorkerError::Exited {
            label: self.label.clone(),
            outcome,
            limit: self.limit_hit,
            stderr_tail: self.stderr.text(),
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if self.finished.is_some() {
            return;
        }
        self.signal_all(libc::SIGKILL);
        if self.leader.is_none() && self.exits.recv_timeout(DROP_WAIT).is_err() {
            tracing::warn!(label = %self.label, pid = self.pid, "dropped worker not reaped after SIGKILL");
        }
        // Whatever of the group is left (the cgroup's own Drop covers its members).
        if !self.group().is_empty() {
            // SAFETY: as in signal_all; the group still has members, and the id is ours.
            unsafe { libc::kill(-(self.pid as libc::pid_t), libc::SIGKILL) };
        }
    }
}

/// SIGKILL to every process of the worker whose session and process group `pgid` leads: for a
/// stop that cannot wait (a second Ctrl-C, an engine dropped). Where the leader is a keeper
/// (`pid_namespace.rs`), the keeper is spared: killed at the same time as its namespace's init
/// and runner, it would leave them to init before it could reap them (zombies, where init does
/// not reap). Its namespace is killed (the kernel kills everything in it once its init dies) with
/// every other process of its group, and the keeper then reaps them and ends by itself; the
/// worker's owner kills it where it does not ([`Worker`]'s `Drop`).
pub fn kill_worker_group(pgid: u32) {
    match procfs::pid_namespace_of(pgid) {
        Some(ns) => {
            kill_namespace(pgid, ns.init);
            kill_all_but(procfs::group_members(pgid as i32), pgid);
        }
        None => {
            // SAFETY: kill has no memory-safety preconditions; the caller names a group it leads.
            unsafe { libc::kill(-(pgid as libc::pid_t), libc::SIGKILL) };
        }
    }
}

/// SIGKILL to the init of `keeper`'s PID namespace, while it is still the keeper's child: the
/// kernel then kills every process in the namespace.
fn kill_namespace(keeper: u32, init: u32) {
    if procfs::stat(init).is_some_and(|s| s.ppid == keeper as i32 && s.state != 'Z') {
        // SAFETY: kill has no memory-safety preconditions; the keeper has not reaped this child,
        // so its pid names it.
        unsafe { libc::kill(init as libc::pid_t, libc::SIGKILL) };
    }
}

fn kill_all_but(pids: Vec<u32>, spared: u32) {
    for pid in pids.into_iter().filter(|p| *p != spared) {
        // SAFETY: kill has no memory-safety preconditions; the pids are the worker's.
        unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
    }
}

/// The memory limit that ended a worker, if one did: its own (the watchdog fired or its cgroup
/// reached its limit), or the machine's, when the kernel's OOM killer killed it ([`oom_killed`])
/// and not for its own limit.
fn memory_hit(
    own_limit_reached: bool,
    limit_bytes: Option<u64>,
    killed: bool,
    oom_killed: bool,
    peak_bytes: Option<u64>,
) -> Option<LimitHit> {
    match limit_bytes {
        Some(limit_bytes) if own_limit_reached => {
            Some(LimitHit::Memory { limit_bytes, peak_bytes })
        }
        _ if killed && oom_killed => Some(LimitHit::HostMemory { peak_bytes }),
        _ => None,
    }
}

/// Whether the OOM killer, rather than the worker itself or anyone else, sent the SIGKILL that
/// ended the worker. A worker that kills itself while some other process runs the machine out of
/// memory must not pass for a victim (it would get no verdict instead of its own), so the
/// evidence must name this worker: its v2 memory cgroup's count of OOM kills of its members
/// (`cgroup_kills`), else the kernel log naming its pid. Only where neither can be read (no v2
/// memory cgroup, and `/dev/kmsg` needs privileges) does a machine-wide OOM kill during its run
/// count (`anyone_killed`), which is a guess.
fn oom_killed(
    cgroup_kills: Option<u64>,
    kernel_log: impl FnOnce() -> Option<bool>,
    anyone_killed: impl FnOnce() -> bool,
) -> bool {
    if let Some(n) = cgroup_kills {
        return n > 0;
    }
    match kernel_log() {
        Some(named) => named,
        None => {
            let guess = anyone_killed();
            if guess {
                tracing::warn!("a worker was SIGKILLed while the OOM killer ran; with no memory cgroup and no readable kernel log, it is taken for a victim");
            }
            guess
        }
    }
}

fn outcome_of(status: io::Result<ExitStatus>) -> Outcome {
    match status {
        Ok(status) => Outcome::from_status(status),
        Err(e) => {
            tracing::error!(error = %e, "waiting for a worker failed");
            Outcome::Exited(-1)
        }
    }
}

/// Waits until `file` can take more bytes; false on timeout. A closed read end shows up as
/// writable (POLLERR), and the next write then reports EPIPE.
fn wait_writable(file: &File, timeout: Duration) -> bool {
    let mut fds = libc::pollfd { fd: file.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
    let ms = i32::try_from(timeout.as_millis().max(1)).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd for the duration of the call.
    let ready = unsafe { libc::poll(&mut fds, 1, ms) };
    ready != 0
}

/// The reply for request `id`, or why the line is not one.
pub(crate) fn match_reply(line: &[u8], id: u64) -> Result<Value, String> {
    let preview = || {
        let text = String::from_utf8_lossy(&line[..line.len().min(200)]).into_owned();
        if line.len() > 200 {
            format!("{text}…")
        } else {
            text
        }
    };
    let value: Value = serde_json::from_slice(line)
        .map_err(|e| format!("stdout line is not JSON ({e}): `{}`", preview()))?;
    let Some(object) = value.as_object() else {
        return Err(format!("stdout line is not a JSON object: `{}`", preview()));
    };
    match object.get("id") {
        Some(got) if got.as_u64() == Some(id) => Ok(value),
        Some(got) => Err(format!("reply id {got} does not match request id {id}")),
        None => Err(format!("reply without an id: `{}`", preview())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_can_move_between_threads() {
        fn send_and_sync<T: Send + Sync>() {}
        send_and_sync::<Worker>();
    }

    #[test]
    fn a_kill_is_put_down_to_the_right_memory() {
        let peak = Some(3 << 30);
        assert_eq!(
            memory_hit(true, Some(1 << 30), true, true, peak),
            Some(LimitHit::Memory { limit_bytes: 1 << 30, peak_bytes: peak })
        );
        // Killed under its own limit while the OOM killer ran: the machine's memory.
        assert_eq!(
            memory_hit(false, Some(1 << 40), true, true, peak),
            Some(LimitHit::HostMemory { peak_bytes: peak })
        );
        assert_eq!(
            memory_hit(false, None, true, true, None),
            Some(LimitHit::HostMemory { peak_bytes: None })
        );
        // A SIGKILL with no OOM kill anywhere (its own, or a timeout's) is no memory limit.
        assert_eq!(memory_hit(false, Some(1 << 30), true, false, peak), None);
        // The OOM killer ran but this worker ended otherwise.
        assert_eq!(memory_hit(false, Some(1 << 30), false, true, peak), None);
    }

    #[test]
    fn only_evidence_that_names_the_worker_makes_it_an_oom_victim() {
        let unreadable = || None;
        // A v2 cgroup counts its members' kills, by any OOM killer: nothing else is asked.
        assert!(oom_killed(Some(1), || panic!("not read"), || panic!("not read")));
        assert!(!oom_killed(Some(0), || panic!("not read"), || true), "someone else's OOM kill");
        // The kernel log names the pid, or does not.
        assert!(oom_killed(None, || Some(true), || false));
        assert!(
            !oom_killed(None, || Some(false), || true),
            "killed itself while another process was OOM-killed"
        );
        // Neither readable: a machine-wide kill during the run is the only hint left.
        assert!(oom_killed(None, unreadable, || true));
        assert!(!oom_killed(None, unreadable, || false));
    }

    #[test]
    fn replies_are_matched_by_id() {
        assert_eq!(match_reply(br#"{"id": 3, "ok": true}"#, 3).unwrap()["ok"], Value::Bool(true));
        assert!(match_reply(br#"{"id": 4}"#, 3).unwrap_err().contains("does not match"));
        assert!(match_reply(br#"{"ok": true}"#, 3).unwrap_err().contains("without an id"));
        assert!(match_reply(b"[1, 2]", 3).unwrap_err().contains("not a JSON object"));
        assert!(match_reply(b"hello", 3).unwrap_err().contains("not JSON"));
        assert!(match_reply(br#"{"id": "3"}"#, 3).is_err());
    }
}

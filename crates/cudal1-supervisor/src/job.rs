//! [`Job`]: a supervised child that speaks no protocol and runs to its end: the interpreter probe,
//! an Nsight Compute run, a tool asked one question (`ncu --help`, `c++filt`). It leads its own
//! process group, dies with the thread that started it (as workers do, [`crate::spawner`]), and
//! has a time limit: a job that outlives it, or that its caller cancels, is killed with its whole
//! group and reaped. A job that ends on its own takes what it left in its group with it.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Seek, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// For logs and errors.
    pub label: String,
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// Its working directory; `None`: the caller's.
    pub cwd: Option<PathBuf>,
    /// Its complete environment; `None`: the caller's.
    pub env: Option<Vec<(OsString, OsString)>>,
    /// Its standard input; `None`: `/dev/null`.
    pub stdin: Option<Vec<u8>>,
    pub output: JobOutput,
}

/// Where a job's stdout and stderr go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobOutput {
    /// Kept apart and given back in [`JobEnd`], up to [`CAPTURE_LIMIT`] bytes each.
    Capture,
    /// Both into this file, created afresh.
    File(PathBuf),
}

/// The most of each captured stream a [`JobEnd`] holds (its start).
pub const CAPTURE_LIMIT: u64 = 16 << 20;

/// How a job that ended on its own ended.
#[derive(Debug)]
pub struct JobEnd {
    pub status: ExitStatus,
    /// Empty unless [`JobOutput::Capture`].
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Why a job gave no [`JobEnd`]; in every case nothing of its group is left running.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("could not start `{}`: {source}", program.display())]
    Spawn {
        program: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{label} did not end within {}s and was killed", after.as_secs_f64())]
    Timeout { label: String, after: Duration },
    #[error("{label} was cancelled")]
    Cancelled { label: String },
    #[error("{label}: {source}")]
    Io {
        label: String,
        #[source]
        source: io::Error,
    },
}

/// Asked between polls of a running job: `true` ends it.
pub type CancelJob<'a> = &'a dyn Fn() -> bool;

/// A supervised job; see the module's documentation.
#[derive(Debug)]
pub struct Job;

impl Job {
    /// Runs `spec` to its end, at most `timeout`, asking `cancel` (if any) between polls.
    ///
    /// # Errors
    /// [`JobError::Timeout`] or [`JobError::Cancelled`] after its group was killed and its leader
    /// reaped; [`JobError::Spawn`] when it could not start; [`JobError::Io`] when its output could
    /// not be set up or read back.
    pub fn run(
        spec: JobSpec,
        timeout: Duration,
        cancel: Option<CancelJob<'_>>,
    ) -> Result<JobEnd, JobError> {
        let label = spec.label.clone();
        let io_error = |source: io::Error| JobError::Io { label: label.clone(), source };
        let mut command = Command::new(&spec.program);
        command.args(&spec.args).process_group(0);
        if let Some(cwd) = &spec.cwd {
            command.current_dir(cwd);
        }
        if let Some(env) = &spec.env {
            command.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
        }
        match &spec.stdin {
            // A file rather than a pipe: nothing to write while the job runs, so nothing to block.
            Some(bytes) => command.stdin(filled(bytes).map_err(io_error)?),
            None => command.stdin(Stdio::null()),
        };
        let captured = match &spec.output {
            JobOutput::Capture => {
                let (out, err) =
                    (anonymous_file().map_err(io_error)?, anonymous_file().map_err(io_error)?);
                command.stdout(out.try_clone().map_err(io_error)?);
                command.stderr(err.try_clone().map_err(io_error)?);
                Some((out, err))
            }
            JobOutput::File(path) => {
                let file = File::create(path).map_err(io_error)?;
                command.stdout(file.try_clone().map_err(io_error)?).stderr(file);
                None
            }
        };
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = crate::spawner::spawn(command)
            .map_err(|source| JobError::Spawn { program: spec.program.clone(), source })?;
        let group = child.id() as libc::pid_t;
        // SAFETY: kill has no memory-safety preconditions; the leader is not reaped before this
        // is sent (see `exited`), so the group id is still the job's.
        let kill_group = || unsafe { libc::kill(-group, libc::SIGKILL) };
        let started = Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            if exited(group) {
                // Whatever it left behind goes with it, before the leader is reaped.
                kill_group();
                break;
            }
            let cancelled = cancel.is_some_and(|c| c());
            if cancelled || started.elapsed() >= timeout {
                kill_group();
                let _ = child.wait();
                tracing::debug!(%label, cancelled, "job killed");
                return Err(if cancelled {
                    JobError::Cancelled { label }
                } else {
                    JobError::Timeout { label, after: timeout }
                });
            }
            std::thread::sleep(pause.min(timeout.saturating_sub(started.elapsed())));
            pause = (pause * 2).min(Duration::from_millis(20));
        }
        let status = child.wait().map_err(io_error)?;
        let (stdout, stderr) = match captured {
            Some((out, err)) => {
                (read_back(out).map_err(io_error)?, read_back(err).map_err(io_error)?)
            }
            None => (Vec::new(), Vec::new()),
        };
        Ok(JobEnd { status, stdout, stderr })
    }
}

/// A file with no name: in memory (`memfd_create`) where the kernel allows it, else an unlinked
/// file in the temporary directory. Output kept in one needs no reader while the job runs, and
/// nothing the job leaves running can keep a read from ending.
fn anonymous_file() -> io::Result<File> {
    use std::os::fd::FromRawFd;
    // SAFETY: a valid NUL-terminated name; the returned descriptor is new and owned here.
    let fd = unsafe { libc::memfd_create(c"cudal1-job".as_ptr(), libc::MFD_CLOEXEC) };
    if fd >= 0 {
        // SAFETY: `fd` is a fresh descriptor that nothing else owns.
        return Ok(unsafe { File::from_raw_fd(fd) });
    }
    tempfile::tempfile()
}

/// An unlinked file holding `bytes`, read from its start.
fn filled(bytes: &[u8]) -> io::Result<File> {
    let mut file = anonymous_file()?;
    file.write_all(bytes)?;
    file.rewind()?;
    Ok(file)
}

fn read_back(mut file: File) -> io::Result<Vec<u8>> {
    file.rewind()?;
    let mut bytes = Vec::new();
    file.take(CAPTURE_LIMIT).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Whether the process `pid` has exited, without reaping it (`waitid` with `WNOWAIT`).
fn exited(pid: libc::pid_t) -> bool {
    // SAFETY: a zeroed siginfo_t is a valid out-parameter; waitid only writes to it.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        ) == 0
            && info.si_pid() != 0
    }
}

//! How a worker ended, and which resource limit (if any) ended it.

use std::fmt;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// How a worker's process group ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The leader exited with this code and nothing of its group outlived it.
    Exited(i32),
    /// The leader was killed by a signal (its own fault, a limit, or our SIGTERM/SIGKILL).
    Signaled { signal: i32, name: String },
    /// We killed it because a request ran past its timeout.
    TimedOut,
    /// Something of the group (or a process holding its pipes) outlived the leader; it was
    /// killed. `leader` is how the leader itself ended (never `Leaked`); `TimedOut` there
    /// means the leader could not be reaped even after SIGKILL.
    Leaked { leader: Box<Outcome>, survivors: Vec<u32> },
}

impl Outcome {
    pub(crate) fn from_status(status: ExitStatus) -> Outcome {
        if let Some(code) = status.code() {
            return Outcome::Exited(code);
        }
        // Neither a code nor a signal only happens for stopped/continued states, which a
        // final wait never reports; treat it as an unknown signal rather than panic.
        let signal = status.signal().unwrap_or(0);
        Outcome::signaled(signal)
    }

    pub(crate) fn signaled(signal: i32) -> Outcome {
        Outcome::Signaled { signal, name: signal_name(signal) }
    }

    /// Exited with code 0 and leaked nothing.
    #[must_use]
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Exited(0))
    }

    /// The signal that ended the leader, looking through `Leaked`.
    #[must_use]
    pub fn leader_signal(&self) -> Option<i32> {
        match self {
            Outcome::Signaled { signal, .. } => Some(*signal),
            Outcome::Leaked { leader, .. } => leader.leader_signal(),
            _ => None,
        }
    }
}

/// "SIGSEGV" for 11, "signal 77" for what has no name.
#[must_use]
pub fn signal_name(signal: i32) -> String {
    match nix::sys::signal::Signal::try_from(signal) {
        Ok(sig) => sig.as_str().to_string(),
        Err(_) => format!("signal {signal}"),
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Exited(code) => write!(f, "exited with code {code}"),
            Outcome::Signaled { signal, name } => write!(f, "killed by {name} ({signal})"),
            Outcome::TimedOut => write!(f, "timed out"),
            Outcome::Leaked { leader, survivors } => {
                write!(f, "{leader}, leaving {} process(es) behind", survivors.len())?;
                if !survivors.is_empty() {
                    let pids: Vec<String> = survivors.iter().map(u32::to_string).collect();
                    write!(f, " (pids {})", pids.join(", "))?;
                }
                Ok(())
            }
        }
    }
}

/// A sandbox limit that a worker ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitHit {
    /// Killed for host memory (cgroup OOM kill or the RSS watchdog).
    Memory { limit_bytes: u64 },
    /// `RLIMIT_CPU` sent SIGXCPU (or SIGKILL at the hard limit).
    Cpu { limit_seconds: u64 },
    /// A fork or clone failed at `pids.max`.
    Processes { limit: u64 },
}

impl fmt::Display for LimitHit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitHit::Memory { limit_bytes } => {
                write!(f, "host memory limit of {limit_bytes} bytes exceeded")
            }
            LimitHit::Cpu { limit_seconds } => {
                write!(f, "CPU time limit of {limit_seconds} s exceeded")
            }
            LimitHit::Processes { limit } => write!(f, "process limit of {limit} reached"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_names_come_from_the_signal_table() {
        assert_eq!(signal_name(libc::SIGSEGV), "SIGSEGV");
        assert_eq!(signal_name(libc::SIGKILL), "SIGKILL");
        assert_eq!(signal_name(200), "signal 200");
    }

    #[test]
    fn status_of_a_signal_death_is_signaled() {
        // Raw wait statuses: low 7 bits are the signal, exit codes sit in bits 8..16.
        let segv = ExitStatus::from_raw(libc::SIGSEGV);
        assert_eq!(
            Outcome::from_status(segv),
            Outcome::Signaled { signal: 11, name: "SIGSEGV".into() }
        );
        assert_eq!(Outcome::from_status(ExitStatus::from_raw(3 << 8)), Outcome::Exited(3));
    }

    #[test]
    fn leaked_display_lists_survivors_and_sees_through_to_the_signal() {
        let o = Outcome::Leaked { leader: Box::new(Outcome::signaled(9)), survivors: vec![12, 34] };
        assert_eq!(o.to_string(), "killed by SIGKILL (9), leaving 2 process(es) behind (pids 12, 34)");
        assert_eq!(o.leader_signal(), Some(9));
        assert!(!o.is_success());
        assert!(Outcome::Exited(0).is_success());
    }
}

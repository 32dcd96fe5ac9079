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

/// A limit that a worker ran into: its sandbox's, or the machine's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitHit {
    /// Killed for going over its own host-memory limit (cgroup OOM kill or the RSS watchdog).
    /// `peak_bytes`: the most memory it was seen to hold, when known.
    Memory { limit_bytes: u64, peak_bytes: Option<u64> },
    /// Killed by the kernel's OOM killer while under its own limit (or without one): the
    /// machine as a whole ran out of memory. Whether the worker was the cause is for the caller
    /// to judge, from `peak_bytes` and what else ran.
    HostMemory { peak_bytes: Option<u64> },
    /// `RLIMIT_CPU` sent SIGXCPU (or SIGKILL at the hard limit).
    Cpu { limit_seconds: u64 },
    /// A fork or clone failed at `pids.max`.
    Processes { limit: u64 },
}

impl LimitHit {
    /// Whether the worker ran out of memory (its own limit's, or the machine's).
    #[must_use]
    pub fn is_memory(&self) -> bool {
        matches!(self, LimitHit::Memory { .. } | LimitHit::HostMemory { .. })
    }
}

impl fmt::Display for LimitHit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reached = |peak: &Option<u64>| {
            peak.map(|p| format!(" after reaching {}", human_bytes(p))).unwrap_or_default()
        };
        match self {
            LimitHit::Memory { limit_bytes, peak_bytes } => {
                write!(
                    f,
                    "out of memory: over its limit of {}{}",
                    human_bytes(*limit_bytes),
                    reached(peak_bytes)
                )
            }
            LimitHit::HostMemory { peak_bytes } => {
                write!(
                    f,
                    "out of memory: the machine ran out and the kernel's OOM killer ended it{}",
                    reached(peak_bytes)
                )
            }
            LimitHit::Cpu { limit_seconds } => {
                write!(f, "CPU time limit of {limit_seconds} s exceeded")
            }
            LimitHit::Processes { limit } => write!(f, "process limit of {limit} reached"),
        }
    }
}

/// `512 MiB`, `6.4 GiB`: sizes for people, in powers of two.
#[must_use]
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{bytes} bytes"),
        _ if value < 10.0 => format!("{value:.1} {}", UNITS[unit]),
        _ => format!("{value:.0} {}", UNITS[unit]),
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
    fn sizes_and_memory_limits_read_well() {
        assert_eq!(human_bytes(512), "512 bytes");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(6_871_947_674), "6.4 GiB");
        assert_eq!(human_bytes(300 << 20), "300 MiB");
        let own = LimitHit::Memory { limit_bytes: 1 << 30, peak_bytes: Some(1_100 << 20) };
        assert_eq!(
            own.to_string(),
            "out of memory: over its limit of 1.0 GiB after reaching 1.1 GiB"
        );
        let host = LimitHit::HostMemory { peak_bytes: None };
        assert!(host.to_string().starts_with("out of memory: the machine ran out"), "{host}");
        assert!(
            own.is_memory() && host.is_memory() && !LimitHit::Processes { limit: 1 }.is_memory()
        );
    }

    #[test]
    fn leaked_display_lists_survivors_and_sees_through_to_the_signal() {
        let o = Outcome::Leaked { leader: Box::new(Outcome::signaled(9)), survivors: vec![12, 34] };
        assert_eq!(
            o.to_string(),
            "killed by SIGKILL (9), leaving 2 process(es) behind (pids 12, 34)"
        );
        assert_eq!(o.leader_signal(), Some(9));
        assert!(!o.is_success());
        assert!(Outcome::Exited(0).is_success());
    }
}

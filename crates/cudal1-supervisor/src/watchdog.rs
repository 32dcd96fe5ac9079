//! The memory limit where no memory cgroup can be made: a thread that sums the resident
//! memory of the worker's process group every few milliseconds and kills the group when it
//! is over. Coarser than a cgroup (a fast allocator can overshoot by one interval, and a
//! process that leaves the group escapes it), but it never needs RLIMIT_AS.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, RecvTimeoutError, Sender};

use crate::procfs;

pub(crate) const INTERVAL: Duration = Duration::from_millis(20);

pub(crate) struct RssWatchdog {
    stop: Option<Sender<()>>,
    handle: Option<JoinHandle<()>>,
    fired: Arc<AtomicBool>,
    /// The largest sum it has seen.
    peak: Arc<AtomicU64>,
}

impl RssWatchdog {
    /// Watches group `pgid`, whose leader started at `leader_start` (so that a later group under
    /// the same id is not watched: `procfs::own_group`). The memory of `uncounted` (a worker's
    /// keeper and init, copies of a trusted process that hold its pages) is not the worker's.
    pub(crate) fn start(
        name: String,
        pgid: i32,
        leader_start: Option<u64>,
        uncounted: Vec<u32>,
        limit_bytes: u64,
        interval: Duration,
    ) -> io::Result<Self> {
        let (stop, stopped) = bounded::<()>(0);
        let fired = Arc::new(AtomicBool::new(false));
        let flag = fired.clone();
        let peak = Arc::new(AtomicU64::new(0));
        let seen = peak.clone();
        let handle = std::thread::Builder::new().name(name).spawn(move || loop {
            match stopped.recv_timeout(interval) {
                Err(RecvTimeoutError::Timeout) => {}
                _ => return,
            }
            let members = procfs::own_group(pgid, leader_start);
            if members.is_empty() {
                return;
            }
            let rss: u64 = members
                .iter()
                .filter(|p| !uncounted.contains(p))
                .map(|&p| procfs::rss_bytes(p))
                .sum();
            seen.fetch_max(rss, Ordering::SeqCst);
            if rss > limit_bytes {
                flag.store(true, Ordering::SeqCst);
                tracing::debug!(pgid, rss, limit_bytes, "RSS watchdog kills the process group");
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
                return;
            }
        })?;
        Ok(Self { stop: Some(stop), handle: Some(handle), fired, peak })
    }

    /// Whether it killed the group.
    pub(crate) fn fired(&self) -> bool {
        self.fired.load(Ordering::SeqCst)
    }

    /// The most resident memory the group was seen to hold (sampled every interval).
    pub(crate) fn peak_bytes(&self) -> u64 {
        self.peak.load(Ordering::SeqCst)
    }

    pub(crate) fn stop(&mut self) {
        drop(self.stop.take());
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for RssWatchdog {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::{CommandExt, ExitStatusExt};

    /// A real process group that grows past the limit is killed, and the watchdog says so.
    #[test]
    fn a_growing_group_is_killed() {
        let Some(python) = ["/usr/bin/python3", "/usr/local/bin/python3"]
            .iter()
            .find(|p| std::path::Path::new(p).exists())
            .map(|p| p.to_string())
            .or_else(|| {
                let out = std::process::Command::new("python3")
                    .args(["-c", "import sys; print(sys.executable)"])
                    .output()
                    .ok()?;
                Some(String::from_utf8(out.stdout).ok()?.trim().to_string())
            })
        else {
            eprintln!("SKIP: no python3 to grow memory with");
            return;
        };
        // Grows to at most 1 GiB in 8 MiB steps, then exits 0: a kill is the watchdog's.
        let mut child = std::process::Command::new(python)
            .args(["-c", "x = []\nfor _ in range(128): x.append(b'\\x01' * (8 << 20))"])
            .process_group(0)
            .spawn()
            .unwrap();
        let pgid = child.id() as i32;
        let mut dog =
            RssWatchdog::start("dog".into(), pgid, None, Vec::new(), 128 << 20, INTERVAL).unwrap();
        let status = child.wait().unwrap();
        dog.stop();
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
        assert!(dog.fired());
        assert!(dog.peak_bytes() > 128 << 20, "the peak it saw: {}", dog.peak_bytes());
    }

    #[test]
    fn a_small_group_is_left_alone() {
        let mut child = std::process::Command::new("/bin/cat")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let mut dog = RssWatchdog::start(
            "dog".into(),
            child.id() as i32,
            None,
            Vec::new(),
            1 << 40,
            INTERVAL,
        )
        .unwrap();
        // Closing stdin ends cat; the watchdog must not have touched it.
        drop(child.stdin.take());
        let status = child.wait().unwrap();
        dog.stop();
        assert!(status.success(), "{status:?}");
        assert!(!dog.fired());
    }
}

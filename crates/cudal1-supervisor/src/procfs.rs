//! Reading `/proc`: who is in a process group, who holds a pipe, how much memory and CPU time
//! they use, which network namespace they live in. Used for leak and escape detection, the RSS
//! watchdog and CPU accounting; cheap enough to run on demand.

use std::fs;
use std::path::Path;

/// The fields of `/proc/<pid>/stat` that we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
    /// CPU time in clock ticks: the process's own (all threads, user and system) and that of
    /// the children it has waited for.
    pub ticks: u64,
    /// When the process started, in clock ticks since boot: with the pid, it names one process
    /// (a pid alone may be reused once its process is reaped).
    pub start_time: Option<u64>,
}

/// Parses `/proc/<pid>/stat`. The command name sits in parentheses and may itself contain
/// spaces and parentheses, so fields are counted from the last `)`.
pub(crate) fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let state = fields.first()?.chars().next()?;
    let ppid = fields.get(1)?.parse().ok()?;
    let pgrp = fields.get(2)?.parse().ok()?;
    let session = fields.get(3)?.parse().ok()?;
    // utime, stime, cutime, cstime: fields 14-17 of stat(5), 11-14 after the name.
    let ticks =
        (11..15).map(|i| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0)).sum();
    // starttime: field 22 of stat(5), 19 after the name.
    let start_time = fields.get(19).and_then(|f| f.parse().ok());
    Some(Stat { state, ppid, pgrp, session, ticks, start_time })
}

pub(crate) fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// True when `pid` exists and is not a zombie (a zombie holds nothing and cannot be killed).
pub(crate) fn is_running(pid: u32) -> bool {
    stat(pid).is_some_and(|s| s.state != 'Z' && s.state != 'X')
}

pub(crate) fn all_pids() -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect()
}

/// Live (non-zombie) members of process group `pgid`.
pub(crate) fn group_members(pgid: i32) -> Vec<u32> {
    all_pids()
        .into_iter()
        .filter(|&pid| {
            stat(pid).is_some_and(|s| s.pgrp == pgid && s.state != 'Z' && s.state != 'X')
        })
        .collect()
}

/// Whether process group `pgid` may still be the one whose leader started at `leader_start`
/// (`None`: not known). A group's id is its leader's pid, which the kernel gives to a new process
/// once the leader is reaped and the group is empty; that process may start a group of its own
/// under the same id (every runner does, with `setsid`). So: while a process with that pid
/// exists (a zombie too), the group is ours only if that process is our leader; once none
/// exists, no one else can have made a group of that id, and its members are ours.
pub(crate) fn group_is_ours(pgid: i32, leader_start: Option<u64>) -> bool {
    let Ok(pid) = u32::try_from(pgid) else { return false };
    match (stat(pid), leader_start) {
        (Some(s), Some(start)) => s.start_time == Some(start),
        _ => true,
    }
}

/// Live members of process group `pgid`, if it is still the group of the leader that started at
/// `leader_start` ([`group_is_ours`]); none otherwise.
pub(crate) fn own_group(pgid: i32, leader_start: Option<u64>) -> Vec<u32> {
    if group_is_ours(pgid, leader_start) {
        group_members(pgid)
    } else {
        tracing::debug!(pgid, "a process group's id now belongs to another process");
        Vec::new()
    }
}

/// Processes other than `exclude` that hold a pipe with one of `inodes` open for writing:
/// the ones keeping a worker's stdout/stderr from reaching EOF after it died, even if they
/// left its process group. Read ends do not count: a child we fork for another worker holds
/// copies of our read ends until it execs, and must not be mistaken for a leak.
pub(crate) fn pipe_holders(inodes: &[u64], exclude: u32) -> Vec<u32> {
    let wanted: Vec<String> = inodes.iter().map(|i| format!("pipe:[{i}]")).collect();
    let mut holders = Vec::new();
    for pid in all_pids() {
        if pid == exclude || !is_running(pid) {
            continue;
        }
        if writes_any(pid, &wanted) {
            holders.push(pid);
        }
    }
    holders
}

fn writes_any(pid: u32, wanted: &[String]) -> bool {
    let Ok(dir) = fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    dir.filter_map(Result::ok).any(|e| {
        let target = fs::read_link(e.path()).ok().and_then(|t| t.to_str().map(str::to_owned));
        target.is_some_and(|t| wanted.contains(&t))
            && fd_flags(pid, &e.file_name().to_string_lossy())
                .is_some_and(|f| f & libc::O_ACCMODE != libc::O_RDONLY)
    })
}

/// The `flags:` of `/proc/<pid>/fdinfo/<fd>` (octal in the file).
fn fd_flags(pid: u32, fd: &str) -> Option<i32> {
    let text = fs::read_to_string(format!("/proc/{pid}/fdinfo/{fd}")).ok()?;
    let field = text.lines().find_map(|l| l.strip_prefix("flags:"))?;
    i32::from_str_radix(field.trim(), 8).ok()
}

/// The inode of `pid`'s network namespace (`/proc/<pid>/ns/net` reads `net:[<inode>]`).
pub(crate) fn net_namespace(pid: u32) -> Option<u64> {
    let link = fs::read_link(format!("/proc/{pid}/ns/net")).ok()?;
    link.to_str()?.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
}

/// A namespace of a sandboxed worker's own (its network or its PID namespace), held open for as
/// long as the worker's handle lives. The kernel gives a freed namespace's inode number to the next
/// namespace made (an IDA: the lowest free number), so an inode alone, kept past the namespace's
/// end, names whichever worker started next: its processes would be taken for this worker's and
/// killed with them. Held open, the namespace, and its number, outlive every process in it.
pub(crate) struct NsTag {
    inode: u64,
    _held: fs::File,
}

/// The network namespace's tag (see [`in_net_namespace`]).
pub(crate) type NetTag = NsTag;

impl NsTag {
    /// The network namespace of `pid`, if it is not this process's own.
    pub(crate) fn of(pid: u32) -> Option<NsTag> {
        Self::of_kind(pid, "net")
    }

    /// The `kind` namespace of `pid` (`net`, `pid`, as named in `/proc/<pid>/ns`), if it is not
    /// this process's own.
    pub(crate) fn of_kind(pid: u32, kind: &str) -> Option<NsTag> {
        use std::os::unix::fs::MetadataExt;
        let file = fs::File::open(format!("/proc/{pid}/ns/{kind}")).ok()?;
        let inode = file.metadata().ok()?.ino();
        let ours = fs::metadata(format!("/proc/self/ns/{kind}")).ok()?.ino();
        (inode != ours).then_some(NsTag { inode, _held: file })
    }

    pub(crate) fn inode(&self) -> u64 {
        self.inode
    }
}

/// Live processes in the network namespace `inode`. A sandboxed worker gets a namespace of its
/// own, and every process it starts inherits it and cannot leave it (leaving takes a
/// capability it does not have, and making a new one is refused by its seccomp filter), so
/// this finds all of them, whatever session, group or parent they have moved to.
pub(crate) fn in_net_namespace(inode: u64) -> Vec<u32> {
    all_pids()
        .into_iter()
        .filter(|&pid| net_namespace(pid) == Some(inode) && is_running(pid))
        .collect()
}

/// `pid` and its descendants, through each thread's `children` list.
pub(crate) fn tree(pid: u32) -> Vec<u32> {
    let mut found = vec![pid];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        i += 1;
        let Ok(tasks) = fs::read_dir(format!("/proc/{p}/task")) else { continue };
        for task in tasks.flatten() {
            let Ok(text) = fs::read_to_string(task.path().join("children")) else { continue };
            for child in text.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
                if !found.contains(&child) {
                    found.push(child);
                }
            }
        }
    }
    found
}

/// CPU time of these processes and of the children they have waited for.
pub(crate) fn cpu_time(pids: &[u32]) -> std::time::Duration {
    let ticks: u64 = pids.iter().filter_map(|&p| stat(p)).map(|s| s.ticks).sum();
    // SAFETY: sysconf has no preconditions.
    let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) })
        .ok()
        .filter(|&t| t > 0)
        .unwrap_or(100);
    std::time::Duration::from_micros(ticks.saturating_mul(1_000_000) / per_second)
}

/// The ids of a process in the PID namespaces from this process's down to its own (`NSpid:` of
/// `/proc/<pid>/status`; one id where it lives in ours).
pub(crate) fn ns_pids(pid: u32) -> Vec<u32> {
    let Ok(text) = fs::read_to_string(format!("/proc/{pid}/status")) else { return Vec::new() };
    text.lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|v| v.split_whitespace().filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default()
}

/// The PID namespace a sandboxed worker's keeper made (see `pid_namespace.rs`): its init and its
/// runner, as this process names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PidNamespace {
    pub init: u32,
    pub runner: u32,
}

/// The PID namespace `keeper` made, found by its children: the one that is pid 1 one level down
/// from the keeper's namespace, and the one that is pid 2 there. `None` until both exist, and once
/// either is gone.
pub(crate) fn pid_namespace_of(keeper: u32) -> Option<PidNamespace> {
    let depth = ns_pids(keeper).len();
    let children = fs::read_to_string(format!("/proc/{keeper}/task/{keeper}/children")).ok()?;
    let (mut init, mut runner) = (None, None);
    for child in children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
        let ids = ns_pids(child);
        if depth == 0 || ids.len() != depth + 1 {
            continue;
        }
        match ids.last() {
            Some(1) => init = Some(child),
            Some(2) => runner = Some(child),
            _ => {}
        }
    }
    Some(PidNamespace { init: init?, runner: runner? })
}

/// Resident memory of `pid` in bytes (0 if it is gone).
pub(crate) fn rss_bytes(pid: u32) -> u64 {
    let Ok(text) = fs::read_to_string(format!("/proc/{pid}/statm")) else { return 0 };
    let pages: u64 = text.split_whitespace().nth(1).and_then(|f| f.parse().ok()).unwrap_or(0);
    pages * page_size()
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).unwrap_or(4096)
}

/// The most resident memory `pid` has held (`VmHWM` of `/proc/<pid>/status`), in bytes.
pub(crate) fn peak_rss_bytes(pid: u32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status_kib(&text, "VmHWM:").map(|kib| kib * 1024)
}

fn status_kib(text: &str, field: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(field))?;
    line[field.len()..].trim().trim_end_matches("kB").trim().parse().ok()
}

/// How many processes the kernel's OOM killer has killed since boot (`oom_kill` of
/// `/proc/vmstat`, Linux 4.13+); memory cgroups' kills included.
pub(crate) fn oom_kills_since_boot() -> Option<u64> {
    keyed_value(&fs::read_to_string("/proc/vmstat").ok()?, "oom_kill")
}

/// The kernel's log (`/dev/kmsg`) from the moment it was opened: what the OOM killer did to a
/// worker started after that. `None` where the log cannot be read (it needs root or
/// `kernel.dmesg_restrict = 0`).
#[derive(Debug)]
pub(crate) struct KernelLog(fs::File);

impl KernelLog {
    pub(crate) fn from_now() -> Option<KernelLog> {
        use std::io::{Seek, SeekFrom};
        use std::os::unix::fs::OpenOptionsExt;
        let mut kmsg = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open("/dev/kmsg")
            .ok()?;
        kmsg.seek(SeekFrom::End(0)).ok()?;
        Some(KernelLog(kmsg))
    }

    /// Whether a record written since [`KernelLog::from_now`] (and not read by an earlier call)
    /// says the OOM killer killed one of `pids`; `None` when the log could not be read to its end.
    pub(crate) fn names_oom_kill(&self, pids: &[u32]) -> Option<bool> {
        use std::io::Read;
        let needles: Vec<String> =
            pids.iter().map(|pid| format!("Killed process {pid} (")).collect();
        // One record per read; a buffer smaller than a record is refused (EINVAL).
        let mut buf = vec![0u8; 16 * 1024];
        let mut found = false;
        loop {
            match (&self.0).read(&mut buf) {
                Ok(0) => return Some(found),
                Ok(n) => found |= needles.iter().any(|needle| names_kill(&buf[..n], needle)),
                // The record was overwritten while we read: go on with the next.
                Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Some(found),
                Err(_) => return None,
            }
        }
    }
}

/// Whether one `/dev/kmsg` record (`prio,seq,time,flags;message`) is the kernel's own (facility
/// 0: what user space writes there is filed under another) and says the OOM killer killed the
/// process of `needle` (`Killed process PID (`): `Out of memory: Killed process ...`, `Memory
/// cgroup out of memory: Killed process ...`, or a line of its own on older kernels).
fn names_kill(record: &[u8], needle: &str) -> bool {
    let text = String::from_utf8_lossy(record);
    let Some((header, message)) = text.split_once(';') else { return false };
    let kernel = header
        .split(',')
        .next()
        .and_then(|p| p.parse::<u32>().ok())
        .is_some_and(|prio| prio >> 3 == 0);
    kernel && (message.starts_with(needle) || message.contains(&format!("of memory: {needle}")))
}

/// Inode of the file behind a descriptor (for pipes: the pipe's identity in `/proc/*/fd`).
pub(crate) fn inode_of(fd: std::os::fd::BorrowedFd<'_>) -> Option<u64> {
    use std::os::fd::AsRawFd;
    nix::sys::stat::fstat(fd.as_raw_fd()).ok().map(|s| s.st_ino)
}

/// Parses one `key value` line out of a cgroup `*.events` or `memory.oom_control` file.
pub(crate) fn keyed_value(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        (parts.next()? == key).then(|| parts.next()?.parse().ok()).flatten()
    })
}

pub(crate) fn read_keyed(path: &Path, key: &str) -> Option<u64> {
    keyed_value(&fs::read_to_string(path).ok()?, key)
}

/// Whether what `/proc` shows of a forked worker agrees with `steps` having been applied to it:
/// no capabilities where they were to be dropped, `no_new_privs` and a seccomp filter where one was
/// to be installed, a network namespace of its own (`own_net`) where it was to make one, and where
/// it was to make a PID namespace, that `keeper` (the child the fork server forked) has an init and
/// a runner in one (`ns`), both so confined. Landlock leaves no trace there. `Err` names what is
/// missing.
pub(crate) fn confinement_shown(
    keeper: u32,
    ns: Option<PidNamespace>,
    steps: &crate::child_setup::SandboxSteps,
    own_net: bool,
) -> Result<(), String> {
    let mut missing = Vec::new();
    let confined: Vec<(&str, u32)> = match (steps.namespaces.pid, ns) {
        (false, _) => vec![("it", keeper)],
        (true, Some(ns)) => {
            // The keeper runs none of the worker's code, but has dropped its capabilities too.
            if steps.drop_capabilities {
                missing.extend(
                    capabilities_left(keeper).into_iter().map(|m| format!("its keeper's {m}")),
                );
            }
            vec![("its init", ns.init), ("its runner", ns.runner)]
        }
        (true, None) => {
            missing.push("it made no PID namespace (no init and runner under it)".to_owned());
            vec![("it", keeper)]
        }
    };
    for (who, pid) in confined {
        let status = fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|e| format!("the status of {who} cannot be read: {e}"))?;
        let field = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)).map(str::trim);
        if steps.drop_capabilities {
            missing.extend(capabilities_left(pid).into_iter().map(|m| format!("{who}: {m}")));
        }
        if (steps.seccomp.is_some() || steps.landlock.is_some())
            && field("NoNewPrivs:") != Some("1")
        {
            missing.push(format!("{who}: no_new_privs is not set"));
        }
        if steps.seccomp.is_some() && field("Seccomp:") != Some("2") {
            missing
                .push(format!("{who}: its seccomp mode is {:?}, not a filter", field("Seccomp:")));
        }
    }
    if steps.namespaces.net && !own_net {
        missing.push("it is in this process's network namespace".to_owned());
    }
    if let (Some(_), Some(ns)) = (&steps.private_tmp, ns) {
        // Its `/tmp`, through its own root (in its mount namespace), is another file system.
        use std::os::unix::fs::MetadataExt;
        let theirs = fs::metadata(format!("/proc/{}/root/tmp", ns.runner))
            .map_err(|e| format!("the /tmp of its runner cannot be seen: {e}"))?;
        let ours = fs::metadata("/tmp").map_err(|e| format!("/tmp cannot be seen: {e}"))?;
        if theirs.dev() == ours.dev() && theirs.ino() == ours.ino() {
            missing.push("its runner: /tmp is the host's, not its own".to_owned());
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing.join("; "))
    }
}

/// The capability sets of `pid` that are not empty.
fn capabilities_left(pid: u32) -> Vec<String> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |key: &str| status.lines().find_map(|l| l.strip_prefix(key)).map(str::trim);
    ["CapEff:", "CapPrm:", "CapBnd:"]
        .into_iter()
        .filter(|key| field(key).and_then(|v| u64::from_str_radix(v, 16).ok()) != Some(0))
        .map(|key| format!("{} is {:?}, not 0", key.trim_end_matches(':'), field(key)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn stat_survives_hostile_command_names() {
        let s = parse_stat("42 (a) b (c) S 1 777 777 0 -1").unwrap();
        assert_eq!(
            s,
            Stat { state: 'S', ppid: 1, pgrp: 777, session: 777, ticks: 0, start_time: None }
        );
        assert_eq!(parse_stat("garbage"), None);
        let s =
            parse_stat("42 (x) R 1 7 7 0 -1 4194304 100 0 0 0 250 50 3 2 20 0 1 0 98765").unwrap();
        assert_eq!((s.pgrp, s.ticks, s.start_time), (7, 305, Some(98765)));
    }

    #[test]
    fn a_group_id_taken_by_another_process_is_not_ours() {
        let me = std::process::id();
        let started = stat(me).unwrap().start_time;
        assert!(started.is_some());
        // Our own pid with our own start: ours; with another start: a later process's.
        assert!(group_is_ours(me as i32, started));
        assert!(!group_is_ours(me as i32, started.map(|t| t + 1)));
        assert!(own_group(me as i32, started.map(|t| t + 1)).is_empty());
        // No process with that pid: whoever is left in the group is ours.
        assert!(group_is_ours(i32::MAX, Some(1)));
        assert!(!group_is_ours(-1, None));
    }

    #[test]
    fn our_own_process_is_found_in_its_group() {
        let me = std::process::id();
        let pgrp = stat(me).unwrap().pgrp;
        assert!(group_members(pgrp).contains(&me));
        assert!(is_running(me));
        assert!(rss_bytes(me) > 0);
    }

    #[test]
    fn a_pipe_writer_is_found_and_a_reader_is_not() {
        let (reader, writer) = std::io::pipe().unwrap();
        let inode = inode_of(reader.as_fd()).unwrap();
        // `sleep` holds the write end as its stdout; `cat` holds the read end as its stdin.
        let mut holder = std::process::Command::new("/bin/sleep")
            .arg("1000")
            .stdout(std::process::Stdio::from(writer))
            .spawn()
            .unwrap();
        let mut reading = std::process::Command::new("/bin/cat")
            .stdin(std::process::Stdio::from(reader))
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let holders = pipe_holders(&[inode], std::process::id());
        assert_eq!(holders, vec![holder.id()]);
        holder.kill().unwrap();
        holder.wait().unwrap();
        // With the writer gone, cat sees EOF and exits on its own.
        assert!(reading.wait().unwrap().success());
    }

    #[test]
    fn a_child_is_in_our_tree_and_namespace_and_its_cpu_time_counts() {
        let me = std::process::id();
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; sleep 1000"])
            .spawn()
            .unwrap();
        let ns = net_namespace(me).unwrap();
        assert_eq!(net_namespace(child.id()), Some(ns));
        assert!(in_net_namespace(ns).contains(&child.id()));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while cpu_time(&[child.id()]).is_zero() {
            assert!(std::time::Instant::now() < deadline, "the child used no CPU time");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(tree(me).contains(&child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!tree(me).contains(&child.id()));
    }

    #[test]
    fn peak_memory_and_oom_kills_are_read() {
        assert_eq!(
            status_kib("Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t 10 kB\n", "VmHWM:"),
            Some(2048)
        );
        let me = std::process::id();
        assert!(peak_rss_bytes(me).unwrap() >= rss_bytes(me) / 2);
        assert!(peak_rss_bytes(u32::MAX).is_none());
        // Every Linux since 4.13 counts them; the count itself is the machine's.
        assert!(oom_kills_since_boot().is_some());
    }

    #[test]
    fn keyed_values_parse() {
        let text = "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n";
        assert_eq!(keyed_value(text, "oom_kill"), Some(2));
        assert_eq!(keyed_value(text, "max"), Some(3));
        assert_eq!(keyed_value(text, "nope"), None);
    }

    #[test]
    fn kernel_log_records_name_the_killed_process() {
        let needle = "Killed process 4242 (";
        assert!(names_kill(b"3,1977,123456789,-;Out of memory: Killed process 4242 (python3) total-vm:1234kB, anon-rss:99kB", needle));
        assert!(names_kill(
            b"3,1978,1,-;Memory cgroup out of memory: Killed process 4242 (python3) total-vm:1kB",
            needle
        ));
        assert!(
            names_kill(
                b"3,1979,1,-;Killed process 4242 (python3) total-vm:1kB, anon-rss:1kB",
                needle
            ),
            "older kernels"
        );
        assert!(!names_kill(b"3,1980,1,-;Out of memory: Killed process 42420 (python3)", needle));
        assert!(!names_kill(
            b"6,1981,1,-;oom_reaper: reaped process 4242 (python3), now anon-rss:0kB",
            needle
        ));
        assert!(!names_kill(
            b"6,1982,1,-;audit: Killed process 4242 (python3) by a signal",
            needle
        ));
        // The same words written by user space (facility 1 and up) are no evidence.
        assert!(!names_kill(b"11,1983,1,-;Out of memory: Killed process 4242 (python3)", needle));
        assert!(!names_kill(b"no header", needle));
    }

    #[test]
    fn reading_the_kernel_log_ends_and_never_names_a_live_process() {
        // Readable (root, or dmesg_restrict off) or not; either way it returns, and this test's
        // own process was never OOM-killed.
        let started = std::time::Instant::now();
        if let Some(log) = KernelLog::from_now() {
            assert_eq!(log.names_oom_kill(&[std::process::id()]), Some(false));
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
    }
}

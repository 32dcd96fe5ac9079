//! Per-worker cgroups for the memory and process limits. cgroup v2 is preferred; where a
//! controller exists only in a v1 hierarchy (hybrid hosts) that hierarchy is used for it.
//! A worker's cgroup is a child of the supervisor's own cgroup; the child process joins it
//! before exec, and the cgroup is killed and removed after the worker is reaped.

use std::collections::BTreeSet;
use std::ffi::CString;
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::procfs;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupVersion {
    V1,
    V2,
}

/// Where children of one controller can be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ControllerPlace {
    pub version: CgroupVersion,
    pub parent: PathBuf,
}

/// The probed places for the two controllers we use.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CgroupBase {
    pub memory: Option<ControllerPlace>,
    pub pids: Option<ControllerPlace>,
}

/// One line of `/proc/self/mountinfo` that we care about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mount {
    pub root: String,
    pub point: PathBuf,
    pub fstype: String,
    pub super_opts: Vec<String>,
}

pub(crate) fn parse_mountinfo(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let left: Vec<&str> = left.split(' ').collect();
            let mut right = right.split(' ');
            let fstype = right.next()?.to_string();
            let _source = right.next()?;
            let super_opts = right.next().unwrap_or("").split(',').map(str::to_string).collect();
            Some(Mount {
                root: unescape(left.get(3)?),
                point: PathBuf::from(unescape(left.get(4)?)),
                fstype,
                super_opts,
            })
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1..i + 4].iter().all(u8::is_ascii_digit)
        {
            if let Ok(v) = u8::from_str_radix(&field[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `(controllers, path)` per line of `/proc/self/cgroup`; v2 has an empty controller list.
pub(crate) fn parse_proc_cgroup(text: &str) -> Vec<(Vec<String>, String)> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            let list =
                controllers.split(',').filter(|c| !c.is_empty()).map(str::to_string).collect();
            Some((list, path.to_string()))
        })
        .collect()
}

/// The directory of our cgroup `path` under `mount`, honouring a mount of a sub-tree.
fn cgroup_dir(mount: &Mount, path: &str) -> PathBuf {
    let rel = path.strip_prefix(mount.root.as_str()).unwrap_or(path);
    let rel = rel.trim_matches('/');
    if rel.is_empty() {
        mount.point.clone()
    } else {
        mount.point.join(rel)
    }
}

fn read_words(path: &Path) -> BTreeSet<String> {
    fs::read_to_string(path)
        .map(|t| t.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

fn write_file(path: &Path, value: &str) -> io::Result<()> {
    // cgroup files want one write(2) per value.
    let mut f = fs::OpenOptions::new().write(true).open(path)?;
    f.write_all(value.as_bytes())
}

/// Probes where memory and pids limits can be placed. Returns the places and notes on what
/// was missing (the caller logs them once).
pub(crate) fn probe() -> (CgroupBase, Vec<String>) {
    let mut notes = Vec::new();
    let mounts =
        fs::read_to_string("/proc/self/mountinfo").map(|t| parse_mountinfo(&t)).unwrap_or_default();
    let ours =
        fs::read_to_string("/proc/self/cgroup").map(|t| parse_proc_cgroup(&t)).unwrap_or_default();
    let mut base = CgroupBase::default();

    if let (Some(mount), Some((_, path))) =
        (mounts.iter().find(|m| m.fstype == "cgroup2"), ours.iter().find(|(c, _)| c.is_empty()))
    {
        let dir = cgroup_dir(mount, path);
        match probe_v2(&dir) {
            Ok((memory, pids)) => {
                let place = ControllerPlace { version: CgroupVersion::V2, parent: dir.clone() };
                base.memory = memory.then(|| place.clone());
                base.pids = pids.then_some(place);
            }
            Err(e) => notes.push(format!("cgroup v2 at `{}`: {e}", dir.display())),
        }
    }
    for controller in ["memory", "pids"] {
        let slot = if controller == "memory" { &mut base.memory } else { &mut base.pids };
        if slot.is_some() {
            continue;
        }
        let mount = mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.super_opts.iter().any(|o| o == controller));
        let path = ours.iter().find(|(c, _)| c.iter().any(|c| c == controller));
        let (Some(mount), Some((_, path))) = (mount, path) else {
            notes.push(format!("no cgroup (v2 or v1) with the {controller} controller"));
            continue;
        };
        let dir = cgroup_dir(mount, path);
        match try_child(&dir, &[]) {
            Ok(()) => *slot = Some(ControllerPlace { version: CgroupVersion::V1, parent: dir }),
            Err(e) => notes
                .push(format!("cgroup v1 {controller} at `{}` is not usable: {e}", dir.display())),
        }
    }
    let parents: BTreeSet<&Path> =
        [&base.memory, &base.pids].into_iter().flatten().map(|p| p.parent.as_path()).collect();
    for parent in parents {
        sweep_leftovers(parent);
    }
    (base, notes)
}

/// Makes sure children of `dir` get the memory and pids controllers; says which they get.
fn probe_v2(dir: &Path) -> Result<(bool, bool), String> {
    let available = read_words(&dir.join("cgroup.controllers"));
    let wanted: Vec<&str> =
        ["memory", "pids"].into_iter().filter(|c| available.contains(*c)).collect();
    if wanted.is_empty() {
        return Err("neither the memory nor the pids controller is available".into());
    }
    if let Err(e) = enable_controllers(dir, &wanted) {
        if e.raw_os_error() != Some(libc::EBUSY) {
            return Err(format!("cannot enable controllers: {e}"));
        }
        // "No internal processes": a cgroup with members cannot hand controllers to
        // children. Move ourselves into a leaf and retry; that only works if we were alone.
        evacuate_self(dir).map_err(|e| {
            format!("cannot enable controllers: our cgroup has other members ({e})")
        })?;
    }
    let enabled = read_words(&dir.join("cgroup.subtree_control"));
    let memory = enabled.contains("memory");
    let pids = enabled.contains("pids");
    let files: Vec<&str> = [(memory, "memory.max"), (pids, "pids.max")]
        .into_iter()
        .filter_map(|(on, f)| on.then_some(f))
        .collect();
    try_child(dir, &files).map_err(|e| format!("cannot make a child cgroup: {e}"))?;
    Ok((memory, pids))
}

fn enable_controllers(dir: &Path, controllers: &[&str]) -> io::Result<()> {
    let enabled = read_words(&dir.join("cgroup.subtree_control"));
    for c in controllers.iter().filter(|c| !enabled.contains(**c)) {
        write_file(&dir.join("cgroup.subtree_control"), &format!("+{c}"))?;
    }
    Ok(())
}

fn evacuate_self(dir: &Path) -> io::Result<()> {
    let leaf = dir.join(format!("cudal1-supervisor-{}", std::process::id()));
    match fs::create_dir(&leaf) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    write_file(&leaf.join("cgroup.procs"), &std::process::id().to_string())?;
    let wanted: Vec<&str> = ["memory", "pids"]
        .into_iter()
        .filter(|c| read_words(&dir.join("cgroup.controllers")).contains(*c))
        .collect();
    if let Err(e) = enable_controllers(dir, &wanted) {
        // Put ourselves back where we were found.
        let _ = write_file(&dir.join("cgroup.procs"), &std::process::id().to_string());
        let _ = fs::remove_dir(&leaf);
        return Err(e);
    }
    tracing::info!(leaf = %leaf.display(), "moved the supervisor into a leaf cgroup so that workers can get memory and pids limits");
    Ok(())
}

/// Creates and removes a probe child of `dir`, checking that `files` exist in it.
fn try_child(dir: &Path, files: &[&str]) -> io::Result<()> {
    let child = dir.join(format!("cudal1-probe-{}", std::process::id()));
    fs::create_dir(&child)?;
    let missing = files.iter().find(|f| !child.join(f).exists());
    let removed = fs::remove_dir(&child);
    if let Some(f) = missing {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("{f} missing in a child cgroup"),
        ));
    }
    removed
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The start of this process's workers' cgroup names: `cudal1-<pid>-<start time>`. A process
/// that dies without removing them (killed, or a test process that exits with workers alive)
/// leaves them behind, and the kernel gives its pid to another process in time: with the pid
/// alone, that process's first worker met the leftover and could not start (`EEXIST`, seen in
/// CI as a correct candidate judged `runtime_error`). Where the start time cannot be read, the
/// pid alone, which [`sweep_leftovers`] never takes while a process with that pid runs.
fn name_stem() -> &'static str {
    static STEM: OnceLock<String> = OnceLock::new();
    STEM.get_or_init(|| {
        let pid = std::process::id();
        match procfs::stat(pid).and_then(|s| s.start_time) {
            Some(start) => format!("cudal1-{pid}-{start}"),
            None => format!("cudal1-{pid}"),
        }
    })
}

/// The process that made the cgroup named `name`, as (pid, start time), for the names this
/// module makes: `cudal1-<pid>-<start>-<n>` for a worker's (the start time `None` in names from
/// before it was added, `cudal1-<pid>-<n>`), `cudal1-probe-<pid>` for a probe.
fn owner(name: &str) -> Option<(u32, Option<u64>)> {
    let rest = name.strip_prefix("cudal1-")?;
    let fields: Vec<&str> = rest.split('-').collect();
    let number = |f: &str| f.parse::<u64>().ok().filter(|_| f.bytes().all(|b| b.is_ascii_digit()));
    match fields.as_slice() {
        ["probe", pid] => Some((u32::try_from(number(pid)?).ok()?, None)),
        [pid, start, n] => {
            number(n)?;
            Some((u32::try_from(number(pid)?).ok()?, Some(number(start)?)))
        }
        [pid, n] => {
            number(n)?;
            Some((u32::try_from(number(pid)?).ok()?, None))
        }
        _ => None,
    }
}

/// Removes the cgroups under `parent` that an earlier cudal1 process left behind: those whose
/// maker is gone (no process with its pid, or one that started at another time). A cgroup
/// that still has members cannot be removed and is left; so is one whose maker may be alive
/// (a name without a start time whose pid runs). How many were removed.
pub(crate) fn sweep_leftovers(parent: &Path) -> usize {
    let Ok(entries) = fs::read_dir(parent) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((pid, start)) = name.to_str().and_then(owner) else { continue };
        let alive = match (procfs::stat(pid), start) {
            (None, _) => false,
            (Some(s), Some(start)) => s.start_time == Some(start),
            (Some(_), None) => true,
        };
        if !alive && fs::remove_dir(entry.path()).is_ok() {
            removed += 1;
        }
    }
    if removed > 0 {
        tracing::debug!(parent = %parent.display(), removed, "removed cgroups left by earlier runs");
    }
    removed
}

/// The cgroup(s) of one worker: one directory on v2, one per controller on v1.
#[derive(Debug)]
pub(crate) struct WorkerCgroup {
    dirs: Vec<(CgroupVersion, PathBuf)>,
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    procs: Vec<CString>,
    removed: bool,
}

/// Which step of making a cgroup failed.
#[derive(Debug)]
pub(crate) struct CgroupSetupError {
    pub path: PathBuf,
    pub source: io::Error,
}

impl WorkerCgroup {
    /// Makes the cgroup(s) for the limits that `base` supports. `None` if none applies.
    pub(crate) fn create(
        base: &CgroupBase,
        memory_bytes: Option<u64>,
        max_processes: Option<u64>,
    ) -> Result<Option<WorkerCgroup>, CgroupSetupError> {
        let name = format!("{}-{}", name_stem(), COUNTER.fetch_add(1, Ordering::Relaxed));
        let mut cg = WorkerCgroup {
            dirs: Vec::new(),
            memory: None,
            pids: None,
            procs: Vec::new(),
            removed: false,
        };
        if let (Some(limit), Some(place)) = (memory_bytes, &base.memory) {
            let dir = cg.make_dir(place, &name)?;
            cg.set_memory(place.version, &dir, limit)?;
            cg.memory = Some(dir);
        }
        if let (Some(limit), Some(place)) = (max_processes, &base.pids) {
            let dir = cg.make_dir(place, &name)?;
            let file = dir.join("pids.max");
            write_file(&file, &limit.to_string())
                .map_err(|source| CgroupSetupError { path: file, source })?;
            cg.pids = Some(dir);
        }
        Ok((!cg.dirs.is_empty()).then_some(cg))
    }

    fn make_dir(
        &mut self,
        place: &ControllerPlace,
        name: &str,
    ) -> Result<PathBuf, CgroupSetupError> {
        let dir = place.parent.join(name);
        if self.dirs.iter().any(|(_, d)| *d == dir) {
            return Ok(dir);
        }
        fs::create_dir(&dir).map_err(|source| CgroupSetupError { path: dir.clone(), source })?;
        let procs = dir.join("cgroup.procs");
        // A path with a NUL byte cannot come from joining directory names we read.
        self.procs.push(CString::new(procs.as_os_str().as_bytes()).unwrap_or_default());
        self.dirs.push((place.version, dir.clone()));
        Ok(dir)
    }

    fn set_memory(
        &self,
        version: CgroupVersion,
        dir: &Path,
        limit: u64,
    ) -> Result<(), CgroupSetupError> {
        let (file, optional): (&str, &[(&str, &str)]) = match version {
            // No swap to escape into; on OOM kill the whole group, not one process.
            CgroupVersion::V2 => {
                ("memory.max", &[("memory.swap.max", "0"), ("memory.oom.group", "1")])
            }
            CgroupVersion::V1 => ("memory.limit_in_bytes", &[]),
        };
        let path = dir.join(file);
        write_file(&path, &limit.to_string())
            .map_err(|source| CgroupSetupError { path, source })?;
        for (f, v) in optional {
            let _ = write_file(&dir.join(f), v);
        }
        if version == CgroupVersion::V1 {
            // Memory plus swap: only present with swap accounting; must follow the limit.
            let _ = write_file(&dir.join("memory.memsw.limit_in_bytes"), &limit.to_string());
        }
        Ok(())
    }

    /// `cgroup.procs` files the child writes "0" to before exec.
    pub(crate) fn procs_files(&self) -> &[CString] {
        &self.procs
    }

    /// Live members of any of the worker's cgroups.
    pub(crate) fn members(&self) -> Vec<u32> {
        let mut set = BTreeSet::new();
        for (_, dir) in &self.dirs {
            if let Ok(text) = fs::read_to_string(dir.join("cgroup.procs")) {
                set.extend(
                    text.lines()
                        .filter_map(|l| l.trim().parse::<u32>().ok())
                        .filter(|&p| procfs::is_running(p)),
                );
            }
        }
        set.into_iter().collect()
    }

    /// Sends `signal` to every member (catches processes that left the process group).
    pub(crate) fn signal(&self, signal: i32) {
        for pid in self.members() {
            // SAFETY: kill has no memory-safety preconditions; the pid is a member.
            unsafe { libc::kill(pid as libc::pid_t, signal) };
        }
    }

    /// SIGKILLs everything in the cgroup(s), waiting (bounded) until they are empty.
    pub(crate) fn kill_all(&self) {
        for (version, dir) in &self.dirs {
            if *version == CgroupVersion::V2 {
                // Kernels before 5.14 lack cgroup.kill; the loop below covers them.
                let _ = write_file(&dir.join("cgroup.kill"), "1");
            }
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if self.members().is_empty() || Instant::now() >= deadline {
                break;
            }
            // Without cgroup.kill (v1, old kernels) a forking process can race us: repeat.
            self.signal(libc::SIGKILL);
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Number of OOM kills in the memory cgroup.
    pub(crate) fn oom_kills(&self) -> u64 {
        let Some(dir) = &self.memory else { return 0 };
        let v2 = procfs::read_keyed(&dir.join("memory.events"), "oom_kill");
        v2.or_else(|| procfs::read_keyed(&dir.join("memory.oom_control"), "oom_kill")).unwrap_or(0)
    }

    /// OOM kills of the cgroup's members by any OOM killer, the machine's included: v2's
    /// `memory.events` counts them all; `None` on v1 (it counts only its own limit's kills).
    pub(crate) fn oom_kills_of_members(&self) -> Option<u64> {
        procfs::read_keyed(&self.memory.as_ref()?.join("memory.events"), "oom_kill")
    }

    /// Whether the memory cgroup reached its own limit (v2: `oom` of `memory.events`, which the
    /// kernel's global OOM killer does not count; v1: an OOM kill in the cgroup).
    pub(crate) fn limit_reached(&self) -> bool {
        let Some(dir) = &self.memory else { return false };
        match procfs::read_keyed(&dir.join("memory.events"), "oom") {
            Some(n) => n > 0,
            None => self.oom_kills() > 0,
        }
    }

    /// The most memory the cgroup has held (`memory.peak`, Linux 5.19+; v1's
    /// `memory.max_usage_in_bytes`).
    pub(crate) fn peak_bytes(&self) -> Option<u64> {
        let dir = self.memory.as_ref()?;
        ["memory.peak", "memory.max_usage_in_bytes"]
            .iter()
            .find_map(|f| fs::read_to_string(dir.join(f)).ok()?.trim().parse().ok())
    }

    /// Number of forks refused at `pids.max`.
    pub(crate) fn pids_max_hits(&self) -> u64 {
        let Some(dir) = &self.pids else { return 0 };
        procfs::read_keyed(&dir.join("pids.events"), "max").unwrap_or(0)
    }

    /// Kills what is left and removes the directories; retried briefly because a killed
    /// process leaves its cgroup only once it is fully gone.
    pub(crate) fn remove(&mut self) {
        if self.removed {
            return;
        }
        self.kill_all();
        for (_, dir) in &self.dirs {
            let deadline = Instant::now() + Duration::from_secs(2);
            loop {
                match fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    Err(e) if Instant::now() >= deadline => {
                        tracing::warn!(cgroup = %dir.display(), error = %e, "cannot remove a worker cgroup; leaving it behind");
                        break;
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        }
        self.removed = true;
    }
}

impl Drop for WorkerCgroup {
    fn drop(&mut self) {
        self.remove();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_lines_are_parsed_with_escapes() {
        let text = "30 23 0:26 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n\
                    31 23 0:27 /sub /sys/fs/cgroup/my\\040mem rw shared:9 - cgroup cgroup rw,memory\n";
        let m = parse_mountinfo(text);
        assert_eq!(m.len(), 2);
        assert_eq!(m[0].fstype, "cgroup2");
        assert_eq!(m[0].point, PathBuf::from("/sys/fs/cgroup/unified"));
        assert_eq!(m[1].point, PathBuf::from("/sys/fs/cgroup/my mem"));
        assert_eq!(m[1].super_opts, ["rw", "memory"]);
        assert_eq!(cgroup_dir(&m[1], "/sub/a/b"), PathBuf::from("/sys/fs/cgroup/my mem/a/b"));
    }

    #[test]
    fn the_maker_of_a_cgroup_is_read_from_its_name() {
        assert_eq!(owner("cudal1-41-9876-3"), Some((41, Some(9876))));
        assert_eq!(owner("cudal1-41-3"), Some((41, None)));
        assert_eq!(owner("cudal1-probe-41"), Some((41, None)));
        for other in ["cudal1-unit-41", "cudal1-41", "cudal1-4a-1", "cudal1-41-+1-2", "user.slice"]
        {
            assert_eq!(owner(other), None, "{other}");
        }
        assert!(name_stem().starts_with(&format!("cudal1-{}-", std::process::id())));
        assert!(owner(&format!("{}-0", name_stem())).is_some_and(|(_, start)| start.is_some()));
    }

    /// Leftovers of gone processes go; what a live process made, a cgroup with members (here: a
    /// directory with a file) and what is not ours stay. A plain directory stands in for the
    /// cgroup parent: removal is the same `rmdir`.
    #[test]
    fn cgroups_left_by_gone_processes_are_swept() {
        let parent = tempfile::tempdir().unwrap();
        let mut gone = std::process::Command::new("/bin/true").spawn().unwrap();
        let dead = gone.id();
        gone.wait().unwrap();
        let me = std::process::id();
        let live_start = procfs::stat(me).unwrap().start_time.unwrap();
        let names = [
            (format!("cudal1-{dead}-5-0"), false),
            (format!("cudal1-{dead}-1"), false),
            (format!("cudal1-probe-{dead}"), false),
            (format!("cudal1-{me}-{}-0", live_start + 1), false),
            (format!("{}-7", name_stem()), true),
            (format!("cudal1-{me}-2"), true),
            ("user.slice".to_string(), true),
        ];
        for (name, _) in &names {
            fs::create_dir(parent.path().join(name)).unwrap();
        }
        let busy = parent.path().join(format!("cudal1-{dead}-5-1"));
        fs::create_dir(&busy).unwrap();
        fs::write(busy.join("cgroup.procs"), "1").unwrap();
        assert_eq!(sweep_leftovers(parent.path()), 4);
        for (name, stays) in &names {
            assert_eq!(parent.path().join(name).exists(), *stays, "{name}");
        }
        assert!(busy.exists());
    }

    #[test]
    fn proc_cgroup_lines_are_parsed() {
        let parsed = parse_proc_cgroup("4:memory:/a/b\n2:cpu,cpuacct:/\n0::/x\n");
        assert_eq!(parsed[0], (vec!["memory".to_string()], "/a/b".to_string()));
        assert_eq!(parsed[1].0, ["cpu", "cpuacct"]);
        assert_eq!(parsed[2], (vec![], "/x".to_string()));
    }

    /// The v2 mechanics (make, join, kill, remove) need no controller, so they are checked
    /// on any writable cgroup2 mount, hybrid hosts included.
    #[test]
    fn a_v2_cgroup_is_joined_killed_and_removed() {
        let mounts = parse_mountinfo(&fs::read_to_string("/proc/self/mountinfo").unwrap());
        let ours = parse_proc_cgroup(&fs::read_to_string("/proc/self/cgroup").unwrap());
        let (Some(mount), Some((_, path))) = (
            mounts.iter().find(|m| m.fstype == "cgroup2"),
            ours.iter().find(|(c, _)| c.is_empty()),
        ) else {
            eprintln!("SKIP: no cgroup2 mount on this machine");
            return;
        };
        let parent = cgroup_dir(mount, path);
        let dir = parent.join(format!("cudal1-unit-{}", std::process::id()));
        if let Err(e) = fs::create_dir(&dir) {
            eprintln!("SKIP: cannot make a cgroup under {}: {e}", parent.display());
            return;
        }
        let mut cg = WorkerCgroup {
            dirs: vec![(CgroupVersion::V2, dir.clone())],
            memory: None,
            pids: None,
            procs: vec![],
            removed: false,
        };
        let mut child = std::process::Command::new("/bin/cat")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        write_file(&dir.join("cgroup.procs"), &child.id().to_string()).unwrap();
        assert_eq!(cg.members(), vec![child.id()]);
        cg.kill_all();
        let status = child.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGKILL));
        cg.remove();
        assert!(!dir.exists());
    }
}

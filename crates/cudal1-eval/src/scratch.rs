//! Where scratch files go. Runners hand outputs to each other through files, several GB per
//! candidate on tasks with ~1 GB outputs, so a memory-backed `/dev/shm` is preferred where it has
//! room and the host has memory to spare besides (on a disk-backed temp directory those files took
//! most of an evaluation's time); `CUDAL1_WORK_DIR` chooses the place by hand.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The environment variable that names the scratch directory's parent.
pub const WORK_DIR_VAR: &str = "CUDAL1_WORK_DIR";

/// Free space `/dev/shm` must have to be chosen.
const SHM_ROOM: u64 = 16 << 30;
/// Memory the host must have available besides, since files in `/dev/shm` are held in memory.
const HOST_MARGIN: u64 = 2 * SHM_ROOM;

/// The directory to make scratch directories in: [`WORK_DIR_VAR`], else `/dev/shm` when it has
/// room and leaves a safe margin of the host's memory, else the system temp directory.
pub fn default_parent() -> PathBuf {
    if let Some(p) = std::env::var_os(WORK_DIR_VAR).filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let shm = Path::new("/dev/shm");
    let roomy = free_bytes(shm).is_some_and(|free| free >= SHM_ROOM) && writable(shm);
    let spare = available_memory().is_some_and(|m| m >= HOST_MARGIN);
    if roomy && spare {
        shm.to_owned()
    } else {
        std::env::temp_dir()
    }
}

/// The file an engine's scratch directory holds, locked by the engine for as long as it lives.
pub const OWNER_FILE: &str = ".cudal1-owner";

/// Marks `dir` as in use by this process for as long as the returned lock is held: a later
/// [`sweep`] leaves it alone. The file is locked before it gets its name, so that no sweep can
/// find it unlocked in between.
pub(crate) fn claim(dir: &Path) -> std::io::Result<nix::fcntl::Flock<std::fs::File>> {
    let unnamed = dir.join(format!("{OWNER_FILE}.new"));
    let file = std::fs::OpenOptions::new().create_new(true).write(true).open(&unnamed)?;
    let lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|(_, e)| std::io::Error::from(e))?;
    std::fs::rename(&unnamed, dir.join(OWNER_FILE))?;
    Ok(lock)
}

/// Removes the scratch directories (`cudal1-*` under `parent`) that engines left behind when they
/// were killed (SIGKILL, the OOM killer, a crash): their owner file is no longer locked. In a
/// memory-backed `/dev/shm` such leftovers hold tens of GB of the host's memory. Directories
/// without an owner file (older cudal1, other programs) are left alone. Returns how many went.
pub(crate) fn sweep(parent: &Path) -> usize {
    let mut removed = 0;
    for entry in std::fs::read_dir(parent).into_iter().flatten().flatten() {
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if !is_dir || !entry.file_name().to_string_lossy().starts_with("cudal1-") {
            continue;
        }
        let dir = entry.path();
        let owner = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(dir.join(OWNER_FILE));
        let Ok(owner) = owner else { continue };
        // Held by a live engine (in this process or another): the lock is refused.
        let Ok(unlocked) =
            nix::fcntl::Flock::lock(owner, nix::fcntl::FlockArg::LockExclusiveNonblock)
        else {
            continue;
        };
        match remove_settled(&dir) {
            Ok(()) => {
                removed += 1;
                tracing::info!(dir = %dir.display(), "removed the scratch directory of an engine that was killed");
            }
            Err(e) => {
                tracing::warn!(dir = %dir.display(), error = %e, "could not remove the scratch directory of an engine that was killed")
            }
        }
        drop(unlocked);
    }
    removed
}

/// Removes `dir`, again for up to a second while that fails: the processes of an engine that was
/// just killed may still be dying (its runners die after their fork server, which dies after the
/// engine), and a file one of them makes meanwhile fails the removal.
fn remove_settled(dir: &Path) -> std::io::Result<()> {
    let mut tries = 0;
    loop {
        match std::fs::remove_dir_all(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if tries >= 10 => return Err(e),
            Err(_) => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}

/// Whether files under `dir` are held in the host's memory (tmpfs, as `/dev/shm` is).
pub fn in_memory(dir: &Path) -> bool {
    nix::sys::statfs::statfs(dir)
        .is_ok_and(|st| st.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
}

fn free_bytes(dir: &Path) -> Option<u64> {
    let st = nix::sys::statvfs::statvfs(dir).ok()?;
    Some(st.blocks_available() as u64 * st.fragment_size() as u64)
}

fn writable(dir: &Path) -> bool {
    nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
}

/// `MemAvailable` of `/proc/meminfo`, in bytes.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_field(&text, "MemAvailable:")
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
pub fn total_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_field(&text, "MemTotal:")
}

fn meminfo_field(text: &str, field: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line[field.len()..].trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_available_memory_from_meminfo() {
        let text =
            "MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(meminfo_field(text, "MemAvailable:"), Some(20_000_000 * 1024));
        assert_eq!(meminfo_field(text, "Nope:"), None);
        assert!(available_memory().is_some_and(|m| m > 0));
    }

    #[test]
    fn memory_backed_directories_are_told_from_disk_ones() {
        // /proc is not tmpfs; /dev/shm is on Linux machines that have it (CI's and the GPUs').
        assert!(!in_memory(Path::new("/proc")));
        assert!(!in_memory(Path::new("/no/such/dir")));
        if std::fs::read_to_string("/proc/mounts").is_ok_and(|m| {
            m.lines().any(|l| l.split(' ').nth(1) == Some("/dev/shm") && l.contains(" tmpfs "))
        }) {
            assert!(in_memory(Path::new("/dev/shm")));
        }
    }

    #[test]
    fn a_sweep_removes_only_scratch_left_by_engines_that_are_gone() {
        let parent = tempfile::tempdir().unwrap();
        let dir = |name: &str| {
            let d = parent.path().join(name);
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("expected-0.pt"), vec![0u8; 4096]).unwrap();
            d
        };
        // Left by a killed engine: its owner file is there, and nobody holds it.
        let stale = dir("cudal1-stale");
        drop(claim(&stale).unwrap());
        // A live engine's: claimed and held.
        let live = dir("cudal1-live");
        let held = claim(&live).unwrap();
        // Not an engine's (no owner file), and not named as one.
        let unowned = dir("cudal1-unowned");
        let other = dir("other-program");
        std::fs::write(other.join(OWNER_FILE), "").unwrap();

        assert_eq!(sweep(parent.path()), 1);
        assert!(!stale.exists());
        assert!(live.join("expected-0.pt").exists() && unowned.exists() && other.exists());

        drop(held);
        assert_eq!(sweep(parent.path()), 1);
        assert!(!live.exists() && unowned.exists());
    }

    #[test]
    fn the_chosen_parent_exists() {
        assert!(default_parent().is_dir());
    }
}

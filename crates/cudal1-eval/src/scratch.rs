//! Where scratch files go. Runners hand outputs to each other through files, several GB per
//! candidate on tasks with ~1 GB outputs, so a memory-backed `/dev/shm` is preferred where it has
//! room and the host has memory to spare besides (on a disk-backed temp directory those files took
//! most of an evaluation's time); `CUDAL1_WORK_DIR` chooses the place by hand.

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
        let text = "MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(meminfo_field(text, "MemAvailable:"), Some(20_000_000 * 1024));
        assert_eq!(meminfo_field(text, "Nope:"), None);
        assert!(available_memory().is_some_and(|m| m > 0));
    }

    #[test]
    fn the_chosen_parent_exists() {
        assert!(default_parent().is_dir());
    }
}

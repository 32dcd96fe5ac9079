//! The live-child registry: every worker that was [`Worker::enlist`]ed with the scope it works in
//! (a scratch directory) and its class, until its group is gone. [`kill_under`] ends at once every
//! enlisted worker working below a directory (an engine stopping now), and keeps killing those
//! that enlist there afterwards: a start that was under way (a fork server still importing torch)
//! must not outlive the kill.
//!
//! [`Worker::enlist`]: crate::Worker::enlist

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::procfs;

struct Entry {
    /// The worker's leader: its process group's id.
    pid: u32,
    /// When the leader started, so that a group id taken over by another process is not signalled.
    start_time: Option<u64>,
    scope: PathBuf,
    class: &'static str,
}

struct Registry {
    live: Vec<Entry>,
    /// Scopes killed so far, and of which class (`None`: every class).
    killed: Vec<(PathBuf, Option<&'static str>)>,
}

static LIVE: Mutex<Registry> = Mutex::new(Registry { live: Vec::new(), killed: Vec::new() });

fn registry() -> MutexGuard<'static, Registry> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn kill_group(entry: &Entry) {
    if procfs::group_is_ours(entry.pid as i32, entry.start_time) {
        // The group is still the worker's. A sandboxed worker's keeper is spared until it has
        // reaped its namespace ([`crate::kill_worker_group`]), so nothing is left to PID 1.
        crate::kill_worker_group(entry.pid);
    }
}

fn matches(scope: &Path, class: &'static str, root: &Path, only: Option<&'static str>) -> bool {
    scope.starts_with(root) && only.is_none_or(|c| c == class)
}

/// A worker's entry in the registry; removing it is the worker's last act once its group is gone.
#[derive(Debug)]
pub(crate) struct Enlisted(u32);

/// Records the worker led by `pid`, and kills its group at once where its scope was killed before.
pub(crate) fn enlist(
    pid: u32,
    start_time: Option<u64>,
    scope: &Path,
    class: &'static str,
) -> Enlisted {
    let mut registry = registry();
    let entry = Entry { pid, start_time, scope: scope.to_owned(), class };
    if registry.killed.iter().any(|(root, only)| matches(scope, class, root, *only)) {
        kill_group(&entry);
    }
    registry.live.push(entry);
    Enlisted(pid)
}

impl Drop for Enlisted {
    fn drop(&mut self) {
        let live = &mut registry().live;
        if let Some(i) = live.iter().position(|e| e.pid == self.0) {
            live.swap_remove(i);
        }
    }
}

/// Kills the whole process group of every enlisted worker whose scope is `root` or below it, now
/// and whenever one enlists there later; their callers then get errors at once.
pub fn kill_under(root: &Path) {
    kill(root, None);
}

/// As [`kill_under`], for the workers of one class only (extension builds, say).
pub fn kill_class_under(root: &Path, class: &'static str) {
    kill(root, Some(class));
}

fn kill(root: &Path, only: Option<&'static str>) {
    let mut registry = registry();
    registry.killed.push((root.to_owned(), only));
    for entry in &registry.live {
        if matches(&entry.scope, entry.class, root, only) {
            kill_group(entry);
        }
    }
}

/// How many enlisted workers are live below `root` (for tests and logs).
#[must_use]
pub fn live_under(root: &Path) -> usize {
    registry().live.iter().filter(|e| e.scope.starts_with(root)).count()
}

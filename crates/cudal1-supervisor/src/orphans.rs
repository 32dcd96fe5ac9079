//! Orphans: the supervisor adopts every process its workers and fork servers leave behind, and
//! reaps it, so that nothing it started ends as a zombie of an init that does not reap (a
//! container's PID 1 often does not).
//!
//! A process whose parent dies goes to the nearest living ancestor that is a *child subreaper*
//! (`PR_SET_CHILD_SUBREAPER`), else to init. [`adopt`] makes this process one; [`reap`] (run
//! every second by the thread [`adopt`] starts) waits for the adopted orphans that have ended;
//! [`end`], before the process exits, kills those still running and waits for them. Each
//! keeper kills and reaps its PID namespace before it ends (`pid_namespace.rs`), and a worker
//! is killed namespace first, keeper last ([`crate::Worker`]); this is the net under that: a
//! keeper killed anyway (a second Ctrl-C, a fork server ending), a fork server's children when it
//! is killed, a trusted worker's own orphans.
//!
//! Which children are orphans, without taking an exit status someone else waits for: a child
//! of this process that the supervisor spawned ([`crate::spawner`]) is registered, with its
//! start time, while the spawn is made, under the same lock that [`reap`] holds while it looks
//! and waits, so no child of the spawner is ever seen unregistered. Every other process this
//! process starts itself (a probe of the interpreter, `ncu`, `c++filt`, through
//! `std::process::Command` anywhere in the program) stays in this process's session, and its
//! owner waits for it; every orphan comes from a worker or a fork server, which lead sessions of
//! their own, as do their descendants unless they start one of their own again. So a child is
//! waited for here only if it is in another session and not registered. `waitpid(pid, WNOHANG)`
//! on such a child cannot race with anyone: only a parent may wait for a child, the process's
//! other waits name their own children by pid (`std` and the supervisor never wait for `-1`), and
//! a child's pid is not given to another process until its parent has waited for it.

use std::collections::HashSet;
use std::io;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::procfs;

/// How often the reaping thread looks for orphans that ended.
const PERIOD: Duration = Duration::from_secs(1);

/// Children the supervisor spawned, by pid and start time; also the lock that spawns and
/// [`reap`] take in turn.
static SPAWNED: Mutex<Vec<(u32, Option<u64>)>> = Mutex::new(Vec::new());

/// This process's session, once [`adopt`] has run: children outside it may be orphans.
static SESSION: OnceLock<i32> = OnceLock::new();

pub(crate) fn spawned() -> MutexGuard<'static, Vec<(u32, Option<u64>)>> {
    SPAWNED.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Records a child just spawned (the caller holds [`spawned`]'s guard from before the spawn).
pub(crate) fn register(list: &mut Vec<(u32, Option<u64>)>, pid: u32) {
    // It is our child, not yet waited for by anyone: its pid names it.
    list.push((pid, procfs::stat(pid).and_then(|s| s.start_time)));
}

/// Makes this process a child subreaper and starts a thread that reaps the orphans it adopts
/// (see the module's notes). Call once, early, before any worker starts.
///
/// # Errors
/// When the kernel refuses `PR_SET_CHILD_SUBREAPER` (before Linux 3.4): orphans then go to init,
/// as before.
pub fn adopt() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: getsid(0) has no preconditions.
    let _ = SESSION.set(unsafe { libc::getsid(0) });
    std::thread::Builder::new().name("cudal1-reaper".into()).spawn(|| loop {
        std::thread::sleep(PERIOD);
        reap();
    })?;
    Ok(())
}

/// Whether this process adopts orphans ([`adopt`] ran and took).
#[must_use]
pub fn adopting() -> bool {
    SESSION.get().is_some()
}

/// The children of this process that are adopted orphans, with whether each has ended (a
/// zombie). The caller holds [`spawned`]'s guard, which this prunes of children gone.
fn orphans(spawned: &mut Vec<(u32, Option<u64>)>) -> Vec<(u32, bool)> {
    let Some(&session) = SESSION.get() else { return Vec::new() };
    let me = i32::try_from(std::process::id()).unwrap_or(i32::MAX);
    let children: Vec<(u32, procfs::Stat)> = procfs::all_pids()
        .into_iter()
        .filter_map(|pid| procfs::stat(pid).filter(|s| s.ppid == me).map(|s| (pid, s)))
        .collect();
    let live: HashSet<(u32, Option<u64>)> =
        children.iter().map(|(pid, s)| (*pid, s.start_time)).collect();
    spawned.retain(|entry| live.contains(entry));
    children
        .into_iter()
        .filter(|(pid, s)| s.session != session && !spawned.contains(&(*pid, s.start_time)))
        .map(|(pid, s)| (pid, s.state == 'Z' || s.state == 'X'))
        .collect()
}

/// Waits for child `pid` if it has ended; whether it was reaped.
fn wait_ended(pid: u32) -> bool {
    let mut status = 0;
    // SAFETY: a valid pointer to a local; `pid` is an adopted orphan, which no one else waits for.
    unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG | libc::__WALL) > 0 }
}

/// Reaps the adopted orphans that have ended; how many.
pub fn reap() -> usize {
    let mut spawned = spawned();
    let ended: Vec<u32> =
        orphans(&mut spawned).into_iter().filter(|(_, z)| *z).map(|(pid, _)| pid).collect();
    let reaped = ended.into_iter().filter(|&pid| wait_ended(pid)).count();
    if reaped > 0 {
        tracing::debug!(reaped, "reaped orphans");
    }
    reaped
}

/// Before exit: kills the adopted orphans still running and reaps every one, for up to
/// `within`. How many were left unreaped (a process stuck in the kernel, say in a GPU driver's
/// teardown: it goes to init when this process exits).
pub fn end(within: Duration) -> usize {
    if !adopting() {
        return 0;
    }
    let deadline = Instant::now() + within;
    loop {
        let left = {
            let mut spawned = spawned();
            let mut left = 0;
            for (pid, ended) in orphans(&mut spawned) {
                if ended {
                    if !wait_ended(pid) {
                        left += 1;
                    }
                } else {
                    // SAFETY: kill has no memory-safety preconditions; the pid is our child, not
                    // waited for yet, so it names the orphan.
                    unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                    left += 1;
                }
            }
            left
        };
        if left == 0 || Instant::now() >= deadline {
            if left > 0 {
                tracing::warn!(left, "orphans could not be reaped before exit");
            }
            return left;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

//! All workers are forked from one long-lived thread. `PR_SET_PDEATHSIG` fires when the
//! *thread* that forked a child exits, so forking from a caller's short-lived thread would
//! kill the worker with that thread; this thread lives as long as the process. Each child is
//! registered as it is spawned (`orphans`): the supervisor waits for it, the orphan reaper never.

use std::io;
use std::process::{Child, Command};
use std::sync::OnceLock;

use crossbeam_channel::{bounded, unbounded, Sender};

type Job = (Command, Sender<io::Result<Child>>);

static SPAWNER: OnceLock<Option<Sender<Job>>> = OnceLock::new();

fn spawner() -> Option<&'static Sender<Job>> {
    SPAWNER
        .get_or_init(|| {
            let (tx, rx) = unbounded::<Job>();
            let started = std::thread::Builder::new().name("cudal1-spawner".into()).spawn(move || {
                for (command, reply) in rx {
                    let _ = reply.send(spawn_here(command));
                }
            });
            match started {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the spawner thread; workers are forked from the calling thread");
                    None
                }
            }
        })
        .as_ref()
}

/// Spawns `command` from the spawner thread.
pub(crate) fn spawn(command: Command) -> io::Result<Child> {
    let Some(jobs) = spawner() else { return spawn_here(command) };
    let (tx, rx) = bounded(1);
    jobs.send((command, tx)).map_err(|_| io::Error::other("the spawner thread is gone"))?;
    rx.recv().map_err(|_| io::Error::other("the spawner thread is gone"))?
}

/// Spawns `command` on this thread, registered before anyone can look for orphans.
fn spawn_here(mut command: Command) -> io::Result<Child> {
    let mut spawned = crate::orphans::spawned();
    let child = command.spawn()?;
    crate::orphans::register(&mut spawned, child.id());
    Ok(child)
}

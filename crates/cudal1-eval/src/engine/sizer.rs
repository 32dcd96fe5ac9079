//! Tasks sized ahead of their jobs. Admission by memory needs each task's footprint on meta
//! tensors before its first job may start ([`crate::memory::Footprint`]); sized by the lane that
//! picked the job, the first job of each lane waited for a runner to start (~2-3 s on an H100
//! machine) and every new task for its sizing, with the device idle meanwhile: CUDA-L1's 40-row
//! batch in correctness mode lost a quarter of its rate. Here one runner of the engine, started
//! with it, sizes every task as its first job is submitted, while compiles and interpreters start;
//! a lane waits only for what is not sized yet. (Started at the first request instead, its cold
//! interpreter still came after the lanes' forked ones: the first jobs waited 0.6-0.8 s each on an
//! H100, docs/bench/2026-11-27-gpu-session22; 11.2 s against 6.4 s started with the engine, over
//! tests/suite-cpu on a loaded 2-core machine.)

use super::Shared;
use crate::memory::Footprint;
use crate::reference::Describer;
use crate::settings::EvalSettings;
use crossbeam_channel::{unbounded, Receiver, Sender};
use cudal1_task::Task;
use std::collections::HashSet;
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

/// A task to size, under its key in [`Shared::footprints`].
pub(super) struct Request {
    pub key: String,
    pub task: Arc<Task>,
    pub settings: EvalSettings,
}

/// The keys asked for and not answered yet, and the signal that one was answered.
#[derive(Default)]
pub(super) struct Pending {
    keys: Mutex<HashSet<String>>,
    answered: Condvar,
}

impl Pending {
    /// Marks `key` as asked for; false when it was already.
    pub(super) fn ask(&self, key: &str) -> bool {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner).insert(key.to_owned())
    }

    pub(super) fn answer(&self, key: &str) {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner).remove(key);
        self.answered.notify_all();
    }

    /// Waits until `key` is no longer pending or `limit` has passed; true when it was answered.
    pub(super) fn wait(&self, key: &str, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        while keys.contains(key) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            keys = self.answered.wait_timeout(keys, left).unwrap_or_else(PoisonError::into_inner).0;
        }
        true
    }
}

/// The sending end; dropping it ends the sizing thread once it has answered what was asked.
pub(super) type Asks = Sender<Request>;

pub(super) fn channel() -> (Asks, Receiver<Request>) {
    unbounded()
}

/// The sizing thread: answers requests in order with one runner, kept from one task to the next
/// (started again if it dies). It holds the engine only weakly, so that it never keeps it alive.
pub(super) fn run(shared: Weak<Shared>, requests: Receiver<Request>) {
    // Started with the engine, not at the first request: its interpreter imports torch while the
    // lanes' processes start, instead of after (the first jobs waited for it: `device_wait`).
    let mut describer = shared.upgrade().and_then(|s| start(&s));
    for Request { key, task, settings } in requests.iter() {
        let Some(shared) = shared.upgrade() else { break };
        let footprint =
            if shared.cancelled() { None } else { size(&shared, &mut describer, &task, &settings) };
        shared
            .footprints
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.clone(), footprint);
        shared.sizing.answer(&key);
    }
    if let Some(d) = describer {
        d.shutdown();
    }
}

/// The sizing runner, unless the engine is cancelled or it cannot start.
fn start(shared: &Shared) -> Option<Describer> {
    if shared.cancelled() {
        return None;
    }
    Describer::start(&shared.config.env, &shared.scratch)
        .map_err(|(doing, e)| tracing::debug!(error = %e, doing, "no runner to size tasks ahead; their jobs are admitted on overheads alone"))
        .ok()
}

fn size(
    shared: &Shared,
    describer: &mut Option<Describer>,
    task: &Task,
    settings: &EvalSettings,
) -> Option<Footprint> {
    let mut d = describer.take().or_else(|| start(shared))?;
    let result = d.size(task, settings);
    if d.alive(&result) {
        *describer = Some(d);
    } else {
        d.shutdown();
    }
    result.unwrap_or_else(|e| {
        tracing::debug!(error = %e, "the task could not be sized; admitting on overheads alone");
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lane_waits_for_a_key_asked_of_the_sizer_until_it_is_answered_and_not_for_others() {
        let pending = Arc::new(Pending::default());
        assert!(pending.ask("a"));
        assert!(!pending.ask("a"), "asked once");
        // Never asked: no wait.
        assert!(pending.wait("b", Duration::from_secs(5)));
        // Not answered within the limit.
        let t0 = Instant::now();
        assert!(!pending.wait("a", Duration::from_millis(50)));
        assert!(t0.elapsed() >= Duration::from_millis(50));
        let answering = {
            let pending = Arc::clone(&pending);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                pending.answer("a");
            })
        };
        assert!(pending.wait("a", Duration::from_secs(10)), "answered while it waited");
        answering.join().unwrap();
        assert!(pending.ask("a"), "an answered key may be asked again");
    }
}

//! Requests waiting for jobs: each registers one `Notify` under the jobs it waits for, and a
//! thread turns the queue's signals (`NOTIFY` on PostgreSQL, in-process on SQLite) into wake-ups.
//! A lost connection's resync wakes everyone; waiters also look again every poll interval, so
//! a missed signal costs at most that long.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use crossbeam_channel::Receiver;
use cudal1_store::QueueSignal;
use tokio::sync::Notify;

#[derive(Default)]
pub struct Waiters {
    by_job: Mutex<HashMap<i64, Vec<Weak<Notify>>>>,
}

impl Waiters {
    /// Wakes `notify` when any of `jobs` finishes.
    pub fn register(&self, jobs: &[i64], notify: &Arc<Notify>) {
        let mut map = self.by_job.lock().unwrap_or_else(PoisonError::into_inner);
        for id in jobs {
            let list = map.entry(*id).or_default();
            list.retain(|w| w.strong_count() > 0);
            list.push(Arc::downgrade(notify));
        }
    }

    fn wake(&self, job: i64) {
        let list = self.by_job.lock().unwrap_or_else(PoisonError::into_inner).remove(&job);
        for n in list.into_iter().flatten().filter_map(|w| w.upgrade()) {
            n.notify_one();
        }
    }

    pub fn wake_all(&self) {
        let map = std::mem::take(&mut *self.by_job.lock().unwrap_or_else(PoisonError::into_inner));
        for n in map.into_values().flatten().filter_map(|w| w.upgrade()) {
            n.notify_one();
        }
    }

    /// Dispatches signals until the queue's side goes away.
    pub fn dispatch(self: &Arc<Self>, signals: Receiver<QueueSignal>) {
        let me = Arc::clone(self);
        std::thread::Builder::new()
            .name("serve-signals".into())
            .spawn(move || {
                for s in signals {
                    match s {
                        QueueSignal::Finished(id) => me.wake(id),
                        QueueSignal::Resync => me.wake_all(),
                        QueueSignal::Queued => {}
                    }
                }
            })
            .expect("the system can start a thread");
    }
}

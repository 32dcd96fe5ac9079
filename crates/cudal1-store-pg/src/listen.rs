//! `LISTEN`: one thread per store with its own connection hears the queue's notifications and
//! hands them to every subscriber. When the connection is lost (the server restarts) it
//! reconnects, and then tells subscribers to check everything again, since notifications sent
//! in between are gone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crossbeam_channel::Sender;
use cudal1_store::QueueSignal;
use postgres::fallible_iterator::FallibleIterator;

use crate::pool::Pool;
use crate::CHANNEL;

#[derive(Default)]
pub(crate) struct Subscribers {
    list: Mutex<Vec<Sender<QueueSignal>>>,
    pub(crate) stop: AtomicBool,
}

impl Subscribers {
    pub(crate) fn add(&self, tx: Sender<QueueSignal>) {
        self.list.lock().unwrap_or_else(PoisonError::into_inner).push(tx);
    }

    pub(crate) fn send(&self, signal: &QueueSignal) {
        self.list
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|s| s.send(signal.clone()).is_ok());
    }
}

/// The signal a notification's payload carries (`q`, or `f:<job id>`).
fn parse(payload: &str) -> Option<QueueSignal> {
    match payload {
        "q" => Some(QueueSignal::Queued),
        _ => payload.strip_prefix("f:")?.parse().ok().map(QueueSignal::Finished),
    }
}

/// Listens until `subs.stop` is set.
pub(crate) fn run(pool: &Pool, subs: &Arc<Subscribers>) {
    let mut pause = Duration::from_millis(50);
    let mut first = true;
    while !subs.stop.load(Ordering::SeqCst) {
        let mut client = match pool
            .connect()
            .and_then(|mut c| c.batch_execute(&format!("LISTEN {CHANNEL}")).map(|()| c))
        {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(store = %pool.describe, error = %e, "cannot listen yet; retrying");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(1));
                continue;
            }
        };
        pause = Duration::from_millis(50);
        if !first {
            tracing::info!(store = %pool.describe, "listening again after a lost connection");
            subs.send(&QueueSignal::Resync);
        }
        first = false;
        let mut quiet_rounds = 0_u32;
        'connected: while !subs.stop.load(Ordering::SeqCst) {
            let mut notes = client.notifications();
            let mut iter = notes.timeout_iter(Duration::from_millis(250));
            loop {
                match iter.next() {
                    Ok(Some(n)) => {
                        if let Some(signal) = parse(n.payload()) {
                            subs.send(&signal);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(store = %pool.describe, error = %e, "lost the notification connection");
                        break 'connected;
                    }
                    Ok(None) => break,
                }
            }
            drop(iter);
            drop(notes);
            // A server that went away is noticed by the next statement: try one every few seconds.
            quiet_rounds += 1;
            if client.is_closed() || (quiet_rounds % 16 == 0 && client.simple_query("").is_err()) {
                break 'connected;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_become_signals() {
        assert_eq!(parse("q"), Some(QueueSignal::Queued));
        assert_eq!(parse("f:42"), Some(QueueSignal::Finished(42)));
        assert_eq!(parse("f:x"), None);
        assert_eq!(parse("other"), None);
    }
}

//! A device's timing slot: a full evaluation holds the device alone (nothing else may run on it
//! while a candidate is timed); correctness checks share it with each other. A waiting full
//! evaluation goes before correctness checks that arrive after it, so timing is never starved.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[derive(Default)]
struct State {
    exclusive: bool,
    shared: usize,
    exclusive_waiting: usize,
    /// Time the device was held alone (timing slot busy), for the engine's statistics.
    exclusive_busy: Duration,
}

#[derive(Default)]
pub(crate) struct Gate {
    state: Mutex<State>,
    changed: Condvar,
}

/// Held while a device is in use; releasing it lets the next evaluation in.
pub(crate) struct Held<'a> {
    gate: &'a Gate,
    exclusive: bool,
    since: Instant,
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn wait<'a>(&self, s: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits until the device is free of every other evaluation.
    pub(crate) fn exclusive(&self) -> Held<'_> {
        let mut s = self.lock();
        s.exclusive_waiting += 1;
        while s.exclusive || s.shared > 0 {
            s = self.wait(s);
        }
        s.exclusive_waiting -= 1;
        s.exclusive = true;
        Held { gate: self, exclusive: true, since: Instant::now() }
    }

    /// Waits until no full evaluation holds the device or waits for it.
    pub(crate) fn shared(&self) -> Held<'_> {
        let mut s = self.lock();
        while s.exclusive || s.exclusive_waiting > 0 {
            s = self.wait(s);
        }
        s.shared += 1;
        Held { gate: self, exclusive: false, since: Instant::now() }
    }

    /// How long the device has been held alone, in all.
    pub(crate) fn exclusive_busy(&self) -> Duration {
        self.lock().exclusive_busy
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut s = self.gate.lock();
        if self.exclusive {
            s.exclusive = false;
            s.exclusive_busy += self.since.elapsed();
        } else {
            s.shared -= 1;
        }
        drop(s);
        self.gate.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn shared_holders_overlap_and_an_exclusive_one_waits_for_them() {
        let gate = Arc::new(Gate::default());
        let a = gate.shared();
        let b = gate.shared();
        let done = Arc::new(AtomicUsize::new(0));
        let waiter = {
            let (gate, done) = (Arc::clone(&gate), Arc::clone(&done));
            std::thread::spawn(move || {
                let _held = gate.exclusive();
                done.store(1, Ordering::SeqCst);
            })
        };
        // The exclusive holder cannot get in while either shared holder is there.
        while gate.lock().exclusive_waiting == 0 {
            std::thread::yield_now();
        }
        assert_eq!(done.load(Ordering::SeqCst), 0);
        drop(a);
        assert_eq!(done.load(Ordering::SeqCst), 0);
        drop(b);
        waiter.join().unwrap();
        assert_eq!(done.load(Ordering::SeqCst), 1);
        assert!(!gate.lock().exclusive);
    }

    #[test]
    fn a_waiting_exclusive_holder_goes_before_later_shared_ones() {
        let gate = Arc::new(Gate::default());
        let first = gate.shared();
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let exclusive = {
            let (gate, order) = (Arc::clone(&gate), Arc::clone(&order));
            std::thread::spawn(move || {
                let _held = gate.exclusive();
                order.lock().unwrap().push("exclusive");
            })
        };
        while gate.lock().exclusive_waiting == 0 {
            std::thread::yield_now();
        }
        let shared = {
            let (gate, order) = (Arc::clone(&gate), Arc::clone(&order));
            std::thread::spawn(move || {
                let _held = gate.shared();
                order.lock().unwrap().push("shared");
            })
        };
        drop(first);
        exclusive.join().unwrap();
        shared.join().unwrap();
        assert_eq!(*order.lock().unwrap(), ["exclusive", "shared"]);
        assert!(gate.exclusive_busy() > Duration::ZERO);
    }
}

//! A counting semaphore for blocking callers: at most `limit` requests of one
//! client (and all its clones) are in flight at once.

use std::sync::{Arc, Condvar, Mutex};

#[derive(Debug)]
struct State {
    in_use: Mutex<usize>,
    freed: Condvar,
}

/// Clones share the same permits.
#[derive(Debug, Clone)]
pub(crate) struct Limiter {
    state: Arc<State>,
    limit: usize,
}

/// Returns its permit when dropped, also on panic or early return.
#[derive(Debug)]
pub(crate) struct Permit<'a> {
    limiter: &'a Limiter,
}

impl Limiter {
    /// `limit` must be at least 1 (checked by the client's config).
    pub(crate) fn new(limit: usize) -> Self {
        Self { state: Arc::new(State { in_use: Mutex::new(0), freed: Condvar::new() }), limit }
    }

    pub(crate) fn acquire(&self) -> Permit<'_> {
        let mut in_use =
            self.state.in_use.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while *in_use >= self.limit {
            in_use =
                self.state.freed.wait(in_use).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        *in_use += 1;
        Permit { limiter: self }
    }

    #[cfg(test)]
    fn in_use(&self) -> usize {
        *self.state.in_use.lock().unwrap()
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let state = &self.limiter.state;
        let mut in_use = state.in_use.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *in_use -= 1;
        state.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn permits_are_returned_on_drop() {
        let l = Limiter::new(2);
        let a = l.acquire();
        let b = l.acquire();
        assert_eq!(l.in_use(), 2);
        drop(a);
        assert_eq!(l.in_use(), 1);
        drop(b);
        assert_eq!(l.in_use(), 0);
    }

    #[test]
    fn a_waiter_proceeds_once_a_permit_is_freed() {
        let l = Limiter::new(1);
        let held = l.acquire();
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|s| {
            let l2 = l.clone();
            s.spawn(move || {
                let _p = l2.acquire();
                tx.send(()).unwrap();
            });
            // The waiter cannot have a permit while we hold the only one.
            assert!(rx.try_recv().is_err());
            drop(held);
            rx.recv().unwrap();
        });
        assert_eq!(l.in_use(), 0);
    }
}

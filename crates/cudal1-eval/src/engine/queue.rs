//! A blocking priority queue shared by threads: higher priority first, then first in, first out.
//! A taker may skip entries it cannot serve (a lane that only runs correctness checks).

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};

pub(crate) struct Queue<T> {
    state: Mutex<State<T>>,
    changed: Condvar,
}

struct State<T> {
    /// Keyed by (negated priority, arrival), so iteration order is service order.
    items: BTreeMap<(i64, u64), T>,
    next: u64,
    closed: bool,
}

impl<T> Queue<T> {
    pub(crate) fn new() -> Queue<T> {
        Queue {
            state: Mutex::new(State { items: BTreeMap::new(), next: 0, closed: false }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        // A panicking holder leaves the map consistent (every operation is one map call).
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds an item; false (and the item is dropped) once the queue is closed.
    pub(crate) fn push(&self, priority: i32, item: T) -> Result<(), T> {
        let mut s = self.lock();
        if s.closed {
            return Err(item);
        }
        let n = s.next;
        s.next += 1;
        s.items.insert((-i64::from(priority), n), item);
        drop(s);
        self.changed.notify_all();
        Ok(())
    }

    /// The first item `accept` takes, waiting for one; None once the queue is closed and holds
    /// nothing `accept` takes.
    pub(crate) fn pop(&self, accept: impl Fn(&T) -> bool) -> Option<T> {
        let mut s = self.lock();
        loop {
            if let Some(key) = s.items.iter().find(|(_, v)| accept(v)).map(|(k, _)| *k) {
                return s.items.remove(&key);
            }
            if s.closed {
                return None;
            }
            s = self.changed.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// As [`Queue::pop`] without waiting.
    pub(crate) fn try_pop(&self, accept: impl Fn(&T) -> bool) -> Option<T> {
        let mut s = self.lock();
        let key = s.items.iter().find(|(_, v)| accept(v)).map(|(k, _)| *k)?;
        s.items.remove(&key)
    }

    /// Takes everything still queued (for cancelling).
    pub(crate) fn drain(&self) -> Vec<T> {
        let mut s = self.lock();
        std::mem::take(&mut s.items).into_values().collect()
    }

    /// No more pushes; takers get what is left, then None.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().items.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn higher_priority_first_then_arrival_order() {
        let q = Queue::new();
        for (p, v) in [(0, "a"), (5, "b"), (0, "c"), (5, "d"), (-1, "e")] {
            q.push(p, v).unwrap();
        }
        let order: Vec<&str> = std::iter::from_fn(|| q.try_pop(|_| true)).collect();
        assert_eq!(order, ["b", "d", "a", "c", "e"]);
    }

    #[test]
    fn a_taker_skips_what_it_cannot_serve() {
        let q = Queue::new();
        q.push(9, 1).unwrap();
        q.push(0, 2).unwrap();
        assert_eq!(q.try_pop(|v| v % 2 == 0), Some(2));
        assert_eq!(q.try_pop(|v| v % 2 == 0), None);
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn a_waiting_taker_wakes_for_a_push_and_ends_at_close() {
        let q = Arc::new(Queue::new());
        let taker = {
            let q = Arc::clone(&q);
            std::thread::spawn(move || (q.pop(|_| true), q.pop(|_| true)))
        };
        q.push(0, 7).unwrap();
        q.close();
        assert_eq!(taker.join().unwrap(), (Some(7), None));
        assert_eq!(q.push(0, 8), Err(8));
    }
}

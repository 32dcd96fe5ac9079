//! A device's timing slot: a full evaluation holds the device alone (nothing else may run on it
//! while a candidate is timed); correctness checks share it with each other. A waiting full
//! evaluation goes before correctness checks that arrive after it, so timing is never starved.
//!
//! Each GPU has one gate in the process, whichever engine's lanes use it, and whatever else runs
//! on it besides evaluations (a profile under Nsight Compute) holds it alone through the same gate
//! ([`hold_alone`]): the gate is the only way to hold a GPU. The CPU's gate is each engine's own.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::settings::Device;

#[derive(Default)]
struct State {
    exclusive: bool,
    shared: usize,
    exclusive_waiting: usize,
    /// Time the device was held alone (timing slot busy), by every holder.
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
    /// The holder's own count of time held alone (an engine's), besides the gate's.
    busy: Option<&'a Mutex<Duration>>,
}

impl Gate {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn wait<'a>(&self, s: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        self.changed.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits until the device is free of every other holder and takes it alone; `false` (and
    /// nothing taken) where `cancel` says to stop first. `cancel` is asked every 50 ms.
    fn take_exclusive(&self, cancel: Option<&dyn Fn() -> bool>) -> bool {
        let mut s = self.lock();
        s.exclusive_waiting += 1;
        while s.exclusive || s.shared > 0 {
            match cancel {
                None => s = self.wait(s),
                Some(cancelled) if cancelled() => {
                    s.exclusive_waiting -= 1;
                    drop(s);
                    // Shared holders that waited behind this one may go now.
                    self.changed.notify_all();
                    return false;
                }
                Some(_) => {
                    s = self
                        .changed
                        .wait_timeout(s, Duration::from_millis(50))
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .0;
                }
            }
        }
        s.exclusive_waiting -= 1;
        s.exclusive = true;
        true
    }

    fn release(&self, exclusive: bool, since: Instant) {
        let mut s = self.lock();
        if exclusive {
            s.exclusive = false;
            s.exclusive_busy += since.elapsed();
        } else {
            s.shared -= 1;
        }
        drop(s);
        self.changed.notify_all();
    }

    /// Waits until the device is free of every other evaluation.
    pub(crate) fn exclusive(&self) -> Held<'_> {
        self.take_exclusive(None);
        Held { gate: self, exclusive: true, since: Instant::now(), busy: None }
    }

    /// Waits until no full evaluation holds the device or waits for it.
    pub(crate) fn shared(&self) -> Held<'_> {
        let mut s = self.lock();
        while s.exclusive || s.exclusive_waiting > 0 {
            s = self.wait(s);
        }
        s.shared += 1;
        Held { gate: self, exclusive: false, since: Instant::now(), busy: None }
    }

    /// How long the device has been held alone, in all.
    pub(crate) fn exclusive_busy(&self) -> Duration {
        self.lock().exclusive_busy
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.gate.release(self.exclusive, self.since);
        if let (true, Some(busy)) = (self.exclusive, self.busy) {
            *busy.lock().unwrap_or_else(std::sync::PoisonError::into_inner) += self.since.elapsed();
        }
    }
}

/// The gates of this process's GPUs, by index, made as first wanted.
static GPU_GATES: Mutex<Vec<(u32, Arc<Gate>)>> = Mutex::new(Vec::new());

/// The gate of `device`: the process's one for a GPU, a fresh one for the CPU.
fn gate_of(device: &Device) -> Arc<Gate> {
    let Device::Cuda(index) = device else { return Arc::new(Gate::default()) };
    let mut gates = GPU_GATES.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, gate)) = gates.iter().find(|(i, _)| i == index) {
        return Arc::clone(gate);
    }
    let gate = Arc::new(Gate::default());
    gates.push((*index, Arc::clone(&gate)));
    gate
}

/// One device's gate as an engine holds it: the device's gate, and the time this engine's jobs
/// held it alone (its statistics count its own timing only).
pub(crate) struct DeviceSlot {
    gate: Arc<Gate>,
    busy: Mutex<Duration>,
}

impl DeviceSlot {
    pub(crate) fn of(device: &Device) -> DeviceSlot {
        DeviceSlot { gate: gate_of(device), busy: Mutex::new(Duration::ZERO) }
    }

    /// As [`Gate::exclusive`], counted as this engine's.
    pub(crate) fn exclusive(&self) -> Held<'_> {
        let mut held = self.gate.exclusive();
        held.busy = Some(&self.busy);
        held
    }

    pub(crate) fn shared(&self) -> Held<'_> {
        self.gate.shared()
    }

    /// How long this engine's jobs have held the device alone, in all.
    pub(crate) fn exclusive_busy(&self) -> Duration {
        *self.busy.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A device held alone outside any evaluation ([`hold_alone`]); dropping it lets evaluations in.
pub struct DeviceHold {
    gate: Arc<Gate>,
    since: Instant,
}

impl std::fmt::Debug for DeviceHold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceHold").field("since", &self.since).finish()
    }
}

impl Drop for DeviceHold {
    fn drop(&mut self) {
        self.gate.release(true, self.since);
        tracing::debug!(held = ?self.since.elapsed(), alone_in_all = ?self.gate.exclusive_busy(), "a device held alone outside the evaluations is let go");
    }
}

/// Holds `device` alone as a timed evaluation does, for work beside the evaluations (a profile):
/// waits until no evaluation of any engine of this process runs on it, and goes before checks
/// that arrive meanwhile. `None` where `cancel` says to stop before the device is free. On the
/// CPU nothing else is waited for.
pub fn hold_alone(device: &Device, cancel: Option<&dyn Fn() -> bool>) -> Option<DeviceHold> {
    let gate = gate_of(device);
    gate.take_exclusive(cancel).then(|| DeviceHold { gate, since: Instant::now() })
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
    fn a_gpu_has_one_gate_in_the_process_and_a_profile_waits_for_its_evaluations() {
        // Two engines' slots of GPU 7 and a profile's hold are one gate.
        let (a, b) = (DeviceSlot::of(&Device::Cuda(7)), DeviceSlot::of(&Device::Cuda(7)));
        let timed = a.exclusive();
        let waiting = std::thread::scope(|scope| {
            let profile = scope.spawn(|| hold_alone(&Device::Cuda(7), None).is_some());
            // A check of the other engine cannot start beside the timed job either.
            while a.gate.lock().exclusive_waiting == 0 {
                std::thread::yield_now();
            }
            assert!(!profile.is_finished(), "the profile ran beside a timed evaluation");
            drop(timed);
            profile.join().unwrap()
        });
        assert!(waiting);
        let check = b.shared();
        // A profile cancelled while it waits takes nothing, and lets later checks in.
        let stop = || true;
        assert!(hold_alone(&Device::Cuda(7), Some(&stop)).is_none());
        assert_eq!(a.gate.lock().exclusive_waiting, 0);
        drop(check);
        assert!(a.exclusive_busy() > Duration::ZERO);
        assert_eq!(b.exclusive_busy(), Duration::ZERO, "each engine counts its own timing");
        // The CPU's gates are each engine's own.
        let cpu = DeviceSlot::of(&Device::Cpu);
        let _alone = cpu.exclusive();
        assert!(hold_alone(&Device::Cpu, None).is_some());
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

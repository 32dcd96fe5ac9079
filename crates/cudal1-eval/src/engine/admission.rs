//! Admission by memory: a lane starts a job only when the job's memory need (on its device, and on
//! the host) fits beside what the jobs already running reserved. Jobs of one device are admitted
//! in the order they asked, so a large job is never starved by small ones; a job that waits for
//! host memory holds back later jobs of every device. A job that cannot fit even alone is
//! admitted once nothing else holds memory where it does not fit, and is told to hold its device
//! alone ([`Admitted::alone`]): it runs, rather than never.
//!
//! Memory a process outside the engine holds on a device (a training run's policy worker, on the
//! GPU where its samples are judged: [`crate::OutsideMemory::hold`]) is taken off that
//! device's budget, so that jobs fit beside it; a job that does not fit beside it is said to be
//! crowded ([`Admitted::crowded`]): it runs alone, and what it runs out of is not its own doing.

use crate::memory::MemoryNeed;
use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Where jobs must fit: the host's memory and each device's, in bytes; `None`: not limited.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryBudget {
    /// Host memory the running jobs may reserve in all (default: `MemAvailable` at the engine's
    /// start).
    pub host: Option<u64>,
    /// Per device (by the engine's device index): its memory. The CPU's entry is `None` (the
    /// host's budget covers it).
    pub devices: Vec<Option<u64>>,
}

/// What a job that waited for memory was waiting for, as the engine reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryWait {
    /// The job's estimated need.
    pub need: MemoryNeed,
    /// What the running jobs had reserved when it began to wait.
    pub reserved: MemoryNeed,
    /// Its need does not fit even alone: it runs holding its device alone.
    pub alone: bool,
}

struct Waiter {
    device: usize,
    need: MemoryNeed,
}

struct State {
    host: u64,
    devices: Vec<u64>,
    /// Per device: what processes outside the engine hold there.
    outside: Vec<u64>,
    /// Jobs waiting, by ticket (arrival order).
    waiting: BTreeMap<u64, Waiter>,
    next: u64,
}

pub(crate) struct Admission {
    budget: MemoryBudget,
    state: Mutex<State>,
    changed: Condvar,
}

/// A job's reservation; dropping it gives the memory back.
pub(crate) struct Admitted<'a> {
    admission: &'a Admission,
    device: usize,
    took: MemoryNeed,
    /// The job's need is over a budget: it must hold its device alone.
    pub(crate) alone: bool,
    /// How long it waited for memory (zero when it fitted at once).
    pub(crate) waited: Duration,
    /// Memory held outside the engine on its device left too little for its need (which fits
    /// the device itself): running out of memory there is not the job's doing.
    pub(crate) crowded: bool,
}

impl Admission {
    pub(crate) fn new(budget: MemoryBudget, devices: usize) -> Admission {
        let state = State {
            host: 0,
            devices: vec![0; devices],
            outside: vec![0; devices],
            waiting: BTreeMap::new(),
            next: 0,
        };
        Admission { budget, state: Mutex::new(state), changed: Condvar::new() }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn device_budget(&self, device: usize) -> Option<u64> {
        self.budget.devices.get(device).copied().flatten()
    }

    /// What the engine's jobs may reserve on `device` now: its budget less what is held outside.
    fn device_room(&self, s: &State, device: usize) -> Option<u64> {
        self.device_budget(device).map(|b| b.saturating_sub(s.outside[device]))
    }

    /// Sets what processes outside the engine hold on `device` (replacing what was said before);
    /// jobs that wait may fit now.
    pub(crate) fn hold_outside(&self, device: usize, bytes: u64) {
        let mut s = self.lock();
        if let Some(held) = s.outside.get_mut(device) {
            *held = bytes;
        }
        drop(s);
        self.changed.notify_all();
    }

    fn host_fits(&self, s: &State, host: u64) -> bool {
        self.budget.host.is_none_or(|b| s.host.saturating_add(host) <= b)
    }

    /// What a job with `need` reserves on `device` now: its need, clamped to the budgets (a need
    /// over a budget takes the whole budget: it goes when nothing else holds any).
    fn take(&self, s: &State, device: usize, need: MemoryNeed) -> MemoryNeed {
        MemoryNeed {
            device: self.device_room(s, device).map_or(need.device, |r| need.device.min(r)),
            host: self.budget.host.map_or(need.host, |b| need.host.min(b)),
        }
    }

    fn fits(&self, s: &State, device: usize, need: MemoryNeed) -> bool {
        let take = self.take(s, device, need);
        let on_device = self
            .device_room(s, device)
            .is_none_or(|b| s.devices[device].saturating_add(take.device) <= b);
        on_device && self.host_fits(s, take.host)
    }

    /// Whether `need` is over a budget on `device` now (it must run alone), and whether it is
    /// over only because of what is held outside the engine (it is crowded).
    fn over(&self, s: &State, device: usize, need: MemoryNeed) -> (bool, bool) {
        let room = self.device_room(s, device);
        let over_room = room.is_some_and(|r| need.device > r);
        let crowded = over_room && self.device_budget(device).is_some_and(|b| need.device <= b);
        (self.budget.host.is_some_and(|b| need.host > b) || over_room, crowded)
    }

    /// Whether the job with `ticket` may go now: it fits, and no job that asked before it waits
    /// on the same device, or waits for host memory.
    fn may_go(&self, s: &State, ticket: u64) -> bool {
        let me = &s.waiting[&ticket];
        let blocked = s.waiting.range(..ticket).any(|(_, w)| {
            w.device == me.device || !self.host_fits(s, self.take(s, w.device, w.need).host)
        });
        !blocked && self.fits(s, me.device, me.need)
    }

    /// Waits until `need` fits on `device` beside the running jobs; `on_wait` is called once, when
    /// the job has to wait, with what it waits for, or at once when the need is more than a
    /// budget (the job will run alone, whether it waits or not).
    pub(crate) fn admit(
        &self,
        device: usize,
        need: MemoryNeed,
        on_wait: impl FnOnce(MemoryWait),
    ) -> Admitted<'_> {
        let started = Instant::now();
        let mut s = self.lock();
        let (alone, _) = self.over(&s, device, need);
        let ticket = s.next;
        s.next += 1;
        s.waiting.insert(ticket, Waiter { device, need });
        let mut on_wait = Some(on_wait);
        let mut waits = false;
        if alone {
            if let Some(report) = on_wait.take() {
                report(MemoryWait {
                    need,
                    reserved: MemoryNeed { device: s.devices[device], host: s.host },
                    alone,
                });
            }
        }
        while !self.may_go(&s, ticket) {
            waits = true;
            if let Some(report) = on_wait.take() {
                report(MemoryWait {
                    need,
                    reserved: MemoryNeed { device: s.devices[device], host: s.host },
                    alone,
                });
            }
            s = self.changed.wait(s).unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        s.waiting.remove(&ticket);
        // As things are when it goes: what is held outside may have changed while it waited.
        let (alone, crowded) = self.over(&s, device, need);
        let take = self.take(&s, device, need);
        s.devices[device] += take.device;
        s.host += take.host;
        drop(s);
        // Jobs behind this one may fit too.
        self.changed.notify_all();
        let waited = if waits { started.elapsed() } else { Duration::ZERO };
        Admitted { admission: self, device, took: take, alone, waited, crowded }
    }

    /// Whether `need` would fit on `device` beside the running jobs now, reserving nothing (for
    /// work started ahead of a job's turn, such as loading its task into a kept reference).
    pub(crate) fn fits_now(&self, device: usize, need: MemoryNeed) -> bool {
        let s = self.lock();
        s.waiting.is_empty() && self.fits(&s, device, need)
    }

    /// What the running jobs have reserved: on `device`, and on the host.
    #[cfg(test)]
    fn reserved(&self, device: usize) -> MemoryNeed {
        let s = self.lock();
        MemoryNeed { device: s.devices[device], host: s.host }
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let mut s = self.admission.lock();
        s.devices[self.device] -= self.took.device;
        s.host -= self.took.host;
        drop(s);
        self.admission.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    const GIB: u64 = 1 << 30;

    fn gpu(device: u64) -> MemoryNeed {
        MemoryNeed { device, host: GIB }
    }

    fn one_gpu(total: u64) -> Admission {
        Admission::new(MemoryBudget { host: Some(64 * GIB), devices: vec![Some(total)] }, 1)
    }

    /// Waits until `n` jobs wait in `a`.
    fn until_waiting(a: &Admission, n: usize) {
        while a.lock().waiting.len() < n {
            std::thread::yield_now();
        }
    }

    #[test]
    fn jobs_that_fit_together_go_at_once_and_one_that_does_not_waits_for_memory() {
        let a = Arc::new(one_gpu(80 * GIB));
        let first = a.admit(0, gpu(30 * GIB), |_| panic!("the first job fits"));
        let second = a.admit(0, gpu(40 * GIB), |_| panic!("30 + 40 fit in 80"));
        assert_eq!(a.reserved(0), MemoryNeed { device: 70 * GIB, host: 2 * GIB });
        let waits = Arc::new(Mutex::new(Vec::new()));
        let third = {
            let (a, waits) = (Arc::clone(&a), Arc::clone(&waits));
            std::thread::spawn(move || {
                let held = a.admit(0, gpu(20 * GIB), |w| waits.lock().unwrap().push(w));
                (held.alone, held.waited > Duration::ZERO)
            })
        };
        until_waiting(&a, 1);
        // 10 GiB free is not enough; freeing 30 is.
        drop(second);
        drop(first);
        assert_eq!(third.join().unwrap(), (false, true));
        let w = waits.lock().unwrap().clone();
        assert_eq!(
            w,
            [MemoryWait {
                need: gpu(20 * GIB),
                reserved: MemoryNeed { device: 70 * GIB, host: 2 * GIB },
                alone: false
            }]
        );
        assert_eq!(a.reserved(0), MemoryNeed::default());
    }

    #[test]
    fn a_job_too_large_even_alone_runs_alone_once_the_device_is_empty() {
        let a = Arc::new(one_gpu(80 * GIB));
        let small = a.admit(0, gpu(GIB), |_| ());
        let big = {
            let a = Arc::clone(&a);
            std::thread::spawn(move || {
                let held = a.admit(0, gpu(100 * GIB), |w| assert!(w.alone));
                // While it runs, it holds the whole device.
                (held.alone, a.reserved(0).device)
            })
        };
        until_waiting(&a, 1);
        drop(small);
        assert_eq!(big.join().unwrap(), (true, 80 * GIB));
        // With nothing else there, it goes at once, and is still said to run alone.
        let mut said = None;
        let alone = a.admit(0, gpu(100 * GIB), |w| said = Some(w));
        assert!(alone.alone && alone.waited.is_zero());
        assert_eq!(
            said,
            Some(MemoryWait { need: gpu(100 * GIB), reserved: MemoryNeed::default(), alone: true })
        );
    }

    #[test]
    fn memory_held_outside_the_engine_leaves_less_room_and_a_job_it_pushes_out_is_crowded() {
        let a = Arc::new(one_gpu(80 * GIB));
        // A policy worker holds 50 GiB of the device: 20 fit beside it, 20 more do not.
        a.hold_outside(0, 50 * GIB);
        let first = a.admit(0, gpu(20 * GIB), |_| panic!("20 fit beside 50 in 80"));
        assert!(!first.alone && !first.crowded);
        let second = {
            let a = Arc::clone(&a);
            std::thread::spawn(move || {
                let held = a.admit(0, gpu(20 * GIB), |w| assert!(!w.alone));
                (held.alone, held.crowded, held.waited > Duration::ZERO)
            })
        };
        until_waiting(&a, 1);
        // The worker lets 20 GiB go: the waiting job fits now.
        a.hold_outside(0, 30 * GIB);
        assert_eq!(second.join().unwrap(), (false, false, true));
        drop(first);
        // 60 GiB would fit the device, but not beside the 30 held outside: it runs alone, with
        // all that is left, and running out of memory there is not its doing.
        let pushed = a.admit(0, gpu(60 * GIB), |w| assert!(w.alone));
        assert!(pushed.alone && pushed.crowded);
        assert_eq!(a.reserved(0).device, 50 * GIB);
        drop(pushed);
        // More than the whole device runs alone too, but nothing outside made it so.
        let huge = a.admit(0, gpu(100 * GIB), |_| ());
        assert!(huge.alone && !huge.crowded);
        drop(huge);
        // Nothing held outside: the device is whole again.
        a.hold_outside(0, 0);
        let whole = a.admit(0, gpu(60 * GIB), |_| panic!("60 fit in an empty 80"));
        assert!(!whole.alone && !whole.crowded);
    }

    #[test]
    fn later_small_jobs_do_not_overtake_a_waiting_large_one_on_its_device() {
        let a = Arc::new(one_gpu(10 * GIB));
        let running = a.admit(0, gpu(6 * GIB), |_| ());
        let order = Arc::new(Mutex::new(Vec::new()));
        let start = |need: u64, name: &'static str| {
            let (a, order) = (Arc::clone(&a), Arc::clone(&order));
            std::thread::spawn(move || {
                let _held = a.admit(0, gpu(need), |_| ());
                order.lock().unwrap().push(name);
            })
        };
        let large = start(8 * GIB, "large");
        until_waiting(&a, 1);
        // 3 GiB would fit beside the running job, but the large job asked first (and the two
        // do not fit together).
        let small = start(3 * GIB, "small");
        until_waiting(&a, 2);
        assert!(order.lock().unwrap().is_empty());
        drop(running);
        large.join().unwrap();
        small.join().unwrap();
        assert_eq!(*order.lock().unwrap(), ["large", "small"]);
    }

    #[test]
    fn devices_admit_apart_but_share_the_host() {
        let budget =
            MemoryBudget { host: Some(4 * GIB), devices: vec![Some(10 * GIB), Some(10 * GIB)] };
        let a = Arc::new(Admission::new(budget, 2));
        let on_zero = a.admit(0, MemoryNeed { device: 9 * GIB, host: GIB }, |_| ());
        // Device 1 is empty: a job there does not wait for device 0.
        let on_one =
            a.admit(1, MemoryNeed { device: 9 * GIB, host: GIB }, |_| panic!("device 1 is free"));
        // The host has 2 GiB left: a job needing 3 waits, and holds back a later job of device 1.
        let peak = Arc::new(AtomicU64::new(0));
        let host_heavy = {
            let (a, peak) = (Arc::clone(&a), Arc::clone(&peak));
            std::thread::spawn(move || {
                let _held = a.admit(1, MemoryNeed { device: 0, host: 3 * GIB }, |_| ());
                peak.fetch_max(a.reserved(1).host, Ordering::SeqCst);
            })
        };
        until_waiting(&a, 1);
        drop(on_one);
        drop(on_zero);
        host_heavy.join().unwrap();
        assert!(peak.load(Ordering::SeqCst) <= 4 * GIB);
    }

    #[test]
    fn work_ahead_of_its_turn_starts_only_where_it_fits_now() {
        let a = one_gpu(10 * GIB);
        assert!(a.fits_now(0, gpu(8 * GIB)));
        let held = a.admit(0, gpu(6 * GIB), |_| ());
        assert!(!a.fits_now(0, gpu(8 * GIB)) && a.fits_now(0, gpu(4 * GIB)));
        drop(held);
        assert!(a.fits_now(0, gpu(8 * GIB)));
    }

    #[test]
    fn without_budgets_nothing_waits() {
        let a = Admission::new(MemoryBudget::default(), 1);
        let held: Vec<_> =
            (0..5).map(|_| a.admit(0, gpu(1000 * GIB), |_| panic!("no budget, no wait"))).collect();
        assert!(held.iter().all(|h| !h.alone));
    }

    #[test]
    fn many_jobs_never_exceed_the_budget() {
        let a = Arc::new(one_gpu(10 * GIB));
        let (now, peak) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let workers: Vec<_> = (0..8u64)
            .map(|i| {
                let (a, now, peak) = (Arc::clone(&a), Arc::clone(&now), Arc::clone(&peak));
                std::thread::spawn(move || {
                    for j in 0..20u64 {
                        let need = (1 + (i * 7 + j * 3) % 6) * GIB;
                        let _held = a.admit(0, MemoryNeed { device: need, host: 0 }, |_| ());
                        let total = now.fetch_add(need, Ordering::SeqCst) + need;
                        peak.fetch_max(total, Ordering::SeqCst);
                        std::thread::yield_now();
                        now.fetch_sub(need, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        assert!(peak.load(Ordering::SeqCst) <= 10 * GIB, "{}", peak.load(Ordering::SeqCst));
        assert_eq!(a.reserved(0), MemoryNeed::default());
    }
}

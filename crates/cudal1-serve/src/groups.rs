//! The group barrier: rewards normalised within a group and clipped, as CUDA-L1 does, once every
//! member of the group is scored. Members may come in one request or several (each naming its
//! index); a request waits, up to its deadline, for the others. Members that could not be scored
//! are left out of the group's mean and spread, never counted as zero. Groups live in memory for
//! an hour after their last member arrived.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use cudal1_search::group_normalized_rewards;
use tokio::sync::Notify;

use crate::api::{ItemState, RewardItem, RewardResult};

const KEEP: Duration = Duration::from_secs(3600);

#[derive(Clone, Copy, PartialEq)]
enum Slot {
    Pending,
    Scored(f64),
    Unscored,
}

struct Group {
    size: u32,
    slots: BTreeMap<u32, Slot>,
    notify: Arc<Notify>,
    touched: Instant,
}

impl Group {
    fn complete(&self) -> bool {
        (0..self.size).all(|i| matches!(self.slots.get(&i), Some(Slot::Scored(_) | Slot::Unscored)))
    }

    /// Normalised rewards of the scored members, by index.
    fn normalized(&self, clip: f64) -> HashMap<u32, f64> {
        let scored: Vec<(u32, f64)> = self
            .slots
            .iter()
            .filter_map(|(i, s)| if let Slot::Scored(r) = s { Some((*i, *r)) } else { None })
            .collect();
        let raw: Vec<Option<f64>> = scored.iter().map(|(_, r)| Some(*r)).collect();
        scored.iter().map(|(i, _)| *i).zip(group_normalized_rewards(&raw, clip)).collect()
    }
}

#[derive(Default)]
pub struct Groups {
    map: Mutex<HashMap<String, Group>>,
}

impl Groups {
    /// Records this request's members, waits for their groups to complete (or the deadline),
    /// and sets `group_reward` where a group is complete.
    pub async fn settle(
        &self,
        items: &[RewardItem],
        results: &mut [RewardResult],
        deadline: Instant,
        clip: f64,
    ) {
        // Members without an index take their place among this request's items of the group.
        let mut next: HashMap<&str, u32> = HashMap::new();
        let members: Vec<(usize, String, u32, u32)> = items
            .iter()
            .enumerate()
            .filter_map(|(i, item)| {
                let g = item.group.as_ref()?;
                let auto = next.entry(g.id.as_str()).or_insert(0);
                let index = g.index.unwrap_or(*auto);
                *auto += 1;
                Some((i, g.id.clone(), g.size, index))
            })
            .collect();
        let notifies: Vec<Arc<Notify>> = {
            let mut map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
            map.retain(|_, g| g.touched.elapsed() < KEEP);
            members
                .iter()
                .map(|(i, id, size, index)| {
                    let g = map.entry(id.clone()).or_insert_with(|| Group {
                        size: *size,
                        slots: BTreeMap::new(),
                        notify: Arc::new(Notify::new()),
                        touched: Instant::now(),
                    });
                    g.touched = Instant::now();
                    let slot = match results[*i].state {
                        ItemState::Done | ItemState::NoCode => {
                            results[*i].reward.map_or(Slot::Unscored, Slot::Scored)
                        }
                        ItemState::Failed => Slot::Unscored,
                        ItemState::Pending => Slot::Pending,
                    };
                    // A retry of a member never takes back a score; a member that could not be
                    // scored and is being judged again (its job was queued again) is waited for.
                    if slot != Slot::Pending || !matches!(g.slots.get(index), Some(Slot::Scored(_)))
                    {
                        g.slots.insert(*index, slot);
                    }
                    g.notify.notify_waiters();
                    Arc::clone(&g.notify)
                })
                .collect()
        };
        loop {
            let waiting_on: Vec<Arc<Notify>> = {
                let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
                members
                    .iter()
                    .zip(&notifies)
                    .filter(|((_, id, _, _), _)| map.get(id).is_some_and(|g| !g.complete()))
                    .map(|(_, n)| Arc::clone(n))
                    .collect()
            };
            let now = Instant::now();
            if waiting_on.is_empty() || now >= deadline {
                break;
            }
            let first = &waiting_on[0];
            let notified = first.notified();
            // Check again now that the future exists, so that a member arriving in between counts.
            let done = {
                let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
                members.iter().all(|(_, id, _, _)| map.get(id).is_none_or(Group::complete))
            };
            if done {
                break;
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep((deadline - now).min(Duration::from_millis(500))) => {}
            }
        }
        let map = self.map.lock().unwrap_or_else(PoisonError::into_inner);
        for (i, id, _, index) in &members {
            if let Some(g) = map.get(id).filter(|g| g.complete()) {
                results[*i].group_reward = g.normalized(clip).get(index).copied();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unscored_members_are_left_out_of_the_normalisation() {
        let mut g = Group {
            size: 4,
            slots: BTreeMap::new(),
            notify: Arc::new(Notify::new()),
            touched: Instant::now(),
        };
        for (i, s) in [Slot::Scored(1.0), Slot::Scored(3.0), Slot::Unscored].into_iter().enumerate()
        {
            g.slots.insert(u32::try_from(i).unwrap(), s);
        }
        assert!(!g.complete());
        g.slots.insert(3, Slot::Scored(0.0));
        assert!(g.complete());
        let n = g.normalized(10.0);
        assert_eq!(n.len(), 3, "the unscored member gets no group reward");
        assert!(n[&1] > n[&0] && n[&0] > n[&3]);
        assert!((n.values().sum::<f64>()).abs() < 1e-9);
        assert!(g.normalized(0.5).values().all(|x| x.abs() <= 0.5));
    }
}

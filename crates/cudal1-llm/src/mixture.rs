//! [`Mixture`]: spread requests over several models by weight, so one search
//! draws candidates from diverse policies.

use std::sync::{Arc, Mutex};

use rand::distr::weighted::WeightedIndex;
use rand::distr::Distribution;
use rand::rngs::StdRng;
use rand::SeedableRng;

use crate::{ChatRequest, Completion, Llm, LlmError};

/// Each request goes to one member, chosen at random in proportion to its
/// weight by a seeded generator (the same seed and call order give the same
/// choices). A member's error is returned as is; there is no fallback, so a
/// failing member shows up in the caller's statistics instead of being hidden.
pub struct Mixture {
    members: Vec<(Arc<dyn Llm>, f64)>,
    index: WeightedIndex<f64>,
    rng: Mutex<StdRng>,
}

impl Mixture {
    /// Weights must be finite, non-negative and not all zero.
    pub fn new(members: Vec<(Arc<dyn Llm>, f64)>, seed: u64) -> Result<Self, LlmError> {
        if members.is_empty() {
            return Err(LlmError::InvalidConfig {
                reason: "a mixture needs at least one model".to_owned(),
            });
        }
        if let Some((llm, w)) = members.iter().find(|(_, w)| !w.is_finite() || *w < 0.0) {
            return Err(LlmError::InvalidConfig {
                reason: format!("weight {w} of {} must be finite and >= 0", llm.describe()),
            });
        }
        let index = WeightedIndex::new(members.iter().map(|(_, w)| *w))
            .map_err(|e| LlmError::InvalidConfig { reason: format!("mixture weights: {e}") })?;
        Ok(Self { members, index, rng: Mutex::new(StdRng::seed_from_u64(seed)) })
    }

    /// Which member the next request goes to (advances the generator).
    pub fn pick(&self) -> usize {
        let mut rng = self.rng.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.index.sample(&mut *rng)
    }

    pub fn members(&self) -> impl Iterator<Item = (&Arc<dyn Llm>, f64)> {
        self.members.iter().map(|(llm, w)| (llm, *w))
    }
}

impl Llm for Mixture {
    fn complete(&self, req: &ChatRequest) -> Result<Completion, LlmError> {
        let i = self.pick();
        tracing::debug!(member = i, "mixture routes request");
        self.members[i].0.complete(req)
    }

    fn describe(&self) -> String {
        let total: f64 = self.members.iter().map(|(_, w)| w).sum();
        let parts: Vec<String> = self
            .members
            .iter()
            .map(|(llm, w)| format!("{:.0}% {}", 100.0 * w / total, llm.describe()))
            .collect();
        format!("mixture of [{}]", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A fixed-answer model: the unit under test is the routing, not a client.
    struct Fixed(&'static str);

    impl Llm for Fixed {
        fn complete(&self, _req: &ChatRequest) -> Result<Completion, LlmError> {
            Ok(Completion {
                text: self.0.to_owned(),
                prompt_tokens: 0,
                completion_tokens: 0,
                model: self.0.to_owned(),
                finish_reason: None,
                latency: Duration::ZERO,
            })
        }
        fn describe(&self) -> String {
            format!("fixed {}", self.0)
        }
    }

    fn mix(weights: &[f64], seed: u64) -> Result<Mixture, LlmError> {
        let names = ["a", "b", "c"];
        Mixture::new(
            weights
                .iter()
                .zip(names)
                .map(|(w, n)| (Arc::new(Fixed(n)) as Arc<dyn Llm>, *w))
                .collect(),
            seed,
        )
    }

    #[test]
    fn bad_weights_are_refused() {
        assert!(mix(&[], 0).is_err());
        assert!(mix(&[0.0, 0.0], 0).is_err());
        assert!(mix(&[1.0, -1.0], 0).is_err());
        assert!(mix(&[1.0, f64::NAN], 0).is_err());
    }

    #[test]
    fn zero_weight_is_never_chosen_and_seeds_repeat() {
        let m = mix(&[1.0, 0.0, 3.0], 42).unwrap();
        let picks: Vec<usize> = (0..500).map(|_| m.pick()).collect();
        assert!(!picks.contains(&1));
        let again = mix(&[1.0, 0.0, 3.0], 42).unwrap();
        assert_eq!(picks, (0..500).map(|_| again.pick()).collect::<Vec<_>>());
        let c = picks.iter().filter(|&&i| i == 2).count();
        assert!((325..=425).contains(&c), "weight 3/4 got {c}/500");
    }

    #[test]
    fn routes_to_the_picked_member_and_describes_all() {
        let m = mix(&[1.0, 3.0], 1).unwrap();
        let req = ChatRequest::user("x");
        let shadow = mix(&[1.0, 3.0], 1).unwrap();
        for _ in 0..40 {
            let want = ["a", "b"][shadow.pick()];
            assert_eq!(m.complete(&req).unwrap().text, want);
        }
        assert_eq!(m.describe(), "mixture of [25% fixed a, 75% fixed b]");
    }
}

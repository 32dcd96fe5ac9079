//! Reward accounting over the turns of a trajectory (`--turns`), as Kevin (Cognition, 2025) does
//! for multi-turn RL on kernels: a turn is credited with its own score and, discounted by `gamma`
//! per turn, what the turns after it achieve, so a turn that leads to a better program later is
//! rewarded for it. `train rl --turns` then normalises these rewards per turn within a group
//! (turn 2 against the group's other turn 2s, not against first attempts, as Dr. Kernel argues;
//! see [`crate::grpo`]).

use serde::{Deserialize, Serialize};

/// How later turns add to a turn's reward.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum TurnAggregation {
    /// `R_t = s_t + gamma * R_{t+1}`: the discounted sum of the turn's and later scores (Kevin's
    /// choice).
    #[default]
    Sum,
    /// `R_t = max(s_t, gamma * R_{t+1})`: the best of the turn's and later scores, discounted by
    /// distance.
    Max,
}

/// Each turn's reward from the turns' scores `scores[0..K]` (turn 1 first). `gamma` in [0, 1]:
/// 0 credits each turn with its own score only.
pub fn turn_rewards(scores: &[f64], gamma: f64, aggregation: TurnAggregation) -> Vec<f64> {
    let mut rewards = vec![0.0; scores.len()];
    let mut later: Option<f64> = None;
    for (t, &s) in scores.iter().enumerate().rev() {
        let r = match (aggregation, later) {
            (_, None) => s,
            (TurnAggregation::Sum, Some(l)) => s + gamma * l,
            (TurnAggregation::Max, Some(l)) => s.max(gamma * l),
        };
        rewards[t] = r;
        later = Some(r);
    }
    rewards
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64]) {
        assert_eq!(a.len(), b.len(), "{a:?} vs {b:?}");
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-12, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn sum_credits_each_turn_with_discounted_later_scores() {
        // Scores 0 (compile error), 0.3 (correct, no faster), 1.8 (correct, 1.5x), gamma 0.4:
        // R3 = 1.8; R2 = 0.3 + 0.4 * 1.8 = 1.02; R1 = 0 + 0.4 * 1.02 = 0.408.
        close(&turn_rewards(&[0.0, 0.3, 1.8], 0.4, TurnAggregation::Sum), &[0.408, 1.02, 1.8]);
        // gamma 0: each turn's own score; gamma 1: the plain sum of what follows.
        close(&turn_rewards(&[0.0, 0.3, 1.8], 0.0, TurnAggregation::Sum), &[0.0, 0.3, 1.8]);
        close(&turn_rewards(&[1.0, 2.0, 3.0], 1.0, TurnAggregation::Sum), &[6.0, 5.0, 3.0]);
        assert!(turn_rewards(&[], 0.4, TurnAggregation::Sum).is_empty());
        close(&turn_rewards(&[2.5], 0.4, TurnAggregation::Sum), &[2.5]);
    }

    #[test]
    fn max_keeps_the_best_discounted_later_score() {
        // R3 = 1.8; R2 = max(0.3, 0.72) = 0.72; R1 = max(1.0, 0.288) = 1.0.
        close(&turn_rewards(&[1.0, 0.3, 1.8], 0.4, TurnAggregation::Max), &[1.0, 0.72, 1.8]);
    }
}

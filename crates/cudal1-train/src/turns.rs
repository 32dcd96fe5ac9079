//! Reward accounting over the turns of a trajectory (`--turns`), as Kevin (Cognition, 2025) does
//! for multi-turn RL on kernels: a turn is credited with its own score and, discounted by `gamma`
//! per turn, what the turns after it achieve, so a turn that leads to a better program later is
//! rewarded for it. Advantages are then computed per turn across a group's trajectories (Dr.
//! Kernel's turn-level leave-one-out baseline), so turn 2 is compared with other turn 2s and not
//! with first attempts. Pure functions; `train rl --turns` and reports use them.

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

/// Per-turn advantages of a group of trajectories for the same prompt: `rewards[i][t]` is
/// trajectory i's reward at turn t (trajectories may stop early, so lengths differ). Each turn's
/// rewards are compared with the mean of the other trajectories' rewards at that same turn (a
/// leave-one-out baseline); a turn that only one trajectory reached gets 0 (nothing to compare).
pub fn turn_advantages(rewards: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let turns = rewards.iter().map(Vec::len).max().unwrap_or(0);
    let (mut sums, mut counts) = (vec![0.0; turns], vec![0_u32; turns]);
    for r in rewards {
        for (t, x) in r.iter().enumerate() {
            sums[t] += x;
            counts[t] += 1;
        }
    }
    rewards
        .iter()
        .map(|r| {
            r.iter()
                .enumerate()
                .map(|(t, &x)| if counts[t] < 2 { 0.0 } else { x - (sums[t] - x) / f64::from(counts[t] - 1) })
                .collect()
        })
        .collect()
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

    #[test]
    fn advantages_compare_each_turn_with_the_same_turn_of_the_other_trajectories() {
        // Three trajectories; the second stopped after turn 1 (good enough).
        let rewards = vec![vec![0.408, 1.02, 1.8], vec![2.0], vec![1.0, 0.0]];
        let a = turn_advantages(&rewards);
        // Turn 1: 0.408 - (2 + 1) / 2 = -1.092; 2 - (0.408 + 1) / 2 = 1.296; 1 - (0.408 + 2) / 2 = -0.204.
        // Turn 2: 1.02 - 0 = 1.02; 0 - 1.02 = -1.02. Turn 3: one trajectory, 0.
        close(&a[0], &[-1.092, 1.02, 0.0]);
        close(&a[1], &[1.296]);
        close(&a[2], &[-0.204, -1.02]);
        assert_eq!(turn_advantages(&[vec![1.0, 2.0]]), vec![vec![0.0, 0.0]], "a group of one has no baseline");
        assert!(turn_advantages(&[]).is_empty());
    }
}

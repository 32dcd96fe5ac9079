//! Group-normalised rewards for GRPO-style training (CUDA-L1's stage 3).

/// Rewards for one group of samples of the same prompt.
///
/// A correct sample's raw reward is its speedup; an incorrect one (`None`,
/// or a speedup that is not a finite non-negative number) gets 0, the lowest
/// reward a speedup can have. Raw rewards are normalised by the group's mean
/// and (population) standard deviation and clipped to `[-clip, clip]`
/// (CUDA-L1 uses `clip = 1.5`), so one lucky outlier cannot dominate the
/// update. A group whose raw rewards are all equal carries no signal and
/// gets zeros.
///
/// # Panics
/// If `clip` is not a finite positive number (a caller's bug, not data).
pub fn group_normalized_rewards(speedups: &[Option<f64>], clip: f64) -> Vec<f64> {
    assert!(clip.is_finite() && clip > 0.0, "clip must be finite and > 0, got {clip}");
    let raw: Vec<f64> =
        speedups.iter().map(|s| s.filter(|x| x.is_finite() && *x >= 0.0).unwrap_or(0.0)).collect();
    if raw.is_empty() {
        return raw;
    }
    #[expect(clippy::cast_precision_loss)]
    let n = raw.len() as f64;
    let mean = raw.iter().sum::<f64>() / n;
    let std = (raw.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n).sqrt();
    if std < 1e-12 {
        return vec![0.0; raw.len()];
    }
    raw.iter().map(|r| ((r - mean) / std).clamp(-clip, clip)).collect()
}

/// GRPO advantages of one group, as `cudal1 train rl` uses them.
///
/// `rewards[i]` is `None` for a sample that could not be scored (an infrastructure failure or a
/// missed deadline): it gets no advantage and takes no part in the group's statistics. The
/// others are normalised by the group's mean and population standard deviation, with the
/// standard deviation held at or above `std_floor` so that timing noise between equally good
/// samples does not become signal, and clipped to `[-clip, clip]`. Fewer than two scored samples,
/// or scored rewards that are all equal, carry no signal: the group is `None` (drop and refill it).
///
/// # Panics
/// If `clip` is not finite and positive or `std_floor` is negative (a caller's bug).
pub fn group_advantages(
    rewards: &[Option<f64>],
    std_floor: f64,
    clip: f64,
) -> Option<Vec<Option<f64>>> {
    assert!(clip.is_finite() && clip > 0.0, "clip must be finite and > 0, got {clip}");
    assert!(std_floor >= 0.0, "std_floor must be >= 0, got {std_floor}");
    let scored: Vec<f64> = rewards.iter().flatten().copied().collect();
    if scored.len() < 2 || scored.iter().any(|r| !r.is_finite()) {
        return None;
    }
    #[expect(clippy::cast_precision_loss)]
    let n = scored.len() as f64;
    let mean = scored.iter().sum::<f64>() / n;
    let std = (scored.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n).sqrt();
    if std < 1e-12 {
        return None;
    }
    let scale = std.max(std_floor);
    Some(rewards.iter().map(|r| r.map(|r| ((r - mean) / scale).clamp(-clip, clip))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-9)
    }

    #[test]
    fn normalised_by_group_mean_and_std() {
        // raw 1, 2, 3: mean 2, population std sqrt(2/3).
        let s = (2.0f64 / 3.0).sqrt();
        let r = group_normalized_rewards(&[Some(1.0), Some(2.0), Some(3.0)], 10.0);
        assert!(close(&r, &[-1.0 / s, 0.0, 1.0 / s]), "{r:?}");
        assert!(r.iter().sum::<f64>().abs() < 1e-12);
    }

    #[test]
    fn incorrect_samples_get_the_lowest_reward() {
        let r = group_normalized_rewards(
            &[None, Some(0.5), Some(1.5), Some(f64::NAN), Some(-3.0)],
            10.0,
        );
        // None, NaN and negative all count as raw 0, below any correct sample.
        assert!(close(&[r[0]], &[r[3]]) && close(&[r[0]], &[r[4]]));
        assert!(r[0] < r[1] && r[1] < r[2], "{r:?}");
    }

    #[test]
    fn outliers_are_clipped() {
        let mut group = vec![Some(1.0); 15];
        group.push(Some(100.0));
        let r = group_normalized_rewards(&group, 1.5);
        // Unclipped the outlier would be sqrt(15) ≈ 3.87.
        assert!((r[15] - 1.5).abs() < 1e-12, "{r:?}");
        assert!(r.iter().all(|x| (-1.5..=1.5).contains(x)));
        assert!(r[0] < 0.0);
    }

    #[test]
    fn advantages_skip_unscored_samples_floor_the_spread_and_drop_flat_groups() {
        let a = group_advantages(&[Some(1.0), None, Some(3.0)], 0.0, 10.0).unwrap();
        assert_eq!(a, vec![Some(-1.0), None, Some(1.0)]);
        // Speedups 1.00 and 1.02 differ by timing noise: with a floor of 0.1 they barely move.
        let noisy = group_advantages(&[Some(1.0), Some(1.02)], 0.1, 10.0).unwrap();
        assert!(close(&[noisy[0].unwrap(), noisy[1].unwrap()], &[-0.1, 0.1]), "{noisy:?}");
        let loud = group_advantages(&[Some(1.0), Some(1.02)], 0.0, 10.0).unwrap();
        assert!(close(&[loud[1].unwrap()], &[1.0]), "{loud:?}");
        assert_eq!(group_advantages(&[Some(0.0); 4], 0.1, 1.5), None, "zero variance");
        assert_eq!(group_advantages(&[Some(2.0), None, None], 0.1, 1.5), None, "one scored sample");
        let clipped =
            group_advantages(&[Some(0.0), Some(0.0), Some(0.0), Some(100.0)], 0.0, 1.5).unwrap();
        assert_eq!(clipped[3], Some(1.5));
    }

    #[test]
    fn equal_or_empty_groups_carry_no_signal() {
        assert_eq!(group_normalized_rewards(&[Some(2.0), Some(2.0)], 1.5), vec![0.0, 0.0]);
        assert_eq!(group_normalized_rewards(&[None, None, None], 1.5), vec![0.0; 3]);
        assert!(group_normalized_rewards(&[], 1.5).is_empty());
    }
}

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
    let raw: Vec<f64> = speedups
        .iter()
        .map(|s| s.filter(|x| x.is_finite() && *x >= 0.0).unwrap_or(0.0))
        .collect();
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
        let r = group_normalized_rewards(&[None, Some(0.5), Some(1.5), Some(f64::NAN), Some(-3.0)], 10.0);
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
    fn equal_or_empty_groups_carry_no_signal() {
        assert_eq!(group_normalized_rewards(&[Some(2.0), Some(2.0)], 1.5), vec![0.0, 0.0]);
        assert_eq!(group_normalized_rewards(&[None, None, None], 1.5), vec![0.0; 3]);
        assert!(group_normalized_rewards(&[], 1.5).is_empty());
    }
}

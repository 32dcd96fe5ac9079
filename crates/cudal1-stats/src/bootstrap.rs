//! Percentile bootstrap intervals for a median and for a ratio of medians (a speedup).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use crate::order::{median_in_place, quantile_sorted};

/// A point estimate with a confidence interval around it.
///
/// The interval is a percentile bootstrap interval; it normally contains `median`, but nothing
/// forces it to for tiny or strongly skewed samples.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    /// The point estimate on the original samples.
    pub median: f64,
    /// Lower bound: the `(1 - confidence) / 2` quantile of the bootstrap replicates.
    pub ci_low: f64,
    /// Upper bound: the `(1 + confidence) / 2` quantile of the bootstrap replicates.
    pub ci_high: f64,
}

/// An interval whose upper bound is more than this many times its lower bound is too wide to
/// tell speedups apart (`1.07x [0.95, 5.84]` and `1.99x [0.97, 5.92]` from one program).
pub const WIDE_RATIO: f64 = 1.5;

impl Interval {
    /// Whether the interval is too wide to rank by ([`WIDE_RATIO`]); a non-positive lower bound
    /// is always too wide.
    #[must_use]
    pub fn is_wide(&self) -> bool {
        !(self.ci_low > 0.0 && self.ci_high <= self.ci_low * WIDE_RATIO)
    }
}

/// Speedup = median(reference) / median(candidate), with a percentile bootstrap confidence
/// interval: both sides are resampled with replacement, independently, `resamples` times; each
/// replicate is the ratio of the resampled medians; the bounds are the `(1 - confidence) / 2` and
/// `(1 + confidence) / 2` quantiles of the replicates. Deterministic for a given `seed`.
///
/// `None` when either side is empty, a time is not finite and positive, `resamples` is zero, or
/// `confidence` is not strictly between 0 and 1.
#[must_use]
pub fn speedup_interval(
    reference_ms: &[f64],
    candidate_ms: &[f64],
    resamples: usize,
    confidence: f64,
    seed: u64,
) -> Option<Interval> {
    let valid_times = |xs: &[f64]| !xs.is_empty() && xs.iter().all(|x| x.is_finite() && *x > 0.0);
    if !valid_times(reference_ms) || !valid_times(candidate_ms) {
        return None;
    }
    if !valid_settings(resamples, confidence) {
        return None;
    }
    let point =
        median_in_place(&mut reference_ms.to_vec()) / median_in_place(&mut candidate_ms.to_vec());
    let mut rng = StdRng::seed_from_u64(seed);
    let mut scratch = Vec::with_capacity(reference_ms.len().max(candidate_ms.len()));
    let replicates = (0..resamples)
        .map(|_| {
            let reference = resampled_median(reference_ms, &mut rng, &mut scratch);
            let candidate = resampled_median(candidate_ms, &mut rng, &mut scratch);
            reference / candidate
        })
        .collect();
    Some(interval_from(point, replicates, confidence))
}

/// The median of `xs` with its percentile bootstrap interval (`resamples` resamples with
/// replacement). Deterministic for a given `seed`.
///
/// `None` when `xs` is empty or contains a non-finite value, `resamples` is zero, or `confidence`
/// is not strictly between 0 and 1.
#[must_use]
pub fn median_interval(
    xs: &[f64],
    resamples: usize,
    confidence: f64,
    seed: u64,
) -> Option<Interval> {
    if xs.is_empty() || !xs.iter().all(|x| x.is_finite()) || !valid_settings(resamples, confidence)
    {
        return None;
    }
    let point = median_in_place(&mut xs.to_vec());
    let mut rng = StdRng::seed_from_u64(seed);
    let mut scratch = Vec::with_capacity(xs.len());
    let replicates = (0..resamples).map(|_| resampled_median(xs, &mut rng, &mut scratch)).collect();
    Some(interval_from(point, replicates, confidence))
}

/// Any statistic of `items` units (tasks, say) with a percentile bootstrap interval: each
/// replicate resamples the units' indices with replacement and computes `statistic` on them;
/// replicates where it is undefined (`None`) are skipped. Deterministic for a given `seed`.
///
/// `None` when there are no units, the statistic is undefined on them all, or the settings are
/// invalid.
#[must_use]
pub fn statistic_interval(
    items: usize,
    statistic: impl Fn(&[usize]) -> Option<f64>,
    resamples: usize,
    confidence: f64,
    seed: u64,
) -> Option<Interval> {
    if items == 0 || !valid_settings(resamples, confidence) {
        return None;
    }
    let all: Vec<usize> = (0..items).collect();
    let point = statistic(&all)?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut picked = Vec::with_capacity(items);
    let replicates: Vec<f64> = (0..resamples)
        .filter_map(|_| {
            picked.clear();
            picked.extend((0..items).map(|_| rng.random_range(0..items)));
            statistic(&picked).filter(|x| x.is_finite())
        })
        .collect();
    if replicates.is_empty() {
        return None;
    }
    Some(interval_from(point, replicates, confidence))
}

/// A percentile bootstrap over units nested in groups (tasks within seeds): each replicate
/// draws `groups.len()` groups with replacement, then, within each drawn group, as many of its
/// units as it has, with replacement; `statistic` gets the drawn `(group, unit)` pairs. Both
/// sources of spread (which seeds, which tasks) widen the interval. `groups[g]` is how many units
/// group `g` has. Deterministic for a given `seed`; `None` as for [`statistic_interval`].
#[must_use]
pub fn nested_interval(
    groups: &[usize],
    statistic: impl Fn(&[(usize, usize)]) -> Option<f64>,
    resamples: usize,
    confidence: f64,
    seed: u64,
) -> Option<Interval> {
    if groups.iter().all(|&n| n == 0) || !valid_settings(resamples, confidence) {
        return None;
    }
    let all: Vec<(usize, usize)> =
        groups.iter().enumerate().flat_map(|(g, &n)| (0..n).map(move |u| (g, u))).collect();
    let point = statistic(&all)?;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut picked = Vec::with_capacity(all.len());
    let replicates: Vec<f64> = (0..resamples)
        .filter_map(|_| {
            picked.clear();
            for _ in 0..groups.len() {
                let g = rng.random_range(0..groups.len());
                let n = groups[g];
                picked.extend((0..n).map(|_| (g, rng.random_range(0..n))));
            }
            statistic(&picked).filter(|x| x.is_finite())
        })
        .collect();
    if replicates.is_empty() {
        return None;
    }
    Some(interval_from(point, replicates, confidence))
}

fn valid_settings(resamples: usize, confidence: f64) -> bool {
    resamples > 0 && confidence > 0.0 && confidence < 1.0
}

/// Median of one resample with replacement; `scratch` is reused to avoid an allocation per call.
fn resampled_median(xs: &[f64], rng: &mut StdRng, scratch: &mut Vec<f64>) -> f64 {
    scratch.clear();
    scratch.extend((0..xs.len()).map(|_| xs[rng.random_range(0..xs.len())]));
    median_in_place(scratch)
}

fn interval_from(point: f64, mut replicates: Vec<f64>, confidence: f64) -> Interval {
    replicates.sort_unstable_by(f64::total_cmp);
    Interval {
        median: point,
        ci_low: quantile_sorted(&replicates, (1.0 - confidence) / 2.0),
        ci_high: quantile_sorted(&replicates, (1.0 + confidence) / 2.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statistic_over_units_gets_an_interval_around_it() {
        let solved = [1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0];
        let mean =
            |idx: &[usize]| Some(idx.iter().map(|&i| solved[i]).sum::<f64>() / idx.len() as f64);
        let i = statistic_interval(solved.len(), mean, 2000, 0.95, 3).unwrap();
        assert_eq!(i.median, 0.625);
        assert!(
            i.ci_low < 0.625 && i.ci_high > 0.625 && i.ci_low >= 0.0 && i.ci_high <= 1.0,
            "{i:?}"
        );
        assert_eq!(statistic_interval(solved.len(), mean, 2000, 0.95, 3), Some(i), "deterministic");
        assert_eq!(statistic_interval(0, mean, 10, 0.95, 3), None);
        assert_eq!(statistic_interval(3, |_| None, 10, 0.95, 3), None);
    }

    #[test]
    fn a_nested_bootstrap_widens_with_the_spread_between_groups() {
        // Two seeds of four tasks each: alike within a seed, far apart between them.
        let apart = [[0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]];
        let alike = [[0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0]];
        let mean = |v: &[[f64; 4]; 2]| {
            let v = *v;
            move |p: &[(usize, usize)]| {
                Some(p.iter().map(|&(g, u)| v[g][u]).sum::<f64>() / p.len() as f64)
            }
        };
        let a = nested_interval(&[4, 4], mean(&apart), 2000, 0.95, 1).unwrap();
        let b = nested_interval(&[4, 4], mean(&alike), 2000, 0.95, 1).unwrap();
        assert_eq!((a.median, b.median), (0.5, 0.5));
        // Between seeds, a replicate is all of one seed a quarter of the time each way.
        assert_eq!((a.ci_low, a.ci_high), (0.0, 1.0), "{a:?}");
        assert!(b.ci_low > 0.0 && b.ci_high < 1.0, "{b:?}");
        assert_eq!(nested_interval(&[4, 4], mean(&apart), 2000, 0.95, 1), Some(a));
        assert_eq!(nested_interval(&[], mean(&apart), 10, 0.95, 1), None);
    }

    /// Positive samples around `center` with relative noise `noise`, from a fixed seed.
    fn noisy(center: f64, noise: f64, n: usize, seed: u64) -> Vec<f64> {
        let mut rng = StdRng::seed_from_u64(seed);
        (0..n).map(|_| center * (1.0 + rng.random_range(-noise..noise))).collect()
    }

    fn width(i: Interval) -> f64 {
        i.ci_high - i.ci_low
    }

    #[test]
    fn speedup_point_estimate_is_the_ratio_of_medians() {
        let s = speedup_interval(&[4.0, 6.0, 5.0], &[2.0, 1.0, 3.0], 100, 0.95, 0).unwrap();
        assert_eq!(s.median, 2.5);
    }

    #[test]
    fn speedup_interval_contains_the_point_estimate() {
        for seed in 0..20 {
            let reference = noisy(2.0, 0.1, 31, seed);
            let candidate = noisy(1.0, 0.1, 31, seed + 100);
            let s = speedup_interval(&reference, &candidate, 1000, 0.95, seed).unwrap();
            assert!(s.ci_low <= s.median && s.median <= s.ci_high, "{s:?}");
            assert!(s.ci_low > 1.6 && s.ci_high < 2.4, "{s:?}");
        }
    }

    #[test]
    fn speedup_interval_narrows_with_more_samples() {
        let small =
            speedup_interval(&noisy(2.0, 0.2, 10, 1), &noisy(1.0, 0.2, 10, 2), 2000, 0.95, 3)
                .unwrap();
        let large =
            speedup_interval(&noisy(2.0, 0.2, 1000, 1), &noisy(1.0, 0.2, 1000, 2), 2000, 0.95, 3)
                .unwrap();
        assert!(width(large) * 3.0 < width(small), "small {small:?}, large {large:?}");
    }

    #[test]
    fn identical_distributions_give_an_interval_around_one() {
        let xs = noisy(1.5, 0.1, 101, 9);
        let s = speedup_interval(&xs, &xs, 2000, 0.95, 4).unwrap();
        assert_eq!(s.median, 1.0);
        assert!(s.ci_low < 1.0 && s.ci_high > 1.0, "{s:?}");
        assert!(s.ci_low > 0.95 && s.ci_high < 1.05, "{s:?}");

        // Two independent samples of one distribution: a 95% interval misses 1 only rarely.
        let covered = (0..40)
            .filter(|&t| {
                let s = speedup_interval(
                    &noisy(1.5, 0.1, 101, t),
                    &noisy(1.5, 0.1, 101, t + 500),
                    1000,
                    0.95,
                    t,
                )
                .unwrap();
                s.ci_low < 1.0 && s.ci_high > 1.0
            })
            .count();
        assert!(covered >= 34, "covered {covered} of 40");
    }

    #[test]
    fn same_seed_gives_the_same_interval() {
        let reference = noisy(2.0, 0.3, 25, 1);
        let candidate = noisy(1.0, 0.3, 25, 2);
        let a = speedup_interval(&reference, &candidate, 500, 0.9, 42).unwrap();
        let b = speedup_interval(&reference, &candidate, 500, 0.9, 42).unwrap();
        let c = speedup_interval(&reference, &candidate, 500, 0.9, 43).unwrap();
        assert_eq!(a, b);
        assert_ne!((a.ci_low, a.ci_high), (c.ci_low, c.ci_high));
        assert_eq!(
            median_interval(&reference, 500, 0.9, 5),
            median_interval(&reference, 500, 0.9, 5)
        );
    }

    #[test]
    fn higher_confidence_gives_a_wider_interval() {
        let reference = noisy(2.0, 0.3, 25, 1);
        let candidate = noisy(1.0, 0.3, 25, 2);
        let narrow = speedup_interval(&reference, &candidate, 2000, 0.5, 8).unwrap();
        let wide = speedup_interval(&reference, &candidate, 2000, 0.99, 8).unwrap();
        assert!(wide.ci_low <= narrow.ci_low && wide.ci_high >= narrow.ci_high);
        assert!(width(wide) > width(narrow));
    }

    #[test]
    fn scaling_the_candidate_scales_the_speedup() {
        let reference = noisy(3.0, 0.2, 40, 1);
        let candidate = noisy(1.0, 0.2, 40, 2);
        let doubled: Vec<f64> = candidate.iter().map(|x| x * 2.0).collect();
        let a = speedup_interval(&reference, &candidate, 300, 0.95, 11).unwrap();
        let b = speedup_interval(&reference, &doubled, 300, 0.95, 11).unwrap();
        for (x, y) in [(a.median, b.median), (a.ci_low, b.ci_low), (a.ci_high, b.ci_high)] {
            assert!((x / 2.0 - y).abs() < 1e-12, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn interval_covers_the_true_ratio_at_about_the_nominal_rate() {
        // Uniform noise is symmetric, so the true population medians are 2.0 and 1.0.
        let trials = 100;
        let covered = (0..trials)
            .filter(|&t| {
                let s = speedup_interval(
                    &noisy(2.0, 0.3, 41, t),
                    &noisy(1.0, 0.3, 41, t + 1000),
                    500,
                    0.9,
                    t,
                )
                .unwrap();
                s.ci_low <= 2.0 && 2.0 <= s.ci_high
            })
            .count();
        assert!((75..=100).contains(&covered), "covered {covered} of {trials}");
    }

    #[test]
    fn median_interval_brackets_the_median() {
        let xs = noisy(5.0, 0.2, 51, 3);
        let m = median_interval(&xs, 1000, 0.95, 1).unwrap();
        assert_eq!(Some(m.median), crate::median(&xs));
        assert!(m.ci_low <= m.median && m.median <= m.ci_high);
        assert!(m.ci_low >= 4.0 && m.ci_high <= 6.0);
    }

    #[test]
    fn a_single_sample_gives_a_degenerate_interval() {
        let m = median_interval(&[3.0], 100, 0.95, 0).unwrap();
        assert_eq!(m, Interval { median: 3.0, ci_low: 3.0, ci_high: 3.0 });
    }

    #[test]
    fn invalid_inputs_give_none() {
        let ok = [1.0, 2.0];
        assert_eq!(speedup_interval(&[], &ok, 10, 0.95, 0), None);
        assert_eq!(speedup_interval(&ok, &[], 10, 0.95, 0), None);
        assert_eq!(speedup_interval(&ok, &[0.0, 1.0], 10, 0.95, 0), None);
        assert_eq!(speedup_interval(&ok, &[f64::INFINITY], 10, 0.95, 0), None);
        assert_eq!(speedup_interval(&[-1.0], &ok, 10, 0.95, 0), None);
        assert_eq!(speedup_interval(&ok, &ok, 0, 0.95, 0), None);
        assert_eq!(speedup_interval(&ok, &ok, 10, 1.0, 0), None);
        assert_eq!(speedup_interval(&ok, &ok, 10, 0.0, 0), None);
        assert_eq!(median_interval(&[], 10, 0.95, 0), None);
        assert_eq!(median_interval(&ok, 0, 0.95, 0), None);
        assert_eq!(median_interval(&ok, 10, 1.5, 0), None);
    }

    #[test]
    fn interval_serializes_with_its_field_names() {
        let i = Interval { median: 2.0, ci_low: 1.5, ci_high: 2.5 };
        let json = serde_json::to_value(i).unwrap();
        assert_eq!(json, serde_json::json!({"median": 2.0, "ci_low": 1.5, "ci_high": 2.5}));
        assert_eq!(serde_json::from_value::<Interval>(json).unwrap(), i);
    }

    #[test]
    fn an_interval_is_wide_when_its_upper_bound_is_over_one_and_a_half_times_its_lower() {
        let at = |ci_low, ci_high| Interval { median: 1.0, ci_low, ci_high };
        assert!(at(0.97, 5.92).is_wide());
        assert!(!at(1.0, 1.5).is_wide());
        assert!(at(0.0, 0.1).is_wide());
    }
}

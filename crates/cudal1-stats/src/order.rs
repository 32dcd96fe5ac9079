//! Order statistics: median and linearly interpolated quantiles.

/// The median of `xs`; the mean of the two middle values for an even length.
/// `None` when `xs` is empty. The input must not contain NaN (checked in debug builds).
#[must_use]
pub fn median(xs: &[f64]) -> Option<f64> {
    debug_assert_nan_free(xs);
    if xs.is_empty() {
        return None;
    }
    let mut scratch = xs.to_vec();
    Some(median_in_place(&mut scratch))
}

/// The `q`-quantile of `xs` with linear interpolation between order statistics
/// (the "type 7" definition used by numpy and R by default): position `q * (n - 1)` in the
/// sorted sample. `None` when `xs` is empty or `q` is outside `[0, 1]`.
/// The input must not contain NaN (checked in debug builds).
#[must_use]
pub fn quantile(xs: &[f64], q: f64) -> Option<f64> {
    debug_assert_nan_free(xs);
    if xs.is_empty() || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let mut sorted = xs.to_vec();
    sorted.sort_unstable_by(f64::total_cmp);
    Some(quantile_sorted(&sorted, q))
}

/// Quantile of an already sorted, non-empty slice; `q` in `[0, 1]`.
pub(crate) fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    // Casts are exact here: sample sizes are far below 2^52 and position lies in [0, n - 1].
    debug_assert!(!sorted.is_empty());
    let position = q * (sorted.len() - 1) as f64;
    let lower = position.floor() as usize;
    let upper = (lower + 1).min(sorted.len() - 1);
    let fraction = position - lower as f64;
    sorted[lower] + fraction * (sorted[upper] - sorted[lower])
}

/// Median of a non-empty slice, reordering it. Selection instead of a full sort, because the
/// bootstrap calls this thousands of times.
pub(crate) fn median_in_place(xs: &mut [f64]) -> f64 {
    debug_assert!(!xs.is_empty());
    let n = xs.len();
    let mid = n / 2;
    let (left, upper, _) = xs.select_nth_unstable_by(mid, f64::total_cmp);
    let upper = *upper;
    if n % 2 == 1 {
        return upper;
    }
    // For an even length the other middle value is the largest of the left part.
    let lower = left.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    lower.midpoint(upper)
}

fn debug_assert_nan_free(xs: &[f64]) {
    debug_assert!(xs.iter().all(|x| !x.is_nan()), "statistics input contains NaN");
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn median_of_odd_length_is_the_middle_value() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[5.0]), Some(5.0));
    }

    #[test]
    fn median_of_even_length_averages_the_middle_pair() {
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[10.0, 0.0]), Some(5.0));
    }

    #[test]
    fn median_of_empty_is_none() {
        assert_eq!(median(&[]), None);
    }

    #[test]
    fn median_does_not_reorder_the_input() {
        let xs = [3.0, 1.0, 2.0];
        let _ = median(&xs);
        assert_eq!(xs, [3.0, 1.0, 2.0]);
    }

    #[test]
    #[should_panic(expected = "NaN")]
    #[cfg(debug_assertions)]
    fn nan_input_is_caught_in_debug_builds() {
        let _ = median(&[1.0, f64::NAN]);
    }

    #[test]
    fn quantile_interpolates_linearly() {
        let xs = [10.0, 20.0, 30.0, 40.0];
        // position = q * 3
        assert_eq!(quantile(&xs, 0.0), Some(10.0));
        assert_eq!(quantile(&xs, 1.0), Some(40.0));
        assert_eq!(quantile(&xs, 0.5), Some(25.0));
        assert!((quantile(&xs, 0.25).unwrap() - 17.5).abs() < 1e-12);
        assert!((quantile(&xs, 0.9).unwrap() - 37.0).abs() < 1e-12);
    }

    #[test]
    fn quantile_rejects_empty_and_out_of_range() {
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[1.0], -0.1), None);
        assert_eq!(quantile(&[1.0], 1.1), None);
        assert_eq!(quantile(&[1.0], f64::NAN), None);
        assert_eq!(quantile(&[7.0], 0.3), Some(7.0));
    }

    #[test]
    fn selection_median_agrees_with_sorting_on_random_inputs() {
        let mut rng = StdRng::seed_from_u64(1);
        for _ in 0..500 {
            let n = rng.random_range(1..40);
            let xs: Vec<f64> = (0..n).map(|_| rng.random_range(-100.0..100.0)).collect();
            let mut sorted = xs.clone();
            sorted.sort_by(f64::total_cmp);
            let expected =
                if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
            let got = median(&xs).unwrap();
            assert!((got - expected).abs() < 1e-12, "{xs:?}: {got} != {expected}");
            assert!((quantile(&xs, 0.5).unwrap() - got).abs() < 1e-12);
        }
    }

    #[test]
    fn quantiles_are_monotone_and_bounded_on_random_inputs() {
        let mut rng = StdRng::seed_from_u64(2);
        for _ in 0..200 {
            let n = rng.random_range(1..30);
            let xs: Vec<f64> = (0..n).map(|_| rng.random_range(0.0..10.0)).collect();
            let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let mut previous = f64::NEG_INFINITY;
            for step in 0..=20 {
                let q = f64::from(step) / 20.0;
                let v = quantile(&xs, q).unwrap();
                assert!(v >= previous && v >= min && v <= max);
                previous = v;
            }
        }
    }
}

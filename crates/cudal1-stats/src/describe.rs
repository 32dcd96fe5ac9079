//! Summaries of a set of values: relative spread and geometric mean.

/// Relative spread of repeated measurements: `max / min - 1` (0.0 when all are equal).
/// `None` when `xs` is empty or a value is not finite and positive, because a ratio to a zero or
/// negative time means nothing.
#[must_use]
pub fn spread(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() || !xs.iter().all(|x| x.is_finite() && *x > 0.0) {
        return None;
    }
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some(max / min - 1.0)
}

/// Geometric mean, computed in log space so that long products cannot overflow.
/// `None` when `xs` is empty or a value is not finite and positive.
#[must_use]
pub fn geometric_mean(xs: &[f64]) -> Option<f64> {
    if xs.is_empty() || !xs.iter().all(|x| x.is_finite() && *x > 0.0) {
        return None;
    }
    // Exact: slice lengths are far below 2^52.
    let n = xs.len() as f64;
    Some((xs.iter().map(|x| x.ln()).sum::<f64>() / n).exp())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_max_over_min_minus_one() {
        assert_eq!(spread(&[2.0, 3.0, 2.5]), Some(0.5));
        assert_eq!(spread(&[4.0, 4.0]), Some(0.0));
        assert_eq!(spread(&[7.0]), Some(0.0));
    }

    #[test]
    fn spread_rejects_empty_and_non_positive() {
        assert_eq!(spread(&[]), None);
        assert_eq!(spread(&[0.0, 1.0]), None);
        assert_eq!(spread(&[-1.0, 1.0]), None);
        assert_eq!(spread(&[1.0, f64::INFINITY]), None);
    }

    #[test]
    fn geometric_mean_of_known_values() {
        assert!((geometric_mean(&[2.0, 8.0]).unwrap() - 4.0).abs() < 1e-12);
        assert!((geometric_mean(&[1.0, 10.0, 100.0]).unwrap() - 10.0).abs() < 1e-12);
        assert!((geometric_mean(&[0.5, 2.0]).unwrap() - 1.0).abs() < 1e-12);
        assert!((geometric_mean(&[3.0]).unwrap() - 3.0).abs() < 1e-12);
    }

    #[test]
    fn geometric_mean_does_not_overflow_on_long_products() {
        let xs = vec![1e300; 10];
        let g = geometric_mean(&xs).unwrap();
        assert!((g / 1e300 - 1.0).abs() < 1e-9, "{g}");
    }

    #[test]
    fn geometric_mean_rejects_empty_and_non_positive() {
        assert_eq!(geometric_mean(&[]), None);
        assert_eq!(geometric_mean(&[1.0, 0.0]), None);
        assert_eq!(geometric_mean(&[1.0, -2.0]), None);
        assert_eq!(geometric_mean(&[f64::NAN]), None);
    }

    #[test]
    fn geometric_mean_lies_between_min_and_arithmetic_mean() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(5);
        for _ in 0..200 {
            let n = rng.random_range(1..20);
            let xs: Vec<f64> = (0..n).map(|_| rng.random_range(0.01..100.0)).collect();
            let g = geometric_mean(&xs).unwrap();
            let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
            let mean = xs.iter().sum::<f64>() / n as f64;
            assert!(g >= min * (1.0 - 1e-12) && g <= mean * (1.0 + 1e-12), "{xs:?} -> {g}");
        }
    }
}

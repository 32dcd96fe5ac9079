//! End-to-end use of the public API: raw timings to a suite summary.

use cudal1_stats::{median, speedup_interval, summarize, TaskResult};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Timings around `center` ms with 5% uniform jitter.
fn timings(center: f64, n: usize, rng: &mut StdRng) -> Vec<f64> {
    (0..n).map(|_| center * rng.random_range(0.95..1.05)).collect()
}

#[test]
fn a_simulated_suite_summarises_to_the_speedups_that_were_planted() {
    let mut rng = StdRng::seed_from_u64(2025);
    // (true speedup, correct, degenerate)
    let plan = [
        (3.0, true, false),
        (1.5, true, false),
        (0.8, true, false),
        (5.0, false, false),
        (9.0, true, true),
    ];
    let results: Vec<TaskResult> = plan
        .iter()
        .enumerate()
        .map(|(i, &(true_speedup, correct, excluded))| {
            let reference = timings(2.0, 60, &mut rng);
            let candidate = timings(2.0 / true_speedup, 60, &mut rng);
            let s = speedup_interval(&reference, &candidate, 1000, 0.95, i as u64).unwrap();
            assert!(s.ci_low < true_speedup * 1.02 && s.ci_high > true_speedup * 0.98, "{s:?}");
            TaskResult { correct, speedup: Some(s.median), speedup_low: Some(s.ci_low), excluded }
        })
        .collect();

    let summary = summarize(&results, &[0.0, 1.0, 2.0]);
    assert_eq!((summary.tasks, summary.excluded, summary.correct), (5, 1, 4));
    // Four scored tasks: three correct (3.0, 1.5, 0.8); the 5x one is wrong.
    assert_eq!(summary.fast_p, vec![(0.0, 0.75), (1.0, 0.5), (2.0, 0.25)]);
    let expected_geomean = (3.0_f64 * 1.5 * 0.8).powf(1.0 / 3.0);
    assert!(
        (summary.geomean_speedup.unwrap() / expected_geomean - 1.0).abs() < 0.03,
        "{summary:?}"
    );
    assert!((summary.median_speedup.unwrap() / 1.5 - 1.0).abs() < 0.03, "{summary:?}");
}

#[test]
fn a_speedup_matches_the_ratio_of_the_public_medians() {
    let mut rng = StdRng::seed_from_u64(1);
    let reference = timings(1.0, 33, &mut rng);
    let candidate = timings(0.25, 33, &mut rng);
    let s = speedup_interval(&reference, &candidate, 200, 0.9, 0).unwrap();
    assert_eq!(s.median, median(&reference).unwrap() / median(&candidate).unwrap());
}

//! Suite-level summary of per-task results, including KernelBench's `fast_p`.

use serde::{Deserialize, Serialize};

use crate::describe::geometric_mean;
use crate::order::median;

/// The outcome of one task in a suite run.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq)]
pub struct TaskResult {
    /// The candidate's outputs matched the reference within tolerance.
    pub correct: bool,
    /// Reference time over candidate time; `None` when it was not measured.
    pub speedup: Option<f64>,
    /// The lower bound of the speedup's confidence interval, when it has one.
    #[serde(default)]
    pub speedup_low: Option<f64>,
    /// A degenerate task (constant or input-independent output): left out of speed statistics.
    pub excluded: bool,
}

/// Suite statistics from [`summarize`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct SuiteSummary {
    /// All tasks, excluded ones included.
    pub tasks: usize,
    /// Tasks flagged as degenerate.
    pub excluded: usize,
    /// Correct results among all tasks.
    pub correct: usize,
    /// `correct / tasks` (0.0 for an empty suite).
    pub correct_rate: f64,
    /// `(p, fraction)`: the fraction of non-excluded tasks that are correct with speedup > p
    /// (0.0 when every task is excluded), as KernelBench counts.
    pub fast_p: Vec<(f64, f64)>,
    /// As `fast_p`, counting only speedups whose confidence interval's lower bound is above p:
    /// a wide interval around a median above p is noise, not a speedup.
    #[serde(default)]
    pub fast_p_lower: Vec<(f64, f64)>,
    /// Arithmetic mean speedup over correct, non-excluded results with a speedup.
    pub mean_speedup: Option<f64>,
    /// Median speedup over the same results.
    pub median_speedup: Option<f64>,
    /// Geometric mean speedup over the same results; `None` if one is not finite and positive.
    pub geomean_speedup: Option<f64>,
}

/// Summarises a suite run. Speed statistics use correct, non-excluded results that have a
/// speedup; `fast_p` counts every non-excluded task in its denominator, so an incorrect or
/// unmeasured task lowers it, as in KernelBench.
#[must_use]
pub fn summarize(results: &[TaskResult], ps: &[f64]) -> SuiteSummary {
    let tasks = results.len();
    let excluded = results.iter().filter(|r| r.excluded).count();
    let correct = results.iter().filter(|r| r.correct).count();
    let scored = tasks - excluded;
    let speedups: Vec<f64> = results
        .iter()
        .filter(|r| r.correct && !r.excluded)
        .filter_map(|r| r.speedup)
        .filter(|s| !s.is_nan())
        .collect();
    let fast_p = ps
        .iter()
        .map(|&p| {
            let fast = speedups.iter().filter(|&&s| s > p).count();
            (p, fraction(fast, scored))
        })
        .collect();
    let lows: Vec<f64> = results
        .iter()
        .filter(|r| r.correct && !r.excluded && r.speedup.is_some_and(|s| !s.is_nan()))
        .filter_map(|r| r.speedup_low)
        .filter(|s| !s.is_nan())
        .collect();
    let fast_p_lower = ps
        .iter()
        .map(|&p| (p, fraction(lows.iter().filter(|&&s| s > p).count(), scored)))
        .collect();
    SuiteSummary {
        tasks,
        excluded,
        correct,
        correct_rate: fraction(correct, tasks),
        fast_p,
        fast_p_lower,
        mean_speedup: mean(&speedups),
        median_speedup: median(&speedups),
        geomean_speedup: geometric_mean(&speedups),
    }
}

/// `part / whole`, 0.0 for an empty whole so that summaries stay valid JSON (no NaN).
fn fraction(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        // Exact: counts are far below 2^52.
        part as f64 / whole as f64
    }
}

fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(correct: bool, speedup: Option<f64>) -> TaskResult {
        TaskResult { correct, speedup, speedup_low: None, excluded: false }
    }

    fn excluded(correct: bool, speedup: Option<f64>) -> TaskResult {
        TaskResult { correct, speedup, speedup_low: None, excluded: true }
    }

    #[test]
    fn fast_p_lower_counts_only_intervals_that_clear_p() {
        let with_low = |median, low| TaskResult {
            correct: true,
            speedup: Some(median),
            speedup_low: Some(low),
            excluded: false,
        };
        // 1.99x [0.97, 5.92]: fast by its median, noise by its interval.
        let results =
            [with_low(1.99, 0.97), with_low(1.8, 1.6), task(false, Some(3.0)), with_low(0.9, 0.8)];
        let s = summarize(&results, &[1.0, 1.5]);
        assert_eq!(s.fast_p, vec![(1.0, 0.5), (1.5, 0.5)]);
        assert_eq!(s.fast_p_lower, vec![(1.0, 0.25), (1.5, 0.25)]);
    }

    #[test]
    fn fast_p_counts_incorrect_tasks_in_the_denominator() {
        let results = [
            task(true, Some(2.0)),
            task(true, Some(0.5)),
            task(false, Some(10.0)), // fast but wrong: never counted as fast
            task(false, None),
        ];
        let s = summarize(&results, &[0.0, 1.0, 1.5, 3.0]);
        assert_eq!(s.fast_p, vec![(0.0, 0.5), (1.0, 0.25), (1.5, 0.25), (3.0, 0.0)]);
        assert_eq!((s.tasks, s.excluded, s.correct), (4, 0, 2));
        assert_eq!(s.correct_rate, 0.5);
    }

    #[test]
    fn fast_p_is_strictly_greater_than_p() {
        let s = summarize(&[task(true, Some(1.0))], &[1.0]);
        assert_eq!(s.fast_p, vec![(1.0, 0.0)]);
    }

    #[test]
    fn excluded_tasks_are_left_out_of_speed_statistics() {
        let results = [
            task(true, Some(2.0)),
            task(true, Some(8.0)),
            excluded(true, Some(1000.0)),
            excluded(false, None),
        ];
        let s = summarize(&results, &[1.0]);
        assert_eq!((s.tasks, s.excluded, s.correct), (4, 2, 3));
        assert_eq!(s.correct_rate, 0.75);
        assert_eq!(s.fast_p, vec![(1.0, 1.0)]);
        assert_eq!(s.mean_speedup, Some(5.0));
        assert_eq!(s.median_speedup, Some(5.0));
        assert!((s.geomean_speedup.unwrap() - 4.0).abs() < 1e-12);
    }

    #[test]
    fn speed_statistics_use_only_correct_results_with_a_speedup() {
        let results = [
            task(true, Some(1.0)),
            task(true, Some(2.0)),
            task(true, Some(4.0)),
            task(true, None),
            task(false, Some(100.0)),
        ];
        let s = summarize(&results, &[]);
        assert!(s.fast_p.is_empty());
        assert!((s.mean_speedup.unwrap() - 7.0 / 3.0).abs() < 1e-12);
        assert_eq!(s.median_speedup, Some(2.0));
        assert!((s.geomean_speedup.unwrap() - 2.0).abs() < 1e-12);
    }

    #[test]
    fn empty_and_all_excluded_suites_stay_finite() {
        let s = summarize(&[], &[1.0]);
        assert_eq!((s.tasks, s.correct_rate), (0, 0.0));
        assert_eq!(s.fast_p, vec![(1.0, 0.0)]);
        assert_eq!((s.mean_speedup, s.median_speedup, s.geomean_speedup), (None, None, None));

        let s = summarize(&[excluded(true, Some(3.0))], &[1.0]);
        assert_eq!(s.fast_p, vec![(1.0, 0.0)]);
        assert_eq!(s.mean_speedup, None);
        assert!(serde_json::to_string(&s).is_ok());
    }

    #[test]
    fn fast_p_is_non_increasing_in_p_on_random_suites() {
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        let mut rng = StdRng::seed_from_u64(3);
        let ps: Vec<f64> = (0..30).map(|i| f64::from(i) * 0.2).collect();
        for _ in 0..100 {
            let results: Vec<TaskResult> = (0..rng.random_range(0..25))
                .map(|_| TaskResult {
                    correct: rng.random_bool(0.7),
                    speedup: rng.random_bool(0.9).then(|| rng.random_range(0.1..5.0)),
                    speedup_low: None,
                    excluded: rng.random_bool(0.1),
                })
                .collect();
            let s = summarize(&results, &ps);
            let scored = results.iter().filter(|r| !r.excluded).count();
            for pair in s.fast_p.windows(2) {
                assert!(pair[1].1 <= pair[0].1);
            }
            // fast_0 can never exceed the rate of correct scored tasks.
            let correct_scored = results.iter().filter(|r| r.correct && !r.excluded).count();
            if scored > 0 {
                assert!(s.fast_p[0].1 <= correct_scored as f64 / scored as f64 + 1e-12);
            }
        }
    }

    #[test]
    fn summary_round_trips_through_json() {
        let s = summarize(&[task(true, Some(2.0)), task(false, None)], &[1.0, 2.0]);
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<SuiteSummary>(&json).unwrap(), s);
    }
}

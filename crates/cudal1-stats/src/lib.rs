//! Robust statistics for kernel timings: the median and quantiles of a sample, a percentile
//! bootstrap [`Interval`] for a median or for a speedup (ratio of medians), and the suite-level
//! [`SuiteSummary`] (KernelBench's `fast_p`, mean, median and geometric-mean speedups) built by
//! [`summarize`] from per-task [`TaskResult`]s.
//!
//! Everything here is pure: no I/O, and the bootstrap is deterministic for a given seed.
//!
//! ```
//! use cudal1_stats::{median, speedup_interval};
//!
//! assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
//! let reference = [2.0, 2.1, 1.9, 2.0, 2.05];
//! let candidate = [1.0, 1.05, 0.95, 1.0, 1.02];
//! let s = speedup_interval(&reference, &candidate, 2000, 0.95, 7).unwrap();
//! assert!((s.median - 2.0).abs() < 1e-12);
//! assert!(s.ci_low <= s.median && s.median <= s.ci_high);
//! ```

mod bootstrap;
mod describe;
mod order;
mod suite;

pub use bootstrap::{
    median_interval, nested_interval, speedup_interval, statistic_interval, Interval, WIDE_RATIO,
};
pub use describe::{geometric_mean, spread};
pub use order::{median, quantile};
pub use suite::{summarize, SuiteSummary, TaskResult};

//! When to retry an HTTP attempt and how long to wait first.

use std::time::Duration;

use rand::Rng;

/// Exponential backoff with jitter.
///
/// Attempt `k` (0-based) that failed waits `min(max_delay, base_delay * 2^k)`
/// scaled by a random factor in `[0.5, 1.0]`, so that many clients that failed
/// together do not come back together. A `Retry-After` header replaces the
/// computed wait (clamped to `max_delay`, so a server cannot park us for hours).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt; 0 disables retrying.
    pub max_retries: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 5,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `failed_attempt + 1`.
    pub fn delay(
        &self,
        failed_attempt: u32,
        retry_after: Option<Duration>,
        rng: &mut impl Rng,
    ) -> Duration {
        if let Some(wait) = retry_after {
            return wait.min(self.max_delay);
        }
        let factor = 2u32.saturating_pow(failed_attempt.min(30));
        let full = self.base_delay.saturating_mul(factor).min(self.max_delay);
        full.mul_f64(rng.random_range(0.5..=1.0))
    }
}

/// Whether an HTTP status is worth another try: rate limits and server errors.
/// Any other 4xx means the request itself is wrong; sending it again cannot help.
pub(crate) fn status_is_retryable(status: u16) -> bool {
    status == 429 || (500..=599).contains(&status)
}

/// `Retry-After` in whole or fractional seconds. The HTTP-date form is not
/// used by LLM servers in practice and is ignored (the backoff applies).
pub(crate) fn parse_retry_after(value: &str) -> Option<Duration> {
    let secs: f64 = value.trim().parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(86_400.0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{rngs::StdRng, SeedableRng};

    #[test]
    fn delay_grows_exponentially_within_jitter_and_is_capped() {
        let p = RetryPolicy {
            max_retries: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
        };
        let mut rng = StdRng::seed_from_u64(7);
        for attempt in 0..8 {
            let full = (100u64 << attempt).min(1000);
            for _ in 0..50 {
                let d = p.delay(attempt, None, &mut rng).as_secs_f64() * 1000.0;
                #[expect(clippy::cast_precision_loss)]
                let full = full as f64;
                assert!(
                    d >= full * 0.5 - 1e-6 && d <= full + 1e-6,
                    "attempt {attempt}: {d} ms vs {full}"
                );
            }
        }
    }

    #[test]
    fn jitter_actually_varies() {
        let p = RetryPolicy::default();
        let mut rng = StdRng::seed_from_u64(1);
        let a: Vec<_> = (0..10).map(|_| p.delay(2, None, &mut rng)).collect();
        assert!(a.iter().any(|d| *d != a[0]));
    }

    #[test]
    fn retry_after_wins_but_is_clamped() {
        let p = RetryPolicy { max_delay: Duration::from_secs(5), ..RetryPolicy::default() };
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(p.delay(3, Some(Duration::from_secs(2)), &mut rng), Duration::from_secs(2));
        assert_eq!(p.delay(0, Some(Duration::from_secs(500)), &mut rng), Duration::from_secs(5));
    }

    #[test]
    fn retry_after_parsing() {
        assert_eq!(parse_retry_after(" 3 "), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after("0.25"), Some(Duration::from_millis(250)));
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }

    #[test]
    fn retryable_statuses() {
        for s in [429, 500, 502, 503, 504] {
            assert!(status_is_retryable(s), "{s}");
        }
        for s in [400, 401, 403, 404, 408, 422, 200] {
            assert!(!status_is_retryable(s), "{s}");
        }
    }
}

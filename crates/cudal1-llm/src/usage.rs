//! Token accounting and the optional cost cap, shared by clones of a client
//! (and by several clients, when the caller hands them the same [`Usage`]).

use std::sync::{Arc, Mutex, MutexGuard};

use crate::LlmError;

/// Prices in US dollars per million tokens. Zero for local servers.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Prices {
    pub prompt_per_million: f64,
    pub completion_per_million: f64,
}

impl Prices {
    pub fn cost(&self, prompt_tokens: u64, completion_tokens: u64) -> f64 {
        // Token counts stay far below 2^52, so the casts are exact.
        #[expect(clippy::cast_precision_loss)]
        let (p, c) = (prompt_tokens as f64, completion_tokens as f64);
        (p * self.prompt_per_million + c * self.completion_per_million) / 1e6
    }
}

/// Totals at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct UsageSnapshot {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Completions that succeeded.
    pub requests: u64,
    /// HTTP attempts made, retries included.
    pub attempts: u64,
    pub cost_usd: f64,
}

/// Shared counters plus an optional cap on the estimated cost.
///
/// The cap is checked before a request is sent; requests already in flight
/// when it is crossed still complete and are counted, so the final cost can
/// exceed the cap by at most the cost of the concurrent requests.
#[derive(Debug, Clone, Default)]
pub struct Usage {
    inner: Arc<Mutex<UsageSnapshot>>,
    cap_usd: Option<f64>,
}

impl Usage {
    pub fn new(cap_usd: Option<f64>) -> Self {
        Self { inner: Arc::default(), cap_usd }
    }

    pub fn cap_usd(&self) -> Option<f64> {
        self.cap_usd
    }

    pub fn snapshot(&self) -> UsageSnapshot {
        *self.lock()
    }

    /// `Err(BudgetExhausted)` once the spent cost has reached the cap.
    pub fn check_budget(&self) -> Result<(), LlmError> {
        match self.cap_usd {
            Some(cap) => {
                let spent = self.lock().cost_usd;
                if spent >= cap {
                    Err(LlmError::BudgetExhausted { spent_usd: spent, cap_usd: cap })
                } else {
                    Ok(())
                }
            }
            None => Ok(()),
        }
    }

    pub fn record_attempt(&self) {
        self.lock().attempts += 1;
    }

    pub fn record_completion(&self, prompt_tokens: u64, completion_tokens: u64, cost_usd: f64) {
        let mut u = self.lock();
        u.prompt_tokens += prompt_tokens;
        u.completion_tokens += completion_tokens;
        u.requests += 1;
        u.cost_usd += cost_usd;
    }

    fn lock(&self) -> MutexGuard<'_, UsageSnapshot> {
        // Counters stay valid even if a holder panicked mid-update of another field.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_uses_per_million_prices() {
        let p = Prices { prompt_per_million: 2.0, completion_per_million: 8.0 };
        assert!((p.cost(500_000, 250_000) - 3.0).abs() < 1e-12);
    }

    #[test]
    fn cap_trips_once_reached_and_clones_share_totals() {
        let u = Usage::new(Some(1.0));
        let clone = u.clone();
        assert!(u.check_budget().is_ok());
        clone.record_completion(10, 20, 0.6);
        assert!(u.check_budget().is_ok());
        clone.record_completion(10, 20, 0.4);
        match u.check_budget() {
            Err(LlmError::BudgetExhausted { spent_usd, cap_usd }) => {
                assert!((spent_usd - 1.0).abs() < 1e-12);
                assert!((cap_usd - 1.0).abs() < 1e-12);
            }
            other => panic!("expected BudgetExhausted, got {other:?}"),
        }
        let s = u.snapshot();
        assert_eq!((s.prompt_tokens, s.completion_tokens, s.requests), (20, 40, 2));
    }

    #[test]
    fn no_cap_never_trips() {
        let u = Usage::new(None);
        u.record_completion(1, 1, 1e9);
        assert!(u.check_budget().is_ok());
    }
}

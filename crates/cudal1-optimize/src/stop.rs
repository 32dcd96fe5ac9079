//! When the loop stops: the round count, budgets, patience, Ctrl-C. Pure decisions, so that each
//! rule is tested on its own.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::OptimizeConfig;

/// Why a run stopped.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StopReason {
    /// Every requested round is finished.
    Rounds {
        rounds: u32,
    },
    WallTime {
        limit_s: f64,
    },
    TokenBudget {
        spent: u64,
        limit: u64,
    },
    CostBudget {
        spent_usd: f64,
        limit_usd: f64,
    },
    /// `rounds` finished rounds in a row found nothing better.
    NoImprovement {
        rounds: u32,
    },
    /// The LLM client refused to send more (its own cost cap).
    LlmBudget {
        message: String,
    },
    /// Every request of a round failed (server down, timeouts): more rounds would fail alike.
    LlmUnavailable {
        round: u32,
        error: String,
    },
    /// Ctrl-C: the unfinished round resumes on the next invocation.
    Interrupted,
}

impl StopReason {
    /// Whether the round under way when this happened still counts as finished: budgets end a
    /// round early for good; an interruption, or an LLM that answered nothing, leaves it to be
    /// resumed (the failed requests are sent again).
    pub fn finishes_round(&self) -> bool {
        !matches!(self, StopReason::Interrupted | StopReason::LlmUnavailable { .. })
    }

    /// One line for people.
    pub fn describe(&self) -> String {
        match self {
            StopReason::Rounds { rounds } => format!("finished all {rounds} round(s)"),
            StopReason::WallTime { limit_s } => {
                format!("wall-time budget of {limit_s:.0} s reached")
            }
            StopReason::TokenBudget { spent, limit } => {
                format!("token budget reached ({spent} of {limit} tokens)")
            }
            StopReason::CostBudget { spent_usd, limit_usd } => {
                format!("cost budget reached (${spent_usd:.4} of ${limit_usd:.4})")
            }
            StopReason::NoImprovement { rounds } => {
                format!("no better program in the last {rounds} round(s)")
            }
            StopReason::LlmBudget { message } => {
                format!("the LLM client refused to send more: {message}")
            }
            StopReason::LlmUnavailable { round, error } => {
                format!("every request of round {round} failed, the last with: {error} (run the same command again to send them again)")
            }
            StopReason::Interrupted => {
                "interrupted (run the same command again to resume)".to_owned()
            }
        }
    }
}

/// Tokens and cost of the whole run so far.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spend {
    pub tokens: u64,
    pub cost_usd: f64,
}

/// The budgets of one invocation.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub deadline: Option<(Instant, Duration)>,
    pub max_tokens: Option<u64>,
    pub max_cost_usd: Option<f64>,
}

impl Budget {
    pub fn new(config: &OptimizeConfig, started: Instant) -> Self {
        Self {
            deadline: config.max_wall.map(|d| (started + d, d)),
            max_tokens: config.max_total_tokens,
            max_cost_usd: config.max_cost_usd,
        }
    }

    /// The budget that is spent, if one is; checked before every request and between rounds.
    pub fn exceeded(&self, spend: Spend, now: Instant) -> Option<StopReason> {
        if let Some((deadline, limit)) = self.deadline {
            if now >= deadline {
                return Some(StopReason::WallTime { limit_s: limit.as_secs_f64() });
            }
        }
        if let Some(limit) = self.max_tokens {
            if spend.tokens >= limit {
                return Some(StopReason::TokenBudget { spent: spend.tokens, limit });
            }
        }
        if let Some(limit) = self.max_cost_usd {
            if spend.cost_usd >= limit {
                return Some(StopReason::CostBudget {
                    spent_usd: spend.cost_usd,
                    limit_usd: limit,
                });
            }
        }
        None
    }
}

/// Finished rounds since the best speedup last went up (all of them if it never did), given the
/// run's best-so-far after each finished round.
pub fn rounds_without_improvement(best_after_round: &[Option<f64>]) -> u32 {
    let mut best: Option<f64> = None;
    let mut since = 0;
    for b in best_after_round {
        let improved = match (b, best) {
            (Some(now), Some(before)) => *now > before,
            (Some(_), None) => true,
            (None, _) => false,
        };
        if improved {
            best = *b;
            since = 0;
        } else {
            since += 1;
        }
    }
    since
}

/// Whether the run stops before starting another round, and why.
pub fn before_round(
    config: &OptimizeConfig,
    finished_rounds: u32,
    best_after_round: &[Option<f64>],
    budget: &Budget,
    spend: Spend,
    now: Instant,
) -> Option<StopReason> {
    if finished_rounds >= config.rounds {
        return Some(StopReason::Rounds { rounds: config.rounds });
    }
    if let Some(k) = config.patience {
        if rounds_without_improvement(best_after_round) >= k {
            return Some(StopReason::NoImprovement { rounds: k });
        }
    }
    budget.exceeded(spend, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn improvement_is_counted_from_the_last_strictly_better_round() {
        assert_eq!(rounds_without_improvement(&[]), 0);
        assert_eq!(rounds_without_improvement(&[None, None]), 2);
        assert_eq!(rounds_without_improvement(&[None, Some(1.2)]), 0);
        assert_eq!(rounds_without_improvement(&[Some(1.2), Some(1.2), Some(1.2)]), 2);
        assert_eq!(rounds_without_improvement(&[Some(1.2), Some(1.5), Some(1.5)]), 1);
    }

    #[test]
    fn rounds_then_patience_then_budgets() {
        let now = Instant::now();
        let mut config = OptimizeConfig::new(3, 2);
        let open = Budget::new(&config, now);
        let none = Spend::default();
        assert_eq!(
            before_round(&config, 3, &[], &open, none, now),
            Some(StopReason::Rounds { rounds: 3 })
        );
        assert_eq!(before_round(&config, 2, &[None, None], &open, none, now), None);
        config.patience = Some(2);
        assert_eq!(
            before_round(&config, 2, &[None, None], &open, none, now),
            Some(StopReason::NoImprovement { rounds: 2 })
        );
        assert_eq!(before_round(&config, 2, &[None, Some(2.0)], &open, none, now), None);
    }

    #[test]
    fn budgets_stop_at_their_limit() {
        let start = Instant::now();
        let config = OptimizeConfig {
            max_wall: Some(Duration::from_secs(10)),
            max_total_tokens: Some(1000),
            max_cost_usd: Some(0.5),
            ..OptimizeConfig::new(5, 1)
        };
        let b = Budget::new(&config, start);
        let spend = |tokens, cost_usd| Spend { tokens, cost_usd };
        assert_eq!(b.exceeded(spend(999, 0.49), start), None);
        assert_eq!(
            b.exceeded(spend(1000, 0.0), start),
            Some(StopReason::TokenBudget { spent: 1000, limit: 1000 })
        );
        assert_eq!(
            b.exceeded(spend(0, 0.5), start),
            Some(StopReason::CostBudget { spent_usd: 0.5, limit_usd: 0.5 })
        );
        assert_eq!(
            b.exceeded(spend(0, 0.0), start + Duration::from_secs(10)),
            Some(StopReason::WallTime { limit_s: 10.0 })
        );
        assert!(StopReason::CostBudget { spent_usd: 0.5, limit_usd: 0.5 }.finishes_round());
        assert!(!StopReason::Interrupted.finishes_round());
        assert!(
            !StopReason::LlmUnavailable { round: 1, error: "down".into() }.finishes_round(),
            "sent again on the next run"
        );
    }
}
